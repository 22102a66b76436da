//! Event sources the controller starts from its flags: the registry webhook receiver and the
//! SQS consumer. Each forwards [`RegistryEvent`]s to the router; none decides anything.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use tokio::{sync::mpsc, task::JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::{
    cli::RunArgs,
    telemetry::{Metrics, WebhookLabels},
    triggers::{
        RegistryEvent,
        webhook::{Provider, WebhookSecrets, WebhookState},
    },
};

/// How often the webhook Secret is re-read (rotation without restart).
const SECRET_RELOAD: Duration = Duration::from_secs(30);

/// Starts the configured sources; they stop on `shutdown`.
pub fn start(
    args: &RunArgs,
    client: Client,
    metrics: Arc<Metrics>,
    aws: &aws_config::SdkConfig,
    events: mpsc::Sender<RegistryEvent>,
    shutdown: &CancellationToken,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    if let Some(queue_url) = &args.sqs_queue_url {
        let mut options = crate::triggers::sqs::SqsOptions::new(queue_url.clone());
        options.default_account = args.sqs_default_account.clone();
        options.endpoint_url = args.aws_endpoint_url.clone();
        match crate::triggers::sqs::SqsConsumer::new(aws, options) {
            Ok(consumer) => {
                let token = shutdown.clone();
                let sink = events.clone();
                tasks.push(tokio::spawn(async move { consumer.run(sink, token).await }));
            }
            Err(e) => tracing::error!(error = %e, "SQS consumer not started"),
        }
    }
    if let Some(addr) = args.webhook_addr {
        let mut state = WebhookState::new(WebhookSecrets::none(), events.clone())
            .with_body_limit(args.webhook_body_limit);
        if let Some(host) = &args.distribution_host {
            state = state.with_distribution_host(host.clone());
        }
        tasks.push(tokio::spawn(reload_secrets(
            client.clone(),
            args.pod_namespace.clone(),
            args.webhook_secret.clone(),
            state.clone(),
            metrics.clone(),
            shutdown.clone(),
        )));
        let token = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(e) =
                crate::triggers::webhook::serve(addr, state, async move { token.cancelled().await })
                    .await
            {
                tracing::error!(error = %e, %addr, "webhook receiver stopped");
            }
        }));
    }
    tasks
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
        export_counters(&state, &metrics);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(SECRET_RELOAD) => {}
        }
    }
}

fn export_counters(state: &WebhookState, metrics: &Metrics) {
    for (provider, snapshot) in state.counters().snapshot() {
        let set = |result: &str, value: u64| {
            metrics
                .webhook_requests
                .get_or_create(&WebhookLabels {
                    provider: Provider::name(provider).to_string(),
                    result: result.to_string(),
                })
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        set("accepted", snapshot.accepted);
        set("ignored", snapshot.ignored);
        set("rejected_auth", snapshot.rejected_auth);
        set("malformed", snapshot.malformed);
        set("too_large", snapshot.too_large);
        set("dropped", snapshot.dropped);
    }
}
