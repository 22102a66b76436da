//! A change in Git by someone else holds the watch (`spec.onGitChange`), end to end on the
//! real apiserver, registry and git server: imagewatch commits `v1.4.0`; a person reverts it
//! to `v1.3.9`; imagewatch commits nothing over the revert for three polls and says why
//! (`Held=True ChangedInGit`, naming the commit, its author and the tag it set). By default
//! (`HoldUntilNewer`) a newer tag `v1.4.1` is committed; with `Hold` only the resume
//! annotation naming the revert resumes the watch.

use std::time::Duration;

use imagewatch_crd::ImageWatch;
use imagewatch_e2e::{
    ground::random_suffix,
    operator::metric,
    setup::{Scenario, TIMEOUT, ready},
    wait_until,
};

const DEPLOYMENT: &str = "apps/my-api/deployment.yaml";

fn deployment(image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: my-api\nspec:\n  template:\n    \
         spec:\n      containers:\n        - name: my-api\n          image: {image}\n"
    )
}

fn watch_yaml(ns: &str, image: &str, git_url: &str, mode: Option<&str>) -> String {
    let mode = mode.map_or(String::new(), |m| format!("\n  onGitChange: {m}"));
    format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: my-api, namespace: {ns}}}
spec:
  image: {image}
  tags: {{pattern: "semver:>=1.0.0"}}
  interval: 10s
  credentials: {{secretRef: {{name: regcred}}}}
  git: {{url: "{git_url}", branch: main, secretRef: {{name: git-creds}}}}
  target:
    workload: {{path: apps/my-api, kind: Deployment, name: my-api, container: my-api}}{mode}
"#
    )
}

/// The `Held` condition: (status, reason, message).
fn held(w: &ImageWatch) -> Option<(String, String, String)> {
    w.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == "Held")
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    })
}

/// `imagewatch_reconciles_total` of the scenario's operator (every poll adds one).
async fn reconciles(s: &Scenario) -> anyhow::Result<f64> {
    Ok(metric(
        &s.operator.metrics().await?,
        "imagewatch_reconciles_total",
    ))
}

/// Waits for `n` more polls (each one a reconcile) of the scenario's operator.
async fn more_polls(s: &Scenario, n: u64) -> anyhow::Result<()> {
    let before = reconciles(s).await?;
    wait_until(
        &format!("{n} more polls"),
        Duration::from_secs((n + 1) * 10 + 30),
        || async { Ok((reconciles(s).await? >= before + n as f64).then_some(())) },
    )
    .await
}

/// A watch on `v1.3.9`; `v1.4.0` is pushed and committed; a person reverts it. Returns the
/// scenario, the repository's name, the image repository and the revert's commit id, once
/// the watch says it holds to the revert and three more polls committed nothing.
async fn reverted_by_a_person(
    prefix: &str,
    mode: Option<&str>,
) -> anyhow::Result<(Scenario, String, String, String)> {
    let s = Scenario::start(prefix, &[]).await?;
    let registry = s.ground.registry()?;
    let git = s.ground.git()?;
    let image_repo = format!("e2e/held-{}", random_suffix());
    let image = format!("{}/{image_repo}", registry.host);
    registry.push(&image_repo, "v1.3.9")?;
    let seed = tempfile::tempdir()?;
    let file = seed.path().join(DEPLOYMENT);
    std::fs::create_dir_all(file.parent().expect("a directory"))?;
    std::fs::write(&file, deployment(&format!("{image}:v1.3.9")))?;
    let repo_name = format!("manifests-{}", s.ns.name);
    let git_url = git.new_repo(&repo_name, seed.path())?;
    s.apply(&watch_yaml(&s.ns.name, &image, &git_url, mode))?;
    s.wait_ready("my-api", "True", "UpToDate").await?;

    // v1.4.0 is committed, with imagewatch's trailer.
    registry.push(&image_repo, "v1.4.0")?;
    s.wait_applied("my-api", "v1.4.0").await?;
    assert_eq!(git.commit_count(&repo_name, "main")?, 2);
    let message = git.git(&repo_name, &["log", "-1", "--format=%B", "main"])?;
    assert!(
        message.contains(&format!("Imagewatch-Watch: {}/my-api", s.ns.name)),
        "{message}"
    );

    // v1.4.0 is broken: a person reverts it.
    let revert = git.commit_files(
        &repo_name,
        "main",
        &[(DEPLOYMENT, Some(&deployment(&format!("{image}:v1.3.9"))))],
        "Revert my-api to v1.3.9: v1.4.0 is broken",
    )?;
    let w = wait_until("the watch holds to the revert", TIMEOUT, || async {
        let w = s.watches.get("my-api").await?;
        Ok(held(&w).filter(|(st, _, _)| st == "True").map(|_| w))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", s.operator.log_tail(40)))?;
    let (_, reason, message) = held(&w).expect("a Held condition");
    assert_eq!(reason, "ChangedInGit");
    assert!(message.contains(&revert[..12]), "{message}");
    assert!(message.contains("dev <dev@example.invalid>"), "{message}");
    assert!(message.contains("set v1.3.9 over v1.4.0"), "{message}");
    assert_eq!(
        ready(&w).map(|r| r.1),
        Some("ChangedInGit".to_string()),
        "Ready says why too"
    );
    let status_held = w.status.as_ref().and_then(|s| s.held.clone());
    assert_eq!(
        status_held.map(|h| (h.commit, h.replaced)),
        Some((revert.clone(), format!("{image}:v1.4.0")))
    );

    // Three more polls (each one a reconcile) and still nothing over the revert.
    more_polls(&s, 3).await?;
    assert_eq!(
        git.commit_count(&repo_name, "main")?,
        3,
        "nothing re-committed"
    );
    assert!(
        git.show(&repo_name, "main", DEPLOYMENT)?
            .contains(":v1.3.9")
    );
    let metrics = s.operator.metrics().await?;
    assert!(
        metric(
            &metrics,
            "imagewatch_watch_conditions{ready=\"True\",reason=\"ChangedInGit\"}"
        ) >= 1.0,
        "counted by reason: {}",
        metrics
            .lines()
            .filter(|l| l.starts_with("imagewatch_watch_conditions"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok((s, repo_name, image_repo, revert))
}

#[tokio::test]
async fn a_revert_holds_until_a_newer_tag() -> anyhow::Result<()> {
    let (s, repo_name, image_repo, _) = reverted_by_a_person("held", None).await?;
    let git = s.ground.git()?;
    // A newer tag than the one replaced is committed.
    s.ground.registry()?.push(&image_repo, "v1.4.1")?;
    let w = s.wait_applied("my-api", "v1.4.1").await?;
    assert_eq!(git.commit_count(&repo_name, "main")?, 4);
    assert_eq!(held(&w).map(|h| h.1), Some("NotHeld".to_string()));
    assert!(w.status.as_ref().is_some_and(|s| s.held.is_none()));
    Ok(())
}

#[tokio::test]
async fn hold_resumes_only_on_the_annotation() -> anyhow::Result<()> {
    let (s, repo_name, image_repo, revert) = reverted_by_a_person("hold", Some("Hold")).await?;
    let git = s.ground.git()?;
    // A newer tag does not resume `Hold`: the hold now names v1.4.1 as what it keeps out.
    s.ground.registry()?.push(&image_repo, "v1.4.1")?;
    wait_until("the rules choose v1.4.1", TIMEOUT, || async {
        let w = s.watches.get("my-api").await?;
        let latest = w.status.as_ref().and_then(|s| s.latest.as_ref());
        Ok(latest.is_some_and(|l| l.tag == "v1.4.1").then_some(()))
    })
    .await?;
    more_polls(&s, 2).await?;
    assert_eq!(
        git.commit_count(&repo_name, "main")?,
        3,
        "nothing re-committed"
    );

    // An annotation naming another commit does nothing; the revert's resumes.
    s.ground.kubectl(&[
        "-n",
        &s.ns.name,
        "annotate",
        "iw",
        "my-api",
        "imagewatch.dev/resume=0000000",
    ])?;
    more_polls(&s, 2).await?;
    assert_eq!(
        git.commit_count(&repo_name, "main")?,
        3,
        "nothing re-committed"
    );
    s.ground.kubectl(&[
        "-n",
        &s.ns.name,
        "annotate",
        "--overwrite",
        "iw",
        "my-api",
        &format!("imagewatch.dev/resume={}", &revert[..12]),
    ])?;
    s.wait_applied("my-api", "v1.4.1").await?;
    assert_eq!(git.commit_count(&repo_name, "main")?, 4);
    Ok(())
}
