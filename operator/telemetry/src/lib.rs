//! Logs and metrics: structured logging setup and the Prometheus registry served on `/metrics`.
//!
//! Metric labels are low-cardinality: an outcome or an error category, never a formatted message.

mod labels;
pub mod watch_metrics;

pub use labels::{
    CacheLabels, ControllerErrorLabels, ControllerLabels, CredentialLabels, DeploymentLabels,
    EventLabels, ForgeLabels, GitReadLabels, KindLabels, NotAllowedLabels, NotificationLabels,
    OutcomeLabels, PromotionLabels, PushLabels, QueueLabels, RateLimitLabels, ReconcileErrorLabels,
    ReconcileLabels, RefreshLabels, RegistryLabels, ShardLabels, ShardTransitionLabels,
    SignatureLabels, SqsLabels, StageLabels, WatchConditionLabels, WatchPullRequestLabels,
    WebhookLabels,
};

use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::{
    encoding::text::encode,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global tracing subscriber (`RUST_LOG` filters; default `info`). Logs go to
/// stderr; text logs are coloured only when stderr is a terminal (a container runtime or a
/// redirect gets plain lines).
pub fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_ansi(use_colour(std::io::stderr().is_terminal()))
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    if let Err(e) = result {
        eprintln!("warning: logging already initialised: {e}");
    }
}

/// Whether text logs are coloured: only on a terminal, and never with `NO_COLOR` set
/// (<https://no-color.org>).
fn use_colour(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// What `/readyz` waits for: named start-up conditions (caches synced, listeners bound),
/// each met once, and no shutdown begun.
#[derive(Debug)]
pub struct Readiness {
    pending: Mutex<BTreeSet<&'static str>>,
    stopping: AtomicBool,
}

/// The condition held until every other condition has been declared.
const STARTING: &str = "starting";

impl Default for Readiness {
    fn default() -> Self {
        Self {
            pending: Mutex::new(BTreeSet::from([STARTING])),
            stopping: AtomicBool::new(false),
        }
    }
}

impl Readiness {
    /// Declares a condition that must be met before the process is ready.
    pub fn expect(&self, condition: &'static str) {
        self.lock().insert(condition);
    }

    /// Marks `condition` as met.
    pub fn met(&self, condition: &'static str) {
        let left = {
            let mut pending = self.lock();
            pending.remove(condition);
            pending.len()
        };
        tracing::debug!(condition, left, "readiness condition met");
        if left == 0 {
            tracing::info!("ready");
        }
    }

    /// Every condition is declared (they may still be pending).
    pub fn declared(&self) {
        self.met(STARTING);
    }

    /// Shutdown began: not ready any more (the Service stops sending webhooks here).
    pub fn stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// `Ok` when ready; otherwise what is missing.
    pub fn check(&self) -> Result<(), String> {
        if self.stopping.load(Ordering::Relaxed) {
            return Err("shutting down".to_string());
        }
        let pending = self.lock();
        if pending.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "waiting for: {}",
                pending.iter().copied().collect::<Vec<_>>().join(", ")
            ))
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<&'static str>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Turns cumulative counts kept elsewhere (the webhook receiver, the SQS consumer, the
/// registry client) into counter increments: each [`CountDeltas::advance`] returns what was
/// added since the previous call for that key.
#[derive(Debug)]
pub struct CountDeltas<K> {
    last: std::collections::HashMap<K, u64>,
}

impl<K> Default for CountDeltas<K> {
    fn default() -> Self {
        Self {
            last: std::collections::HashMap::new(),
        }
    }
}

impl<K: std::hash::Hash + Eq> CountDeltas<K> {
    /// The increase of `key`'s count since the last call (all of `now` the first time; a
    /// count that went down started over, so all of it is new).
    pub fn advance(&mut self, key: K, now: u64) -> u64 {
        let before = self.last.insert(key, now).unwrap_or(0);
        if now >= before { now - before } else { now }
    }
}

/// Buckets of the reconcile duration histogram, in seconds.
const RECONCILE_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_BUCKETS)
}

/// The stage labels of `imagewatch_push_stage_seconds`, in order.
pub use imagewatch_engine::stages::STAGES as PUSH_STAGES;

/// Every metric the operator exports.
pub struct Metrics {
    registry: Registry,
    /// Reconciles by outcome.
    pub reconciles: Family<ReconcileLabels, Counter>,
    /// Registry requests (tag scans and manifest HEADs) by registry and outcome.
    pub registry_requests: Family<RegistryLabels, Counter>,
    /// Git pushes by outcome.
    pub git_pushes: Family<PushLabels, Counter>,
    /// Write intents answered, by where Git was read.
    pub git_reads: Family<GitReadLabels, Counter>,
    /// Commits created.
    pub commits: Counter,
    /// Registry events received, by source and outcome.
    pub events: Family<EventLabels, Counter>,
    /// Seconds from a registry event to the commit it caused being pushed.
    pub push_to_commit_seconds: Histogram,
    /// Seconds a push spent in each stage, from the stage before (received → routed →
    /// listed → selected → committed → pushed → status written), for watches of one
    /// repository.
    pub push_stage_seconds: Family<StageLabels, Histogram, fn() -> Histogram>,
    /// Seconds from a registry event to every Argo CD Application deploying the commit it
    /// caused being Synced at it and Healthy.
    pub push_to_running_seconds: Histogram,
    /// Requests that Argo CD refresh an Application, by outcome.
    pub argocd_refreshes: Family<RefreshLabels, Counter>,
    /// Commits followed to the Applications deploying them, by how it ended.
    pub deployments: Family<DeploymentLabels, Counter>,
    /// Webhook receiver results.
    pub webhook_requests: Family<WebhookLabels, Counter>,
    /// Seconds one reconcile took, by controller.
    pub reconcile_duration_seconds: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    /// Controller stream errors (watch or runner failures), by controller.
    pub controller_stream_errors: Family<ControllerErrorLabels, Counter>,
    /// Failed reconciles by controller, error category and reason.
    pub reconcile_errors: Family<ReconcileErrorLabels, Counter>,
    /// Entries of the shared caches after the last sweep, by cache.
    pub cache_entries: Family<CacheLabels, Gauge>,
    /// Entries the sweep forgot because no watch referenced them, by cache.
    pub cache_evictions: Family<CacheLabels, Counter>,
    /// ImageWatches currently known.
    pub watches: Gauge,
    /// ImageWatches by the status and reason of their `Ready` condition.
    pub watch_conditions: Family<WatchConditionLabels, Gauge>,
    /// The longest time any ImageWatch has been not Ready, in seconds (0 when all are).
    pub watch_not_ready_seconds_max: Gauge,
    /// Shards configured (0 when not sharded).
    pub shards: Gauge,
    /// Admin freezes in force (keys of the freeze ConfigMap: the cluster, namespaces).
    pub freezes: Gauge,
    /// Re-checks asked for with the annotation `imagewatch.dev/requestedAt`, by kind.
    pub recheck_requests: Family<KindLabels, Counter>,
    /// Requests that waited for a registry's rate limit, by registry.
    pub registry_rate_limit_waits: Family<RateLimitLabels, Counter>,
    /// Seconds requests spent waiting for a registry's rate limit, by registry.
    pub registry_rate_limit_wait_seconds: Family<RateLimitLabels, Counter<f64, AtomicU64>>,
    /// PromotionPolicy reconciles by outcome.
    pub promotions: Family<PromotionLabels, Counter>,
    /// Forge API requests by provider and outcome.
    pub forge_requests: Family<ForgeLabels, Counter>,
    /// Notifications by destination type, happening and outcome.
    pub notifications: Family<NotificationLabels, Counter>,
    /// ImageWatch pull request steps by action.
    pub watch_pull_requests: Family<WatchPullRequestLabels, Counter>,
    /// Credential refreshes (tokens obtained from their issuer) by kind and outcome.
    pub credential_refreshes: Family<CredentialLabels, Counter>,
    /// Shards this replica holds (HA sharding).
    pub shards_held: Gauge,
    /// 1 for each shard this replica holds, 0 for the others.
    pub shard_owned: Family<ShardLabels, Gauge>,
    /// Shard ownership changes.
    pub shard_transitions: Family<ShardTransitionLabels, Counter>,
    /// Registry events forwarded to peer replicas, by outcome.
    pub peer_forwards: Family<OutcomeLabels, Counter>,
    /// Items waiting in internal queues.
    pub queue_depth: Family<QueueLabels, Gauge>,
    /// Objects refused by the allow-list, by kind and check.
    pub not_allowed: Family<NotAllowedLabels, Counter>,
    /// Image signature checks by kind and outcome.
    pub signature_checks: Family<SignatureLabels, Counter>,
    /// SQS consumer message counts.
    pub sqs_messages: Family<SqsLabels, Counter>,
    /// What `/readyz` answers.
    pub readiness: Readiness,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Counts a signature check of `kind` (`ImageWatch`, `PromotionPolicy`) in
    /// `imagewatch_signature_checks_total`.
    pub fn count_signature_check(&self, kind: &str, outcome: &str) {
        self.signature_checks
            .get_or_create(&SignatureLabels {
                kind: kind.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("imagewatch");
        let reconciles = Family::<ReconcileLabels, Counter>::default();
        registry.register(
            "reconciles",
            "ImageWatch reconciles by outcome",
            reconciles.clone(),
        );
        let registry_requests = Family::<RegistryLabels, Counter>::default();
        registry.register(
            "registry_requests",
            "Registry requests by registry and outcome",
            registry_requests.clone(),
        );
        let git_pushes = Family::<PushLabels, Counter>::default();
        registry.register("git_pushes", "Git pushes by outcome", git_pushes.clone());
        let git_reads = Family::<GitReadLabels, Counter>::default();
        registry.register(
            "git_reads",
            "Write intents answered, by where Git was read (fetch, recent-fetch, unchanged)",
            git_reads.clone(),
        );
        let commits = Counter::default();
        registry.register("commits", "Commits created", commits.clone());
        let events = Family::<EventLabels, Counter>::default();
        registry.register(
            "events",
            "Registry events received, by source and outcome",
            events.clone(),
        );
        let webhook_requests = Family::<WebhookLabels, Counter>::default();
        registry.register(
            "webhook_requests",
            "Webhook receiver requests, by provider and result",
            webhook_requests.clone(),
        );
        let reconcile_duration_seconds =
            Family::<ControllerLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                reconcile_histogram,
            );
        registry.register(
            "reconcile_duration_seconds",
            "Seconds one reconcile took, by controller",
            reconcile_duration_seconds.clone(),
        );
        let controller_stream_errors = Family::<ControllerErrorLabels, Counter>::default();
        registry.register(
            "controller_stream_errors",
            "Controller stream errors (watch or runner failures), by controller",
            controller_stream_errors.clone(),
        );
        let reconcile_errors = Family::<ReconcileErrorLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Failed reconciles by controller, category (user, transient, internal) and reason",
            reconcile_errors.clone(),
        );
        let cache_entries = Family::<CacheLabels, Gauge>::default();
        registry.register(
            "cache_entries",
            "Entries of the shared caches after the last sweep, by cache",
            cache_entries.clone(),
        );
        let cache_evictions = Family::<CacheLabels, Counter>::default();
        registry.register(
            "cache_evictions",
            "Cache entries forgotten because no watch referenced them, by cache",
            cache_evictions.clone(),
        );
        let push_to_commit_seconds =
            Histogram::new([0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0]);
        registry.register(
            "push_to_commit_seconds",
            "Seconds from a registry event to the commit it caused being pushed",
            push_to_commit_seconds.clone(),
        );
        let push_stage_seconds: Family<StageLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(|| {
                // Fine enough that a stage's median reads within a few ms up to 0.5 s.
                Histogram::new([
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.125,
                    0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
                ])
            });
        // Every stage's series exists from the start (a dashboard shows zeros, not nothing).
        for stage in PUSH_STAGES {
            let _ = push_stage_seconds.get_or_create(&StageLabels {
                stage: stage.to_owned(),
            });
        }
        registry.register(
            "push_stage_seconds",
            "Seconds a registry push spent in each stage, from the stage before: routed, listed, selected, committed, pushed, status_written",
            push_stage_seconds.clone(),
        );
        let push_to_running_seconds = Histogram::new([
            0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
        ]);
        registry.register(
            "push_to_running_seconds",
            "Seconds from a registry event to every Argo CD Application deploying the commit it caused being Synced at it and Healthy",
            push_to_running_seconds.clone(),
        );
        let argocd_refreshes = Family::<RefreshLabels, Counter>::default();
        registry.register(
            "argocd_refreshes",
            "Requests that Argo CD refresh an Application after a commit, by outcome",
            argocd_refreshes.clone(),
        );
        let deployments = Family::<DeploymentLabels, Counter>::default();
        registry.register(
            "deployments",
            "Commits followed to the Argo CD Applications deploying them, by how it ended",
            deployments.clone(),
        );
        let watches = Gauge::default();
        registry.register("watches", "ImageWatch objects known", watches.clone());
        let watch_conditions = Family::<WatchConditionLabels, Gauge>::default();
        registry.register(
            "watch_conditions",
            "ImageWatch objects by the status and reason of their Ready condition",
            watch_conditions.clone(),
        );
        let watch_not_ready_seconds_max = Gauge::default();
        registry.register(
            "watch_not_ready_seconds_max",
            "Longest time any ImageWatch has been not Ready, in seconds (0 when all are Ready)",
            watch_not_ready_seconds_max.clone(),
        );
        let shards = Gauge::default();
        registry.register(
            "shards",
            "Shards configured (0 when not sharded)",
            shards.clone(),
        );
        let freezes = Gauge::default();
        registry.register(
            "freezes",
            "Admin freezes in force (keys of the freeze ConfigMap: cluster, namespace.<name>)",
            freezes.clone(),
        );
        let recheck_requests = Family::<KindLabels, Counter>::default();
        registry.register(
            "recheck_requests",
            "Re-checks asked for with the annotation imagewatch.dev/requestedAt, by kind",
            recheck_requests.clone(),
        );
        let registry_rate_limit_waits = Family::<RateLimitLabels, Counter>::default();
        registry.register(
            "registry_rate_limit_waits",
            "Registry requests that waited for the registry's rate limit",
            registry_rate_limit_waits.clone(),
        );
        let registry_rate_limit_wait_seconds =
            Family::<RateLimitLabels, Counter<f64, AtomicU64>>::default();
        registry.register(
            "registry_rate_limit_wait_seconds",
            "Seconds registry requests spent waiting for the registry's rate limit",
            registry_rate_limit_wait_seconds.clone(),
        );
        let promotions = Family::<PromotionLabels, Counter>::default();
        registry.register(
            "promotions",
            "PromotionPolicy reconciles by outcome",
            promotions.clone(),
        );
        let forge_requests = Family::<ForgeLabels, Counter>::default();
        registry.register(
            "forge_requests",
            "Forge (pull request API) requests by provider and outcome",
            forge_requests.clone(),
        );
        let notifications = Family::<NotificationLabels, Counter>::default();
        registry.register(
            "notifications",
            "Notifications (spec.notify) by destination type, happening and outcome",
            notifications.clone(),
        );
        let watch_pull_requests = Family::<WatchPullRequestLabels, Counter>::default();
        registry.register(
            "watch_pull_requests",
            "ImageWatch pull request steps (spec.git.pullRequest) by action",
            watch_pull_requests.clone(),
        );
        let credential_refreshes = Family::<CredentialLabels, Counter>::default();
        registry.register(
            "credential_refreshes",
            "Credential refreshes (tokens obtained from their issuer) by kind and outcome",
            credential_refreshes.clone(),
        );
        let shards_held = Gauge::default();
        registry.register(
            "shards_held",
            "Shards (Git repository groups) this replica holds",
            shards_held.clone(),
        );
        let shard_owned = Family::<ShardLabels, Gauge>::default();
        registry.register(
            "shard_owned",
            "1 when this replica holds the shard",
            shard_owned.clone(),
        );
        let shard_transitions = Family::<ShardTransitionLabels, Counter>::default();
        registry.register(
            "shard_transitions",
            "Shard ownership changes (acquired, released, lost)",
            shard_transitions.clone(),
        );
        let peer_forwards = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "peer_forwards",
            "Registry events forwarded to peer replicas, by outcome",
            peer_forwards.clone(),
        );
        let not_allowed = Family::<NotAllowedLabels, Counter>::default();
        registry.register(
            "not_allowed",
            "Objects refused by the allow-list (Ready=False NotAllowed), by kind and check",
            not_allowed.clone(),
        );
        let signature_checks = Family::<SignatureLabels, Counter>::default();
        registry.register(
            "signature_checks",
            "Image signature checks (spec.verify, signature gates), by kind and outcome",
            signature_checks.clone(),
        );
        let queue_depth = Family::<QueueLabels, Gauge>::default();
        registry.register(
            "queue_depth",
            "Items waiting in internal queues",
            queue_depth.clone(),
        );
        let sqs_messages = Family::<SqsLabels, Counter>::default();
        registry.register(
            "sqs_messages",
            "SQS consumer messages, by result",
            sqs_messages.clone(),
        );
        for controller in ["imagewatch", "promotionpolicy"] {
            drop(reconcile_duration_seconds.get_or_create(&ControllerLabels {
                controller: controller.into(),
            }));
        }
        // Series that the chart's alerts and dashboard compare against exist from the start
        // at 0, so a rate or an increase is defined before the first event of its kind.
        drop(reconciles.get_or_create(&ReconcileLabels {
            outcome: "ok".into(),
        }));
        for outcome in ["ok", "rejected"] {
            drop(git_pushes.get_or_create(&PushLabels {
                outcome: outcome.into(),
            }));
        }
        for kind in ["registry-token", "github-app"] {
            drop(credential_refreshes.get_or_create(&CredentialLabels {
                kind: kind.into(),
                outcome: "ok".into(),
            }));
        }
        for outcome in ["committed", "up_to_date"] {
            drop(promotions.get_or_create(&PromotionLabels {
                outcome: outcome.into(),
            }));
        }
        for source in [
            "distribution",
            "dockerhub",
            "ghcr",
            "harbor",
            "quay",
            "generic",
            "sqs",
        ] {
            drop(events.get_or_create(&EventLabels {
                source: source.into(),
                outcome: "matched".into(),
            }));
        }
        Self {
            registry,
            reconciles,
            registry_requests,
            git_pushes,
            git_reads,
            commits,
            events,
            push_to_commit_seconds,
            push_stage_seconds,
            push_to_running_seconds,
            argocd_refreshes,
            deployments,
            webhook_requests,
            reconcile_duration_seconds,
            controller_stream_errors,
            reconcile_errors,
            cache_entries,
            cache_evictions,
            watches,
            watch_conditions,
            watch_not_ready_seconds_max,
            shards,
            freezes,
            recheck_requests,
            registry_rate_limit_waits,
            registry_rate_limit_wait_seconds,
            promotions,
            forge_requests,
            notifications,
            watch_pull_requests,
            credential_refreshes,
            shards_held,
            shard_owned,
            shard_transitions,
            peer_forwards,
            queue_depth,
            not_allowed,
            signature_checks,
            sqs_messages,
            readiness: Readiness::default(),
        }
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        out
    }

    /// Whether the process is ready (see [`Readiness`]).
    pub fn is_ready(&self) -> bool {
        self.readiness.check().is_ok()
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    extra: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::{Router, http::StatusCode, routing::get};
    let m = metrics.clone();
    let r = metrics.clone();
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = m.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        m.render(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let r = r.clone();
                async move {
                    match r.readiness.check() {
                        Ok(()) => (StatusCode::OK, "ok".to_string()),
                        Err(missing) => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("not ready: {missing}"),
                        ),
                    }
                }
            }),
        )
        .merge(extra);
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_deltas_add_only_what_is_new() {
        let mut d = CountDeltas::default();
        assert_eq!(d.advance("a", 3), 3);
        assert_eq!(d.advance("a", 3), 0);
        assert_eq!(d.advance("a", 5), 2);
        assert_eq!(d.advance("b", 1), 1);
        // A source that started over (a restarted consumer): all of its count is new.
        assert_eq!(d.advance("a", 1), 1);
    }

    #[test]
    fn counters_are_exported_as_counters_and_durations_per_controller() {
        let m = Metrics::new();
        m.webhook_requests
            .get_or_create(&WebhookLabels {
                provider: "distribution".into(),
                result: "accepted".into(),
            })
            .inc();
        m.sqs_messages
            .get_or_create(&SqsLabels {
                result: "received".into(),
            })
            .inc();
        let text = m.render();
        for line in [
            "# TYPE imagewatch_webhook_requests counter",
            "# TYPE imagewatch_sqs_messages counter",
            "# TYPE imagewatch_reconcile_duration_seconds histogram",
            "imagewatch_reconcile_duration_seconds_count{controller=\"imagewatch\"} 0",
            "imagewatch_reconcile_duration_seconds_count{controller=\"promotionpolicy\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
    }

    #[test]
    fn ready_once_every_declared_condition_is_met_and_not_while_stopping() {
        let r = Readiness::default();
        assert!(
            r.check().is_err(),
            "not ready before the conditions are declared"
        );
        r.expect("imagewatch-cache");
        r.expect("webhook-listener");
        r.declared();
        assert_eq!(
            r.check(),
            Err("waiting for: imagewatch-cache, webhook-listener".to_string())
        );
        r.met("webhook-listener");
        r.met("imagewatch-cache");
        assert_eq!(r.check(), Ok(()));
        r.stopping();
        assert_eq!(r.check(), Err("shutting down".to_string()));
    }

    #[test]
    fn no_colour_off_a_terminal() {
        assert!(!use_colour(false));
    }
}
