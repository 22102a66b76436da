//! Argo CD Applications, read (pure): where an Application deploys from, which Applications
//! deploy a commit's files, whether one runs a commit, and the `Deployed` condition.
//!
//! An Application deploys from `spec.source` or from the list `spec.sources` (multi-source).
//! A source is a Git directory (`path`), a Helm chart from a chart repository (`chart`), or a
//! `ref` source whose files other sources name as `$<ref>/<path>` (typically a Helm chart's
//! `valueFiles` living in the Git repository of the `ref` source). `status.sync.revision`
//! holds the synced revision of a single source, `status.sync.revisions` one per source, in
//! the order of `spec.sources`.
//!
//! The operator reads the Applications (I/O) and hands them here as JSON.

use imagewatch_crd::conditions::{DEPLOYED, reason};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;

/// One source of an Application.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Source {
    /// `repoURL`.
    pub repo_url: String,
    /// `targetRevision`, as written (`HEAD`, a branch, `refs/heads/<branch>`, a tag, a
    /// commit or a chart version).
    pub target_revision: String,
    /// `path` (a Git directory), without leading or trailing `/`; None for a chart.
    pub path: Option<String>,
    /// `chart` (a Helm chart from a chart repository).
    pub chart: Option<String>,
    /// `ref` (the name other sources use as `$<ref>/…`).
    pub ref_name: Option<String>,
    /// `helm.valueFiles`, as written.
    pub value_files: Vec<String>,
}

impl Source {
    fn parse(source: &Value) -> Option<Self> {
        let text = |key: &str| {
            source
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        Some(Source {
            repo_url: text("repoURL")?,
            target_revision: text("targetRevision").unwrap_or_default(),
            path: text("path").map(|p| normalize_path(&p)),
            chart: text("chart"),
            ref_name: text("ref"),
            value_files: source
                .pointer("/helm/valueFiles")
                .and_then(Value::as_array)
                .map(|files| {
                    files
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// The branch this source follows (`HEAD` and an empty revision: `main`).
    pub fn branch(&self) -> String {
        branch_of(&self.target_revision)
    }

    /// Whether this source is the Git repository `url` at `branch`.
    pub fn is_git(&self, url: &str, branch: &str) -> bool {
        self.chart.is_none() && same_repository(&self.repo_url, url) && self.branch() == branch
    }
}

/// The branch a `targetRevision` names (`HEAD` and an empty one: `main`).
pub fn branch_of(target_revision: &str) -> String {
    match target_revision {
        "" | "HEAD" => "main".to_owned(),
        other => other.trim_start_matches("refs/heads/").to_owned(),
    }
}

fn normalize_path(path: &str) -> String {
    let trimmed = path.trim_matches('/');
    if trimmed == "." {
        String::new()
    } else {
        trimmed.trim_start_matches("./").to_owned()
    }
}

/// Whether two repository URLs name the same repository: scheme, user, a `.git` suffix, a
/// trailing `/` and the host's case do not matter.
pub fn same_repository(a: &str, b: &str) -> bool {
    fn key(url: &str) -> String {
        let url = url.trim().trim_end_matches('/');
        let url = url.strip_suffix(".git").unwrap_or(url);
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        // scp-like `git@host:path`
        let rest = match rest.split_once('@') {
            Some((user, rest)) if !user.contains('/') => rest,
            _ => rest,
        };
        let (host, path) = match rest.find(['/', ':']) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        format!(
            "{}/{}",
            host.to_ascii_lowercase(),
            path.trim_start_matches('/')
        )
    }
    key(a) == key(b)
}

/// What the operator reads of one Application.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Application {
    /// Namespace the Application lives in.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `spec.destination.namespace`.
    pub destination_namespace: String,
    /// `spec.source`, or every entry of `spec.sources`.
    pub sources: Vec<Source>,
    /// Whether it is multi-source (`spec.sources`).
    pub multi_source: bool,
    /// `status.sync.status` (`Synced`, `OutOfSync`, `Unknown`).
    pub sync_status: String,
    /// `status.sync.revision`, or `status.sync.revisions` (one per source).
    pub revisions: Vec<String>,
    /// `status.health.status`.
    pub health: String,
    /// `status.operationState.phase` (`Running`, `Succeeded`, `Failed`, `Error`).
    pub operation_phase: String,
}

impl Application {
    /// Reads an Application object (`namespace` is where it lives).
    pub fn parse(namespace: &str, name: &str, app: &Value) -> Self {
        let text = |pointer: &str| {
            app.pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (sources, multi_source) = match app.pointer("/spec/sources").and_then(Value::as_array) {
            Some(list) if !list.is_empty() => {
                (list.iter().filter_map(Source::parse).collect(), true)
            }
            _ => (
                app.pointer("/spec/source")
                    .and_then(Source::parse)
                    .into_iter()
                    .collect(),
                false,
            ),
        };
        let revisions = match app
            .pointer("/status/sync/revisions")
            .and_then(Value::as_array)
        {
            Some(list) if multi_source => list
                .iter()
                .map(|r| r.as_str().unwrap_or_default().to_owned())
                .collect(),
            _ => {
                let single = text("/status/sync/revision");
                if single.is_empty() {
                    Vec::new()
                } else {
                    vec![single]
                }
            }
        };
        Application {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            destination_namespace: text("/spec/destination/namespace"),
            sources,
            multi_source,
            sync_status: text("/status/sync/status"),
            revisions,
            health: text("/status/health/status"),
            operation_phase: text("/status/operationState/phase"),
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whether an object of `namespace` may use this Application (read its source, ask it to
    /// refresh, report it): it lives in that namespace, or deploys to it. Anyone can write a
    /// tracking annotation, so another tenant's Application must not serve.
    pub fn serves_namespace(&self, namespace: &str) -> bool {
        self.namespace == namespace || self.destination_namespace == namespace
    }

    /// The index of the source that deploys `file` of the repository `url` at `branch`: a Git
    /// source whose `path` holds the file, or a chart source naming the file as a
    /// `$<ref>/…` value file of a `ref` source of that repository and branch.
    pub fn source_deploying(&self, url: &str, branch: &str, file: &str) -> Option<usize> {
        let file = normalize_path(file);
        let inside =
            |dir: &str| dir.is_empty() || file == dir || file.starts_with(&format!("{dir}/"));
        for (i, source) in self.sources.iter().enumerate() {
            if source.is_git(url, branch)
                && let Some(path) = &source.path
                && inside(path)
            {
                return Some(i);
            }
        }
        for (i, source) in self.sources.iter().enumerate() {
            for value_file in &source.value_files {
                let Some(rest) = value_file.strip_prefix('$') else {
                    continue;
                };
                let Some((name, path)) = rest.split_once('/') else {
                    continue;
                };
                let holds = self
                    .sources
                    .iter()
                    .any(|r| r.ref_name.as_deref() == Some(name) && r.is_git(url, branch));
                if holds && normalize_path(path) == file {
                    return Some(i);
                }
            }
        }
        None
    }

    /// The revision synced for the source at `index`, when Argo CD has one.
    pub fn revision_of(&self, index: usize) -> Option<&str> {
        let revision = if self.multi_source {
            self.revisions.get(index)
        } else {
            self.revisions.first()
        };
        revision.map(String::as_str).filter(|r| !r.is_empty())
    }

    /// For a source of a multi-source Application that takes its value files from a `ref`
    /// source: the index of that `ref` source (its revision is what holds the value file).
    pub fn ref_source_of(&self, url: &str, branch: &str) -> Option<usize> {
        self.sources
            .iter()
            .position(|s| s.ref_name.is_some() && s.is_git(url, branch))
    }
}

/// Where a watch without `spec.git` writes, from the Application that manages it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitSource {
    /// Repository URL.
    pub repo_url: String,
    /// Branch.
    pub branch: String,
    /// Directory the target's paths are relative to.
    pub path: String,
}

/// The Git location of an Application for a watch's target (pure). A single source: its
/// repository, branch and `path`. Multi-source: a target path starting `$<ref>/` is a file of
/// the `ref` source of that name (relative to its repository's root: the path keeps only what
/// follows); otherwise the first Git source with a `path`, or else the first `ref` source.
/// Chart sources never serve: they are not Git.
pub fn git_source(app: &Application, target_path: Option<&str>) -> Result<GitSource, String> {
    let location = |s: &Source, path: String| GitSource {
        repo_url: s.repo_url.clone(),
        branch: s.branch(),
        path,
    };
    if let Some(rest) = target_path.and_then(|p| p.strip_prefix('$')) {
        let name = rest.split('/').next().unwrap_or_default();
        return app
            .sources
            .iter()
            .find(|s| s.ref_name.as_deref() == Some(name))
            .map(|s| location(s, String::new()))
            .ok_or_else(|| {
                format!(
                    "the target names ${name}/ but the Application has no source with ref: {name}"
                )
            });
    }
    if let Some(s) = app
        .sources
        .iter()
        .find(|s| s.chart.is_none() && s.path.is_some())
    {
        return Ok(location(s, s.path.clone().unwrap_or_default()));
    }
    if let Some(s) = app.sources.iter().find(|s| s.ref_name.is_some()) {
        return Ok(location(s, String::new()));
    }
    match app.sources.first() {
        None => Err("the Application has no spec.source".into()),
        Some(s) if s.chart.is_some() => Err(format!(
            "the Application deploys the Helm chart {} from {}, which is not a Git repository; \
             name the values file's Git source with a `ref` source and target $<ref>/<file>",
            s.chart.as_deref().unwrap_or_default(),
            s.repo_url
        )),
        Some(s) => Ok(location(s, String::new())),
    }
}

/// How one Application stands against a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppState {
    /// Synced to a revision containing the commit, and Healthy.
    Running,
    /// Not yet: what it shows (sync status, health, revision).
    Waiting(String),
}

/// Whether `app` runs the commit, given whether its synced revision of the deploying source
/// `contains` the commit (None: not known yet).
pub fn app_state(app: &Application, source: usize, contains: Option<bool>) -> AppState {
    let revision = app.revision_of(source).unwrap_or("none");
    let short = revision.get(..7).unwrap_or(revision);
    let shows = format!(
        "{} {} at {short}{}",
        or_unknown(&app.sync_status),
        or_unknown(&app.health),
        if app.operation_phase.is_empty() {
            String::new()
        } else {
            format!(", last sync {}", app.operation_phase)
        }
    );
    if contains == Some(true) && app.sync_status == "Synced" && app.health == "Healthy" {
        AppState::Running
    } else {
        AppState::Waiting(shows)
    }
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "Unknown" } else { s }
}

/// What is known of the deployment of a watch's last commit.
#[derive(Debug, Clone, PartialEq)]
pub enum Deployment {
    /// No Application serving the watch's namespace deploys the committed file.
    NoApplication {
        /// The commit.
        commit: String,
        /// The file it changed.
        file: String,
    },
    /// Waiting for the Applications to sync and be Healthy.
    Waiting {
        /// The commit.
        commit: String,
        /// `namespace/name: what it shows`, for each Application not running it yet.
        waiting: Vec<String>,
    },
    /// Every Application deploying the file runs the commit.
    Running {
        /// The commit.
        commit: String,
        /// The Applications (`namespace/name`).
        applications: Vec<String>,
        /// Seconds from the commit's push to the last Application running it.
        commit_to_running: f64,
        /// Seconds from the registry push to running, when an event started it.
        push_to_running: Option<f64>,
    },
    /// Not running within the time allowed.
    TimedOut {
        /// The commit.
        commit: String,
        /// How long it was waited for.
        after_seconds: u64,
        /// What the Applications showed.
        waiting: Vec<String>,
    },
}

/// The `Deployed` condition for `deployment` (pure).
pub fn deployed_condition(
    deployment: &Deployment,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let short = |c: &str| c.get(..7).unwrap_or(c).to_owned();
    let (status, reason, message) = match deployment {
        Deployment::NoApplication { commit, file } => (
            "Unknown",
            reason::NO_APPLICATION,
            format!(
                "no Argo CD Application serving this namespace deploys {file}; commit {} is not followed to a running Pod",
                short(commit)
            ),
        ),
        Deployment::Waiting { commit, waiting } => (
            "False",
            reason::WAITING_FOR_SYNC,
            format!(
                "commit {} is not running yet: {}",
                short(commit),
                waiting.join("; ")
            ),
        ),
        Deployment::Running {
            commit,
            applications,
            commit_to_running,
            push_to_running,
        } => (
            "True",
            reason::DEPLOYED,
            format!(
                "{} synced commit {} and {} Healthy {:.1} s after the commit{}",
                applications.join(", "),
                short(commit),
                if applications.len() == 1 { "is" } else { "are" },
                commit_to_running,
                push_to_running
                    .map(|s| format!(" ({s:.1} s after the push)"))
                    .unwrap_or_default()
            ),
        ),
        Deployment::TimedOut {
            commit,
            after_seconds,
            waiting,
        } => (
            "False",
            reason::NOT_DEPLOYED,
            format!(
                "commit {} was not running {} s after it was pushed: {}",
                short(commit),
                after_seconds,
                waiting.join("; ")
            ),
        ),
    };
    Condition {
        type_: DEPLOYED.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: crate::status::truncate(&message, 1024),
        observed_generation: generation,
        last_transition_time: now.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(spec: Value, status: Value) -> Application {
        Application::parse("argocd", "my-api", &json!({"spec": spec, "status": status}))
    }

    #[test]
    fn repositories_compare_without_scheme_user_suffix_or_host_case() {
        assert!(same_repository(
            "https://Git.Example.com/org/manifests.git",
            "https://git.example.com/org/manifests/"
        ));
        assert!(same_repository(
            "ssh://git@git.example.com/org/manifests.git",
            "git@git.example.com:org/manifests"
        ));
        assert!(!same_repository(
            "https://git.example.com/org/manifests",
            "https://git.example.com/org/other"
        ));
        assert!(!same_repository(
            "https://git.example.com/org/m",
            "https://other.example.com/org/m"
        ));
    }

    #[test]
    fn a_git_source_deploys_the_files_under_its_path() {
        let a = app(
            json!({"source": {"repoURL": "https://g/m.git", "targetRevision": "HEAD", "path": "apps/my-api/overlays/stg"},
                   "destination": {"namespace": "my-api"}}),
            json!({"sync": {"status": "Synced", "revision": "abc"}, "health": {"status": "Healthy"}}),
        );
        let file = "apps/my-api/overlays/stg/kustomization.yaml";
        assert_eq!(a.source_deploying("https://g/m", "main", file), Some(0));
        assert_eq!(a.source_deploying("https://g/m", "release", file), None);
        assert_eq!(
            a.source_deploying("https://g/m", "main", "apps/my-api/overlays/stg-2/k.yaml"),
            None
        );
        assert_eq!(a.revision_of(0), Some("abc"));
        assert!(a.serves_namespace("my-api"));
        assert!(!a.serves_namespace("team-b"));
    }

    #[test]
    fn a_chart_with_values_from_a_ref_source_is_deployed_by_the_values_file() {
        let a = app(
            json!({"sources": [
                {"repoURL": "https://charts.example.com", "chart": "my-api", "targetRevision": "1.2.0",
                 "helm": {"valueFiles": ["$values/envs/stg/values.yaml"]}},
                {"repoURL": "https://g/m.git", "targetRevision": "main", "ref": "values"}
            ]}),
            json!({"sync": {"status": "Synced", "revisions": ["1.2.0", "def"]}, "health": {"status": "Healthy"}}),
        );
        assert_eq!(
            a.source_deploying("https://g/m.git", "main", "envs/stg/values.yaml"),
            Some(0)
        );
        assert_eq!(
            a.source_deploying("https://g/m.git", "main", "envs/prod/values.yaml"),
            None
        );
        // The values file's revision is the ref source's.
        assert_eq!(a.ref_source_of("https://g/m.git", "main"), Some(1));
        assert_eq!(a.revision_of(1), Some("def"));
        // Where a watch managed by it writes: the ref source's repository.
        assert_eq!(
            git_source(&a, Some("$values/envs/stg/values.yaml")).unwrap(),
            GitSource {
                repo_url: "https://g/m.git".into(),
                branch: "main".into(),
                path: String::new()
            }
        );
        assert_eq!(
            git_source(&a, Some("envs/x.yaml")).unwrap().repo_url,
            "https://g/m.git"
        );
        assert!(
            git_source(&a, Some("$other/x.yaml"))
                .unwrap_err()
                .contains("ref: other")
        );
    }

    #[test]
    fn a_chart_alone_is_no_git_source() {
        let a = app(
            json!({"sources": [{"repoURL": "https://charts.example.com", "chart": "my-api", "targetRevision": "1.2.0"}]}),
            json!({}),
        );
        assert!(
            git_source(&a, None)
                .unwrap_err()
                .contains("not a Git repository")
        );
        let single = app(
            json!({"source": {"repoURL": "https://g/m.git", "targetRevision": "release", "path": "/apps/"}}),
            json!({}),
        );
        assert_eq!(
            git_source(&single, None).unwrap(),
            GitSource {
                repo_url: "https://g/m.git".into(),
                branch: "release".into(),
                path: "apps".into()
            }
        );
    }

    #[test]
    fn running_needs_the_commit_synced_and_healthy() {
        let status = |sync: &str, health: &str| {
            app(
                json!({"source": {"repoURL": "https://g/m.git", "path": "a"}}),
                json!({"sync": {"status": sync, "revision": "0123456789"}, "health": {"status": health}}),
            )
        };
        assert_eq!(
            app_state(&status("Synced", "Healthy"), 0, Some(true)),
            AppState::Running
        );
        assert_eq!(
            app_state(&status("Synced", "Progressing"), 0, Some(true)),
            AppState::Waiting("Synced Progressing at 0123456".into())
        );
        assert!(matches!(
            app_state(&status("Synced", "Healthy"), 0, Some(false)),
            AppState::Waiting(_)
        ));
        assert!(matches!(
            app_state(&status("OutOfSync", "Healthy"), 0, None),
            AppState::Waiting(_)
        ));
    }

    #[test]
    fn the_condition_says_how_long_it_took() {
        let now = Time(jiff::Timestamp::UNIX_EPOCH);
        let running = deployed_condition(
            &Deployment::Running {
                commit: "0123456789abcdef".into(),
                applications: vec!["argocd/my-api".into()],
                commit_to_running: 1.26,
                push_to_running: Some(1.9),
            },
            Some(2),
            &now,
        );
        assert_eq!(
            (running.status.as_str(), running.reason.as_str()),
            ("True", "Deployed")
        );
        assert_eq!(
            running.message,
            "argocd/my-api synced commit 0123456 and is Healthy 1.3 s after the commit (1.9 s after the push)"
        );
        let waiting = deployed_condition(
            &Deployment::Waiting {
                commit: "0123456789".into(),
                waiting: vec!["argocd/my-api: OutOfSync Healthy at abcdef0".into()],
            },
            None,
            &now,
        );
        assert_eq!(
            (waiting.status.as_str(), waiting.reason.as_str()),
            ("False", "WaitingForSync")
        );
        let none = deployed_condition(
            &Deployment::NoApplication {
                commit: "0123456789".into(),
                file: "a/b.yaml".into(),
            },
            None,
            &now,
        );
        assert_eq!(none.status, "Unknown");
        assert!(none.message.contains("a/b.yaml"), "{}", none.message);
    }
}
