//! `just bench`: push → commit latency on the real test ground.
//!
//! For each scenario, N image repositories are watched (one ImageWatch per repository, each
//! writing its own Deployment in one manifests repository, polling only hourly), then N new
//! tags are pushed at once to a CNCF distribution registry whose notifications go to the
//! operator's webhook receiver. Latency of a push = the moment its new tag is visible on the
//! remote branch − the moment `skopeo` finished pushing it. Also reported: the operator's
//! peak RSS and the registry scans it made.
//!
//! Sizes: `IMAGEWATCH_BENCH_PUSHES` (comma-separated, default `1,27`).

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use imagewatch_e2e::{NotifyingRegistry, ground::random_suffix, setup::Scenario, wait_until};

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn deployment(name: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: {image}\n"
    )
}

fn watch(ns: &str, name: &str, image: &str, url: &str) -> String {
    format!(
        "apiVersion: imagewatch.dev/v1alpha1\nkind: ImageWatch\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  image: {image}\n  tags: {{pattern: \"v*\"}}\n  interval: 1h\n  credentials: {{secretRef: {{name: benchreg}}}}\n  git: {{url: \"{url}\", secretRef: {{name: git-creds}}}}\n  target:\n    workload: {{path: apps/{name}, kind: Deployment, name: {name}, container: app}}\n---\n"
    )
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn rss_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

struct Row {
    pushes: usize,
    p50: f64,
    p95: f64,
    p99: f64,
    max: f64,
    all_in: f64,
    commits: usize,
    peak_rss_mib: f64,
}

async fn scenario(n: usize) -> anyhow::Result<Row> {
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let token = format!("bench-{}", random_suffix());
    let registry = NotifyingRegistry::start(&format!("http://{addr}/hooks/distribution"), &token)?;
    let host = registry.var("IMAGEWATCH_REGISTRY");
    let s = Scenario::start(
        "bench",
        &[
            "--webhook-addr",
            &addr,
            "--webhook-secret",
            "hooks",
            "--pod-namespace",
            "{ns}",
            "--insecure-registry",
            &host,
        ],
    )
    .await?;
    imagewatch_e2e::setup::create_secret(
        &s.admin,
        &s.ns.name,
        "hooks",
        "Opaque",
        &[("distribution-token", &token)],
    )
    .await?;
    let auth = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            registry.var("IMAGEWATCH_REGISTRY_USER"),
            registry.var("IMAGEWATCH_REGISTRY_PASSWORD")
        ))
    };
    let config = serde_json::json!({"auths": {host.clone(): {"auth": auth}}}).to_string();
    imagewatch_e2e::setup::create_secret(
        &s.admin,
        &s.ns.name,
        "benchreg",
        "kubernetes.io/dockerconfigjson",
        &[(".dockerconfigjson", &config)],
    )
    .await?;

    // N repositories with v1.0.0, pushed in parallel.
    let names: Vec<String> = (0..n).map(|i| format!("app-{i}")).collect();
    let suffix = random_suffix();
    let repos: Vec<String> = names
        .iter()
        .map(|name| format!("bench-{suffix}/{name}"))
        .collect();
    std::thread::scope(|scope| {
        for chunk in repos.chunks(repos.len().div_ceil(8).max(1)) {
            let registry = &registry;
            scope.spawn(move || {
                for repo in chunk {
                    registry
                        .script("push-image.sh", &[&format!("{repo}:v1.0.0")])
                        .expect("push");
                }
            });
        }
    });
    let seed = tempfile::tempdir()?;
    for (name, repo) in names.iter().zip(&repos) {
        let dir = seed.path().join("apps").join(name);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("deployment.yaml"),
            deployment(name, &format!("{host}/{repo}:v1.0.0")),
        )?;
    }
    let git = s.ground.git()?;
    let repo_name = format!("bench-{}", s.ns.name);
    let url = git.new_repo(&repo_name, seed.path())?;
    let mut all = String::new();
    for (name, repo) in names.iter().zip(&repos) {
        all.push_str(&watch(&s.ns.name, name, &format!("{host}/{repo}"), &url));
    }
    s.apply(&all)?;
    for name in &names {
        s.wait_ready(name, "True", "UpToDate").await?;
    }
    let commits_before = git.commit_count(&repo_name, "main")?;

    // Push v1.1.0 everywhere at once; remember when each push finished.
    let pushed: HashMap<String, Instant> = std::thread::scope(|scope| {
        let handles: Vec<_> = names
            .iter()
            .zip(&repos)
            .map(|(name, repo)| {
                let registry = &registry;
                scope.spawn(move || {
                    registry
                        .script("push-image.sh", &[&format!("{repo}:v1.1.0")])
                        .expect("push");
                    (name.clone(), Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("push thread"))
            .collect()
    });
    let start = pushed.values().min().copied().unwrap_or_else(Instant::now);

    // Watch the remote branch until every file holds v1.1.0.
    let mut seen: HashMap<String, Instant> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.len() < n && Instant::now() < deadline {
        let head = git.git(&repo_name, &["rev-parse", "main"])?;
        let _ = head;
        let listing = git
            .git(&repo_name, &["grep", "-l", ":v1.1.0", "main", "--", "apps"])
            .unwrap_or_default();
        let now = Instant::now();
        for line in listing.lines() {
            if let Some(name) = line
                .strip_prefix("main:apps/")
                .and_then(|r| r.split('/').next())
            {
                seen.entry(name.to_string()).or_insert(now);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    anyhow::ensure!(
        seen.len() == n,
        "only {} of {n} pushes were committed within 120 s",
        seen.len()
    );
    let mut latencies: Vec<f64> = names
        .iter()
        .map(|name| {
            seen[name]
                .saturating_duration_since(pushed[name])
                .as_secs_f64()
        })
        .collect();
    latencies.sort_by(|a, b| a.total_cmp(b));
    let all_in = seen
        .values()
        .max()
        .map(|t| t.saturating_duration_since(start).as_secs_f64())
        .unwrap_or(f64::NAN);
    let commits = git.commit_count(&repo_name, "main")? - commits_before;
    // Let the operator settle so the status writes are counted in its peak memory.
    wait_until("statuses updated", Duration::from_secs(60), || async {
        let list = s.watches.list(&Default::default()).await?;
        Ok(list
            .items
            .iter()
            .all(|w| {
                w.status
                    .as_ref()
                    .and_then(|st| st.applied.as_ref())
                    .is_some_and(|a| a.tag == "v1.1.0")
            })
            .then_some(()))
    })
    .await?;
    let pid = s.operator.pid().unwrap_or(0);
    let peak_rss_mib = rss_kib(pid, "VmHWM:")
        .map(|k| k as f64 / 1024.0)
        .unwrap_or(f64::NAN);
    Ok(Row {
        pushes: n,
        p50: percentile(&latencies, 50.0),
        p95: percentile(&latencies, 95.0),
        p99: percentile(&latencies, 99.0),
        max: latencies.last().copied().unwrap_or(f64::NAN),
        all_in,
        commits,
        peak_rss_mib,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let sizes: Vec<usize> = std::env::var("IMAGEWATCH_BENCH_PUSHES")
        .unwrap_or_else(|_| "1,27".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let mut rows = Vec::new();
    for n in sizes {
        eprintln!("bench: {n} simultaneous pushes …");
        rows.push(scenario(n).await?);
    }
    println!(
        "| pushes | p50 (s) | p95 (s) | p99 (s) | max (s) | all committed after (s) | commits | operator peak RSS (MiB) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.1} |",
            r.pushes, r.p50, r.p95, r.p99, r.max, r.all_in, r.commits, r.peak_rss_mib
        );
    }
    Ok(())
}
