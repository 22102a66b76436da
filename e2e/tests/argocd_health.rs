//! The Argo CD health checks in `charts/imagewatch/argocd/`, run by Argo CD itself: the
//! `argocd` CLI of the ground's Argo CD v3.5.1 build (`e2e/scripts/argocd.sh cli`) evaluates
//! each fixture object with `argocd admin settings resource-overrides health`, reading the
//! scripts from an argocd-cm made of the shipped argocd-cm patch. The fixtures cover every
//! branch; the patch carries exactly the `.lua` scripts and applies to a real ConfigMap with
//! `kubectl patch`.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail, ensure};
use imagewatch_e2e::{Ground, TestNamespace, ground::repo_root};
use serde_json::{Value, json};

fn argocd_dir() -> PathBuf {
    repo_root().join("charts/imagewatch/argocd")
}

/// Runs the `argocd` CLI of the ground's build (`e2e/scripts/argocd.sh cli ARGS...`, which
/// builds it first when needed); its stdout. Fails, naming what is missing, when it cannot run.
fn argocd_cli(args: &[&str]) -> anyhow::Result<String> {
    let script = repo_root().join("e2e/scripts/argocd.sh");
    let out = Command::new(&script)
        .arg("cli")
        .args(args)
        .output()
        .with_context(|| {
            format!(
                "cannot run {} (bash and the script are needed)",
                script.display()
            )
        })?;
    ensure!(
        out.status.success(),
        "the Argo CD CLI could not be run: `e2e/scripts/argocd.sh cli {}` failed ({}); \
         it needs the Argo CD v3.5.1 build (`e2e/scripts/argocd.sh build`: Go and the source \
         archive in ../shared/vendor):\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).context("the argocd CLI printed non-UTF-8")
}

/// Writes the argocd-cm ConfigMap Argo CD reads: the shipped patch's data, unchanged, in a
/// full ConfigMap named argocd-cm.
fn write_argocd_cm(dir: &Path) -> anyhow::Result<PathBuf> {
    let patch = patch()?;
    let data = patch["data"]
        .as_object()
        .context("argocd-cm-patch.yaml has no data")?;
    let cm = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "argocd-cm",
            "namespace": "argocd",
            "labels": {
                "app.kubernetes.io/name": "argocd-cm",
                "app.kubernetes.io/part-of": "argocd",
            },
        },
        "data": data,
    });
    let path = dir.join("argocd-cm.yaml");
    // JSON is YAML.
    std::fs::write(&path, serde_json::to_string_pretty(&cm)?)?;
    Ok(path)
}

/// Argo CD's health of the one object in `object` under `argocd_cm`: (status, message).
fn health(argocd_cm: &Path, object: &Path) -> anyhow::Result<(String, String)> {
    let (Some(object_arg), Some(cm_arg)) = (object.to_str(), argocd_cm.to_str()) else {
        bail!(
            "non-UTF-8 path {} or {}",
            object.display(),
            argocd_cm.display()
        );
    };
    let out = argocd_cli(&[
        "admin",
        "settings",
        "resource-overrides",
        "health",
        object_arg,
        "--argocd-cm-path",
        cm_arg,
    ])?;
    // STATUS: <status>\nMESSAGE: <message>\n, or a line saying no script applies.
    let Some(rest) = out.strip_prefix("STATUS: ") else {
        bail!("{}: Argo CD printed no health: {out:?}", object.display());
    };
    let Some((status, message)) = rest.split_once("\nMESSAGE: ") else {
        bail!("{}: Argo CD printed no message: {out:?}", object.display());
    };
    let message = message.strip_suffix('\n').unwrap_or(message);
    Ok((status.to_string(), message.to_string()))
}

/// Runs every fixture of `testdata/<dir>` (one `kind` object per file, named after its case)
/// through Argo CD; returns case → (status, message).
fn run(dir: &str, kind: &str) -> anyhow::Result<BTreeMap<String, (String, String)>> {
    let tmp = tempfile::tempdir()?;
    let argocd_cm = write_argocd_cm(tmp.path())?;
    let fixtures = argocd_dir().join("testdata").join(dir);
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&fixtures).with_context(|| format!("{}", fixtures.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            files.push(path);
        }
    }
    files.sort();
    ensure!(!files.is_empty(), "no fixtures in {}", fixtures.display());
    let mut results = BTreeMap::new();
    for file in files {
        let name = file
            .file_stem()
            .and_then(|s| s.to_str())
            .context("fixture name")?
            .to_string();
        let object: Value = serde_saphyr::from_str(&std::fs::read_to_string(&file)?)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        ensure!(object["kind"] == kind, "{}: not a {kind}", file.display());
        results.insert(name, health(&argocd_cm, &file)?);
    }
    Ok(results)
}

/// Checks every case: (name, status, text the message contains).
fn check(results: &BTreeMap<String, (String, String)>, expected: &[(&str, &str, &str)]) {
    assert_eq!(
        results.len(),
        expected.len(),
        "every fixture has an expectation: {results:?}"
    );
    for (name, status, message) in expected {
        let (got_status, got_message) = results
            .get(*name)
            .unwrap_or_else(|| panic!("no result for {name}: {results:?}"));
        assert_eq!(got_status, status, "{name}: {got_message}");
        assert!(
            got_message.contains(message),
            "{name}: message {got_message:?} lacks {message:?}"
        );
    }
    let statuses: std::collections::BTreeSet<&str> =
        results.values().map(|(s, _)| s.as_str()).collect();
    for status in ["Healthy", "Progressing", "Degraded", "Suspended"] {
        assert!(statuses.contains(status), "no fixture ends {status}");
    }
}

const IMAGEWATCH_CASES: &[(&str, &str, &str)] = &[
    ("no-status", "Progressing", "first reconcile"),
    ("stale-generation", "Progressing", "generation 3"),
    ("no-observed-generation", "Progressing", "generation 1"),
    ("condition-observed-generation", "Healthy", "UpToDate"),
    ("no-conditions", "Progressing", "Ready condition"),
    ("ready-unknown", "Progressing", "Ready condition"),
    (
        "up-to-date",
        "Healthy",
        "holds registry.example.com/my-api:canary-v1.2.4",
    ),
    ("updated", "Healthy", "canary-v1.2.3 -> canary-v1.2.4"),
    ("suspended", "Suspended", "nothing is written"),
    ("outside-window", "Suspended", "the next window opens at"),
    ("frozen", "Suspended", "cluster freeze: release 4.2"),
    (
        "waiting-for-group",
        "Progressing",
        "my-api-worker has no v1.4.0",
    ),
    ("progressing", "Progressing", "not reconciled yet"),
    ("registry-error", "Degraded", "503"),
    ("credentials-not-found", "Degraded", "regcred not found"),
    ("no-message", "Degraded", "GitError"),
    (
        "other-condition-first",
        "Degraded",
        "no Deployment my-api-canary",
    ),
];

const PROMOTIONPOLICY_CASES: &[(&str, &str, &str)] = &[
    ("no-status", "Progressing", "first reconcile"),
    ("suspended", "Suspended", "spec.suspend"),
    ("suspended-without-status", "Suspended", "spec.suspend"),
    ("not-suspended", "Healthy", "pull request #42 merged"),
    ("stale-generation", "Progressing", "generation 2"),
    ("ready", "Healthy", "pull request #42"),
    (
        "gates-failing",
        "Progressing",
        "soak: staging has run my-api:v1.4.0 for 12m",
    ),
    (
        "gates-failing-from-status",
        "Progressing",
        "application: my-api-stg is OutOfSync; soak",
    ),
    (
        "gated-while-ready",
        "Progressing",
        "approval: set imagewatch.dev/approve",
    ),
    (
        "nothing-to-promote",
        "Healthy",
        "already holds my-api:v1.4.0",
    ),
    ("suspended-reason", "Suspended", "would be proposed"),
    ("outside-window", "Suspended", "waits to be proposed"),
    ("degraded", "Degraded", "401 Bad credentials"),
    ("no-ready", "Progressing", "Ready condition"),
];

#[test]
fn the_health_checks_run_in_argocd_v3_5_1() -> anyhow::Result<()> {
    let version = argocd_cli(&["version", "--client", "--short"])?;
    assert!(
        version.trim() == "argocd: v3.5.1" || version.starts_with("argocd: v3.5.1+"),
        "{version:?}"
    );
    Ok(())
}

#[test]
fn imagewatch_health_covers_every_branch() -> anyhow::Result<()> {
    let results = run("imagewatch", "ImageWatch")?;
    check(&results, IMAGEWATCH_CASES);
    Ok(())
}

#[test]
fn promotionpolicy_health_covers_every_branch() -> anyhow::Result<()> {
    let results = run("promotionpolicy", "PromotionPolicy")?;
    check(&results, PROMOTIONPOLICY_CASES);
    Ok(())
}

/// Every reason the operator reports on an ImageWatch's Ready maps to the documented health.
#[test]
fn every_operator_reason_has_a_health() -> anyhow::Result<()> {
    use imagewatch_crd::conditions::reason;
    let cases: Vec<(&str, &str, &str)> = vec![
        (reason::UP_TO_DATE, "True", "Healthy"),
        (reason::UPDATED, "True", "Healthy"),
        (reason::SUSPENDED, "False", "Suspended"),
        (reason::OUTSIDE_WINDOW, "False", "Suspended"),
        (reason::FROZEN, "False", "Suspended"),
        (reason::WAITING_FOR_GROUP, "False", "Progressing"),
        (reason::PROGRESSING, "False", "Progressing"),
        (reason::NO_MATCHING_TAGS, "False", "Degraded"),
        (reason::INVALID_SPEC, "False", "Degraded"),
        (reason::CREDENTIALS_NOT_FOUND, "False", "Degraded"),
        (reason::REGISTRY_ERROR, "False", "Degraded"),
        (reason::TARGET_NOT_FOUND, "False", "Degraded"),
        (reason::GIT_ERROR, "False", "Degraded"),
        (reason::PINNED_TAG_NOT_FOUND, "False", "Degraded"),
    ];
    let tmp = tempfile::tempdir()?;
    let argocd_cm = write_argocd_cm(tmp.path())?;
    for (reason, status, health_status) in &cases {
        let object = json!({
            "apiVersion": "imagewatch.dev/v1alpha1",
            "kind": "ImageWatch",
            "metadata": {"name": "my-api", "namespace": "my-api", "generation": 4},
            "status": {
                "observedGeneration": 4,
                "conditions": [{
                    "type": "Ready",
                    "status": status,
                    "reason": reason,
                    "message": format!("m-{reason}"),
                }],
            },
        });
        let path = tmp.path().join(format!("{reason}.yaml"));
        std::fs::write(&path, serde_json::to_string_pretty(&object)?)?;
        let got = health(&argocd_cm, &path)?;
        assert_eq!(
            got,
            (health_status.to_string(), format!("{reason}: m-{reason}")),
            "{reason}"
        );
    }
    Ok(())
}

/// The argocd-cm patch as parsed YAML.
fn patch() -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(argocd_dir().join("argocd-cm-patch.yaml"))?;
    serde_saphyr::from_str(&text).map_err(|e| anyhow::anyhow!("argocd-cm-patch.yaml: {e}"))
}

#[test]
fn the_argocd_cm_patch_carries_the_tested_scripts() -> anyhow::Result<()> {
    let patch = patch()?;
    assert_eq!(patch["kind"], "ConfigMap");
    assert_eq!(patch["metadata"]["name"], "argocd-cm");
    let data = patch["data"].as_object().context("no data")?;
    assert_eq!(data.len(), 2, "{data:?}");
    for kind in ["ImageWatch", "PromotionPolicy"] {
        let key = format!("resource.customizations.health.imagewatch.dev_{kind}");
        let script =
            std::fs::read_to_string(argocd_dir().join(format!("imagewatch.dev_{kind}.lua")))?;
        assert_eq!(
            data.get(&key).and_then(Value::as_str),
            Some(script.as_str()),
            "{key} in argocd-cm-patch.yaml differs from imagewatch.dev_{kind}.lua"
        );
    }
    Ok(())
}

#[tokio::test]
async fn the_patch_applies_to_an_argocd_cm() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    let ns = TestNamespace::create(ground, "argocdcm").await?;
    ground.kubectl(&[
        "create",
        "configmap",
        "argocd-cm",
        "-n",
        &ns.name,
        "--from-literal=url=https://argocd.example.com",
    ])?;
    let file = argocd_dir().join("argocd-cm-patch.yaml");
    ground.kubectl(&[
        "patch",
        "configmap",
        "argocd-cm",
        "-n",
        &ns.name,
        "--patch-file",
        &file.display().to_string(),
    ])?;
    let back: Value = serde_json::from_str(&ground.kubectl(&[
        "get",
        "configmap",
        "argocd-cm",
        "-n",
        &ns.name,
        "-o",
        "json",
    ])?)?;
    assert_eq!(back["data"]["url"], "https://argocd.example.com", "kept");
    assert_eq!(
        back["data"]["resource.customizations.health.imagewatch.dev_ImageWatch"],
        patch()?["data"]["resource.customizations.health.imagewatch.dev_ImageWatch"]
    );
    Ok(())
}
