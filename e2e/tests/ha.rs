//! High availability on the real apiserver: three operator processes split the shards (by Git
//! repository) over Leases under the chart's RBAC. Registry notifications reach only one of
//! them (as through a Service) and are forwarded to the others. One replica is killed with
//! SIGKILL while pushes are arriving: its shards are taken over, every push is committed exactly
//! once, and no shard (so no repository) ever has two holders at the same time.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use imagewatch_crd::ImageWatch;
use imagewatch_e2e::{
    Ground, NotifyingRegistry, Operator, TestNamespace,
    ground::{GitServer, random_suffix},
    operator::{free_port, metric},
    setup::{copy_dir, create_git_secret, create_secret, sample},
    wait_until,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client, api::ListParams};

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

/// What the steps share: one installation's namespace, RBAC and Secrets, the registry that
/// notifies replica "a", and the six repositories with their watches.
struct Ha {
    registry: NotifyingRegistry,
    /// The registry's `host:port`.
    host: String,
    /// Where replica "a" takes registry notifications.
    hook_port: u16,
    git: GitServer,
    /// `(watch name, image repository, git repository name, git URL)`, one per repository.
    repos: Vec<(String, String, String, String)>,
    release: String,
    kubeconfig: PathBuf,
    admin: Client,
    ground: &'static Ground,
    ns: TestNamespace,
}

/// Waits until every watch of `c` has applied `tag`.
async fn wait_every_watch_applied(c: &Ha, tag: &str) -> anyhow::Result<()> {
    let watches: Api<ImageWatch> = Api::namespaced(c.admin.clone(), &c.ns.name);
    wait_until(&format!("every watch applied {tag}"), TIMEOUT, || async {
        for (name, ..) in &c.repos {
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

#[tokio::test]
async fn three_replicas_split_the_repositories_and_survive_a_sigkill() -> anyhow::Result<()> {
    let mut c = step_install_rbac_secrets_and_a_notifying_registry().await?;
    step_seed_six_repositories(&mut c)?;
    let mut replicas = step_start_three_replicas(&c)?;
    step_the_shards_settle_at_two_per_replica(&replicas).await?;
    step_every_watch_applies_the_first_tag(&c).await?;
    step_pushes_notified_to_one_replica_reach_all_by_forwarding(&c, &replicas).await?;
    let killed_at = step_a_replica_dies_under_load(&c, &mut replicas).await?;
    step_the_survivors_hold_every_shard_and_the_leases_agree(&c, &replicas).await?;
    step_every_push_committed_exactly_once(&c)?;
    step_no_shard_ever_had_two_holders(&replicas, killed_at)
}

/// The chart's RBAC for a sharded release, the git and registry Secrets, and a registry that
/// notifies replica "a" only.
async fn step_install_rbac_secrets_and_a_notifying_registry() -> anyhow::Result<Ha> {
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
    Ok(Ha {
        registry,
        host,
        hook_port,
        git,
        repos: Vec::new(),
        release,
        kubeconfig,
        admin,
        ground,
        ns,
    })
}

/// Six manifest repositories, one watch (and one image repository) each.
fn step_seed_six_repositories(c: &mut Ha) -> anyhow::Result<()> {
    let Ha {
        registry,
        host,
        git,
        ns,
        repos,
        ..
    } = c;
    let suffix = random_suffix();
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
    Ok(())
}

/// Three replicas of one installation; only "a" serves the registry webhook.
fn step_start_three_replicas(c: &Ha) -> anyhow::Result<Vec<Replica>> {
    let Ha {
        ground,
        ns,
        host,
        hook_port,
        release,
        kubeconfig,
        ..
    } = c;
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
            kubeconfig,
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
    Ok(replicas)
}

/// The shards settle at two per replica.
async fn step_the_shards_settle_at_two_per_replica(replicas: &[Replica]) -> anyhow::Result<()> {
    wait_until("two shards per replica", TIMEOUT, || async {
        let mut held = Vec::new();
        for r in replicas {
            held.push(metric(
                &r.operator.metrics().await?,
                "imagewatch_shards_held",
            ));
        }
        Ok(held.iter().all(|h| *h == 2.0).then_some(()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", replicas[0].operator.log_tail(30)))?;
    Ok(())
}

/// Every watch applied, and each applies the tag its repository starts with.
async fn step_every_watch_applies_the_first_tag(c: &Ha) -> anyhow::Result<()> {
    let Ha {
        ground,
        ns,
        host,
        repos,
        ..
    } = c;
    for (name, image_repo, _, url) in repos {
        let yaml = watch_yaml(&ns.name, name, &format!("{host}/{image_repo}"), url);
        let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&yaml))?;
        anyhow::ensure!(ok, "kubectl apply: {out}");
    }
    wait_every_watch_applied(c, "canary-v1.0.0").await?;
    Ok(())
}

/// Pushes notified to replica "a" only reach every watch, by forwarding.
async fn step_pushes_notified_to_one_replica_reach_all_by_forwarding(
    c: &Ha,
    replicas: &[Replica],
) -> anyhow::Result<()> {
    let Ha {
        registry, repos, ..
    } = c;
    // Pushes, all notified to replica "a" only: replicas "b" and "c" learn of them by
    // forwarding (watches poll only hourly).
    std::thread::scope(|scope| {
        for (_, image_repo, _, _) in repos {
            let registry = &registry;
            scope.spawn(move || {
                registry.script("push-image.sh", &[&format!("{image_repo}:canary-v1.1.0")])
            });
        }
    });
    wait_every_watch_applied(c, "canary-v1.1.0")
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", replicas[1].operator.log_tail(30)))?;
    let forwarded = metric(
        &replicas[0].operator.metrics().await?,
        "imagewatch_peer_forwards_total{outcome=\"ok\"}",
    );
    assert!(forwarded >= 2.0 * REPOS as f64, "forwards: {forwarded}");
    Ok(())
}

/// Replica "b" is killed while pushes land; the others apply them all. Returns when it died.
async fn step_a_replica_dies_under_load(c: &Ha, replicas: &mut [Replica]) -> anyhow::Result<i64> {
    let Ha {
        registry, repos, ..
    } = c;
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
    wait_every_watch_applied(c, "canary-v1.2.0")
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", replicas[2].operator.log_tail(40)))?;
    Ok(killed_at)
}

/// The survivors hold every shard, three each; the Leases agree.
async fn step_the_survivors_hold_every_shard_and_the_leases_agree(
    c: &Ha,
    replicas: &[Replica],
) -> anyhow::Result<()> {
    let Ha { admin, ns, .. } = c;
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
    Ok(())
}

/// Every push committed exactly once: the seed commit plus one per pushed tag.
fn step_every_push_committed_exactly_once(c: &Ha) -> anyhow::Result<()> {
    let Ha { git, repos, .. } = c;
    for (name, _, repo_name, _) in repos {
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
    Ok(())
}

/// No shard ever had two holders: the replicas' ownership intervals never overlap.
fn step_no_shard_ever_had_two_holders(replicas: &[Replica], killed_at: i64) -> anyhow::Result<()> {
    let now = jiff::Timestamp::now().as_microsecond();
    let mut by_shard: BTreeMap<u64, Vec<(i64, i64, String)>> = BTreeMap::new();
    for r in replicas {
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
