//! The Argo CD health checks in `charts/imagewatch/argocd/`, run by the real Lua 5.1
//! interpreter (Argo CD runs them in gopher-lua, a Lua 5.1) against fixture objects covering
//! every branch; the shipped argocd-cm patch carries exactly those scripts and applies to a
//! real ConfigMap with `kubectl patch`.

use std::{collections::BTreeMap, path::PathBuf, process::Command};

use anyhow::{Context as _, ensure};
use imagewatch_e2e::{Ground, TestNamespace, ground::repo_root};
use serde_json::Value;

fn argocd_dir() -> PathBuf {
    repo_root().join("charts/imagewatch/argocd")
}

/// Runs `script` on every case of `fixtures`; returns name → (status, message).
fn run(script: &PathBuf, fixtures: &str) -> anyhow::Result<BTreeMap<String, (String, String)>> {
    let testdata = argocd_dir().join("testdata");
    let out = Command::new("lua5.1")
        .arg(testdata.join("harness.lua"))
        .arg(script)
        .arg(testdata.join(fixtures))
        .output()
        .context("running lua5.1 (apt-get install lua5.1; e2e/scripts/deps.sh does)")?;
    ensure!(
        out.status.success(),
        "lua5.1 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut results = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut parts = line.splitn(3, '|');
        let (Some(name), Some(status), Some(message)) = (parts.next(), parts.next(), parts.next())
        else {
            anyhow::bail!("unexpected harness output {line:?}");
        };
        results.insert(name.to_string(), (status.to_string(), message.to_string()));
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
    ("degraded", "Degraded", "401 Bad credentials"),
    ("no-ready", "Progressing", "Ready condition"),
];

#[test]
fn imagewatch_health_covers_every_branch() -> anyhow::Result<()> {
    let results = run(
        &argocd_dir().join("imagewatch.dev_ImageWatch.lua"),
        "imagewatch_cases.lua",
    )?;
    check(&results, IMAGEWATCH_CASES);
    Ok(())
}

#[test]
fn promotionpolicy_health_covers_every_branch() -> anyhow::Result<()> {
    let results = run(
        &argocd_dir().join("imagewatch.dev_PromotionPolicy.lua"),
        "promotionpolicy_cases.lua",
    )?;
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
    let mut fixtures = String::from("return {\n");
    for (reason, status, _) in &cases {
        fixtures.push_str(&format!(
            "  {{ name = \"{reason}\", obj = {{ metadata = {{ generation = 4 }}, status = {{ observedGeneration = 4, conditions = {{ {{ type = \"Ready\", status = \"{status}\", reason = \"{reason}\", message = \"m-{reason}\" }} }} }} }} }},\n"
        ));
    }
    fixtures.push_str("}\n");
    let path = tmp.path().join("reasons.lua");
    std::fs::write(&path, fixtures)?;
    let out = Command::new("lua5.1")
        .arg(argocd_dir().join("testdata/harness.lua"))
        .arg(argocd_dir().join("imagewatch.dev_ImageWatch.lua"))
        .arg(&path)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    for (reason, _, health) in &cases {
        assert!(
            stdout.contains(&format!("{reason}|{health}|m-{reason}\n")),
            "{reason}: expected {health}, got:\n{stdout}"
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
