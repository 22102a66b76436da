//! The security model's table "What the ServiceAccount may do" (charts/imagewatch/README.md,
//! between `<!-- rbac:begin -->` and `<!-- rbac:end -->`) is what the chart grants: for each
//! install mode the Roles and ClusterRoles `helm template` renders give exactly the table's
//! verbs, and on the real apiserver `kubectl auth can-i` as the ServiceAccount of the default
//! install answers yes to every verb of the table and no to the Secret reads it leaves out.
//!
//! Table rows: `| Install | Where | API group | Resources | Verbs | Why |`. Install is
//! `default`, `+ <value>` (what that value adds to the default) or `watchNamespaces` (the whole
//! of that mode); Where is `cluster`, `release namespace`, `Argo CD namespace` or `each watched
//! namespace`; groups, resources and verbs are backticked, `core` is the core group, and
//! `configmaps:NAME` is one named object. Rendered as release `imagewatch` in namespace
//! `imagewatch`, so the chart's full name is `imagewatch`.

use std::collections::{BTreeMap, BTreeSet};

use imagewatch_e2e::{
    Ground, TestNamespace,
    chart::{documents, kind, render_with},
    ground::{random_suffix, repo_root},
};
use serde_json::Value;

/// (where, API group, resource, verb).
type Grant = (String, String, String, String);

const RELEASE_NS: &str = "imagewatch";
const ARGOCD_NS: &str = "argocd";
const WATCHED_NS: &str = "team-a";

/// The modes a test renders, with the `--set` values of each.
const MODES: &[(&str, &[&str])] = &[
    ("default", &[]),
    ("+ rbac.gitFromArgocd", &["rbac.gitFromArgocd=true"]),
    ("+ shards", &["shards=4", "replicaCount=2"]),
    ("+ allowList.enabled", &["allowList.enabled=true"]),
    ("watchNamespaces", &["watchNamespaces={team-a}"]),
];

/// The table's grants by install mode.
fn table() -> anyhow::Result<BTreeMap<String, BTreeSet<Grant>>> {
    let readme = std::fs::read_to_string(repo_root().join("charts/imagewatch/README.md"))?;
    let begin = readme
        .find("<!-- rbac:begin -->")
        .ok_or_else(|| anyhow::anyhow!("no <!-- rbac:begin --> in the chart README"))?;
    let end = readme[begin..]
        .find("<!-- rbac:end -->")
        .ok_or_else(|| anyhow::anyhow!("no <!-- rbac:end -->"))?
        + begin;
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    let mut out: BTreeMap<String, BTreeSet<Grant>> = BTreeMap::new();
    for line in readme[begin..end].lines() {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if cells.len() < 5 || cells[0] == "Install" || cells[0].starts_with("---") {
            continue;
        }
        let grants = out
            .entry(cells[0].trim_matches('`').to_owned())
            .or_default();
        for group in ticked(cells[2]) {
            let group = if group == "core" {
                String::new()
            } else {
                group
            };
            for resource in ticked(cells[3]) {
                for verb in ticked(cells[4]) {
                    grants.insert((cells[1].to_owned(), group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    anyhow::ensure!(
        out.contains_key("default"),
        "the table has no `default` rows"
    );
    Ok(out)
}

/// The grants of the Roles and ClusterRoles of a render.
fn rendered(docs: &[Value]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for role in kind(docs, "ClusterRole")
        .into_iter()
        .chain(kind(docs, "Role"))
    {
        let place = match (
            role["kind"].as_str(),
            role["metadata"]["namespace"].as_str(),
        ) {
            (Some("ClusterRole"), _) => "cluster",
            (_, Some(RELEASE_NS)) => "release namespace",
            (_, Some(ARGOCD_NS)) => "Argo CD namespace",
            (_, Some(WATCHED_NS)) => "each watched namespace",
            (_, other) => panic!("a Role in an unexpected namespace {other:?}"),
        };
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        };
        for rule in role["rules"].as_array().into_iter().flatten() {
            let names = strings(&rule["resourceNames"]);
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    let resources: Vec<String> = if names.is_empty() {
                        vec![resource.clone()]
                    } else {
                        names.iter().map(|n| format!("{resource}:{n}")).collect()
                    };
                    for resource in resources {
                        for verb in strings(&rule["verbs"]) {
                            out.insert((place.to_owned(), group.clone(), resource.clone(), verb));
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn every_install_mode_grants_exactly_the_table() -> anyhow::Result<()> {
    let table = table()?;
    let default = table["default"].clone();
    for (mode, set) in MODES {
        let wanted: BTreeSet<Grant> = match mode.strip_prefix("+ ") {
            Some(_) => default
                .iter()
                .chain(table.get(*mode).into_iter().flatten())
                .cloned()
                .collect(),
            None => table
                .get(*mode)
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("the table has no rows for {mode}"))?,
        };
        let docs = documents(&render_with("imagewatch", RELEASE_NS, &[], set)?)?;
        let got = rendered(&docs);
        let missing: Vec<_> = wanted.difference(&got).collect();
        let extra: Vec<_> = got.difference(&wanted).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "install mode {mode}: in the table but not granted: {missing:?}; granted but not \
             in the table: {extra:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn the_default_install_can_do_what_the_table_says_on_the_apiserver() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground.install_crds()?;
    // `kubectl auth can-i` resolves Applications through the real Argo CD's CRD.
    imagewatch_e2e::argocd::ArgoCd::get(ground)?;
    let op = TestNamespace::create(ground, "rbac-op").await?;
    let other = TestNamespace::create(ground, "rbac-other").await?;
    let release = format!("rbac-{}", random_suffix());
    let fullname = format!("{release}-imagewatch");
    ground.install_chart_rbac(&release, &op.name)?;
    let who = format!("system:serviceaccount:{}:{fullname}", op.name);
    let can_i = |verb: &str, what: &str, place: &[&str]| -> anyhow::Result<bool> {
        let mut args = vec!["auth", "can-i", "--as", who.as_str(), verb, what];
        args.extend(place);
        let (_, out) = ground.kubectl_try(&args, None)?;
        Ok(out.trim_start().starts_with("yes"))
    };
    let result = (|| -> anyhow::Result<()> {
        for (place, group, resource, verb) in &table()?["default"] {
            let (resource, name) = match resource.split_once(':') {
                Some((r, n)) => (r, Some(n.replacen("imagewatch", &fullname, 1))),
                None => (resource.as_str(), None),
            };
            let (resource, subresource) = match resource.split_once('/') {
                Some((r, sub)) => (r, Some(format!("--subresource={sub}"))),
                None => (resource, None),
            };
            let mut what = if group.is_empty() {
                resource.to_owned()
            } else {
                format!("{resource}.{group}")
            };
            if let Some(name) = name {
                what = format!("{what}/{name}");
            }
            let ns = match place.as_str() {
                "cluster" => other.name.as_str(),
                "release namespace" => op.name.as_str(),
                other => anyhow::bail!("the default install has no {other} rows"),
            };
            let mut args = vec!["-n", ns];
            args.extend(subresource.as_deref());
            anyhow::ensure!(
                can_i(verb, &what, &args)?,
                "the table says the default install may {verb} {what} ({place})"
            );
        }
        // What the default install must not do: list or watch Secrets anywhere, write them
        // outside its own namespace, change an object's spec.
        for verb in ["list", "watch"] {
            anyhow::ensure!(
                !can_i(verb, "secrets", &["--all-namespaces"])?,
                "{verb} secrets"
            );
            anyhow::ensure!(
                !can_i(verb, "secrets", &["-n", &other.name])?,
                "{verb} secrets"
            );
        }
        anyhow::ensure!(!can_i("create", "secrets", &["-n", &other.name])?);
        anyhow::ensure!(!can_i(
            "update",
            "imagewatches.imagewatch.dev",
            &["-n", &other.name]
        )?);
        anyhow::ensure!(!can_i("get", "configmaps", &["-n", &other.name])?);
        Ok(())
    })();
    // The ClusterRole and its binding outlive the test's namespaces.
    ground.kubectl_try(
        &[
            "delete",
            "--ignore-not-found",
            &format!("clusterrolebinding/{fullname}"),
            &format!("clusterrole/{fullname}"),
        ],
        None,
    )?;
    result
}
