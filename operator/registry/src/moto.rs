//! The moto server of the tests (ECR, SQS and EventBridge emulation), shared by the ECR
//! tests here and the SQS consumer tests of the binary (feature `test-support`).
//!
//! moto comes from `$IMAGEWATCH_MOTO_URL`, or is started once per test process with
//! `e2e/scripts/moto.sh up` (which reuses a running instance). moto keeps its state in
//! memory and is shared, so every test uses names with a unique suffix.

use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_ecr::config::{Credentials as AwsCredentials, Region, SharedCredentialsProvider};

/// The account moto uses for everything.
pub const MOTO_ACCOUNT: &str = "123456789012";
pub const MOTO_REGION: &str = "us-east-1";

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("workspace root")
        .to_path_buf()
}

/// Base URL of the moto server, starting it on first use when the environment names none.
pub fn moto_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("IMAGEWATCH_MOTO_URL")
            && !url.is_empty()
        {
            return url.trim_end_matches('/').to_string();
        }
        let script = repo_root().join("e2e/scripts/moto.sh");
        let output = Command::new(&script)
            .arg("up")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{} up failed:\n{stdout}\n{}",
            script.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
            .lines()
            .rev()
            .find_map(|line| line.trim().strip_prefix("export IMAGEWATCH_MOTO_URL="))
            .map(|url| {
                url.trim_matches(['"', '\''])
                    .trim_end_matches('/')
                    .to_string()
            })
            .unwrap_or_else(|| panic!("moto.sh up printed no IMAGEWATCH_MOTO_URL:\n{stdout}"))
    })
}

/// An `SdkConfig` that reads nothing from the environment: static dummy credentials,
/// us-east-1, every request sent to `endpoint`.
pub fn test_sdk_config(endpoint: &str) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .http_client(crate::ecr::aws_http_client())
        .region(Region::new(MOTO_REGION))
        .credentials_provider(SharedCredentialsProvider::new(AwsCredentials::new(
            "test",
            "test",
            None,
            None,
            "imagewatch-tests",
        )))
        .endpoint_url(endpoint)
        .build()
}

/// A name unique across tests and test processes sharing one moto: `<prefix>-<hex>`.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{prefix}-{:x}{:x}{n:x}",
        std::process::id(),
        nanos & 0xff_ffff_ffff
    )
}

/// Runs `moto_helpers.py` (through `moto.sh helpers`) against the test moto and returns its
/// trimmed stdout.
pub async fn moto_helper(args: &[&str]) -> String {
    let script = repo_root().join("e2e/scripts/moto.sh");
    let output = tokio::process::Command::new(&script)
        .arg("helpers")
        .arg("--endpoint")
        .arg(moto_url())
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        output.status.success(),
        "moto helper {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// Polls `check` until it returns `Some`, failing the test after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
