//! The core loop end to end on the real apiserver, registry and git server, with the operator
//! running as a process under the chart's ServiceAccount and RBAC:
//! two watches on one image drive two Deployments independently (canary-* / primary-*).

use std::time::Duration;

use imagewatch_e2e::{
    ground::{GitServer, Registry, random_suffix, repo_root},
    setup::{Scenario, ready, seed_canary_primary},
    wait_until,
};
use kube::api::DeleteParams;

const TIMEOUT: Duration = Duration::from_secs(90);

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

/// Where the sample's Deployments live in its manifests repository.
const DIR: &str = "apps/my-api/overlays/stg";

/// What the steps share: the sample's manifests repository, its image and the scenario.
struct CoreLoop {
    registry: Registry,
    git: GitServer,
    image_repo: String,
    repo_name: String,
    git_url: String,
    ns_name: String,
    s: Scenario,
}

#[tokio::test]
async fn canary_and_primary_follow_their_own_tags() -> anyhow::Result<()> {
    let mut c = step_seed_the_sample_repository_and_apply_its_watches().await?;
    let (primary_before, canary_before) = step_git_already_holds_the_newest_tags(&c).await?;
    let canary_after =
        step_a_canary_tag_changes_only_the_canary_deployment(&c, &primary_before, &canary_before)
            .await?;
    step_a_primary_tag_changes_only_primary(&c, &primary_before, &canary_after).await?;
    step_bad_watches_are_refused_without_a_commit(&c).await?;
    step_an_operator_restart_makes_no_commit(&mut c).await?;
    step_a_deleted_watch_stops_its_activity(&mut c, &canary_after).await
}

/// The operator with exactly the chart's RBAC, watching only this namespace; the sample's
/// repository holding the newest tags, and its two watches.
async fn step_seed_the_sample_repository_and_apply_its_watches() -> anyhow::Result<CoreLoop> {
    // The operator runs with exactly the chart's RBAC, watching only this namespace.
    let s = Scenario::start("core", &[]).await?;
    let ground = s.ground;
    let registry = ground.registry()?;
    let git = ground.git()?;
    let ns_name = s.ns.name.clone();

    let image_repo = format!("e2e/my-api-{}", random_suffix());
    registry.push(&image_repo, "canary-v1.2.3")?;
    registry.push(&image_repo, "primary-v1.2.3")?;
    let repo_name = format!("manifests-{}", ns_name);
    let git_url = seed_canary_primary(
        ground,
        &repo_name,
        &format!("{}/{image_repo}", registry.host),
    )?;

    let watches = sample_watches(&ns_name, &registry.host, &image_repo, &git_url)?;
    s.apply(&watches)?;
    Ok(CoreLoop {
        registry,
        git,
        image_repo,
        repo_name,
        git_url,
        ns_name,
        s,
    })
}

/// Git already holds the newest tags: both Ready, no commit. Returns the primary and canary
/// files as seeded.
async fn step_git_already_holds_the_newest_tags(c: &CoreLoop) -> anyhow::Result<(String, String)> {
    let CoreLoop {
        git, repo_name, s, ..
    } = c;
    let dir = DIR;
    s.wait_ready("my-api-canary", "True", "UpToDate").await?;
    s.wait_ready("my-api-primary", "True", "UpToDate").await?;
    assert_eq!(git.commit_count(repo_name, "main")?, 1);
    let primary_before = git.show(repo_name, "main", &format!("{dir}/deployment-primary.yaml"))?;
    let canary_before = git.show(repo_name, "main", &format!("{dir}/deployment-canary.yaml"))?;
    Ok((primary_before, canary_before))
}

/// canary-v1.2.4 → only the canary Deployment changes, in one commit. Returns the canary file.
async fn step_a_canary_tag_changes_only_the_canary_deployment(
    c: &CoreLoop,
    primary_before: &str,
    canary_before: &str,
) -> anyhow::Result<String> {
    let CoreLoop {
        registry,
        git,
        image_repo,
        repo_name,
        ns_name,
        s,
        ..
    } = c;
    let dir = DIR;
    registry.push(image_repo, "canary-v1.2.4")?;
    let canary = s.wait_applied("my-api-canary", "canary-v1.2.4").await?;
    assert_eq!(ready(&canary).map(|r| r.1), Some("Updated".to_string()));
    assert_eq!(git.commit_count(repo_name, "main")?, 2);
    let canary_after = git.show(repo_name, "main", &format!("{dir}/deployment-canary.yaml"))?;
    assert_eq!(
        canary_after,
        canary_before.replace(":canary-v1.2.3", ":canary-v1.2.4"),
        "only the tag changed, comment and layout kept"
    );
    assert_eq!(
        git.show(repo_name, "main", &format!("{dir}/deployment-primary.yaml"))?,
        primary_before
    );
    let message = git.git(repo_name, &["log", "-1", "--format=%an%n%B", "main"])?;
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
        Some(git.git(repo_name, &["rev-parse", "main"])?.trim())
    );
    Ok(canary_after)
}

/// primary-v1.2.4 → only primary changes (quoted scalar stays quoted; initContainer untouched).
async fn step_a_primary_tag_changes_only_primary(
    c: &CoreLoop,
    primary_before: &str,
    canary_after: &str,
) -> anyhow::Result<()> {
    let CoreLoop {
        registry,
        git,
        image_repo,
        repo_name,
        s,
        ..
    } = c;
    let dir = DIR;
    registry.push(image_repo, "primary-v1.2.4")?;
    s.wait_applied("my-api-primary", "primary-v1.2.4").await?;
    assert_eq!(git.commit_count(repo_name, "main")?, 3);
    assert_eq!(
        git.show(repo_name, "main", &format!("{dir}/deployment-primary.yaml"))?,
        primary_before.replace(":primary-v1.2.3\"", ":primary-v1.2.4\"")
    );
    assert_eq!(
        git.show(repo_name, "main", &format!("{dir}/deployment-canary.yaml"))?,
        canary_after
    );
    Ok(())
}

/// A regex that does not compile → InvalidSpec, a missing Secret → CredentialsNotFound
/// naming it; neither makes a commit.
async fn step_bad_watches_are_refused_without_a_commit(c: &CoreLoop) -> anyhow::Result<()> {
    let CoreLoop {
        registry,
        git,
        image_repo,
        repo_name,
        git_url,
        ns_name,
        s,
        ..
    } = c;
    let ground = s.ground;
    let api = s.watches.clone();
    // A regex that does not compile → InvalidSpec, no commit.
    let bad_regex = sample_watches(ns_name, &registry.host, image_repo, git_url)?
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
        git.commit_count(repo_name, "main")?,
        3,
        "bad watches made no commit"
    );
    api.delete("no-secret", &DeleteParams::default()).await?;
    api.delete("bad-regex", &DeleteParams::default()).await?;
    Ok(())
}

/// An operator restart causes no new commit: after it has reconciled every watch again,
/// Git is unchanged.
async fn step_an_operator_restart_makes_no_commit(c: &mut CoreLoop) -> anyhow::Result<()> {
    let CoreLoop {
        git, repo_name, s, ..
    } = c;
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
        git.commit_count(repo_name, "main")?,
        3,
        "restart made a commit"
    );
    Ok(())
}

/// Deleting a watch stops its activity: after deleting canary, a new canary tag is not
/// written, while primary (still watched) moves on.
async fn step_a_deleted_watch_stops_its_activity(
    c: &mut CoreLoop,
    canary_after: &str,
) -> anyhow::Result<()> {
    let CoreLoop {
        registry,
        git,
        image_repo,
        repo_name,
        s,
        ..
    } = c;
    let dir = DIR;
    let api = s.watches.clone();
    api.delete("my-api-canary", &DeleteParams::default())
        .await?;
    wait_until("canary watch gone", TIMEOUT, || async {
        Ok(api.get_opt("my-api-canary").await?.is_none().then_some(()))
    })
    .await?;
    registry.push(image_repo, "canary-v1.2.5")?;
    registry.push(image_repo, "primary-v1.2.5")?;
    s.wait_applied("my-api-primary", "primary-v1.2.5").await?;
    // Let primary be reconciled once more after its commit, so a live canary watch (same
    // interval, pushed earlier) would have had its turn too.
    let before = s.operator.metrics().await?;
    wait_until("one more reconcile round", TIMEOUT, || async {
        Ok((s.operator.metrics().await? != before).then_some(()))
    })
    .await?;
    assert_eq!(
        git.show(repo_name, "main", &format!("{dir}/deployment-canary.yaml"))?,
        canary_after
    );
    assert_eq!(git.commit_count(repo_name, "main")?, 4);
    assert!(
        s.operator.is_running(),
        "operator exited:\n{}",
        s.operator.log_tail(40)
    );
    Ok(())
}
