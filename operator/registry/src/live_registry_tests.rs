//! Tests of the scan step against a real registry: CNCF distribution (`docker-registry`)
//! started on a free loopback port with htpasswd auth, filled with `skopeo`.
//!
//! Needs `docker-registry`, `skopeo`, `htpasswd` and `gzip` on PATH: the test tier installs
//! them, so a missing one fails the test and names it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest as _, Sha256};

use super::*;

const USER: &str = "user";
const PASS: &str = "pass";

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// A directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path =
            std::env::temp_dir().join(format!("imagewatch-{label}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The registry process, killed on drop so a failing test leaves nothing running.
struct RegistryProcess {
    child: Child,
    host: String,
    log: PathBuf,
}

impl Drop for RegistryProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn start_registry(dir: &Path) -> RegistryProcess {
    let htpasswd = Command::new("htpasswd")
        .args(["-Bbn", USER, PASS])
        .output()
        .unwrap();
    assert!(htpasswd.status.success(), "htpasswd failed");
    std::fs::write(dir.join("htpasswd"), &htpasswd.stdout).unwrap();
    std::fs::create_dir_all(dir.join("storage")).unwrap();

    let probe = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    // The port is free when picked but could be taken before the registry binds it; a few
    // attempts make that race harmless.
    for _ in 0..3 {
        let port = free_port();
        let host = format!("127.0.0.1:{port}");
        let config = format!(
            "version: 0.1\n\
             log:\n  level: warn\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n\
             http:\n  addr: {host}\n  secret: imagewatch-test-secret\n\
             auth:\n  htpasswd:\n    realm: imagewatch-test\n    path: {htpasswd}\n",
            storage = dir.join("storage").display(),
            htpasswd = dir.join("htpasswd").display(),
        );
        let config_path = dir.join("config.yml");
        std::fs::write(&config_path, config).unwrap();
        let log = dir.join(format!("registry-{port}.log"));
        let log_file = std::fs::File::create(&log).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap();
        let mut process = RegistryProcess { child, host, log };

        // Ready when /v2/ answers 401 (auth is on); poll instead of guessing a delay.
        let url = format!("http://{}/v2/", process.host);
        for _ in 0..400 {
            if process.child.try_wait().unwrap().is_some() {
                break;
            }
            if let Ok(response) = probe.get(&url).send().await
                && response.status() == reqwest::StatusCode::UNAUTHORIZED
            {
                return process;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!(
            "registry on {} did not become ready:\n{}",
            process.host,
            std::fs::read_to_string(&process.log).unwrap_or_default()
        );
    }
    panic!("could not start docker-registry");
}

fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Writes an OCI image layout with one image tagged `tag`: one empty gzipped tar layer and
/// a config naming `architecture`. Returns the manifest digest.
fn write_oci_layout(dir: &Path, tag: &str, architecture: &str) -> String {
    write_image_layout(dir, tag, architecture, None)
}

/// [`write_oci_layout`] with a `created` time in the config.
fn write_image_layout(dir: &Path, tag: &str, architecture: &str, created: Option<&str>) -> String {
    let (digest, size) = put_image(dir, architecture, created);
    write_index_json(
        dir,
        "application/vnd.oci.image.manifest.v1+json",
        &digest,
        size,
        tag,
    );
    digest
}

/// A layout whose `tag` is a multi-platform image index of `images` (architecture, created).
/// Returns the index digest.
fn write_index_layout(dir: &Path, tag: &str, images: &[(&str, &str)]) -> String {
    let manifests: Vec<serde_json::Value> = images
        .iter()
        .map(|(architecture, created)| {
            let (digest, size) = put_image(dir, architecture, Some(created));
            serde_json::json!({
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest,
                "size": size,
                "platform": {"os": "linux", "architecture": architecture},
            })
        })
        .collect();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    })
    .to_string();
    let digest = put_blob(dir, index.as_bytes());
    write_index_json(
        dir,
        "application/vnd.oci.image.index.v1+json",
        &digest,
        index.len(),
        tag,
    );
    digest
}

fn put_blob(dir: &Path, bytes: &[u8]) -> String {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let digest = sha256_digest(bytes);
    let hex = digest.trim_start_matches("sha256:");
    std::fs::write(blobs.join(hex), bytes).unwrap();
    digest
}

/// Writes one image's blobs into the layout and returns its manifest digest and size.
fn put_image(dir: &Path, architecture: &str, created: Option<&str>) -> (String, usize) {
    std::fs::create_dir_all(dir).unwrap();
    // An empty tar archive is two zero blocks.
    let tar = vec![0u8; 1024];
    let tar_path = dir.join("layer.tar");
    std::fs::write(&tar_path, &tar).unwrap();
    let gzip = Command::new("gzip")
        .arg("-n")
        .arg("-c")
        .arg(&tar_path)
        .output()
        .unwrap();
    assert!(gzip.status.success(), "gzip failed");
    std::fs::remove_file(&tar_path).unwrap();
    let layer = gzip.stdout;
    let layer_digest = put_blob(dir, &layer);

    let mut config = serde_json::json!({
        "architecture": architecture,
        "os": "linux",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": [sha256_digest(&tar)]},
    });
    if let Some(created) = created {
        config["created"] = created.into();
    }
    let config = config.to_string();
    let config_digest = put_blob(dir, config.as_bytes());

    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": layer_digest,
            "size": layer.len(),
        }],
    })
    .to_string();
    (put_blob(dir, manifest.as_bytes()), manifest.len())
}

fn write_index_json(dir: &Path, media_type: &str, digest: &str, size: usize, tag: &str) {
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": media_type,
            "digest": digest,
            "size": size,
            "annotations": {"org.opencontainers.image.ref.name": tag},
        }],
    })
    .to_string();
    std::fs::write(dir.join("index.json"), index).unwrap();
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
}

/// Pushes `layout:src_tag` to `host/repo:dest_tag` and returns the digest skopeo reports.
async fn push(
    layout: &Path,
    src_tag: &str,
    host: &str,
    repo: &str,
    dest_tag: &str,
    work: &Path,
) -> String {
    let digest_file = work.join(format!("digest-{dest_tag}"));
    let mut command = tokio::process::Command::new("skopeo");
    command
        .arg("--insecure-policy")
        .arg("copy")
        .arg("--quiet")
        .arg("--dest-creds")
        .arg(format!("{USER}:{PASS}"))
        .arg("--dest-tls-verify=false")
        .arg("--digestfile")
        .arg(&digest_file)
        // Multi-platform indexes are pushed whole (single images are unaffected).
        .arg("--multi-arch=all")
        .arg(format!("oci:{}:{src_tag}", layout.display()))
        .arg(format!("docker://{host}/{repo}:{dest_tag}"))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("skopeo timed out")
        .unwrap();
    assert!(
        output.status.success(),
        "skopeo copy failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read_to_string(digest_file)
        .unwrap()
        .trim()
        .to_string()
}

/// Fails the test, naming them, when any of the tools it runs is not on PATH: the test
/// tier installs them, so a missing one is a broken machine, not a reason to pass.
fn require_tools() {
    let missing: Vec<&str> = ["docker-registry", "skopeo", "htpasswd", "gzip"]
        .into_iter()
        .filter(|p| !on_path(p))
        .collect();
    assert!(
        missing.is_empty(),
        "the real-registry test needs these tools on PATH, missing: {}",
        missing.join(", ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_registry_tags_digests_and_auth() {
    require_tools();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let work = TempDir::new("registry-test");
    let registry = start_registry(&work.0).await;
    let host = registry.host.clone();

    let layout_a = work.0.join("layout-a");
    let layout_b = work.0.join("layout-b");
    let manifest_a = write_oci_layout(&layout_a, "v1", "amd64");
    let manifest_b = write_oci_layout(&layout_b, "v1", "arm64");
    let pushed_v1 = push(&layout_a, "v1", &host, "team/app", "v1", &work.0).await;
    let pushed_v2 = push(&layout_a, "v1", &host, "team/app", "v2", &work.0).await;
    let pushed_v3 = push(&layout_b, "v1", &host, "team/app", "v3", &work.0).await;
    assert_eq!(pushed_v1, pushed_v2);
    assert_ne!(pushed_v1, pushed_v3);
    // skopeo pushes the layout's manifest unchanged, so the registry must report its hash.
    assert_eq!(pushed_v1, manifest_a);
    assert_eq!(pushed_v3, manifest_b);

    let client = RegistryClient::with_paging(
        RegistryOptions {
            insecure_hosts: vec![host.clone()],
            timeout: Duration::from_secs(10),
            ..RegistryOptions::default()
        },
        TagPaging {
            page_size: Some(1),
            ..TagPaging::default()
        },
    )
    .unwrap();
    let repo = RepositoryRef::parse(&format!("{host}/team/app")).unwrap();
    let good = Credentials::basic(USER, PASS);
    let wrong = Credentials::basic(USER, "wrong");

    // Distribution 2.x ignores `n` on tag lists (tag pagination arrived in v3), so this
    // checks that asking for one tag per page still yields every tag from a registry that
    // does not paginate; Link following is covered by `protocol_tests`.
    let (mut tags, pages) = client.list_tags_paged(&repo, &good).await.unwrap();
    tags.sort();
    assert_eq!(tags, vec!["v1", "v2", "v3"]);
    assert!((1..=3).contains(&pages), "{pages} page(s)");

    let source: &dyn TagSource = &client;
    let infos = source.list(&repo, &good).await.unwrap();
    assert_eq!(infos.len(), 3);
    assert!(
        infos
            .iter()
            .all(|i| i.digest.is_none() && i.pushed_at.is_none())
    );

    assert_eq!(
        client.manifest_digest(&repo, "v1", &good).await.unwrap(),
        Some(pushed_v1.clone())
    );
    assert_eq!(
        client.manifest_digest(&repo, "v3", &good).await.unwrap(),
        Some(pushed_v3.clone())
    );
    assert_eq!(
        client
            .manifest_digest(&repo, &pushed_v3, &good)
            .await
            .unwrap(),
        Some(pushed_v3)
    );
    assert_eq!(
        client
            .manifest_digest(&repo, "missing", &good)
            .await
            .unwrap(),
        None
    );

    // Wrong password and no credentials: the registry's own message reaches the error.
    for creds in [&wrong, &Credentials::Anonymous] {
        match client.list_tags(&repo, creds).await {
            Err(RegistryError::Unauthorized { registry, message }) => {
                assert_eq!(registry, host);
                assert!(message.contains("authentication required"), "{message}");
            }
            other => panic!("expected Unauthorized, got {other:?}"),
        }
    }
    // HEAD has no body; still Unauthorized, never "not found".
    let err = client
        .manifest_digest(&repo, "v1", &wrong)
        .await
        .unwrap_err();
    assert_eq!(err.category(), "unauthorized", "{err}");

    let unknown = RepositoryRef::parse(&format!("{host}/team/nothing")).unwrap();
    match client.list_tags(&unknown, &good).await {
        Err(RegistryError::NotFound { message, .. }) => {
            assert!(message.contains("NAME_UNKNOWN"), "{message}");
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    // A Basic-auth registry needs no tokens.
    assert_eq!(client.token_fetches(), 0);
    drop(registry);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_registry_created_times_in_newest_order_within_the_budget() {
    require_tools();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let work = TempDir::new("registry-created");
    let registry = start_registry(&work.0).await;
    let host = registry.host.clone();

    // Pushed in this order, but created out of order; v4 is multi-platform and dated by its
    // linux/amd64 image.
    let images = [
        ("v1", "2024-01-01T00:00:00Z"),
        ("v2", "2024-03-01T00:00:00Z"),
        ("v3", "2024-02-01T10:20:30.123456789Z"),
    ];
    for (tag, created) in images {
        let layout = work.0.join(format!("layout-{tag}"));
        write_image_layout(&layout, tag, "amd64", Some(created));
        push(&layout, tag, &host, "team/app", tag, &work.0).await;
    }
    let layout = work.0.join("layout-v4");
    let index = write_index_layout(
        &layout,
        "v4",
        &[
            ("arm64", "2020-01-01T00:00:00Z"),
            ("amd64", "2025-01-01T00:00:00Z"),
        ],
    );
    let pushed = push(&layout, "v4", &host, "team/app", "v4", &work.0).await;
    assert_eq!(pushed, index, "the index must be pushed as it is");

    let mut registries = std::collections::HashMap::new();
    registries.insert(
        host.clone(),
        RegistrySettings {
            insecure: true,
            metadata_budget: Some(2),
            ..RegistrySettings::default()
        },
    );
    let client = RegistryClient::with_registries(
        RegistryOptions {
            timeout: Duration::from_secs(10),
            ..RegistryOptions::default()
        },
        registries,
    )
    .unwrap();
    let repo = RepositoryRef::parse(&format!("{host}/team/app")).unwrap();
    let good = Credentials::basic(USER, PASS);
    let ts = |s: &str| s.parse::<jiff::Timestamp>().unwrap();

    let expected = |tag: &str| match tag {
        "v1" => ts("2024-01-01T00:00:00Z"),
        "v2" => ts("2024-03-01T00:00:00Z"),
        "v3" => ts("2024-02-01T10:20:30.123456789Z"),
        "v4" => ts("2025-01-01T00:00:00Z"),
        other => panic!("unexpected tag {other}"),
    };

    // The budget of 2 covers the end of the listing first (distribution lists tags in
    // storage order, not sorted, so the test reads the order it gets).
    let first = client
        .list_tags_with_times(&repo, &good, None)
        .await
        .unwrap();
    assert_eq!((first.looked_up, first.pending), (2, 2));
    assert_eq!(first.tags.len(), 4);
    for (i, info) in first.tags.iter().enumerate() {
        let want = (i >= 2).then(|| expected(&info.tag));
        assert_eq!(info.pushed_at, want, "{:?}", first.tags);
    }
    // Each image costs a manifest and a config read; v4 also its index.
    let per_tag = |tag: &str| if tag == "v4" { 3 } else { 2 };
    let fetched: u64 = first.tags[2..].iter().map(|t| per_tag(&t.tag)).sum();
    assert_eq!(client.metadata_fetches(), fetched);

    let second = client
        .list_tags_with_times(&repo, &good, None)
        .await
        .unwrap();
    assert_eq!((second.looked_up, second.pending), (2, 0));
    let mut newest_first = second.tags.clone();
    newest_first.sort_by_key(|t| std::cmp::Reverse(t.pushed_at));
    let order: Vec<&str> = newest_first.iter().map(|t| t.tag.as_str()).collect();
    assert_eq!(order, vec!["v4", "v2", "v3", "v1"]);
    assert_eq!(newest_first[1].pushed_at, Some(ts("2024-03-01T00:00:00Z")));
    assert_eq!(newest_first[3].pushed_at, Some(ts("2024-01-01T00:00:00Z")));
    assert_eq!(client.metadata_fetches(), 9);

    // Known tags cost nothing more; single lookups hit the digest cache.
    let third = client.list_with_created(&repo, &good, 50).await.unwrap();
    assert_eq!(third, second.tags);
    assert_eq!(
        client.image_created(&repo, "v4", &good).await.unwrap(),
        Some(ts("2025-01-01T00:00:00Z"))
    );
    assert_eq!(
        client.image_created(&repo, &index, &good).await.unwrap(),
        Some(ts("2025-01-01T00:00:00Z"))
    );
    assert_eq!(client.metadata_fetches(), 9);

    // Wrong credentials fail the listing rather than leaving tags silently undated.
    let err = client
        .list_tags_with_times(&repo, &Credentials::basic(USER, "wrong"), Some(5))
        .await
        .unwrap_err();
    assert_eq!(err.category(), "unauthorized", "{err}");
    drop(registry);
}
