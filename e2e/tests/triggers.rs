//! Push-driven updates on the real parts: a CNCF distribution registry notifying the
//! operator's webhook receiver, and ECR (moto) → EventBridge → SQS. Watches poll only hourly
//! here, so a prompt commit can only come from the event.

use std::{path::PathBuf, time::Duration};

use imagewatch_e2e::{
    ground::random_suffix,
    operator::metric,
    setup::{Scenario, copy_dir, sample, webhook_scenario},
    setup::{moto, moto_credentials},
    wait_until,
};

/// Seeds a manifests repository whose canary Deployment runs `image:tag`.
fn seed(s: &Scenario, image: &str, tag: &str) -> anyhow::Result<(String, String)> {
    let dir = tempfile::tempdir()?;
    copy_dir(&sample("canary-primary/manifests"), dir.path())?;
    let file: PathBuf = dir
        .path()
        .join("apps/my-api/overlays/stg/deployment-canary.yaml");
    let text = std::fs::read_to_string(&file)?.replace(
        "registry.example.com/my-api:canary-v1.2.3",
        &format!("{image}:{tag}"),
    );
    std::fs::write(&file, text)?;
    let name = format!("trig-{}", s.ns.name);
    let url = s.ground.git()?.new_repo(&name, dir.path())?;
    Ok((name, url))
}

fn watch_yaml(ns: &str, image: &str, git_url: &str, pattern: &str, credentials: &str) -> String {
    format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: canary, namespace: {ns}}}
spec:
  image: {image}
  tags: {{pattern: "{pattern}"}}
  interval: 1h
  {credentials}
  git: {{url: "{git_url}", secretRef: {{name: git-creds}}}}
  target:
    workload: {{path: apps/my-api/overlays/stg, kind: Deployment, name: my-api-canary, container: my-api}}
"#
    )
}

#[tokio::test]
async fn a_registry_webhook_makes_the_commit_without_waiting_for_the_poll() -> anyhow::Result<()> {
    let (registry, host, s, addr) = webhook_scenario("hook", &[]).await?;

    let image_repo = format!("hook/app-{}", random_suffix());
    registry.script("push-image.sh", &[&format!("{image_repo}:canary-v1.0.0")])?;
    let (repo_name, url) = seed(&s, &format!("{host}/{image_repo}"), "canary-v1.0.0")?;
    s.apply(&watch_yaml(
        &s.ns.name,
        &format!("{host}/{image_repo}"),
        &url,
        "canary-*",
        "credentials: {secretRef: {name: hookreg}}",
    ))?;
    s.wait_ready("canary", "True", "UpToDate").await?;
    let git = s.ground.git()?;

    // A push: the notification wakes the watch long before its hourly poll.
    registry.script("push-image.sh", &[&format!("{image_repo}:canary-v1.1.0")])?;
    s.wait_applied("canary", "canary-v1.1.0").await?;
    assert_eq!(git.commit_count(&repo_name, "main")?, 2);

    // A re-tag of an existing digest (a CI cache hit) is seen too.
    registry.script(
        "retag.sh",
        &[&format!("{image_repo}:canary-v1.1.0"), "canary-v1.2.0"],
    )?;
    let watch = s.wait_applied("canary", "canary-v1.2.0").await?;
    // image:tag is written on the listing's word: no manifest request, so no digest known.
    let latest = watch.status.and_then(|st| st.latest);
    assert_eq!(
        latest
            .as_ref()
            .map(|l| (l.tag.as_str(), l.digest.as_deref())),
        Some(("canary-v1.2.0", None))
    );
    assert_eq!(git.commit_count(&repo_name, "main")?, 3);

    let metrics = s.operator.metrics().await?;
    assert!(
        metric(
            &metrics,
            "imagewatch_events_total{source=\"distribution\",outcome=\"matched\"}"
        ) >= 2.0,
        "{metrics}"
    );
    assert!(
        metric(&metrics, "imagewatch_push_to_commit_seconds_count") >= 2.0,
        "{metrics}"
    );
    // Where those pushes' time went: every stage of a watch of one repository, from the
    // event to the status written after the push.
    for stage in imagewatch::telemetry::PUSH_STAGES {
        let count = format!("imagewatch_push_stage_seconds_count{{stage=\"{stage}\"}}");
        assert!(metric(&metrics, &count) >= 2.0, "{count}:\n{metrics}");
    }

    // A forged notification without the token is refused and changes nothing.
    let refused = reqwest::Client::new()
        .post(format!("http://{addr}/hooks/distribution"))
        .body(r#"{"events":[]}"#)
        .send()
        .await?;
    assert_eq!(refused.status(), 401);

    // The metrics tell the truth. The webhook results are counters; the forged request is
    // counted as refused (the receiver's counts are added every 30 s).
    let metrics = wait_until("webhook counters exported", Duration::from_secs(45), || async {
        let m = s.operator.metrics().await?;
        let rejected = metric(
            &m,
            "imagewatch_webhook_requests_total{provider=\"distribution\",result=\"rejected_auth\"}",
        );
        Ok((rejected >= 1.0).then_some(m))
    })
    .await?;
    assert!(
        metrics.contains("# TYPE imagewatch_webhook_requests counter"),
        "{metrics}"
    );
    assert!(
        metric(
            &metrics,
            "imagewatch_webhook_requests_total{provider=\"distribution\",result=\"accepted\"}"
        ) >= 2.0,
        "{metrics}"
    );
    assert_eq!(metric(&metrics, "imagewatch_watches"), 1.0, "{metrics}");
    assert!(
        metric(
            &metrics,
            "imagewatch_reconcile_duration_seconds_count{controller=\"imagewatch\"}"
        ) >= 3.0,
        "{metrics}"
    );
    // One count per HTTP request: the registry's access log lines (one per request, the
    // user agent last) from the operator.
    let from_operator = || -> anyhow::Result<usize> {
        Ok(std::fs::read_to_string(registry.log_path())?
            .lines()
            .filter(|l| l.starts_with("127.0.0.1 ") && l.contains("\"imagewatch/"))
            .count())
    };
    let (counted, logged) = wait_until(
        "registry requests counted as the registry logged them",
        Duration::from_secs(20),
        || async {
            let m = s.operator.metrics().await?;
            let counted: f64 = m
                .lines()
                .filter(|l| {
                    l.starts_with("imagewatch_registry_requests_total{")
                        && l.contains(&format!("registry=\"{host}\""))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            let logged = from_operator()?;
            anyhow::ensure!(
                counted as usize == logged && logged > 0,
                "counted {counted}, the registry logged {logged}"
            );
            Ok(Some((counted, logged)))
        },
    )
    .await?;
    assert!(logged >= 3, "{counted} {logged}");
    Ok(())
}

#[tokio::test]
async fn an_ecr_push_reaches_git_through_eventbridge_and_sqs() -> anyhow::Result<()> {
    let ground = imagewatch_e2e::Ground::get()?;
    let moto_url = ground.var("IMAGEWATCH_MOTO_URL")?.to_string();
    let aws_env = moto_credentials(ground)?;
    let suffix = random_suffix();
    let queue = moto(&["create-queue", &format!("imagewatch-{suffix}")], &aws_env)?;
    let queue = queue.lines().last().unwrap_or_default().to_string();
    moto(
        &["route-ecr-events", &format!("ecr-to-{suffix}"), &queue],
        &aws_env,
    )?;
    let repo = format!("hoge/svc-{suffix}");
    moto(&["create-repository", &repo], &aws_env)?;
    moto(&["put-image", &repo, "canary-v1.0.0"], &aws_env)?;

    let env: Vec<(&str, &str)> = aws_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let s = Scenario::start_with_env(
        "ecr",
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
    let image = format!("123456789012.dkr.ecr.us-east-1.amazonaws.com/{repo}");
    let (repo_name, url) = seed(&s, &image, "canary-v1.0.0")?;
    s.apply(&watch_yaml(
        &s.ns.name,
        &image,
        &url,
        "canary-*",
        "credentials: {provider: aws}",
    ))?;
    let ready = s.wait_ready("canary", "True", "UpToDate").await?;
    let latest = ready.status.and_then(|st| st.latest).expect("latest");
    assert!(latest.pushed_at.is_some(), "ECR reports push times");

    moto(&["put-image", &repo, "canary-v1.1.0"], &aws_env)?;
    moto(&["put-push-event", &repo, "canary-v1.1.0"], &aws_env)?;
    s.wait_applied("canary", "canary-v1.1.0").await?;
    let git = s.ground.git()?;
    assert_eq!(git.commit_count(&repo_name, "main")?, 2);
    let metrics = wait_until("the SQS event counted", Duration::from_secs(30), || async {
        let m = s.operator.metrics().await?;
        Ok((metric(
            &m,
            "imagewatch_events_total{source=\"sqs\",outcome=\"matched\"}",
        ) >= 1.0)
            .then_some(m))
    })
    .await?;
    assert!(
        metric(&metrics, "imagewatch_push_to_commit_seconds_count") >= 1.0,
        "{metrics}"
    );
    Ok(())
}

/// Under `order: Newest` a tag's time is when the tag appeared, so re-tags of one digest are
/// each chosen, even when every one sorts lower than the one before (SHA tags of CI cache
/// hits). Before, they all carried the image's `created` time and the tie went to the
/// greatest name.
#[tokio::test]
async fn retags_of_one_digest_in_descending_name_order_are_each_committed() -> anyhow::Result<()> {
    let (registry, host, s, _) = webhook_scenario("retag", &[]).await?;

    let image_repo = format!("retag/app-{}", random_suffix());
    registry.script("push-image.sh", &[&format!("{image_repo}:fff0000")])?;
    let (repo_name, url) = seed(&s, &format!("{host}/{image_repo}"), "fff0000")?;
    let watch = watch_yaml(
        &s.ns.name,
        &format!("{host}/{image_repo}"),
        &url,
        "regex:^[0-9a-f]{7}$",
        "credentials: {secretRef: {name: hookreg}}",
    )
    .replace("  tags: {pattern:", "  tags: {order: Newest, pattern:");
    s.apply(&watch)?;
    s.wait_ready("canary", "True", "UpToDate").await?;
    let git = s.ground.git()?;
    let first = git.commit_count(&repo_name, "main")?;

    let mut digest = None;
    for (i, tag) in ["def5678", "abc1234", "0a1b2c3"].into_iter().enumerate() {
        let out = registry.script("retag.sh", &[&format!("{image_repo}:fff0000"), tag])?;
        let watch = s.wait_applied("canary", tag).await?;
        assert_eq!(
            git.commit_count(&repo_name, "main")?,
            first + i + 1,
            "{tag}: one commit per re-tag"
        );
        let latest = watch
            .status
            .and_then(|st| st.latest)
            .expect("status.latest");
        assert_eq!(latest.tag, tag);
        assert!(latest.appeared_at.is_some(), "{latest:?}");
        assert_eq!(
            latest.appeared_from.as_deref(),
            Some("RegistryEvent"),
            "{tag}: ordered by the event's timestamp"
        );
        // Every re-tag is the same image.
        let d = out.lines().last().map(str::to_owned);
        assert!(digest.is_none() || digest == d, "{tag}: another digest");
        digest = d;
    }
    let manifest = git.show(
        &repo_name,
        "main",
        "apps/my-api/overlays/stg/deployment-canary.yaml",
    )?;
    assert!(
        manifest.contains(&format!("{image_repo}:0a1b2c3")),
        "{manifest}"
    );
    Ok(())
}
