//! [`ForgeError`]: how a forge API call failed, and when to ask again.

use std::time::Duration;

/// Attempts of a request the forge answered with "try again later" (Gitea answers a merge
/// request with `405 Please try again later` while its mergeability check is still queued).
pub const TRY_AGAIN_ATTEMPTS: u32 = 6;

/// Whether the forge asked to repeat the request shortly (pure): Gitea's 405 "Please try
/// again later" while a pull request's mergeability is being checked. Other 405s (GitLab's
/// "Method Not Allowed" for a merge request that cannot be merged) are final.
pub fn try_again_later(e: &ForgeError) -> bool {
    matches!(e, ForgeError::Rejected { status: 405, message, .. }
        if message.to_ascii_lowercase().contains("try again later"))
}

/// The wait before attempt `attempt + 1` after a "try again later" (pure): 250 ms doubling,
/// at most 4 s.
pub fn try_again_delay(attempt: u32) -> Duration {
    use backon::{BackoffBuilder as _, ExponentialBuilder};
    let max = Duration::from_secs(4);
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(max)
        .with_factor(2.0)
        .without_max_times()
        .build()
        .nth(attempt.min(4) as usize)
        .unwrap_or(max)
}

/// A forge API failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForgeError {
    /// The token was refused or lacks a permission (401, 403).
    #[error("{provider} refused the credentials (HTTP {status}): {message}")]
    Unauthorized {
        /// Provider.
        provider: &'static str,
        /// Status.
        status: u16,
        /// The forge's message.
        message: String,
    },
    /// The repository or pull request does not exist (or is invisible to the token).
    #[error("{provider}: not found: {message}")]
    NotFound {
        /// Provider.
        provider: &'static str,
        /// The forge's message and URL.
        message: String,
    },
    /// Rate limited; retry after the given time when known.
    #[error("{provider} is rate limiting requests{}: {message}", hint(.retry_after))]
    RateLimited {
        /// Provider.
        provider: &'static str,
        /// When to retry.
        retry_after: Option<Duration>,
        /// The forge's message.
        message: String,
    },
    /// A pull request for this head and base already exists.
    #[error("{provider}: a pull request already exists: {message}")]
    AlreadyExists {
        /// Provider.
        provider: &'static str,
        /// The forge's message.
        message: String,
    },
    /// Any other refusal (validation, a merge that cannot be scheduled).
    #[error("{provider} refused the request (HTTP {status}): {message}")]
    Rejected {
        /// Provider.
        provider: &'static str,
        /// Status.
        status: u16,
        /// The forge's message.
        message: String,
    },
    /// 5xx.
    #[error("{provider} failed (HTTP {status}): {message}")]
    Server {
        /// Provider.
        provider: &'static str,
        /// Status.
        status: u16,
        /// Body excerpt.
        message: String,
    },
    /// No HTTP answer.
    #[error("cannot reach {provider}: {message}")]
    Transport {
        /// Provider.
        provider: &'static str,
        /// Why.
        message: String,
    },
    /// An answer that does not have the documented shape.
    #[error("{provider} answered something unexpected: {message}")]
    Protocol {
        /// Provider.
        provider: &'static str,
        /// What.
        message: String,
    },
    /// The settings cannot be used (no repository, bad URL).
    #[error("pull request settings: {0}")]
    InvalidConfig(String),
}

fn hint(retry_after: &Option<Duration>) -> String {
    match retry_after {
        Some(d) => format!(" (retry in {}s)", d.as_secs()),
        None => String::new(),
    }
}

impl ForgeError {
    /// Low-cardinality metric label.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Unauthorized { .. } => "unauthorized",
            Self::NotFound { .. } => "not_found",
            Self::RateLimited { .. } => "rate_limited",
            Self::AlreadyExists { .. } => "already_exists",
            Self::Rejected { .. } => "rejected",
            Self::Server { .. } => "server",
            Self::Transport { .. } => "transport",
            Self::Protocol { .. } => "protocol",
            Self::InvalidConfig(_) => "config",
        }
    }

    /// How long to wait before the next attempt, when the forge said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}
