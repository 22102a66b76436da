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
//!
//! # Why not maintained forge clients
//!
//! `octocrab` 0.54.9 and `gitlab` 0.1905.0 cover GitHub and GitLab only, not Gitea or Forgejo.
//! imagewatch calls 26 method and path pairs (GitHub 8, one GraphQL; GitLab 8; Gitea 10) in
//! 1,308 code lines. octocrab types 7 of the GitHub 8 (`pulls().list/create/update/get`,
//! `issues().add_labels/create_comment`, `repos().create_status`; auto-merge stays a raw
//! `Octocrab::graphql`); with `default-features = false, features = ["reqwest"]` and
//! `build_with_reqwest` it shares our reqwest client on rustls and ring and adds 10 crates
//! (`snafu`, `chrono`, `cargo_metadata`, ...), with its defaults 21 including `aws-lc-sys` and
//! `jsonwebtoken` 10. `gitlab` types 7 of 8 (`MergeRequests`, `CreateMergeRequest`,
//! `EditMergeRequest`, `MergeMergeRequest`, ...) but has no `auto_merge` (GitLab 17.11+) nor
//! cancel endpoint, and its `client_api` feature turns on reqwest's `rustls` (aws-lc-rs) and
//! `blocking`: 30 more crates, `aws-lc-sys`, `syn` 1 and `graphql_client` among them. Together
//! they add 38 crates to replace at most github.rs and gitlab.rs (375 lines); gitea.rs,
//! http.rs, notes.rs, the client, its errors and `ensure` (933) stay.
//! Decision: keep ours; the crates would add a second way to call forges, not remove ours.
//!
//! Crate counts are the packages a crate adds to `cargo tree -e normal,build` of the
//! operator's dependencies with the workspace's features and Cargo.lock (reqwest 0.13 and rustls
//! on ring, no openssl, no aws-lc); line counts are code lines without comments, blank lines
//! and tests (measured 2026-12-06).

mod client;
mod error;
mod gitea;
mod github;
mod gitlab;
mod http;
mod locks;
mod notes;

pub use client::{ForgeClient, default_api_url, provider_name, split_git_url};
pub use error::{ForgeError, TRY_AGAIN_ATTEMPTS, try_again_delay, try_again_later};
pub use locks::HeadLocks;

/// The wait a `Retry-After` header asks for.
pub use http::retry_after as retry_after_of;

pub use imagewatch_crd::promotion::ForgeProvider;

pub use imagewatch_engine::forge::{
    EnsureAction, Ensured, NewPullRequest, PullRequest, PullRequestState,
};

impl ForgeClient {
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
    use std::time::Duration;

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
