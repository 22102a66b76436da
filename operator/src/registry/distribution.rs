//! Scan step: tags and digests from a registry over the OCI distribution API.
//!
//! [`RegistryClient`] lists a repository's tags (`GET /v2/<name>/tags/list`, following
//! `Link` pagination) and resolves one tag to its manifest digest
//! (`HEAD /v2/<name>/manifests/<ref>`). Authentication follows the registry's challenges
//! (see [`super::auth`]). It is the [`TagSource`] for every registry that has no dedicated
//! API client; ECR gets its own source later but can also be read through this one.
//!
//! Every request waits for its registry's rate limit and is retried a bounded number of times
//! on 5xx answers and transport failures; a 429 pauses the registry (see
//! [`super::ratelimit`]). Per-host settings (plain HTTP, an extra CA, rates, lookup budget)
//! come from [`super::settings`]. Created times for `Newest` ordering are read by
//! [`RegistryClient::list_tags_with_times`] (see [`super::metadata`]).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::{
    ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, LINK, RETRY_AFTER, WWW_AUTHENTICATE,
};
use reqwest::{Method, StatusCode, Url};
use sha2::{Digest as _, Sha256};

use super::auth::{
    AuthScheme, Challenge, Credentials, FetchedToken, Issuer, MAX_REMEMBERED_SCOPES, TokenCache,
    TokenKey, WideKey, WideOutcome, WideTokens, parse_token_response, parse_www_authenticate,
    select_scheme,
};
use super::error::{RegistryError, parse_error_body, parse_retry_after};
use super::metadata::MetadataCache;
use super::ratelimit::{
    Bucket, DEFAULT_RATE_LIMIT_PAUSE, MAX_PAUSE_WAIT, RetryPolicy, WarnThrottle,
    is_retryable_status,
};
use super::reference::{RepositoryRef, is_valid_digest, is_valid_tag};
use super::settings::{
    DEFAULT_SETTINGS_KEY, Limits, RegistrySettings, host_key, limits_for, normalize_registries,
    parse_ca_pem,
};
use super::{TagInfo, TagSource};

/// Manifest media types asked for when resolving digests. Multi-arch indexes come first: the
/// digest users pin is the one `docker pull <tag>` resolves, which for multi-arch images is
/// the index, not one platform's manifest.
pub(super) const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.v2+json";

const DIGEST_HEADER: &str = "docker-content-digest";

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
/// One page of tags. Even 100 000 tags of 128 characters fit; a larger answer is broken.
const MAX_TAGS_PAGE_BYTES: usize = 32 * 1024 * 1024;
/// Error and token bodies are small; anything beyond is cut (errors) or refused (tokens).
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
const MAX_TOKEN_BODY_BYTES: usize = 1024 * 1024;

/// Most bytes of a token request URL, which grows with the number of scopes it asks for
/// (see [`super::auth`] on registry-wide tokens). Servers differ in how long a request head
/// may be: Go's net/http (the distribution registry and most token servers) accepts 1 MiB
/// and hyper about 400 KiB, while nginx, often in front of both, allows 8 KiB per request
/// line or header by default. 64 KiB holds about a thousand typical scopes; a server that
/// refuses such a request answers 414, 431 or 400, and the number of scopes per request is
/// then halved for that registry.
pub(crate) const DEFAULT_TOKEN_URL_BUDGET: usize = 64 * 1024;

/// An `Authorization` value shorter than this fits every server's default header limits, so
/// a registry's 400 to it is not about its size.
const SMALL_AUTHORIZATION: usize = 4 * 1024;

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
pub(crate) struct Tuning {
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

/// What authenticated one request, remembered to decide how to react to a 401.
#[derive(Debug, Clone)]
enum SentAuth {
    Basic(String),
    /// A token for this request's scope alone.
    Bearer(String),
    /// A registry-wide token, and how many scopes it was requested for.
    Wide {
        token: String,
        scopes: usize,
    },
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

    pub(crate) fn build(
        options: RegistryOptions,
        registries: HashMap<String, RegistrySettings>,
        tuning: Tuning,
    ) -> Result<Self, RegistryError> {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Losing a race with another installer is fine: some provider is then in place.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let registries = normalize_registries(registries)?;
        let http_client = |extra_ca: Option<&str>| -> Result<reqwest::Client, RegistryError> {
            let mut builder = reqwest::Client::builder()
                .user_agent(options.user_agent.clone())
                .timeout(options.timeout)
                .connect_timeout(options.timeout.min(Duration::from_secs(10)));
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
                wide_tokens: WideTokens::new(DEFAULT_TOKEN_URL_BUDGET, MAX_REMEMBERED_SCOPES),
                token_fetches: AtomicU64::new(0),
                token_outcomes: Mutex::new(HashMap::new()),
                requests: Mutex::new(HashMap::new()),
                rate_limit_waits: Mutex::new(HashMap::new()),
                metadata: MetadataCache::default(),
                metadata_fetches: AtomicU64::new(0),
            }),
        })
    }

    /// Announces repositories of `registry` that will be read with `creds`, so that the next
    /// registry-wide token covers them all (one token request at start instead of one per
    /// group of repositories that happen to be scanned together).
    pub fn expect_repositories<'a>(
        &self,
        registry: &str,
        creds: &Credentials,
        paths: impl IntoIterator<Item = &'a str>,
    ) {
        let key = WideKey {
            registry: registry.to_string(),
            identity: creds.identity(),
        };
        for path in paths {
            self.inner.wide_tokens.remember(&key, &pull_scope(path));
        }
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

    /// When the longest-lasting registry-wide token for `registry` and `creds` stops being
    /// handed out, if there is one.
    #[cfg(test)]
    pub(crate) fn wide_token_usable_until(
        &self,
        registry: &str,
        creds: &Credentials,
    ) -> Option<std::time::Instant> {
        self.inner.wide_tokens.usable_until(&WideKey {
            registry: registry.to_string(),
            identity: creds.identity(),
        })
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

    /// Lists all tags of `repo`, following pagination. Tags that do not match the tag
    /// grammar are dropped, since a chosen tag is later written into manifests.
    pub async fn list_tags(
        &self,
        repo: &RepositoryRef,
        creds: &Credentials,
    ) -> Result<Vec<String>, RegistryError> {
        Ok(self.list_tags_paged(repo, creds).await?.0)
    }

    /// [`Self::list_tags`], also returning how many pages were read.
    pub(crate) async fn list_tags_paged(
        &self,
        repo: &RepositoryRef,
        creds: &Credentials,
    ) -> Result<(Vec<String>, usize), RegistryError> {
        #[derive(serde::Deserialize)]
        struct Page {
            // Some registries send `null` for a repository without tags.
            tags: Option<Vec<String>>,
        }

        let base = self.repo_url(repo, "tags/list")?;
        let mut url = base.clone();
        let mut page_size = self.inner.paging.page_size;
        if let Some(n) = page_size {
            url.query_pairs_mut().append_pair("n", &n.to_string());
        }
        let mut visited = HashSet::new();
        let mut seen_tags = HashSet::new();
        let mut tags = Vec::new();
        let mut pages = 0usize;
        let mut dropped = 0usize;

        loop {
            if pages >= self.inner.paging.max_pages {
                return Err(RegistryError::Protocol(format!(
                    "{repo}: tag list still continues after {pages} pages; refusing to read further"
                )));
            }
            if !visited.insert(url.to_string()) {
                return Err(RegistryError::Protocol(format!(
                    "{repo}: tag list pagination loops back to {url}"
                )));
            }
            let response = self
                .send(repo, creds, Method::GET, &url, "application/json")
                .await?;
            let status = response.status();
            if !status.is_success() {
                let failure = read_failure(response).await;
                // Registries may cap `n` (distribution's `tags.maxtags`) and reject larger
                // values instead of clamping; their default page size still works.
                if pages == 0
                    && page_size.is_some()
                    && status == StatusCode::BAD_REQUEST
                    && failure
                        .codes
                        .iter()
                        .any(|c| c == "PAGINATION_NUMBER_INVALID")
                {
                    tracing::debug!(%repo, "registry rejected the tag page size; retrying without n");
                    page_size = None;
                    url = base.clone();
                    visited.clear();
                    continue;
                }
                return Err(failure.into_error(repo, Endpoint::Registry));
            }
            pages += 1;
            let next = next_link(response.headers(), &url)?;
            let body = read_body(response, MAX_TAGS_PAGE_BYTES).await?;
            let page: Page = serde_json::from_slice(&body).map_err(|e| {
                RegistryError::Protocol(format!("{repo}: tag list is not valid JSON: {e}"))
            })?;
            for tag in page.tags.unwrap_or_default() {
                if !is_valid_tag(&tag) {
                    dropped += 1;
                    continue;
                }
                if seen_tags.insert(tag.clone()) {
                    tags.push(tag);
                }
            }
            match next {
                Some(next) => url = next,
                None => break,
            }
        }
        if dropped > 0 {
            tracing::warn!(%repo, dropped, "registry listed tags that are not valid tag names; ignored them");
        }
        tracing::debug!(%repo, pages, tags = tags.len(), "listed tags");
        Ok((tags, pages))
    }

    /// Names of every repository of `registry` (`GET /v2/_catalog`, following `Link`
    /// pagination), sorted and without duplicates: how pattern watches find their members.
    ///
    /// The catalog is an extension of the distribution API. Registries that do not serve it
    /// answer 404 (or 405); token-based registries answer 401/403 to credentials without the
    /// `registry:catalog:*` scope. Those answers are returned as the usual errors
    /// ([`RegistryError::NotFound`], [`RegistryError::Unauthorized`]) for the caller to
    /// report. Names that are not valid repository names are dropped.
    pub async fn list_repositories(
        &self,
        registry: &str,
        creds: &Credentials,
    ) -> Result<Vec<String>, RegistryError> {
        Ok(self.list_repositories_paged(registry, creds).await?.0)
    }

    /// [`Self::list_repositories`], also returning how many pages were read.
    pub async fn list_repositories_paged(
        &self,
        registry: &str,
        creds: &Credentials,
    ) -> Result<(Vec<String>, usize), RegistryError> {
        #[derive(serde::Deserialize)]
        struct Page {
            repositories: Option<Vec<String>>,
        }

        let registry = registry.to_ascii_lowercase();
        // The catalog is not a repository; this reference only carries the host (rate limit,
        // learnt auth scheme, token cache) and names the endpoint in errors.
        let target = RepositoryRef {
            registry: registry.clone(),
            path: CATALOG_PATH.to_string(),
        };
        let scheme = self.scheme_for(&registry);
        let base =
            Url::parse(&format!("{scheme}://{registry}/v2/{CATALOG_PATH}")).map_err(|e| {
                RegistryError::InvalidReference(format!(
                    "cannot form the catalog URL of {registry}: {e}"
                ))
            })?;
        let mut url = base.clone();
        let mut page_size = self.inner.paging.page_size;
        if let Some(n) = page_size {
            url.query_pairs_mut().append_pair("n", &n.to_string());
        }
        let mut visited = HashSet::new();
        let mut names = Vec::new();
        let mut pages = 0usize;
        let mut dropped = 0usize;
        loop {
            if pages >= self.inner.paging.max_pages {
                return Err(RegistryError::Protocol(format!(
                    "{registry}: repository catalog still continues after {pages} pages; refusing to read further"
                )));
            }
            if !visited.insert(url.to_string()) {
                return Err(RegistryError::Protocol(format!(
                    "{registry}: catalog pagination loops back to {url}"
                )));
            }
            let response = self
                .send_scoped(
                    &target,
                    CATALOG_SCOPE,
                    creds,
                    Method::GET,
                    &url,
                    "application/json",
                )
                .await?;
            let status = response.status();
            if !status.is_success() {
                let failure = read_failure(response).await;
                // Like tag lists: distribution caps `n` (`catalog.maxentries`) and refuses
                // larger values; its default page size still works.
                if pages == 0
                    && page_size.is_some()
                    && status == StatusCode::BAD_REQUEST
                    && failure
                        .codes
                        .iter()
                        .any(|c| c == "PAGINATION_NUMBER_INVALID")
                {
                    tracing::debug!(%registry, "registry rejected the catalog page size; retrying without n");
                    page_size = None;
                    url = base.clone();
                    visited.clear();
                    continue;
                }
                return Err(failure.into_error(&target, Endpoint::Registry));
            }
            pages += 1;
            let next = next_link(response.headers(), &url)?;
            let body = read_body(response, MAX_TAGS_PAGE_BYTES).await?;
            let page: Page = serde_json::from_slice(&body).map_err(|e| {
                RegistryError::Protocol(format!("{registry}: catalog is not valid JSON: {e}"))
            })?;
            for name in page.repositories.unwrap_or_default() {
                match RepositoryRef::parse(&format!("{registry}/{name}")) {
                    Ok(parsed) if parsed.path == name => names.push(name),
                    _ => dropped += 1,
                }
            }
            match next {
                Some(next) => url = next,
                None => break,
            }
        }
        if dropped > 0 {
            tracing::warn!(%registry, dropped, "registry catalog listed invalid repository names; ignored them");
        }
        names.sort();
        names.dedup();
        tracing::debug!(%registry, pages, repositories = names.len(), "listed the catalog");
        Ok((names, pages))
    }

    /// Resolves a tag (or checks a digest) to the manifest digest, as `docker pull` would
    /// see it. `Ok(None)` when the registry answers 404.
    ///
    /// Uses `HEAD` so that Docker Hub does not count the request against pull limits; falls
    /// back to `GET` and hashes the body when the registry sends no `Docker-Content-Digest`
    /// or does not allow `HEAD`.
    pub async fn manifest_digest(
        &self,
        repo: &RepositoryRef,
        reference: &str,
        creds: &Credentials,
    ) -> Result<Option<String>, RegistryError> {
        let is_digest = reference.contains(':');
        let valid = if is_digest {
            is_valid_digest(reference)
        } else {
            is_valid_tag(reference)
        };
        if !valid {
            return Err(RegistryError::InvalidReference(format!(
                "{reference:?} is neither a valid tag nor a valid digest"
            )));
        }
        let url = self.repo_url(repo, &format!("manifests/{reference}"))?;

        let head = self
            .send(repo, creds, Method::HEAD, &url, MANIFEST_ACCEPT)
            .await?;
        match head.status() {
            StatusCode::NOT_FOUND => return Ok(None),
            StatusCode::METHOD_NOT_ALLOWED => {}
            status if status.is_success() => {
                if let Some(digest) = digest_header(head.headers())? {
                    return Ok(Some(digest));
                }
                // A HEAD that succeeds for a digest reference proves the digest exists.
                if is_digest {
                    return Ok(Some(reference.to_string()));
                }
            }
            _ => {
                return Err(read_failure(head)
                    .await
                    .into_error(repo, Endpoint::Registry));
            }
        }

        tracing::debug!(%repo, reference, "no digest from HEAD; fetching the manifest");
        let get = self
            .send(repo, creds, Method::GET, &url, MANIFEST_ACCEPT)
            .await?;
        let status = get.status();
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(read_failure(get).await.into_error(repo, Endpoint::Registry));
        }
        if let Some(digest) = digest_header(get.headers())? {
            return Ok(Some(digest));
        }
        let body = read_body(get, MAX_MANIFEST_BYTES).await?;
        Ok(Some(format!(
            "sha256:{}",
            hex::encode(Sha256::digest(&body))
        )))
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

    /// Sends one registry request, authenticating as the registry asks.
    ///
    /// The first request goes out with whatever is known about the registry (nothing,
    /// Basic, or a cached token); after a 401, one more with the scheme the challenge names,
    /// and a second 401 is final. Two cases add a request: a registry-wide token refused
    /// with `insufficient_scope` is followed by the repository's own token (once), and a
    /// wide token refused as too large a header is followed by one for fewer repositories.
    /// Other responses are returned as they are.
    pub(super) async fn send(
        &self,
        repo: &RepositoryRef,
        creds: &Credentials,
        method: Method,
        url: &Url,
        accept: &str,
    ) -> Result<reqwest::Response, RegistryError> {
        let scope = pull_scope(&repo.path);
        self.send_scoped(repo, &scope, creds, method, url, accept)
            .await
    }

    /// [`Self::send`] with an explicit token scope (the catalog needs `registry:catalog:*`).
    /// Pull scopes use registry-wide tokens; other scopes get tokens of their own.
    async fn send_scoped(
        &self,
        repo: &RepositoryRef,
        scope: &str,
        creds: &Credentials,
        method: Method,
        url: &Url,
        accept: &str,
    ) -> Result<reqwest::Response, RegistryError> {
        let wide = is_pull_scope(scope);
        let remembered = self.remembered_scheme(&repo.registry);
        if wide && !matches!(remembered, Some(AuthScheme::Basic)) {
            // Before any waiting (rate limit, challenge, token fetch): a wide token fetched
            // meanwhile for another repository then covers this one too.
            self.inner
                .wide_tokens
                .remember(&wide_key(repo, creds), scope);
        }
        // The token server that issued the current token.
        let mut issuer: Option<(String, Option<String>)> = None;
        let mut auth = match remembered {
            Some(AuthScheme::Basic) => creds.basic_header().map(SentAuth::Basic),
            Some(AuthScheme::Bearer { realm, service }) => {
                let token = self
                    .bearer_token(repo, scope, wide, creds, &realm, service.as_deref(), None)
                    .await?;
                issuer = Some((realm, service));
                Some(token)
            }
            None => None,
        };

        let mut challenged = false;
        let mut own_token_fallback = false;
        // Each shrink at least halves the scopes of the wide token; this only bounds the loop.
        let mut shrinks_left = usize::BITS;
        loop {
            let http = self.http_for(&repo.registry);
            let response = self
                .execute(&repo.registry, || {
                    let request = http
                        .request(method.clone(), url.clone())
                        .header(ACCEPT, accept);
                    match &auth {
                        Some(SentAuth::Basic(header)) => request.header(AUTHORIZATION, header),
                        Some(SentAuth::Bearer(token) | SentAuth::Wide { token, .. }) => {
                            request.bearer_auth(token)
                        }
                        None => request,
                    }
                })
                .await?;

            if let (Some(SentAuth::Wide { token, scopes }), Some((realm, service))) =
                (&auth, &issuer)
                && *scopes > 1
                && token.len() >= SMALL_AUTHORIZATION
                && shrinks_left > 0
                && head_too_large(&response)
            {
                shrinks_left -= 1;
                tracing::debug!(
                    registry = %repo.registry,
                    scopes,
                    token_bytes = token.len(),
                    "registry refused a registry-wide token as too large; asking for fewer repositories per token"
                );
                self.inner
                    .wide_tokens
                    .lower_scope_limit(&repo.registry, scopes / 2);
                auth = Some(
                    self.bearer_token(
                        repo,
                        scope,
                        wide,
                        creds,
                        realm,
                        service.as_deref(),
                        auth.as_ref(),
                    )
                    .await?,
                );
                continue;
            }
            if response.status() != StatusCode::UNAUTHORIZED {
                return Ok(response);
            }

            let challenges: Vec<_> = response
                .headers()
                .get_all(WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(parse_www_authenticate)
                .collect();
            if let (Some(SentAuth::Wide { .. }), Some((realm, service))) = (&auth, &issuer)
                && !own_token_fallback
                && is_insufficient_scope(&challenges)
            {
                // The token server granted fewer repositories than asked for.
                own_token_fallback = true;
                tracing::debug!(%repo, "registry-wide token does not cover this repository; using its own token");
                self.inner
                    .wide_tokens
                    .use_own_token(&wide_key(repo, creds), scope);
                auth = Some(
                    self.bearer_token(repo, scope, wide, creds, realm, service.as_deref(), None)
                        .await?,
                );
                continue;
            }
            if challenged {
                if matches!(auth, Some(SentAuth::Wide { .. })) {
                    // Even a wide token fetched after the challenge was refused: this
                    // repository gets its own token from the next request on.
                    self.inner
                        .wide_tokens
                        .use_own_token(&wide_key(repo, creds), scope);
                }
                return Ok(response);
            }
            challenged = true;

            let Some(scheme) = select_scheme(&challenges) else {
                // 401 with nothing to follow: report it as it is.
                return Ok(response);
            };
            self.remember_scheme(&repo.registry, &scheme);
            auth = match scheme {
                AuthScheme::Basic => match (creds.basic_header(), &auth) {
                    // Already sent these credentials, or there are none to send.
                    (Some(_), Some(SentAuth::Basic(_))) | (None, _) => return Ok(response),
                    (Some(header), _) => Some(SentAuth::Basic(header)),
                },
                AuthScheme::Bearer { realm, service } => {
                    let token = self
                        .bearer_token(
                            repo,
                            scope,
                            wide,
                            creds,
                            &realm,
                            service.as_deref(),
                            auth.as_ref(),
                        )
                        .await?;
                    issuer = Some((realm, service));
                    Some(token)
                }
            };
        }
    }

    /// A token for `scope`: a registry-wide one when `wide` (a pull scope) and the
    /// repository may use it, else one of its own. `rejected` is the authentication the
    /// registry just refused, if any: a cached token equal to it is replaced once.
    #[allow(clippy::too_many_arguments)]
    async fn bearer_token(
        &self,
        repo: &RepositoryRef,
        scope: &str,
        wide: bool,
        creds: &Credentials,
        realm: &str,
        service: Option<&str>,
        rejected: Option<&SentAuth>,
    ) -> Result<SentAuth, RegistryError> {
        if wide {
            let key = wide_key(repo, creds);
            if !self.inner.wide_tokens.needs_own_token(&key, scope) {
                let issuer = Issuer {
                    realm: realm.to_string(),
                    service: service.map(str::to_string),
                };
                let base_len = token_url::<&str>(&repo.registry, realm, service, &[])?
                    .as_str()
                    .len();
                let rejected = match rejected {
                    Some(SentAuth::Wide { token, .. }) => Some(token.as_str()),
                    _ => None,
                };
                let outcome = self
                    .inner
                    .wide_tokens
                    .get_or_fetch(&key, &issuer, scope, rejected, base_len, |scopes| {
                        self.fetch_token(repo, scopes, creds, realm, service)
                    })
                    .await?;
                if let WideOutcome::Token { token, scopes } = outcome {
                    return Ok(SentAuth::Wide { token, scopes });
                }
            }
        }
        let key = TokenKey {
            registry: repo.registry.clone(),
            scope: scope.to_string(),
            identity: creds.identity(),
        };
        let rejected = match rejected {
            Some(SentAuth::Bearer(token)) => Some(token.as_str()),
            _ => None,
        };
        let token = self
            .inner
            .tokens
            .get_or_fetch(&key, rejected, || {
                self.fetch_token(repo, vec![scope.to_string()], creds, realm, service)
            })
            .await?;
        Ok(SentAuth::Bearer(token))
    }

    /// Asks the token server named by a Bearer challenge for a token covering `scopes`,
    /// counting the outcome.
    async fn fetch_token(
        &self,
        repo: &RepositoryRef,
        scopes: Vec<String>,
        creds: &Credentials,
        realm: &str,
        service: Option<&str>,
    ) -> Result<FetchedToken, RegistryError> {
        let result = self
            .request_token(repo, scopes, creds, realm, service)
            .await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => e.category(),
        };
        let mut outcomes = self
            .inner
            .token_outcomes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *outcomes.entry(outcome).or_default() += 1;
        result
    }

    /// One token request (see [`Self::fetch_token`]).
    async fn request_token(
        &self,
        repo: &RepositoryRef,
        scopes: Vec<String>,
        creds: &Credentials,
        realm: &str,
        service: Option<&str>,
    ) -> Result<FetchedToken, RegistryError> {
        let url = token_url(&repo.registry, realm, service, &scopes)?;
        if url.scheme() == "http" {
            // The realm comes from the network; never let it pull a password onto a
            // plain-text connection unless the user marked that host as insecure.
            let host = url_authority(&url);
            if creds.basic_header().is_some() && self.scheme_for(&host) != "http" {
                return Err(RegistryError::Protocol(format!(
                    "registry {} sent token realm {realm} over plain HTTP; refusing to send credentials there (add {host} to the insecure hosts if intended)",
                    repo.registry
                )));
            }
        }

        self.inner.token_fetches.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            registry = %repo.registry,
            scopes = scopes.len(),
            first_scope = scopes.first().map(String::as_str).unwrap_or_default(),
            "fetching registry token"
        );
        // The token server may share the registry's private CA (same host, or a host of its
        // own with settings); its requests count against the registry's rate limit.
        let http = self
            .inner
            .tls_clients
            .get(&url_authority(&url))
            .unwrap_or_else(|| self.http_for(&repo.registry));
        let basic = creds.basic_header();
        let response = self
            .execute(&repo.registry, || {
                let request = http.get(url.clone()).header(ACCEPT, "application/json");
                match &basic {
                    Some(header) => request.header(AUTHORIZATION, header),
                    None => request,
                }
            })
            .await?;
        if !response.status().is_success() {
            return Err(read_failure(response)
                .await
                .into_error(repo, Endpoint::TokenServer));
        }
        let body = read_body(response, MAX_TOKEN_BODY_BYTES).await?;
        parse_token_response(&body)
    }
}

impl TagSource for RegistryClient {
    fn list<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        creds: &'a Credentials,
    ) -> BoxFuture<'a, Result<Vec<TagInfo>, RegistryError>> {
        Box::pin(async move {
            let tags = self.list_tags(repo, creds).await?;
            Ok(tags
                .into_iter()
                .map(|tag| TagInfo {
                    tag,
                    digest: None,
                    pushed_at: None,
                })
                .collect())
        })
    }

    fn digest<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        reference: &'a str,
        creds: &'a Credentials,
    ) -> BoxFuture<'a, Result<Option<String>, RegistryError>> {
        Box::pin(self.manifest_digest(repo, reference, creds))
    }

    fn list_with_times<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        creds: &'a Credentials,
        budget: Option<u32>,
    ) -> BoxFuture<'a, Result<Vec<TagInfo>, RegistryError>> {
        Box::pin(async move { Ok(self.list_tags_with_times(repo, creds, budget).await?.tags) })
    }
}

/// The token request URL for a Bearer challenge: the realm with `service` (when the challenge
/// named one) and one `scope` parameter per scope added to its query, as the Docker token
/// spec describes.
pub(crate) fn token_url<S: AsRef<str>>(
    registry: &str,
    realm: &str,
    service: Option<&str>,
    scopes: &[S],
) -> Result<Url, RegistryError> {
    let mut url = Url::parse(realm).map_err(|e| {
        RegistryError::Protocol(format!(
            "registry {registry} named an invalid token realm {realm:?}: {e}"
        ))
    })?;
    if !matches!(url.scheme(), "https" | "http") {
        return Err(RegistryError::Protocol(format!(
            "registry {registry} named a token realm with unsupported scheme {:?}",
            url.scheme()
        )));
    }
    {
        let mut query = url.query_pairs_mut();
        if let Some(service) = service {
            query.append_pair("service", service);
        }
        for scope in scopes {
            query.append_pair("scope", scope.as_ref());
        }
    }
    Ok(url)
}

/// The token scope for pulling from the repository at `path`.
fn pull_scope(path: &str) -> String {
    format!("repository:{path}:pull")
}

/// Whether `scope` is pull access to one repository, which registry-wide tokens cover.
fn is_pull_scope(scope: &str) -> bool {
    scope.starts_with("repository:") && scope.ends_with(":pull") && !scope.contains(',')
}

fn wide_key(repo: &RepositoryRef, creds: &Credentials) -> WideKey {
    WideKey {
        registry: repo.registry.clone(),
        identity: creds.identity(),
    }
}

/// Whether a 401 says the token lacks access to the resource (`error="insufficient_scope"`,
/// RFC 6750 §3.1), as opposed to the token being invalid.
fn is_insufficient_scope(challenges: &[Challenge]) -> bool {
    challenges
        .iter()
        .any(|c| c.scheme == "bearer" && c.param("error") == Some("insufficient_scope"))
}

/// Whether a registry refused a request because its head was too large: 431, or the 400 that
/// nginx answers to an oversized header line, an HTML page where registries send JSON.
fn head_too_large(response: &reqwest::Response) -> bool {
    match response.status() {
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => true,
        StatusCode::BAD_REQUEST => !response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("json")),
        _ => false,
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

pub(super) fn digest_header(headers: &HeaderMap) -> Result<Option<String>, RegistryError> {
    let Some(value) = headers.get(DIGEST_HEADER) else {
        return Ok(None);
    };
    let digest = value.to_str().map(str::trim).unwrap_or_default();
    if is_valid_digest(digest) {
        Ok(Some(digest.to_string()))
    } else {
        Err(RegistryError::Protocol(format!(
            "registry sent an invalid Docker-Content-Digest {value:?}"
        )))
    }
}

/// Finds the `rel="next"` target among the `Link` headers and resolves it against the
/// current page URL.
///
/// The target must be on the same host as the registry: the next request carries the
/// credentials, so a foreign host in a Link header must not receive them. A target on the
/// same host keeps the current scheme and port, because proxies in front of registries
/// often write `http://` links while serving HTTPS.
fn next_link(headers: &HeaderMap, current: &Url) -> Result<Option<Url>, RegistryError> {
    let Some(target) = headers
        .get_all(LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(parse_link_header)
        .find(|link| link.rels.iter().any(|r| r.eq_ignore_ascii_case("next")))
        .map(|link| link.target)
    else {
        return Ok(None);
    };
    let resolved = current
        .join(&target)
        .map_err(|e| RegistryError::Protocol(format!("invalid pagination link {target:?}: {e}")))?;
    if resolved.host_str() != current.host_str() {
        return Err(RegistryError::Protocol(format!(
            "pagination link {target:?} points to another host; not following it"
        )));
    }
    let mut next = current.clone();
    next.set_path(resolved.path());
    next.set_query(resolved.query());
    Ok(Some(next))
}

/// One link of a `Link` header (RFC 8288).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    pub target: String,
    pub rels: Vec<String>,
}

/// Parses `<target>; rel="next"; foo=bar, <other>; rel=prev`. Commas inside `<...>` or
/// quoted values do not split links. Entries without `<...>` are skipped.
pub(crate) fn parse_link_header(value: &str) -> Vec<Link> {
    let mut links = Vec::new();
    let mut rest = value;
    while let Some(open) = rest.find('<') {
        let after_open = &rest[open + 1..];
        let Some(close) = after_open.find('>') else {
            break;
        };
        let target = after_open[..close].trim().to_string();
        let mut params = &after_open[close + 1..];

        // Parameters run until a comma outside quotes.
        let mut in_quotes = false;
        let mut escaped = false;
        let mut end = params.len();
        for (i, c) in params.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if in_quotes => escaped = true,
                '"' => in_quotes = !in_quotes,
                ',' if !in_quotes => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        rest = params.get(end + 1..).unwrap_or("");
        params = &params[..end];

        let mut rels = Vec::new();
        for param in params.split(';') {
            let Some((name, raw)) = param.split_once('=') else {
                continue;
            };
            if name.trim().eq_ignore_ascii_case("rel") {
                let raw = raw.trim();
                let unquoted = raw
                    .strip_prefix('"')
                    .and_then(|r| r.strip_suffix('"'))
                    .unwrap_or(raw);
                rels.extend(unquoted.split_whitespace().map(str::to_string));
            }
        }
        links.push(Link { target, rels });
    }
    links
}

/// `host[:port]` of a URL, with the port only when it is explicit, matching how insecure
/// hosts are written.
fn url_authority(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

pub(super) fn normalize_host(host: &str) -> String {
    let lower = host.trim().to_ascii_lowercase();
    let without_scheme = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
        .unwrap_or(&lower);
    without_scheme.trim_end_matches('/').to_string()
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
    use reqwest::header::HeaderValue;

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

    fn headers(links: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for link in links {
            map.append(LINK, HeaderValue::from_str(link).unwrap());
        }
        map
    }

    #[test]
    fn link_header_forms() {
        let links = parse_link_header(r#"</v2/a/tags/list?n=1&last=b>; rel="next""#);
        assert_eq!(
            links,
            vec![Link {
                target: "/v2/a/tags/list?n=1&last=b".into(),
                rels: vec!["next".into()]
            }]
        );
        let links = parse_link_header(
            r#"<https://r.io/v2/a/tags/list?last=x,y>; title="a, b"; rel=prev, <https://r.io/v2/a/tags/list?last=z>; REL="next last""#,
        );
        assert_eq!(links.len(), 2);
        assert_eq!(links[0].target, "https://r.io/v2/a/tags/list?last=x,y");
        assert_eq!(links[0].rels, vec!["prev"]);
        assert_eq!(links[1].rels, vec!["next", "last"]);
        assert_eq!(parse_link_header("garbage"), vec![]);
        assert_eq!(parse_link_header("<unterminated"), vec![]);
    }

    #[test]
    fn next_link_resolution() {
        let current = Url::parse("https://r.io/v2/team/app/tags/list?n=2").unwrap();
        // Relative.
        let next = next_link(
            &headers(&[r#"</v2/team/app/tags/list?n=2&last=b>; rel="next""#]),
            &current,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            next.as_str(),
            "https://r.io/v2/team/app/tags/list?n=2&last=b"
        );
        // Absolute on the same host, even with a downgraded scheme.
        let next = next_link(
            &headers(&[r#"<http://r.io/v2/team/app/tags/list?last=c>; rel="next""#]),
            &current,
        )
        .unwrap()
        .unwrap();
        assert_eq!(next.as_str(), "https://r.io/v2/team/app/tags/list?last=c");
        // Only prev: no next page.
        assert_eq!(
            next_link(&headers(&[r#"</x>; rel="prev""#]), &current).unwrap(),
            None
        );
        assert_eq!(next_link(&headers(&[]), &current).unwrap(), None);
        // Separate Link headers.
        let next = next_link(
            &headers(&[r#"</p>; rel="prev""#, r#"</n>; rel="next""#]),
            &current,
        )
        .unwrap()
        .unwrap();
        assert_eq!(next.path(), "/n");
        // Another host must not get the credentials.
        assert!(matches!(
            next_link(
                &headers(&[r#"<https://evil.io/v2/x>; rel="next""#]),
                &current
            ),
            Err(RegistryError::Protocol(_))
        ));
    }

    #[test]
    fn token_urls_with_several_scopes() {
        let scopes = [
            "repository:team/app:pull",
            "repository:library/nginx:pull",
            "repository:a.b/c_d-e:pull",
        ];
        let base = token_url::<&str>("r.io", "https://auth.r.io/token", Some("r.io"), &[])
            .unwrap()
            .as_str()
            .len();
        let url = token_url("r.io", "https://auth.r.io/token", Some("r.io"), &scopes).unwrap();
        assert_eq!(
            url.as_str(),
            "https://auth.r.io/token?service=r.io&scope=repository%3Ateam%2Fapp%3Apull&scope=repository%3Alibrary%2Fnginx%3Apull&scope=repository%3Aa.b%2Fc_d-e%3Apull"
        );
        // The budget arithmetic of wide tokens matches the URL that is sent.
        let expected: usize = base
            + scopes
                .iter()
                .map(|s| super::super::auth::scope_param_len(s))
                .sum::<usize>();
        assert_eq!(url.as_str().len(), expected);
        assert!(is_pull_scope(scopes[0]));
        assert!(!is_pull_scope(CATALOG_SCOPE));
        assert!(!is_pull_scope("repository:a:pull,push"));
    }

    #[test]
    fn insecure_host_normalisation() {
        assert_eq!(normalize_host(" HTTP://Reg.Local:5000/ "), "reg.local:5000");
        assert_eq!(normalize_host("reg.local"), "reg.local");
    }

    #[test]
    fn digest_header_validation() {
        let mut map = HeaderMap::new();
        assert_eq!(digest_header(&map).unwrap(), None);
        let digest = format!("sha256:{}", "ab".repeat(32));
        map.insert(DIGEST_HEADER, HeaderValue::from_str(&digest).unwrap());
        assert_eq!(digest_header(&map).unwrap(), Some(digest));
        map.insert(DIGEST_HEADER, HeaderValue::from_static("sha256:nothex"));
        assert!(matches!(
            digest_header(&map),
            Err(RegistryError::Protocol(_))
        ));
    }
}
