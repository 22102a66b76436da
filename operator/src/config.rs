//! The configuration of `imagewatch run`: one struct per subsystem, plain values.
//!
//! The CLI (`cli.rs`) parses flags and environment variables and builds a [`Config`]; `app.rs`
//! hands each subsystem its own part. This module imports nothing of the crate, so
//! configuration only flows downwards: no subsystem reads flags, none imports the CLI.
//!
//! A value shared by several subsystems (the cache directory, the commit author, the
//! operator's namespace, the AWS endpoint) is copied into each part that uses it, so that a
//! subsystem is built from its own part alone.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

/// Everything `imagewatch run` is configured with.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The cluster: which namespaces are watched, the operator's own namespace.
    pub kube: KubeConfig,
    /// What the controllers share: concurrency, the allow-list, Argo CD.
    pub controllers: ControllersConfig,
    /// Event sources: the registry webhook receiver and the SQS consumer.
    pub sources: SourcesConfig,
    /// Registry clients (OCI distribution and ECR).
    pub registry: RegistryConfig,
    /// Repository scans.
    pub scan: ScanConfig,
    /// The git writer (every commit and push of ImageWatches).
    pub writer: WriterConfig,
    /// The PromotionPolicy controller.
    pub promotion: PromotionConfig,
    /// Sharding over replicas (HA).
    pub shard: ShardConfig,
    /// Logs, metrics and health.
    pub telemetry: TelemetryConfig,
    /// On SIGTERM, how long in-flight reconciles and Git batches may take to finish before
    /// they are abandoned.
    pub shutdown_timeout: Duration,
}

/// The cluster the operator runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeConfig {
    /// Namespaces watched, without blanks or repeats; empty: all namespaces (with a list,
    /// nothing is read at cluster scope).
    pub namespaces: Vec<String>,
    /// The operator's own namespace (webhook Secret, allow-list, Leases).
    pub pod_namespace: String,
}

/// What both controllers share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllersConfig {
    /// Reconciles doing registry and API work at once (per resource kind).
    pub max_concurrent_reconciles: u16,
    /// ConfigMap (in the operator's namespace) holding the allow-list; None: everything is
    /// allowed.
    pub allow_list_configmap: Option<String>,
    /// ConfigMap (in the operator's namespace) whose keys freeze writing; None: no freezes.
    pub freeze_configmap: Option<String>,
    /// Namespace of Argo CD's Applications (watches without `spec.git`).
    pub argocd_namespace: String,
    /// Refresh and follow the Applications deploying a commit (`Deployed`).
    pub argocd_refresh: bool,
    /// How long a commit is followed.
    pub argocd_deploy_timeout: std::time::Duration,
}

/// The event sources that say "look now" (the sources crate's own configuration).
pub use imagewatch_sources::config::{SourcesConfig, SqsConfig, WebhookConfig};

/// The registry clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryConfig {
    /// `host[:port]` reached over plain HTTP instead of HTTPS.
    pub insecure_registries: Vec<String>,
    /// File with per-registry settings (JSON or YAML); read at start.
    pub registries_config: Option<PathBuf>,
    /// Timeout of one registry request.
    pub timeout: Duration,
    /// Endpoint for ECR requests (VPC endpoints, emulators).
    pub ecr_endpoint_url: Option<String>,
}

/// Repository scans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanConfig {
    /// Tags kept per repository scan (the newest ones).
    pub max_tags: usize,
}

/// The author of the operator's commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorConfig {
    /// Name.
    pub name: String,
    /// Email.
    pub email: String,
}

/// The git writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterConfig {
    /// Directory of the persistent bare clones.
    pub cache_dir: PathBuf,
    /// Author and committer of commits.
    pub author: AuthorConfig,
    /// Retries of a rejected (non-fast-forward) push before giving up for this round.
    pub push_attempts: u32,
    /// Intents for one repository and branch arriving within this time after the first
    /// become one commit.
    pub batch_window: Duration,
    /// A batch is written early when no further edit arrived for this long.
    pub batch_quiet: Duration,
    /// A check that changes nothing may read a branch fetched up to this long ago (zero:
    /// always fetch).
    pub read_reuse: Duration,
    /// Commit message template, as given (placeholders `{{subject}}` …, `\n` for a newline).
    /// The CLI refuses a template that does not parse.
    pub commit_template: String,
    /// Key file commits are signed with (OpenSSH or armored OpenPGP); None: unsigned.
    pub signing_key: Option<PathBuf>,
    /// Test hook: name of the point of a git write where the process aborts.
    #[cfg(feature = "test-hooks")]
    pub crash_point: Option<String>,
}

/// The PromotionPolicy controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromotionConfig {
    /// Namespaces watched (empty: all).
    pub namespaces: Vec<String>,
    /// Policy reconciles running at once.
    pub concurrency: u16,
    /// After a policy's deletion, how long closing its pull request is retried before the
    /// finalizer is removed anyway.
    pub pull_request_close_timeout: Duration,
}

/// Sharding of the work over replicas by Git repository, each shard held by a Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardConfig {
    /// Number of shards; 0: no sharding.
    pub shards: u32,
    /// Lease duration of a shard.
    pub lease_duration: Duration,
    /// Prefix of the Lease names (and of the peer token Secret).
    pub lease_prefix: String,
    /// Namespace of the Leases (the operator's own).
    pub namespace: String,
    /// This replica's identity on the Leases; None: the host name.
    pub identity: Option<String>,
    /// URL other replicas forward registry events to; None: none are forwarded here.
    pub peer_url: Option<String>,
}

/// Logs, metrics and health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// Address for `/metrics`, `/healthz` and `/readyz`.
    pub metrics_addr: SocketAddr,
    /// Log format.
    pub log_format: LogFormat,
}

/// Log output format.
pub use imagewatch_telemetry::LogFormat;

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Every `.rs` file under `dir`, recursively.
    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// Whether `text` names the CLI module: the crate's `cli` module, or a path through a
    /// module named `cli` (not the end of a longer name such as `set_image_cli`).
    fn mentions_cli(text: &str) -> bool {
        // Spelled in pieces so that this file does not name the module itself.
        let qualified = ["crate", "::", "cli"].concat();
        let path = ["cli", "::"].concat();
        text.contains(&qualified)
            || text.match_indices(&path).any(|(at, _)| {
                !text[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
    }

    #[test]
    fn mentions_of_the_cli_are_found() {
        assert!(mentions_cli(
            &["use crate", "::", "cli", "::RunArgs;"].concat()
        ));
        assert!(mentions_cli(
            &["use crate::{", "cli", "::RunArgs, git};"].concat()
        ));
        assert!(mentions_cli(
            &["fn f(a: &", "cli", "::RunArgs) {}"].concat()
        ));
        assert!(!mentions_cli(
            "use crate::config::Config; // parsed by cli.rs"
        ));
        assert!(!mentions_cli(&["set_image_", "cli", "::run()"].concat()));
    }

    /// Configuration flows one way: only the binary and the CLI know the CLI; everything
    /// else is handed its part of [`super::Config`].
    #[test]
    fn nothing_below_the_cli_imports_it() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        assert!(
            files.iter().any(|f| f.ends_with("lib.rs")),
            "the source tree was not found under {}",
            src.display()
        );
        let allowed = [src.join("cli.rs"), src.join("main.rs")];
        let offenders: Vec<String> = files
            .iter()
            .filter(|f| !allowed.contains(f))
            .filter(|f| {
                let text =
                    std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
                mentions_cli(&text)
            })
            .map(|f| f.display().to_string())
            .collect();
        assert!(
            offenders.is_empty(),
            "these files import the CLI; hand them their part of config::Config instead: {offenders:?}"
        );
    }

    /// The configuration is the bottom of the crate: it imports none of it, so a subsystem
    /// that reads its part can never form a cycle through it.
    #[test]
    fn the_configuration_imports_nothing_of_the_crate() {
        let text = include_str!("config.rs");
        let code = text.split("#[cfg(test)]").next().unwrap_or(text);
        for word in ["crate::", "super::"] {
            assert!(!code.contains(word), "config.rs uses {word}");
        }
    }
}
