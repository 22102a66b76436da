//! The configuration of the event sources: the binary's `config::Config` hands this part
//! down (and re-exports it).

use std::net::SocketAddr;

/// The event sources that say "look now".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcesConfig {
    /// The registry webhook receiver; None: no receiver.
    pub webhook: Option<WebhookConfig>,
    /// The SQS consumer of EventBridge "ECR Image Action" events; None: no consumer.
    pub sqs: Option<SqsConfig>,
}

/// The registry webhook receiver (`/hooks/*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Address it listens on.
    pub addr: SocketAddr,
    /// Namespace of the Secret with the webhook tokens (the operator's own).
    pub secret_namespace: String,
    /// Name of that Secret.
    pub secret_name: String,
    /// Host name watches use for the CNCF distribution registry, when it differs from the
    /// Host header pushers use.
    pub distribution_host: Option<String>,
    /// Largest body accepted, in bytes.
    pub body_limit: usize,
}

/// The SQS consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsConfig {
    /// Queue URL.
    pub queue_url: String,
    /// AWS account assumed for events that do not name one.
    pub default_account: Option<String>,
    /// Endpoint for SQS requests (VPC endpoints, emulators).
    pub endpoint_url: Option<String>,
}
