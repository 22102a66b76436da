//! The common multi-source layout against the real Argo CD: a Helm chart from one Git
//! repository, its values file from another (a `ref` source). The app's own chart carries
//! its ImageWatch, so Argo CD syncs the watch and writes its tracking annotation; the watch
//! has no `spec.git` and names the values file as `$values/…`. A push is written into the
//! values repository (the one that holds the file), Argo CD renders the chart with it, and
//! the node runs the new Pod.

use imagewatch_crd::{ImageWatch, conditions::DEPLOYED};
use imagewatch_e2e::{
    ground::random_suffix,
    node::{node_deployment, wait_pod_ready_with},
    setup::{TIMEOUT, create_argocd_git_secret, node_scenario, tree},
    wait_until,
};

/// The application's chart: its Deployment (on the node's network) and its ImageWatch.
const CHART_YAML: &str = "apiVersion: v2\nname: my-api\nversion: 0.1.0\n";
const IMAGEWATCH: &str = r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata:
  name: my-api
spec:
  image: "{{ .Values.image.repository }}"
  tags: {pattern: "v*"}
  interval: 1h
  credentials: {secretRef: {name: hookreg}}
  target:
    helm: {file: $values/envs/stg/values.yaml, tag: image.tag}
"#;

#[tokio::test]
async fn a_values_file_in_a_ref_source_is_written_where_it_lives_and_deployed() -> anyhow::Result<()>
{
    let (registry, host, s, argocd) = node_scenario("argo-ms").await?;
    let image_repo = format!("argo/ms-{}", random_suffix());
    let image = format!("{host}/{image_repo}");
    registry.script(
        "push-image.sh",
        &["--runnable", &format!("{image_repo}:v1.0.0")],
    )?;
    let git = s.ground.git()?;
    // Credentials for the ground's git server, for watches whose location Argo CD gives.
    create_argocd_git_secret(&s, &git).await?;

    let chart_repo = format!("ms-chart-{}", s.ns.name);
    let chart_url = git.new_repo(
        &chart_repo,
        tree(&[
            ("charts/my-api/Chart.yaml", CHART_YAML.into()),
            (
                "charts/my-api/values.yaml",
                "image: {repository: none, tag: none}\n".into(),
            ),
            (
                "charts/my-api/templates/deployment.yaml",
                node_deployment(
                    "my-api",
                    "\"{{ .Values.image.repository }}:{{ .Values.image.tag }}\"",
                ),
            ),
            ("charts/my-api/templates/imagewatch.yaml", IMAGEWATCH.into()),
        ])?
        .path(),
    )?;
    let values_repo = format!("ms-values-{}", s.ns.name);
    let values_url = git.new_repo(
        &values_repo,
        tree(&[(
            "envs/stg/values.yaml",
            format!("image:\n  repository: {image}\n  tag: v1.0.0   # moved by imagewatch\n"),
        )])?
        .path(),
    )?;
    argocd.add_git_repository(&format!("ms-chart-{}", s.ns.name), &chart_url)?;
    argocd.add_git_repository(&format!("ms-values-{}", s.ns.name), &values_url)?;
    let app_name = format!("ms-{}", s.ns.name);
    let app = argocd.apply(
        &format!(
            r#"apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {{name: {app_name}, namespace: {argo}}}
spec:
  project: default
  sources:
  - repoURL: "{chart_url}"
    targetRevision: main
    path: charts/my-api
    helm: {{valueFiles: [$values/envs/stg/values.yaml]}}
  - repoURL: "{values_url}"
    targetRevision: main
    ref: values
  destination: {{server: "https://kubernetes.default.svc", namespace: {ns}}}
  syncPolicy: {{automated: {{prune: true}}}}
"#,
            argo = argocd.namespace,
            ns = s.ns.name
        ),
        &[&app_name],
    )?;
    argocd
        .wait_synced_healthy(&s.admin, &app_name, None)
        .await?;
    wait_pod_ready_with(
        &s.admin,
        &s.ns.name,
        "app=my-api",
        &format!("{image}:v1.0.0"),
    )
    .await?;
    // Argo CD synced the watch: the tracking annotation names the Application.
    let watch = s.watches.get("my-api").await?;
    let tracking = watch
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .remove("argocd.argoproj.io/tracking-id")
        .unwrap_or_default();
    assert!(
        tracking.starts_with(&format!("{app_name}:imagewatch.dev/ImageWatch:")),
        "{tracking:?}"
    );
    s.wait_ready("my-api", "True", "UpToDate").await?;

    // CI pushes v2: written into the values repository, the chart's repository untouched.
    registry.script(
        "push-image.sh",
        &["--runnable", &format!("{image_repo}:v2.0.0")],
    )?;
    s.wait_applied("my-api", "v2.0.0").await?;
    let values = git.show(&values_repo, "main", "envs/stg/values.yaml")?;
    assert!(
        values.contains("tag: v2.0.0   # moved by imagewatch"),
        "{values}"
    );
    assert_eq!(git.commit_count(&values_repo, "main")?, 2);
    assert_eq!(git.commit_count(&chart_repo, "main")?, 1);

    // The refresh makes Argo CD render the chart with it; the node runs v2.
    let deployed = wait_until("Deployed=True", TIMEOUT, || async {
        let w: ImageWatch = s.watches.get("my-api").await?;
        let c = w
            .status
            .as_ref()
            .and_then(|st| st.conditions.iter().find(|c| c.type_ == DEPLOYED))
            .cloned();
        Ok(c.filter(|c| c.status == "True"))
    })
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "{e}\n--- operator ---\n{}\n{}",
            s.operator.log_tail(40),
            argocd.log_tail(20)
        )
    })?;
    assert!(deployed.message.contains(&app_name), "{}", deployed.message);
    wait_pod_ready_with(
        &s.admin,
        &s.ns.name,
        "app=my-api",
        &format!("{image}:v2.0.0"),
    )
    .await?;
    app.delete(&s.admin).await?;
    Ok(())
}
