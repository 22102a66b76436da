//! A real Gitea for the pull-request tests: the binary built from its Go module by
//! `e2e/scripts/gitea.sh` (SQLite), started by the test on a free loopback port with
//! `INSTALL_LOCK`, `OFFLINE_MODE` and no update checker, its admin and token made by its own
//! CLI (`gitea admin user create`, `gitea admin user generate-access-token`). Stopped (and its
//! data removed) when the handle drops.
//!
//! A missing Go toolchain or a failed build is an error, never a skipped test.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail, ensure};
use base64::Engine as _;
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    Ground,
    faultproxy::FaultProxy,
    ground::{random_suffix, repo_root},
    operator::free_port,
    wait_until,
};

/// The admin user the tests act as.
pub const ADMIN: &str = "iwadmin";

/// A running Gitea.
pub struct Gitea {
    /// `http://127.0.0.1:PORT` (web and Git over HTTP).
    pub url: String,
    /// `http://127.0.0.1:PORT/api/v1`.
    pub api: String,
    /// The admin's password (Git over HTTP takes it, or the token).
    pub password: String,
    /// An access token of the admin with every scope.
    pub token: String,
    /// Log file of `gitea web`.
    pub log: PathBuf,
    dir: tempfile::TempDir,
    child: Option<Child>,
    http: reqwest::Client,
    /// Git over HTTPS in front of Gitea, once [`Gitea::serve_git_over_https`] ran.
    git_proxy: Option<FaultProxy>,
}

/// `(binary, static root)` of the Gitea built by `e2e/scripts/gitea.sh` (built when absent).
pub fn binary() -> anyhow::Result<(PathBuf, PathBuf)> {
    let out = Command::new(repo_root().join("e2e/scripts/gitea.sh"))
        .arg("home")
        .stderr(Stdio::inherit())
        .output()
        .context("running e2e/scripts/gitea.sh home")?;
    ensure!(
        out.status.success(),
        "building Gitea failed ({}); see the output above",
        out.status
    );
    let home = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let bin = home.join("gitea");
    ensure!(bin.is_file(), "Gitea not found at {}", bin.display());
    Ok((bin, home))
}

fn app_ini(dir: &Path, home: &Path, port: u16) -> String {
    let d = dir.display();
    format!(
        r#"APP_NAME = imagewatch-e2e
RUN_MODE = prod
RUN_USER = {user}
WORK_PATH = {d}
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = {port}
DOMAIN = 127.0.0.1
ROOT_URL = http://127.0.0.1:{port}/
DISABLE_SSH = true
START_SSH_SERVER = false
OFFLINE_MODE = true
LFS_START_SERVER = false
STATIC_ROOT_PATH = {home}
APP_DATA_PATH = {d}/data

[database]
DB_TYPE = sqlite3
PATH = {d}/data/gitea.db

[repository]
ROOT = {d}/repos
DEFAULT_BRANCH = main

[security]
INSTALL_LOCK = true
SECRET_KEY = imagewatch-e2e-secret-key-not-for-production
PASSWORD_HASH_ALGO = pbkdf2_hi
MIN_PASSWORD_LENGTH = 8
PASSWORD_COMPLEXITY = off

[service]
DISABLE_REGISTRATION = true
ENABLE_NOTIFY_MAIL = false

[oauth2]
ENABLED = false

[mailer]
ENABLED = false

[picture]
DISABLE_GRAVATAR = true
ENABLE_FEDERATED_AVATAR = false

[session]
PROVIDER = memory

[cache]
ADAPTER = memory

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[actions]
ENABLED = false

[cron.update_checker]
ENABLED = false

[log]
MODE = console
LEVEL = Info
"#,
        user = std::env::var("USER").unwrap_or_else(|_| "root".into()),
        home = home.display(),
    )
}

impl Gitea {
    /// Builds (when needed) and starts a fresh Gitea; returns once its API answers.
    pub async fn start() -> anyhow::Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (bin, home) = binary()?;
        let dir = tempfile::Builder::new().prefix("iw-gitea-").tempdir()?;
        let port = free_port()?;
        let config = dir.path().join("app.ini");
        std::fs::write(&config, app_ini(dir.path(), &home, port))?;
        let log = dir.path().join("gitea.log");
        let cli = |args: &[&str]| -> anyhow::Result<String> {
            let out = Command::new(&bin)
                .args(["--config"])
                .arg(&config)
                .args(["--work-path"])
                .arg(dir.path())
                .args(args)
                .env("HOME", dir.path())
                .env("GITEA_WORK_DIR", dir.path())
                .output()
                .with_context(|| format!("running gitea {args:?}"))?;
            if !out.status.success() {
                bail!(
                    "gitea {args:?} failed ({}): {}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        };
        cli(&["migrate"])?;
        let password = format!("pw-{}", random_suffix());
        cli(&[
            "admin",
            "user",
            "create",
            "--admin",
            "--username",
            ADMIN,
            "--password",
            &password,
            "--email",
            "iwadmin@example.invalid",
            "--must-change-password=false",
        ])?;
        let token = cli(&[
            "admin",
            "user",
            "generate-access-token",
            "--username",
            ADMIN,
            "--token-name",
            "e2e",
            "--scopes",
            "all",
            "--raw",
        ])?;
        let token = token.lines().last().unwrap_or_default().trim().to_string();
        ensure!(!token.is_empty(), "gitea printed no access token");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?;
        let out = std::fs::File::create(&log)?;
        let child = Command::new(&bin)
            .arg("--config")
            .arg(&config)
            .arg("--work-path")
            .arg(dir.path())
            .arg("web")
            .env("HOME", dir.path())
            .env("GITEA_WORK_DIR", dir.path())
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting gitea web")?;
        let url = format!("http://127.0.0.1:{port}");
        let gitea = Self {
            api: format!("{url}/api/v1"),
            url,
            password,
            token,
            log,
            dir,
            child: Some(child),
            http,
            git_proxy: None,
        };
        wait_until("Gitea's API to answer", Duration::from_secs(60), || async {
            Ok(gitea.call(Method::GET, "/version", None).await.ok())
        })
        .await
        .with_context(|| format!("Gitea log: {}", gitea.log_tail()))?;
        Ok(gitea)
    }

    /// The last lines of Gitea's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A request to the API as the admin; non-2xx is an error carrying Gitea's answer.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.api))
            .header("Authorization", format!("token {}", self.token));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status();
        let text = response.text().await?;
        ensure!(
            status.is_success(),
            "Gitea {method} {path}: HTTP {status}: {text}"
        );
        Ok(if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).with_context(|| format!("{method} {path}: {text}"))?
        })
    }

    /// A new repository of the admin (`owner/name`) with a first commit on `main`.
    pub async fn create_repo(&self, prefix: &str) -> anyhow::Result<String> {
        let name = format!("{prefix}-{}", random_suffix());
        self.call(
            Method::POST,
            "/user/repos",
            Some(
                json!({"name": name, "auto_init": true, "default_branch": "main",
                        "readme": "Default", "private": false}),
            ),
        )
        .await?;
        Ok(format!("{ADMIN}/{name}"))
    }

    /// Serves Git over HTTPS too (the operator refuses plain `http://` Git URLs): a TLS
    /// proxy with the ground's git server certificate (for 127.0.0.1, trusted by operators
    /// through the ground's CA) forwarding to Gitea. [`Gitea::git_url`] then names it.
    pub fn serve_git_over_https(&mut self, ground: &Ground) -> anyhow::Result<()> {
        let (cert, key) = ground.git()?.tls_identity();
        let upstream = self.url.trim_start_matches("http://").to_string();
        self.git_proxy = Some(FaultProxy::start_tls(&upstream, &cert, &key)?);
        Ok(())
    }

    /// The Git URL of a repository (`owner/name`), without credentials: HTTPS after
    /// [`Gitea::serve_git_over_https`], else Gitea's own plain HTTP.
    pub fn git_url(&self, repository: &str) -> String {
        match &self.git_proxy {
            Some(proxy) => format!("https://{}/{repository}.git", proxy.addr()),
            None => format!("{}/{repository}.git", self.url),
        }
    }

    /// Writes `path` on `branch` (creating `branch` from `from` when given) through the
    /// contents API; returns the new commit.
    pub async fn put_file(
        &self,
        repository: &str,
        path: &str,
        content: &str,
        branch: &str,
        from: Option<&str>,
    ) -> anyhow::Result<String> {
        let encoded = base64::engine::general_purpose::STANDARD.encode(content);
        let existing = match from {
            Some(_) => None,
            None => self
                .call(
                    Method::GET,
                    &format!("/repos/{repository}/contents/{path}?ref={branch}"),
                    None,
                )
                .await
                .ok()
                .and_then(|v| v.get("sha").and_then(Value::as_str).map(str::to_string)),
        };
        let mut body = json!({"content": encoded, "message": format!("write {path}")});
        match from {
            Some(from) => {
                body["branch"] = json!(from);
                body["new_branch"] = json!(branch);
            }
            None => body["branch"] = json!(branch),
        }
        let answer = match existing {
            Some(sha) => {
                body["sha"] = json!(sha);
                self.call(
                    Method::PUT,
                    &format!("/repos/{repository}/contents/{path}"),
                    Some(body),
                )
                .await?
            }
            None => {
                self.call(
                    Method::POST,
                    &format!("/repos/{repository}/contents/{path}"),
                    Some(body),
                )
                .await?
            }
        };
        answer
            .pointer("/commit/sha")
            .and_then(Value::as_str)
            .map(str::to_string)
            .context("the contents API returned no commit")
    }

    /// The text of `path` on `branch`.
    pub async fn file(&self, repository: &str, branch: &str, path: &str) -> anyhow::Result<String> {
        let response = self
            .http
            .get(format!(
                "{}/repos/{repository}/raw/{path}?ref={branch}",
                self.api
            ))
            .header("Authorization", format!("token {}", self.token))
            .send()
            .await?;
        let status = response.status();
        let text = response.text().await?;
        ensure!(
            status.is_success(),
            "Gitea raw {path}@{branch}: HTTP {status}: {text}"
        );
        Ok(text)
    }

    /// Creates `branch` from `from`.
    pub async fn create_branch(
        &self,
        repository: &str,
        branch: &str,
        from: &str,
    ) -> anyhow::Result<()> {
        self.call(
            Method::POST,
            &format!("/repos/{repository}/branches"),
            Some(json!({"new_branch_name": branch, "old_branch_name": from})),
        )
        .await
        .map(drop)
    }

    /// Merges a pull request (a merge commit), as a reviewer would; Gitea's "try again later"
    /// (its mergeability check still queued) is waited out.
    pub async fn merge(&self, repository: &str, number: i64) -> anyhow::Result<()> {
        wait_until("Gitea to merge", Duration::from_secs(60), || async {
            self.call(
                Method::POST,
                &format!("/repos/{repository}/pulls/{number}/merge"),
                Some(json!({"Do": "merge"})),
            )
            .await
            .map(|_| Some(()))
        })
        .await
    }

    /// The head commit of a branch.
    pub async fn branch_head(&self, repository: &str, branch: &str) -> anyhow::Result<String> {
        let v = self
            .call(
                Method::GET,
                &format!("/repos/{repository}/branches/{branch}"),
                None,
            )
            .await?;
        v.pointer("/commit/id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .context("branch without commit id")
    }

    /// Protects `branch`: merges need the commit status `context` to be success.
    pub async fn require_status(
        &self,
        repository: &str,
        branch: &str,
        context: &str,
    ) -> anyhow::Result<()> {
        self.call(
            Method::POST,
            &format!("/repos/{repository}/branch_protections"),
            Some(json!({"rule_name": branch, "branch_name": branch,
                        "enable_status_check": true, "status_check_contexts": [context]})),
        )
        .await
        .map(drop)
    }

    /// Sets a commit status.
    pub async fn set_status(
        &self,
        repository: &str,
        sha: &str,
        context: &str,
        state: &str,
    ) -> anyhow::Result<()> {
        self.call(
            Method::POST,
            &format!("/repos/{repository}/statuses/{sha}"),
            Some(json!({"state": state, "context": context, "description": "e2e"})),
        )
        .await
        .map(drop)
    }

    /// Creates a label; returns its id.
    pub async fn create_label(&self, repository: &str, name: &str) -> anyhow::Result<i64> {
        let v = self
            .call(
                Method::POST,
                &format!("/repos/{repository}/labels"),
                Some(json!({"name": name, "color": "#00aabb"})),
            )
            .await?;
        v.get("id")
            .and_then(Value::as_i64)
            .context("label without id")
    }

    /// Every pull request of a repository in `state` (`open`, `closed`, `all`).
    pub async fn pulls(&self, repository: &str, state: &str) -> anyhow::Result<Vec<Value>> {
        let mut all = Vec::new();
        for page in 1..=20 {
            let v = self
                .call(
                    Method::GET,
                    &format!("/repos/{repository}/pulls?state={state}&limit=50&page={page}"),
                    None,
                )
                .await?;
            let items = v.as_array().cloned().unwrap_or_default();
            if items.is_empty() {
                break;
            }
            all.extend(items);
        }
        Ok(all)
    }

    /// Opens a pull request of `head` into `base` with `labels` (ids, see
    /// [`Gitea::create_label`]), as a developer would; returns its number.
    pub async fn open_pull(
        &self,
        repository: &str,
        head: &str,
        base: &str,
        title: &str,
        labels: &[i64],
    ) -> anyhow::Result<i64> {
        let v = self
            .call(
                Method::POST,
                &format!("/repos/{repository}/pulls"),
                Some(json!({"head": head, "base": base, "title": title, "labels": labels})),
            )
            .await?;
        v.get("number")
            .and_then(Value::as_i64)
            .context("pull request without number")
    }

    /// Closes a pull request without merging it.
    pub async fn close_pull(&self, repository: &str, number: i64) -> anyhow::Result<()> {
        self.call(
            Method::PATCH,
            &format!("/repos/{repository}/pulls/{number}"),
            Some(json!({"state": "closed"})),
        )
        .await
        .map(drop)
    }

    /// One pull request.
    pub async fn pull(&self, repository: &str, number: i64) -> anyhow::Result<Value> {
        self.call(
            Method::GET,
            &format!("/repos/{repository}/pulls/{number}"),
            None,
        )
        .await
    }

    /// Stops Gitea.
    pub fn stop(&mut self) {
        self.git_proxy = None;
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Gitea {
    fn drop(&mut self) {
        self.stop();
    }
}
