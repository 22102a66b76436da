//! High availability on the real apiserver: three operator processes split the shards (by Git
//! repository) over Leases under the chart's RBAC. Registry notifications reach only one of
//! them (as through a Service) and are forwarded to the others. One replica is killed with
//! SIGKILL while pushes are arriving: its shards are taken over, every push is committed exactly
//! once, and no shard (so no repository) ever has two holders at the same time.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use imagewatch_crd::ImageWatch;
use imagewatch_e2e::{
    Ground, NotifyingRegistry, Operator, TestNamespace,
    ground::random_suffix,
    operator::{free_port, metric},
    setup::{copy_dir, create_git_secret, create_secret, sample},
    wait_until,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, api::ListParams};

const SHARDS: u32 = 6;
const REPOS: usize = 6;
const TIMEOUT: Duration = Duration::from_secs(120);

/// One replica's shard ownership, from its JSON log: (shard, start, end) in wall-clock
/// microseconds; an interval still open ends at `open_end`.
fn ownership(log: &str, open_end: i64) -> anyhow::Result<Vec<(u64, i64, i64)>> {
    let mut open: BTreeMap<u64, i64> = BTreeMap::new();
    let mut intervals = Vec::new();
    for line in log.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(line)?;
        let fields = &v;
        let Some(transition) = fields["transition"].as_str() else {
            continue;
        };
        let shard = fields["shard"].as_u64().unwrap_or(u64::MAX);
        let at: jiff::Timestamp = v["timestamp"].as_str().unwrap_or_default().parse()?;
        let at = at.as_microsecond();
        match transition {
            "acquired" => {
                open.insert(shard, at);
            }
            "released" | "lost" => {
                if let Some(start) = open.remove(&shard) {
                    intervals.push((shard, start, at));
                }
            }
            _ => {}
        }
    }
    intervals.extend(
        open.into_iter()
            .map(|(shard, start)| (shard, start, open_end)),
    );
    Ok(intervals)
}

fn watch_yaml(ns: &str, name: &str, image: &str, git_url: &str) -> String {
    format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: {name}, namespace: {ns}}}
spec:
  image: {image}
  tags: {{pattern: "canary-*"}}
  interval: 1h
  credentials: {{secretRef: {{name: hookreg}}}}
  git: {{url: "{git_url}", secretRef: {{name: git-creds}}}}
  target:
    workload: {{path: apps/my-api/overlays/stg, kind: Deployment, name: my-api-canary, container: my-api}}
"#
    )
}

struct Replica {
    name: String,
    operator: Operator,
}

#[tokio::test]
async fn three_replicas_split_the_repositories_and_survive_a_sigkill() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground.install_crds()?;
    let ns = TestNamespace::create(ground, "ha").await?;
    let admin = ground.admin().await?;
    let release = format!("iw-{}", ns.name);
    ground.install_chart_rbac_with(&release, &ns.name, &["shards=6"])?;
    let (kubeconfig, _) = ns
        .service_account(ground, &format!("{release}-imagewatch"))
        .await?;
    let git = ground.git()?;
    create_git_secret(&admin, &ns.name, &git).await?;

    // Notifications go to replica "a" only.
    let hook_port = free_port()?;
    let token = format!("tok-{}", random_suffix());
    let registry = NotifyingRegistry::start(
        &format!("http://127.0.0.1:{hook_port}/hooks/distribution"),
        &token,
    )?;
    let host = registry.var("IMAGEWATCH_REGISTRY");
    create_secret(
        &admin,
        &ns.name,
        "hooks",
        "Opaque",
        &[("distribution-token", &token)],
    )
    .await?;
    let reg_auth = registry.dockerconfigjson();
    create_secret(
        &admin,
        &ns.name,
        "hookreg",
        "kubernetes.io/dockerconfigjson",
        &[(".dockerconfigjson", &reg_auth)],
    )
    .await?;

    // Six manifest repositories, one watch (and one image repository) each.
    let suffix = random_suffix();
    let mut repos = Vec::new();
    for i in 0..REPOS {
        let image_repo = format!("ha/app{i}-{suffix}");
        registry.script("push-image.sh", &[&format!("{image_repo}:canary-v1.0.0")])?;
        let dir = tempfile::tempdir()?;
        copy_dir(&sample("canary-primary/manifests"), dir.path())?;
        let file: PathBuf = dir
            .path()
            .join("apps/my-api/overlays/stg/deployment-canary.yaml");
        let text = std::fs::read_to_string(&file)?.replace(
            "registry.example.com/my-api:canary-v1.2.3",
            &format!("{host}/{image_repo}:canary-v1.0.0"),
        );
        std::fs::write(&file, text)?;
        let repo_name = format!("ha{i}-{}", ns.name);
        let url = git.new_repo(&repo_name, dir.path())?;
        repos.push((format!("app{i}"), image_repo, repo_name, url));
    }

    // Three replicas of one installation.
    let mut replicas = Vec::new();
    for name in ["a", "b", "c"] {
        let metrics_addr = format!("127.0.0.1:{}", free_port()?);
        let peer_url = format!("http://{metrics_addr}");
        let pod = format!("imagewatch-{name}");
        let webhook_addr = format!("127.0.0.1:{hook_port}");
        let mut flags = vec![
            "--namespace",
            &ns.name,
            "--pod-namespace",
            &ns.name,
            "--insecure-registry",
            &host,
            "--shards",
            "6",
            "--lease-duration",
            "4s",
            "--lease-prefix",
            &release,
            "--log-format",
            "json",
        ];
        if name == "a" {
            flags.extend(["--webhook-addr", &webhook_addr, "--webhook-secret", "hooks"]);
        }
        let operator = Operator::start_with_env(
            ground,
            &format!("{}-{name}", ns.name),
            &kubeconfig,
            &flags,
            &[
                ("IMAGEWATCH_METRICS_ADDR", &metrics_addr),
                ("IMAGEWATCH_PEER_URL", &peer_url),
                ("POD_NAME", &pod),
            ],
        )?;
        replicas.push(Replica {
            name: name.to_string(),
            operator,
        });
    }

    // The shards settle at two per replica.
    wait_until("two shards per replica", TIMEOUT, || async {
        let mut held = Vec::new();
        for r in &replicas {
            held.push(metric(
                &r.operator.metrics().await?,
                "imagewatch_shards_held",
            ));
        }
        Ok(held.iter().all(|h| *h == 2.0).then_some(()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", replicas[0].operator.log_tail(30)))?;

    let watches: Api<ImageWatch> = Api::namespaced(admin.clone(), &ns.name);
    for (name, image_repo, _, url) in &repos {
        let yaml = watch_yaml(&ns.name, name, &format!("{host}/{image_repo}"), url);
        let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&yaml))?;
        anyhow::ensure!(ok, "kubectl apply: {out}");
    }
    let applied = |tag: &'static str| {
        let watches = watches.clone();
        let names: Vec<String> = repos.iter().map(|r| r.0.clone()).collect();
        async move {
            wait_until(&format!("every watch applied {tag}"), TIMEOUT, || async {
                for name in &names {
                    let w = watches.get(name).await?;
                    let at = w
                        .status
                        .and_then(|s| s.applied)
                        .map(|a| a.tag)
                        .unwrap_or_default();
                    if at != tag {
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            })
            .await
        }
    };
    applied("canary-v1.0.0").await?;

    // Pushes, all notified to replica "a" only: replicas "b" and "c" learn of them by
    // forwarding (watches poll only hourly).
    std::thread::scope(|scope| {
        for (_, image_repo, _, _) in &repos {
            let registry = &registry;
            scope.spawn(move || {
                registry.script("push-image.sh", &[&format!("{image_repo}:canary-v1.1.0")])
            });
        }
    });
    applied("canary-v1.1.0")
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", replicas[1].operator.log_tail(30)))?;
    let forwarded = metric(
        &replicas[0].operator.metrics().await?,
        "imagewatch_peer_forwards_total{outcome=\"ok\"}",
    );
    assert!(forwarded >= 2.0 * REPOS as f64, "forwards: {forwarded}");

    // Under load, replica "b" dies.
    let pushes = std::thread::scope(|scope| {
        let handles: Vec<_> = repos
            .iter()
            .map(|(_, image_repo, _, _)| {
                let registry = &registry;
                scope.spawn(move || {
                    registry.script("push-image.sh", &[&format!("{image_repo}:canary-v1.2.0")])
                })
            })
            .collect();
        replicas[1].operator.kill();
        let killed_at = jiff::Timestamp::now().as_microsecond();
        let results = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("push thread panicked"))
            })
            .collect::<Vec<_>>();
        (killed_at, results)
    });
    let (killed_at, pushes) = pushes;
    for push in pushes {
        push??;
    }
    applied("canary-v1.2.0")
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", replicas[2].operator.log_tail(40)))?;

    // The survivors hold every shard, three each; the Leases agree.
    wait_until("the survivors hold all shards", TIMEOUT, || async {
        let a = metric(
            &replicas[0].operator.metrics().await?,
            "imagewatch_shards_held",
        );
        let c = metric(
            &replicas[2].operator.metrics().await?,
            "imagewatch_shards_held",
        );
        Ok((a + c == f64::from(SHARDS) && a == 3.0).then_some(()))
    })
    .await?;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns.name);
    let holders: Vec<String> = leases
        .list(&ListParams::default().labels("imagewatch.dev/lease-role=shard"))
        .await?
        .items
        .into_iter()
        .filter_map(|l| l.spec?.holder_identity)
        .collect();
    assert_eq!(holders.len(), SHARDS as usize, "{holders:?}");
    assert!(
        holders.iter().all(|h| h != "imagewatch-b"),
        "the dead replica still holds a shard: {holders:?}"
    );

    // Every push committed exactly once: the seed commit plus one per pushed tag.
    for (name, _, repo_name, _) in &repos {
        assert_eq!(
            git.commit_count(repo_name, "main")?,
            3,
            "{name}: {}",
            git.git(repo_name, &["log", "--oneline", "main"])?
        );
        let file = git.show(
            repo_name,
            "main",
            "apps/my-api/overlays/stg/deployment-canary.yaml",
        )?;
        assert!(file.contains(":canary-v1.2.0"), "{file}");
    }

    // No shard ever had two holders: the replicas' ownership intervals never overlap.
    let now = jiff::Timestamp::now().as_microsecond();
    let mut by_shard: BTreeMap<u64, Vec<(i64, i64, String)>> = BTreeMap::new();
    for r in &replicas {
        let log = std::fs::read_to_string(&r.operator.log)?;
        let end = if r.name == "b" { killed_at } else { now };
        for (shard, start, stop) in ownership(&log, end)? {
            by_shard
                .entry(shard)
                .or_default()
                .push((start, stop, r.name.clone()));
        }
    }
    assert_eq!(by_shard.len(), SHARDS as usize, "{by_shard:?}");
    let mut handovers = 0;
    for (shard, intervals) in &mut by_shard {
        intervals.sort();
        for pair in intervals.windows(2) {
            let (_, prev_end, prev) = &pair[0];
            let (next_start, _, next) = &pair[1];
            assert!(
                next_start >= prev_end,
                "shard {shard}: {next} started at {next_start} while {prev} held it until {prev_end}"
            );
            if prev != next {
                handovers += 1;
            }
        }
    }
    assert!(handovers >= 2, "the dead replica's shards changed hands");
    Ok(())
}
