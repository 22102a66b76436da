//! Many watches, steady state: W ImageWatches over R image repositories (W/R watches per
//! repository, all in one namespace with one pull Secret, so they may share scans), polling at
//! `interval`, writing W Deployments spread over G manifests repositories. Git already holds
//! every current tag, so after the first sync every cycle is a no-op.
//!
//! The registry uses Docker token authentication with a token server in this process, so
//! credential fetches are counted where they arrive; registry requests are counted from the
//! registry's access log (user agent `imagewatch/…`). CPU and memory come from
//! `/proc/PID/{stat,status}` of the operator.
//!
//! Measured: time to create the objects, time from the operator's start until every watch is
//! `Ready=True UpToDate`, then a steady-state window that starts once the first sync's
//! reconciles have died down and lasts at least `interval` and until every watch has been
//! reconciled again (W reconciles; at most three intervals): tag-list and manifest requests,
//! token fetches, reconciles, commits and CPU time in it. A cycle is W reconciles, so the
//! per-cycle figures are the window's scaled by W / (reconciles in the window), and the CPU
//! share "at `interval`" is the CPU time of one cycle over `interval`: when the operator
//! stretches a cycle beyond its interval (waiting on rate limits), the per-interval cost is
//! still charged to one interval.
//!
//! Last, a restart as an upgrade does it: the operator gets SIGTERM and a new process starts
//! on watches that already hold their status. Measured from the new process's start until it
//! has reconciled W watches and listed every repository once: the first sync when the status
//! writes are already done.
//!
//! Then, with the operator gone, the floor of the registry side in the same run: this driver
//! lists every repository once at the operator's default rate for a registry (100 requests/s
//! after a burst of 200), 32 requests in flight, with tokens of 64 repositories as the
//! operator gets them — what any tool needs to see every repository once. The floor of the
//! API-server side (W status writes) comes from the `apiserver` scenario of the same run.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{StreamExt as _, TryStreamExt as _};
use imagewatch_e2e::{
    bench::{
        ApiRequests, ProcessSample, RegistryRequests, count_registry_requests, metric_sum, open_fds,
    },
    ground::random_suffix,
    oci_push::{Authorizer, BaseImage, ImagePusher},
    token_registry::{TokenCounts, TokenRegistry},
};

use crate::common::{
    CpuMark, Setup, clock_ticks, deployment, file_len, ground_pid, manifest_path, read_range,
    up_to_date, watch_object,
};

/// One steady-state scenario's size.
#[derive(Debug, Clone)]
pub struct WatchPlan {
    /// ImageWatches.
    pub watches: usize,
    /// Image repositories.
    pub repositories: usize,
    /// Manifests repositories.
    pub git_repos: usize,
    /// `spec.interval` as written.
    pub interval_text: String,
    /// The same, parsed.
    pub interval: Duration,
}

/// What the scenario measured.
#[derive(Debug)]
pub struct WatchResult {
    pub plan: WatchPlan,
    /// Creating the ImageWatches (32 requests in flight).
    pub create: Duration,
    /// Operator start → every watch Ready=True UpToDate.
    pub first_sync: Duration,
    /// Registry requests during the first sync.
    pub sync_requests: RegistryRequests,
    /// CPU seconds each process of the path (operator, API server, etcd, this driver, the
    /// registry) used from the operator's start until every watch was Ready.
    pub sync_cpu: Vec<(&'static str, f64)>,
    /// Tokens issued during the first sync.
    pub sync_tokens: TokenCounts,
    /// API requests served from the operator's start until every watch was Ready (the
    /// driver's own watch included).
    pub sync_api: ApiRequests,
    /// API requests served in the steady-state window.
    pub window_api: ApiRequests,
    /// Length of the steady-state window.
    pub window: Duration,
    /// CPU time used in the window, seconds.
    pub window_cpu_seconds: f64,
    /// Registry requests in the window.
    pub window_requests: RegistryRequests,
    /// Tokens issued in the window.
    pub window_tokens: TokenCounts,
    /// Reconciles in the window.
    pub window_reconciles: f64,
    /// Commits in the window.
    pub window_commits: usize,
    /// CPU time of one cycle (W reconciles) over `interval`, percent of one core.
    pub cpu_percent: f64,
    /// RSS at the start of the window, KiB.
    pub rss_after_sync_kib: u64,
    /// Peak RSS since the operator started, KiB.
    pub peak_rss_kib: u64,
    /// Most file descriptors (mostly sockets) the operator held at once, sampled every 200 ms.
    pub peak_fds: usize,
    /// The first sync of a restarted operator.
    pub restart: Restart,
    /// The registry's time to list every repository once at the default rate (the driver's
    /// requests, with the operator stopped).
    pub tag_list_floor: Duration,
}

/// A restarted operator's first sync, over watches that already hold their status.
#[derive(Debug)]
pub struct Restart {
    /// New process start → W reconciles done and every repository listed.
    pub resync: Duration,
    /// Reconciles the new process counted by then.
    pub reconciles: f64,
    /// Its registry requests by then.
    pub requests: RegistryRequests,
    /// API requests served by then.
    pub api: ApiRequests,
    /// CPU seconds per process by then (operator, API server, etcd, registry).
    pub cpu: Vec<(&'static str, f64)>,
    /// Commits by then (expected: none).
    pub commits: usize,
}

/// Token lifetime of the bench's token server (longer than a cycle, like most registries').
const TOKEN_LIFETIME: Duration = Duration::from_secs(3600);
const IMAGEWATCH_AGENT: &str = "imagewatch/";

pub async fn run(plan: WatchPlan) -> anyhow::Result<WatchResult> {
    let registry = Arc::new(TokenRegistry::start(TOKEN_LIFETIME).await?);
    let host = registry.host.clone();
    let mut setup = Setup::new("scale").await?;
    let (repos, create) = populate(&plan, &registry, &mut setup).await?;

    let log = registry.log_path();
    let commits_at_start = setup.commit_count()?;
    let ground = [
        ("kube-apiserver", ground_pid(&setup, "kube-apiserver")),
        ("etcd", ground_pid(&setup, "etcd")),
        ("driver", Some(std::process::id())),
        ("registry", Some(registry.pid())),
    ];
    let cpu_mark = CpuMark::now(&ground);
    let api_before = setup.api_requests().await?;
    let start_operator = || {
        setup.start_operator(&[
            "--insecure-registry",
            &host,
            "--insecure-registry",
            &registry.token_host,
        ])
    };
    let operator_started = Instant::now();
    let mut operator = start_operator()?;
    let pid = operator
        .pid()
        .ok_or_else(|| anyhow::anyhow!("no operator"))?;
    let peak_fds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let fd_sampler = {
        let peak = peak_fds.clone();
        tokio::spawn(async move {
            while let Some(n) = open_fds(pid) {
                peak.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let log_at_start = file_len(&log);
    setup
        .wait_watches(
            plan.watches,
            "Ready=True UpToDate",
            Duration::from_secs(3600),
            up_to_date,
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", operator.log_tail(30)))?;
    let first_sync = operator_started.elapsed();
    let api_synced = setup.api_requests().await?;
    eprintln!("bench:   first sync in {:.1} s", first_sync.as_secs_f64());
    let sync_cpu = cpu_mark.with_new("operator", pid).seconds();

    // The first sync's reconciles (and those its own status writes trigger) die down.
    let mut last = reconciles(&operator).await?;
    let quiet_since = Instant::now();
    let mut quiet = Instant::now();
    while quiet.elapsed() < Duration::from_secs(10)
        && quiet_since.elapsed() < Duration::from_secs(120)
    {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = reconciles(&operator).await?;
        if now != last {
            last = now;
            quiet = Instant::now();
        }
    }

    let sync_log_end = file_len(&log);
    let sync_requests = count_registry_requests(
        &read_range(&log, log_at_start, sync_log_end)?,
        IMAGEWATCH_AGENT,
    );
    let sync_tokens = registry.token_counts();
    let commits_before = setup.commit_count()?;
    anyhow::ensure!(
        commits_before == commits_at_start,
        "the first sync committed ({} commits): git was expected to be up to date",
        commits_before - commits_at_start
    );
    let reconciles_before = reconciles(&operator).await?;
    let api_window_start = setup.api_requests().await?;
    let before = ProcessSample::read(pid).ok_or_else(|| anyhow::anyhow!("operator gone"))?;
    eprintln!(
        "bench:   steady-state window: at least {} and {} reconciles …",
        plan.interval_text.as_str(),
        plan.watches
    );
    let ticks = clock_ticks();
    let cap = plan.interval * 3;
    loop {
        let elapsed = before.at.elapsed();
        let step = if elapsed < plan.interval {
            (plan.interval - elapsed).min(Duration::from_secs(60))
        } else {
            Duration::from_secs(5)
        };
        tokio::time::sleep(step).await;
        anyhow::ensure!(
            operator.is_running(),
            "the operator exited:\n{}",
            operator.log_tail(30)
        );
        let done = reconciles(&operator).await? - reconciles_before;
        let now = ProcessSample::read(pid).ok_or_else(|| anyhow::anyhow!("operator gone"))?;
        let elapsed = now.at.duration_since(before.at);
        if step >= Duration::from_secs(30) || elapsed >= plan.interval {
            eprintln!(
                "bench:     {:>4.0} s: {done} reconciles, CPU {:.2} % of one core, RSS {:.1} MiB",
                elapsed.as_secs_f64(),
                now.cpu_percent_since(&before, ticks),
                imagewatch_e2e::bench::mib(now.rss_kib)
            );
        }
        if (elapsed >= plan.interval && done >= plan.watches as f64) || elapsed >= cap {
            break;
        }
    }
    let after = ProcessSample::read(pid).ok_or_else(|| anyhow::anyhow!("operator gone"))?;
    let window_requests = count_registry_requests(
        &read_range(&log, sync_log_end, file_len(&log))?,
        IMAGEWATCH_AGENT,
    );
    let window_tokens = registry.token_counts().since(&sync_tokens);
    let window_reconciles = reconciles(&operator).await? - reconciles_before;
    let window_commits = setup.commit_count()? - commits_before;
    let window_api = setup.api_requests().await?.since(&api_window_start);

    let window_cpu_seconds = after.ticks.saturating_sub(before.ticks) as f64 / ticks as f64;
    let per_cycle = if window_reconciles > 0.0 {
        plan.watches as f64 / window_reconciles
    } else {
        f64::NAN
    };
    let cpu_percent = 100.0 * window_cpu_seconds * per_cycle / plan.interval.as_secs_f64();
    fd_sampler.abort();
    anyhow::ensure!(
        operator.terminate(Duration::from_secs(30))?,
        "the operator did not stop on SIGTERM:\n{}",
        operator.log_tail(30)
    );

    // The restart: a new process over watches that hold their status.
    eprintln!("bench:   restarting the operator …");
    let restart_mark = CpuMark::now(&[
        ("kube-apiserver", ground_pid(&setup, "kube-apiserver")),
        ("etcd", ground_pid(&setup, "etcd")),
        ("registry", Some(registry.pid())),
    ]);
    let api_before_restart = setup.api_requests().await?;
    let commits_before_restart = setup.commit_count()?;
    let log_before_restart = file_len(&log);
    let restarted = Instant::now();
    let mut operator = start_operator()?;
    let restart_pid = operator
        .pid()
        .ok_or_else(|| anyhow::anyhow!("no operator"))?;
    let (resync, restart_reconciles, restart_requests) = loop {
        anyhow::ensure!(
            operator.is_running(),
            "the restarted operator exited:\n{}",
            operator.log_tail(30)
        );
        anyhow::ensure!(
            restarted.elapsed() < Duration::from_secs(3600),
            "the restarted operator did not reconcile every watch within an hour"
        );
        // Unreachable until the metrics listener is up: not yet started, not an error.
        let done = reconciles(&operator).await.unwrap_or(0.0);
        // The registry's log is read only once every watch has been reconciled.
        if done >= plan.watches as f64 {
            let requests = count_registry_requests(
                &read_range(&log, log_before_restart, file_len(&log))?,
                IMAGEWATCH_AGENT,
            );
            if requests.tag_lists.len() >= plan.repositories {
                break (restarted.elapsed(), done, requests);
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let restart_api = setup.api_requests().await?.since(&api_before_restart);
    let restart_cpu = restart_mark.with_new("operator", restart_pid).seconds();
    let restart_commits = setup.commit_count()? - commits_before_restart;
    // Every watch still holds its status: the restart changed nothing it should not have.
    setup
        .wait_watches(
            plan.watches,
            "Ready=True UpToDate after the restart",
            Duration::from_secs(300),
            up_to_date,
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", operator.log_tail(30)))?;
    eprintln!(
        "bench:   restarted operator reconciled every watch in {:.1} s",
        resync.as_secs_f64()
    );
    operator.kill();
    eprintln!("bench:   the registry's floor: every repository listed once at the default rate …");
    let tag_list_floor = tag_list_floor(&registry, &repos).await?;
    eprintln!(
        "bench:   {} tag lists in {:.1} s",
        repos.len(),
        tag_list_floor.as_secs_f64()
    );
    eprintln!("bench:   deleting the ImageWatches …");
    setup.delete_watches().await;
    Ok(WatchResult {
        plan,
        create,
        first_sync,
        sync_requests,
        sync_cpu,
        sync_tokens,
        sync_api: api_synced.since(&api_before),
        window_api,
        window: after.at.duration_since(before.at),
        window_cpu_seconds,
        window_requests,
        window_tokens,
        window_reconciles,
        window_commits,
        cpu_percent,
        rss_after_sync_kib: before.rss_kib,
        peak_rss_kib: after.hwm_kib,
        peak_fds: peak_fds.load(std::sync::atomic::Ordering::Relaxed),
        restart: Restart {
            resync,
            reconciles: restart_reconciles,
            requests: restart_requests,
            api: restart_api,
            cpu: restart_cpu,
            commits: restart_commits,
        },
        tag_list_floor,
    })
}

/// Lists every repository of `repos` once, as the operator's default per-registry rate lets
/// it (request `i` starts no earlier than `(i - burst) / rate` seconds in), 32 in flight,
/// each token covering 64 repositories; the time until the last answer is read.
async fn tag_list_floor(registry: &TokenRegistry, repos: &[String]) -> anyhow::Result<Duration> {
    use imagewatch::registry::ratelimit::{DEFAULT_BURST, DEFAULT_RATE_PER_SECOND};
    let per_token = imagewatch::registry::DEFAULT_REPOSITORIES_PER_TOKEN as usize;
    let tokens: Vec<String> = repos
        .chunks(per_token)
        .map(|chunk| {
            let names: Vec<&str> = chunk.iter().map(String::as_str).collect();
            registry.push_authorization(&names)
        })
        .collect();
    let http = reqwest::Client::new();
    let started = tokio::time::Instant::now();
    futures::stream::iter(repos.iter().enumerate())
        .map(|(i, repo)| {
            let (http, tokens) = (&http, &tokens);
            async move {
                let early = i.saturating_sub(DEFAULT_BURST as usize) as f64;
                tokio::time::sleep_until(
                    started + Duration::from_secs_f64(early / DEFAULT_RATE_PER_SECOND),
                )
                .await;
                let answer = http
                    .get(format!("http://{}/v2/{repo}/tags/list", registry.host))
                    .header(reqwest::header::AUTHORIZATION, &tokens[i / per_token])
                    .send()
                    .await?;
                anyhow::ensure!(
                    answer.status().is_success(),
                    "tag list of {repo}: HTTP {}",
                    answer.status()
                );
                answer.bytes().await?;
                Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(started.elapsed())
}

/// The scenario's world: R repositories holding one tag each, G manifests repositories
/// whose Deployments already run it, and W ImageWatches (watch `i` follows repository
/// `i mod R` and writes to manifests repository `i mod G`) with the pull Secret `benchreg`.
/// Returns the repositories and how long creating the watches took.
pub async fn populate(
    plan: &WatchPlan,
    registry: &Arc<TokenRegistry>,
    setup: &mut Setup,
) -> anyhow::Result<(Vec<String>, Duration)> {
    let host = registry.host.clone();
    let minting = registry.clone();
    let authorize: Authorizer = Arc::new(move |repos: &[&str]| minting.push_authorization(repos));
    let pusher = ImagePusher::new(&host, authorize)?;

    // R repositories, one tag each.
    let prefix = format!("scale-{}", random_suffix());
    let repos: Vec<String> = (0..plan.repositories)
        .map(|r| format!("{prefix}/app-{r}"))
        .collect();
    let base = BaseImage::new(&format!("{prefix}/base"));
    pusher.upload_base(&base).await?;
    let started = Instant::now();
    futures::stream::iter(&repos)
        .map(|r| {
            let (pusher, base) = (&pusher, &base);
            async move {
                pusher.mount_base(base, r).await?;
                pusher.push_tag(base, r, "v1.0.0").await
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    eprintln!(
        "bench:   {} repositories pushed in {:.1} s",
        repos.len(),
        started.elapsed().as_secs_f64()
    );
    drop(pusher);

    let ns = setup.ns.name.clone();
    setup
        .registry_secret("benchreg", &registry.dockerconfigjson())
        .await?;
    let watch = |i: usize| {
        (
            format!("w-{i}"),
            &repos[i % plan.repositories],
            i % plan.git_repos,
        )
    };
    let mut urls = Vec::new();
    for g in 0..plan.git_repos {
        let files: Vec<(String, String)> = (0..plan.watches)
            .filter(|i| watch(*i).2 == g)
            .map(|i| {
                let (name, repo, _) = watch(i);
                (
                    manifest_path(&name),
                    deployment(&name, &format!("{host}/{repo}:v1.0.0")),
                )
            })
            .collect();
        urls.push(setup.git_repo(&format!("scale-{ns}-{g}"), &files)?);
    }
    let objects = (0..plan.watches)
        .map(|i| {
            let (name, repo, g) = watch(i);
            watch_object(
                &name,
                &format!("{host}/{repo}"),
                "v*",
                &plan.interval_text,
                &urls[g],
                "benchreg",
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    eprintln!("bench:   creating {} ImageWatches …", plan.watches);
    let create = setup.create_watches(objects).await?;
    eprintln!("bench:   created in {:.1} s", create.as_secs_f64());
    Ok((repos, create))
}

pub async fn reconciles(operator: &imagewatch_e2e::Operator) -> anyhow::Result<f64> {
    Ok(metric_sum(
        &operator.metrics().await?,
        "imagewatch_reconciles_total",
        &[],
    ))
}
