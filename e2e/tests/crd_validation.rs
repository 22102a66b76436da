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
    step_bad_objects_are_refused_naming_what_is_wrong(ground, &ns)?;
    step_a_good_object_reads_back_as_written(ground, &ns)?;
    step_the_short_name_category_and_columns_work(ground, &ns)?;
    step_kubectl_explain_helps_on_nested_fields(ground)
}

/// The bad objects: `(what is wrong, the object, what the apiserver's message must name)`.
fn bad_objects(ns: &TestNamespace) -> Vec<(&'static str, String, &'static str)> {
    let cases: Vec<(&'static str, String, &'static str)> = vec![
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
            "platform without an architecture",
            watch_yaml(
                &ns.name,
                "platforms",
                "  tags: {platforms: [linux/amd64, arm64]}",
                WORKLOAD,
            ),
            "tags.platforms: each entry must be os/arch or os/arch/variant",
        ),
        (
            "window schedule of the wrong shape",
            watch_yaml(
                &ns.name,
                "window-shape",
                "  windows: [{schedule: \"@daily\", duration: 1h}]",
                WORKLOAD,
            ),
            "schedule must be a cron expression of 5 fields",
        ),
        (
            "window without a duration above zero",
            watch_yaml(
                &ns.name,
                "window-duration",
                "  windows: [{schedule: \"0 9 * * 1-5\", duration: 0s}]",
                WORKLOAD,
            ),
            "duration must be a duration such as 8h",
        ),
        (
            "unknown window kind",
            watch_yaml(
                &ns.name,
                "window-kind",
                "  windows: [{kind: Sometimes, schedule: \"0 9 * * *\", duration: 1h}]",
                WORKLOAD,
            ),
            "spec.windows[0].kind",
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
        // Every path field refuses `..` and absolute paths the same way.
        (
            "kustomize path with ..",
            watch_yaml(
                &ns.name,
                "kdots",
                "",
                "    kustomize: {path: apps/../../etc}",
            ),
            "path must be relative to the repository root and must not contain '..'",
        ),
        (
            "absolute helm values file",
            watch_yaml(
                &ns.name,
                "habs",
                "",
                "    helm: {file: /etc/values.yaml, tag: image.tag}",
            ),
            "file must be relative to the repository root and must not contain '..'",
        ),
        (
            "argocd source path with ..",
            watch_yaml(
                &ns.name,
                "adots",
                "",
                "    argocdSource: {path: \"..\", application: app}",
            ),
            "path must be relative to the repository root and must not contain '..'",
        ),
        (
            "promotion from.path with ..",
            format!(
                r#"apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata: {{name: pdots, namespace: {ns}}}
spec:
  from: {{path: apps/../../secrets}}
  to:
    git: {{url: https://git.example.com/org/manifests.git}}
    path: apps/prod
"#,
                ns = ns.name
            ),
            "path must be relative to the repository root and must not contain '..'",
        ),
        (
            "commit status without a provider",
            watch_yaml(
                &ns.name,
                "nprov",
                "  notify: [{name: s, type: CommitStatus, secretRef: {name: t}}]",
                WORKLOAD,
            ),
            "provider (github, gitlab or gitea) is required for CommitStatus and PullRequestComment",
        ),
        (
            "two destinations of one name",
            watch_yaml(
                &ns.name,
                "ndup",
                "  notify: [{name: s, type: Slack, secretRef: {name: a}}, {name: s, type: Teams, secretRef: {name: b}}]",
                WORKLOAD,
            ),
            "notify names must be unique",
        ),
        (
            "failingAfter not a duration",
            watch_yaml(
                &ns.name,
                "ndur",
                "  notify: [{name: s, type: Slack, secretRef: {name: a}, failingAfter: soon}]",
                WORKLOAD,
            ),
            "failingAfter must be a duration such as 10m or 1h30m",
        ),
        (
            "an unknown event",
            watch_yaml(
                &ns.name,
                "nevt",
                "  notify: [{name: s, type: Slack, secretRef: {name: a}, events: [Deployed]}]",
                WORKLOAD,
            ),
            "Unsupported value: \"Deployed\"",
        ),
    ];
    cases
}

/// Each bad object is refused at `kubectl apply` with a message naming what is wrong.
fn step_bad_objects_are_refused_naming_what_is_wrong(
    ground: &Ground,
    ns: &TestNamespace,
) -> anyhow::Result<()> {
    let cases = bad_objects(ns);
    for (what, yaml, expected) in cases {
        let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&yaml))?;
        assert!(!ok, "{what}: was accepted:\n{yaml}");
        assert!(
            out.contains(expected),
            "{what}: message {out:?} does not mention {expected:?}"
        );
    }
    Ok(())
}

/// A good object is accepted and reads back exactly as written: no defaults added.
fn step_a_good_object_reads_back_as_written(
    ground: &Ground,
    ns: &TestNamespace,
) -> anyhow::Result<()> {
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
    Ok(())
}

/// The short name, category and printer columns work.
fn step_the_short_name_category_and_columns_work(
    ground: &Ground,
    ns: &TestNamespace,
) -> anyhow::Result<()> {
    let table = ground.kubectl(&["get", "iw", "-n", &ns.name])?;
    for column in [
        "NAME", "IMAGE", "PATTERN", "LATEST", "APPLIED", "READY", "AGE",
    ] {
        assert!(table.contains(column), "no column {column} in:\n{table}");
    }
    kubectl_forms(ground, &ns.name)?;
    Ok(())
}

/// `kubectl explain` helps on nested fields.
fn step_kubectl_explain_helps_on_nested_fields(ground: &Ground) -> anyhow::Result<()> {
    let explain = ground.kubectl(&["explain", "imagewatch.spec.tags"])?;
    assert!(
        explain.contains("pattern") && explain.contains("regex:"),
        "{explain}"
    );
    let explain = ground.kubectl(&["explain", "promotionpolicy.spec.gates"])?;
    assert!(explain.contains("imageExists"), "{explain}");
    Ok(())
}

/// Every form a kubectl user types works on the singular, plural and short names, and the
/// category lists both kinds. A fresh discovery cache, so the forms are judged on the CRDs as
/// installed now and not on what an earlier run cached.
fn kubectl_forms(ground: &Ground, ns: &str) -> anyhow::Result<()> {
    let cache = tempfile::tempdir()?;
    let cache_dir = format!("--cache-dir={}", cache.path().display());
    let run = |args: &[&str]| -> anyhow::Result<String> {
        let mut all = vec![cache_dir.as_str(), "-n", ns];
        all.extend_from_slice(args);
        let (ok, out) = ground.kubectl_try(&all, None)?;
        anyhow::ensure!(ok, "kubectl {args:?} failed: {out}");
        Ok(out)
    };
    let policy = format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata: {{name: good-policy, namespace: {ns}}}
spec:
  from: {{watchSelector: {{matchLabels: {{app: my-api}}}}}}
  to:
    git: {{url: "https://git.example.com/org/manifests.git", branch: main}}
    path: overlays/production
  mode: Commit
"#
    );
    let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&policy))?;
    assert!(ok, "policy refused: {out}");
    // A soak counted from the first application reads from.path's history: a watchSelector
    // source is refused at apply, naming what to set.
    let first_applied = policy.replace("good-policy", "soak-first-applied").replace(
        "  mode: Commit\n",
        "  mode: Commit\n  gates: {soak: 1h, soakSince: FirstApplied}\n",
    );
    let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&first_applied))?;
    assert!(!ok, "accepted: {first_applied}");
    assert!(
        out.contains("gates.soakSince FirstApplied reads the Git history of from.path"),
        "{out}"
    );

    for name in ["imagewatch", "imagewatches", "iw"] {
        let one = run(&["get", name, "good", "-o", "name"])?;
        assert_eq!(
            one.trim(),
            "imagewatch.imagewatch.dev/good",
            "get {name} good"
        );
        let listed = run(&["get", name, "-o", "name"])?;
        assert_eq!(
            listed.trim(),
            "imagewatch.imagewatch.dev/good",
            "get {name}"
        );
        let described = run(&["describe", name, "good"])?;
        assert!(
            described.contains("Name:")
                && described.contains("good")
                && described.contains("Kind:         ImageWatch"),
            "describe {name} good:\n{described}"
        );
    }
    for name in ["promotionpolicy", "promotionpolicies", "pp"] {
        let one = run(&["get", name, "good-policy", "-o", "name"])?;
        assert_eq!(
            one.trim(),
            "promotionpolicy.imagewatch.dev/good-policy",
            "get {name}"
        );
        run(&["describe", name, "good-policy"])?;
    }
    // The category lists both kinds.
    let both = run(&["get", imagewatch_crd::CATEGORY, "-o", "name"])?;
    assert!(
        both.contains("imagewatch.imagewatch.dev/good")
            && both.contains("promotionpolicy.imagewatch.dev/good-policy"),
        "get {}:\n{both}",
        imagewatch_crd::CATEGORY
    );
    // Delete by the singular name, then nothing is left to list.
    run(&["delete", "imagewatch", "good", "--wait=true"])?;
    run(&["delete", "promotionpolicy", "good-policy", "--wait=true"])?;
    let left = run(&["get", "imagewatch", "-o", "name"])?;
    assert!(left.trim().is_empty(), "still listed after delete: {left}");
    Ok(())
}
