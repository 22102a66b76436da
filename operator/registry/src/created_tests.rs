//! Tests of created-time lookups (`image_created`, `list_tags_with_times`) and platform
//! lookups (`image_platforms`) against an in-process registry serving real manifest, index
//! and config JSON from a content store.
//! The real-registry counterpart is in `live_registry_tests`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use sha2::{Digest as _, Sha256};

use super::distribution::Tuning;
use super::test_server::{TestRequest, TestResponse, TestServer};
use super::*;

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";

fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Blobs and manifests by digest, tags in listing order.
#[derive(Default)]
struct Store {
    content: HashMap<String, (String, Vec<u8>)>,
    tags: Vec<(String, String)>,
    /// Answer 429 (`Retry-After: 0`) to everything but the tag list while set.
    limited: bool,
}

impl Store {
    fn put(&mut self, media_type: &str, bytes: Vec<u8>) -> String {
        let digest = digest_of(&bytes);
        self.content
            .insert(digest.clone(), (media_type.to_string(), bytes));
        digest
    }

    /// An image whose config says `created` (or has none); returns the manifest digest.
    fn image(&mut self, created: Option<&str>, arch: &str) -> String {
        let mut config = serde_json::json!({"architecture": arch, "os": "linux", "config": {}});
        if let Some(created) = created {
            config["created"] = created.into();
        }
        let config = config.to_string().into_bytes();
        let size = config.len();
        let config_digest = self.put("application/vnd.oci.image.config.v1+json", config);
        self.manifest_for_config(&config_digest, size)
    }

    fn manifest_for_config(&mut self, config_digest: &str, size: usize) -> String {
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": size},
            "layers": [],
        });
        self.put(OCI_MANIFEST, manifest.to_string().into_bytes())
    }

    fn index(&mut self, entries: &[(&str, &str, &str)]) -> String {
        let manifests: Vec<_> = entries
            .iter()
            .map(|(digest, os, arch)| {
                serde_json::json!({"mediaType": OCI_MANIFEST, "digest": digest, "size": 1,
                    "platform": {"os": os, "architecture": arch}})
            })
            .collect();
        let index =
            serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests});
        self.put(OCI_INDEX, index.to_string().into_bytes())
    }

    fn tag(&mut self, tag: &str, digest: &str) {
        self.tags.retain(|(t, _)| t != tag);
        self.tags.push((tag.to_string(), digest.to_string()));
    }
}

fn serve(store: Arc<Mutex<Store>>) -> impl Fn(TestRequest) -> BoxFuture<'static, TestResponse> {
    move |req: TestRequest| {
        let store = store.clone();
        Box::pin(async move {
            let store = store.lock().unwrap();
            let path = req.path().to_string();
            if store.limited && path != "/v2/team/app/tags/list" {
                return TestResponse::new(429).header("Retry-After", "0");
            }
            if path == "/v2/team/app/tags/list" {
                let tags: Vec<&str> = store.tags.iter().map(|(t, _)| t.as_str()).collect();
                return TestResponse::new(200)
                    .json(&serde_json::json!({"name": "team/app", "tags": tags}).to_string());
            }
            let not_found = TestResponse::new(404)
                .json(r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#);
            let (kind, reference) = match path.strip_prefix("/v2/team/app/") {
                Some(rest) => match rest.split_once('/') {
                    Some((kind, reference)) => (kind.to_string(), reference.to_string()),
                    None => return not_found,
                },
                None => return not_found,
            };
            let digest = if reference.starts_with("sha256:") {
                reference
            } else {
                match store.tags.iter().find(|(t, _)| *t == reference) {
                    Some((_, d)) => d.clone(),
                    None => return not_found,
                }
            };
            let Some((media_type, bytes)) = store.content.get(&digest) else {
                return not_found;
            };
            let mut response = TestResponse::new(200)
                .header("Content-Type", media_type)
                .header("Docker-Content-Digest", &digest);
            if kind == "manifests" || kind == "blobs" {
                response.body = bytes.clone();
            }
            response
        })
    }
}

async fn setup() -> (Arc<Mutex<Store>>, TestServer, RegistryClient, RepositoryRef) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let store = Arc::new(Mutex::new(Store::default()));
    let server = TestServer::start(serve(store.clone())).await;
    let mut registries = HashMap::new();
    registries.insert(
        server.host(),
        RegistrySettings {
            insecure: true,
            rate_per_second: Some(10_000.0),
            burst: Some(10_000),
            metadata_budget: Some(2),
            ..RegistrySettings::default()
        },
    );
    let client = RegistryClient::build(
        RegistryOptions {
            timeout: Duration::from_secs(10),
            ..RegistryOptions::default()
        },
        registries,
        Tuning::default(),
    )
    .unwrap();
    let repo = RepositoryRef::parse(&format!("{}/team/app", server.host())).unwrap();
    (store, server, client, repo)
}

fn ts(s: &str) -> jiff::Timestamp {
    s.parse().unwrap()
}

#[tokio::test]
async fn image_created_reads_the_config_once_per_digest() {
    let (store, server, client, repo) = setup().await;
    let anon = Credentials::Anonymous;
    {
        let mut s = store.lock().unwrap();
        let jan = s.image(Some("2024-01-01T00:00:00Z"), "amd64");
        s.tag("jan", &jan);
        s.tag("jan-again", &jan);
        let arm = s.image(Some("2020-01-01T00:00:00Z"), "arm64");
        let amd = s.image(Some("2025-06-01T12:00:00.5Z"), "amd64");
        let multi = s.index(&[(&arm, "linux", "arm64"), (&amd, "linux", "amd64")]);
        s.tag("multi", &multi);
        let epoch = s.image(Some("1970-01-01T00:00:00Z"), "amd64");
        s.tag("reproducible", &epoch);
        let none = s.image(None, "amd64");
        s.tag("undated", &none);
    }

    assert_eq!(
        client.image_created(&repo, "jan", &anon).await.unwrap(),
        Some(ts("2024-01-01T00:00:00Z"))
    );
    assert_eq!(client.metadata_fetches(), 2); // manifest + config
    // Same tag again, and another tag of the same image: one HEAD each, no GETs.
    client.image_created(&repo, "jan", &anon).await.unwrap();
    client
        .image_created(&repo, "jan-again", &anon)
        .await
        .unwrap();
    assert_eq!(client.metadata_fetches(), 2);

    // A multi-platform index: linux/amd64's time, not the first entry's.
    assert_eq!(
        client.image_created(&repo, "multi", &anon).await.unwrap(),
        Some(ts("2025-06-01T12:00:00.5Z"))
    );
    assert_eq!(client.metadata_fetches(), 5); // index + manifest + config

    assert_eq!(
        client
            .image_created(&repo, "reproducible", &anon)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        client.image_created(&repo, "undated", &anon).await.unwrap(),
        None
    );
    assert_eq!(
        client.image_created(&repo, "missing", &anon).await.unwrap(),
        None
    );

    // By digest: no HEAD needed once cached.
    let digest = client
        .manifest_digest(&repo, "jan", &anon)
        .await
        .unwrap()
        .unwrap();
    let before = server.requests().len();
    assert_eq!(
        client.image_created(&repo, &digest, &anon).await.unwrap(),
        Some(ts("2024-01-01T00:00:00Z"))
    );
    assert_eq!(server.requests().len(), before);
}

#[tokio::test]
async fn content_that_does_not_match_its_digest_is_refused() {
    let (store, _server, client, repo) = setup().await;
    {
        let mut s = store.lock().unwrap();
        let real = s.image(Some("2024-01-01T00:00:00Z"), "amd64");
        // Serve other bytes under the real manifest's digest.
        let other = br#"{"schemaVersion":2,"config":{"digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000","size":2}}"#.to_vec();
        s.content.insert(real.clone(), (OCI_MANIFEST.into(), other));
        s.tag("tampered", &real);
    }
    let err = client
        .image_created(&repo, "tampered", &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::Protocol(m) if m.contains("does not match")),
        "{err}"
    );
}

#[tokio::test]
async fn listing_with_times_respects_the_budget_and_prefers_new_tags() {
    let (store, server, client, repo) = setup().await;
    let anon = Credentials::Anonymous;
    {
        let mut s = store.lock().unwrap();
        for (tag, created) in [
            ("a", "2024-01-01T00:00:00Z"),
            ("b", "2024-03-01T00:00:00Z"),
            ("c", "2024-02-01T00:00:00Z"),
        ] {
            let d = s.image(Some(created), "amd64");
            s.tag(tag, &d);
        }
        // A manifest whose config blob is missing: its lookup fails, the listing goes on.
        let broken = s.manifest_for_config(&digest_of(b"gone"), 4);
        s.tag("d-broken", &broken);
    }
    let times = |infos: &[TagInfo]| -> Vec<(String, Option<String>)> {
        infos
            .iter()
            .map(|i| (i.tag.clone(), i.pushed_at.map(|t| t.to_string())))
            .collect()
    };
    let some = |s: &str| Some(s.to_string());

    // Budget 2 (the host's setting): the end of the list first.
    let first = client
        .list_tags_with_times(&repo, &anon, None)
        .await
        .unwrap();
    assert_eq!((first.looked_up, first.pending), (2, 2));
    assert_eq!(
        times(&first.tags),
        vec![
            ("a".into(), None),
            ("b".into(), None),
            ("c".into(), some("2024-02-01T00:00:00Z")),
            ("d-broken".into(), None),
        ]
    );
    // A tag pushed now jumps the queue.
    {
        let mut s = store.lock().unwrap();
        let d = s.image(Some("2024-04-01T00:00:00Z"), "amd64");
        s.tag("0-new", &d);
    }
    let second = client
        .list_tags_with_times(&repo, &anon, None)
        .await
        .unwrap();
    assert_eq!((second.looked_up, second.pending), (2, 1));
    assert_eq!(
        times(&second.tags),
        vec![
            ("a".into(), None),
            ("b".into(), some("2024-03-01T00:00:00Z")),
            ("c".into(), some("2024-02-01T00:00:00Z")),
            ("d-broken".into(), None),
            ("0-new".into(), some("2024-04-01T00:00:00Z")),
        ]
    );
    // An explicit budget overrides the host's; the last unknown tag is filled.
    let third = client.list_with_created(&repo, &anon, 10).await.unwrap();
    assert_eq!(third[0].pushed_at, Some(ts("2024-01-01T00:00:00Z")));
    // Everything is known now: no lookups at all, only the listing.
    let fetches = client.metadata_fetches();
    let requests = server.requests().len();
    let fourth = client
        .list_tags_with_times(&repo, &anon, Some(10))
        .await
        .unwrap();
    assert_eq!((fourth.looked_up, fourth.pending), (0, 0));
    assert_eq!(client.metadata_fetches(), fetches);
    assert_eq!(server.requests().len(), requests + 1);
    assert_eq!(
        times(&fourth.tags),
        times(&client.list_with_created(&repo, &anon, 0).await.unwrap())
    );

    // The trait, as the controller calls it for Newest.
    let source: Arc<dyn TagSource> = Arc::new(client.clone());
    let infos = source.list_with_times(&repo, &anon, None).await.unwrap();
    assert_eq!(times(&infos), times(&fourth.tags));
}

#[tokio::test]
async fn budget_zero_and_concurrent_scans_share_lookups() {
    let (store, _server, client, repo) = setup().await;
    let anon = Credentials::Anonymous;
    {
        let mut s = store.lock().unwrap();
        for i in 0..6 {
            let d = s.image(Some(&format!("2024-01-0{}T00:00:00Z", i + 1)), "amd64");
            s.tag(&format!("t{i}"), &d);
        }
    }
    let none = client
        .list_tags_with_times(&repo, &anon, Some(0))
        .await
        .unwrap();
    assert_eq!((none.looked_up, none.pending), (0, 6));
    assert!(none.tags.iter().all(|t| t.pushed_at.is_none()));

    // Two scans at once: the second waits for the first and does the next tags, so no
    // image is read twice.
    let (a, b) = futures::join!(
        client.list_tags_with_times(&repo, &anon, Some(3)),
        client.list_tags_with_times(&repo, &anon, Some(3)),
    );
    assert_eq!(a.unwrap().looked_up + b.unwrap().looked_up, 6);
    assert_eq!(client.metadata_fetches(), 12);
}

#[tokio::test]
async fn a_rate_limit_stops_the_lookups_and_keeps_what_was_found() {
    let (store, _server, client, repo) = setup().await;
    let anon = Credentials::Anonymous;
    {
        let mut s = store.lock().unwrap();
        for i in 0..3 {
            let d = s.image(Some(&format!("2024-01-0{}T00:00:00Z", i + 1)), "amd64");
            s.tag(&format!("t{i}"), &d);
        }
    }
    let first = client
        .list_tags_with_times(&repo, &anon, Some(1))
        .await
        .unwrap();
    assert_eq!(first.looked_up, 1);
    store.lock().unwrap().limited = true;
    let err = client
        .list_tags_with_times(&repo, &anon, Some(5))
        .await
        .unwrap_err();
    assert_eq!(err.category(), "rate_limited");
    // The time found before is still there.
    store.lock().unwrap().limited = false;
    let infos = client.list_with_created(&repo, &anon, 0).await.unwrap();
    let known: Vec<&str> = infos
        .iter()
        .filter(|i| i.pushed_at.is_some())
        .map(|i| i.tag.as_str())
        .collect();
    assert_eq!(known, vec!["t2"]);
}

#[tokio::test]
async fn image_platforms_reads_each_manifest_and_config_once_per_digest() {
    let (store, _server, client, repo) = setup().await;
    let anon = Credentials::Anonymous;
    let (single, multi) = {
        let mut s = store.lock().unwrap();
        let amd = s.image(Some("2025-01-01T00:00:00Z"), "amd64");
        let arm = s.image(Some("2025-01-01T00:00:00Z"), "arm64");
        let multi = s.index(&[
            (&amd, "linux", "amd64"),
            (&arm, "linux", "arm64"),
            (&amd, "unknown", "unknown"),
        ]);
        (amd, multi)
    };
    let names =
        |p: &[imagewatch_engine::platforms::Platform]| imagewatch_engine::platforms::list(p);

    // An index: its entries, the attestation left out; one GET, no blob.
    let provided = client.image_platforms(&repo, &multi, &anon).await.unwrap();
    assert_eq!(names(&provided.unwrap()), "linux/amd64, linux/arm64");
    assert_eq!(client.metadata_fetches(), 1);
    // A single image: its manifest, then its config blob.
    let provided = client.image_platforms(&repo, &single, &anon).await.unwrap();
    assert_eq!(names(&provided.unwrap()), "linux/amd64");
    assert_eq!(client.metadata_fetches(), 3);
    // Both again: remembered by digest, no request.
    client.image_platforms(&repo, &multi, &anon).await.unwrap();
    client.image_platforms(&repo, &single, &anon).await.unwrap();
    assert_eq!(client.metadata_fetches(), 3);
    // A digest the registry does not have.
    let absent = format!("sha256:{}", "0".repeat(64));
    assert_eq!(
        client.image_platforms(&repo, &absent, &anon).await.unwrap(),
        None
    );
}
