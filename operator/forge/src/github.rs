//! GitHub: REST `pulls` and `issues/{n}/labels`, GraphQL `enablePullRequestAutoMerge` and
//! `disablePullRequestAutoMerge`.
//!
//! * list: `GET /repos/{owner}/{repo}/pulls?state=open&head={owner}:{branch}&base={base}&per_page=100`
//! * create: `POST /repos/{owner}/{repo}/pulls` `{title, head, base, body}`; 422 with
//!   "A pull request already exists" → [`ForgeError::AlreadyExists`]
//! * update / close: `PATCH /repos/{owner}/{repo}/pulls/{n}` `{title, body}` / `{state: closed}`
//! * labels: `POST /repos/{owner}/{repo}/issues/{n}/labels` `{labels}`
//! * auto-merge: GraphQL mutation with the pull request's `node_id`; GraphQL reports failures
//!   in `errors` of a 200 answer.

use reqwest::Method;
use serde_json::{Value, json};

use super::http::encode_query;
use super::{ForgeClient, ForgeError};
use imagewatch_engine::forge::{NewPullRequest, PullRequest, PullRequestState};

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

pub(super) fn pull_request(v: &Value) -> Result<PullRequest, ForgeError> {
    let missing = |what: &str| ForgeError::Protocol {
        provider: "github",
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
        auto_merge: v.get("auto_merge").is_some_and(|a| !a.is_null()),
        node_id: str_at(v, "/node_id").map(str::to_string),
        state: if v.get("merged_at").is_some_and(|m| !m.is_null())
            || v.get("merged").and_then(Value::as_bool) == Some(true)
        {
            PullRequestState::Merged
        } else if str_at(v, "/state") == Some("closed") {
            PullRequestState::Closed
        } else {
            PullRequestState::Open
        },
    })
}

fn owner(c: &ForgeClient) -> &str {
    c.repository.split('/').next().unwrap_or_default()
}

pub(super) async fn find_open(
    c: &ForgeClient,
    head: &str,
    base: &str,
) -> Result<Option<PullRequest>, ForgeError> {
    let url = c.url(&format!(
        "/repos/{}/pulls?state=open&head={}&base={}&per_page=100",
        c.repository,
        encode_query(&format!("{}:{head}", owner(c))),
        encode_query(base)
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
    let body = json!({"title": new.title, "head": new.head, "base": new.base, "body": new.body});
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

pub(super) async fn add_labels(
    c: &ForgeClient,
    pr: &PullRequest,
    labels: &[String],
) -> Result<(), ForgeError> {
    c.call(
        Method::POST,
        &c.url(&format!(
            "/repos/{}/issues/{}/labels",
            c.repository, pr.number
        )),
        Some(&json!({ "labels": labels })),
    )
    .await
    .map(drop)
}

/// The GraphQL endpoint for the REST base: `https://api.github.com/graphql`, and
/// `https://host/api/graphql` for GitHub Enterprise Server (`https://host/api/v3`).
pub(super) fn graphql_url(api: &str) -> String {
    match api.strip_suffix("/api/v3") {
        Some(host) => format!("{host}/api/graphql"),
        None => format!("{api}/graphql"),
    }
}

const ENABLE_AUTO_MERGE: &str = "mutation($id: ID!) { enablePullRequestAutoMerge(input: {pullRequestId: $id}) { pullRequest { number autoMergeRequest { enabledAt } } } }";

pub(super) async fn enable_auto_merge(c: &ForgeClient, pr: &PullRequest) -> Result<(), ForgeError> {
    let id = pr.node_id.as_deref().ok_or_else(|| ForgeError::Protocol {
        provider: "github",
        message: format!("pull request #{} has no node_id", pr.number),
    })?;
    let answer = c
        .call(
            Method::POST,
            &graphql_url(&c.api),
            Some(&json!({"query": ENABLE_AUTO_MERGE, "variables": {"id": id}})),
        )
        .await?;
    graphql_errors(&answer.body)
}

const DISABLE_AUTO_MERGE: &str = "mutation($id: ID!) { disablePullRequestAutoMerge(input: {pullRequestId: $id}) { pullRequest { number } } }";

pub(super) async fn cancel_auto_merge(c: &ForgeClient, pr: &PullRequest) -> Result<(), ForgeError> {
    let id = pr.node_id.as_deref().ok_or_else(|| ForgeError::Protocol {
        provider: "github",
        message: format!("pull request #{} has no node_id", pr.number),
    })?;
    let answer = c
        .call(
            Method::POST,
            &graphql_url(&c.api),
            Some(&json!({"query": DISABLE_AUTO_MERGE, "variables": {"id": id}})),
        )
        .await?;
    graphql_errors(&answer.body)
}

fn graphql_errors(body: &Value) -> Result<(), ForgeError> {
    match body.get("errors").and_then(Value::as_array) {
        Some(errors) if !errors.is_empty() => Err(ForgeError::Rejected {
            provider: "github",
            status: 200,
            message: errors
                .iter()
                .filter_map(|e| e.get("message").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("; "),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graphql_urls() {
        assert_eq!(
            graphql_url("https://api.github.com"),
            "https://api.github.com/graphql"
        );
        assert_eq!(
            graphql_url("https://ghe.example.com/api/v3"),
            "https://ghe.example.com/api/graphql"
        );
    }
}
