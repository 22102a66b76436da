//! The validate step: the checks a watch passes before anything of it is read. The spec's tag
//! rules and interval (pure, handed on to the scan and the choice), and the allow-list asks:
//! may the watch's namespace read its image (and use the operator's AWS identity), and write
//! its Git repository at its target's path. Reads the spec and the allow-list; hands on the
//! validated rules or a `ReconcileError` that names the field.

use std::time::Duration;

use imagewatch_crd::ImageWatch;
use imagewatch_engine::platforms::Platform;
use kube::ResourceExt;

use crate::cluster::allowance::Allowance;
use crate::controllers::Context;
use crate::controllers::ReconcileError;
use crate::controllers::credentials::credential_choice;
use crate::controllers::parse_duration;
use crate::policy::{self, TagPolicy};
use crate::telemetry::Metrics;

/// The spec's tag rules and interval, validated (step 1).
pub(super) struct ValidatedRules {
    pub(super) policy: TagPolicy,
    pub(super) order: policy::Order,
    pub(super) interval: Duration,
    /// `spec.tags.platforms`: every written tag's image provides these (empty: any).
    pub(super) platforms: Vec<Platform>,
    /// `spec.windows`, parsed.
    pub(super) windows: Vec<imagewatch_engine::windows::Schedule>,
}

/// Step 1 (pure): the tag rules and the interval.
pub(super) fn validate_rules(watch: &ImageWatch) -> Result<ValidatedRules, ReconcileError> {
    let spec = &watch.spec;
    let tags = spec.tags.clone().unwrap_or_default();
    let policy = TagPolicy::from_rules(&tags)
        .map_err(|e| ReconcileError::InvalidSpec(format!("spec.tags: {e}")))?;
    let order = policy.order();
    let Some(interval) = parse_duration(spec.interval_or_default()) else {
        return Err(ReconcileError::InvalidSpec(format!(
            "spec.interval {:?} is not a duration",
            spec.interval_or_default()
        )));
    };
    // The CRD refuses malformed entries at apply; this guards objects stored before.
    let platforms = Platform::parse_all(tags.platforms.as_deref().unwrap_or(&[]))
        .map_err(|e| ReconcileError::InvalidSpec(format!("spec.tags.platforms: {e}")))?;
    let windows = imagewatch_engine::windows::parse(spec.windows.as_deref().unwrap_or(&[]))
        .map_err(ReconcileError::InvalidSpec)?;
    Ok(ValidatedRules {
        policy,
        order,
        interval,
        platforms,
        windows,
    })
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

/// Step 1 (validate), tenancy: the allow-list must let the watch's namespace read its image
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
fn target_path(target: &imagewatch_crd::Target, base: &str) -> String {
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

/// Step 1 (validate), tenancy: the allow-list (or the managing Application's AppProject)
/// must let the watch's namespace write `url` at its target's path. Checked before the git
/// Secret is read and before Git is.
pub(super) async fn check_git_allowed(
    watch: &ImageWatch,
    allow: AllowList<'_>,
    url: &str,
    base_path: &str,
) -> Result<(), ReconcileError> {
    let namespace = watch.namespace().unwrap_or_default();
    let path = target_path(&watch.spec.target, base_path);
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
