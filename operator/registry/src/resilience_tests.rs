//! Tests of the scan step's behaviour under load and failure, against the in-process test
//! server: the token cache counted at the token server, registry-wide tokens for many
//! repositories (size limits, partial grants), token expiry and revocation, Docker Hub's
//! challenge flow, per-host rate limits, 429 pauses, 5xx retries, timeouts, and a private CA.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures::future::BoxFuture;

use super::auth::{
    AuthScheme, TokenKey, parse_token_response, parse_www_authenticate, select_scheme,
};
use super::distribution::Tuning;
use super::distribution::token::token_url;
use super::ratelimit::RetryPolicy;
use super::test_server::{
    ChallengeTogether, TestCertificates, TestRequest, TestResponse, TestServer, TlsFront,
};
use super::*;

fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Retries as in production but with short delays, so failing tests stay fast.
fn quick_retries() -> RetryPolicy {
    RetryPolicy {
        retries: 2,
        base: Duration::from_millis(10),
        max: Duration::from_millis(40),
    }
}

/// A client for `server` with the given per-host settings (plain HTTP is added).
fn client_with(
    server: &TestServer,
    settings: RegistrySettings,
    timeout: Duration,
) -> RegistryClient {
    install_crypto();
    let mut registries = HashMap::new();
    registries.insert(
        server.host(),
        RegistrySettings {
            insecure: true,
            ..settings
        },
    );
    RegistryClient::build(
        RegistryOptions {
            timeout,
            ..RegistryOptions::default()
        },
        registries,
        Tuning {
            retry: quick_retries(),
            ..Tuning::default()
        },
    )
    .unwrap()
}

/// No practical rate limit, for tests about other things.
fn unlimited() -> RegistrySettings {
    RegistrySettings {
        rate_per_second: Some(10_000.0),
        burst: Some(10_000),
        ..RegistrySettings::default()
    }
}

fn repo(server: &TestServer, path: &str) -> RepositoryRef {
    RepositoryRef::parse(&format!("{}/{path}", server.host())).unwrap()
}

type HandlerFn = Box<dyn Fn(TestRequest) -> BoxFuture<'static, TestResponse> + Send + Sync>;

/// A registry that wants Bearer tokens from its own `/token`, issuing `tok-<n>` with
/// `expires_in` seconds of life. Accepts `tok-<accept>`, or any issued token when `accept`
/// is 0. A burst's 401s can be held until all of its callers have arrived (`together`).
#[derive(Default)]
struct TokenRegistry {
    expires_in: AtomicU64,
    accept: AtomicU64,
    issued: AtomicU64,
    together: ChallengeTogether,
}

fn token_registry(state: Arc<TokenRegistry>) -> HandlerFn {
    Box::new(move |req: TestRequest| {
        let state = state.clone();
        Box::pin(async move {
            let host = req.header("host").unwrap_or("").to_string();
            if req.path() == "/token" {
                let n = state.issued.fetch_add(1, Ordering::SeqCst) + 1;
                let expires = state.expires_in.load(Ordering::SeqCst).max(1);
                return TestResponse::new(200)
                    .json(&format!(r#"{{"token":"tok-{n}","expires_in":{expires}}}"#));
            }
            let accept = state.accept.load(Ordering::SeqCst);
            let ok = match req.header("authorization") {
                Some(a) if accept == 0 => a.starts_with("Bearer tok-"),
                Some(a) => a == format!("Bearer tok-{accept}"),
                None => false,
            };
            if !ok {
                state.together.arrive().await;
                let challenge = format!(
                    r#"Bearer realm="http://{host}/token",service="test",scope="repository:team/app:pull""#
                );
                return TestResponse::new(401)
                    .header("WWW-Authenticate", &challenge)
                    .json(r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#);
            }
            TestResponse::new(200).json(r#"{"name":"team/app","tags":["v1"]}"#)
        })
    })
}

/// Keeps the paused test clock still while the test waits on sockets. Tokio auto-advances
/// a paused clock whenever the runtime is idle, which includes waiting for a loopback
/// answer, and would then jump to the next timer (a request timeout); it does not while a
/// blocking task runs, so one is kept running until this is dropped. The clock then moves
/// only by `tokio::time::advance` (a `sleep` would never end).
struct HeldClock(#[allow(dead_code)] std::sync::mpsc::Sender<()>);

impl HeldClock {
    fn hold() -> HeldClock {
        let (release, released) = std::sync::mpsc::channel::<()>();
        tokio::task::spawn_blocking(move || {
            // Returns when the sender is dropped.
            let _ = released.recv();
        });
        HeldClock(release)
    }
}

/// Moves the held clock to `deadline`.
async fn advance_to(deadline: tokio::time::Instant) {
    tokio::time::advance(deadline.saturating_duration_since(tokio::time::Instant::now())).await;
}

async fn concurrent_listings(client: &RegistryClient, repo: &RepositoryRef, n: usize) {
    let calls = (0..n).map(|_| {
        let (client, repo) = (client.clone(), repo.clone());
        async move { client.list_tags(&repo, &Credentials::Anonymous).await }
    });
    for result in futures::future::join_all(calls).await {
        assert_eq!(result.unwrap(), vec!["v1"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_listings_make_one_token_request_at_the_server() {
    let state = Arc::new(TokenRegistry::default());
    state.expires_in.store(300, Ordering::SeqCst);
    let server = TestServer::start(token_registry(state.clone())).await;
    let client = client_with(&server, unlimited(), Duration::from_secs(20));
    let repo = repo(&server, "team/app");

    // All 200 are challenged, and so lack a token, before the first 401 is answered.
    state.together.expect(200);
    concurrent_listings(&client, &repo, 200).await;
    assert_eq!(server.count("/token"), 1);
    assert_eq!(client.token_fetches(), 1);
    assert_eq!(client.token_outcomes(), vec![("ok", 1)]);
    let sent: u64 = client.http_requests().iter().map(|(_, n)| n).sum();
    assert_eq!(sent as usize, server.requests().len());
    // Every listing was challenged once at most, then sent with the one token.
    assert!(server.count("/v2/team/app/tags/list") <= 400);
}

/// On the paused test clock, held while requests wait on sockets: the token's lifetime is
/// crossed with `advance`, to the millisecond, instead of sleeping through it.
#[tokio::test(start_paused = true)]
async fn expired_tokens_are_refreshed_once_per_burst() {
    let _clock = HeldClock::hold();
    let state = Arc::new(TokenRegistry::default());
    state.expires_in.store(2, Ordering::SeqCst);
    let server = TestServer::start(token_registry(state.clone())).await;
    let client = client_with(&server, unlimited(), Duration::from_secs(20));
    let repo = repo(&server, "team/app");

    state.together.expect(30);
    concurrent_listings(&client, &repo, 30).await;
    assert_eq!(server.count("/token"), 1);
    // A 2 s token is handed out for 1.6 s: up to then it is reused.
    tokio::time::advance(Duration::from_millis(1599)).await;
    concurrent_listings(&client, &repo, 30).await;
    assert_eq!(server.count("/token"), 1);
    // From then on, the next burst fetches exactly once.
    tokio::time::advance(Duration::from_millis(1)).await;
    concurrent_listings(&client, &repo, 30).await;
    assert_eq!(server.count("/token"), 2);
    assert_eq!(client.token_fetches(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_cached_token_is_refreshed_once_not_in_a_loop() {
    let state = Arc::new(TokenRegistry::default());
    state.expires_in.store(300, Ordering::SeqCst);
    state.accept.store(1, Ordering::SeqCst);
    let server = TestServer::start(token_registry(state.clone())).await;
    let client = client_with(&server, unlimited(), Duration::from_secs(20));
    let repo = repo(&server, "team/app");
    let list = "/v2/team/app/tags/list";

    concurrent_listings(&client, &repo, 1).await;
    assert_eq!(server.count("/token"), 1);

    // The registry revokes tok-1: twenty callers holding it, all refused before any of them
    // is answered, cause one refresh between them.
    state.accept.store(2, Ordering::SeqCst);
    state.together.expect(20);
    concurrent_listings(&client, &repo, 20).await;
    assert_eq!(server.count("/token"), 2);

    // If the registry refuses even a fresh token, one refresh and one retry, then the 401
    // is the answer: two registry requests and one token request, no loop.
    state.accept.store(99, Ordering::SeqCst);
    let (tokens, lists) = (server.count("/token"), server.count(list));
    let err = client
        .list_tags(&repo, &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert_eq!(err.category(), "unauthorized", "{err}");
    assert_eq!(server.count("/token"), tokens + 1);
    assert_eq!(server.count(list), lists + 2);
}

/// The challenge Docker Hub sends, as recorded in Docker's registry authentication docs
/// (with the docs' example repository replaced by `library/nginx` and pull-only scope).
const HUB_CHALLENGE: &str = r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull""#;
/// The token answer from the same docs (token shortened).
const HUB_TOKEN_RESPONSE: &str = r#"{"token": "eyJ0eXAiOiJKV1QiLCJhbGciOiJFUzI1NiIsImtpZCI6IlBZWU86VEVXVTpWN0pIOjI2SlY6QVFUWjpMSkMzOlNYVko6WEdIQTozNEYyOjJMQVE6WlJNSzpaN1E2In0.eyJpc3MiOiJhdXRoLmRvY2tlci5jb20ifQ.sig", "expires_in": 3600, "issued_at": "2009-11-10T23:00:00Z"}"#;

#[test]
fn docker_hub_challenge_and_token_formats() {
    let repo = RepositoryRef::parse("nginx").unwrap();
    assert_eq!(repo.registry, DOCKER_HUB_REGISTRY);
    assert_eq!(repo.path, "library/nginx");

    let challenges = parse_www_authenticate(HUB_CHALLENGE);
    let scheme = select_scheme(&challenges).unwrap();
    let AuthScheme::Bearer { realm, service } = scheme else {
        panic!("{scheme:?}")
    };
    assert_eq!(realm, "https://auth.docker.io/token");
    assert_eq!(service.as_deref(), Some("registry.docker.io"));

    // The scope is the client's own (pull on the repository), not copied from the challenge.
    let scope = format!("repository:{}:pull", repo.path);
    let url = token_url(&repo.registry, &realm, service.as_deref(), &[&scope]).unwrap();
    assert_eq!(
        url.as_str(),
        "https://auth.docker.io/token?service=registry.docker.io&scope=repository%3Alibrary%2Fnginx%3Apull"
    );

    let token = parse_token_response(HUB_TOKEN_RESPONSE.as_bytes()).unwrap();
    assert!(token.token.starts_with("eyJ0eXAi"));
    assert_eq!(token.lifetime, Duration::from_secs(3600));
    // Docker Hub's OAuth2 form.
    let token = parse_token_response(
        br#"{"access_token":"abc","token":"abc","expires_in":300,"issued_at":"2024-01-01T00:00:00.000000000Z"}"#,
    )
    .unwrap();
    assert_eq!(token.lifetime, Duration::from_secs(300));

    // Tokens are cached per registry host, scope and identity.
    let key = TokenKey {
        registry: repo.registry.clone(),
        scope,
        identity: Credentials::Anonymous.identity(),
    };
    assert_eq!(key.registry, "registry-1.docker.io");
}

/// Docker Hub's hosts served locally over TLS (the names resolve to the test server, whose
/// certificate comes from a test CA): the recorded challenge drives the real flow, and the
/// per-host CA setting decides whether TLS is trusted.
#[tokio::test]
async fn docker_hub_flow_over_tls_with_a_private_ca() {
    install_crypto();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("imagewatch-tls-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let certs = TestCertificates::generate(&dir, &["registry-1.docker.io", "auth.docker.io"]);
    let _ = std::fs::remove_dir_all(&dir);

    let server = TestServer::start(|req: TestRequest| -> BoxFuture<'static, TestResponse> {
        Box::pin(async move {
            let host = req.header("host").unwrap_or("");
            if host == "auth.docker.io" && req.path() == "/token" {
                if req.query("service").as_deref() != Some("registry.docker.io")
                    || req.query("scope").as_deref() != Some("repository:library/nginx:pull")
                {
                    return TestResponse::new(400).json(r#"{"details":"bad scope"}"#);
                }
                return TestResponse::new(200).json(HUB_TOKEN_RESPONSE);
            }
            if host != "registry-1.docker.io" {
                return TestResponse::new(421);
            }
            let token = serde_json::from_str::<serde_json::Value>(HUB_TOKEN_RESPONSE).unwrap()
                ["token"]
                .as_str()
                .unwrap()
                .to_string();
            if req.header("authorization") != Some(format!("Bearer {token}").as_str()) {
                return TestResponse::new(401)
                    .header("WWW-Authenticate", HUB_CHALLENGE)
                    .json(r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required","detail":[{"Type":"repository","Class":"","Name":"library/nginx","Action":"pull"}]}]}"#);
            }
            TestResponse::new(200).json(r#"{"name":"library/nginx","tags":["1.27","1.28","latest"]}"#)
        })
    })
    .await;
    let front = TlsFront::start(server.addr, &certs);
    let tuning = || Tuning {
        retry: quick_retries(),
        resolve: vec![
            ("registry-1.docker.io".to_string(), front.addr),
            ("auth.docker.io".to_string(), front.addr),
        ],
        ..Tuning::default()
    };
    let options = || RegistryOptions {
        timeout: Duration::from_secs(10),
        ..RegistryOptions::default()
    };
    let nginx = RepositoryRef::parse("docker.io/nginx").unwrap();

    // Without the CA the certificate is not trusted.
    let client = RegistryClient::build(options(), HashMap::new(), tuning()).unwrap();
    let err = client
        .list_tags(&nginx, &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert_eq!(err.category(), "transport", "{err}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );

    // With the CA configured for Docker Hub (under its short name), the whole flow works:
    // challenge, token from auth.docker.io (same CA, via the registry's client), tags.
    let mut registries = HashMap::new();
    registries.insert(
        "docker.io".to_string(),
        RegistrySettings {
            ca_pem: Some(certs.ca_pem.clone()),
            ..RegistrySettings::default()
        },
    );
    let client = RegistryClient::build(options(), registries, tuning()).unwrap();
    for _ in 0..3 {
        let tags = client
            .list_tags(&nginx, &Credentials::Anonymous)
            .await
            .unwrap();
        assert_eq!(tags, vec!["1.27", "1.28", "latest"]);
    }
    assert_eq!(server.count("/token"), 1);
    assert_eq!(client.token_fetches(), 1);
    let hosts: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.header("host").unwrap_or("").to_string())
        .collect();
    assert!(
        hosts
            .iter()
            .all(|h| h == "registry-1.docker.io" || h == "auth.docker.io"),
        "{hosts:?}"
    );
    drop(front);
}

fn always_ok() -> HandlerFn {
    Box::new(|_req: TestRequest| {
        Box::pin(async { TestResponse::new(200).json(r#"{"name":"a","tags":["v1"]}"#) })
    })
}

#[tokio::test]
async fn requests_wait_for_the_host_rate_limit() {
    let server = TestServer::start(always_ok()).await;
    let client = client_with(
        &server,
        RegistrySettings {
            rate_per_second: Some(20.0),
            burst: Some(2),
            ..RegistrySettings::default()
        },
        Duration::from_secs(10),
    );
    let repo = repo(&server, "a");
    let start = Instant::now();
    let calls = (0..10).map(|_| client.list_tags(&repo, &Credentials::Anonymous));
    for result in futures::future::join_all(calls).await {
        result.unwrap();
    }
    // 10 requests, 2 at once, then 20/s: at least 8 / 20 = 400 ms.
    assert!(
        start.elapsed() >= Duration::from_millis(400),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(server.count("/v2/a/tags/list"), 10);
}

/// Serves 429 (with the given `Retry-After`, if any) to the first `limited` requests.
fn limited_then_ok(limited: u64, retry_after: Option<String>) -> HandlerFn {
    let seen = Arc::new(AtomicU64::new(0));
    Box::new(move |_req: TestRequest| {
        let n = seen.fetch_add(1, Ordering::SeqCst);
        let retry_after = retry_after.clone();
        Box::pin(async move {
            if n < limited {
                let mut response = TestResponse::new(429);
                if let Some(value) = retry_after {
                    response = response.header("Retry-After", &value);
                }
                return response.json(
                    r#"{"errors":[{"code":"TOOMANYREQUESTS","message":"You have reached your pull rate limit."}]}"#,
                );
            }
            TestResponse::new(200).json(r#"{"name":"a","tags":["v1"]}"#)
        })
    })
}

#[tokio::test]
async fn too_many_requests_pauses_the_host() {
    let server = TestServer::start(limited_then_ok(1, Some("30".into()))).await;
    let client = client_with(&server, unlimited(), Duration::from_secs(10));
    let err = client
        .list_tags(&repo(&server, "a"), &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        RegistryError::RateLimited {
            registry: server.host(),
            retry_after: Some(Duration::from_secs(30)),
            message: "TOOMANYREQUESTS: You have reached your pull rate limit.".into(),
        }
    );
    // The host stays paused: other repositories fail at once, without a request, with the
    // remaining pause for the controller's requeue.
    let err = client
        .list_tags(&repo(&server, "b"), &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::RateLimited { retry_after: Some(d), .. } if *d == Duration::from_secs(30)),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);
    let paused = client.paused_for(&server.host()).unwrap();
    assert!(paused > Duration::from_secs(29) && paused <= Duration::from_secs(30));
    // Other hosts are not affected.
    assert_eq!(client.paused_for("elsewhere.example"), None);

    // The HTTP-date form.
    let when = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(40);
    let date = jiff::fmt::rfc2822::DateTimePrinter::new()
        .timestamp_to_rfc9110_string(&when)
        .unwrap();
    let server = TestServer::start(limited_then_ok(1, Some(date))).await;
    let client = client_with(&server, unlimited(), Duration::from_secs(10));
    let err = client
        .list_tags(&repo(&server, "a"), &Credentials::Anonymous)
        .await
        .unwrap_err();
    let RegistryError::RateLimited {
        retry_after: Some(after),
        ..
    } = err
    else {
        panic!("{err:?}")
    };
    assert!((38..=40).contains(&after.as_secs()), "{after:?}");

    // Without Retry-After the error says so, and the host is paused briefly anyway.
    let server = TestServer::start(limited_then_ok(1, None)).await;
    let client = client_with(&server, unlimited(), Duration::from_secs(10));
    let err = client
        .list_tags(&repo(&server, "a"), &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            RegistryError::RateLimited {
                retry_after: None,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(client.paused_for(&server.host()).is_some());
}

#[tokio::test]
async fn a_short_pause_is_waited_out() {
    let server = TestServer::start(limited_then_ok(1, Some("1".into()))).await;
    let client = client_with(&server, unlimited(), Duration::from_secs(10));
    let repo = repo(&server, "a");
    let start = Instant::now();
    let err = client
        .list_tags(&repo, &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert_eq!(err.category(), "rate_limited");
    // The next call waits for the pause instead of failing, then succeeds.
    client
        .list_tags(&repo, &Credentials::Anonymous)
        .await
        .unwrap();
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(server.requests().len(), 2);
}

/// Serves `status` to the first `failures` requests, then a tag list.
fn failing_then_ok(failures: u64, status: u16) -> HandlerFn {
    let seen = Arc::new(AtomicU64::new(0));
    Box::new(move |_req: TestRequest| {
        let n = seen.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if n < failures {
                return TestResponse::new(status).json(
                    r#"{"errors":[{"code":"UNAVAILABLE","message":"storage backend unavailable"}]}"#,
                );
            }
            TestResponse::new(200).json(r#"{"name":"a","tags":["v1"]}"#)
        })
    })
}

#[tokio::test]
async fn server_errors_are_retried_within_bounds() {
    // Two 503s, then success: the call succeeds after three requests.
    let server = TestServer::start(failing_then_ok(2, 503)).await;
    let client = client_with(&server, unlimited(), Duration::from_secs(10));
    let repo_a = repo(&server, "a");
    assert_eq!(
        client
            .list_tags(&repo_a, &Credentials::Anonymous)
            .await
            .unwrap(),
        vec!["v1"]
    );
    assert_eq!(server.requests().len(), 3);
    // Each HTTP request is counted once, by its outcome, as the server saw them.
    let mut counted = client.http_requests();
    counted.sort();
    assert_eq!(
        counted,
        vec![((server.host(), "ok"), 1), ((server.host(), "server"), 2)]
    );

    // Three 502s: the registry's message comes back after exactly three requests.
    let server = TestServer::start(failing_then_ok(3, 502)).await;
    let client = client_with(&server, unlimited(), Duration::from_secs(10));
    let err = client
        .list_tags(&repo(&server, "a"), &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        RegistryError::Server {
            registry: server.host(),
            status: 502,
            message: "UNAVAILABLE: storage backend unavailable".into(),
        }
    );
    assert_eq!(server.requests().len(), 3);

    // 501 will not change: no retry.
    let server = TestServer::start(failing_then_ok(1, 501)).await;
    let client = client_with(&server, unlimited(), Duration::from_secs(10));
    let err = client
        .list_tags(&repo(&server, "a"), &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::Server { status: 501, .. }),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);

    // The production policy backs off 200 ms, then 800 ms (plus jitter).
    let server = TestServer::start(failing_then_ok(2, 500)).await;
    install_crypto();
    let client = RegistryClient::new(RegistryOptions {
        insecure_hosts: vec![server.host()],
        timeout: Duration::from_secs(10),
        ..RegistryOptions::default()
    })
    .unwrap();
    let start = Instant::now();
    client
        .list_tags(&repo(&server, "a"), &Credentials::Anonymous)
        .await
        .unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(1000),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn token_server_failures_are_retried_too() {
    let token_failures = Arc::new(AtomicU64::new(0));
    let failures = token_failures.clone();
    let server = TestServer::start(
        move |req: TestRequest| -> BoxFuture<'static, TestResponse> {
            let failures = failures.clone();
            Box::pin(async move {
                let host = req.header("host").unwrap_or("").to_string();
                if req.path() == "/token" {
                    if failures.fetch_add(1, Ordering::SeqCst) == 0 {
                        return TestResponse::new(503).json(r#"{"details":"try again"}"#);
                    }
                    return TestResponse::new(200).json(r#"{"token":"t"}"#);
                }
                if req.header("authorization") == Some("Bearer t") {
                    return TestResponse::new(200).json(r#"{"tags":["v1"]}"#);
                }
                TestResponse::new(401).header(
                    "WWW-Authenticate",
                    &format!(r#"Bearer realm="http://{host}/token",service="s""#),
                )
            })
        },
    )
    .await;
    let client = client_with(&server, unlimited(), Duration::from_secs(10));
    assert_eq!(
        client
            .list_tags(&repo(&server, "a"), &Credentials::Anonymous)
            .await
            .unwrap(),
        vec!["v1"]
    );
    assert_eq!(server.count("/token"), 2);
    assert_eq!(client.token_fetches(), 1);
}

#[tokio::test]
async fn timeouts_are_retried_then_reported() {
    let server = TestServer::silent().await;
    let client = client_with(&server, unlimited(), Duration::from_millis(250));
    let start = Instant::now();
    let err = client
        .list_tags(&repo(&server, "a"), &Credentials::Anonymous)
        .await
        .unwrap_err();
    let elapsed = start.elapsed();
    assert_eq!(err.category(), "transport", "{err}");
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(err.is_transient());
    // Three attempts of 250 ms each, nothing more.
    assert_eq!(server.connections(), 3);
    assert!(elapsed >= Duration::from_millis(750), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

#[test]
fn settings_build_clients() {
    install_crypto();
    // A broken CA fails when the client is built, naming the host.
    let mut registries = HashMap::new();
    registries.insert(
        "harbor.example.com".to_string(),
        RegistrySettings {
            ca_pem: Some("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into()),
            ..RegistrySettings::default()
        },
    );
    let err = RegistryClient::with_registries(RegistryOptions::default(), registries).unwrap_err();
    assert_eq!(err.category(), "invalid_config");
    assert!(err.to_string().contains("harbor.example.com"), "{err}");

    let registries = parse_registries_config(
        r#"{"registries":{"*":{"metadataBudget":7},"ghcr.io":{"metadataBudget":3},"reg.local:5000":{"insecure":true}}}"#,
    )
    .unwrap();
    let client = RegistryClient::with_registries(RegistryOptions::default(), registries).unwrap();
    assert_eq!(client.metadata_budget("ghcr.io"), 3);
    assert_eq!(client.metadata_budget("GHCR.io"), 3);
    assert_eq!(client.metadata_budget("quay.io"), 7);
    assert_eq!(client.metadata_budget("docker.io"), 7);
    let client = RegistryClient::new(RegistryOptions::default()).unwrap();
    assert_eq!(client.metadata_budget("quay.io"), 50);
    assert_eq!(client.metadata_budget("index.docker.io"), 10);
}

/// A registry whose token server grants the scopes each token request names, and which
/// checks every tag listing against the grants of the token it carries. Repositories under
/// `locked/` are granted only to a token request for them alone, as a token server that
/// leaves out what it cannot grant in bulk.
#[derive(Default)]
struct ScopedRegistry {
    expires_in: AtomicU64,
    /// Token requests for more scopes than this are answered 414 (0: no limit).
    max_scopes: AtomicUsize,
    /// Bytes a token grows by per granted scope, as a JWT's `access` claim does.
    token_bytes_per_scope: AtomicUsize,
    /// Registry requests with a longer `Authorization` get nginx's HTML 400 (0: no limit).
    max_authorization: AtomicUsize,
    /// Granted scopes by token.
    grants: Mutex<HashMap<String, HashSet<String>>>,
    /// The scopes of every token request answered with a token, in order.
    answered: Mutex<Vec<Vec<String>>>,
    refused: AtomicUsize,
    /// How the token server answers a form `POST`: 0 takes it (the OAuth2 flow of
    /// distribution's token spec, credentials `u`/`p`); otherwise that status, as a token
    /// server that takes only `GET`.
    form_status: AtomicU16,
    /// Form `POST`s received, and the `GET` token requests' URLs (path and query).
    posts: AtomicUsize,
    get_targets: Mutex<Vec<String>>,
    /// Holds a cold burst's 401s until all of its callers have arrived.
    together: ChallengeTogether,
}

impl ScopedRegistry {
    fn answered(&self) -> Vec<Vec<String>> {
        self.answered.lock().unwrap().clone()
    }
}

fn html(status: u16, text: &str) -> TestResponse {
    TestResponse {
        body: format!("<html><body><h1>{text}</h1></body></html>").into_bytes(),
        ..TestResponse::new(status).header("Content-Type", "text/html")
    }
}

fn scoped_registry(state: Arc<ScopedRegistry>) -> HandlerFn {
    Box::new(move |req: TestRequest| {
        let state = state.clone();
        Box::pin(async move {
            let host = req.header("host").unwrap_or("").to_string();
            if req.path() == "/token" && req.method == "POST" {
                state.posts.fetch_add(1, Ordering::SeqCst);
                let status = state.form_status.load(Ordering::SeqCst);
                if status != 0 {
                    return TestResponse::new(status).json(r#"{"details":"not found"}"#);
                }
                if req.header("content-type") != Some("application/x-www-form-urlencoded")
                    || req.form("grant_type").as_deref() != Some("password")
                    || req.form("service").as_deref() != Some("scoped")
                    || req.form("client_id").is_none_or(|id| id.is_empty())
                {
                    return TestResponse::new(400).json(r#"{"error":"invalid_request"}"#);
                }
                if req.form("username").as_deref() != Some("u")
                    || req.form("password").as_deref() != Some("p")
                {
                    return TestResponse::new(401).json(r#"{"error":"invalid_grant"}"#);
                }
            } else if req.path() == "/token" {
                state.get_targets.lock().unwrap().push(req.target.clone());
                if let Some(auth) = req.header("authorization")
                    && auth
                        != format!(
                            "Basic {}",
                            base64::engine::general_purpose::STANDARD.encode("u:p")
                        )
                {
                    return TestResponse::new(401).json(r#"{"details":"bad credentials"}"#);
                }
            }
            if req.path() == "/token" {
                let form_scopes = (req.method == "POST").then(|| req.form("scope"));
                let scopes: Vec<String> = match &form_scopes {
                    Some(scope) => scope
                        .iter()
                        .flat_map(|s| s.split(' '))
                        .map(str::to_string)
                        .collect(),
                    None => req.query_all("scope"),
                };
                if (form_scopes.is_none() && req.query("service").as_deref() != Some("scoped"))
                    || scopes.is_empty()
                {
                    return TestResponse::new(400).json(r#"{"details":"bad service or scope"}"#);
                }
                let max = state.max_scopes.load(Ordering::SeqCst);
                if max > 0 && scopes.len() > max {
                    state.refused.fetch_add(1, Ordering::SeqCst);
                    return html(414, "414 Request-URI Too Large");
                }
                let granted: HashSet<String> = scopes
                    .iter()
                    .filter(|s| scopes.len() == 1 || !s.starts_with("repository:locked/"))
                    .cloned()
                    .collect();
                let granted_scope = {
                    let mut granted: Vec<&String> = granted.iter().collect();
                    granted.sort();
                    granted
                        .into_iter()
                        .map(String::as_str)
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                let token = {
                    let mut grants = state.grants.lock().unwrap();
                    let padding = state.token_bytes_per_scope.load(Ordering::SeqCst);
                    let token = format!(
                        "tok-{}-{}",
                        grants.len() + 1,
                        "x".repeat(padding * granted.len())
                    );
                    grants.insert(token.clone(), granted);
                    token
                };
                state.answered.lock().unwrap().push(scopes);
                let expires = state.expires_in.load(Ordering::SeqCst).max(1);
                if form_scopes.is_some() {
                    // The OAuth2 answer: access_token and the granted scope.
                    return TestResponse::new(200).json(&format!(
                        r#"{{"access_token":"{token}","scope":"{granted_scope}","expires_in":{expires}}}"#
                    ));
                }
                return TestResponse::new(200)
                    .json(&format!(r#"{{"token":"{token}","expires_in":{expires}}}"#));
            }

            let (scope, body) = if req.path() == "/v2/_catalog" {
                (
                    "registry:catalog:*".to_string(),
                    r#"{"repositories":["team/app-0000"]}"#.to_string(),
                )
            } else if let Some(name) = req
                .path()
                .strip_prefix("/v2/")
                .and_then(|p| p.strip_suffix("/tags/list"))
            {
                (
                    format!("repository:{name}:pull"),
                    format!(r#"{{"name":"{name}","tags":["v1"]}}"#),
                )
            } else {
                return TestResponse::new(404);
            };
            let authorization = req.header("authorization").unwrap_or("");
            let max = state.max_authorization.load(Ordering::SeqCst);
            if max > 0 && authorization.len() > max {
                return html(400, "Request Header Or Cookie Too Large");
            }
            let grants = authorization
                .strip_prefix("Bearer ")
                .and_then(|token| state.grants.lock().unwrap().get(token).cloned());
            let challenge =
                format!(r#"Bearer realm="http://{host}/token",service="scoped",scope="{scope}""#);
            if grants.is_none() {
                state.together.arrive().await;
            }
            match grants {
                None => TestResponse::new(401)
                    .header("WWW-Authenticate", &challenge)
                    .json(r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#),
                Some(granted) if !granted.contains(&scope) => TestResponse::new(401)
                    .header(
                        "WWW-Authenticate",
                        &format!(r#"{challenge},error="insufficient_scope""#),
                    )
                    .json(r#"{"errors":[{"code":"UNAUTHORIZED","message":"access to the requested resource is not authorized"}]}"#),
                Some(_) => TestResponse::new(200).json(&body),
            }
        })
    })
}

fn scoped_repos(server: &TestServer, prefix: &str, n: usize) -> Vec<RepositoryRef> {
    (0..n)
        .map(|i| repo(server, &format!("{prefix}-{i:04}")))
        .collect()
}

fn pull_scopes(repos: &[RepositoryRef]) -> HashSet<String> {
    repos
        .iter()
        .map(|r| format!("repository:{}:pull", r.path))
        .collect()
}

/// Lists every repository at once and checks that each one was listed.
async fn list_all(client: &RegistryClient, repos: &[RepositoryRef]) {
    let calls = repos
        .iter()
        .map(|repo| client.list_tags(repo, &Credentials::Anonymous));
    for (repo, result) in repos.iter().zip(futures::future::join_all(calls).await) {
        let tags = result.unwrap_or_else(|e| panic!("{repo}: {e}"));
        assert_eq!(tags, vec!["v1"], "{repo}");
    }
}

/// On the held paused clock: the token's lifetime is crossed with `advance`.
#[tokio::test(start_paused = true)]
async fn a_thousand_repositories_share_one_token_request_per_expiry() {
    let _clock = HeldClock::hold();
    let state = Arc::new(ScopedRegistry::default());
    state.expires_in.store(5, Ordering::SeqCst);
    let server = TestServer::start(scoped_registry(state.clone())).await;
    let client = client_with(&server, one_token_for_all(), Duration::from_secs(30));
    let repos = scoped_repos(&server, "team/app", 1000);
    let wanted = pull_scopes(&repos);

    state.together.expect(repos.len());
    list_all(&client, &repos).await;
    let cold = server.count("/token");
    eprintln!("1000 repositories listed at once from a cold start: {cold} token request(s)");
    assert!((1..=2).contains(&cold), "{cold} token requests");
    assert_eq!(client.token_fetches(), cold as u64);
    let answered = state.answered();
    let last: HashSet<String> = answered.last().unwrap().iter().cloned().collect();
    assert_eq!(last, wanted);

    // While the token lasts, another round needs no token request.
    list_all(&client, &repos).await;
    assert_eq!(server.count("/token"), cold);

    // Once it is no longer handed out, one request renews it, for every repository.
    let deadline = client
        .wide_token_usable_until(&server.host(), &Credentials::Anonymous)
        .unwrap();
    advance_to(deadline).await;
    list_all(&client, &repos).await;
    assert_eq!(server.count("/token"), cold + 1);
    assert_eq!(client.token_fetches(), cold as u64 + 1);
    let answered = state.answered();
    let renewal: HashSet<String> = answered.last().unwrap().iter().cloned().collect();
    assert_eq!(renewal, wanted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_server_refusing_long_requests_gets_fewer_scopes_per_request() {
    let state = Arc::new(ScopedRegistry::default());
    state.expires_in.store(300, Ordering::SeqCst);
    state.max_scopes.store(40, Ordering::SeqCst);
    let server = TestServer::start(scoped_registry(state.clone())).await;
    let client = client_with(&server, one_token_for_all(), Duration::from_secs(30));
    let repos = scoped_repos(&server, "team/app", 300);

    state.together.expect(repos.len());
    list_all(&client, &repos).await;
    let fetches = server.count("/token");
    let refused = state.refused.load(Ordering::SeqCst);
    let answered = state.answered();
    eprintln!(
        "300 repositories, at most 40 scopes per token request: {fetches} token requests, {refused} refused"
    );
    // 300, 150 and 75 scopes are refused; chunks of 37 then cover the 300.
    assert_eq!(refused, 3);
    assert!(answered.iter().all(|scopes| scopes.len() <= 37));
    let covered: HashSet<String> = answered.iter().flatten().cloned().collect();
    assert_eq!(covered, pull_scopes(&repos));
    assert!(
        fetches > 1 && fetches <= refused + 300usize.div_ceil(37) + 1,
        "{fetches}"
    );
    assert_eq!(client.token_fetches(), fetches as u64);

    // The chunks serve the next round without a token request.
    list_all(&client, &repos).await;
    assert_eq!(server.count("/token"), fetches);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repository_left_out_of_the_wide_token_gets_its_own() {
    let state = Arc::new(ScopedRegistry::default());
    state.expires_in.store(300, Ordering::SeqCst);
    let server = TestServer::start(scoped_registry(state.clone())).await;
    let client = client_with(&server, unlimited(), Duration::from_secs(30));
    // The registry's challenge is known before the round, so every request of the round
    // asks for a token with all the repositories.
    list_all(&client, &[repo(&server, "team/warm")]).await;
    let open = scoped_repos(&server, "team/app", 20);
    let locked = scoped_repos(&server, "locked/app", 10);
    let all: Vec<RepositoryRef> = open.iter().chain(&locked).cloned().collect();

    list_all(&client, &all).await;
    let answered = state.answered();
    let round: Vec<&Vec<String>> = answered[1..].iter().collect();
    let wide = round.iter().filter(|scopes| scopes.len() > 1).count();
    let own: HashSet<String> = round
        .iter()
        .filter(|scopes| scopes.len() == 1)
        .map(|scopes| scopes[0].clone())
        .collect();
    eprintln!(
        "20 open and 10 locked repositories: {wide} wide token request(s), {} own",
        own.len()
    );
    assert!((1..=2).contains(&wide), "{round:?}");
    // Each locked repository fetched its own token, once.
    assert_eq!(own, pull_scopes(&locked));
    assert_eq!(round.len(), wide + locked.len());

    // The next round needs no token request: the locked repositories keep their own.
    list_all(&client, &all).await;
    assert_eq!(server.count("/token"), answered.len());
    assert_eq!(client.token_fetches(), answered.len() as u64);

    // The catalog has a token of its own, for its scope alone.
    let names = client
        .list_repositories(&server.host(), &Credentials::Anonymous)
        .await
        .unwrap();
    assert_eq!(names, vec!["team/app-0000"]);
    assert_eq!(
        state.answered().last().unwrap(),
        &vec!["registry:catalog:*".to_string()]
    );
    assert_eq!(server.count("/token"), answered.len() + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wide_token_too_large_for_the_registry_is_split() {
    let state = Arc::new(ScopedRegistry::default());
    state.expires_in.store(300, Ordering::SeqCst);
    state.token_bytes_per_scope.store(100, Ordering::SeqCst);
    state.max_authorization.store(8 * 1024, Ordering::SeqCst);
    let server = TestServer::start(scoped_registry(state.clone())).await;
    let client = client_with(&server, one_token_for_all(), Duration::from_secs(30));
    let repos = scoped_repos(&server, "team/app", 100);

    state.together.expect(repos.len());
    list_all(&client, &repos).await;
    let fetches = server.count("/token");
    let sizes: Vec<usize> = state.answered().iter().map(Vec::len).collect();
    eprintln!("100 repositories, 8 KiB header limit: token requests for {sizes:?} scopes");
    // One token for all 100 is too large (10 KB); tokens for 50 fit.
    assert_eq!(sizes[0], 100, "{sizes:?}");
    assert!(sizes[1..].iter().all(|&n| n <= 50), "{sizes:?}");
    assert!(fetches <= 5, "{sizes:?}");

    list_all(&client, &repos).await;
    assert_eq!(server.count("/token"), fetches);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_the_default_cap_a_token_fits_an_8_kib_header_limit() {
    let state = Arc::new(ScopedRegistry::default());
    state.expires_in.store(300, Ordering::SeqCst);
    state.token_bytes_per_scope.store(100, Ordering::SeqCst);
    state.max_authorization.store(8 * 1024, Ordering::SeqCst);
    let server = TestServer::start(scoped_registry(state.clone())).await;
    let client = client_with(&server, unlimited(), Duration::from_secs(30));
    let repos = scoped_repos(&server, "team/app", 100);

    state.together.expect(repos.len());
    list_all(&client, &repos).await;
    let sizes: Vec<usize> = state.answered().iter().map(Vec::len).collect();
    eprintln!(
        "100 repositories, 8 KiB header limit, default cap: token requests for {sizes:?} scopes"
    );
    // Two tokens of 64 (6.4 KB each), none refused by the registry and none asked again.
    assert_eq!(sizes.len(), 2, "{sizes:?}");
    assert!(sizes.iter().all(|&n| n <= 64), "{sizes:?}");
    assert_eq!(server.count("/token"), 2);
    list_all(&client, &repos).await;
    assert_eq!(server.count("/token"), 2);
}

#[tokio::test]
async fn a_refused_token_request_is_counted_as_refused_not_as_a_refresh() {
    let server = TestServer::start(|req: TestRequest| -> BoxFuture<'static, TestResponse> {
        Box::pin(async move {
            let host = req.header("host").unwrap_or("").to_string();
            if req.path() == "/token" {
                return TestResponse::new(401)
                    .json(r#"{"errors":[{"code":"UNAUTHORIZED","message":"bad credentials"}]}"#);
            }
            let challenge = format!(
                r#"Bearer realm="http://{host}/token",service="test",scope="repository:team/app:pull""#
            );
            TestResponse::new(401)
                .header("WWW-Authenticate", &challenge)
                .json(r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#)
        })
    })
    .await;
    let client = client_with(&server, unlimited(), Duration::from_secs(10));
    let err = client
        .list_tags(
            &repo(&server, "team/app"),
            &Credentials::basic("u", "wrong"),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "unauthorized", "{err}");
    assert_eq!(client.token_outcomes(), vec![("unauthorized", 1)]);
    let sent: u64 = client.http_requests().iter().map(|(_, n)| n).sum();
    assert_eq!(sent as usize, server.requests().len());
}

/// Lists every repository with `creds`, `in_flight` at a time, and checks each listing.
async fn list_all_with(
    client: &RegistryClient,
    repos: &[RepositoryRef],
    creds: &Credentials,
    in_flight: usize,
) {
    use futures::StreamExt as _;
    let results: Vec<_> = futures::stream::iter(repos)
        .map(|repo| async move { (repo, client.list_tags(repo, creds).await) })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    for (repo, result) in results {
        let tags = result.unwrap_or_else(|e| panic!("{repo}: {e}"));
        assert_eq!(tags, vec!["v1"], "{repo}");
    }
}

fn announce(
    client: &RegistryClient,
    server: &TestServer,
    creds: &Credentials,
    repos: &[RepositoryRef],
) {
    client.expect_repositories(&server.host(), creds, repos.iter().map(|r| r.path.as_str()));
}

/// Settings that let one token name every repository of these tests.
fn one_token_for_all() -> RegistrySettings {
    RegistrySettings {
        repositories_per_token: Some(5000),
        ..unlimited()
    }
}

/// On the held paused clock: the tokens' lifetime is crossed with `advance`.
#[tokio::test(start_paused = true)]
async fn five_thousand_repositories_at_the_default_cap_take_one_token_request_per_64() {
    let _clock = HeldClock::hold();
    let state = Arc::new(ScopedRegistry::default());
    // Handed out for 48 s.
    state.expires_in.store(60, Ordering::SeqCst);
    let server = TestServer::start(scoped_registry(state.clone())).await;
    let client = client_with(&server, unlimited(), Duration::from_secs(60));
    let creds = Credentials::basic("u", "p");
    let repos = scoped_repos(&server, "team/app", 5000);
    let wanted = pull_scopes(&repos);
    let cap = crate::settings::DEFAULT_REPOSITORIES_PER_TOKEN as usize;
    let chunks = repos.len().div_ceil(cap);
    announce(&client, &server, &creds, &repos);

    // The first 200 in flight are challenged together.
    state.together.expect(200);
    list_all_with(&client, &repos, &creds, 200).await;
    let answered = state.answered();
    eprintln!(
        "5000 repositories listed 200 at a time: {} token request(s)",
        answered.len()
    );
    assert_eq!(answered.len(), chunks);
    assert_eq!(client.token_fetches(), chunks as u64);
    assert!(answered.iter().all(|a| a.len() <= cap));
    let covered: HashSet<String> = answered.iter().flatten().cloned().collect();
    assert_eq!(covered, wanted);

    // A second round within the lifetime asks for nothing; after it, each chunk is renewed
    // once. (A second later, which refills the host's rate limit of 10,000 requests per
    // second: the clock does not move by itself.)
    tokio::time::advance(Duration::from_secs(1)).await;
    list_all_with(&client, &repos, &creds, 200).await;
    assert_eq!(state.answered().len(), chunks);
    let deadline = client
        .wide_token_usable_until(&server.host(), &creds)
        .unwrap();
    advance_to(deadline).await;
    list_all_with(&client, &repos, &creds, 200).await;
    let answered = state.answered();
    assert_eq!(answered.len(), 2 * chunks);
    let renewed: HashSet<String> = answered[chunks..].iter().flatten().cloned().collect();
    assert_eq!(renewed, wanted);
}

/// On the held paused clock: the token's lifetime is crossed with `advance`.
#[tokio::test(start_paused = true)]
async fn five_thousand_repositories_get_one_form_token_request_per_expiry() {
    let _clock = HeldClock::hold();
    let state = Arc::new(ScopedRegistry::default());
    state.expires_in.store(20, Ordering::SeqCst);
    let server = TestServer::start(scoped_registry(state.clone())).await;
    let client = client_with(&server, one_token_for_all(), Duration::from_secs(60));
    let creds = Credentials::basic("u", "p");
    let repos = scoped_repos(&server, "team/app", 5000);
    let wanted = pull_scopes(&repos);
    // As the controller does at start: every watched repository is announced first.
    announce(&client, &server, &creds, &repos);

    // The first 200 in flight are challenged together.
    state.together.expect(200);
    list_all_with(&client, &repos, &creds, 200).await;
    let tokens = server.count("/token");
    eprintln!("5000 repositories listed 200 at a time: {tokens} token request(s)");
    // One request, a form POST naming all 5,000 (a GET for them would be a 250 KB URL).
    assert_eq!(tokens, 1);
    assert_eq!(state.posts.load(Ordering::SeqCst), 1);
    assert!(state.get_targets.lock().unwrap().is_empty());
    assert_eq!(client.token_fetches(), 1);
    let answered = state.answered();
    let first: HashSet<String> = answered[0].iter().cloned().collect();
    assert_eq!(first, wanted);

    // Once it is no longer handed out, one request renews it, again for all of them.
    let deadline = client
        .wide_token_usable_until(&server.host(), &creds)
        .unwrap();
    advance_to(deadline).await;
    list_all_with(&client, &repos, &creds, 200).await;
    assert_eq!(server.count("/token"), 2);
    assert_eq!(state.posts.load(Ordering::SeqCst), 2);
    assert_eq!(client.token_fetches(), 2);
    let answered = state.answered();
    let renewal: HashSet<String> = answered[1].iter().cloned().collect();
    assert_eq!(renewal, wanted);
}

/// A token server that takes only `GET` (answering the form `POST` with `status`): asked
/// once with the form, then with `GET`, each URL within the budget and all repositories
/// covered, without halving the scopes per request.
async fn get_only_token_server(status: u16) {
    let state = Arc::new(ScopedRegistry::default());
    state.expires_in.store(300, Ordering::SeqCst);
    state.form_status.store(status, Ordering::SeqCst);
    let server = TestServer::start(scoped_registry(state.clone())).await;
    let client = client_with(&server, one_token_for_all(), Duration::from_secs(60));
    let creds = Credentials::basic("u", "p");
    let repos = scoped_repos(&server, "team/app", 2000);
    announce(&client, &server, &creds, &repos);

    // The first 200 in flight are challenged together.
    state.together.expect(200);
    list_all_with(&client, &repos, &creds, 200).await;
    let gets = state.get_targets.lock().unwrap().clone();
    eprintln!(
        "2000 repositories, POST answered {status}: 1 form request, then {} GET token request(s)",
        gets.len()
    );
    assert_eq!(state.posts.load(Ordering::SeqCst), 1);
    // 2,000 scopes are about 90 KB of query: two URLs of at most 64 KiB.
    assert_eq!(
        gets.len(),
        2,
        "{:?}",
        gets.iter().map(String::len).collect::<Vec<_>>()
    );
    let base = format!("http://{}", server.host()).len();
    assert!(gets.iter().all(|t| base + t.len() <= 64 * 1024));
    let covered: HashSet<String> = state.answered().into_iter().flatten().collect();
    assert_eq!(covered, pull_scopes(&repos));
    // The refused form (which sent nothing further: too long for a URL), then the two GETs.
    assert_eq!(client.token_fetches(), 3);

    // The server is remembered as GET-only: a new repository's token needs one GET.
    let more = scoped_repos(&server, "team/extra", 1);
    list_all_with(&client, &more, &creds, 1).await;
    assert_eq!(state.posts.load(Ordering::SeqCst), 1);
    assert_eq!(state.get_targets.lock().unwrap().len(), 3);
    list_all_with(&client, &repos, &creds, 200).await;
    assert_eq!(server.count("/token"), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_server_without_the_form_answering_404_is_asked_with_get() {
    get_only_token_server(404).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_server_without_the_form_answering_405_is_asked_with_get() {
    get_only_token_server(405).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wrong_credentials_are_refused_and_the_form_stays_in_use() {
    let state = Arc::new(ScopedRegistry::default());
    state.expires_in.store(300, Ordering::SeqCst);
    let server = TestServer::start(scoped_registry(state.clone())).await;
    let client = client_with(&server, unlimited(), Duration::from_secs(30));
    let repos = scoped_repos(&server, "team/app", 3);
    // The form is refused (401), and so is the GET: the listing fails as unauthorized.
    let err = client
        .list_tags(&repos[0], &Credentials::basic("u", "wrong"))
        .await
        .unwrap_err();
    assert_eq!(err.category(), "unauthorized", "{err}");
    assert_eq!(state.posts.load(Ordering::SeqCst), 1);
    assert_eq!(state.get_targets.lock().unwrap().len(), 1);
    assert_eq!(client.token_outcomes(), vec![("unauthorized", 1)]);
    // With the right credentials the form is used again: the server takes it.
    let creds = Credentials::basic("u", "p");
    announce(&client, &server, &creds, &repos);
    list_all_with(&client, &repos, &creds, 3).await;
    assert_eq!(state.posts.load(Ordering::SeqCst), 2);
    assert_eq!(state.get_targets.lock().unwrap().len(), 1);
}
