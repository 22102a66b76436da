//! Scan step: tags and digests from a registry over the OCI distribution API.
//!
//! [`RegistryClient`] lists a repository's tags (`GET /v2/<name>/tags/list`, following
//! `Link` pagination) and resolves one tag to its manifest digest
//! (`HEAD /v2/<name>/manifests/<ref>`). Authentication follows the registry's challenges
//! (see [`super::auth`]). It is the [`TagSource`](super::source::TagSource) for every
//! registry that has no dedicated API client; ECR gets its own source later but can also be
//! read through this one.
//!
//! Every request waits for its registry's rate limit and is retried a bounded number of times
//! on 5xx answers and transport failures; a 429 pauses the registry (see
//! [`super::ratelimit`]). Per-host settings (plain HTTP, an extra CA, rates, lookup budget)
//! come from [`super::settings`]. Created times for `Newest` ordering are read by
//! [`RegistryClient::list_tags_with_times`] (see [`super::metadata`]).
//!
//! This file holds the client's options, state and counters and the request path every call
//! takes (rate limit, retries, bounded bodies, error mapping); `token` authenticates
//! requests, `tags` lists tags and repositories, `manifests` resolves digests.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{RETRY_AFTER, WWW_AUTHENTICATE};
use reqwest::{StatusCode, Url};

use super::auth::{AuthScheme, TokenCache, parse_www_authenticate};
use super::created_cache::MetadataCache;
use super::error::{RegistryError, parse_error_body, parse_retry_after};
use super::ratelimit::{
    Bucket, DEFAULT_RATE_LIMIT_PAUSE, MAX_PAUSE_WAIT, RetryPolicy, WarnThrottle,
    is_retryable_status,
};
use super::reference::RepositoryRef;
use super::settings::{
    DEFAULT_SETTINGS_KEY, Limits, RegistrySettings, host_key, limits_for, normalize_host,
    normalize_registries, parse_ca_pem,
};
use super::wide_tokens::{MAX_REMEMBERED_SCOPES, ScopeCaps, WideTokens};
mod manifests;
mod tags;
pub(super) mod token;

/// Manifest media types asked for when resolving digests. Multi-arch indexes come first: the
/// digest users pin is the one `docker pull <tag>` resolves, which for multi-arch images is
/// the index, not one platform's manifest.
pub(super) const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.v2+json";

/// The repository catalog endpoint (`/v2/_catalog`) and the token scope it needs.
const CATALOG_PATH: &str = "_catalog";
const CATALOG_SCOPE: &str = "registry:catalog:*";

/// A host's failures are logged at `warn` at most once per this window, at `debug` otherwise.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// A wait for the rate limit shorter than this is taken as no wait (timer granularity).
const RATE_LIMIT_WAIT_COUNTED: Duration = Duration::from_millis(2);

/// Requests to one registry that waited for its rate limit, and how long in all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateLimitWaits {
    /// Requests that waited.
    pub requests: u64,
    /// Their waits added up.
    pub waited: Duration,
}

/// The OCI spec lets registries refuse manifests above 4 MiB, so a larger body is not a
/// manifest; the cap protects memory when hashing for the digest fallback.
pub(super) const MAX_MANIFEST_BYTES: usize = 4 * 1024 * 1024;
/// Error and token bodies are small; anything beyond is cut (errors) or refused (tokens).
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// A token naming thousands of repositories is large (about 100 bytes per repository in its
/// `access` claim, twice when a server sends it as both `token` and `access_token`).
const MAX_TOKEN_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Most bytes of a token request URL, which grows with the number of scopes it asks for
/// (see [`super::auth`] on registry-wide tokens). Servers differ in how long a request head
/// may be: Go's net/http (the distribution registry and most token servers) accepts 1 MiB
/// and hyper about 400 KiB, while nginx, often in front of both, allows 8 KiB per request
/// line or header by default. 64 KiB holds about a thousand typical scopes; a server that
/// refuses such a request answers 414, 431 or 400, and the number of scopes per request is
/// then halved for that registry.
pub const DEFAULT_TOKEN_URL_BUDGET: usize = 64 * 1024;

/// Settings for [`RegistryClient`]. Per-host settings (CA, rates, budget) are passed next to
/// these, to [`RegistryClient::with_registries`].
#[derive(Debug, Clone)]
pub struct RegistryOptions {
    /// `host[:port]` values reached over plain HTTP instead of HTTPS (local or in-cluster
    /// registries without TLS). Compared case-insensitively; a scheme or trailing `/` is
    /// ignored. Same as `insecure: true` in [`RegistrySettings`].
    pub insecure_hosts: Vec<String>,
    /// `User-Agent` sent on every request.
    pub user_agent: String,
    /// Whole-request timeout (connect, send, and read the full body). A request that times
    /// out is retried twice, so one call to an unresponsive registry takes about three times
    /// this.
    pub timeout: Duration,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            insecure_hosts: Vec::new(),
            user_agent: concat!("imagewatch/", env!("CARGO_PKG_VERSION")).to_string(),
            timeout: Duration::from_secs(30),
        }
    }
}

/// Repositories per registry-wide token, by host: each listed host's
/// `repositoriesPerToken` (or the `*` one), and the `*` one or the default for the rest.
fn scope_caps(registries: &HashMap<String, RegistrySettings>) -> ScopeCaps {
    let cap = |host: &str| limits_for(registries, host).repositories_per_token as usize;
    ScopeCaps {
        default: cap(DEFAULT_SETTINGS_KEY),
        hosts: registries
            .keys()
            .filter(|h| h.as_str() != DEFAULT_SETTINGS_KEY)
            .map(|h| (h.clone(), cap(h)))
            .collect(),
    }
}

/// How tag lists are paged; the defaults suit public registries, and tests shrink them.
/// Kept out of [`RegistryOptions`] because users have no reason to tune it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagPaging {
    /// `n` query parameter for tag listing; `None` lets the registry pick its page size.
    /// If a registry rejects the value (`PAGINATION_NUMBER_INVALID`), listing is retried
    /// without it.
    pub page_size: Option<u32>,
    /// Most pages followed per listing, so a registry that keeps returning `Link` headers
    /// cannot keep a scan busy forever. Reaching it is an error, not a silently short list,
    /// because a truncated list could make the policy pick an older tag.
    pub max_pages: usize,
}

impl Default for TagPaging {
    fn default() -> Self {
        // 1000 is the largest page distribution v3 accepts by default; 200 pages of it
        // covers any real repository.
        TagPaging {
            page_size: Some(1000),
            max_pages: 200,
        }
    }
}

/// Knobs that users have no reason to turn but tests do.
#[derive(Debug, Clone, Default)]
pub struct Tuning {
    pub paging: TagPaging,
    pub retry: RetryPolicy,
    /// DNS overrides (host → address), so tests can serve real registry names locally.
    pub resolve: Vec<(String, SocketAddr)>,
}

/// Client for the OCI distribution API. Cheap to clone; clones share the HTTP connection
/// pools, the learnt authentication schemes, the token cache, the rate limits and the
/// created-time cache.
#[derive(Clone)]
pub struct RegistryClient {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    /// Client for hosts without their own CA (trusting the `*` CA, if one is configured).
    http: reqwest::Client,
    /// Clients for hosts with their own CA.
    tls_clients: HashMap<String, reqwest::Client>,
    options: RegistryOptions,
    paging: TagPaging,
    retry: RetryPolicy,
    insecure_hosts: HashSet<String>,
    /// Normalised per-host settings, `*` included.
    registries: HashMap<String, RegistrySettings>,
    buckets: Mutex<HashMap<String, Arc<Bucket>>>,
    warnings: WarnThrottle,
    /// Scheme each registry asked for last, so later requests authenticate up front
    /// instead of paying a 401 round trip every time.
    schemes: Mutex<HashMap<String, AuthScheme>>,
    /// Tokens for one scope each: the catalog, and repositories that need their own.
    tokens: TokenCache,
    /// Registry-wide tokens for pulling, covering many repositories each.
    wide_tokens: WideTokens,
    /// Token realms that refused the OAuth2 form lately, until when they are asked with
    /// `GET` only.
    token_forms_refused: Mutex<HashMap<String, std::time::Instant>>,
    /// Token requests sent (not counting retries of one request).
    token_fetches: AtomicU64,
    /// Token requests by outcome (`ok` or an error category).
    token_outcomes: Mutex<HashMap<&'static str, u64>>,
    /// HTTP requests sent, by registry and outcome (see [`http_outcome`]).
    requests: Mutex<HashMap<(String, &'static str), u64>>,
    /// Per registry: requests that waited for its rate limit, and the total wait.
    rate_limit_waits: Mutex<HashMap<String, RateLimitWaits>>,
    pub(super) metadata: MetadataCache,
    pub(super) metadata_fetches: AtomicU64,
}

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryClient")
            .field("options", &self.inner.options)
            .field("paging", &self.inner.paging)
            .field("token_fetches", &self.token_fetches())
            .finish_non_exhaustive()
    }
}

/// What a request is for; decides how a 404 is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Endpoint {
    Registry,
    TokenServer,
}

impl RegistryClient {
    /// Builds a client. Installs the ring rustls crypto provider for the process if none is
    /// installed yet, because the HTTP client cannot be built without one.
    pub fn new(options: RegistryOptions) -> Result<Self, RegistryError> {
        Self::with_paging(options, TagPaging::default())
    }

    /// [`Self::new`] with per-host settings, as read by
    /// [`parse_registries_config`](super::parse_registries_config) (keys are normalised and
    /// values validated again here). A host with `caPem` gets its own HTTP client.
    pub fn with_registries(
        options: RegistryOptions,
        registries: HashMap<String, RegistrySettings>,
    ) -> Result<Self, RegistryError> {
        Self::build(options, registries, Tuning::default())
    }

    /// [`Self::new`] with non-default tag paging.
    pub fn with_paging(options: RegistryOptions, paging: TagPaging) -> Result<Self, RegistryError> {
        Self::build(
            options,
            HashMap::new(),
            Tuning {
                paging,
                ..Tuning::default()
            },
        )
    }

    pub fn build(
        options: RegistryOptions,
        registries: HashMap<String, RegistrySettings>,
        tuning: Tuning,
    ) -> Result<Self, RegistryError> {
        let registries = normalize_registries(registries)?;
        let http_client = |extra_ca: Option<&str>| -> Result<reqwest::Client, RegistryError> {
            let mut builder = imagewatch_support::http::builder(options.timeout)
                .user_agent(options.user_agent.clone());
            for (host, addr) in &tuning.resolve {
                builder = builder.resolve(host, *addr);
            }
            if let Some(pem) = extra_ca {
                let certs = parse_ca_pem(pem).map_err(RegistryError::InvalidConfig)?;
                builder = builder.tls_certs_merge(certs);
            }
            builder.build().map_err(|e| {
                RegistryError::Transport(format!("cannot build HTTP client: {}", error_chain(&e)))
            })
        };
        let default_ca = registries
            .get(DEFAULT_SETTINGS_KEY)
            .and_then(|s| s.ca_pem.as_deref());
        let http = http_client(default_ca)?;
        let mut tls_clients = HashMap::new();
        for (host, settings) in &registries {
            if host == DEFAULT_SETTINGS_KEY {
                continue;
            }
            if let Some(pem) = settings.ca_pem.as_deref() {
                // The host's CA comes in addition to the `*` one.
                let combined = match default_ca {
                    Some(default) => format!("{pem}\n{default}"),
                    None => pem.to_string(),
                };
                tls_clients.insert(host.clone(), http_client(Some(&combined))?);
            }
        }
        let insecure_hosts = options
            .insecure_hosts
            .iter()
            .map(|h| normalize_host(h))
            .filter(|h| !h.is_empty())
            .chain(
                registries
                    .iter()
                    .filter(|(_, s)| s.insecure)
                    .map(|(h, _)| h.clone()),
            )
            .collect();
        let scope_caps = scope_caps(&registries);
        Ok(RegistryClient {
            inner: Arc::new(Inner {
                http,
                tls_clients,
                options,
                paging: tuning.paging,
                retry: tuning.retry,
                insecure_hosts,
                registries,
                buckets: Mutex::new(HashMap::new()),
                warnings: WarnThrottle::new(WARN_EVERY),
                schemes: Mutex::new(HashMap::new()),
                tokens: TokenCache::default(),
                wide_tokens: WideTokens::new(
                    DEFAULT_TOKEN_URL_BUDGET,
                    MAX_REMEMBERED_SCOPES,
                    scope_caps,
                ),
                token_forms_refused: Mutex::new(HashMap::new()),
                token_fetches: AtomicU64::new(0),
                token_outcomes: Mutex::new(HashMap::new()),
                requests: Mutex::new(HashMap::new()),
                rate_limit_waits: Mutex::new(HashMap::new()),
                metadata: MetadataCache::default(),
                metadata_fetches: AtomicU64::new(0),
            }),
        })
    }

    /// Number of bearer-token requests made so far by this client and its clones.
    pub fn token_fetches(&self) -> u64 {
        self.inner.token_fetches.load(Ordering::Relaxed)
    }

    /// Token requests so far by outcome: `ok`, or the error category of a failed one
    /// (cumulative, for the metrics exporter).
    pub fn token_outcomes(&self) -> Vec<(&'static str, u64)> {
        let outcomes = self
            .inner
            .token_outcomes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        outcomes.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// HTTP requests sent so far (each retry and token request is one), by registry host
    /// and outcome (cumulative, for the metrics exporter).
    pub fn http_requests(&self) -> Vec<((String, &'static str), u64)> {
        let requests = self
            .inner
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        requests.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    fn count_request(&self, registry: &str, outcome: &'static str) {
        let mut requests = self
            .inner
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *requests.entry((registry.to_string(), outcome)).or_default() += 1;
    }

    /// Per registry host, the requests so far that waited for its rate limit and how long
    /// they waited in all (cumulative, for the metrics exporter).
    pub fn rate_limit_waits(&self) -> Vec<(String, RateLimitWaits)> {
        let waits = self
            .inner
            .rate_limit_waits
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        waits.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    fn count_rate_limit_wait(&self, registry: &str, waited: Duration) {
        let mut waits = self
            .inner
            .rate_limit_waits
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let entry = waits.entry(registry.to_string()).or_default();
        entry.requests += 1;
        entry.waited += waited;
    }

    /// Number of manifest and config-blob `GET`s made so far to read created times.
    pub fn metadata_fetches(&self) -> u64 {
        self.inner.metadata_fetches.load(Ordering::Relaxed)
    }

    /// Created-time lookups per repository per scan for `host`: its `metadataBudget`, else
    /// the `*` one, else the default (lower for Docker Hub, where each lookup of a new image
    /// counts as a pull).
    pub fn metadata_budget(&self, host: &str) -> u32 {
        self.limits(host).metadata_budget
    }

    /// How long requests to `host` remain paused after a 429, if they are.
    pub fn paused_for(&self, host: &str) -> Option<Duration> {
        self.bucket(host).paused_for_at(tokio::time::Instant::now())
    }

    fn limits(&self, host: &str) -> Limits {
        limits_for(&self.inner.registries, &host_key(host))
    }

    /// The rate-limit bucket of a registry host, created on first use.
    fn bucket(&self, host: &str) -> Arc<Bucket> {
        let host = host_key(host);
        let mut buckets = self.inner.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bucket) = buckets.get(&host) {
            return bucket.clone();
        }
        let limits = limits_for(&self.inner.registries, &host);
        let bucket = Arc::new(Bucket::new(limits.rate_per_second, limits.burst));
        buckets.insert(host, bucket.clone());
        bucket
    }

    /// The HTTP client for `host`: its own when it has a CA configured.
    fn http_for(&self, host: &str) -> &reqwest::Client {
        self.inner
            .tls_clients
            .get(&host_key(host))
            .unwrap_or(&self.inner.http)
    }

    fn scheme_for(&self, host: &str) -> &'static str {
        if self.inner.insecure_hosts.contains(&normalize_host(host)) {
            "http"
        } else {
            "https"
        }
    }

    pub(super) fn repo_url(
        &self,
        repo: &RepositoryRef,
        suffix: &str,
    ) -> Result<Url, RegistryError> {
        let scheme = self.scheme_for(&repo.registry);
        let text = format!("{scheme}://{}/v2/{}/{suffix}", repo.registry, repo.path);
        Url::parse(&text).map_err(|e| {
            RegistryError::InvalidReference(format!("cannot form a URL for {repo}: {e}"))
        })
    }

    fn remembered_scheme(&self, registry: &str) -> Option<AuthScheme> {
        let schemes = self.inner.schemes.lock().unwrap_or_else(|e| e.into_inner());
        schemes.get(registry).cloned()
    }

    fn remember_scheme(&self, registry: &str, scheme: &AuthScheme) {
        let mut schemes = self.inner.schemes.lock().unwrap_or_else(|e| e.into_inner());
        schemes.insert(registry.to_string(), scheme.clone());
    }

    /// Sends one request on behalf of `registry`: waits for the registry's rate limit,
    /// retries 5xx answers and transport failures (see [`RetryPolicy`]), and pauses the
    /// registry after a 429. Returns the last response, whatever its status; a 429 is
    /// returned (not retried) so the caller reports it as `RateLimited`.
    async fn execute(
        &self,
        registry: &str,
        request: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, RegistryError> {
        let bucket = self.bucket(registry);
        let retry = self.inner.retry;
        let mut retries = 0;
        loop {
            let asked = tokio::time::Instant::now();
            let acquired = bucket.acquire(MAX_PAUSE_WAIT).await;
            let waited = asked.elapsed();
            // A slot that was free at once is no wait; timer granularity is about 1 ms.
            if waited >= RATE_LIMIT_WAIT_COUNTED {
                self.count_rate_limit_wait(registry, waited);
            }
            if let Err(remaining) = acquired {
                // Round up, so a requeue after it does not land just before the pause ends.
                let secs = remaining.as_secs() + u64::from(remaining.subsec_nanos() > 0);
                tracing::debug!(registry, paused_s = secs, "registry is paused after a 429");
                return Err(RegistryError::RateLimited {
                    registry: registry.to_string(),
                    retry_after: Some(Duration::from_secs(secs)),
                    message:
                        "requests are paused after the registry answered 429 Too Many Requests"
                            .into(),
                });
            }
            let outcome = request().send().await;
            self.count_request(
                registry,
                http_outcome(outcome.as_ref().map(|r| r.status().as_u16()).ok()),
            );
            let failure = match outcome {
                Ok(response) if response.status() == StatusCode::TOO_MANY_REQUESTS => {
                    let retry_after = response
                        .headers()
                        .get(RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| parse_retry_after(v, jiff::Timestamp::now()));
                    let pause = retry_after.unwrap_or(DEFAULT_RATE_LIMIT_PAUSE);
                    bucket.pause_until(tokio::time::Instant::now() + pause);
                    if self.inner.warnings.should_warn(registry) {
                        tracing::warn!(
                            registry,
                            pause_s = pause.as_secs(),
                            "registry answered 429 Too Many Requests; pausing requests to it"
                        );
                    } else {
                        tracing::debug!(
                            registry,
                            pause_s = pause.as_secs(),
                            "registry answered 429 Too Many Requests"
                        );
                    }
                    return Ok(response);
                }
                Ok(response) if is_retryable_status(response.status().as_u16()) => {
                    if retries >= retry.retries {
                        if self.inner.warnings.should_warn(registry) {
                            tracing::warn!(
                                registry,
                                status = response.status().as_u16(),
                                attempts = retries + 1,
                                "registry keeps failing"
                            );
                        }
                        return Ok(response);
                    }
                    format!("HTTP {}", response.status().as_u16())
                }
                Ok(response) => return Ok(response),
                Err(error) => {
                    let error = transport_error(error);
                    // A certificate the client does not trust will not be trusted on retry.
                    let hopeless = error
                        .to_string()
                        .to_ascii_lowercase()
                        .contains("certificate");
                    if retries >= retry.retries || hopeless {
                        if self.inner.warnings.should_warn(registry) {
                            tracing::warn!(registry, attempts = retries + 1, %error, "registry unreachable");
                        } else {
                            tracing::debug!(registry, attempts = retries + 1, %error, "registry unreachable");
                        }
                        return Err(error);
                    }
                    error.to_string()
                }
            };
            retries += 1;
            let delay = retry.delay(retries);
            tracing::debug!(
                registry,
                retry = retries,
                delay_ms = delay.as_millis() as u64,
                failure,
                "retrying registry request"
            );
            tokio::time::sleep(delay).await;
        }
    }
}

/// A failed response, read into what the error needs.
#[derive(Debug)]
pub(super) struct Failure {
    status: StatusCode,
    codes: Vec<String>,
    message: String,
    retry_after: Option<Duration>,
}

pub(super) async fn read_failure(response: reqwest::Response) -> Failure {
    let status = response.status();
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, jiff::Timestamp::now()));
    // HEAD answers have no body; the challenge's error_description is then the only
    // explanation a registry gives for a 401.
    let challenge_message = response
        .headers()
        .get_all(WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(parse_www_authenticate)
        .find_map(|c| {
            c.param("error_description")
                .or_else(|| c.param("error"))
                .map(str::to_string)
        });
    let body = read_body_truncated(response, MAX_ERROR_BODY_BYTES).await;
    let parsed = parse_error_body(&body);
    let message = if !parsed.message.is_empty() {
        parsed.message
    } else if let Some(m) = challenge_message.filter(|m| !m.is_empty()) {
        super::error::truncate(&m)
    } else {
        format!(
            "HTTP {} {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        )
        .trim_end()
        .to_string()
    };
    Failure {
        status,
        codes: parsed.codes,
        message,
        retry_after,
    }
}

impl Failure {
    pub(super) fn into_error(self, repo: &RepositoryRef, endpoint: Endpoint) -> RegistryError {
        let registry = repo.registry.clone();
        match self.status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => RegistryError::Unauthorized {
                registry,
                message: self.message,
            },
            StatusCode::NOT_FOUND if endpoint == Endpoint::Registry => RegistryError::NotFound {
                registry,
                repository: repo.path.clone(),
                message: self.message,
            },
            StatusCode::TOO_MANY_REQUESTS => RegistryError::RateLimited {
                registry,
                retry_after: self.retry_after,
                message: self.message,
            },
            status => RegistryError::Server {
                registry,
                status: status.as_u16(),
                message: match endpoint {
                    Endpoint::Registry => self.message,
                    Endpoint::TokenServer => format!("token server: {}", self.message),
                },
            },
        }
    }
}

/// Reads a whole body, failing if it exceeds `limit` (a registry sending more is broken or
/// hostile, and memory must stay bounded).
pub(super) async fn read_body(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, RegistryError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
        if body.len() + chunk.len() > limit {
            return Err(RegistryError::Protocol(format!(
                "response from {} exceeds {limit} bytes",
                response.url()
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads up to `limit` bytes of an error body; transport errors just end the body, since
/// the status already says what went wrong.
async fn read_body_truncated(mut response: reqwest::Response, limit: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = limit.saturating_sub(body.len());
        body.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
        if body.len() >= limit {
            break;
        }
    }
    body
}

fn transport_error(error: reqwest::Error) -> RegistryError {
    RegistryError::Transport(error_chain(&error))
}

/// reqwest's top-level message ("error sending request") hides the cause (refused, DNS,
/// certificate, timeout); the full chain is what an operator needs.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The `outcome` label of one HTTP request to a registry, from its status (None: the
/// request failed before a response).
pub fn http_outcome(status: Option<u16>) -> &'static str {
    match status {
        None => "transport",
        Some(200..=399) => "ok",
        Some(401 | 403) => "unauthorized",
        Some(404) => "not_found",
        Some(429) => "rate_limited",
        Some(500..=599) => "server",
        Some(_) => "client",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_outcomes_by_status() {
        let cases = [
            (None, "transport"),
            (Some(200), "ok"),
            (Some(307), "ok"),
            (Some(401), "unauthorized"),
            (Some(403), "unauthorized"),
            (Some(404), "not_found"),
            (Some(429), "rate_limited"),
            (Some(400), "client"),
            (Some(503), "server"),
        ];
        for (status, outcome) in cases {
            assert_eq!(http_outcome(status), outcome, "{status:?}");
        }
    }
}
