use super::*;
use crate::policy::Order;

fn policy() -> TagPolicy {
    TagPolicy::new("v*", &[], Order::Semver, None).unwrap()
}

fn tags(names: &[&str]) -> Vec<TagInfo> {
    names.iter().map(|t| TagInfo::new(*t)).collect()
}

fn ask<'a>(policy: &'a TagPolicy, tags: &'a [TagInfo]) -> Ask<'a> {
    Ask {
        policy,
        tags,
        pin: None,
        group_tag: None,
        verify: false,
        platforms: false,
        tag_only: true,
    }
}

fn looked(tag: &str, digest: Option<&str>, verdict: Option<Verdict>) -> Looked {
    Looked {
        tag: tag.into(),
        digest: digest.map(str::to_owned),
        platforms: None,
        verdict,
    }
}

fn verified() -> Verdict {
    Verdict::Verified {
        format: crate::signature::Format::Classic,
        key: "k".into(),
    }
}

#[test]
fn a_pin_or_a_group_tag_is_verified_as_it_is_otherwise_the_newest_verified_wins() {
    assert_eq!(verify_mode(false, false, false), VerifyMode::Off);
    assert_eq!(verify_mode(false, true, true), VerifyMode::Off);
    // A watch of one repository and every member of a pattern (never grouped).
    assert_eq!(verify_mode(true, false, false), VerifyMode::NewestVerified);
    assert_eq!(verify_mode(true, true, false), VerifyMode::ThisTag);
    assert_eq!(verify_mode(true, false, true), VerifyMode::ThisTag);
    assert_eq!(verify_mode(true, true, true), VerifyMode::ThisTag);
}

#[test]
fn a_listed_tag_written_without_a_digest_is_not_looked_up() {
    let (policy, tags) = (policy(), tags(&["v1.0.0", "v1.2.0", "latest"]));
    let plan = plan(&ask(&policy, &tags));
    assert_eq!(
        plan,
        (
            Plan::One {
                tag: "v1.2.0".into(),
                confirm: false
            },
            Checks::default()
        )
    );
    // A digest to write, a pin the listing lacks, a group's tag: confirmed.
    let pinned = Ask {
        tag_only: false,
        ..ask(&policy, &tags)
    };
    assert!(matches!(
        super::plan(&pinned).0,
        Plan::One { confirm: true, .. }
    ));
    let missing_pin = Ask {
        pin: Some("v9.0.0"),
        ..ask(&policy, &tags)
    };
    assert!(matches!(
        super::plan(&missing_pin).0,
        Plan::One { confirm: true, .. }
    ));
    let grouped = Ask {
        group_tag: Some("v1.0.0"),
        ..ask(&policy, &tags)
    };
    assert_eq!(
        super::plan(&grouped).0,
        Plan::One {
            tag: "v1.0.0".into(),
            confirm: true
        }
    );
}

#[test]
fn with_verify_the_best_candidates_are_looked_up_and_the_first_verified_wins() {
    let (policy, tags) = (policy(), tags(&["v1.0.0", "v1.1.0", "v1.2.0"]));
    let verify = Ask {
        verify: true,
        ..ask(&policy, &tags)
    };
    let (plan, checks) = super::plan(&verify);
    assert_eq!(
        plan,
        Plan::Candidates(vec!["v1.2.0".into(), "v1.1.0".into(), "v1.0.0".into()])
    );
    assert!(checks.signature && !checks.platforms);
    let found = [
        looked("v1.2.0", Some("sha256:2"), Some(Verdict::Missing)),
        looked("v1.1.0", None, None),
        looked("v1.0.0", Some("sha256:0"), Some(verified())),
    ];
    let chosen = choose(&plan, &found).unwrap();
    assert_eq!(chosen.tag, "v1.0.0");
    assert_eq!(chosen.refused.len(), 1);
    assert_eq!(chosen.refused[0].tag, "v1.2.0");
    // Nothing verifies: the best refusal; nothing exists: no manifest.
    assert!(matches!(
        choose(&plan, &found[..2]),
        Err(NoChoice::Refused(r)) if r.tag == "v1.2.0"
    ));
    assert_eq!(choose(&plan, &found[1..2]), Err(NoChoice::NoManifest));
}

#[test]
fn the_one_tag_asked_for_must_exist_and_qualify() {
    let one = Plan::One {
        tag: "v1.0.0".into(),
        confirm: true,
    };
    assert_eq!(
        choose(&one, &[looked("v1.0.0", None, None)]),
        Err(NoChoice::Missing("v1.0.0".into()))
    );
    assert!(matches!(
        choose(
            &one,
            &[looked("v1.0.0", Some("sha256:0"), Some(Verdict::Missing))]
        ),
        Err(NoChoice::Refused(_))
    ));
    let listed = Plan::One {
        tag: "v1.0.0".into(),
        confirm: false,
    };
    assert_eq!(
        choose(&listed, &[looked("v1.0.0", None, None)])
            .unwrap()
            .digest,
        None
    );
    assert_eq!(choose(&Plan::NoTag, &[]), Err(NoChoice::NoTag));
}
