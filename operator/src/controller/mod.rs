//! The ImageWatch controller: watches `ImageWatch` objects and runs one reconcile per object
//! (dereference → validate → scan → select → read Git → write → status).
//!
//! Objects that do not deserialize are reported on their status (`InvalidSpec`) instead of
//! stopping the stream (`DeserializeGuard`).

pub mod allow;
pub mod allowance;
pub mod appearances;
pub mod argocd;
mod duration;
pub mod error;
pub mod group;
pub mod index;
pub mod members;
pub mod namespaces;
pub mod promotion;
pub mod reconcile;
pub mod routing;
pub mod secrets;
pub mod shard;
pub mod sources;
pub mod status;
pub mod ttl_cache;
pub mod watch_metrics;
pub mod watch_pr;
pub mod writer;

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures::StreamExt;
use imagewatch_crd::ImageWatch;
use kube::{
    Api, Client, Resource, ResourceExt,
    core::DeserializeGuard,
    runtime::{
        Controller, WatchStreamExt,
        controller::Action,
        events::{Recorder, Reporter},
        reflector::ObjectRef,
        watcher,
    },
};
use tokio::sync::Mutex;

pub use duration::parse_duration;
pub use error::ReconcileError;

use crate::{
    cli::RunArgs,
    registry::{RegistryClient, RegistryOptions},
    telemetry::{Metrics, ReconcileLabels},
};

/// Errors that stop the controller process.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No usable Kubernetes configuration.
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// The CRDs are not installed or not established.
    #[error(
        "the ImageWatch CRD is not available: {0} (install charts/imagewatch or `imagewatch crds | kubectl apply -f -`)"
    )]
    CrdMissing(String),
    /// `--signing-key` cannot be used.
    #[error("{0}")]
    SigningKey(#[source] crate::git::SigningKeyError),
    /// The operator's own configuration is unusable.
    #[error("configuration: {0}")]
    Config(String),
    /// The metrics server failed.
    #[error("metrics server: {0}")]
    Metrics(#[source] std::io::Error),
    /// The cache directory is unusable.
    #[error("cache directory {path}: {source}")]
    CacheDir {
        /// The directory.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

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
    pub store: std::sync::OnceLock<kube::runtime::reflector::Store<DeserializeGuard<ImageWatch>>>,
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
    /// The admin's allow-list (`--allow-list-configmap`).
    pub allowance: Arc<allowance::Allowance>,
    /// Signature verdicts that verified, by image digest, keys and registry credentials.
    pub signatures: crate::signature::fetch::VerdictCache,
    /// (credentials, registry) whose watched repositories were announced to the registry
    /// client.
    announced: std::sync::Mutex<std::collections::HashSet<(index::CredentialKey, String)>>,
}

/// Work slots when not configured (the `--max-concurrent-reconciles` default).
const DEFAULT_WORK_SLOTS: usize = 32;

tokio::task_local! {
    /// The work slot of the reconcile running on this task, if it holds one.
    static WORK_SLOT: std::cell::RefCell<Option<tokio::sync::OwnedSemaphorePermit>>;
}

/// Reconciles that may wait for the git writer at once, per work slot.
pub const WAITING_PER_WORK_SLOT: usize = 8;

impl Context {
    /// Builds a context.
    pub fn new(
        client: Client,
        registry: RegistryClient,
        writer: writer::GitWriter,
        metrics: Arc<Metrics>,
        max_tags: usize,
        ecr: crate::registry::ecr::EcrTagSource,
    ) -> Self {
        let reporter = Reporter {
            controller: "imagewatch".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            index: index::RepositoryIndex::new(max_tags),
            appearances: appearances::Appearances::default(),
            ecr,
            pending: routing::PendingEvents::default(),
            argocd_namespace: "argocd".to_string(),
            store: std::sync::OnceLock::new(),
            cache_synced: tokio::sync::watch::Sender::new(false),
            client,
            registry,
            writer,
            metrics,
            shards: None,
            failures: Mutex::default(),
            work_slots: Arc::new(tokio::sync::Semaphore::new(DEFAULT_WORK_SLOTS)),
            secrets: secrets::secret_cache(),
            argocd_sources: argocd::resolve_cache(),
            allowance: Arc::default(),
            signatures: Default::default(),
            announced: std::sync::Mutex::default(),
        }
    }

    /// Sets how many reconciles do registry and API work at once.
    pub fn set_work_slots(&mut self, slots: usize) {
        self.work_slots = Arc::new(tokio::sync::Semaphore::new(slots.max(1)));
    }

    /// Runs `work` (one reconcile) once a work slot is free, holding it until `work` ends
    /// except while it waits in [`Self::without_work_slot`].
    pub async fn with_work_slot<F: std::future::Future>(&self, work: F) -> F::Output {
        // The semaphore is never closed, so acquiring only waits.
        let permit = self.work_slots.clone().acquire_owned().await.ok();
        WORK_SLOT.scope(std::cell::RefCell::new(permit), work).await
    }

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

    /// A hold on the shard of the Git repository `key`; None when another replica owns it.
    /// Always granted without sharding.
    pub fn enter_shard(&self, key: &str) -> Option<Option<shard::ShardGuard>> {
        match &self.shards {
            None => Some(None),
            Some(shards) => shards.enter(key).map(Some),
        }
    }

    /// The first time credentials `key` are used for `registry`: announces every repository
    /// of `registry` that a watch reads with them to the registry client, so that its first
    /// registry-wide token covers them all (one token request at start, not one per group of
    /// reconciles).
    pub async fn expect_repositories(
        &self,
        key: &index::CredentialKey,
        registry: &str,
        creds: &crate::registry::Credentials,
    ) {
        {
            let mut announced = self
                .announced
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !announced.insert((key.clone(), registry.to_string())) {
                return;
            }
        }
        let Some(store) = self.store.get() else {
            return;
        };
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
            .filter_map(reconcile::credential_key_of)
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

    async fn backoff(
        &self,
        key: ObjectRef<DeserializeGuard<ImageWatch>>,
        cap: Duration,
    ) -> Duration {
        let mut failures = self.failures.lock().await;
        let n = failures.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        let secs = 2u64.saturating_pow((*n).min(10)).min(cap.as_secs().max(5));
        Duration::from_secs(secs)
    }

    async fn reset_backoff(&self, key: &ObjectRef<DeserializeGuard<ImageWatch>>) {
        self.failures.lock().await.remove(key);
    }
}

/// `imagewatch run`: runs the controller until SIGTERM/SIGINT.
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    std::fs::create_dir_all(&args.cache_dir).map_err(|source| RunError::CacheDir {
        path: args.cache_dir.display().to_string(),
        source,
    })?;
    let client = Client::try_default().await.map_err(RunError::Client)?;
    let watched = args.watched_namespaces();
    wait_for_crd(&client, watched.first().map(String::as_str)).await?;

    let metrics = Arc::new(Metrics::new());
    let registries = match &args.registries_config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                RunError::Config(format!(
                    "cannot read registries config {}: {e}",
                    path.display()
                ))
            })?;
            crate::registry::parse_registries_config(&text).map_err(|e| {
                RunError::Config(format!("registries config {}: {e}", path.display()))
            })?
        }
        None => Default::default(),
    };
    let registry = RegistryClient::with_registries(
        RegistryOptions {
            insecure_hosts: args.insecure_registries.clone(),
            user_agent: format!("imagewatch/{}", env!("CARGO_PKG_VERSION")),
            timeout: args.registry_timeout,
        },
        registries,
    )
    .map_err(|e| RunError::Config(format!("registry client: {e}")))?;
    let writer = writer::GitWriter::with_options(
        &args.cache_dir,
        writer::WriterOptions::from_run_args(&args).map_err(RunError::SigningKey)?,
        metrics.clone(),
    );
    // One AWS configuration (and so one credential cache) for ECR and SQS, loaded by the first
    // ECR request or the SQS consumer: never without AWS (no instance-metadata lookups).
    let aws = crate::registry::ecr::LazyAwsConfig::new();
    let ecr = crate::registry::ecr::EcrTagSource::lazy(
        aws.clone(),
        crate::registry::ecr::EcrOptions {
            endpoint_url: args.aws_endpoint_url.clone(),
        },
    );
    let mut ctx = Context::new(
        client.clone(),
        registry,
        writer,
        metrics.clone(),
        args.max_tags,
        ecr,
    );
    ctx.argocd_namespace = args.argocd_namespace.clone();
    if let Some(name) = &args.allow_list_configmap {
        ctx.allowance = Arc::new(allowance::Allowance::expecting(name));
    }
    ctx.set_work_slots(usize::from(args.max_concurrent_reconciles));
    let mut acquired_shards = None;
    if args.shards > 0 {
        let identity = args
            .identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("imagewatch-{}", std::process::id()));
        let (manager, acquired) = shard::ShardManager::new(
            client.clone(),
            shard::ShardOptions {
                shards: args.shards,
                lease_duration: args.lease_duration,
                namespace: args.pod_namespace.clone(),
                identity: identity.clone(),
                prefix: args.lease_prefix.clone(),
                peer_url: args.peer_url.clone(),
            },
            metrics.clone(),
        );
        if let Err(e) = manager.load_peer_token().await {
            tracing::warn!(error = %e, "cannot read or create the peer token Secret; registry events received here are not forwarded to other replicas");
        }
        tracing::info!(shards = args.shards, %identity, "sharding by Git repository over Leases");
        ctx.shards = Some(manager);
        acquired_shards = Some(acquired);
    }
    let ctx = Arc::new(ctx);

    // Shutdown, in order: `shutdown` stops new work (watches, event sources, readiness);
    // in-flight reconciles and batches finish (up to `--shutdown-timeout`); only then are the
    // Leases released (`release`) and the metrics server stopped.
    let shutdown = tokio_util::sync::CancellationToken::new();
    let release = tokio_util::sync::CancellationToken::new();
    let signal_token = shutdown.clone();
    let signal_metrics = metrics.clone();
    let shutdown_timeout = args.shutdown_timeout;
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!(
            timeout_s = shutdown_timeout.as_secs(),
            "shutdown requested; taking no new work, finishing in-flight reconciles"
        );
        signal_metrics.readiness.stopping();
        signal_token.cancel();
    });
    metrics.readiness.expect(IMAGEWATCH_CACHE);
    metrics.readiness.expect(promotion::POLICY_CACHE);

    // Registry events (webhooks, SQS, peers) → rescans and reconciles of the watches that use
    // the repository.
    let (event_tx, event_rx) = tokio::sync::mpsc::channel::<crate::triggers::RegistryEvent>(4096);
    let (reconcile_tx, reconcile_rx) = tokio::sync::mpsc::channel(4096);

    let server_token = tokio_util::sync::CancellationToken::new();
    let server_token_last = server_token.clone();
    let peer_routes = match &ctx.shards {
        Some(shards) => shard::peer_router(shards.clone(), event_tx.clone()),
        None => axum::Router::new(),
    };
    let server = tokio::spawn(crate::telemetry::serve(
        args.metrics_addr,
        metrics.clone(),
        peer_routes,
        async move { server_token.cancelled().await },
    ));
    tokio::spawn(export_queue_depths(
        metrics.clone(),
        ctx.clone(),
        event_tx.clone(),
        reconcile_tx.clone(),
        shutdown.clone(),
    ));
    // The cache keeps ImageWatches without their managedFields (more than half of each
    // object, and never read here: status is written by server-side apply).
    let (reader, writer) = kube::runtime::reflector::store();
    let watches = kube::runtime::reflector(
        writer,
        namespaces::watch::<DeserializeGuard<ImageWatch>>(
            client.clone(),
            &watched,
            watcher::Config::default().any_semantic(),
        )
        .modify(prune_cached),
    )
    .inspect(on_first_list({
        let (metrics, ctx) = (metrics.clone(), ctx.clone());
        move || {
            ctx.cache_synced.send_replace(true);
            metrics.readiness.met(IMAGEWATCH_CACHE);
        }
    }))
    .applied_objects();
    let controller = Controller::for_stream(watches, reader).with_config(
        kube::runtime::controller::Config::default().concurrency(
            (usize::from(args.max_concurrent_reconciles.max(1)) * WAITING_PER_WORK_SLOT)
                .min(usize::from(u16::MAX)) as u16,
        ),
    );
    let _ = ctx.store.set(controller.store());
    tokio::spawn(watch_metrics::export(
        metrics.clone(),
        controller.store(),
        shutdown.clone(),
    ));
    metrics.shards.set(i64::from(args.shards));
    let shard_task = match (&ctx.shards, acquired_shards) {
        (Some(shards), Some(acquired)) => {
            tokio::spawn(wake_acquired(
                acquired,
                controller.store(),
                ctx.clone(),
                reconcile_tx.clone(),
            ));
            Some(tokio::spawn(shards.clone().run(release.clone())))
        }
        _ => None,
    };
    if let Some(name) = args.allow_list_configmap.clone() {
        // A changed allow-list is applied to every watch at once, not at its next poll.
        let (store, wake) = (controller.store(), reconcile_tx.clone());
        let follow = allowance::follow(
            client.clone(),
            args.pod_namespace.clone(),
            name,
            ctx.allowance.clone(),
            move || {
                for watch in store.state() {
                    let _ = wake.try_send(ObjectRef::from_obj(watch.as_ref()));
                }
            },
        );
        tokio::spawn(follow);
        let started = std::time::Instant::now();
        while ctx.allowance.is_pending() && started.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    tokio::spawn(routing::route(
        event_rx,
        controller.store(),
        ctx.clone(),
        reconcile_tx,
    ));
    let event_sources = sources::start(
        &args,
        client.clone(),
        metrics.clone(),
        &aws,
        event_tx,
        &shutdown,
    );
    metrics.readiness.declared();
    let reconcile_requests = futures::stream::unfold(reconcile_rx, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    });

    let promotion_ctx = ctx.clone();
    let controller_token = shutdown.clone();
    let controller = controller
        .reconcile_on(reconcile_requests)
        // Graceful shutdown lets a reconcile that is pushing finish before the process exits,
        // so a commit is never left half-pushed by a rolling update.
        .graceful_shutdown_on(async move { controller_token.cancelled().await })
        .run(
            |watch, ctx| async move {
                let metrics = ctx.metrics.clone();
                timed(
                    &metrics,
                    IMAGEWATCH_CONTROLLER,
                    reconcile::reconcile(watch, ctx),
                )
                .await
            },
            error_policy,
            ctx,
        )
        .for_each({
            let metrics = metrics.clone();
            move |result| {
                if let Err(e) = result {
                    log_stream_error(&metrics, IMAGEWATCH_CONTROLLER, &e);
                }
                futures::future::ready(())
            }
        });
    tracing::info!("imagewatch controller started");
    // PromotionPolicies: their own controller, sharing this context, stopped by the same token.
    let promotions = promotion::run(
        promotion_ctx,
        promotion::PromotionOptions::from_run_args(&args),
        shutdown.clone(),
    );
    let work = async {
        futures::join!(
            async {
                controller.await;
                shutdown.cancel();
            },
            promotions,
            // The SQS consumer's last receive ends and its messages are handed back.
            futures::future::join_all(event_sources),
        )
    };
    let finished = run_until_deadline(work, &shutdown, args.shutdown_timeout).await;
    // Release the shards only after the last reconcile and batch, so another replica never
    // writes to a repository while this one still pushes. Abandoned work (past the deadline)
    // may still be pushing from a blocking task: its Leases are left to expire instead.
    if let Some(task) = shard_task {
        if finished {
            release.cancel();
            let _ = task.await;
        } else {
            tracing::warn!(
                timeout_s = args.shutdown_timeout.as_secs(),
                "in-flight work did not finish in time; abandoning it and leaving the Leases to expire"
            );
            task.abort();
        }
    } else if !finished {
        tracing::warn!(
            timeout_s = args.shutdown_timeout.as_secs(),
            "in-flight work did not finish in time; abandoning it"
        );
    }
    // The metrics server (with /readyz answering 503) stops last.
    server_token_last.cancel();
    match server.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(RunError::Metrics(e)),
        Err(e) => Err(RunError::Metrics(std::io::Error::other(e.to_string()))),
    }
}

/// The `controller` label of the ImageWatch controller's metrics.
const IMAGEWATCH_CONTROLLER: &str = "imagewatch";

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

/// Readiness condition: the ImageWatch cache holds its first list.
const IMAGEWATCH_CACHE: &str = "imagewatch-cache";

/// Runs `work` to its end; once `shutdown` is cancelled, for at most `timeout` more. True
/// when it ended.
async fn run_until_deadline<F: std::future::Future>(
    work: F,
    shutdown: &tokio_util::sync::CancellationToken,
    timeout: Duration,
) -> bool {
    tokio::pin!(work);
    tokio::select! {
        _ = &mut work => return true,
        () = shutdown.cancelled() => {}
    }
    tokio::time::timeout(timeout, work).await.is_ok()
}

/// Wakes the watches of each shard this replica takes over: their repositories are rescanned
/// (the previous holder may have seen events this replica did not).
async fn wake_acquired(
    mut acquired: tokio::sync::mpsc::UnboundedReceiver<u32>,
    store: kube::runtime::reflector::Store<DeserializeGuard<ImageWatch>>,
    ctx: Arc<Context>,
    reconcile: tokio::sync::mpsc::Sender<ObjectRef<DeserializeGuard<ImageWatch>>>,
) {
    let Some(shards) = ctx.shards.clone() else {
        return;
    };
    while let Some(shard) = acquired.recv().await {
        let mut woken = 0usize;
        for guard in store.state() {
            if let Ok(watch) = &guard.0 {
                // Watches without spec.git resolve their repository in the reconcile.
                if let Some(git) = &watch.spec.git
                    && shards.shard_for(&git.url) != shard
                {
                    continue;
                }
                if let Ok(repo) = crate::registry::RepositoryRef::parse(&watch.spec.image) {
                    ctx.index.invalidate(&repo.registry, &repo.path);
                }
            }
            woken += 1;
            if reconcile
                .send(ObjectRef::from_obj(guard.as_ref()))
                .await
                .is_err()
            {
                return;
            }
        }
        tracing::debug!(
            shard,
            watches = woken,
            "woke the watches of an acquired shard"
        );
    }
}

/// Exports the fill of the event and reconcile queues, the registry token fetches (as
/// credential refreshes) and the registry rate-limit waits, every few seconds.
async fn export_queue_depths<A, B>(
    metrics: Arc<Metrics>,
    ctx: Arc<Context>,
    events: tokio::sync::mpsc::Sender<A>,
    reconciles: tokio::sync::mpsc::Sender<B>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    use crate::telemetry::{
        CountDeltas, CredentialLabels, QueueLabels, RateLimitLabels, RegistryLabels,
    };
    let mut token_outcomes = CountDeltas::default();
    let mut requests = CountDeltas::default();
    let mut rate_limit_waits: HashMap<String, crate::registry::RateLimitWaits> = HashMap::new();
    let registry = &ctx.registry;
    loop {
        for (host, now) in registry.rate_limit_waits() {
            let before = rate_limit_waits.entry(host.clone()).or_default();
            let labels = RateLimitLabels { registry: host };
            metrics
                .registry_rate_limit_waits
                .get_or_create(&labels)
                .inc_by(now.requests.saturating_sub(before.requests));
            metrics
                .registry_rate_limit_wait_seconds
                .get_or_create(&labels)
                .inc_by(now.waited.saturating_sub(before.waited).as_secs_f64());
            *before = now;
        }
        // Token requests by outcome: a refused or failed one is not a refresh that worked.
        for (outcome, count) in registry.token_outcomes() {
            let added = token_outcomes.advance(outcome, count);
            metrics
                .credential_refreshes
                .get_or_create(&CredentialLabels {
                    kind: "registry-token".to_string(),
                    outcome: outcome.to_string(),
                })
                .inc_by(added);
        }
        // One count per HTTP request sent (retries and token requests included).
        let sent = registry
            .http_requests()
            .into_iter()
            .chain(ctx.ecr.http_requests());
        for ((host, outcome), count) in sent {
            let added = requests.advance((host.clone(), outcome), count);
            metrics
                .registry_requests
                .get_or_create(&RegistryLabels {
                    registry: host,
                    outcome: outcome.to_string(),
                })
                .inc_by(added);
        }
        for (name, depth) in [
            ("events", events.max_capacity() - events.capacity()),
            (
                "reconciles",
                reconciles.max_capacity() - reconciles.capacity(),
            ),
        ] {
            metrics
                .queue_depth
                .get_or_create(&QueueLabels {
                    queue: name.to_string(),
                })
                .set(depth as i64);
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
}

/// Waits (bounded) for the ImageWatch CRD to be served, so a fresh install does not crash-loop
/// while the CRDs are being established. Asked in `namespace` when the operator watches a
/// list of namespaces (its RBAC may grant nothing at cluster scope).
async fn wait_for_crd(client: &Client, namespace: Option<&str>) -> Result<(), RunError> {
    let api: Api<ImageWatch> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut last = String::new();
    for attempt in 0..60u32 {
        match api.list(&kube::api::ListParams::default().limit(1)).await {
            Ok(_) => return Ok(()),
            Err(e) => {
                last = e.to_string();
                if attempt % 10 == 0 {
                    tracing::warn!(error = %last, "waiting for the ImageWatch CRD");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    Err(RunError::CrdMissing(last))
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = tokio::signal::ctrl_c() => {},
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Errors returned by `reconcile` are failures to talk to the Kubernetes API while recording
/// status: retry with backoff.
fn error_policy(
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
    let name = match &obj.0 {
        Ok(o) => format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any()),
        Err(e) => e.metadata.name.clone().unwrap_or_default(),
    };
    tracing::warn!(watch = %name, error = %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(10))
}

/// Drops what the operator never reads from a cached ImageWatch: managedFields and kubectl's
/// copy of the last applied object.
fn prune_cached(guard: &mut DeserializeGuard<ImageWatch>) {
    if let Ok(watch) = &mut guard.0 {
        watch.metadata.managed_fields = None;
        if let Some(annotations) = &mut watch.metadata.annotations {
            annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }
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
