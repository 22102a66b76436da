//! `imagewatch explain` and `imagewatch test`: the answers to "why not my tag?" for people.
//!
//! `explain` reads one ImageWatch or PromotionPolicy with the caller's own kubeconfig (and so
//! only what the caller's RBAC lets them `get`) and prints what the operator found and did,
//! from the object's status (the text is built by `imagewatch_engine::explain`). Installed
//! as `kubectl-imagewatch` on the `PATH`, the same binary is the kubectl plugin:
//! `kubectl imagewatch explain shop/api`.
//!
//! `test` lists an image's tags with the caller's Docker credentials (`~/.docker/config.json`,
//! or `$DOCKER_CONFIG/config.json`) and prints what a watch with the given tag rules would
//! choose and why each better-ranked tag would not be.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use imagewatch_crd::{ImageWatch, PromotionPolicy, TagOrder, TagPick, TagRules};
use kube::{Api, Client, ResourceExt};

use crate::policy::TagPolicy;
use crate::registry::{
    Credentials, RegistryClient, RegistryOptions, RepositoryRef, TagSource as _,
};

/// Which kind `explain` reads.
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExplainKind {
    /// An ImageWatch, else a PromotionPolicy of that name.
    #[default]
    Auto,
    /// An ImageWatch (`iw`).
    #[value(alias = "iw", alias = "imagewatch")]
    ImageWatch,
    /// A PromotionPolicy (`pp`).
    #[value(alias = "pp", alias = "promotionpolicy")]
    PromotionPolicy,
}

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The object: NAMESPACE/NAME, or NAME with --namespace (default: the kubeconfig
    /// context's namespace).
    pub object: String,
    /// Namespace of NAME.
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// The kind to read.
    #[arg(long, value_enum, default_value_t)]
    pub kind: ExplainKind,
    /// Also say why this tag is or is not the watch's tag.
    #[arg(long)]
    pub tag: Option<String>,
}

#[derive(Args, Debug)]
pub struct TestArgs {
    /// Image repository to list, without tag, e.g. ghcr.io/org/app.
    #[arg(long)]
    pub image: String,
    /// spec.tags.pattern.
    #[arg(long)]
    pub pattern: Option<String>,
    /// spec.tags.exclude (repeatable).
    #[arg(long)]
    pub exclude: Vec<String>,
    /// spec.tags.order.
    #[arg(long, value_enum)]
    pub order: Option<TestOrder>,
    /// spec.tags.pick.
    #[arg(long, value_enum)]
    pub pick: Option<TestPick>,
    /// spec.tags.extract.
    #[arg(long)]
    pub extract: Option<String>,
    /// Registry host[:port] reached over plain HTTP (repeatable).
    #[arg(long = "insecure-registry")]
    pub insecure_registries: Vec<String>,
    /// Docker config file with the credentials (default: $DOCKER_CONFIG/config.json, else
    /// ~/.docker/config.json; anonymous when there is none).
    #[arg(long)]
    pub docker_config: Option<PathBuf>,
}

/// `--order` of `imagewatch test`.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum TestOrder {
    Semver,
    Newest,
    Alphabetical,
    Numerical,
}

/// `--pick` of `imagewatch test`.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum TestPick {
    Highest,
    Lowest,
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

fn finish(result: Result<String, String>) -> ExitCode {
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `imagewatch explain`.
pub fn explain(args: &ExplainArgs) -> ExitCode {
    finish(runtime().and_then(|rt| rt.block_on(explain_text(args))))
}

async fn explain_text(args: &ExplainArgs) -> Result<String, String> {
    let client = Client::try_default()
        .await
        .map_err(|e| format!("cannot reach the cluster with your kubeconfig: {e}"))?;
    let (namespace, name) = match args.object.split_once('/') {
        Some((ns, name)) => (ns.to_owned(), name.to_owned()),
        None => (
            args.namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_owned()),
            args.object.clone(),
        ),
    };
    let now = jiff::Timestamp::now();
    let missing = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404);
    if args.kind != ExplainKind::PromotionPolicy {
        let api: Api<ImageWatch> = Api::namespaced(client.clone(), &namespace);
        match api.get(&name).await {
            Ok(watch) => {
                return Ok(imagewatch_engine::explain::watch(
                    &namespace,
                    &watch.name_any(),
                    &watch.spec,
                    watch.status.as_ref(),
                    args.tag.as_deref(),
                    now,
                ));
            }
            Err(e) if missing(&e) && args.kind == ExplainKind::Auto => {}
            Err(e) => return Err(describe(&e, "imagewatches", &namespace, &name)),
        }
    }
    let api: Api<PromotionPolicy> = Api::namespaced(client, &namespace);
    match api.get(&name).await {
        Ok(policy) => Ok(imagewatch_engine::explain::promotion(
            &namespace,
            &policy.name_any(),
            &policy.spec,
            policy.status.as_ref(),
            now,
        )),
        Err(e) if missing(&e) && args.kind == ExplainKind::Auto => Err(format!(
            "no ImageWatch or PromotionPolicy {name} in namespace {namespace}"
        )),
        Err(e) => Err(describe(&e, "promotionpolicies", &namespace, &name)),
    }
}

/// An API error in the words of what the user can do about it.
fn describe(e: &kube::Error, resource: &str, namespace: &str, name: &str) -> String {
    match e {
        kube::Error::Api(s) if s.code == 404 => {
            format!("{resource} {name} not found in namespace {namespace}")
        }
        kube::Error::Api(s) if s.code == 403 => format!(
            "your credentials may not get {resource} in namespace {namespace} (ask for get on {resource}.imagewatch.dev): {}",
            s.message
        ),
        other => format!("reading {resource} {namespace}/{name}: {other}"),
    }
}

/// `imagewatch test`.
pub fn test(args: &TestArgs) -> ExitCode {
    finish(runtime().and_then(|rt| rt.block_on(test_text(args))))
}

fn docker_config(args: &TestArgs) -> Option<PathBuf> {
    if let Some(path) = &args.docker_config {
        return Some(path.clone());
    }
    let dir = std::env::var_os("DOCKER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker")))?;
    Some(dir.join("config.json")).filter(|p| p.exists())
}

async fn test_text(args: &TestArgs) -> Result<String, String> {
    let rules = TagRules {
        pattern: args.pattern.clone(),
        exclude: (!args.exclude.is_empty()).then(|| args.exclude.clone()),
        order: args.order.map(|o| match o {
            TestOrder::Semver => TagOrder::Semver,
            TestOrder::Newest => TagOrder::Newest,
            TestOrder::Alphabetical => TagOrder::Alphabetical,
            TestOrder::Numerical => TagOrder::Numerical,
        }),
        pick: args.pick.map(|p| match p {
            TestPick::Highest => TagPick::Highest,
            TestPick::Lowest => TagPick::Lowest,
        }),
        extract: args.extract.clone(),
        ..TagRules::default()
    };
    let policy = TagPolicy::from_rules(&rules).map_err(|e| format!("tag rules: {e}"))?;
    let repo = RepositoryRef::parse(&args.image).map_err(|e| e.to_string())?;
    let creds = match docker_config(args) {
        None => Credentials::Anonymous,
        Some(path) => {
            let json =
                std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
            crate::registry::from_dockerconfigjson(&json, &repo.registry)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .unwrap_or_default()
        }
    };
    let client = RegistryClient::new(RegistryOptions {
        insecure_hosts: args.insecure_registries.clone(),
        ..RegistryOptions::default()
    })
    .map_err(|e| e.to_string())?;
    let tags = if policy.order() == crate::policy::Order::Newest {
        client.list_with_times(&repo, &creds, None).await
    } else {
        client.list(&repo, &creds).await
    }
    .map_err(|e| format!("listing {}: {e}", args.image))?;
    Ok(test_report(&args.image, &policy, &tags))
}

/// What `imagewatch test` prints for `tags` under `policy` (pure).
pub fn test_report(image: &str, policy: &TagPolicy, tags: &[crate::policy::TagInfo]) -> String {
    use std::fmt::Write as _;
    let chosen = policy.select(tags).map(|t| t.tag.clone());
    let considered = imagewatch_engine::considered::considered(
        policy,
        tags,
        chosen.as_deref(),
        imagewatch_engine::considered::Besides::default(),
    );
    let mut out = String::new();
    let _ = writeln!(out, "{image}: {} tags listed", tags.len());
    match &chosen {
        Some(tag) => {
            let _ = writeln!(out, "Chosen: {tag}");
        }
        None => {
            let _ = writeln!(out, "Chosen: none (no tag passes the rules)");
        }
    }
    if !considered.refused.is_empty() {
        let _ = writeln!(
            out,
            "Ranked above it, and the rule that refused each (best {}):",
            considered.refused.len()
        );
        for refused in &considered.refused {
            let _ = writeln!(
                out,
                "  {:<24} {:<13} {}",
                refused.tag, refused.reason, refused.message
            );
        }
    }
    let _ = writeln!(
        out,
        "(Signatures and platforms are not checked here; a watch with spec.verify or spec.tags.platforms may refuse more.)"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::TagInfo;

    #[test]
    fn the_test_report_names_the_choice_and_what_ranks_above_it() {
        let policy = TagPolicy::new(
            "v*",
            &["*-rc*".to_owned()],
            crate::policy::Order::Semver,
            None,
        )
        .unwrap();
        let tags: Vec<TagInfo> = ["v1.0.0", "v1.1.0-rc1", "2.0.0", "latest"]
            .into_iter()
            .map(TagInfo::new)
            .collect();
        let report = test_report("r.io/app", &policy, &tags);
        assert_eq!(
            report,
            "r.io/app: 4 tags listed\n\
             Chosen: v1.0.0\n\
             Ranked above it, and the rule that refused each (best 2):\n\
             \x20 2.0.0                    Pattern       2.0.0 does not match pattern \"v*\"\n\
             \x20 v1.1.0-rc1               Exclude       v1.1.0-rc1 matches exclude \"*-rc*\"\n\
             (Signatures and platforms are not checked here; a watch with spec.verify or spec.tags.platforms may refuse more.)\n"
        );
    }
}
