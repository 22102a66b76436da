//! A registry of its own for a test or benchmark: CNCF distribution in a private state
//! directory whose notifications go to an operator's webhook receiver.

use std::process::Command;

use crate::ground::repo_root;

/// A registry of its own (state in a temp dir) whose notifications go to `notify_url`.
pub struct NotifyingRegistry {
    state: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl NotifyingRegistry {
    /// Starts it; notifications are POSTed to `notify_url` with `Authorization: Bearer token`.
    pub fn start(notify_url: &str, token: &str) -> anyhow::Result<Self> {
        let state = tempfile::tempdir()?;
        let out = Command::new(repo_root().join("e2e/scripts/registry.sh"))
            .arg("up")
            .env("IMAGEWATCH_E2E_STATE", state.path())
            .env("IMAGEWATCH_REGISTRY_NOTIFY_URL", notify_url)
            .env("IMAGEWATCH_REGISTRY_NOTIFY_TOKEN", token)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "registry.sh up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let env = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(Self { state, env })
    }

    /// A variable of its environment (IMAGEWATCH_REGISTRY, …_USER, …_PASSWORD).
    pub fn var(&self, key: &str) -> String {
        self.env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    /// The registry's log (its access log included).
    pub fn log_path(&self) -> std::path::PathBuf {
        self.state.path().join("registry/registry.log")
    }

    /// The registry process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.state.path().join("pids/registry.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// `.dockerconfigjson` contents for this registry.
    pub fn dockerconfigjson(&self) -> String {
        crate::ground::dockerconfigjson(
            &self.var("IMAGEWATCH_REGISTRY"),
            &self.var("IMAGEWATCH_REGISTRY_USER"),
            &self.var("IMAGEWATCH_REGISTRY_PASSWORD"),
        )
    }

    /// Runs a ground script (push-image.sh, retag.sh) against this registry.
    pub fn script(&self, name: &str, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(repo_root().join("e2e/scripts").join(name))
            .args(args)
            .env("IMAGEWATCH_E2E_STATE", self.state.path())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

impl Drop for NotifyingRegistry {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("e2e/scripts/registry.sh"))
            .arg("down")
            .env("IMAGEWATCH_E2E_STATE", self.state.path())
            .output();
    }
}
