//! The chart installed the way users install it: the release image on the ground's real node,
//! `helm install --wait` with chart values only (e2e/scripts/install.sh, as `just install`),
//! the Pod's own ServiceAccount and the chart's RBAC. Then the core loop through the Pod
//! (registry notification → the Pod's webhook listener → commit → Ready=True), a `helm
//! upgrade` while pushes arrive, and a Pod deleted in the middle of a batch.

use std::time::Duration;

use imagewatch_crd::ImageWatch;
use imagewatch_e2e::{
    Ground, NotifyingRegistry, TestNamespace,
    ground::random_suffix,
    node::{
        Release, container_log, helm_upgrade, pod_logs_dir, release_image, retag_release_image,
    },
    operator::{free_port, metric},
    setup::{copy_dir, create_git_secret, create_secret, ready, sample},
    wait_until,
};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, api::ListParams};

const TIMEOUT: Duration = Duration::from_secs(120);

/// One installed release watching its own namespace, with a registry notifying its Pod.
struct Installed {
    ground: &'static Ground,
    ns: TestNamespace,
    release: Release,
    registry: NotifyingRegistry,
    host: String,
    image_repo: String,
    repo_name: String,
    git_url: String,
    values: String,
    watches: Api<ImageWatch>,
    pods: Api<Pod>,
    metrics_port: u16,
}

impl Installed {
    async fn start(prefix: &str, extra_values: &str) -> anyhow::Result<Self> {
        let ground = Ground::get()?;
        pod_logs_dir(ground)?;
        ground.install_crds()?;
        let image = release_image(ground)?;
        let ns = TestNamespace::create(ground, prefix).await?;
        let admin = ground.admin().await?;
        let (metrics_port, webhook_port) = (free_port()?, free_port()?);
        let token = format!("tok-{}", random_suffix());
        let registry = NotifyingRegistry::start(
            &format!("http://127.0.0.1:{webhook_port}/hooks/distribution"),
            &token,
        )?;
        let host = registry.var("IMAGEWATCH_REGISTRY");
        create_secret(
            &admin,
            &ns.name,
            "imagewatch-webhooks",
            "Opaque",
            &[("distribution-token", &token)],
        )
        .await?;
        create_secret(
            &admin,
            &ns.name,
            "appreg",
            "kubernetes.io/dockerconfigjson",
            &[(".dockerconfigjson", &registry.dockerconfigjson())],
        )
        .await?;
        create_git_secret(&admin, &ns.name, &ground.git()?).await?;
        let ground_registry = ground.var("IMAGEWATCH_REGISTRY")?;
        let values = format!(
            "watchNamespace: {ns}\nmetrics: {{port: {metrics_port}, bindAddress: 127.0.0.1}}\n\
             webhook: {{enabled: true, port: {webhook_port}, bindAddress: 127.0.0.1}}\n\
             registry: {{insecure: [\"{ground_registry}\", \"{host}\"]}}\n{extra_values}",
            ns = ns.name
        );
        let release_name = format!("iw{}", random_suffix());
        let release = Release::install(ground, &release_name, &ns.name, &image, &values)?;

        let image_repo = format!("inst/app-{}", random_suffix());
        let repo_name = format!("inst-{}", ns.name);
        let git_url = seed(ground, &repo_name, &format!("{host}/{image_repo}"))?;
        Ok(Self {
            ground,
            watches: Api::namespaced(admin.clone(), &ns.name),
            pods: Api::namespaced(admin, &ns.name),
            ns,
            release,
            registry,
            host,
            image_repo,
            repo_name,
            git_url,
            values,
            metrics_port,
        })
    }

    fn push(&self, tag: &str) -> anyhow::Result<()> {
        self.registry
            .script("push-image.sh", &[&format!("{}:{tag}", self.image_repo)])?;
        Ok(())
    }

    fn apply_watch(&self, name: &str, deployment: &str, pattern: &str) -> anyhow::Result<()> {
        let yaml = format!(
            r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: {name}, namespace: {ns}}}
spec:
  image: {host}/{repo}
  tags: {{pattern: "{pattern}"}}
  interval: 1h
  credentials: {{secretRef: {{name: appreg}}}}
  git: {{url: "{url}", secretRef: {{name: git-creds}}}}
  target:
    workload: {{path: apps/my-api/overlays/stg, kind: Deployment, name: {deployment}, container: my-api}}
"#,
            ns = self.ns.name,
            host = self.host,
            repo = self.image_repo,
            url = self.git_url,
        );
        let (ok, out) = self
            .ground
            .kubectl_try(&["apply", "-f", "-"], Some(&yaml))?;
        anyhow::ensure!(ok, "kubectl apply: {out}");
        Ok(())
    }

    /// The release's Pods (name, not being deleted).
    async fn pods(&self) -> anyhow::Result<Vec<(String, bool)>> {
        let list = self
            .pods
            .list(
                &ListParams::default()
                    .labels(&format!("app.kubernetes.io/instance={}", self.release.name)),
            )
            .await?;
        Ok(list
            .items
            .into_iter()
            .map(|p| {
                let deleting = p.metadata.deletion_timestamp.is_some();
                (p.metadata.name.unwrap_or_default(), deleting)
            })
            .collect())
    }

    /// The log of every container run of the release's Pods still on the node.
    async fn logs(&self) -> String {
        let Ok(dir) = pod_logs_dir(self.ground) else {
            return String::new();
        };
        let mut out = String::new();
        for (pod, _) in self.pods().await.unwrap_or_default() {
            let lines = container_log(&dir, &self.ns.name, &pod, "imagewatch").unwrap_or_default();
            out.push_str(&format!("--- {pod} ---\n{}\n", lines.join("\n")));
        }
        out
    }

    /// Ready=True (Git already holds the newest tag: no commit, no `applied` yet).
    async fn wait_up_to_date(&self, name: &str) -> anyhow::Result<ImageWatch> {
        let result = wait_until(&format!("{name} Ready=True"), TIMEOUT, || async {
            let w = self.watches.get(name).await?;
            Ok(ready(&w).is_some_and(|(s, _, _)| s == "True").then_some(w))
        })
        .await;
        match result {
            Ok(w) => Ok(w),
            Err(e) => anyhow::bail!("{e}\n{}", self.logs().await),
        }
    }

    async fn wait_applied(&self, name: &str, tag: &str) -> anyhow::Result<ImageWatch> {
        let result = wait_until(&format!("{name} applied {tag}"), TIMEOUT, || async {
            let w = self.watches.get(name).await?;
            let applied = w
                .status
                .as_ref()
                .and_then(|s| s.applied.as_ref())
                .map(|a| a.tag.clone());
            let ready_true = ready(&w).is_some_and(|(s, _, _)| s == "True");
            Ok((applied.as_deref() == Some(tag) && ready_true).then_some(w))
        })
        .await;
        match result {
            Ok(w) => Ok(w),
            Err(e) => anyhow::bail!("{e}\n{}", self.logs().await),
        }
    }

    /// How many commits on main changed an image to `tag` (commit messages list
    /// `old -> new` per change).
    fn commits_to(&self, tag: &str) -> anyhow::Result<usize> {
        let log = self
            .ground
            .git()?
            .git(&self.repo_name, &["log", "--format=%B%x00", "main"])?;
        Ok(log
            .split('\0')
            .filter(|m| m.contains(&format!("-> {tag}")))
            .count())
    }

    async fn metrics(&self) -> anyhow::Result<String> {
        Ok(
            reqwest::get(format!("http://127.0.0.1:{}/metrics", self.metrics_port))
                .await?
                .text()
                .await?,
        )
    }
}

/// A manifests repository from the canary/primary sample, both at v1.0.0 of `image`.
fn seed(ground: &Ground, name: &str, image: &str) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    copy_dir(&sample("canary-primary/manifests"), dir.path())?;
    for (file, tag) in [
        ("deployment-canary.yaml", "canary-v1.2.3"),
        ("deployment-primary.yaml", "primary-v1.2.3"),
    ] {
        let path = dir.path().join("apps/my-api/overlays/stg").join(file);
        let text = std::fs::read_to_string(&path)?.replace(
            &format!("registry.example.com/my-api:{tag}"),
            &format!("{image}:{}", tag.replace("1.2.3", "1.0.0")),
        );
        std::fs::write(&path, text)?;
    }
    ground.git()?.new_repo(name, dir.path())
}

/// Seconds from the container's start to the Pod's Ready condition.
fn seconds_to_ready(pod: &Pod) -> Option<i64> {
    let status = pod.status.as_ref()?;
    let started = status
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .running
        .as_ref()?
        .started_at
        .as_ref()?
        .0;
    let ready = status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()?
        .0;
    Some(ready.as_second() - started.as_second())
}

#[tokio::test]
async fn the_installed_chart_is_ready_at_once_and_runs_the_core_loop() -> anyhow::Result<()> {
    // helm install --wait returns with no ImageWatch in the cluster: /readyz does not wait
    // for one.
    let it = Installed::start("inst", "").await?;
    assert!(
        it.release.output.contains("Running"),
        "{}",
        it.release.output
    );
    let pods = it.pods().await?;
    assert_eq!(pods.len(), 1, "{pods:?}");
    let pod = it.pods.get(&pods[0].0).await?;
    let to_ready = seconds_to_ready(&pod);
    assert!(
        to_ready.is_some_and(|s| s <= 30),
        "Ready {to_ready:?} s after the container started"
    );
    let spec = pod.spec.clone().unwrap_or_default();
    assert_eq!(spec.host_network, Some(true));
    let container = &spec.containers[0];
    let security = container.security_context.clone().unwrap_or_default();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(
        pod.spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref())
            .and_then(|s| s.run_as_user),
        Some(65532)
    );

    // The core loop through the Pod.
    it.push("canary-v1.0.0")?;
    it.apply_watch("canary", "my-api-canary", "canary-*")?;
    it.wait_up_to_date("canary").await?;
    it.push("canary-v1.1.0")?;
    let watch = it.wait_applied("canary", "canary-v1.1.0").await?;
    assert_eq!(ready(&watch).map(|r| r.1), Some("Updated".to_string()));
    assert_eq!(it.commits_to("canary-v1.1.0")?, 1);
    let metrics = it.metrics().await?;
    assert!(
        metric(
            &metrics,
            "imagewatch_events_total{source=\"distribution\",outcome=\"matched\"}"
        ) >= 1.0,
        "the commit came from the notification:\n{metrics}"
    );

    // JSON logs by default, read from the kubelet's log files.
    let dir = pod_logs_dir(it.ground)?;
    let lines = container_log(&dir, &it.ns.name, &pods[0].0, "imagewatch")?;
    assert!(
        !lines.is_empty(),
        "no container log under {}",
        dir.display()
    );
    for line in &lines {
        let parsed: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| anyhow::anyhow!("not a JSON log line ({e}): {line}"))?;
        assert!(parsed.get("level").is_some(), "{line}");
    }
    let text = lines.join("\n");
    assert!(text.contains("\"ready\""), "{text}");
    for needle in ["169.254.169.254", "IMDS", "imds"] {
        assert!(!text.contains(needle), "{needle} in the log:\n{text}");
    }
    Ok(())
}

/// `helm upgrade` to a new image tag while pushes arrive: the old Pod has stopped before the
/// new one exists (Recreate: at no moment two processes that could push), and every push is
/// committed exactly once.
#[tokio::test]
async fn helm_upgrade_while_pushes_arrive_has_one_writer_and_loses_nothing() -> anyhow::Result<()> {
    let it = Installed::start("upg", "").await?;
    it.push("canary-v1.0.0")?;
    it.apply_watch("canary", "my-api-canary", "canary-*")?;
    it.wait_up_to_date("canary").await?;
    let before = it.pods().await?;
    assert_eq!(before.len(), 1);

    // Every Pod of the release, from a watch: with Recreate the old one is gone (its
    // containers stopped: the Pod deleted or in a terminal phase) before the new one is
    // created.
    let pods = it.pods.clone();
    let selector = format!("app.kubernetes.io/instance={}", it.release.name);
    let overlap = tokio::spawn(async move {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let mut alive = std::collections::BTreeSet::new();
        let mut most = 0usize;
        let mut stream = std::pin::pin!(
            watcher(pods, watcher::Config::default().labels(&selector)).default_backoff()
        );
        while let Some(Ok(event)) = stream.next().await {
            match event {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    // A Pod in a terminal phase has no running container: Recreate
                    // creates the new Pod once the old one got there, which may be
                    // before the kubelet deletes the old object.
                    let name = p.metadata.name.unwrap_or_default();
                    let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
                    if phase == "Succeeded" || phase == "Failed" {
                        alive.remove(&name);
                    } else {
                        alive.insert(name);
                    }
                }
                watcher::Event::Delete(p) => {
                    alive.remove(&p.metadata.name.unwrap_or_default());
                }
                // A relist after a lost watch names every Pod again.
                watcher::Event::Init => alive.clear(),
                watcher::Event::InitDone => {}
            }
            if alive.len() > most {
                most = alive.len();
                if most > 1 {
                    return (most, alive);
                }
            }
        }
        (most, alive)
    });

    let new_image = retag_release_image(it.ground, &format!("upgrade-{}", random_suffix()))?;
    let (ground, name, ns, values) = (
        it.ground,
        it.release.name.clone(),
        it.ns.name.clone(),
        it.values.clone(),
    );
    let upgrade = std::thread::spawn(move || helm_upgrade(ground, &name, &ns, &new_image, &values));
    // Pushes while the upgrade runs, each one committed before the next.
    for minor in 1..=4 {
        let tag = format!("canary-v1.{minor}.0");
        it.push(&tag)?;
        it.wait_applied("canary", &tag).await?;
    }
    let output = upgrade
        .join()
        .map_err(|_| anyhow::anyhow!("upgrade thread panicked"))??;
    let after = it.pods().await?;
    assert_eq!(after.len(), 1, "{after:?}\n{output}");
    assert_ne!(after[0].0, before[0].0, "the upgrade replaced the Pod");
    for minor in 1..=4 {
        let tag = format!("canary-v1.{minor}.0");
        assert_eq!(it.commits_to(&tag)?, 1, "{tag} committed once");
    }
    if overlap.is_finished() {
        let (most, alive) = overlap.await?;
        panic!("{most} Pods of the release at once during the upgrade: {alive:?}");
    }
    overlap.abort();
    Ok(())
}

/// The Pod deleted while a batch is open: it finishes (or hands over) and every tag is
/// committed exactly once, by the old Pod or its replacement.
#[tokio::test]
async fn deleting_the_pod_mid_batch_commits_every_tag_once() -> anyhow::Result<()> {
    let it = Installed::start("midb", "git: {batchWindow: 3s}\n").await?;
    it.push("canary-v1.0.0")?;
    it.push("primary-v1.0.0")?;
    it.apply_watch("canary", "my-api-canary", "canary-*")?;
    it.apply_watch("primary", "my-api-primary", "primary-*")?;
    it.wait_up_to_date("canary").await?;
    it.wait_up_to_date("primary").await?;
    let before = it.pods().await?;
    let events_before = metric(
        &it.metrics().await?,
        "imagewatch_events_total{source=\"distribution\",outcome=\"matched\"}",
    );

    it.push("canary-v1.1.0")?;
    it.push("primary-v1.1.0")?;
    // Both notifications are in: the batch (3 s window) is open now.
    wait_until("both notifications received", TIMEOUT, || async {
        let m = it.metrics().await?;
        let events = metric(
            &m,
            "imagewatch_events_total{source=\"distribution\",outcome=\"matched\"}",
        );
        Ok((events >= events_before + 2.0).then_some(()))
    })
    .await?;
    it.ground.kubectl(&[
        "-n",
        &it.ns.name,
        "delete",
        "pod",
        &before[0].0,
        "--wait=false",
    ])?;

    it.wait_applied("canary", "canary-v1.1.0").await?;
    it.wait_applied("primary", "primary-v1.1.0").await?;
    assert_eq!(it.commits_to("canary-v1.1.0")?, 1);
    assert_eq!(it.commits_to("primary-v1.1.0")?, 1);
    // A replacement runs (the Deployment keeps one replica).
    wait_until("a replacement Pod", TIMEOUT, || async {
        let pods = it.pods().await?;
        Ok(pods
            .iter()
            .any(|(name, deleting)| !deleting && *name != before[0].0)
            .then_some(()))
    })
    .await?;
    Ok(())
}
