//! `spec.git.pullRequest` of an ImageWatch on a real Gitea (built by `e2e/scripts/gitea.sh`):
//! the edit goes to the push branch and one pull request into `branch` is opened and kept
//! current; a newer tag updates the same one; it is closed when `branch` holds the tag; a
//! pull request opened just before a crash (not yet in the status) is adopted after the
//! restart; deleting the watch closes its open pull request.

use std::time::Duration;

use imagewatch_crd::{ImageWatch, PromotionPolicy, PullRequestState, conditions};
use imagewatch_e2e::{
    argocd::source_file,
    gitea::{ADMIN, Gitea},
    ground::{Registry, random_suffix},
    operator::metric,
    seed000::{self, deployment, pattern_watch_on},
    setup::{Scenario, create_secret, policy_condition},
    wait_until,
};
use kube::{Api, api::DeleteParams};

const TIMEOUT: Duration = Duration::from_secs(90);
const FILE: &str = "apps/api/deployment.yaml";

/// A Gitea repository holding `image:tag`, the Secrets for it, and the watch's YAML.
struct Setup {
    repo: String,
    image_repo: String,
    image: String,
    yaml: String,
}

async fn setup(s: &Scenario, gitea: &Gitea, extra: &str) -> anyhow::Result<Setup> {
    let registry = s.ground.registry()?;
    let image_repo = format!("e2e/pr-{}", random_suffix());
    let image = format!("{}/{image_repo}", registry.host);
    registry.push(&image_repo, "v1.0.0")?;
    let repo = gitea.create_repo("manifests").await?;
    gitea
        .put_file(&repo, FILE, &deployment(&image, "v1.0.0"), "main", None)
        .await?;
    create_secret(
        &s.admin,
        &s.ns.name,
        "gitea-git",
        "Opaque",
        &[("username", ADMIN), ("password", &gitea.token)],
    )
    .await?;
    create_secret(
        &s.admin,
        &s.ns.name,
        "gitea-api",
        "Opaque",
        &[("token", &gitea.token)],
    )
    .await?;
    let yaml = format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata:
  name: api
  namespace: {ns}
spec:
  image: {image}
  interval: 10s
  credentials: {{secretRef: {{name: regcred}}}}
  git:
    url: {url}
    branch: main
    secretRef: {{name: gitea-git}}
    pullRequest:
      provider: gitea
      apiUrl: {api}
      secretRef: {{name: gitea-api}}
      title: "chore(api): {{{{image}}}} to {{{{tag}}}}"
      labels: [image-update]
{extra}  target:
    workload: {{path: apps/api, kind: Deployment, name: api, container: api}}
"#,
        ns = s.ns.name,
        url = gitea.git_url(&repo),
        api = gitea.api,
    );
    Ok(Setup {
        repo,
        image_repo,
        image,
        yaml,
    })
}

async fn watch(api: &Api<ImageWatch>) -> anyhow::Result<ImageWatch> {
    Ok(api.get("api").await?)
}

/// Waits until `status.pullRequest` satisfies `check`.
async fn wait_pr(
    s: &Scenario,
    what: &str,
    check: impl Fn(&imagewatch_crd::WatchPullRequest) -> bool,
) -> anyhow::Result<imagewatch_crd::WatchPullRequest> {
    wait_until(what, TIMEOUT, || async {
        let w = watch(&s.watches).await?;
        Ok(w.status.and_then(|st| st.pull_request).filter(|p| check(p)))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", s.operator.log_tail(40)))
}

fn condition(w: &ImageWatch, type_: &str) -> Option<(String, String)> {
    w.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

async fn file_on(gitea: &Gitea, repo: &str, branch: &str) -> anyhow::Result<String> {
    gitea.file(repo, branch, FILE).await
}

#[tokio::test]
async fn one_pull_request_is_opened_kept_current_and_closed() -> anyhow::Result<()> {
    let s = Scenario::start("wpr", &[]).await?;
    let mut gitea = Gitea::start().await?;
    gitea.serve_git_over_https(s.ground)?;
    let registry = s.ground.registry()?;
    let set = setup(&s, &gitea, "").await?;
    gitea.create_label(&set.repo, "image-update").await?;
    s.apply(&set.yaml)?;

    // `main` holds the newest tag: no pull request.
    s.wait_ready("api", "True", "UpToDate").await?;
    assert!(gitea.pulls(&set.repo, "all").await?.is_empty());

    // A newer tag: the edit goes to the push branch and one pull request is opened.
    registry.retag(&set.image_repo, "v1.0.0", "v1.1.0")?;
    let opened = wait_pr(&s, "a pull request for v1.1.0", |p| {
        p.state == PullRequestState::Open && p.tag.as_deref() == Some("v1.1.0")
    })
    .await?;
    let branch = format!("imagewatch/{}-api", s.ns.name);
    assert_eq!(opened.branch, branch);
    let pulls = gitea.pulls(&set.repo, "all").await?;
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    let pr = &pulls[0];
    assert_eq!(pr["number"].as_i64(), Some(opened.number));
    assert_eq!(pr["head"]["ref"], branch.as_str());
    assert_eq!(pr["base"]["ref"], "main");
    assert_eq!(
        pr["title"],
        format!("chore(api): {} to v1.1.0", set.image).as_str()
    );
    assert_eq!(pr["labels"][0]["name"], "image-update");
    assert_eq!(opened.url, pr["html_url"].as_str().unwrap_or_default());
    assert!(
        file_on(&gitea, &set.repo, &branch)
            .await?
            .contains(":v1.1.0")
    );
    assert!(
        file_on(&gitea, &set.repo, "main")
            .await?
            .contains(":v1.0.0")
    );
    let w = watch(&s.watches).await?;
    // `Opened` by the reconcile that opened it, `Open` once a later reconcile found it
    // unchanged (a status update or the next event may have run by now).
    let open = condition(&w, "PullRequestOpen");
    assert!(
        matches!(&open, Some((status, reason)) if status == "True" && (reason == "Opened" || reason == "Open")),
        "{open:?}"
    );
    assert!(
        w.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "imagewatch.dev/close-watch-pull-request"),
        "finalizer while a pull request is open: {:?}",
        w.metadata.finalizers
    );
    let wide = s
        .ground
        .kubectl(&["get", "iw", "api", "-n", &s.ns.name, "-o", "wide"])?;
    assert!(
        wide.lines().next().unwrap_or_default().contains("PR") && wide.contains(&opened.url),
        "{wide}"
    );

    // A newer tag updates the same pull request.
    registry.retag(&set.image_repo, "v1.0.0", "v1.2.0")?;
    let updated = wait_pr(&s, "the pull request at v1.2.0", |p| {
        p.tag.as_deref() == Some("v1.2.0")
    })
    .await?;
    assert_eq!(updated.number, opened.number);
    assert_eq!(updated.state, PullRequestState::Open);
    let pulls = gitea.pulls(&set.repo, "all").await?;
    assert_eq!(pulls.len(), 1, "still one pull request");
    assert_eq!(
        pulls[0]["title"],
        format!("chore(api): {} to v1.2.0", set.image).as_str()
    );
    assert!(
        file_on(&gitea, &set.repo, &branch)
            .await?
            .contains(":v1.2.0")
    );

    // `main` gets the tag by hand: the pull request is closed, the finalizer goes.
    gitea
        .put_file(
            &set.repo,
            FILE,
            &deployment(&set.image, "v1.2.0"),
            "main",
            None,
        )
        .await?;
    let closed = wait_pr(&s, "the pull request closed", |p| {
        p.state == PullRequestState::Closed
    })
    .await?;
    assert_eq!(closed.number, opened.number);
    assert_eq!(
        gitea.pull(&set.repo, opened.number).await?["state"],
        "closed"
    );
    let w = wait_until("the finalizer to go", TIMEOUT, || async {
        let w = watch(&s.watches).await?;
        Ok(w.metadata
            .finalizers
            .iter()
            .flatten()
            .next()
            .is_none()
            .then_some(w))
    })
    .await?;
    // `Closed` by the reconcile that closed it, `UpToDate` once a later one found nothing to
    // propose (the close itself is checked by its Event and metric below).
    let open = condition(&w, "PullRequestOpen");
    assert!(
        matches!(&open, Some((status, reason)) if status == "False" && (reason == "Closed" || reason == "UpToDate")),
        "{open:?}"
    );
    let metrics = s.operator.metrics().await?;
    for action in ["opened", "updated", "closed"] {
        assert!(
            metric(
                &metrics,
                &format!("imagewatch_watch_pull_requests_total{{action=\"{action}\"}}")
            ) >= 1.0,
            "{action}: {metrics}"
        );
    }
    let events = s.ground.kubectl(&[
        "get",
        "events",
        "-n",
        &s.ns.name,
        "-o",
        "jsonpath={.items[*].reason}",
    ])?;
    for reason in [
        "PullRequestOpened",
        "PullRequestUpdated",
        "PullRequestClosed",
    ] {
        assert!(events.contains(reason), "{reason} in {events}");
    }
    Ok(())
}

#[tokio::test]
async fn auto_merge_merges_once_the_required_status_passes() -> anyhow::Result<()> {
    let s = Scenario::start("wpram", &[]).await?;
    let mut gitea = Gitea::start().await?;
    gitea.serve_git_over_https(s.ground)?;
    let registry = s.ground.registry()?;
    let set = setup(&s, &gitea, "").await?;
    gitea.require_status(&set.repo, "main", "ci").await?;
    let yaml = set
        .yaml
        .replace("labels: [image-update]", "autoMerge: true");
    s.apply(&yaml)?;
    s.wait_ready("api", "True", "UpToDate").await?;
    registry.retag(&set.image_repo, "v1.0.0", "v1.1.0")?;
    let opened = wait_pr(&s, "a pull request for v1.1.0", |p| {
        p.state == PullRequestState::Open
    })
    .await?;
    let pr = gitea.pull(&set.repo, opened.number).await?;
    let sha = pr["head"]["sha"].as_str().unwrap_or_default().to_string();
    assert!(
        !pr["merged"].as_bool().unwrap_or(true),
        "merged before the check"
    );
    gitea.set_status(&set.repo, &sha, "ci", "success").await?;
    wait_until("Gitea to merge it", TIMEOUT, || async {
        let pr = gitea.pull(&set.repo, opened.number).await?;
        Ok(pr["merged"].as_bool().unwrap_or(false).then_some(()))
    })
    .await?;
    assert!(
        file_on(&gitea, &set.repo, "main")
            .await?
            .contains(":v1.1.0")
    );
    // The watch sees `main` holding the tag and records the pull request as merged.
    let done = wait_pr(&s, "the pull request merged", |p| {
        p.state == PullRequestState::Merged
    })
    .await?;
    assert_eq!(done.number, opened.number);
    assert_eq!(gitea.pulls(&set.repo, "all").await?.len(), 1);
    Ok(())
}

#[tokio::test]
async fn a_pull_request_opened_before_a_crash_is_adopted_and_closed_on_delete() -> anyhow::Result<()>
{
    let hook = imagewatch::controllers::imagewatch::pull_request::CRASH_AFTER_PULL_REQUEST;
    let mut s = Scenario::start_with_env("wprcrash", &[], &[(hook, "1")]).await?;
    let mut gitea = Gitea::start().await?;
    gitea.serve_git_over_https(s.ground)?;
    let registry = s.ground.registry()?;
    let set = setup(&s, &gitea, "").await?;
    registry.retag(&set.image_repo, "v1.0.0", "v1.1.0")?;
    s.apply(&set.yaml)?;

    // The operator opens the pull request and dies before the status records it.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while s.operator.is_running() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the operator did not abort at the hook:\n{}",
            s.operator.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = std::fs::read_to_string(&s.operator.log)?;
    anyhow::ensure!(
        log.contains(hook),
        "the operator died, but not at the hook:\n{}",
        s.operator.log_tail(40)
    );
    let pulls = gitea.pulls(&set.repo, "open").await?;
    assert_eq!(pulls.len(), 1, "opened before the crash");
    let number = pulls[0]["number"].as_i64().unwrap_or_default();
    let w = watch(&s.watches).await?;
    assert!(
        w.status
            .as_ref()
            .and_then(|st| st.pull_request.as_ref())
            .is_none(),
        "not recorded before the crash"
    );

    // Restarted: found by its branch and adopted, never opened twice.
    s.operator.restart_without(hook)?;
    let adopted = wait_pr(&s, "the pull request adopted", |p| {
        p.state == PullRequestState::Open
    })
    .await?;
    assert_eq!(adopted.number, number);
    assert_eq!(gitea.pulls(&set.repo, "all").await?.len(), 1);

    // Deleting the watch closes it, then the watch is gone.
    s.watches.delete("api", &DeleteParams::default()).await?;
    wait_until("the watch to be gone", TIMEOUT, || async {
        Ok(s.watches.get_opt("api").await?.is_none().then_some(()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", s.operator.log_tail(40)))?;
    assert_eq!(gitea.pull(&set.repo, number).await?["state"], "closed");
    Ok(())
}

#[tokio::test]
async fn a_group_gets_one_pull_request_with_every_member() -> anyhow::Result<()> {
    let s = Scenario::start("wprgroup", &[]).await?;
    let mut gitea = Gitea::start().await?;
    gitea.serve_git_over_https(s.ground)?;
    let registry = s.ground.registry()?;
    let set = setup(&s, &gitea, "").await?;
    // A second member: the worker, in its own file.
    let worker_repo = format!("{}-worker", set.image_repo);
    let worker = format!("{}-worker", set.image);
    registry.push(&worker_repo, "v1.0.0")?;
    let worker_file = "apps/worker/deployment.yaml";
    gitea
        .put_file(
            &set.repo,
            worker_file,
            &deployment(&worker, "v1.0.0").replace("api", "worker"),
            "main",
            None,
        )
        .await?;
    let api_yaml = set
        .yaml
        .replace("  interval: 10s\n", "  interval: 10s\n  group: release\n");
    let worker_yaml = api_yaml
        .replace("name: api\n  namespace", "name: worker\n  namespace")
        .replace(
            &format!("image: {}\n", set.image),
            &format!("image: {worker}\n"),
        )
        .replace(
            "{path: apps/api, kind: Deployment, name: api, container: api}",
            "{path: apps/worker, kind: Deployment, name: worker, container: worker}",
        );
    s.apply(&format!("{api_yaml}---\n{worker_yaml}"))?;
    s.wait_ready("api", "True", "UpToDate").await?;
    s.wait_ready("worker", "True", "UpToDate").await?;

    // Both get v1.1.0: one commit on the group's branch, one pull request.
    registry.retag(&set.image_repo, "v1.0.0", "v1.1.0")?;
    registry.retag(&worker_repo, "v1.0.0", "v1.1.0")?;
    let opened = wait_pr(&s, "the group's pull request", |p| {
        p.state == PullRequestState::Open && p.tag.as_deref() == Some("v1.1.0")
    })
    .await?;
    let branch = format!("imagewatch/{}-group-release", s.ns.name);
    assert_eq!(opened.branch, branch);
    assert!(
        gitea
            .file(&set.repo, &branch, FILE)
            .await?
            .contains(":v1.1.0")
    );
    assert!(
        gitea
            .file(&set.repo, &branch, worker_file)
            .await?
            .contains(":v1.1.0")
    );
    let recorded = wait_until("the worker to record it", TIMEOUT, || async {
        let w = s.watches.get("worker").await?;
        Ok(w.status
            .and_then(|st| st.pull_request)
            .filter(|p| p.state == PullRequestState::Open))
    })
    .await?;
    assert_eq!(recorded.number, opened.number);
    let pulls = gitea.pulls(&set.repo, "all").await?;
    assert_eq!(pulls.len(), 1, "one pull request for the group: {pulls:?}");
    let title = format!("chore(api): {}, {worker} to v1.1.0", set.image);
    assert_eq!(
        pulls[0]["title"],
        title.as_str(),
        "one text for the whole group"
    );
    // Both members reconcile again at their interval and find it right: the text does not
    // flap between them.
    let unchanged = "imagewatch_watch_pull_requests_total{action=\"unchanged\"}";
    let updated = "imagewatch_watch_pull_requests_total{action=\"updated\"}";
    let round = |n: f64| {
        let op = &s.operator;
        async move {
            wait_until("both members to find it unchanged", TIMEOUT, || async {
                let m = op.metrics().await?;
                Ok((metric(&m, unchanged) >= n).then(|| metric(&m, updated)))
            })
            .await
        }
    };
    let before = round(2.0).await?;
    let after = round(4.0).await?;
    assert_eq!(before, after, "updated again although nothing changed");
    assert_eq!(
        gitea.pull(&set.repo, opened.number).await?["title"],
        title.as_str()
    );
    Ok(())
}

/// Seed 001 on Gitea, with no CI glue: the staging watch opens the staging pull request into
/// `main` itself; once it is merged, the PromotionPolicy proposes the same tag, rewritten to
/// production's registry, as one pull request into `release`; merged, the policy is up to
/// date and closes nothing more.
#[tokio::test]
async fn seed_001_staging_and_production_pull_requests_on_gitea() -> anyhow::Result<()> {
    let c = step_seed_gitea_the_two_registries_and_the_secrets().await?;
    step_apply_the_staging_watch_and_the_policy(&c).await?;
    let staging = step_a_staging_pull_request_opens_and_the_policy_waits(&c).await?;
    let production = step_merged_staging_is_proposed_to_release(&c, staging).await?;
    step_merged_production_leaves_the_policy_up_to_date(&c, production).await
}

/// Seed 001's Argo CD source files, staging's and production's.
const STG: &str = "overlays/staging/.argocd-source-my-api-stg.yaml";
const PRD: &str = "overlays/production/.argocd-source-my-api-prd.yaml";

/// What the steps of seed 001 on Gitea share.
struct Seed001Gitea {
    registry: Registry,
    sfx: String,
    /// The staging and production images (`host/e2e/acct…/my-api`).
    stg: String,
    prd: String,
    /// The manifests repository on Gitea.
    repo: String,
    policies: Api<PromotionPolicy>,
    gitea: Gitea,
    s: Scenario,
}

/// v1.0.0 of both images, a Gitea repository with both overlays on main and release, and
/// the Secrets for Gitea's git and API.
async fn step_seed_gitea_the_two_registries_and_the_secrets() -> anyhow::Result<Seed001Gitea> {
    let s = Scenario::start("wprseed1", &[]).await?;
    let mut gitea = Gitea::start().await?;
    gitea.serve_git_over_https(s.ground)?;
    let registry = s.ground.registry()?;
    let sfx = random_suffix();
    let stg = format!("{}/e2e/acct111-{sfx}/my-api", registry.host);
    let prd = format!("{}/e2e/acct222-{sfx}/my-api", registry.host);
    registry.push(&format!("e2e/acct111-{sfx}/my-api"), "v1.0.0")?;
    registry.push(&format!("e2e/acct222-{sfx}/my-api"), "v1.0.0")?;
    let repo = gitea.create_repo("seed1").await?;
    gitea
        .put_file(
            &repo,
            STG,
            &source_file(&[format!("{stg}:v1.0.0")]),
            "main",
            None,
        )
        .await?;
    gitea
        .put_file(
            &repo,
            PRD,
            &source_file(&[format!("{prd}:v1.0.0")]),
            "main",
            None,
        )
        .await?;
    gitea.create_branch(&repo, "release", "main").await?;
    for (name, key, value) in [
        ("gitea-git", "password", gitea.token.as_str()),
        ("gitea-api", "token", gitea.token.as_str()),
    ] {
        let mut data = vec![(key, value)];
        if key == "password" {
            data.push(("username", ADMIN));
        }
        create_secret(&s.admin, &s.ns.name, name, "Opaque", &data).await?;
    }
    let policies: Api<PromotionPolicy> = Api::namespaced(s.admin.clone(), &s.ns.name);
    Ok(Seed001Gitea {
        registry,
        sfx,
        stg,
        prd,
        repo,
        policies,
        gitea,
        s,
    })
}

/// The staging watch opening pull requests into main, and the policy proposing to release
/// by pull request; staging is up to date.
async fn step_apply_the_staging_watch_and_the_policy(c: &Seed001Gitea) -> anyhow::Result<()> {
    let Seed001Gitea {
        stg,
        prd,
        repo,
        gitea,
        s,
        ..
    } = c;
    let url = gitea.git_url(repo);
    let pr_settings = format!(
        "{{provider: gitea, apiUrl: \"{}\", secretRef: {{name: gitea-api}}}}",
        gitea.api
    );
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata:
  name: my-api-stg
  namespace: {ns}
  labels: {{app: my-api, stage: stg}}
spec:
  image: {stg}
  tags: {{pattern: "v*"}}
  interval: 10s
  credentials: {{secretRef: {{name: regcred}}}}
  git:
    url: "{url}"
    branch: main
    secretRef: {{name: gitea-git}}
    pullRequest: {pr_settings}
  target:
    argocdSource: {{path: overlays/staging, application: my-api-stg, image: "{stg}"}}
---
apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata: {{name: my-api, namespace: {ns}}}
spec:
  from: {{watchSelector: {{matchLabels: {{app: my-api, stage: stg}}}}}}
  to:
    git: {{url: "{url}", branch: main, secretRef: {{name: gitea-git}}}}
    path: overlays/production
    branch: release
    imageRewrite: [{{from: "{stg_prefix}", to: "{prd_prefix}"}}]
    registrySecretRef: {{name: regcred}}
  gates: {{imageExists: true}}
  mode: PullRequest
  pullRequest: {pr_settings}
  interval: 10s
"#,
        ns = s.ns.name,
        stg_prefix = stg.trim_end_matches("my-api"),
        prd_prefix = prd.trim_end_matches("my-api"),
    ))?;
    s.wait_ready("my-api-stg", "True", "UpToDate").await?;
    Ok(())
}

/// A new staging image: the staging pull request into main, opened by the watch. The
/// policy waits: staging does not run it before the merge. Returns the pull request's number.
async fn step_a_staging_pull_request_opens_and_the_policy_waits(
    c: &Seed001Gitea,
) -> anyhow::Result<i64> {
    let Seed001Gitea {
        registry,
        sfx,
        repo,
        gitea,
        s,
        ..
    } = c;
    registry.retag(&format!("e2e/acct111-{sfx}/my-api"), "v1.0.0", "v1.1.0")?;
    registry.retag(&format!("e2e/acct222-{sfx}/my-api"), "v1.0.0", "v1.1.0")?;
    let staging = wait_until("the staging pull request", TIMEOUT, || async {
        let w = s.watches.get("my-api-stg").await?;
        Ok(w.status
            .and_then(|st| st.pull_request)
            .filter(|p| p.state == PullRequestState::Open))
    })
    .await?;
    let pulls = gitea.pulls(repo, "all").await?;
    assert_eq!(pulls.len(), 1, "only the staging pull request: {pulls:?}");
    assert_eq!(pulls[0]["base"]["ref"], "main");
    let w = s.watches.get("my-api-stg").await?;
    assert_eq!(
        w.status.and_then(|st| st.applied).map(|a| a.tag).as_deref(),
        Some("v1.0.0"),
        "applied is what main holds"
    );
    Ok(staging.number)
}

/// Reviewed and merged: staging runs v1.1.0; the policy proposes it to release, rewritten to
/// production's registry. Returns the production pull request's number.
async fn step_merged_staging_is_proposed_to_release(
    c: &Seed001Gitea,
    staging: i64,
) -> anyhow::Result<i64> {
    let Seed001Gitea {
        prd,
        repo,
        policies,
        gitea,
        s,
        ..
    } = c;
    gitea.merge(repo, staging).await?;
    s.wait_applied("my-api-stg", "v1.1.0").await?;
    let p = wait_until("the production pull request", TIMEOUT, || async {
        let p = policies.get("my-api").await?;
        Ok((policy_condition(&p, conditions::PULL_REQUEST_OPEN)
            .map(|c| c.0)
            .as_deref()
            == Some("True"))
        .then_some(p))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", s.operator.log_tail(40)))?;
    let production = p
        .status
        .and_then(|st| st.pull_request)
        .ok_or_else(|| anyhow::anyhow!("no status.pullRequest"))?;
    let pr = gitea.pull(repo, production.number).await?;
    assert_eq!(pr["base"]["ref"], "release");
    let head = pr["head"]["ref"].as_str().unwrap_or_default().to_string();
    assert!(
        gitea
            .file(repo, &head, PRD)
            .await?
            .contains(&format!("{prd}:v1.1.0")),
        "rewritten to production's registry"
    );
    assert!(gitea.file(repo, "release", PRD).await?.contains(":v1.0.0"));
    let closed = wait_until(
        "the staging pull request recorded merged",
        TIMEOUT,
        || async {
            let w = s.watches.get("my-api-stg").await?;
            Ok(w.status
                .and_then(|st| st.pull_request)
                .filter(|p| p.state == PullRequestState::Merged))
        },
    )
    .await?;
    assert_eq!(closed.number, staging);
    Ok(production.number)
}

/// Production merged: the policy is up to date, no pull request open.
async fn step_merged_production_leaves_the_policy_up_to_date(
    c: &Seed001Gitea,
    production: i64,
) -> anyhow::Result<()> {
    let Seed001Gitea {
        repo,
        policies,
        gitea,
        ..
    } = c;
    gitea.merge(repo, production).await?;
    wait_until("the policy up to date", TIMEOUT, || async {
        let p = policies.get("my-api").await?;
        Ok((policy_condition(&p, conditions::READY)
            .map(|c| c.1)
            .as_deref()
            == Some("UpToDate"))
        .then_some(()))
    })
    .await?;
    assert_eq!(gitea.pulls(repo, "open").await?.len(), 0);
    assert_eq!(gitea.pulls(repo, "all").await?.len(), 2);
    Ok(())
}

/// A pattern watch over `count` repositories, each holding v1.0.0 in Git and getting v1.1.0
/// in the registry; returns the Gitea repository and the watch's name.
async fn pattern_watch(
    s: &Scenario,
    gitea: &Gitea,
    count: usize,
    per_member: bool,
) -> anyhow::Result<(String, String, Vec<String>)> {
    let registry = s.ground.registry()?;
    let top = format!("e2e/pat{}", random_suffix());
    let apps: Vec<String> = (0..count).map(|i| format!("app{i:02}")).collect();
    for app in &apps {
        registry.push(&format!("{top}/{app}/api"), "v1.0.0")?;
    }
    let repo = pattern_watch_on(
        s,
        gitea,
        &format!("{}/{top}", registry.host),
        &apps,
        "{secretRef: {name: regcred}}",
        "10s",
        per_member,
    )
    .await?;
    for app in &apps {
        registry.retag(&format!("{top}/{app}/api"), "v1.0.0", "v1.1.0")?;
    }
    Ok((repo, top, apps))
}

/// Seed 000's figure on Gitea: 27 pushes to 27 repositories of one pattern watch give 27
/// pull requests, one per repository on its own branch, none duplicated.
#[tokio::test]
async fn a_pattern_watch_opens_one_pull_request_per_member() -> anyhow::Result<()> {
    const COUNT: usize = 27;
    let s = Scenario::start("wprpat", &[]).await?;
    let mut gitea = Gitea::start().await?;
    gitea.serve_git_over_https(s.ground)?;
    let (repo, top, apps) = pattern_watch(&s, &gitea, COUNT, true).await?;
    let pushed = std::time::Instant::now();
    wait_until("a pull request per member", TIMEOUT, || async {
        Ok((gitea.pulls(&repo, "open").await?.len() >= COUNT).then_some(()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", s.operator.log_tail(30)))?;
    eprintln!(
        "{COUNT} pull requests open {:.1}s after the last push",
        pushed.elapsed().as_secs_f64()
    );
    let w = wait_until(
        "every member to record its pull request",
        TIMEOUT,
        || async {
            let w = s.watches.get("all").await?;
            let recorded = w
                .status
                .as_ref()
                .map(|st| {
                    st.members
                        .iter()
                        .filter(|m| {
                            m.pull_request
                                .as_ref()
                                .is_some_and(|p| p.state == PullRequestState::Open)
                        })
                        .count()
                })
                .unwrap_or(0);
            Ok((recorded == COUNT).then_some(w))
        },
    )
    .await?;
    let pulls = gitea.pulls(&repo, "all").await?;
    assert_eq!(pulls.len(), COUNT, "none duplicated");
    let mut heads: Vec<String> = pulls
        .iter()
        .filter_map(|p| p["head"]["ref"].as_str().map(str::to_string))
        .collect();
    heads.sort();
    let mut expected: Vec<String> = apps
        .iter()
        .map(|app| {
            format!(
                "imagewatch/{}-all-{}-{app}-api",
                s.ns.name,
                top.replace('/', "-")
            )
        })
        .collect();
    expected.sort();
    assert_eq!(heads, expected);
    let first = &w.status.unwrap_or_default().members[0];
    let pr = first.pull_request.clone().unwrap_or_else(|| unreachable!());
    assert!(
        gitea
            .file(
                &repo,
                &pr.branch,
                &format!("apps/{}/deployment.yaml", apps[0])
            )
            .await?
            .contains(":v1.1.0")
    );
    assert!(
        gitea
            .file(
                &repo,
                &pr.branch,
                &format!("apps/{}/deployment.yaml", apps[1])
            )
            .await?
            .contains(":v1.0.0"),
        "each pull request holds its own member only"
    );
    // Deleting the watch closes all of them.
    s.watches.delete("all", &DeleteParams::default()).await?;
    wait_until("the watch to be gone", TIMEOUT, || async {
        Ok(s.watches.get_opt("all").await?.is_none().then_some(()))
    })
    .await?;
    assert!(gitea.pulls(&repo, "open").await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_pattern_watch_can_open_one_pull_request_for_all() -> anyhow::Result<()> {
    let s = Scenario::start("wprpatone", &[]).await?;
    let mut gitea = Gitea::start().await?;
    gitea.serve_git_over_https(s.ground)?;
    let (repo, _, apps) = pattern_watch(&s, &gitea, 3, false).await?;
    let pr = wait_until("one pull request for all", TIMEOUT, || async {
        let w = s.watches.get("all").await?;
        Ok(w.status
            .and_then(|st| st.pull_request)
            .filter(|p| p.state == PullRequestState::Open))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", s.operator.log_tail(30)))?;
    assert_eq!(pr.branch, format!("imagewatch/{}-all", s.ns.name));
    for app in &apps {
        let path = format!("apps/{app}/deployment.yaml");
        wait_until("every member on the branch", TIMEOUT, || async {
            Ok(gitea
                .file(&repo, &pr.branch, &path)
                .await?
                .contains(":v1.1.0")
                .then_some(()))
        })
        .await?;
    }
    assert_eq!(gitea.pulls(&repo, "all").await?.len(), 1);
    Ok(())
}

/// Seed 000 end to end: ECR pushes (moto) → EventBridge → SQS → one pattern watch → one pull
/// request per push on Gitea (see `imagewatch_e2e::seed000`; `just bench` times the same run).
#[tokio::test]
async fn seed_000_ecr_pushes_through_sqs_open_one_pull_request_each() -> anyhow::Result<()> {
    const COUNT: usize = 27;
    let run = seed000::run(COUNT).await?;
    eprintln!(
        "{COUNT} pull requests open {:.1}s after the last push event",
        run.elapsed.as_secs_f64()
    );
    assert_eq!(run.pulls.len(), COUNT, "none duplicated");
    for (app, file) in &run.files {
        assert!(
            file.contains(&format!("{}/{app}/api:v1.1.0", run.images)),
            "{app}: {file}"
        );
    }
    assert_eq!(
        run.files.len(),
        COUNT,
        "a pull request from every member's branch"
    );
    assert!(
        run.sqs_matched >= COUNT as f64,
        "every pull request came from an SQS event: {} matched",
        run.sqs_matched
    );
    Ok(())
}
