//! `spec.tags.platforms` on the ground's registry: a tag is written only when its image
//! provides every listed platform. A two-platform OCI index (linux/amd64 + linux/arm64) is
//! written; a newer single linux/amd64 image is refused (`PlatformMissing`, named in
//! `status.refused` and the Ready condition, nothing committed); the next two-platform
//! index is written and the refusal clears.

use imagewatch_e2e::{
    ground::random_suffix,
    oci_push::{BaseImage, ImagePusher},
    setup::{Scenario, TIMEOUT, applied_of, ready, refused_of},
    wait_until,
};

#[tokio::test]
async fn only_tags_with_every_wanted_platform_are_written() -> anyhow::Result<()> {
    let s = Scenario::start("platforms", &[]).await?;
    let registry = s.ground.registry()?;
    let git = s.ground.git()?;
    let ns = s.ns.name.clone();
    let repo = format!("e2e/multiarch-{}", random_suffix());
    let image = format!("{}/{repo}", registry.host);
    let pusher = ImagePusher::basic(&registry.host, &registry.user, &registry.password)?;
    let amd64 = BaseImage::for_platform(&repo, "linux", "amd64");
    let arm64 = BaseImage::for_platform(&repo, "linux", "arm64");
    pusher.upload_base(&amd64).await?;
    pusher.upload_base(&arm64).await?;

    let seed = tempfile::tempdir()?;
    let app = seed.path().join("apps/app");
    std::fs::create_dir_all(&app)?;
    let file = "apps/app/deployment.yaml";
    std::fs::write(
        seed.path().join(file),
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: {image}:v0.9.0\n"
        ),
    )?;
    let repo_name = format!("manifests-{ns}");
    let git_url = git.new_repo(&repo_name, seed.path())?;

    // Both platforms → written.
    pusher
        .push_index(&[&amd64, &arm64], &repo, "v1.0.0")
        .await?;
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: app, namespace: {ns}}}
spec:
  image: {image}
  interval: 10s
  tags: {{platforms: [linux/amd64, linux/arm64]}}
  credentials: {{secretRef: {{name: regcred}}}}
  git: {{url: "{git_url}", secretRef: {{name: git-creds}}}}
  target: {{workload: {{path: apps/app, kind: Deployment, name: app, container: app}}}}
"#
    ))?;
    s.wait_applied("app", "v1.0.0").await?;
    let commits = git.commit_count(&repo_name, "main")?;

    // A newer amd64-only image → refused, named, not committed.
    pusher.push_tag(&amd64, &repo, "v1.1.0").await?;
    let w = wait_until("app refuses v1.1.0 (PlatformMissing)", TIMEOUT, || async {
        let w = s.watches.get("app").await?;
        let ok = refused_of(&w) == Some(("v1.1.0".into(), "PlatformMissing".into()))
            && ready(&w).is_some_and(|(st, r, _)| st == "False" && r == "PlatformMissing");
        Ok(ok.then_some(w))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", s.operator.log_tail(40)))?;
    assert_eq!(applied_of(&w).as_deref(), Some("v1.0.0"));
    let message = ready(&w).map(|r| r.2).unwrap_or_default();
    assert!(
        message.contains("v1.1.0") && message.contains("linux/arm64"),
        "{message}"
    );
    assert_eq!(git.commit_count(&repo_name, "main")?, commits);
    assert!(git.show(&repo_name, "main", file)?.contains(":v1.0.0"));
    // The watch metrics summarize the cache after each change: counted there shortly.
    wait_until("the watch counted as PlatformMissing", TIMEOUT, || async {
        let metrics = s.operator.metrics().await?;
        Ok(metrics
            .lines()
            .any(|l| {
                l.starts_with("imagewatch_watch_conditions")
                    && l.contains("reason=\"PlatformMissing\"")
                    && !l.ends_with(" 0")
            })
            .then_some(()))
    })
    .await?;

    // The next two-platform build → written; nothing refused any more.
    pusher
        .push_index(&[&amd64, &arm64], &repo, "v1.2.0")
        .await?;
    s.wait_applied("app", "v1.2.0").await?;
    let w = wait_until("refusal cleared", TIMEOUT, || async {
        let w = s.watches.get("app").await?;
        Ok((refused_of(&w).is_none() && ready(&w).is_some_and(|r| r.0 == "True")).then_some(w))
    })
    .await?;
    assert_eq!(applied_of(&w).as_deref(), Some("v1.2.0"));
    assert!(git.show(&repo_name, "main", file)?.contains(":v1.2.0"));
    assert_eq!(git.commit_count(&repo_name, "main")?, commits + 1);
    Ok(())
}
