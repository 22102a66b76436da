//! imagewatch beside Argo CD Image Updater (built by `e2e/scripts/peer-build.sh`), in the same
//! run on the same registry, git server, API server, Argo CD and node, with the same apps and
//! pushes.
//!
//! Each scenario has N apps; app `i` runs image `<prefix>/app-<i>` (a repository of its own,
//! a runnable image) from `apps/app-<i>/` (a Kustomize directory holding one Deployment). Each
//! tool has a manifests repository of its own and its own Applications in Argo CD's namespace
//! deploying it into the scenario's namespace: `iw-<i>` for imagewatch (which writes
//! `.argocd-source-iw-<i>.yaml` through `argocdSource` targets), `iu-<i>` for the peer (one
//! `ImageUpdater` in Argo CD's namespace, `git` write-back, `.argocd-source-iu-<i>.yaml`).
//! The ground's Argo CD syncs them (automated) and the node runs their Pods; nothing here
//! writes an Application's status: the peer reads the running tag from what Argo CD reports.
//!
//! Pushes go to the registry through its API; once the registry answered a push, the same
//! Harbor `PUSH_ARTIFACT` payload goes to both tools' webhooks at once. A push's latency to
//! commit is the moment its new tag is first on the remote branch (polled every 10 ms) minus
//! the moment the registry answered its `PUT`; to running, the moment a watch on the
//! namespace's Pods first reports a Pod of the tool's Deployment running the new image with
//! `Ready=True`, minus the same moment.
//!
//! Getting a commit deployed: imagewatch asks Argo CD to refresh the Applications deploying
//! the file it changed (`--argocd-refresh`, on by default). Image Updater does not; as shipped,
//! Argo CD finds its commit at its next reconciliation (`timeout.reconciliation`, 120 s plus up
//! to 60 s jitter by default, and the repo-server's 3-minute revision cache). A Git server
//! would send Argo CD a push webhook (argocd-server's `/api/webhook`), which refreshes every
//! Application of the pushed repository; no argocd-server runs here, so the bench does what
//! that handler does: it polls the peer's manifests repository every 10 ms and, when `main`
//! moves, sets `argocd.argoproj.io/refresh: normal` on every `iu-<i>`
//! (`IMAGEWATCH_BENCH_IU_GIT_WEBHOOK=0`: the peer as shipped, without it).
//!
//! The peer runs at its best settings for speed: `--interval` as short as given
//! (`IMAGEWATCH_BENCH_IU_INTERVAL`, default 10s), `--max-concurrent-apps 100` and
//! `--max-concurrent-reconciles 10` (the highest each accepts), its webhook enabled, and a
//! registry limit of 1,000 requests/s. imagewatch runs at its defaults (100 requests/s,
//! burst 200; watches polling hourly, so its path is the webhook alone).

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use imagewatch_crd::ImageWatch;
use imagewatch_e2e::{
    Ground, NotifyingRegistry,
    argocd::{AppGuard, ArgoCd},
    bench::{Latencies, RegistryRequests, count_registry_requests, count_registry_requests_by},
    ground::{dockerconfigjson, random_suffix},
    node::trust_registry,
    oci_push::sha256_digest,
    operator::free_port,
    setup::create_secret,
};
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
    },
    runtime::{WatchStreamExt as _, watcher},
};
use reqwest::{StatusCode, header};
use tokio::sync::Notify;

use crate::{
    common::{CREATE_CONCURRENCY, Setup, applied_tag, file_len, read_range},
    pushes::probe,
};

/// The peer and where its sources are.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The `argocd-image-updater` binary.
    pub binary: PathBuf,
    /// Its source (`config/crd/bases/` is applied from there).
    pub source: PathBuf,
    /// Its `--interval`.
    pub interval: String,
    /// What `version --short` says.
    pub version: String,
    /// Whether the bench refreshes the peer's Applications when its repository's `main`
    /// moves, as argocd-server's Git webhook would.
    pub git_webhook: bool,
}

/// One side-by-side scenario.
#[derive(Debug, Clone, Copy)]
pub struct PeerPlan {
    /// Apps per tool (= image repositories = pushes per round).
    pub apps: usize,
    /// Rounds of one push per app, one after the other.
    pub rounds: usize,
}

/// What one tool did in one scenario.
#[derive(Debug, Default)]
pub struct ToolResult {
    /// Per-push latencies to the commit, over every round.
    pub latencies: Option<Latencies>,
    /// Pushes never seen in Git.
    pub missing: usize,
    /// Per round: first `PUT` answered → last of this tool's tags in Git.
    pub all_in: Vec<Duration>,
    /// Per-push latencies to a Ready Pod of the new image, over every round.
    pub running: Option<Latencies>,
    /// Pushes whose image never ran.
    pub not_running: usize,
    /// Per round: first `PUT` answered → last of this tool's Pods Ready.
    pub all_running: Vec<Duration>,
    /// Commits on its manifests repository during the rounds.
    pub commits: usize,
    /// Its registry requests during the rounds.
    pub requests: RegistryRequests,
}

/// One scenario, both tools.
#[derive(Debug)]
pub struct PeerResult {
    pub plan: PeerPlan,
    pub imagewatch: ToolResult,
    pub peer: ToolResult,
    /// Refreshes the bench's Git-webhook stand-in asked for (peer's Applications).
    pub webhook_refreshes: usize,
}

/// How long a round may take before the scenario gives up on the pushes not yet in Git.
pub const DEADLINE: Duration = Duration::from_secs(300);
/// How long a round may take before the scenario gives up on the Pods not yet Ready (without
/// the Git-webhook stand-in the peer's commits wait for Argo CD's reconciliation: up to 3
/// minutes of revision cache, then up to 3 minutes to the next reconciliation).
pub const RUN_DEADLINE: Duration = Duration::from_secs(480);

const IMAGE_UPDATER: (&str, &str, &str) = (
    "argocd-image-updater.argoproj.io",
    "v1alpha1",
    "ImageUpdater",
);
const TOOLS: [&str; 2] = ["iw", "iu"];

fn resource((group, version, kind): (&str, &str, &str)) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// The peer's process, killed when dropped.
struct PeerProcess {
    child: Child,
    log: PathBuf,
}

impl PeerProcess {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Argo CD's reconciliation as the ground runs it, for the report.
pub fn argocd_reconciliation(ground: &Ground) -> String {
    let configured = ground
        .kubectl(&[
            "-n",
            ground
                .var("IMAGEWATCH_ARGOCD_NAMESPACE")
                .unwrap_or("argocd"),
            "get",
            "configmap",
            "argocd-cm",
            "-o",
            "jsonpath={.data.timeout\\.reconciliation}",
        ])
        .unwrap_or_default();
    match configured.trim() {
        "" => "timeout.reconciliation 120 s (the default) + up to 60 s jitter".into(),
        value => format!("timeout.reconciliation {value}"),
    }
}

/// Applies Image Updater's own CRD from its source (server-side) and waits until it is served.
/// Argo CD's Application CRD is the ground's (installed by `argocd.sh`).
fn apply_crd(setup: &Setup, peer: &Peer) -> anyhow::Result<()> {
    let ground = setup.ground;
    let crds = peer.source.join("config/crd/bases");
    anyhow::ensure!(crds.exists(), "{} does not exist", crds.display());
    ground.kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        crds.to_str().unwrap_or_default(),
    ])?;
    ground.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/imageupdaters.argocd-image-updater.argoproj.io",
    ])?;
    Ok(())
}

/// The node must hold both tools' Pods at once (one per app each; `Recreate` never adds a
/// second during a rollout).
fn check_node_room(setup: &Setup, pods: usize) -> anyhow::Result<()> {
    let node = setup.ground.var("IMAGEWATCH_NODE_NAME").map_err(|e| {
        anyhow::anyhow!("the side-by-side bench runs Pods on the ground's node: {e}")
    })?;
    let allocatable: usize = setup
        .ground
        .kubectl(&[
            "get",
            "node",
            node,
            "-o",
            "jsonpath={.status.allocatable.pods}",
        ])?
        .trim()
        .parse()
        .context("the node's allocatable pods")?;
    let used = setup
        .ground
        .kubectl(&[
            "get",
            "pods",
            "-A",
            "--field-selector",
            &format!("spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"),
            "-o",
            "name",
        ])?
        .lines()
        .count();
    anyhow::ensure!(
        used + pods <= allocatable,
        "the scenario needs {pods} Pods on the node, which holds {allocatable} and runs {used}: \
         choose fewer apps (IMAGEWATCH_BENCH_PEER)"
    );
    Ok(())
}

/// An app's Kustomize directory: one Deployment `name` of `image` on the node.
fn kustomize_dir(name: &str, image: &str) -> [(String, String); 2] {
    [
        (
            "kustomization.yaml".into(),
            "resources:\n  - deployment.yaml\n".into(),
        ),
        (
            "deployment.yaml".into(),
            format!(
                r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: 1
  strategy: {{type: Recreate}}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      hostNetwork: true
      terminationGracePeriodSeconds: 1
      tolerations: [{{key: imagewatch.dev/e2e-node, operator: Exists, effect: NoSchedule}}]
      imagePullSecrets: [{{name: benchreg}}]
      containers:
        - name: app
          image: {image}
"#
            ),
        ),
    ]
}

fn harbor_payload(host: &str, repository: &str, tag: &str, digest: &str) -> serde_json::Value {
    let (namespace, name) = repository.rsplit_once('/').unwrap_or(("", repository));
    serde_json::json!({
        "type": "PUSH_ARTIFACT",
        "occur_at": jiff::Timestamp::now().as_second(),
        "operator": "bench",
        "event_data": {
            "resources": [{
                "digest": digest,
                "tag": tag,
                "resource_url": format!("{host}/{repository}:{tag}"),
            }],
            "repository": {
                "name": name,
                "namespace": namespace,
                "repo_full_name": repository,
                "repo_type": "private",
            },
        },
    })
}

/// A runnable image (`push-image.sh --runnable`) pushed again through the registry API: its
/// blobs are mounted into each repository once, and each push is one manifest `PUT` (the
/// image's manifest with the reference as an annotation, so each tag has a digest of its own).
struct RunnableImage {
    http: reqwest::Client,
    base_url: String,
    auth: String,
    repository: String,
    manifest: serde_json::Value,
    media_type: String,
    blobs: Vec<String>,
}

impl RunnableImage {
    /// Reads the manifest of `repository:tag` (pushed by `push-image.sh --runnable`).
    async fn fetch(
        host: &str,
        user: &str,
        password: &str,
        repository: &str,
        tag: &str,
    ) -> anyhow::Result<Self> {
        use base64::Engine as _;
        let auth = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .timeout(Duration::from_secs(60))
            .build()?;
        let base_url = format!("http://{host}");
        let response = http
            .get(format!("{base_url}/v2/{repository}/manifests/{tag}"))
            .header(header::AUTHORIZATION, &auth)
            .header(
                header::ACCEPT,
                "application/vnd.oci.image.manifest.v1+json, \
                 application/vnd.docker.distribution.manifest.v2+json",
            )
            .send()
            .await?;
        anyhow::ensure!(
            response.status() == StatusCode::OK,
            "reading {repository}:{tag}: {}",
            response.status()
        );
        let manifest: serde_json::Value = response.json().await?;
        let media_type = manifest
            .get("mediaType")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("application/vnd.oci.image.manifest.v1+json")
            .to_string();
        anyhow::ensure!(
            media_type.ends_with("manifest.v1+json") || media_type.ends_with("manifest.v2+json"),
            "{repository}:{tag} is a {media_type}, not one image manifest"
        );
        let mut blobs = vec![
            manifest
                .pointer("/config/digest")
                .and_then(serde_json::Value::as_str)
                .context("a manifest without config")?
                .to_string(),
        ];
        for layer in manifest
            .get("layers")
            .and_then(serde_json::Value::as_array)
            .context("a manifest without layers")?
        {
            blobs.push(
                layer
                    .get("digest")
                    .and_then(serde_json::Value::as_str)
                    .context("a layer without digest")?
                    .to_string(),
            );
        }
        Ok(Self {
            http,
            base_url,
            auth,
            repository: repository.to_string(),
            manifest,
            media_type,
            blobs,
        })
    }

    /// Mounts the image's blobs into `repository`.
    async fn mount(&self, repository: &str) -> anyhow::Result<()> {
        for digest in &self.blobs {
            let mut url =
                reqwest::Url::parse(&format!("{}/v2/{repository}/blobs/uploads/", self.base_url))?;
            url.query_pairs_mut()
                .append_pair("mount", digest)
                .append_pair("from", &self.repository);
            let response = self
                .http
                .post(url)
                .header(header::AUTHORIZATION, &self.auth)
                .send()
                .await?;
            anyhow::ensure!(
                response.status() == StatusCode::CREATED,
                "mounting {digest} into {repository}: {}",
                response.status()
            );
        }
        Ok(())
    }

    /// Pushes `repository:tag`; returns the manifest digest once the registry answered.
    async fn push(&self, repository: &str, tag: &str) -> anyhow::Result<String> {
        let mut manifest = self.manifest.clone();
        manifest
            .as_object_mut()
            .context("a manifest that is not an object")?
            .insert(
                "annotations".into(),
                serde_json::json!({"dev.imagewatch.bench": format!("{repository}:{tag}")}),
            );
        let bytes = serde_json::to_vec(&manifest)?;
        let digest = sha256_digest(&bytes);
        let response = self
            .http
            .put(format!("{}/v2/{repository}/manifests/{tag}", self.base_url))
            .header(header::AUTHORIZATION, &self.auth)
            .header(header::CONTENT_TYPE, &self.media_type)
            .body(bytes)
            .send()
            .await?;
        anyhow::ensure!(
            response.status() == StatusCode::CREATED,
            "pushing {repository}:{tag}: {} {}",
            response.status(),
            response.text().await.unwrap_or_default()
        );
        Ok(digest)
    }
}

/// When a Pod of each Deployment (its `app` label) first ran each image with `Ready=True`, as
/// a watch on the namespace's Pods reports it.
struct ReadyPods {
    seen: Arc<Mutex<HashMap<(String, String), Instant>>>,
    changed: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl ReadyPods {
    fn start(pods: Api<Pod>) -> Self {
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let changed = Arc::new(Notify::new());
        let (map, notify) = (seen.clone(), changed.clone());
        let task = tokio::spawn(async move {
            let stream = watcher(pods, watcher::Config::default())
                .default_backoff()
                .applied_objects();
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                let Ok(pod) = event else { continue };
                let at = Instant::now();
                if pod.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let app = pod
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("app"))
                    .cloned();
                let image = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.first())
                    .and_then(|c| c.image.clone());
                let ready = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                if let (Some(app), Some(image), true) = (app, image, ready) {
                    map.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry((app, image))
                        .or_insert(at);
                    notify.notify_waiters();
                }
            }
        });
        Self {
            seen,
            changed,
            task,
        }
    }

    /// Waits until every `(app, image)` of `wanted` ran, or `deadline`; returns what did.
    async fn wait(
        &self,
        wanted: &[(String, String)],
        deadline: Instant,
    ) -> HashMap<(String, String), Instant> {
        loop {
            let notified = self.changed.notified();
            futures::pin_mut!(notified);
            notified.as_mut().enable();
            let found: HashMap<(String, String), Instant> = {
                let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
                wanted
                    .iter()
                    .filter_map(|k| seen.get(k).map(|at| (k.clone(), *at)))
                    .collect()
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            if found.len() == wanted.len() || remaining.is_zero() {
                return found;
            }
            let _ = tokio::time::timeout(remaining, notified).await;
        }
    }
}

impl Drop for ReadyPods {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What argocd-server's Git webhook handler does on a push to the peer's repository, done by
/// the bench: when `main` moves, every Application of that repository is asked to refresh.
struct GitWebhook {
    stop: Arc<AtomicBool>,
    poller: Option<std::thread::JoinHandle<()>>,
    refresher: tokio::task::JoinHandle<usize>,
}

impl GitWebhook {
    fn start(repo_dir: PathBuf, apps: Api<DynamicObject>, names: Vec<String>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let flag = stop.clone();
        let poller = std::thread::spawn(move || {
            let Ok(repo) = git2::Repository::open_bare(&repo_dir) else {
                return;
            };
            let mut head = repo.refname_to_id("refs/heads/main").ok();
            // Polled as the commit probe polls (every 10 ms): a webhook would not be faster.
            while !flag.load(Ordering::Relaxed) {
                let now = repo.refname_to_id("refs/heads/main").ok();
                if now != head {
                    head = now;
                    if tx.send(()).is_err() {
                        return;
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let refresher = tokio::spawn(async move {
            let mut sent = 0;
            let patch = serde_json::json!({
                "metadata": {"annotations": {"argocd.argoproj.io/refresh": "normal"}}
            });
            while rx.recv().await.is_some() {
                let mut requests = tokio::task::JoinSet::new();
                for name in &names {
                    let (apps, patch, name) = (apps.clone(), patch.clone(), name.clone());
                    requests.spawn(async move {
                        apps.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                            .await
                            .is_ok()
                    });
                }
                while let Some(done) = requests.join_next().await {
                    sent += usize::from(matches!(done, Ok(true)));
                }
            }
            sent
        });
        Self {
            stop,
            poller: Some(poller),
            refresher,
        }
    }

    /// Stops it; the refreshes it asked for.
    async fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(poller) = self.poller.take() {
            let _ = tokio::task::spawn_blocking(move || poller.join()).await;
        }
        (&mut self.refresher).await.unwrap_or(0)
    }
}

impl Drop for GitWebhook {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Deletes what a scenario put into Argo CD's namespace (repository Secrets, the
/// ImageUpdater) when dropped.
struct ArgoObjects {
    ground: &'static Ground,
    namespace: String,
    objects: Vec<(&'static str, String)>,
}

impl Drop for ArgoObjects {
    fn drop(&mut self) {
        for (kind, name) in &self.objects {
            let _ = self.ground.kubectl_try(
                &[
                    "delete",
                    kind,
                    name,
                    "-n",
                    &self.namespace,
                    "--ignore-not-found",
                    "--wait=false",
                ],
                None,
            );
        }
    }
}

/// Waits until every named Application is Synced and Healthy and reports exactly `image(i)`
/// running (`status.summary.images`, which Argo CD fills from the Pods).
async fn wait_apps_running(
    argocd: &ArgoCd,
    apps: &Api<DynamicObject>,
    names: &[(String, String)],
    timeout: Duration,
) -> anyhow::Result<()> {
    let wanted: HashMap<&str, &str> = names
        .iter()
        .map(|(n, i)| (n.as_str(), i.as_str()))
        .collect();
    let result = imagewatch_e2e::wait_until(
        "the Applications Synced, Healthy and running their image",
        timeout,
        || async {
            let list = apps.list(&Default::default()).await?;
            let mut pending = Vec::new();
            let mut done = 0;
            for app in &list.items {
                let name = app.metadata.name.as_deref().unwrap_or_default();
                let Some(image) = wanted.get(name) else {
                    continue;
                };
                let text = |p: &str| app.data.pointer(p).and_then(serde_json::Value::as_str);
                let images: Vec<&str> = app
                    .data
                    .pointer("/status/summary/images")
                    .and_then(serde_json::Value::as_array)
                    .map(|a| a.iter().filter_map(serde_json::Value::as_str).collect())
                    .unwrap_or_default();
                if text("/status/sync/status") == Some("Synced")
                    && text("/status/health/status") == Some("Healthy")
                    && images == [*image]
                {
                    done += 1;
                } else if pending.len() < 3 {
                    pending.push(format!(
                        "{name}: {:?}/{:?} {images:?}",
                        text("/status/sync/status"),
                        text("/status/health/status")
                    ));
                }
            }
            if done == wanted.len() {
                return Ok(Some(()));
            }
            anyhow::bail!("{done} of {} done; {}", wanted.len(), pending.join("; "))
        },
    )
    .await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\n--- Argo CD ---\n{}", argocd.log_tail(20)))
}

pub async fn run(peer: &Peer, plan: PeerPlan) -> anyhow::Result<PeerResult> {
    let n = plan.apps;
    let registry = NotifyingRegistry::start("", "")?;
    let host = registry.var("IMAGEWATCH_REGISTRY");
    let user = registry.var("IMAGEWATCH_REGISTRY_USER");
    let password = registry.var("IMAGEWATCH_REGISTRY_PASSWORD");
    let hook_token = format!("bench-{}", random_suffix());

    let mut setup = Setup::new("peer").await?;
    let ns = setup.ns.name.clone();
    let ground = setup.ground;
    let argocd = ArgoCd::get(ground)?;
    let argo_ns = argocd.namespace.clone();
    check_node_room(&setup, 2 * n)?;
    trust_registry(ground, &host)?;
    apply_crd(&setup, peer)?;
    create_secret(
        &setup.admin,
        &ns,
        "hooks",
        "Opaque",
        &[("harbor-token", &hook_token)],
    )
    .await?;
    setup
        .registry_secret("benchreg", &dockerconfigjson(&host, &user, &password))
        .await?;
    let git = ground.git()?;
    // The peer's Git credentials live with the Applications: it refuses a Secret of another
    // namespace.
    let iu_git = format!("bench-{ns}-iu-git");
    create_secret(
        &setup.admin,
        &argo_ns,
        &iu_git,
        "Opaque",
        &[("username", &git.user), ("password", &git.token)],
    )
    .await?;

    // Image repositories at v1.0.0, each a runnable image.
    let prefix = format!("peer-{}", random_suffix());
    let repos: Vec<String> = (0..n).map(|i| format!("{prefix}/app-{i}")).collect();
    registry.script(
        "push-image.sh",
        &["--runnable", &format!("{prefix}/base:seed")],
    )?;
    let image =
        RunnableImage::fetch(&host, &user, &password, &format!("{prefix}/base"), "seed").await?;
    futures::stream::iter(&repos)
        .map(|r| {
            let image = &image;
            async move {
                image.mount(r).await?;
                image.push(r, "v1.0.0").await
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;

    // The same apps in two manifests repositories, one per tool; Deployments named after the
    // Applications (both deploy into this namespace).
    let repo_names = [format!("peer-{ns}-iw"), format!("peer-{ns}-iu")];
    let mut urls = Vec::new();
    for (tool, repo_name) in TOOLS.iter().zip(&repo_names) {
        let files: Vec<(String, String)> = (0..n)
            .flat_map(|i| {
                kustomize_dir(
                    &format!("{tool}-{i}"),
                    &format!("{host}/{}:v1.0.0", repos[i]),
                )
                .map(|(name, text)| (format!("apps/app-{i}/{name}"), text))
            })
            .collect();
        urls.push(setup.git_repo(repo_name, &files)?);
    }
    let mut argo_objects = ArgoObjects {
        ground,
        namespace: argo_ns.clone(),
        objects: vec![("secret", iu_git.clone())],
    };
    for (repo_name, url) in repo_names.iter().zip(&urls) {
        argocd.add_git_repository(repo_name, url)?;
        argo_objects.objects.push(("secret", repo_name.clone()));
    }

    // The Applications, synced by Argo CD (automated).
    let app_names: Vec<Vec<String>> = TOOLS
        .iter()
        .map(|tool| (0..n).map(|i| format!("{tool}-{i}")).collect())
        .collect();
    let yaml = TOOLS
        .iter()
        .enumerate()
        .flat_map(|(t, _)| {
            let (argocd, urls, ns) = (&argocd, &urls, &ns);
            app_names[t].iter().enumerate().map(move |(i, name)| {
                argocd.application(name, &urls[t], &format!("apps/app-{i}"), ns)
            })
        })
        .collect::<Vec<_>>()
        .join("---\n");
    let all_names: Vec<&str> = app_names.iter().flatten().map(String::as_str).collect();
    let app_guard: AppGuard = argocd.apply(&yaml, &all_names)?;
    let apps = argocd.applications(&setup.admin);
    let running_at = |tag: &str| -> Vec<(String, String)> {
        app_names
            .iter()
            .flat_map(|names| {
                names
                    .iter()
                    .enumerate()
                    .map(|(i, name)| (name.clone(), format!("{host}/{}:{tag}", repos[i])))
            })
            .collect()
    };

    // imagewatch.
    let iw_hook = format!("127.0.0.1:{}", free_port()?);
    let operator = setup.start_operator(&[
        "--webhook-addr",
        &iw_hook,
        "--webhook-secret",
        "hooks",
        "--pod-namespace",
        &ns,
        "--insecure-registry",
        &host,
    ])?;
    let watches = (0..n)
        .map(|i| {
            Ok(serde_json::from_value::<ImageWatch>(serde_json::json!({
                "apiVersion": "imagewatch.dev/v1alpha1",
                "kind": "ImageWatch",
                "metadata": {"name": format!("iw-{i}")},
                "spec": {
                    "image": format!("{host}/{}", repos[i]),
                    "tags": {"pattern": "v*"},
                    "interval": "1h",
                    "credentials": {"secretRef": {"name": "benchreg"}},
                    "git": {"url": urls[0], "secretRef": {"name": "git-creds"}},
                    "target": {"argocdSource": {"path": format!("apps/app-{i}"), "application": format!("iw-{i}")}},
                },
            }))?)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    setup.create_watches(watches).await?;
    setup
        .wait_watches(
            n,
            "applied v1.0.0",
            Duration::from_secs(300),
            // The first reconcile writes the override file (Ready=True Updated).
            |w| applied_tag(w) == Some("v1.0.0"),
        )
        .await?;
    wait_apps_running(
        &argocd,
        &apps,
        &running_at("v1.0.0"),
        Duration::from_secs(300),
    )
    .await?;

    // The peer: one ImageUpdater in Argo CD's namespace (it selects Applications of its own
    // namespace), started once Argo CD reports every app running.
    let updaters: Api<DynamicObject> =
        Api::namespaced_with(setup.admin.clone(), &argo_ns, &resource(IMAGE_UPDATER));
    let updater_name = format!("bench-{ns}");
    let refs: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({
                "namePattern": format!("iu-{i}"),
                "images": [{"alias": "app", "imageName": format!("{host}/{}", repos[i])}],
            })
        })
        .collect();
    let updater: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "argocd-image-updater.argoproj.io/v1alpha1",
        "kind": "ImageUpdater",
        "metadata": {"name": updater_name},
        "spec": {
            "commonUpdateSettings": {"updateStrategy": "semver"},
            "writeBackConfig": {
                "method": format!("git:secret:{argo_ns}/{iu_git}"),
                "gitConfig": {"branch": "main"},
            },
            "applicationRefs": refs,
        },
    }))?;
    updaters.create(&PostParams::default(), &updater).await?;
    argo_objects.objects.push((
        "imageupdaters.argocd-image-updater.argoproj.io",
        updater_name.clone(),
    ));

    let dir = tempfile::tempdir()?;
    let registries_conf = dir.path().join("registries.conf");
    std::fs::write(
        &registries_conf,
        format!(
            "registries:\n- name: bench\n  api_url: http://{host}\n  prefix: {host}\n  insecure: yes\n  credentials: pullsecret:{ns}/benchreg\n  limit: 1000\n  default: true\n"
        ),
    )?;
    let iu_port = free_port()?;
    let peer_process = start_peer(
        peer,
        ground,
        dir.path(),
        &ns,
        &argo_ns,
        iu_port,
        &hook_token,
        &registries_conf,
    )?;
    wait_peer_matched(&updaters, &updater_name, n, &peer_process).await?;

    let client = reqwest::Client::new();
    let iw_url_hook = format!("http://{iw_hook}/hooks/harbor");
    let iu_url_hook = format!("http://127.0.0.1:{iu_port}/webhook?type=harbor");
    let dirs = vec![
        setup.git_dir(&repo_names[0])?,
        setup.git_dir(&repo_names[1])?,
    ];
    let ready_pods = ReadyPods::start(Api::namespaced(setup.admin.clone(), &ns));
    let webhook = peer
        .git_webhook
        .then(|| GitWebhook::start(dirs[1].clone(), apps.clone(), app_names[1].clone()));
    let log = registry.log_path();
    let commits_before = [
        git.commit_count(&repo_names[0], "main")?,
        git.commit_count(&repo_names[1], "main")?,
    ];
    let log_before = file_len(&log);
    let mut samples: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut missing = [0usize; 2];
    let mut all_in: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut running: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut not_running = [0usize; 2];
    let mut all_running: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];

    for round in 1..=plan.rounds {
        let tag = format!("v1.{round}.0");
        // Expected files: index i for imagewatch's app i, n + i for the peer's.
        let mut expected = vec![HashMap::new(), HashMap::new()];
        for (t, tool) in TOOLS.iter().enumerate() {
            for i in 0..n {
                expected[t].insert(
                    format!("apps/app-{i}/.argocd-source-{tool}-{i}.yaml"),
                    (t * n + i, tag.clone()),
                );
            }
        }
        let deadline = Instant::now() + DEADLINE;
        let probe_dirs = dirs.clone();
        let watcher =
            tokio::task::spawn_blocking(move || probe(probe_dirs, expected, 2 * n, deadline));
        let pushed: HashMap<usize, Instant> = futures::stream::iter(0..n)
            .map(|i| {
                let (image, client) = (&image, &client);
                let (repo, tag, host, token) = (&repos[i], &tag, &host, &hook_token);
                let (iw, iu) = (&iw_url_hook, &iu_url_hook);
                async move {
                    let digest = image.push(repo, tag).await?;
                    let at = Instant::now();
                    let body = harbor_payload(host, repo, tag, &digest).to_string();
                    let send = |url: &str| {
                        client
                            .post(url)
                            .header("Authorization", token.as_str())
                            .header("Content-Type", "application/json")
                            .body(body.clone())
                            .send()
                    };
                    let (a, b) = tokio::join!(send(iw), send(iu));
                    for (tool, response) in [("imagewatch", a), ("peer", b)] {
                        let status = response?.status();
                        anyhow::ensure!(
                            status.is_success(),
                            "{tool} webhook answered {status} for {repo}:{tag}"
                        );
                    }
                    anyhow::Ok((i, at))
                }
            })
            .buffer_unordered(CREATE_CONCURRENCY)
            .try_collect()
            .await?;
        let first = pushed.values().min().copied().unwrap_or_else(Instant::now);
        let seen = watcher.await??;
        let wanted = running_at(&tag);
        // Only a committed tag can run.
        let committed: Vec<(String, String)> = (0..2 * n)
            .filter(|k| seen.contains_key(k))
            .map(|k| wanted[k].clone())
            .collect();
        let ran = ready_pods.wait(&committed, first + RUN_DEADLINE).await;
        for t in 0..2 {
            let mut last = None;
            let mut last_running = None;
            for i in 0..n {
                match seen.get(&(t * n + i)) {
                    Some(at) => {
                        samples[t].push(at.saturating_duration_since(pushed[&i]));
                        last = last.max(Some(*at));
                    }
                    None => missing[t] += 1,
                }
                match ran.get(&wanted[t * n + i]) {
                    Some(at) => {
                        running[t].push(at.saturating_duration_since(pushed[&i]));
                        last_running = last_running.max(Some(*at));
                    }
                    None => not_running[t] += 1,
                }
            }
            all_in[t].push(last.map_or(DEADLINE, |at| at.saturating_duration_since(first)));
            all_running[t]
                .push(last_running.map_or(RUN_DEADLINE, |at| at.saturating_duration_since(first)));
        }
        eprintln!(
            "bench:   round {round}: committed {}/{} and {}/{}, running {}/{} and {}/{} \
             (imagewatch, peer)",
            n - missing[0].min(n),
            n,
            n - missing[1].min(n),
            n,
            ran.keys().filter(|(app, _)| app.starts_with("iw-")).count(),
            n,
            ran.keys().filter(|(app, _)| app.starts_with("iu-")).count(),
            n,
        );
        // Before the next round, Argo CD reports the new tag running everywhere (where the
        // peer reads the current tag).
        if round < plan.rounds && ran.len() == wanted.len() {
            wait_apps_running(&argocd, &apps, &wanted, Duration::from_secs(120)).await?;
        }
    }
    let window = read_range(&log, log_before, file_len(&log))?;
    let webhook_refreshes = match webhook {
        Some(w) => w.finish().await,
        None => 0,
    };
    let result = PeerResult {
        plan,
        imagewatch: ToolResult {
            latencies: Latencies::of(&samples[0]),
            missing: missing[0],
            all_in: std::mem::take(&mut all_in[0]),
            running: Latencies::of(&running[0]),
            not_running: not_running[0],
            all_running: std::mem::take(&mut all_running[0]),
            commits: git.commit_count(&repo_names[0], "main")? - commits_before[0],
            requests: count_registry_requests(&window, "imagewatch/"),
        },
        peer: ToolResult {
            latencies: Latencies::of(&samples[1]),
            missing: missing[1],
            all_in: std::mem::take(&mut all_in[1]),
            running: Latencies::of(&running[1]),
            not_running: not_running[1],
            all_running: std::mem::take(&mut all_running[1]),
            commits: git.commit_count(&repo_names[1], "main")? - commits_before[1],
            requests: peer_requests(&window),
        },
        webhook_refreshes,
    };
    if result.peer.missing > 0 || result.peer.not_running > 0 {
        eprintln!(
            "bench: the peer missed {} commits and {} rollouts; its log ends:\n{}",
            result.peer.missing,
            result.peer.not_running,
            peer_process.log_tail()
        );
    }
    drop(ready_pods);
    // The ImageUpdater goes while the peer runs: the peer removes its finalizer.
    updaters
        .delete(&updater_name, &DeleteParams::default())
        .await?;
    imagewatch_e2e::wait_until(
        "the peer's ImageUpdater deleted",
        Duration::from_secs(60),
        || async {
            Ok(updaters
                .get_opt(&updater_name)
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await?;
    drop(peer_process);
    drop(operator);
    setup.delete_watches().await;
    // The Applications go first (nothing syncs the Deployments back), then the Deployments, so
    // that the next scenario finds the node's Pod slots free.
    app_guard.delete(&setup.admin).await?;
    ground.kubectl(&["delete", "deployments", "--all", "-n", &ns, "--wait=true"])?;
    ground.kubectl(&[
        "wait",
        "--for=delete",
        "pods",
        "--all",
        "-n",
        &ns,
        "--timeout=120s",
    ])?;
    drop(argo_objects);
    Ok(result)
}

/// The peer's requests in an access-log window: every client but imagewatch, the node's
/// containerd pulling for the Pods, and the bench's own pushes (reqwest sends no User-Agent).
fn peer_requests(window: &str) -> RegistryRequests {
    count_registry_requests_by(window, |agent| {
        !agent.is_empty() && !agent.starts_with("imagewatch/") && !agent.starts_with("containerd")
    })
}

#[allow(clippy::too_many_arguments)]
fn start_peer(
    peer: &Peer,
    ground: &Ground,
    dir: &Path,
    ns: &str,
    argo_ns: &str,
    port: u16,
    hook_token: &str,
    registries_conf: &Path,
) -> anyhow::Result<PeerProcess> {
    // The log outlives the run (under the ground's state directory), for a look afterwards.
    let logs = ground.state.join("bench-peer");
    std::fs::create_dir_all(&logs)?;
    let log = logs.join(format!("{ns}.log"));
    let out = std::fs::File::create(&log)?;
    let port = port.to_string();
    // Its ImageUpdater and the Applications live in Argo CD's namespace; its Secrets (Git,
    // registry pull secret) in the scenario's.
    let watch = format!("{argo_ns},{ns}");
    let child = Command::new(&peer.binary)
        .args([
            "run",
            "--kubeconfig",
            ground.kubeconfig.to_str().unwrap_or_default(),
            "--interval",
            &peer.interval,
            "--max-concurrent-apps",
            "100",
            "--max-concurrent-reconciles",
            "10",
            "--enable-webhook",
            "--webhook-port",
            &port,
            "--disable-tls",
            "--harbor-webhook-secret",
            hook_token,
            "--registries-conf-path",
            registries_conf.to_str().unwrap_or_default(),
            "--argocd-namespace",
            argo_ns,
            "--watch-namespaces",
            &watch,
            "--leader-election=false",
            "--health-probe-bind-address",
            "0",
            "--metrics-bind-address",
            "0",
            "--loglevel",
            "info",
        ])
        // controller-runtime reads its kubeconfig from KUBECONFIG, not from --kubeconfig.
        .env("KUBECONFIG", &ground.kubeconfig)
        .env("HOME", dir)
        .env("TMPDIR", dir)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {}", peer.binary.display()))?;
    Ok(PeerProcess { child, log })
}

/// Waits until the peer's ImageUpdater matched all `n` Applications (its first reconcile).
async fn wait_peer_matched(
    updaters: &Api<DynamicObject>,
    name: &str,
    n: usize,
    peer: &PeerProcess,
) -> anyhow::Result<()> {
    let result = imagewatch_e2e::wait_until(
        "the peer's ImageUpdater to match every Application",
        Duration::from_secs(180),
        || async {
            let object = updaters.get(name).await?;
            let matched = object
                .data
                .pointer("/status/applicationsMatched")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            Ok((matched as usize >= n).then_some(()))
        },
    )
    .await;
    result.map_err(|e| anyhow::anyhow!("{e:#}; the peer's log ends:\n{}", peer.log_tail()))
}
