//! Wiring of `imagewatch run`: [`Config`] → shared services (Kubernetes client, registry
//! clients, git writer, caches, shards) → the controllers and event sources; then the ordered
//! shutdown (no new work → in-flight reconciles and batches finish → Leases released →
//! metrics server stopped).
//!
//! Only this module turns configuration into running parts: each subsystem gets its own part
//! of the [`Config`] and the services it uses, passed explicitly.

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures::StreamExt;
use imagewatch_crd::ImageWatch;
use kube::{
    Api, Client,
    core::DeserializeGuard,
    runtime::{Controller, WatchStreamExt, reflector::ObjectRef, watcher},
};

use crate::{
    cluster::{allowance, namespaces, shard},
    config::Config,
    controllers::{
        Context, IMAGEWATCH_CONTROLLER, WAITING_PER_WORK_SLOT, error_policy, imagewatch,
        log_stream_error, on_first_list, promotion, sweep, timed,
    },
    registry::{RegistryClient, RegistryOptions},
    sources::{routing, start as sources},
    telemetry::{Metrics, watch_metrics},
    writer,
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

/// ImageWatch changes the shared cache holds for its subscribers (the PromotionPolicy
/// controller) before the watch waits for them to catch up.
const IMAGEWATCH_FANOUT_BUFFER: usize = 1024;

/// `imagewatch run`: runs the controller until SIGTERM/SIGINT.
pub async fn run(config: Config) -> Result<(), RunError> {
    std::fs::create_dir_all(&config.writer.cache_dir).map_err(|source| RunError::CacheDir {
        path: config.writer.cache_dir.display().to_string(),
        source,
    })?;
    let client = Client::try_default().await.map_err(RunError::Client)?;
    let watched = &config.kube.namespaces;
    wait_for_crd(&client, watched.first().map(String::as_str)).await?;

    let metrics = Arc::new(Metrics::new());
    let registries = match &config.registry.registries_config {
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
            insecure_hosts: config.registry.insecure_registries.clone(),
            user_agent: format!("imagewatch/{}", env!("CARGO_PKG_VERSION")),
            timeout: config.registry.timeout,
        },
        registries,
    )
    .map_err(|e| RunError::Config(format!("registry client: {e}")))?;
    let writer = writer::GitWriter::with_options(
        &config.writer.cache_dir,
        writer_options(&config.writer).map_err(RunError::SigningKey)?,
        metrics.clone(),
    );
    // One AWS configuration (and so one credential cache) for ECR and SQS, loaded by the first
    // ECR request or the SQS consumer: never without AWS (no instance-metadata lookups).
    let aws = crate::registry::ecr::LazyAwsConfig::new();
    let ecr = crate::registry::ecr::EcrTagSource::lazy(
        aws.clone(),
        crate::registry::ecr::EcrOptions {
            endpoint_url: config.registry.ecr_endpoint_url.clone(),
        },
    );
    let mut acquired_shards = None;
    let mut shards = None;
    if config.shard.shards > 0 {
        let identity = config
            .shard
            .identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("imagewatch-{}", std::process::id()));
        let (manager, acquired) = shard::ShardManager::new(
            client.clone(),
            shard::ShardOptions {
                shards: config.shard.shards,
                lease_duration: config.shard.lease_duration,
                namespace: config.shard.namespace.clone(),
                identity: identity.clone(),
                prefix: config.shard.lease_prefix.clone(),
                peer_url: config.shard.peer_url.clone(),
            },
            metrics.clone(),
        );
        if let Err(e) = manager.load_peer_token().await {
            tracing::warn!(error = %e, "cannot read or create the peer token Secret; registry events received here are not forwarded to other replicas");
        }
        tracing::info!(shards = config.shard.shards, %identity, "sharding by Git repository over Leases");
        shards = Some(manager);
        acquired_shards = Some(acquired);
    }
    // One watch on ImageWatches serves both controllers: the PromotionPolicy controller
    // subscribes to this cache. A watch of its own made the API server list and send every
    // ImageWatch twice and this process decode each twice (measured: 200 of the 301 list
    // pages and half the watch events of a 50,000-watch first sync).
    let (reader, cache_writer) = kube::runtime::reflector::store_shared(IMAGEWATCH_FANOUT_BUFFER);
    let ctx = Arc::new(Context::new(crate::controllers::Services {
        client: client.clone(),
        registry,
        writer,
        metrics: metrics.clone(),
        max_tags: config.scan.max_tags,
        ecr,
        store: reader.clone(),
        argocd_namespace: config.controllers.argocd_namespace.clone(),
        deploys: Arc::new(crate::cluster::deploy::DeployTracker::new(
            crate::cluster::deploy::DeployOptions {
                enabled: config.controllers.argocd_refresh,
                argocd_namespace: config.controllers.argocd_namespace.clone(),
                timeout: config.controllers.argocd_deploy_timeout,
            },
        )),
        allowance: match &config.controllers.allow_list_configmap {
            Some(name) => Arc::new(allowance::Allowance::expecting(name)),
            None => Arc::default(),
        },
        work_slots: usize::from(config.controllers.max_concurrent_reconciles),
        shards,
        forge_http: crate::http::client("forge", Duration::from_secs(30))
            .map_err(RunError::Config)?,
    }));

    // Shutdown, in order: `shutdown` stops new work (watches, event sources, readiness);
    // in-flight reconciles and batches finish (up to `--shutdown-timeout`); only then are the
    // Leases released (`release`) and the metrics server stopped.
    let shutdown = tokio_util::sync::CancellationToken::new();
    let release = tokio_util::sync::CancellationToken::new();
    let signal_token = shutdown.clone();
    let signal_metrics = metrics.clone();
    let shutdown_timeout = config.shutdown_timeout;
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
    let (event_tx, event_rx) = tokio::sync::mpsc::channel::<crate::sources::RegistryEvent>(4096);
    let (reconcile_tx, reconcile_rx) = tokio::sync::mpsc::channel(4096);

    let server_token = tokio_util::sync::CancellationToken::new();
    let server_token_last = server_token.clone();
    let peer_routes = match &ctx.shards {
        Some(shards) => shard::peer_router(shards.clone(), event_tx.clone()),
        None => axum::Router::new(),
    };
    // Bound before anything starts: an address in use stops the process at once, instead of
    // leaving it running without /metrics and /readyz.
    let listener = tokio::net::TcpListener::bind(config.telemetry.metrics_addr)
        .await
        .map_err(RunError::Metrics)?;
    let server = tokio::spawn(crate::telemetry::serve(
        listener,
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
    // object, and never read here: status is written whole, as a JSON patch).
    let promotion_triggers = cache_writer
        .subscribe()
        .ok_or_else(|| RunError::Config("the ImageWatch cache cannot be subscribed to".into()))?;
    // Events the ImageWatch cache applied (the watch metrics summarize it again after one).
    let watch_changes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watches = kube::runtime::reflector(
        cache_writer,
        namespaces::watch::<DeserializeGuard<ImageWatch>>(
            client.clone(),
            watched,
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
    .inspect({
        let changes = watch_changes.clone();
        move |_| {
            changes.fetch_add(1, std::sync::atomic::Ordering::Release);
        }
    })
    .applied_objects();
    let controller = Controller::for_stream(watches, reader).with_config(
        kube::runtime::controller::Config::default().concurrency(
            (usize::from(config.controllers.max_concurrent_reconciles.max(1))
                * WAITING_PER_WORK_SLOT)
                .min(usize::from(u16::MAX)) as u16,
        ),
    );
    tokio::spawn(watch_metrics::export(
        metrics.clone(),
        controller.store(),
        watch_changes,
        shutdown.clone(),
    ));
    tokio::spawn(sweep::run(ctx.clone()));
    metrics.shards.set(i64::from(config.shard.shards));
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
    if let Some(name) = config.controllers.allow_list_configmap.clone() {
        // A changed allow-list is applied to every watch at once, not at its next poll.
        let (store, wake) = (controller.store(), reconcile_tx.clone());
        let follow = allowance::follow(
            client.clone(),
            config.kube.pod_namespace.clone(),
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
    if let Some(name) = config.controllers.freeze_configmap.clone() {
        // A freeze set or lifted applies to every watch and policy at once: the change that
        // waited is written when the freeze lifts, not at the next poll.
        let (store, wake, ctx_freeze) = (controller.store(), reconcile_tx.clone(), ctx.clone());
        tokio::spawn(crate::cluster::freeze::follow(
            client.clone(),
            config.kube.pod_namespace.clone(),
            name,
            ctx.freezes.clone(),
            move || {
                ctx_freeze
                    .metrics
                    .freezes
                    .set(ctx_freeze.freezes.count() as i64);
                for watch in store.state() {
                    let _ = wake.try_send(ObjectRef::from_obj(watch.as_ref()));
                }
                ctx_freeze.freeze_changes.send_modify(|n| *n += 1);
            },
        ));
    }
    // Commits followed to the Argo CD Applications deploying them; a deployment that ends
    // wakes its watch, whose status step writes `Deployed`.
    tokio::spawn(crate::cluster::deploy::run(
        ctx.deploys.clone(),
        client.clone(),
        ctx.writer.clones().clone(),
        ctx.recorder.clone(),
        metrics.clone(),
        reconcile_tx.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(routing::route(
        event_rx,
        controller.store(),
        ctx.clone(),
        reconcile_tx,
    ));
    let event_sources = sources::start(
        &config.sources,
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
                    imagewatch::reconcile(watch, ctx),
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
        promotion::PromotionOptions::from_config(&config.promotion),
        promotion_triggers,
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
    let finished = run_until_deadline(work, &shutdown, config.shutdown_timeout).await;
    // Release the shards only after the last reconcile and batch, so another replica never
    // writes to a repository while this one still pushes. Abandoned work (past the deadline)
    // may still be pushing from a blocking task: its Leases are left to expire instead.
    if let Some(task) = shard_task {
        if finished {
            release.cancel();
            let _ = task.await;
        } else {
            tracing::warn!(
                timeout_s = config.shutdown_timeout.as_secs(),
                "in-flight work did not finish in time; abandoning it and leaving the Leases to expire"
            );
            task.abort();
        }
    } else if !finished {
        tracing::warn!(
            timeout_s = config.shutdown_timeout.as_secs(),
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

/// The git writer's options from its part of the configuration; loads the signing key.
fn writer_options(
    config: &crate::config::WriterConfig,
) -> Result<writer::WriterOptions, crate::git::SigningKeyError> {
    let signer = match &config.signing_key {
        Some(path) => {
            let signer = crate::git::CommitSigner::from_file(path)?;
            tracing::info!(format = signer.format(), key = %signer.key_id(), "signing commits");
            Some(signer)
        }
        None => None,
    };
    #[cfg(feature = "test-hooks")]
    let crash_point = config
        .crash_point
        .as_deref()
        .and_then(crate::git::WritePoint::from_name);
    #[cfg(feature = "test-hooks")]
    if let Some(point) = crash_point {
        tracing::warn!(
            point = point.name(),
            "test hook: the process will abort at this point of the first git write"
        );
    }
    Ok(writer::WriterOptions {
        push_attempts: config.push_attempts,
        batch_window: config.batch_window,
        batch_quiet: config.batch_quiet,
        reuse_fetch: config.read_reuse,
        // The CLI refused a template that does not parse.
        commit_template: writer::CommitTemplate::parse(&config.commit_template).unwrap_or_default(),
        signer,
        #[cfg(feature = "test-hooks")]
        crash_point,
        ..writer::WriterOptions::new(crate::git::Author {
            name: config.author.name.clone(),
            email: config.author.email.clone(),
        })
    })
}
