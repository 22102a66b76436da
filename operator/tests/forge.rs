//! The forge clients against in-process stub servers (axum on 127.0.0.1:0) that answer with the
//! providers' documented payloads, kept as fixtures under `tests/fixtures/forge/`: one pull
//! request per head branch, found across pages, created once, updated in place, closed;
//! "already exists" answered by finding and updating; rate limits and refused credentials.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    http::{HeaderMap, Method, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use imagewatch::forge::{EnsureAction, ForgeClient, ForgeError, ForgeProvider, NewPullRequest};
use serde_json::{Value, json};

const HEAD: &str = "imagewatch/promote-team-my-api";
const BASE: &str = "release";
const TOKEN: &str = "good-token";

fn fixture(path: &str) -> Value {
    let file = format!("{}/tests/fixtures/forge/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// One request as the stub saw it.
#[derive(Debug, Clone)]
struct Req {
    method: Method,
    path: String,
    query: BTreeMap<String, String>,
    headers: HeaderMap,
    body: Value,
}

/// The stub's answer.
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Value,
}

fn ok(body: Value) -> Reply {
    Reply {
        status: 200,
        headers: vec![],
        body,
    }
}

fn status(status: u16, body: Value) -> Reply {
    Reply {
        status,
        headers: vec![],
        body,
    }
}

type Logic = Arc<dyn Fn(&Req, &str) -> Reply + Send + Sync>;

struct Stub {
    base: String,
    requests: Arc<Mutex<Vec<Req>>>,
}

impl Stub {
    async fn start(logic: Logic) -> Stub {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let requests: Arc<Mutex<Vec<Req>>> = Arc::default();
        let seen = requests.clone();
        let root = base.clone();
        let app = Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let logic = logic.clone();
                let seen = seen.clone();
                let root = root.clone();
                async move {
                    let query = uri
                        .query()
                        .unwrap_or_default()
                        .split('&')
                        .filter(|p| !p.is_empty())
                        .map(|p| {
                            let (k, v) = p.split_once('=').unwrap_or((p, ""));
                            (k.to_string(), decode(v))
                        })
                        .collect();
                    let req = Req {
                        method,
                        path: uri.path().to_string(),
                        query,
                        headers,
                        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                    };
                    seen.lock().unwrap().push(req.clone());
                    let reply = logic(&req, &root);
                    let mut response: Response = (
                        StatusCode::from_u16(reply.status).unwrap(),
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        if reply.body.is_null() {
                            String::new()
                        } else {
                            reply.body.to_string()
                        },
                    )
                        .into_response();
                    for (k, v) in reply.headers {
                        response.headers_mut().insert(k, v.parse().unwrap());
                    }
                    response
                }
            },
        );
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Stub { base, requests }
    }

    fn requests(&self) -> Vec<Req> {
        self.requests.lock().unwrap().clone()
    }

    fn count(&self, method: Method, path_suffix: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.method == method && r.path.ends_with(path_suffix))
            .count()
    }
}

fn decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&v[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

/// Page 2 of the same listing, as forges write it in `Link` (every query parameter kept).
fn next_page(root: &str, path: &str, req: &Req) -> String {
    let mut query: Vec<String> = req
        .query
        .iter()
        .filter(|(k, _)| k.as_str() != "page")
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
    query.push("page=2".into());
    format!("{root}{path}?{}", query.join("&"))
}

fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

fn proposal(title: &str, body: &str) -> NewPullRequest {
    NewPullRequest {
        head: HEAD.into(),
        base: BASE.into(),
        title: title.into(),
        body: body.into(),
        labels: vec!["promotion".into(), "production".into()],
        auto_merge: true,
    }
}

// ---------------------------------------------------------------- GitHub

/// A canned failure: status, headers, fixture file.
type Failure = (u16, Vec<(&'static str, String)>, &'static str);

#[derive(Default)]
struct GithubState {
    prs: Vec<Value>,
    /// Listings that leave our pull request out (a lagging index), counted down.
    lagging_lists: u32,
    graphql: Option<Value>,
    /// Answer every request with this.
    fail: Option<Failure>,
}

fn github_logic(state: Arc<Mutex<GithubState>>) -> Logic {
    Arc::new(move |req, root| {
        let mut st = state.lock().unwrap();
        if let Some((code, headers, file)) = &st.fail {
            return Reply {
                status: *code,
                headers: headers.clone(),
                body: fixture(file),
            };
        }
        let auth = req
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if auth != format!("Bearer {TOKEN}") {
            return status(401, fixture("github/bad_credentials_401.json"));
        }
        assert_eq!(
            req.headers
                .get("x-github-api-version")
                .and_then(|v| v.to_str().ok()),
            Some("2022-11-28")
        );
        let pulls = "/repos/octo-org/manifests/pulls";
        match (req.method.clone(), req.path.as_str()) {
            (Method::GET, p) if p == pulls => {
                assert_eq!(req.query.get("state").map(String::as_str), Some("open"));
                assert_eq!(
                    req.query.get("head").map(String::as_str),
                    Some("octo-org:imagewatch/promote-team-my-api")
                );
                // Page 1 holds someone else's pull request, page 2 ours.
                if req.query.get("page").map(String::as_str) != Some("2") {
                    let next = next_page(root, pulls, req);
                    return Reply {
                        status: 200,
                        headers: vec![(
                            "link",
                            format!("<{next}>; rel=\"next\", <{next}>; rel=\"last\""),
                        )],
                        body: json!([fixture("github/other_pull.json")]),
                    };
                }
                if st.lagging_lists > 0 {
                    st.lagging_lists -= 1;
                    return ok(json!([]));
                }
                ok(Value::Array(
                    st.prs
                        .iter()
                        .filter(|p| p["state"] == "open")
                        .cloned()
                        .collect(),
                ))
            }
            (Method::POST, p) if p == pulls => {
                let head = req.body["head"].as_str().unwrap().to_string();
                if st
                    .prs
                    .iter()
                    .any(|p| p["state"] == "open" && p["head"]["ref"] == head.as_str())
                {
                    return status(422, fixture("github/already_exists_422.json"));
                }
                let number = st.prs.len() as i64 + 1;
                let mut pr = fixture("github/pull.json");
                pr["number"] = json!(number);
                pr["node_id"] = json!(format!("PR_node_{number}"));
                pr["html_url"] = json!(format!(
                    "https://github.com/octo-org/manifests/pull/{number}"
                ));
                pr["title"] = req.body["title"].clone();
                pr["body"] = req.body["body"].clone();
                pr["head"]["ref"] = req.body["head"].clone();
                pr["base"]["ref"] = req.body["base"].clone();
                pr["labels"] = json!([]);
                st.prs.push(pr.clone());
                status(201, pr)
            }
            (Method::PATCH, p) if p.starts_with(&format!("{pulls}/")) => {
                let n: i64 = p.rsplit('/').next().unwrap().parse().unwrap();
                let pr = st.prs.iter_mut().find(|p| p["number"] == n).unwrap();
                for key in ["title", "body", "state"] {
                    if !req.body[key].is_null() {
                        pr[key] = req.body[key].clone();
                    }
                }
                ok(pr.clone())
            }
            (Method::POST, p) if p.starts_with("/repos/octo-org/manifests/issues/") => {
                let n: i64 = p.split('/').nth(5).unwrap().parse().unwrap();
                let all = fixture("github/labels.json");
                let pr = st.prs.iter_mut().find(|p| p["number"] == n).unwrap();
                let wanted: Vec<String> = req.body["labels"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|l| l.as_str().unwrap().to_string())
                    .collect();
                let added: Vec<Value> = all
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|l| wanted.iter().any(|w| l["name"] == w.as_str()))
                    .cloned()
                    .collect();
                pr["labels"] = Value::Array(added.clone());
                ok(Value::Array(added))
            }
            (Method::POST, "/graphql") => {
                assert!(
                    req.body["query"]
                        .as_str()
                        .unwrap()
                        .contains("enablePullRequestAutoMerge")
                );
                let id = req.body["variables"]["id"].as_str().unwrap().to_string();
                let answer = st
                    .graphql
                    .clone()
                    .unwrap_or_else(|| fixture("github/graphql_auto_merge.json"));
                if answer.get("errors").is_none() {
                    let pr = st
                        .prs
                        .iter_mut()
                        .find(|p| p["node_id"] == id.as_str())
                        .unwrap();
                    pr["auto_merge"] =
                        json!({"merge_method": "merge", "enabled_by": {"login": "imagewatch-bot"}});
                }
                ok(answer)
            }
            other => panic!("unexpected request {other:?}"),
        }
    })
}

async fn github() -> (Stub, Arc<Mutex<GithubState>>, ForgeClient) {
    let state = Arc::new(Mutex::new(GithubState::default()));
    let stub = Stub::start(github_logic(state.clone())).await;
    let client = ForgeClient::new(
        ForgeProvider::Github,
        Some(&stub.base),
        Some("octo-org/manifests"),
        "https://github.com/octo-org/manifests.git",
        Some(TOKEN.into()),
        http(),
    )
    .unwrap();
    (stub, state, client)
}

#[tokio::test]
async fn github_one_pull_request_is_created_then_updated_in_place() {
    let (stub, state, client) = github().await;
    let first = client
        .ensure(&proposal("Promote v2", "body v2"))
        .await
        .unwrap();
    assert_eq!(first.action, EnsureAction::Created);
    assert_eq!(first.pull_request.number, 1);
    assert_eq!(
        first.pull_request.url,
        "https://github.com/octo-org/manifests/pull/1"
    );
    assert_eq!(first.pull_request.labels, vec!["promotion", "production"]);
    assert!(first.pull_request.auto_merge);
    assert!(first.warnings.is_empty(), "{:?}", first.warnings);
    // Both pages were read before creating.
    assert!(
        stub.requests()
            .iter()
            .any(|r| r.query.get("page").map(String::as_str) == Some("2"))
    );

    // A newer candidate: same pull request, new title and body.
    let second = client
        .ensure(&proposal("Promote v3", "body v3"))
        .await
        .unwrap();
    assert_eq!(second.action, EnsureAction::Updated);
    assert_eq!(second.pull_request.number, 1);
    assert_eq!(second.pull_request.title, "Promote v3");

    // Nothing new: no write at all.
    let writes_before = stub
        .requests()
        .iter()
        .filter(|r| r.method != Method::GET)
        .count();
    let third = client
        .ensure(&proposal("Promote v3", "body v3"))
        .await
        .unwrap();
    assert_eq!(third.action, EnsureAction::Unchanged);
    let writes_after = stub
        .requests()
        .iter()
        .filter(|r| r.method != Method::GET)
        .count();
    assert_eq!(writes_before, writes_after);
    assert_eq!(stub.count(Method::POST, "/pulls"), 1, "never a duplicate");
    assert_eq!(stub.count(Method::POST, "/graphql"), 1);
    assert_eq!(state.lock().unwrap().prs.len(), 1);

    client.close(&third.pull_request).await.unwrap();
    assert_eq!(state.lock().unwrap().prs[0]["state"], "closed");
    assert!(client.find_open(HEAD, BASE).await.unwrap().is_none());
}

#[tokio::test]
async fn github_already_exists_is_found_and_updated() {
    let (stub, state, client) = github().await;
    // Someone (an earlier run) opened it; the listing does not show it yet.
    let mut existing = fixture("github/pull.json");
    existing["number"] = json!(1);
    existing["node_id"] = json!("PR_node_1");
    existing["labels"] = json!([]);
    state.lock().unwrap().prs.push(existing);
    state.lock().unwrap().lagging_lists = 1;

    let ensured = client
        .ensure(&proposal("Promote v4", "body v4"))
        .await
        .unwrap();
    assert_eq!(ensured.action, EnsureAction::Updated);
    assert_eq!(ensured.pull_request.number, 1);
    assert_eq!(stub.count(Method::POST, "/pulls"), 1, "one refused create");
    assert_eq!(state.lock().unwrap().prs.len(), 1, "no duplicate");
    assert_eq!(state.lock().unwrap().prs[0]["title"], "Promote v4");
}

#[tokio::test]
async fn github_rate_limits_say_how_long_to_wait() {
    let (_stub, state, client) = github().await;
    let reset = jiff::Timestamp::now().as_second() + 30;
    state.lock().unwrap().fail = Some((
        403,
        vec![
            ("x-ratelimit-limit", "5000".into()),
            ("x-ratelimit-remaining", "0".into()),
            ("x-ratelimit-reset", reset.to_string()),
        ],
        "github/rate_limited_403.json",
    ));
    let err = client.find_open(HEAD, BASE).await.unwrap_err();
    match &err {
        ForgeError::RateLimited {
            retry_after: Some(d),
            message,
            ..
        } => {
            assert!(
                *d >= Duration::from_secs(28) && *d <= Duration::from_secs(30),
                "{d:?}"
            );
            assert!(message.contains("API rate limit exceeded"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err.category(), "rate_limited");

    state.lock().unwrap().fail = Some((
        429,
        vec![("retry-after", "7".into())],
        "github/secondary_rate_limit_429.json",
    ));
    let err = client.ensure(&proposal("t", "b")).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
    assert!(err.to_string().contains("secondary rate limit"), "{err}");
}

#[tokio::test]
async fn github_bad_credentials_are_reported() {
    let state = Arc::new(Mutex::new(GithubState::default()));
    let stub = Stub::start(github_logic(state)).await;
    let client = ForgeClient::new(
        ForgeProvider::Github,
        Some(&stub.base),
        Some("octo-org/manifests"),
        "https://github.com/octo-org/manifests.git",
        Some("wrong".into()),
        http(),
    )
    .unwrap();
    let err = client.ensure(&proposal("t", "b")).await.unwrap_err();
    assert!(
        matches!(&err, ForgeError::Unauthorized { status: 401, message, .. } if message == "Bad credentials"),
        "{err:?}"
    );
}

#[tokio::test]
async fn github_auto_merge_refusal_is_a_warning() {
    let (_stub, state, client) = github().await;
    state.lock().unwrap().graphql = Some(fixture("github/graphql_auto_merge_error.json"));
    let ensured = client.ensure(&proposal("t", "b")).await.unwrap();
    assert_eq!(ensured.action, EnsureAction::Created);
    assert!(!ensured.pull_request.auto_merge);
    assert!(
        ensured.warnings[0].contains("Auto merge is not allowed"),
        "{:?}",
        ensured.warnings
    );
}

// ---------------------------------------------------------------- GitLab

#[derive(Default)]
struct GitlabState {
    mrs: Vec<Value>,
    lagging_lists: u32,
    rate_limited: bool,
}

fn gitlab_logic(state: Arc<Mutex<GitlabState>>) -> Logic {
    Arc::new(move |req, root| {
        let mut st = state.lock().unwrap();
        if st.rate_limited {
            return Reply {
                status: 429,
                headers: vec![
                    ("retry-after", "5".into()),
                    ("ratelimit-remaining", "0".into()),
                ],
                body: fixture("gitlab/rate_limited_429.json"),
            };
        }
        if req
            .headers
            .get("private-token")
            .and_then(|v| v.to_str().ok())
            != Some(TOKEN)
        {
            return status(401, fixture("gitlab/unauthorized_401.json"));
        }
        // The project path is one URL-encoded segment.
        let mrs = "/api/v4/projects/group%2Fmanifests/merge_requests";
        match (req.method.clone(), req.path.as_str()) {
            (Method::GET, p) if p == mrs => {
                assert_eq!(req.query.get("state").map(String::as_str), Some("opened"));
                assert_eq!(
                    req.query.get("source_branch").map(String::as_str),
                    Some(HEAD)
                );
                assert_eq!(
                    req.query.get("target_branch").map(String::as_str),
                    Some(BASE)
                );
                if req.query.get("page").map(String::as_str) != Some("2") {
                    return Reply {
                        status: 200,
                        headers: vec![
                            (
                                "link",
                                format!("<{}>; rel=\"next\"", next_page(root, mrs, req)),
                            ),
                            ("x-next-page", "2".into()),
                        ],
                        body: json!([]),
                    };
                }
                if st.lagging_lists > 0 {
                    st.lagging_lists -= 1;
                    return ok(json!([]));
                }
                ok(Value::Array(
                    st.mrs
                        .iter()
                        .filter(|m| m["state"] == "opened")
                        .cloned()
                        .collect(),
                ))
            }
            (Method::POST, p) if p == mrs => {
                if st.mrs.iter().any(|m| {
                    m["state"] == "opened" && m["source_branch"] == req.body["source_branch"]
                }) {
                    return status(409, fixture("gitlab/already_exists_409.json"));
                }
                assert_eq!(req.body["remove_source_branch"], true);
                let iid = st.mrs.len() as i64 + 1;
                let mut mr = fixture("gitlab/merge_request.json");
                mr["iid"] = json!(iid);
                mr["web_url"] = json!(format!(
                    "https://gitlab.example.com/group/manifests/-/merge_requests/{iid}"
                ));
                mr["title"] = req.body["title"].clone();
                mr["description"] = req.body["description"].clone();
                mr["source_branch"] = req.body["source_branch"].clone();
                mr["target_branch"] = req.body["target_branch"].clone();
                mr["labels"] = json!(
                    req.body["labels"]
                        .as_str()
                        .map(|l| l.split(',').collect::<Vec<_>>())
                        .unwrap_or_default()
                );
                st.mrs.push(mr.clone());
                status(201, mr)
            }
            (Method::PUT, p) if p.starts_with(&format!("{mrs}/")) && p.ends_with("/merge") => {
                assert_eq!(req.body["merge_when_pipeline_succeeds"], true);
                assert_eq!(req.body["auto_merge"], true);
                let iid: i64 = p.split('/').nth(6).unwrap().parse().unwrap();
                let mr = st.mrs.iter_mut().find(|m| m["iid"] == iid).unwrap();
                assert_eq!(req.body["sha"], mr["sha"]);
                mr["merge_when_pipeline_succeeds"] = json!(true);
                ok(mr.clone())
            }
            (Method::PUT, p) if p.starts_with(&format!("{mrs}/")) => {
                let iid: i64 = p.rsplit('/').next().unwrap().parse().unwrap();
                let mr = st.mrs.iter_mut().find(|m| m["iid"] == iid).unwrap();
                for key in ["title", "description"] {
                    if !req.body[key].is_null() {
                        mr[key] = req.body[key].clone();
                    }
                }
                if req.body["state_event"] == "close" {
                    mr["state"] = json!("closed");
                }
                if let Some(add) = req.body["add_labels"].as_str() {
                    let labels = mr["labels"].as_array_mut().unwrap();
                    for l in add.split(',') {
                        if !labels.iter().any(|x| x == l) {
                            labels.push(json!(l));
                        }
                    }
                }
                ok(mr.clone())
            }
            other => panic!("unexpected request {other:?}"),
        }
    })
}

async fn gitlab() -> (Stub, Arc<Mutex<GitlabState>>, ForgeClient) {
    let state = Arc::new(Mutex::new(GitlabState::default()));
    let stub = Stub::start(gitlab_logic(state.clone())).await;
    let client = ForgeClient::new(
        ForgeProvider::Gitlab,
        Some(&format!("{}/api/v4", stub.base)),
        None,
        "https://gitlab.example.com/group/manifests.git",
        Some(TOKEN.into()),
        http(),
    )
    .unwrap();
    (stub, state, client)
}

#[tokio::test]
async fn gitlab_one_merge_request_is_created_updated_and_closed() {
    let (stub, state, client) = gitlab().await;
    let first = client
        .ensure(&proposal("Promote v2", "body v2"))
        .await
        .unwrap();
    assert_eq!(first.action, EnsureAction::Created);
    assert_eq!(first.pull_request.number, 1);
    assert_eq!(first.pull_request.labels, vec!["promotion", "production"]);
    assert!(first.pull_request.auto_merge, "{:?}", first.warnings);
    assert_eq!(
        stub.count(Method::PUT, "/merge"),
        1,
        "merge_when_pipeline_succeeds requested once"
    );

    let second = client
        .ensure(&proposal("Promote v3", "body v3"))
        .await
        .unwrap();
    assert_eq!(second.action, EnsureAction::Updated);
    assert_eq!(second.pull_request.number, 1);
    assert_eq!(state.lock().unwrap().mrs[0]["description"], "body v3");
    assert_eq!(stub.count(Method::POST, "/merge_requests"), 1);
    assert_eq!(
        stub.count(Method::PUT, "/merge"),
        1,
        "already set: not asked again"
    );

    client.close(&second.pull_request).await.unwrap();
    assert_eq!(state.lock().unwrap().mrs[0]["state"], "closed");
}

#[tokio::test]
async fn gitlab_conflict_is_found_and_updated() {
    let (_stub, state, client) = gitlab().await;
    let mut existing = fixture("gitlab/merge_request.json");
    existing["iid"] = json!(1);
    state.lock().unwrap().mrs.push(existing);
    state.lock().unwrap().lagging_lists = 1;
    let ensured = client.ensure(&proposal("Promote v9", "b")).await.unwrap();
    assert_eq!(ensured.action, EnsureAction::Updated);
    assert_eq!(ensured.pull_request.number, 1);
    assert_eq!(state.lock().unwrap().mrs.len(), 1);
    assert_eq!(ensured.pull_request.labels, vec!["promotion", "production"]);
}

#[tokio::test]
async fn gitlab_rate_limit_and_auth() {
    let (stub, state, client) = gitlab().await;
    state.lock().unwrap().rate_limited = true;
    let err = client.find_open(HEAD, BASE).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(5)));
    assert!(err.to_string().contains("429 Too Many Requests"), "{err}");
    let bad = ForgeClient::new(
        ForgeProvider::Gitlab,
        Some(&format!("{}/api/v4", stub.base)),
        Some("group/manifests"),
        "https://gitlab.example.com/group/manifests.git",
        Some("nope".into()),
        http(),
    )
    .unwrap();
    state.lock().unwrap().rate_limited = false;
    let err = bad.find_open(HEAD, BASE).await.unwrap_err();
    assert!(
        matches!(err, ForgeError::Unauthorized { status: 401, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("401 Unauthorized"), "{err}");
}

// ---------------------------------------------------------------- Gitea

#[derive(Default)]
struct GiteaState {
    prs: Vec<Value>,
    lagging_lists: u32,
    label_ids: Vec<i64>,
    merge_requests: Vec<Value>,
}

fn gitea_logic(state: Arc<Mutex<GiteaState>>) -> Logic {
    Arc::new(move |req, root| {
        let mut st = state.lock().unwrap();
        if req
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            != Some(&format!("token {TOKEN}"))
        {
            return status(401, fixture("gitea/unauthorized_401.json"));
        }
        let repo = "/api/v1/repos/org/manifests";
        let pulls = format!("{repo}/pulls");
        match (req.method.clone(), req.path.as_str()) {
            (Method::GET, p) if p == pulls => {
                assert_eq!(req.query.get("state").map(String::as_str), Some("open"));
                if req.query.get("page").map(String::as_str) != Some("2") {
                    let mut other = fixture("gitea/pull.json");
                    other["number"] = json!(99);
                    other["head"]["ref"] = json!("feature/x");
                    return Reply {
                        status: 200,
                        headers: vec![
                            (
                                "link",
                                format!(
                                    "<{0}>; rel=\"next\",<{0}>; rel=\"last\"",
                                    next_page(root, &pulls, req)
                                ),
                            ),
                            ("x-total-count", "2".into()),
                        ],
                        body: json!([other]),
                    };
                }
                if st.lagging_lists > 0 {
                    st.lagging_lists -= 1;
                    return ok(json!([]));
                }
                ok(Value::Array(
                    st.prs
                        .iter()
                        .filter(|p| p["state"] == "open")
                        .cloned()
                        .collect(),
                ))
            }
            (Method::POST, p) if p == pulls => {
                if st
                    .prs
                    .iter()
                    .any(|p| p["state"] == "open" && p["head"]["ref"] == req.body["head"])
                {
                    return status(409, fixture("gitea/already_exists_409.json"));
                }
                let number = st.prs.len() as i64 + 1;
                let mut pr = fixture("gitea/pull.json");
                pr["number"] = json!(number);
                pr["html_url"] = json!(format!(
                    "https://gitea.example.com/org/manifests/pulls/{number}"
                ));
                pr["title"] = req.body["title"].clone();
                pr["body"] = req.body["body"].clone();
                pr["head"]["ref"] = req.body["head"].clone();
                pr["base"]["ref"] = req.body["base"].clone();
                st.prs.push(pr.clone());
                status(201, pr)
            }
            (Method::POST, p) if p.starts_with(&format!("{pulls}/")) && p.ends_with("/merge") => {
                st.merge_requests.push(req.body.clone());
                status(200, Value::Null)
            }
            (Method::PATCH, p) if p.starts_with(&format!("{pulls}/")) => {
                let n: i64 = p.rsplit('/').next().unwrap().parse().unwrap();
                let pr = st.prs.iter_mut().find(|p| p["number"] == n).unwrap();
                for key in ["title", "body", "state"] {
                    if !req.body[key].is_null() {
                        pr[key] = req.body[key].clone();
                    }
                }
                ok(pr.clone())
            }
            (Method::GET, p) if p == format!("{repo}/labels") => ok(fixture("gitea/labels.json")),
            (Method::POST, p) if p.starts_with(&format!("{repo}/issues/")) => {
                let ids: Vec<i64> = req.body["labels"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_i64().unwrap())
                    .collect();
                st.label_ids.extend(&ids);
                let all = fixture("gitea/labels.json");
                ok(Value::Array(
                    all.as_array()
                        .unwrap()
                        .iter()
                        .filter(|l| ids.contains(&l["id"].as_i64().unwrap()))
                        .cloned()
                        .collect(),
                ))
            }
            other => panic!("unexpected request {other:?}"),
        }
    })
}

async fn gitea() -> (Stub, Arc<Mutex<GiteaState>>, ForgeClient) {
    let state = Arc::new(Mutex::new(GiteaState::default()));
    let stub = Stub::start(gitea_logic(state.clone())).await;
    let client = ForgeClient::new(
        ForgeProvider::Gitea,
        Some(&format!("{}/api/v1", stub.base)),
        None,
        "https://gitea.example.com/org/manifests.git",
        Some(TOKEN.into()),
        http(),
    )
    .unwrap();
    (stub, state, client)
}

#[tokio::test]
async fn gitea_pull_request_with_label_ids_and_auto_merge() {
    let (stub, state, client) = gitea().await;
    let mut wanted = proposal("Promote v2", "body v2");
    wanted.labels.push("no-such-label".into());
    let first = client.ensure(&wanted).await.unwrap();
    assert_eq!(first.action, EnsureAction::Created);
    assert_eq!(first.pull_request.number, 1);
    assert_eq!(state.lock().unwrap().label_ids, vec![11, 12]);
    assert!(
        first.warnings.iter().any(|w| w.contains("no-such-label")),
        "{:?}",
        first.warnings
    );
    let merges = state.lock().unwrap().merge_requests.clone();
    assert_eq!(merges.len(), 1);
    assert_eq!(merges[0]["Do"], "merge");
    assert_eq!(merges[0]["merge_when_checks_succeed"], true);

    let second = client
        .ensure(&proposal("Promote v3", "body v3"))
        .await
        .unwrap();
    assert_eq!(second.action, EnsureAction::Updated);
    assert_eq!(second.pull_request.number, 1);
    assert_eq!(stub.count(Method::POST, "/pulls"), 1);
    client.close(&second.pull_request).await.unwrap();
    assert_eq!(state.lock().unwrap().prs[0]["state"], "closed");
}

#[tokio::test]
async fn gitea_conflict_is_found_and_auth_is_checked() {
    let (stub, state, client) = gitea().await;
    let mut existing = fixture("gitea/pull.json");
    existing["number"] = json!(1);
    state.lock().unwrap().prs.push(existing);
    state.lock().unwrap().lagging_lists = 1;
    let mut p = proposal("Promote v7", "b");
    p.labels.clear();
    p.auto_merge = false;
    let ensured = client.ensure(&p).await.unwrap();
    assert_eq!(ensured.action, EnsureAction::Updated);
    assert_eq!(state.lock().unwrap().prs.len(), 1);

    let bad = ForgeClient::new(
        ForgeProvider::Gitea,
        Some(&format!("{}/api/v1", stub.base)),
        Some("org/manifests"),
        "https://gitea.example.com/org/manifests.git",
        None,
        http(),
    )
    .unwrap();
    let err = bad.find_open(HEAD, BASE).await.unwrap_err();
    assert!(
        matches!(&err, ForgeError::Unauthorized { message, .. } if message == "token is required"),
        "{err:?}"
    );
}

/// A stub that answers the notification endpoints of `provider` with their documented
/// 201 bodies and anything else with 404.
fn notes_logic(provider: ForgeProvider) -> Logic {
    Arc::new(move |req: &Req, _root: &str| {
        let created = |file: &str| status(201, fixture(file));
        match (provider, req.method.as_str(), req.path.as_str()) {
            (ForgeProvider::Github, "POST", "/repos/octo-org/manifests/statuses/c0ffee") => {
                created("github/status_201.json")
            }
            (ForgeProvider::Github, "POST", "/repos/octo-org/manifests/issues/3/comments") => {
                created("github/comment_201.json")
            }
            (
                ForgeProvider::Gitlab,
                "POST",
                "/api/v4/projects/group%2Fmanifests/statuses/c0ffee",
            ) => created("gitlab/status_201.json"),
            (
                ForgeProvider::Gitlab,
                "POST",
                "/api/v4/projects/group%2Fmanifests/merge_requests/3/notes",
            ) => created("gitlab/note_201.json"),
            _ => status(404, json!({"message": "Not Found"})),
        }
    })
}

#[tokio::test]
async fn github_and_gitlab_take_a_commit_status_and_a_comment() {
    for (provider, api, git_url) in [
        (
            ForgeProvider::Github,
            "",
            "https://github.com/octo-org/manifests.git",
        ),
        (
            ForgeProvider::Gitlab,
            "/api/v4",
            "https://gitlab.example.com/group/manifests.git",
        ),
    ] {
        let stub = Stub::start(notes_logic(provider)).await;
        let client = ForgeClient::new(
            provider,
            Some(&format!("{}{api}", stub.base)),
            None,
            git_url,
            Some(TOKEN.into()),
            http(),
        )
        .unwrap();
        client
            .set_commit_status(
                "c0ffee",
                true,
                "team/api: v2 committed (was v1)",
                "imagewatch/api",
                Some("https://example.com/commit/c0ffee"),
            )
            .await
            .unwrap_or_else(|e| panic!("{provider:?}: {e}"));
        client
            .comment(3, "**team/api: pull request #3 opened (v2)**")
            .await
            .unwrap_or_else(|e| panic!("{provider:?}: {e}"));
        let requests = stub.requests();
        let (status, comment) = (&requests[0].body, &requests[1].body);
        assert_eq!(status["state"], "success", "{provider:?}");
        assert_eq!(status["description"], "team/api: v2 committed (was v1)");
        assert_eq!(status["target_url"], "https://example.com/commit/c0ffee");
        // GitHub names the status `context`, GitLab `name`.
        let context = if provider == ForgeProvider::Github {
            "context"
        } else {
            "name"
        };
        assert_eq!(status[context], "imagewatch/api", "{provider:?}");
        assert_eq!(comment["body"], "**team/api: pull request #3 opened (v2)**");
        let auth = requests[0]
            .headers
            .get("authorization")
            .or(requests[0].headers.get("private-token"));
        assert!(auth.is_some(), "{provider:?}: the token is sent");
    }
}
