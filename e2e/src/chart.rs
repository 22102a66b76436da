//! The chart rendered with the real helm CLI (`helm template`), for the tests that hold its
//! output to what the docs say.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, ensure};
use serde_json::Value;

use crate::Ground;
use crate::ground::repo_root;

/// `charts/imagewatch`.
pub fn chart_dir() -> PathBuf {
    repo_root().join("charts/imagewatch")
}

/// Runs helm; returns (success, stdout, stderr).
pub fn helm(args: &[&str]) -> anyhow::Result<(bool, String, String)> {
    let ground = Ground::get()?;
    let out = Command::new(ground.helm()?)
        .args(args)
        .output()
        .context("running helm")?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// `helm template` of the chart; `values` are extra `-f` files, `set` are `--set` values.
pub fn render_with(
    release: &str,
    namespace: &str,
    values: &[&str],
    set: &[&str],
) -> anyhow::Result<String> {
    let chart = chart_dir().display().to_string();
    let mut args = vec!["template", release, &chart, "--namespace", namespace];
    for v in values {
        args.extend(["-f", v]);
    }
    for s in set {
        args.extend(["--set", s]);
    }
    let (ok, out, err) = helm(&args)?;
    ensure!(ok, "helm template {values:?} {set:?} failed:\n{err}");
    Ok(out)
}

/// `helm template` of the chart; `values` are extra `-f` files.
pub fn render(release: &str, namespace: &str, values: &[&str]) -> anyhow::Result<String> {
    render_with(release, namespace, values, &[])
}

/// The rendered documents, as JSON values.
pub fn documents(rendered: &str) -> anyhow::Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(rendered)
        .map_err(|e| anyhow::anyhow!("rendered chart is not YAML: {e}"))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// The documents of one kind.
pub fn kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}
