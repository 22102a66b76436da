//! Argo CD manages imagewatch itself: one Application installs the chart (a Helm source in the
//! ground's git server) onto the node, another syncs a directory of ImageWatch and
//! PromotionPolicy objects. The chart's operator Pod writes their status, and both
//! Applications stay Synced and Healthy through it. Argo CD writes every Application status.

use imagewatch_crd::ImageWatch;
use imagewatch_e2e::{
    Ground, TestNamespace,
    argocd::ArgoCd,
    ground::random_suffix,
    node::{pod_logs_dir, release_image},
    operator::free_port,
    setup::{TIMEOUT, create_git_secret, create_secret, ready},
    wait_until,
};
use kube::{
    Api,
    api::{ApiResource, DynamicObject, GroupVersionKind},
};
use serde_json::Value;

/// A Deployment manifest of `image` (written by imagewatch; this Application never deploys it).
fn deployment(image: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: my-api
spec:
  replicas: 1
  selector:
    matchLabels: {{app: my-api}}
  template:
    metadata:
      labels: {{app: my-api}}
    spec:
      containers:
      - name: my-api
        image: {image}
"#
    )
}

/// The chart as a Git repository holds it: `charts/imagewatch` at the tip of main.
fn chart_repository() -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    imagewatch_e2e::setup::copy_dir(
        &imagewatch_e2e::ground::repo_root().join("charts/imagewatch"),
        &dir.path().join("charts/imagewatch"),
    )?;
    Ok(dir)
}

/// The chart values the loopback ground needs (what `e2e/scripts/install.sh` passes to helm),
/// as the Application's `helm.valuesObject`.
fn ground_values(ground: &Ground, ns: &str, image: &str) -> anyhow::Result<String> {
    let (repository, tag) = image.rsplit_once(':').unwrap_or((image, "latest"));
    let registry = image.split('/').next().unwrap_or_default();
    let apiserver_port = std::fs::read_to_string(ground.state.join("controlplane/apiserver.port"))?;
    Ok(format!(
        r#"watchNamespace: {ns}
image: {{repository: "{repository}", tag: "{tag}", pullPolicy: IfNotPresent}}
imagePullSecrets: [{{name: imagewatch-pull}}]
hostNetwork: true
probeHost: 127.0.0.1
kubernetesApi: {{host: 127.0.0.1, port: {port}}}
metrics: {{port: {metrics}, bindAddress: 127.0.0.1}}
registry: {{insecure: ["{registry}"]}}
caBundle: {{configMap: imagewatch-ca}}
tolerations: [{{key: imagewatch.dev/e2e-node, operator: Exists, effect: NoSchedule}}]
extraEnv: [{{name: AWS_EC2_METADATA_DISABLED, value: "true"}}]
"#,
        port = apiserver_port.trim(),
        metrics = free_port()?,
    ))
}

/// Indents every line of `text` by `spaces`.
fn indent(text: &str, spaces: usize) -> String {
    text.lines()
        .map(|l| format!("{}{l}\n", " ".repeat(spaces)))
        .collect()
}

/// `(status, reason)` of a PromotionPolicy's Ready condition.
fn policy_ready(policy: &DynamicObject) -> Option<(String, String)> {
    let data = serde_json::to_value(policy).ok()?;
    let ready = data
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))?;
    let text = |k: &str| {
        ready
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    Some((text("status"), text("reason")))
}

/// Sync status, revision and health of an Application.
fn app_state(app: &Value) -> (String, String, String) {
    let text = |p: &str| {
        app.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (
        text("/status/sync/status"),
        text("/status/sync/revision"),
        text("/status/health/status"),
    )
}

/// The directory Argo CD syncs: a watch of `image` writing `apps/my-api/stg` of
/// `manifests_url`, and a policy promoting it to `apps/my-api/prod`.
fn watch_and_policy(app_image: &str, manifests_url: &str) -> String {
    format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata:
  name: my-api
  labels: {{app: my-api, stage: staging}}
spec:
  image: {app_image}
  tags: {{pattern: "v*"}}
  interval: 10s
  credentials: {{secretRef: {{name: regcred}}}}
  git: {{url: "{manifests_url}", secretRef: {{name: git-creds}}}}
  target:
    workload: {{path: apps/my-api/stg, kind: Deployment, name: my-api, container: my-api}}
---
apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata:
  name: my-api-prod
spec:
  from: {{path: apps/my-api/stg}}
  to:
    git: {{url: "{manifests_url}", branch: main, secretRef: {{name: git-creds}}}}
    path: apps/my-api/prod
  mode: Commit
"#
    )
}

/// What the chart's Pod reads in `ns`: the pull Secret, the ground's CA, and the watch's
/// Secrets.
async fn namespace_inputs(ground: &Ground, ns: &str) -> anyhow::Result<()> {
    let admin = ground.admin().await?;
    let registry = ground.registry()?;
    let git = ground.git()?;
    for name in ["imagewatch-pull", "regcred"] {
        create_secret(
            &admin,
            ns,
            name,
            "kubernetes.io/dockerconfigjson",
            &[(".dockerconfigjson", &registry.dockerconfigjson())],
        )
        .await?;
    }
    create_git_secret(&admin, ns, &git).await?;
    let bundle = ground.state.join("git/tls/bundle.pem");
    ground.kubectl(&[
        "create",
        "configmap",
        "imagewatch-ca",
        "-n",
        ns,
        &format!("--from-file=ca-certificates.crt={}", bundle.display()),
    ])?;

    Ok(())
}

#[tokio::test]
async fn argo_cd_installs_imagewatch_and_syncs_its_objects() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground
        .var("IMAGEWATCH_NODE_NAME")
        .map_err(|e| anyhow::anyhow!("this test runs the chart's Pod on the ground's node: {e}"))?;
    let argocd = ArgoCd::get(ground)?;
    pod_logs_dir(ground)?;
    ground.install_crds()?;
    let image = release_image(ground)?;
    let ns = TestNamespace::create(ground, "argo-iw").await?;
    let admin = ground.admin().await?;
    let registry = ground.registry()?;
    let git = ground.git()?;

    namespace_inputs(ground, &ns.name).await?;

    // Three repositories: the chart, the manifests imagewatch writes, and the objects.
    let image_repo = format!("argo/iw-{}", random_suffix());
    registry.push(&image_repo, "v1.0.0")?;
    let app_image = format!("{}/{image_repo}", registry.host);
    let chart_repo = format!("iw-chart-{}", ns.name);
    let chart_url = git.new_repo(&chart_repo, chart_repository()?.path())?;
    let manifests = tempfile::tempdir()?;
    for env in ["stg", "prod"] {
        let dir = manifests.path().join(format!("apps/my-api/{env}"));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("deployment.yaml"),
            deployment(&format!("{app_image}:v1.0.0")),
        )?;
    }
    let manifests_repo = format!("iw-m-{}", ns.name);
    let manifests_url = git.new_repo(&manifests_repo, manifests.path())?;
    let objects = watch_and_policy(&app_image, &manifests_url);
    let objects_dir = tempfile::tempdir()?;
    std::fs::create_dir_all(objects_dir.path().join("imagewatch"))?;
    std::fs::write(objects_dir.path().join("imagewatch/my-api.yaml"), objects)?;
    let objects_repo = format!("iw-objects-{}", ns.name);
    let objects_url = git.new_repo(&objects_repo, objects_dir.path())?;
    argocd.add_git_repository(&format!("chart-{}", ns.name), &chart_url)?;
    argocd.add_git_repository(&format!("objects-{}", ns.name), &objects_url)?;

    // The chart Application: Helm source from Git, deletion cascades to what it installed.
    // The ground's CRDs are shared by every test running at once, so this release leaves them
    // to the ground (skipCrds); a cluster of one's own would let Argo CD apply them.
    let install = format!("iw-{}", ns.name);
    let objects_app = format!("iw-objects-{}", ns.name);
    let values = ground_values(ground, &ns.name, &image)?;
    let apps = argocd.apply(
        &format!(
            r#"apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: {install}
  namespace: {argo}
  finalizers: [resources-finalizer.argocd.argoproj.io]
spec:
  project: default
  source:
    repoURL: "{chart_url}"
    targetRevision: main
    path: charts/imagewatch
    helm:
      releaseName: imagewatch
      skipCrds: true
      valuesObject:
{values}  destination: {{server: "https://kubernetes.default.svc", namespace: {ns}}}
  syncPolicy: {{automated: {{prune: true}}}}
---
{objects}"#,
            argo = argocd.namespace,
            ns = ns.name,
            values = indent(&values, 8),
            objects = argocd.application(&objects_app, &objects_url, "imagewatch", &ns.name),
        ),
        &[&objects_app, &install],
    )?;
    let chart_head = git.git(&chart_repo, &["rev-parse", "main"])?;
    argocd
        .wait_synced_healthy(&admin, &install, Some(chart_head.trim()))
        .await?;
    let objects_head = git.git(&objects_repo, &["rev-parse", "main"])?;
    argocd
        .wait_synced_healthy(&admin, &objects_app, Some(objects_head.trim()))
        .await?;

    // The chart's Pod runs the watch and the policy (their Ready comes from it alone).
    let watches: Api<ImageWatch> = Api::namespaced(admin.clone(), &ns.name);
    let policies: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("imagewatch.dev", "v1alpha1", "PromotionPolicy"),
            "promotionpolicies",
        ),
    );
    registry.push(&image_repo, "v1.1.0")?;
    wait_until("the watch commits v1.1.0", TIMEOUT, || async {
        let w = watches.get("my-api").await?;
        let applied = w
            .status
            .as_ref()
            .and_then(|s| s.applied.as_ref())
            .map(|a| a.tag.clone())
            .unwrap_or_default();
        Ok((applied == "v1.1.0").then_some(()))
    })
    .await?;
    wait_until("the policy promotes v1.1.0", TIMEOUT, || async {
        let prod = git.show(&manifests_repo, "main", "apps/my-api/prod/deployment.yaml")?;
        let p = policies.get("my-api-prod").await?;
        let state = policy_ready(&p);
        if prod.contains(":v1.1.0") && state.as_ref().is_some_and(|(s, _)| s == "True") {
            return Ok(Some(()));
        }
        anyhow::bail!("prod overlay {prod:?}, policy Ready {state:?}")
    })
    .await?;
    let w = watches.get("my-api").await?;
    assert_eq!(ready(&w).map(|r| r.0).as_deref(), Some("True"), "{w:?}");

    // Status written, a fresh comparison: still Synced at the same revisions, still Healthy
    // (no drift from defaults, labels or status).
    for (name, head) in [(&install, &chart_head), (&objects_app, &objects_head)] {
        let app = argocd.refresh(&admin, name).await?;
        assert_eq!(
            app_state(&app),
            ("Synced".into(), head.trim().into(), "Healthy".into()),
            "{name} after imagewatch wrote status: {}",
            app.pointer("/status/resources")
                .cloned()
                .unwrap_or_default()
        );
    }

    // Deleting the chart Application removes what it installed (the Pod stops writing).
    apps.delete(&admin).await?;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(admin.clone(), &ns.name);
    wait_until("the chart's Deployment removed", TIMEOUT, || async {
        let left = deployments.list(&Default::default()).await?.items.len();
        Ok((left == 0).then_some(()))
    })
    .await?;
    Ok(())
}
