//! Errors of the registry scan step, and parsing of the error bodies registries send.
//!
//! Every failure while reading tags or digests ends up as a [`RegistryError`]. The
//! registry's own explanation (the OCI `{"errors":[{"code","message"}]}` body, or the
//! token server's `details`/`error_description`) is carried in the `message` so that the
//! status condition shown to users says *why* the registry refused, not only the HTTP status.

use std::time::Duration;

/// A failure while talking to a container registry (or while preparing to).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The registry (or its token server) refused the credentials, or none were given and
    /// the repository needs some. Covers HTTP 401 and 403.
    #[error("registry {registry} denied access: {message}")]
    Unauthorized { registry: String, message: String },

    /// The repository does not exist (or is hidden from these credentials, which many
    /// registries report the same way).
    #[error("repository {registry}/{repository} not found: {message}")]
    NotFound {
        registry: String,
        repository: String,
        message: String,
    },

    /// HTTP 429. `retry_after` comes from the `Retry-After` header when the registry sent one.
    #[error("registry {registry} is rate limiting requests{}: {message}", retry_hint(.retry_after))]
    RateLimited {
        registry: String,
        retry_after: Option<Duration>,
        message: String,
    },

    /// Any other unexpected HTTP status (5xx, or 4xx not covered above).
    #[error("registry {registry} answered HTTP {status}: {message}")]
    Server {
        registry: String,
        status: u16,
        message: String,
    },

    /// Connection, TLS, DNS or timeout failure before an HTTP answer arrived.
    #[error("cannot reach registry: {0}")]
    Transport(String),

    /// The image string, tag or digest given by the user is not valid.
    #[error("invalid image reference: {0}")]
    InvalidReference(String),

    /// The pull secret cannot be used (bad JSON, bad base64, unsupported entry kind).
    #[error("invalid registry credentials: {0}")]
    InvalidCredentials(String),

    /// The registry answered something that does not follow the distribution/token specs.
    #[error("registry protocol error: {0}")]
    Protocol(String),

    /// The operator's own registry settings are invalid (see
    /// [`parse_registries_config`](super::parse_registries_config)).
    #[error("invalid registry settings: {0}")]
    InvalidConfig(String),
}

impl RegistryError {
    /// A short, fixed label for metrics; never includes hosts or messages so that label
    /// cardinality stays bounded.
    pub fn category(&self) -> &'static str {
        match self {
            RegistryError::Unauthorized { .. } => "unauthorized",
            RegistryError::NotFound { .. } => "not_found",
            RegistryError::RateLimited { .. } => "rate_limited",
            RegistryError::Server { .. } => "server",
            RegistryError::Transport(_) => "transport",
            RegistryError::InvalidReference(_) => "invalid_reference",
            RegistryError::InvalidCredentials(_) => "invalid_credentials",
            RegistryError::Protocol(_) => "protocol",
            RegistryError::InvalidConfig(_) => "invalid_config",
        }
    }

    /// Whether retrying the same request later may succeed without any change by the user:
    /// the controller uses this to choose between a short requeue and waiting for a spec or
    /// secret change.
    pub fn is_transient(&self) -> bool {
        match self {
            RegistryError::RateLimited { .. } | RegistryError::Transport(_) => true,
            RegistryError::Server { status, .. } => *status >= 500 || *status == 408,
            _ => false,
        }
    }
}

fn retry_hint(retry_after: &Option<Duration>) -> String {
    match retry_after {
        Some(d) => format!(" (retry after {}s)", d.as_secs()),
        None => String::new(),
    }
}

/// Longest registry-provided text kept in an error. Registries sometimes answer with whole
/// HTML pages; conditions and logs should stay readable.
const MAX_MESSAGE_CHARS: usize = 400;

/// What could be learnt from an error response body.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ErrorBody {
    /// OCI error codes such as `NAME_UNKNOWN`, in the order the registry listed them.
    pub codes: Vec<String>,
    /// Human-readable summary, empty when the body held nothing usable.
    pub message: String,
}

/// Parses the body of a failed registry or token-server response.
///
/// Understands the OCI distribution error format, Docker Hub's token server
/// (`{"details": ...}`), OAuth-style `{"error", "error_description"}` and a bare
/// `{"message": ...}`; plain text is kept when it does not look like HTML.
pub fn parse_error_body(body: &[u8]) -> ErrorBody {
    let mut out = ErrorBody::default();
    if body.iter().all(u8::is_ascii_whitespace) {
        return out;
    }
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
        let mut parts = Vec::new();
        if let Some(errors) = value.get("errors").and_then(|e| e.as_array()) {
            for entry in errors {
                let code = entry.get("code").and_then(|c| c.as_str()).unwrap_or("");
                let message = entry.get("message").and_then(|m| m.as_str()).unwrap_or("");
                if !code.is_empty() {
                    out.codes.push(code.to_string());
                }
                match (code.is_empty(), message.is_empty()) {
                    (false, false) => parts.push(format!("{code}: {message}")),
                    (false, true) => parts.push(code.to_string()),
                    (true, false) => parts.push(message.to_string()),
                    (true, true) => {}
                }
            }
        }
        if parts.is_empty() {
            for key in ["details", "error_description", "message", "error"] {
                if let Some(text) = value.get(key).and_then(|v| v.as_str())
                    && !text.is_empty()
                {
                    parts.push(text.to_string());
                    break;
                }
            }
        }
        out.message = truncate(&parts.join("; "));
        return out;
    }
    if let Ok(text) = std::str::from_utf8(body) {
        let text = text.trim();
        // An HTML error page from a proxy says little and would swamp the condition message.
        if !text.starts_with('<') {
            let collapsed: Vec<&str> = text.split_whitespace().collect();
            out.message = truncate(&collapsed.join(" "));
        }
    }
    out
}

pub fn truncate(text: &str) -> String {
    if text.chars().count() <= MAX_MESSAGE_CHARS {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(MAX_MESSAGE_CHARS).collect();
    cut.push('…');
    cut
}

/// Parses `Retry-After`: either delta-seconds or an HTTP date (RFC 9110 §10.2.3).
/// `now` is passed in so the date form is testable. Values are capped at one day because a
/// registry asking for more is more likely misconfigured than serious.
pub fn parse_retry_after(value: &str, now: jiff::Timestamp) -> Option<Duration> {
    const CAP: Duration = Duration::from_secs(24 * 3600);
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = value.parse().ok()?;
        return Some(Duration::from_secs(secs).min(CAP));
    }
    let when = jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(value)
        .ok()?;
    let secs = when.as_second().saturating_sub(now.as_second());
    Some(Duration::from_secs(u64::try_from(secs).unwrap_or(0)).min(CAP))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oci_error_body() {
        let body = br#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required","detail":[{"Type":"repository","Name":"x","Action":"pull"}]}]}"#;
        let parsed = parse_error_body(body);
        assert_eq!(parsed.codes, vec!["UNAUTHORIZED"]);
        assert_eq!(parsed.message, "UNAUTHORIZED: authentication required");
    }

    #[test]
    fn oci_error_body_with_several_errors() {
        let body = br#"{"errors":[{"code":"NAME_UNKNOWN","message":"repository name not known to registry"},{"code":"DENIED"},{"message":"plain"}]}"#;
        let parsed = parse_error_body(body);
        assert_eq!(parsed.codes, vec!["NAME_UNKNOWN", "DENIED"]);
        assert_eq!(
            parsed.message,
            "NAME_UNKNOWN: repository name not known to registry; DENIED; plain"
        );
    }

    #[test]
    fn token_server_bodies() {
        assert_eq!(
            parse_error_body(br#"{"details":"incorrect username or password"}"#).message,
            "incorrect username or password"
        );
        assert_eq!(
            parse_error_body(br#"{"error":"invalid_grant","error_description":"bad token"}"#)
                .message,
            "bad token"
        );
        assert_eq!(parse_error_body(br#"{"message":"nope"}"#).message, "nope");
    }

    #[test]
    fn text_html_and_empty_bodies() {
        assert_eq!(
            parse_error_body(b"  upstream\n  timed out ").message,
            "upstream timed out"
        );
        assert_eq!(
            parse_error_body(b"<html><body>502</body></html>").message,
            ""
        );
        assert_eq!(parse_error_body(b"").message, "");
        assert_eq!(parse_error_body(&[0xff, 0xfe]).message, "");
        let long = "x".repeat(2000);
        assert!(parse_error_body(long.as_bytes()).message.chars().count() <= MAX_MESSAGE_CHARS + 1);
    }

    #[test]
    fn retry_after_forms() {
        let now: jiff::Timestamp = "2015-10-21T07:27:00Z".parse().unwrap();
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_secs(60))
        );
        // A date in the past means "now".
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(
            parse_retry_after("99999999", now),
            Some(Duration::from_secs(24 * 3600))
        );
    }

    #[test]
    fn display_includes_registry_message() {
        let err = RegistryError::Unauthorized {
            registry: "ghcr.io".into(),
            message: "DENIED: requested access to the resource is denied".into(),
        };
        assert_eq!(
            err.to_string(),
            "registry ghcr.io denied access: DENIED: requested access to the resource is denied"
        );
        let err = RegistryError::RateLimited {
            registry: "registry-1.docker.io".into(),
            retry_after: Some(Duration::from_secs(30)),
            message: "TOOMANYREQUESTS: slow down".into(),
        };
        assert_eq!(
            err.to_string(),
            "registry registry-1.docker.io is rate limiting requests (retry after 30s): TOOMANYREQUESTS: slow down"
        );
        assert_eq!(err.category(), "rate_limited");
        assert!(err.is_transient());
    }
}
