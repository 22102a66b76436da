//! Push → commit: N tags pushed at once across R image repositories, each followed by its own
//! ImageWatch (so every push must end up in Git as exactly that tag), spread over G manifests
//! repositories. The registry (CNCF distribution) notifies the operator's webhook receiver;
//! the watches poll only hourly, so what is measured is the event-driven path.
//!
//! Watch `i` follows repository `i mod R` with pattern `c<i div R>-*` and writes
//! `apps/w-<i>/deployment.yaml` in manifests repository `i mod G`. A push's latency is the
//! moment its tag is first seen on the remote branch (the bare repositories are polled every
//! 10 ms) minus the moment the registry answered its manifest `PUT`.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{StreamExt as _, TryStreamExt as _};
use imagewatch_e2e::{
    NotifyingRegistry,
    bench::{
        ApiRequests, Latencies, ProcessSample, RegistryRequests, count_registry_requests,
        histogram_quantile_between, metric_sum, parse_push_sizes,
    },
    ground::random_suffix,
    oci_push::{BaseImage, ImagePusher},
    operator::free_port,
    setup::create_secret,
    token_registry::TokenRegistry,
};

use crate::common::{
    CpuMark, Setup, applied_tag, deployment, file_len, ground_pid, manifest_path, read_range,
    up_to_date, watch_object,
};
use crate::floors::{self, GitTarget, PushFloor};

/// One push scenario's size.
#[derive(Debug, Clone, Copy)]
pub struct PushPlan {
    /// Tags pushed at once (= watches).
    pub pushes: usize,
    /// Image repositories they are spread over.
    pub repositories: usize,
    /// Manifests repositories the watches write to.
    pub git_repos: usize,
    /// Manifest `PUT`s in flight.
    pub concurrency: usize,
    /// Requests per second the operator allows itself per registry (`--registries-config`);
    /// `None` keeps the operator's default.
    pub registry_rate: Option<u32>,
    /// How the registry authenticates.
    pub auth: PushAuth,
}

impl PushPlan {
    /// The plan for `pushes`: one repository per push up to 100 repositories (so 1,000 pushes
    /// land 10 to a repository), one manifests repository per 250 watches.
    pub fn for_pushes(
        pushes: usize,
        concurrency: usize,
        registry_rate: Option<u32>,
        auth: PushAuth,
    ) -> Self {
        Self {
            pushes,
            repositories: pushes.clamp(1, 100),
            git_repos: pushes.div_ceil(250).max(1),
            concurrency,
            registry_rate,
            auth,
        }
    }

    /// The plans of a size list such as `1,27,1000,1000@500` (see
    /// [`parse_push_sizes`]).
    pub fn parse_list(text: &str, concurrency: usize, auth: PushAuth) -> Result<Vec<Self>, String> {
        Ok(parse_push_sizes(text)?
            .into_iter()
            .map(|(n, rate)| Self::for_pushes(n, concurrency, rate, auth))
            .collect())
    }
}

/// What one push scenario measured.
#[derive(Debug)]
pub struct PushResult {
    pub plan: PushPlan,
    /// Per-push latency, over the pushes that were committed.
    pub latencies: Option<Latencies>,
    /// Pushes not seen in Git before the deadline.
    pub missing: usize,
    /// From the first `PUT` sent to the last tag seen in Git.
    pub all_in: Duration,
    /// From the first `PUT` sent to the last one answered.
    pub push_phase: Duration,
    /// The same for the setup pushes (the current tags, before any watch exists: the
    /// operator only receives their events and ignores them).
    pub idle_push_phase: Duration,
    /// CPU seconds of each process of the path from the first push until all were committed
    /// (the driver itself, the registry, the operator, the API server, etcd, the git server
    /// with its `git http-backend` children).
    pub cpu: Vec<(&'static str, f64)>,
    /// Commits the operator made.
    pub commits: usize,
    /// Operator peak RSS, KiB.
    pub peak_rss_kib: u64,
    /// The operator's registry requests from the first push until every tag was committed.
    pub requests: RegistryRequests,
    /// API requests served from the first push until every tag was committed.
    pub api: ApiRequests,
    /// What the ground itself needs for the same pushes and commits (see `floors`), or why
    /// it could not be measured.
    pub floor: Result<PushFloor, String>,
    /// The median of each stage of the operator's `imagewatch_push_stage_seconds` over the
    /// pushes.
    pub stages: Vec<(&'static str, Option<f64>)>,
}

/// How the driver and the operator authenticate to the scenario's registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushAuth {
    /// Docker token authentication: the registry trusts bearer tokens (ES256 JWTs) from a
    /// token server in the driver, as hosted registries do for CI pushes; the driver pushes
    /// with one token per repository, the operator fetches its own with Basic credentials.
    Token,
    /// HTTP Basic on every request, checked against an htpasswd file (bcrypt) by the
    /// registry (`registry.sh`).
    Basic,
}

impl PushAuth {
    /// `token` or `basic` (`IMAGEWATCH_BENCH_PUSH_AUTH`).
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "" | "token" => Ok(Self::Token),
            "basic" => Ok(Self::Basic),
            other => Err(format!("{other:?}: expected token or basic")),
        }
    }

    /// The name the report uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::Token => "token",
            Self::Basic => "basic",
        }
    }
}

/// The scenario's registry (CNCF distribution), notifying the operator's webhook.
enum PushRegistry {
    Token(TokenRegistry),
    Basic(NotifyingRegistry),
}

impl PushRegistry {
    async fn start(auth: PushAuth, notify_url: &str, hook_token: &str) -> anyhow::Result<Self> {
        Ok(match auth {
            PushAuth::Token => Self::Token(
                TokenRegistry::start_notifying(
                    Duration::from_secs(3600),
                    Some((notify_url, hook_token)),
                )
                .await?,
            ),
            PushAuth::Basic => Self::Basic(NotifyingRegistry::start(notify_url, hook_token)?),
        })
    }

    fn host(&self) -> String {
        match self {
            Self::Token(r) => r.host.clone(),
            Self::Basic(r) => r.var("IMAGEWATCH_REGISTRY"),
        }
    }

    fn token_host(&self) -> Option<String> {
        match self {
            Self::Token(r) => Some(r.token_host.clone()),
            Self::Basic(_) => None,
        }
    }

    fn dockerconfigjson(&self) -> String {
        match self {
            Self::Token(r) => r.dockerconfigjson(),
            Self::Basic(r) => r.dockerconfigjson(),
        }
    }

    fn log_path(&self) -> PathBuf {
        match self {
            Self::Token(r) => r.log_path(),
            Self::Basic(r) => r.log_path(),
        }
    }

    fn pid(&self) -> Option<u32> {
        match self {
            Self::Token(r) => Some(r.pid()),
            Self::Basic(r) => r.pid(),
        }
    }

    /// A pusher: Basic credentials, or a token per set of repositories, minted once (as a
    /// CI job's `docker push` fetches one and reuses it).
    fn pusher(&self) -> anyhow::Result<ImagePusher> {
        match self {
            Self::Token(r) => ImagePusher::new(&r.host, r.cached_push_authorizer()),
            Self::Basic(r) => ImagePusher::basic(
                &r.var("IMAGEWATCH_REGISTRY"),
                &r.var("IMAGEWATCH_REGISTRY_USER"),
                &r.var("IMAGEWATCH_REGISTRY_PASSWORD"),
            ),
        }
    }
}

/// How long pushes may take to reach Git before the scenario gives up on them.
const DEADLINE: Duration = Duration::from_secs(180);

pub async fn run(plan: PushPlan) -> anyhow::Result<PushResult> {
    let n = plan.pushes;
    let webhook = format!("127.0.0.1:{}", free_port()?);
    let hook_token = format!("bench-{}", random_suffix());
    let notify_url = format!("http://{webhook}/hooks/distribution");
    let registry = PushRegistry::start(plan.auth, &notify_url, &hook_token).await?;
    let host = registry.host();

    let mut setup = Setup::new("bench").await?;
    let ns = setup.ns.name.clone();
    create_secret(
        &setup.admin,
        &ns,
        "hooks",
        "Opaque",
        &[("distribution-token", &hook_token)],
    )
    .await?;
    setup
        .registry_secret("benchreg", &registry.dockerconfigjson())
        .await?;
    let settings = tempfile::NamedTempFile::new()?;
    let mut flags = vec![
        "--webhook-addr",
        &webhook,
        "--webhook-secret",
        "hooks",
        "--pod-namespace",
        &ns,
        "--insecure-registry",
        &host,
    ];
    let token_host = registry.token_host();
    if let Some(token_host) = &token_host {
        flags.extend(["--insecure-registry", token_host]);
    }
    if let Some(rate) = plan.registry_rate {
        std::fs::write(
            settings.path(),
            serde_json::json!({"registries": {"*": {"ratePerSecond": rate, "burst": rate}}})
                .to_string(),
        )?;
        flags.extend([
            "--registries-config",
            settings.path().to_str().unwrap_or_default(),
        ]);
    }
    // The webhook receiver must listen before the first push: the registry delivers its
    // events in order and retries a refused one, so later events would queue behind it.
    let operator = setup.start_operator(&flags)?;
    imagewatch_e2e::wait_until(
        "the webhook receiver to listen",
        Duration::from_secs(60),
        || async {
            Ok(tokio::net::TcpStream::connect(&webhook)
                .await
                .ok()
                .map(|_| ()))
        },
    )
    .await?;

    // Image repositories with every watch's current tag.
    let prefix = format!("bench-{}", random_suffix());
    let repos: Vec<String> = (0..plan.repositories)
        .map(|r| format!("{prefix}/app-{r}"))
        .collect();
    let pusher = registry.pusher()?;
    let base = BaseImage::new(&format!("{prefix}/base"));
    pusher.upload_base(&base).await?;
    futures::stream::iter(&repos)
        .map(|r| pusher.mount_base(&base, r))
        .buffer_unordered(plan.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let watch = |i: usize| {
        let r = i % plan.repositories;
        let k = i / plan.repositories;
        (
            format!("w-{i}"),
            &repos[r],
            format!("c{k}"),
            i % plan.git_repos,
        )
    };
    let idle_started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let (_, repo, stream, _) = watch(i);
            let (pusher, base) = (&pusher, &base);
            async move {
                pusher
                    .push_tag(base, repo, &format!("{stream}-v1.0.0"))
                    .await
            }
        })
        .buffer_unordered(plan.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let idle_push_phase = idle_started.elapsed();

    // Manifests repositories and watches.
    let mut urls = Vec::new();
    let mut expected: Vec<HashMap<String, (usize, String)>> = vec![HashMap::new(); plan.git_repos];
    for (g, expected) in expected.iter_mut().enumerate() {
        let files: Vec<(String, String)> = (0..n)
            .filter(|i| watch(*i).3 == g)
            .map(|i| {
                let (name, repo, stream, _) = watch(i);
                expected.insert(manifest_path(&name), (i, format!(":{stream}-v1.1.0\n")));
                (
                    manifest_path(&name),
                    deployment(&name, &format!("{host}/{repo}:{stream}-v1.0.0")),
                )
            })
            .collect();
        urls.push(setup.git_repo(&format!("bench-{ns}-{g}"), &files)?);
    }
    let objects = (0..n)
        .map(|i| {
            let (name, repo, stream, g) = watch(i);
            watch_object(
                &name,
                &format!("{host}/{repo}"),
                &format!("{stream}-*"),
                "1h",
                &urls[g],
                "benchreg",
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    setup.create_watches(objects).await?;
    setup
        .wait_watches(
            n,
            "Ready=True UpToDate",
            Duration::from_secs(600),
            up_to_date,
        )
        .await?;
    // Every event of the setup pushes has been received (the registry sends them in order).
    imagewatch_e2e::wait_until(
        "the setup pushes' events to reach the operator",
        Duration::from_secs(120),
        || async {
            let metrics = operator.metrics().await?;
            let received = metric_sum(
                &metrics,
                "imagewatch_events_total",
                &[("source", "distribution")],
            );
            Ok((received >= n as f64).then_some(()))
        },
    )
    .await?;
    let commits_before = setup.commit_count()?;
    let log = registry.log_path();
    let log_before = file_len(&log);

    // Watch the remote branches, then push every new tag at once.
    let dirs: Vec<PathBuf> = (0..plan.git_repos)
        .map(|g| setup.git_dir(&format!("bench-{ns}-{g}")))
        .collect::<anyhow::Result<_>>()?;
    let deadline = Instant::now() + DEADLINE;
    let probe = tokio::task::spawn_blocking(move || probe(dirs, expected, n, deadline));
    let processes = [
        ("driver", Some(std::process::id())),
        ("registry", registry.pid()),
        ("operator", operator.pid()),
        ("kube-apiserver", ground_pid(&setup, "kube-apiserver")),
        ("etcd", ground_pid(&setup, "etcd")),
        ("git server", ground_pid(&setup, "git-https")),
    ];
    let api_before = setup.api_requests().await?;
    let metrics_before = operator.metrics().await?;
    let cpu_mark = CpuMark::now(&processes);
    let started = Instant::now();
    let pushed: HashMap<usize, Instant> = futures::stream::iter(0..n)
        .map(|i| {
            let (_, repo, stream, _) = watch(i);
            let (pusher, base) = (&pusher, &base);
            async move {
                pusher
                    .push_tag(base, repo, &format!("{stream}-v1.1.0"))
                    .await
                    .map(|_| (i, Instant::now()))
            }
        })
        .buffer_unordered(plan.concurrency)
        .try_collect()
        .await?;
    let push_phase = pushed
        .values()
        .max()
        .map_or(Duration::ZERO, |t| t.duration_since(started));
    let seen = probe.await??;
    let cpu = cpu_mark.seconds();
    let samples: Vec<Duration> = seen
        .iter()
        .map(|(i, at)| at.saturating_duration_since(pushed[i]))
        .collect();
    let all_in = seen
        .values()
        .max()
        .map_or(DEADLINE, |t| t.duration_since(started));
    let api = setup.api_requests().await?.since(&api_before);
    let commits = setup.commit_count()? - commits_before;
    let requests = count_registry_requests(
        &read_range(&log, log_before, file_len(&log))?,
        "imagewatch/",
    );

    // Let the status writes finish so they count in the peak memory.
    if seen.len() == n {
        let latest: Arc<HashMap<String, String>> = Arc::new(
            (0..n)
                .map(|i| {
                    let (name, _, stream, _) = watch(i);
                    (name, format!("{stream}-v1.1.0"))
                })
                .collect(),
        );
        setup
            .wait_watches(n, "applied", Duration::from_secs(120), move |w| {
                let name = w.metadata.name.as_deref().unwrap_or_default();
                applied_tag(w) == latest.get(name).map(String::as_str)
            })
            .await?;
    }
    let metrics_after = operator.metrics().await?;
    let stages = imagewatch::telemetry::PUSH_STAGES
        .iter()
        .map(|stage| {
            let p50 = histogram_quantile_between(
                &metrics_before,
                &metrics_after,
                "imagewatch_push_stage_seconds",
                ("stage", stage),
                0.5,
            );
            (*stage, p50)
        })
        .collect();
    let peak_rss_kib = operator
        .pid()
        .and_then(ProcessSample::read)
        .map_or(0, |s| s.hwm_kib);
    drop(operator);

    // The floor: the same pushes to a registry that tells a plain receiver, and the same
    // commits made with the git CLI, on the same ground.
    let tags: Vec<(String, String)> = (0..n)
        .map(|i| {
            let (_, repo, stream, _) = watch(i);
            (repo.clone(), format!("{stream}-v1.1.0"))
        })
        .collect();
    let files: Vec<Vec<String>> = (0..plan.git_repos)
        .map(|g| {
            (0..n)
                .filter(|i| watch(*i).3 == g)
                .map(|i| manifest_path(&watch(i).0))
                .collect()
        })
        .collect();
    let floor = push_floor(&setup, &plan, &prefix, &tags, &urls, files)
        .await
        .map_err(|e| format!("{e:#}"));
    // The registry's log (access log and notification deliveries) outlives its state dir.
    let kept = setup.ground.state.join("bench-pushes");
    if std::fs::create_dir_all(&kept).is_ok() {
        let _ = std::fs::copy(&log, kept.join(format!("{ns}-registry.log")));
    }
    setup.delete_watches().await;
    Ok(PushResult {
        plan,
        latencies: Latencies::of(&samples),
        missing: n - seen.len(),
        all_in,
        push_phase,
        idle_push_phase,
        cpu,
        commits,
        peak_rss_kib,
        requests,
        api,
        floor,
        stages,
    })
}

/// Rounds of the one-push floor (its medians); a scenario of many pushes has one.
const ONE_PUSH_ROUNDS: usize = 5;

/// The floor of a push scenario (see `floors`): `tags` pushed to a registry of the plan's
/// kind notifying a plain receiver, and one commit of `files[g]` pushed to `urls[g]` with the
/// git CLI per manifests repository, all at once.
async fn push_floor(
    setup: &Setup,
    plan: &PushPlan,
    prefix: &str,
    tags: &[(String, String)],
    urls: &[String],
    files: Vec<Vec<String>>,
) -> anyhow::Result<PushFloor> {
    let rounds = if plan.pushes == 1 { ONE_PUSH_ROUNDS } else { 1 };
    let (notify_url, received) = floors::notification_receiver().await?;
    let registry = PushRegistry::start(plan.auth, &notify_url, "floor").await?;
    let pusher = registry.pusher()?;
    let base = BaseImage::new(&format!("{prefix}/base"));
    pusher.upload_base(&base).await?;
    let mut repos: Vec<&String> = tags.iter().map(|(r, _)| r).collect();
    repos.sort();
    repos.dedup();
    futures::stream::iter(repos)
        .map(|r| pusher.mount_base(&base, r))
        .buffer_unordered(plan.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let mut notify = Vec::new();
    let mut notify_all_in = Duration::ZERO;
    for round in 0..rounds {
        let tags: Vec<(String, String)> = tags
            .iter()
            .map(|(r, t)| (r.clone(), format!("{t}-floor{round}")))
            .collect();
        let (latencies, all_in) =
            floors::registry_floor(&pusher, &base, &tags, plan.concurrency, &received, DEADLINE)
                .await?;
        notify.extend(latencies);
        notify_all_in = all_in;
    }
    // Git: clones first (not timed), then the commits.
    let git = setup.ground.git()?;
    let ca = PathBuf::from(setup.ground.var("IMAGEWATCH_GIT_CA_BUNDLE")?);
    let work = tempfile::tempdir()?;
    let mut targets = Vec::new();
    for (g, (url, files)) in urls.iter().zip(files).enumerate() {
        let authed = url.replacen(
            "https://",
            &format!("https://{}:{}@", git.user, git.token),
            1,
        );
        let dir = work.path().join(format!("m{g}"));
        floors::clone(&authed, &ca, &dir)?;
        targets.push(GitTarget { dir, files });
    }
    let mut each = Vec::new();
    let mut git_all_in = Duration::ZERO;
    for round in 0..rounds {
        let (durations, all_in) = floors::git_floor(&targets, &ca, round)?;
        each.extend(durations);
        git_all_in = all_in;
    }
    let median = |samples: Vec<Latencies>| {
        let p50s: Vec<Duration> = samples
            .iter()
            .map(|l| Duration::from_secs_f64(l.p50))
            .collect();
        Latencies::of(&p50s)
    };
    Ok(PushFloor {
        notify: median(notify),
        notify_all_in,
        git: Latencies::of(&each),
        git_all_in,
    })
}

/// Polls the bare repositories' `main` until every expected file (path → sample, text) holds
/// its text or `deadline` passes; returns when each was first seen.
pub fn probe(
    dirs: Vec<PathBuf>,
    expected: Vec<HashMap<String, (usize, String)>>,
    n: usize,
    deadline: Instant,
) -> anyhow::Result<HashMap<usize, Instant>> {
    let repos = dirs
        .iter()
        .map(git2::Repository::open_bare)
        .collect::<Result<Vec<_>, _>>()?;
    let mut heads: Vec<Option<git2::Oid>> = repos
        .iter()
        .map(|r| r.refname_to_id("refs/heads/main").ok())
        .collect();
    let mut seen: HashMap<usize, Instant> = HashMap::new();
    while seen.len() < n && Instant::now() < deadline {
        for (g, repo) in repos.iter().enumerate() {
            let Ok(head) = repo.refname_to_id("refs/heads/main") else {
                continue;
            };
            if Some(head) == heads[g] {
                continue;
            }
            let now = Instant::now();
            let new_tree = repo.find_commit(head)?.tree()?;
            let old_tree = match heads[g] {
                Some(old) => Some(repo.find_commit(old)?.tree()?),
                None => None,
            };
            let diff = repo.diff_tree_to_tree(old_tree.as_ref(), Some(&new_tree), None)?;
            for delta in diff.deltas() {
                let Some(path) = delta.new_file().path().and_then(|p| p.to_str()) else {
                    continue;
                };
                let Some((i, needle)) = expected[g].get(path) else {
                    continue;
                };
                if seen.contains_key(i) {
                    continue;
                }
                let blob = repo.find_blob(delta.new_file().id())?;
                if String::from_utf8_lossy(blob.content()).contains(needle.as_str()) {
                    seen.insert(*i, now);
                }
            }
            heads[g] = Some(head);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(seen)
}
