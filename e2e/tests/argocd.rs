//! Beside a real Argo CD (the ground's application-controller, repo-server and redis): a
//! registry push becomes a commit, imagewatch asks the Applications deploying the changed file
//! to refresh, Argo CD syncs, the node runs the new Pod, and the watch reports `Deployed` with
//! the time it took. Nothing here writes an Application's status: Argo CD does.

use std::time::Instant;

use imagewatch_crd::{ImageWatch, conditions::DEPLOYED};
use imagewatch_e2e::{
    argocd::ArgoCd,
    ground::random_suffix,
    node::{node_deployment, wait_pod_ready_with},
    operator::metric,
    setup::{Scenario, TIMEOUT, node_scenario},
    wait_until,
};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::{Api, api::ListParams};

/// A plain directory of manifests: one Deployment of `image` on the node's network.
fn seed_directory(image: &str) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let app = dir.path().join("apps/my-api/stg");
    std::fs::create_dir_all(&app)?;
    std::fs::write(
        app.join("deployment.yaml"),
        node_deployment("my-api", &format!("{image}   # the tag imagewatch moves")),
    )?;
    Ok(dir)
}

/// The `Deployed` condition: (status, reason, message).
fn deployed(w: &ImageWatch) -> Option<(String, String, String)> {
    w.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == DEPLOYED)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Push → commit → Argo CD sync → the Deployment's new Pod Ready with the new image, once.
#[tokio::test]
async fn a_push_runs_in_the_pod_argo_cd_deploys() -> anyhow::Result<()> {
    let (registry, host, s, argocd) = node_scenario("argo-run").await?;
    let image_repo = format!("argo/app-{}", random_suffix());
    let image = format!("{host}/{image_repo}");
    registry.script(
        "push-image.sh",
        &["--runnable", &format!("{image_repo}:v1.0.0")],
    )?;

    // The manifests repository, and an Application deploying it into the test's namespace.
    let seed = seed_directory(&format!("{image}:v1.0.0"))?;
    let repo_name = format!("argo-{}", s.ns.name);
    let git = s.ground.git()?;
    let url = git.new_repo(&repo_name, seed.path())?;
    argocd.add_git_repository(&format!("repo-{}", s.ns.name), &url)?;
    let app_name = format!("run-{}", s.ns.name);
    let app = argocd.apply(
        &argocd.application(&app_name, &url, "apps/my-api/stg", &s.ns.name),
        &[&app_name],
    )?;
    let seeded = git.git(&repo_name, &["rev-parse", "main"])?;
    argocd
        .wait_synced_healthy(&s.admin, &app_name, Some(seeded.trim()))
        .await?;

    // The watch follows v* tags into the Deployment; Git already holds v1.
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: my-api, namespace: {ns}}}
spec:
  image: {image}
  tags: {{pattern: "v*"}}
  interval: 1h
  credentials: {{secretRef: {{name: hookreg}}}}
  git: {{url: "{url}", secretRef: {{name: git-creds}}}}
  target:
    workload: {{path: apps/my-api/stg, kind: Deployment, name: my-api, container: my-api}}
"#,
        ns = s.ns.name
    ))?;
    s.wait_ready("my-api", "True", "UpToDate").await?;

    // CI pushes v2: the notification makes the commit, the refresh makes Argo CD sync it at
    // once (its repo-server would otherwise keep the old revision for 3 minutes).
    let pushed = Instant::now();
    registry.script(
        "push-image.sh",
        &["--runnable", &format!("{image_repo}:v2.0.0")],
    )?;
    s.wait_applied("my-api", "v2.0.0").await?;
    let committed = pushed.elapsed();
    let watch = wait_until("Deployed=True", TIMEOUT, || async {
        let w = s.watches.get("my-api").await?;
        Ok(deployed(&w).filter(|(st, _, _)| st == "True").map(|_| w))
    })
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "{e}\n--- operator ---\n{}\n{}",
            s.operator.log_tail(40),
            argocd.log_tail(20)
        )
    })?;
    let running = pushed.elapsed();
    let (_, reason, message) = deployed(&watch).unwrap_or_default();
    assert_eq!(reason, "Deployed");
    assert!(message.contains(&app_name), "{message}");
    assert!(message.contains("after the push"), "{message}");
    eprintln!(
        "push → commit {:.2} s, push → running {:.2} s ({message})",
        committed.as_secs_f64(),
        running.as_secs_f64()
    );

    // Argo CD synced imagewatch's commit, and the node runs the new image in one rollout.
    let head = git.git(&repo_name, &["rev-parse", "main"])?;
    argocd
        .wait_synced_healthy(&s.admin, &app_name, Some(head.trim()))
        .await?;
    assert_eq!(git.commit_count(&repo_name, "main")?, 2, "one commit");
    let deployments: Api<Deployment> = Api::namespaced(s.admin.clone(), &s.ns.name);
    let d = deployments.get("my-api").await?;
    let spec_image = d
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.containers.first().and_then(|c| c.image.clone()));
    assert_eq!(
        spec_image.as_deref(),
        Some(format!("{image}:v2.0.0").as_str())
    );
    let ready_v2 = wait_pod_ready_with(
        &s.admin,
        &s.ns.name,
        "app=my-api",
        &format!("{image}:v2.0.0"),
    )
    .await?;
    assert!(ready_v2.metadata.name.is_some());
    let replica_sets: Api<ReplicaSet> = Api::namespaced(s.admin.clone(), &s.ns.name);
    let sets = replica_sets
        .list(&ListParams::default().labels("app=my-api"))
        .await?;
    assert_eq!(sets.items.len(), 2, "v1 and v2, one rollout each");

    // The operator measured it: an Event, the histogram and the refresh counter.
    let metrics = s.operator.metrics().await?;
    assert!(
        metric(&metrics, "imagewatch_push_to_running_seconds_count") >= 1.0,
        "{metrics}"
    );
    assert!(
        metric(
            &metrics,
            "imagewatch_argocd_refreshes_total{outcome=\"requested\"}"
        ) >= 1.0,
        "{metrics}"
    );
    let events = s.ground.kubectl(&[
        "get",
        "events.events.k8s.io",
        "-n",
        &s.ns.name,
        "--field-selector",
        "reason=Deployed",
        "-o",
        "name",
    ])?;
    assert!(!events.trim().is_empty(), "a Deployed Event");
    app.delete(&s.admin).await?;
    Ok(())
}

/// A watch whose committed file no Application deploys says so, and nothing is patched.
#[tokio::test]
async fn a_commit_no_application_deploys_is_reported_as_such() -> anyhow::Result<()> {
    let s = Scenario::start("argo-none", &[]).await?;
    ArgoCd::get(s.ground)?;
    let registry = s.ground.registry()?;
    let image_repo = format!("argo/none-{}", random_suffix());
    registry.push(&image_repo, "v1.0.0")?;
    registry.push(&image_repo, "v2.0.0")?;
    let seed = seed_directory(&format!("{}/{image_repo}:v1.0.0", registry.host))?;
    let repo_name = format!("argo-{}", s.ns.name);
    let url = s.ground.git()?.new_repo(&repo_name, seed.path())?;
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: my-api, namespace: {ns}}}
spec:
  image: {host}/{image_repo}
  tags: {{pattern: "v*"}}
  credentials: {{secretRef: {{name: regcred}}}}
  git: {{url: "{url}", secretRef: {{name: git-creds}}}}
  target:
    workload: {{path: apps/my-api/stg, kind: Deployment, name: my-api, container: my-api}}
"#,
        ns = s.ns.name,
        host = registry.host
    ))?;
    s.wait_applied("my-api", "v2.0.0").await?;
    let watch = wait_until("Deployed=Unknown NoApplication", TIMEOUT, || async {
        let w = s.watches.get("my-api").await?;
        Ok(deployed(&w).filter(|(_, r, _)| r == "NoApplication"))
    })
    .await?;
    assert_eq!(watch.0, "Unknown");
    assert!(
        watch.2.contains("apps/my-api/stg/deployment.yaml"),
        "{}",
        watch.2
    );
    // Ready is about Git, not Argo CD.
    let w = s.watches.get("my-api").await?;
    assert_eq!(
        imagewatch_e2e::setup::ready(&w).map(|r| r.0).as_deref(),
        Some("True")
    );
    let metrics = s.operator.metrics().await?;
    assert_eq!(
        metric(
            &metrics,
            "imagewatch_argocd_refreshes_total{outcome=\"requested\"}"
        ),
        0.0
    );
    Ok(())
}

/// `.argocd-source-<app>.yaml` as Argo CD's repo-server reads it: an overlay whose `images[]`
/// renames `my-api` to the registry's repository keeps that repository when
/// `imagewatch set-image --argocd-source … --tag` sets a new tag (Argo CD runs
/// `kustomize edit set image` with the file's strings).
#[tokio::test]
async fn a_new_tag_in_the_argocd_source_file_keeps_the_overlays_registry() -> anyhow::Result<()> {
    let s = Scenario::start("argo-src", &[]).await?;
    let argocd = ArgoCd::get(s.ground)?;
    let registry = format!("{}/argo/src-{}", s.ground.registry()?.host, random_suffix());
    let seed = tempfile::tempdir()?;
    let overlay = seed.path().join("apps/web/overlay");
    std::fs::create_dir_all(&overlay)?;
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "resources: [deployment.yaml]\nimages:\n- name: my-api\n  newName: {registry}\n  newTag: v1.2.4\n"
        ),
    )?;
    // No replicas: only the rendered image matters here.
    std::fs::write(
        overlay.join("deployment.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 0\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers:\n      - {name: web, image: my-api}\n",
    )?;
    let app_name = format!("src-{}", s.ns.name);
    let out = std::process::Command::new(imagewatch_e2e::operator::binary())
        .args(["set-image", "--argocd-source"])
        .arg(&overlay)
        .args([
            "--application",
            &app_name,
            "--name",
            "my-api",
            "--tag",
            "v1.2.5",
        ])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "set-image: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = std::fs::read_to_string(overlay.join(format!(".argocd-source-{app_name}.yaml")))?;
    assert!(written.contains("- my-api=*:v1.2.5"), "{written}");

    let repo_name = format!("argo-{}", s.ns.name);
    let git = s.ground.git()?;
    let url = git.new_repo(&repo_name, seed.path())?;
    argocd.add_git_repository(&format!("repo-{}", s.ns.name), &url)?;
    let app = argocd.apply(
        &argocd.application(&app_name, &url, "apps/web/overlay", &s.ns.name),
        &[&app_name],
    )?;
    let head = git.git(&repo_name, &["rev-parse", "main"])?;
    argocd
        .wait_synced_healthy(&s.admin, &app_name, Some(head.trim()))
        .await?;
    let deployments: Api<Deployment> = Api::namespaced(s.admin.clone(), &s.ns.name);
    let image = deployments
        .get("web")
        .await?
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.containers.first().and_then(|c| c.image.clone()));
    assert_eq!(image, Some(format!("{registry}:v1.2.5")));
    app.delete(&s.admin).await?;
    Ok(())
}

/// Argo CD syncs a directory of ImageWatches from Git: Synced and Healthy, still Synced
/// after imagewatch writes status (no drift), and a broken watch makes its Application
/// Degraded with the watch's reason.
#[tokio::test]
async fn argo_cd_syncs_the_watches_and_reports_a_broken_one() -> anyhow::Result<()> {
    let s = Scenario::start("argo-crs", &[]).await?;
    let argocd = ArgoCd::get(s.ground)?;
    let registry = s.ground.registry()?;
    let image_repo = format!("argo/crs-{}", random_suffix());
    registry.push(&image_repo, "v1.0.0")?;
    let git = s.ground.git()?;
    // The manifests the watch writes to, and the directory of watches Argo CD syncs.
    let manifests = seed_directory(&format!("{}/{image_repo}:v1.0.0", registry.host))?;
    let manifests_repo = format!("argo-m-{}", s.ns.name);
    let manifests_url = git.new_repo(&manifests_repo, manifests.path())?;
    let watch = |name: &str, pattern: &str| {
        format!(
            r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: {name}}}
spec:
  image: {host}/{image_repo}
  tags: {{pattern: "{pattern}"}}
  interval: 10s
  credentials: {{secretRef: {{name: regcred}}}}
  git: {{url: "{manifests_url}", secretRef: {{name: git-creds}}}}
  target:
    workload: {{path: apps/my-api/stg, kind: Deployment, name: my-api, container: my-api}}
"#,
            host = registry.host
        )
    };
    let crs = tempfile::tempdir()?;
    std::fs::create_dir_all(crs.path().join("watches"))?;
    std::fs::write(
        crs.path().join("watches/my-api.yaml"),
        watch("my-api", "v*"),
    )?;
    let crs_repo = format!("argo-crs-{}", s.ns.name);
    let crs_url = git.new_repo(&crs_repo, crs.path())?;
    argocd.add_git_repository(&format!("repo-{}", s.ns.name), &crs_url)?;
    let app_name = format!("crs-{}", s.ns.name);
    let app = argocd.apply(
        &argocd.application(&app_name, &crs_url, "watches", &s.ns.name),
        &[&app_name],
    )?;
    let head = git.git(&crs_repo, &["rev-parse", "main"])?;
    argocd
        .wait_synced_healthy(&s.admin, &app_name, Some(head.trim()))
        .await?;
    s.wait_ready("my-api", "True", "UpToDate").await?;

    // imagewatch commits a new tag and writes status: Argo CD still sees no drift.
    registry.push(&image_repo, "v1.1.0")?;
    s.wait_applied("my-api", "v1.1.0").await?;
    argocd
        .wait_synced_healthy(&s.admin, &app_name, Some(head.trim()))
        .await?;

    // A watch whose regex does not compile (the CRD cannot judge it, the operator can).
    let broken = watch("broken", "regex:^v(?P<v>[0-9]+$");
    git.commit_files(
        &crs_repo,
        "main",
        &[("watches/broken.yaml", Some(broken.as_str()))],
        "broken watch",
    )?;
    // A person's commit: Argo CD notices it at its next refresh; ask for one as a webhook would.
    s.ground.kubectl(&[
        "annotate",
        "applications.argoproj.io",
        &app_name,
        "-n",
        &argocd.namespace,
        "argocd.argoproj.io/refresh=normal",
        "--overwrite",
    ])?;
    let apps = argocd.applications(&s.admin);
    let degraded = wait_until(
        "the Application Degraded by the broken watch",
        TIMEOUT,
        || async {
            let app = serde_json::to_value(apps.get(&app_name).await?)?;
            let resource = app
                .pointer("/status/resources")
                .and_then(|r| r.as_array())
                .and_then(|r| {
                    r.iter()
                        .find(|r| r.get("name").and_then(|n| n.as_str()) == Some("broken"))
                        .cloned()
                });
            let health = app
                .pointer("/status/health/status")
                .and_then(|h| h.as_str());
            // The watch's health as the UI shows it (the ground persists it in the
            // Application: controller.resource.health.persist), and the Application's own.
            let message = resource
                .as_ref()
                .and_then(|r| r.pointer("/health/message"))
                .and_then(|m| m.as_str())
                .unwrap_or("");
            match resource {
                Some(r) if health == Some("Degraded") && message.contains("InvalidSpec") => {
                    Ok(Some(r))
                }
                other => anyhow::bail!(
                    "Application health {health:?}, sync {:?}, the broken watch {other:?}, last operation {:?}",
                    app.pointer("/status/sync/status"),
                    app.pointer("/status/operationState/message")
                ),
            }
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", argocd.log_tail(20)))?;
    assert_eq!(
        degraded.pointer("/status").and_then(|s| s.as_str()),
        Some("Synced"),
        "the broken watch is applied as written: {degraded}"
    );
    // What Argo CD's health check reads: the watch's Ready condition and its reason.
    s.wait_ready("broken", "False", "InvalidSpec").await?;
    app.delete(&s.admin).await?;
    Ok(())
}
