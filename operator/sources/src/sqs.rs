//! SQS trigger: ECR push events routed by EventBridge (optionally through SNS) into a queue.
//!
//! [`SqsConsumer::run`] long-polls the queue (`ReceiveMessage`, up to 20 s, up to 10
//! messages), parses every message with [`parse_message`], sends the resulting
//! [`RegistryEvent`]s into the trigger channel, and deletes each handled message with one
//! `DeleteMessageBatch` per receive.
//!
//! # Delivery guarantees
//!
//! A message is deleted only after its event was handed to the channel (or after it was
//! found to need nothing). Until then SQS's visibility timeout hides it from other
//! receivers, and it comes back when the timeout runs out — after a crash or a failed
//! delete. So several replicas consuming the same queue is safe: each message is handled by
//! one of them at a time, and at worst handled twice.
//! Handling twice is harmless, because an event only asks for a rescan of the repository
//! and the registry's answer decides. (A message deleted whose rescan is then lost to a
//! crash is caught by the polling interval.)
//!
//! # Shutdown
//!
//! A pending long-poll receive is not dropped on shutdown: SQS may already have handed it
//! messages, which would then stay invisible for the queue's whole visibility timeout. The
//! receive is allowed to end (within the wait time, 20 s at most), and every message it
//! brought — like every message of a batch interrupted by the shutdown — is made visible
//! again at once (`ChangeMessageVisibility` 0) for the replicas that keep running. Nothing
//! is received after the shutdown began.
//!
//! # Malformed messages
//!
//! A body that is not an ECR event (see [`EventError`]) is logged at `warn` once per
//! message (on its first receipt, from SQS's `ApproximateReceiveCount`) and counted in
//! [`SqsCounters::malformed`]. With [`SqsOptions::delete_malformed`] (the default) it is then
//! deleted; otherwise it is left alone, comes back after each visibility timeout (logged at
//! `debug` only), and the queue's redrive policy moves it to a dead-letter queue after
//! `maxReceiveCount` receipts.
//!
//! # Errors
//!
//! When `ReceiveMessage` fails (network, credentials, a missing queue) the consumer waits
//! 1 s, then 2 s, 4 s … up to 60 s between attempts, and logs at `warn` on the 1st, 2nd,
//! 4th, 8th … failure of a streak only, so an outage does not flood the logs; recovery is
//! logged at `info`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, Message,
    MessageSystemAttributeName,
};
use backon::{BackoffBuilder as _, ExponentialBackoff, ExponentialBuilder};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::RegistryEvent;
use super::eventbridge::{EventError, parse_message};

/// First wait after a failed receive.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// Longest wait between failed receives.
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// How long deleting the handled messages (and releasing the others) may take while shutting
/// down.
const SHUTDOWN_DELETE_TIMEOUT: Duration = Duration::from_secs(5);

/// Settings of [`SqsConsumer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsOptions {
    /// The queue's URL, e.g. `https://sqs.eu-west-1.amazonaws.com/123456789012/imagewatch`.
    /// Its region is taken from the URL when it has the AWS form.
    pub queue_url: String,
    /// Long-polling wait, 0..=20 seconds (default 20).
    pub wait_time_seconds: i32,
    /// Messages per receive, 1..=10 (default 10).
    pub max_messages: i32,
    /// Account used for events that do not name one (moto's EventBridge omits it).
    pub default_account: Option<String>,
    /// Send SQS requests here instead of the AWS endpoint (emulators, VPC endpoints).
    /// `None` keeps the shared config, which honours `AWS_ENDPOINT_URL_SQS` /
    /// `AWS_ENDPOINT_URL`.
    pub endpoint_url: Option<String>,
    /// Delete malformed messages after logging them (default). `false` leaves them for the
    /// queue's redrive policy (dead-letter queue).
    pub delete_malformed: bool,
}

impl SqsOptions {
    /// Defaults for `queue_url`: 20 s long polling, 10 messages, malformed messages deleted.
    pub fn new(queue_url: impl Into<String>) -> Self {
        SqsOptions {
            queue_url: queue_url.into(),
            wait_time_seconds: 20,
            max_messages: 10,
            default_account: None,
            endpoint_url: None,
            delete_malformed: true,
        }
    }
}

/// Why an [`SqsConsumer`] cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SqsConfigError {
    /// An option is out of range.
    #[error("invalid SQS option: {0}")]
    InvalidOption(String),
    /// Neither the queue URL nor the AWS configuration gives a region.
    #[error(
        "no AWS region for SQS queue {0}: use a queue URL of the form https://sqs.<region>.amazonaws.com/… or set AWS_REGION"
    )]
    NoRegion(String),
}

/// What the consumer did so far, for metrics. All counters only grow.
#[derive(Debug, Default)]
pub struct SqsCounters {
    /// Messages received (each receipt of a message counts).
    pub received: AtomicU64,
    /// Registry events handed to the channel.
    pub delivered: AtomicU64,
    /// Messages that asked for nothing (deletes, failed pushes, other event types).
    pub ignored: AtomicU64,
    /// Malformed messages, each counted once (on its first receipt).
    pub malformed: AtomicU64,
    /// Messages deleted from the queue.
    pub deleted: AtomicU64,
    /// Failed `ReceiveMessage` calls.
    pub receive_errors: AtomicU64,
    /// Messages whose deletion failed (they come back after the visibility timeout).
    pub delete_errors: AtomicU64,
    /// Messages received but not handled because of a shutdown, made visible again at once.
    pub released: AtomicU64,
    /// Messages whose release failed (they come back after the visibility timeout).
    pub release_errors: AtomicU64,
}

impl SqsCounters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Every counter with its metric label value.
    pub fn snapshot(&self) -> [(&'static str, u64); 9] {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("received", get(&self.received)),
            ("delivered", get(&self.delivered)),
            ("ignored", get(&self.ignored)),
            ("malformed", get(&self.malformed)),
            ("deleted", get(&self.deleted)),
            ("receive_error", get(&self.receive_errors)),
            ("delete_error", get(&self.delete_errors)),
            ("released", get(&self.released)),
            ("release_error", get(&self.release_errors)),
        ]
    }
}

/// What became of one receive's messages.
#[derive(Debug, Default)]
struct BatchOutcome {
    /// Receipt handles to delete.
    handled: Vec<String>,
    /// Receipt handles of messages not handled because of a shutdown: to release.
    unhandled: Vec<String>,
    /// Stop consuming (shutdown, or the channel closed).
    stop: bool,
}

/// Long-polls one SQS queue for ECR push events; see the module documentation.
pub struct SqsConsumer {
    client: Client,
    options: SqsOptions,
    counters: Arc<SqsCounters>,
}

impl std::fmt::Debug for SqsConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsConsumer")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl SqsConsumer {
    /// A consumer using `sdk_config`'s credentials (share the one given to the ECR tag
    /// source, see [`load_aws_config`](imagewatch_registry::ecr::load_aws_config)).
    pub fn new(sdk_config: &SdkConfig, options: SqsOptions) -> Result<Self, SqsConfigError> {
        if options.queue_url.trim().is_empty() {
            return Err(SqsConfigError::InvalidOption("queue URL is empty".into()));
        }
        if !(0..=20).contains(&options.wait_time_seconds) {
            return Err(SqsConfigError::InvalidOption(format!(
                "wait time must be 0..=20 seconds, not {}",
                options.wait_time_seconds
            )));
        }
        if !(1..=10).contains(&options.max_messages) {
            return Err(SqsConfigError::InvalidOption(format!(
                "max messages must be 1..=10, not {}",
                options.max_messages
            )));
        }
        let region = region_from_queue_url(&options.queue_url)
            .map(aws_sdk_sqs::config::Region::new)
            .or_else(|| sdk_config.region().cloned())
            .ok_or_else(|| SqsConfigError::NoRegion(options.queue_url.clone()))?;
        let wait = u64::try_from(options.wait_time_seconds).unwrap_or(0);
        let mut builder = aws_sdk_sqs::config::Builder::from(sdk_config)
            .region(region)
            .timeout_config(
                aws_sdk_sqs::config::timeout::TimeoutConfig::builder()
                    .operation_attempt_timeout(Duration::from_secs(wait + 15))
                    .operation_timeout(Duration::from_secs(wait + 60))
                    .build(),
            );
        if let Some(url) = &options.endpoint_url {
            builder = builder.endpoint_url(url);
        }
        Ok(SqsConsumer {
            client: Client::from_conf(builder.build()),
            options,
            counters: Arc::default(),
        })
    }

    /// The counters, shared with the running consumer.
    pub fn counters(&self) -> Arc<SqsCounters> {
        self.counters.clone()
    }

    /// Consumes until `shutdown` is cancelled or `sink` is closed.
    pub async fn run(self, sink: mpsc::Sender<RegistryEvent>, shutdown: CancellationToken) {
        let queue = self.options.queue_url.as_str();
        tracing::info!(queue, "consuming ECR events from SQS");
        let mut backoff = Backoff::default();
        loop {
            if shutdown.is_cancelled() {
                break;
            }
            // Not raced against the shutdown: see the module documentation. The receive ends
            // within the wait time (or the attempt timeout).
            let result = self
                .client
                .receive_message()
                .queue_url(queue)
                .max_number_of_messages(self.options.max_messages)
                .wait_time_seconds(self.options.wait_time_seconds)
                .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
                .send()
                .await;
            let messages = match result {
                Ok(output) => {
                    if let Some(failures) = backoff.succeeded() {
                        tracing::info!(queue, failures, "receiving from SQS works again");
                    }
                    output.messages.unwrap_or_default()
                }
                Err(err) => {
                    SqsCounters::add(&self.counters.receive_errors, 1);
                    let (delay, loud) = backoff.failed();
                    let error = DisplayErrorContext(&err);
                    if loud {
                        tracing::warn!(queue, failures = backoff.failures, retry_in_s = delay.as_secs(), %error, "cannot receive from SQS");
                    } else {
                        tracing::debug!(queue, failures = backoff.failures, retry_in_s = delay.as_secs(), %error, "cannot receive from SQS");
                    }
                    tokio::select! {
                        biased;
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(delay) => continue,
                    }
                }
            };
            let outcome = if shutdown.is_cancelled() {
                SqsCounters::add(&self.counters.received, messages.len() as u64);
                BatchOutcome {
                    unhandled: messages
                        .iter()
                        .filter_map(|m| m.receipt_handle().map(str::to_string))
                        .collect(),
                    stop: true,
                    ..BatchOutcome::default()
                }
            } else {
                self.handle_batch(messages, &sink, &shutdown).await
            };
            if outcome.stop {
                // Delete what was handled so that it is not handled again, and hand the rest
                // back at once, but do not let a slow SQS hold up the shutdown.
                let finish = async {
                    self.delete(outcome.handled).await;
                    self.release(outcome.unhandled).await;
                };
                let _ = tokio::time::timeout(SHUTDOWN_DELETE_TIMEOUT, finish).await;
                break;
            }
            self.delete(outcome.handled).await;
        }
        tracing::info!(queue, "stopped consuming from SQS");
    }

    /// Handles one receive's messages: which to delete, which to release, whether to stop
    /// (shutdown, or the channel closed).
    async fn handle_batch(
        &self,
        messages: Vec<Message>,
        sink: &mpsc::Sender<RegistryEvent>,
        shutdown: &CancellationToken,
    ) -> BatchOutcome {
        let mut handled = Vec::with_capacity(messages.len());
        let mut messages = messages.into_iter();
        while let Some(message) = messages.next() {
            SqsCounters::add(&self.counters.received, 1);
            let Some(receipt) = message.receipt_handle().map(str::to_string) else {
                continue;
            };
            let message_id = message.message_id().unwrap_or("");
            let parsed = match message.body() {
                Some(body) => parse_message(body, self.options.default_account.as_deref()),
                None => Err(EventError::NotJson("empty body".into())),
            };
            match parsed {
                Ok(Some(event)) => {
                    tracing::debug!(message_id, registry = %event.registry, repository = %event.repository, tag = ?event.tag, "ECR push event");
                    let sent = tokio::select! {
                        biased;
                        () = shutdown.cancelled() => Err(()),
                        sent = sink.send(event) => sent.map_err(|_| {
                            tracing::info!("trigger channel closed; stopping the SQS consumer");
                        }),
                    };
                    if sent.is_err() {
                        let rest: Vec<Message> = messages.collect();
                        SqsCounters::add(&self.counters.received, rest.len() as u64);
                        let unhandled = std::iter::once(receipt)
                            .chain(
                                rest.iter()
                                    .filter_map(|m| m.receipt_handle().map(str::to_string)),
                            )
                            .collect();
                        return BatchOutcome {
                            handled,
                            unhandled,
                            stop: true,
                        };
                    }
                    SqsCounters::add(&self.counters.delivered, 1);
                    handled.push(receipt);
                }
                Ok(None) => {
                    SqsCounters::add(&self.counters.ignored, 1);
                    handled.push(receipt);
                }
                Err(error) => {
                    if first_receipt(&message) {
                        SqsCounters::add(&self.counters.malformed, 1);
                        tracing::warn!(
                            queue = %self.options.queue_url,
                            message_id,
                            %error,
                            deleting = self.options.delete_malformed,
                            "ignoring a malformed SQS message"
                        );
                    } else {
                        tracing::debug!(message_id, %error, "malformed SQS message received again");
                    }
                    if self.options.delete_malformed {
                        handled.push(receipt);
                    }
                }
            }
        }
        BatchOutcome {
            handled,
            ..BatchOutcome::default()
        }
    }

    /// Deletes handled messages, ten per `DeleteMessageBatch` (the API limit).
    async fn delete(&self, receipts: Vec<String>) {
        for chunk in receipts.chunks(10) {
            let entries: Vec<DeleteMessageBatchRequestEntry> = chunk
                .iter()
                .enumerate()
                .filter_map(|(i, receipt)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(receipt)
                        .build()
                        .ok()
                })
                .collect();
            let result = self
                .client
                .delete_message_batch()
                .queue_url(&self.options.queue_url)
                .set_entries(Some(entries))
                .send()
                .await;
            match result {
                Ok(output) => {
                    SqsCounters::add(&self.counters.deleted, output.successful().len() as u64);
                    if let Some(first) = output.failed().first() {
                        SqsCounters::add(
                            &self.counters.delete_errors,
                            output.failed().len() as u64,
                        );
                        tracing::warn!(
                            queue = %self.options.queue_url,
                            failed = output.failed().len(),
                            code = first.code(),
                            message = first.message().unwrap_or(""),
                            "could not delete handled SQS messages; they will be received again"
                        );
                    }
                }
                Err(err) => {
                    SqsCounters::add(&self.counters.delete_errors, chunk.len() as u64);
                    tracing::warn!(
                        queue = %self.options.queue_url,
                        messages = chunk.len(),
                        error = %DisplayErrorContext(&err),
                        "could not delete handled SQS messages; they will be received again"
                    );
                }
            }
        }
    }
}

impl SqsConsumer {
    /// Makes received messages visible again at once (`ChangeMessageVisibility` 0), ten per
    /// `ChangeMessageVisibilityBatch`, so other consumers get them without waiting for the
    /// visibility timeout.
    async fn release(&self, receipts: Vec<String>) {
        for chunk in receipts.chunks(10) {
            let entries: Vec<ChangeMessageVisibilityBatchRequestEntry> = chunk
                .iter()
                .enumerate()
                .filter_map(|(i, receipt)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(receipt)
                        .visibility_timeout(0)
                        .build()
                        .ok()
                })
                .collect();
            let result = self
                .client
                .change_message_visibility_batch()
                .queue_url(&self.options.queue_url)
                .set_entries(Some(entries))
                .send()
                .await;
            match result {
                Ok(output) => {
                    SqsCounters::add(&self.counters.released, output.successful().len() as u64);
                    if !output.failed().is_empty() {
                        SqsCounters::add(
                            &self.counters.release_errors,
                            output.failed().len() as u64,
                        );
                        tracing::warn!(
                            queue = %self.options.queue_url,
                            failed = output.failed().len(),
                            "could not release SQS messages; they come back after the visibility timeout"
                        );
                    }
                }
                Err(err) => {
                    SqsCounters::add(&self.counters.release_errors, chunk.len() as u64);
                    tracing::warn!(
                        queue = %self.options.queue_url,
                        messages = chunk.len(),
                        error = %DisplayErrorContext(&err),
                        "could not release SQS messages; they come back after the visibility timeout"
                    );
                }
            }
        }
        if !receipts.is_empty() {
            tracing::info!(
                queue = %self.options.queue_url,
                messages = receipts.len(),
                "shutting down: handed unhandled SQS messages back to the queue"
            );
        }
    }
}

/// Whether this is the first time SQS hands out `message` (true when SQS did not say).
fn first_receipt(message: &Message) -> bool {
    message
        .attributes()
        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
        .and_then(|count| count.parse::<u64>().ok())
        .is_none_or(|count| count <= 1)
}

/// The region in an AWS queue URL: `https://sqs.<region>.amazonaws.com[.cn]/…` or the legacy
/// `https://<region>.queue.amazonaws.com/…`.
pub fn region_from_queue_url(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let host = rest.split(['/', ':']).next()?.to_ascii_lowercase();
    let labels: Vec<&str> = host.split('.').collect();
    let region = match labels.as_slice() {
        ["sqs" | "sqs-fips", region, "amazonaws", "com", ..] => *region,
        [region, "queue", "amazonaws", "com", ..] => *region,
        _ => return None,
    };
    let valid = !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    valid.then(|| region.to_string())
}

/// The waits between failed receives: 1 s doubling to a minute.
const RECEIVE_BACKOFF: ExponentialBuilder = ExponentialBuilder::new()
    .with_min_delay(BACKOFF_MIN)
    .with_max_delay(BACKOFF_MAX)
    .with_factor(2.0)
    .without_max_times();

/// Exponential backoff between failed receives, with a log budget.
#[derive(Debug)]
struct Backoff {
    /// Consecutive failures.
    failures: u64,
    /// The waits of the current failure streak.
    delays: ExponentialBackoff,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            failures: 0,
            delays: RECEIVE_BACKOFF.build(),
        }
    }
}

impl Backoff {
    /// Records a failure; returns how long to wait and whether to log it loudly (the 1st,
    /// 2nd, 4th, 8th … failure of a streak).
    fn failed(&mut self) -> (Duration, bool) {
        self.failures += 1;
        let delay = self.delays.next().unwrap_or(BACKOFF_MAX);
        (delay, self.failures.is_power_of_two())
    }

    /// Records a success; returns the length of the failure streak it ended, if any.
    fn succeeded(&mut self) -> Option<u64> {
        self.delays = RECEIVE_BACKOFF.build();
        let failures = std::mem::take(&mut self.failures);
        (failures > 0).then_some(failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_minute_and_logs_sparsely() {
        let mut backoff = Backoff::default();
        let steps: Vec<(u64, bool)> = (0..10)
            .map(|_| {
                let (delay, loud) = backoff.failed();
                (delay.as_secs(), loud)
            })
            .collect();
        assert_eq!(
            steps,
            vec![
                (1, true),
                (2, true),
                (4, false),
                (8, true),
                (16, false),
                (32, false),
                (60, false),
                (60, true),
                (60, false),
                (60, false),
            ]
        );
        for _ in 0..100 {
            assert_eq!(backoff.failed().0, BACKOFF_MAX);
        }
        assert_eq!(backoff.succeeded(), Some(110));
        assert_eq!(backoff.succeeded(), None);
        assert_eq!(backoff.failed(), (BACKOFF_MIN, true));
    }

    #[test]
    fn queue_url_regions() {
        assert_eq!(
            region_from_queue_url("https://sqs.eu-west-1.amazonaws.com/123456789012/q").as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(
            region_from_queue_url("https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q")
                .as_deref(),
            Some("cn-north-1")
        );
        assert_eq!(
            region_from_queue_url("https://ap-northeast-1.queue.amazonaws.com/123456789012/q")
                .as_deref(),
            Some("ap-northeast-1")
        );
        assert_eq!(
            region_from_queue_url("http://127.0.0.1:5000/123456789012/q"),
            None
        );
        assert_eq!(region_from_queue_url("sqs.eu-west-1.amazonaws.com/q"), None);
    }

    #[test]
    fn options_are_checked() {
        let config = aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        let ok = SqsOptions::new("https://sqs.eu-west-1.amazonaws.com/123456789012/q");
        assert!(SqsConsumer::new(&config, ok.clone()).is_ok());
        let no_region = SqsOptions::new("http://127.0.0.1:1/123456789012/q");
        assert!(matches!(
            SqsConsumer::new(&config, no_region),
            Err(SqsConfigError::NoRegion(_))
        ));
        for bad in [
            SqsOptions {
                wait_time_seconds: 21,
                ..ok.clone()
            },
            SqsOptions {
                max_messages: 0,
                ..ok.clone()
            },
            SqsOptions {
                max_messages: 11,
                ..ok.clone()
            },
            SqsOptions::new(" "),
        ] {
            assert!(matches!(
                SqsConsumer::new(&config, bad),
                Err(SqsConfigError::InvalidOption(_))
            ));
        }
    }
}

#[cfg(test)]
mod moto_tests {
    use std::time::{Duration, Instant};

    use aws_sdk_sqs::types::QueueAttributeName;

    use super::*;
    use imagewatch_registry::moto::{
        MOTO_ACCOUNT, moto_helper, moto_url, test_sdk_config, unique, wait_for,
    };

    const EVENT_WAIT: Duration = Duration::from_secs(30);

    fn sqs_client() -> Client {
        Client::new(&test_sdk_config(moto_url()))
    }

    async fn create_queue(name: &str, visibility_timeout: Option<u32>) -> String {
        let mut request = sqs_client().create_queue().queue_name(name);
        if let Some(seconds) = visibility_timeout {
            request =
                request.attributes(QueueAttributeName::VisibilityTimeout, seconds.to_string());
        }
        request
            .send()
            .await
            .unwrap_or_else(|e| panic!("CreateQueue {name}: {}", DisplayErrorContext(&e)))
            .queue_url()
            .expect("queue URL")
            .to_string()
    }

    async fn send(queue_url: &str, body: &str) {
        sqs_client()
            .send_message()
            .queue_url(queue_url)
            .message_body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("SendMessage: {}", DisplayErrorContext(&e)));
    }

    /// (visible, in flight) message counts of the queue.
    async fn queue_depth(queue_url: &str) -> (u64, u64) {
        let out = sqs_client()
            .get_queue_attributes()
            .queue_url(queue_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GetQueueAttributes: {}", DisplayErrorContext(&e)));
        let attributes = out.attributes().cloned().unwrap_or_default();
        let get = |name: QueueAttributeName| {
            attributes
                .get(&name)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        (
            get(QueueAttributeName::ApproximateNumberOfMessages),
            get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        )
    }

    struct Running {
        counters: Arc<SqsCounters>,
        events: mpsc::Receiver<RegistryEvent>,
        shutdown: CancellationToken,
        task: tokio::task::JoinHandle<()>,
    }

    impl Running {
        /// Cancels the consumer and checks that it stops once its pending long poll ends.
        async fn stop(self) {
            self.shutdown.cancel();
            tokio::time::timeout(Duration::from_secs(25), self.task)
                .await
                .expect("the consumer stops promptly on shutdown")
                .unwrap();
        }

        /// The next event for `repository`; events of other tests sharing moto's default
        /// event bus are skipped.
        async fn event_for(&mut self, repository: &str) -> RegistryEvent {
            let deadline = Instant::now() + EVENT_WAIT;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let event = tokio::time::timeout(left, self.events.recv())
                    .await
                    .unwrap_or_else(|_| panic!("no event for {repository} within {EVENT_WAIT:?}"))
                    .expect("consumer running");
                if event.repository == repository {
                    return event;
                }
            }
        }
    }

    fn start(options: SqsOptions) -> Running {
        let consumer = SqsConsumer::new(&test_sdk_config("http://127.0.0.1:9"), options).unwrap();
        let counters = consumer.counters();
        let (sink, events) = mpsc::channel(16);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(consumer.run(sink, shutdown.clone()));
        Running {
            counters,
            events,
            shutdown,
            task,
        }
    }

    fn options(queue_url: &str) -> SqsOptions {
        SqsOptions {
            endpoint_url: Some(moto_url().to_string()),
            default_account: Some(MOTO_ACCOUNT.to_string()),
            ..SqsOptions::new(queue_url)
        }
    }

    fn count(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    async fn wait_empty(queue_url: &str) {
        wait_for("the queue to be empty", EVENT_WAIT, || async {
            (queue_depth(queue_url).await == (0, 0)).then_some(())
        })
        .await;
    }

    /// The seed-000 path: ECR push → EventBridge rule → SQS → consumer → RegistryEvent.
    #[tokio::test]
    async fn delivers_pushes_routed_by_eventbridge() {
        let repository = unique("iw-sqs-repo");
        let queue_url = create_queue(&unique("iw-sqs-eb"), None).await;
        moto_helper(&["route-ecr-events", &unique("iw-rule"), &queue_url]).await;
        moto_helper(&["create-repository", &repository]).await;
        let digest = moto_helper(&["put-image", &repository, "v1.2.3"]).await;
        let mut running = start(options(&queue_url));

        moto_helper(&["put-push-event", &repository, "v1.2.3"]).await;
        let event = running.event_for(&repository).await;
        assert_eq!(
            event,
            RegistryEvent {
                registry: format!("{MOTO_ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com"),
                repository: repository.clone(),
                tag: Some("v1.2.3".into()),
                digest: Some(digest),
                source: "sqs",
                at: None,
            }
        );
        wait_empty(&queue_url).await;
        assert!(count(&running.counters.deleted) >= 1);
        assert_eq!(count(&running.counters.malformed), 0);
        running.stop().await;
    }

    #[tokio::test]
    async fn handles_direct_sns_ignored_and_malformed_messages() {
        let repository = unique("iw-sqs-direct");
        let queue_url = create_queue(&unique("iw-sqs-mixed"), None).await;
        let digest = format!("sha256:{}", "ab".repeat(32));
        let event = |action: &str| {
            serde_json::json!({
                "version": "0", "id": unique("id"), "detail-type": "ECR Image Action",
                "source": "aws.ecr", "account": "210987654321", "region": "eu-west-1",
                "resources": [],
                "detail": {"result": "SUCCESS", "repository-name": repository,
                           "image-digest": digest, "action-type": action, "image-tag": "v2"}
            })
        };
        send(&queue_url, "this is not JSON").await;
        send(&queue_url, &event("DELETE").to_string()).await;
        let sns = serde_json::json!({"Type": "Notification", "Message": event("PUSH").to_string()});
        send(&queue_url, &sns.to_string()).await;
        // moto.sh's own "what EventBridge would deliver" message, with account.
        moto_helper(&["send-push-message", &queue_url, &repository, "v3", &digest]).await;

        let mut running = start(options(&queue_url));
        let first = running.event_for(&repository).await;
        let second = running.event_for(&repository).await;
        let mut events = [first, second];
        events.sort_by(|a, b| a.tag.cmp(&b.tag));
        assert_eq!(
            events[0],
            RegistryEvent {
                registry: "210987654321.dkr.ecr.eu-west-1.amazonaws.com".into(),
                repository: repository.clone(),
                tag: Some("v2".into()),
                digest: Some(digest.clone()),
                source: "sqs",
                at: None,
            }
        );
        assert_eq!(
            events[1].registry,
            format!("{MOTO_ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com")
        );
        assert_eq!(events[1].tag.as_deref(), Some("v3"));

        wait_for("all four messages deleted", EVENT_WAIT, || async {
            (count(&running.counters.deleted) == 4).then_some(())
        })
        .await;
        wait_empty(&queue_url).await;
        let c = &running.counters;
        assert_eq!(count(&c.received), 4);
        assert_eq!(count(&c.delivered), 2);
        assert_eq!(count(&c.ignored), 1);
        assert_eq!(count(&c.malformed), 1);
        assert_eq!(count(&c.receive_errors), 0);
        running.stop().await;
    }

    /// With `delete_malformed: false` the message stays for the redrive policy, comes back
    /// after the visibility timeout, and is counted (and logged loudly) once.
    #[tokio::test]
    async fn keeps_malformed_messages_when_asked() {
        let queue_url = create_queue(&unique("iw-sqs-keep"), Some(1)).await;
        send(&queue_url, r#"{"Event":"s3:TestEvent"}"#).await;
        let running = start(SqsOptions {
            delete_malformed: false,
            wait_time_seconds: 1,
            ..options(&queue_url)
        });
        wait_for(
            "the malformed message to be received twice",
            EVENT_WAIT,
            || async { (count(&running.counters.received) >= 2).then_some(()) },
        )
        .await;
        assert_eq!(count(&running.counters.malformed), 1);
        assert_eq!(count(&running.counters.deleted), 0);
        running.stop().await;
        let (visible, in_flight) = queue_depth(&queue_url).await;
        assert_eq!(visible + in_flight, 1, "the message is still in the queue");
    }

    /// A receive pending when the shutdown begins is allowed to end, and the message it
    /// brings is handed back at once: it must not wait out the queue's visibility timeout.
    #[tokio::test]
    async fn releases_what_the_pending_receive_brings_at_shutdown() {
        let queue_url = create_queue(&unique("iw-sqs-release"), Some(120)).await;
        let running = start(options(&queue_url));
        // The consumer is long-polling an empty queue (20 s) when the shutdown begins.
        wait_for("the first receive to be pending", EVENT_WAIT, || async {
            (!running.task.is_finished()).then_some(())
        })
        .await;
        let counters = running.counters.clone();
        running.shutdown.cancel();
        send(&queue_url, r#"{"Event":"s3:TestEvent"}"#).await;
        running.stop().await;
        let (visible, in_flight) = queue_depth(&queue_url).await;
        assert_eq!(
            (visible, in_flight),
            (1, 0),
            "the message is visible again at once (released {})",
            count(&counters.released)
        );
        assert_eq!(
            count(&counters.delivered),
            0,
            "nothing handled after shutdown"
        );
    }

    /// A queue that does not exist: the consumer backs off (1 s, 2 s, …) instead of spinning,
    /// and still stops promptly.
    #[tokio::test]
    async fn backs_off_when_receiving_fails() {
        let queue_url = format!("{}/{MOTO_ACCOUNT}/{}", moto_url(), unique("iw-sqs-absent"));
        let started = Instant::now();
        let running = start(SqsOptions {
            wait_time_seconds: 1,
            ..options(&queue_url)
        });
        wait_for("two failed receives", EVENT_WAIT, || async {
            (count(&running.counters.receive_errors) >= 2).then_some(())
        })
        .await;
        assert!(
            started.elapsed() >= BACKOFF_MIN,
            "the second attempt waited for the backoff"
        );
        assert_eq!(count(&running.counters.receive_errors), 2);
        assert_eq!(count(&running.counters.received), 0);
        running.stop().await;
    }
}
