//! The validate step (pure): the spec's tag rules, interval, platforms and windows, checked
//! before anything of the watch is read. Reads the spec alone; hands on [`ValidatedRules`] or
//! a `ReconcileError` that names the field. The allow-list asks, which read the allow-list
//! and AppProjects, are the first thing the dereference step does.

use std::time::Duration;

use imagewatch_crd::ImageWatch;
use imagewatch_engine::platforms::Platform;

use crate::controllers::ReconcileError;
use crate::controllers::parse_duration;
use crate::error::SpecError;
use crate::policy::{self, TagPolicy};

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
