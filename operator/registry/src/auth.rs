//! Scan step, authentication: credentials, `WWW-Authenticate` challenges and the shared
//! bearer-token caches.
//!
//! Registries announce how to authenticate in the `WWW-Authenticate` header of a 401:
//! `Basic` (send the credentials on each request) or `Bearer` (exchange the credentials at a
//! token server for a short-lived token, per the Docker token authentication spec). Tokens
//! are shared by every clone of the client, and fetching them is single-flight, which
//! matters for Docker Hub's authentication rate limits.
//!
//! Pull access to repositories goes through registry-wide tokens (see
//! [`super::wide_tokens`]). Other scopes (the catalog's `registry:catalog:*`) and
//! repositories that need their own token use `TokenCache`: one token per (registry, scope,
//! identity), single-flight per key.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// tokio's clock, so tests can move token expiry with the paused test clock.
use tokio::time::Instant;

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
    pub fn identity(&self) -> String {
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
    pub fn basic_header(&self) -> Option<String> {
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
pub struct Challenge {
    /// Lower-cased scheme name, e.g. `bearer`.
    pub scheme: String,
    /// Parameters with lower-cased names, values unquoted.
    pub params: Vec<(String, String)>,
}

impl Challenge {
    pub fn param(&self, name: &str) -> Option<&str> {
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
pub fn parse_www_authenticate(header: &str) -> Vec<Challenge> {
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
pub enum AuthScheme {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
    },
}

/// Picks the scheme to use among a response's challenges. Bearer is preferred because it
/// keeps the password off the registry requests; a Bearer challenge without a realm is
/// unusable and ignored.
pub fn select_scheme(challenges: &[Challenge]) -> Option<AuthScheme> {
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
pub struct FetchedToken {
    pub token: String,
    pub lifetime: Duration,
}

/// Lifetime assumed when the token server does not say (Docker token spec default).
const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(60);
/// Upper bound on trusting `expires_in`, so that a wrong value cannot pin a token forever.
const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// Parses a token-server answer: `token` (or the OAuth2 `access_token`) and `expires_in`.
pub fn parse_token_response(body: &[u8]) -> Result<FetchedToken, RegistryError> {
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
pub fn usable_until(requested_at: Instant, lifetime: Duration) -> Instant {
    let margin = (lifetime / 5).min(Duration::from_secs(30));
    requested_at + (lifetime - margin)
}

/// Cache key of [`TokenCache`]: a token for one scope and one identity at one registry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TokenKey {
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
pub(super) const PRUNE_THRESHOLD: usize = 256;

/// Bearer tokens for one scope each, shared by all clones of a client: the catalog scope,
/// and repositories that cannot use a registry-wide token (see [`WideTokens`]).
///
/// Each key has its own async mutex: the first caller fetches while holding it and the
/// others wait, then find the fresh token. A cancelled fetch just releases the lock and the
/// next waiter fetches, so there is no stuck "in flight" state to clean up.
#[derive(Debug, Default)]
pub struct TokenCache {
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
    pub async fn get_or_fetch<F, Fut>(
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

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

    /// On the paused clock: the fetch's sleep ends only when the runtime has nothing else to
    /// run, that is once every caller is waiting on the fetch in flight, so all twenty pile
    /// up on it by construction.
    #[tokio::test(start_paused = true)]
    async fn cache_is_single_flight_and_refreshes_rejected_tokens() {
        let cache = Arc::new(TokenCache::default());
        let fetches = Arc::new(AtomicU64::new(0));
        let fetch = |fetches: Arc<AtomicU64>| async move {
            let n = fetches.fetch_add(1, Ordering::SeqCst) + 1;
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

    #[tokio::test(start_paused = true)]
    async fn failed_fetch_is_not_cached_and_expired_tokens_refetch() {
        let cache = TokenCache::default();
        let r = cache
            .get_or_fetch(&key("s"), None, || async {
                Err(RegistryError::Transport("down".into()))
            })
            .await;
        assert!(r.is_err());
        // A 10 s lifetime leaves an 8 s usable window, moved through on the paused clock.
        let t = cache
            .get_or_fetch(&key("s"), None, || async {
                Ok(FetchedToken {
                    token: "short".into(),
                    lifetime: Duration::from_secs(10),
                })
            })
            .await;
        assert_eq!(t.unwrap(), "short");
        let slot = cache.slot(&key("s"));
        let deadline = slot.lock().await.as_ref().unwrap().usable_until;
        assert_eq!(deadline, Instant::now() + Duration::from_secs(8));
        // Up to the deadline the cached token is handed out without a fetch.
        tokio::time::advance(Duration::from_secs(8) - Duration::from_millis(1)).await;
        let t = cache
            .get_or_fetch(&key("s"), None, || async {
                panic!("a token still usable was fetched again")
            })
            .await;
        assert_eq!(t.unwrap(), "short");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(Instant::now(), deadline);
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
}
