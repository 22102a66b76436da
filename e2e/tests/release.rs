//! A release as users get it, and an upgrade of its CRDs.
//!
//! - `just release REGISTRY VERSION` (e2e/scripts/release.sh) pushes the release image and the
//!   chart to the ground's registry; `helm install oci://…/charts/imagewatch --version VERSION`
//!   with no image value runs the image the release pushed, on the ground's node.
//! - CRD upgrades: `helm upgrade` leaves a chart's `crds/` alone, so an object using a field
//!   the new CRD gained is refused until the documented step — `kubectl apply --server-side
//!   --force-conflicts -f crds/` of the new chart — has run; then it applies. (A copy of the
//!   CRDs under a group of its own, so the ground's shared CRDs are not touched.)

use std::path::Path;
use std::process::Command;

use imagewatch_e2e::{
    Ground, TestNamespace,
    ground::{random_suffix, repo_root},
    node::{Release, pod_logs_dir, release_binary},
};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, api::ListParams};

/// Runs `program args` with `envs`; its stdout, or an error with both streams.
fn run(program: &Path, args: &[&str], envs: &[(&str, &str)]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    anyhow::ensure!(
        out.status.success(),
        "{} {args:?} failed:\n{stdout}{}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(stdout)
}

#[tokio::test]
async fn a_released_chart_installs_from_the_registry_with_its_own_image() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    pod_logs_dir(ground)?;
    ground.install_crds()?;
    let registry = ground.registry()?;
    let binary = release_binary()?;
    let version = format!("0.1.0-e2e.{}", random_suffix());
    let releases = format!("{}/releases-{}", registry.host, random_suffix());
    let state = ground.state.display().to_string();
    let printed = run(
        &repo_root().join("e2e/scripts/release.sh"),
        &[&releases, &version],
        &[
            ("IMAGEWATCH_E2E_STATE", &state),
            ("IMAGEWATCH_RELEASE_BINARY", &binary.display().to_string()),
            ("REGISTRY_USER", &registry.user),
            ("REGISTRY_PASSWORD", &registry.password),
            ("REGISTRY_INSECURE", "1"),
        ],
    )?;
    let chart = format!("oci://{releases}/charts/imagewatch");
    assert_eq!(
        printed.lines().last(),
        Some(format!("{chart} {version}").as_str()),
        "{printed}"
    );

    // helm install of the released chart: no image value, the chart's default.
    let ns = TestNamespace::create(ground, "release").await?;
    let release = Release::install_chart(
        ground,
        "imagewatch",
        &ns.name,
        &chart,
        &["--version", &version],
    )?;
    let pods: Api<Pod> = Api::namespaced(ground.admin().await?, &ns.name);
    let listed = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=imagewatch"))
        .await?;
    assert_eq!(listed.items.len(), 1, "{}", release.output);
    let pod = &listed.items[0];
    let image = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    assert_eq!(image, format!("{releases}/imagewatch:{version}"));
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    assert!(ready, "the released Pod is not Ready: {:?}", pod.status);
    Ok(())
}

/// The chart's CRDs under the group `<prefix>.imagewatch.dev`, with or without
/// `spec.windows` in the ImageWatch schema; the chart directory.
fn chart_with_crds(
    dir: &Path,
    group: &str,
    with_windows: bool,
    version: &str,
) -> anyhow::Result<()> {
    let source = repo_root().join("charts/imagewatch");
    std::fs::create_dir_all(dir.join("crds"))?;
    std::fs::create_dir_all(dir.join("templates"))?;
    std::fs::write(
        dir.join("Chart.yaml"),
        format!("apiVersion: v2\nname: crd-upgrade\nversion: {version}\n"),
    )?;
    for entry in std::fs::read_dir(source.join("crds"))? {
        let entry = entry?;
        let text = std::fs::read_to_string(entry.path())?;
        let mut crd: serde_json::Value = serde_saphyr::from_str(&text)?;
        let plural = crd["spec"]["names"]["plural"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        crd["metadata"]["name"] = format!("{plural}.{group}").into();
        crd["spec"]["group"] = group.into();
        if !with_windows && plural == "imagewatches" {
            for version in crd["spec"]["versions"].as_array_mut().into_iter().flatten() {
                let spec = &mut version["schema"]["openAPIV3Schema"]["properties"]["spec"];
                if let Some(properties) = spec["properties"].as_object_mut() {
                    anyhow::ensure!(
                        properties.remove("windows").is_some(),
                        "the ImageWatch CRD has no spec.windows to take away"
                    );
                }
            }
        }
        std::fs::write(
            dir.join("crds").join(entry.file_name()),
            serde_json::to_string_pretty(&crd)?,
        )?;
    }
    Ok(())
}

#[tokio::test]
async fn a_crd_that_gained_a_field_is_applied_before_helm_upgrade() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    let helm = ground.helm()?;
    let group = format!("u{}.imagewatch.dev", random_suffix());
    let ns = TestNamespace::create(ground, "crd-upgrade").await?;
    let tmp = tempfile::tempdir()?;
    let (old, new) = (tmp.path().join("old"), tmp.path().join("new"));
    chart_with_crds(&old, &group, false, "0.1.0")?;
    chart_with_crds(&new, &group, true, "0.2.0")?;
    let kubeconfig = ground.kubeconfig.display().to_string();
    let env = [("KUBECONFIG", kubeconfig.as_str())];
    let release = format!("crd-upgrade-{}", random_suffix());
    let helm_run = |args: &[&str]| run(&helm, args, &env);
    helm_run(&[
        "install",
        &release,
        &old.display().to_string(),
        "-n",
        &ns.name,
    ])?;
    let cleanup = Cleanup {
        ground,
        group: group.clone(),
    };

    let watch = format!(
        r#"apiVersion: {group}/v1alpha1
kind: ImageWatch
metadata: {{name: windowed, namespace: {ns}}}
spec:
  image: registry.example.com/team/my-api
  git: {{url: "https://git.example.com/team/manifests.git", secretRef: {{name: git-credentials}}}}
  target: {{workload: {{path: apps/my-api, kind: Deployment, name: my-api, container: my-api}}}}
  windows: [{{kind: Allow, schedule: "0 9 * * 1-5", duration: 8h}}]
"#,
        ns = ns.name
    );
    let apply = |what: &str| {
        ground.kubectl_try(
            &["apply", "--server-side", "--validate=strict", "-f", "-"],
            Some(what),
        )
    };
    // The old CRD has no spec.windows: refused.
    let (ok, out) = apply(&watch)?;
    assert!(!ok, "the old CRD accepted spec.windows: {out}");
    assert!(out.contains("windows"), "{out}");

    // helm upgrade alone leaves the CRDs as they were.
    helm_run(&[
        "upgrade",
        &release,
        &new.display().to_string(),
        "-n",
        &ns.name,
    ])?;
    let (ok, out) = apply(&watch)?;
    assert!(!ok, "helm upgrade changed the CRD: {out}");

    // The documented step: the new chart's CRDs applied server-side, then it applies.
    let crds = new.join("crds").display().to_string();
    let out = ground.kubectl(&["apply", "--server-side", "--force-conflicts", "-f", &crds])?;
    assert!(out.contains("serverside-applied"), "{out}");
    let (ok, out) = apply(&watch)?;
    assert!(ok, "after applying the new CRDs: {out}");
    let windows = ground.kubectl(&[
        "get",
        &format!("imagewatches.{group}"),
        "windowed",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.spec.windows[0].schedule}",
    ])?;
    assert_eq!(windows.trim(), "0 9 * * 1-5");
    helm_run(&["uninstall", &release, "-n", &ns.name])?;
    drop(cleanup);
    Ok(())
}

/// Deletes the test's CRDs (cluster-scoped, so not gone with the namespace).
struct Cleanup {
    ground: &'static Ground,
    group: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for plural in ["imagewatches", "promotionpolicies"] {
            let _ = self.ground.kubectl_try(
                &[
                    "delete",
                    "crd",
                    &format!("{plural}.{}", self.group),
                    "--ignore-not-found",
                    "--wait=false",
                ],
                None,
            );
        }
    }
}
