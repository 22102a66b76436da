//! `explain` output on fixtures: the whole text, so a change of wording shows in review.

use imagewatch_crd::{ImageWatchSpec, ImageWatchStatus};

/// The fixture's spec and status.
fn object() -> (ImageWatchSpec, ImageWatchStatus) {
    let value: serde_json::Value =
        serde_saphyr::from_str(include_str!("fixtures/watch.yaml")).unwrap();
    (
        serde_json::from_value(value["spec"].clone()).unwrap(),
        serde_json::from_value(value["status"].clone()).unwrap(),
    )
}

fn now() -> jiff::Timestamp {
    "2026-12-06T09:00:00Z".parse().unwrap()
}

#[test]
fn a_watch_held_by_a_window_says_what_waits_why_newer_tags_were_refused_and_its_history() {
    let (spec, status) = object();
    let text = super::watch(
        "shop",
        "shop-api",
        &spec,
        Some(&status),
        Some("1.9.0"),
        now(),
    );
    assert_eq!(text, include_str!("fixtures/watch.txt"));
}

#[test]
fn a_tag_asked_about_is_placed_by_the_rules_and_the_status() {
    let (spec, status) = object();
    let why = |tag: &str| {
        let text = super::watch("shop", "shop-api", &spec, Some(&status), Some(tag), now());
        text.lines().last().unwrap().to_owned()
    };
    assert_eq!(why("1.4.0"), "  Tag 1.4.0:  the chosen tag");
    assert_eq!(
        why("1.4.1"),
        "  Tag 1.4.1:  refused: tag 1.4.1 (sha256:77) has no cosign signature (SignatureMissing)"
    );
    assert_eq!(
        why("main-abc123"),
        "  Tag main-abc123:  refused by rule Pattern: main-abc123 does not match pattern \"semver:>=1.0, <2\""
    );
    assert_eq!(
        why("1.1.0"),
        "  Tag 1.1.0:  passes the tag rules but ranks below the chosen tag 1.4.0 under order Semver"
    );
}

#[test]
fn a_watch_never_reconciled_says_so() {
    let spec: ImageWatchSpec = serde_json::from_value(serde_json::json!({
        "image": "r.io/app",
        "target": {"workload": {"path": "d.yaml", "kind": "Deployment", "name": "a", "container": "a"}}
    }))
    .unwrap();
    let text = super::watch("ns", "app", &spec, None, None, now());
    assert!(
        text.contains("  Ready:       not reconciled yet\n"),
        "{text}"
    );
    assert!(text.contains("  Chosen:      none\n"), "{text}");
    assert!(
        text.contains("  Next write:  nothing chosen yet\n"),
        "{text}"
    );
    assert!(
        text.contains("  History:     no change written yet\n"),
        "{text}"
    );
}

#[test]
fn a_promotion_says_its_candidate_gates_and_history() {
    let value = serde_json::json!({
        "spec": {
            "from": {"path": "apps/stg"},
            "to": {"git": {"url": "https://git.example.com/org/manifests.git"}, "path": "apps/prod"},
            "mode": "Commit"
        },
        "status": {
            "source": "apps/stg",
            "candidate": [{"name": "api", "image": "r.io/api", "tag": "v2", "current": "v1"}],
            "candidateSummary": "api:v2",
            "gates": [
                {"name": "imageExists", "passed": true},
                {"name": "soak", "passed": false, "message": "12m of 30m"}
            ],
            "history": [{"tag": "v1", "image": "api", "commit": "0123456789abcdef", "time": "2026-12-05T09:00:00Z", "trigger": "Promotion"}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "Gated", "message": "soak", "lastTransitionTime": "2026-12-06T08:48:00Z"}]
        }
    });
    let spec: imagewatch_crd::PromotionPolicySpec =
        serde_json::from_value(value["spec"].clone()).unwrap();
    let status: imagewatch_crd::PromotionPolicyStatus =
        serde_json::from_value(value["status"].clone()).unwrap();
    let text = super::promotion("shop", "api-prod", &spec, Some(&status), now());
    assert_eq!(
        text,
        "PromotionPolicy shop/api-prod\n  From:        apps/stg\n  To:          apps/prod\n  Ready:       True Gated (since 12m ago)\n  Candidate:\n    api                  v2 (the target holds v1)\n  Gates:\n    imageExists    passed\n    soak           waiting 12m of 30m\n  Last error:  none\n  History (newest first):\n    24h ago     api v1  commit 0123456789ab  Promotion\n"
    );
}
