//! GitLab merge requests (`/projects/:id/merge_requests`, `:id` the URL-encoded project
//! path).
//!
//! * list: `GET …/merge_requests?state=opened&source_branch=…&target_branch=…&per_page=100`
//! * create: `POST …/merge_requests` `{source_branch, target_branch, title, description,
//!   labels, remove_source_branch}`; 409 "Another open merge request already exists" →
//!   [`ForgeError::AlreadyExists`]
//! * update / close: `PUT …/merge_requests/:iid` `{title, description}` / `{state_event: close}`
//! * labels: `PUT …/merge_requests/:iid` `{add_labels}`
//! * auto-merge: `PUT …/merge_requests/:iid/merge` with `auto_merge` (GitLab 17.11+) and the
//!   older `merge_when_pipeline_succeeds` (deprecated there, still accepted), pinned to the
//!   head `sha`.

use reqwest::Method;
use serde_json::{Value, json};

use super::http::{encode_query, encode_segment};
use super::{ForgeClient, ForgeError};
use imagewatch_engine::forge::{NewPullRequest, PullRequest, PullRequestState};

fn project(c: &ForgeClient) -> String {
    encode_segment(&c.repository)
}

pub(super) fn merge_request(v: &Value) -> Result<PullRequest, ForgeError> {
    let missing = |what: &str| ForgeError::Protocol {
        provider: "gitlab",
        message: format!("merge request without {what}"),
    };
    let text = |k: &str| v.get(k).and_then(Value::as_str);
    Ok(PullRequest {
        number: v
            .get("iid")
            .and_then(Value::as_i64)
            .ok_or_else(|| missing("iid"))?,
        url: text("web_url")
            .ok_or_else(|| missing("web_url"))?
            .to_string(),
        title: text("title").unwrap_or_default().to_string(),
        body: text("description").unwrap_or_default().to_string(),
        head: text("source_branch")
            .ok_or_else(|| missing("source_branch"))?
            .to_string(),
        base: text("target_branch")
            .ok_or_else(|| missing("target_branch"))?
            .to_string(),
        head_sha: text("sha").map(str::to_string),
        labels: v
            .get("labels")
            .and_then(Value::as_array)
            .map(|ls| {
                ls.iter()
                    .filter_map(|l| l.as_str().or_else(|| l.get("name").and_then(Value::as_str)))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        auto_merge: v
            .get("merge_when_pipeline_succeeds")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        node_id: None,
        state: match text("state") {
            Some("merged") => PullRequestState::Merged,
            Some("closed") | Some("locked") => PullRequestState::Closed,
            _ => PullRequestState::Open,
        },
    })
}

pub(super) async fn find_open(
    c: &ForgeClient,
    head: &str,
    base: &str,
) -> Result<Option<PullRequest>, ForgeError> {
    let url = c.url(&format!(
        "/projects/{}/merge_requests?state=opened&source_branch={}&target_branch={}&per_page=100",
        project(c),
        encode_query(head),
        encode_query(base)
    ));
    for item in c.list_all(url).await? {
        let mr = merge_request(&item)?;
        if mr.head == head && mr.base == base {
            return Ok(Some(mr));
        }
    }
    Ok(None)
}

pub(super) async fn create(
    c: &ForgeClient,
    new: &NewPullRequest,
) -> Result<PullRequest, ForgeError> {
    let mut body = json!({
        "source_branch": new.head,
        "target_branch": new.base,
        "title": new.title,
        "description": new.body,
        "remove_source_branch": true,
    });
    if !new.labels.is_empty() {
        body["labels"] = Value::String(new.labels.join(","));
    }
    let answer = c
        .call(
            Method::POST,
            &c.url(&format!("/projects/{}/merge_requests", project(c))),
            Some(&body),
        )
        .await?;
    merge_request(&answer.body)
}

pub(super) async fn update(
    c: &ForgeClient,
    pr: &PullRequest,
    title: &str,
    body: &str,
) -> Result<PullRequest, ForgeError> {
    let answer = c
        .call(
            Method::PUT,
            &c.url(&format!(
                "/projects/{}/merge_requests/{}",
                project(c),
                pr.number
            )),
            Some(&json!({"title": title, "description": body})),
        )
        .await?;
    merge_request(&answer.body)
}

pub(super) async fn close(c: &ForgeClient, pr: &PullRequest) -> Result<(), ForgeError> {
    c.call(
        Method::PUT,
        &c.url(&format!(
            "/projects/{}/merge_requests/{}",
            project(c),
            pr.number
        )),
        Some(&json!({"state_event": "close"})),
    )
    .await
    .map(drop)
}

pub(super) async fn add_labels(
    c: &ForgeClient,
    pr: &PullRequest,
    labels: &[String],
) -> Result<(), ForgeError> {
    c.call(
        Method::PUT,
        &c.url(&format!(
            "/projects/{}/merge_requests/{}",
            project(c),
            pr.number
        )),
        Some(&json!({"add_labels": labels.join(",")})),
    )
    .await
    .map(drop)
}

pub(super) async fn enable_auto_merge(c: &ForgeClient, pr: &PullRequest) -> Result<(), ForgeError> {
    let mut body = json!({"auto_merge": true, "merge_when_pipeline_succeeds": true});
    if let Some(sha) = &pr.head_sha {
        body["sha"] = Value::String(sha.clone());
    }
    c.call(
        Method::PUT,
        &c.url(&format!(
            "/projects/{}/merge_requests/{}/merge",
            project(c),
            pr.number
        )),
        Some(&body),
    )
    .await
    .map(drop)
}

pub(super) async fn cancel_auto_merge(c: &ForgeClient, pr: &PullRequest) -> Result<(), ForgeError> {
    c.call(
        Method::POST,
        &c.url(&format!(
            "/projects/{}/merge_requests/{}/cancel_merge_when_pipeline_succeeds",
            project(c),
            pr.number
        )),
        None,
    )
    .await
    .map(drop)
}

pub(super) async fn get(c: &ForgeClient, number: i64) -> Result<PullRequest, ForgeError> {
    let answer = c
        .call(
            Method::GET,
            &c.url(&format!("/projects/{}/merge_requests/{number}", project(c))),
            None,
        )
        .await?;
    merge_request(&answer.body)
}

pub(super) async fn reopen(c: &ForgeClient, pr: &PullRequest) -> Result<PullRequest, ForgeError> {
    let answer = c
        .call(
            Method::PUT,
            &c.url(&format!(
                "/projects/{}/merge_requests/{}",
                project(c),
                pr.number
            )),
            Some(&json!({"state_event": "reopen"})),
        )
        .await?;
    merge_request(&answer.body)
}
