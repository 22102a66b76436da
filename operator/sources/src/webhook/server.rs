//! The webhook HTTP server: routes, per-request checks, and forwarding to the sink.
//!
//! A request goes: provider enabled? (else 404, like an unknown path) → token providers: token
//! (else 401) → body within the limit (else 413) → signing providers: signature (else 401)
//! → parse (else 400) → `try_send` each event to the sink (a full or closed sink answers 503,
//! so the sender retries; the handler never waits) → 202 `{"accepted": n, "ignored": m}`.
//!
//! Nothing here talks to a registry or decides anything; see the module docs of
//! [`super`] for why a payload can only ever cause a rescan.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use super::payloads::{self, ParseOptions};
use super::signature::{authorization_token, tokens_match, verify_sha256};
use super::{Provider, RegistryEvent, WebhookSecrets};

/// Default largest accepted body: 1 MiB (GitHub's `package` events are the largest, a few
/// tens of KiB).
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// Header carrying GitHub's signature.
const GITHUB_SIGNATURE_HEADER: &str = "x-hub-signature-256";
/// Header carrying the generic format's signature.
const GENERIC_SIGNATURE_HEADER: &str = "x-signature-256";

/// Counters of one provider. Units: `accepted` and `dropped` count events; `ignored` counts
/// notifications that named nothing to rescan; the rest count requests.
#[derive(Debug, Default)]
pub struct ProviderCounters {
    /// Events forwarded to the sink.
    pub accepted: AtomicU64,
    /// Notifications ignored (pulls, blob pushes, other event kinds, pings).
    pub ignored: AtomicU64,
    /// Requests refused for a missing or wrong token or signature (401).
    pub rejected_auth: AtomicU64,
    /// Authenticated requests whose body could not be used (400).
    pub malformed: AtomicU64,
    /// Requests whose body exceeded the limit (413).
    pub too_large: AtomicU64,
    /// Events not forwarded because the sink was full or closed (503).
    pub dropped: AtomicU64,
}

/// A plain copy of [`ProviderCounters`], for exporting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    /// See [`ProviderCounters::accepted`].
    pub accepted: u64,
    /// See [`ProviderCounters::ignored`].
    pub ignored: u64,
    /// See [`ProviderCounters::rejected_auth`].
    pub rejected_auth: u64,
    /// See [`ProviderCounters::malformed`].
    pub malformed: u64,
    /// See [`ProviderCounters::too_large`].
    pub too_large: u64,
    /// See [`ProviderCounters::dropped`].
    pub dropped: u64,
}

impl ProviderCounters {
    /// Reads every counter.
    pub fn snapshot(&self) -> CounterSnapshot {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CounterSnapshot {
            accepted: read(&self.accepted),
            ignored: read(&self.ignored),
            rejected_auth: read(&self.rejected_auth),
            malformed: read(&self.malformed),
            too_large: read(&self.too_large),
            dropped: read(&self.dropped),
        }
    }
}

fn add(counter: &AtomicU64, n: usize) {
    counter.fetch_add(n as u64, Ordering::Relaxed);
}

/// Counters of every provider.
#[derive(Debug, Default)]
pub struct WebhookCounters {
    by_provider: [ProviderCounters; Provider::ALL.len()],
}

impl WebhookCounters {
    /// One provider's counters.
    pub fn provider(&self, provider: Provider) -> &ProviderCounters {
        &self.by_provider[provider.index()]
    }

    /// Every provider's counters, in [`Provider::ALL`] order.
    pub fn snapshot(&self) -> Vec<(Provider, CounterSnapshot)> {
        Provider::ALL
            .into_iter()
            .map(|p| (p, self.provider(p).snapshot()))
            .collect()
    }
}

/// What the handlers share. Cheap to clone.
#[derive(Clone)]
pub struct WebhookState {
    secrets: Arc<RwLock<WebhookSecrets>>,
    sink: mpsc::Sender<RegistryEvent>,
    counters: Arc<WebhookCounters>,
    body_limit: usize,
    options: Arc<ParseOptions>,
}

impl WebhookState {
    /// State with `secrets`, forwarding to `sink`, with the default body limit and no
    /// distribution host override.
    pub fn new(secrets: WebhookSecrets, sink: mpsc::Sender<RegistryEvent>) -> Self {
        Self::with_shared_secrets(Arc::new(RwLock::new(secrets)), sink)
    }

    /// Like [`WebhookState::new`], reading the secrets from a lock the caller keeps and
    /// rewrites when the Kubernetes Secret changes.
    pub fn with_shared_secrets(
        secrets: Arc<RwLock<WebhookSecrets>>,
        sink: mpsc::Sender<RegistryEvent>,
    ) -> Self {
        WebhookState {
            secrets,
            sink,
            counters: Arc::new(WebhookCounters::default()),
            body_limit: DEFAULT_BODY_LIMIT,
            options: Arc::new(ParseOptions::default()),
        }
    }

    /// Sets the largest accepted body in bytes (larger ones get 413).
    pub fn with_body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// Attributes distribution events to `host` (as watches spell the registry) instead of
    /// the Host header the pusher used (`request.host`).
    pub fn with_distribution_host(mut self, host: impl Into<String>) -> Self {
        let host = host.into();
        self.options = Arc::new(ParseOptions {
            distribution_host: (!host.trim().is_empty()).then_some(host),
        });
        self
    }

    /// The lock holding the secrets; write a new [`WebhookSecrets`] into it to reload.
    pub fn secrets(&self) -> Arc<RwLock<WebhookSecrets>> {
        self.secrets.clone()
    }

    /// Replaces the secrets (a reload after the Kubernetes Secret changed).
    pub fn replace_secrets(&self, secrets: WebhookSecrets) {
        *self
            .secrets
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = secrets;
    }

    /// The counters, for metrics.
    pub fn counters(&self) -> Arc<WebhookCounters> {
        self.counters.clone()
    }

    /// The configured body limit.
    pub fn body_limit(&self) -> usize {
        self.body_limit
    }

    fn secret(&self, provider: Provider) -> Option<Vec<u8>> {
        self.secrets
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(provider)
            .map(|s| s.expose().to_vec())
    }
}

/// The router: `POST /hooks/{distribution, dockerhub/{token}, ghcr, harbor, quay/{token},
/// generic}`. Other methods on these paths get 405, other paths 404.
pub fn router(state: WebhookState) -> Router {
    Router::new()
        .route("/hooks/distribution", post(distribution))
        .route("/hooks/dockerhub/{token}", post(dockerhub))
        .route("/hooks/ghcr", post(ghcr))
        .route("/hooks/harbor", post(harbor))
        .route("/hooks/quay/{token}", post(quay))
        .route("/hooks/generic", post(generic))
        .with_state(state)
}

/// Binds `addr` and serves the webhook routes until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    state: WebhookState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    serve_listener(listener, state, shutdown).await
}

/// Serves the webhook routes on an already bound listener (tests bind port 0) until
/// `shutdown` resolves.
pub async fn serve_listener(
    listener: tokio::net::TcpListener,
    state: WebhookState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let enabled: Vec<&str> = state
        .secrets
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .enabled()
        .into_iter()
        .map(Provider::name)
        .collect();
    tracing::info!(%addr, enabled = ?enabled, "serving registry webhooks on /hooks/*");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// How a request proves it comes from the provider.
enum Credential<'a> {
    /// A token in the `Authorization` header (distribution, Harbor).
    AuthorizationHeader,
    /// A token from the path (Docker Hub, Quay).
    PathToken(&'a str),
    /// An HMAC-SHA256 signature of the body in this header (GitHub, generic).
    Signature(&'static str),
}

async fn distribution(
    State(state): State<WebhookState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    receive(
        &state,
        Provider::Distribution,
        Credential::AuthorizationHeader,
        &headers,
        body,
    )
    .await
}

async fn dockerhub(
    State(state): State<WebhookState>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    receive(
        &state,
        Provider::DockerHub,
        Credential::PathToken(&token),
        &headers,
        body,
    )
    .await
}

async fn ghcr(State(state): State<WebhookState>, headers: HeaderMap, body: Body) -> Response {
    receive(
        &state,
        Provider::Ghcr,
        Credential::Signature(GITHUB_SIGNATURE_HEADER),
        &headers,
        body,
    )
    .await
}

async fn harbor(State(state): State<WebhookState>, headers: HeaderMap, body: Body) -> Response {
    receive(
        &state,
        Provider::Harbor,
        Credential::AuthorizationHeader,
        &headers,
        body,
    )
    .await
}

async fn quay(
    State(state): State<WebhookState>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    receive(
        &state,
        Provider::Quay,
        Credential::PathToken(&token),
        &headers,
        body,
    )
    .await
}

async fn generic(State(state): State<WebhookState>, headers: HeaderMap, body: Body) -> Response {
    receive(
        &state,
        Provider::Generic,
        Credential::Signature(GENERIC_SIGNATURE_HEADER),
        &headers,
        body,
    )
    .await
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

/// Reads the body, refusing more than `limit` bytes.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Option<axum::body::Bytes> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return None;
    }
    // An error here is the limit being hit by a body without (or with a lying)
    // Content-Length, or the sender going away; either way the body is not usable.
    axum::body::to_bytes(body, limit).await.ok()
}

async fn receive(
    state: &WebhookState,
    provider: Provider,
    credential: Credential<'_>,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let counters = state.counters.provider(provider);
    // Disabled looks exactly like an unknown path: never open, and nothing to probe.
    let Some(secret) = state.secret(provider) else {
        return StatusCode::NOT_FOUND.into_response();
    };

    let unauthorized = || {
        add(&counters.rejected_auth, 1);
        tracing::warn!(
            provider = provider.name(),
            "webhook refused: bad credentials"
        );
        error(StatusCode::UNAUTHORIZED, "unauthorized")
    };

    // Token checks need no body: refuse before reading it.
    match credential {
        Credential::AuthorizationHeader => {
            let presented = headers
                .get(header::AUTHORIZATION)
                .map(|v| authorization_token(v.as_bytes()))
                .unwrap_or_default();
            if !tokens_match(&secret, presented) {
                return unauthorized();
            }
        }
        Credential::PathToken(token) => {
            if !tokens_match(&secret, token.as_bytes()) {
                return unauthorized();
            }
        }
        Credential::Signature(_) => {}
    }

    let Some(body) = read_body(headers, body, state.body_limit).await else {
        add(&counters.too_large, 1);
        tracing::warn!(
            provider = provider.name(),
            limit = state.body_limit,
            "webhook refused: body too large"
        );
        return error(StatusCode::PAYLOAD_TOO_LARGE, "body too large");
    };

    if let Credential::Signature(header_name) = credential {
        let presented = headers
            .get(header_name)
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        if !verify_sha256(&secret, &body, presented) {
            return unauthorized();
        }
    }

    let parsed = match payloads::parse(provider, &body, &state.options) {
        Ok(parsed) => parsed,
        Err(e) => {
            add(&counters.malformed, 1);
            tracing::warn!(provider = provider.name(), error = %e, "webhook payload unusable");
            return error(StatusCode::BAD_REQUEST, "malformed payload");
        }
    };
    add(&counters.ignored, parsed.ignored);

    let total = parsed.events.len();
    let mut forwarded = 0;
    for event in parsed.events {
        tracing::debug!(
            provider = provider.name(),
            registry = %event.registry,
            repository = %event.repository,
            tag = ?event.tag,
            digest = ?event.digest,
            "registry event received"
        );
        match state.sink.try_send(event) {
            Ok(()) => {
                forwarded += 1;
                add(&counters.accepted, 1);
            }
            Err(e) => {
                let why = match e {
                    TrySendError::Full(_) => "full",
                    TrySendError::Closed(_) => "closed",
                };
                add(&counters.dropped, total - forwarded);
                tracing::warn!(
                    provider = provider.name(),
                    dropped = total - forwarded,
                    sink = why,
                    "webhook events not forwarded: trigger queue {why}"
                );
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "event queue is full; retry",
                );
            }
        }
    }
    (
        StatusCode::ACCEPTED,
        axum::Json(serde_json::json!({ "accepted": forwarded, "ignored": parsed.ignored })),
    )
        .into_response()
}
