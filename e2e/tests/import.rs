//! `imagewatch import` against the real apiserver: `--from-cluster` lists annotated workloads
//! (and skips the Flux and Argo CD kinds this cluster does not serve), a directory is read
//! with its setter markers rewritten, and the apiserver accepts every generated watch.

use std::process::Command;

use imagewatch_crd::ImageWatch;
use imagewatch_e2e::{Ground, TestNamespace, operator::binary};

fn workloads(ns: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  namespace: {ns}
  annotations:
    fluxcd.io/automated: "true"
    fluxcd.io/tag.podinfod: semver:~3.1
spec:
  selector: {{matchLabels: {{app: podinfo}}}}
  replicas: 0
  template:
    metadata: {{labels: {{app: podinfo}}}}
    spec:
      containers:
        - name: podinfod
          image: registry.example.com/podinfo:3.1.0
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: wd
  namespace: {ns}
  annotations:
    keel.sh/policy: minor
spec:
  selector: {{matchLabels: {{app: wd}}}}
  replicas: 0
  template:
    metadata: {{labels: {{app: wd}}}}
    spec:
      containers:
        - name: wd
          image: registry.example.com/webhook-demo:0.0.8
"#
    )
}

const POLICY: &str = r#"apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata: {name: web, namespace: NS}
spec: {image: registry.example.com/web}
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata: {name: web, namespace: NS}
spec:
  imageRepositoryRef: {name: web}
  policy: {semver: {range: 1.4.x}}
"#;

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  \
    template:\n    spec:\n      containers:\n        - name: web\n          \
    image: registry.example.com/web:1.4.0 # {\"$imagepolicy\": \"NS:web\"}\r\n";

fn run_import(ground: &Ground, args: &[&str]) -> anyhow::Result<(Vec<ImageWatch>, String)> {
    let output = Command::new(binary())
        .arg("import")
        .args(args)
        .env("KUBECONFIG", &ground.kubeconfig)
        .output()?;
    let stdout = String::from_utf8(output.stdout)?;
    let stderr = String::from_utf8(output.stderr)?;
    anyhow::ensure!(output.status.success(), "import failed: {stderr}");
    let watches: Vec<ImageWatch> = serde_saphyr::from_multiple(&stdout)?;
    Ok((watches, format!("{stdout}\n{stderr}")))
}

#[tokio::test]
async fn import_reads_the_cluster_and_a_directory() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground.install_crds()?;
    let ns = TestNamespace::create(ground, "import").await?;
    let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&workloads(&ns.name)))?;
    anyhow::ensure!(ok, "applying the workloads: {out}");

    // From the cluster: only this namespace's watches are looked at.
    let (watches, output) = run_import(ground, &["--from-cluster"])?;
    let ours: Vec<&ImageWatch> = watches
        .iter()
        .filter(|w| w.metadata.namespace.as_deref() == Some(ns.name.as_str()))
        .collect();
    let find = |name: &str| {
        ours.iter()
            .find(|w| w.metadata.name.as_deref() == Some(name))
            .copied()
            .ok_or_else(|| anyhow::anyhow!("no watch {name} in:\n{output}"))
    };
    let podinfo = find("podinfo-podinfod")?;
    assert_eq!(podinfo.spec.image, "registry.example.com/podinfo");
    assert_eq!(
        podinfo
            .spec
            .tags
            .as_ref()
            .and_then(|t| t.pattern.as_deref()),
        Some("semver:~3.1")
    );
    assert_eq!(
        podinfo
            .spec
            .target
            .workload
            .as_ref()
            .map(|t| t.path.as_str()),
        Some("")
    );
    let wd = find("wd-wd")?;
    assert_eq!(
        wd.spec.tags.as_ref().and_then(|t| t.pattern.as_deref()),
        Some("semver:>=0.0.8 <1.0.0")
    );
    assert!(
        output.contains("target.workload.path is the repository root"),
        "{output}"
    );

    // From a directory, with markers rewritten (CRLF kept).
    let dir = tempfile::tempdir()?;
    std::fs::create_dir_all(dir.path().join("flux"))?;
    std::fs::create_dir_all(dir.path().join("apps/web"))?;
    std::fs::write(
        dir.path().join("flux/web.yaml"),
        POLICY.replace("NS", &ns.name),
    )?;
    let deployment = dir.path().join("apps/web/deployment.yaml");
    std::fs::write(&deployment, DEPLOYMENT.replace("NS", &ns.name))?;
    let dir_arg = dir.path().to_string_lossy().into_owned();
    let (watches, output) = run_import(ground, &[&dir_arg, "--rewrite-markers"])?;
    assert_eq!(watches.len(), 1, "{output}");
    let web = &watches[0];
    assert_eq!(web.metadata.name.as_deref(), Some("web"));
    assert_eq!(
        web.spec.target.workload.as_ref().map(|t| t.path.as_str()),
        Some("apps/web")
    );
    let rewritten = std::fs::read_to_string(&deployment)?;
    assert!(
        rewritten.ends_with(&format!(
            "image: registry.example.com/web:1.4.0 # {{\"$imagewatch\": \"{}:web\"}}\r\n",
            ns.name
        )),
        "{rewritten}"
    );

    // The apiserver accepts what was generated (schema and CEL rules).
    let mut all: Vec<ImageWatch> = ours.into_iter().cloned().collect();
    all.push(web.clone());
    for watch in &mut all {
        watch.metadata.namespace = Some(ns.name.clone());
        let yaml = serde_saphyr::to_string(watch)?;
        let (ok, out) =
            ground.kubectl_try(&["apply", "--dry-run=server", "-f", "-"], Some(&yaml))?;
        assert!(ok, "refused:\n{yaml}\n{out}");
    }
    Ok(())
}
