//! Gitea (and Forgejo) pull requests, API v1.
//!
//! * list: `GET /repos/{owner}/{repo}/pulls?state=open&limit=50` (paged with `Link`),
//!   filtered on `head.ref` and `base.ref`
//! * create: `POST /repos/{owner}/{repo}/pulls` `{head, base, title, body}`; 409 (or 422)
//!   "pull request already exists" → [`ForgeError::AlreadyExists`]
//! * update / close: `PATCH /repos/{owner}/{repo}/pulls/{index}` `{title, body}` /
//!   `{state: closed}`
//! * labels are ids: names are looked up with `GET /repos/{owner}/{repo}/labels`, then
//!   `POST /repos/{owner}/{repo}/issues/{index}/labels` `{labels: [ids]}`
//! * auto-merge: `POST /repos/{owner}/{repo}/pulls/{index}/merge`
//!   `{Do: merge, merge_when_checks_succeed: true}`; cancelled with `DELETE` on the same path
//! * get / reopen: `GET /repos/{owner}/{repo}/pulls/{index}` / `PATCH … {state: open}`;
//!   `state` is `open` or `closed`, `merged: true` tells a merged one

use reqwest::Method;
use serde_json::{Value, json};

use super::{ForgeClient, ForgeError};
use imagewatch_engine::forge::{NewPullRequest, PullRequest, PullRequestState};

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

pub(super) fn pull_request(v: &Value) -> Result<PullRequest, ForgeError> {
    let missing = |what: &str| ForgeError::Protocol {
        provider: "gitea",
        message: format!("pull request without {what}"),
    };
    Ok(PullRequest {
        number: v
            .get("number")
            .and_then(Value::as_i64)
            .ok_or_else(|| missing("number"))?,
        url: str_at(v, "/html_url")
            .ok_or_else(|| missing("html_url"))?
            .to_string(),
        title: str_at(v, "/title").unwrap_or_default().to_string(),
        body: str_at(v, "/body").unwrap_or_default().to_string(),
        head: str_at(v, "/head/ref")
            .ok_or_else(|| missing("head.ref"))?
            .to_string(),
        base: str_at(v, "/base/ref")
            .ok_or_else(|| missing("base.ref"))?
            .to_string(),
        head_sha: str_at(v, "/head/sha").map(str::to_string),
        labels: v
            .get("labels")
            .and_then(Value::as_array)
            .map(|ls| {
                ls.iter()
                    .filter_map(|l| l.get("name").and_then(Value::as_str))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        auto_merge: false,
        node_id: None,
        state: if v.get("merged").and_then(Value::as_bool) == Some(true) {
            PullRequestState::Merged
        } else if str_at(v, "/state") == Some("closed") {
            PullRequestState::Closed
        } else {
            PullRequestState::Open
        },
    })
}

pub(super) async fn find_open(
    c: &ForgeClient,
    head: &str,
    base: &str,
) -> Result<Option<PullRequest>, ForgeError> {
    let url = c.url(&format!(
        "/repos/{}/pulls?state=open&limit=50",
        c.repository
    ));
    for item in c.list_all(url).await? {
        let pr = pull_request(&item)?;
        if pr.head == head && pr.base == base {
            return Ok(Some(pr));
        }
    }
    Ok(None)
}

pub(super) async fn create(
    c: &ForgeClient,
    new: &NewPullRequest,
) -> Result<PullRequest, ForgeError> {
    let body = json!({"head": new.head, "base": new.base, "title": new.title, "body": new.body});
    let answer = c
        .call(
            Method::POST,
            &c.url(&format!("/repos/{}/pulls", c.repository)),
            Some(&body),
        )
        .await?;
    pull_request(&answer.body)
}

pub(super) async fn update(
    c: &ForgeClient,
    pr: &PullRequest,
    title: &str,
    body: &str,
) -> Result<PullRequest, ForgeError> {
    let answer = c
        .call(
            Method::PATCH,
            &c.url(&format!("/repos/{}/pulls/{}", c.repository, pr.number)),
            Some(&json!({"title": title, "body": body})),
        )
        .await?;
    pull_request(&answer.body)
}

pub(super) async fn close(c: &ForgeClient, pr: &PullRequest) -> Result<(), ForgeError> {
    c.call(
        Method::PATCH,
        &c.url(&format!("/repos/{}/pulls/{}", c.repository, pr.number)),
        Some(&json!({"state": "closed"})),
    )
    .await
    .map(drop)
}

/// Adds the labels that exist in the repository; returns the names that do not.
pub(super) async fn add_labels(
    c: &ForgeClient,
    pr: &PullRequest,
    labels: &[String],
) -> Result<Vec<String>, ForgeError> {
    let known = c
        .list_all(c.url(&format!("/repos/{}/labels?limit=50", c.repository)))
        .await?;
    let mut ids = Vec::new();
    let mut unknown = Vec::new();
    for name in labels {
        match known
            .iter()
            .find(|l| l.get("name").and_then(Value::as_str) == Some(name))
            .and_then(|l| l.get("id").and_then(Value::as_i64))
        {
            Some(id) => ids.push(id),
            None => unknown.push(name.clone()),
        }
    }
    if !ids.is_empty() {
        c.call(
            Method::POST,
            &c.url(&format!(
                "/repos/{}/issues/{}/labels",
                c.repository, pr.number
            )),
            Some(&json!({ "labels": ids })),
        )
        .await?;
    }
    Ok(unknown)
}

pub(super) async fn enable_auto_merge(c: &ForgeClient, pr: &PullRequest) -> Result<(), ForgeError> {
    let mut body = json!({"Do": "merge", "merge_when_checks_succeed": true});
    if let Some(sha) = &pr.head_sha {
        body["head_commit_id"] = Value::String(sha.clone());
    }
    c.call(
        Method::POST,
        &c.url(&format!(
            "/repos/{}/pulls/{}/merge",
            c.repository, pr.number
        )),
        Some(&body),
    )
    .await
    .map(drop)
}

pub(super) async fn cancel_auto_merge(c: &ForgeClient, pr: &PullRequest) -> Result<(), ForgeError> {
    c.call(
        Method::DELETE,
        &c.url(&format!(
            "/repos/{}/pulls/{}/merge",
            c.repository, pr.number
        )),
        None,
    )
    .await
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_of_a_gitea_pull_request() {
        let pr = |state: &str, merged: bool| {
            json!({"number": 3, "html_url": "http://g/o/r/pulls/3", "state": state,
                   "merged": merged, "head": {"ref": "h"}, "base": {"ref": "main"}})
        };
        let state = |v: Value| pull_request(&v).map(|p| p.state).ok();
        assert_eq!(state(pr("open", false)), Some(PullRequestState::Open));
        assert_eq!(state(pr("closed", false)), Some(PullRequestState::Closed));
        assert_eq!(state(pr("closed", true)), Some(PullRequestState::Merged));
    }
}
