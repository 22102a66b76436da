//! The ground's real Argo CD (`e2e/scripts/argocd.sh`): repository credentials, Applications,
//! waiting on what its application-controller writes, and its CLI. Tests never write an
//! Application's status: Argo CD does.

use std::{path::PathBuf, process::Command, time::Duration};

use anyhow::{Context as _, bail};
use kube::{
    Api, Client,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind},
};
use serde_json::Value;

use crate::{Ground, wait_until};

/// How long a test waits for Argo CD to sync (its repo-server clones, renders and the
/// controller applies; a refresh makes it start at once).
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(120);

/// The ground's Argo CD.
#[derive(Clone)]
pub struct ArgoCd {
    /// Namespace of its Applications.
    pub namespace: String,
    bin: PathBuf,
    ground: &'static Ground,
}

/// The Application API.
pub fn application_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"),
        "applications",
    )
}

impl ArgoCd {
    /// Argo CD of the running ground; an error naming what is missing otherwise (the ground
    /// starts it unless `IMAGEWATCH_E2E_ARGOCD=0`).
    pub fn get(ground: &'static Ground) -> anyhow::Result<Self> {
        let namespace = ground
            .var("IMAGEWATCH_ARGOCD_NAMESPACE")
            .context("the test ground runs no Argo CD (started by e2e/scripts/argocd.sh unless IMAGEWATCH_E2E_ARGOCD=0)")?
            .to_string();
        let bin = PathBuf::from(ground.var("IMAGEWATCH_ARGOCD_BIN")?);
        Ok(Self {
            namespace,
            bin,
            ground,
        })
    }

    /// Lets Argo CD read the ground's git server (HTTP, basic auth) under `name`.
    pub fn add_git_repository(&self, name: &str, url: &str) -> anyhow::Result<()> {
        let git = self.ground.git()?;
        let secret = format!(
            r#"apiVersion: v1
kind: Secret
metadata:
  name: {name}
  namespace: {ns}
  labels: {{argocd.argoproj.io/secret-type: repository}}
stringData: {{type: git, url: "{url}", username: "{user}", password: "{token}"}}
"#,
            ns = self.namespace,
            user = git.user,
            token = git.token,
        );
        let (ok, out) = self
            .ground
            .kubectl_try(&["apply", "-f", "-"], Some(&secret))?;
        anyhow::ensure!(ok, "creating the Argo CD repository Secret: {out}");
        Ok(())
    }

    /// `kubectl apply` of Application (or ApplicationSet, AppProject) YAML; the returned guard
    /// deletes the named Applications when dropped.
    pub fn apply(&self, yaml: &str, names: &[&str]) -> anyhow::Result<AppGuard> {
        let (ok, out) = self.ground.kubectl_try(&["apply", "-f", "-"], Some(yaml))?;
        anyhow::ensure!(ok, "kubectl apply of Argo CD objects failed: {out}");
        Ok(AppGuard {
            ground: self.ground,
            namespace: self.namespace.clone(),
            names: names.iter().map(|n| n.to_string()).collect(),
        })
    }

    /// An Application in Argo CD's namespace deploying `path` of `url` (branch main) into
    /// `namespace`, syncing by itself (automated, with prune).
    pub fn application(&self, name: &str, url: &str, path: &str, namespace: &str) -> String {
        format!(
            r#"apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {{name: {name}, namespace: {argo}}}
spec:
  project: default
  source: {{repoURL: "{url}", targetRevision: main, path: {path}}}
  destination: {{server: "https://kubernetes.default.svc", namespace: {namespace}}}
  syncPolicy: {{automated: {{prune: true}}}}
"#,
            argo = self.namespace
        )
    }

    /// The Applications API of Argo CD's namespace.
    pub fn applications(&self, client: &Client) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), &self.namespace, &application_resource())
    }

    /// Waits until the Application is Synced and Healthy (at `revision`, when given), as its
    /// controller reports; returns it.
    pub async fn wait_synced_healthy(
        &self,
        client: &Client,
        name: &str,
        revision: Option<&str>,
    ) -> anyhow::Result<Value> {
        let api = self.applications(client);
        wait_until(
            &format!(
                "Application {name} Synced and Healthy{}",
                revision.map(|r| format!(" at {r}")).unwrap_or_default()
            ),
            SYNC_TIMEOUT,
            || async {
                let app = api.get(name).await?;
                let data = serde_json::to_value(&app)?;
                let text = |p: &str| data.pointer(p).and_then(Value::as_str).unwrap_or("");
                let at = revision.is_none_or(|r| text("/status/sync/revision") == r);
                if text("/status/sync/status") == "Synced"
                    && text("/status/health/status") == "Healthy"
                    && at
                {
                    return Ok(Some(data));
                }
                anyhow::bail!(
                    "sync {:?} at {:?}, health {:?} ({:?}), conditions {}",
                    text("/status/sync/status"),
                    text("/status/sync/revision"),
                    text("/status/health/status"),
                    text("/status/health/message"),
                    data.pointer("/status/conditions")
                        .cloned()
                        .unwrap_or_default()
                )
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n--- Argo CD ---\n{}", self.log_tail(30)))
    }

    /// Asks the Application to refresh (`argocd.argoproj.io/refresh: normal`, as a Git webhook
    /// would) and waits until its controller has compared it again (the controller removes
    /// the annotation when done); returns the Application as it then is.
    pub async fn refresh(&self, client: &Client, name: &str) -> anyhow::Result<Value> {
        let api = self.applications(client);
        let patch = serde_json::json!({
            "metadata": {"annotations": {"argocd.argoproj.io/refresh": "normal"}}
        });
        api.patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
        wait_until(
            &format!("Application {name} refreshed"),
            SYNC_TIMEOUT,
            || async {
                let app = serde_json::to_value(api.get(name).await?)?;
                let pending = app
                    .pointer("/metadata/annotations/argocd.argoproj.io~1refresh")
                    .is_some();
                Ok((!pending).then_some(app))
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n--- Argo CD ---\n{}", self.log_tail(30)))
    }

    /// Runs the `argocd` CLI of the ground's build; returns stdout.
    pub fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let home = tempfile::tempdir()?;
        let out = Command::new(self.bin.join("argocd"))
            .args(args)
            .env_remove("ARGOCD_BINARY_NAME")
            .env("HOME", home.path())
            .output()
            .with_context(|| format!("running {}", self.bin.join("argocd").display()))?;
        if !out.status.success() {
            bail!(
                "argocd {args:?} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }

    /// The last lines of the application-controller's and repo-server's logs.
    pub fn log_tail(&self, lines: usize) -> String {
        let logs = self.ground.state.join("argocd/logs");
        ["application-controller", "repo-server"]
            .iter()
            .map(|name| {
                let text =
                    std::fs::read_to_string(logs.join(format!("{name}.log"))).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(lines).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("[{name}]\n{}", tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// An Argo CD source parameter file (`.argocd-source-<app>.yaml`) pinning `images` in
/// Kustomize's `images` list, with imagewatch's header line.
pub fn source_file<S: AsRef<str>>(images: &[S]) -> String {
    let mut out = String::from("# image tags (managed by imagewatch)\nkustomize:\n  images:\n");
    for image in images {
        out.push_str(&format!("  - {}\n", image.as_ref()));
    }
    out
}

/// Deletes its Applications when dropped (the namespace a test deploys to goes with the test).
pub struct AppGuard {
    ground: &'static Ground,
    namespace: String,
    names: Vec<String>,
}

impl AppGuard {
    /// Deletes the Applications now and waits until they are gone.
    pub async fn delete(mut self, client: &Client) -> anyhow::Result<()> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &self.namespace, &application_resource());
        for name in std::mem::take(&mut self.names) {
            api.delete(&name, &DeleteParams::default()).await.ok();
            wait_until(
                &format!("Application {name} deleted"),
                SYNC_TIMEOUT,
                || async { Ok(api.get_opt(&name).await?.is_none().then_some(())) },
            )
            .await?;
        }
        Ok(())
    }
}

impl Drop for AppGuard {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = self.ground.kubectl_try(
                &[
                    "delete",
                    "applications.argoproj.io",
                    name,
                    "-n",
                    &self.namespace,
                    "--ignore-not-found",
                    "--wait=false",
                ],
                None,
            );
        }
    }
}
