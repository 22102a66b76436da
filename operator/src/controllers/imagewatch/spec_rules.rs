//! A watch's own rules, checked from its spec alone (pure): tag rules, interval, platforms,
//! windows, and for a watch of one repository its image. The validate step checks the watch
//! with them; the dereference step checks each other member of its group the same way (a
//! member is one more watch, found in the watch cache).

use std::time::Duration;

use imagewatch_crd::ImageWatch;
use imagewatch_engine::platforms::Platform;

use crate::controllers::ReconcileError;
use crate::controllers::parse_duration;
use crate::error::SpecError;
use crate::policy::{self, TagPolicy};
use crate::registry::RepositoryRef;

/// The spec's tag rules and interval, validated.
pub(super) struct ValidatedRules {
    pub(super) policy: TagPolicy,
    pub(super) order: policy::Order,
    pub(super) interval: Duration,
    /// `spec.tags.platforms`: every written tag's image provides these (empty: any).
    pub(super) platforms: Vec<Platform>,
    /// `spec.windows`, parsed.
    pub(super) windows: Vec<imagewatch_engine::windows::Schedule>,
}

/// Step 1 for a watch of one repository (a group's member is one): its rules, then its
/// image.
pub(super) fn validate_single(
    watch: &ImageWatch,
) -> Result<(ValidatedRules, RepositoryRef), ReconcileError> {
    let rules = validate_rules(watch)?;
    let repo = RepositoryRef::parse(&watch.spec.image)
        .map_err(|e| ReconcileError::InvalidSpec(SpecError::invalid("spec.image", e)))?;
    Ok((rules, repo))
}

/// The tag rules and the interval.
pub(super) fn validate_rules(watch: &ImageWatch) -> Result<ValidatedRules, ReconcileError> {
    let spec = &watch.spec;
    let tags = spec.tags.clone().unwrap_or_default();
    let policy = TagPolicy::from_rules(&tags)
        .map_err(|e| ReconcileError::InvalidSpec(SpecError::invalid("spec.tags", e)))?;
    let order = policy.order();
    let Some(interval) = parse_duration(spec.interval_or_default()) else {
        return Err(ReconcileError::InvalidSpec(SpecError::not_a_duration(
            "spec.interval",
            spec.interval_or_default(),
        )));
    };
    // The CRD refuses malformed entries at apply; this guards objects stored before.
    let platforms = Platform::parse_all(tags.platforms.as_deref().unwrap_or(&[]))
        .map_err(|e| ReconcileError::InvalidSpec(SpecError::invalid("spec.tags.platforms", e)))?;
    let windows = imagewatch_engine::windows::parse(spec.windows.as_deref().unwrap_or(&[]))
        .map_err(|e| ReconcileError::InvalidSpec(SpecError::rule("spec.windows", e)))?;
    Ok(ValidatedRules {
        policy,
        order,
        interval,
        platforms,
        windows,
    })
}
