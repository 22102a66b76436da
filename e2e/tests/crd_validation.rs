//! The CRDs refuse bad objects at `kubectl apply` with a clear message, accept good ones
//! unchanged (no server-side defaults that Argo CD would see as drift), and explain themselves.

use imagewatch_e2e::{Ground, TestNamespace};

fn watch_yaml(ns: &str, name: &str, spec_extra: &str, target: &str) -> String {
    format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata:
  name: {name}
  namespace: {ns}
spec:
  image: registry.example.com/my-api
  git:
    url: https://git.example.com/org/manifests.git
{spec_extra}
  target:
{target}
"#
    )
}

const WORKLOAD: &str = "    workload: {path: apps/x, kind: Deployment, name: x, container: x}";

#[tokio::test]
async fn bad_objects_are_refused_with_a_clear_message() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground.install_crds()?;
    let ns = TestNamespace::create(ground, "crdval").await?;
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "two targets",
            watch_yaml(
                &ns.name,
                "two",
                "",
                &format!("{WORKLOAD}\n    helm: {{file: v.yaml, tag: image.tag}}"),
            ),
            "exactly one of target.workload",
        ),
        (
            "no target",
            watch_yaml(&ns.name, "none", "", "    {}"),
            "exactly one of target.workload",
        ),
        (
            "unknown pattern prefix",
            watch_yaml(
                &ns.name,
                "prefix",
                "  tags: {pattern: \"foo:bar\"}",
                WORKLOAD,
            ),
            "pattern prefix must be glob:, regex: or semver:",
        ),
        (
            "interval too short",
            watch_yaml(&ns.name, "fast", "  interval: 1s", WORKLOAD),
            "interval must be between 10s and 24h",
        ),
        (
            "interval not a duration",
            watch_yaml(&ns.name, "words", "  interval: often", WORKLOAD),
            "spec.interval",
        ),
        (
            "image with a tag",
            watch_yaml(&ns.name, "tagged", "", WORKLOAD).replace("my-api\n", "my-api:v1\n"),
            "image must be a repository without tag or digest",
        ),
        (
            "pick Lowest under Semver",
            watch_yaml(
                &ns.name,
                "lowest",
                "  tags: {order: Semver, pick: Lowest}",
                WORKLOAD,
            ),
            "tags.pick: Lowest applies only to order Alphabetical or Numerical",
        ),
        (
            "unknown order",
            watch_yaml(&ns.name, "order", "  tags: {order: Random}", WORKLOAD),
            "spec.tags.order",
        ),
        (
            "absolute workload path",
            watch_yaml(
                &ns.name,
                "abs",
                "",
                "    workload: {path: /etc, kind: Deployment, name: x, container: x}",
            ),
            "path must be relative",
        ),
    ];
    for (what, yaml, expected) in cases {
        let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&yaml))?;
        assert!(!ok, "{what}: was accepted:\n{yaml}");
        assert!(
            out.contains(expected),
            "{what}: message {out:?} does not mention {expected:?}"
        );
    }

    // A good object is accepted and reads back exactly as written: no defaults added.
    let good = watch_yaml(
        &ns.name,
        "good",
        "  tags: {pattern: \"canary-*\", order: Numerical, pick: Lowest}\n  interval: 30s",
        WORKLOAD,
    );
    let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&good))?;
    assert!(ok, "good object refused: {out}");
    let back = ground.kubectl(&["get", "imagewatches", "good", "-n", &ns.name, "-o", "json"])?;
    let back: serde_json::Value = serde_json::from_str(&back)?;
    let sent: serde_json::Value = serde_saphyr::from_str(&good)?;
    assert_eq!(back["spec"], sent["spec"], "the apiserver changed the spec");

    // The short name, category and printer columns work.
    let table = ground.kubectl(&["get", "iw", "-n", &ns.name])?;
    for column in [
        "NAME", "IMAGE", "PATTERN", "LATEST", "APPLIED", "READY", "AGE",
    ] {
        assert!(table.contains(column), "no column {column} in:\n{table}");
    }
    let cat = ground.kubectl(&["get", "imagewatch", "-n", &ns.name, "-o", "name"])?;
    assert!(cat.contains("imagewatch.imagewatch.dev/good"), "{cat}");

    // `kubectl explain` helps on nested fields.
    let explain = ground.kubectl(&["explain", "imagewatch.spec.tags"])?;
    assert!(
        explain.contains("pattern") && explain.contains("regex:"),
        "{explain}"
    );
    let explain = ground.kubectl(&["explain", "promotionpolicy.spec.gates"])?;
    assert!(explain.contains("imageExists"), "{explain}");
    Ok(())
}
