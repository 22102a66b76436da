//! What the ground itself needs for the work of a push scenario, measured in the same run:
//! the floor under imagewatch's figure, and so the ratio that holds on any machine.
//!
//! - **Registry.** The same tags pushed, with the same concurrency, to a second registry of
//!   the same kind whose notifications go to a plain HTTP receiver in the driver: for each
//!   push, its `PUT` answered → its notification received; for all, the first `PUT` sent → the
//!   last notification received.
//! - **Git.** For each manifests repository the scenario touched, the git CLI's `git fetch`,
//!   one commit of that repository's files and `git push` over the ground's HTTPS git server,
//!   the repositories at once: the least any tool spends writing the same change.
//!
//! The floor of one push is the two medians added; the floor of many is the registry's
//! all-in time plus the git one (no tool commits before the registry has told it).

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{StreamExt as _, TryStreamExt as _};
use imagewatch_e2e::{bench::Latencies, oci_push::ImagePusher, operator::free_port};

/// What the ground needs for one push scenario.
#[derive(Debug, Clone, Copy)]
pub struct PushFloor {
    /// Per push: `PUT` answered → notification received.
    pub notify: Option<Latencies>,
    /// First `PUT` sent → last notification received.
    pub notify_all_in: Duration,
    /// Per repository: fetch + commit + push with the git CLI.
    pub git: Option<Latencies>,
    /// Every repository's fetch + commit + push, at once.
    pub git_all_in: Duration,
}

impl PushFloor {
    /// The floor under one push's push → commit latency: both medians.
    pub fn one(&self) -> Option<f64> {
        Some(self.notify?.p50 + self.git?.p50)
    }

    /// The floor under "all committed after": the registry's all-in time, then git's.
    pub fn all_in(&self) -> Duration {
        self.notify_all_in + self.git_all_in
    }
}

/// The notifications a receiver got: `(repository, tag)` → when.
type Received = Arc<Mutex<HashMap<(String, String), Instant>>>;

/// A plain receiver of distribution notifications on loopback; returns its URL and what it
/// got.
pub async fn notification_receiver() -> anyhow::Result<(String, Received)> {
    let received: Received = Arc::default();
    let port = free_port()?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let seen = received.clone();
    let app = axum::Router::new().route(
        "/hooks/distribution",
        axum::routing::post(move |body: axum::body::Bytes| {
            let seen = seen.clone();
            async move {
                let now = Instant::now();
                if let Ok(envelope) = serde_json::from_slice::<serde_json::Value>(&body) {
                    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                    for event in envelope["events"].as_array().into_iter().flatten() {
                        let target = &event["target"];
                        if let (Some(repository), Some(tag)) =
                            (target["repository"].as_str(), target["tag"].as_str())
                        {
                            seen.entry((repository.to_owned(), tag.to_owned()))
                                .or_insert(now);
                        }
                    }
                }
                axum::http::StatusCode::OK
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((
        format!("http://127.0.0.1:{port}/hooks/distribution"),
        received,
    ))
}

/// Pushes `tags` (`(repository, tag)`) with `concurrency` in flight and waits until the
/// receiver has every notification (or `deadline`); per push, `PUT` answered → notification,
/// and first `PUT` → last notification.
pub async fn registry_floor(
    pusher: &ImagePusher,
    base: &imagewatch_e2e::oci_push::BaseImage,
    tags: &[(String, String)],
    concurrency: usize,
    received: &Received,
    deadline: Duration,
) -> anyhow::Result<(Option<Latencies>, Duration)> {
    let started = Instant::now();
    let answered: Vec<((String, String), Instant)> = futures::stream::iter(tags)
        .map(|(repository, tag)| async move {
            pusher
                .push_tag(base, repository, tag)
                .await
                .map(|_| ((repository.clone(), tag.clone()), Instant::now()))
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    let until = Instant::now() + deadline;
    loop {
        let done = {
            let seen = received.lock().unwrap_or_else(|p| p.into_inner());
            answered.iter().all(|(key, _)| seen.contains_key(key))
        };
        if done || Instant::now() > until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seen = received.lock().unwrap_or_else(|p| p.into_inner());
    let samples: Vec<Duration> = answered
        .iter()
        .filter_map(|(key, at)| seen.get(key).map(|got| got.saturating_duration_since(*at)))
        .collect();
    anyhow::ensure!(
        samples.len() == answered.len(),
        "{} of {} notifications never came",
        answered.len() - samples.len(),
        answered.len()
    );
    let last = answered
        .iter()
        .filter_map(|(key, _)| seen.get(key))
        .max()
        .map_or(Duration::ZERO, |t| t.duration_since(started));
    Ok((Latencies::of(&samples), last))
}

/// One manifests repository for the git floor: a clone and the files a change edits.
pub struct GitTarget {
    /// The clone (made before anything is timed).
    pub dir: PathBuf,
    /// Files to edit, relative to the repository root.
    pub files: Vec<String>,
}

/// Runs git in `dir` with the ground's CA; its stdout.
fn git(dir: &Path, ca: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_SSL_CAINFO", ca)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Clones `url` (credentials in it) into `into`, ready for [`git_round`].
pub fn clone(url: &str, ca: &Path, into: &Path) -> anyhow::Result<()> {
    let parent = into.parent().unwrap_or(Path::new("/"));
    let name = into.file_name().and_then(|n| n.to_str()).unwrap_or("clone");
    git(parent, ca, &["clone", "-q", url, name])?;
    git(into, ca, &["config", "user.name", "floor"])?;
    git(into, ca, &["config", "user.email", "floor@example.com"])?;
    Ok(())
}

/// One change as a person would script it: fetch, edit every file (the last line gets a
/// marker `round`), commit, push. Its duration.
pub fn git_round(target: &GitTarget, ca: &Path, round: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    git(&target.dir, ca, &["fetch", "-q", "origin", "main"])?;
    git(&target.dir, ca, &["reset", "-q", "--hard", "origin/main"])?;
    for file in &target.files {
        let path = target.dir.join(file);
        let mut text = std::fs::read_to_string(&path)?;
        text.push_str(&format!("# floor {round}\n"));
        std::fs::write(&path, text)?;
    }
    git(
        &target.dir,
        ca,
        &["commit", "-qam", &format!("floor {round}")],
    )?;
    git(&target.dir, ca, &["push", "-q", "origin", "HEAD:main"])?;
    Ok(started.elapsed())
}

/// Every target's round at once (threads); per target and all-in.
pub fn git_floor(
    targets: &[GitTarget],
    ca: &Path,
    round: usize,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let started = Instant::now();
    let each = std::thread::scope(|scope| {
        let handles: Vec<_> = targets
            .iter()
            .map(|t| scope.spawn(move || git_round(t, ca, round)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a git floor thread panicked"))?
            })
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    Ok((each, started.elapsed()))
}
