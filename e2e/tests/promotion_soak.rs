//! `gates.soakSince: FirstApplied` under busy CI, at ground speed: staging gets a new build
//! every 5 s and the soak is 15 s. Two policies read the same staging overlay: with
//! `FirstApplied`, production is proposed the newest staging state first applied at least
//! 15 s before, and keeps moving while the builds go on; with `Running` (the default), no
//! staging state ever runs 15 s, so nothing is promoted until the builds stop. Every
//! promotion commit is checked against the staging commit that first applied its tag.

use std::time::Duration;

use imagewatch_crd::{PromotionPolicy, conditions};
use imagewatch_e2e::{
    argocd::source_file,
    ground::{GitServer, random_suffix},
    setup::{Scenario, TIMEOUT},
    wait_until,
};
use kube::Api;

const STG_FILE: &str = "overlays/staging/.argocd-source-my-api-stg.yaml";
const FIRST_FILE: &str = "overlays/production/.argocd-source-my-api-prd.yaml";
const RUNNING_FILE: &str = "overlays/production-running/.argocd-source-my-api-prd.yaml";
const SOAK_SECS: i64 = 15;
const BUILDS: usize = 8;
const BUILD_EVERY: Duration = Duration::from_secs(5);

fn policy_yaml(ns: &str, name: &str, url: &str, to: &str, since: &str) -> String {
    format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata: {{name: {name}, namespace: {ns}}}
spec:
  from: {{path: overlays/staging}}
  to:
    git: {{url: "{url}", branch: main, secretRef: {{name: git-creds}}}}
    path: {to}
  gates: {{soak: {SOAK_SECS}s, soakSince: {since}}}
  mode: Commit
  interval: 10s
"#
    )
}

/// `(commit time, tag)` of every commit on main that changed `file`, oldest first.
fn changes(git: &GitServer, repo: &str, file: &str) -> anyhow::Result<Vec<(i64, String)>> {
    let log = git.git(
        repo,
        &["log", "--reverse", "--format=%H %ct", "main", "--", file],
    )?;
    let mut out = Vec::new();
    for line in log.lines() {
        let (commit, time) = line.split_once(' ').unwrap_or_default();
        let text = git.git(repo, &["show", &format!("{commit}:{file}")])?;
        let tag = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("- ").and_then(|r| r.rsplit_once(':')))
            .map(|(_, tag)| tag.to_string())
            .unwrap_or_default();
        out.push((time.parse()?, tag));
    }
    Ok(out)
}

#[tokio::test]
async fn first_applied_soak_keeps_promoting_under_builds_faster_than_the_soak() -> anyhow::Result<()>
{
    let s = Scenario::start("promo-soak", &[]).await?;
    let git = s.ground.git()?;
    let image = format!("registry.example.com/soak-{}/my-api", random_suffix());
    let seed = tempfile::tempdir()?;
    for (file, tag) in [
        (STG_FILE, "b0"),
        (FIRST_FILE, "initial"),
        (RUNNING_FILE, "initial"),
    ] {
        let path = seed.path().join(file);
        std::fs::create_dir_all(path.parent().expect("a directory"))?;
        std::fs::write(&path, source_file(&[format!("{image}:{tag}")]))?;
    }
    let repo = format!("promo-soak-{}", s.ns.name);
    let url = git.new_repo(&repo, seed.path())?;
    let ns = s.ns.name.clone();
    s.apply(&policy_yaml(
        &ns,
        "first",
        &url,
        "overlays/production",
        "FirstApplied",
    ))?;
    s.apply(&policy_yaml(
        &ns,
        "running",
        &url,
        "overlays/production-running",
        "Running",
    ))?;

    // CI: a new staging build every 5 s (the workload's own pace, not a wait).
    let mut ticks = tokio::time::interval(BUILD_EVERY);
    ticks.tick().await;
    for build in 1..=BUILDS {
        ticks.tick().await;
        git.commit_files(
            &repo,
            "main",
            &[(STG_FILE, Some(&source_file(&[format!("{image}:b{build}")])))],
            &format!("ci: staging build b{build}"),
        )?;
    }
    let first_during = changes(&git, &repo, FIRST_FILE)?;
    let running_during = changes(&git, &repo, RUNNING_FILE)?;

    // FirstApplied kept moving while staging never held still for the soak.
    let promoted: Vec<&str> = first_during[1..].iter().map(|(_, t)| t.as_str()).collect();
    assert!(
        promoted.len() >= 2,
        "FirstApplied promoted {promoted:?} during {BUILDS} builds"
    );
    // Running: nothing ran 15 s in staging, so nothing was promoted.
    assert_eq!(
        running_during.len(),
        1,
        "Running promoted during the builds: {running_during:?}"
    );

    // After the builds, both reach the last build once it has soaked.
    let last = format!("b{BUILDS}");
    for file in [FIRST_FILE, RUNNING_FILE] {
        wait_until(&format!("{file} at {last}"), TIMEOUT, || async {
            let tag = changes(&git, &repo, file)?.last().map(|(_, t)| t.clone());
            Ok((tag.as_deref() == Some(last.as_str())).then_some(()))
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", s.operator.log_tail(60)))?;
    }

    // Every promotion came at least the soak after staging first applied its tag (commit
    // times are whole seconds: one second of slack).
    let staging = changes(&git, &repo, STG_FILE)?;
    for file in [FIRST_FILE, RUNNING_FILE] {
        for (at, tag) in &changes(&git, &repo, file)?[1..] {
            let (applied, _) = staging
                .iter()
                .find(|(_, t)| t == tag)
                .unwrap_or_else(|| panic!("{file}: {tag} was never in staging"));
            assert!(
                at - applied >= SOAK_SECS - 1,
                "{file}: {tag} promoted {} s after staging applied it",
                at - applied
            );
        }
    }
    let api: Api<PromotionPolicy> = Api::namespaced(s.admin.clone(), &ns);
    // Ready with its last promotion (Committed until something else happens).
    let p = api.get("first").await?;
    let ready = p
        .status
        .as_ref()
        .and_then(|st| st.conditions.iter().find(|c| c.type_ == conditions::READY))
        .map(|c| (c.status.clone(), c.reason.clone()));
    assert!(
        matches!(&ready, Some((status, reason)) if status == "True" && (reason == "Committed" || reason == "UpToDate")),
        "{ready:?}"
    );
    Ok(())
}
