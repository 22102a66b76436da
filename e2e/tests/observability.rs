//! The dashboards and alerts the chart ships: the PrometheusRule passes the real promtool's
//! `check rules` and the unit tests in `tests/alerts/` (one or more per alert), the Grafana
//! dashboard renders as a sidecar ConfigMap with the panels people look at first, and every
//! metric the dashboard and the rules name is served by a running operator.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail, ensure};
use imagewatch_e2e::{
    Ground, Operator, TestNamespace,
    ground::{random_suffix, repo_root},
    wait_until,
};
use serde_json::Value;

const NAMESPACE: &str = "imagewatch";

fn chart_dir() -> PathBuf {
    repo_root().join("charts/imagewatch")
}

/// The promtool `e2e/scripts/promtool.sh` unpacks from Debian's package (here when absent).
fn promtool() -> anyhow::Result<PathBuf> {
    let out = Command::new(repo_root().join("e2e/scripts/promtool.sh"))
        .arg("path")
        .output()
        .context("running e2e/scripts/promtool.sh path")?;
    ensure!(
        out.status.success(),
        "building promtool failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = PathBuf::from(String::from_utf8(out.stdout)?.trim());
    ensure!(path.exists(), "promtool not at {}", path.display());
    Ok(path)
}

fn render(values: &str) -> anyhow::Result<Vec<Value>> {
    let ground = Ground::get()?;
    let tmp = tempfile::tempdir()?;
    let file = tmp.path().join("values.yaml");
    std::fs::write(&file, values)?;
    let chart = chart_dir().display().to_string();
    let file = file.display().to_string();
    let out = Command::new(ground.helm()?)
        .args([
            "template",
            "iw",
            &chart,
            "--namespace",
            NAMESPACE,
            "-f",
            &file,
        ])
        .output()
        .context("running helm")?;
    ensure!(
        out.status.success(),
        "helm template failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> = serde_saphyr::from_multiple(&String::from_utf8(out.stdout)?)
        .map_err(|e| anyhow::anyhow!("rendered chart is not YAML: {e}"))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

fn one<'a>(docs: &'a [Value], kind: &str) -> anyhow::Result<&'a Value> {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    ensure!(
        found.len() == 1,
        "expected one {kind}, found {}",
        found.len()
    );
    Ok(found[0])
}

/// The rules of the chart's PrometheusRule, as a promtool rules file (JSON is YAML).
fn rendered_rules() -> anyhow::Result<Value> {
    let docs = render("prometheusRule: {enabled: true}\n")?;
    Ok(one(&docs, "PrometheusRule")?["spec"].clone())
}

fn dashboard() -> anyhow::Result<Value> {
    let docs = render("grafanaDashboard: {enabled: true}\n")?;
    let map = one(&docs, "ConfigMap")?;
    ensure!(
        map["metadata"]["labels"]["grafana_dashboard"] == "1",
        "the dashboard ConfigMap lacks the sidecar label: {}",
        map["metadata"]
    );
    let text = map["data"]["imagewatch.json"]
        .as_str()
        .context("ConfigMap has no imagewatch.json")?;
    serde_json::from_str(text).context("the dashboard is not JSON")
}

fn run(tool: &Path, args: &[&str], dir: &Path) -> anyhow::Result<(bool, String)> {
    let out = Command::new(tool)
        .args(args)
        .current_dir(dir)
        .output()
        .with_context(|| format!("running {}", tool.display()))?;
    Ok((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

/// `imagewatch_…` names in `text` (PromQL or dashboard JSON).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(pos) = text[i..].find("imagewatch_") {
        let start = i + pos;
        let before_ok =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end = text[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(text.len(), |e| start + e);
        if before_ok {
            names.insert(text[start..end].to_string());
        }
        i = end;
    }
    names
}

#[test]
fn the_alert_rules_pass_promtool_and_each_alert_has_a_unit_test() -> anyhow::Result<()> {
    let promtool = promtool()?;
    let rules = rendered_rules()?;
    let tmp = tempfile::tempdir()?;
    std::fs::write(
        tmp.path().join("rules.json"),
        serde_json::to_string_pretty(&rules)?,
    )?;
    let tests = std::fs::read_to_string(repo_root().join("e2e/tests/alerts/alerts.test.yaml"))?;
    std::fs::write(tmp.path().join("alerts.test.yaml"), &tests)?;

    let (ok, out) = run(&promtool, &["check", "rules", "rules.json"], tmp.path())?;
    ensure!(ok, "promtool check rules failed:\n{out}");
    let (ok, out) = run(
        &promtool,
        &["test", "rules", "alerts.test.yaml"],
        tmp.path(),
    )?;
    ensure!(ok, "promtool test rules failed:\n{out}");

    // Every alert is named by at least one unit test that expects it to fire.
    let alerts: BTreeSet<String> = rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["alert"].as_str().map(str::to_string))
        .collect();
    ensure!(
        alerts.len() >= 5,
        "expected the five alerts, got {alerts:?}"
    );
    let tested: Value = serde_saphyr::from_str(&tests)
        .map_err(|e| anyhow::anyhow!("alerts.test.yaml is not YAML: {e}"))?;
    let firing: BTreeSet<String> = tested["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["alert_rule_test"].as_array().into_iter().flatten())
        .filter(|t| t["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()))
        .filter_map(|t| t["alertname"].as_str().map(str::to_string))
        .collect();
    let untested: Vec<&String> = alerts.difference(&firing).collect();
    ensure!(
        untested.is_empty(),
        "alerts without a unit test that fires them: {untested:?}"
    );

    // The tool really judges: a rule with a broken expression and a test expecting the
    // wrong alert both fail.
    std::fs::write(
        tmp.path().join("broken.yaml"),
        "groups: [{name: b, rules: [{alert: B, expr: 'sum(imagewatch_watches'}]}]\n",
    )?;
    let (ok, _) = run(&promtool, &["check", "rules", "broken.yaml"], tmp.path())?;
    ensure!(!ok, "promtool accepted a broken rule");
    std::fs::write(
        tmp.path().join("wrong.test.yaml"),
        tests.replacen(
            "summary: Git pushes of imagewatch keep failing.",
            "summary: wrong",
            1,
        ),
    )?;
    let (ok, _) = run(&promtool, &["test", "rules", "wrong.test.yaml"], tmp.path())?;
    ensure!(
        !ok,
        "promtool passed a unit test expecting the wrong annotation"
    );
    Ok(())
}

#[test]
fn the_dashboard_is_a_sidecar_configmap_with_the_first_panels() -> anyhow::Result<()> {
    let dashboard = dashboard()?;
    let panels = dashboard["panels"].as_array().context("no panels")?;
    let exprs: Vec<String> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str().map(str::to_string))
        .collect();
    // What people look at first, each by the metric behind it.
    for metric in [
        "imagewatch_push_to_commit_seconds_bucket",
        "imagewatch_push_stage_seconds_bucket",
        "imagewatch_watch_conditions",
        "imagewatch_commits_total",
        "imagewatch_git_pushes_total",
        "imagewatch_registry_requests_total",
        "imagewatch_registry_rate_limit_waits_total",
        "imagewatch_credential_refreshes_total",
        "imagewatch_shards_held",
    ] {
        ensure!(
            exprs.iter().any(|e| metric_names(e).contains(metric)),
            "no panel shows {metric}"
        );
    }
    // Panels use the dashboard's data source variable, so the sidecar's import works in any
    // Grafana.
    for panel in panels {
        ensure!(
            panel["datasource"]["uid"] == "${datasource}",
            "panel {} has a fixed data source",
            panel["title"]
        );
    }
    Ok(())
}

#[tokio::test]
async fn every_metric_the_dashboard_and_the_alerts_name_is_served() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground.install_crds()?;
    let mut named = metric_names(&dashboard()?.to_string());
    named.extend(metric_names(&rendered_rules()?.to_string()));
    ensure!(named.len() >= 10, "too few metric names found: {named:?}");

    // An operator that holds a shard, scans a real repository under a tight rate limit (so
    // requests wait) and reconciles a watch that cannot reach Git: every family the dashboard
    // and the alerts read then has a series.
    let ns = TestNamespace::create(ground, "observability").await?;
    let registry = ground.registry()?;
    let repo = format!("e2e/observability-{}", random_suffix());
    registry.push(&repo, "v1.0.0")?;
    let admin = ground.admin().await?;
    imagewatch_e2e::setup::create_secret(
        &admin,
        &ns.name,
        "regcred",
        "kubernetes.io/dockerconfigjson",
        &[(".dockerconfigjson", &registry.dockerconfigjson())],
    )
    .await?;
    let tmp = tempfile::tempdir()?;
    let registries = tmp.path().join("registries.yaml");
    std::fs::write(
        &registries,
        format!(
            "registries:\n  \"{}\": {{insecure: true, ratePerSecond: 1, burst: 1}}\n",
            registry.host
        ),
    )?;
    let registries = registries.display().to_string();
    let operator = Operator::start(
        ground,
        &format!("observability-{}", ns.name),
        &ground.kubeconfig,
        &[
            "--namespace",
            &ns.name,
            "--shards",
            "1",
            "--pod-namespace",
            &ns.name,
            "--registries-config",
            &registries,
        ],
    )?;
    let watch = format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: unreachable-git, namespace: {ns}}}
spec:
  image: {host}/{repo}
  credentials: {{secretRef: {{name: regcred}}}}
  interval: 10s
  git: {{url: "https://127.0.0.1:9/nothing-listens-here.git"}}
  target: {{workload: {{path: apps, kind: Deployment, name: app, container: app}}}}
"#,
        ns = ns.name,
        host = registry.host,
    );
    let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&watch))?;
    ensure!(ok, "kubectl apply failed: {out}");

    let has_series = |text: &str, family: &str| {
        text.lines()
            .any(|l| !l.starts_with('#') && l.starts_with(family))
    };
    let served = wait_until(
        "the operator's /metrics with the watch, shard and rate-limit series",
        std::time::Duration::from_secs(90),
        || async {
            let text = operator.metrics().await?;
            Ok([
                "imagewatch_watch_conditions{",
                "imagewatch_shard_owned{",
                "imagewatch_registry_requests_total{",
                "imagewatch_registry_rate_limit_waits_total{",
            ]
            .iter()
            .all(|f| has_series(&text, f))
            .then_some(text))
        },
    )
    .await
    .with_context(|| format!("operator log:\n{}", operator.log_tail(40)))?;
    let families: BTreeSet<(String, String)> = served
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    let has = |name: &str, kind: &str| families.contains(&(name.to_string(), kind.to_string()));
    let mut missing = Vec::new();
    for name in &named {
        let found = has(name, "gauge")
            || name
                .strip_suffix("_total")
                .is_some_and(|n| has(n, "counter"))
            || ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| name.strip_suffix(s).is_some_and(|n| has(n, "histogram")));
        if !found {
            missing.push(name.clone());
        }
    }
    if !missing.is_empty() {
        bail!(
            "named by the dashboard or the alerts but not served: {missing:?}\nserved: {families:?}"
        );
    }
    Ok(())
}
