//! The dereference step: everything a watch points at, read once from the cluster and the
//! registry's catalog. First the allow-list asks (may the watch's namespace read its image
//! and write its Git target, before anything it names is read); then the Git repository,
//! branch and credentials it writes (`spec.git`, or the Argo CD Application managing it),
//! its registry credentials (its Secret, or the operator's AWS identity for ECR), the cosign
//! keys of `spec.verify`, and what else it follows: a group's other members (each with its
//! own rules, credentials and Git location), or the repositories of a pattern image.
//! Reads Secrets, Argo CD Applications, the watch cache and the repository catalog; hands
//! on one [`Dereferenced`] to the scan.

use std::sync::Arc;
use std::time::Duration;

use imagewatch_crd::ImageWatch;
use imagewatch_engine::platforms::Platform;
use imagewatch_engine::watch_target::{target_path, written_path};
use imagewatch_engine::windows::Pause;
use kube::{ResourceExt, core::DeserializeGuard};

use super::members::PatternImage;
use super::pull_request;
use super::spec_rules::{ValidatedRules, validate_single};
use crate::cluster::allowance::Allowance;
use crate::cluster::{argocd::ResolveCache, secrets};
use crate::controllers::ReconcileError;
use crate::controllers::credentials::credential_choice;
use crate::controllers::{Announcer, Context, SecretReader};
use crate::error::{CatalogError, GroupWait, SpecError};
use crate::policy::{self, TagPolicy};
use crate::registry::ecr::EcrTagSource;
use crate::registry::{Credentials, RegistryClient, RegistryError, RepositoryRef, is_ecr_host};
use crate::scan::index::{CatalogKey, CredentialKey, RepositoryIndex};
use crate::telemetry::Metrics;

/// What the dereference step reads: Secrets, the allow-list (asked before a Git Secret is
/// read), Argo CD Applications (with the client, in Argo CD's namespace, through the cache
/// of resolved sources), the watch cache (a group's members, and to announce a credential's
/// repositories to the registry client), the admin freezes, and the registry's catalog
/// through the shared index.
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
    pub(super) store: &'a kube::runtime::reflector::Store<DeserializeGuard<ImageWatch>>,
    pub(super) registry: &'a RegistryClient,
    pub(super) ecr: &'a EcrTagSource,
    pub(super) index: &'a RepositoryIndex,
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
            store: &ctx.store,
            registry: &ctx.registry,
            ecr: &ctx.ecr,
            index: &ctx.index,
        }
    }
}

/// Everything a watch points at (step 2), for the scan: where it writes, its rules and
/// registry credentials, and what it follows ([`Single`] or [`Pattern`]).
pub(super) struct Dereferenced<F> {
    pub(super) git: GitLocation,
    pub(super) rules: Arc<Rules>,
    pub(super) followed: F,
}

/// A watch of one repository, dereferenced. Its verify keys and its group are reported
/// after its own tags were listed (the status shows the tags a watch considered whatever
/// stopped it), so they are kept with their error.
pub(super) struct Single {
    pub(super) repo: RepositoryRef,
    pub(super) verify: Result<Option<VerifyKeys>, ReconcileError>,
    pub(super) group: Option<Group>,
}

/// A pattern watch, dereferenced: the repositories of its registry it matches.
pub(super) struct Pattern {
    pub(super) pattern: PatternImage,
    pub(super) verify: Option<VerifyKeys>,
    /// How many repositories the registry listed.
    pub(super) listed: usize,
    /// The matching ones, with what their `*`s matched.
    pub(super) members: Vec<(String, Vec<String>)>,
}

/// A watch's group (`spec.group`): its other members, or why one is not usable.
pub(super) struct Group {
    pub(super) name: String,
    pub(super) members: Result<Vec<GroupMember>, ReconcileError>,
}

/// Another member of a watch's group, dereferenced. Its Git location is reported when a
/// tag is written for it.
pub(super) struct GroupMember {
    pub(super) watch: ImageWatch,
    pub(super) rules: Arc<Rules>,
    pub(super) repo: RepositoryRef,
    pub(super) git: Result<GitLocation, ReconcileError>,
}

/// Step 2 for a watch of one repository: the allow-list asks, the Git location, the
/// registry credentials, the verify keys and the group's other members.
pub(super) async fn dereference_single(
    watch: &ImageWatch,
    rules: ValidatedRules,
    repo: RepositoryRef,
    ctx: &DereferenceContext<'_>,
) -> Result<Dereferenced<Single>, ReconcileError> {
    let (git, rules) = git_and_rules(watch, &repo.registry, rules, ctx).await?;
    let verify = verify_keys(watch, &rules, ctx).await;
    let group = match watch.spec.group.as_deref().filter(|g| !g.is_empty()) {
        Some(name) => Some(Group {
            name: name.to_owned(),
            members: group_members(watch, name, &rules.namespace, ctx).await,
        }),
        None => None,
    };
    Ok(Dereferenced {
        git,
        rules,
        followed: Single {
            repo,
            verify,
            group,
        },
    })
}

/// Step 2 for a pattern watch: the allow-list asks, the Git location, the registry
/// credentials, the verify keys (every member's tag is verified in its own repository, with
/// one key set) and the registry's repositories the pattern matches.
pub(super) async fn dereference_pattern(
    watch: &ImageWatch,
    rules: ValidatedRules,
    pattern: PatternImage,
    ctx: &DereferenceContext<'_>,
) -> Result<Dereferenced<Pattern>, ReconcileError> {
    let (git, rules) = git_and_rules(watch, &pattern.registry, rules, ctx).await?;
    let verify = verify_keys(watch, &rules, ctx).await?;
    let (listed, members) = pattern_members(&pattern, &rules, ctx).await?;
    tracing::debug!(watch = %watch.name_any(), listed, members = members.len(), "pattern members");
    Ok(Dereferenced {
        git,
        rules,
        followed: Pattern {
            pattern,
            verify,
            listed,
            members,
        },
    })
}

/// The allow-list asks, then where the watch writes (a missing or wrong Git location is
/// reported before any registry verdict), then its rules with its registry credentials.
async fn git_and_rules(
    watch: &ImageWatch,
    registry: &str,
    rules: ValidatedRules,
    ctx: &DereferenceContext<'_>,
) -> Result<(GitLocation, Arc<Rules>), ReconcileError> {
    check_registry_allowed(watch, ctx.allow).await?;
    let git = resolve_git(watch, ctx).await?;
    let rules = read_rules(watch, ctx, registry, rules).await?;
    Ok((git, Arc::new(rules)))
}

/// The other members of `group` in the watch's namespace, by name, each dereferenced; the
/// first that is not usable stops the group.
async fn group_members(
    watch: &ImageWatch,
    group: &str,
    namespace: &str,
    ctx: &DereferenceContext<'_>,
) -> Result<Vec<GroupMember>, ReconcileError> {
    let peers: Vec<Arc<DeserializeGuard<ImageWatch>>> = ctx.store.state();
    let mut others: Vec<&ImageWatch> = peers
        .iter()
        .filter_map(|g| g.0.as_ref().ok())
        .filter(|w| {
            w.namespace().as_deref() == Some(namespace)
                && w.spec.group.as_deref() == Some(group)
                && w.name_any() != watch.name_any()
                && w.metadata.deletion_timestamp.is_none()
        })
        .collect();
    others.sort_by_key(|w| w.name_any());
    let mut members = Vec::with_capacity(others.len());
    for other in others {
        let member = async {
            let (validated, repo) = validate_single(other)?;
            let rules = read_rules(other, ctx, &repo.registry, validated).await?;
            Ok::<_, ReconcileError>((Arc::new(rules), repo))
        };
        match member.await {
            Ok((rules, repo)) => members.push(GroupMember {
                git: resolve_git(other, ctx).await,
                watch: other.clone(),
                rules,
                repo,
            }),
            Err(e) => {
                return Err(ReconcileError::WaitingForGroup(GroupWait::unusable(
                    group,
                    other.name_any(),
                    e,
                )));
            }
        }
    }
    Ok(members)
}

/// The registry's repositories matching a pattern (the listing is shared through the
/// index): how many were listed, and the matching ones with their captures.
async fn pattern_members(
    pattern: &PatternImage,
    rules: &Rules,
    ctx: &DereferenceContext<'_>,
) -> Result<(usize, Vec<(String, Vec<String>)>), ReconcileError> {
    let catalog_key = CatalogKey {
        registry: pattern.registry.clone(),
        credentials: rules.credential_key.clone(),
    };
    let catalog = ctx
        .index
        .repositories(&catalog_key, rules.interval, || async {
            if rules.use_ecr {
                ctx.ecr.list_repositories(&pattern.registry, "").await
            } else {
                ctx.registry
                    .list_repositories(&pattern.registry, &rules.creds)
                    .await
            }
        })
        .await
        .map_err(|e| catalog_error(e, pattern, rules.use_ecr))?;
    let matched = catalog
        .repositories
        .iter()
        .filter_map(|name| {
            crate::registry::ecr::match_pattern(&pattern.pattern, name)
                .map(|captures| (name.clone(), captures))
        })
        .collect();
    Ok((catalog.repositories.len(), matched))
}

/// A failed repository listing: "this registry does not list repositories to us" is a
/// condition of its own; anything else is a registry error, retried.
fn catalog_error(error: RegistryError, pattern: &PatternImage, ecr: bool) -> ReconcileError {
    let unlisted = matches!(
        &error,
        RegistryError::NotFound { .. }
            | RegistryError::Unauthorized { .. }
            | RegistryError::Server {
                status: 405 | 501,
                ..
            }
    );
    match (unlisted, ecr) {
        (true, true) => ReconcileError::CatalogUnavailable(CatalogError::Ecr {
            registry: pattern.registry.clone(),
            pattern: pattern.pattern.clone(),
            error: Box::new(error),
        }),
        (true, false) => ReconcileError::CatalogUnavailable(CatalogError::Catalog {
            registry: pattern.registry.clone(),
            pattern: pattern.pattern.clone(),
            error: Box::new(error),
        }),
        (false, _) => ReconcileError::Registry(error),
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

/// The validated rules of a watch of `registry` and its registry credentials, and whether
/// it is paused.
async fn read_rules(
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
async fn resolve_git(
    watch: &ImageWatch,
    ctx: &DereferenceContext<'_>,
) -> Result<GitLocation, ReconcileError> {
    let namespace = watch.namespace().unwrap_or_default();
    let target = target_path(&watch.spec.target);
    // Where: from spec.git, or from the managing Application (with its repository Secret).
    let (location, secret) = match &watch.spec.git {
        Some(git) => {
            crate::git::check_tenant_url(&git.url)
                .map_err(|e| ReconcileError::InvalidSpec(SpecError::invalid("spec.git.url", e)))?;
            let location = GitLocation {
                url: git.url.clone(),
                branch: git.branch().to_string(),
                auth: crate::git::GitAuth::Anonymous,
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
            };
            (location, git.secret_ref.as_ref().map(|s| s.name.clone()))
        }
        None => {
            let (source, secret) = crate::cluster::argocd::resolve_cached(
                ctx.argocd_sources,
                ctx.client,
                ctx.argocd_namespace,
                &namespace,
                watch.annotations(),
                watch.labels(),
                target,
            )
            .await?;
            let location = GitLocation {
                url: source.repo_url,
                branch: source.branch,
                auth: crate::git::GitAuth::Anonymous,
                base_path: source.path,
                push_branch: None,
            };
            (location, secret)
        }
    };
    // Whether the namespace may write there: asked before the Git Secret is read.
    let path = written_path(&watch.spec.target, &location.base_path);
    let ask = crate::cluster::allow::Ask {
        namespace: &namespace,
        git: Some((&location.url, vec![path.as_str()])),
        images: Vec::new(),
        aws: false,
    };
    let project = crate::cluster::allowance::ProjectOf {
        argocd_namespace: ctx.allow.argocd_namespace,
        namespace: &namespace,
        annotations: watch.annotations(),
        labels: watch.labels(),
    };
    let allow = ctx.allow;
    allow
        .allowance
        .check(
            allow.client,
            allow.metrics,
            "ImageWatch",
            ask,
            Some(project),
        )
        .await?;
    let auth = match secret {
        Some(name) => secrets::git_credentials(&ctx.secrets, &namespace, &name).await?,
        None => crate::git::GitAuth::Anonymous,
    };
    Ok(GitLocation { auth, ..location })
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

/// The keys `spec.verify` trusts and the cache key of their verdicts; None without it. The
/// cache key carries the credentials the registry is read with (the watch's Secret, or the
/// operator's identity for ECR), so one tenant's verified verdict is not another's.
async fn verify_keys(
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
async fn check_registry_allowed(
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
