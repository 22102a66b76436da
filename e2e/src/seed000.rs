//! Seed 000's flow on the real parts: ECR pushes (moto) → EventBridge → SQS → one pattern
//! ImageWatch polling only hourly → one pull request per push on a real Gitea. Shared by the
//! e2e test (`watch_pull_request.rs`) and `just bench` (which times it with the release
//! binary).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{
    gitea::{ADMIN, Gitea},
    ground::random_suffix,
    operator::metric,
    setup::{Scenario, create_secret, moto, moto_env},
    wait_until,
};

const TIMEOUT: Duration = Duration::from_secs(120);

/// A Deployment `api` with one container `api` running `image:tag`.
pub fn deployment(image: &str, tag: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {image}:{tag}   # written by imagewatch\n"
    )
}

/// A Gitea repository with one Deployment per app at `{images}/{app}/api:v1.0.0`, and the
/// pattern watch `all` over `{images}/*/api` proposing pull requests, up to date.
pub async fn pattern_watch_on(
    s: &Scenario,
    gitea: &Gitea,
    images: &str,
    apps: &[String],
    credentials: &str,
    interval: &str,
    per_member: bool,
) -> anyhow::Result<String> {
    let repo = gitea.create_repo("pattern").await?;
    for app in apps {
        gitea
            .put_file(
                &repo,
                &format!("apps/{app}/deployment.yaml"),
                &deployment(&format!("{images}/{app}/api"), "v1.0.0"),
                "main",
                None,
            )
            .await?;
    }
    for (name, data) in [
        (
            "gitea-git",
            vec![("username", ADMIN), ("password", gitea.token.as_str())],
        ),
        ("gitea-api", vec![("token", gitea.token.as_str())]),
    ] {
        create_secret(&s.admin, &s.ns.name, name, "Opaque", &data).await?;
    }
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: all, namespace: {ns}}}
spec:
  image: "{images}/*/api"
  tags: {{pattern: "v*"}}
  interval: {interval}
  credentials: {credentials}
  git:
    url: "{url}"
    branch: main
    secretRef: {{name: gitea-git}}
    pullRequest:
      provider: gitea
      apiUrl: "{api}"
      secretRef: {{name: gitea-api}}
      perMember: {per_member}
  target:
    workload: {{path: "apps/$1", kind: Deployment, name: api, container: api}}
"#,
        ns = s.ns.name,
        url = gitea.git_url(&repo),
        api = gitea.api,
    ))?;
    let count = apps.len();
    wait_until("every member up to date", TIMEOUT, || async {
        let w = s.watches.get("all").await?;
        let st = w.status.unwrap_or_default();
        Ok((st.members_ready == Some(count as i64)).then_some(()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", s.operator.log_tail(30)))?;
    Ok(repo)
}

/// What one seed-000 run saw.
#[derive(Debug)]
pub struct Seed000 {
    /// The image prefix (`ACCOUNT.dkr.ecr.REGION.amazonaws.com/TOP`).
    pub images: String,
    /// From the last push event until every pull request was open.
    pub elapsed: Duration,
    /// Every pull request of the repository, open or not.
    pub pulls: Vec<Value>,
    /// Per app, its deployment file on its member's pull request branch.
    pub files: Vec<(String, String)>,
    /// `imagewatch_events_total{source="sqs",outcome="matched"}` at the end.
    pub sqs_matched: f64,
}

/// `count` ECR repositories at v1.0.0 watched by one pattern watch proposing pull requests on
/// Gitea; then v1.1.0 pushed to each with its ECR push event, and timed until `count` pull
/// requests are open.
pub async fn run(count: usize) -> anyhow::Result<Seed000> {
    let ground = crate::Ground::get()?;
    ground.install_crds()?;
    let aws_env = moto_env(ground)?;
    let sfx = random_suffix();
    let queue = moto(&["create-queue", &format!("seed000-{sfx}")], &aws_env)?;
    let queue = queue.lines().last().unwrap_or_default().to_string();
    moto(
        &["route-ecr-events", &format!("seed000-{sfx}"), &queue],
        &aws_env,
    )?;
    let top = format!("seed000-{sfx}");
    let apps: Vec<String> = (0..count).map(|i| format!("app{i:02}")).collect();
    for app in &apps {
        let repository = format!("{top}/{app}/api");
        moto(&["create-repository", &repository], &aws_env)?;
        moto(&["put-image", &repository, "v1.0.0"], &aws_env)?;
    }
    let moto_url = ground.var("IMAGEWATCH_MOTO_URL")?.to_string();
    let env: Vec<(&str, &str)> = aws_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let s = Scenario::start_with_env(
        "seed000",
        &[
            "--aws-endpoint-url",
            &moto_url,
            "--sqs-queue-url",
            &queue,
            "--sqs-default-account",
            "123456789012",
        ],
        &env,
    )
    .await?;
    let mut gitea = Gitea::start().await?;
    gitea.serve_git_over_https(s.ground)?;
    let images = format!("123456789012.dkr.ecr.us-east-1.amazonaws.com/{top}");
    let repo = pattern_watch_on(&s, &gitea, &images, &apps, "{provider: aws}", "1h", true).await?;

    for app in &apps {
        let repository = format!("{top}/{app}/api");
        moto(&["put-image", &repository, "v1.1.0"], &aws_env)?;
        moto(&["put-push-event", &repository, "v1.1.0"], &aws_env)?;
    }
    let pushed = Instant::now();
    wait_until("a pull request per push", TIMEOUT, || async {
        Ok((gitea.pulls(&repo, "open").await?.len() >= count).then_some(()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", s.operator.log_tail(30)))?;
    let elapsed = pushed.elapsed();
    let pulls = gitea.pulls(&repo, "all").await?;
    let mut files = Vec::new();
    for app in &apps {
        let head = format!(
            "imagewatch/{}-all-{}-{app}-api",
            s.ns.name,
            top.replace('/', "-")
        );
        if pulls
            .iter()
            .any(|p| p["head"]["ref"].as_str() == Some(head.as_str()))
        {
            let file = gitea
                .file(&repo, &head, &format!("apps/{app}/deployment.yaml"))
                .await?;
            files.push((app.clone(), file));
        }
    }
    let metrics = s.operator.metrics().await?;
    let sqs_matched = metric(
        &metrics,
        "imagewatch_events_total{source=\"sqs\",outcome=\"matched\"}",
    );
    Ok(Seed000 {
        images,
        elapsed,
        pulls,
        files,
        sqs_matched,
    })
}
