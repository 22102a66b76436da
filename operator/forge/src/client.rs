//! [`ForgeClient`]: one repository on one forge, its API URL and token; the provider
//! modules and `http.rs` make its calls.

use std::sync::Arc;

use imagewatch_crd::promotion::ForgeProvider;
use imagewatch_telemetry::{ForgeLabels, Metrics};

use crate::ForgeError;

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
    pub(crate) provider: ForgeProvider,
    pub(crate) api: String,
    pub(crate) repository: String,
    pub(crate) token: Option<String>,
    pub(crate) http: reqwest::Client,
    pub(crate) metrics: Option<Arc<Metrics>>,
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

    pub(crate) fn count(&self, outcome: &str) {
        if let Some(m) = &self.metrics {
            m.forge_requests
                .get_or_create(&ForgeLabels {
                    provider: provider_name(self.provider).to_string(),
                    outcome: outcome.to_string(),
                })
                .inc();
        }
    }
}
