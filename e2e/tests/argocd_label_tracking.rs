//! Label tracking against the real Argo CD: with `application.resourceTrackingMethod: label`
//! in argocd-cm, Argo CD marks what it syncs with `app.kubernetes.io/instance: <app>` and no
//! tracking annotation. A watch without `spec.git`, synced that way, takes its repository,
//! branch and base path from that Application, and a push is written there.
//!
//! The tracking method is one setting for the whole Argo CD, so this test has a binary of
//! its own (test binaries run one after another) and puts the setting back when it ends.

use imagewatch_e2e::{
    Ground,
    argocd::ArgoCd,
    ground::random_suffix,
    setup::{TIMEOUT, create_argocd_git_secret, tree, webhook_scenario},
    wait_until,
};

const TRACKING_KEY: &str = "application.resourceTrackingMethod";

/// Sets argocd-cm's tracking method to `label`; the previous value comes back on drop.
struct LabelTracking {
    ground: &'static Ground,
    namespace: String,
    previous: Option<String>,
}

impl LabelTracking {
    fn set(ground: &'static Ground, argocd: &ArgoCd) -> anyhow::Result<Self> {
        let ns = argocd.namespace.clone();
        let path = format!("jsonpath={{.data.{}}}", TRACKING_KEY.replace('.', "\\."));
        let previous =
            ground.kubectl(&["get", "configmap", "argocd-cm", "-n", &ns, "-o", &path])?;
        let patch = serde_json::json!({"data": {TRACKING_KEY: "label"}}).to_string();
        ground.kubectl(&[
            "patch",
            "configmap",
            "argocd-cm",
            "-n",
            &ns,
            "--type",
            "merge",
            "-p",
            &patch,
        ])?;
        Ok(Self {
            ground,
            namespace: ns,
            previous: Some(previous.trim().to_string()).filter(|p| !p.is_empty()),
        })
    }
}

impl Drop for LabelTracking {
    fn drop(&mut self) {
        let patch = serde_json::json!({"data": {TRACKING_KEY: self.previous}}).to_string();
        let _ = self.ground.kubectl_try(
            &[
                "patch",
                "configmap",
                "argocd-cm",
                "-n",
                &self.namespace,
                "--type",
                "merge",
                "-p",
                &patch,
            ],
            None,
        );
    }
}

#[tokio::test]
async fn a_watch_synced_with_label_tracking_writes_where_its_application_deploys_from()
-> anyhow::Result<()> {
    let (registry, host, s, _) = webhook_scenario("argo-label", &[]).await?;
    let argocd = ArgoCd::get(s.ground)?;
    let _tracking = LabelTracking::set(s.ground, &argocd)?;
    let image_repo = format!("argo/label-{}", random_suffix());
    let image = format!("{host}/{image_repo}");
    registry.script("push-image.sh", &[&format!("{image_repo}:v1.0.0")])?;

    let git = s.ground.git()?;
    create_argocd_git_secret(&s, &git).await?;
    // The Application deploys apps/my-api (a plain directory: the watch); the watch's
    // overlay lies below it, so its path is relative to the Application's.
    let watch = format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata:
  name: my-api
spec:
  image: "{image}"
  tags: {{pattern: "v*"}}
  interval: 1h
  credentials: {{secretRef: {{name: hookreg}}}}
  target:
    kustomize: {{path: overlays/stg, image: my-api}}
"#
    );
    let overlay =
        format!("resources: []\nimages:\n- name: my-api\n  newName: {image}\n  newTag: v1.0.0\n");
    let repo = format!("label-{}", s.ns.name);
    let url = git.new_repo(
        &repo,
        tree(&[
            ("apps/my-api/imagewatch.yaml", watch),
            ("apps/my-api/overlays/stg/kustomization.yaml", overlay),
            ("README.md", "manifests\n".into()),
        ])?
        .path(),
    )?;
    argocd.add_git_repository(&repo, &url)?;
    let app_name = format!("lbl-{}", random_suffix());
    let app = argocd.apply(
        &argocd.application(&app_name, &url, "apps/my-api", &s.ns.name),
        &[&app_name],
    )?;

    // Argo CD synced the watch with the instance label and no tracking annotation.
    let synced = wait_until("the watch synced by Argo CD", TIMEOUT, || async {
        Ok(s.watches.get_opt("my-api").await?)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n--- Argo CD ---\n{}", argocd.log_tail(30)))?;
    let labels = synced.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("app.kubernetes.io/instance"),
        Some(&app_name),
        "{labels:?}"
    );
    let annotations = synced.metadata.annotations.clone().unwrap_or_default();
    assert!(
        !annotations.contains_key("argocd.argoproj.io/tracking-id"),
        "{annotations:?}"
    );
    s.wait_ready("my-api", "True", "UpToDate").await?;

    // CI pushes v2: written into the overlay below the Application's path.
    registry.script("push-image.sh", &[&format!("{image_repo}:v2.0.0")])?;
    s.wait_applied("my-api", "v2.0.0").await?;
    let written = git.show(&repo, "main", "apps/my-api/overlays/stg/kustomization.yaml")?;
    assert!(written.contains("newTag: v2.0.0"), "{written}");
    assert_eq!(git.commit_count(&repo, "main")?, 2);
    app.delete(&s.admin).await?;
    Ok(())
}
