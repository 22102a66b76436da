//! Event sources the controller starts from its configuration: the registry webhook receiver
//! and the SQS consumer. Each forwards [`RegistryEvent`]s to the router; none decides anything.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use tokio::{sync::mpsc, task::JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::{
    RegistryEvent,
    config::SourcesConfig,
    webhook::{Provider, WebhookSecrets, WebhookState},
};
use imagewatch_telemetry::{Metrics, WebhookLabels};

/// How often the webhook Secret is re-read (rotation without restart).
const SECRET_RELOAD: Duration = Duration::from_secs(30);

/// Starts the configured sources; they stop on `shutdown`.
pub fn start(
    config: &SourcesConfig,
    client: Client,
    metrics: Arc<Metrics>,
    aws: &imagewatch_registry::ecr::LazyAwsConfig,
    events: mpsc::Sender<RegistryEvent>,
    shutdown: &CancellationToken,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    if let Some(sqs) = &config.sqs {
        let mut options = crate::sqs::SqsOptions::new(sqs.queue_url.clone());
        options.default_account = sqs.default_account.clone();
        options.endpoint_url = sqs.endpoint_url.clone();
        let aws = aws.clone();
        let token = shutdown.clone();
        let sink = events.clone();
        let metrics = metrics.clone();
        tasks.push(tokio::spawn(async move {
            let region = crate::sqs::region_from_queue_url(&options.queue_url);
            let sdk_config = aws.get(region.as_deref()).await;
            match crate::sqs::SqsConsumer::new(&sdk_config, options) {
                Ok(consumer) => {
                    let counters = consumer.counters();
                    let stopped = CancellationToken::new();
                    let exporter = tokio::spawn(export_sqs_counters(
                        counters.clone(),
                        metrics.clone(),
                        stopped.clone(),
                    ));
                    consumer.run(sink, token).await;
                    // The exporter adds the figures of the receive that finished during
                    // shutdown, then ends.
                    stopped.cancel();
                    let _ = exporter.await;
                }
                Err(e) => tracing::error!(error = %e, "SQS consumer not started"),
            }
        }));
    }
    if let Some(webhook) = &config.webhook {
        let addr = webhook.addr;
        let mut state = WebhookState::new(WebhookSecrets::none(), events.clone())
            .with_body_limit(webhook.body_limit);
        if let Some(host) = &webhook.distribution_host {
            state = state.with_distribution_host(host.clone());
        }
        tasks.push(tokio::spawn(reload_secrets(
            client.clone(),
            webhook.secret_namespace.clone(),
            webhook.secret_name.clone(),
            state.clone(),
            metrics.clone(),
            shutdown.clone(),
        )));
        let token = shutdown.clone();
        metrics.readiness.expect(WEBHOOK_LISTENER);
        let readiness_metrics = metrics.clone();
        tasks.push(tokio::spawn(async move {
            let listener = match tokio::net::TcpListener::bind(addr).await {
                Ok(listener) => listener,
                Err(e) => {
                    // Never Ready: the Service must not send registry notifications here.
                    tracing::error!(error = %e, %addr, "cannot listen for registry webhooks");
                    return;
                }
            };
            readiness_metrics.readiness.met(WEBHOOK_LISTENER);
            let shutdown = async move { token.cancelled().await };
            if let Err(e) = crate::webhook::serve_listener(listener, state, shutdown).await {
                tracing::error!(error = %e, %addr, "webhook receiver stopped");
            }
        }));
    }
    tasks
}

/// Readiness condition: the webhook listener is bound.
const WEBHOOK_LISTENER: &str = "webhook-listener";

/// How often the SQS consumer's counters are copied into the metrics.
const SQS_EXPORT: Duration = Duration::from_secs(5);

/// Adds the SQS consumer's new counts to `imagewatch_sqs_messages_total` until `shutdown`,
/// and once more then.
async fn export_sqs_counters(
    counters: Arc<crate::sqs::SqsCounters>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let mut deltas = imagewatch_telemetry::CountDeltas::default();
    loop {
        export_sqs_once(&counters, &metrics, &mut deltas);
        tokio::select! {
            _ = shutdown.cancelled() => {
                export_sqs_once(&counters, &metrics, &mut deltas);
                return;
            }
            _ = tokio::time::sleep(SQS_EXPORT) => {}
        }
    }
}

fn export_sqs_once(
    counters: &crate::sqs::SqsCounters,
    metrics: &Metrics,
    deltas: &mut imagewatch_telemetry::CountDeltas<String>,
) {
    for (result, value) in counters.snapshot() {
        let added = deltas.advance(result.to_string(), value);
        metrics
            .sqs_messages
            .get_or_create(&imagewatch_telemetry::SqsLabels {
                result: result.to_string(),
            })
            .inc_by(added);
    }
}

/// Re-reads the webhook Secret and exports the receiver's counters, until shutdown.
async fn reload_secrets(
    client: Client,
    namespace: String,
    name: String,
    state: WebhookState,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let api: Api<Secret> = Api::namespaced(client, &namespace);
    let mut last_error = String::new();
    let mut deltas = imagewatch_telemetry::CountDeltas::default();
    loop {
        match api.get_opt(&name).await {
            Ok(Some(secret)) => {
                let data: BTreeMap<String, Vec<u8>> = secret
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                state.replace_secrets(WebhookSecrets::from_secret_data(&data));
                last_error.clear();
            }
            Ok(None) => {
                let message = format!(
                    "webhook Secret {namespace}/{name} not found: every provider is disabled"
                );
                if message != last_error {
                    tracing::warn!("{message}");
                    last_error = message;
                }
                state.replace_secrets(WebhookSecrets::none());
            }
            Err(e) => {
                let message = format!("cannot read webhook Secret {namespace}/{name}: {e}");
                if message != last_error {
                    tracing::warn!("{message}");
                    last_error = message;
                }
            }
        }
        export_counters(&state, &metrics, &mut deltas);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(SECRET_RELOAD) => {}
        }
    }
}

fn export_counters(
    state: &WebhookState,
    metrics: &Metrics,
    deltas: &mut imagewatch_telemetry::CountDeltas<WebhookLabels>,
) {
    for (provider, snapshot) in state.counters().snapshot() {
        let mut set = |result: &str, value: u64| {
            let labels = WebhookLabels {
                provider: Provider::name(provider).to_string(),
                result: result.to_string(),
            };
            let added = deltas.advance(labels.clone(), value);
            metrics
                .webhook_requests
                .get_or_create(&labels)
                .inc_by(added);
        };
        set("accepted", snapshot.accepted);
        set("ignored", snapshot.ignored);
        set("rejected_auth", snapshot.rejected_auth);
        set("malformed", snapshot.malformed);
        set("too_large", snapshot.too_large);
        set("dropped", snapshot.dropped);
    }
}
