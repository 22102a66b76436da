//! Crash safety of the git writer, end to end: the operator (the real binary, under the
//! chart's RBAC, on the real apiserver, registry and git server) is made to abort at a point
//! of its first commit (test hook `IMAGEWATCH_TEST_CRASH_POINT`), then started again without
//! the hook on the same cache. Whatever the point, the repository ends with exactly one new
//! commit holding exactly the two intended edits (two watches, one batch): no duplicate,
//! nothing lost.

use std::time::Duration;

use imagewatch_e2e::{
    Operator,
    ground::random_suffix,
    setup::{Scenario, TIMEOUT, copy_dir, sample},
};
use kube::api::DeleteParams;

const DIR: &str = "apps/my-api/overlays/stg";

async fn crash_then_restart(point: &str) -> anyhow::Result<()> {
    // A window long enough that both watches' first intents share one batch.
    let window = ["--batch-window", "5s", "--batch-quiet", "5s"];
    let mut sc =
        Scenario::start_with_env("crash", &window, &[("IMAGEWATCH_TEST_CRASH_POINT", point)])
            .await?;
    let ground = sc.ground;
    let registry = ground.registry()?;
    let git = ground.git()?;

    // Git holds v1.2.3; the registry already has v1.2.4 for both tracks.
    let image_repo = format!("e2e/crash-{}", random_suffix());
    let image = format!("{}/{image_repo}", registry.host);
    registry.push(&image_repo, "canary-v1.2.3")?;
    registry.retag(&image_repo, "canary-v1.2.3", "canary-v1.2.4")?;
    registry.retag(&image_repo, "canary-v1.2.3", "primary-v1.2.3")?;
    registry.retag(&image_repo, "canary-v1.2.3", "primary-v1.2.4")?;
    let seed = tempfile::tempdir()?;
    copy_dir(&sample("canary-primary/manifests"), seed.path())?;
    let mut before = Vec::new();
    for file in ["deployment-canary.yaml", "deployment-primary.yaml"] {
        let path = seed.path().join(DIR).join(file);
        let text = std::fs::read_to_string(&path)?
            .replace("registry.example.com/my-api:", &format!("{image}:"));
        std::fs::write(&path, &text)?;
        before.push(text);
    }
    let repo = format!("crash-{}", sc.ns.name);
    let url = git.new_repo(&repo, seed.path())?;
    let watches = std::fs::read_to_string(sample("canary-primary/imagewatches.yaml"))?
        .replace("namespace: my-api", &format!("namespace: {}", sc.ns.name))
        .replace("registry.example.com/my-api", &image)
        .replace("https://git.example.com/org/manifests.git", &url)
        .replace("interval: 1m", "interval: 10s");
    sc.apply(&watches)?;

    // The first write aborts the process at `point`.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while sc.operator.is_running() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the operator did not abort at {point}:\n{}",
            sc.operator.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = std::fs::read_to_string(&sc.operator.log)?;
    anyhow::ensure!(
        log.contains("aborting the process") && log.contains(point),
        "the operator died, but not at the test hook:\n{}",
        sc.operator.log_tail(40)
    );
    let pushed_before_crash = point == "after-push";
    assert_eq!(
        git.commit_count(&repo, "main")?,
        if pushed_before_crash { 2 } else { 1 },
        "state of the remote right after the crash at {point}"
    );

    // Restart on the same cache, without the hook.
    let release = format!("iw-{}", sc.ns.name);
    let (kubeconfig, _) = sc
        .ns
        .service_account(ground, &format!("{release}-imagewatch"))
        .await?;
    sc.operator = Operator::start(
        ground,
        &sc.ns.name,
        &kubeconfig,
        &[
            "--insecure-registry",
            &registry.host,
            "--namespace",
            &sc.ns.name,
            window[0],
            window[1],
            window[2],
            window[3],
        ],
    )?;
    let canary = sc.wait_applied("my-api-canary", "canary-v1.2.4").await?;
    let primary = sc.wait_applied("my-api-primary", "primary-v1.2.4").await?;

    // Exactly one new commit, holding exactly the two edits.
    assert_eq!(
        git.commit_count(&repo, "main")?,
        2,
        "one commit, no duplicate"
    );
    let head = git.git(&repo, &["rev-parse", "main"])?.trim().to_string();
    let changed = git.git(&repo, &["diff", "--numstat", "main^", "main"])?;
    assert_eq!(
        changed.lines().collect::<Vec<_>>(),
        [
            format!("1\t1\t{DIR}/deployment-canary.yaml"),
            format!("1\t1\t{DIR}/deployment-primary.yaml"),
        ],
        "{changed}"
    );
    assert_eq!(
        git.show(&repo, "main", &format!("{DIR}/deployment-canary.yaml"))?,
        before[0].replace(":canary-v1.2.3", ":canary-v1.2.4")
    );
    assert_eq!(
        git.show(&repo, "main", &format!("{DIR}/deployment-primary.yaml"))?,
        before[1].replace(":primary-v1.2.3", ":primary-v1.2.4")
    );
    let subject = git.git(&repo, &["log", "-1", "--format=%s", "main"])?;
    assert_eq!(subject.trim(), "imagewatch: update 2 images");
    for w in [&canary, &primary] {
        let applied = w.status.as_ref().and_then(|s| s.applied.as_ref());
        assert_eq!(
            applied.and_then(|a| a.commit.as_deref()),
            Some(head.as_str()),
            "{:?}",
            w.status
        );
    }
    assert!(sc.operator.is_running(), "{}", sc.operator.log_tail(40));

    // Leave nothing behind that another test's operator could act on.
    for name in ["my-api-canary", "my-api-primary"] {
        sc.watches.delete(name, &DeleteParams::default()).await?;
    }
    Ok(())
}

#[tokio::test]
async fn crash_after_commit_before_push() -> anyhow::Result<()> {
    crash_then_restart("after-commit").await
}

#[tokio::test]
async fn crash_right_before_push() -> anyhow::Result<()> {
    crash_then_restart("before-push").await
}

#[tokio::test]
async fn crash_mid_push() -> anyhow::Result<()> {
    crash_then_restart("mid-push").await
}

#[tokio::test]
async fn crash_after_push_before_status() -> anyhow::Result<()> {
    crash_then_restart("after-push").await
}
