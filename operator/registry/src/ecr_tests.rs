//! Tests of the ECR tag source against a real moto server (see [`crate::moto`]), plus the
//! error mapping on hand-built SDK errors.

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_ecr::config::http::HttpResponse;
use aws_sdk_ecr::config::{Region, SharedCredentialsProvider};
use aws_sdk_ecr::error::{ErrorMetadata, SdkError};
use aws_sdk_ecr::operation::describe_images::DescribeImagesError;

use super::*;
use crate::moto::*;

fn ecr_client() -> aws_sdk_ecr::Client {
    aws_sdk_ecr::Client::new(&test_sdk_config(moto_url()))
}

fn source() -> EcrTagSource {
    EcrTagSource::new(
        test_sdk_config("http://127.0.0.1:9"),
        EcrOptions {
            endpoint_url: Some(moto_url().to_string()),
        },
    )
}

fn moto_host() -> String {
    format!("{MOTO_ACCOUNT}.dkr.ecr.{MOTO_REGION}.amazonaws.com")
}

fn repo_ref(name: &str) -> RepositoryRef {
    RepositoryRef::parse(&format!("{}/{name}", moto_host())).unwrap()
}

async fn create_repository(name: &str) {
    ecr_client()
        .create_repository()
        .repository_name(name)
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateRepository {name}: {}", DisplayErrorContext(&e)));
}

/// A small valid OCI image manifest whose digest depends on `content`.
fn manifest(content: &str) -> String {
    let config = format!(r#"{{"architecture":"amd64","os":"linux","imagewatch":"{content}"}}"#);
    serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(config.as_bytes()))),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(content.as_bytes()))),
            "size": content.len(),
        }],
    })
    .to_string()
}

/// `PutImage`; returns the image digest ECR reports.
async fn put_image(repository: &str, manifest: &str, tag: &str) -> String {
    let out = ecr_client()
        .put_image()
        .repository_name(repository)
        .image_manifest(manifest)
        .image_manifest_media_type("application/vnd.oci.image.manifest.v1+json")
        .image_tag(tag)
        .send()
        .await
        .unwrap_or_else(|e| panic!("PutImage {repository}:{tag}: {}", DisplayErrorContext(&e)));
    out.image()
        .and_then(|i| i.image_id())
        .and_then(|id| id.image_digest())
        .expect("PutImage returns the digest")
        .to_string()
}

#[tokio::test]
async fn lists_tags_with_digests_and_push_times() {
    let name = unique("iw-ecr-list");
    create_repository(&name).await;
    let started = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(300);
    let first = put_image(&name, &manifest("first"), "v1.0.0").await;
    let second = put_image(&name, &manifest("second"), "v1.1.0").await;
    // Same manifest, second tag: one image carrying two tags.
    let second_again = put_image(&name, &manifest("second"), "stable").await;
    let third = put_image(&name, &manifest("third"), "v1.2.0").await;
    assert_eq!(second, second_again, "re-tagging keeps the digest");
    // moto derives the digest from the layer digests, not from the manifest bytes as ECR
    // does, so only its shape and uniqueness are checked here.
    assert!(is_valid_digest(&first), "{first}");
    assert_ne!(first, second);
    assert_ne!(second, third);

    let source: std::sync::Arc<dyn TagSource> = std::sync::Arc::new(source());
    let repo = repo_ref(&name);
    let mut tags = source.list(&repo, &Credentials::Anonymous).await.unwrap();
    tags.sort_by(|a, b| a.tag.cmp(&b.tag));
    let summary: Vec<(&str, Option<&str>)> = tags
        .iter()
        .map(|t| (t.tag.as_str(), t.digest.as_deref()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("stable", Some(second.as_str())),
            ("v1.0.0", Some(first.as_str())),
            ("v1.1.0", Some(second.as_str())),
            ("v1.2.0", Some(third.as_str())),
        ]
    );
    for tag in &tags {
        let pushed = tag.pushed_at.expect("ECR reports push times");
        assert!(
            pushed > started,
            "{}: push time {pushed} is too old",
            tag.tag
        );
    }

    assert_eq!(
        source
            .digest(&repo, "stable", &Credentials::Anonymous)
            .await
            .unwrap(),
        Some(second.clone())
    );
    assert_eq!(
        source
            .digest(&repo, &third, &Credentials::Anonymous)
            .await
            .unwrap(),
        Some(third.clone())
    );
    assert_eq!(
        source
            .digest(&repo, "v9.9.9", &Credentials::Anonymous)
            .await
            .unwrap(),
        None
    );
    let absent = format!("sha256:{}", "0".repeat(64));
    assert_eq!(
        source
            .digest(&repo, &absent, &Credentials::Anonymous)
            .await
            .unwrap(),
        None
    );
    let err = source
        .digest(&repo, "bad tag!", &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert_eq!(err.category(), "invalid_reference", "{err}");
}

/// A stand-in for the ECR JSON API that serves `DescribeImages` in two pages, because
/// moto ignores `maxResults` and always answers with one page. Records each request body.
async fn paging_stub() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
) {
    use axum::http::{HeaderMap, StatusCode};
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = seen.clone();
    let app = axum::Router::new().fallback(move |headers: HeaderMap, body: String| {
        let recorded = recorded.clone();
        async move {
            let target = headers
                .get("x-amz-target")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let request: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            recorded.lock().unwrap().push(request.clone());
            let image = |tags: &[&str], digest: char, pushed: i64| {
                serde_json::json!({
                    "registryId": MOTO_ACCOUNT,
                    "repositoryName": "paged",
                    "imageDigest": format!("sha256:{}", digest.to_string().repeat(64)),
                    "imageTags": tags,
                    "imagePushedAt": pushed,
                })
            };
            let reply = match (target.rsplit('.').next(), request.get("nextToken")) {
                (Some("DescribeImages"), None) => serde_json::json!({
                    "imageDetails": [image(&["v1", "stable"], 'a', 1_700_000_000)],
                    "nextToken": "page-2",
                }),
                (Some("DescribeImages"), Some(_)) => serde_json::json!({
                    "imageDetails": [
                        image(&["v2"], 'b', 1_700_000_100),
                        // Listed by ECR but not pullable until restored.
                        serde_json::json!({
                            "imageDigest": format!("sha256:{}", "c".repeat(64)),
                            "imageTags": ["archived"],
                            "imagePushedAt": 1_700_000_200,
                            "imageStatus": "ARCHIVED",
                        }),
                    ],
                }),
                _ => {
                    return (
                        StatusCode::BAD_REQUEST,
                        [("content-type", "application/x-amz-json-1.1")],
                        serde_json::json!({"__type": "InvalidParameterException", "message": target})
                            .to_string(),
                    );
                }
            };
            (
                StatusCode::OK,
                [("content-type", "application/x-amz-json-1.1")],
                reply.to_string(),
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, seen)
}

#[tokio::test]
async fn follows_pages() {
    let (url, seen) = paging_stub().await;
    let source = EcrTagSource::new(
        test_sdk_config("http://127.0.0.1:9"),
        EcrOptions {
            endpoint_url: Some(url),
        },
    );
    let tags = source.list_tags(&repo_ref("paged")).await.unwrap();
    let summary: Vec<(&str, char, i64)> = tags
        .iter()
        .map(|t| {
            (
                t.tag.as_str(),
                t.digest.as_deref().unwrap().chars().last().unwrap(),
                t.pushed_at.unwrap().as_second(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("v1", 'a', 1_700_000_000),
            ("stable", 'a', 1_700_000_000),
            ("v2", 'b', 1_700_000_100),
        ]
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for request in &seen {
        assert_eq!(request["maxResults"], 1000);
        assert_eq!(request["registryId"], MOTO_ACCOUNT);
        assert_eq!(request["repositoryName"], "paged");
        assert_eq!(request["filter"]["tagStatus"], "TAGGED");
    }
    assert_eq!(seen[1]["nextToken"], "page-2");
}

#[tokio::test]
async fn missing_repository_is_not_found() {
    let source = source();
    let name = unique("iw-ecr-missing");
    let repo = repo_ref(&name);
    let err = source.list_tags(&repo).await.unwrap_err();
    match &err {
        RegistryError::NotFound {
            registry,
            repository,
            message,
        } => {
            assert_eq!(registry, &moto_host());
            assert_eq!(repository, &name);
            assert!(
                message.starts_with("RepositoryNotFoundException"),
                "AWS's code and message are kept: {message}"
            );
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    let err = source.image_digest(&repo, "v1").await.unwrap_err();
    assert_eq!(err.category(), "not_found", "{err}");
}

#[tokio::test]
async fn repositories_and_patterns() {
    let base = unique("iw-ecr-pat");
    for suffix in ["svc-a/api", "svc-b/api", "svc-b/worker", "other/api/x"] {
        create_repository(&format!("{base}/{suffix}")).await;
    }
    create_repository(&format!("{base}-sibling/svc-c/api")).await;
    let source = source();
    let host = moto_host();

    let listed = source
        .list_repositories(&host, &format!("{base}/"))
        .await
        .unwrap();
    assert_eq!(
        listed,
        vec![
            format!("{base}/other/api/x"),
            format!("{base}/svc-a/api"),
            format!("{base}/svc-b/api"),
            format!("{base}/svc-b/worker"),
        ]
    );

    let matched = source
        .matching_repositories(&host, &format!("{base}/*/api"))
        .await
        .unwrap();
    assert_eq!(
        matched,
        vec![
            (format!("{base}/svc-a/api"), vec!["svc-a".to_string()]),
            (format!("{base}/svc-b/api"), vec!["svc-b".to_string()]),
        ]
    );
    let targets: Vec<String> = matched
        .iter()
        .map(|(_, captures)| expand_captures("services/$1/overlays/stg", captures))
        .collect();
    assert_eq!(
        targets,
        vec!["services/svc-a/overlays/stg", "services/svc-b/overlays/stg"]
    );

    let matched = source
        .matching_repositories(&host, &format!("{base}/svc-*/*"))
        .await
        .unwrap();
    let captures: Vec<Vec<String>> = matched.into_iter().map(|(_, c)| c).collect();
    assert_eq!(
        captures,
        vec![
            vec!["a".to_string(), "api".to_string()],
            vec!["b".to_string(), "api".to_string()],
            vec!["b".to_string(), "worker".to_string()],
        ]
    );
}

#[tokio::test]
async fn unreachable_endpoint_is_a_transport_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let source = EcrTagSource::new(
        test_sdk_config("http://127.0.0.1:9"),
        EcrOptions {
            endpoint_url: Some(format!("http://127.0.0.1:{port}")),
        },
    );
    let err = source.list_tags(&repo_ref("any")).await.unwrap_err();
    assert_eq!(err.category(), "transport", "{err}");
    assert!(err.is_transient());
}

#[tokio::test]
async fn not_an_ecr_host() {
    let err = source()
        .list_tags(&RepositoryRef::parse("ghcr.io/org/app").unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.category(), "invalid_reference", "{err}");
}

/// No ECR request, no AWS configuration: nothing asks instance metadata for a region or
/// credentials in a process that does not use AWS.
#[tokio::test]
async fn the_aws_configuration_is_loaded_on_the_first_ecr_request_only() {
    let source = EcrTagSource::from_env(EcrOptions::default());
    assert!(!source.aws_loaded());
    // Not an ECR host: refused before any AWS client exists.
    let err = source
        .list_tags(&RepositoryRef::parse("ghcr.io/org/app").unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.category(), "invalid_reference", "{err}");
    assert!(!source.aws_loaded());
}

#[tokio::test]
async fn one_client_per_region() {
    let source = source();
    let east = EcrRegistry::parse("123456789012.dkr.ecr.us-east-1.amazonaws.com").unwrap();
    let east_other_account =
        EcrRegistry::parse("210987654321.dkr.ecr.us-east-1.amazonaws.com").unwrap();
    let west = EcrRegistry::parse("123456789012.dkr.ecr.us-west-2.amazonaws.com").unwrap();
    let a = source.client(&east).await;
    let _ = source.client(&east_other_account).await;
    let b = source.client(&west).await;
    assert_eq!(source.clients.lock().unwrap().len(), 2);
    assert_eq!(a.config().region().map(|r| r.as_ref()), Some("us-east-1"));
    assert_eq!(b.config().region().map(|r| r.as_ref()), Some("us-west-2"));
}

/// All regional clients share the `SdkConfig`'s identity cache: however many regions and
/// concurrent calls, the credential provider runs once (until the credentials expire).
#[tokio::test]
async fn one_credential_fetch_for_all_regions() {
    let dir = std::env::temp_dir().join(unique("iw-ecr-creds"));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("fetches");
    let command = format!(
        r#"echo fetch >> '{}'; printf '%s' '{{"Version":1,"AccessKeyId":"test","SecretAccessKey":"test","Expiration":"2099-01-01T00:00:00Z"}}'"#,
        log.display()
    );
    let config = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .http_client(super::aws_http_client())
        .region(Region::new(MOTO_REGION))
        .credentials_provider(SharedCredentialsProvider::new(
            aws_config::credential_process::CredentialProcessProvider::new(command),
        ))
        .identity_cache(aws_sdk_ecr::config::IdentityCache::lazy().build())
        .build();
    let source = EcrTagSource::new(
        config,
        EcrOptions {
            endpoint_url: Some(moto_url().to_string()),
        },
    );
    let name = unique("iw-ecr-creds");
    create_repository(&name).await;
    let repos: Vec<RepositoryRef> = ["us-east-1", "us-west-2", "eu-west-1"]
        .iter()
        .flat_map(|region| {
            let name = name.clone();
            (0..3).map(move |_| {
                RepositoryRef::parse(&format!(
                    "{MOTO_ACCOUNT}.dkr.ecr.{region}.amazonaws.com/{name}"
                ))
                .unwrap()
            })
        })
        .collect();
    let results = futures::future::join_all(repos.iter().map(|r| source.list_tags(r))).await;
    for (repo, result) in repos.iter().zip(&results) {
        match result {
            // moto keeps ECR state per region; the repository exists in us-east-1 only.
            Ok(tags) => assert!(repo.registry.contains(MOTO_REGION) && tags.is_empty()),
            Err(err) => assert_eq!(err.category(), "not_found", "{repo}: {err}"),
        }
    }
    assert_eq!(source.clients.lock().unwrap().len(), 3);
    let fetches = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        fetches.lines().count(),
        1,
        "credential fetches: {fetches:?}"
    );
}

fn service_error(
    status: u16,
    code: &str,
    message: &str,
) -> SdkError<DescribeImagesError, HttpResponse> {
    let raw = HttpResponse::try_from(
        axum::http::Response::builder()
            .status(status)
            .body("".into())
            .unwrap(),
    )
    .unwrap();
    let err =
        DescribeImagesError::generic(ErrorMetadata::builder().code(code).message(message).build());
    SdkError::service_error(err, raw)
}

#[test]
fn maps_service_errors() {
    let registry = EcrRegistry::parse(&moto_host()).unwrap();
    let map = |status, code, message| {
        map_sdk_error(
            service_error(status, code, message),
            &registry,
            Some("team/app"),
        )
    };

    let err = map(400, "ThrottlingException", "Rate exceeded");
    assert_eq!(
        err,
        RegistryError::RateLimited {
            registry: moto_host(),
            retry_after: None,
            message: "ThrottlingException: Rate exceeded".into()
        }
    );
    let err = map(
        400,
        "AccessDeniedException",
        "User: arn:aws:sts::123456789012:assumed-role/x is not authorized to perform: ecr:DescribeImages",
    );
    assert_eq!(err.category(), "unauthorized");
    assert!(
        err.to_string()
            .contains("not authorized to perform: ecr:DescribeImages"),
        "{err}"
    );
    assert_eq!(map(403, "", "").category(), "unauthorized");
    assert_eq!(
        map(400, "UnrecognizedClientException", "bad token").category(),
        "unauthorized"
    );
    let err = map(
        400,
        "RepositoryNotFoundException",
        "The repository does not exist",
    );
    assert_eq!(
        err,
        RegistryError::NotFound {
            registry: moto_host(),
            repository: "team/app".into(),
            message: "RepositoryNotFoundException: The repository does not exist".into()
        }
    );
    let err = map(500, "ServerException", "internal");
    assert_eq!(
        err,
        RegistryError::Server {
            registry: moto_host(),
            status: 500,
            message: "ServerException: internal".into()
        }
    );
    assert!(err.is_transient());
    assert_eq!(
        map(400, "InvalidParameterException", "bad name").category(),
        "invalid_reference"
    );
    assert_eq!(map(429, "", "").category(), "rate_limited");
}

#[test]
fn authorization_tokens_decode_and_expire() {
    use base64::Engine as _;
    let token = base64::engine::general_purpose::STANDARD.encode("AWS:secret-token");
    let now = 1_700_000_000;
    let (creds, keep) = decode_authorization(&token, Some(now + 12 * 3600), now).unwrap();
    assert_eq!(creds, Credentials::basic("AWS", "secret-token"));
    assert_eq!(
        keep,
        Some(Duration::from_secs(12 * 3600) - TOKEN_RENEW_BEFORE)
    );
    // Expired, about to expire or without an expiry: used once, not kept.
    for expires in [Some(now - 1), Some(now + 60), None] {
        let (_, keep) = decode_authorization(&token, expires, now).unwrap();
        assert_eq!(keep, None, "{expires:?}");
    }
    for bad in ["not base64!", "QVdT", ""] {
        assert!(decode_authorization(bad, None, now).is_err(), "{bad:?}");
    }
}

/// The signature of an ECR image is read through the registry API with the token
/// `GetAuthorizationToken` (moto) issues to the operator's AWS identity: a registry that
/// accepts only that token serves the image's classic signature, which then verifies. moto
/// has no registry API and cannot store signature artifacts (its GetDownloadUrlForLayer is
/// not implemented), so the registry here is the in-process test server.
#[tokio::test]
async fn signatures_are_read_with_the_registry_token_of_the_aws_identity() {
    use super::super::test_server::{TestResponse, TestServer};
    use base64::Engine as _;
    use p256::ecdsa::{Signature, SigningKey, signature::Signer as _};
    use p256::pkcs8::{EncodePublicKey as _, LineEnding};
    use sha2::Digest as _;

    let _ = rustls::crypto::ring::default_provider().install_default();
    // What the identity's token is, asked of moto directly.
    #[allow(deprecated)]
    let issued = ecr_client()
        .get_authorization_token()
        .registry_ids(MOTO_ACCOUNT)
        .send()
        .await
        .expect("GetAuthorizationToken");
    let token = issued.authorization_data()[0]
        .authorization_token()
        .expect("a token")
        .to_string();
    let expected = format!("Basic {token}");

    let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(b"ecr image")));
    let hex_digest = digest.trim_start_matches("sha256:").to_string();
    let payload = format!(
        r#"{{"critical":{{"identity":{{"docker-reference":"ecr/app"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":null}}"#
    )
    .into_bytes();
    let key = SigningKey::from_slice(&[9u8; 32]).expect("a scalar");
    let signature: Signature = key.sign(&payload);
    let signature = base64::engine::general_purpose::STANDARD.encode(signature.to_der().as_bytes());
    let payload_digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&payload)));
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": payload_digest, "size": payload.len()},
        "layers": [{
            "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
            "digest": payload_digest,
            "size": payload.len(),
            "annotations": {"dev.cosignproject.cosign/signature": signature}
        }]
    })
    .to_string();
    let server = TestServer::start(move |req| {
        let (expected, manifest, payload) = (expected.clone(), manifest.clone(), payload.clone());
        let sig_tag = format!("/v2/app/manifests/sha256-{hex_digest}.sig");
        let blob = format!("/v2/app/blobs/{payload_digest}");
        Box::pin(async move {
            if req.header("authorization") != Some(expected.as_str()) {
                return TestResponse::new(401)
                    .header("WWW-Authenticate", r#"Basic realm="ecr""#)
                    .json(r#"{"errors":[{"code":"DENIED","message":"Not Authorized"}]}"#);
            }
            match req.path() {
                "/v2/" => TestResponse::new(200).json("{}"),
                p if p == sig_tag => TestResponse::new(200)
                    .header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
                    .json(&manifest),
                p if p == blob => {
                    let mut r = TestResponse::new(200);
                    r.body = payload;
                    r
                }
                _ => TestResponse::new(404).json(r#"{"errors":[{"code":"MANIFEST_UNKNOWN"}]}"#),
            }
        })
    })
    .await;
    let client = super::super::RegistryClient::new(super::super::distribution::RegistryOptions {
        insecure_hosts: vec![server.host()],
        timeout: Duration::from_secs(10),
        ..Default::default()
    })
    .unwrap();
    let repo = RepositoryRef::parse(&format!("{}/app", server.host())).unwrap();
    let keys = crate::signature::parse_keys(
        &p256::ecdsa::VerifyingKey::from(&key)
            .to_public_key_pem(LineEnding::LF)
            .unwrap(),
    )
    .unwrap();
    let cache = crate::signature::fetch::VerdictCache::default();

    let creds = source().registry_credentials(&moto_host()).await.unwrap();
    assert!(matches!(&creds, Credentials::Basic { username, .. } if username == "AWS"));
    let verdict =
        crate::signature::fetch::check(&client, &cache, "aws", &repo, &digest, &creds, &keys)
            .await
            .unwrap();
    assert!(
        matches!(verdict, crate::signature::Verdict::Verified { .. }),
        "{verdict:?}"
    );
    // Without the token the registry refuses: the verdict came from the token.
    let anonymous = crate::signature::fetch::check(
        &client,
        &crate::signature::fetch::VerdictCache::default(),
        "anonymous",
        &repo,
        &digest,
        &Credentials::Anonymous,
        &keys,
    )
    .await;
    assert!(
        matches!(anonymous, Err(RegistryError::Unauthorized { .. })),
        "{anonymous:?}"
    );
    // Not an ECR host: no token is asked for.
    assert!(source().registry_credentials(&server.host()).await.is_err());
}
