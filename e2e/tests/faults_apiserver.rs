//! The ground's kube-apiserver restarts under a running operator (the real binary, under the
//! chart's RBAC): the operator keeps running, what happened while the API was away is
//! committed exactly once with its status written, and its watches resume (a spec change and
//! a new object made after the restart are acted on).
//!
//! Its own test binary: stopping the apiserver affects every test running beside it, and test
//! binaries run one after another. The apiserver is started again with the same flags, port
//! and certificates, and left running.

use imagewatch_crd::conditions::reason;
use imagewatch_e2e::{
    Ground,
    ground::random_suffix,
    setup::{Scenario, TIMEOUT, ready, reconciles_with_outcome},
    wait_until,
};
use kube::api::{Patch, PatchParams};

const DIR: &str = "apps/app";

fn deployment(name: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: {image}\n"
    )
}

fn watch(ns: &str, name: &str, image: &str, git_url: &str) -> String {
    format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: {name}, namespace: {ns}}}
spec:
  image: {image}
  tags: {{pattern: "v*"}}
  interval: 10s
  credentials: {{secretRef: {{name: regcred}}}}
  git: {{url: "{git_url}", branch: main, secretRef: {{name: git-creds}}}}
  target:
    workload: {{path: {DIR}, kind: Deployment, name: {name}, container: app}}
"#
    )
}

/// Starts the apiserver again if a step failed while it was stopped, so the ground stays
/// usable for the test binaries that follow.
struct StartAgain<'g>(&'g Ground);

impl Drop for StartAgain<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.0.script("controlplane.sh", &["start-apiserver"]) {
            eprintln!("starting kube-apiserver again failed: {e:#}");
        }
    }
}

#[tokio::test]
async fn apiserver_restart_watches_resume() -> anyhow::Result<()> {
    let mut s = Scenario::start("apirestart", &[]).await?;
    let ground = s.ground;
    let registry = ground.registry()?;
    let git = ground.git()?;
    let image_repo = format!("e2e/apirestart-{}", random_suffix());
    let image = format!("{}/{image_repo}", registry.host);
    registry.push(&image_repo, "v1.0.0")?;
    let seed = tempfile::tempdir()?;
    std::fs::create_dir_all(seed.path().join(DIR))?;
    for name in ["app", "late"] {
        std::fs::write(
            seed.path().join(DIR).join(format!("{name}.yaml")),
            deployment(name, &format!("{image}:v1.0.0")),
        )?;
    }
    let repo = format!("apirestart-{}", s.ns.name);
    let url = git.new_repo(&repo, seed.path())?;
    s.apply(&watch(&s.ns.name, "app", &image, &url))?;
    s.wait_ready("app", "True", reason::UP_TO_DATE).await?;
    let pid = s.operator.pid();

    // The API goes away; a tag is pushed meanwhile. The operator's next round fails on the
    // API (it reads its Secrets there) and is retried.
    ground.script("controlplane.sh", &["stop-apiserver"])?;
    let restart = StartAgain(ground);
    registry.push(&image_repo, "v1.1.0")?;
    let kube_failures = reconciles_with_outcome(&s, "kube")
        .await
        .unwrap_or_default();
    wait_until("a reconcile failing on the absent API", TIMEOUT, || async {
        Ok((reconciles_with_outcome(&s, "kube")
            .await
            .unwrap_or_default()
            > kube_failures)
            .then_some(()))
    })
    .await?;
    assert_eq!(git.commit_count(&repo, "main")?, 1);
    drop(restart);
    let readyz = ground.kubectl(&["get", "--raw", "/readyz"])?;
    assert_eq!(readyz.trim(), "ok");
    assert!(s.operator.is_running(), "{}", s.operator.log_tail(40));

    // What was pushed while the API was away: one commit, status written.
    let w = s.wait_applied("app", "v1.1.0").await?;
    assert_eq!(git.commit_count(&repo, "main")?, 2);
    assert_eq!(ready(&w).map(|r| r.1).as_deref(), Some(reason::UPDATED));

    // The watch resumed: a spec change made after the restart is seen (a pin to the older
    // tag is written back), and a watch created after it is reconciled.
    s.watches
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"pin": "v1.0.0"}})),
        )
        .await?;
    s.wait_applied("app", "v1.0.0").await?;
    assert_eq!(git.commit_count(&repo, "main")?, 3);
    s.apply(&watch(&s.ns.name, "late", &image, &url))?;
    let late = s.wait_applied("late", "v1.1.0").await?;
    assert_eq!(git.commit_count(&repo, "main")?, 4);
    assert_eq!(
        git.show(&repo, "main", &format!("{DIR}/late.yaml"))?,
        deployment("late", &format!("{image}:v1.1.0"))
    );
    assert!(
        late.status
            .as_ref()
            .and_then(|st| st.observed_generation)
            .is_some(),
        "status written for the new watch"
    );

    // Nothing more: one further round of both watches adds no commit.
    let ok = reconciles_with_outcome(&s, "ok").await.unwrap_or_default();
    wait_until("two more successful reconciles", TIMEOUT, || async {
        Ok((reconciles_with_outcome(&s, "ok").await.unwrap_or_default() >= ok + 2).then_some(()))
    })
    .await?;
    assert_eq!(git.commit_count(&repo, "main")?, 4);
    assert!(s.operator.is_running());
    assert_eq!(s.operator.pid(), pid, "the operator was not restarted");
    s.operator.kill();
    Ok(())
}
