//! The validate step (pure): the spec alone — its image (one repository, or a pattern of
//! them), tag rules, interval, platforms and windows — checked before anything the watch
//! names is read. Hands on [`Validated`], or a `ReconcileError` that names the field. The
//! allow-list asks, which read the allow-list and AppProjects, are the first reads of the
//! dereference step that follows.

use std::time::Duration;

use imagewatch_crd::ImageWatch;
use imagewatch_engine::platforms::Platform;

use super::members::{self, PatternImage};
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

/// What a watch follows: one repository, or every repository a pattern matches.
pub(super) enum Followed {
    /// `spec.image` without `*`.
    Single(RepositoryRef),
    /// `spec.image` with `*` path segments (see `members.rs`).
    Pattern(PatternImage),
}

/// The spec of a watch, validated (step 1).
pub(super) struct Validated {
    pub(super) rules: ValidatedRules,
    pub(super) followed: Followed,
}

/// Step 1 (pure): the image (a pattern may not be grouped, and its target's `$n` must name
/// its `*`s), then the tag rules and interval.
pub(super) fn validate(watch: &ImageWatch) -> Result<Validated, ReconcileError> {
    let spec = &watch.spec;
    let pattern = members::parse_pattern_image(&spec.image)
        .map_err(|e| ReconcileError::InvalidSpec(SpecError::rule("spec.image", e)))?;
    match pattern {
        Some(pattern) => {
            if spec.group.as_deref().is_some_and(|g| !g.is_empty()) {
                return Err(ReconcileError::InvalidSpec(SpecError::GroupWithPattern {
                    image: spec.image.clone(),
                }));
            }
            members::check_references(&spec.target, &spec.image, pattern.wildcards())
                .map_err(|e| ReconcileError::InvalidSpec(SpecError::rule("spec.target", e)))?;
            Ok(Validated {
                rules: validate_rules(watch)?,
                followed: Followed::Pattern(pattern),
            })
        }
        None => validate_single(watch).map(|(rules, repo)| Validated {
            rules,
            followed: Followed::Single(repo),
        }),
    }
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
fn validate_rules(watch: &ImageWatch) -> Result<ValidatedRules, ReconcileError> {
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
