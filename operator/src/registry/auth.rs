//! Scan step, authentication: credentials, `WWW-Authenticate` challenges and the shared
//! bearer-token caches.
//!
//! Registries announce how to authenticate in the `WWW-Authenticate` header of a 401:
//! `Basic` (send the credentials on each request) or `Bearer` (exchange the credentials at a
//! token server for a short-lived token, per the Docker token authentication spec). Tokens
//! are shared by every clone of the client, and fetching them is single-flight, which
//! matters for Docker Hub's authentication rate limits.
//!
//! # Registry-wide tokens
//!
//! One token request may carry several `scope` parameters
//! (`?service=s&scope=repository:a:pull&scope=repository:b:pull`), and the token's
//! `access` claim then lists each one the server granted. Pull access to repositories
//! therefore goes through `WideTokens`: per registry and credential identity the client
//! remembers every pull scope it has been asked for (the `MAX_REMEMBERED_SCOPES` most
//! recently used, each until it has gone unused for `SCOPE_IDLE_LIMIT`), and a token request
//! asks for all of them at once. A request whose scope is covered by a fresh wide token of
//! the same realm and service uses that token. Otherwise one caller fetches a new wide token
//! for all remembered scopes while the others wait and then find their scope covered (or
//! get the fetch's error, if it failed). Callers remember their scope before they wait for
//! anything (the rate limit, the first challenge, the fetch), so repositories that start
//! scanning together share one fetch; and since every fetch asks for every remembered
//! scope, the refresh before expiry is one token request per registry and identity, not one
//! per repository.
//!
//! Size limits: a token request URL stays within a byte budget (see
//! `DEFAULT_TOKEN_URL_BUDGET` in [`super::distribution`]). A token server that answers 400,
//! 414 or 431 to a request for several scopes gets half as many per request from then on
//! (remembered per registry), down to one; a registry that refuses a wide token as a too
//! large request header (431, or nginx's HTML 400) lowers the same limit. Scopes that do
//! not fit one request go into further wide tokens, each covering a chunk. At one scope per
//! request the registry is back to one token per repository.
//!
//! A token server may grant fewer repositories than asked. When the registry refuses a wide
//! token for a repository with `insufficient_scope`, that repository switches to its own
//! token at once; when it refuses even a wide token fetched for the request (without saying
//! why), the 401 stands and the repository switches from the next request on. Either way it
//! keeps its own token for `OWN_TOKEN_PERIOD` and stays out of wide token requests
//! meanwhile, so a refusal is not repeated on every scan. A wide token the registry rejects
//! outright (revoked, bad signature) is replaced once, by the first caller that reports it.
//!
//! Other scopes (the catalog's `registry:catalog:*`) and repositories that need their own
//! token use `TokenCache`: one token per (registry, scope, identity), single-flight per key.

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use base64::Engine as _;
use sha2::{Digest as _, Sha256};

use super::error::RegistryError;

/// Credentials for one registry, usually taken from a pull secret.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum Credentials {
    /// No credentials: anonymous pulls and anonymous bearer tokens.
    #[default]
    Anonymous,
    /// Username and password (or access token used as password).
    Basic { username: String, password: String },
}

impl Credentials {
    /// Shorthand for [`Credentials::Basic`].
    pub fn basic(username: impl Into<String>, password: impl Into<String>) -> Self {
        Credentials::Basic {
            username: username.into(),
            password: password.into(),
        }
    }

    /// A stable, non-secret identity for cache keys. The password is hashed so that a
    /// rotated secret gets a new cache entry while no secret sits in the key in clear.
    pub(crate) fn identity(&self) -> String {
        match self {
            Credentials::Anonymous => "anonymous".to_string(),
            Credentials::Basic { username, password } => {
                let mut hasher = Sha256::new();
                hasher.update(username.as_bytes());
                hasher.update([0u8]);
                hasher.update(password.as_bytes());
                format!("basic:{}", hex::encode(hasher.finalize()))
            }
        }
    }

    /// The `Authorization` header value for Basic authentication, if there are credentials.
    pub(crate) fn basic_header(&self) -> Option<String> {
        match self {
            Credentials::Anonymous => None,
            Credentials::Basic { username, password } => {
                let raw = format!("{username}:{password}");
                Some(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(raw)
                ))
            }
        }
    }
}

// Written by hand so that passwords never reach logs through `{:?}`.
impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Anonymous => f.write_str("Anonymous"),
            Credentials::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
        }
    }
}

/// One challenge of a `WWW-Authenticate` header: a scheme and its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Challenge {
    /// Lower-cased scheme name, e.g. `bearer`.
    pub scheme: String,
    /// Parameters with lower-cased names, values unquoted.
    pub params: Vec<(String, String)>,
}

impl Challenge {
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses a `WWW-Authenticate` header value (RFC 9110 §11.6.1), which may hold several
/// challenges separated by commas; commas inside quoted values (as in multi-action scopes
/// `"repository:a:pull,push"`) do not split, and `\"` escapes are honoured. Malformed tails
/// are dropped rather than failing: the header comes from the network and partial
/// information (e.g. the realm) is still useful.
pub(crate) fn parse_www_authenticate(header: &str) -> Vec<Challenge> {
    let mut parser = Parser {
        chars: header.chars().collect(),
        pos: 0,
    };
    let mut challenges: Vec<Challenge> = Vec::new();
    loop {
        parser.skip_separators();
        let Some(scheme) = parser.token() else {
            break;
        };
        let mut challenge = Challenge {
            scheme: scheme.to_ascii_lowercase(),
            params: Vec::new(),
        };
        loop {
            parser.skip_separators();
            let checkpoint = parser.pos;
            let Some(name) = parser.token() else {
                // token68 form (e.g. `Negotiate abc==`) or garbage: skip to the next comma.
                parser.skip_until_comma();
                if parser.pos == checkpoint {
                    break;
                }
                continue;
            };
            parser.skip_spaces();
            if parser.peek() != Some('=') {
                // A bare token after a comma starts the next challenge.
                parser.pos = checkpoint;
                break;
            }
            parser.pos += 1;
            parser.skip_spaces();
            let value = if parser.peek() == Some('"') {
                parser.quoted()
            } else {
                parser.token().unwrap_or_default()
            };
            challenge.params.push((name.to_ascii_lowercase(), value));
            parser.skip_spaces();
            if parser.peek() == Some(',') {
                parser.pos += 1;
            } else if parser.peek().is_none() {
                break;
            }
        }
        challenges.push(challenge);
        if parser.peek().is_none() {
            break;
        }
    }
    challenges
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn skip_spaces(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
    }

    fn skip_separators(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t' | ',')) {
            self.pos += 1;
        }
    }

    fn skip_until_comma(&mut self) {
        while let Some(c) = self.peek() {
            if c == ',' {
                break;
            }
            self.pos += 1;
        }
    }

    /// RFC 9110 `token`.
    fn token(&mut self) -> Option<String> {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~/:".contains(c) {
                self.pos += 1;
            } else {
                break;
            }
        }
        (self.pos > start).then(|| self.chars[start..self.pos].iter().collect())
    }

    /// RFC 9110 `quoted-string`, starting at the opening quote; an unterminated string
    /// runs to the end of the header.
    fn quoted(&mut self) -> String {
        let mut out = String::new();
        self.pos += 1;
        while let Some(c) = self.peek() {
            self.pos += 1;
            match c {
                '"' => break,
                '\\' => {
                    if let Some(next) = self.peek() {
                        out.push(next);
                        self.pos += 1;
                    }
                }
                _ => out.push(c),
            }
        }
        out
    }
}

/// How a registry wants to be authenticated, as learnt from its challenges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuthScheme {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
    },
}

/// Picks the scheme to use among a response's challenges. Bearer is preferred because it
/// keeps the password off the registry requests; a Bearer challenge without a realm is
/// unusable and ignored.
pub(crate) fn select_scheme(challenges: &[Challenge]) -> Option<AuthScheme> {
    let bearer = challenges.iter().find_map(|c| {
        if c.scheme != "bearer" {
            return None;
        }
        let realm = c.param("realm").filter(|r| !r.is_empty())?;
        Some(AuthScheme::Bearer {
            realm: realm.to_string(),
            service: c.param("service").map(str::to_string),
        })
    });
    bearer.or_else(|| {
        challenges
            .iter()
            .any(|c| c.scheme == "basic")
            .then_some(AuthScheme::Basic)
    })
}

/// A token as returned by a token server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FetchedToken {
    pub token: String,
    pub lifetime: Duration,
}

/// Lifetime assumed when the token server does not say (Docker token spec default).
const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(60);
/// Upper bound on trusting `expires_in`, so that a wrong value cannot pin a token forever.
const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// Parses a token-server answer: `token` (or the OAuth2 `access_token`) and `expires_in`.
pub(crate) fn parse_token_response(body: &[u8]) -> Result<FetchedToken, RegistryError> {
    #[derive(serde::Deserialize)]
    struct Raw {
        token: Option<String>,
        access_token: Option<String>,
        expires_in: Option<serde_json::Value>,
    }
    let raw: Raw = serde_json::from_slice(body)
        .map_err(|e| RegistryError::Protocol(format!("token response is not valid JSON: {e}")))?;
    let token = [raw.token, raw.access_token]
        .into_iter()
        .flatten()
        .find(|t| !t.is_empty())
        .ok_or_else(|| {
            RegistryError::Protocol("token response has neither token nor access_token".into())
        })?;
    // Some servers send the number as a string or a float; anything unusable means default.
    let seconds = match raw.expires_in {
        Some(serde_json::Value::Number(n)) => n.as_f64(),
        Some(serde_json::Value::String(s)) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    let lifetime = match seconds {
        Some(s) if s.is_finite() && s >= 1.0 => {
            Duration::from_secs_f64(s.min(MAX_TOKEN_LIFETIME.as_secs_f64()))
        }
        _ => DEFAULT_TOKEN_LIFETIME,
    };
    Ok(FetchedToken { token, lifetime })
}

/// When a token obtained at `requested_at` should no longer be handed out. A margin of a
/// fifth of the lifetime (at most 30 s) keeps a token from expiring between the cache check
/// and the registry request, including slow paginated listings.
pub(crate) fn usable_until(requested_at: Instant, lifetime: Duration) -> Instant {
    let margin = (lifetime / 5).min(Duration::from_secs(30));
    requested_at + (lifetime - margin)
}

/// Cache key of [`TokenCache`]: a token for one scope and one identity at one registry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TokenKey {
    pub registry: String,
    pub scope: String,
    pub identity: String,
}

#[derive(Debug, Clone)]
struct CachedToken {
    token: String,
    usable_until: Instant,
}

type Slot = Arc<tokio::sync::Mutex<Option<CachedToken>>>;

/// Above this many keys, stale entries are pruned when a new key is added; keys are one per
/// watched repository and secret, so this is only reached by large or churning installs.
const PRUNE_THRESHOLD: usize = 256;

/// Bearer tokens for one scope each, shared by all clones of a client: the catalog scope,
/// and repositories that cannot use a registry-wide token (see [`WideTokens`]).
///
/// Each key has its own async mutex: the first caller fetches while holding it and the
/// others wait, then find the fresh token. A cancelled fetch just releases the lock and the
/// next waiter fetches, so there is no stuck "in flight" state to clean up.
#[derive(Debug, Default)]
pub(crate) struct TokenCache {
    slots: Mutex<HashMap<TokenKey, Slot>>,
}

impl TokenCache {
    fn slot(&self, key: &TokenKey) -> Slot {
        // A poisoned map only means another thread panicked mid-insert; the map itself
        // is still consistent, so keep using it.
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = slots.get(key) {
            return slot.clone();
        }
        if slots.len() >= PRUNE_THRESHOLD {
            let now = Instant::now();
            slots.retain(|_, slot| match slot.try_lock() {
                Ok(guard) => guard.as_ref().is_some_and(|t| t.usable_until > now),
                // Locked means a fetch is running: keep it so its waiters share the result.
                Err(_) => true,
            });
        }
        let slot = Slot::default();
        slots.insert(key.clone(), slot.clone());
        slot
    }

    /// Returns a usable token for `key`, calling `fetch` only when there is none.
    ///
    /// `rejected` is a token the registry just refused: if the cache still holds it, it is
    /// replaced; if another caller already replaced it, the newer token is returned without a
    /// second fetch.
    pub(crate) async fn get_or_fetch<F, Fut>(
        &self,
        key: &TokenKey,
        rejected: Option<&str>,
        fetch: F,
    ) -> Result<String, RegistryError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<FetchedToken, RegistryError>>,
    {
        let slot = self.slot(key);
        let mut guard = slot.lock().await;
        if let Some(cached) = guard.as_ref()
            && cached.usable_until > Instant::now()
            && rejected != Some(cached.token.as_str())
        {
            return Ok(cached.token.clone());
        }
        let requested_at = Instant::now();
        let fetched = fetch().await?;
        *guard = Some(CachedToken {
            token: fetched.token.clone(),
            usable_until: usable_until(requested_at, fetched.lifetime),
        });
        Ok(fetched.token)
    }
}

/// Most pull scopes remembered per registry and identity; beyond it the least recently used
/// one is forgotten.
pub(crate) const MAX_REMEMBERED_SCOPES: usize = 5000;

/// A scope not asked for during this long drops out of wide token requests until it is
/// asked for again, so that repositories no longer watched do not inflate every token.
pub(crate) const SCOPE_IDLE_LIMIT: Duration = Duration::from_secs(24 * 3600);

/// How long a repository that the registry refused with a wide token uses its own token
/// before it is tried with the wide token again (its permissions may have changed).
pub(crate) const OWN_TOKEN_PERIOD: Duration = Duration::from_secs(3600);

/// Bytes one `scope` parameter adds to a token URL: `&scope=` and the value encoded as
/// `application/x-www-form-urlencoded`, the way `Url::query_pairs_mut` writes it.
pub(crate) fn scope_param_len(scope: &str) -> usize {
    let value: usize = scope
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'*' | b'-' | b'.' | b'_' | b' ') {
                1
            } else {
                3
            }
        })
        .sum();
    "&scope=".len() + value
}

/// Key of the remembered scopes and wide tokens: one identity at one registry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct WideKey {
    pub registry: String,
    pub identity: String,
}

/// The token server a wide token comes from: the realm and service of the challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Issuer {
    pub realm: String,
    pub service: Option<String>,
}

/// What [`WideTokens::get_or_fetch`] settled on for one scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WideOutcome {
    /// A fresh token covering the scope, and the number of scopes it was requested for.
    Token { token: String, scopes: usize },
    /// The scope needs a token of its own ([`TokenCache`]): the registry refused it with a
    /// wide token lately, or takes only one scope per token request.
    OwnToken,
}

#[derive(Debug)]
struct RememberedScope {
    last_used: Instant,
    /// Order of last use (higher is more recent), for forgetting the least recently used.
    recency: u64,
    /// Until then the scope uses its own token and stays out of wide token requests.
    own_token_until: Option<Instant>,
}

#[derive(Debug)]
struct WideToken {
    token: String,
    usable_until: Instant,
    issuer: Issuer,
    /// The scopes requested for this token.
    scopes: HashSet<String>,
}

/// A failed fetch, kept so that the callers that waited for it get its error instead of
/// each trying again.
#[derive(Debug)]
struct WideFailure {
    /// Value of [`WideState::finished`] once this fetch had ended.
    at: u64,
    scopes: HashSet<String>,
    error: RegistryError,
}

#[derive(Debug, Default)]
struct WideState {
    scopes: HashMap<String, RememberedScope>,
    /// Uses counted so far, the source of [`RememberedScope::recency`].
    uses: u64,
    tokens: Vec<WideToken>,
    /// Fetches ended so far, successful or not.
    finished: u64,
    failure: Option<WideFailure>,
}

impl WideState {
    fn touch(&mut self, scope: &str, now: Instant, max: usize) {
        self.uses += 1;
        let recency = self.uses;
        if let Some(remembered) = self.scopes.get_mut(scope) {
            remembered.last_used = now;
            remembered.recency = recency;
            return;
        }
        if self.scopes.len() >= max.max(1) {
            let oldest = self
                .scopes
                .iter()
                .min_by_key(|(_, r)| r.recency)
                .map(|(s, _)| s.clone());
            if let Some(oldest) = oldest {
                self.scopes.remove(&oldest);
            }
        }
        self.scopes.insert(
            scope.to_string(),
            RememberedScope {
                last_used: now,
                recency,
                own_token_until: None,
            },
        );
    }

    fn own_token(&self, scope: &str, now: Instant) -> bool {
        self.scopes
            .get(scope)
            .and_then(|r| r.own_token_until)
            .is_some_and(|until| until > now)
    }

    /// The fresh token of `issuer` covering `scope` that lasts longest.
    fn covering(&self, issuer: &Issuer, scope: &str, now: Instant) -> Option<&WideToken> {
        self.tokens
            .iter()
            .filter(|t| t.usable_until > now && t.issuer == *issuer && t.scopes.contains(scope))
            .max_by_key(|t| t.usable_until)
    }

    /// The scopes of the next token request for `scope`: `scope` itself, then the other
    /// remembered scopes, those without a fresh token first (most recently used first), then
    /// those whose token runs out soonest, as many as `limit` and the URL budget allow. When
    /// everything fits, the request covers every remembered scope and its token replaces all
    /// earlier ones.
    fn plan(
        &mut self,
        scope: &str,
        issuer: &Issuer,
        now: Instant,
        limit: usize,
        budget: RequestBudget,
    ) -> Vec<String> {
        self.scopes.retain(|s, r| {
            s == scope || now.saturating_duration_since(r.last_used) < SCOPE_IDLE_LIMIT
        });
        let mut candidates: Vec<(Option<Instant>, Reverse<u64>, &String)> = self
            .scopes
            .iter()
            .filter(|(s, _)| s.as_str() != scope && !self.own_token(s, now))
            .map(|(s, r)| {
                let covered_until = self.covering(issuer, s, now).map(|t| t.usable_until);
                (covered_until, Reverse(r.recency), s)
            })
            .collect();
        candidates.sort();
        let mut chosen = vec![scope.to_string()];
        let mut len = budget.base_len + scope_param_len(scope);
        for (_, _, candidate) in candidates {
            if chosen.len() >= limit {
                break;
            }
            let cost = scope_param_len(candidate);
            if len + cost > budget.max_len {
                continue;
            }
            len += cost;
            chosen.push(candidate.clone());
        }
        chosen
    }

    /// Keeps a new token; earlier tokens of the same issuer whose scopes it all covers, and
    /// expired ones, are dropped.
    fn store(
        &mut self,
        issuer: &Issuer,
        scopes: Vec<String>,
        fetched: &FetchedToken,
        requested_at: Instant,
    ) {
        let now = Instant::now();
        let scopes: HashSet<String> = scopes.into_iter().collect();
        self.tokens.retain(|t| {
            t.usable_until > now && !(t.issuer == *issuer && t.scopes.is_subset(&scopes))
        });
        self.tokens.push(WideToken {
            token: fetched.token.clone(),
            usable_until: usable_until(requested_at, fetched.lifetime),
            issuer: issuer.clone(),
            scopes,
        });
    }
}

/// Size of one wide token request: the URL without scopes, and the most it may grow to.
#[derive(Debug, Clone, Copy)]
struct RequestBudget {
    base_len: usize,
    max_len: usize,
}

#[derive(Debug, Default)]
struct WideEntry {
    state: Mutex<WideState>,
    /// Held while a token is fetched: the single flight of this registry and identity.
    fetching: tokio::sync::Mutex<()>,
}

impl WideEntry {
    fn state(&self) -> MutexGuard<'_, WideState> {
        // A poisoned lock only means another thread panicked while holding it; the state is
        // still consistent (every update is a single step), so keep using it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a fetch attempt came to, decided while the state is locked and acted on after.
enum Attempt {
    Done(Result<WideOutcome, RegistryError>),
    Shrink(usize),
}

/// Registry-wide tokens (see the module docs), shared by all clones of a client.
#[derive(Debug)]
pub(crate) struct WideTokens {
    entries: Mutex<HashMap<WideKey, Arc<WideEntry>>>,
    /// Most scopes per token request, per registry host, once a server refused more.
    scope_limits: Mutex<HashMap<String, usize>>,
    url_budget: usize,
    max_remembered: usize,
}

impl WideTokens {
    /// `url_budget`: most bytes of a token request URL; `max_remembered`: most scopes
    /// remembered per registry and identity.
    pub(crate) fn new(url_budget: usize, max_remembered: usize) -> Self {
        WideTokens {
            entries: Mutex::default(),
            scope_limits: Mutex::default(),
            url_budget,
            max_remembered,
        }
    }

    fn entry(&self, key: &WideKey) -> Arc<WideEntry> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = entries.get(key) {
            return entry.clone();
        }
        if entries.len() >= PRUNE_THRESHOLD {
            // Identities come and go with rotated secrets; an entry without a fresh token
            // and without a fetch in flight only loses its remembered scopes.
            let now = Instant::now();
            entries.retain(|_, entry| {
                entry.fetching.try_lock().is_err()
                    || entry.state().tokens.iter().any(|t| t.usable_until > now)
            });
        }
        let entry = Arc::new(WideEntry::default());
        entries.insert(key.clone(), entry.clone());
        entry
    }

    /// Remembers that `scope` is wanted, so that the next wide token includes it. Called
    /// before a request waits for anything, so that a token fetched meanwhile for another
    /// repository covers this one too.
    pub(crate) fn remember(&self, key: &WideKey, scope: &str) {
        self.entry(key)
            .state()
            .touch(scope, Instant::now(), self.max_remembered);
    }

    /// Most scopes per token request for `registry` (unlimited until a server refuses).
    pub(crate) fn scope_limit(&self, registry: &str) -> usize {
        let limits = self.scope_limits.lock().unwrap_or_else(|e| e.into_inner());
        limits.get(registry).copied().unwrap_or(usize::MAX)
    }

    /// Lowers the scopes per token request for `registry` to `limit` (at least one). Callers
    /// that saw the same refusal ask for the same limit, so concurrent reports do not shrink
    /// it further than one halving.
    pub(crate) fn lower_scope_limit(&self, registry: &str, limit: usize) {
        let mut limits = self.scope_limits.lock().unwrap_or_else(|e| e.into_inner());
        let current = limits.entry(registry.to_string()).or_insert(usize::MAX);
        *current = (*current).min(limit.max(1));
    }

    /// Whether `scope` must use a token of its own.
    pub(crate) fn needs_own_token(&self, key: &WideKey, scope: &str) -> bool {
        self.scope_limit(&key.registry) <= 1
            || self.entry(key).state().own_token(scope, Instant::now())
    }

    /// Makes `scope` use its own token for [`OWN_TOKEN_PERIOD`], leaving it out of wide
    /// token requests meanwhile.
    pub(crate) fn use_own_token(&self, key: &WideKey, scope: &str) {
        let entry = self.entry(key);
        let mut state = entry.state();
        let now = Instant::now();
        state.touch(scope, now, self.max_remembered);
        if let Some(remembered) = state.scopes.get_mut(scope) {
            remembered.own_token_until = Some(now + OWN_TOKEN_PERIOD);
        }
    }

    /// Returns a fresh wide token covering `scope`, fetching one when there is none.
    ///
    /// `fetch` is given the scopes to request and performs one token request. `base_len` is
    /// the length of the token URL without scopes. `rejected` is a wide token the registry
    /// just refused as a whole: it is dropped if still cached, and the token that replaced
    /// it (fetched by whoever reported it first) is returned without another fetch.
    ///
    /// Only one fetch per registry and identity runs at a time. A fetch that fails with
    /// 400, 414 or 431 while asking for several scopes lowers the registry's
    /// [`scope limit`](Self::scope_limit) to half as many and is tried again; other errors
    /// are returned, to this caller and to the callers that waited for it and whose scope it
    /// included.
    pub(crate) async fn get_or_fetch<F, Fut>(
        &self,
        key: &WideKey,
        issuer: &Issuer,
        scope: &str,
        rejected: Option<&str>,
        base_len: usize,
        mut fetch: F,
    ) -> Result<WideOutcome, RegistryError>
    where
        F: FnMut(Vec<String>) -> Fut,
        Fut: Future<Output = Result<FetchedToken, RegistryError>>,
    {
        let entry = self.entry(key);
        let seen = {
            let now = Instant::now();
            let mut state = entry.state();
            state.touch(scope, now, self.max_remembered);
            if let Some(rejected) = rejected {
                state.tokens.retain(|t| t.token != rejected);
            }
            if self.scope_limit(&key.registry) <= 1 || state.own_token(scope, now) {
                return Ok(WideOutcome::OwnToken);
            }
            if let Some(token) = state.covering(issuer, scope, now) {
                return Ok(WideOutcome::Token {
                    token: token.token.clone(),
                    scopes: token.scopes.len(),
                });
            }
            state.finished
        };
        let _flight = entry.fetching.lock().await;
        // Callers that became ready together with this one get to remember their scopes
        // before the request is put together.
        tokio::task::yield_now().await;
        let budget = RequestBudget {
            base_len,
            max_len: self.url_budget,
        };
        loop {
            let limit = self.scope_limit(&key.registry);
            let requested = {
                let now = Instant::now();
                let mut state = entry.state();
                if let Some(token) = state.covering(issuer, scope, now) {
                    return Ok(WideOutcome::Token {
                        token: token.token.clone(),
                        scopes: token.scopes.len(),
                    });
                }
                if let Some(failure) = &state.failure
                    && failure.at > seen
                    && failure.scopes.contains(scope)
                {
                    return Err(failure.error.clone());
                }
                if limit <= 1 || state.own_token(scope, now) {
                    return Ok(WideOutcome::OwnToken);
                }
                state.plan(scope, issuer, now, limit, budget)
            };
            let requested_at = Instant::now();
            let result = fetch(requested.clone()).await;
            let attempt = {
                let mut state = entry.state();
                match result {
                    Ok(fetched) => {
                        state.finished += 1;
                        let scopes = requested.len();
                        state.store(issuer, requested, &fetched, requested_at);
                        Attempt::Done(Ok(WideOutcome::Token {
                            token: fetched.token,
                            scopes,
                        }))
                    }
                    Err(RegistryError::Server {
                        status: 400 | 414 | 431,
                        ..
                    }) if requested.len() > 1 => Attempt::Shrink(requested.len() / 2),
                    Err(error) => {
                        state.finished += 1;
                        state.failure = Some(WideFailure {
                            at: state.finished,
                            scopes: requested.into_iter().collect(),
                            error: error.clone(),
                        });
                        Attempt::Done(Err(error))
                    }
                }
            };
            match attempt {
                Attempt::Done(outcome) => return outcome,
                Attempt::Shrink(limit) => {
                    tracing::debug!(
                        registry = %key.registry,
                        limit,
                        "token server refused a request for many scopes; asking for fewer per request"
                    );
                    self.lower_scope_limit(&key.registry, limit);
                }
            }
        }
    }

    /// When the longest-lasting wide token of `key` stops being handed out.
    #[cfg(test)]
    pub(crate) fn usable_until(&self, key: &WideKey) -> Option<Instant> {
        let entry = self.entry(key);
        let state = entry.state();
        state.tokens.iter().map(|t| t.usable_until).max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    fn params(c: &Challenge) -> Vec<(&str, &str)> {
        c.params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn bearer_challenge() {
        let c = parse_www_authenticate(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull""#,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].scheme, "bearer");
        assert_eq!(
            params(&c[0]),
            vec![
                ("realm", "https://auth.docker.io/token"),
                ("service", "registry.docker.io"),
                ("scope", "repository:library/nginx:pull"),
            ]
        );
        assert_eq!(
            select_scheme(&c),
            Some(AuthScheme::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
            })
        );
    }

    #[test]
    fn quoted_commas_escapes_and_spacing() {
        let c = parse_www_authenticate(
            r#"bearer  realm = "https://r/token" , scope="repository:a/b:pull,push", error="insufficient_scope", note="say \"hi\"""#,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].param("realm"), Some("https://r/token"));
        assert_eq!(c[0].param("scope"), Some("repository:a/b:pull,push"));
        assert_eq!(c[0].param("error"), Some("insufficient_scope"));
        assert_eq!(c[0].param("note"), Some(r#"say "hi""#));
    }

    #[test]
    fn several_challenges_in_one_header() {
        let c = parse_www_authenticate(
            r#"Basic realm="Registry Realm", Bearer realm="https://r/token",service=reg, Negotiate abc=="#,
        );
        let schemes: Vec<&str> = c.iter().map(|c| c.scheme.as_str()).collect();
        assert_eq!(schemes, vec!["basic", "bearer", "negotiate"]);
        assert_eq!(c[0].param("realm"), Some("Registry Realm"));
        assert_eq!(c[1].param("service"), Some("reg"));
        // Bearer wins over Basic.
        assert!(matches!(select_scheme(&c), Some(AuthScheme::Bearer { .. })));
    }

    #[test]
    fn basic_and_odd_challenges() {
        let c = parse_www_authenticate(r#"Basic realm="basic-realm""#);
        assert_eq!(select_scheme(&c), Some(AuthScheme::Basic));
        let c = parse_www_authenticate("Basic");
        assert_eq!(select_scheme(&c), Some(AuthScheme::Basic));
        // A Bearer challenge without realm cannot be followed.
        let c = parse_www_authenticate(r#"Bearer service="x""#);
        assert_eq!(select_scheme(&c), None);
        assert_eq!(parse_www_authenticate(""), vec![]);
        // Unterminated quote: keep what is there instead of failing.
        let c = parse_www_authenticate(r#"Bearer realm="https://r/tok"#);
        assert_eq!(c[0].param("realm"), Some("https://r/tok"));
        let c = parse_www_authenticate(r#"Bearer realm=unquoted,service="s""#);
        assert_eq!(c[0].param("realm"), Some("unquoted"));
        assert_eq!(c[0].param("service"), Some("s"));
        // Garbage does not loop or panic.
        let _ = parse_www_authenticate(r#"=,=,"",\\,;;"#);
    }

    #[test]
    fn token_responses() {
        let t = parse_token_response(br#"{"token":"abc","expires_in":300}"#).unwrap();
        assert_eq!(
            t,
            FetchedToken {
                token: "abc".into(),
                lifetime: Duration::from_secs(300)
            }
        );
        let t = parse_token_response(br#"{"access_token":"xyz"}"#).unwrap();
        assert_eq!(t.token, "xyz");
        assert_eq!(t.lifetime, DEFAULT_TOKEN_LIFETIME);
        let t = parse_token_response(br#"{"token":"","access_token":"xyz","expires_in":"120"}"#)
            .unwrap();
        assert_eq!(t.token, "xyz");
        assert_eq!(t.lifetime, Duration::from_secs(120));
        let t = parse_token_response(br#"{"token":"a","expires_in":0}"#).unwrap();
        assert_eq!(t.lifetime, DEFAULT_TOKEN_LIFETIME);
        let t = parse_token_response(br#"{"token":"a","expires_in":1e12}"#).unwrap();
        assert_eq!(t.lifetime, MAX_TOKEN_LIFETIME);
        assert!(matches!(
            parse_token_response(br#"{"expires_in":60}"#),
            Err(RegistryError::Protocol(_))
        ));
        assert!(matches!(
            parse_token_response(b"not json"),
            Err(RegistryError::Protocol(_))
        ));
    }

    #[test]
    fn usable_until_keeps_a_margin() {
        let t0 = Instant::now();
        assert_eq!(
            usable_until(t0, Duration::from_secs(60)),
            t0 + Duration::from_secs(48)
        );
        assert_eq!(
            usable_until(t0, Duration::from_secs(3600)),
            t0 + Duration::from_secs(3570)
        );
        assert_eq!(
            usable_until(t0, Duration::from_secs(5)),
            t0 + Duration::from_secs(4)
        );
    }

    #[test]
    fn credentials_debug_hides_password_and_identity_differs() {
        let a = Credentials::basic("user", "secret");
        assert!(!format!("{a:?}").contains("secret"));
        assert_ne!(a.identity(), Credentials::basic("user", "other").identity());
        assert!(!a.identity().contains("secret"));
        assert_eq!(Credentials::Anonymous.identity(), "anonymous");
        assert_eq!(a.basic_header().unwrap(), "Basic dXNlcjpzZWNyZXQ=");
        assert_eq!(Credentials::Anonymous.basic_header(), None);
    }

    fn key(scope: &str) -> TokenKey {
        TokenKey {
            registry: "r.example".into(),
            scope: scope.into(),
            identity: "anonymous".into(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cache_is_single_flight_and_refreshes_rejected_tokens() {
        let cache = Arc::new(TokenCache::default());
        let fetches = Arc::new(AtomicU64::new(0));
        let fetch = |fetches: Arc<AtomicU64>| async move {
            let n = fetches.fetch_add(1, Ordering::SeqCst) + 1;
            // Keep the fetch in flight long enough for every caller to pile up on it.
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(FetchedToken {
                token: format!("t{n}"),
                lifetime: Duration::from_secs(300),
            })
        };
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let (cache, fetches) = (cache.clone(), fetches.clone());
                tokio::spawn(
                    async move { cache.get_or_fetch(&key("s"), None, || fetch(fetches)).await },
                )
            })
            .collect();
        for task in tasks {
            assert_eq!(task.await.unwrap().unwrap(), "t1");
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);

        // A rejected token is replaced once; a caller reporting the same stale token
        // afterwards gets the replacement without another fetch.
        let t = cache
            .get_or_fetch(&key("s"), Some("t1"), || fetch(fetches.clone()))
            .await;
        assert_eq!(t.unwrap(), "t2");
        let t = cache
            .get_or_fetch(&key("s"), Some("t1"), || fetch(fetches.clone()))
            .await;
        assert_eq!(t.unwrap(), "t2");
        assert_eq!(fetches.load(Ordering::SeqCst), 2);

        // Another scope is another token.
        let t = cache
            .get_or_fetch(&key("other"), None, || fetch(fetches.clone()))
            .await;
        assert_eq!(t.unwrap(), "t3");
    }

    #[tokio::test]
    async fn failed_fetch_is_not_cached_and_expired_tokens_refetch() {
        let cache = TokenCache::default();
        let r = cache
            .get_or_fetch(&key("s"), None, || async {
                Err(RegistryError::Transport("down".into()))
            })
            .await;
        assert!(r.is_err());
        // A 10 ms lifetime leaves an 8 ms usable window; wait for exactly that deadline.
        let t = cache
            .get_or_fetch(&key("s"), None, || async {
                Ok(FetchedToken {
                    token: "short".into(),
                    lifetime: Duration::from_millis(10),
                })
            })
            .await;
        assert_eq!(t.unwrap(), "short");
        let slot = cache.slot(&key("s"));
        let deadline = slot.lock().await.as_ref().unwrap().usable_until;
        tokio::time::sleep_until(deadline.into()).await;
        let t = cache
            .get_or_fetch(&key("s"), None, || async {
                Ok(FetchedToken {
                    token: "fresh".into(),
                    lifetime: Duration::from_secs(60),
                })
            })
            .await;
        assert_eq!(t.unwrap(), "fresh");
    }

    fn wide_key() -> WideKey {
        WideKey {
            registry: "r.example".into(),
            identity: "anonymous".into(),
        }
    }

    fn issuer() -> Issuer {
        Issuer {
            realm: "https://auth.r.example/token".into(),
            service: Some("r.example".into()),
        }
    }

    /// Length of `https://auth.r.example/token?service=r.example`.
    const BASE_LEN: usize = 46;

    fn pull(i: usize) -> String {
        format!("repository:team/app-{i:03}:pull")
    }

    /// Stands in for a token server: records the scopes of each request, keeps each in
    /// flight for a moment, refuses more than `max_scopes` with 414, and fails when `down`.
    struct TokenServer {
        requests: Mutex<Vec<Vec<String>>>,
        max_scopes: usize,
        lifetime: Duration,
        down: AtomicBool,
    }

    impl TokenServer {
        fn new(max_scopes: usize, lifetime: Duration) -> Arc<Self> {
            Arc::new(TokenServer {
                requests: Mutex::new(Vec::new()),
                max_scopes,
                lifetime,
                down: AtomicBool::new(false),
            })
        }

        async fn fetch(
            self: Arc<Self>,
            scopes: Vec<String>,
        ) -> Result<FetchedToken, RegistryError> {
            let n = {
                let mut requests = self.requests.lock().unwrap();
                requests.push(scopes.clone());
                requests.len()
            };
            tokio::time::sleep(Duration::from_millis(50)).await;
            if scopes.len() > self.max_scopes {
                return Err(RegistryError::Server {
                    registry: "r.example".into(),
                    status: 414,
                    message: "token server: URI too long".into(),
                });
            }
            if self.down.load(Ordering::SeqCst) {
                return Err(RegistryError::Transport("connection refused".into()));
            }
            Ok(FetchedToken {
                token: format!("w{n}"),
                lifetime: self.lifetime,
            })
        }

        fn requests(&self) -> Vec<Vec<String>> {
            self.requests.lock().unwrap().clone()
        }
    }

    async fn wide(
        tokens: &WideTokens,
        server: &Arc<TokenServer>,
        scope: &str,
        rejected: Option<&str>,
    ) -> Result<WideOutcome, RegistryError> {
        tokens
            .get_or_fetch(
                &wide_key(),
                &issuer(),
                scope,
                rejected,
                BASE_LEN,
                |scopes| server.clone().fetch(scopes),
            )
            .await
    }

    /// `n` callers, one per scope, asking at once (after remembering their scopes, as
    /// requests do before they wait for anything).
    async fn ask_all(
        tokens: &Arc<WideTokens>,
        server: &Arc<TokenServer>,
        scopes: &[String],
        rejected: Option<&str>,
    ) -> Vec<Result<WideOutcome, RegistryError>> {
        for scope in scopes {
            tokens.remember(&wide_key(), scope);
        }
        let tasks: Vec<_> = scopes
            .iter()
            .map(|scope| {
                let (tokens, server, scope) = (tokens.clone(), server.clone(), scope.clone());
                let rejected = rejected.map(str::to_string);
                tokio::spawn(
                    async move { wide(&tokens, &server, &scope, rejected.as_deref()).await },
                )
            })
            .collect();
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        outcomes
    }

    fn sorted(mut scopes: Vec<String>) -> Vec<String> {
        scopes.sort();
        scopes
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_wide_token_for_every_remembered_scope_and_one_per_expiry() {
        let tokens = Arc::new(WideTokens::new(64 * 1024, MAX_REMEMBERED_SCOPES));
        let server = TokenServer::new(usize::MAX, Duration::from_secs(2));
        let scopes: Vec<String> = (0..300).map(pull).collect();

        let outcomes = ask_all(&tokens, &server, &scopes, None).await;
        for outcome in outcomes {
            assert_eq!(
                outcome.unwrap(),
                WideOutcome::Token {
                    token: "w1".into(),
                    scopes: 300
                }
            );
        }
        let requests = server.requests();
        assert_eq!(requests.len(), 1);
        assert_eq!(sorted(requests[0].clone()), sorted(scopes.clone()));

        // Once the token is no longer handed out, the next burst fetches once, again for
        // every remembered scope.
        let deadline = tokens.usable_until(&wide_key()).unwrap();
        tokio::time::sleep_until(deadline.into()).await;
        let outcomes = ask_all(&tokens, &server, &scopes, None).await;
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, Ok(WideOutcome::Token { token, .. }) if token == "w2"))
        );
        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(sorted(requests[1].clone()), sorted(scopes));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn refused_long_requests_halve_the_scopes_per_token() {
        let tokens = Arc::new(WideTokens::new(64 * 1024, MAX_REMEMBERED_SCOPES));
        let server = TokenServer::new(40, Duration::from_secs(300));
        let scopes: Vec<String> = (0..300).map(pull).collect();

        for outcome in ask_all(&tokens, &server, &scopes, None).await {
            assert!(
                matches!(outcome, Ok(WideOutcome::Token { scopes, .. }) if scopes <= 37),
                "{outcome:?}"
            );
        }
        // 300, 150 and 75 scopes are refused; then chunks of 37 cover the 300.
        let requests = server.requests();
        let sizes: Vec<usize> = requests.iter().map(Vec::len).collect();
        assert_eq!(sizes[..4], [300, 150, 75, 37]);
        assert_eq!(requests.len(), 3 + 300usize.div_ceil(37), "{sizes:?}");
        assert!(sizes[3..].iter().all(|&n| n <= 37), "{sizes:?}");
        let covered: HashSet<&String> = requests[3..].iter().flatten().collect();
        assert_eq!(covered.len(), 300);
        assert_eq!(tokens.scope_limit("r.example"), 37);
        // The limit belongs to the registry; others are not affected.
        assert_eq!(tokens.scope_limit("other.example"), usize::MAX);

        // Everything is covered now: no more requests.
        ask_all(&tokens, &server, &scopes, None).await;
        assert_eq!(server.requests().len(), requests.len());
    }

    #[tokio::test]
    async fn requests_stay_within_the_url_budget() {
        // All scopes have the same length here: room for exactly ten of them.
        let scopes: Vec<String> = (0..30).map(pull).collect();
        let budget = BASE_LEN + 10 * scope_param_len(&scopes[0]);
        let tokens = Arc::new(WideTokens::new(budget, MAX_REMEMBERED_SCOPES));
        let server = TokenServer::new(usize::MAX, Duration::from_secs(300));
        for scope in &scopes {
            tokens.remember(&wide_key(), scope);
        }
        for scope in &scopes {
            wide(&tokens, &server, scope, None).await.unwrap();
        }
        let requests = server.requests();
        assert_eq!(requests.len(), 3);
        for request in &requests {
            let len: usize = BASE_LEN + request.iter().map(|s| scope_param_len(s)).sum::<usize>();
            assert!(len <= budget, "{len} > {budget}");
            assert_eq!(request.len(), 10);
        }
        // A single scope longer than the budget is still asked for, alone.
        let long = format!("repository:{}:pull", "x".repeat(budget));
        tokens.remember(&wide_key(), &long);
        wide(&tokens, &server, &long, None).await.unwrap();
        assert_eq!(server.requests().last().unwrap(), &vec![long]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_wide_fetch_is_shared_by_its_waiters() {
        let tokens = Arc::new(WideTokens::new(64 * 1024, MAX_REMEMBERED_SCOPES));
        let server = TokenServer::new(usize::MAX, Duration::from_secs(300));
        server.down.store(true, Ordering::SeqCst);
        let scopes: Vec<String> = (0..50).map(pull).collect();
        for outcome in ask_all(&tokens, &server, &scopes, None).await {
            assert_eq!(
                outcome.unwrap_err(),
                RegistryError::Transport("connection refused".into())
            );
        }
        assert_eq!(server.requests().len(), 1);
        // A later call tries again.
        server.down.store(false, Ordering::SeqCst);
        assert!(matches!(
            wide(&tokens, &server, &scopes[0], None).await,
            Ok(WideOutcome::Token { .. })
        ));
        assert_eq!(server.requests().len(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rejected_wide_token_is_replaced_once() {
        let tokens = Arc::new(WideTokens::new(64 * 1024, MAX_REMEMBERED_SCOPES));
        let server = TokenServer::new(usize::MAX, Duration::from_secs(300));
        let scopes: Vec<String> = (0..20).map(pull).collect();
        ask_all(&tokens, &server, &scopes, None).await;
        assert_eq!(server.requests().len(), 1);
        // Every holder of the revoked w1 reports it; one fetch replaces it for all.
        for outcome in ask_all(&tokens, &server, &scopes, Some("w1")).await {
            assert!(
                matches!(&outcome, Ok(WideOutcome::Token { token, .. }) if token == "w2"),
                "{outcome:?}"
            );
        }
        assert_eq!(server.requests().len(), 2);
        // Reporting w1 again changes nothing.
        wide(&tokens, &server, &scopes[3], Some("w1"))
            .await
            .unwrap();
        assert_eq!(server.requests().len(), 2);
    }

    #[tokio::test]
    async fn own_tokens_and_the_bound_on_remembered_scopes() {
        let tokens = WideTokens::new(64 * 1024, 3);
        let server = TokenServer::new(usize::MAX, Duration::from_secs(300));
        // Only the three most recently used scopes are remembered.
        for i in 0..5 {
            tokens.remember(&wide_key(), &pull(i));
        }
        wide(&tokens, &server, &pull(4), None).await.unwrap();
        assert_eq!(
            sorted(server.requests()[0].clone()),
            vec![pull(2), pull(3), pull(4)]
        );

        // A scope refused with the wide token uses its own and leaves the wide requests.
        tokens.use_own_token(&wide_key(), &pull(3));
        assert!(tokens.needs_own_token(&wide_key(), &pull(3)));
        assert_eq!(
            wide(&tokens, &server, &pull(3), None).await.unwrap(),
            WideOutcome::OwnToken
        );
        tokens.remember(&wide_key(), &pull(5));
        wide(&tokens, &server, &pull(5), None).await.unwrap();
        let last = server.requests().last().unwrap().clone();
        assert!(!last.contains(&pull(3)), "{last:?}");
        assert!(last.contains(&pull(5)), "{last:?}");
        assert!(!tokens.needs_own_token(&wide_key(), &pull(5)));

        // At one scope per request, every scope has its own token.
        tokens.lower_scope_limit("r.example", 1);
        assert!(tokens.needs_own_token(&wide_key(), &pull(5)));
        tokens.lower_scope_limit("r.example", 10);
        assert_eq!(tokens.scope_limit("r.example"), 1);
    }
}
