//! Delivery of notifications (`spec.notify`): the messages a reconcile found
//! (`imagewatch_engine::notify`), sent after its status write, in the background.
//!
//! - **Never in the way of a commit**: [`Notifier::send`] only spawns; a reconcile never waits
//!   for a destination. At most [`MAX_IN_FLIGHT`] messages wait or are being sent at once;
//!   beyond that a message is dropped and counted (`outcome="dropped"`).
//! - **Once per happening**: a happening is found only by the reconcile whose status write
//!   records it (see the engine module), and each message carries its id in
//!   `X-Imagewatch-Delivery` so a receiver can drop a repeat.
//! - **Retried**: a timeout, a 429 or a 5xx answer is tried again after 1, 2, 4 and 8 s (or
//!   the `Retry-After` it names, up to a minute); other answers fail at once. A message that
//!   fails is a Warning Event `NotificationFailed` on the object and
//!   `imagewatch_notifications_total{outcome="failed"}`; the object's reconcile is unaffected.
//! - **Rate-limited** per destination to one message per second, Slack's documented limit
//!   for an incoming webhook: messages to one destination leave in order, a second apart.
//! - **Secrets**: the URL and token come from the destination's Secret in the object's own
//!   namespace; errors name the Secret and its keys, never a value, and no URL is logged.
//!
//! The limiter and the in-flight bound are a few lines over tokio's clock and semaphore: one
//! spacing per destination is all they do, where a rate-limiting crate would bring buckets,
//! jitter and a clock abstraction this does not use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use imagewatch_crd::{Notification, NotificationType};
use imagewatch_engine::notify::{self as messages, Message, Outgoing, Subject};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use sha2::Sha256;

use crate::cluster::secrets::{self, SecretAccess, SecretCache};
use crate::forge::ForgeClient;
use crate::telemetry::{Metrics, NotificationLabels};

/// Messages waiting or being sent at once, beyond which new ones are dropped.
pub const MAX_IN_FLIGHT: usize = 256;
/// Tries per message.
const ATTEMPTS: u32 = 5;
/// Messages to one destination are this far apart.
const SPACING: Duration = Duration::from_secs(1);
/// Request timeout.
const TIMEOUT: Duration = Duration::from_secs(10);

/// What a message is sent with.
struct Shared {
    client: kube::Client,
    secrets: SecretCache,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    http: Option<reqwest::Client>,
    in_flight: Arc<tokio::sync::Semaphore>,
    /// When the last message to each destination (namespace, object, name) leaves.
    next_slot: Mutex<HashMap<(String, String, String), Instant>>,
}

impl SecretAccess for Shared {
    fn client(&self) -> &kube::Client {
        &self.client
    }
    fn secret_cache(&self) -> &SecretCache {
        &self.secrets
    }
    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// Sends notifications in the background. Cheap to clone.
#[derive(Clone)]
pub struct Notifier {
    shared: Arc<Shared>,
}

/// Where a message goes: the destination, and the object's Git repository (for commit
/// statuses and pull request comments).
#[derive(Clone, Debug)]
pub struct Target {
    /// The object, for the Event of a failure.
    pub object: ObjectReference,
    /// What the message is about.
    pub subject: Subject,
    /// The object's Git URL.
    pub git_url: Option<String>,
}

impl Notifier {
    /// A notifier reading Secrets with `client`.
    pub fn new(client: kube::Client, metrics: Arc<Metrics>, recorder: Recorder) -> Self {
        let http = crate::http::client("notification", TIMEOUT)
            .map_err(|e| tracing::error!(error = %e))
            .ok();
        Self {
            shared: Arc::new(Shared {
                client,
                secrets: secrets::secret_cache(),
                metrics,
                recorder,
                http,
                in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
                next_slot: Mutex::default(),
            }),
        }
    }

    /// Sends each of `outgoing` to its destination of `destinations`, in the background.
    pub fn send(&self, target: &Target, destinations: &[Notification], outgoing: Vec<Outgoing>) {
        for out in outgoing {
            let Some(destination) = destinations
                .iter()
                .find(|d| d.name == out.destination)
                .cloned()
            else {
                continue;
            };
            let Ok(permit) = self.shared.in_flight.clone().try_acquire_owned() else {
                count(&self.shared.metrics, &destination, &out.message, "dropped");
                tracing::warn!(object = %target.subject.name, destination = %destination.name, "too many notifications waiting: one dropped");
                continue;
            };
            let shared = self.shared.clone();
            let target = target.clone();
            tokio::spawn(async move {
                let _permit = permit;
                deliver(&shared, &target, &destination, &out.message).await;
            });
        }
    }
}

fn count(metrics: &Metrics, destination: &Notification, message: &Message, outcome: &str) {
    metrics
        .notifications
        .get_or_create(&NotificationLabels {
            r#type: destination.type_.as_str().to_owned(),
            happening: message.kind.as_str().to_owned(),
            outcome: outcome.to_owned(),
        })
        .inc();
}

/// Why a try failed, and whether another may do better.
struct Failed {
    why: String,
    again: bool,
    after: Option<Duration>,
}

async fn deliver(shared: &Shared, target: &Target, destination: &Notification, message: &Message) {
    wait_turn(shared, target, destination).await;
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
        match try_once(shared, target, destination, message).await {
            Ok(()) => {
                count(&shared.metrics, destination, message, "sent");
                tracing::info!(object = %target.subject.name, namespace = %target.subject.namespace, destination = %destination.name, id = %message.id, "notification sent");
                return;
            }
            Err(failed) => {
                last = failed.why;
                if !failed.again || attempt + 1 == ATTEMPTS {
                    break;
                }
                let backoff = failed
                    .after
                    .unwrap_or(Duration::from_secs(1 << attempt))
                    .min(Duration::from_secs(60));
                tokio::time::sleep(backoff).await;
            }
        }
    }
    count(&shared.metrics, destination, message, "failed");
    tracing::warn!(object = %target.subject.name, namespace = %target.subject.namespace, destination = %destination.name, id = %message.id, error = %last, "notification failed");
    let event = Event {
        type_: EventType::Warning,
        reason: "NotificationFailed".into(),
        note: Some(imagewatch_engine::status::truncate(
            &format!(
                "{} ({:?}): {:?} {}: {last}",
                destination.name, destination.type_, message.kind, message.id
            ),
            1024,
        )),
        action: "Notify".into(),
        secondary: None,
    };
    if let Err(e) = shared.recorder.publish(&event, &target.object).await {
        tracing::debug!(error = %e, "cannot publish the NotificationFailed Event");
    }
}

/// Waits until this destination's next slot: one message per [`SPACING`].
async fn wait_turn(shared: &Shared, target: &Target, destination: &Notification) {
    let key = (
        target.subject.namespace.clone(),
        target.subject.name.clone(),
        destination.name.clone(),
    );
    let at = {
        let mut slots = shared.next_slot.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if slots.len() > 10_000 {
            slots.retain(|_, at| *at > now);
        }
        let at = slots
            .get(&key)
            .map_or(now, |last| (*last + SPACING).max(now));
        slots.insert(key, at);
        at
    };
    tokio::time::sleep_until(at.into()).await;
}

/// The `address` and `token` keys of the destination's Secret.
async fn secret(
    shared: &Shared,
    namespace: &str,
    destination: &Notification,
) -> Result<(Option<String>, Option<String>), Failed> {
    secrets::notification_secret(shared, namespace, &destination.secret_ref.name)
        .await
        .map_err(|e| Failed {
            why: e.to_string(),
            again: false,
            after: None,
        })
}

async fn try_once(
    shared: &Shared,
    target: &Target,
    destination: &Notification,
    message: &Message,
) -> Result<(), Failed> {
    let refuse = |why: String| Failed {
        why,
        again: false,
        after: None,
    };
    let namespace = &target.subject.namespace;
    let http = shared
        .http
        .clone()
        .ok_or_else(|| refuse("no HTTP client".into()))?;
    match destination.type_ {
        NotificationType::Slack | NotificationType::Teams | NotificationType::Webhook => {
            let (address, token) = secret(shared, namespace, destination).await?;
            let address = address.ok_or_else(|| {
                refuse(format!(
                    "Secret {namespace}/{} has no key address (the webhook URL)",
                    destination.secret_ref.name
                ))
            })?;
            if !(address.starts_with("https://") || address.starts_with("http://")) {
                return Err(refuse(format!(
                    "the address in Secret {namespace}/{} is not an http(s) URL",
                    destination.secret_ref.name
                )));
            }
            let body = match destination.type_ {
                NotificationType::Slack => messages::slack(&target.subject, message),
                NotificationType::Teams => messages::teams(&target.subject, message),
                _ => messages::webhook(&target.subject, message, jiff::Timestamp::now()),
            };
            let body = serde_json::to_vec(&body).map_err(|e| refuse(e.to_string()))?;
            let mut request = http
                .post(&address)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header("X-Imagewatch-Delivery", &message.id);
            if destination.type_ == NotificationType::Webhook
                && let Some(key) = token
            {
                request = request.header("X-Signature", signature(key.as_bytes(), &body));
            }
            let answer = request.body(body).send().await.map_err(|e| Failed {
                // The error text can hold the URL: say what kind of failure it was.
                why: if e.is_timeout() {
                    "timed out".into()
                } else if e.is_connect() {
                    "cannot connect".into()
                } else {
                    "request failed".into()
                },
                again: true,
                after: None,
            })?;
            let status = answer.status();
            if status.is_success() {
                return Ok(());
            }
            let after = crate::forge::retry_after_of(answer.headers());
            Err(Failed {
                why: format!("HTTP {}", status.as_u16()),
                again: status.is_server_error() || status.as_u16() == 429,
                after,
            })
        }
        NotificationType::CommitStatus | NotificationType::PullRequestComment => {
            let forge = forge(shared, target, destination, http).await?;
            let result = match destination.type_ {
                NotificationType::CommitStatus => {
                    let Some((sha, description, context)) =
                        messages::commit_status(&target.subject, message)
                    else {
                        return Ok(());
                    };
                    forge
                        .set_commit_status(
                            &sha,
                            message.good,
                            &description,
                            &context,
                            message.link.as_deref(),
                        )
                        .await
                }
                _ => {
                    let Some((number, body)) = messages::pull_request_comment(message) else {
                        return Ok(());
                    };
                    forge.comment(number, &body).await
                }
            };
            result.map_err(|e| Failed {
                again: crate::forge::try_again_later(&e),
                after: e.retry_after(),
                why: e.to_string(),
            })
        }
    }
}

async fn forge(
    shared: &Shared,
    target: &Target,
    destination: &Notification,
    http: reqwest::Client,
) -> Result<ForgeClient, Failed> {
    let refuse = |why: String| Failed {
        why,
        again: false,
        after: None,
    };
    let provider = destination
        .provider
        .ok_or_else(|| refuse("provider is required".into()))?;
    let git_url = target.git_url.as_deref().ok_or_else(|| {
        refuse("the object names no Git URL (spec.git.url or spec.to.git.url)".into())
    })?;
    let token = secrets::forge_token(
        shared,
        &target.subject.namespace,
        &destination.secret_ref.name,
    )
    .await
    .map_err(|e| refuse(e.to_string()))?;
    ForgeClient::new(
        provider,
        destination.api_url.as_deref(),
        None,
        git_url,
        Some(token),
        http,
    )
    .map(|c| c.with_metrics(shared.metrics.clone()))
    .map_err(|e| refuse(e.to_string()))
}

/// `sha256=<hex>` of the HMAC-SHA256 of `body` under `key`.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_signature_is_the_hmac_sha256_of_the_body_in_hex() {
        // RFC 4231, test case 2.
        assert_eq!(
            super::signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
