//! A PromotionPolicy does not propose again an image someone else changed in its target
//! (`spec.onGitChange`), end to end on the real apiserver and git server: the policy commits
//! `v1.4.0` to production; a person reverts the production file to `v1.3.9`; nothing is
//! proposed again for three polls and the policy says why (`Held=True ChangedInGit`, naming
//! the commit, its author and the tag it set, one `ChangedInGit` Event); by default
//! (`HoldUntilNewer`) the source offering `v1.4.1` is promoted; with `Hold` only the resume
//! annotation naming the revert resumes it.

use std::time::Duration;

use imagewatch_crd::{PromotionPolicy, conditions};
use imagewatch_e2e::{
    argocd::source_file,
    ground::random_suffix,
    operator::metric,
    setup::{Scenario, TIMEOUT, policy_condition, wait_policy_for},
    wait_until,
};
use kube::Api;

const STG_FILE: &str = "overlays/staging/.argocd-source-my-api-stg.yaml";
const PRD_FILE: &str = "overlays/production/.argocd-source-my-api-prd.yaml";

fn policy_yaml(ns: &str, url: &str, mode: Option<&str>) -> String {
    let mode = mode.map_or(String::new(), |m| format!("\n  onGitChange: {m}"));
    format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata: {{name: my-api, namespace: {ns}}}
spec:
  from: {{path: overlays/staging}}
  to:
    git: {{url: "{url}", branch: main, secretRef: {{name: git-creds}}}}
    path: overlays/production
  mode: Commit
  interval: 10s{mode}
"#
    )
}

/// Waits until the policy `my-api` satisfies `check`.
async fn wait_policy(
    s: &Scenario,
    what: &str,
    check: impl Fn(&PromotionPolicy) -> bool,
) -> anyhow::Result<PromotionPolicy> {
    let api: Api<PromotionPolicy> = Api::namespaced(s.admin.clone(), &s.ns.name);
    wait_policy_for(s, &api, "my-api", what, TIMEOUT, check).await
}

/// PromotionPolicy reconciles of the scenario's operator (every poll adds one).
async fn reconciles(s: &Scenario) -> anyhow::Result<f64> {
    Ok(metric(
        &s.operator.metrics().await?,
        "imagewatch_reconcile_duration_seconds_count{controller=\"promotionpolicy\"}",
    ))
}

/// Waits for `n` more polls of the policy.
async fn polls(s: &Scenario, n: f64) -> anyhow::Result<()> {
    let before = reconciles(s).await?;
    wait_until(
        &format!("{n} more polls"),
        Duration::from_secs(10 * (n as u64 + 1) + 30),
        || async { Ok((reconciles(s).await? >= before + n).then_some(())) },
    )
    .await
}

/// The `ChangedInGit` Events of the policy.
fn changed_in_git_events(s: &Scenario) -> anyhow::Result<Vec<serde_json::Value>> {
    let out = s.ground.kubectl(&[
        "get",
        "events",
        "-n",
        &s.ns.name,
        "--field-selector",
        "reason=ChangedInGit,involvedObject.kind=PromotionPolicy",
        "-o",
        "json",
    ])?;
    let list: serde_json::Value = serde_json::from_str(&out)?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

/// A policy promotes `v1.4.0` from staging to production; a person reverts production to
/// `v1.3.9`. Returns the scenario, the repository, the image and the revert's commit id, once
/// the policy holds the image and three more polls committed nothing.
async fn promoted_then_reverted(
    prefix: &str,
    mode: Option<&str>,
) -> anyhow::Result<(Scenario, String, String, String)> {
    let s = Scenario::start(prefix, &[]).await?;
    let git = s.ground.git()?;
    let image = format!("registry.example.com/held-{}/my-api", random_suffix());
    let seed = tempfile::tempdir()?;
    for (file, tag) in [(STG_FILE, "v1.4.0"), (PRD_FILE, "v1.3.9")] {
        let path = seed.path().join(file);
        std::fs::create_dir_all(path.parent().expect("a directory"))?;
        std::fs::write(&path, source_file(&[format!("{image}:{tag}")]))?;
    }
    let repo = format!("{prefix}-{}", s.ns.name);
    let url = git.new_repo(&repo, seed.path())?;
    s.apply(&policy_yaml(&s.ns.name, &url, mode))?;

    // v1.4.0 is promoted, by a commit carrying the policy's trailer.
    wait_policy(&s, "v1.4.0 committed", |p| {
        policy_condition(p, conditions::READY).is_some_and(|c| c.1 == "Committed")
    })
    .await?;
    assert_eq!(git.commit_count(&repo, "main")?, 2);
    assert!(git.show(&repo, "main", PRD_FILE)?.contains(":v1.4.0"));
    let message = git.git(&repo, &["log", "-1", "--format=%B", "main"])?;
    assert!(
        message.contains(&format!("Imagewatch-Policy: {}/my-api", s.ns.name)),
        "{message}"
    );

    // v1.4.0 is broken in production: a person reverts it.
    let revert = git.commit_files(
        &repo,
        "main",
        &[(PRD_FILE, Some(&source_file(&[format!("{image}:v1.3.9")])))],
        "Revert my-api to v1.3.9 in production: v1.4.0 is broken",
    )?;
    let p = wait_policy(&s, "the policy holds my-api", |p| {
        policy_condition(p, conditions::HELD).is_some_and(|c| c.0 == "True")
    })
    .await?;
    let (_, reason, message) = policy_condition(&p, conditions::HELD).expect("a Held condition");
    assert_eq!(reason, "ChangedInGit");
    assert!(message.contains(&revert[..12]), "{message}");
    assert!(message.contains("dev <dev@example.invalid>"), "{message}");
    assert!(message.contains("set v1.3.9 over v1.4.0"), "{message}");
    assert_eq!(
        policy_condition(&p, conditions::READY)
            .map(|c| c.1)
            .as_deref(),
        Some("ChangedInGit"),
        "Ready says why too"
    );
    let held = p
        .status
        .as_ref()
        .map(|st| st.held.clone())
        .unwrap_or_default();
    assert_eq!(
        held.iter()
            .map(|h| (
                h.name.as_str(),
                h.commit.as_str(),
                h.value.as_str(),
                h.replaced.as_str()
            ))
            .collect::<Vec<_>>(),
        [("my-api", revert.as_str(), "v1.3.9", "v1.4.0")]
    );

    // Three more polls and nothing proposed again.
    polls(&s, 3.0).await?;
    assert_eq!(git.commit_count(&repo, "main")?, 3, "nothing re-committed");
    assert!(git.show(&repo, "main", PRD_FILE)?.contains(":v1.3.9"));
    let metrics = s.operator.metrics().await?;
    assert!(
        metric(&metrics, "imagewatch_promotions_total{outcome=\"held\"}") >= 3.0,
        "counted by outcome: {}",
        metrics
            .lines()
            .filter(|l| l.starts_with("imagewatch_promotions_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let events = changed_in_git_events(&s)?;
    assert_eq!(
        events.len(),
        1,
        "one Event when the hold starts: {events:?}"
    );
    assert_eq!(events[0]["type"], "Warning");
    assert_eq!(
        events[0].get("count").and_then(|c| c.as_i64()).unwrap_or(1),
        1
    );
    Ok((s, repo, image, revert))
}

#[tokio::test]
async fn a_reverted_promotion_is_held_until_the_source_offers_another_tag() -> anyhow::Result<()> {
    let (s, repo, image, _) = promoted_then_reverted("promo-held", None).await?;
    let git = s.ground.git()?;
    // The source offers v1.4.1: promoted over the revert.
    git.commit_files(
        &repo,
        "main",
        &[(STG_FILE, Some(&source_file(&[format!("{image}:v1.4.1")])))],
        "staging: my-api v1.4.1",
    )?;
    let p = wait_policy(&s, "v1.4.1 promoted", |p| {
        p.status.as_ref().is_some_and(|st| {
            st.last_promotions
                .first()
                .is_some_and(|l| l.tags.get("my-api").map(String::as_str) == Some("v1.4.1"))
        })
    })
    .await?;
    assert!(git.show(&repo, "main", PRD_FILE)?.contains(":v1.4.1"));
    assert_eq!(git.commit_count(&repo, "main")?, 5);
    assert_eq!(
        policy_condition(&p, conditions::HELD).map(|c| (c.0, c.1)),
        Some(("False".to_string(), "NotHeld".to_string()))
    );
    assert!(p.status.as_ref().is_some_and(|st| st.held.is_empty()));
    Ok(())
}

#[tokio::test]
async fn hold_resumes_the_promotion_only_on_the_annotation() -> anyhow::Result<()> {
    let (s, repo, image, revert) = promoted_then_reverted("promo-hold", Some("Hold")).await?;
    let git = s.ground.git()?;
    // Another tag in the source does not resume `Hold`.
    git.commit_files(
        &repo,
        "main",
        &[(STG_FILE, Some(&source_file(&[format!("{image}:v1.4.1")])))],
        "staging: my-api v1.4.1",
    )?;
    wait_policy(&s, "the candidate is v1.4.1", |p| {
        p.status
            .as_ref()
            .and_then(|st| st.candidate_summary.as_deref())
            == Some("my-api:v1.4.1")
    })
    .await?;
    polls(&s, 2.0).await?;
    assert_eq!(git.commit_count(&repo, "main")?, 4, "nothing promoted");

    // The annotation naming the revert resumes it.
    s.ground.kubectl(&[
        "-n",
        &s.ns.name,
        "annotate",
        "pp",
        "my-api",
        &format!("imagewatch.dev/resume={}", &revert[..12]),
    ])?;
    wait_policy(&s, "v1.4.1 promoted", |p| {
        policy_condition(p, conditions::HELD).is_some_and(|c| c.1 == "NotHeld")
    })
    .await?;
    assert!(git.show(&repo, "main", PRD_FILE)?.contains(":v1.4.1"));
    assert_eq!(git.commit_count(&repo, "main")?, 5);
    Ok(())
}
