//! The chart installed on the ground's node, as `just install` does it: the release image
//! (`e2e/scripts/image.sh`), `helm upgrade --install --wait` (`e2e/scripts/install.sh`), and
//! the container log files the kubelet writes (the Node has no reachable address, so there is
//! no `kubectl logs`).

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use anyhow::Context as _;

use crate::{Ground, ground::repo_root};

/// A Deployment the ground's node runs: one replica named `name` (also its `app` label and its
/// container's name) on the node's network, tolerating the node's taint, pulling with the
/// `hookreg` Secret. `image` is written as given after `image: ` (a quoted template or a
/// trailing comment included).
pub fn node_deployment(name: &str, image: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      hostNetwork: true
      terminationGracePeriodSeconds: 1
      tolerations: [{{key: imagewatch.dev/e2e-node, operator: Exists, effect: NoSchedule}}]
      imagePullSecrets: [{{name: hookreg}}]
      containers:
      - name: {name}
        image: {image}
"#
    )
}

/// `target/release/imagewatch`, which `just test` builds before the tests (a `cargo build`
/// inside `cargo test` would wait for the target directory's lock).
pub fn release_binary() -> anyhow::Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    let binary = target.join("release/imagewatch");
    anyhow::ensure!(
        binary.exists(),
        "{} not built; run `cargo build --release -p imagewatch` first",
        binary.display()
    );
    Ok(binary)
}

/// The release image pushed to the ground's registry (pushed once per test run).
pub fn release_image(ground: &Ground) -> anyhow::Result<String> {
    static IMAGE: OnceLock<Result<String, String>> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let binary = release_binary().map_err(|e| e.to_string())?;
            let out = Command::new(repo_root().join("e2e/scripts/image.sh"))
                .arg("push")
                .env("IMAGEWATCH_E2E_STATE", &ground.state)
                .env("IMAGEWATCH_RELEASE_BINARY", &binary)
                .output()
                .map_err(|e| format!("image.sh: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "image.sh push: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .map(str::to_string)
                .ok_or_else(|| "image.sh push printed no reference".to_string())
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// Copies the pushed release image to `tag` (an upgrade to "a new image"); its reference.
pub fn retag_release_image(ground: &Ground, tag: &str) -> anyhow::Result<String> {
    let out = Command::new(repo_root().join("e2e/scripts/image.sh"))
        .args(["tag", tag])
        .env("IMAGEWATCH_E2E_STATE", &ground.state)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "image.sh tag: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A release of the chart installed by `install.sh`.
pub struct Release {
    /// Release name.
    pub name: String,
    /// Namespace (also the only one the operator watches).
    pub namespace: String,
    /// `helm upgrade --install` output (stderr) and `kubectl get pods` (stdout).
    pub output: String,
    kubeconfig: PathBuf,
    state: PathBuf,
}

impl Release {
    fn new(ground: &Ground, name: &str, namespace: &str) -> Self {
        Self {
            name: name.to_string(),
            namespace: namespace.to_string(),
            output: String::new(),
            kubeconfig: ground.kubeconfig.clone(),
            state: ground.state.clone(),
        }
    }

    /// `install.sh` with `image`, then `values` (YAML, applied last).
    pub fn install(
        ground: &Ground,
        name: &str,
        namespace: &str,
        image: &str,
        values: &str,
    ) -> anyhow::Result<Self> {
        let mut release = Self::new(ground, name, namespace);
        release.output = helm_upgrade(ground, name, namespace, image, values)?;
        Ok(release)
    }

    /// `install.sh` of the chart `chart` (e.g. `oci://…/charts/imagewatch` of a release) with
    /// its default image (no image value), then `helm_args` (e.g. `--version`).
    pub fn install_chart(
        ground: &Ground,
        name: &str,
        namespace: &str,
        chart: &str,
        helm_args: &[&str],
    ) -> anyhow::Result<Self> {
        let mut release = Self::new(ground, name, namespace);
        release.output = install_sh(
            ground,
            (name, namespace),
            helm_args,
            &[
                ("IMAGEWATCH_INSTALL_CHART", chart),
                ("IMAGEWATCH_IMAGE", "chart"),
            ],
        )?;
        Ok(release)
    }

    /// Node ports the release listens on (chosen by install.sh): (metrics, webhook).
    pub fn ports(&self) -> anyhow::Result<(u16, u16)> {
        let dir = self
            .state
            .join("install")
            .join(format!("{}-{}", self.namespace, self.name));
        let read = |f: &str| -> anyhow::Result<u16> {
            Ok(std::fs::read_to_string(dir.join(f))
                .with_context(|| format!("{f} of the release"))?
                .trim()
                .parse()?)
        };
        Ok((read("metrics.port")?, read("webhook.port")?))
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("e2e/scripts/install.sh"))
            .arg("uninstall")
            .env("IMAGEWATCH_E2E_STATE", &self.state)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("IMAGEWATCH_INSTALL_NAMESPACE", &self.namespace)
            .env("IMAGEWATCH_INSTALL_RELEASE", &self.name)
            .output();
    }
}

/// `install.sh` (`helm upgrade --install --wait`) of release `name` in `namespace` with
/// `image`, then `values` (YAML, applied last); its output.
pub fn helm_upgrade(
    ground: &Ground,
    name: &str,
    namespace: &str,
    image: &str,
    values: &str,
) -> anyhow::Result<String> {
    let file = tempfile::Builder::new().suffix(".yaml").tempfile()?;
    std::fs::write(file.path(), values)?;
    let path = file.path().display().to_string();
    install_sh(
        ground,
        (name, namespace),
        &["-f", &path],
        &[("IMAGEWATCH_IMAGE", image)],
    )
}

/// `install.sh ARGS` of release `name` in `namespace` with `env`; its output (stderr, then
/// stdout).
fn install_sh(
    ground: &Ground,
    (name, namespace): (&str, &str),
    args: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<String> {
    let out = Command::new(repo_root().join("e2e/scripts/install.sh"))
        .args(args)
        .env("IMAGEWATCH_E2E_STATE", &ground.state)
        .env("KUBECONFIG", &ground.kubeconfig)
        .env("IMAGEWATCH_INSTALL_NAMESPACE", namespace)
        .env("IMAGEWATCH_INSTALL_RELEASE", name)
        .envs(env.iter().copied())
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    anyhow::ensure!(out.status.success(), "install.sh failed:\n{text}");
    Ok(text)
}

/// The directory of the kubelet's container logs (`IMAGEWATCH_NODE_POD_LOGS`).
pub fn pod_logs_dir(ground: &Ground) -> anyhow::Result<PathBuf> {
    Ok(PathBuf::from(
        ground.var("IMAGEWATCH_NODE_POD_LOGS").context(
            "the ground has no node (IMAGEWATCH_NODE_POD_LOGS unset; IMAGEWATCH_E2E_NODE=0?)",
        )?,
    ))
}

/// Every log line the kubelet kept of container `container` of Pod `namespace/pod` (all
/// restarts, oldest first), without the CRI prefix (time, stream, tag).
pub fn container_log(
    logs: &Path,
    namespace: &str,
    pod: &str,
    container: &str,
) -> anyhow::Result<Vec<String>> {
    let prefix = format!("{namespace}_{pod}_");
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(logs)? {
        let entry = entry?;
        if !entry.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let dir = entry.path().join(container);
        let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
            Ok(read) => read.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(_) => continue,
        };
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            // CRI format: <RFC3339Nano> <stdout|stderr> <F|P> <text>
            lines.extend(
                text.lines()
                    .filter_map(|l| l.splitn(4, ' ').nth(3))
                    .map(str::to_string),
            );
        }
    }
    Ok(lines)
}

/// Lets the node's containerd pull from the plain-HTTP registry `host` (a registry of a
/// test's own): containerd reads `certs.d/<host>/hosts.toml` at each pull.
pub fn trust_registry(ground: &Ground, host: &str) -> anyhow::Result<()> {
    let dir = ground.state.join("node/certs.d").join(host);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("hosts.toml"),
        format!(
            "server = \"http://{host}\"\n[host.\"http://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
        ),
    )
    .with_context(|| format!("writing {}", dir.display()))?;
    Ok(())
}

/// Waits until a Pod labelled `selector` in `namespace` runs `image` (its first container)
/// and is Ready; returns it.
pub async fn wait_pod_ready_with(
    client: &kube::Client,
    namespace: &str,
    selector: &str,
    image: &str,
) -> anyhow::Result<k8s_openapi::api::core::v1::Pod> {
    use k8s_openapi::api::core::v1::Pod;
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), namespace);
    crate::wait_until(
        &format!("a Ready Pod ({selector}) running {image}"),
        std::time::Duration::from_secs(120),
        || async {
            let list = pods
                .list(&kube::api::ListParams::default().labels(selector))
                .await?;
            Ok(list.items.into_iter().find(|p| {
                let image_ok = p.spec.as_ref().is_some_and(|s| {
                    s.containers.first().and_then(|c| c.image.as_deref()) == Some(image)
                });
                let ready = p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                image_ok && ready
            }))
        },
    )
    .await
}
