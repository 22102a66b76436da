//! The core loop end to end on the real apiserver, registry and git server, with the operator
//! running as a process under the chart's ServiceAccount and RBAC:
//! two watches on one image drive two Deployments independently (canary-* / primary-*).

use std::time::Duration;

use imagewatch_e2e::{
    Ground,
    ground::{random_suffix, repo_root},
    setup::{Scenario, copy_dir, ready},
    wait_until,
};
use kube::api::DeleteParams;

const TIMEOUT: Duration = Duration::from_secs(90);

/// Seeds a repository from the sample, with the sample's registry host replaced by ours.
fn seed_repo(ground: &Ground, name: &str, image: &str) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    copy_dir(
        &repo_root().join("samples/canary-primary/manifests"),
        dir.path(),
    )?;
    for file in ["deployment-canary.yaml", "deployment-primary.yaml"] {
        let path = dir.path().join("apps/my-api/overlays/stg").join(file);
        let text = std::fs::read_to_string(&path)?
            .replace("registry.example.com/my-api:", &format!("{image}:"));
        std::fs::write(&path, text)?;
    }
    ground.git()?.new_repo(name, dir.path())
}

/// The sample's watches, pointed at our registry, repository and Secrets.
fn sample_watches(
    ns: &str,
    registry: &str,
    image_repo: &str,
    git_url: &str,
) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(repo_root().join("samples/canary-primary/imagewatches.yaml"))?;
    Ok(text
        .replace("namespace: my-api", &format!("namespace: {ns}"))
        .replace(
            "registry.example.com/my-api",
            &format!("{registry}/{image_repo}"),
        )
        .replace("https://git.example.com/org/manifests.git", git_url)
        .replace("interval: 1m", "interval: 10s"))
}

#[tokio::test]
async fn canary_and_primary_follow_their_own_tags() -> anyhow::Result<()> {
    // The operator runs with exactly the chart's RBAC, watching only this namespace.
    let mut s = Scenario::start("core", &[]).await?;
    let ground = s.ground;
    let registry = ground.registry()?;
    let git = ground.git()?;
    let ns_name = s.ns.name.clone();

    let image_repo = format!("e2e/my-api-{}", random_suffix());
    registry.push(&image_repo, "canary-v1.2.3")?;
    registry.push(&image_repo, "primary-v1.2.3")?;
    let repo_name = format!("manifests-{}", ns_name);
    let git_url = seed_repo(
        ground,
        &repo_name,
        &format!("{}/{image_repo}", registry.host),
    )?;

    let watches = sample_watches(&ns_name, &registry.host, &image_repo, &git_url)?;
    s.apply(&watches)?;
    let api = s.watches.clone();

    // Git already holds the newest tags: both Ready, no commit.
    s.wait_ready("my-api-canary", "True", "UpToDate").await?;
    s.wait_ready("my-api-primary", "True", "UpToDate").await?;
    assert_eq!(git.commit_count(&repo_name, "main")?, 1);
    let dir = "apps/my-api/overlays/stg";
    let primary_before = git.show(
        &repo_name,
        "main",
        &format!("{dir}/deployment-primary.yaml"),
    )?;
    let canary_before = git.show(&repo_name, "main", &format!("{dir}/deployment-canary.yaml"))?;

    // canary-v1.2.4 → only the canary Deployment changes, in one commit.
    registry.push(&image_repo, "canary-v1.2.4")?;
    let canary = s.wait_applied("my-api-canary", "canary-v1.2.4").await?;
    assert_eq!(ready(&canary).map(|r| r.1), Some("Updated".to_string()));
    assert_eq!(git.commit_count(&repo_name, "main")?, 2);
    let canary_after = git.show(&repo_name, "main", &format!("{dir}/deployment-canary.yaml"))?;
    assert_eq!(
        canary_after,
        canary_before.replace(":canary-v1.2.3", ":canary-v1.2.4"),
        "only the tag changed, comment and layout kept"
    );
    assert_eq!(
        git.show(
            &repo_name,
            "main",
            &format!("{dir}/deployment-primary.yaml")
        )?,
        primary_before
    );
    let message = git.git(&repo_name, &["log", "-1", "--format=%an%n%B", "main"])?;
    assert!(message.starts_with("imagewatch\n"), "author: {message}");
    assert!(
        message.contains(&format!("{}/my-api-canary", ns_name)),
        "{message}"
    );
    assert!(
        message.contains("deployment-canary.yaml")
            && message.contains("canary-v1.2.3 -> canary-v1.2.4"),
        "{message}"
    );
    let commit = canary
        .status
        .as_ref()
        .and_then(|s| s.applied.as_ref())
        .and_then(|a| a.commit.clone());
    assert_eq!(
        commit.as_deref(),
        Some(git.git(&repo_name, &["rev-parse", "main"])?.trim())
    );

    // primary-v1.2.4 → only primary changes (quoted scalar stays quoted; initContainer untouched).
    registry.push(&image_repo, "primary-v1.2.4")?;
    s.wait_applied("my-api-primary", "primary-v1.2.4").await?;
    assert_eq!(git.commit_count(&repo_name, "main")?, 3);
    assert_eq!(
        git.show(
            &repo_name,
            "main",
            &format!("{dir}/deployment-primary.yaml")
        )?,
        primary_before.replace(":primary-v1.2.3\"", ":primary-v1.2.4\"")
    );
    assert_eq!(
        git.show(&repo_name, "main", &format!("{dir}/deployment-canary.yaml"))?,
        canary_after
    );

    // A regex that does not compile → InvalidSpec, no commit.
    let bad_regex = sample_watches(&ns_name, &registry.host, &image_repo, &git_url)?
        .split("---")
        .next()
        .unwrap_or_default()
        .replace("name: my-api-canary", "name: bad-regex")
        .replace("^canary-v(?P<version>", "^canary-v((?P<version>");
    let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&bad_regex))?;
    assert!(ok, "{out}");
    let bad = s.wait_ready("bad-regex", "False", "InvalidSpec").await?;
    assert!(
        ready(&bad).is_some_and(|r| r.2.contains("regex")),
        "{:?}",
        ready(&bad)
    );

    // A missing Secret → CredentialsNotFound naming it.
    let no_secret = bad_regex
        .replace("name: bad-regex", "name: no-secret")
        .replace("^canary-v((?P<version>", "^canary-v(?P<version>")
        .replace("name: regcred", "name: does-not-exist");
    let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&no_secret))?;
    assert!(ok, "{out}");
    let missing = s
        .wait_ready("no-secret", "False", "CredentialsNotFound")
        .await?;
    assert!(
        ready(&missing).is_some_and(|r| r.2.contains("does-not-exist")),
        "{:?}",
        ready(&missing)
    );
    assert_eq!(
        git.commit_count(&repo_name, "main")?,
        3,
        "bad watches made no commit"
    );
    api.delete("no-secret", &DeleteParams::default()).await?;
    api.delete("bad-regex", &DeleteParams::default()).await?;

    // An operator restart causes no new commit: after it has reconciled every watch again,
    // Git is unchanged.
    s.operator.restart()?;
    wait_until("reconciles after restart", TIMEOUT, || async {
        let metrics = s.operator.metrics().await.unwrap_or_default();
        let ok = metrics
            .lines()
            .find(|l| l.starts_with("imagewatch_reconciles_total{outcome=\"ok\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        Ok((ok >= 4.0).then_some(()))
    })
    .await?;
    assert_eq!(
        git.commit_count(&repo_name, "main")?,
        3,
        "restart made a commit"
    );

    // Deleting a watch stops its activity: after deleting canary, a new canary tag is not
    // written, while primary (still watched) moves on.
    api.delete("my-api-canary", &DeleteParams::default())
        .await?;
    wait_until("canary watch gone", TIMEOUT, || async {
        Ok(api.get_opt("my-api-canary").await?.is_none().then_some(()))
    })
    .await?;
    registry.push(&image_repo, "canary-v1.2.5")?;
    registry.push(&image_repo, "primary-v1.2.5")?;
    s.wait_applied("my-api-primary", "primary-v1.2.5").await?;
    // Let primary be reconciled once more after its commit, so a live canary watch (same
    // interval, pushed earlier) would have had its turn too.
    let before = s.operator.metrics().await?;
    wait_until("one more reconcile round", TIMEOUT, || async {
        Ok((s.operator.metrics().await? != before).then_some(()))
    })
    .await?;
    assert_eq!(
        git.show(&repo_name, "main", &format!("{dir}/deployment-canary.yaml"))?,
        canary_after
    );
    assert_eq!(git.commit_count(&repo_name, "main")?, 4);
    assert!(
        s.operator.is_running(),
        "operator exited:\n{}",
        s.operator.log_tail(40)
    );
    Ok(())
}
