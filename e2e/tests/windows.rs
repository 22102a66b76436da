//! `spec.windows` and admin freezes on the ground: a change waits while writing is closed,
//! the status says why and when it opens, and it is written at the opening without waiting
//! for a poll (every watch and policy here polls once an hour; pushes reach the watches by
//! the registry's webhook). For an ImageWatch and for a PromotionPolicy.

use imagewatch_crd::ImageWatch;
use imagewatch_e2e::{
    ground::random_suffix,
    operator::metric,
    setup::{Scenario, TIMEOUT, ready, webhook_scenario},
    wait_until,
};

const FILE: &str = "apps/app/deployment.yaml";

/// A repository whose Deployment runs `image:v0.9.0`; returns its name and URL.
fn seed(s: &Scenario, image: &str) -> anyhow::Result<(String, String)> {
    let dir = tempfile::tempdir()?;
    let app = dir.path().join("apps/app");
    std::fs::create_dir_all(&app)?;
    std::fs::write(
        dir.path().join(FILE),
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: {image}:v0.9.0\n"
        ),
    )?;
    let name = format!("windows-{}", s.ns.name);
    let url = s.ground.git()?.new_repo(&name, dir.path())?;
    Ok((name, url))
}

fn watch_yaml(ns: &str, image: &str, url: &str, windows: &str) -> String {
    format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: app, namespace: {ns}}}
spec:
  image: {image}
  interval: 1h
  credentials: {{secretRef: {{name: hookreg}}}}
  git: {{url: "{url}", secretRef: {{name: git-creds}}}}
  target: {{workload: {{path: apps/app, kind: Deployment, name: app, container: app}}}}{windows}
"#
    )
}

/// Waits until the watch's Ready reason is `reason`; returns the watch.
async fn wait_reason(s: &Scenario, reason: &str) -> anyhow::Result<ImageWatch> {
    wait_until(&format!("app Ready reason {reason}"), TIMEOUT, || async {
        let w = s.watches.get("app").await?;
        Ok(ready(&w).is_some_and(|r| r.1 == reason).then_some(w))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", s.operator.log_tail(40)))
}

/// The Events of reason `reason` in the scenario's namespace.
fn events(s: &Scenario, reason: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let out = s.ground.kubectl(&[
        "get",
        "events",
        "-n",
        &s.ns.name,
        "--field-selector",
        &format!("reason={reason}"),
        "-o",
        "json",
    ])?;
    let list: serde_json::Value = serde_json::from_str(&out)?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

#[tokio::test]
async fn a_change_waits_for_its_window_and_is_written_when_it_opens() -> anyhow::Result<()> {
    let (registry, host, s, _) = webhook_scenario("windows", &[]).await?;
    let git = s.ground.git()?;
    let repo = format!("e2e/windows-{}", random_suffix());
    let image = format!("{host}/{repo}");
    let (name, url) = seed(&s, &image)?;
    registry.script("push-image.sh", &[&format!("{repo}:v1.0.0")])?;

    // A daily window of 10 minutes that opens 30 s from now (UTC, seconds first).
    let opens = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(30))?
        .round(jiff::Unit::Second)?;
    let utc = opens.to_zoned(jiff::tz::TimeZone::UTC);
    let schedule = format!("{} {} {} * * *", utc.second(), utc.minute(), utc.hour());
    s.apply(&watch_yaml(
        &s.ns.name,
        &image,
        &url,
        &format!("\n  windows: [{{schedule: \"{schedule}\", duration: 10m, timeZone: UTC}}]"),
    ))?;

    // Closed: the status says what waits and when the window opens; nothing is committed.
    let w = wait_reason(&s, "OutsideWindow").await?;
    let message = ready(&w).map(|r| r.2).unwrap_or_default();
    assert!(
        message.contains(&format!("the next window opens at {opens}")),
        "{message}"
    );
    assert!(message.contains(":v1.0.0 (not written)"), "{message}");
    assert_eq!(git.commit_count(&name, "main")?, 1);
    assert_eq!(
        events(&s, "OutsideWindow")?.len(),
        1,
        "one Event when it starts waiting"
    );
    wait_until("the watch counted as OutsideWindow", TIMEOUT, || async {
        let metrics = s.operator.metrics().await?;
        Ok(metrics
            .lines()
            .any(|l| {
                l.starts_with("imagewatch_watch_conditions")
                    && l.contains("reason=\"OutsideWindow\"")
                    && !l.ends_with(" 0")
            })
            .then_some(()))
    })
    .await?;

    // At the opening it is written, although the watch polls once an hour.
    s.wait_applied("app", "v1.0.0").await?;
    let at: i64 = git
        .git(&name, &["log", "-1", "--format=%ct", "main"])?
        .trim()
        .parse()?;
    assert!(
        at >= opens.as_second(),
        "committed at {at}, before the window opened at {}",
        opens.as_second()
    );
    assert!(git.show(&name, "main", FILE)?.contains(":v1.0.0"));
    Ok(())
}

#[tokio::test]
async fn a_freeze_holds_every_change_until_it_is_lifted() -> anyhow::Result<()> {
    let (registry, host, s, _) = webhook_scenario(
        "freeze",
        &["--freeze-configmap", "iw-{ns}-imagewatch-freeze"],
    )
    .await?;
    let git = s.ground.git()?;
    let repo = format!("e2e/freeze-{}", random_suffix());
    let image = format!("{host}/{repo}");
    let (name, url) = seed(&s, &image)?;
    registry.script("push-image.sh", &[&format!("{repo}:v1.0.0")])?;
    s.apply(&watch_yaml(&s.ns.name, &image, &url, ""))?;
    s.wait_applied("app", "v1.0.0").await?;
    let commits = git.commit_count(&name, "main")?;

    // Stop the line for this namespace: one command (the chart's RBAC lets the operator read
    // only this ConfigMap of its namespace).
    let configmap = format!("iw-{}-imagewatch-freeze", s.ns.name);
    s.ground.kubectl(&[
        "-n",
        &s.ns.name,
        "create",
        "configmap",
        &configmap,
        &format!("--from-literal=namespace.{}=release 4.2 (alice)", s.ns.name),
    ])?;
    wait_until("the operator sees the freeze", TIMEOUT, || async {
        let m = s.operator.metrics().await?;
        Ok((metric(&m, "imagewatch_freezes") == 1.0).then_some(()))
    })
    .await?;
    // The watch had nothing to write: still Ready (its last commit, or simply up to date).
    let w = s.watches.get("app").await?;
    assert_eq!(
        ready(&w).map(|r| r.0).as_deref(),
        Some("True"),
        "{:?}",
        w.status
    );

    // CI pushes during the freeze: the change waits, and the status says why.
    registry.script("push-image.sh", &[&format!("{repo}:v1.1.0")])?;
    let w = wait_reason(&s, "Frozen").await?;
    let message = ready(&w).map(|r| r.2).unwrap_or_default();
    assert!(message.contains("release 4.2 (alice)"), "{message}");
    assert!(message.contains(":v1.1.0 (not written)"), "{message}");
    assert_eq!(git.commit_count(&name, "main")?, commits);
    assert_eq!(events(&s, "Frozen")?.len(), 1);

    // Lifted: written at once (the watch would not poll for an hour).
    s.ground
        .kubectl(&["-n", &s.ns.name, "delete", "configmap", &configmap])?;
    s.wait_applied("app", "v1.1.0").await?;
    assert_eq!(git.commit_count(&name, "main")?, commits + 1);
    assert!(git.show(&name, "main", FILE)?.contains(":v1.1.0"));
    let m = s.operator.metrics().await?;
    assert_eq!(metric(&m, "imagewatch_freezes"), 0.0);
    Ok(())
}

#[tokio::test]
async fn a_promotion_waits_for_its_window_and_is_committed_when_it_opens() -> anyhow::Result<()> {
    let s = Scenario::start("promo-window", &[]).await?;
    let git = s.ground.git()?;
    let image = format!("registry.example.com/window-{}/my-api", random_suffix());
    let (stg, prd) = (
        "overlays/staging/.argocd-source-my-api-stg.yaml",
        "overlays/production/.argocd-source-my-api-prd.yaml",
    );
    let seed = tempfile::tempdir()?;
    for (file, tag) in [(stg, "v2.0.0"), (prd, "v1.0.0")] {
        let path = seed.path().join(file);
        std::fs::create_dir_all(path.parent().expect("a directory"))?;
        std::fs::write(
            &path,
            format!(
                "# image tags (managed by imagewatch)\nkustomize:\n  images:\n  - {image}:{tag}\n"
            ),
        )?;
    }
    let name = format!("promo-window-{}", s.ns.name);
    let url = git.new_repo(&name, seed.path())?;
    // A window of 10 minutes that opens 30 s from now (UTC, seconds first); the policy polls
    // every hour.
    let opens = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(30))?
        .round(jiff::Unit::Second)?;
    let utc = opens.to_zoned(jiff::tz::TimeZone::UTC);
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata: {{name: my-api, namespace: {ns}}}
spec:
  from: {{path: overlays/staging}}
  to:
    git: {{url: "{url}", branch: main, secretRef: {{name: git-creds}}}}
    path: overlays/production
  mode: Commit
  interval: 1h
  windows: [{{schedule: "{sec} {min} {hour} * * *", duration: 10m}}]
"#,
        ns = s.ns.name,
        sec = utc.second(),
        min = utc.minute(),
        hour = utc.hour(),
    ))?;
    let api: kube::Api<imagewatch_crd::PromotionPolicy> =
        kube::Api::namespaced(s.admin.clone(), &s.ns.name);
    let ready_of = |p: &imagewatch_crd::PromotionPolicy| {
        p.status
            .as_ref()
            .and_then(|st| st.conditions.iter().find(|c| c.type_ == "Ready"))
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    let (_, message) = wait_until("the policy waits for its window", TIMEOUT, || async {
        let p = api.get("my-api").await?;
        Ok(ready_of(&p).filter(|(reason, _)| reason == "OutsideWindow"))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", s.operator.log_tail(40)))?;
    assert!(
        message.contains(&format!("the next window opens at {opens}")),
        "{message}"
    );
    assert!(
        message.contains("waits to be proposed to overlays/production"),
        "{message}"
    );
    assert_eq!(git.commit_count(&name, "main")?, 1);

    // At the opening the promotion is committed.
    wait_until("the promotion committed", TIMEOUT, || async {
        let p = api.get("my-api").await?;
        Ok(ready_of(&p).filter(|(reason, _)| reason == "Committed"))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", s.operator.log_tail(40)))?;
    let at: i64 = git
        .git(&name, &["log", "-1", "--format=%ct", "main"])?
        .trim()
        .parse()?;
    assert!(at >= opens.as_second(), "committed at {at}, before {opens}");
    assert!(git.show(&name, "main", prd)?.contains(":v2.0.0"));
    Ok(())
}
