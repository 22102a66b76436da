//! A watch without `spec.git` takes its repository, branch and base path from the Argo CD
//! Application that manages it, and its credentials from a labelled Secret.

use imagewatch_e2e::{
    ground::random_suffix,
    setup::{Scenario, copy_dir, create_argocd_git_secret, sample},
};

#[tokio::test]
async fn git_location_comes_from_the_managing_application() -> anyhow::Result<()> {
    // The Application lives in the scenario's namespace; the tracking annotation's
    // `<namespace>_<app>` form names it there.
    let s = Scenario::start("argo", &[]).await?;
    // Argo CD's Application API: the ground's real Argo CD installs it.
    imagewatch_e2e::argocd::ArgoCd::get(s.ground)?;

    let registry = s.ground.registry()?;
    let git = s.ground.git()?;
    let image_repo = format!("e2e/argo-{}", random_suffix());
    registry.push(&image_repo, "canary-v1.2.3")?;
    let seed = tempfile::tempdir()?;
    copy_dir(&sample("canary-primary/manifests"), seed.path())?;
    let dir = seed.path().join("apps/my-api/overlays/stg");
    for file in ["deployment-canary.yaml", "deployment-primary.yaml"] {
        let text = std::fs::read_to_string(dir.join(file))?.replace(
            "registry.example.com/my-api:",
            &format!("{}/{image_repo}:", registry.host),
        );
        std::fs::write(dir.join(file), text)?;
    }
    let repo_name = format!("argo-{}", s.ns.name);
    let url = git.new_repo(&repo_name, seed.path())?;

    s.apply(&format!(
        r#"apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {{name: my-api-stg, namespace: {ns}}}
spec:
  project: default
  source: {{repoURL: "{url}", targetRevision: HEAD, path: apps/my-api}}
  destination: {{server: "https://kubernetes.default.svc", namespace: my-api}}
"#,
        ns = s.ns.name
    ))?;
    // Credentials for the URL prefix (the base URL of the ground's git server).
    create_argocd_git_secret(&s, &git).await?;

    // No spec.git; the tracking annotation names `<namespace>_<application>`.
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata:
  name: canary
  namespace: {ns}
  annotations:
    argocd.argoproj.io/tracking-id: "{ns}_my-api-stg:imagewatch.dev/ImageWatch:{ns}/canary"
spec:
  image: {host}/{image_repo}
  tags: {{pattern: "canary-*"}}
  interval: 10s
  credentials: {{secretRef: {{name: regcred}}}}
  target:
    workload: {{path: overlays/stg, kind: Deployment, name: my-api-canary, container: my-api}}
"#,
        ns = s.ns.name,
        host = registry.host
    ))?;
    s.wait_ready("canary", "True", "UpToDate").await?;
    registry.push(&image_repo, "canary-v1.2.4")?;
    s.wait_applied("canary", "canary-v1.2.4").await?;
    let file = git.show(
        &repo_name,
        "main",
        "apps/my-api/overlays/stg/deployment-canary.yaml",
    )?;
    assert!(
        file.contains(&format!("{image_repo}:canary-v1.2.4")),
        "{file}"
    );
    assert_eq!(git.commit_count(&repo_name, "main")?, 2);

    // Without an Application the watch says so instead of guessing.
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: orphan, namespace: {ns}}}
spec:
  image: {host}/{image_repo}
  credentials: {{secretRef: {{name: regcred}}}}
  target:
    workload: {{path: overlays/stg, kind: Deployment, name: my-api-canary, container: my-api}}
"#,
        ns = s.ns.name,
        host = registry.host
    ))?;
    let orphan = s.wait_ready("orphan", "False", "InvalidSpec").await?;
    let message = imagewatch_e2e::setup::ready(&orphan)
        .map(|r| r.2)
        .unwrap_or_default();
    assert!(
        message.contains("no Argo CD Application manages this object"),
        "{message}"
    );
    Ok(())
}
