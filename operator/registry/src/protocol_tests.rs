//! Protocol tests of the scan step's registry client against the in-process test server,
//! which answers on demand what a real registry rarely does: bearer token caching and
//! single-flight, Basic auth, pagination, digest fallbacks and error mapping. The
//! real-registry counterpart is `live_registry_tests`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use sha2::Digest as _;

use super::test_server::{ChallengeTogether, TestRequest, TestResponse, TestServer};
use super::*;

fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn client_for(server: &TestServer, tweak: impl FnOnce(&mut TagPaging)) -> RegistryClient {
    install_crypto();
    let options = RegistryOptions {
        insecure_hosts: vec![server.host()],
        timeout: Duration::from_secs(10),
        ..RegistryOptions::default()
    };
    let mut paging = TagPaging::default();
    tweak(&mut paging);
    // These tests are about the protocol, not the rate limit (see `resilience_tests`).
    let mut registries = std::collections::HashMap::new();
    registries.insert(
        server.host(),
        RegistrySettings {
            rate_per_second: Some(10_000.0),
            burst: Some(10_000),
            ..RegistrySettings::default()
        },
    );
    RegistryClient::build(
        options,
        registries,
        super::distribution::Tuning {
            paging,
            ..Default::default()
        },
    )
    .unwrap()
}

fn repo(server: &TestServer, path: &str) -> RepositoryRef {
    RepositoryRef::parse(&format!("{}/{path}", server.host())).unwrap()
}

fn basic_header(user: &str, pass: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
    )
}

const UNAUTHORIZED_BODY: &str =
    r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#;

/// Registry + token server state for the bearer tests.
#[derive(Default)]
struct BearerState {
    token_requests: AtomicU64,
    /// Only `tok-<valid>` is accepted; 0 accepts any issued token.
    valid: AtomicU64,
    challenges: AtomicU64,
    /// Holds a burst's 401s until all of its callers have arrived.
    together: ChallengeTogether,
}

fn bearer_registry(
    state: Arc<BearerState>,
) -> impl Fn(TestRequest) -> futures::future::BoxFuture<'static, TestResponse> {
    move |req: TestRequest| {
        let state = state.clone();
        Box::pin(async move {
            let host = req.header("host").unwrap_or("").to_string();
            if req.path() == "/token" {
                // The realm must receive the service and our repository pull scope.
                if req.query("service").as_deref() != Some("test-registry")
                    || req.query("scope").as_deref() != Some("repository:team/app:pull")
                {
                    return TestResponse::new(400).json(r#"{"details":"bad service or scope"}"#);
                }
                if let Some(auth) = req.header("authorization")
                    && auth != basic_header("user", "pass")
                {
                    return TestResponse::new(401)
                        .json(r#"{"details":"incorrect username or password"}"#);
                }
                let n = state.token_requests.fetch_add(1, Ordering::SeqCst) + 1;
                return TestResponse::new(200)
                    .json(&format!(r#"{{"token":"tok-{n}","expires_in":300}}"#));
            }
            let valid = state.valid.load(Ordering::SeqCst);
            let authorized = match req.header("authorization") {
                Some(a) if valid == 0 => a.starts_with("Bearer tok-"),
                Some(a) => a == format!("Bearer tok-{valid}"),
                None => false,
            };
            if !authorized {
                state.challenges.fetch_add(1, Ordering::SeqCst);
                state.together.arrive().await;
                let challenge = format!(
                    r#"Bearer realm="http://{host}/token",service="test-registry",scope="repository:team/app:pull""#
                );
                return TestResponse::new(401)
                    .header("WWW-Authenticate", &challenge)
                    .json(UNAUTHORIZED_BODY);
            }
            TestResponse::new(200).json(r#"{"name":"team/app","tags":["v1","v2"]}"#)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_listings_fetch_one_token() {
    let state = Arc::new(BearerState::default());
    let server = TestServer::start(bearer_registry(state.clone())).await;
    let client = client_for(&server, |_| {});
    let repo = repo(&server, "team/app");
    let creds = Credentials::basic("user", "pass");

    // All fifty are challenged, and so lack a token, before the first 401 is answered.
    state.together.expect(50);
    let calls = (0..50).map(|_| {
        // Clones share the cache, as the controller's workers will.
        let (client, repo, creds) = (client.clone(), repo.clone(), creds.clone());
        async move { client.list_tags(&repo, &creds).await }
    });
    for result in futures::future::join_all(calls).await {
        assert_eq!(result.unwrap(), vec!["v1", "v2"]);
    }
    assert_eq!(client.token_fetches(), 1);
    assert_eq!(state.token_requests.load(Ordering::SeqCst), 1);

    // Later calls reuse the token without another challenge round trip.
    let challenges = state.challenges.load(Ordering::SeqCst);
    client.list_tags(&repo, &creds).await.unwrap();
    assert_eq!(state.challenges.load(Ordering::SeqCst), challenges);
    assert_eq!(client.token_fetches(), 1);

    // Another identity gets its own token.
    client
        .list_tags(&repo, &Credentials::Anonymous)
        .await
        .unwrap();
    assert_eq!(client.token_fetches(), 2);
}

#[tokio::test]
async fn rejected_token_is_replaced_once() {
    let state = Arc::new(BearerState::default());
    state.valid.store(1, Ordering::SeqCst);
    let server = TestServer::start(bearer_registry(state.clone())).await;
    let client = client_for(&server, |_| {});
    let repo = repo(&server, "team/app");
    let creds = Credentials::basic("user", "pass");

    client.list_tags(&repo, &creds).await.unwrap();
    assert_eq!(client.token_fetches(), 1);
    // The registry revokes tok-1 early: the cached token is refused, a new one is fetched.
    state.valid.store(2, Ordering::SeqCst);
    client.list_tags(&repo, &creds).await.unwrap();
    assert_eq!(client.token_fetches(), 2);
    // If even a fresh token is refused, the 401 is final (no fetch loop).
    state.valid.store(99, Ordering::SeqCst);
    let err = client.list_tags(&repo, &creds).await.unwrap_err();
    assert!(
        matches!(&err, RegistryError::Unauthorized { message, .. } if message == "UNAUTHORIZED: authentication required"),
        "{err}"
    );
    assert_eq!(client.token_fetches(), 3);
}

#[tokio::test]
async fn token_server_rejection_carries_its_message() {
    let state = Arc::new(BearerState::default());
    let server = TestServer::start(bearer_registry(state.clone())).await;
    let client = client_for(&server, |_| {});
    let err = client
        .list_tags(
            &repo(&server, "team/app"),
            &Credentials::basic("user", "wrong"),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "unauthorized");
    assert!(
        err.to_string().contains("incorrect username or password"),
        "{err}"
    );
}

#[tokio::test]
async fn credentials_never_go_to_a_plain_http_realm_on_another_host() {
    let server = TestServer::start(
        |req: TestRequest| -> futures::future::BoxFuture<'static, TestResponse> {
            Box::pin(async move {
                let port = req
                    .header("host")
                    .unwrap_or("")
                    .rsplit(':')
                    .next()
                    .unwrap_or("")
                    .to_string();
                if req.path() == "/token" {
                    return TestResponse::new(200).json(r#"{"token":"t"}"#);
                }
                if req.header("authorization") == Some("Bearer t") {
                    return TestResponse::new(200).json(r#"{"tags":[]}"#);
                }
                // `localhost` is not in the insecure list, only 127.0.0.1 is.
                let challenge =
                    format!(r#"Bearer realm="http://localhost:{port}/token",service="s""#);
                TestResponse::new(401).header("WWW-Authenticate", &challenge)
            })
        },
    )
    .await;
    let client = client_for(&server, |_| {});
    let repo = repo(&server, "team/app");
    let err = client
        .list_tags(&repo, &Credentials::basic("user", "pass"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::Protocol(m) if m.contains("refusing to send credentials")),
        "{err}"
    );
    // Anonymous tokens carry no secret and may be fetched over HTTP.
    assert_eq!(
        client
            .list_tags(&repo, &Credentials::Anonymous)
            .await
            .unwrap(),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn basic_auth_flow() {
    let challenges = Arc::new(AtomicU64::new(0));
    let seen = challenges.clone();
    let server = TestServer::start(
        move |req: TestRequest| -> futures::future::BoxFuture<'static, TestResponse> {
            let challenges = seen.clone();
            Box::pin(async move {
                if req.header("authorization") == Some(basic_header("user", "pass").as_str()) {
                    return TestResponse::new(200).json(r#"{"name":"team/app","tags":["1.0"]}"#);
                }
                challenges.fetch_add(1, Ordering::SeqCst);
                TestResponse::new(401)
                    .header("WWW-Authenticate", r#"Basic realm="test""#)
                    .json(UNAUTHORIZED_BODY)
            })
        },
    )
    .await;
    let client = client_for(&server, |_| {});
    let repo = repo(&server, "team/app");

    let good = Credentials::basic("user", "pass");
    assert_eq!(client.list_tags(&repo, &good).await.unwrap(), vec!["1.0"]);
    assert_eq!(challenges.load(Ordering::SeqCst), 1);
    // The scheme is remembered, so the next request authenticates up front.
    assert_eq!(client.list_tags(&repo, &good).await.unwrap(), vec!["1.0"]);
    assert_eq!(challenges.load(Ordering::SeqCst), 1);

    for creds in [Credentials::basic("user", "bad"), Credentials::Anonymous] {
        let err = client.list_tags(&repo, &creds).await.unwrap_err();
        match err {
            RegistryError::Unauthorized { registry, message } => {
                assert_eq!(registry, server.host());
                assert_eq!(message, "UNAUTHORIZED: authentication required");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(client.token_fetches(), 0);
}

/// Serves `count` tags `t00..`, paginated by `n`/`last`, alternating relative and absolute
/// `Link` targets.
fn paginating_registry(
    count: usize,
) -> impl Fn(TestRequest) -> futures::future::BoxFuture<'static, TestResponse> {
    move |req: TestRequest| {
        Box::pin(async move {
            let all: Vec<String> = (0..count).map(|i| format!("t{i:02}")).collect();
            let n: usize = req
                .query("n")
                .and_then(|n| n.parse().ok())
                .unwrap_or(all.len());
            let last = req.query("last");
            let start = last.as_ref().map_or(0, |l| {
                all.iter().position(|t| t == l).map_or(all.len(), |p| p + 1)
            });
            let page: Vec<&String> = all.iter().skip(start).take(n).collect();
            let body = serde_json::json!({"name": "team/app", "tags": page}).to_string();
            let mut response = TestResponse::new(200).json(&body);
            if start + n < all.len()
                && let Some(last) = page.last()
            {
                let link = if start.is_multiple_of(2) {
                    format!("</v2/team/app/tags/list?n={n}&last={last}>; rel=\"next\"")
                } else {
                    let host = req.header("host").unwrap_or("");
                    format!("<http://{host}/v2/team/app/tags/list?n={n}&last={last}>; rel=\"next\"")
                };
                response = response.header("Link", &link);
            }
            response
        })
    }
}

#[tokio::test]
async fn pagination_follows_links_and_is_bounded() {
    let server = TestServer::start(paginating_registry(7)).await;
    let repo = repo(&server, "team/app");
    let client = client_for(&server, |o| o.page_size = Some(2));
    let (tags, pages) = client
        .list_tags_paged(&repo, &Credentials::Anonymous)
        .await
        .unwrap();
    assert_eq!(tags, vec!["t00", "t01", "t02", "t03", "t04", "t05", "t06"]);
    assert_eq!(pages, 4);

    let client = client_for(&server, |o| {
        o.page_size = Some(2);
        o.max_pages = 3;
    });
    let err = client
        .list_tags(&repo, &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::Protocol(m) if m.contains("after 3 pages")),
        "{err}"
    );

    // Without `n` this registry returns everything at once.
    let client = client_for(&server, |o| o.page_size = None);
    let (tags, pages) = client
        .list_tags_paged(&repo, &Credentials::Anonymous)
        .await
        .unwrap();
    assert_eq!((tags.len(), pages), (7, 1));
}

#[tokio::test]
async fn pagination_loops_and_foreign_hosts_are_refused() {
    let server = TestServer::start(
        |req: TestRequest| -> futures::future::BoxFuture<'static, TestResponse> {
            Box::pin(async move {
                let link = if req.path().contains("foreign") {
                    r#"<https://elsewhere.example/v2/x/tags/list>; rel="next""#
                } else {
                    r#"</v2/team/app/tags/list?n=5>; rel="next""#
                };
                TestResponse::new(200)
                    .header("Link", link)
                    .json(r#"{"tags":["a"]}"#)
            })
        },
    )
    .await;
    let client = client_for(&server, |o| o.page_size = Some(5));
    let err = client
        .list_tags(&repo(&server, "team/app"), &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::Protocol(m) if m.contains("loops")),
        "{err}"
    );
    let err = client
        .list_tags(&repo(&server, "foreign"), &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::Protocol(m) if m.contains("another host")),
        "{err}"
    );
}

#[tokio::test]
async fn page_size_rejection_falls_back_and_bad_tags_are_dropped() {
    let server = TestServer::start(|req: TestRequest| -> futures::future::BoxFuture<'static, TestResponse> {
        Box::pin(async move {
            if req.query("n").is_some() {
                return TestResponse::new(400).json(
                    r#"{"errors":[{"code":"PAGINATION_NUMBER_INVALID","message":"invalid number of results requested"}]}"#,
                );
            }
            TestResponse::new(200)
                .json(r#"{"name":"team/app","tags":["ok","bad tag","../../x","v1","ok"]}"#)
        })
    })
    .await;
    let client = client_for(&server, |_| {});
    assert_eq!(
        client
            .list_tags(&repo(&server, "team/app"), &Credentials::Anonymous)
            .await
            .unwrap(),
        vec!["ok", "v1"]
    );
}

#[tokio::test]
async fn null_tags_is_an_empty_list() {
    let server = TestServer::start(
        |_req: TestRequest| -> futures::future::BoxFuture<'static, TestResponse> {
            Box::pin(
                async move { TestResponse::new(200).json(r#"{"name":"team/app","tags":null}"#) },
            )
        },
    )
    .await;
    let client = client_for(&server, |_| {});
    assert!(
        client
            .list_tags(&repo(&server, "team/app"), &Credentials::Anonymous)
            .await
            .unwrap()
            .is_empty()
    );
}

const MANIFEST: &str =
    r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}"#;

#[tokio::test]
async fn manifest_digest_head_get_fallback_and_missing() {
    let header_digest = format!("sha256:{}", "1".repeat(64));
    let digest_for_server = header_digest.clone();
    let server = TestServer::start(
        move |req: TestRequest| -> futures::future::BoxFuture<'static, TestResponse> {
            let header_digest = digest_for_server.clone();
            Box::pin(async move {
                let accept = req.header("accept").unwrap_or("");
                for wanted in [
                    "application/vnd.oci.image.index.v1+json",
                    "application/vnd.oci.image.manifest.v1+json",
                    "application/vnd.docker.distribution.manifest.list.v2+json",
                    "application/vnd.docker.distribution.manifest.v2+json",
                ] {
                    if !accept.contains(wanted) {
                        return TestResponse::new(400)
                            .json(r#"{"errors":[{"code":"BAD_ACCEPT"}]}"#);
                    }
                }
                let head = req.method == "HEAD";
                match req.path() {
                    "/v2/team/app/manifests/with-header" => {
                        TestResponse::new(200).header("Docker-Content-Digest", &header_digest)
                    }
                    // No digest header: the client must GET and hash.
                    "/v2/team/app/manifests/no-header" => TestResponse::new(200).json(MANIFEST),
                    "/v2/team/app/manifests/no-head" if head => TestResponse::new(405),
                    "/v2/team/app/manifests/no-head" => TestResponse::new(200).json(MANIFEST),
                    "/v2/team/app/manifests/bad-header" => {
                        TestResponse::new(200).header("Docker-Content-Digest", "md5:zz/..")
                    }
                    p if p.starts_with("/v2/team/app/manifests/sha256:") => TestResponse::new(200),
                    "/v2/team/app/manifests/limited" => TestResponse::new(429)
                        .header("Retry-After", "7")
                        .json(r#"{"errors":[{"code":"TOOMANYREQUESTS","message":"slow down"}]}"#),
                    _ => TestResponse::new(404).json(
                        r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#,
                    ),
                }
            })
        },
    )
    .await;
    let client = client_for(&server, |_| {});
    let repo = repo(&server, "team/app");
    let anon = Credentials::Anonymous;
    let hashed = format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(MANIFEST.as_bytes()))
    );

    assert_eq!(
        client
            .manifest_digest(&repo, "with-header", &anon)
            .await
            .unwrap(),
        Some(header_digest.clone())
    );
    assert_eq!(
        client
            .manifest_digest(&repo, "no-header", &anon)
            .await
            .unwrap(),
        Some(hashed.clone())
    );
    assert_eq!(
        client
            .manifest_digest(&repo, "no-head", &anon)
            .await
            .unwrap(),
        Some(hashed)
    );
    assert_eq!(
        client
            .manifest_digest(&repo, "missing", &anon)
            .await
            .unwrap(),
        None
    );
    let by_digest = format!("sha256:{}", "2".repeat(64));
    assert_eq!(
        client
            .manifest_digest(&repo, &by_digest, &anon)
            .await
            .unwrap(),
        Some(by_digest)
    );
    assert!(matches!(
        client.manifest_digest(&repo, "bad-header", &anon).await,
        Err(RegistryError::Protocol(_))
    ));
    for bad in ["../x", "a/b", "sha256:short", ""] {
        assert!(matches!(
            client.manifest_digest(&repo, bad, &anon).await,
            Err(RegistryError::InvalidReference(_))
        ));
    }

    // The controller reaches the same through the trait object.
    let source: Arc<dyn TagSource> = Arc::new(client.clone());
    assert_eq!(
        source.digest(&repo, "with-header", &anon).await.unwrap(),
        Some(header_digest)
    );
    // Last, because a 429 pauses the whole host.
    assert!(matches!(
        client.manifest_digest(&repo, "limited", &anon).await,
        Err(RegistryError::RateLimited { retry_after: Some(d), .. }) if d == Duration::from_secs(7)
    ));
}

#[tokio::test]
async fn error_statuses_map_to_variants() {
    let server = TestServer::start(|req: TestRequest| -> futures::future::BoxFuture<'static, TestResponse> {
        Box::pin(async move {
            match req.path() {
                "/v2/limited/tags/list" => TestResponse::new(429)
                    .header("Retry-After", "30")
                    .json(r#"{"errors":[{"code":"TOOMANYREQUESTS","message":"You have reached your pull rate limit."}]}"#),
                "/v2/denied/tags/list" => TestResponse::new(403).json(
                    r#"{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}"#,
                ),
                "/v2/broken/tags/list" => TestResponse::new(503).json("upstream unavailable"),
                "/v2/garbled/tags/list" => TestResponse::new(200).json("{not json"),
                "/v2/ok/tags/list" => TestResponse::new(200).json(r#"{"name":"ok","tags":["a","b"]}"#),
                _ => TestResponse::new(404).json(
                    r#"{"errors":[{"code":"NAME_UNKNOWN","message":"repository name not known to registry"}]}"#,
                ),
            }
        })
    })
    .await;
    let client = client_for(&server, |_| {});
    let anon = Credentials::Anonymous;
    let list = |path: &'static str| {
        let (client, repo, anon) = (client.clone(), repo(&server, path), anon.clone());
        async move { client.list_tags(&repo, &anon).await.unwrap_err() }
    };

    let err = list("denied").await;
    assert_eq!(err.category(), "unauthorized");
    assert!(
        err.to_string().contains("DENIED: requested access"),
        "{err}"
    );
    let err = list("nothere").await;
    assert_eq!(
        err,
        RegistryError::NotFound {
            registry: server.host(),
            repository: "nothere".into(),
            message: "NAME_UNKNOWN: repository name not known to registry".into(),
        }
    );
    let err = list("broken").await;
    assert!(
        matches!(&err, RegistryError::Server { status: 503, message, .. } if message == "upstream unavailable"),
        "{err:?}"
    );
    assert!(err.is_transient());
    let err = list("garbled").await;
    assert_eq!(err.category(), "protocol");

    // The trait returns tags without digests or push times.
    let source: Arc<dyn TagSource> = Arc::new(client.clone());
    let infos = source.list(&repo(&server, "ok"), &anon).await.unwrap();
    assert_eq!(
        infos,
        vec![
            TagInfo {
                tag: "a".into(),
                digest: None,
                pushed_at: None
            },
            TagInfo {
                tag: "b".into(),
                digest: None,
                pushed_at: None
            },
        ]
    );
    // Last, because a 429 pauses the whole host (see `resilience_tests`).
    let err = list("limited").await;
    assert_eq!(
        err,
        RegistryError::RateLimited {
            registry: server.host(),
            retry_after: Some(Duration::from_secs(30)),
            message: "TOOMANYREQUESTS: You have reached your pull rate limit.".into(),
        }
    );
}

#[tokio::test]
async fn unreachable_registry_is_a_transport_error() {
    install_crypto();
    // Bind then drop to get a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host = format!("127.0.0.1:{port}");
    let client = RegistryClient::new(RegistryOptions {
        insecure_hosts: vec![host.clone()],
        timeout: Duration::from_secs(5),
        ..RegistryOptions::default()
    })
    .unwrap();
    let repo = RepositoryRef::parse(&format!("{host}/x")).unwrap();
    let err = client
        .list_tags(&repo, &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert_eq!(err.category(), "transport", "{err}");
    assert!(err.is_transient());
}
