//! Resource types of imagewatch: `ImageWatch` and `PromotionPolicy` (group `imagewatch.dev`,
//! version `v1alpha1`), their status, condition vocabulary and CRD generation.
//!
//! This crate does no I/O. The operator, the CLI and the tests share these types; the CRD YAML
//! in `charts/imagewatch/crds/` is generated from them (`imagewatch crds`, `just generate`) and a
//! test fails when the committed files drift.
//!
//! The default feature `kube` adds the resource objects (`ImageWatch`, `PromotionPolicy`, from
//! `#[derive(CustomResource)]`), the CEL validation rules and CRD generation. Without it the
//! crate holds only the spec, status and condition types, with no kube dependency: the pure
//! core `imagewatch-engine` uses it that way.

// `#[kube(printcolumn(...))]` repeats its keys once per column by design.
#![allow(clippy::duplicated_attributes)]

pub mod common;
pub mod conditions;
pub mod imagewatch;
pub mod promotion;

pub use common::{
    ChangeRecord, CosignVerify, FailureNotified, GitPullRequest, GitSource, HappeningKind,
    KeylessVerify, Notification, NotificationType, PullRequestState, RefusedTag, SecretRef, Verify,
    Window, WindowKind,
};
#[cfg(feature = "kube")]
pub use imagewatch::ImageWatch;
pub use imagewatch::{
    AppliedImage, ArgocdSourceTarget, DigestMode, HeldChange, HelmTarget, ImageWatchSpec,
    ImageWatchStatus, KustomizeTarget, LatestImage, OnGitChange, RegistryCredentials,
    RegistryProvider, TagOrder, TagPick, TagRules, Target, WatchPullRequest, WorkloadTarget,
};
#[cfg(feature = "kube")]
pub use promotion::PromotionPolicy;
pub use promotion::{HeldImage, PromotionPolicySpec, PromotionPolicyStatus};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
#[cfg(feature = "kube")]
use kube::CustomResourceExt;

/// API group of every imagewatch resource.
pub const GROUP: &str = "imagewatch.dev";
/// Field manager used for every write the operator makes (status only).
pub const FIELD_MANAGER: &str = "imagewatch";

/// The `kubectl get CATEGORY` name that lists both kinds. It must differ from every plural,
/// singular and short name: kubectl expands a category before it resolves a resource, so a
/// category named `imagewatch` would turn `kubectl get imagewatch NAME` into a query over two
/// kinds ("you must specify only one resource").
pub const CATEGORY: &str = "imagewatch-all";

/// Both CustomResourceDefinitions, in a stable order, with descriptions as paragraphs.
#[cfg(feature = "kube")]
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![ImageWatch::crd(), PromotionPolicy::crd()]
        .into_iter()
        .map(with_paragraph_descriptions)
        .collect()
}

/// Rewrites every schema `description` with [`paragraphs`]. The descriptions come from `///`
/// comments, which are wrapped at the source's line width; `kubectl explain` wraps text itself,
/// and a hard break inside a sentence shows as a ragged line there.
#[cfg(feature = "kube")]
fn with_paragraph_descriptions(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn walk(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, child) in map.iter_mut() {
                    match child {
                        serde_json::Value::String(text) if key == "description" => {
                            *text = paragraphs(text);
                        }
                        _ => walk(child),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let Ok(mut json) = serde_json::to_value(&crd) else {
        return crd;
    };
    walk(&mut json);
    serde_json::from_value(json).unwrap_or(crd)
}

/// Joins the lines of each paragraph of a doc comment with single spaces. Paragraphs (separated
/// by an empty line) stay apart, and a list item (`- `, `* `, `1. `) or an indented line starts
/// a line of its own, as Markdown renders them.
pub fn paragraphs(text: &str) -> String {
    fn starts_own_line(line: &str) -> bool {
        let trimmed = line.trim_start();
        let numbered = trimmed
            .split_once(". ")
            .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        trimmed.starts_with("- ")
            || trimmed.starts_with("* ")
            || numbered
            || line.starts_with("    ")
    }
    let mut out = String::with_capacity(text.len());
    let mut blank_run = false;
    for line in text.trim().lines() {
        if line.trim().is_empty() {
            blank_run = true;
            continue;
        }
        let own_line = starts_own_line(line);
        if !out.is_empty() {
            out.push_str(match (blank_run, own_line) {
                (true, _) => "\n\n",
                (false, true) => "\n",
                (false, false) => " ",
            });
        }
        blank_run = false;
        out.push_str(if own_line {
            line.trim_end()
        } else {
            line.trim()
        });
    }
    out
}

/// File name (inside `charts/imagewatch/crds/`) for a generated CRD.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// Renders a CRD as the YAML committed in the chart (a header line, then the object).
pub fn render_crd_yaml(
    crd: &CustomResourceDefinition,
) -> Result<String, serde_saphyr::SerializeError> {
    let body = serde_saphyr::to_string(crd)?;
    Ok(format!(
        "# Generated from the Rust types in crd/ by `imagewatch crds` (`just generate`). Do not edit.\n{body}"
    ))
}

#[cfg(test)]
mod tests {
    use super::paragraphs;

    #[test]
    fn paragraphs_join_wrapped_lines_and_keep_breaks_that_mean_something() {
        assert_eq!(
            paragraphs(
                "Image repository to follow, e.g.\n`ghcr.io/org/app`.\n\nA pattern: one\nsegment."
            ),
            "Image repository to follow, e.g. `ghcr.io/org/app`.\n\nA pattern: one segment."
        );
        assert_eq!(
            paragraphs("One of:\n- `Tag`: the tag\n  continued\n- `Pin`: tag@digest"),
            "One of:\n- `Tag`: the tag continued\n- `Pin`: tag@digest"
        );
        assert_eq!(
            paragraphs("Steps:\n1. first\n2. second"),
            "Steps:\n1. first\n2. second"
        );
        assert_eq!(paragraphs("single line"), "single line");
    }
}
