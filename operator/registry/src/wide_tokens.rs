//! Scan step, authentication: registry-wide bearer tokens, one token for the pull scopes of
//! many repositories of a registry and credential identity.
//!
//! One token request may carry several scopes (`GET` with one `scope` parameter each,
//! `?service=s&scope=repository:a:pull&scope=repository:b:pull`, or the OAuth2 form `POST`
//! with them space-separated in its body), and the token's `access` claim then lists each
//! one the server granted. Pull access to repositories
//! therefore goes through `WideTokens`: per registry and credential identity the client
//! remembers every pull scope it has been asked for (the `MAX_REMEMBERED_SCOPES` most
//! recently used, each until it has gone unused for `SCOPE_IDLE_LIMIT`), and a token request
//! asks for as many of them as the registry's cap allows (`repositoriesPerToken` in the
//! registry settings, default 64: every request carries its token, whose `access` claim
//! lists each repository). A request whose scope is covered by a fresh wide token of
//! the same realm and service uses that token. Otherwise one caller fetches a new wide token
//! for its scope and the remembered scopes without a fresh token, up to the cap, while the
//! others wait and then find their scope covered (or get the fetch's error, if it failed).
//! Callers remember their scope before they wait for anything (the rate limit, the first
//! challenge, the fetch), so repositories that start scanning together share fetches; and
//! since every fetch asks for as many remembered scopes as the cap allows, the refresh
//! before expiry is one token request per cap's worth of repositories (79 for 5,000 at the
//! default), not one per repository.
//!
//! Size limits: a token request stays within a byte budget: its URL for a `GET` (see
//! `DEFAULT_TOKEN_URL_BUDGET` in [`super::distribution`], about 1,300 typical scopes), its
//! body for a form `POST` (1 MiB, more than [`MAX_REMEMBERED_SCOPES`] need). The caller
//! names the budget of its next request; when a fetch fails and the budget has changed (the
//! token server refused the form, so the scopes go into URLs), the scopes are planned again
//! for it. A token server that answers 400,
//! 414 or 431 to a request for several scopes gets half as many per request from then on
//! (remembered per registry), down to one; a registry that refuses a wide token as a too
//! large request header (431, or nginx's HTML 400) lowers the same limit. Scopes beyond the
//! cap, or that do not fit one request, go into further wide tokens, each covering a chunk
//! (each token request for the chunk whose token runs out first). At one scope per
//! request the registry is back to one token per repository.
//!
//! A token server may grant fewer repositories than asked. When the registry refuses a wide
//! token for a repository with `insufficient_scope`, that repository switches to its own
//! token at once; when it refuses even a wide token fetched for the request (without saying
//! why), the 401 stands and the repository switches from the next request on. Either way it
//! keeps its own token for `OWN_TOKEN_PERIOD` and stays out of wide token requests
//! meanwhile, so a refusal is not repeated on every scan. A wide token the registry rejects
//! outright (revoked, bad signature) is replaced once, by the first caller that reports it.

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

// tokio's clock, so tests can move token expiry with the paused test clock.
use tokio::time::Instant;

use super::auth::{FetchedToken, PRUNE_THRESHOLD, usable_until};
use super::error::RegistryError;
use super::settings::{MAX_REPOSITORIES_PER_TOKEN, host_key};

/// Most pull scopes remembered per registry and identity; beyond it the least recently used
/// one is forgotten. As many as the highest `repositoriesPerToken`, so that cap can name all.
pub const MAX_REMEMBERED_SCOPES: usize = MAX_REPOSITORIES_PER_TOKEN as usize;

/// A scope not asked for during this long drops out of wide token requests until it is
/// asked for again, so that repositories no longer watched do not inflate every token.
pub const SCOPE_IDLE_LIMIT: Duration = Duration::from_secs(24 * 3600);

/// How long a repository that the registry refused with a wide token uses its own token
/// before it is tried with the wide token again (its permissions may have changed).
pub const OWN_TOKEN_PERIOD: Duration = Duration::from_secs(3600);

/// Bytes one `scope` parameter adds to a token URL: `&scope=` and the value encoded as
/// `application/x-www-form-urlencoded`, the way `Url::query_pairs_mut` writes it.
pub fn scope_param_len(scope: &str) -> usize {
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
pub struct WideKey {
    pub registry: String,
    pub identity: String,
}

/// The token server a wide token comes from: the realm and service of the challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issuer {
    pub realm: String,
    pub service: Option<String>,
}

/// A wide token as every request sends it: its text and its `Authorization` value, built
/// once per token. A token naming thousands of repositories is hundreds of kilobytes; each
/// request clones a reference to the same bytes instead of copying and checking them again.
#[derive(Debug, Clone)]
pub struct SharedToken {
    text: Arc<str>,
    /// `Bearer <token>`, marked sensitive; `None` when that is no valid header value.
    header: Option<reqwest::header::HeaderValue>,
}

impl SharedToken {
    pub fn new(text: &str) -> Self {
        Self {
            text: text.into(),
            header: sensitive_header(&format!("Bearer {text}")),
        }
    }

    /// The token.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Its `Authorization` value, when the token is a valid one.
    pub fn header(&self) -> Option<&reqwest::header::HeaderValue> {
        self.header.as_ref()
    }
}

/// `text` as an `Authorization` value marked sensitive (kept out of debug output), or `None`
/// when it is no valid header value.
pub fn sensitive_header(text: &str) -> Option<reqwest::header::HeaderValue> {
    let mut value = reqwest::header::HeaderValue::from_str(text).ok()?;
    value.set_sensitive(true);
    Some(value)
}

impl PartialEq for SharedToken {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for SharedToken {}

/// What [`WideTokens::get_or_fetch`] settled on for one scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WideOutcome {
    /// A fresh token covering the scope, and the number of scopes it was requested for.
    Token { token: SharedToken, scopes: usize },
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
    token: SharedToken,
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
        token: SharedToken,
        lifetime: Duration,
        requested_at: Instant,
    ) {
        let now = Instant::now();
        let scopes: HashSet<String> = scopes.into_iter().collect();
        self.tokens.retain(|t| {
            t.usable_until > now && !(t.issuer == *issuer && t.scopes.is_subset(&scopes))
        });
        self.tokens.push(WideToken {
            token,
            usable_until: usable_until(requested_at, lifetime),
            issuer: issuer.clone(),
            scopes,
        });
    }
}

/// Size of one wide token request: its bytes without scopes, and the most it may grow to
/// (the URL of a `GET`, the form body of a `POST`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestBudget {
    pub base_len: usize,
    pub max_len: usize,
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
    /// The request's size budget changed during the fetch (the token server turned out to
    /// take only `GET`): plan the scopes again for the new budget.
    Replan,
}

/// Registry-wide tokens (see the module docs), shared by all clones of a client.
#[derive(Debug)]
pub struct WideTokens {
    entries: Mutex<HashMap<WideKey, Arc<WideEntry>>>,
    /// Most scopes per token request, per registry host, once a server refused more.
    scope_limits: Mutex<HashMap<String, usize>>,
    url_budget: usize,
    max_remembered: usize,
    caps: ScopeCaps,
}

/// Most scopes one token request asks for, per registry host (the registry settings'
/// `repositoriesPerToken`), before any server refused a request.
#[derive(Debug, Clone)]
pub struct ScopeCaps {
    /// For hosts not in `hosts`.
    pub default: usize,
    /// By host as the settings key it ([`host_key`]).
    pub hosts: HashMap<String, usize>,
}

impl ScopeCaps {
    /// The same cap for every host.
    #[cfg(test)]
    pub fn all(cap: usize) -> Self {
        ScopeCaps {
            default: cap,
            hosts: HashMap::new(),
        }
    }

    fn of(&self, registry: &str) -> usize {
        self.hosts
            .get(&host_key(registry))
            .copied()
            .unwrap_or(self.default)
            .max(1)
    }
}

impl WideTokens {
    /// `url_budget`: most bytes of a token request URL; `max_remembered`: most scopes
    /// remembered per registry and identity; `caps`: most scopes per token request.
    pub fn new(url_budget: usize, max_remembered: usize, caps: ScopeCaps) -> Self {
        WideTokens {
            entries: Mutex::default(),
            scope_limits: Mutex::default(),
            url_budget,
            max_remembered,
            caps,
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
    pub fn remember(&self, key: &WideKey, scope: &str) {
        self.entry(key)
            .state()
            .touch(scope, Instant::now(), self.max_remembered);
    }

    /// Most bytes of a token request URL (see [`Self::new`]).
    pub fn url_budget(&self) -> usize {
        self.url_budget
    }

    /// Most scopes per token request for `registry`: its cap, or less once a server refused.
    pub fn scope_limit(&self, registry: &str) -> usize {
        let limits = self.scope_limits.lock().unwrap_or_else(|e| e.into_inner());
        let cap = self.caps.of(registry);
        limits.get(registry).copied().map_or(cap, |l| l.min(cap))
    }

    /// Lowers the scopes per token request for `registry` to `limit` (at least one). Callers
    /// that saw the same refusal ask for the same limit, so concurrent reports do not shrink
    /// it further than one halving.
    pub fn lower_scope_limit(&self, registry: &str, limit: usize) {
        let mut limits = self.scope_limits.lock().unwrap_or_else(|e| e.into_inner());
        let cap = self.caps.of(registry);
        let current = limits.entry(registry.to_string()).or_insert(cap);
        *current = (*current).min(limit.max(1));
    }

    /// Whether `scope` must use a token of its own.
    pub fn needs_own_token(&self, key: &WideKey, scope: &str) -> bool {
        self.scope_limit(&key.registry) <= 1
            || self.entry(key).state().own_token(scope, Instant::now())
    }

    /// Makes `scope` use its own token for [`OWN_TOKEN_PERIOD`], leaving it out of wide
    /// token requests meanwhile.
    pub fn use_own_token(&self, key: &WideKey, scope: &str) {
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
    /// `fetch` is given the scopes to request and performs one token request. `budget` is
    /// the size of that request without scopes and the most it may grow to; it is asked again
    /// after a failed fetch, and when it has changed (a form `POST` turned out to be refused,
    /// so the scopes go into a URL) the scopes are planned again. `rejected` is a wide token
    /// the registry
    /// just refused as a whole: it is dropped if still cached, and the token that replaced
    /// it (fetched by whoever reported it first) is returned without another fetch.
    ///
    /// Only one fetch per registry and identity runs at a time. A fetch that fails with
    /// 400, 414 or 431 while asking for several scopes lowers the registry's
    /// [`scope limit`](Self::scope_limit) to half as many and is tried again; other errors
    /// are returned, to this caller and to the callers that waited for it and whose scope it
    /// included.
    pub async fn get_or_fetch<F, Fut>(
        &self,
        key: &WideKey,
        issuer: &Issuer,
        scope: &str,
        rejected: Option<&str>,
        budget: impl Fn() -> RequestBudget,
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
                state.tokens.retain(|t| t.token.text() != rejected);
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
        // A change of budget happens once per token server (form refused); this bounds it.
        let mut replans_left = 2;
        loop {
            let limit = self.scope_limit(&key.registry);
            let planned_budget = budget();
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
                state.plan(scope, issuer, now, limit, planned_budget)
            };
            let requested_at = Instant::now();
            let result = fetch(requested.clone()).await;
            let attempt = {
                let mut state = entry.state();
                match result {
                    Ok(fetched) => {
                        state.finished += 1;
                        let scopes = requested.len();
                        let token = SharedToken::new(&fetched.token);
                        state.store(
                            issuer,
                            requested,
                            token.clone(),
                            fetched.lifetime,
                            requested_at,
                        );
                        Attempt::Done(Ok(WideOutcome::Token { token, scopes }))
                    }
                    Err(_) if replans_left > 0 && budget() != planned_budget => {
                        replans_left -= 1;
                        Attempt::Replan
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
                Attempt::Replan => {}
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
    pub fn usable_until(&self, key: &WideKey) -> Option<Instant> {
        let entry = self.entry(key);
        let state = entry.state();
        state.tokens.iter().map(|t| t.usable_until).max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

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
    /// flight for 50 ms, refuses more than `max_scopes` with 414, and fails when `down`.
    /// The tests run on the paused clock, where that sleep ends only once the runtime has
    /// nothing else to run: every caller asking at once is then waiting on the request in
    /// flight, by construction rather than by timing.
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
                || RequestBudget {
                    base_len: BASE_LEN,
                    max_len: tokens.url_budget(),
                },
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

    #[tokio::test(start_paused = true)]
    async fn one_wide_token_for_every_remembered_scope_and_one_per_expiry() {
        let tokens = Arc::new(WideTokens::new(
            64 * 1024,
            MAX_REMEMBERED_SCOPES,
            ScopeCaps::all(usize::MAX),
        ));
        let server = TokenServer::new(usize::MAX, Duration::from_secs(2));
        let scopes: Vec<String> = (0..300).map(pull).collect();

        let outcomes = ask_all(&tokens, &server, &scopes, None).await;
        for outcome in outcomes {
            assert_eq!(
                outcome.unwrap(),
                WideOutcome::Token {
                    token: SharedToken::new("w1"),
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
        tokio::time::sleep_until(deadline).await;
        let outcomes = ask_all(&tokens, &server, &scopes, None).await;
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, Ok(WideOutcome::Token { token, .. }) if token.text() == "w2"))
        );
        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(sorted(requests[1].clone()), sorted(scopes));
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_names_at_most_the_cap_and_each_chunk_is_renewed_once_per_expiry() {
        let cap = crate::settings::DEFAULT_REPOSITORIES_PER_TOKEN as usize;
        let tokens = Arc::new(WideTokens::new(
            64 * 1024,
            MAX_REMEMBERED_SCOPES,
            ScopeCaps::all(cap),
        ));
        let server = TokenServer::new(usize::MAX, Duration::from_secs(2));
        let scopes: Vec<String> = (0..300).map(pull).collect();
        let chunks = scopes.len().div_ceil(cap);

        for outcome in ask_all(&tokens, &server, &scopes, None).await {
            assert!(
                matches!(outcome, Ok(WideOutcome::Token { scopes, .. }) if scopes <= cap),
                "{outcome:?}"
            );
        }
        // Each request takes up to `cap` scopes that no token covers yet: 5 requests for
        // 300 (the last one filled up with scopes whose token runs out first).
        let requests = server.requests();
        let sizes: Vec<usize> = requests.iter().map(Vec::len).collect();
        assert_eq!(requests.len(), chunks, "{sizes:?}");
        assert!(sizes.iter().all(|&n| n == cap), "{sizes:?}");
        let covered: HashSet<&String> = requests.iter().flatten().collect();
        assert_eq!(covered.len(), scopes.len());

        // Within the tokens' lifetime nothing more is asked.
        ask_all(&tokens, &server, &scopes, None).await;
        assert_eq!(server.requests().len(), chunks);

        // Once they are no longer handed out, each chunk is renewed once.
        let deadline = tokens.usable_until(&wide_key()).unwrap();
        tokio::time::sleep_until(deadline).await;
        ask_all(&tokens, &server, &scopes, None).await;
        let requests = server.requests();
        assert_eq!(requests.len(), 2 * chunks);
        let renewed: HashSet<&String> = requests[chunks..].iter().flatten().collect();
        assert_eq!(renewed.len(), scopes.len());
    }

    #[test]
    fn caps_are_per_registry_host_and_refusals_only_lower_them() {
        let caps = ScopeCaps {
            default: 64,
            hosts: HashMap::from([("r.example".to_string(), 10)]),
        };
        let tokens = WideTokens::new(64 * 1024, MAX_REMEMBERED_SCOPES, caps);
        assert_eq!(tokens.scope_limit("r.example"), 10);
        assert_eq!(tokens.scope_limit("R.Example"), 10);
        assert_eq!(tokens.scope_limit("other.example"), 64);
        // A refusal asking for more than the cap leaves the cap.
        tokens.lower_scope_limit("r.example", 40);
        assert_eq!(tokens.scope_limit("r.example"), 10);
        tokens.lower_scope_limit("r.example", 5);
        assert_eq!(tokens.scope_limit("r.example"), 5);
        tokens.lower_scope_limit("other.example", 32);
        assert_eq!(tokens.scope_limit("other.example"), 32);
        // A cap of 0 is taken as 1: every repository gets its own token.
        let tokens = WideTokens::new(64 * 1024, MAX_REMEMBERED_SCOPES, ScopeCaps::all(0));
        assert!(tokens.needs_own_token(&wide_key(), &pull(0)));
    }

    #[tokio::test(start_paused = true)]
    async fn refused_long_requests_halve_the_scopes_per_token() {
        let tokens = Arc::new(WideTokens::new(
            64 * 1024,
            MAX_REMEMBERED_SCOPES,
            ScopeCaps::all(usize::MAX),
        ));
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

    #[tokio::test(start_paused = true)]
    async fn requests_stay_within_the_url_budget() {
        // All scopes have the same length here: room for exactly ten of them.
        let scopes: Vec<String> = (0..30).map(pull).collect();
        let budget = BASE_LEN + 10 * scope_param_len(&scopes[0]);
        let tokens = Arc::new(WideTokens::new(
            budget,
            MAX_REMEMBERED_SCOPES,
            ScopeCaps::all(usize::MAX),
        ));
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

    #[tokio::test(start_paused = true)]
    async fn a_failed_wide_fetch_is_shared_by_its_waiters() {
        let tokens = Arc::new(WideTokens::new(
            64 * 1024,
            MAX_REMEMBERED_SCOPES,
            ScopeCaps::all(usize::MAX),
        ));
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

    #[tokio::test(start_paused = true)]
    async fn a_rejected_wide_token_is_replaced_once() {
        let tokens = Arc::new(WideTokens::new(
            64 * 1024,
            MAX_REMEMBERED_SCOPES,
            ScopeCaps::all(usize::MAX),
        ));
        let server = TokenServer::new(usize::MAX, Duration::from_secs(300));
        let scopes: Vec<String> = (0..20).map(pull).collect();
        ask_all(&tokens, &server, &scopes, None).await;
        assert_eq!(server.requests().len(), 1);
        // Every holder of the revoked w1 reports it; one fetch replaces it for all.
        for outcome in ask_all(&tokens, &server, &scopes, Some("w1")).await {
            assert!(
                matches!(&outcome, Ok(WideOutcome::Token { token, .. }) if token.text() == "w2"),
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

    #[tokio::test(start_paused = true)]
    async fn own_tokens_and_the_bound_on_remembered_scopes() {
        let tokens = WideTokens::new(64 * 1024, 3, ScopeCaps::all(usize::MAX));
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

    #[test]
    fn a_wide_token_is_sent_from_one_header_value_that_requests_share() {
        let text = "t".repeat(480_000);
        let token = SharedToken::new(&text);
        let header = token.header().expect("a valid header value");
        assert_eq!(header.as_bytes(), format!("Bearer {text}").as_bytes());
        assert!(header.is_sensitive());
        // A request's clone points at the same bytes: nothing is copied or checked again.
        let sent = token.clone();
        assert_eq!(
            sent.header().unwrap().as_bytes().as_ptr(),
            header.as_bytes().as_ptr()
        );
        // A token that is no valid header value has none (the request fails with its text).
        assert!(SharedToken::new("bad\ntoken").header().is_none());
        assert_eq!(SharedToken::new("bad\ntoken").text(), "bad\ntoken");
    }
}
