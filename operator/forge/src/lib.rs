//! Pull request clients for GitHub, GitLab and Gitea (Forgejo): one open pull request per
//! promotion branch, found, created, updated in place and closed through each forge's REST API.
//!
//! [`ForgeClient::ensure`] is the operation a promotion needs: find the open pull request whose
//! head is the operator's branch (listing page by page, following `Link: rel="next"`), update
//! its title and body when they changed, or create it; a create refused because one already
//! exists (GitHub 422 "A pull request already exists", GitLab/Gitea 409) is answered by finding
//! and updating that one, so there is never a duplicate. Labels are added when missing;
//! auto-merge is requested when asked (GitHub GraphQL `enablePullRequestAutoMerge`, GitLab
//! `merge_when_pipeline_succeeds`/`auto_merge`, Gitea `merge_when_checks_succeed`). Label and
//! auto-merge failures are warnings: the pull request itself stands.
//!
//! Failures are [`ForgeError`]s: rate limits (GitHub 403/429 with `x-ratelimit-remaining: 0`,
//! `x-ratelimit-reset` or `retry-after`; GitLab and Gitea 429) carry how long to wait,
//! authentication failures say so, and every message carries the forge's own explanation.
//!
//! The API base URL is configurable (`pullRequest.apiUrl`), so self-hosted forges and test
//! stubs work the same way.

mod gitea;
mod github;
mod gitlab;
mod http;
mod notes;

/// The wait a `Retry-After` header asks for.
pub use http::retry_after as retry_after_of;

use std::{sync::Arc, time::Duration};

pub use imagewatch_crd::promotion::ForgeProvider;

use imagewatch_telemetry::{ForgeLabels, Metrics};

pub use imagewatch_engine::forge::{
    EnsureAction, Ensured, NewPullRequest, PullRequest, PullRequestState,
};

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

/// Provider label.
pub fn provider_name(provider: ForgeProvider) -> &'static str {
    match provider {
        ForgeProvider::Github => "github",
        ForgeProvider::Gitlab => "gitlab",
        ForgeProvider::Gitea => "gitea",
    }
}

/// A client for one repository on one forge.
#[derive(Clone)]
pub struct ForgeClient {
    provider: ForgeProvider,
    api: String,
    repository: String,
    token: Option<String>,
    http: reqwest::Client,
    metrics: Option<Arc<Metrics>>,
}

impl std::fmt::Debug for ForgeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForgeClient")
            .field("provider", &self.provider)
            .field("api", &self.api)
            .field("repository", &self.repository)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

/// `(host[:port], path)` of a Git remote URL: `https://host/org/repo.git`,
/// `ssh://git@host:22/org/repo.git`, `git@host:org/repo.git`.
pub fn split_git_url(url: &str) -> Option<(String, String)> {
    let rest = if let Some((scheme, rest)) = url.split_once("://") {
        if !matches!(scheme, "https" | "http" | "ssh" | "git") {
            return None;
        }
        rest
    } else {
        // scp-like `user@host:path`.
        let (userhost, path) = url.split_once(':')?;
        let host = userhost.rsplit('@').next()?;
        return Some((host.to_string(), clean_path(path)?));
    };
    let (authority, path) = rest.split_once('/')?;
    let host = authority.rsplit('@').next()?;
    Some((host.to_string(), clean_path(path)?))
}

fn clean_path(path: &str) -> Option<String> {
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    (!path.is_empty()).then(|| path.to_string())
}

/// The default API base URL of a provider for a Git host.
pub fn default_api_url(provider: ForgeProvider, host: &str) -> String {
    let bare = host.split(':').next().unwrap_or(host);
    match provider {
        ForgeProvider::Github if bare.eq_ignore_ascii_case("github.com") => {
            "https://api.github.com".to_string()
        }
        ForgeProvider::Github => format!("https://{bare}/api/v3"),
        ForgeProvider::Gitlab => format!("https://{bare}/api/v4"),
        ForgeProvider::Gitea => format!("https://{bare}/api/v1"),
    }
}

impl ForgeClient {
    /// A client for `repository` (`owner/name`, or a GitLab project path; `None`: taken from
    /// `git_url`) at `api_url` (`None`: the provider's API for `git_url`'s host).
    pub fn new(
        provider: ForgeProvider,
        api_url: Option<&str>,
        repository: Option<&str>,
        git_url: &str,
        token: Option<String>,
        http: reqwest::Client,
    ) -> Result<Self, ForgeError> {
        let parsed = split_git_url(git_url);
        let repository = match repository.map(|r| r.trim_matches('/')) {
            Some(r) if !r.is_empty() => r.to_string(),
            _ => parsed.as_ref().map(|(_, p)| p.clone()).ok_or_else(|| {
                ForgeError::InvalidConfig(format!(
                    "cannot tell the repository from {git_url:?}; set pullRequest.repository"
                ))
            })?,
        };
        if provider != ForgeProvider::Gitlab && repository.split('/').count() != 2 {
            return Err(ForgeError::InvalidConfig(format!(
                "{} repositories are owner/name, not {repository:?}; set pullRequest.repository",
                provider_name(provider)
            )));
        }
        let api = match api_url.map(|u| u.trim_end_matches('/')) {
            Some(u) if !u.is_empty() => {
                if !(u.starts_with("https://") || u.starts_with("http://")) {
                    return Err(ForgeError::InvalidConfig(format!(
                        "pullRequest.apiUrl {u:?} must be an http(s) URL"
                    )));
                }
                u.to_string()
            }
            _ => {
                let (host, _) = parsed.ok_or_else(|| {
                    ForgeError::InvalidConfig(format!(
                        "cannot tell the forge's host from {git_url:?}; set pullRequest.apiUrl"
                    ))
                })?;
                default_api_url(provider, &host)
            }
        };
        Ok(Self {
            provider,
            api,
            repository,
            token: token.filter(|t| !t.is_empty()),
            http,
            metrics: None,
        })
    }

    /// Counts requests in `forge_requests`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The provider.
    pub fn provider(&self) -> ForgeProvider {
        self.provider
    }

    /// The API base URL.
    pub fn api_url(&self) -> &str {
        &self.api
    }

    /// The repository.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    fn count(&self, outcome: &str) {
        if let Some(m) = &self.metrics {
            m.forge_requests
                .get_or_create(&ForgeLabels {
                    provider: provider_name(self.provider).to_string(),
                    outcome: outcome.to_string(),
                })
                .inc();
        }
    }

    /// The open pull request from `head` into `base`, if any.
    pub async fn find_open(
        &self,
        head: &str,
        base: &str,
    ) -> Result<Option<PullRequest>, ForgeError> {
        match self.provider {
            ForgeProvider::Github => github::find_open(self, head, base).await,
            ForgeProvider::Gitlab => gitlab::find_open(self, head, base).await,
            ForgeProvider::Gitea => gitea::find_open(self, head, base).await,
        }
    }

    /// Opens a pull request (no labels, no auto-merge). [`ForgeError::AlreadyExists`] when
    /// one is open for the same head and base.
    pub async fn create(&self, new: &NewPullRequest) -> Result<PullRequest, ForgeError> {
        match self.provider {
            ForgeProvider::Github => github::create(self, new).await,
            ForgeProvider::Gitlab => gitlab::create(self, new).await,
            ForgeProvider::Gitea => gitea::create(self, new).await,
        }
    }

    /// Sets title and body.
    pub async fn update(
        &self,
        pr: &PullRequest,
        title: &str,
        body: &str,
    ) -> Result<PullRequest, ForgeError> {
        match self.provider {
            ForgeProvider::Github => github::update(self, pr, title, body).await,
            ForgeProvider::Gitlab => gitlab::update(self, pr, title, body).await,
            ForgeProvider::Gitea => gitea::update(self, pr, title, body).await,
        }
    }

    /// Closes without merging.
    pub async fn close(&self, pr: &PullRequest) -> Result<(), ForgeError> {
        match self.provider {
            ForgeProvider::Github => github::close(self, pr).await,
            ForgeProvider::Gitlab => gitlab::close(self, pr).await,
            ForgeProvider::Gitea => gitea::close(self, pr).await,
        }
    }

    /// Adds labels (existing ones are kept). Returns names that could not be added (Gitea:
    /// labels that do not exist in the repository).
    pub async fn add_labels(
        &self,
        pr: &PullRequest,
        labels: &[String],
    ) -> Result<Vec<String>, ForgeError> {
        if labels.is_empty() {
            return Ok(Vec::new());
        }
        match self.provider {
            ForgeProvider::Github => github::add_labels(self, pr, labels).await.map(|_| vec![]),
            ForgeProvider::Gitlab => gitlab::add_labels(self, pr, labels).await.map(|_| vec![]),
            ForgeProvider::Gitea => gitea::add_labels(self, pr, labels).await,
        }
    }

    /// Asks the forge to merge when its checks pass; a "try again later" is repeated up to
    /// [`TRY_AGAIN_ATTEMPTS`] times.
    pub async fn enable_auto_merge(&self, pr: &PullRequest) -> Result<(), ForgeError> {
        let mut attempt = 0;
        loop {
            let result = match self.provider {
                ForgeProvider::Github => github::enable_auto_merge(self, pr).await,
                ForgeProvider::Gitlab => gitlab::enable_auto_merge(self, pr).await,
                ForgeProvider::Gitea => gitea::enable_auto_merge(self, pr).await,
            };
            match result {
                Err(e) if try_again_later(&e) && attempt + 1 < TRY_AGAIN_ATTEMPTS => {
                    tracing::debug!(pr = pr.number, error = %e, "auto-merge: trying again");
                    tokio::time::sleep(try_again_delay(attempt)).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Withdraws a requested auto-merge.
    pub async fn cancel_auto_merge(&self, pr: &PullRequest) -> Result<(), ForgeError> {
        match self.provider {
            ForgeProvider::Github => github::cancel_auto_merge(self, pr).await,
            ForgeProvider::Gitlab => gitlab::cancel_auto_merge(self, pr).await,
            ForgeProvider::Gitea => gitea::cancel_auto_merge(self, pr).await,
        }
    }

    /// One pull request by number, whatever its state.
    pub async fn get(&self, number: i64) -> Result<PullRequest, ForgeError> {
        match self.provider {
            ForgeProvider::Github => self.rest_pull(number, None, github::pull_request).await,
            ForgeProvider::Gitlab => gitlab::get(self, number).await,
            ForgeProvider::Gitea => self.rest_pull(number, None, gitea::pull_request).await,
        }
    }

    /// Reopens a closed (not merged) pull request.
    pub async fn reopen(&self, pr: &PullRequest) -> Result<PullRequest, ForgeError> {
        let open = serde_json::json!({"state": "open"});
        match self.provider {
            ForgeProvider::Github => {
                self.rest_pull(pr.number, Some(&open), github::pull_request)
                    .await
            }
            ForgeProvider::Gitlab => gitlab::reopen(self, pr).await,
            ForgeProvider::Gitea => {
                self.rest_pull(pr.number, Some(&open), gitea::pull_request)
                    .await
            }
        }
    }

    /// `GET` (or, with `patch`, `PATCH`) `/repos/{owner}/{repo}/pulls/{number}`: GitHub and
    /// Gitea share this resource; only how its answer reads differs (`parse`).
    async fn rest_pull(
        &self,
        number: i64,
        patch: Option<&serde_json::Value>,
        parse: fn(&serde_json::Value) -> Result<PullRequest, ForgeError>,
    ) -> Result<PullRequest, ForgeError> {
        let method = match patch {
            Some(_) => reqwest::Method::PATCH,
            None => reqwest::Method::GET,
        };
        let path = format!("/repos/{}/pulls/{number}", self.repository);
        let answer = self.call(method, &self.url(&path), patch).await?;
        parse(&answer.body)
    }

    /// One open pull request for `new.head` → `new.base` with `new`'s title and body:
    /// found and updated, or created (see the module documentation).
    pub async fn ensure(&self, new: &NewPullRequest) -> Result<Ensured, ForgeError> {
        let (mut pr, mut action) = match self.find_open(&new.head, &new.base).await? {
            Some(pr) => (pr, EnsureAction::Unchanged),
            None => match self.create(new).await {
                Ok(pr) => (pr, EnsureAction::Created),
                Err(ForgeError::AlreadyExists { message, .. }) => {
                    // Opened meanwhile (or the listing lagged): use that one.
                    let pr = self.find_open(&new.head, &new.base).await?.ok_or_else(|| {
                        ForgeError::Protocol {
                            provider: provider_name(self.provider),
                            message: format!(
                                "create said a pull request exists ({message}) but none is open from {} into {}",
                                new.head, new.base
                            ),
                        }
                    })?;
                    (pr, EnsureAction::Unchanged)
                }
                Err(e) => return Err(e),
            },
        };
        if action == EnsureAction::Unchanged && (pr.title != new.title || pr.body != new.body) {
            pr = self.update(&pr, &new.title, &new.body).await?;
            action = EnsureAction::Updated;
        }
        let mut warnings = Vec::new();
        let missing: Vec<String> = new
            .labels
            .iter()
            .filter(|l| !pr.labels.contains(l))
            .cloned()
            .collect();
        if !missing.is_empty() {
            match self.add_labels(&pr, &missing).await {
                Ok(unknown) => {
                    for label in &missing {
                        if !unknown.contains(label) {
                            pr.labels.push(label.clone());
                        }
                    }
                    if !unknown.is_empty() {
                        warnings.push(format!(
                            "labels not in the repository: {}",
                            unknown.join(", ")
                        ));
                    }
                }
                Err(e) => warnings.push(format!("cannot add labels: {e}")),
            }
        }
        if new.auto_merge
            && (!pr.auto_merge
                && (action != EnsureAction::Unchanged || self.provider != ForgeProvider::Gitea))
        {
            match self.enable_auto_merge(&pr).await {
                Ok(()) => pr.auto_merge = true,
                Err(e) => warnings.push(format!("cannot enable auto-merge: {e}")),
            }
        }
        Ok(Ensured {
            pull_request: pr,
            action,
            warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_try_again_later_is_repeated() {
        let gitea = ForgeError::Rejected {
            provider: "gitea",
            status: 405,
            message: "Please try again later".into(),
        };
        assert!(try_again_later(&gitea));
        let gitlab = ForgeError::Rejected {
            provider: "gitlab",
            status: 405,
            message: "405 Method Not Allowed".into(),
        };
        assert!(!try_again_later(&gitlab));
        let conflict = ForgeError::Rejected {
            provider: "gitea",
            status: 409,
            message: "Please try again later".into(),
        };
        assert!(!try_again_later(&conflict));
        assert_eq!(try_again_delay(0), Duration::from_millis(250));
        assert_eq!(try_again_delay(2), Duration::from_secs(1));
        assert_eq!(try_again_delay(9), Duration::from_secs(4));
        let total: Duration = (0..TRY_AGAIN_ATTEMPTS - 1).map(try_again_delay).sum();
        assert!(total <= Duration::from_secs(15), "{total:?}");
    }

    #[test]
    fn git_urls_give_host_and_repository() {
        assert_eq!(
            split_git_url("https://github.com/org/repo.git"),
            Some(("github.com".into(), "org/repo".into()))
        );
        assert_eq!(
            split_git_url("ssh://git@gitlab.example.com:2222/group/sub/app.git"),
            Some(("gitlab.example.com:2222".into(), "group/sub/app".into()))
        );
        assert_eq!(
            split_git_url("git@github.com:org/repo.git"),
            Some(("github.com".into(), "org/repo".into()))
        );
        assert_eq!(split_git_url("file:///tmp/x"), None);
    }

    #[test]
    fn default_api_urls() {
        assert_eq!(
            default_api_url(ForgeProvider::Github, "github.com"),
            "https://api.github.com"
        );
        assert_eq!(
            default_api_url(ForgeProvider::Github, "ghe.example.com"),
            "https://ghe.example.com/api/v3"
        );
        assert_eq!(
            default_api_url(ForgeProvider::Gitlab, "gitlab.com"),
            "https://gitlab.com/api/v4"
        );
        assert_eq!(
            default_api_url(ForgeProvider::Gitea, "git.example.com:3000"),
            "https://git.example.com/api/v1"
        );
    }

    #[test]
    fn repositories_are_checked() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        let c = ForgeClient::new(
            ForgeProvider::Github,
            None,
            None,
            "https://github.com/org/repo.git",
            None,
            http.clone(),
        )
        .unwrap();
        assert_eq!(c.repository(), "org/repo");
        assert_eq!(c.api_url(), "https://api.github.com");
        let err = ForgeClient::new(
            ForgeProvider::Github,
            None,
            None,
            "https://git.example.com/only.git",
            None,
            http.clone(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("pullRequest.repository"), "{err}");
        let gl = ForgeClient::new(
            ForgeProvider::Gitlab,
            Some("http://127.0.0.1:1/api/v4/"),
            None,
            "https://gitlab.com/a/b/c.git",
            Some("t".into()),
            http,
        )
        .unwrap();
        assert_eq!(gl.repository(), "a/b/c");
        assert_eq!(gl.api_url(), "http://127.0.0.1:1/api/v4");
        assert!(!format!("{gl:?}").contains("\"t\""));
    }
}
