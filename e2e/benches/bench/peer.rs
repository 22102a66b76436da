//! imagewatch beside Argo CD Image Updater (the binary named by `IMAGEWATCH_BENCH_IU`), in the
//! same run on the same registry, git server and API server, with the same apps and pushes.
//!
//! Each scenario has N apps; app `i` runs image `<prefix>/app-<i>` (a repository of its own)
//! from `apps/app-<i>/` (a Kustomize directory). imagewatch writes its copy of the apps in one
//! manifests repository through `argocdSource` targets (`.argocd-source-iw-<i>.yaml`), the
//! peer writes its copy in another one through Argo CD Applications `iu-<i>` and one
//! `ImageUpdater` (`.argocd-source-iu-<i>.yaml`, its `git` write-back). No Argo CD
//! controller runs, so the bench sets each Application's `status.summary.images` (where the
//! peer reads the running tag) as a sync would, and again after each round.
//!
//! Pushes go to the registry through its API; once the registry answered a push, the same
//! Harbor `PUSH_ARTIFACT` payload goes to both tools' webhooks at once. A push's latency is
//! the moment its new tag is first on the remote branch (polled every 10 ms) minus the moment
//! the registry answered its `PUT`. Registry requests are counted from the registry's access
//! log by User-Agent, over the measured window (first push to both tools done).
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
    time::{Duration, Instant},
};

use futures::{StreamExt as _, TryStreamExt as _};
use imagewatch_crd::ImageWatch;
use imagewatch_e2e::{
    NotifyingRegistry,
    bench::{Latencies, RegistryRequests, count_registry_requests, count_registry_requests_by},
    ground::{dockerconfigjson, random_suffix},
    oci_push::{BaseImage, ImagePusher},
    operator::free_port,
    setup::create_secret,
};
use kube::{
    Api,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams},
};

use crate::{
    common::{CREATE_CONCURRENCY, Setup, applied_tag, file_len, read_range},
    pushes::probe,
};

/// The peer and where its sources are.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The `argocd-image-updater` binary.
    pub binary: PathBuf,
    /// Its source checkout (`config/crd/bases/` is applied from there).
    pub source: PathBuf,
    /// An argo-cd checkout (`manifests/crds/application-crd.yaml` is applied from there).
    pub argocd_source: PathBuf,
    /// Its `--interval`.
    pub interval: String,
    /// What `version --short` says.
    pub version: String,
}

/// One side-by-side scenario.
#[derive(Debug, Clone, Copy)]
pub struct PeerPlan {
    /// Apps (= image repositories = pushes per round).
    pub apps: usize,
    /// Rounds of one push per app, one after the other.
    pub rounds: usize,
}

/// What one tool did in one scenario.
#[derive(Debug, Default)]
pub struct ToolResult {
    /// Per-push latencies over every round.
    pub latencies: Option<Latencies>,
    /// Pushes never seen in Git.
    pub missing: usize,
    /// Per round: first `PUT` sent → last of this tool's tags in Git.
    pub all_in: Vec<Duration>,
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
}

/// How long a round may take before the scenario gives up on the pushes not yet in Git.
pub const DEADLINE: Duration = Duration::from_secs(300);

const APPLICATION: (&str, &str, &str) = ("argoproj.io", "v1alpha1", "Application");
const IMAGE_UPDATER: (&str, &str, &str) = (
    "argocd-image-updater.argoproj.io",
    "v1alpha1",
    "ImageUpdater",
);

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

/// Applies the CRDs the peer needs (server-side: Argo CD's Application CRD is too large for
/// the last-applied annotation) and waits until they are served.
fn apply_crds(setup: &Setup, peer: &Peer) -> anyhow::Result<()> {
    let ground = setup.ground;
    let app_crd = peer
        .argocd_source
        .join("manifests/crds/application-crd.yaml");
    let iu_crds = peer.source.join("config/crd/bases");
    for path in [&app_crd, &iu_crds] {
        anyhow::ensure!(path.exists(), "{} does not exist", path.display());
        ground.kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            path.to_str().unwrap_or_default(),
        ])?;
    }
    for crd in [
        "crd/applications.argoproj.io",
        "crd/imageupdaters.argocd-image-updater.argoproj.io",
    ] {
        ground.kubectl(&["wait", "--for=condition=Established", "--timeout=60s", crd])?;
    }
    Ok(())
}

fn kustomize_dir(image: &str) -> [(String, String); 2] {
    [
        (
            "kustomization.yaml".into(),
            "resources:\n  - deployment.yaml\n".into(),
        ),
        (
            "deployment.yaml".into(),
            crate::common::deployment("app", image),
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

pub async fn run(peer: &Peer, plan: PeerPlan) -> anyhow::Result<PeerResult> {
    let n = plan.apps;
    let registry = NotifyingRegistry::start("", "")?;
    let host = registry.var("IMAGEWATCH_REGISTRY");
    let user = registry.var("IMAGEWATCH_REGISTRY_USER");
    let password = registry.var("IMAGEWATCH_REGISTRY_PASSWORD");
    let hook_token = format!("bench-{}", random_suffix());

    let mut setup = Setup::new("peer").await?;
    let ns = setup.ns.name.clone();
    apply_crds(&setup, peer)?;
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
    let git = setup.ground.git()?;
    create_secret(
        &setup.admin,
        &ns,
        "iu-git",
        "Opaque",
        &[("username", &git.user), ("password", &git.token)],
    )
    .await?;

    // Image repositories at v1.0.0.
    let prefix = format!("peer-{}", random_suffix());
    let repos: Vec<String> = (0..n).map(|i| format!("{prefix}/app-{i}")).collect();
    let pusher = ImagePusher::basic(&host, &user, &password)?;
    let base = BaseImage::new(&format!("{prefix}/base"));
    pusher.upload_base(&base).await?;
    futures::stream::iter(&repos)
        .map(|r| {
            let (pusher, base) = (&pusher, &base);
            async move {
                pusher.mount_base(base, r).await?;
                pusher.push_tag(base, r, "v1.0.0").await
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;

    // The same apps in two manifests repositories, one per tool.
    let files: Vec<(String, String)> = (0..n)
        .flat_map(|i| {
            kustomize_dir(&format!("{host}/{}:v1.0.0", repos[i]))
                .map(|(name, text)| (format!("apps/app-{i}/{name}"), text))
        })
        .collect();
    let iw_repo = format!("peer-{ns}-iw");
    let iu_repo = format!("peer-{ns}-iu");
    let iw_url = setup.git_repo(&iw_repo, &files)?;
    let iu_url = setup.git_repo(&iu_repo, &files)?;

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
                    "git": {"url": iw_url, "secretRef": {"name": "git-creds"}},
                    "target": {"argocdSource": {"path": format!("apps/app-{i}"), "application": format!("iw-{i}")}},
                },
            }))?)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    setup.create_watches(watches).await?;

    // The peer: Applications with the status a sync would leave, one ImageUpdater.
    let apps: Api<DynamicObject> =
        Api::namespaced_with(setup.admin.clone(), &ns, &resource(APPLICATION));
    futures::stream::iter(0..n)
        .map(|i| {
            let apps = apps.clone();
            let object = serde_json::json!({
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Application",
                "metadata": {"name": format!("iu-{i}")},
                "spec": {
                    "project": "default",
                    "source": {"repoURL": iu_url, "targetRevision": "main", "path": format!("apps/app-{i}")},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": "default"},
                },
                "status": synced_status(&host, &repos[i], "v1.0.0"),
            });
            async move {
                let object: DynamicObject = serde_json::from_value(object)?;
                apps.create(&PostParams::default(), &object).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let updaters: Api<DynamicObject> =
        Api::namespaced_with(setup.admin.clone(), &ns, &resource(IMAGE_UPDATER));
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
        "metadata": {"name": "bench"},
        "spec": {
            "commonUpdateSettings": {"updateStrategy": "semver"},
            "writeBackConfig": {
                "method": format!("git:secret:{ns}/iu-git"),
                "gitConfig": {"branch": "main"},
            },
            "applicationRefs": refs,
        },
    }))?;
    updaters.create(&PostParams::default(), &updater).await?;

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
        setup.ground,
        dir.path(),
        &ns,
        iu_port,
        &hook_token,
        &registries_conf,
    )?;

    setup
        .wait_watches(
            n,
            "applied v1.0.0",
            Duration::from_secs(300),
            // The first reconcile writes the override file (Ready=True Updated).
            |w| applied_tag(w) == Some("v1.0.0"),
        )
        .await?;
    wait_peer_matched(&updaters, n, &peer_process).await?;

    let client = reqwest::Client::new();
    let iw_url_hook = format!("http://{iw_hook}/hooks/harbor");
    let iu_url_hook = format!("http://127.0.0.1:{iu_port}/webhook?type=harbor");
    let dirs = vec![setup.git_dir(&iw_repo)?, setup.git_dir(&iu_repo)?];
    let log = registry.log_path();
    let iw_commits_before = git.commit_count(&iw_repo, "main")?;
    let iu_commits_before = git.commit_count(&iu_repo, "main")?;
    let log_before = file_len(&log);
    let mut samples: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut missing = [0usize; 2];
    let mut all_in: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];

    for round in 1..=plan.rounds {
        let tag = format!("v1.{round}.0");
        // Expected files: index i for imagewatch's app i, n + i for the peer's.
        let mut expected = vec![HashMap::new(), HashMap::new()];
        for i in 0..n {
            expected[0].insert(
                format!("apps/app-{i}/.argocd-source-iw-{i}.yaml"),
                (i, tag.clone()),
            );
            expected[1].insert(
                format!("apps/app-{i}/.argocd-source-iu-{i}.yaml"),
                (n + i, tag.clone()),
            );
        }
        let deadline = Instant::now() + DEADLINE;
        let probe_dirs = dirs.clone();
        let watcher =
            tokio::task::spawn_blocking(move || probe(probe_dirs, expected, 2 * n, deadline));
        let started = Instant::now();
        let pushed: HashMap<usize, Instant> = futures::stream::iter(0..n)
            .map(|i| {
                let (pusher, base, client) = (&pusher, &base, &client);
                let (repo, tag, host, token) = (&repos[i], &tag, &host, &hook_token);
                let (iw, iu) = (&iw_url_hook, &iu_url_hook);
                async move {
                    let digest = pusher.push_tag(base, repo, tag).await?;
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
        let seen = watcher.await??;
        for (tool, offset) in [(0, 0), (1, n)] {
            let mut last = None;
            for i in 0..n {
                match seen.get(&(offset + i)) {
                    Some(at) => {
                        samples[tool].push(at.saturating_duration_since(pushed[&i]));
                        last = last.max(Some(*at));
                    }
                    None => missing[tool] += 1,
                }
            }
            all_in[tool].push(last.map_or(DEADLINE, |t| t.duration_since(started)));
        }
        // What an Argo CD sync would report next: the new tag runs.
        if round < plan.rounds {
            for (i, repo) in repos.iter().enumerate() {
                let status = serde_json::json!({"status": synced_status(&host, repo, &tag)});
                apps.patch(
                    &format!("iu-{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(&status),
                )
                .await?;
            }
        }
    }
    let window = read_range(&log, log_before, file_len(&log))?;
    let result = PeerResult {
        plan,
        imagewatch: ToolResult {
            latencies: Latencies::of(&samples[0]),
            missing: missing[0],
            all_in: std::mem::take(&mut all_in[0]),
            commits: git.commit_count(&iw_repo, "main")? - iw_commits_before,
            requests: count_registry_requests(&window, "imagewatch/"),
        },
        peer: ToolResult {
            latencies: Latencies::of(&samples[1]),
            missing: missing[1],
            all_in: std::mem::take(&mut all_in[1]),
            commits: git.commit_count(&iu_repo, "main")? - iu_commits_before,
            requests: peer_requests(&window),
        },
    };
    if result.peer.missing > 0 {
        eprintln!(
            "bench: the peer missed {} pushes; its log ends:\n{}",
            result.peer.missing,
            peer_process.log_tail()
        );
    }
    drop(peer_process);
    drop(operator);
    setup.delete_watches().await;
    Ok(result)
}

/// The status Argo CD leaves on a synced Kustomize Application running `repo:tag`.
fn synced_status(host: &str, repo: &str, tag: &str) -> serde_json::Value {
    serde_json::json!({
        "sourceType": "Kustomize",
        "sync": {"status": "Synced"},
        "health": {"status": "Healthy"},
        "summary": {"images": [format!("{host}/{repo}:{tag}")]},
    })
}

/// The peer's requests in an access-log window: every client but imagewatch and the bench's
/// own pushes (reqwest sends no User-Agent).
fn peer_requests(window: &str) -> RegistryRequests {
    count_registry_requests_by(window, |agent| {
        !agent.is_empty() && !agent.starts_with("imagewatch/")
    })
}

fn start_peer(
    peer: &Peer,
    ground: &imagewatch_e2e::Ground,
    dir: &Path,
    ns: &str,
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
            ns,
            "--watch-namespaces",
            ns,
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
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()?;
    Ok(PeerProcess { child, log })
}

/// Waits until the peer's ImageUpdater matched all `n` Applications (its first reconcile).
async fn wait_peer_matched(
    updaters: &Api<DynamicObject>,
    n: usize,
    peer: &PeerProcess,
) -> anyhow::Result<()> {
    let result = imagewatch_e2e::wait_until(
        "the peer's ImageUpdater to match every Application",
        Duration::from_secs(180),
        || async {
            let object = updaters.get("bench").await?;
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
