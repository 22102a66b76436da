//! The operator as a real process (the binary built from `operator/`), authenticated with a
//! chosen kubeconfig. Killed when the handle drops.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use anyhow::Context as _;

use crate::ground::{Ground, repo_root};

/// A running `imagewatch run`.
pub struct Operator {
    child: Option<Child>,
    /// Log file (stdout + stderr).
    pub log: PathBuf,
    /// Address of /metrics.
    pub metrics_addr: String,
    /// Clone cache directory.
    pub cache_dir: PathBuf,
    kubeconfig: PathBuf,
    extra: Vec<String>,
    env: Vec<(String, String)>,
    /// CA bundle trusted for HTTPS (the ground's git server CA + system CAs).
    ca_bundle: Option<String>,
    /// Start without any inherited `AWS_*` variable (and without
    /// `AWS_EC2_METADATA_DISABLED`): the operator as on a cluster with no AWS at all.
    without_aws: bool,
}

/// Path of the operator binary (built by `cargo build` before the tests).
pub fn binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("IMAGEWATCH_BIN") {
        return PathBuf::from(bin);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    target.join("debug/imagewatch")
}

/// A free loopback TCP port.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

impl Operator {
    /// Starts the operator with `kubeconfig`; `extra` are further `run` flags.
    pub fn start(
        ground: &Ground,
        name: &str,
        kubeconfig: &Path,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        Self::start_with_env(ground, name, kubeconfig, extra, &[])
    }

    /// Like [`Operator::start`], with extra environment variables.
    pub fn start_with_env(
        ground: &Ground,
        name: &str,
        kubeconfig: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let mut op = Self::new(ground, name, kubeconfig, extra, env)?;
        op.spawn()?;
        Ok(op)
    }

    fn new(
        ground: &Ground,
        name: &str,
        kubeconfig: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let dir = ground.state.join("operators").join(name);
        std::fs::create_dir_all(&dir)?;
        let cache_dir = dir.join("cache");
        let op = Self {
            child: None,
            log: dir.join("operator.log"),
            metrics_addr: String::new(),
            cache_dir,
            kubeconfig: kubeconfig.to_path_buf(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ca_bundle: ground.env.get("IMAGEWATCH_GIT_CA_BUNDLE").cloned(),
            without_aws: false,
        };
        Ok(op)
    }

    /// Like [`Operator::start_with_env`], but with no `AWS_*` variable from the test's
    /// environment (only those in `env`).
    pub fn start_without_aws(
        ground: &Ground,
        name: &str,
        kubeconfig: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let mut op = Self::new(ground, name, kubeconfig, extra, env)?;
        op.without_aws = true;
        op.spawn()?;
        Ok(op)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let bin = binary();
        anyhow::ensure!(
            bin.exists(),
            "{} not built; run `cargo build` first",
            bin.display()
        );
        // A test that must know the address before the start (e.g. to tell peers) sets
        // IMAGEWATCH_METRICS_ADDR itself.
        self.metrics_addr = match self
            .env
            .iter()
            .find(|(k, _)| k == "IMAGEWATCH_METRICS_ADDR")
        {
            Some((_, addr)) => addr.clone(),
            None => format!("127.0.0.1:{}", free_port()?),
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut command = Command::new(bin);
        if self.without_aws {
            for (key, _) in std::env::vars_os() {
                if key.to_string_lossy().starts_with("AWS_") {
                    command.env_remove(key);
                }
            }
        } else {
            // Nothing leaves loopback: the SDK never asks the instance metadata address.
            command.env("AWS_EC2_METADATA_DISABLED", "true");
        }
        let child = command
            .arg("run")
            .arg("--metrics-addr")
            .arg(&self.metrics_addr)
            .arg("--cache-dir")
            .arg(&self.cache_dir)
            .args(&self.extra)
            .env("KUBECONFIG", &self.kubeconfig)
            .envs(self.ca_bundle.iter().map(|b| ("SSL_CERT_FILE", b)))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info,imagewatch=debug".into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting imagewatch")?;
        self.child = Some(child);
        Ok(())
    }

    /// Stops the process (SIGKILL) and starts it again with the same settings and cache.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.spawn()
    }

    /// Like [`Operator::restart`], without the environment variable `key` (a test hook).
    pub fn restart_without(&mut self, key: &str) -> anyhow::Result<()> {
        self.kill();
        self.env.retain(|(k, _)| k != key);
        self.spawn()
    }

    /// SIGTERM, then waits up to `timeout` for the process to exit; true when it exited
    /// (successfully).
    pub fn terminate(&mut self, timeout: std::time::Duration) -> anyhow::Result<bool> {
        let Some(child) = self.child.as_mut() else {
            return Ok(false);
        };
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()?;
        anyhow::ensure!(status.success(), "kill -TERM failed");
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(exit) = child.try_wait()? {
                self.child = None;
                return Ok(exit.success());
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The last lines of the log (for failure messages).
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// GET /metrics.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        let body = reqwest::get(format!("http://{}/metrics", self.metrics_addr))
            .await?
            .text()
            .await?;
        Ok(body)
    }
}

/// The sum of the samples of `/metrics` text whose line starts with `prefix`.
pub fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

impl Drop for Operator {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- operator log ({}) ---\n{}",
                self.log.display(),
                self.log_tail(60)
            );
        }
        self.kill();
    }
}
