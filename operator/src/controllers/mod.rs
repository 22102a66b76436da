//! What the controllers share: the [`Context`] every reconcile gets (clients, caches, the git
//! writer, work slots, backoff), the error policy, reconcile timing, and the logging of
//! controller stream errors. `app.rs` builds the context and starts the controllers.
//!
//! Objects that do not deserialize are reported on their status (`InvalidSpec`) instead of
//! stopping the stream (`DeserializeGuard`).

mod credentials;
pub mod imagewatch;
pub mod promotion;
pub mod recheck;
mod services;
pub use services::SecretReader;
pub mod sweep;

use crate::error::Classify as _;
use std::{collections::HashMap, sync::Arc, time::Duration};

use imagewatch_crd::ImageWatch;
use kube::{
    Client, Resource, ResourceExt,
    core::DeserializeGuard,
    runtime::{
        controller::Action,
        events::{Recorder, Reporter},
        reflector::ObjectRef,
        watcher,
    },
};
use tokio::sync::Mutex;

pub use crate::error::ReconcileError;
pub use imagewatch_engine::duration::parse_duration;

use crate::{
    cluster::{allowance, argocd, deploy, secrets, shard},
    registry::RegistryClient,
    scan::{appearances, index},
    sources::routing,
    telemetry::{Metrics, ReconcileLabels},
    writer,
};

/// Everything a reconcile needs, shared by all reconciles.
pub struct Context {
    /// Kubernetes client (the operator's ServiceAccount).
    pub client: Client,
    /// Registry client with the shared token cache.
    pub registry: RegistryClient,
    /// Git writer: one bare clone per repository, one writer per (repository, branch).
    pub writer: writer::GitWriter,
    /// ECR, through the process's AWS identity.
    pub ecr: crate::registry::ecr::EcrTagSource,
    /// Scans shared by every watch of a repository.
    pub index: index::RepositoryIndex,
    /// When each tag appeared (`order: Newest`).
    pub appearances: appearances::Appearances,
    /// Namespace of Argo CD's Applications.
    pub argocd_namespace: String,
    /// The controller's cache of ImageWatches (group members, event routing).
    pub store: kube::runtime::reflector::Store<DeserializeGuard<ImageWatch>>,
    /// True once the ImageWatch cache holds its first list (see [`on_first_list`]).
    pub cache_synced: tokio::sync::watch::Sender<bool>,
    /// Registry events not yet turned into a commit (latency metric).
    pub pending: routing::PendingEvents,
    /// Event recorder.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// HA sharding: which Git repositories this replica writes to (None: all of them).
    pub shards: Option<Arc<shard::ShardManager>>,
    /// Consecutive transient failures per object, for backoff.
    failures: Mutex<HashMap<ObjectRef<DeserializeGuard<ImageWatch>>, u32>>,
    /// Reconciles doing registry and API work at once (`--max-concurrent-reconciles`). A
    /// reconcile gives its slot back while it waits for the git writer, so intents keep
    /// reaching the writer (and batch into few commits) while earlier ones are pushed.
    work_slots: Arc<tokio::sync::Semaphore>,
    /// Secrets read recently (pull and git credentials).
    pub secrets: secrets::SecretCache,
    /// Argo CD Application sources resolved recently (watches without `spec.git`).
    pub argocd_sources: argocd::ResolveCache,
    /// Commits followed to the Argo CD Applications that deploy them (`Deployed`).
    pub deploys: Arc<deploy::DeployTracker>,
    /// The admin's allow-list (`--allow-list-configmap`).
    pub allowance: Arc<allowance::Allowance>,
    /// Sends the messages of `spec.notify`.
    pub notifier: crate::notify::Notifier,
    /// The HTTP client of every forge API call (pull requests of both kinds).
    pub forge_http: reqwest::Client,
    /// One lock per pull request head: a group's members never open two pull requests.
    pub pull_request_locks: crate::forge::HeadLocks,
    /// Admin freezes (`--freeze-configmap`).
    pub freezes: Arc<crate::cluster::freeze::Freezes>,
    /// Bumped when the freezes change (the PromotionPolicy controller looks at every policy
    /// again then).
    pub freeze_changes: tokio::sync::watch::Sender<u64>,
    /// Signature verdicts that verified, by image digest, keys and registry credentials.
    pub signatures: crate::signature::fetch::VerdictCache,
    /// (credentials, registry) whose watched repositories are announced to the registry
    /// client: set once the announcement is done, and awaited by every reconcile of them.
    announced: std::sync::Mutex<Announcements>,
}

/// What a reconcile tells `spec.notify` once its status is written.
pub struct Notifications {
    /// The object and its Git repository.
    pub target: crate::notify::Target,
    /// `spec.notify`.
    pub destinations: Vec<imagewatch_crd::Notification>,
    /// The messages.
    pub outgoing: Vec<imagewatch_engine::notify::Outgoing>,
    /// When the next `Failing` message falls due.
    pub failing_due: Option<Duration>,
}

impl Notifications {
    /// The notifications of one reconcile of the object `object` (`namespace/name`, of
    /// `kind`, writing to `git_url`) to `destinations` (`spec.notify`): `find` returns the
    /// messages of the statuses it compares (bringing the new one's `failureNotified` up to
    /// date) and when the next `Failing` message falls due. `None` without destinations.
    pub fn of(
        kind: &'static str,
        object: k8s_openapi::api::core::v1::ObjectReference,
        destinations: Option<&Vec<imagewatch_crd::Notification>>,
        git_url: Option<String>,
        find: impl FnOnce(
            &imagewatch_engine::notify::Subject,
            &[imagewatch_crd::Notification],
            jiff::Timestamp,
        ) -> (Vec<imagewatch_engine::notify::Outgoing>, Option<Duration>),
    ) -> Option<Self> {
        let destinations = destinations.filter(|d| !d.is_empty())?.clone();
        let target = crate::notify::Target {
            subject: imagewatch_engine::notify::Subject {
                kind,
                namespace: object.namespace.clone().unwrap_or_default(),
                name: object.name.clone().unwrap_or_default(),
                repository_web: git_url
                    .as_deref()
                    .and_then(imagewatch_engine::notify::repository_web),
            },
            object,
            git_url,
        };
        let (outgoing, failing_due) = find(&target.subject, &destinations, jiff::Timestamp::now());
        Some(Self {
            target,
            destinations,
            outgoing,
            failing_due,
        })
    }
}

/// One announcement of watched repositories per (credentials, registry); see
/// [`Announcer::expect_repositories`].
type Announcements =
    std::collections::HashMap<(index::CredentialKey, String), Arc<tokio::sync::OnceCell<()>>>;

tokio::task_local! {
    /// The work slot of the reconcile running on this task, if it holds one.
    static WORK_SLOT: std::cell::RefCell<Option<tokio::sync::OwnedSemaphorePermit>>;
}

/// Reconciles that may wait for the git writer at once, per work slot.
pub const WAITING_PER_WORK_SLOT: usize = 8;

/// Every service a [`Context`] holds that start-up chooses: the context is built from them
/// once and never changed afterwards.
pub struct Services {
    /// Kubernetes client (the operator's ServiceAccount).
    pub client: Client,
    /// Registry client with the shared token cache.
    pub registry: RegistryClient,
    /// The git writer.
    pub writer: writer::GitWriter,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Tags kept per repository scan (`--max-tags`).
    pub max_tags: usize,
    /// ECR, through the process's AWS identity.
    pub ecr: crate::registry::ecr::EcrTagSource,
    /// The cache of ImageWatches the controller is built on.
    pub store: kube::runtime::reflector::Store<DeserializeGuard<ImageWatch>>,
    /// Namespace of Argo CD's Applications.
    pub argocd_namespace: String,
    /// Commits followed to the Argo CD Applications that deploy them.
    pub deploys: Arc<deploy::DeployTracker>,
    /// The admin's allow-list.
    pub allowance: Arc<allowance::Allowance>,
    /// Reconciles doing registry and API work at once (at least 1).
    pub work_slots: usize,
    /// HA sharding (None: this replica writes to every repository).
    pub shards: Option<Arc<shard::ShardManager>>,
    /// The HTTP client of every forge API call (pull requests of both kinds).
    pub forge_http: reqwest::Client,
}

impl Context {
    /// Builds the context from the services start-up chose.
    pub fn new(services: Services) -> Self {
        let Services {
            client,
            registry,
            writer,
            metrics,
            max_tags,
            ecr,
            store,
            argocd_namespace,
            deploys,
            allowance,
            work_slots,
            shards,
            forge_http,
        } = services;
        let reporter = Reporter {
            controller: "imagewatch".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let recorder = Recorder::new(client.clone(), reporter);
        Self {
            notifier: crate::notify::Notifier::new(
                client.clone(),
                metrics.clone(),
                recorder.clone(),
            ),
            recorder,
            index: index::RepositoryIndex::new(max_tags),
            appearances: appearances::Appearances::default(),
            ecr,
            pending: routing::PendingEvents::default(),
            argocd_namespace,
            store,
            cache_synced: tokio::sync::watch::Sender::new(false),
            client,
            registry,
            writer,
            metrics,
            shards,
            forge_http,
            pull_request_locks: crate::forge::HeadLocks::default(),
            failures: Mutex::default(),
            work_slots: Arc::new(tokio::sync::Semaphore::new(work_slots.max(1))),
            secrets: secrets::secret_cache(),
            argocd_sources: argocd::resolve_cache(),
            deploys,
            allowance,
            freezes: Arc::default(),
            freeze_changes: tokio::sync::watch::Sender::new(0),
            signatures: Default::default(),
            announced: std::sync::Mutex::default(),
        }
    }

    /// Runs `work` (one reconcile) once a work slot is free, holding it until `work` ends
    /// except while it waits in [`WorkSlots::without_work_slot`].
    pub async fn with_work_slot<F: std::future::Future>(&self, work: F) -> F::Output {
        // The semaphore is never closed, so acquiring only waits.
        let permit = self.work_slots.clone().acquire_owned().await.ok();
        WORK_SLOT.scope(std::cell::RefCell::new(permit), work).await
    }

    /// The work slots, for a step that waits for the git writer.
    pub fn work_slots(&self) -> WorkSlots<'_> {
        WorkSlots {
            work_slots: &self.work_slots,
        }
    }

    /// What announcing watched repositories to the registry client reads.
    pub fn announcer(&self) -> Announcer<'_> {
        Announcer {
            announced: &self.announced,
            store: &self.store,
            cache_synced: &self.cache_synced,
            registry: &self.registry,
        }
    }
}

/// The reconciles' work slots, seen by a step that waits for the git writer.
#[derive(Clone, Copy)]
pub struct WorkSlots<'a> {
    work_slots: &'a Arc<tokio::sync::Semaphore>,
}

impl WorkSlots<'_> {
    /// Awaits `wait` (the git writer) without holding the current reconcile's work slot,
    /// and takes a slot again before returning.
    pub async fn without_work_slot<F: std::future::Future>(&self, wait: F) -> F::Output {
        // Taking the permit out of the slot drops it: the slot is free while we wait.
        let held = WORK_SLOT
            .try_with(|slot| slot.borrow_mut().take().is_some())
            .unwrap_or(false);
        let out = wait.await;
        if held {
            let permit = self.work_slots.clone().acquire_owned().await.ok();
            let _ = WORK_SLOT.try_with(|slot| *slot.borrow_mut() = permit);
        }
        out
    }
}

impl Context {
    /// A hold on the shard of the Git repository `key`; None when another replica owns it.
    /// Always granted without sharding.
    pub fn enter_shard(&self, key: &str) -> Option<Option<shard::ShardGuard>> {
        match &self.shards {
            None => Some(None),
            Some(shards) => shards.enter(key).map(Some),
        }
    }
}

/// The watch cache and the registry client, seen by a step that announces the repositories
/// a watch's credentials read (see [`Announcer::expect_repositories`]).
#[derive(Clone, Copy)]
pub struct Announcer<'a> {
    announced: &'a std::sync::Mutex<Announcements>,
    store: &'a kube::runtime::reflector::Store<DeserializeGuard<ImageWatch>>,
    cache_synced: &'a tokio::sync::watch::Sender<bool>,
    registry: &'a RegistryClient,
}

impl Announcer<'_> {
    /// The first time credentials `key` are used for `registry`: announces every repository
    /// of `registry` that a watch reads with them to the registry client, so that its first
    /// registry-wide tokens cover them all (one token request per `repositoriesPerToken`
    /// repositories at start, not one per group of reconciles). Every reconcile of the same credentials and registry waits until the
    /// announcement is done (at most until the ImageWatch cache is complete, 30 s), so that
    /// none asks for a token before all repositories are known.
    pub async fn expect_repositories(
        &self,
        key: &index::CredentialKey,
        registry: &str,
        creds: &crate::registry::Credentials,
    ) {
        let once = self
            .announced
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry((key.clone(), registry.to_string()))
            .or_default()
            .clone();
        once.get_or_init(|| self.announce_repositories(key, registry, creds))
            .await;
    }

    async fn announce_repositories(
        &self,
        key: &index::CredentialKey,
        registry: &str,
        creds: &crate::registry::Credentials,
    ) {
        let store = self.store;
        // The cache is complete once the first list is in; reconciles may start before.
        let mut synced = self.cache_synced.subscribe();
        if !matches!(
            tokio::time::timeout(Duration::from_secs(30), synced.wait_for(|done| *done)).await,
            Ok(Ok(_))
        ) {
            return;
        }
        let paths: Vec<String> = store
            .state()
            .iter()
            .filter_map(|guard| guard.0.as_ref().ok())
            .filter_map(credentials::credential_key_of)
            .filter(|(k, repo)| k == key && repo.registry == registry)
            .map(|(_, repo)| repo.path)
            .collect();
        tracing::debug!(
            registry,
            repositories = paths.len(),
            "announcing watched repositories for registry-wide tokens"
        );
        self.registry
            .expect_repositories(registry, creds, paths.iter().map(String::as_str));
    }
}

impl Context {
    async fn backoff(
        &self,
        key: ObjectRef<DeserializeGuard<ImageWatch>>,
        cap: Duration,
    ) -> Duration {
        let mut failures = self.failures.lock().await;
        let n = failures.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        // 2 s doubling per failure in a row (the tenth wait at most), capped at the watch's
        // interval but never below 5 s.
        use backon::{BackoffBuilder as _, ExponentialBuilder};
        let max = Duration::from_secs(cap.as_secs().max(5));
        ExponentialBuilder::new()
            .with_min_delay(Duration::from_secs(2))
            .with_max_delay(max)
            .with_factor(2.0)
            .without_max_times()
            .build()
            .nth((*n).min(10) as usize - 1)
            .unwrap_or(max)
    }

    async fn reset_backoff(&self, key: &ObjectRef<DeserializeGuard<ImageWatch>>) {
        self.failures.lock().await.remove(key);
    }
}

/// The `controller` label of the ImageWatch controller's metrics.
pub const IMAGEWATCH_CONTROLLER: &str = "imagewatch";

/// Runs one reconcile and observes its duration in
/// `imagewatch_reconcile_duration_seconds{controller}`.
pub async fn timed<F: std::future::Future>(
    metrics: &Metrics,
    controller: &str,
    reconcile: F,
) -> F::Output {
    let started = std::time::Instant::now();
    let output = reconcile.await;
    metrics
        .reconcile_duration_seconds
        .get_or_create(&crate::telemetry::ControllerLabels {
            controller: controller.to_string(),
        })
        .observe(started.elapsed().as_secs_f64());
    output
}

/// What a controller stream error is (pure): `None` for a failed reconcile (already in the
/// object's status, Events and metrics) and for an object gone from the cache (expected);
/// `watch` when listing or watching the objects fails (a missing CRD, RBAC), `runner` for
/// the controller's runner.
pub fn stream_error_kind<R, Q>(
    error: &kube::runtime::controller::Error<R, Q>,
) -> Option<&'static str> {
    use kube::runtime::controller::Error;
    match error {
        Error::ReconcilerFailed(..) | Error::ObjectNotFound(..) => None,
        Error::QueueError(_) => Some("watch"),
        Error::RunnerError(_) => Some("runner"),
    }
}

/// Logs a controller stream error at the level it deserves and counts the ones that are
/// the operator's own problem in `imagewatch_controller_stream_errors_total`.
pub fn log_stream_error<R, Q>(
    metrics: &Metrics,
    controller: &str,
    error: &kube::runtime::controller::Error<R, Q>,
) where
    R: std::error::Error + 'static,
    Q: std::error::Error + 'static,
{
    match stream_error_kind(error) {
        None => tracing::debug!(controller, error = %error, "reconcile stream"),
        Some(kind) => {
            tracing::error!(controller, error = %error, "controller {kind} failed; retrying with backoff");
            metrics
                .controller_stream_errors
                .get_or_create(&crate::telemetry::ControllerErrorLabels {
                    controller: controller.to_string(),
                    error: kind.to_string(),
                })
                .inc();
        }
    }
}

/// A callback for `inspect` on a reflector's event stream that runs `then` once, at the
/// first `InitDone`: the reflector has applied the first list to its store by then.
///
/// Nothing here waits on `Store::wait_until_ready`: it keeps a single waker (one oneshot
/// receiver), so a second task waiting on it can take the wake-up from the controller's
/// runner, which then never starts reconciling.
pub fn on_first_list<K>(
    then: impl FnOnce() + Send + 'static,
) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) + Send + 'static {
    let mut then = Some(then);
    move |event| {
        if matches!(event, Ok(watcher::Event::InitDone))
            && let Some(then) = then.take()
        {
            then();
        }
    }
}

/// Errors returned by `reconcile` are failures to talk to the Kubernetes API while recording
/// status: retry with backoff.
pub fn error_policy(
    obj: Arc<DeserializeGuard<ImageWatch>>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    ctx.metrics
        .reconciles
        .get_or_create(&ReconcileLabels {
            outcome: error.category().to_string(),
        })
        .inc();
    error.count(&ctx.metrics, IMAGEWATCH_CONTROLLER);
    let name = match &obj.0 {
        Ok(o) => format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any()),
        Err(e) => e.metadata.name.clone().unwrap_or_default(),
    };
    tracing::warn!(watch = %name, error = %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(10))
}

/// The object reference used in Events.
pub fn object_ref(obj: &ImageWatch) -> k8s_openapi::api::core::v1::ObjectReference {
    obj.object_ref(&())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::controller::Error;

    #[test]
    fn failing_watches_are_errors_and_failed_reconciles_are_not() {
        type E = Error<std::io::Error, std::io::Error>;
        let object = || {
            Box::new(
                ObjectRef::<k8s_openapi::api::core::v1::ConfigMap>::new("a")
                    .within("ns")
                    .erase(),
            )
        };
        let watch: E = Error::QueueError(std::io::Error::other("404 imagewatches not found"));
        assert_eq!(stream_error_kind(&watch), Some("watch"));
        let failed: E = Error::ReconcilerFailed(std::io::Error::other("registry"), object());
        assert_eq!(stream_error_kind(&failed), None);
        let gone: E = Error::ObjectNotFound(object());
        assert_eq!(stream_error_kind(&gone), None);

        let metrics = Metrics::new();
        log_stream_error(&metrics, "imagewatch", &watch);
        log_stream_error(&metrics, "imagewatch", &failed);
        let text = metrics.render();
        assert!(
            text.contains(
                "imagewatch_controller_stream_errors_total{controller=\"imagewatch\",error=\"watch\"} 1"
            ),
            "{text}"
        );
    }
}
