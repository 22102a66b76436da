//! The receiver against a real CNCF distribution registry (the Debian `docker-registry`):
//! its `notifications.endpoints` point at our server with a Bearer token, `skopeo` pushes a
//! tiny OCI image and re-tags it, and the events must arrive on the sink.
//!
//! Needs `docker-registry`, `skopeo`, `htpasswd` and `python3` on PATH: the test tier
//! installs them, so a missing one fails the test and names it (a broken machine, not a
//! reason to pass).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::*;

const USER: &str = "u";
const PASS: &str = "p";
const TOKEN: &str = "registry-notify-token-4f1c";

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// Fails the test, naming them, when any of `tools` is not on PATH.
fn require_tools(tools: &[&str]) {
    let missing: Vec<&str> = tools.iter().copied().filter(|p| !on_path(p)).collect();
    assert!(
        missing.is_empty(),
        "the real-registry webhook test needs these tools on PATH, missing: {}",
        missing.join(", ")
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The registry process, killed on drop so a failing test leaves nothing running.
struct Registry {
    child: Child,
    host: String,
    log: PathBuf,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

async fn start_registry(dir: &Path, hook_url: &str) -> Registry {
    let htpasswd = Command::new("htpasswd")
        .args(["-Bbn", USER, PASS])
        .output()
        .unwrap();
    assert!(htpasswd.status.success(), "htpasswd failed");
    std::fs::write(dir.join("htpasswd"), &htpasswd.stdout).unwrap();
    std::fs::create_dir_all(dir.join("storage")).unwrap();
    let probe = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    // A port picked free can be taken before the registry binds it; retrying makes that
    // race harmless.
    for _ in 0..3 {
        let host = format!("127.0.0.1:{}", free_port());
        let config = format!(
            "version: 0.1\n\
             log:\n  level: info\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {storage}\n\
             http:\n  addr: {host}\n  secret: imagewatch-webhook-test\n\
             auth:\n  htpasswd:\n    realm: imagewatch-test\n    path: {htpasswd}\n\
             notifications:\n  endpoints:\n    - name: imagewatch\n      url: {hook_url}\n      \
             headers:\n        Authorization: [Bearer {TOKEN}]\n      \
             timeout: 2s\n      threshold: 3\n      backoff: 100ms\n",
            storage = dir.join("storage").display(),
            htpasswd = dir.join("htpasswd").display(),
        );
        let config_path = dir.join("config.yml");
        std::fs::write(&config_path, config).unwrap();
        let log = dir.join(format!("registry-{}.log", host.replace(':', "-")));
        let log_file = std::fs::File::create(&log).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap();
        let mut registry = Registry { child, host, log };
        // Ready when /v2/ answers 401 (auth is on).
        let url = format!("http://{}/v2/", registry.host);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if registry.child.try_wait().unwrap().is_some() {
                break;
            }
            if let Ok(response) = probe.get(&url).send().await
                && response.status() == reqwest::StatusCode::UNAUTHORIZED
            {
                return registry;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!(
            "registry on {} did not become ready:\n{}",
            registry.host,
            registry.log()
        );
    }
    panic!("could not start docker-registry");
}

/// Writes a one-layer OCI layout tagged `tag` with the project's e2e script; returns the
/// manifest digest it prints.
fn oci_layout(dir: &Path, tag: &str, content: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../e2e/scripts/oci_image.py");
    let output = Command::new("python3")
        .arg(&script)
        .arg(dir)
        .arg(tag)
        .arg(content)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "oci_image.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

async fn skopeo_copy(args: &[String]) {
    let mut command = tokio::process::Command::new("skopeo");
    command
        .arg("--insecure-policy")
        .arg("copy")
        .arg("--quiet")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("skopeo timed out")
        .unwrap();
    assert!(
        output.status.success(),
        "skopeo copy {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Receives events until one has `tag`, or fails after `timeout`; returns all received.
async fn wait_for_tag(
    events: &mut mpsc::Receiver<RegistryEvent>,
    tag: &str,
    timeout: Duration,
    registry: &Registry,
) -> Vec<RegistryEvent> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(event)) => {
                let done = event.tag.as_deref() == Some(tag);
                seen.push(event);
                if done {
                    return seen;
                }
            }
            Ok(None) => panic!("sink closed"),
            Err(_) => panic!(
                "no event for tag {tag} within {timeout:?}; got {seen:?}\nregistry log:\n{}",
                registry.log()
            ),
        }
    }
}

/// Waits until `condition` holds, polling, or fails after `timeout`.
async fn wait_until(what: &str, timeout: Duration, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_distribution_notifications_reach_the_sink() {
    require_tools(&["docker-registry", "skopeo", "htpasswd", "python3"]);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let work = tempfile::tempdir().unwrap();

    // Our receiver, on a loopback port, with only distribution enabled.
    let (sink, mut events) = mpsc::channel(256);
    let state = WebhookState::new(
        WebhookSecrets::none().with(Provider::Distribution, TOKEN),
        sink,
    );
    let counters = state.counters();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!(
        "http://{}/hooks/distribution",
        listener.local_addr().unwrap()
    );
    let (_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve_listener(listener, state, async move {
        let _ = stopped.await;
    }));

    let registry = start_registry(work.path(), &hook_url).await;
    let host = registry.host.clone();

    let layout = work.path().join("layout");
    let digest = oci_layout(&layout, "v1", "imagewatch webhook v1");
    skopeo_copy(&[
        "--dest-creds".into(),
        format!("{USER}:{PASS}"),
        "--dest-tls-verify=false".into(),
        format!("oci:{}:v1", layout.display()),
        format!("docker://{host}/team/app:v1"),
    ])
    .await;

    let seen = wait_for_tag(&mut events, "v1", Duration::from_secs(30), &registry).await;
    let pushed = seen.last().unwrap();
    // The real registry stamps its events; the time is within the test's run.
    let at = pushed.at.expect("the registry's event timestamp");
    assert!(at <= jiff::Timestamp::now(), "{at}");
    assert_eq!(
        pushed,
        &RegistryEvent {
            registry: host.clone(),
            repository: "team/app".into(),
            tag: Some("v1".into()),
            digest: Some(digest.clone()),
            source: "distribution",
            at: Some(at),
        }
    );
    // Blob uploads (config, layer) were notified too, and ignored: nothing but the manifest
    // reached the sink.
    let distribution = counters.provider(Provider::Distribution);
    wait_until("blob pushes to be ignored", Duration::from_secs(30), || {
        distribution.snapshot().ignored >= 2
    })
    .await;
    assert!(
        seen.iter()
            .all(|e| e.digest.as_deref() == Some(digest.as_str())),
        "only manifest pushes may be forwarded: {seen:?}"
    );
    assert_eq!(distribution.snapshot().rejected_auth, 0);

    // Re-tag: the same manifest under a new tag arrives as a push with the new tag.
    skopeo_copy(&[
        "--src-creds".into(),
        format!("{USER}:{PASS}"),
        "--src-tls-verify=false".into(),
        "--dest-creds".into(),
        format!("{USER}:{PASS}"),
        "--dest-tls-verify=false".into(),
        format!("docker://{host}/team/app:v1"),
        format!("docker://{host}/team/app:v2"),
    ])
    .await;
    let seen = wait_for_tag(&mut events, "v2", Duration::from_secs(30), &registry).await;
    let retagged = seen.last().unwrap();
    assert_eq!(retagged.registry, host);
    assert_eq!(retagged.repository, "team/app");
    assert_eq!(retagged.digest.as_deref(), Some(digest.as_str()));
    assert!(
        seen.iter()
            .all(|e| e.digest.as_deref() == Some(digest.as_str())),
        "{seen:?}"
    );
    let snapshot = distribution.snapshot();
    assert_eq!((snapshot.malformed, snapshot.dropped), (0, 0));
}
