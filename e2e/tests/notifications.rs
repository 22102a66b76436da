//! `spec.notify` on the ground: one watch on a real Gitea tells an HTTPS receiver (Slack's,
//! Teams' and a signed webhook's payloads, each checked against its documented shape and the
//! HMAC), a receiver that fails its first request (each message arrives once all the same),
//! and Gitea itself (a commit status on the commit, a comment on the pull request). A failure
//! held past `failingAfter` is told once, and its end once.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    routing::post,
};
use imagewatch_crd::{ImageWatch, PullRequestState};
use imagewatch_e2e::{
    faultproxy::{Fault, FaultProxy, Verdict},
    gitea::{ADMIN, Gitea},
    ground::random_suffix,
    setup::{Scenario, create_secret},
    wait_until,
};
use reqwest::Method;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(90);
const FILE: &str = "apps/api/deployment.yaml";
const HMAC_KEY: &str = "hmac-key-for-the-test";

/// One request the receiver took.
#[derive(Clone, Debug)]
struct Received {
    path: String,
    headers: HeaderMap,
    body: Bytes,
    answered: u16,
}

#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn all(&self, path: &str) -> Vec<Received> {
        let got = self.got.lock().unwrap_or_else(|p| p.into_inner());
        got.iter().filter(|r| r.path == path).cloned().collect()
    }

    /// The bodies `path` answered 200 to, by `X-Imagewatch-Delivery` id.
    fn delivered(&self, path: &str) -> BTreeMap<String, Vec<Value>> {
        let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for r in self.all(path).into_iter().filter(|r| r.answered == 200) {
            let id = r
                .headers
                .get("x-imagewatch-delivery")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            out.entry(id)
                .or_default()
                .push(serde_json::from_slice(&r.body).unwrap_or(Value::Null));
        }
        out
    }
}

/// Answers 200, except the first request to `/flaky`, answered 500.
async fn receive(
    State(receiver): State<Receiver>,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let mut got = receiver.got.lock().unwrap_or_else(|p| p.into_inner());
    let first = !got.iter().any(|r| r.path == path);
    let status = if path == "flaky" && first {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    };
    got.push(Received {
        path,
        headers,
        body,
        answered: status.as_u16(),
    });
    status
}

/// The receiver, served over HTTPS with the ground's certificate (which operators trust).
async fn start_receiver(s: &Scenario) -> anyhow::Result<(Receiver, FaultProxy)> {
    let receiver = Receiver::default();
    let app = Router::new()
        .route("/{path}", post(receive))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let plain = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let (cert, key) = s.ground.git()?.tls_identity();
    let tls = FaultProxy::start_tls(&plain.to_string(), &cert, &key)?;
    Ok((receiver, tls))
}

/// Slack's incoming-webhook payload: `text`, and Block Kit `blocks` of `section` (a text
/// object of type `mrkdwn` or `plain_text`, at most 3000 characters) and `context`
/// (elements of text objects).
fn check_slack(v: &Value) -> Result<(), String> {
    let text_object = |t: &Value| -> Result<(), String> {
        let kind = t["type"].as_str().ok_or("a text object without type")?;
        if !matches!(kind, "mrkdwn" | "plain_text") {
            return Err(format!("text object type {kind}"));
        }
        let text = t["text"].as_str().ok_or("a text object without text")?;
        if text.is_empty() || text.chars().count() > 3000 {
            return Err(format!("text of {} characters", text.chars().count()));
        }
        Ok(())
    };
    if v["text"].as_str().is_none_or(str::is_empty) {
        return Err("no text".into());
    }
    let blocks = v["blocks"].as_array().ok_or("no blocks")?;
    if blocks.is_empty() || blocks.len() > 50 {
        return Err(format!("{} blocks", blocks.len()));
    }
    for block in blocks {
        match block["type"].as_str() {
            Some("section") => text_object(&block["text"])?,
            Some("context") => {
                let elements = block["elements"]
                    .as_array()
                    .ok_or("context without elements")?;
                if elements.is_empty() || elements.len() > 10 {
                    return Err(format!("context with {} elements", elements.len()));
                }
                elements.iter().try_for_each(text_object)?;
            }
            other => return Err(format!("block type {other:?}")),
        }
    }
    Ok(())
}

/// A Teams Workflows webhook message: `type: message` with one Adaptive Card attachment
/// (`contentType application/vnd.microsoft.card.adaptive`, `type AdaptiveCard`, a version,
/// a `body` of `TextBlock`s with text and `FactSet`s of title/value strings; actions
/// `Action.OpenUrl` with a url).
fn check_teams(v: &Value) -> Result<(), String> {
    if v["type"] != "message" {
        return Err("type is not message".into());
    }
    let attachments = v["attachments"].as_array().ok_or("no attachments")?;
    let [attachment] = attachments.as_slice() else {
        return Err(format!("{} attachments", attachments.len()));
    };
    if attachment["contentType"] != "application/vnd.microsoft.card.adaptive" {
        return Err("contentType".into());
    }
    let card = &attachment["content"];
    if card["type"] != "AdaptiveCard" || card["version"].as_str().is_none() {
        return Err("not an AdaptiveCard with a version".into());
    }
    for element in card["body"].as_array().ok_or("no body")? {
        match element["type"].as_str() {
            Some("TextBlock") if element["text"].as_str().is_some_and(|t| !t.is_empty()) => {}
            Some("FactSet") => {
                for fact in element["facts"].as_array().ok_or("FactSet without facts")? {
                    if fact["title"].as_str().is_none() || fact["value"].as_str().is_none() {
                        return Err(format!("fact {fact}"));
                    }
                }
            }
            other => return Err(format!("body element {other:?}")),
        }
    }
    for action in card["actions"].as_array().into_iter().flatten() {
        if action["type"] != "Action.OpenUrl" || action["url"].as_str().is_none() {
            return Err(format!("action {action}"));
        }
    }
    Ok(())
}

/// The `X-Signature` of a webhook request: `sha256=` and the hex HMAC-SHA256 of its body.
fn check_hmac(r: &Received) -> Result<(), String> {
    let header = r
        .headers
        .get("x-signature")
        .and_then(|v| v.to_str().ok())
        .ok_or("no X-Signature")?;
    let hex = header.strip_prefix("sha256=").ok_or("not sha256=")?;
    let signature = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2).unwrap_or("zz"), 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|e| e.to_string())?;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, HMAC_KEY.as_bytes());
    ring::hmac::verify(&key, &r.body, &signature).map_err(|_| "the HMAC does not verify".into())
}

/// The Gitea repository, the Secrets and the watch's YAML (`notify` given); the watch's
/// pull requests go to Gitea's API at `pr_api`.
async fn setup(
    s: &Scenario,
    gitea: &Gitea,
    receiver: &str,
    pr_api: &str,
) -> anyhow::Result<(String, String)> {
    let registry = s.ground.registry()?;
    let image_repo = format!("e2e/notify-{}", random_suffix());
    let image = format!("{}/{image_repo}", registry.host);
    registry.push(&image_repo, "v1.0.0")?;
    let repo = gitea.create_repo("manifests").await?;
    let deployment = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: api}}\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {image}:v1.0.0\n"
    );
    gitea
        .put_file(&repo, FILE, &deployment, "main", None)
        .await?;
    let secrets: [(&str, Vec<(&str, String)>); 7] = [
        (
            "gitea-git",
            vec![
                ("username", ADMIN.into()),
                ("password", gitea.token.clone()),
            ],
        ),
        ("gitea-api", vec![("token", gitea.token.clone())]),
        (
            "slack-hook",
            vec![("address", format!("https://{receiver}/slack"))],
        ),
        (
            "teams-hook",
            vec![("address", format!("https://{receiver}/teams"))],
        ),
        (
            "signed-hook",
            vec![
                ("address", format!("https://{receiver}/hook")),
                ("token", HMAC_KEY.into()),
            ],
        ),
        (
            "flaky-hook",
            vec![("address", format!("https://{receiver}/flaky"))],
        ),
        (
            "missing-key",
            vec![("url", format!("https://{receiver}/never"))],
        ),
    ];
    for (name, data) in &secrets {
        let data: Vec<(&str, &str)> = data.iter().map(|(k, v)| (*k, v.as_str())).collect();
        create_secret(&s.admin, &s.ns.name, name, "Opaque", &data).await?;
    }
    let yaml = format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: api, namespace: {ns}}}
spec:
  image: {image}
  interval: 1h
  credentials: {{secretRef: {{name: regcred}}}}
  git:
    url: {url}
    secretRef: {{name: gitea-git}}
    pullRequest: {{provider: gitea, apiUrl: "{pr_api}", secretRef: {{name: gitea-api}}}}
  target:
    workload: {{path: apps/api, kind: Deployment, name: api, container: api}}
  notify:
    - {{name: slack, type: Slack, secretRef: {{name: slack-hook}}, failingAfter: 1s}}
    - {{name: teams, type: Teams, secretRef: {{name: teams-hook}}, events: [Committed, PullRequest]}}
    - {{name: signed, type: Webhook, secretRef: {{name: signed-hook}}, events: [Committed, PullRequest]}}
    - {{name: flaky, type: Webhook, secretRef: {{name: flaky-hook}}, events: [Committed, PullRequest]}}
    - {{name: broken, type: Slack, secretRef: {{name: missing-key}}, events: [Committed]}}
    - {{name: status, type: CommitStatus, provider: gitea, apiUrl: "{api}", secretRef: {{name: gitea-api}}}}
    - {{name: comment, type: PullRequestComment, provider: gitea, apiUrl: "{api}", secretRef: {{name: gitea-api}}}}
"#,
        ns = s.ns.name,
        url = gitea.git_url(&repo),
        api = gitea.api,
    );
    Ok((repo, yaml))
}

/// Waits until every one of `paths` has answered 200 to `ids`.
async fn wait_delivered(receiver: &Receiver, paths: &[&str], ids: &[String]) -> anyhow::Result<()> {
    wait_until(
        &format!("{ids:?} delivered to {paths:?}"),
        TIMEOUT,
        || async {
            let done = paths.iter().all(|p| {
                let got = receiver.delivered(p);
                ids.iter().all(|id| got.contains_key(id))
            });
            Ok(done.then_some(()))
        },
    )
    .await
}

#[tokio::test]
async fn notifications_reach_slack_teams_a_signed_webhook_and_gitea_once_each() -> anyhow::Result<()>
{
    let mut s = Scenario::start("notify", &[]).await?;
    let mut gitea = Gitea::start().await?;
    gitea.serve_git_over_https(s.ground)?;
    let (receiver, tls) = start_receiver(&s).await?;
    // The pull requests' API goes through a proxy that refuses the first "create" once: the
    // reconcile that pushed the push branch fails, the next opens the pull request without
    // pushing again, and the change is still recorded and told once.
    let pr_proxy = FaultProxy::start(gitea.url.trim_start_matches("http://"))?;
    let pr_api = format!("http://{}/api/v1", pr_proxy.addr());
    let started = std::time::Instant::now();
    let (repo, yaml) = setup(&s, &gitea, &tls.addr(), &pr_api).await?;
    pr_proxy.set_matching_times(
        Fault::Status {
            status: 500,
            retry_after: None,
            body: r#"{"message":"the first pull request fails"}"#.into(),
        },
        "/pulls HTTP",
        1,
    )?;
    s.apply(&yaml)?;
    s.wait_ready("api", "True", "UpToDate").await?;

    let (commit, pr_number, ids) = step_a_newer_tag_is_committed_and_a_pull_request_opened(
        &s, &receiver, &pr_proxy, started, &yaml,
    )
    .await?;
    step_every_payload_has_its_documented_shape(&receiver, &ids, &commit)?;
    step_every_receiver_holds_each_message_once(&receiver, &ids);
    step_a_restart_finds_nothing_to_tell_again(&mut s, &receiver).await?;
    step_gitea_has_the_commit_status_and_the_comment(&gitea, &repo, &commit, pr_number).await?;
    step_a_destination_without_address_is_a_warning_event(&s).await?;
    // Step 6: a failure past failingAfter is told once; its end once.
    failing_then_recovered(&s, &receiver).await
}

/// Step 1: a newer tag is committed to the push branch and a pull request opened (the
/// first "create" refused once); returns the commit, the pull request's number and the ids
/// of the two messages every receiver gets.
async fn step_a_newer_tag_is_committed_and_a_pull_request_opened(
    s: &Scenario,
    receiver: &Receiver,
    pr_proxy: &FaultProxy,
    started: std::time::Instant,
    yaml: &str,
) -> anyhow::Result<(String, i64, Vec<String>)> {
    let registry = s.ground.registry()?;
    let image_repo = yaml
        .lines()
        .find_map(|l| l.trim().strip_prefix("image: "))
        .and_then(|i| i.split_once('/'))
        .map(|(_, r)| r.to_owned())
        .unwrap_or_default();
    registry.retag(&image_repo, "v1.0.0", "v1.1.0")?;
    // The ground's shared registry notifies no one: ask for a look.
    recheck(s, "v1.1.0").await?;
    let w: ImageWatch = wait_until("a pull request", TIMEOUT, || async {
        let w = s.watches.get("api").await?;
        let open = w
            .status
            .as_ref()
            .and_then(|st| st.pull_request.as_ref())
            .is_some_and(|p| p.state == PullRequestState::Open);
        Ok(open.then_some(w))
    })
    .await?;
    let status = w.status.clone().unwrap_or_default();
    let pr = status
        .pull_request
        .clone()
        .unwrap_or_else(|| unreachable!());
    anyhow::ensure!(
        pr_proxy.count_since(started, Verdict::Answered(500)) == 1,
        "the first pull request was not refused: {:?}",
        pr_proxy.seen()
    );
    let commit = status
        .history
        .first()
        .and_then(|c| c.commit.clone())
        .ok_or_else(|| anyhow::anyhow!("no change in status.history: {status:?}"))?;
    let ids = vec![
        format!("committed/{commit}/v1.1.0"),
        format!("pull-request/{}/opened/v1.1.0", pr.number),
    ];
    wait_delivered(receiver, &["slack", "teams", "hook", "flaky"], &ids).await?;
    Ok((commit, pr.number, ids))
}

/// Step 2: every payload has its documented shape; the webhook's HMAC verifies.
fn step_every_payload_has_its_documented_shape(
    receiver: &Receiver,
    ids: &[String],
    commit: &str,
) -> anyhow::Result<()> {
    for r in receiver.all("slack") {
        check_slack(&serde_json::from_slice(&r.body)?)
            .map_err(|e| anyhow::anyhow!("Slack: {e}"))?;
    }
    for r in receiver.all("teams") {
        check_teams(&serde_json::from_slice(&r.body)?)
            .map_err(|e| anyhow::anyhow!("Teams: {e}"))?;
    }
    for r in receiver.all("hook") {
        check_hmac(&r).map_err(|e| anyhow::anyhow!("webhook: {e}"))?;
        let body: Value = serde_json::from_slice(&r.body)?;
        assert_eq!(
            (body["kind"].as_str(), body["name"].as_str()),
            (Some("ImageWatch"), Some("api"))
        );
    }
    let slack = receiver.delivered("slack");
    let committed = &slack[&ids[0]][0];
    let text = committed["blocks"][0]["text"]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("v1.0.0 → v1.1.0") && text.contains(commit),
        "{text}"
    );
    eprintln!(
        "Slack payload of the commit:\n{}",
        serde_json::to_string_pretty(committed)?
    );
    Ok(())
}

/// Step 3: the flaky receiver answered 500 once, yet holds each message once; every
/// receiver holds each message once.
fn step_every_receiver_holds_each_message_once(receiver: &Receiver, ids: &[String]) {
    assert_eq!(
        receiver
            .all("flaky")
            .iter()
            .filter(|r| r.answered == 500)
            .count(),
        1
    );
    for path in ["slack", "teams", "hook", "flaky"] {
        let got = receiver.delivered(path);
        assert_eq!(got.keys().cloned().collect::<Vec<_>>(), ids, "{path}");
        assert!(got.values().all(|v| v.len() == 1), "{path}: {got:?}");
    }
}

/// Step 3b: a restart finds nothing to tell again. The restarted operator's look at the
/// watch is confirmed by a re-check it records.
async fn step_a_restart_finds_nothing_to_tell_again(
    s: &mut Scenario,
    receiver: &Receiver,
) -> anyhow::Result<()> {
    let before: Vec<usize> = ["slack", "teams", "hook", "flaky"]
        .iter()
        .map(|p| receiver.all(p).len())
        .collect();
    s.operator.restart()?;
    recheck(s, "after-restart").await?;
    let after: Vec<usize> = ["slack", "teams", "hook", "flaky"]
        .iter()
        .map(|p| receiver.all(p).len())
        .collect();
    assert_eq!(before, after, "a restart sent messages again");
    Ok(())
}

/// Step 4: Gitea has the commit status and the comment.
async fn step_gitea_has_the_commit_status_and_the_comment(
    gitea: &Gitea,
    repo: &str,
    commit: &str,
    pr_number: i64,
) -> anyhow::Result<()> {
    let statuses = wait_until("the commit status", TIMEOUT, || async {
        let v = gitea
            .call(
                Method::GET,
                &format!("/repos/{repo}/commits/{commit}/statuses"),
                None,
            )
            .await?;
        Ok(v.as_array().filter(|a| !a.is_empty()).cloned())
    })
    .await?;
    assert_eq!(statuses[0]["context"], "imagewatch/api");
    assert_eq!(statuses[0]["status"], "success");
    let comments = wait_until("the pull request comment", TIMEOUT, || async {
        let v = gitea
            .call(
                Method::GET,
                &format!("/repos/{repo}/issues/{}/comments", pr_number),
                None,
            )
            .await?;
        Ok(v.as_array().filter(|a| !a.is_empty()).cloned())
    })
    .await?;
    let body = comments[0]["body"].as_str().unwrap_or_default();
    assert!(
        body.contains(&format!("pull request #{} opened", pr_number)),
        "{body}"
    );
    Ok(())
}

/// Step 5: the destination whose Secret lacks `address` is a Warning Event, not a crash.
async fn step_a_destination_without_address_is_a_warning_event(s: &Scenario) -> anyhow::Result<()> {
    let note = wait_until("a NotificationFailed Event", TIMEOUT, || async {
        let events = s
            .ground
            .kubectl(&["get", "events", "-n", &s.ns.name, "-o", "json"])?;
        let events: Value = serde_json::from_str(&events)?;
        Ok(events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|e| {
                // core/v1 Events say `message`, events.k8s.io/v1 `note`.
                let note = e["message"]
                    .as_str()
                    .or(e["note"].as_str())
                    .unwrap_or_default();
                (e["reason"] == "NotificationFailed").then(|| note.to_owned())
            }))
    })
    .await?;
    assert!(
        note.contains("broken") && note.contains("has no key address"),
        "{note}"
    );
    assert!(!note.contains("https://"), "no URL in an Event: {note}");
    Ok(())
}

/// Asks for a look at the watch and waits until the operator recorded it.
async fn recheck(s: &Scenario, value: &str) -> anyhow::Result<()> {
    s.ground.kubectl(&[
        "annotate",
        "imagewatch",
        "api",
        "-n",
        &s.ns.name,
        &format!("imagewatch.dev/requestedAt={value}"),
        "--overwrite",
    ])?;
    wait_until(&format!("re-check {value} handled"), TIMEOUT, || async {
        let w = s.watches.get("api").await?;
        let handled = w.status.and_then(|st| st.last_handled_requested_at);
        Ok((handled.as_deref() == Some(value)).then_some(()))
    })
    .await
}

/// The watch's registry Secret goes missing: Slack hears `Failing` once after a second, and
/// `Recovered` once when it is back.
async fn failing_then_recovered(s: &Scenario, receiver: &Receiver) -> anyhow::Result<()> {
    let missing = r#"{"spec":{"credentials":{"secretRef":{"name":"no-such-secret"}}}}"#;
    s.ground.kubectl(&[
        "patch",
        "imagewatch",
        "api",
        "-n",
        &s.ns.name,
        "--type",
        "merge",
        "-p",
        missing,
    ])?;
    let failing = wait_until("a Failing message", TIMEOUT, || async {
        let got = receiver.delivered("slack");
        Ok(got.keys().find(|id| id.starts_with("failing/")).cloned())
    })
    .await?;
    let back = r#"{"spec":{"credentials":{"secretRef":{"name":"regcred"}}}}"#;
    s.ground.kubectl(&[
        "patch",
        "imagewatch",
        "api",
        "-n",
        &s.ns.name,
        "--type",
        "merge",
        "-p",
        back,
    ])?;
    let recovered = failing.replacen("failing/", "recovered/", 1);
    wait_delivered(receiver, &["slack"], std::slice::from_ref(&recovered)).await?;
    let got = receiver.delivered("slack");
    assert_eq!(got[&failing].len(), 1);
    assert_eq!(got[&recovered].len(), 1);
    let w = s.watches.get("api").await?;
    assert_eq!(w.status.and_then(|st| st.failure_notified), None);
    Ok(())
}
