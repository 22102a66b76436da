//! GitHub App installation tokens: Git over HTTPS (and the GitHub API) as a GitHub App instead
//! of a personal token.
//!
//! A git Secret may hold `githubAppID`, `githubAppInstallationID`, `githubAppPrivateKey` (the
//! PEM key GitHub issued, PKCS#1 or PKCS#8 RSA) and optionally `githubAppEnterpriseBaseUrl`
//! (the API base, default [`DEFAULT_API_URL`]): the key names Argo CD uses for repository
//! credentials. To use them the operator
//!
//! 1. signs a JWT with the app's key ([`app_jwt`]: RS256, `iat` 60 s in the past against clock
//!    drift, `exp` 9 minutes ahead, `iss` the app id),
//! 2. exchanges it at `POST {base}/app/installations/{id}/access_tokens` for an installation
//!    token (valid one hour), and
//! 3. sends that token as HTTPS basic auth `x-access-token:<token>`.
//!
//! [`InstallationTokens`] caches tokens in memory only, keyed by (API base, app id,
//! installation id, private key): every watch using the same installation shares one token.
//! The key is part of the cache key so that a Secret naming someone else's app and
//! installation, without its private key, never receives their token. Lookups are
//! single-flight (concurrent callers wait for one mint), a token is replaced once less than
//! [`REFRESH_MARGIN`] of its life remains ([`needs_refresh`]), and a failed mint is answered
//! from memory for a short while so that many watches sharing a broken Secret do not each call
//! GitHub. Tokens are never written to disk and never logged; `Debug` redacts them.
//!
//! # Why not a JWT crate
//!
//! `jsonwebtoken` 12.0.0 was evaluated for the app JWT: RS256, `iat` 60 s back, `exp` 9 min on,
//! `iss` the app id (a JSON number when numeric), signed with the PKCS#1 or PKCS#8 key of a
//! Secret on `ring`, which rustls already links. `encode` with `EncodingKey::from_rsa_pem`
//! signs such a token, but the crypto comes from a `CryptoProvider`: the `aws_lc_rs` or
//! `rust_crypto` feature, neither on by default, and none on `ring`. Against the operator's
//! tree, `aws_lc_rs` adds 12 crates, `aws-lc-sys` (a C build) among them; `rust_crypto` adds
//! 30, among them second majors of `rsa` (0.10), `p256` and `p384` (0.14), `ed25519-dalek` and
//! `signature` (3); with neither it adds 6, but `encode` panics unless we `install_default` a
//! provider of our own, a `JwtSigner` over `ring` written here after all. It would replace the
//! 32 lines of `app_jwt` and `AppKey::sign_rs256` out of 98 (the claims would still be built
//! here); `pem_block`'s messages (encrypted key, missing BEGIN or END line, indented paste)
//! stay, and `from_rsa_pem` does not check the key, so a bad one would only fail when signing.
//! Decision: keep ours; 32 lines on `ring` cost less than 12 to 30 crates or our own provider.
//!
//! Crate counts are the packages a crate adds to `cargo tree -e normal,build` of the
//! operator's dependencies with the workspace's features and Cargo.lock (reqwest 0.13 and rustls
//! on ring, no openssl, no aws-lc); line counts are code lines without comments, blank lines
//! and tests (measured 2026-12-06).

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex, OnceLock, PoisonError},
    time::{Duration, Instant},
};

use base64::Engine as _;
use jiff::{SignedDuration, Timestamp};
use ring::{rand::SystemRandom, rsa::KeyPair, signature::RSA_PKCS1_SHA256};
use rustls::pki_types::pem::{self, PemObject as _, SectionKind};
use sha2::{Digest, Sha256};

/// API base used when a Secret has no `githubAppEnterpriseBaseUrl`.
pub const DEFAULT_API_URL: &str = "https://api.github.com";

/// User name GitHub expects with an installation token over HTTPS.
pub const TOKEN_USERNAME: &str = "x-access-token";

/// A token with less than this much life left is replaced before use, so that a fetch, a
/// commit and a push started with it finish well before it expires.
pub const REFRESH_MARGIN: SignedDuration = SignedDuration::from_secs(5 * 60);

/// How far in the past the JWT's `iat` is set (GitHub's advice against clock drift).
const JWT_BACKDATE: i64 = 60;
/// JWT lifetime after "now" (GitHub accepts at most 10 minutes).
const JWT_LIFETIME: i64 = 9 * 60;
/// How long a failed mint is answered from memory.
const DEFAULT_FAILURE_HOLD: Duration = Duration::from_secs(30);
/// Timeout of one call to GitHub.
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// Why no installation token could be had.
///
/// `Clone` because a failure is remembered for a short while and handed to every caller
/// asking in that time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GithubAppError {
    /// The Secret's values cannot be used (a non-numeric installation id, a URL that is not
    /// http(s), …).
    #[error("{0}")]
    InvalidConfig(String),
    /// `githubAppPrivateKey` is not an unencrypted RSA private key in PEM form.
    #[error("githubAppPrivateKey {0}")]
    InvalidKey(String),
    /// GitHub refused the JWT: the app id and the private key do not belong together (or the
    /// key was revoked).
    #[error(
        "GitHub refused the JWT of app {app_id} (HTTP 401: {message}); check githubAppID and \
         githubAppPrivateKey"
    )]
    Unauthorized {
        /// App id the JWT was issued for.
        app_id: String,
        /// GitHub's message.
        message: String,
    },
    /// The installation does not exist or does not belong to this app.
    #[error(
        "installation {installation_id} of GitHub App {app_id} not found (HTTP 404: {message}); \
         check githubAppInstallationID and that the app is still installed"
    )]
    InstallationNotFound {
        /// App id.
        app_id: String,
        /// Installation id.
        installation_id: u64,
        /// GitHub's message.
        message: String,
    },
    /// GitHub is rate limiting the app.
    #[error("GitHub is rate limiting app {app_id} (HTTP {status}): {message}")]
    RateLimited {
        /// App id.
        app_id: String,
        /// 403 or 429.
        status: u16,
        /// GitHub's message.
        message: String,
    },
    /// Any other refusal or server error.
    #[error("GitHub refused to issue an installation token (HTTP {status}): {message}")]
    Rejected {
        /// HTTP status.
        status: u16,
        /// GitHub's message.
        message: String,
    },
    /// GitHub could not be reached.
    #[error("cannot reach GitHub at {url}: {message}")]
    Network {
        /// The token endpoint.
        url: String,
        /// What failed.
        message: String,
    },
    /// GitHub answered 2xx with a body that is not the documented token object.
    #[error("unexpected answer from {url}: {message}")]
    InvalidResponse {
        /// The token endpoint.
        url: String,
        /// What is wrong with it.
        message: String,
    },
}

impl GithubAppError {
    /// Low-cardinality label for metrics: `invalid_config`, `invalid_key`, `unauthorized`,
    /// `not_found`, `rate_limited`, `rejected`, `network` or `invalid_response`.
    pub fn category(&self) -> &'static str {
        match self {
            Self::InvalidConfig(_) => "invalid_config",
            Self::InvalidKey(_) => "invalid_key",
            Self::Unauthorized { .. } => "unauthorized",
            Self::InstallationNotFound { .. } => "not_found",
            Self::RateLimited { .. } => "rate_limited",
            Self::Rejected { .. } => "rejected",
            Self::Network { .. } => "network",
            Self::InvalidResponse { .. } => "invalid_response",
        }
    }

    /// Whether only a change of the Secret (or of the app's installation) can fix it.
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            Self::InvalidConfig(_)
                | Self::InvalidKey(_)
                | Self::Unauthorized { .. }
                | Self::InstallationNotFound { .. }
        )
    }
}

/// A GitHub App installation, as read from a Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct GithubAppCredentials {
    /// The app's id (numeric) or client id; the JWT's `iss`.
    pub app_id: String,
    /// The installation (an organization or account that installed the app).
    pub installation_id: u64,
    /// The app's private key, PEM.
    pub private_key: String,
    /// API base URL without a trailing slash (`https://api.github.com`,
    /// `https://ghe.example.com/api/v3`).
    pub api_url: String,
}

impl fmt::Debug for GithubAppCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GithubAppCredentials")
            .field("app_id", &self.app_id)
            .field("installation_id", &self.installation_id)
            .field("private_key", &"<redacted>")
            .field("api_url", &self.api_url)
            .finish()
    }
}

impl GithubAppCredentials {
    /// Checks and normalizes the values of a Secret (pure): `app_id` must be a plain token
    /// (digits, or a client id such as `Iv23li…`), `installation_id` a number, `api_url`
    /// (`None`: [`DEFAULT_API_URL`]) an http(s) URL. The key itself is checked when it is
    /// first used ([`AppKey::from_pem`]).
    pub fn new(
        app_id: &str,
        installation_id: &str,
        private_key: &str,
        api_url: Option<&str>,
    ) -> Result<Self, GithubAppError> {
        let app_id = app_id.trim();
        if app_id.is_empty()
            || !app_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(GithubAppError::InvalidConfig(format!(
                "githubAppID {app_id:?} is not a GitHub App id"
            )));
        }
        let installation_id = installation_id.trim().parse::<u64>().map_err(|_| {
            GithubAppError::InvalidConfig(format!(
                "githubAppInstallationID {:?} is not a number",
                installation_id.trim()
            ))
        })?;
        let api_url = api_url
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .unwrap_or(DEFAULT_API_URL)
            .trim_end_matches('/')
            .to_string();
        if !(api_url.starts_with("https://") || api_url.starts_with("http://")) {
            return Err(GithubAppError::InvalidConfig(format!(
                "githubAppEnterpriseBaseUrl {api_url:?} is not an http(s) URL"
            )));
        }
        if private_key.trim().is_empty() {
            return Err(GithubAppError::InvalidKey("is empty".into()));
        }
        Ok(Self {
            app_id: app_id.to_string(),
            installation_id,
            private_key: private_key.to_string(),
            api_url,
        })
    }

    /// The endpoint that issues installation tokens.
    pub fn token_url(&self) -> String {
        format!(
            "{}/app/installations/{}/access_tokens",
            self.api_url, self.installation_id
        )
    }

    fn cache_key(&self) -> CacheKey {
        CacheKey {
            api_url: self.api_url.clone(),
            app_id: self.app_id.clone(),
            installation_id: self.installation_id,
            key_sha256: Sha256::digest(self.private_key.trim().as_bytes()).into(),
        }
    }
}

/// A GitHub App's RSA private key, parsed.
pub struct AppKey(KeyPair);

impl fmt::Debug for AppKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppKey")
            .field("bits", &(self.0.public().modulus_len() * 8))
            .finish_non_exhaustive()
    }
}

impl AppKey {
    /// Parses an unencrypted RSA private key in PEM form: `-----BEGIN RSA PRIVATE KEY-----`
    /// (PKCS#1, what GitHub hands out) or `-----BEGIN PRIVATE KEY-----` (PKCS#8).
    pub fn from_pem(pem: &str) -> Result<Self, GithubAppError> {
        let (kind, der) = pem_block(pem)?;
        let parsed = match kind {
            SectionKind::RsaPrivateKey => KeyPair::from_der(&der),
            SectionKind::PrivateKey => KeyPair::from_pkcs8(&der),
            other => {
                return Err(GithubAppError::InvalidKey(format!(
                    "is a PEM \"{}\" block, not an RSA private key \
                     (\"-----BEGIN RSA PRIVATE KEY-----\" or \"-----BEGIN PRIVATE KEY-----\")",
                    section_label(other)
                )));
            }
        };
        parsed.map(AppKey).map_err(|e| {
            GithubAppError::InvalidKey(format!("is not a usable RSA private key: {e}"))
        })
    }

    /// The public key as DER `RSAPublicKey` (PKCS#1), for checks.
    pub fn public_key_der(&self) -> Vec<u8> {
        self.0.public().as_ref().to_vec()
    }

    fn sign_rs256(&self, message: &[u8]) -> Result<Vec<u8>, GithubAppError> {
        let mut signature = vec![0; self.0.public().modulus_len()];
        self.0
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                message,
                &mut signature,
            )
            .map_err(|_| GithubAppError::InvalidKey("cannot sign (RSA signing failed)".into()))?;
        Ok(signature)
    }
}

/// The kind and DER bytes of the first PEM block of `text` that rustls-pki-types knows.
fn pem_block(text: &str) -> Result<(SectionKind, Vec<u8>), GithubAppError> {
    // `ENCRYPTED PRIVATE KEY` (PKCS#8) and RFC 1421 headers (`Proc-Type: 4,ENCRYPTED`, a
    // legacy encrypted PKCS#1 key) both mark a key that needs a passphrase.
    if text.contains("ENCRYPTED") {
        return Err(GithubAppError::InvalidKey(
            "is encrypted; give the unencrypted key GitHub issued".into(),
        ));
    }
    // The parser wants its BEGIN and END lines unindented; pasted keys often are not.
    let text: String = text.lines().map(|l| format!("{}\n", l.trim())).collect();
    <(SectionKind, Vec<u8>)>::from_pem_slice(text.as_bytes()).map_err(|e| {
        GithubAppError::InvalidKey(match e {
            pem::Error::NoItemsFound if !text.contains("-----BEGIN ") => {
                "is not PEM (no \"-----BEGIN …-----\" line)".into()
            }
            pem::Error::NoItemsFound => "has no RSA private key block \
                 (\"-----BEGIN RSA PRIVATE KEY-----\" or \"-----BEGIN PRIVATE KEY-----\")"
                .into(),
            pem::Error::MissingSectionEnd { end_marker } => format!(
                "has no \"-----END {}-----\" line",
                String::from_utf8_lossy(&end_marker)
            ),
            pem::Error::IllegalSectionStart { .. } => "has a broken BEGIN line".into(),
            pem::Error::Base64Decode(e) => format!("has a broken base64 body: {e}"),
            other => format!("is not PEM: {other}"),
        })
    })
}

/// The label of a PEM section, as on its BEGIN line.
fn section_label(kind: SectionKind) -> &'static str {
    match kind {
        SectionKind::Certificate => "CERTIFICATE",
        SectionKind::PublicKey => "PUBLIC KEY",
        SectionKind::RsaPrivateKey => "RSA PRIVATE KEY",
        SectionKind::PrivateKey => "PRIVATE KEY",
        SectionKind::EcPrivateKey => "EC PRIVATE KEY",
        SectionKind::Crl => "X509 CRL",
        SectionKind::Csr => "CERTIFICATE REQUEST",
        _ => "other",
    }
}

/// The JWT that authenticates as the app (RS256): header `{"alg":"RS256","typ":"JWT"}`,
/// claims `iat` = `now` − 60 s, `exp` = `now` + 9 min, `iss` = `app_id` (a JSON number when
/// it is numeric).
pub fn app_jwt(app_id: &str, key: &AppKey, now: Timestamp) -> Result<String, GithubAppError> {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let iss = match app_id.parse::<u64>() {
        Ok(n) => serde_json::Value::from(n),
        Err(_) => serde_json::Value::from(app_id),
    };
    let claims = serde_json::json!({
        "iat": now.as_second() - JWT_BACKDATE,
        "exp": now.as_second() + JWT_LIFETIME,
        "iss": iss,
    });
    let signing_input = format!(
        "{}.{}",
        b64.encode(br#"{"alg":"RS256","typ":"JWT"}"#),
        b64.encode(claims.to_string())
    );
    let signature = key.sign_rs256(signing_input.as_bytes())?;
    Ok(format!("{signing_input}.{}", b64.encode(signature)))
}

/// Whether a token expiring at `expires_at` must be replaced at `now` (pure): when less than
/// [`REFRESH_MARGIN`] of its life remains (or it already expired).
pub fn needs_refresh(now: Timestamp, expires_at: Timestamp) -> bool {
    expires_at.duration_since(now) < REFRESH_MARGIN
}

/// An installation token. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct InstallationToken {
    /// The token (`ghs_…`), used as the password with [`TOKEN_USERNAME`].
    pub token: String,
    /// When GitHub stops accepting it.
    pub expires_at: Timestamp,
}

impl fmt::Debug for InstallationToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InstallationToken")
            .field("token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// The documented body of a 201 from the token endpoint (other fields ignored).
#[derive(serde::Deserialize)]
struct TokenResponse {
    token: String,
    expires_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CacheKey {
    api_url: String,
    app_id: String,
    installation_id: u64,
    key_sha256: [u8; 32],
}

/// What is known about one installation.
#[derive(Default)]
struct Slot {
    token: Option<InstallationToken>,
    /// The last mint failed: when, and why.
    failure: Option<(Instant, GithubAppError)>,
}

/// Process-wide cache of installation tokens (see the module documentation).
pub struct InstallationTokens {
    http: reqwest::Client,
    failure_hold: Duration,
    slots: Mutex<HashMap<CacheKey, Arc<tokio::sync::Mutex<Slot>>>>,
}

impl fmt::Debug for InstallationTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries = self.slots.lock().map(|s| s.len()).unwrap_or_default();
        f.debug_struct("InstallationTokens")
            .field("installations", &entries)
            .field("failure_hold", &self.failure_hold)
            .finish_non_exhaustive()
    }
}

static SHARED: OnceLock<Result<InstallationTokens, String>> = OnceLock::new();

impl InstallationTokens {
    /// A cache talking to GitHub through `http`.
    pub fn new(http: reqwest::Client) -> Self {
        Self {
            http,
            failure_hold: DEFAULT_FAILURE_HOLD,
            slots: Mutex::default(),
        }
    }

    /// How long a failed mint is answered from memory instead of asking GitHub again
    /// (default 30 s).
    pub fn with_failure_hold(mut self, hold: Duration) -> Self {
        self.failure_hold = hold;
        self
    }

    /// The process-wide cache every reconcile shares.
    pub fn shared() -> Result<&'static Self, GithubAppError> {
        SHARED
            .get_or_init(|| imagewatch_support::http::client("GitHub", HTTP_TIMEOUT).map(Self::new))
            .as_ref()
            .map_err(|e| GithubAppError::Network {
                url: DEFAULT_API_URL.into(),
                message: e.clone(),
            })
    }

    /// A token for `app` with at least [`REFRESH_MARGIN`] of life left: the cached one, or a
    /// new one minted now. Concurrent callers for one installation wait for a single mint.
    /// `on_mint` is called once, with `"ok"` or the error's category, when this call asked
    /// GitHub (not when it was answered from memory).
    pub async fn token(
        &self,
        app: &GithubAppCredentials,
        on_mint: impl FnOnce(&'static str),
    ) -> Result<InstallationToken, GithubAppError> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            slots.entry(app.cache_key()).or_default().clone()
        };
        let mut slot = slot.lock().await;
        if let Some(token) = &slot.token
            && !needs_refresh(Timestamp::now(), token.expires_at)
        {
            return Ok(token.clone());
        }
        if let Some((at, error)) = &slot.failure
            && at.elapsed() < self.failure_hold
        {
            return Err(error.clone());
        }
        let result = self.mint(app).await;
        on_mint(match &result {
            Ok(_) => "ok",
            Err(e) => e.category(),
        });
        match &result {
            Ok(token) => {
                tracing::info!(
                    app_id = %app.app_id,
                    installation_id = app.installation_id,
                    api = %app.api_url,
                    expires_at = %token.expires_at,
                    "issued a GitHub App installation token"
                );
                slot.token = Some(token.clone());
                slot.failure = None;
            }
            Err(error) => {
                tracing::warn!(
                    app_id = %app.app_id,
                    installation_id = app.installation_id,
                    api = %app.api_url,
                    %error,
                    "cannot get a GitHub App installation token"
                );
                slot.failure = Some((Instant::now(), error.clone()));
            }
        }
        result
    }

    /// One call to GitHub's token endpoint.
    async fn mint(&self, app: &GithubAppCredentials) -> Result<InstallationToken, GithubAppError> {
        let key = AppKey::from_pem(&app.private_key)?;
        let jwt = app_jwt(&app.app_id, &key, Timestamp::now())?;
        let url = app.token_url();
        let response = self
            .http
            .post(&url)
            .header(reqwest::header::ACCEPT, "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28")
            .bearer_auth(jwt)
            .send()
            .await
            .map_err(|e| GithubAppError::Network {
                url: url.clone(),
                message: error_chain(&e),
            })?;
        let status = response.status();
        let rate_limited = response
            .headers()
            .get("x-ratelimit-remaining")
            .is_some_and(|v| v.as_bytes() == b"0");
        let body = response.text().await.map_err(|e| GithubAppError::Network {
            url: url.clone(),
            message: error_chain(&e),
        })?;
        if !status.is_success() {
            return Err(refusal(app, status.as_u16(), rate_limited, &body));
        }
        parse_token_response(&body).map_err(|message| GithubAppError::InvalidResponse {
            url: url.clone(),
            message,
        })
    }
}

/// The error for a non-2xx answer of the token endpoint (pure).
fn refusal(
    app: &GithubAppCredentials,
    status: u16,
    rate_limited: bool,
    body: &str,
) -> GithubAppError {
    let message = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.get("message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
        })
        .unwrap_or_else(|| body.trim().chars().take(200).collect());
    match status {
        401 => GithubAppError::Unauthorized {
            app_id: app.app_id.clone(),
            message,
        },
        404 => GithubAppError::InstallationNotFound {
            app_id: app.app_id.clone(),
            installation_id: app.installation_id,
            message,
        },
        429 => GithubAppError::RateLimited {
            app_id: app.app_id.clone(),
            status,
            message,
        },
        403 if rate_limited || message.to_ascii_lowercase().contains("rate limit") => {
            GithubAppError::RateLimited {
                app_id: app.app_id.clone(),
                status,
                message,
            }
        }
        _ => GithubAppError::Rejected { status, message },
    }
}

/// Reads `{"token": "...", "expires_at": "...Z"}` (pure).
fn parse_token_response(body: &str) -> Result<InstallationToken, String> {
    let parsed: TokenResponse =
        serde_json::from_str(body).map_err(|e| format!("not a token object: {e}"))?;
    if parsed.token.trim().is_empty() {
        return Err("the token is empty".into());
    }
    let expires_at = parsed
        .expires_at
        .parse::<Timestamp>()
        .map_err(|e| format!("expires_at {:?}: {e}", parsed.expires_at))?;
    Ok(InstallationToken {
        token: parsed.token.trim().to_string(),
        expires_at,
    })
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
#[path = "github_app_tests.rs"]
mod tests;
