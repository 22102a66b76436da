//! The dereference step: what a watch points at, read from the cluster. The registry
//! credentials of its image (its Secret, or the operator's AWS identity for ECR), the Git
//! repository, branch and credentials it writes (`spec.git`, or the Argo CD Application
//! managing it), the place in Git its target names, and the cosign keys of `spec.verify`.
//! Reads the spec, Secrets and Argo CD Applications; hands on [`Rules`] to the scan, a
//! [`GitLocation`] to the write and [`VerifyKeys`] to the choice.

use std::time::Duration;

use imagewatch_crd::ImageWatch;
use imagewatch_engine::platforms::Platform;
use imagewatch_engine::windows::Pause;
use kube::ResourceExt;

use super::pull_request;
use super::validate::ValidatedRules;
use crate::cluster::allowance::Allowance;
use crate::cluster::{argocd::ResolveCache, secrets};
use crate::controllers::ReconcileError;
use crate::controllers::credentials::credential_choice;
use crate::controllers::{Announcer, Context, SecretReader};
use crate::error::SpecError;
use crate::manifests::{TargetSpec, WorkloadTarget};
use crate::policy::{self, TagPolicy};
use crate::registry::{Credentials, is_ecr_host};
use crate::scan::index::CredentialKey;
use crate::telemetry::Metrics;

/// What the dereference step reads: Secrets, the allow-list (asked before a Git Secret is
/// read), Argo CD Applications (with the client, in Argo CD's namespace, through the cache
/// of resolved sources), and the watch cache, to announce a credential's repositories to the
/// registry client.
#[derive(Clone, Copy)]
pub(super) struct DereferenceContext<'a> {
    pub(super) secrets: SecretReader<'a>,
    pub(super) allow: AllowList<'a>,
    pub(super) client: &'a kube::Client,
    pub(super) argocd_namespace: &'a str,
    pub(super) argocd_sources: &'a ResolveCache,
    pub(super) announcer: Announcer<'a>,
    /// Admin freezes (the operator's freeze ConfigMap).
    pub(super) freezes: &'a crate::cluster::freeze::Freezes,
}

impl<'a> DereferenceContext<'a> {
    /// The dereference step's view of the shared services.
    pub(super) fn of(ctx: &'a Context) -> Self {
        DereferenceContext {
            secrets: SecretReader::of(ctx),
            allow: AllowList::of(ctx),
            client: &ctx.client,
            argocd_namespace: &ctx.argocd_namespace,
            argocd_sources: &ctx.argocd_sources,
            announcer: ctx.announcer(),
            freezes: &ctx.freezes,
        }
    }
}

/// What every repository a watch follows shares: its tag rules, interval and registry
/// credentials (steps 1–2).
pub(super) struct Rules {
    pub(super) namespace: String,
    pub(super) policy: TagPolicy,
    pub(super) order: policy::Order,
    pub(super) interval: Duration,
    pub(super) creds: Credentials,
    pub(super) use_ecr: bool,
    pub(super) credential_key: CredentialKey,
    /// `spec.tags.platforms`: every written tag's image provides these (empty: any).
    pub(super) platforms: Vec<Platform>,
    /// Why nothing is written in this reconcile (`spec.suspend`, `spec.windows`, a freeze):
    /// every write is a dry run, and no pull request is opened or updated.
    pub(super) pause: Option<Pause>,
}

/// Steps 1–2 for a watch of `registry`: the validated rules and the registry credentials.
pub(super) async fn rules(
    watch: &ImageWatch,
    ctx: &DereferenceContext<'_>,
    registry: &str,
    validated: ValidatedRules,
) -> Result<Rules, ReconcileError> {
    let ValidatedRules {
        policy,
        order,
        interval,
        platforms,
        windows,
    } = validated;
    let namespace = watch.namespace().unwrap_or_default();
    let credentials = watch.spec.credentials.clone().unwrap_or_default();
    let (use_ecr, credential_key) = credential_choice(&credentials, &namespace, registry);
    if use_ecr && is_ecr_host(registry).is_none() {
        return Err(ReconcileError::InvalidSpec(
            SpecError::AwsProviderNeedsEcr {
                registry: registry.to_string(),
            },
        ));
    }

    // 2. dereference (through ECR's API, the operator's AWS identity: a pull Secret named
    // beside `provider: aws` is not used, so not read, and its absence fails nothing)
    let creds = match (&credentials.secret_ref, use_ecr) {
        (Some(secret), false) => {
            secrets::registry_credentials(&ctx.secrets, &namespace, &secret.name, registry).await?
        }
        _ => Credentials::Anonymous,
    };
    if !use_ecr {
        ctx.announcer
            .expect_repositories(&credential_key, registry, &creds)
            .await;
    }
    let pause = if watch.spec.is_suspended() {
        Some(Pause::Suspended)
    } else {
        let freeze = ctx.freezes.reason_for(&namespace);
        imagewatch_engine::windows::closed(&windows, freeze.as_deref(), jiff::Timestamp::now())
            .map(Pause::Closed)
    };
    Ok(Rules {
        namespace,
        policy,
        order,
        interval,
        creds,
        use_ecr,
        credential_key,
        platforms,
        pause,
    })
}

/// Where to write: the repository, branch, credentials and the base path target paths are
/// relative to.
#[derive(Clone)]
pub(super) struct GitLocation {
    pub(super) url: String,
    pub(super) branch: String,
    pub(super) auth: crate::git::GitAuth,
    pub(super) base_path: String,
    pub(super) push_branch: Option<String>,
}

/// `spec.git`, or the Argo CD Application managing the watch.
pub(super) async fn resolve_git(
    watch: &ImageWatch,
    ctx: &DereferenceContext<'_>,
) -> Result<GitLocation, ReconcileError> {
    let namespace = watch.namespace().unwrap_or_default();
    if let Some(git) = &watch.spec.git {
        crate::git::check_tenant_url(&git.url)
            .map_err(|e| ReconcileError::InvalidSpec(SpecError::invalid("spec.git.url", e)))?;
        check_git_allowed(watch, ctx.allow, &git.url, "").await?;
        let auth = match &git.secret_ref {
            Some(secret) => {
                secrets::git_credentials(&ctx.secrets, &namespace, &secret.name).await?
            }
            None => crate::git::GitAuth::Anonymous,
        };
        return Ok(GitLocation {
            url: git.url.clone(),
            branch: git.branch().to_string(),
            auth,
            base_path: String::new(),
            // With a pull request and no push branch: the watch's own branch.
            // A group's members share one (so one commit and one pull request per group).
            push_branch: git.push_branch.clone().or_else(|| {
                git.pull_request.as_ref().map(|_| {
                    match watch.spec.group.as_deref().filter(|g| !g.is_empty()) {
                        Some(group) => pull_request::group_push_branch("{namespace}", group),
                        None => pull_request::default_push_branch("{namespace}", "{name}"),
                    }
                })
            }),
        });
    }
    let (source, secret) = crate::cluster::argocd::resolve_cached(
        ctx.argocd_sources,
        ctx.client,
        ctx.argocd_namespace,
        &namespace,
        watch.annotations(),
        watch.labels(),
        target_path(&watch.spec.target),
    )
    .await?;
    check_git_allowed(watch, ctx.allow, &source.repo_url, &source.path).await?;
    let auth = match secret {
        Some(name) => secrets::git_credentials(&ctx.secrets, &namespace, &name).await?,
        None => crate::git::GitAuth::Anonymous,
    };
    Ok(GitLocation {
        url: source.repo_url,
        branch: source.branch,
        auth,
        base_path: source.path,
        push_branch: None,
    })
}

/// The Git repository that decides a watch's shard: `spec.git.url`, else the repository of
/// the Argo CD Application managing it; when neither resolves, the watch itself (so exactly
/// one replica reports the problem).
pub(super) async fn shard_key(watch: &ImageWatch, ctx: &DereferenceContext<'_>) -> String {
    if let Some(git) = &watch.spec.git {
        return git.url.clone();
    }
    let namespace = watch.namespace().unwrap_or_default();
    match crate::cluster::argocd::resolve_cached(
        ctx.argocd_sources,
        ctx.client,
        ctx.argocd_namespace,
        &namespace,
        watch.annotations(),
        watch.labels(),
        target_path(&watch.spec.target),
    )
    .await
    {
        Ok((source, _)) => source.repo_url,
        Err(_) => format!("imagewatch:{namespace}/{}", watch.name_any()),
    }
}

/// The first path a watch's target names (for a multi-source Application, `$<ref>/…` picks
/// the source it is a file of).
pub fn target_path(target: &imagewatch_crd::Target) -> Option<&str> {
    target
        .workload
        .as_ref()
        .map(|w| w.path.as_str())
        .or(target.kustomize.as_ref().map(|k| k.path.as_str()))
        .or(target.helm.as_ref().map(|h| h.file.as_str()))
        .or(target.argocd_source.as_ref().map(|a| a.path.as_str()))
}

/// The place in Git a watch's target names, with paths under `base_path` (pure).
pub fn target_spec(
    target: &imagewatch_crd::Target,
    base_path: &str,
    image: &str,
) -> Result<TargetSpec, String> {
    let set = [
        target.workload.is_some(),
        target.kustomize.is_some(),
        target.helm.is_some(),
        target.argocd_source.is_some(),
    ];
    if set.iter().filter(|s| **s).count() != 1 {
        return Err(
            "spec.target: exactly one of workload, kustomize, helm, argocdSource must be set"
                .into(),
        );
    }
    if let Some(w) = &target.workload {
        return Ok(TargetSpec::Workload {
            path: join_path(base_path, &w.path),
            target: WorkloadTarget {
                kind: w.kind.clone(),
                name: w.name.clone(),
                container: w.container.clone(),
                namespace: w.namespace.clone(),
            },
        });
    }
    if let Some(k) = &target.kustomize {
        return Ok(TargetSpec::Kustomize {
            path: join_path(base_path, &k.path),
            image: k.image.clone().unwrap_or_else(|| image.to_string()),
        });
    }
    if let Some(h) = &target.helm {
        return Ok(TargetSpec::Helm {
            file: join_path(base_path, &h.file),
            key: h.tag.clone(),
        });
    }
    if let Some(a) = &target.argocd_source {
        return Ok(TargetSpec::ArgocdSource {
            path: join_path(base_path, &a.path),
            application: a.application.clone(),
            image: a.image.clone().unwrap_or_else(|| image.to_string()),
        });
    }
    Err("spec.target is empty".into())
}

/// The keys `spec.verify` trusts and the cache key of their verdicts; None without it. The
/// cache key carries the credentials the registry is read with (the watch's Secret, or the
/// operator's identity for ECR), so one tenant's verified verdict is not another's.
pub(super) async fn verify_keys(
    watch: &ImageWatch,
    rules: &Rules,
    ctx: &DereferenceContext<'_>,
) -> Result<Option<VerifyKeys>, ReconcileError> {
    let Some(verify) = &watch.spec.verify else {
        return Ok(None);
    };
    let keys = signature_keys(
        &ctx.secrets,
        &rules.namespace,
        &verify.cosign,
        "spec.verify",
    )
    .await?;
    let cache_key = format!(
        "{}|{:?}",
        crate::signature::keys_fingerprint(&keys),
        rules.credential_key
    );
    Ok(Some(VerifyKeys { keys, cache_key }))
}

/// The trusted keys of a `cosign` verification: read from its Secret; keyless is refused.
pub(crate) async fn signature_keys(
    secrets: &impl secrets::SecretAccess,
    namespace: &str,
    cosign: &imagewatch_crd::CosignVerify,
    field: &str,
) -> Result<Vec<crate::signature::TrustedKey>, ReconcileError> {
    match (&cosign.secret_ref, &cosign.keyless) {
        (_, Some(_)) => Err(ReconcileError::InvalidSpec(SpecError::KeylessUnsupported {
            field: field.to_string(),
        })),
        (Some(secret), None) => secrets::cosign_keys(secrets, namespace, &secret.name).await,
        (None, None) => Err(ReconcileError::InvalidSpec(
            SpecError::CosignWithoutSecretRef {
                field: field.to_string(),
            },
        )),
    }
}

/// Keys a watch verifies signatures with.
pub(crate) struct VerifyKeys {
    pub keys: Vec<crate::signature::TrustedKey>,
    /// Key-set fingerprint and registry credentials, for the verdict cache.
    pub cache_key: String,
}

/// What the allow-list asks read: the allow-list, the client its ConfigMap and AppProjects
/// are read with, the metrics its answers are counted in, and Argo CD's namespace.
#[derive(Clone, Copy)]
pub(super) struct AllowList<'a> {
    pub(super) allowance: &'a Allowance,
    pub(super) client: &'a kube::Client,
    pub(super) metrics: &'a Metrics,
    pub(super) argocd_namespace: &'a str,
}

impl<'a> AllowList<'a> {
    /// The allow-list of the shared services.
    pub(super) fn of(ctx: &'a Context) -> Self {
        AllowList {
            allowance: &ctx.allowance,
            client: &ctx.client,
            metrics: &ctx.metrics,
            argocd_namespace: &ctx.argocd_namespace,
        }
    }
}

/// Step 2 (dereference), first of all, tenancy: the allow-list must let the watch's namespace read its image
/// (for a pattern, everything its literal prefix covers) and use the operator's AWS identity
/// when it does. Checked before anything is read.
pub(super) async fn check_registry_allowed(
    watch: &ImageWatch,
    allow: AllowList<'_>,
) -> Result<(), ReconcileError> {
    let namespace = watch.namespace().unwrap_or_default();
    let image = watch.spec.image.split('*').next().unwrap_or_default();
    let registry = image.split('/').next().unwrap_or_default();
    let credentials = watch.spec.credentials.clone().unwrap_or_default();
    let (aws, _) = credential_choice(&credentials, &namespace, registry);
    let ask = crate::cluster::allow::Ask {
        namespace: &namespace,
        git: None,
        images: vec![image],
        aws,
    };
    allow
        .allowance
        .check(allow.client, allow.metrics, "ImageWatch", ask, None)
        .await
}

/// The path a target writes, under `base` (pure); a pattern's `$n` and what follows are cut.
fn written_path(target: &imagewatch_crd::Target, base: &str) -> String {
    let path = [
        target.workload.as_ref().map(|w| w.path.as_str()),
        target.kustomize.as_ref().map(|k| k.path.as_str()),
        target.helm.as_ref().map(|h| h.file.as_str()),
        target.argocd_source.as_ref().map(|a| a.path.as_str()),
    ]
    .into_iter()
    .flatten()
    .next()
    .unwrap_or_default();
    let literal = path.split('$').next().unwrap_or_default();
    join_path(base, literal)
}

/// Step 2 (dereference), first of all, tenancy: the allow-list (or the managing Application's AppProject)
/// must let the watch's namespace write `url` at its target's path. Checked before the git
/// Secret is read and before Git is.
pub(super) async fn check_git_allowed(
    watch: &ImageWatch,
    allow: AllowList<'_>,
    url: &str,
    base_path: &str,
) -> Result<(), ReconcileError> {
    let namespace = watch.namespace().unwrap_or_default();
    let path = written_path(&watch.spec.target, base_path);
    let ask = crate::cluster::allow::Ask {
        namespace: &namespace,
        git: Some((url, vec![path.as_str()])),
        images: Vec::new(),
        aws: false,
    };
    let project = crate::cluster::allowance::ProjectOf {
        argocd_namespace: allow.argocd_namespace,
        namespace: &namespace,
        annotations: watch.annotations(),
        labels: watch.labels(),
    };
    allow
        .allowance
        .check(
            allow.client,
            allow.metrics,
            "ImageWatch",
            ask,
            Some(project),
        )
        .await
}

/// `base/path`, without leading or trailing slashes.
pub(super) fn join_path(base: &str, path: &str) -> String {
    // `$<ref>/file`: a file of a multi-source Application's `ref` source, from its root.
    if let Some(rest) = path.strip_prefix('$') {
        return rest
            .split_once('/')
            .map_or("", |(_, file)| file)
            .trim_matches('/')
            .to_string();
    }
    let base = base.trim_matches('/');
    let path = path.trim_matches('/');
    match (base.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (false, true) => base.to_string(),
        (false, false) => format!("{base}/{path}"),
    }
}
