//! Tests of GitHub App tokens: the JWT (checked with an RSA implementation other than the one
//! that signs it), the refresh rule, and a contract test against an in-process stub of GitHub's
//! `POST /app/installations/{id}/access_tokens` (documented request and response shapes).

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering},
};

use axum::{
    Router,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::post,
};
use base64::Engine as _;
use rsa::{
    RsaPublicKey,
    pkcs1v15::{Signature, VerifyingKey},
    pkcs8::DecodePublicKey,
    signature::Verifier,
};
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::*;

const PKCS1: &str = include_str!("testdata/github-app-pkcs1.pem");
const PKCS8: &str = include_str!("testdata/github-app-pkcs8.pem");
const PUBLIC: &str = include_str!("testdata/github-app-public.pem");
const APP_ID: &str = "123456";
const INSTALLATION: u64 = 4242;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// Checks a JWT the way GitHub does: RS256 signature by `public_pem`, then returns its claims.
fn verify_jwt(jwt: &str, public_pem: &str) -> Result<Value, String> {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let parts: Vec<&str> = jwt.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err(format!("not three parts: {jwt}"));
    };
    let header: Value = serde_json::from_slice(&b64.decode(header).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    if header != json!({"alg": "RS256", "typ": "JWT"}) {
        return Err(format!("header {header}"));
    }
    let public = RsaPublicKey::from_public_key_pem(public_pem).map_err(|e| e.to_string())?;
    let signature =
        Signature::try_from(b64.decode(signature).map_err(|e| e.to_string())?.as_slice())
            .map_err(|e| e.to_string())?;
    VerifyingKey::<Sha256>::new(public)
        .verify(jwt.rsplit_once('.').unwrap().0.as_bytes(), &signature)
        .map_err(|e| format!("signature: {e}"))?;
    serde_json::from_slice(&b64.decode(claims).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())
}

#[test]
fn jwt_is_rs256_signed_by_the_app_key_with_github_claims() {
    let now = ts("2026-11-30T12:00:00Z");
    for pem in [PKCS1, PKCS8] {
        let key = AppKey::from_pem(pem).unwrap();
        let jwt = app_jwt(APP_ID, &key, now).unwrap();
        let claims = verify_jwt(&jwt, PUBLIC).unwrap();
        assert_eq!(
            claims,
            json!({
                "iat": now.as_second() - 60,
                "exp": now.as_second() + 540,
                "iss": 123456,
            })
        );
    }
    // A client id is a string issuer.
    let key = AppKey::from_pem(PKCS1).unwrap();
    let claims = verify_jwt(&app_jwt("Iv23liABC", &key, now).unwrap(), PUBLIC).unwrap();
    assert_eq!(claims["iss"], json!("Iv23liABC"));
}

#[test]
fn a_tampered_jwt_does_not_verify() {
    let key = AppKey::from_pem(PKCS1).unwrap();
    let jwt = app_jwt(APP_ID, &key, Timestamp::now()).unwrap();
    let (input, sig) = jwt.rsplit_once('.').unwrap();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let forged_claims = b64.encode(br#"{"iat":0,"exp":9999999999,"iss":1}"#);
    let header = input.split('.').next().unwrap();
    let forged = format!("{header}.{forged_claims}.{sig}");
    assert!(
        verify_jwt(&forged, PUBLIC)
            .unwrap_err()
            .contains("signature")
    );
}

#[test]
fn keys_that_cannot_be_used_say_why() {
    let err = AppKey::from_pem("not a key").unwrap_err();
    assert!(err.to_string().contains("not PEM"), "{err}");
    let err = AppKey::from_pem(PUBLIC).unwrap_err();
    assert!(err.to_string().contains("PUBLIC KEY"), "{err}");
    let encrypted = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\nAAAA\n-----END RSA PRIVATE KEY-----\n";
    let err = AppKey::from_pem(encrypted).unwrap_err();
    assert!(err.to_string().contains("encrypted"), "{err}");
    let truncated = PKCS1.replace("-----END RSA PRIVATE KEY-----", "");
    let err = AppKey::from_pem(&truncated).unwrap_err();
    assert!(err.to_string().contains("END RSA PRIVATE KEY"), "{err}");
    let garbage = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
    let err = AppKey::from_pem(garbage).unwrap_err();
    assert_eq!(err.category(), "invalid_key");
    assert!(!format!("{:?}", AppKey::from_pem(PKCS1).unwrap()).contains("MII"));
}

#[test]
fn credentials_are_checked_and_normalized() {
    let c = GithubAppCredentials::new(" 123 ", "42\n", PKCS1, None).unwrap();
    assert_eq!(c.app_id, "123");
    assert_eq!(c.installation_id, 42);
    assert_eq!(
        c.token_url(),
        "https://api.github.com/app/installations/42/access_tokens"
    );
    let ghe =
        GithubAppCredentials::new("1", "2", PKCS1, Some("https://ghe.example/api/v3/")).unwrap();
    assert_eq!(ghe.api_url, "https://ghe.example/api/v3");
    assert!(!format!("{ghe:?}").contains("PRIVATE"));
    let err = GithubAppCredentials::new("1", "two", PKCS1, None).unwrap_err();
    assert!(err.to_string().contains("githubAppInstallationID"), "{err}");
    let err = GithubAppCredentials::new("1 2", "2", PKCS1, None).unwrap_err();
    assert!(err.to_string().contains("githubAppID"), "{err}");
    let err = GithubAppCredentials::new("1", "2", PKCS1, Some("ftp://x")).unwrap_err();
    assert!(
        err.to_string().contains("githubAppEnterpriseBaseUrl"),
        "{err}"
    );
    assert!(GithubAppCredentials::new("1", "2", " ", None).is_err());
}

#[test]
fn refresh_when_less_than_five_minutes_remain() {
    let now = ts("2026-11-30T12:00:00Z");
    assert!(!needs_refresh(now, ts("2026-11-30T13:00:00Z")));
    assert!(!needs_refresh(now, ts("2026-11-30T12:05:00Z")));
    assert!(needs_refresh(now, ts("2026-11-30T12:04:59Z")));
    assert!(needs_refresh(now, now));
    assert!(needs_refresh(now, ts("2026-11-30T11:00:00Z")));
}

#[test]
fn token_responses_and_refusals_map_to_precise_errors() {
    let t = parse_token_response(
        r#"{"token":"ghs_abc","expires_at":"2026-11-30T13:00:00Z","permissions":{"contents":"write"},"repository_selection":"selected"}"#,
    )
    .unwrap();
    assert_eq!(t.token, "ghs_abc");
    assert_eq!(t.expires_at, ts("2026-11-30T13:00:00Z"));
    assert!(!format!("{t:?}").contains("ghs_abc"));
    assert!(parse_token_response(r#"{"token":"","expires_at":"2026-11-30T13:00:00Z"}"#).is_err());
    assert!(parse_token_response(r#"{"token":"x","expires_at":"soon"}"#).is_err());

    let app = GithubAppCredentials::new(APP_ID, "7", PKCS1, None).unwrap();
    let e = refusal(&app, 401, false, r#"{"message":"Bad credentials"}"#);
    assert_eq!(e.category(), "unauthorized");
    assert!(e.is_configuration());
    assert!(
        e.to_string().contains("Bad credentials") && e.to_string().contains("githubAppPrivateKey")
    );
    let e = refusal(&app, 404, false, r#"{"message":"Not Found"}"#);
    assert_eq!(e.category(), "not_found");
    assert!(e.to_string().contains("installation 7"), "{e}");
    assert_eq!(refusal(&app, 403, true, "{}").category(), "rate_limited");
    assert_eq!(refusal(&app, 429, false, "{}").category(), "rate_limited");
    let e = refusal(&app, 502, false, "<html>bad gateway</html>");
    assert_eq!(e.category(), "rejected");
    assert!(!e.is_configuration());
    assert!(e.to_string().contains("bad gateway"), "{e}");
}

/// GitHub's token endpoint, in memory: checks the JWT like GitHub does and counts mints.
#[derive(Clone)]
struct GithubStub {
    /// Public key the JWT must verify with.
    public_pem: Arc<Mutex<String>>,
    /// Lifetime of issued tokens.
    lifetime: Arc<Mutex<SignedDuration>>,
    /// Token requests received (valid or not).
    requests: Arc<AtomicUsize>,
    /// Tokens issued.
    mints: Arc<AtomicUsize>,
    /// While set, requests wait for `release` before answering.
    hold: Arc<Mutex<bool>>,
    release: Arc<Notify>,
    received: Arc<Notify>,
    /// Last problem found in a request.
    problems: Arc<Mutex<Vec<String>>>,
}

impl GithubStub {
    fn new() -> Self {
        Self {
            public_pem: Arc::new(Mutex::new(PUBLIC.to_string())),
            lifetime: Arc::new(Mutex::new(SignedDuration::from_hours(1))),
            requests: Arc::default(),
            mints: Arc::default(),
            hold: Arc::default(),
            release: Arc::default(),
            received: Arc::default(),
            problems: Arc::default(),
        }
    }

    async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = Router::new()
            .route("/app/installations/{id}/access_tokens", post(issue))
            .with_state(self.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        base
    }

    fn problem(&self, p: String) -> (StatusCode, String) {
        self.problems.lock().unwrap().push(p.clone());
        (
            StatusCode::UNAUTHORIZED,
            json!({"message": "A JSON web token could not be decoded", "documentation_url": "https://docs.github.com/rest"}).to_string(),
        )
    }
}

async fn issue(
    State(stub): State<GithubStub>,
    Path(id): Path<u64>,
    headers: HeaderMap,
) -> impl IntoResponse {
    stub.requests.fetch_add(1, Ordering::SeqCst);
    stub.received.notify_waiters();
    // Created before looking at `hold`, so a release between the two is not missed.
    let released = stub.release.notified();
    let held = *stub.hold.lock().unwrap();
    if held {
        released.await;
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    if header("accept") != "application/vnd.github+json" {
        return stub.problem(format!("accept {:?}", header("accept")));
    }
    let Some(jwt) = header("authorization")
        .strip_prefix("Bearer ")
        .map(str::to_string)
    else {
        return stub.problem("no bearer token".into());
    };
    let public = stub.public_pem.lock().unwrap().clone();
    let claims = match verify_jwt(&jwt, &public) {
        Ok(c) => c,
        Err(e) => return stub.problem(e),
    };
    let now = Timestamp::now().as_second();
    let (iat, exp) = (
        claims["iat"].as_i64().unwrap_or_default(),
        claims["exp"].as_i64().unwrap_or_default(),
    );
    if claims["iss"] != json!(123456) || iat > now || exp <= now || exp - iat > 600 {
        return stub.problem(format!("claims {claims}"));
    }
    if id != INSTALLATION {
        return (
            StatusCode::NOT_FOUND,
            json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app"}).to_string(),
        );
    }
    let n = stub.mints.fetch_add(1, Ordering::SeqCst) + 1;
    let lifetime = *stub.lifetime.lock().unwrap();
    let expires_at = Timestamp::now()
        .checked_add(lifetime)
        .unwrap()
        .round(jiff::Unit::Second)
        .unwrap();
    (
        StatusCode::CREATED,
        json!({
            "token": format!("ghs_token{n}"),
            "expires_at": expires_at.to_string(),
            "permissions": {"contents": "write", "metadata": "read"},
            "repository_selection": "all",
        })
        .to_string(),
    )
}

fn app(base: &str, installation: u64) -> GithubAppCredentials {
    GithubAppCredentials::new(APP_ID, &installation.to_string(), PKCS1, Some(base)).unwrap()
}

fn cache() -> Arc<InstallationTokens> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Arc::new(InstallationTokens::new(reqwest::Client::new()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_share_one_mint() {
    let stub = GithubStub::new();
    let base = stub.start().await;
    let tokens = cache();
    let creds = app(&base, INSTALLATION);
    let on_mint = Arc::new(Mutex::new(Vec::new()));
    // Hold GitHub's answer until every caller has asked for a token.
    *stub.hold.lock().unwrap() = true;
    let started = Arc::new(AtomicUsize::new(0));
    let all_started = Arc::new(Notify::new());
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let (tokens, creds, on_mint, started, all_started) = (
            tokens.clone(),
            creds.clone(),
            on_mint.clone(),
            started.clone(),
            all_started.clone(),
        );
        tasks.push(tokio::spawn(async move {
            if started.fetch_add(1, Ordering::SeqCst) + 1 == 200 {
                all_started.notify_one();
            }
            tokens
                .token(&creds, |outcome| on_mint.lock().unwrap().push(outcome))
                .await
        }));
    }
    let received = stub.received.notified();
    if stub.requests.load(Ordering::SeqCst) == 0 {
        received.await;
    }
    if started.load(Ordering::SeqCst) < 200 {
        all_started.notified().await;
    }
    *stub.hold.lock().unwrap() = false;
    stub.release.notify_waiters();
    for task in tasks {
        let token = task.await.unwrap().unwrap();
        assert_eq!(token.token, "ghs_token1");
    }
    assert_eq!(stub.problems.lock().unwrap().clone(), Vec::<String>::new());
    assert_eq!(
        stub.mints.load(Ordering::SeqCst),
        1,
        "one mint for 200 callers"
    );
    assert_eq!(stub.requests.load(Ordering::SeqCst), 1);
    assert_eq!(*on_mint.lock().unwrap(), vec!["ok"]);
    // Later callers are answered from memory.
    let again = tokens
        .token(&creds, |_| panic!("minted again"))
        .await
        .unwrap();
    assert_eq!(again.token, "ghs_token1");
}

#[tokio::test]
async fn a_token_near_its_expiry_is_replaced() {
    let stub = GithubStub::new();
    let base = stub.start().await;
    let tokens = cache();
    let creds = app(&base, INSTALLATION);
    // GitHub hands out tokens with 4 minutes left: each use needs a fresh one.
    *stub.lifetime.lock().unwrap() = SignedDuration::from_mins(4);
    let first = tokens.token(&creds, |_| {}).await.unwrap();
    let second = tokens.token(&creds, |_| {}).await.unwrap();
    assert_eq!(
        (first.token.as_str(), second.token.as_str()),
        ("ghs_token1", "ghs_token2")
    );
    // A full-hour token is kept.
    *stub.lifetime.lock().unwrap() = SignedDuration::from_hours(1);
    let third = tokens.token(&creds, |_| {}).await.unwrap();
    let fourth = tokens.token(&creds, |_| {}).await.unwrap();
    assert_eq!(
        (third.token.as_str(), fourth.token.as_str()),
        ("ghs_token3", "ghs_token3")
    );
    assert_eq!(stub.mints.load(Ordering::SeqCst), 3);
    assert_eq!(stub.problems.lock().unwrap().clone(), Vec::<String>::new());
}

#[tokio::test]
async fn refusals_are_precise_and_held_briefly() {
    let stub = GithubStub::new();
    let base = stub.start().await;
    let tokens = cache();

    // The app id and key do not belong together (GitHub cannot verify the JWT) → 401.
    *stub.public_pem.lock().unwrap() = include_str!("testdata/github-app-other-public.pem").into();
    let creds = app(&base, INSTALLATION);
    let mut outcomes = Vec::new();
    let err = tokens
        .token(&creds, |o| outcomes.push(o))
        .await
        .unwrap_err();
    assert!(matches!(err, GithubAppError::Unauthorized { .. }), "{err}");
    assert!(err.to_string().contains("githubAppID"), "{err}");
    assert_eq!(outcomes, vec!["unauthorized"]);
    // Asked again at once: answered from memory, GitHub is not called again.
    let again = tokens
        .token(&creds, |_| panic!("asked GitHub again"))
        .await
        .unwrap_err();
    assert_eq!(again, err);
    assert_eq!(stub.requests.load(Ordering::SeqCst), 1);

    // An installation the app does not have → 404 naming it.
    *stub.public_pem.lock().unwrap() = PUBLIC.into();
    let tokens =
        Arc::new(InstallationTokens::new(reqwest::Client::new()).with_failure_hold(Duration::ZERO));
    let err = tokens.token(&app(&base, 999), |_| {}).await.unwrap_err();
    assert!(
        matches!(
            err,
            GithubAppError::InstallationNotFound {
                installation_id: 999,
                ..
            }
        ),
        "{err}"
    );
    // Without a hold, the next call asks GitHub again.
    tokens.token(&app(&base, 999), |_| {}).await.unwrap_err();
    assert_eq!(stub.requests.load(Ordering::SeqCst), 3);

    // Nobody listening → a network error naming the endpoint.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let err = tokens.token(&app(&dead, 1), |_| {}).await.unwrap_err();
    assert_eq!(err.category(), "network");
    assert!(
        err.to_string()
            .contains("/app/installations/1/access_tokens"),
        "{err}"
    );
}

#[tokio::test]
async fn a_different_private_key_never_gets_a_cached_token() {
    let stub = GithubStub::new();
    let base = stub.start().await;
    let tokens = cache();
    let good = app(&base, INSTALLATION);
    tokens.token(&good, |_| {}).await.unwrap();
    // Same app and installation, another key: GitHub is asked (and refuses), the cached token
    // of the real key is not handed out.
    let other_key = include_str!("testdata/github-app-other-pkcs1.pem");
    let impostor =
        GithubAppCredentials::new(APP_ID, &INSTALLATION.to_string(), other_key, Some(&base))
            .unwrap();
    let err = tokens.token(&impostor, |_| {}).await.unwrap_err();
    assert_eq!(err.category(), "unauthorized");
    assert_eq!(stub.mints.load(Ordering::SeqCst), 1);
}

#[test]
fn keys_pasted_with_indentation_or_crlf_still_parse() {
    let indented: String = PKCS1.lines().map(|l| format!("    {l}\r\n")).collect();
    let key = AppKey::from_pem(&indented).unwrap();
    assert_eq!(
        key.public_key_der(),
        AppKey::from_pem(PKCS1).unwrap().public_key_der()
    );
    let other = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n";
    let err = AppKey::from_pem(other).unwrap_err();
    assert!(
        err.to_string().contains("no RSA private key block"),
        "{err}"
    );
}
