//! `just bench`: the operator (the binary named by `IMAGEWATCH_BIN`, normally the release
//! build) measured on the real test ground; prints one markdown table with the machine it ran
//! on.
//!
//! Scenarios (see their modules):
//! - `peer`: imagewatch beside Argo CD Image Updater v1.3.0 in the same run, both deployed by
//!   the ground's Argo CD onto its node (1 push ×5, 6 pushes at once): push → commit and
//!   push → running; the peer is built from its source archive by `e2e/scripts/peer-build.sh`;
//! - `pushes`: push → commit latency and throughput for N simultaneous pushes;
//! - `apiserver`: the API server's and etcd's CPU per ImageWatch status write, with no
//!   operator running: the floor under the first sync of `watches`;
//! - `watches`: registry calls, credential fetches, CPU and memory of many watches in steady
//!   state;
//! - `seed000`: seed 000's flow — ECR pushes (moto) → EventBridge → SQS → one pattern watch →
//!   one pull request per push on a real Gitea (`imagewatch_e2e::seed000`).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `IMAGEWATCH_BENCH` | `peer,pushes,apiserver,watches,seed000` | scenarios to run |
//! | `IMAGEWATCH_BENCH_IU` | built by `peer-build.sh` | an `argocd-image-updater` v1.3.0 binary for `peer` instead |
//! | `IMAGEWATCH_BENCH_IU_SRC` | the binary's directory | with `IMAGEWATCH_BENCH_IU`: its source (`config/crd/bases/`) |
//! | `IMAGEWATCH_BENCH_IU_INTERVAL` | `10s` | the peer's `--interval` |
//! | `IMAGEWATCH_BENCH_IU_GIT_WEBHOOK` | `1` | `0`: nothing refreshes the peer's Applications (Argo CD finds its commits at its reconciliation) |
//! | `IMAGEWATCH_BENCH_PEER` | `1x5,6` | peer scenarios: `N` apps per tool, `NxR` for R rounds (both tools' Pods must fit on the node) |
//! | `IMAGEWATCH_BENCH_SEED000` | `27` | pushes (repositories, pull requests) of `seed000` |
//! | `IMAGEWATCH_BENCH_PUSHES` | `1,27,1000` | push scenario sizes; `N@R` runs the operator with `ratePerSecond: R` (and `burst: R`) for every registry instead of its default (100/s, burst 200) |
//! | `IMAGEWATCH_BENCH_PUSH_CONCURRENCY` | `32` | manifest `PUT`s in flight |
//! | `IMAGEWATCH_BENCH_PUSH_AUTH` | `token` | push scenarios' registry authentication: `token` (bearer tokens from a token server in the driver) or `basic` (htpasswd, bcrypt, on every request) |
//! | `IMAGEWATCH_BENCH_API_WRITES` | `2000` | ImageWatches (and writes per variant) of `apiserver` |
//! | `IMAGEWATCH_BENCH_WATCHES` | `50000` | ImageWatches of the steady-state scenario |
//! | `IMAGEWATCH_BENCH_REPOS` | `5000` | image repositories they follow |
//! | `IMAGEWATCH_BENCH_GIT_REPOS` | `50` | manifests repositories they write |
//! | `IMAGEWATCH_BENCH_INTERVAL` | `5m` | their `spec.interval` (= the measured window) |
//! | `IMAGEWATCH_BENCH_SHARD_WATCHES` | `20000` | ImageWatches of `shards` (over `IMAGEWATCH_BENCH_SHARD_REPOS`, default 2000, and `IMAGEWATCH_BENCH_GIT_REPOS` manifests repositories) |
//! | `IMAGEWATCH_BENCH_REPLICAS` | `3x6` | `shards`: replicas × shards |

mod apiserver;
mod common;
mod floors;
mod peer;
mod pushes;
mod shards;
mod watches;

use std::time::Duration;

use imagewatch_e2e::bench::{Check, Latencies, Machine, mib, render_table, thousands};

use crate::{
    common::env_usize,
    pushes::{PushPlan, PushResult},
    watches::{WatchPlan, WatchResult},
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let machine = Machine::detect(&imagewatch_e2e::operator::binary());
    let scenarios = std::env::var("IMAGEWATCH_BENCH")
        .unwrap_or_else(|_| "peer,pushes,apiserver,watches,seed000".into());
    let mut checks = Vec::new();
    let mut peer_report = None;
    if scenarios.split(',').any(|s| s.trim() == "peer") {
        peer_report = Some(run_peer().await?);
    }
    if scenarios.split(',').any(|s| s.trim() == "pushes") {
        let concurrency = env_usize("IMAGEWATCH_BENCH_PUSH_CONCURRENCY", 32);
        let auth = pushes::PushAuth::parse(
            &std::env::var("IMAGEWATCH_BENCH_PUSH_AUTH").unwrap_or_default(),
        )
        .map_err(|e| anyhow::anyhow!("IMAGEWATCH_BENCH_PUSH_AUTH: {e}"))?;
        let plans = PushPlan::parse_list(
            &std::env::var("IMAGEWATCH_BENCH_PUSHES").unwrap_or_else(|_| "1,27,1000".into()),
            concurrency,
            auth,
        )
        .map_err(|e| anyhow::anyhow!("IMAGEWATCH_BENCH_PUSHES: {e}"))?;
        for plan in plans {
            eprintln!(
                "bench: {} simultaneous pushes across {} repositories (registry rate {:?}, {} \
                 authentication) …",
                plan.pushes,
                plan.repositories,
                plan.registry_rate,
                plan.auth.name()
            );
            let rows = match pushes::run(plan).await {
                Ok(result) => push_checks(&result),
                Err(e) => vec![failed(
                    format!(
                        "{} pushes (registry rate {:?})",
                        plan.pushes, plan.registry_rate
                    ),
                    &e,
                )],
            };
            eprint!("{}", render_table(&rows));
            checks.extend(rows);
        }
    }
    let mut write_costs = None;
    if scenarios.split(',').any(|s| s.trim() == "apiserver") {
        let writes = env_usize("IMAGEWATCH_BENCH_API_WRITES", 2000).max(1);
        eprintln!("bench: API-server CPU per status write, {writes} ImageWatches …");
        let rows = match apiserver::run(writes).await {
            Ok(costs) => {
                let rows = write_cost_checks(&costs);
                write_costs = Some(costs);
                rows
            }
            Err(e) => vec![failed("API-server CPU per status write".into(), &e)],
        };
        eprint!("{}", render_table(&rows));
        checks.extend(rows);
    }
    if scenarios.split(',').any(|s| s.trim() == "watches") {
        let interval_text =
            std::env::var("IMAGEWATCH_BENCH_INTERVAL").unwrap_or_else(|_| "5m".into());
        let interval = imagewatch::controllers::parse_duration(&interval_text)
            .ok_or_else(|| anyhow::anyhow!("IMAGEWATCH_BENCH_INTERVAL {interval_text:?}"))?;
        let plan = WatchPlan {
            watches: env_usize("IMAGEWATCH_BENCH_WATCHES", 50_000),
            repositories: env_usize("IMAGEWATCH_BENCH_REPOS", 5_000).max(1),
            git_repos: env_usize("IMAGEWATCH_BENCH_GIT_REPOS", 50).max(1),
            interval_text,
            interval,
        };
        eprintln!(
            "bench: {} watches over {} repositories, interval {} …",
            plan.watches, plan.repositories, plan.interval_text
        );
        let name = format!(
            "{} watches / {} repositories",
            plan.watches, plan.repositories
        );
        let rows = match watches::run(plan).await {
            Ok(result) => watch_checks(&result, machine.cores, write_costs.as_ref()),
            Err(e) => vec![failed(name, &e)],
        };
        eprint!("{}", render_table(&rows));
        checks.extend(rows);
    }
    if scenarios.split(',').any(|s| s.trim() == "shards") {
        let spec = std::env::var("IMAGEWATCH_BENCH_REPLICAS").unwrap_or_else(|_| "3x6".into());
        let (replicas, shard_count) = spec
            .split_once('x')
            .and_then(|(r, s)| Some((r.parse::<usize>().ok()?, s.parse::<u32>().ok()?)))
            .ok_or_else(|| anyhow::anyhow!("IMAGEWATCH_BENCH_REPLICAS {spec:?}: write NxS"))?;
        let plan = WatchPlan {
            watches: env_usize("IMAGEWATCH_BENCH_SHARD_WATCHES", 20_000),
            repositories: env_usize("IMAGEWATCH_BENCH_SHARD_REPOS", 2_000).max(1),
            git_repos: env_usize("IMAGEWATCH_BENCH_GIT_REPOS", 50).max(1),
            interval_text: "1h".into(),
            interval: Duration::from_secs(3600),
        };
        eprintln!(
            "bench: {} watches over {} repositories, {replicas} replicas × {shard_count} shards …",
            plan.watches, plan.repositories
        );
        let name = format!("{} watches, {replicas} replicas", plan.watches);
        let rows = match shards::run(plan, replicas, shard_count).await {
            Ok(result) => shard_checks(&result),
            Err(e) => vec![failed(name, &e)],
        };
        eprint!("{}", render_table(&rows));
        checks.extend(rows);
    }
    if scenarios.split(',').any(|s| s.trim() == "seed000") {
        let count = env_usize("IMAGEWATCH_BENCH_SEED000", 27).max(1);
        eprintln!("bench: seed 000, {count} ECR pushes through SQS to pull requests on Gitea …");
        let name = format!("seed 000: {count} ECR pushes → SQS → pull requests on Gitea");
        let rows = match imagewatch_e2e::seed000::run(count).await {
            Ok(run) => {
                let complete = run.pulls.len() == count && run.files.len() == count;
                vec![Check::target(
                    format!("{name}: all open after the last push event"),
                    format!("{count} pull requests, none duplicated, ≤ 10 s"),
                    format!("{} pull requests in {}", run.pulls.len(), secs(run.elapsed)),
                    complete && run.elapsed.as_secs_f64() <= 10.0,
                )]
            }
            Err(e) => vec![failed(name, &e)],
        };
        eprint!("{}", render_table(&rows));
        checks.extend(rows);
    }
    println!("Measured {} on {machine}.\n", jiff::Zoned::now().date());
    if let Some(report) = peer_report {
        println!("{report}");
    }
    if !checks.is_empty() {
        print!("{}", render_table(&checks));
    }
    Ok(())
}

/// The rows of the sharded scenario: the first sync, then each replica's share against what
/// its watches predict (reconciles and registry requests in proportion).
fn shard_checks(r: &shards::ShardResult) -> Vec<Check> {
    let p = &r.plan;
    let name = format!(
        "{} watches / {} repositories, {} replicas × {} shards",
        thousands(p.watches as u64),
        thousands(p.repositories as u64),
        r.replicas,
        r.shards
    );
    let mut checks = vec![Check::info(
        format!("{name}: start → all Ready (first sync)"),
        format!(
            "{}; ground CPU seconds {}",
            secs(r.first_sync),
            r.ground_cpu
                .iter()
                .map(|(process, s)| format!("{process} {s:.1}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )];
    let total_reconciles: f64 = r.shares.iter().map(|s| s.reconciles).sum();
    let total_requests: f64 = r.shares.iter().map(|s| s.registry_requests).sum();
    for share in &r.shares {
        let part = share.watches as f64 / p.watches.max(1) as f64;
        let of = |value: f64, total: f64| 100.0 * value / total.max(1.0);
        checks.push(Check::info(
            format!("{name}: replica {}", share.name),
            format!(
                "shards {:?}: {} watches ({:.1} % of all); reconciles {} ({:.1} %), registry requests {} ({:.1} %); CPU {:.1} s ({:.2} ms per watch held); peak RSS {:.1} MiB",
                share.shards,
                thousands(share.watches as u64),
                100.0 * part,
                thousands(share.reconciles as u64),
                of(share.reconciles, total_reconciles),
                thousands(share.registry_requests as u64),
                of(share.registry_requests, total_requests),
                share.cpu_seconds,
                1000.0 * share.cpu_seconds / share.watches.max(1) as f64,
                mib(share.peak_rss_kib),
            ),
        ));
    }
    checks
}

/// The row of a scenario that could not finish.
fn failed(scenario: String, error: &anyhow::Error) -> Check {
    let message = format!("{error:#}");
    let first = message.lines().next().unwrap_or_default();
    Check::target(
        format!("{scenario}: scenario"),
        "completes",
        format!("failed: {first}"),
        false,
    )
}

fn secs(d: std::time::Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// The rows of one push scenario; the targets apply to the sizes they were set for.
fn push_checks(r: &PushResult) -> Vec<Check> {
    let p = &r.plan;
    let name = format!(
        "{} push{} ({} repositor{}{})",
        thousands(p.pushes as u64),
        if p.pushes == 1 { "" } else { "es" },
        p.repositories,
        if p.repositories == 1 { "y" } else { "ies" },
        match p.registry_rate {
            Some(rate) => format!(", registry rate limit {rate}/s"),
            None => String::new(),
        }
    );
    let mut checks = Vec::new();
    let latencies = match r.latencies {
        Some(l) => format!(
            "{:.2} / {:.2} / {:.2} / {:.2} s",
            l.p50, l.p95, l.p99, l.max
        ),
        None => "none committed".into(),
    };
    checks.push(Check::info(
        format!("{name}: push → commit p50 / p95 / p99 / max"),
        latencies,
    ));
    // Against what the ground needs for the same work (see floors.rs).
    let floor = format!("{name}: against the floor (imagewatch ÷ what the ground needs)");
    match (&r.floor, p.pushes, r.latencies) {
        (Err(e), _, _) => checks.push(Check::target(
            floor,
            "≤ 1.5×",
            format!(
                "floor not measured: {}",
                e.lines().next().unwrap_or_default()
            ),
            false,
        )),
        (Ok(f), 1, Some(l)) => match f.one() {
            Some(base) => checks.push(Check::target(
                floor,
                "p50 ≤ 1.5×",
                format!(
                    "p50 {:.3} s vs {:.3} s (notification {:.3} s + git fetch, commit, push \
                     {:.3} s) = {:.2}×",
                    l.p50,
                    base,
                    f.notify.map_or(0.0, |n| n.p50),
                    f.git.map_or(0.0, |g| g.p50),
                    l.p50 / base.max(1e-9)
                ),
                r.missing == 0 && l.p50 <= 1.5 * base,
            )),
            None => checks.push(Check::target(
                floor,
                "p50 ≤ 1.5×",
                "no floor samples",
                false,
            )),
        },
        (Ok(f), _, _) => {
            let base = f.all_in().as_secs_f64();
            checks.push(Check::target(
                floor,
                "all committed ≤ 1.5×",
                format!(
                    "{} vs {} (registry: all notified after {}; git: {} repositor{} \
                     committed and pushed at once in {}) = {:.2}×",
                    secs(r.all_in),
                    secs(f.all_in()),
                    secs(f.notify_all_in),
                    p.git_repos,
                    if p.git_repos == 1 { "y" } else { "ies" },
                    secs(f.git_all_in),
                    r.all_in.as_secs_f64() / base.max(1e-9)
                ),
                r.missing == 0 && r.all_in.as_secs_f64() <= 1.5 * base,
            ));
        }
    }
    checks.push(Check::info(
        format!("{name}: where a push's time goes (p50 per stage)"),
        r.stages
            .iter()
            .map(|(stage, p50)| match p50 {
                Some(p50) => format!("{stage} {:.1} ms", p50 * 1000.0),
                None => format!("{stage} —"),
            })
            .collect::<Vec<_>>()
            .join(", "),
    ));
    let committed = if r.missing == 0 {
        secs(r.all_in)
    } else {
        format!(
            "{} of {} not committed after {}",
            r.missing,
            p.pushes,
            secs(r.all_in)
        )
    };
    checks.push(Check::info(
        format!("{name}: all committed after"),
        committed,
    ));
    if p.pushes > 1 {
        checks.push(Check::info(
            format!("{name}: throughput; all pushes sent after; commits"),
            format!(
                "{:.0} pushes/s; {} (the setup pushes, no watch yet: {}); {} commits in {} git \
                 repositor{}",
                (p.pushes - r.missing) as f64 / r.all_in.as_secs_f64().max(1e-9),
                secs(r.push_phase),
                secs(r.idle_push_phase),
                r.commits,
                p.git_repos,
                if p.git_repos == 1 { "y" } else { "ies" }
            ),
        ));
        checks.push(Check::info(
            format!("{name}: CPU seconds until all committed"),
            r.cpu
                .iter()
                .map(|(process, seconds)| format!("{process} {seconds:.2}"))
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    checks.push(Check::info(
        format!("{name}: operator registry requests until all committed"),
        format!(
            "{} tag lists, {} manifest HEADs, {} other",
            thousands(r.requests.tag_list_total()),
            thousands(r.requests.manifest_heads),
            r.requests.other
        ),
    ));
    checks.push(Check::info(
        format!("{name}: API requests until all committed"),
        r.api.summary(common::API_RESOURCES),
    ));
    checks.push(Check::info(
        format!("{name}: operator peak RSS"),
        format!("{:.1} MiB", mib(r.peak_rss_kib)),
    ));
    checks
}

/// The rows of the API-server scenario.
fn write_cost_checks(c: &apiserver::WriteCosts) -> Vec<Check> {
    c.costs
        .iter()
        .map(|cost| {
            Check::info(
                format!("API-server CPU per write: {}", cost.what),
                format!(
                    "{:.2} ms (etcd {:.2} ms; {} writes, 32 in flight, in {})",
                    cost.apiserver_ms,
                    cost.etcd_ms,
                    thousands(c.writes as u64),
                    secs(cost.elapsed)
                ),
            )
        })
        .collect()
}

/// The rows of the steady-state scenario; with `write_costs`, the floor the API server's and
/// etcd's work per status write puts under the first sync.
fn watch_checks(
    r: &WatchResult,
    cores: usize,
    write_costs: Option<&apiserver::WriteCosts>,
) -> Vec<Check> {
    let p = &r.plan;
    let name = format!(
        "{} watches / {} repositories",
        thousands(p.watches as u64),
        thousands(p.repositories as u64)
    );
    let full_size = p.watches == 50_000 && p.repositories == 5_000;
    let target = |metric: String, target: String, measured: String, pass: bool| {
        if full_size {
            Check::target(metric, target, measured, pass)
        } else {
            Check::info(
                metric,
                format!("{measured} (target {target} is for 50,000 / 5,000)"),
            )
        }
    };
    let mut checks = vec![Check::info(
        format!("{name}: create the ImageWatches (32 in flight)"),
        format!(
            "{} ({:.0}/s)",
            secs(r.create),
            p.watches as f64 / r.create.as_secs_f64().max(1e-9)
        ),
    )];
    checks.push(target(
        format!("{name}: operator start → all Ready (first sync)"),
        "≤ 120 s".into(),
        format!(
            "{}; {} tag lists, {} manifest HEADs, {} answered 401",
            secs(r.first_sync),
            thousands(r.sync_requests.tag_list_total()),
            thousands(r.sync_requests.manifest_heads),
            thousands(r.sync_requests.unauthorized)
        ),
        r.first_sync.as_secs_f64() <= 120.0,
    ));
    let cores = cores.max(1);
    if let Some(write) = write_costs.and_then(|c| c.operator_write()) {
        let floor = p.watches as f64 * (write.apiserver_ms + write.etcd_ms) / 1000.0;
        checks.push(Check::info(
            format!("{name}: the ground's floor under the first sync"),
            format!(
                "{} status writes × {:.2} ms of API-server and etcd CPU (the `apiserver` rows) = \
                 {floor:.0} CPU-s, {} on {cores} cores with nothing else running",
                thousands(p.watches as u64),
                write.apiserver_ms + write.etcd_ms,
                secs(Duration::from_secs_f64(floor / cores as f64)),
            ),
        ));
    }
    // The floors of the same run: the API server taking W status writes alone (the
    // `apiserver` scenario's wall time for its writes, scaled to W), and the registry
    // answering one tag list per repository at the default rate.
    let status_floor = write_costs.and_then(|c| {
        c.operator_write().map(|w| {
            Duration::from_secs_f64(w.elapsed.as_secs_f64() * p.watches as f64 / c.writes as f64)
        })
    });
    let ratio = |measured: Duration, floor: Duration| {
        measured.as_secs_f64() / floor.as_secs_f64().max(1e-9)
    };
    match status_floor {
        Some(status_floor) => {
            let floor = status_floor.max(r.tag_list_floor);
            let x = ratio(r.first_sync, floor);
            checks.push(Check::target(
                format!("{name}: first sync against its floor"),
                "≤ 1.2×",
                format!(
                    "{x:.2}×: {} against {} (the larger of {} status writes alone, {}, and {} tag lists at the default rate, {})",
                    secs(r.first_sync),
                    secs(floor),
                    thousands(p.watches as u64),
                    secs(status_floor),
                    thousands(p.repositories as u64),
                    secs(r.tag_list_floor)
                ),
                x <= 1.2,
            ));
        }
        None => checks.push(Check::info(
            format!("{name}: first sync against its floor"),
            "the status-write floor comes from the `apiserver` scenario: run it in the same bench"
                .to_string(),
        )),
    }
    let x = ratio(r.restart.resync, r.tag_list_floor);
    checks.push(Check::target(
        format!("{name}: first sync after a restart against its floor"),
        "≤ 1.2×",
        format!(
            "{x:.2}×: {} against {} ({} tag lists at the default rate, 100/s after a burst of 200)",
            secs(r.restart.resync),
            secs(r.tag_list_floor),
            thousands(p.repositories as u64)
        ),
        x <= 1.2,
    ));
    let total: f64 = r.sync_cpu.iter().map(|(_, s)| s).sum();
    checks.push(Check::info(
        format!("{name}: CPU seconds of the first sync"),
        format!(
            "{}; {:.1} in all, {:.1} ms per watch ({:.0} % of {} cores for {})",
            r.sync_cpu
                .iter()
                .map(|(process, seconds)| format!(
                    "{process} {seconds:.1} ({:.2} ms per watch)",
                    1000.0 * seconds / p.watches as f64
                ))
                .collect::<Vec<_>>()
                .join(", "),
            total,
            1000.0 * total / p.watches as f64,
            100.0 * total / (r.first_sync.as_secs_f64().max(1e-9) * cores as f64),
            cores,
            secs(r.first_sync)
        ),
    ));
    checks.push(Check::info(
        format!("{name}: API requests of the first sync"),
        r.sync_api.summary(common::API_RESOURCES),
    ));
    let restart = &r.restart;
    checks.push(Check::info(
        format!("{name}: first sync after a restart (SIGTERM, a new process; every status already written)"),
        format!(
            "{}: {} reconciles, {} tag lists over {} repositories, {} manifest HEADs, {} commits; CPU seconds {}; API requests: {}",
            secs(restart.resync),
            thousands(restart.reconciles as u64),
            thousands(restart.requests.tag_list_total()),
            thousands(restart.requests.tag_lists.len() as u64),
            thousands(restart.requests.manifest_heads),
            restart.commits,
            restart
                .cpu
                .iter()
                .map(|(process, seconds)| format!("{process} {seconds:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
            restart.api.summary(common::API_RESOURCES),
        ),
    ));
    checks.push(target(
        format!("{name}: operator peak RSS"),
        "≤ 400 MiB".into(),
        format!(
            "{:.1} MiB (after first sync {:.1} MiB; at most {} open file descriptors)",
            mib(r.peak_rss_kib),
            mib(r.rss_after_sync_kib),
            thousands(r.peak_fds as u64)
        ),
        mib(r.peak_rss_kib) <= 400.0,
    ));
    // A cycle is one reconcile per watch; the window may hold a little more or less.
    let per_cycle = p.watches as f64 / r.window_reconciles.max(1.0);
    checks.push(target(
        format!("{name}: steady-state CPU at interval {}", p.interval_text),
        "≤ 5 % of one core".into(),
        format!(
            "{:.2} % ({:.1} CPU-s in a {} window of {} reconciles, {} commits)",
            r.cpu_percent,
            r.window_cpu_seconds,
            secs(r.window),
            thousands(r.window_reconciles as u64),
            r.window_commits
        ),
        r.cpu_percent <= 5.0,
    ));
    checks.push(Check::info(
        format!("{name}: API requests in the steady-state window"),
        r.window_api.summary(common::API_RESOURCES),
    ));
    let lists = r.window_requests.tag_list_total() as f64 * per_cycle;
    checks.push(target(
        format!("{name}: registry tag-list calls per cycle"),
        format!("≤ {}", thousands(p.repositories as u64)),
        format!(
            "{lists:.0} ({} in the window: {} repositories, at most {} per repository); {:.0} manifest HEADs per cycle",
            thousands(r.window_requests.tag_list_total()),
            thousands(r.window_requests.tag_lists.len() as u64),
            r.window_requests.tag_list_max_per_repository(),
            r.window_requests.manifest_heads as f64 * per_cycle,
        ),
        lists <= p.repositories as f64,
    ));
    // One token request per `repositoriesPerToken` repositories (the operator's default).
    let token_requests =
        p.repositories
            .div_ceil(imagewatch::registry::DEFAULT_REPOSITORIES_PER_TOKEN as usize) as u64;
    checks.push(target(
        format!("{name}: credential (token) fetches per expiry, one registry"),
        format!(
            "{} (one per {} repositories)",
            thousands(token_requests),
            imagewatch::registry::DEFAULT_REPOSITORIES_PER_TOKEN
        ),
        format!(
            "{} in the first token lifetime (naming {} repository scopes, each in at most {} requests; {} refused); {} in the window",
            thousands(r.sync_tokens.issued),
            thousands(r.sync_tokens.per_scope().len() as u64),
            r.sync_tokens.max_per_scope(),
            r.sync_tokens.refused,
            r.window_tokens.issued
        ),
        r.sync_tokens.issued == token_requests
            && r.sync_tokens.per_scope().len() == p.repositories
            && r.window_tokens.issued == 0,
    ));
    checks
}

/// The side-by-side scenarios. The peer is built from its source archive
/// (`e2e/scripts/peer-build.sh`, cached) unless `IMAGEWATCH_BENCH_IU` names a binary.
async fn run_peer() -> anyhow::Result<String> {
    let (binary, source) = match std::env::var_os("IMAGEWATCH_BENCH_IU") {
        Some(binary) => {
            let binary = std::path::PathBuf::from(binary);
            let source = std::env::var_os("IMAGEWATCH_BENCH_IU_SRC")
                .map(std::path::PathBuf::from)
                .or_else(|| binary.parent().map(std::path::Path::to_path_buf))
                .unwrap_or_default();
            (binary, source)
        }
        None => build_peer()?,
    };
    let git_webhook = std::env::var("IMAGEWATCH_BENCH_IU_GIT_WEBHOOK").map_or(true, |v| v != "0");
    let peer = peer::Peer {
        version: peer_version(&binary),
        binary,
        source,
        interval: std::env::var("IMAGEWATCH_BENCH_IU_INTERVAL").unwrap_or_else(|_| "10s".into()),
        git_webhook,
    };
    let plans = parse_peer_plans(
        &std::env::var("IMAGEWATCH_BENCH_PEER").unwrap_or_else(|_| "1x5,6".into()),
    )
    .map_err(|e| anyhow::anyhow!("IMAGEWATCH_BENCH_PEER: {e}"))?;
    let ground = imagewatch_e2e::Ground::get()?;
    let setting = format!(
        "Argo CD v3.5.1 on the ground: {}, repo-server revision cache 3 min; {}.\n\n",
        peer::argocd_reconciliation(ground),
        if peer.git_webhook {
            "the peer's Applications are refreshed when its repository's main moves (what \
             argocd-server's Git webhook does), imagewatch refreshes its own"
        } else {
            "the peer as shipped (nothing refreshes its Applications), imagewatch refreshes its \
             own"
        }
    );
    let mut rows = Vec::new();
    for plan in plans {
        eprintln!(
            "bench: side by side with {}: {} apps, {} round(s) …",
            peer.version, plan.apps, plan.rounds
        );
        match peer::run(&peer, plan).await {
            Ok(result) => rows.extend(peer_rows(&result)),
            Err(e) => rows.push({
                eprintln!("bench: side-by-side scenario failed: {e:#}");
                [
                    plan_name(plan),
                    "scenario".into(),
                    format!(
                        "failed: {}",
                        format!("{e:#}").lines().next().unwrap_or_default()
                    ),
                    String::new(),
                    String::new(),
                ]
            }),
        }
        eprint!("{setting}{}", render_peer_table(&peer, &rows));
    }
    Ok(format!("{setting}{}", render_peer_table(&peer, &rows)))
}

/// `e2e/scripts/peer-build.sh`: the peer's binary and source directory (its export lines).
fn build_peer() -> anyhow::Result<(std::path::PathBuf, std::path::PathBuf)> {
    let script = imagewatch_e2e::ground::repo_root().join("e2e/scripts/peer-build.sh");
    eprintln!("bench: building Argo CD Image Updater (cached) …");
    let out = std::process::Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| anyhow::anyhow!("running {}: {e}", script.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "{} failed (see its output above)",
        script.display()
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let var = |key: &str| {
        text.lines()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| std::path::PathBuf::from(v))
            .ok_or_else(|| anyhow::anyhow!("peer-build.sh printed no {key}"))
    };
    Ok((var("IMAGEWATCH_BENCH_IU")?, var("IMAGEWATCH_BENCH_IU_SRC")?))
}

/// `argocd-image-updater version --short`, or the binary's name.
fn peer_version(binary: &std::path::Path) -> String {
    std::process::Command::new(binary)
        .args(["version", "--short"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|v| !v.is_empty())
        .map_or_else(
            || "Argo CD Image Updater".to_string(),
            |v| format!("Argo CD Image Updater {v}"),
        )
}

/// `1x5,6`: N apps, `NxR` for R rounds of one push per app.
fn parse_peer_plans(text: &str) -> Result<Vec<peer::PeerPlan>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|entry| {
            let number = |s: &str| {
                s.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{entry:?} is not N or NxROUNDS (positive numbers)"))
            };
            Ok(match entry.split_once('x') {
                Some((apps, rounds)) => peer::PeerPlan {
                    apps: number(apps)?,
                    rounds: number(rounds)?,
                },
                None => peer::PeerPlan {
                    apps: number(entry)?,
                    rounds: 1,
                },
            })
        })
        .collect()
}

fn plan_name(plan: peer::PeerPlan) -> String {
    match (plan.apps, plan.rounds) {
        (1, 1) => "1 push".into(),
        (1, r) => format!("1 push ×{r}"),
        (n, 1) => format!("{n} pushes at once ({n} apps)"),
        (n, r) => format!("{n} pushes at once ×{r}"),
    }
}

/// `scenario | metric | imagewatch | peer | peer ÷ imagewatch` rows of one scenario.
fn peer_rows(r: &peer::PeerResult) -> Vec<[String; 5]> {
    let name = plan_name(r.plan);
    let pushes = r.plan.apps * r.plan.rounds;
    // The headlines: p50 for single pushes, the slowest round's last one for a burst.
    let headline = |missing: usize, lat: Option<Latencies>, rounds: &[Duration]| -> Option<f64> {
        if missing > 0 {
            return None;
        }
        if r.plan.apps == 1 {
            lat.map(|l| l.p50)
        } else {
            rounds.iter().map(Duration::as_secs_f64).reduce(f64::max)
        }
    };
    let shown = |missing: usize, v: Option<f64>, what: &str, deadline: Duration| match v {
        Some(v) => format!("{v:.2} s"),
        None => format!(
            "{missing} of {pushes} not {what} in {} s",
            deadline.as_secs()
        ),
    };
    let ratio = |a: Option<f64>, b: Option<f64>, deadline: Duration| match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => format!("{:.1}×", b / a),
        (Some(a), None) if a > 0.0 => format!("> {:.0}×", deadline.as_secs_f64() / a),
        _ => "—".into(),
    };
    let single = r.plan.apps == 1;
    let mut rows = Vec::new();
    for (metric_one, metric_all, what, deadline, get) in [
        (
            "push → commit p50",
            "all committed after",
            "committed",
            peer::DEADLINE,
            (|t: &peer::ToolResult| (t.missing, t.latencies, t.all_in.clone()))
                as fn(&peer::ToolResult) -> (usize, Option<Latencies>, Vec<Duration>),
        ),
        (
            "push → running p50",
            "all running after",
            "running",
            peer::RUN_DEADLINE,
            |t: &peer::ToolResult| (t.not_running, t.running, t.all_running.clone()),
        ),
    ] {
        let (iw_missing, iw_lat, iw_rounds) = get(&r.imagewatch);
        let (iu_missing, iu_lat, iu_rounds) = get(&r.peer);
        let iw = headline(iw_missing, iw_lat, &iw_rounds);
        let iu = headline(iu_missing, iu_lat, &iu_rounds);
        rows.push([
            name.clone(),
            if single { metric_one } else { metric_all }.into(),
            shown(iw_missing, iw, what, deadline),
            shown(iu_missing, iu, what, deadline),
            ratio(iw, iu, deadline),
        ]);
        let latencies = |l: Option<Latencies>| match l {
            Some(l) => format!("{:.2} / {:.2} s", l.p50, l.max),
            None => format!("none {what}"),
        };
        rows.push([
            name.clone(),
            format!("{} p50 / max", metric_one.trim_end_matches(" p50")),
            latencies(iw_lat),
            latencies(iu_lat),
            String::new(),
        ]);
    }
    let requests = |t: &peer::ToolResult| {
        let q = &t.requests;
        format!(
            "{} tag lists, {} manifest HEAD, {} manifest GET, {} other",
            thousands(q.tag_list_total()),
            thousands(q.manifest_heads),
            thousands(q.manifest_gets),
            thousands(q.other + q.unauthorized)
        )
    };
    rows.push([
        name.clone(),
        "registry requests".into(),
        requests(&r.imagewatch),
        requests(&r.peer),
        String::new(),
    ]);
    rows.push([
        name.clone(),
        "commits".into(),
        r.imagewatch.commits.to_string(),
        r.peer.commits.to_string(),
        String::new(),
    ]);
    if r.webhook_refreshes > 0 {
        rows.push([
            name,
            "refreshes asked by the Git-webhook stand-in".into(),
            "—".into(),
            r.webhook_refreshes.to_string(),
            String::new(),
        ]);
    }
    rows
}

fn render_peer_table(peer: &peer::Peer, rows: &[[String; 5]]) -> String {
    let mut out = format!(
        "| scenario | metric | imagewatch | {} | ratio |\n|---|---|---|---|---|\n",
        peer.version
    );
    for row in rows {
        let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out
}
