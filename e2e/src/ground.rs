//! Handles to the shared test ground and per-test resources.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use anyhow::{Context as _, bail};
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::{Namespace, ServiceAccount},
};
use kube::{
    Api, Client, Config,
    api::{ObjectMeta, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scripts() -> PathBuf {
    repo_root().join("e2e/scripts")
}

/// The running test ground (shared by every test in the process).
#[derive(Debug, Clone)]
pub struct Ground {
    /// `export` variables of the ground.
    pub env: BTreeMap<String, String>,
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// State directory of the ground.
    pub state: PathBuf,
}

static GROUND: OnceLock<Result<Ground, String>> = OnceLock::new();

impl Ground {
    /// The shared ground: read from its env file, or started when absent.
    pub fn get() -> anyhow::Result<&'static Ground> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        GROUND
            .get_or_init(|| Self::load_or_start().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow::anyhow!("test ground unavailable: {e}"))
    }

    fn state_dir() -> PathBuf {
        std::env::var_os("IMAGEWATCH_E2E_STATE")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join(".cache/e2e"))
    }

    fn load_or_start() -> anyhow::Result<Ground> {
        let env_file = Self::state_dir().join("env");
        if !env_file.exists() {
            let status = Command::new(scripts().join("testground.sh"))
                .arg("up")
                .status()
                .context("running e2e/scripts/testground.sh up")?;
            if !status.success() {
                bail!("e2e/scripts/testground.sh up failed ({status})");
            }
        }
        let text = std::fs::read_to_string(&env_file)
            .with_context(|| format!("reading {}", env_file.display()))?;
        let mut env = parse_exports(&text);
        if let Ok(own) = std::env::var("IMAGEWATCH_E2E_KUBECONFIG") {
            env.insert("KUBECONFIG".into(), own);
        }
        let kubeconfig = PathBuf::from(
            env.get("KUBECONFIG")
                .context("env file has no KUBECONFIG")?,
        );
        let state = PathBuf::from(
            env.get("IMAGEWATCH_E2E_STATE")
                .cloned()
                .unwrap_or_else(|| Self::state_dir().display().to_string()),
        );
        Ok(Ground {
            env,
            kubeconfig,
            state,
        })
    }

    /// A variable of the ground's environment.
    pub fn var(&self, key: &str) -> anyhow::Result<&str> {
        self.env
            .get(key)
            .map(String::as_str)
            .with_context(|| format!("test ground has no {key}"))
    }

    /// Admin client.
    pub async fn admin(&self) -> anyhow::Result<Client> {
        client_from_kubeconfig(&self.kubeconfig).await
    }

    /// The registry.
    pub fn registry(&self) -> anyhow::Result<Registry> {
        Ok(Registry {
            host: self.var("IMAGEWATCH_REGISTRY")?.to_string(),
            user: self.var("IMAGEWATCH_REGISTRY_USER")?.to_string(),
            password: self.var("IMAGEWATCH_REGISTRY_PASSWORD")?.to_string(),
            ground: self.clone(),
        })
    }

    /// The git server.
    pub fn git(&self) -> anyhow::Result<GitServer> {
        Ok(GitServer {
            // HTTPS with the ground's own CA (operators get it via SSL_CERT_FILE).
            base_url: self
                .var("IMAGEWATCH_GIT_HTTPS_URL")?
                .trim_end_matches('/')
                .to_string(),
            http_url: self
                .var("IMAGEWATCH_GIT_HTTP_URL")?
                .trim_end_matches('/')
                .to_string(),
            user: self.var("IMAGEWATCH_GIT_USER")?.to_string(),
            token: self.var("IMAGEWATCH_GIT_TOKEN")?.to_string(),
            ground: self.clone(),
        })
    }

    /// Runs a ground script with the ground's environment; returns stdout.
    pub fn script(&self, name: &str, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(scripts().join(name))
            .args(args)
            .envs(&self.env)
            .output()
            .with_context(|| format!("running {name}"))?;
        if !out.status.success() {
            bail!(
                "{name} {args:?} failed: {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }

    /// `kubectl` as the admin; returns stdout.
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .output()
            .context("running kubectl")?;
        if !out.status.success() {
            bail!(
                "kubectl {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }

    /// `kubectl` as the admin, returning (success, stdout+stderr) without failing.
    pub fn kubectl_try(
        &self,
        args: &[&str],
        stdin: Option<&str>,
    ) -> anyhow::Result<(bool, String)> {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("running kubectl")?;
        if let Some(mut input) = child.stdin.take() {
            input.write_all(stdin.unwrap_or("").as_bytes())?;
        }
        let out = child.wait_with_output()?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok((out.status.success(), text))
    }

    /// Installs the chart's CRDs (server-side apply) and waits until they are established.
    pub fn install_crds(&self) -> anyhow::Result<()> {
        let dir = repo_root().join("charts/imagewatch/crds");
        self.kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &dir.display().to_string(),
        ])?;
        self.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/imagewatches.imagewatch.dev",
            "crd/promotionpolicies.imagewatch.dev",
        ])?;
        Ok(())
    }

    /// Renders the chart with the real helm and applies its ServiceAccount and RBAC into
    /// `namespace` under `release`, so tests run the operator with exactly the chart's rights.
    pub fn install_chart_rbac(&self, release: &str, namespace: &str) -> anyhow::Result<()> {
        self.install_chart_rbac_with(release, namespace, &[])
    }

    /// Like [`Ground::install_chart_rbac`], rendered with `--set` values (e.g. `shards=6`).
    pub fn install_chart_rbac_with(
        &self,
        release: &str,
        namespace: &str,
        set: &[&str],
    ) -> anyhow::Result<()> {
        let helm = self.helm()?;
        let out = Command::new(helm)
            .args([
                "template",
                release,
                &repo_root().join("charts/imagewatch").display().to_string(),
                "--namespace",
                namespace,
                "--show-only",
                "templates/serviceaccount.yaml",
                "--show-only",
                "templates/rbac.yaml",
            ])
            .args(set.iter().flat_map(|s| ["--set", s]))
            .output()
            .context("running helm template")?;
        if !out.status.success() {
            bail!(
                "helm template failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let manifest = String::from_utf8_lossy(&out.stdout).to_string();
        let (ok, text) = self.kubectl_try(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&manifest),
        )?;
        if !ok {
            bail!("applying chart RBAC failed: {text}");
        }
        Ok(())
    }

    /// Path of the helm binary built by the ground.
    pub fn helm(&self) -> anyhow::Result<PathBuf> {
        let cache = std::env::var_os("IMAGEWATCH_E2E_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var("HOME").unwrap_or_default())
                    .join(".cache/imagewatch-e2e")
            });
        let helm = cache.join("bin/helm");
        if !helm.exists() {
            let status = Command::new(scripts().join("helm.sh"))
                .arg("build")
                .status()?;
            if !status.success() {
                bail!("building helm failed");
            }
        }
        Ok(helm)
    }
}

fn parse_exports(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("export "))
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            (
                k.to_string(),
                v.trim_matches(|c| c == '"' || c == '\'').to_string(),
            )
        })
        .collect()
}

/// A client from a kubeconfig file.
pub async fn client_from_kubeconfig(path: &Path) -> anyhow::Result<Client> {
    let kubeconfig =
        Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// A namespace created for one test and deleted when dropped.
pub struct TestNamespace {
    /// Its name.
    pub name: String,
    kubeconfig: PathBuf,
}

impl TestNamespace {
    /// Creates `prefix-<random>`.
    pub async fn create(ground: &Ground, prefix: &str) -> anyhow::Result<Self> {
        let name = format!("{prefix}-{}", random_suffix());
        let client = ground.admin().await?;
        let api: Api<Namespace> = Api::all(client);
        api.create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await?;
        Ok(Self {
            name,
            kubeconfig: ground.kubeconfig.clone(),
        })
    }

    /// Creates a ServiceAccount and returns a kubeconfig file (and a client) authenticating as it.
    pub async fn service_account(
        &self,
        ground: &Ground,
        name: &str,
    ) -> anyhow::Result<(PathBuf, Client)> {
        let admin = ground.admin().await?;
        let sas: Api<ServiceAccount> = Api::namespaced(admin, &self.name);
        if sas.get_opt(name).await?.is_none() {
            sas.create(
                &PostParams::default(),
                &ServiceAccount {
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await?;
        }
        let token = sas
            .create_token_request(
                name,
                &PostParams::default(),
                &TokenRequest {
                    spec: TokenRequestSpec {
                        audiences: vec![],
                        expiration_seconds: Some(3600),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await?
            .status
            .context("token request has no status")?
            .token;
        let path = ground
            .state
            .join(format!("kubeconfig-{}-{}", self.name, name));
        write_token_kubeconfig(&ground.kubeconfig, &path, &token)?;
        let client = client_from_kubeconfig(&path).await?;
        Ok((path, client))
    }
}

/// Writes a kubeconfig for the admin kubeconfig's cluster that authenticates with `token`.
fn write_token_kubeconfig(admin: &Path, out: &Path, token: &str) -> anyhow::Result<()> {
    let kubeconfig = Kubeconfig::read_from(admin)?;
    let cluster = kubeconfig
        .clusters
        .first()
        .context("admin kubeconfig has no cluster")?
        .clone();
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "ground", "cluster": serde_json::to_value(cluster.cluster)?}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "ground", "user": "sa"}}],
        "current-context": "sa",
    });
    std::fs::write(out, serde_json::to_string_pretty(&doc)?)?;
    Ok(())
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // No controller-manager runs on the ground, so a namespace never finishes terminating;
        // deleting still removes it from use and frees its objects for inspection.
        let _ = Command::new("kubectl")
            .args([
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .env("KUBECONFIG", &self.kubeconfig)
            .output();
    }
}

/// A short random suffix for names.
pub fn random_suffix() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let pid = std::process::id();
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{:x}", (nanos ^ (pid << 8) ^ (n << 20)) & 0xff_ffff)
}

/// The registry of the ground (htpasswd auth, plain HTTP on loopback).
#[derive(Debug, Clone)]
pub struct Registry {
    /// host:port.
    pub host: String,
    /// User.
    pub user: String,
    /// Password.
    pub password: String,
    ground: Ground,
}

impl Registry {
    /// Pushes a small image as `repo:tag`; returns its digest.
    pub fn push(&self, repo: &str, tag: &str) -> anyhow::Result<String> {
        let out = self
            .ground
            .script("push-image.sh", &[&format!("{repo}:{tag}")])?;
        Ok(out.trim().lines().last().unwrap_or_default().to_string())
    }

    /// Adds `new_tag` to the digest of `repo:old_tag`.
    pub fn retag(&self, repo: &str, old_tag: &str, new_tag: &str) -> anyhow::Result<String> {
        let out = self
            .ground
            .script("retag.sh", &[&format!("{repo}:{old_tag}"), new_tag])?;
        Ok(out.trim().lines().last().unwrap_or_default().to_string())
    }

    /// `.dockerconfigjson` contents for this registry.
    pub fn dockerconfigjson(&self) -> String {
        dockerconfigjson(&self.host, &self.user, &self.password)
    }
}

/// `.dockerconfigjson` contents giving `user:password` for `host`.
pub fn dockerconfigjson(host: &str, user: &str, password: &str) -> String {
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    serde_json::json!({"auths": {host: {"auth": auth}}}).to_string()
}

/// The git server of the ground (HTTP with basic auth).
#[derive(Debug, Clone)]
pub struct GitServer {
    /// Base URL over HTTPS (`https://127.0.0.1:PORT`).
    pub base_url: String,
    /// Base URL over plain HTTP.
    pub http_url: String,
    /// User.
    pub user: String,
    /// Token (password).
    pub token: String,
    ground: Ground,
}

impl GitServer {
    /// Creates a bare repository `name` seeded from `seed_dir` (branch main); returns its URL.
    pub fn new_repo(&self, name: &str, seed_dir: &Path) -> anyhow::Result<String> {
        self.ground
            .script("new-repo.sh", &[name, &seed_dir.display().to_string()])?;
        Ok(format!("{}/{}.git", self.base_url, name))
    }

    /// The HTTPS endpoint's certificate and private key (PEM files; issued by the ground's
    /// git CA for 127.0.0.1), for a proxy that stands in for that endpoint.
    pub fn tls_identity(&self) -> (PathBuf, PathBuf) {
        let tls = self.ground.state.join("git/tls");
        (tls.join("server.crt"), tls.join("server.key"))
    }

    /// Path of the bare repository on disk (for assertions).
    pub fn repo_dir(&self, name: &str) -> PathBuf {
        self.ground
            .state
            .join("git/repos")
            .join(format!("{name}.git"))
    }

    /// Runs `git` against the bare repository `name`; returns stdout.
    pub fn git(&self, name: &str, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(self.repo_dir(name))
            .args(args)
            .output()
            .context("running git")?;
        if !out.status.success() {
            bail!(
                "git {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }

    /// A person's commit on `branch`: clones the repository, writes `files` (path, content;
    /// `None` deletes), commits as `dev` and pushes; returns the new commit's id.
    pub fn commit_files(
        &self,
        name: &str,
        branch: &str,
        files: &[(&str, Option<&str>)],
        message: &str,
    ) -> anyhow::Result<String> {
        let work = tempfile::tempdir()?;
        let clone = work.path().join("c");
        let run = |args: &[&str]| -> anyhow::Result<String> {
            let out = Command::new("git")
                .args(args)
                .current_dir(work.path())
                .output()
                .context("running git")?;
            if !out.status.success() {
                bail!(
                    "git {args:?} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        };
        let repo = self.repo_dir(name).display().to_string();
        run(&["clone", "-q", "--branch", branch, &repo, "c"])?;
        let c = clone.display().to_string();
        for (path, content) in files {
            let file = clone.join(path);
            match content {
                Some(text) => {
                    std::fs::create_dir_all(file.parent().context("a file path")?)?;
                    std::fs::write(&file, text)?;
                    run(&["-C", &c, "add", path])?;
                }
                None => {
                    run(&["-C", &c, "rm", "-q", path])?;
                }
            }
        }
        run(&[
            "-C",
            &c,
            "-c",
            "user.name=dev",
            "-c",
            "user.email=dev@example.invalid",
            "commit",
            "-qm",
            message,
        ])?;
        run(&["-C", &c, "push", "-q", "origin", branch])?;
        run(&["-C", &c, "rev-parse", "HEAD"])
    }

    /// Number of commits on `branch`.
    pub fn commit_count(&self, name: &str, branch: &str) -> anyhow::Result<usize> {
        Ok(self
            .git(name, &["rev-list", "--count", branch])?
            .trim()
            .parse()?)
    }

    /// File contents at the tip of `branch`.
    pub fn show(&self, name: &str, branch: &str, path: &str) -> anyhow::Result<String> {
        self.git(name, &["show", &format!("{branch}:{path}")])
    }
}
