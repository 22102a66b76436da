//! `just bench`: the operator (the binary named by `IMAGEWATCH_BIN`, normally the release
//! build) measured on the real test ground; prints one markdown table with the machine it ran
//! on.
//!
//! Scenarios (see their modules):
//! - `pushes`: push → commit latency and throughput for N simultaneous pushes;
//! - `watches`: registry calls, credential fetches, CPU and memory of many watches in steady
//!   state;
//! - `seed000`: seed 000's flow — ECR pushes (moto) → EventBridge → SQS → one pattern watch →
//!   one pull request per push on a real Gitea (`imagewatch_e2e::seed000`).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `IMAGEWATCH_BENCH` | `pushes,watches,seed000` | scenarios to run |
//! | `IMAGEWATCH_BENCH_SEED000` | `27` | pushes (repositories, pull requests) of `seed000` |
//! | `IMAGEWATCH_BENCH_PUSHES` | `1,27,1000` | push scenario sizes; `N@R` runs the operator with `ratePerSecond: R` (and `burst: R`) for every registry instead of its default (100/s, burst 200) |
//! | `IMAGEWATCH_BENCH_PUSH_CONCURRENCY` | `32` | manifest `PUT`s in flight |
//! | `IMAGEWATCH_BENCH_WATCHES` | `10000` | ImageWatches of the steady-state scenario |
//! | `IMAGEWATCH_BENCH_REPOS` | `1000` | image repositories they follow |
//! | `IMAGEWATCH_BENCH_GIT_REPOS` | `10` | manifests repositories they write |
//! | `IMAGEWATCH_BENCH_INTERVAL` | `5m` | their `spec.interval` (= the measured window) |

mod common;
mod pushes;
mod watches;

use imagewatch_e2e::bench::{Check, Machine, mib, render_table, thousands};

use crate::{
    common::env_usize,
    pushes::{PushPlan, PushResult},
    watches::{WatchPlan, WatchResult},
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let scenarios =
        std::env::var("IMAGEWATCH_BENCH").unwrap_or_else(|_| "pushes,watches,seed000".into());
    let mut checks = Vec::new();
    if scenarios.split(',').any(|s| s.trim() == "pushes") {
        let concurrency = env_usize("IMAGEWATCH_BENCH_PUSH_CONCURRENCY", 32);
        let plans = PushPlan::parse_list(
            &std::env::var("IMAGEWATCH_BENCH_PUSHES").unwrap_or_else(|_| "1,27,1000".into()),
            concurrency,
        )
        .map_err(|e| anyhow::anyhow!("IMAGEWATCH_BENCH_PUSHES: {e}"))?;
        for plan in plans {
            eprintln!(
                "bench: {} simultaneous pushes across {} repositories (registry rate {:?}) …",
                plan.pushes, plan.repositories, plan.registry_rate
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
    if scenarios.split(',').any(|s| s.trim() == "watches") {
        let interval_text =
            std::env::var("IMAGEWATCH_BENCH_INTERVAL").unwrap_or_else(|_| "5m".into());
        let interval = imagewatch::controller::parse_duration(&interval_text)
            .ok_or_else(|| anyhow::anyhow!("IMAGEWATCH_BENCH_INTERVAL {interval_text:?}"))?;
        let plan = WatchPlan {
            watches: env_usize("IMAGEWATCH_BENCH_WATCHES", 10_000),
            repositories: env_usize("IMAGEWATCH_BENCH_REPOS", 1_000).max(1),
            git_repos: env_usize("IMAGEWATCH_BENCH_GIT_REPOS", 10).max(1),
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
            Ok(result) => watch_checks(&result),
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
    let machine = Machine::detect(&imagewatch_e2e::operator::binary());
    println!("Measured {} on {machine}.\n", jiff::Zoned::now().date());
    print!("{}", render_table(&checks));
    Ok(())
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
    let metric = format!("{name}: push → commit p50 / p95 / p99 / max");
    match (p.pushes, r.latencies) {
        (1, Some(l)) => checks.push(Check::target(
            metric,
            "p50 ≤ 1 s, p99 ≤ 3 s",
            latencies,
            l.p50 <= 1.0 && l.p99 <= 3.0 && r.missing == 0,
        )),
        _ => checks.push(Check::info(metric, latencies)),
    }
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
    let metric = format!("{name}: all committed after");
    let limit = match (p.pushes, p.repositories) {
        (27, _) => Some(5.0),
        (1000, 100) => Some(30.0),
        _ => None,
    };
    match limit {
        Some(limit) => checks.push(Check::target(
            metric,
            format!("≤ {limit:.0} s"),
            committed,
            r.missing == 0 && r.all_in.as_secs_f64() <= limit,
        )),
        None => checks.push(Check::info(metric, committed)),
    }
    if p.pushes > 1 {
        checks.push(Check::info(
            format!("{name}: throughput; all pushes sent after; commits"),
            format!(
                "{:.0} pushes/s; {}; {} commits in {} git repositor{}",
                (p.pushes - r.missing) as f64 / r.all_in.as_secs_f64().max(1e-9),
                secs(r.push_phase),
                r.commits,
                p.git_repos,
                if p.git_repos == 1 { "y" } else { "ies" }
            ),
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
        format!("{name}: operator peak RSS"),
        format!("{:.1} MiB", mib(r.peak_rss_kib)),
    ));
    checks
}

/// The rows of the steady-state scenario.
fn watch_checks(r: &WatchResult) -> Vec<Check> {
    let p = &r.plan;
    let name = format!(
        "{} watches / {} repositories",
        thousands(p.watches as u64),
        thousands(p.repositories as u64)
    );
    let full_size = p.watches == 10_000 && p.repositories == 1_000;
    let target = |metric: String, target: String, measured: String, pass: bool| {
        if full_size {
            Check::target(metric, target, measured, pass)
        } else {
            Check::info(
                metric,
                format!("{measured} (target {target} is for 10,000 / 1,000)"),
            )
        }
    };
    let mut checks = vec![
        Check::info(
            format!("{name}: create the ImageWatches (32 in flight)"),
            format!(
                "{} ({:.0}/s)",
                secs(r.create),
                p.watches as f64 / r.create.as_secs_f64().max(1e-9)
            ),
        ),
        Check::info(
            format!("{name}: operator start → all Ready (first sync)"),
            format!(
                "{}; {} tag lists, {} manifest HEADs, {} answered 401",
                secs(r.first_sync),
                thousands(r.sync_requests.tag_list_total()),
                thousands(r.sync_requests.manifest_heads),
                thousands(r.sync_requests.unauthorized)
            ),
        ),
    ];
    checks.push(target(
        format!("{name}: operator peak RSS"),
        "≤ 200 MiB".into(),
        format!(
            "{:.1} MiB (after first sync {:.1} MiB; at most {} open file descriptors)",
            mib(r.peak_rss_kib),
            mib(r.rss_after_sync_kib),
            thousands(r.peak_fds as u64)
        ),
        mib(r.peak_rss_kib) <= 200.0,
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
    checks.push(target(
        format!("{name}: credential (token) fetches per expiry, one registry"),
        "1".into(),
        format!(
            "{} in the first token lifetime (naming {} repository scopes, each in at most {} requests; {} refused); {} in the window",
            thousands(r.sync_tokens.issued),
            thousands(r.sync_tokens.per_scope().len() as u64),
            r.sync_tokens.max_per_scope(),
            r.sync_tokens.refused,
            r.window_tokens.issued
        ),
        r.sync_tokens.issued == 1 && r.window_tokens.issued == 0,
    ));
    checks
}
