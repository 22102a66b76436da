//! Bounded state: an operator that sees 1,000 ImageWatches created and deleted again and
//! again, each round on repositories it has never seen, ends every round with its shared
//! caches back to empty (`imagewatch_cache_entries`) and its memory flat (VmRSS of the
//! process), on the real apiserver, registry and git server.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use futures::{StreamExt, TryStreamExt, stream};
use imagewatch_crd::ImageWatch;
use imagewatch_e2e::{
    ground::random_suffix,
    operator::metric,
    setup::{Scenario, ready},
    wait_until,
};
use kube::api::{DeleteParams, ListParams, PostParams};

const WATCHES: usize = 1_000;
const REPOSITORIES: usize = 20;
const ROUNDS: usize = 4;
/// Longer than the sweep period (30 s) plus a reconcile of every watch.
const ROUND_TIMEOUT: Duration = Duration::from_secs(240);

fn deployment(i: usize, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i}\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: {image}:1.0.0\n"
    )
}

fn watch(ns: &str, i: usize, image: &str, git_url: &str) -> anyhow::Result<ImageWatch> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "imagewatch.dev/v1alpha1",
        "kind": "ImageWatch",
        "metadata": {"name": format!("app-{i}"), "namespace": ns},
        "spec": {
            "image": image,
            "tags": {"pattern": "regex:^[0-9]+\\.[0-9]+\\.[0-9]+$", "order": "Semver"},
            "interval": "5m",
            "credentials": {"secretRef": {"name": "regcred"}},
            "git": {"url": git_url, "branch": "main", "secretRef": {"name": "git-creds"}},
            "target": {"workload": {
                "path": format!("apps/app-{i}"), "kind": "Deployment",
                "name": format!("app-{i}"), "container": "app"
            }}
        }
    }))?)
}

fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/PID/status")
}

#[tokio::test]
async fn memory_stays_flat_over_create_delete_rounds_of_1000_watches() -> anyhow::Result<()> {
    let s = Scenario::start("bounded", &["--max-concurrent-reconciles", "32"]).await?;
    let registry = s.ground.registry()?;
    let git = s.ground.git()?;
    let ns = s.ns.name.clone();
    let pid = s.operator.pid().context("operator not running")?;
    let mut rss = Vec::new();

    for round in 0..ROUNDS {
        // Repositories and a manifests repository this operator has never seen.
        let prefix = format!("bounded/r{round}-{}", random_suffix());
        let images: Vec<String> = (0..REPOSITORIES)
            .map(|j| format!("{}/{prefix}-{j}", registry.host))
            .collect();
        for j in 0..REPOSITORIES {
            registry.push(&format!("{prefix}-{j}"), "1.0.0")?;
        }
        let seed = tempfile::tempdir()?;
        for i in 0..WATCHES {
            let dir = seed.path().join(format!("apps/app-{i}"));
            std::fs::create_dir_all(&dir)?;
            std::fs::write(
                dir.join("deployment.yaml"),
                deployment(i, &images[i % REPOSITORIES]),
            )?;
        }
        let git_url = git.new_repo(&format!("bounded-{ns}-{round}"), seed.path())?;

        let objects: Vec<ImageWatch> = (0..WATCHES)
            .map(|i| watch(&ns, i, &images[i % REPOSITORIES], &git_url))
            .collect::<anyhow::Result<_>>()?;
        stream::iter(objects)
            .map(|w| {
                let api = s.watches.clone();
                async move { api.create(&PostParams::default(), &w).await }
            })
            .buffer_unordered(32)
            .try_collect::<Vec<_>>()
            .await?;

        // Every watch is Ready: the manifests already hold the newest tag.
        wait_until(
            &format!("round {round}: {WATCHES} watches Ready=True UpToDate"),
            ROUND_TIMEOUT,
            || async {
                let list = s.watches.list(&ListParams::default()).await?;
                let up = list
                    .items
                    .iter()
                    .filter(|w| {
                        ready(w).is_some_and(|(st, reason, _)| st == "True" && reason == "UpToDate")
                    })
                    .count();
                Ok((up == WATCHES).then_some(()))
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", s.operator.log_tail(30)))?;
        // The gauge is exported from the object cache every few seconds.
        wait_until(
            &format!("round {round}: imagewatch_watches reaches {WATCHES}"),
            ROUND_TIMEOUT,
            || async {
                let text = s.operator.metrics().await?;
                Ok((metric(&text, "imagewatch_watches ") >= WATCHES as f64).then_some(()))
            },
        )
        .await?;

        let evicted_before = metric(
            &s.operator.metrics().await?,
            "imagewatch_cache_evictions_total{cache=\"scans\"}",
        );
        s.watches
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
        // The sweep forgets the round's scans and tag ledgers once no watch references them:
        // this round's repositories are new, so the evictions grow by at least their number
        // (the entries gauge alone may still show the sweep before this round).
        wait_until(
            &format!("round {round}: the caches hold nothing after the delete"),
            ROUND_TIMEOUT,
            || async {
                let left = s.watches.list(&ListParams::default()).await?.items.len();
                let text = s.operator.metrics().await?;
                let scans = metric(&text, "imagewatch_cache_entries{cache=\"scans\"}");
                let ledgers = metric(&text, "imagewatch_cache_entries{cache=\"appearances\"}");
                let evicted = metric(&text, "imagewatch_cache_evictions_total{cache=\"scans\"}");
                let round_evicted = evicted - evicted_before;
                Ok((left == 0
                    && scans == 0.0
                    && ledgers == 0.0
                    && round_evicted >= REPOSITORIES as f64)
                    .then_some(()))
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", s.operator.log_tail(30)))?;
        let kib = rss_kib(pid)?;
        eprintln!("round {round}: VmRSS {} MiB after the delete", kib / 1024);
        rss.push(kib);
    }

    let text = s.operator.metrics().await?;
    let evicted = metric(&text, "imagewatch_cache_evictions_total{cache=\"scans\"}");
    ensure!(
        evicted >= (ROUNDS * REPOSITORIES) as f64,
        "{evicted} scans forgotten over {ROUNDS} rounds of {REPOSITORIES} repositories"
    );
    // Round 0 warms the allocator and the clone cache; later rounds may not keep growing.
    let first = rss[0];
    let last = *rss.last().unwrap_or(&first);
    let allowed = first / 10 + 16 * 1024;
    ensure!(
        last <= first + allowed,
        "VmRSS grew from {} MiB after round 0 to {} MiB after round {} (allowed {} MiB): {:?}",
        first / 1024,
        last / 1024,
        ROUNDS - 1,
        (first + allowed) / 1024,
        rss.iter().map(|k| k / 1024).collect::<Vec<_>>()
    );
    Ok(())
}
