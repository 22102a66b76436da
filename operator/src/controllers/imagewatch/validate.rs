//! The validate step (pure): the spec alone — its image (one repository, or a pattern of
//! them), tag rules, interval, platforms and windows — checked before anything the watch
//! names is read. Hands on [`Validated`], or a `ReconcileError` that names the field. The
//! allow-list asks, which read the allow-list and AppProjects, are the first reads of the
//! dereference step that follows.

use imagewatch_crd::ImageWatch;

use super::members::{self, PatternImage};
use super::spec_rules::{ValidatedRules, validate_rules, validate_single};
use crate::controllers::ReconcileError;
use crate::error::SpecError;
use crate::registry::RepositoryRef;

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
