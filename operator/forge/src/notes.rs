//! Commit statuses and pull request comments, the forge side of notifications.
//!
//! * GitHub: `POST /repos/{owner}/{repo}/statuses/{sha}` `{state, description, context,
//!   target_url}`; `POST /repos/{owner}/{repo}/issues/{number}/comments` `{body}`
//! * Gitea: the same two paths and bodies (API v1)
//! * GitLab: `POST /projects/{id}/statuses/{sha}` `{state, description, name, target_url}`
//!   (`state` `success` or `failed`); `POST /projects/{id}/merge_requests/{iid}/notes`
//!   `{body}`

use imagewatch_crd::promotion::ForgeProvider;
use reqwest::Method;
use serde_json::json;

use super::http::encode_segment;
use super::{ForgeClient, ForgeError};

impl ForgeClient {
    /// Sets the commit status `context` of `sha`: `good` is success, else failure.
    pub async fn set_commit_status(
        &self,
        sha: &str,
        good: bool,
        description: &str,
        context: &str,
        target_url: Option<&str>,
    ) -> Result<(), ForgeError> {
        let (url, body) = match self.provider {
            ForgeProvider::Github | ForgeProvider::Gitea => (
                self.url(&format!(
                    "/repos/{}/statuses/{}",
                    self.repository,
                    encode_segment(sha)
                )),
                json!({
                    "state": if good { "success" } else { "failure" },
                    "description": description,
                    "context": context,
                    "target_url": target_url,
                }),
            ),
            ForgeProvider::Gitlab => (
                self.url(&format!(
                    "/projects/{}/statuses/{}",
                    encode_segment(&self.repository),
                    encode_segment(sha)
                )),
                json!({
                    "state": if good { "success" } else { "failed" },
                    "description": description,
                    "name": context,
                    "target_url": target_url,
                }),
            ),
        };
        self.call(Method::POST, &url, Some(&body)).await.map(drop)
    }

    /// Comments `body` (Markdown) on pull request `number`.
    pub async fn comment(&self, number: i64, body: &str) -> Result<(), ForgeError> {
        let url = match self.provider {
            ForgeProvider::Github | ForgeProvider::Gitea => self.url(&format!(
                "/repos/{}/issues/{number}/comments",
                self.repository
            )),
            ForgeProvider::Gitlab => self.url(&format!(
                "/projects/{}/merge_requests/{number}/notes",
                encode_segment(&self.repository)
            )),
        };
        self.call(Method::POST, &url, Some(&json!({"body": body})))
            .await
            .map(drop)
    }
}
