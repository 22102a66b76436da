//! Past one replica: the steady-state world of `watches` (W watches over R repositories and G
//! manifests repositories) split by N replicas holding S shards (`--shards`, by Git
//! repository), as the chart runs them with `replicaCount` and `shards`. Measured: the first
//! sync of all N together (start → every watch Ready), then each replica's share of the
//! work — the watches of the shards it holds (from the operator's own shard function), its
//! reconciles, registry requests, CPU seconds and peak RSS — against what that share predicts
//! from the single-replica run: reconciles and tag lists in proportion to the watches held,
//! memory the cache of every object (each replica watches them all) plus the state of its own.

use std::{sync::Arc, time::Instant};

use imagewatch_e2e::{
    bench::{ProcessSample, metric_sum},
    operator::Operator,
    token_registry::TokenRegistry,
};

use crate::common::{CpuMark, Setup, ground_pid, up_to_date};
use crate::watches::{WatchPlan, populate, reconciles};

/// One replica's part.
#[derive(Debug)]
pub struct ReplicaShare {
    /// Its name (`POD_NAME`).
    pub name: String,
    /// Shards it held once the first sync was done.
    pub shards: Vec<u32>,
    /// Watches whose Git repository falls in those shards.
    pub watches: usize,
    /// Reconciles it counted.
    pub reconciles: f64,
    /// Registry requests it counted.
    pub registry_requests: f64,
    /// CPU seconds from start to the end of the first sync.
    pub cpu_seconds: f64,
    /// Peak RSS, KiB.
    pub peak_rss_kib: u64,
}

/// What the sharded scenario measured.
#[derive(Debug)]
pub struct ShardResult {
    pub plan: WatchPlan,
    pub replicas: usize,
    pub shards: u32,
    /// Start of the replicas → every watch Ready.
    pub first_sync: std::time::Duration,
    pub shares: Vec<ReplicaShare>,
    /// API server, etcd and registry CPU seconds of the first sync.
    pub ground_cpu: Vec<(&'static str, f64)>,
}

pub async fn run(plan: WatchPlan, replicas: usize, shards: u32) -> anyhow::Result<ShardResult> {
    let registry = Arc::new(TokenRegistry::start(std::time::Duration::from_secs(3600)).await?);
    let mut setup = Setup::with_chart_values("shards", &[&format!("shards={shards}")]).await?;
    let (_repos, _) = populate(&plan, &registry, &mut setup).await?;
    let ns = setup.ns.name.clone();
    let release = format!("iw-{ns}");
    let shards_text = shards.to_string();
    let mark = CpuMark::now(&[
        ("kube-apiserver", ground_pid(&setup, "kube-apiserver")),
        ("etcd", ground_pid(&setup, "etcd")),
        ("registry", Some(registry.pid())),
    ]);
    let started = Instant::now();
    // Distinct metrics ports: held open together while they are picked, so no two replicas
    // are given the same one.
    let held: Vec<std::net::TcpListener> = (0..replicas)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    let ports: Vec<u16> = held
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()?;
    drop(held);
    let mut operators = Vec::new();
    for (k, port) in ports.into_iter().enumerate() {
        let metrics_addr = format!("127.0.0.1:{port}");
        let name = format!("bench-{k}");
        let flags = [
            "--namespace",
            ns.as_str(),
            "--pod-namespace",
            ns.as_str(),
            "--insecure-registry",
            registry.host.as_str(),
            "--insecure-registry",
            registry.token_host.as_str(),
            "--shards",
            shards_text.as_str(),
            "--lease-prefix",
            release.as_str(),
        ];
        let operator = Operator::start_with_env(
            setup.ground,
            &format!("{ns}-{name}"),
            setup.operator_kubeconfig(),
            &flags,
            &[
                ("IMAGEWATCH_METRICS_ADDR", metrics_addr.as_str()),
                ("POD_NAME", name.as_str()),
            ],
        )?;
        operators.push((name, operator));
    }
    let waited = setup
        .wait_watches(
            plan.watches,
            "Ready=True UpToDate",
            std::time::Duration::from_secs(3600),
            up_to_date,
        )
        .await;
    if let Err(e) = waited {
        let tails: Vec<String> = operators
            .iter()
            .map(|(n, o)| format!("--- {n} ---\n{}", o.log_tail(15)))
            .collect();
        anyhow::bail!("{e}\n{}", tails.join("\n"));
    }
    let first_sync = started.elapsed();
    eprintln!(
        "bench:   {replicas} replicas: first sync in {:.1} s",
        first_sync.as_secs_f64()
    );
    let ground_cpu = mark.seconds();

    // Each replica's shards, and the watches they hold (watch `i` writes to manifests
    // repository `i mod G`; a shard is a hash of the repository's URL).
    let urls: Vec<String> = setup
        .watches
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|w| w.spec.git.map(|g| g.url))
        .collect();
    let ticks = crate::common::clock_ticks();
    let mut shares = Vec::new();
    for (name, operator) in &operators {
        let text = operator.metrics().await?;
        let held: Vec<u32> = (0..shards)
            .filter(|s| {
                metric_sum(
                    &text,
                    "imagewatch_shard_owned",
                    &[("shard", &s.to_string())],
                ) > 0.0
            })
            .collect();
        let watches = urls
            .iter()
            .filter(|url| {
                let shard = imagewatch::cluster::shard::shard_of(
                    &imagewatch::cluster::shard::repo_key(url),
                    shards,
                );
                held.contains(&shard)
            })
            .count();
        let pid = operator
            .pid()
            .ok_or_else(|| anyhow::anyhow!("{name} exited"))?;
        let sample = ProcessSample::read(pid).ok_or_else(|| anyhow::anyhow!("{name} gone"))?;
        shares.push(ReplicaShare {
            name: name.clone(),
            shards: held,
            watches,
            reconciles: reconciles(operator).await?,
            registry_requests: metric_sum(&text, "imagewatch_registry_requests_total", &[]),
            cpu_seconds: sample.ticks as f64 / ticks as f64,
            peak_rss_kib: sample.hwm_kib,
        });
    }
    for (_, operator) in &mut operators {
        operator.kill();
    }
    eprintln!("bench:   deleting the ImageWatches …");
    setup.delete_watches().await;
    Ok(ShardResult {
        plan,
        replicas,
        shards,
        first_sync,
        shares,
        ground_cpu,
    })
}
