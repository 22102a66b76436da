//! Waiting on conditions with a deadline (never a fixed sleep).

use std::{future::Future, time::Duration};

/// Polls `check` until it returns `Some`, or fails after `timeout` with `what` and the last
/// observation.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_error = String::new();
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_error = format!("{e:#}"),
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "timed out after {timeout:?} waiting for {what} (last error: {last_error})"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
