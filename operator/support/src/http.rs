//! The one place the operator's HTTP clients are built: registries, forges, the GitHub App
//! token endpoint, notifications and peer forwarding all start from [`builder`], so every
//! outgoing request has the same TLS provider (rustls on ring), user agent and timeouts.
//! A caller needing more (the registry's extra CAs and fixed resolutions) adds to the
//! builder it gets.

use std::time::Duration;

/// `imagewatch/<version>`, the user agent of every request.
pub const USER_AGENT: &str = concat!("imagewatch/", env!("CARGO_PKG_VERSION"));

/// The longest wait for a connection, whatever the request's timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client builder with the operator's TLS provider, user agent, `timeout` for a whole
/// request and at most [`CONNECT_TIMEOUT`] to connect.
pub fn builder(timeout: Duration) -> reqwest::ClientBuilder {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer is fine: some provider is then in place.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .timeout(timeout)
        .connect_timeout(timeout.min(CONNECT_TIMEOUT))
}

/// A client of [`builder`]; the error names what it was for.
pub fn client(purpose: &str, timeout: Duration) -> Result<reqwest::Client, String> {
    builder(timeout)
        .build()
        .map_err(|e| format!("cannot build the {purpose} HTTP client: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_builds_with_the_providers_installed() {
        assert!(client("test", Duration::from_secs(1)).is_ok());
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
