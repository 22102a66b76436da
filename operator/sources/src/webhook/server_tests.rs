//! Handler tests over real HTTP: the router served on a loopback port, called with reqwest.

use std::time::Duration;

use reqwest::StatusCode;
use tokio::sync::{mpsc, oneshot};

use super::signature::sign_sha256;
use super::*;

const DIST_TOKEN: &str = "dist-token-0123456789";
const HUB_TOKEN: &str = "hub-token-abcdef";
const GH_SECRET: &str = "gh-secret";
const HARBOR_TOKEN: &str = "harbor-token-xyz";
const QUAY_TOKEN: &str = "quay-token-xyz";
const GENERIC_SECRET: &str = "generic-secret";

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/webhooks")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn all_secrets() -> WebhookSecrets {
    WebhookSecrets::none()
        .with(Provider::Distribution, DIST_TOKEN)
        .with(Provider::DockerHub, HUB_TOKEN)
        .with(Provider::Ghcr, GH_SECRET)
        .with(Provider::Harbor, HARBOR_TOKEN)
        .with(Provider::Quay, QUAY_TOKEN)
        .with(Provider::Generic, GENERIC_SECRET)
}

struct TestServer {
    base: String,
    events: mpsc::Receiver<RegistryEvent>,
    state: WebhookState,
    client: reqwest::Client,
    _stop: oneshot::Sender<()>,
}

impl TestServer {
    async fn start(secrets: WebhookSecrets, capacity: usize, body_limit: usize) -> TestServer {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (sink, events) = mpsc::channel(capacity);
        let state = WebhookState::new(secrets, sink).with_body_limit(body_limit);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let served = state.clone();
        tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            if let Err(e) = serve_listener(listener, served, shutdown).await {
                eprintln!("webhook server failed: {e}");
            }
        });
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        TestServer {
            base,
            events,
            state,
            client,
            _stop: stop,
        }
    }

    async fn post(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (StatusCode, String) {
        let mut request = self.client.post(format!("{}{path}", self.base)).body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.text().await.unwrap())
    }

    async fn next_event(&mut self) -> RegistryEvent {
        tokio::time::timeout(Duration::from_secs(5), self.events.recv())
            .await
            .expect("no event within 5s")
            .expect("sink closed")
    }

    fn counters(&self, provider: Provider) -> CounterSnapshot {
        self.state.counters().provider(provider).snapshot()
    }
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[tokio::test]
async fn distribution_accepts_with_bearer_token_and_forwards_manifest_pushes() {
    let mut server = TestServer::start(all_secrets(), 16, DEFAULT_BODY_LIMIT).await;
    let auth = bearer(DIST_TOKEN);
    let (status, body) = server
        .post(
            "/hooks/distribution",
            &[
                ("authorization", auth.as_str()),
                (
                    "content-type",
                    "application/vnd.docker.distribution.events.v1+json",
                ),
            ],
            fixture("distribution-push.json"),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json, serde_json::json!({"accepted": 1, "ignored": 3}));
    let event = server.next_event().await;
    assert_eq!(event.registry, "127.0.0.1:5000");
    assert_eq!(event.repository, "team/app");
    assert_eq!(event.tag.as_deref(), Some("v1.2.3"));
    assert_eq!(event.source, "distribution");
    let c = server.counters(Provider::Distribution);
    assert_eq!((c.accepted, c.ignored, c.rejected_auth), (1, 3, 0));
}

#[tokio::test]
async fn wrong_or_missing_tokens_get_401_and_nothing_is_forwarded() {
    let mut server = TestServer::start(all_secrets(), 16, DEFAULT_BODY_LIMIT).await;
    let wrong = bearer("dist-token-0123456788");
    let longer = bearer(&format!("{DIST_TOKEN}x"));
    for headers in [
        vec![],
        vec![("authorization", wrong.as_str())],
        vec![("authorization", longer.as_str())],
        vec![("authorization", "Bearer ")],
        vec![("authorization", "Basic dTpw")],
    ] {
        let (status, _) = server
            .post(
                "/hooks/distribution",
                &headers,
                fixture("distribution-push.json"),
            )
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{headers:?}");
    }
    // Harbor: both the Bearer form and the bare token are accepted; others are not.
    for (value, expected) in [
        (bearer(HARBOR_TOKEN), StatusCode::ACCEPTED),
        (HARBOR_TOKEN.to_string(), StatusCode::ACCEPTED),
        (bearer("nope"), StatusCode::UNAUTHORIZED),
    ] {
        let (status, _) = server
            .post(
                "/hooks/harbor",
                &[("authorization", value.as_str())],
                fixture("harbor-push-artifact.json"),
            )
            .await;
        assert_eq!(status, expected, "{value}");
    }
    // Path tokens.
    let (status, _) = server
        .post(
            "/hooks/dockerhub/not-the-token",
            &[],
            fixture("dockerhub-push.json"),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = server
        .post(
            &format!("/hooks/quay/{QUAY_TOKEN}0"),
            &[],
            fixture("quay-repository-push.json"),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    assert_eq!(server.counters(Provider::Distribution).rejected_auth, 5);
    assert_eq!(server.counters(Provider::Harbor).rejected_auth, 1);
    assert_eq!(server.counters(Provider::DockerHub).rejected_auth, 1);
    assert_eq!(server.counters(Provider::Quay).rejected_auth, 1);
    // Only the two accepted Harbor deliveries (two tags each) reached the sink.
    for _ in 0..4 {
        assert_eq!(server.next_event().await.source, "harbor");
    }
    assert!(server.events.try_recv().is_err());
}

#[tokio::test]
async fn path_token_providers_accept_the_right_token() {
    let mut server = TestServer::start(all_secrets(), 16, DEFAULT_BODY_LIMIT).await;
    let (status, body) = server
        .post(
            &format!("/hooks/dockerhub/{HUB_TOKEN}"),
            &[("content-type", "application/json")],
            fixture("dockerhub-push.json"),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let event = server.next_event().await;
    assert_eq!(
        (event.registry.as_str(), event.repository.as_str()),
        ("registry-1.docker.io", "acme/my-api")
    );
    let (status, body) = server
        .post(
            &format!("/hooks/quay/{QUAY_TOKEN}"),
            &[],
            fixture("quay-repository-push.json"),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(server.next_event().await.tag.as_deref(), Some("v3.1.0"));
    assert_eq!(server.next_event().await.tag.as_deref(), Some("latest"));
}

#[tokio::test]
async fn signed_providers_check_hmac_of_the_raw_body() {
    let mut server = TestServer::start(all_secrets(), 16, DEFAULT_BODY_LIMIT).await;
    let body = fixture("ghcr-package-published.json");
    let good = sign_sha256(GH_SECRET.as_bytes(), &body);
    let (status, text) = server
        .post(
            "/hooks/ghcr",
            &[
                ("x-hub-signature-256", good.as_str()),
                ("x-github-event", "package"),
            ],
            body.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{text}");
    let event = server.next_event().await;
    assert_eq!(event.repository, "acme-org/my-api");
    assert_eq!(event.tag.as_deref(), Some("v2.3.0"));

    // Signature of another body, another secret, wrong header, none at all.
    let mut tampered = body.clone();
    tampered.push(b' ');
    let other_secret = sign_sha256(b"other", &body);
    for (headers, payload) in [
        (vec![("x-hub-signature-256", good.as_str())], tampered),
        (
            vec![("x-hub-signature-256", other_secret.as_str())],
            body.clone(),
        ),
        (vec![("x-signature-256", good.as_str())], body.clone()),
        (vec![], body.clone()),
    ] {
        let (status, _) = server.post("/hooks/ghcr", &headers, payload).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{headers:?}");
    }
    assert_eq!(server.counters(Provider::Ghcr).rejected_auth, 4);

    // Generic uses X-Signature-256 and its own secret.
    let body = fixture("generic-push.json");
    let signature = sign_sha256(GENERIC_SECRET.as_bytes(), &body);
    let (status, _) = server
        .post(
            "/hooks/generic",
            &[("x-signature-256", signature.as_str())],
            body.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(
        server.next_event().await.tag.as_deref(),
        Some("canary-v1.2.4")
    );
    let github_style = sign_sha256(GH_SECRET.as_bytes(), &body);
    let (status, _) = server
        .post(
            "/hooks/generic",
            &[("x-signature-256", github_style.as_str())],
            body,
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn github_ping_and_npm_packages_are_accepted_but_ignored() {
    let mut server = TestServer::start(all_secrets(), 16, DEFAULT_BODY_LIMIT).await;
    for body in [
        br#"{"zen":"Design for failure.","hook_id":42}"#.to_vec(),
        fixture("ghcr-package-npm.json"),
    ] {
        let signature = sign_sha256(GH_SECRET.as_bytes(), &body);
        let (status, text) = server
            .post(
                "/hooks/ghcr",
                &[("x-hub-signature-256", signature.as_str())],
                body,
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            serde_json::json!({"accepted": 0, "ignored": 1})
        );
    }
    assert!(server.events.try_recv().is_err());
    let c = server.counters(Provider::Ghcr);
    assert_eq!((c.accepted, c.ignored), (0, 2));
}

#[tokio::test]
async fn disabled_and_unknown_providers_are_404_and_wrong_methods_405() {
    let secrets = WebhookSecrets::none().with(Provider::Generic, GENERIC_SECRET);
    let server = TestServer::start(secrets, 16, DEFAULT_BODY_LIMIT).await;
    // Disabled: no secret configured, even with what would be a valid credential.
    let auth = bearer(DIST_TOKEN);
    let (status, _) = server
        .post(
            "/hooks/distribution",
            &[("authorization", auth.as_str())],
            fixture("distribution-push.json"),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = server
        .post(
            "/hooks/dockerhub/anything",
            &[],
            fixture("dockerhub-push.json"),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let body = fixture("ghcr-package-published.json");
    let signature = sign_sha256(b"", &body);
    let (status, _) = server
        .post(
            "/hooks/ghcr",
            &[("x-hub-signature-256", signature.as_str())],
            body,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Unknown providers and paths.
    for path in [
        "/hooks/gitlab",
        "/hooks/dockerhub",
        "/hooks/quay/",
        "/",
        "/hooks",
    ] {
        let (status, _) = server.post(path, &[], b"{}".to_vec()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
    // Wrong method on a known route.
    let response = server
        .client
        .get(format!("{}/hooks/generic", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    let response = server
        .client
        .put(format!("{}/hooks/dockerhub/x", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    // Disabled providers count nothing: nobody can tell them from unknown paths.
    assert_eq!(
        server.counters(Provider::Distribution),
        CounterSnapshot::default()
    );
}

#[tokio::test]
async fn secrets_reload_enables_and_disables_providers() {
    let server = TestServer::start(WebhookSecrets::none(), 16, DEFAULT_BODY_LIMIT).await;
    let path = format!("/hooks/quay/{QUAY_TOKEN}");
    let (status, _) = server
        .post(&path, &[], fixture("quay-repository-push.json"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    server
        .state
        .replace_secrets(WebhookSecrets::none().with(Provider::Quay, QUAY_TOKEN));
    let (status, _) = server
        .post(&path, &[], fixture("quay-repository-push.json"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // The shared lock works the same way.
    *server.state.secrets().write().unwrap() = WebhookSecrets::none();
    let (status, _) = server
        .post(&path, &[], fixture("quay-repository-push.json"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let server = TestServer::start(all_secrets(), 16, 256).await;
    let big = {
        let mut body =
            br#"{"registry":"r.example.com","repository":"a/b","tag":"v1","pad":""#.to_vec();
        body.extend(std::iter::repeat_n(b'x', 1024));
        body.extend(br#""}"#);
        body
    };
    let signature = sign_sha256(GENERIC_SECRET.as_bytes(), &big);
    let (status, _) = server
        .post(
            "/hooks/generic",
            &[("x-signature-256", signature.as_str())],
            big.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    // A token provider with the right token, same size.
    let (status, _) = server
        .post(&format!("/hooks/quay/{QUAY_TOKEN}"), &[], big.clone())
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    // Wrong token: refused before the body is even read.
    let (status, _) = server.post("/hooks/quay/wrong", &[], big).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(server.counters(Provider::Generic).too_large, 1);
    assert_eq!(server.counters(Provider::Quay).too_large, 1);
    // Small bodies still pass under the same limit.
    let small = br#"{"registry":"r.example.com","repository":"a/b"}"#.to_vec();
    let signature = sign_sha256(GENERIC_SECRET.as_bytes(), &small);
    let (status, _) = server
        .post(
            "/hooks/generic",
            &[("x-signature-256", signature.as_str())],
            small,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn malformed_payloads_get_400_and_are_counted() {
    let server = TestServer::start(all_secrets(), 16, DEFAULT_BODY_LIMIT).await;
    let auth = bearer(DIST_TOKEN);
    for body in [&b"{not json"[..], b"", br#"{"events":{}}"#] {
        let (status, _) = server
            .post(
                "/hooks/distribution",
                &[("authorization", auth.as_str())],
                body.to_vec(),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }
    let body = br#"{"registry":"r.example.com","repository":"a/b","tag":"bad tag"}"#.to_vec();
    let signature = sign_sha256(GENERIC_SECRET.as_bytes(), &body);
    let (status, _) = server
        .post(
            "/hooks/generic",
            &[("x-signature-256", signature.as_str())],
            body,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(server.counters(Provider::Distribution).malformed, 3);
    assert_eq!(server.counters(Provider::Generic).malformed, 1);
}

#[tokio::test]
async fn full_sink_answers_503_without_blocking_and_counts_drops() {
    let mut server = TestServer::start(all_secrets(), 1, DEFAULT_BODY_LIMIT).await;
    let auth = bearer(HARBOR_TOKEN);
    // Two events, room for one: the first is forwarded, the second dropped.
    let (status, _) = tokio::time::timeout(
        Duration::from_secs(5),
        server.post(
            "/hooks/harbor",
            &[("authorization", auth.as_str())],
            fixture("harbor-push-artifact.json"),
        ),
    )
    .await
    .expect("handler blocked on a full sink");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let c = server.counters(Provider::Harbor);
    assert_eq!((c.accepted, c.dropped), (1, 1));
    assert_eq!(server.next_event().await.tag.as_deref(), Some("latest"));
    // Room again: the sender's retry gets through.
    let (status, _) = server
        .post(
            "/hooks/harbor",
            &[("authorization", auth.as_str())],
            fixture("harbor-cloudevents-pushed.json"),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // A closed sink (the operator shutting down) is a 503 too.
    server.events.close();
    let (status, _) = server
        .post(
            "/hooks/harbor",
            &[("authorization", auth.as_str())],
            fixture("harbor-cloudevents-pushed.json"),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.counters(Provider::Harbor).dropped, 2);
}
