//! What both scenarios share: a namespace with the chart's RBAC, the operator running as its
//! ServiceAccount, ImageWatches created concurrently and waited for through a watch, and the
//! seed manifests repositories.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use futures::{StreamExt as _, TryStreamExt as _};
use imagewatch_crd::ImageWatch;
use imagewatch_e2e::{
    Ground, Operator, TestNamespace,
    bench::ApiRequests,
    setup::{create_git_secret, create_secret, ready},
};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, PostParams},
    runtime::{WatchStreamExt as _, watcher},
};

/// The resources whose API requests the reports name.
pub const API_RESOURCES: &[&str] = &[
    "imagewatches",
    "secrets",
    "events",
    "leases",
    "configmaps",
    "applications",
];

/// Concurrent API requests when creating objects.
pub const CREATE_CONCURRENCY: usize = 32;

/// A namespace prepared for one scenario.
pub struct Setup {
    pub ground: &'static Ground,
    pub ns: TestNamespace,
    pub admin: Client,
    kubeconfig: PathBuf,
    pub watches: Api<ImageWatch>,
    /// Bare repositories created for the scenario (removed on drop).
    pub git_repos: Vec<String>,
}

impl Setup {
    /// A namespace with the chart's ServiceAccount and RBAC and the `git-creds` Secret.
    pub async fn new(prefix: &str) -> anyhow::Result<Self> {
        Self::with_chart_values(prefix, &[]).await
    }

    /// [`Setup::new`], the chart's RBAC rendered with `values` (`key=value`, e.g. `shards=6`).
    pub async fn with_chart_values(prefix: &str, values: &[&str]) -> anyhow::Result<Self> {
        let ground = Ground::get()?;
        ground.install_crds()?;
        let ns = TestNamespace::create(ground, prefix).await?;
        let admin = ground.admin().await?;
        let release = format!("iw-{}", ns.name);
        ground.install_chart_rbac_with(&release, &ns.name, values)?;
        let (kubeconfig, _) = ns
            .service_account(ground, &format!("{release}-imagewatch"))
            .await?;
        let git = ground.git()?;
        create_git_secret(&admin, &ns.name, &git).await?;
        let watches = Api::namespaced(admin.clone(), &ns.name);
        Ok(Self {
            ground,
            ns,
            admin,
            kubeconfig,
            watches,
            git_repos: Vec::new(),
        })
    }

    /// The kubeconfig of the operator's identity (the chart's ServiceAccount).
    pub fn operator_kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Starts the operator on this namespace only, with further `flags`.
    pub fn start_operator(&self, flags: &[&str]) -> anyhow::Result<Operator> {
        let mut all = vec!["--namespace", self.ns.name.as_str()];
        all.extend_from_slice(flags);
        Operator::start(self.ground, &self.ns.name, &self.kubeconfig, &all)
    }

    /// A `kubernetes.io/dockerconfigjson` Secret `name`.
    pub async fn registry_secret(&self, name: &str, dockerconfigjson: &str) -> anyhow::Result<()> {
        create_secret(
            &self.admin,
            &self.ns.name,
            name,
            "kubernetes.io/dockerconfigjson",
            &[(".dockerconfigjson", dockerconfigjson)],
        )
        .await
    }

    /// Creates a manifests repository `name` holding `files` (path → contents); returns its
    /// HTTPS URL.
    pub fn git_repo(&mut self, name: &str, files: &[(String, String)]) -> anyhow::Result<String> {
        let seed = tempfile::tempdir()?;
        for (path, contents) in files {
            let file = seed.path().join(path);
            std::fs::create_dir_all(file.parent().unwrap_or(seed.path()))?;
            std::fs::write(file, contents)?;
        }
        let url = self.ground.git()?.new_repo(name, seed.path())?;
        self.git_repos.push(name.to_string());
        Ok(url)
    }

    /// The bare directory of a manifests repository.
    pub fn git_dir(&self, name: &str) -> anyhow::Result<PathBuf> {
        Ok(self.ground.git()?.repo_dir(name))
    }

    /// The API server's request counts so far (its `/metrics`, read with the admin identity).
    pub async fn api_requests(&self) -> anyhow::Result<ApiRequests> {
        let request = axum::http::Request::get("/metrics").body(Vec::new())?;
        Ok(ApiRequests::parse(&self.admin.request_text(request).await?))
    }

    /// Commits on `main` summed over the scenario's manifests repositories.
    pub fn commit_count(&self) -> anyhow::Result<usize> {
        let git = self.ground.git()?;
        self.git_repos
            .iter()
            .map(|r| git.commit_count(r, "main"))
            .sum()
    }

    /// Creates `objects`, [`CREATE_CONCURRENCY`] requests in flight; returns how long it took.
    pub async fn create_watches(&self, objects: Vec<ImageWatch>) -> anyhow::Result<Duration> {
        let started = Instant::now();
        futures::stream::iter(objects)
            .map(|w| {
                let api = self.watches.clone();
                async move { api.create(&PostParams::default(), &w).await }
            })
            .buffer_unordered(CREATE_CONCURRENCY)
            .try_for_each(|_| async { Ok(()) })
            .await?;
        Ok(started.elapsed())
    }

    /// Waits (through a watch on the namespace) until `n` ImageWatches satisfy `done`;
    /// reports progress on stderr every 30 s.
    pub async fn wait_watches(
        &self,
        n: usize,
        what: &str,
        timeout: Duration,
        done: impl Fn(&ImageWatch) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut finished: HashSet<String> = HashSet::new();
        // Listed from the API server's watch cache, as the operator lists: the observer should
        // cost the shared API server as little as it can.
        let stream = watcher(
            self.watches.clone(),
            watcher::Config::default().any_semantic(),
        )
        .default_backoff()
        .applied_objects();
        futures::pin_mut!(stream);
        let mut last_report = Instant::now();
        while finished.len() < n {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let next = tokio::time::timeout(remaining.min(Duration::from_secs(5)), stream.next());
            match next.await {
                Ok(Some(Ok(w))) => {
                    let name = w.metadata.name.clone().unwrap_or_default();
                    if done(&w) {
                        finished.insert(name);
                    } else {
                        finished.remove(&name);
                    }
                }
                Ok(Some(Err(e))) => eprintln!("bench: watch error (retrying): {e}"),
                Ok(None) => anyhow::bail!("the watch on ImageWatches ended"),
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "timed out after {timeout:?}: {} of {n} ImageWatches {what}",
                    finished.len()
                );
            }
            if last_report.elapsed() >= Duration::from_secs(30) {
                eprintln!("bench:   {} of {n} ImageWatches {what}", finished.len());
                last_report = Instant::now();
            }
        }
        Ok(())
    }

    /// Deletes every ImageWatch of the namespace (the namespace itself never finishes
    /// terminating on the ground: no controller-manager runs there), [`CREATE_CONCURRENCY`]
    /// requests in flight: one `deletecollection` of thousands of objects outlives the
    /// apiserver's request timeout. Failures are reported, not returned: cleaning up must
    /// not cost the measurements.
    pub async fn delete_watches(&self) {
        let names = match self.watches.list_metadata(&ListParams::default()).await {
            Ok(list) => list
                .items
                .into_iter()
                .filter_map(|w| w.metadata.name)
                .collect::<Vec<_>>(),
            Err(e) => {
                eprintln!("bench: cannot list the ImageWatches to delete them: {e}");
                return;
            }
        };
        let failed = futures::stream::iter(names)
            .map(|name| {
                let api = self.watches.clone();
                async move { api.delete(&name, &DeleteParams::default()).await.is_err() }
            })
            .buffer_unordered(CREATE_CONCURRENCY)
            .filter(|failed| futures::future::ready(*failed))
            .count()
            .await;
        if failed > 0 {
            eprintln!(
                "bench: {failed} ImageWatches of namespace {} could not be deleted",
                self.ns.name
            );
        }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Ok(git) = self.ground.git() {
            for name in &self.git_repos {
                let _ = std::fs::remove_dir_all(git.repo_dir(name));
            }
        }
    }
}

/// Whether the watch reports `Ready=True` with reason `UpToDate`.
pub fn up_to_date(w: &ImageWatch) -> bool {
    ready(w).is_some_and(|(status, reason, _)| status == "True" && reason == "UpToDate")
}

/// `status.applied.tag` of a watch.
pub fn applied_tag(w: &ImageWatch) -> Option<&str> {
    w.status.as_ref()?.applied.as_ref().map(|a| a.tag.as_str())
}

/// A Deployment manifest with one container `app` running `image`.
pub fn deployment(name: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: {image}\n"
    )
}

/// Where a watch writes: `apps/<name>/deployment.yaml` of a manifests repository.
pub fn manifest_path(name: &str) -> String {
    format!("apps/{name}/deployment.yaml")
}

/// An ImageWatch of `image` with tag `pattern`, polling every `interval`, writing the
/// Deployment `name` at [`manifest_path`] of `git_url` (registry Secret `registry_secret`).
pub fn watch_object(
    name: &str,
    image: &str,
    pattern: &str,
    interval: &str,
    git_url: &str,
    registry_secret: &str,
) -> anyhow::Result<ImageWatch> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "imagewatch.dev/v1alpha1",
        "kind": "ImageWatch",
        "metadata": {"name": name},
        "spec": {
            "image": image,
            "tags": {"pattern": pattern},
            "interval": interval,
            "credentials": {"secretRef": {"name": registry_secret}},
            "git": {"url": git_url, "secretRef": {"name": "git-creds"}},
            "target": {"workload": {"path": format!("apps/{name}"), "kind": "Deployment", "name": name, "container": "app"}},
        },
    }))?)
}

/// The process id of a part of the test ground (`$IMAGEWATCH_E2E_STATE/pids/NAME.pid`).
pub fn ground_pid(setup: &Setup, name: &str) -> Option<u32> {
    std::fs::read_to_string(setup.ground.state.join("pids").join(format!("{name}.pid")))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// CPU clock ticks a process (and its reaped children) used so far.
pub fn cpu_ticks(pid: Option<u32>) -> Option<u64> {
    imagewatch_e2e::bench::cpu_ticks(&std::fs::read_to_string(format!("/proc/{}/stat", pid?)).ok()?)
}

/// The CPU ticks of some processes at one moment, to tell what each used since.
pub struct CpuMark(Vec<(&'static str, Option<u32>, Option<u64>)>);

impl CpuMark {
    /// Marks `processes` (name, pid) now.
    pub fn now(processes: &[(&'static str, Option<u32>)]) -> Self {
        Self(
            processes
                .iter()
                .map(|(name, pid)| (*name, *pid, cpu_ticks(*pid)))
                .collect(),
        )
    }

    /// Adds, first, a process started after the mark: all of its CPU counts.
    pub fn with_new(mut self, name: &'static str, pid: u32) -> Self {
        self.0.insert(0, (name, Some(pid), Some(0)));
        self
    }

    /// CPU seconds each process used since the mark; one that is gone or has no pid is left
    /// out.
    pub fn seconds(&self) -> Vec<(&'static str, f64)> {
        let ticks = clock_ticks() as f64;
        self.0
            .iter()
            .filter_map(|(name, pid, before)| {
                let spent = cpu_ticks(*pid)?.checked_sub((*before)?)?;
                Some((*name, spent as f64 / ticks))
            })
            .collect()
    }
}

/// `CLK_TCK` (clock ticks per second of `/proc/PID/stat`).
pub fn clock_ticks() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// The length of a file (0 when absent).
pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// The bytes of a file from `from` to `to`, as text.
pub fn read_range(path: &Path, from: u64, to: u64) -> anyhow::Result<String> {
    use std::io::{Read as _, Seek as _};
    let mut file = std::fs::File::open(path)?;
    file.seek(std::io::SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    file.take(to.saturating_sub(from)).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A number from the environment, or `default`.
pub fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.trim().replace([',', '_'], "").parse().ok())
        .unwrap_or(default)
}
