//! "Why not my tag?" and "what changed?" on the ground: a watch's status keeps its last
//! changes (`status.history`, with the trigger and the push → commit time) and the tags that
//! rank above the one it writes with the rule that refused each (`status.refusedTags`);
//! `kubectl imagewatch explain` prints them for a user whose RBAC reads ImageWatches and
//! nothing else; `kubectl get iw -o wide` shows when the last change was written; and
//! `imagewatch test` lists the registry with a Docker config and says what rules would pick.

use std::{path::Path, process::Command, time::Duration};

use imagewatch_crd::ImageWatch;
use imagewatch_e2e::{
    NotifyingRegistry,
    ground::random_suffix,
    operator::binary,
    setup::{Scenario, copy_dir, sample, webhook_scenario},
    wait_until,
};

const TIMEOUT: Duration = Duration::from_secs(90);

fn seed(s: &Scenario, image: &str) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    copy_dir(&sample("canary-primary/manifests"), dir.path())?;
    let file = dir
        .path()
        .join("apps/my-api/overlays/stg/deployment-canary.yaml");
    let text = std::fs::read_to_string(&file)?.replace(
        "registry.example.com/my-api:canary-v1.2.3",
        &format!("{image}:canary-v1.0.0"),
    );
    std::fs::write(&file, text)?;
    s.ground
        .git()?
        .new_repo(&format!("explain-{}", s.ns.name), dir.path())
}

/// Runs the binary as the kubectl plugin `kubectl imagewatch …` with `kubeconfig`.
fn kubectl_imagewatch(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<(bool, String)> {
    let plugins = tempfile::tempdir()?;
    std::os::unix::fs::symlink(binary(), plugins.path().join("kubectl-imagewatch"))?;
    let path = format!(
        "{}:{}",
        plugins.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("kubectl")
        .arg("imagewatch")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("PATH", path)
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), text))
}

#[tokio::test]
async fn explain_history_and_refused_tags_answer_why_not_my_tag() -> anyhow::Result<()> {
    let (registry, host, s, _) = webhook_scenario("explain", &[]).await?;
    let repo = format!("explain/app-{}", random_suffix());
    let image = format!("{host}/{repo}");
    registry.script("push-image.sh", &[&format!("{repo}:canary-v1.0.0")])?;
    let url = seed(&s, &image)?;
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: canary, namespace: {ns}}}
spec:
  image: {image}
  tags: {{pattern: "canary-*", exclude: ["*-rc*"]}}
  interval: 1h
  credentials: {{secretRef: {{name: hookreg}}}}
  git: {{url: "{url}", secretRef: {{name: git-creds}}}}
  target:
    workload: {{path: apps/my-api/overlays/stg, kind: Deployment, name: my-api-canary, container: my-api}}
"#,
        ns = s.ns.name
    ))?;
    s.wait_ready("canary", "True", "UpToDate").await?;

    step_a_webhook_push_is_committed_and_recorded_with_its_trigger(&s, &registry, &repo).await?;
    step_refused_tags_are_listed_with_their_reason(&s, &registry, &repo).await?;
    step_a_reader_asks_through_kubectl(&s).await?;
    step_wide_output_shows_when_the_last_change_was_written(&s)?;
    step_imagewatch_test_lists_the_registry_with_the_same_rules(&registry, &image, &host)
}

/// Step 1: a push the webhook brings is committed and recorded with its trigger.
async fn step_a_webhook_push_is_committed_and_recorded_with_its_trigger(
    s: &Scenario,
    registry: &NotifyingRegistry,
    repo: &str,
) -> anyhow::Result<()> {
    registry.script("push-image.sh", &[&format!("{repo}:canary-v1.1.0")])?;
    let watch = s.wait_applied("canary", "canary-v1.1.0").await?;
    let status = watch.status.clone().unwrap_or_default();
    let change = status.history.first().cloned();
    let change = change.ok_or_else(|| anyhow::anyhow!("no history: {status:?}"))?;
    assert_eq!(change.tag, "canary-v1.1.0");
    assert_eq!(change.trigger, "Webhook");
    assert_eq!(
        change.commit,
        status.applied.as_ref().and_then(|a| a.commit.clone())
    );
    assert!(
        change
            .push_to_commit_seconds
            .is_some_and(|s| s > 0.0 && s < 60.0),
        "{change:?}"
    );
    Ok(())
}

/// Step 2: tags the rules refuse; a re-check looks at them (the router wakes no watch for
/// a tag its rules do not admit), and status.refusedTags lists each with its reason.
async fn step_refused_tags_are_listed_with_their_reason(
    s: &Scenario,
    registry: &NotifyingRegistry,
    repo: &str,
) -> anyhow::Result<()> {
    registry.script("push-image.sh", &[&format!("{repo}:canary-v1.2.0-rc1")])?;
    registry.script("push-image.sh", &[&format!("{repo}:v9.0.0")])?;
    s.ground.kubectl(&[
        "annotate",
        "imagewatch",
        "canary",
        "-n",
        &s.ns.name,
        "imagewatch.dev/requestedAt=explain",
        "--overwrite",
    ])?;
    let refused = wait_until("both tags in status.refusedTags", TIMEOUT, || async {
        let w: ImageWatch = s.watches.get("canary").await?;
        let refused: Vec<(String, String)> = w
            .status
            .map(|st| st.refused_tags)
            .unwrap_or_default()
            .into_iter()
            .map(|r| (r.tag, r.reason))
            .collect();
        Ok((refused.len() == 2).then_some(refused))
    })
    .await?;
    assert_eq!(
        refused,
        vec![
            ("v9.0.0".to_owned(), "Pattern".to_owned()),
            ("canary-v1.2.0-rc1".to_owned(), "Exclude".to_owned()),
        ]
    );
    Ok(())
}

/// Step 3: a user who may only read ImageWatches asks, through kubectl; outside its
/// namespace it learns nothing but that it may not look.
async fn step_a_reader_asks_through_kubectl(s: &Scenario) -> anyhow::Result<()> {
    s.apply(&format!(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: watch-reader, namespace: {ns}}}
rules:
  - apiGroups: [imagewatch.dev]
    resources: [imagewatches, promotionpolicies]
    verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: watch-reader, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: watch-reader}}
subjects: [{{kind: ServiceAccount, name: reader, namespace: {ns}}}]
"#,
        ns = s.ns.name
    ))?;
    let (kubeconfig, _) = s.ns.service_account(s.ground, "reader").await?;
    let object = format!("{}/canary", s.ns.name);
    let (ok, text) = kubectl_imagewatch(&kubeconfig, &["explain", &object, "--tag", "v9.0.0"])?;
    assert!(ok, "{text}");
    // Shown with --nocapture: the README quotes this run.
    eprintln!("$ kubectl imagewatch explain {object} --tag v9.0.0\n{text}");
    for line in [
        format!("ImageWatch {object}\n"),
        "  Chosen:      canary-v1.1.0".to_owned(),
        "  Tags:        2 listed rank above the chosen one, not chosen because:\n".to_owned(),
        "v9.0.0 does not match pattern \"canary-*\"\n".to_owned(),
        "canary-v1.2.0-rc1 matches exclude \"*-rc*\"\n".to_owned(),
        "  Next write:  nothing: Git holds the chosen tag canary-v1.1.0\n".to_owned(),
        "  Last error:  none\n".to_owned(),
        "canary-v1.1.0  commit ".to_owned(),
        "  Webhook (push → commit ".to_owned(),
        "  Tag v9.0.0:  refused: v9.0.0 does not match pattern \"canary-*\" (Pattern)\n".to_owned(),
    ] {
        assert!(text.contains(&line), "{line:?} not in:\n{text}");
    }
    // Outside its namespace the same user learns nothing but that it may not look.
    let (ok, text) = kubectl_imagewatch(&kubeconfig, &["explain", "default/canary"])?;
    assert!(!ok, "{text}");
    assert!(
        text.contains("your credentials may not get imagewatches in namespace default"),
        "{text}"
    );
    Ok(())
}

/// Step 4: `-o wide` shows when the last change was written.
fn step_wide_output_shows_when_the_last_change_was_written(s: &Scenario) -> anyhow::Result<()> {
    let wide = s
        .ground
        .kubectl(&["get", "iw", "canary", "-n", &s.ns.name, "-o", "wide"])?;
    eprintln!("$ kubectl get iw canary -o wide\n{wide}");
    // Columns are aligned; empty ones (MEMBERS, PR) leave only blanks, so read by offset.
    let mut lines = wide.lines();
    let header = lines.next().unwrap_or_default();
    let row = lines.next().unwrap_or_default();
    let changed = header
        .find("CHANGED")
        .and_then(|at| row.get(at..))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default();
    assert!(
        changed.ends_with('s') || changed.ends_with('m'),
        "CHANGED {changed:?} in:\n{wide}"
    );
    Ok(())
}

/// Step 5: `imagewatch test` lists the registry with a Docker config and the same rules.
fn step_imagewatch_test_lists_the_registry_with_the_same_rules(
    registry: &NotifyingRegistry,
    image: &str,
    host: &str,
) -> anyhow::Result<()> {
    let config = tempfile::tempdir()?;
    std::fs::write(
        config.path().join("config.json"),
        registry.dockerconfigjson(),
    )?;
    let out = Command::new(binary())
        .args([
            "test",
            "--image",
            image,
            "--pattern",
            "canary-*",
            "--exclude",
            "*-rc*",
            "--insecure-registry",
            host,
        ])
        .env("DOCKER_CONFIG", config.path())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.starts_with(&format!("{image}: 4 tags listed\nChosen: canary-v1.1.0\n")),
        "{text}"
    );
    assert!(
        text.contains("v9.0.0 does not match pattern \"canary-*\""),
        "{text}"
    );
    Ok(())
}
