//! A CNCF distribution registry with Docker token authentication, for benchmarks that count
//! credential fetches: the registry answers `401 Bearer realm=…` and trusts JWTs (ES256, with
//! the signing certificate in `x5c`) from a token server running in this process, which checks
//! credentials and counts every token it issues, per scope. It answers both ways of the spec:
//! `GET` with Basic credentials and `scope` query parameters, and the OAuth2 form `POST`.
//!
//! The registry process and its state directory belong to the handle and go when it drops.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context as _, ensure};
use base64::Engine as _;
use ring::{
    rand::SystemRandom,
    signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair},
};

const SERVICE: &str = "imagewatch-bench-registry";
const ISSUER: &str = "imagewatch-bench-token-server";

/// One entry of a token's `access` claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// Resource type (`repository`).
    pub kind: String,
    /// Resource name (`team/app`).
    pub name: String,
    /// Granted actions (`pull`, `push`).
    pub actions: Vec<String>,
}

/// Parses a token request scope `type:name:action[,action…]`; the name may hold `:` (a
/// registry host with a port), so the actions are what follows the last `:`.
pub fn parse_scope(scope: &str) -> Option<Access> {
    let (kind, rest) = scope.split_once(':')?;
    let (name, actions) = rest.rsplit_once(':')?;
    if kind.is_empty() || name.is_empty() {
        return None;
    }
    Some(Access {
        kind: kind.to_string(),
        name: name.to_string(),
        actions: actions
            .split(',')
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .collect(),
    })
}

/// The claim set of a registry token (Docker token authentication spec).
pub fn claims(subject: &str, access: &[Access], now: i64, lifetime: Duration, id: u64) -> String {
    serde_json::json!({
        "iss": ISSUER,
        "sub": subject,
        "aud": SERVICE,
        "exp": now + lifetime.as_secs() as i64,
        "nbf": now - 5,
        "iat": now,
        "jti": format!("bench-{id}"),
        "access": access.iter().map(|a| serde_json::json!({
            "type": a.kind, "name": a.name, "actions": a.actions,
        })).collect::<Vec<_>>(),
    })
    .to_string()
}

/// Signs JWTs with an ECDSA P-256 key whose self-signed certificate the registry trusts.
pub struct TokenSigner {
    key: EcdsaKeyPair,
    certificate_der: Vec<u8>,
    rng: SystemRandom,
}

impl TokenSigner {
    /// Generates a key and a self-signed certificate with `openssl` in `dir`; the PEM
    /// certificate (the registry's `rootcertbundle`) is `dir/token.crt`.
    pub fn generate(dir: &Path) -> anyhow::Result<Self> {
        let openssl = |args: &[&str]| -> anyhow::Result<()> {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .context("running openssl")?;
            ensure!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(())
        };
        openssl(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            "token.key",
        ])?;
        openssl(&[
            "pkcs8",
            "-topk8",
            "-nocrypt",
            "-in",
            "token.key",
            "-outform",
            "DER",
            "-out",
            "token.p8",
        ])?;
        openssl(&[
            "req",
            "-new",
            "-x509",
            "-key",
            "token.key",
            "-subj",
            "/CN=imagewatch bench token server",
            "-days",
            "7",
            "-out",
            "token.crt",
        ])?;
        openssl(&[
            "x509",
            "-in",
            "token.crt",
            "-outform",
            "DER",
            "-out",
            "token.der",
        ])?;
        let pkcs8 = std::fs::read(dir.join("token.p8"))?;
        Self::new(&pkcs8, std::fs::read(dir.join("token.der"))?)
    }

    /// A signer from a PKCS#8 P-256 key and the DER certificate sent in `x5c`.
    pub fn new(pkcs8: &[u8], certificate_der: Vec<u8>) -> anyhow::Result<Self> {
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8, &rng)
            .map_err(|e| anyhow::anyhow!("token signing key rejected: {e}"))?;
        Ok(Self {
            key,
            certificate_der,
            rng,
        })
    }

    /// The compact JWS (ES256) of `claims`.
    pub fn sign(&self, claims: &str) -> anyhow::Result<String> {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = serde_json::json!({
            "typ": "JWT",
            "alg": "ES256",
            "x5c": [base64::engine::general_purpose::STANDARD.encode(&self.certificate_der)],
        });
        let signing_input = format!("{}.{}", b64.encode(header.to_string()), b64.encode(claims));
        let signature = self
            .key
            .sign(&self.rng, signing_input.as_bytes())
            .map_err(|e| anyhow::anyhow!("signing a token: {e}"))?;
        Ok(format!(
            "{signing_input}.{}",
            b64.encode(signature.as_ref())
        ))
    }
}

/// Tokens issued so far.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TokenCounts {
    /// Token requests answered with a token.
    pub issued: u64,
    /// Per requested scope (several scopes of one request joined by a space).
    pub by_scope: BTreeMap<String, u64>,
    /// Requests refused (wrong or missing credentials).
    pub refused: u64,
}

impl TokenCounts {
    /// What was issued since `earlier`.
    pub fn since(&self, earlier: &TokenCounts) -> TokenCounts {
        TokenCounts {
            issued: self.issued - earlier.issued,
            by_scope: self
                .by_scope
                .iter()
                .map(|(k, v)| (k.clone(), v - earlier.by_scope.get(k).copied().unwrap_or(0)))
                .filter(|(_, v)| *v > 0)
                .collect(),
            refused: self.refused - earlier.refused,
        }
    }

    /// Most tokens issued for one scope.
    pub fn max_per_scope(&self) -> u64 {
        self.per_scope().values().copied().max().unwrap_or(0)
    }

    /// Each scope, with the number of token requests that named it (alone or with others).
    pub fn per_scope(&self) -> BTreeMap<String, u64> {
        let mut scopes = BTreeMap::new();
        for (joined, n) in &self.by_scope {
            for scope in joined.split(' ').filter(|s| !s.is_empty()) {
                *scopes.entry(scope.to_string()).or_default() += n;
            }
        }
        scopes
    }
}

struct ServerState {
    signer: TokenSigner,
    basic: String,
    lifetime: Duration,
    counts: Mutex<TokenCounts>,
    next_id: std::sync::atomic::AtomicU64,
}

/// A registry with token authentication and its token server.
pub struct TokenRegistry {
    /// `127.0.0.1:PORT` of the registry.
    pub host: String,
    /// `127.0.0.1:PORT` of the token server (plain HTTP: give it to `--insecure-registry`).
    pub token_host: String,
    /// User the token server accepts.
    pub user: String,
    /// Its password.
    pub password: String,
    state: Arc<ServerState>,
    child: Child,
    server: tokio::task::JoinHandle<()>,
    dir: tempfile::TempDir,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl TokenRegistry {
    /// Starts the token server (tokens valid for `lifetime`) and `docker-registry serve`.
    pub async fn start(lifetime: Duration) -> anyhow::Result<Self> {
        Self::start_notifying(lifetime, None).await
    }

    /// Like [`Self::start`]; with `notify` = (URL, token), the registry POSTs its events
    /// there with `Authorization: Bearer token`, as `registry.sh` configures it.
    pub async fn start_notifying(
        lifetime: Duration,
        notify: Option<(&str, &str)>,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let signer = TokenSigner::generate(dir.path())?;
        let (user, password) = ("bench".to_string(), "bench-secret".to_string());
        let state = Arc::new(ServerState {
            signer,
            basic: format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            ),
            lifetime,
            counts: Mutex::default(),
            next_id: Default::default(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let token_host = listener.local_addr()?.to_string();
        let app = axum::Router::new()
            .route("/token", axum::routing::get(issue).post(issue_form))
            .with_state(state.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });

        let port = free_port()?;
        let host = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: info\n  formatter: text\nstorage:\n  filesystem:\n    rootdirectory: {data}\n  cache:\n    blobdescriptor: inmemory\n  maintenance:\n    uploadpurging:\n      enabled: false\nhttp:\n  addr: {host}\n  secret: imagewatch-bench-{port}\nauth:\n  token:\n    realm: http://{token_host}/token\n    service: {SERVICE}\n    issuer: {ISSUER}\n    rootcertbundle: {bundle}\n",
                data = dir.path().join("data").display(),
                bundle = dir.path().join("token.crt").display(),
            ) + &notify
                .map(|(url, token)| {
                    format!(
                        "notifications:\n  events:\n    includereferences: true\n  endpoints:\n    - name: imagewatch-bench\n      url: {url}\n      timeout: 2s\n      threshold: 2\n      backoff: 1s\n      headers:\n        Authorization: [Bearer {token}]\n"
                    )
                })
                .unwrap_or_default(),
        )?;
        let log = std::fs::File::create(dir.path().join("registry.log"))?;
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting docker-registry")?;
        let registry = Self {
            host,
            token_host,
            user,
            password,
            state,
            child,
            server,
            dir,
        };
        registry.wait_until_up().await?;
        Ok(registry)
    }

    async fn wait_until_up(&self) -> anyhow::Result<()> {
        let http = reqwest::Client::new();
        let url = format!("http://{}/v2/", self.host);
        crate::wait_until(
            "the token registry to answer 401",
            Duration::from_secs(30),
            || async {
                let response = http.get(&url).send().await?;
                Ok((response.status() == reqwest::StatusCode::UNAUTHORIZED).then_some(()))
            },
        )
        .await
    }

    /// The `Authorization` header for pushing to (and mounting from) `repositories`, minted
    /// directly (not counted as a fetch).
    pub fn push_authorization(&self, repositories: &[&str]) -> String {
        self.state.push_authorization(repositories)
    }

    /// An authorizer for [`crate::oci_push::ImagePusher`] that mints one token per set of
    /// repositories and reuses it, as a CI job's `docker push` does.
    pub fn cached_push_authorizer(&self) -> crate::oci_push::Authorizer {
        let state = self.state.clone();
        let minted: Mutex<std::collections::HashMap<Vec<String>, String>> = Mutex::default();
        Arc::new(move |repositories: &[&str]| {
            let key: Vec<String> = repositories.iter().map(|r| r.to_string()).collect();
            let mut minted = minted.lock().unwrap_or_else(|p| p.into_inner());
            minted
                .entry(key)
                .or_insert_with(|| state.push_authorization(repositories))
                .clone()
        })
    }

    /// The registry process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Tokens the token server issued so far.
    pub fn token_counts(&self) -> TokenCounts {
        self.state
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The registry's log (access log included).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("registry.log")
    }

    /// `.dockerconfigjson` contents with the token server's credentials for the registry.
    pub fn dockerconfigjson(&self) -> String {
        let auth = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", self.user, self.password));
        serde_json::json!({"auths": {self.host.clone(): {"auth": auth}}}).to_string()
    }
}

impl ServerState {
    fn push_authorization(&self, repositories: &[&str]) -> String {
        let access: Vec<Access> = repositories
            .iter()
            .map(|r| Access {
                kind: "repository".into(),
                name: r.to_string(),
                actions: vec!["pull".into(), "push".into()],
            })
            .collect();
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let claims = claims("bench-pusher", &access, now(), Duration::from_secs(600), id);
        let token = self.signer.sign(&claims).expect("token signing");
        format!("Bearer {token}")
    }
}

impl Drop for TokenRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.server.abort();
    }
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// `GET /token?service=…&scope=…&scope=…` with Basic credentials (the token spec).
async fn issue(
    axum::extract::State(state): axum::extract::State<Arc<ServerState>>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let authorized = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(state.basic.as_str());
    if !authorized {
        return refuse(&state);
    }
    let query = query.unwrap_or_default();
    let scopes: Vec<String> = form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == "scope")
        .map(|(_, v)| v.into_owned())
        .collect();
    match grant(&state, &scopes) {
        Ok(token) => axum::Json(serde_json::json!({
            "token": token,
            "expires_in": state.lifetime.as_secs(),
            "issued_at": jiff::Timestamp::now().to_string(),
        }))
        .into_response(),
        Err(e) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
    }
}

/// `POST /token` with an `application/x-www-form-urlencoded` body (distribution's "OAuth2
/// Token Authentication"): `grant_type=password` with `username` and `password`, `service`
/// and `client_id` required, `scope` space-separated. Answers `access_token`, the granted
/// `scope`, `expires_in` and `issued_at`; refresh tokens are not issued, so
/// `grant_type=refresh_token` is refused as `invalid_grant`.
async fn issue_form(
    axum::extract::State(state): axum::extract::State<Arc<ServerState>>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let oauth_error = |status: axum::http::StatusCode, error: &str| {
        (status, axum::Json(serde_json::json!({ "error": error }))).into_response()
    };
    let form_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !form_type {
        return oauth_error(
            axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request",
        );
    }
    let field = |name: &str| {
        form_urlencoded::parse(&body)
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    if field("service").as_deref() != Some(SERVICE)
        || field("client_id").is_none_or(|id| id.is_empty())
    {
        return oauth_error(axum::http::StatusCode::BAD_REQUEST, "invalid_request");
    }
    match field("grant_type").as_deref() {
        Some("password") => {}
        Some("refresh_token") => {
            return oauth_error(axum::http::StatusCode::BAD_REQUEST, "invalid_grant");
        }
        _ => {
            return oauth_error(
                axum::http::StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
            );
        }
    }
    let credentials = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            field("username").unwrap_or_default(),
            field("password").unwrap_or_default()
        ))
    );
    if credentials != state.basic {
        return refuse(&state);
    }
    let scopes: Vec<String> = field("scope")
        .unwrap_or_default()
        .split(' ')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    match grant(&state, &scopes) {
        Ok(token) => axum::Json(serde_json::json!({
            "access_token": token,
            "scope": scopes.join(" "),
            "expires_in": state.lifetime.as_secs(),
            "issued_at": jiff::Timestamp::now().to_string(),
        }))
        .into_response(),
        Err(e) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
    }
}

fn refuse(state: &ServerState) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    state
        .counts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .refused += 1;
    (axum::http::StatusCode::UNAUTHORIZED, "bad credentials").into_response()
}

/// Signs a token granting `scopes` and counts it.
fn grant(state: &ServerState, scopes: &[String]) -> Result<String, String> {
    let access: Vec<Access> = scopes.iter().filter_map(|s| parse_scope(s)).collect();
    let id = state
        .next_id
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let token = state
        .signer
        .sign(&claims("bench", &access, now(), state.lifetime, id))
        .map_err(|e| e.to_string())?;
    let mut counts = state.counts.lock().unwrap_or_else(|p| p.into_inner());
    counts.issued += 1;
    *counts.by_scope.entry(scopes.join(" ")).or_default() += 1;
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{ECDSA_P256_SHA256_FIXED, KeyPair as _, UnparsedPublicKey};

    #[test]
    fn scopes_parse_with_ports_and_several_actions() {
        assert_eq!(
            parse_scope("repository:team/app:pull"),
            Some(Access {
                kind: "repository".into(),
                name: "team/app".into(),
                actions: vec!["pull".into()],
            })
        );
        let a = parse_scope("repository:host:5000/app:pull,push").unwrap();
        assert_eq!(a.name, "host:5000/app");
        assert_eq!(a.actions, vec!["pull", "push"]);
        assert_eq!(parse_scope("registry:catalog"), None);
        assert_eq!(parse_scope(":x:pull"), None);
    }

    #[test]
    fn claims_carry_issuer_audience_and_access() {
        let access = vec![parse_scope("repository:a/b:pull").unwrap()];
        let c: serde_json::Value =
            serde_json::from_str(&claims("me", &access, 1000, Duration::from_secs(300), 7))
                .unwrap();
        assert_eq!(c["iss"], ISSUER);
        assert_eq!(c["aud"], SERVICE);
        assert_eq!(c["exp"], 1300);
        assert_eq!(c["nbf"], 995);
        assert_eq!(c["jti"], "bench-7");
        assert_eq!(c["access"][0]["name"], "a/b");
        assert_eq!(c["access"][0]["actions"][0], "pull");
    }

    #[test]
    fn tokens_are_es256_signatures_over_header_and_claims() {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let signer = TokenSigner::new(pkcs8.as_ref(), b"cert".to_vec()).unwrap();
        let token = signer.sign("{\"sub\":\"x\"}").unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header: serde_json::Value =
            serde_json::from_slice(&b64.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(header["alg"], "ES256");
        assert_eq!(header["x5c"][0], "Y2VydA==");
        assert_eq!(b64.decode(parts[1]).unwrap(), b"{\"sub\":\"x\"}");
        let signature = b64.decode(parts[2]).unwrap();
        assert_eq!(signature.len(), 64, "JWS ES256 is r || s");
        let public = UnparsedPublicKey::new(
            &ECDSA_P256_SHA256_FIXED,
            signer.key.public_key().as_ref().to_vec(),
        );
        public
            .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature)
            .unwrap();
        assert!(public.verify(b"tampered", &signature).is_err());
    }

    #[test]
    fn counts_since_an_earlier_snapshot() {
        let before = TokenCounts {
            issued: 2,
            by_scope: [("a".to_string(), 2)].into(),
            refused: 0,
        };
        let after = TokenCounts {
            issued: 5,
            by_scope: [("a".to_string(), 2), ("b".to_string(), 3)].into(),
            refused: 1,
        };
        let d = after.since(&before);
        assert_eq!(d.issued, 3);
        assert_eq!(d.by_scope, [("b".to_string(), 3)].into());
        assert_eq!(d.max_per_scope(), 3);
        assert_eq!(d.refused, 1);
    }
}
