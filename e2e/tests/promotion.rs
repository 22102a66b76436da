//! PromotionPolicy end to end on the real apiserver, registry, moto and git server, with the
//! operator running as a process under the chart's RBAC.
//!
//! Seed 001's flow: a staging ImageWatch writes new tags into `overlays/staging` on `main`; a
//! PromotionPolicy proposes them to `overlays/production` on `release` as ONE pull request (on
//! a GitHub-API stub served by this test process), with the staging "account" rewritten to
//! production's (two repository path prefixes on the ground's registry) and the release's
//! other images aligned to the app image — only once production's registry holds every
//! image; a newer staging tag updates the same pull request; merging it closes nothing but
//! the loop (the next reconcile finds production current).

use std::{
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    http::{HeaderMap, Method, StatusCode, Uri},
    response::IntoResponse,
};
use imagewatch_crd::{PromotionPolicy, conditions};
use imagewatch_e2e::{
    argocd::{AppGuard, ArgoCd, source_file},
    ground::{GitServer, Registry, random_suffix},
    setup::{Scenario, create_secret, policy_condition, wait_policy_for},
    setup::{moto, moto_credentials},
    wait_until,
};
use kube::{Api, api::DeleteParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(120);

/// A GitHub REST/GraphQL stub keeping pull requests in memory, answering in the documented
/// shapes (`pulls` list/create/update, `issues/{n}/labels`, GraphQL auto-merge). While
/// `down` is set it answers every request with 503.
#[derive(Clone, Default)]
struct GithubStub {
    prs: Arc<Mutex<Vec<Value>>>,
    requests: Arc<Mutex<Vec<(Method, String)>>>,
    /// Numbers of the pull requests a `PATCH {state: closed}` closed, one entry per request.
    closes: Arc<Mutex<Vec<i64>>>,
    down: Arc<AtomicBool>,
}

impl GithubStub {
    async fn start(&self) -> anyhow::Result<String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let me = self.clone();
        let app = Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let me = me.clone();
                async move {
                    let (code, body) = me.answer(&method, &uri, &headers, &body);
                    (
                        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        body.to_string(),
                    )
                        .into_response()
                }
            },
        );
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(base)
    }

    fn answer(&self, method: &Method, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> (u16, Value) {
        self.requests
            .lock()
            .unwrap()
            .push((method.clone(), uri.to_string()));
        if self.down.load(Ordering::SeqCst) {
            return (503, json!({"message": "Service Unavailable"}));
        }
        if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer forge-token")
        {
            return (401, json!({"message": "Bad credentials"}));
        }
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let mut prs = self.prs.lock().unwrap();
        let path = uri.path();
        let pulls = "/repos/octo-org/manifests/pulls";
        if path == pulls && method == Method::GET {
            let open: Vec<Value> = prs
                .iter()
                .filter(|p| p["state"] == "open")
                .cloned()
                .collect();
            return (200, Value::Array(open));
        }
        if path == pulls && method == Method::POST {
            if prs
                .iter()
                .any(|p| p["state"] == "open" && p["head"]["ref"] == body["head"])
            {
                return (
                    422,
                    json!({"message": "Validation Failed", "errors": [{"resource": "PullRequest", "code": "custom", "message": format!("A pull request already exists for octo-org:{}.", body["head"].as_str().unwrap_or_default())}]}),
                );
            }
            let number = prs.len() as i64 + 1;
            let pr = json!({
                "id": number, "node_id": format!("PR_{number}"), "number": number, "state": "open",
                "html_url": format!("https://github.test/octo-org/manifests/pull/{number}"),
                "title": body["title"], "body": body["body"], "labels": [], "auto_merge": null,
                "head": {"ref": body["head"], "sha": "0000000000000000000000000000000000000000", "label": format!("octo-org:{}", body["head"].as_str().unwrap_or_default())},
                "base": {"ref": body["base"], "sha": "0000000000000000000000000000000000000000", "label": format!("octo-org:{}", body["base"].as_str().unwrap_or_default())},
            });
            prs.push(pr.clone());
            return (201, pr);
        }
        if let Some(n) = path.strip_prefix(&format!("{pulls}/"))
            && method == Method::PATCH
        {
            let n: i64 = n.parse().unwrap_or_default();
            let Some(pr) = prs.iter_mut().find(|p| p["number"] == n) else {
                return (404, json!({"message": "Not Found"}));
            };
            if body["state"] == "closed" {
                self.closes.lock().unwrap().push(n);
            }
            for key in ["title", "body", "state"] {
                if !body[key].is_null() {
                    pr[key] = body[key].clone();
                }
            }
            return (200, pr.clone());
        }
        if let Some(rest) = path.strip_prefix("/repos/octo-org/manifests/issues/")
            && method == Method::POST
        {
            let n: i64 = rest
                .split('/')
                .next()
                .unwrap_or_default()
                .parse()
                .unwrap_or_default();
            let Some(pr) = prs.iter_mut().find(|p| p["number"] == n) else {
                return (404, json!({"message": "Not Found"}));
            };
            let labels: Vec<Value> = body["labels"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|l| json!({"id": 1, "name": l, "color": "f29513"}))
                .collect();
            pr["labels"] = Value::Array(labels.clone());
            return (200, Value::Array(labels));
        }
        (404, json!({"message": "Not Found"}))
    }

    /// The `state` of pull request `n`, if there is one.
    fn state(&self, n: i64) -> Option<Value> {
        self.all()
            .iter()
            .find(|p| p["number"] == n)
            .map(|p| p["state"].clone())
    }

    fn all(&self) -> Vec<Value> {
        self.prs.lock().unwrap().clone()
    }

    fn count(&self, method: Method, path: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, p)| *m == method && p.split('?').next() == Some(path))
            .count()
    }
}

/// Waits (up to this file's [`TIMEOUT`]) until the policy `name` satisfies `check`.
async fn wait_policy(
    s: &Scenario,
    api: &Api<PromotionPolicy>,
    name: &str,
    what: &str,
    check: impl Fn(&PromotionPolicy) -> bool,
) -> anyhow::Result<PromotionPolicy> {
    wait_policy_for(s, api, name, what, TIMEOUT, check).await
}

/// A GitHub API stub, and the Secret `forge-token` holding its token.
async fn github_forge(s: &Scenario) -> anyhow::Result<(GithubStub, String)> {
    let forge = GithubStub::default();
    let api_url = forge.start().await?;
    create_secret(
        &s.admin,
        &s.ns.name,
        "forge-token",
        "Opaque",
        &[("token", "forge-token")],
    )
    .await?;
    Ok((forge, api_url))
}

/// Waits until the policy `name` is gone (its finalizer removed).
async fn wait_deleted(
    s: &Scenario,
    policies: &Api<PromotionPolicy>,
    name: &str,
) -> anyhow::Result<()> {
    wait_until(&format!("policy {name} deleted"), TIMEOUT, || async {
        Ok(policies.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", s.operator.log_tail(60)))
}

/// A manifests repository with `overlays/staging` (main) and `overlays/production`, and a
/// `release` branch equal to main.
fn seed_manifests(
    s: &Scenario,
    name: &str,
    staging: &[String],
    production: &[String],
) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let stg = dir.path().join("overlays/staging");
    let prd = dir.path().join("overlays/production");
    std::fs::create_dir_all(&stg)?;
    std::fs::create_dir_all(&prd)?;
    std::fs::write(stg.join("kustomization.yaml"), "resources:\n- ../../base\n")?;
    std::fs::write(prd.join("kustomization.yaml"), "resources:\n- ../../base\n")?;
    std::fs::write(
        stg.join(".argocd-source-my-api-stg.yaml"),
        source_file(staging),
    )?;
    std::fs::write(
        prd.join(".argocd-source-my-api-prd.yaml"),
        source_file(production),
    )?;
    // What an Argo CD Application of the staging gate can deploy and call Healthy.
    let healthy = dir.path().join("argo/healthy");
    std::fs::create_dir_all(&healthy)?;
    std::fs::write(
        healthy.join("configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: gate-probe}\ndata: {stage: staging}\n",
    )?;
    let git = s.ground.git()?;
    let url = git.new_repo(name, dir.path())?;
    git.git(name, &["branch", "release", "main"])?;
    Ok(url)
}

const PRD_FILE: &str = "overlays/production/.argocd-source-my-api-prd.yaml";

/// What the steps of seed 001's flow share: the two "accounts" (repository path prefixes) on
/// the ground's registry, the manifests repository, the forge stub and the scenario.
struct Seed001 {
    registry: Registry,
    git: GitServer,
    sfx: String,
    /// The staging account's prefix (`host/e2e/acct111-…`).
    stg: String,
    /// The production account's prefix (`host/e2e/acct222-…`).
    prd: String,
    repo: String,
    /// The manifests repository's URL on the ground's git server.
    url: String,
    forge: GithubStub,
    /// The forge stub's base URL.
    api_url: String,
    policies: Api<PromotionPolicy>,
    /// Production's file on `release` before anything was promoted.
    production_before: String,
    /// The branch the policy pushes its pull request from.
    branch: String,
    s: Scenario,
}

impl Seed001 {
    /// The registry path of `image` in the account `acct`.
    fn path(&self, acct: &str, image: &str) -> String {
        format!("e2e/{acct}-{}/{image}", self.sfx)
    }

    /// Pushes `tag` of the three production images, then of the staging app image.
    fn push_release(&self, tag: &str) -> anyhow::Result<()> {
        for image in ["my-api", "my-api-worker", "my-api-migrate"] {
            self.registry.push(&self.path("acct222", image), tag)?;
        }
        self.registry.push(&self.path("acct111", "my-api"), tag)?;
        Ok(())
    }

    /// Waits until the policy `my-api` satisfies `check`.
    async fn wait(
        &self,
        what: &str,
        check: impl Fn(&PromotionPolicy) -> bool,
    ) -> anyhow::Result<PromotionPolicy> {
        wait_policy(&self.s, &self.policies, "my-api", what, check).await
    }
}

#[tokio::test]
async fn seed_001_staging_to_production_by_one_pull_request() -> anyhow::Result<()> {
    let c = step_seed_registries_manifests_and_forge().await?;
    step_apply_the_staging_watch_and_the_policy(&c).await?;
    step_nothing_is_proposed_while_production_is_current(&c).await?;
    step_the_gate_holds_until_production_has_the_images(&c).await?;
    let first_head = step_one_pull_request_rewritten_and_aligned(&c).await?;
    step_a_newer_tag_updates_the_same_pull_request(&c, &first_head).await?;
    step_merging_closes_the_pull_request(&c).await?;
    step_a_branch_a_person_pushed_to_is_never_overwritten(&c).await?;
    step_metrics_and_events_record_the_pull_request(&c).await
}

/// v1.0.0 in both accounts, the manifests repository, and the GitHub stub.
async fn step_seed_registries_manifests_and_forge() -> anyhow::Result<Seed001> {
    let s = Scenario::start("promo", &[]).await?;
    let registry = s.ground.registry()?;
    let git = s.ground.git()?;
    let sfx = random_suffix();
    let stg = format!("{}/e2e/acct111-{sfx}", registry.host);
    let prd = format!("{}/e2e/acct222-{sfx}", registry.host);
    let path = |acct: &str, image: &str| format!("e2e/{acct}-{sfx}/{image}");
    registry.push(&path("acct111", "my-api"), "v1.0.0")?;
    for image in ["my-api", "my-api-worker", "my-api-migrate"] {
        registry.push(&path("acct222", image), "v1.0.0")?;
    }
    let repo = format!("promo-{}", s.ns.name);
    let url = seed_manifests(
        &s,
        &repo,
        &[format!("{stg}/my-api:v1.0.0")],
        &[
            format!("{prd}/my-api:v1.0.0"),
            format!("{prd}/my-api-worker:v1.0.0"),
            format!("{prd}/my-api-migrate:v1.0.0"),
        ],
    )?;
    let production_before = git.show(&repo, "release", PRD_FILE)?;
    let (forge, api_url) = github_forge(&s).await?;
    let policies: Api<PromotionPolicy> = Api::namespaced(s.admin.clone(), &s.ns.name);
    let branch = format!("imagewatch/promote-{}-my-api", s.ns.name);
    Ok(Seed001 {
        registry,
        git,
        sfx,
        stg,
        prd,
        repo,
        url,
        forge,
        api_url,
        policies,
        production_before,
        branch,
        s,
    })
}

/// The staging ImageWatch and the PromotionPolicy proposing its tags to production.
async fn step_apply_the_staging_watch_and_the_policy(c: &Seed001) -> anyhow::Result<()> {
    let Seed001 {
        s,
        stg,
        prd,
        url,
        api_url,
        ..
    } = c;
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata:
  name: my-api-stg
  namespace: {ns}
  labels: {{app: my-api, stage: stg}}
spec:
  image: {stg}/my-api
  tags: {{pattern: "v*"}}
  interval: 10s
  credentials: {{secretRef: {{name: regcred}}}}
  git: {{url: "{url}", branch: main, secretRef: {{name: git-creds}}}}
  target:
    argocdSource: {{path: overlays/staging, application: my-api-stg, image: "{stg}/my-api"}}
---
apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata: {{name: my-api, namespace: {ns}}}
spec:
  from: {{watchSelector: {{matchLabels: {{app: my-api, stage: stg}}}}}}
  to:
    git: {{url: "{url}", branch: main, secretRef: {{name: git-creds}}}}
    path: overlays/production
    branch: release
    imageRewrite: [{{from: "{stg}/", to: "{prd}/"}}]
    registrySecretRef: {{name: regcred}}
  alignTags: {{leader: my-api, followers: [my-api-worker, my-api-migrate]}}
  gates: {{imageExists: true}}
  mode: PullRequest
  pullRequest:
    provider: github
    apiUrl: "{api_url}"
    repository: octo-org/manifests
    secretRef: {{name: forge-token}}
    labels: [promotion]
  interval: 10s
"#,
        ns = s.ns.name
    ))
}

/// Production already runs what staging runs: nothing is proposed.
async fn step_nothing_is_proposed_while_production_is_current(c: &Seed001) -> anyhow::Result<()> {
    c.s.wait_ready("my-api-stg", "True", "UpToDate").await?;
    let p = c
        .wait("policy up to date", |p| {
            policy_condition(p, conditions::READY).is_some_and(|c| c.1 == "UpToDate")
        })
        .await?;
    assert_eq!(
        p.status
            .as_ref()
            .and_then(|st| st.candidate_summary.clone())
            .as_deref(),
        Some("my-api:v1.0.0, my-api-migrate:v1.0.0, my-api-worker:v1.0.0")
    );
    assert!(c.forge.all().is_empty());
    Ok(())
}

/// A new staging tag: the candidate is v1.1.0 for all three production images, but the
/// production registry does not hold them yet — the gate says which, nothing is proposed.
async fn step_the_gate_holds_until_production_has_the_images(c: &Seed001) -> anyhow::Result<()> {
    let Seed001 {
        s,
        registry,
        git,
        prd,
        repo,
        forge,
        ..
    } = c;
    registry.push(&c.path("acct111", "my-api"), "v1.1.0")?;
    s.wait_applied("my-api-stg", "v1.1.0").await?;
    let p = c
        .wait("ImageMissing", |p| {
            policy_condition(p, conditions::GATES_PASSING).is_some_and(|c| c.1 == "ImageMissing")
        })
        .await?;
    let st = p.status.clone().unwrap_or_default();
    let gate = &st.gates[0];
    assert_eq!(gate.name, "imageExists");
    assert!(!gate.passed);
    let message = gate.message.clone().unwrap_or_default();
    for image in ["my-api", "my-api-worker", "my-api-migrate"] {
        assert!(
            message.contains(&format!("{prd}/{image}:v1.1.0")),
            "{message}"
        );
    }
    assert_eq!(st.gates_summary.as_deref(), Some("0/1"));
    assert_eq!(
        policy_condition(&p, conditions::READY)
            .map(|c| c.1)
            .as_deref(),
        Some("WaitingForGates")
    );
    assert!(
        forge.all().is_empty(),
        "no pull request before the gate passes"
    );
    assert!(
        git.git(repo, &["branch", "--list", "imagewatch/*"])?
            .trim()
            .is_empty(),
        "no branch pushed before the gate passes"
    );
    Ok(())
}

/// Production's registry gets the images: ONE pull request, rewritten and aligned. Returns
/// the pull request branch's head commit.
async fn step_one_pull_request_rewritten_and_aligned(c: &Seed001) -> anyhow::Result<String> {
    let Seed001 {
        s,
        registry,
        git,
        stg,
        prd,
        repo,
        forge,
        production_before,
        branch,
        ..
    } = c;
    for image in ["my-api", "my-api-worker", "my-api-migrate"] {
        registry.push(&c.path("acct222", image), "v1.1.0")?;
    }
    let p = c
        .wait("pull request open", |p| {
            policy_condition(p, conditions::PULL_REQUEST_OPEN).is_some_and(|c| c.0 == "True")
        })
        .await?;
    let st = p.status.clone().unwrap_or_default();
    let pr = st.pull_request.clone().expect("status.pullRequest");
    assert_eq!(pr.number, 1);
    assert_eq!(&pr.branch, branch);
    // The watch and the policy share the repository (and its Secret): one clone, the git
    // writer's, holds what both wrote.
    let clones: Vec<String> = std::fs::read_dir(s.operator.cache_dir.join("git"))?
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(clones.len(), 1, "{clones:?}");
    assert!(!s.operator.cache_dir.join("promotion-git").exists());
    assert_eq!(
        policy_condition(&p, conditions::PULL_REQUEST_OPEN).map(|c| c.2),
        Some(pr.url.clone())
    );
    assert_eq!(
        policy_condition(&p, conditions::GATES_PASSING)
            .map(|c| c.1)
            .as_deref(),
        Some("GatesPassed")
    );
    assert_eq!(st.gates_summary.as_deref(), Some("1/1"));
    let prs = forge.all();
    assert_eq!(prs.len(), 1);
    assert_eq!(prs[0]["base"]["ref"], "release");
    assert_eq!(prs[0]["head"]["ref"], branch.as_str());
    assert_eq!(prs[0]["labels"][0]["name"], "promotion");
    let body = prs[0]["body"].as_str().unwrap_or_default().to_string();
    assert!(
        body.contains(&format!(
            "| my-api-worker | `{prd}/my-api-worker:v1.0.0` | `{prd}/my-api-worker:v1.1.0` | aligned with my-api |"
        )),
        "{body}"
    );
    assert!(
        body.contains(&format!("from `{stg}/my-api:v1.1.0`")),
        "{body}"
    );
    let proposed = git.show(repo, branch, PRD_FILE)?;
    assert_eq!(
        proposed,
        production_before.replace(":v1.0.0", ":v1.1.0"),
        "only the tags changed, in place"
    );
    assert_eq!(
        &git.show(repo, "release", PRD_FILE)?,
        production_before,
        "release itself is untouched"
    );
    let first_head = git.git(repo, &["rev-parse", branch])?.trim().to_string();
    assert_eq!(
        git.git(repo, &["rev-parse", &format!("{branch}^")])?.trim(),
        git.git(repo, &["rev-parse", "release"])?.trim(),
        "one commit on top of release"
    );
    assert_eq!(st.last_promotions.len(), 1);
    assert_eq!(st.last_promotions[0].tags["my-api-migrate"], "v1.1.0");
    assert_eq!(
        st.last_promotions[0].commit.as_deref(),
        Some(first_head.as_str())
    );
    assert_eq!(
        st.last_promotions[0].pull_request.as_deref(),
        Some(pr.url.as_str())
    );
    Ok(first_head)
}

/// A newer staging tag updates the SAME pull request with a new head commit.
async fn step_a_newer_tag_updates_the_same_pull_request(
    c: &Seed001,
    first_head: &str,
) -> anyhow::Result<()> {
    let Seed001 {
        s,
        git,
        repo,
        forge,
        production_before,
        branch,
        ..
    } = c;
    c.push_release("v1.2.0")?;
    s.wait_applied("my-api-stg", "v1.2.0").await?;
    let p = c
        .wait("pull request updated", |p| {
            p.status.as_ref().is_some_and(|st| {
                st.last_promotions
                    .first()
                    .is_some_and(|l| l.tags["my-api"] == "v1.2.0")
            })
        })
        .await?;
    let st = p.status.clone().unwrap_or_default();
    assert_eq!(st.pull_request.as_ref().map(|p| p.number), Some(1));
    let prs = forge.all();
    assert_eq!(prs.len(), 1, "never a second pull request");
    assert!(
        prs[0]["title"]
            .as_str()
            .unwrap_or_default()
            .contains("my-api:v1.2.0"),
        "{}",
        prs[0]["title"]
    );
    assert_eq!(
        forge.count(Method::POST, "/repos/octo-org/manifests/pulls"),
        1
    );
    let second_head = git.git(repo, &["rev-parse", branch])?.trim().to_string();
    assert_ne!(second_head, first_head);
    assert_eq!(
        git.show(repo, branch, PRD_FILE)?,
        production_before.replace(":v1.0.0", ":v1.2.0")
    );
    assert_eq!(st.last_promotions.len(), 2);
    assert_eq!(
        st.last_promotions[1].tags["my-api"], "v1.1.0",
        "newest first"
    );
    Ok(())
}

/// Merging it (release moves to the branch): production matches, the pull request is not
/// needed any more and is closed.
async fn step_merging_closes_the_pull_request(c: &Seed001) -> anyhow::Result<()> {
    c.git
        .git(&c.repo, &["branch", "-f", "release", &c.branch])?;
    let p = c
        .wait("closed after merge", |p| {
            policy_condition(p, conditions::READY).is_some_and(|c| c.1 == "UpToDate")
        })
        .await?;
    assert!(
        p.status
            .as_ref()
            .is_some_and(|st| st.pull_request.is_none())
    );
    assert_eq!(c.forge.all()[0]["state"], "closed");
    Ok(())
}

/// The branch is the operator's only while it holds nothing but its own commit: after a
/// person pushes to it, it is never force-pushed again (Ready=False, GitError).
async fn step_a_branch_a_person_pushed_to_is_never_overwritten(c: &Seed001) -> anyhow::Result<()> {
    let Seed001 {
        s,
        git,
        repo,
        branch,
        ..
    } = c;
    let tree = format!("{branch}^{{tree}}");
    let foreign = git
        .git(
            repo,
            &[
                "-c",
                "user.name=A Person",
                "-c",
                "user.email=person@example.com",
                "commit-tree",
                &tree,
                "-p",
                branch,
                "-m",
                "a person's fix-up",
            ],
        )?
        .trim()
        .to_string();
    git.git(
        repo,
        &["update-ref", &format!("refs/heads/{branch}"), &foreign],
    )?;
    c.push_release("v1.3.0")?;
    s.wait_applied("my-api-stg", "v1.3.0").await?;
    let p = c
        .wait("refuses a branch it does not own", |p| {
            policy_condition(p, conditions::READY).is_some_and(|c| c.1 == "GitError")
        })
        .await?;
    let (_, _, message) = policy_condition(&p, conditions::READY).unwrap_or_default();
    assert!(
        message.contains("refusing to overwrite push branch"),
        "{message}"
    );
    assert!(message.contains("person@example.com"), "{message}");
    assert_eq!(git.git(repo, &["rev-parse", branch])?.trim(), foreign);
    Ok(())
}

/// The forge requests and the promotion are counted, and each pull request change is an Event.
async fn step_metrics_and_events_record_the_pull_request(c: &Seed001) -> anyhow::Result<()> {
    let s = &c.s;
    let metrics = s.operator.metrics().await?;
    assert!(
        metrics.contains("imagewatch_forge_requests_total{provider=\"github\",outcome=\"ok\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("imagewatch_promotions_total{outcome=\"pr_opened\"}"),
        "{metrics}"
    );
    let events = s.ground.kubectl(&[
        "get",
        "events.events.k8s.io",
        "-n",
        &s.ns.name,
        "-o",
        "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
    ])?;
    for reason in [
        "PullRequestOpened",
        "PullRequestUpdated",
        "PullRequestClosed",
    ] {
        assert!(events.contains(reason), "{events}");
    }
    Ok(())
}

/// Deleting a policy closes its pull request (the finalizer `imagewatch.dev/close-pull-request`
/// holds the deletion until then); with the forge failing, the deletion still completes once
/// the close timeout (5s here, 5m by default) has passed, and the pull request is left open.
#[tokio::test]
async fn deleting_a_policy_closes_its_pull_request() -> anyhow::Result<()> {
    let s = Scenario::start("promodel", &["--pull-request-close-timeout", "5s"]).await?;
    let registry = s.ground.registry()?;
    let sfx = random_suffix();
    let forge =
        step_apply_a_watch_and_two_policies_proposing_by_pull_request(&s, &registry, &sfx).await?;
    let policies: Api<PromotionPolicy> = Api::namespaced(s.admin.clone(), &s.ns.name);
    step_up_to_date_means_no_pull_request_and_no_finalizer(&s, &policies).await?;
    let (first, second) = step_each_policy_opens_a_pull_request_and_carries_the_finalizer(
        &s, &registry, &sfx, &policies, &forge,
    )
    .await?;
    step_a_deletion_closes_the_pull_request_once(&s, &policies, &forge, first, second).await?;
    step_with_the_forge_failing_the_deletion_completes_and_leaves_it_open(
        &s, &policies, &forge, first, second,
    )
    .await?;
    step_metrics_and_events_tell_the_close_and_the_give_up(&s, first, second).await
}

/// Whether the policy carries the finalizer that closes its pull request on deletion.
fn has_finalizer(p: &PromotionPolicy) -> bool {
    p.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == "imagewatch.dev/close-pull-request")
}

/// A staging ImageWatch and two policies proposing its tags by pull request to the GitHub
/// stub; returns the stub.
async fn step_apply_a_watch_and_two_policies_proposing_by_pull_request(
    s: &Scenario,
    registry: &Registry,
    sfx: &str,
) -> anyhow::Result<GithubStub> {
    let image = format!("{}/e2e/app-{sfx}/my-api", registry.host);
    registry.push(&format!("e2e/app-{sfx}/my-api"), "v1.0.0")?;
    let repo = format!("promodel-{}", s.ns.name);
    let url = seed_manifests(
        s,
        &repo,
        &[format!("{image}:v1.0.0")],
        &[format!("{image}:v1.0.0")],
    )?;
    let (forge, api_url) = github_forge(s).await?;
    let policy = |name: &str| {
        format!(
            r#"apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata: {{name: {name}, namespace: {ns}}}
spec:
  from: {{watchSelector: {{matchLabels: {{app: my-api, stage: stg}}}}}}
  to:
    git: {{url: "{url}", branch: main, secretRef: {{name: git-creds}}}}
    path: overlays/production
    branch: release
  mode: PullRequest
  pullRequest:
    provider: github
    apiUrl: "{api_url}"
    repository: octo-org/manifests
    secretRef: {{name: forge-token}}
  interval: 10s
"#,
            ns = s.ns.name
        )
    };
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata:
  name: my-api-stg
  namespace: {ns}
  labels: {{app: my-api, stage: stg}}
spec:
  image: {image}
  tags: {{pattern: "v*"}}
  interval: 10s
  credentials: {{secretRef: {{name: regcred}}}}
  git: {{url: "{url}", branch: main, secretRef: {{name: git-creds}}}}
  target:
    argocdSource: {{path: overlays/staging, application: my-api-stg, image: "{image}"}}
---
{a}---
{b}"#,
        ns = s.ns.name,
        a = policy("my-api"),
        b = policy("my-api-b"),
    ))?;
    Ok(forge)
}

/// Up to date: no pull request, so no finalizer.
async fn step_up_to_date_means_no_pull_request_and_no_finalizer(
    s: &Scenario,
    policies: &Api<PromotionPolicy>,
) -> anyhow::Result<()> {
    let p = wait_policy(s, policies, "my-api", "policy up to date", |p| {
        policy_condition(p, conditions::READY).is_some_and(|c| c.1 == "UpToDate")
    })
    .await?;
    assert!(!has_finalizer(&p), "{:?}", p.metadata.finalizers);
    Ok(())
}

/// A new staging tag: each policy opens its pull request and carries the finalizer.
/// Returns the two pull requests' numbers.
async fn step_each_policy_opens_a_pull_request_and_carries_the_finalizer(
    s: &Scenario,
    registry: &Registry,
    sfx: &str,
    policies: &Api<PromotionPolicy>,
    forge: &GithubStub,
) -> anyhow::Result<(i64, i64)> {
    registry.push(&format!("e2e/app-{sfx}/my-api"), "v1.1.0")?;
    s.wait_applied("my-api-stg", "v1.1.0").await?;
    let mut numbers = Vec::new();
    for name in ["my-api", "my-api-b"] {
        let p = wait_policy(s, policies, name, "pull request open", |p| {
            policy_condition(p, conditions::PULL_REQUEST_OPEN).is_some_and(|c| c.0 == "True")
        })
        .await?;
        assert!(has_finalizer(&p), "{name}: {:?}", p.metadata.finalizers);
        let pr = p
            .status
            .and_then(|st| st.pull_request)
            .expect("status.pullRequest");
        numbers.push(pr.number);
    }
    assert_eq!(forge.all().len(), 2);
    let (first, second) = (numbers[0], numbers[1]);
    Ok((first, second))
}

/// Deleted: the pull request is closed once, then the object goes.
async fn step_a_deletion_closes_the_pull_request_once(
    s: &Scenario,
    policies: &Api<PromotionPolicy>,
    forge: &GithubStub,
    first: i64,
    second: i64,
) -> anyhow::Result<()> {
    let state = |n: i64| forge.state(n);
    policies.delete("my-api", &DeleteParams::default()).await?;
    wait_deleted(s, policies, "my-api").await?;
    assert_eq!(
        *forge.closes.lock().unwrap(),
        vec![first],
        "closed exactly once"
    );
    assert_eq!(state(first), Some(json!("closed")));
    assert_eq!(state(second), Some(json!("open")));
    Ok(())
}

/// The forge fails: the deletion still completes after the close timeout, and the pull
/// request is left open.
async fn step_with_the_forge_failing_the_deletion_completes_and_leaves_it_open(
    s: &Scenario,
    policies: &Api<PromotionPolicy>,
    forge: &GithubStub,
    first: i64,
    second: i64,
) -> anyhow::Result<()> {
    let state = |n: i64| forge.state(n);
    forge.down.store(true, Ordering::SeqCst);
    policies
        .delete("my-api-b", &DeleteParams::default())
        .await?;
    let held = policies.get_opt("my-api-b").await?;
    assert!(
        held.as_ref().is_some_and(has_finalizer),
        "the finalizer holds the deletion first"
    );
    wait_deleted(s, policies, "my-api-b").await?;
    assert!(
        forge.count(
            Method::PATCH,
            &format!("/repos/octo-org/manifests/pulls/{second}")
        ) >= 1,
        "a close was tried"
    );
    assert_eq!(*forge.closes.lock().unwrap(), vec![first]);
    assert_eq!(state(second), Some(json!("open")));
    Ok(())
}

/// The metrics count one close and one give-up (and the failed attempts); Events tell both.
async fn step_metrics_and_events_tell_the_close_and_the_give_up(
    s: &Scenario,
    first: i64,
    second: i64,
) -> anyhow::Result<()> {
    let metrics = s.operator.metrics().await?;
    // One close, one give-up; the failed attempts before it (backoff from 2s) are counted.
    for line in [
        "imagewatch_promotions_total{outcome=\"pr_closed_on_delete\"} 1\n",
        "imagewatch_promotions_total{outcome=\"pr_left_open\"} 1\n",
        "imagewatch_promotions_total{outcome=\"pr_close_failed\"} ",
    ] {
        assert!(metrics.contains(line), "{line}: {metrics}");
    }
    let events = s.ground.kubectl(&[
        "get",
        "events.events.k8s.io",
        "-n",
        &s.ns.name,
        "-o",
        "jsonpath={range .items[*]}{.reason} {.regarding.name}: {.note}{\"\\n\"}{end}",
    ])?;
    assert!(
        events.contains(&format!(
            "PullRequestClosed my-api: closed #{first} https://github.test/octo-org/manifests/pull/{first}"
        )),
        "{events}"
    );
    assert!(
        events.contains("PullRequestCloseFailed my-api-b"),
        "{events}"
    );
    assert!(
        events.contains(&format!(
            "PullRequestLeftOpen my-api-b: gave up closing #{second} https://github.test/octo-org/manifests/pull/{second}"
        )),
        "{events}"
    );
    Ok(())
}

/// What the steps of the Commit-mode promotion share: the manifests repository, the staging
/// Application its gate reads, and the scenario (run with a signing key).
struct CommitMode {
    /// The OpenPGP key the operator signs with.
    signing_key: PathBuf,
    argocd: ArgoCd,
    git: GitServer,
    /// The staging and production image prefixes.
    stg: String,
    prd: String,
    repo: String,
    url: String,
    /// main's head commit, which staging's Application deploys.
    main_head: String,
    /// The staging Application.
    app_name: String,
    policies: Api<PromotionPolicy>,
    s: Scenario,
}

#[tokio::test]
async fn commit_mode_behind_application_and_approval_then_a_pinned_rollback() -> anyhow::Result<()>
{
    let (c, app) = step_seed_manifests_and_a_staging_application_that_is_not_healthy().await?;
    step_the_application_gate_holds_while_staging_is_not_healthy(&c).await?;
    let id = step_staging_healthy_leaves_only_approval_missing(&c).await?;
    step_an_approval_lands_one_signed_commit_on_release(&c, &id).await?;
    step_a_pinned_rollback_needs_and_gets_its_own_approval(&c, &id).await?;
    app.delete(&c.s.admin).await?;
    Ok(())
}

/// Signed commits; manifests with staging ahead of production; a staging Application
/// whose overlay Argo CD cannot render.
async fn step_seed_manifests_and_a_staging_application_that_is_not_healthy()
-> anyhow::Result<(CommitMode, AppGuard)> {
    // Promotion commits are signed like every other commit.
    let signing_key = imagewatch_e2e::setup::signing_key("openpgp-ed25519.asc");
    let s = Scenario::start(
        "promo-commit",
        &["--signing-key", &signing_key.display().to_string()],
    )
    .await?;
    let argocd = ArgoCd::get(s.ground)?;
    let git = s.ground.git()?;
    let sfx = random_suffix();
    let stg = format!("registry.example.com/stg-{sfx}");
    let prd = format!("registry.example.com/prd-{sfx}");
    let repo = format!("promo-commit-{}", s.ns.name);
    let url = seed_manifests(
        &s,
        &repo,
        &[
            format!("{stg}/my-api:v2.0.0"),
            format!("{stg}/my-api-worker:v2.0.0"),
        ],
        &[
            format!("{prd}/my-api:v1.0.0"),
            format!("{prd}/my-api-worker:v1.0.0"),
        ],
    )?;
    let main_head = git.git(&repo, &["rev-parse", "main"])?.trim().to_string();
    // Staging as Argo CD deploys it: the overlay names a base the repository lacks, so Argo CD
    // cannot render it and the Application is not Healthy.
    argocd.add_git_repository(&format!("repo-{}", s.ns.name), &url)?;
    let app_name = format!("stg-{}", s.ns.name);
    let app = argocd.apply(
        &argocd.application(&app_name, &url, "overlays/staging", &s.ns.name),
        &[&app_name],
    )?;
    let policies: Api<PromotionPolicy> = Api::namespaced(s.admin.clone(), &s.ns.name);
    Ok((
        CommitMode {
            signing_key,
            argocd,
            git,
            stg,
            prd,
            repo,
            url,
            main_head,
            app_name,
            policies,
            s,
        },
        app,
    ))
}

/// A policy promoting the staging overlay itself (from.path) in mode Commit on release,
/// behind the Application and approval gates: the Application gate holds, naming it.
async fn step_the_application_gate_holds_while_staging_is_not_healthy(
    c: &CommitMode,
) -> anyhow::Result<()> {
    let CommitMode {
        argocd,
        stg,
        prd,
        url,
        app_name,
        policies,
        s,
        ..
    } = c;
    // Source: the staging overlay itself (from.path); mode Commit on release.
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata: {{name: my-api, namespace: {ns}}}
spec:
  from: {{path: overlays/staging}}
  to:
    git: {{url: "{url}", branch: main, secretRef: {{name: git-creds}}}}
    path: overlays/production
    branch: release
    imageRewrite: [{{from: "{stg}/", to: "{prd}/"}}]
  gates:
    application: {{name: {app_name}, namespace: {argo}}}
    approval: true
  mode: Commit
  interval: 10s
"#,
        ns = s.ns.name,
        argo = argocd.namespace
    ))?;
    let p = wait_policy(s, policies, "my-api", "ApplicationNotHealthy", |p| {
        policy_condition(p, conditions::GATES_PASSING)
            .is_some_and(|c| c.1 == "ApplicationNotHealthy")
    })
    .await?;
    assert!(
        policy_condition(&p, conditions::GATES_PASSING)
            .is_some_and(|c| c.2.contains(app_name.as_str())),
        "{:?}",
        policy_condition(&p, conditions::GATES_PASSING)
    );
    Ok(())
}

/// Staging now deploys what Argo CD can render (a ConfigMap): Argo CD reports it Synced
/// and Healthy at main's head, and only approval is missing. Returns the candidate's id.
async fn step_staging_healthy_leaves_only_approval_missing(
    c: &CommitMode,
) -> anyhow::Result<String> {
    let CommitMode {
        argocd,
        git,
        repo,
        url,
        main_head,
        app_name,
        policies,
        s,
        ..
    } = c;
    s.apply(&argocd.application(app_name, url, "argo/healthy", &s.ns.name))?;
    argocd
        .wait_synced_healthy(&s.admin, app_name, Some(main_head))
        .await?;
    let p = wait_policy(s, policies, "my-api", "AwaitingApproval", |p| {
        policy_condition(p, conditions::GATES_PASSING).is_some_and(|c| c.1 == "AwaitingApproval")
    })
    .await?;
    let st = p.status.clone().unwrap_or_default();
    assert_eq!(st.gates_summary.as_deref(), Some("1/2"));
    let id = st.candidate_id.clone().expect("candidateId");
    assert_eq!(git.commit_count(repo, "release")?, 1, "nothing written yet");
    Ok(id)
}

/// A person approves exactly this candidate; one signed commit lands on release.
async fn step_an_approval_lands_one_signed_commit_on_release(
    c: &CommitMode,
    id: &str,
) -> anyhow::Result<()> {
    let CommitMode {
        signing_key,
        git,
        prd,
        repo,
        policies,
        s,
        ..
    } = c;
    s.ground.kubectl(&[
        "annotate",
        "promotionpolicy",
        "my-api",
        "-n",
        &s.ns.name,
        &format!("imagewatch.dev/approve={id}"),
    ])?;
    let p = wait_policy(s, policies, "my-api", "Committed", |p| {
        policy_condition(p, conditions::READY).is_some_and(|c| c.1 == "Committed")
    })
    .await?;
    let st = p.status.clone().unwrap_or_default();
    let release = git.git(repo, &["rev-parse", "release"])?.trim().to_string();
    assert_eq!(
        st.last_promotions[0].commit.as_deref(),
        Some(release.as_str())
    );
    assert!(st.last_promotions[0].pull_request.is_none());
    assert_eq!(
        policy_condition(&p, conditions::PULL_REQUEST_OPEN)
            .map(|c| c.1)
            .as_deref(),
        Some("NotApplicable")
    );
    let file = git.show(repo, "release", PRD_FILE)?;
    assert!(file.contains(&format!("{prd}/my-api:v2.0.0")), "{file}");
    assert!(
        file.contains(&format!("{prd}/my-api-worker:v2.0.0")),
        "{file}"
    );
    let message = git.git(repo, &["log", "-1", "--format=%an%n%B", "release"])?;
    assert!(
        message.starts_with(
            "imagewatch\nPromote my-api:v2.0.0, my-api-worker:v2.0.0 to overlays/production"
        ),
        "{message}"
    );
    let verdict =
        imagewatch_e2e::setup::verify_openpgp_commit(&git.repo_dir(repo), "release", signing_key)?;
    assert!(
        verdict.contains("[GNUPG:] VALIDSIG 0C038580A4A2A3E0A9012C8578A564EBDC3E3DA9 "),
        "{verdict}"
    );
    Ok(())
}

/// Rollback: pin the previous tags. A new candidate needs a new approval, and the file is
/// restored byte for byte.
async fn step_a_pinned_rollback_needs_and_gets_its_own_approval(
    c: &CommitMode,
    id: &str,
) -> anyhow::Result<()> {
    let CommitMode {
        git,
        repo,
        policies,
        s,
        ..
    } = c;
    s.ground.kubectl(&[
        "patch",
        "promotionpolicy",
        "my-api",
        "-n",
        &s.ns.name,
        "--type=merge",
        "-p",
        r#"{"spec":{"pin":{"my-api":"v1.0.0","my-api-worker":"v1.0.0"}}}"#,
    ])?;
    let p = wait_policy(s, policies, "my-api", "rollback awaits approval", |p| {
        policy_condition(p, conditions::GATES_PASSING).is_some_and(|c| c.1 == "AwaitingApproval")
            && p.status.as_ref().and_then(|st| st.candidate_id.as_deref()) != Some(id)
    })
    .await?;
    let rollback_id = p
        .status
        .and_then(|st| st.candidate_id)
        .expect("candidateId");
    s.ground.kubectl(&[
        "annotate",
        "--overwrite",
        "promotionpolicy",
        "my-api",
        "-n",
        &s.ns.name,
        &format!("imagewatch.dev/approve={rollback_id}"),
    ])?;
    let p = wait_policy(s, policies, "my-api", "rolled back", |p| {
        p.status
            .as_ref()
            .is_some_and(|st| st.last_promotions.len() == 2)
    })
    .await?;
    let st = p.status.unwrap_or_default();
    assert_eq!(st.last_promotions[0].tags["my-api"], "v1.0.0");
    assert_eq!(st.last_promotions[1].tags["my-api"], "v2.0.0");
    assert_eq!(
        git.show(repo, "release", PRD_FILE)?,
        git.show(repo, "release~2", PRD_FILE)?,
        "the rollback restores the file byte for byte"
    );
    assert_eq!(git.commit_count(repo, "release")?, 3);
    Ok(())
}

#[tokio::test]
async fn image_exists_asks_ecr_with_the_operators_aws_identity() -> anyhow::Result<()> {
    let ground = imagewatch_e2e::Ground::get()?;
    let moto_url = ground.var("IMAGEWATCH_MOTO_URL")?.to_string();
    let aws_env = moto_credentials(ground)?;
    let env: Vec<(&str, &str)> = aws_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let s = Scenario::start_with_env("promo-ecr", &["--aws-endpoint-url", &moto_url], &env).await?;
    let sfx = random_suffix();
    let name = format!("promo/my-api-{sfx}");
    // Staging's account is not moto's; production's (moto's default account) is asked.
    let stg = "111111111111.dkr.ecr.us-east-1.amazonaws.com";
    let prd = "123456789012.dkr.ecr.us-east-1.amazonaws.com";
    moto(&["create-repository", &name], &aws_env)?;
    moto(&["put-image", &name, "v1.0.0"], &aws_env)?;
    let repo = format!("promo-ecr-{}", s.ns.name);
    let url = seed_manifests(
        &s,
        &repo,
        &[format!("{stg}/{name}:v1.1.0")],
        &[format!("{prd}/{name}:v1.0.0")],
    )?;
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata: {{name: ecr, namespace: {ns}}}
spec:
  from: {{path: overlays/staging}}
  to:
    git: {{url: "{url}", branch: main, secretRef: {{name: git-creds}}}}
    path: overlays/production
    branch: release
    imageRewrite: [{{from: "{stg}/", to: "{prd}/"}}]
  gates: {{imageExists: true}}
  mode: Commit
  interval: 10s
"#,
        ns = s.ns.name
    ))?;
    let policies: Api<PromotionPolicy> = Api::namespaced(s.admin.clone(), &s.ns.name);
    let p = wait_policy(&s, &policies, "ecr", "ImageMissing in ECR", |p| {
        policy_condition(p, conditions::GATES_PASSING).is_some_and(|c| c.1 == "ImageMissing")
    })
    .await?;
    assert!(
        policy_condition(&p, conditions::GATES_PASSING)
            .is_some_and(|c| c.2.contains(&format!("{prd}/{name}:v1.1.0"))),
        "{:?}",
        policy_condition(&p, conditions::GATES_PASSING)
    );
    let git = s.ground.git()?;
    assert_eq!(git.commit_count(&repo, "release")?, 1);

    moto(&["put-image", &name, "v1.1.0"], &aws_env)?;
    wait_policy(&s, &policies, "ecr", "committed once ECR has it", |p| {
        policy_condition(p, conditions::READY).is_some_and(|c| c.1 == "Committed")
    })
    .await?;
    let file = git.show(&repo, "release", PRD_FILE)?;
    assert!(file.contains(&format!("{prd}/{name}:v1.1.0")), "{file}");
    Ok(())
}
