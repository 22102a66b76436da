//! A release of several images moves together: watches sharing `spec.group` commit only when
//! every image has the tag, and then in one commit (seed 001's partial-PR pain). The target is
//! a kustomize overlay's `images[]`.

use imagewatch_e2e::{
    ground::random_suffix,
    setup::{Scenario, ready},
};

const KUSTOMIZATION: &str = "apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../base
images:
  # the API
  - name: my-api
    newName: REGISTRY/APP
    newTag: v1.2.3
  - name: my-api-worker
    newName: REGISTRY/WORKER
    newTag: v1.2.3
";

fn watch(ns: &str, name: &str, image: &str, kustomize_name: &str, git_url: &str) -> String {
    format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: {name}, namespace: {ns}}}
spec:
  image: {image}
  tags: {{pattern: "v*"}}
  interval: 10s
  group: release
  credentials: {{secretRef: {{name: regcred}}}}
  git: {{url: "{git_url}", secretRef: {{name: git-creds}}}}
  target:
    kustomize: {{path: overlays/staging, image: {kustomize_name}}}
"#
    )
}

#[tokio::test]
async fn a_group_commits_once_when_every_image_has_the_tag() -> anyhow::Result<()> {
    let s = Scenario::start("group", &[]).await?;
    let registry = s.ground.registry()?;
    let git = s.ground.git()?;
    let suffix = random_suffix();
    let app = format!("rel/my-api-{suffix}");
    let worker = format!("rel/my-api-worker-{suffix}");
    for repo in [&app, &worker] {
        registry.push(repo, "v1.2.3")?;
    }
    let seed = tempfile::tempdir()?;
    let overlay = seed.path().join("overlays/staging");
    std::fs::create_dir_all(&overlay)?;
    std::fs::write(
        overlay.join("kustomization.yaml"),
        KUSTOMIZATION
            .replace("REGISTRY/APP", &format!("{}/{app}", registry.host))
            .replace("REGISTRY/WORKER", &format!("{}/{worker}", registry.host)),
    )?;
    let repo_name = format!("group-{}", s.ns.name);
    let url = git.new_repo(&repo_name, seed.path())?;

    s.apply(&watch(
        &s.ns.name,
        "api",
        &format!("{}/{app}", registry.host),
        "my-api",
        &url,
    ))?;
    s.apply(&watch(
        &s.ns.name,
        "worker",
        &format!("{}/{worker}", registry.host),
        "my-api-worker",
        &url,
    ))?;
    s.wait_ready("api", "True", "UpToDate").await?;
    s.wait_ready("worker", "True", "UpToDate").await?;

    // Only the API image of v1.2.4 is pushed: the release waits, nothing is committed.
    registry.push(&app, "v1.2.4")?;
    let waiting = s.wait_ready("api", "False", "WaitingForGroup").await?;
    let message = ready(&waiting).map(|r| r.2).unwrap_or_default();
    assert!(message.contains("worker has no v1.2.4"), "{message}");
    assert_eq!(
        git.commit_count(&repo_name, "main")?,
        1,
        "no partial release"
    );

    // The worker image arrives: both move in one commit.
    registry.push(&worker, "v1.2.4")?;
    s.wait_applied("api", "v1.2.4").await?;
    s.wait_applied("worker", "v1.2.4").await?;
    assert_eq!(
        git.commit_count(&repo_name, "main")?,
        2,
        "one commit for the release"
    );
    let diff = git.git(&repo_name, &["show", "--format=", "--unified=0", "main"])?;
    assert_eq!(diff.matches("\n+    newTag: v1.2.4").count(), 2, "{diff}");
    let text = git.show(&repo_name, "main", "overlays/staging/kustomization.yaml")?;
    assert_eq!(
        text,
        KUSTOMIZATION
            .replace("REGISTRY/APP", &format!("{}/{app}", registry.host))
            .replace("REGISTRY/WORKER", &format!("{}/{worker}", registry.host))
            .replace("newTag: v1.2.3", "newTag: v1.2.4"),
        "only the tags changed; the comment stays"
    );
    Ok(())
}
