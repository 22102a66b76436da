//! Resource types of imagewatch: `ImageWatch` and `PromotionPolicy` (group `imagewatch.dev`,
//! version `v1alpha1`), their status, condition vocabulary and CRD generation.
//!
//! This crate does no I/O. The operator, the CLI and the tests share these types; the CRD YAML
//! in `charts/imagewatch/crds/` is generated from them (`imagewatch crds`, `just generate`) and a
//! test fails when the committed files drift.

// `#[kube(printcolumn(...))]` repeats its keys once per column by design.
#![allow(clippy::duplicated_attributes)]

pub mod common;
pub mod conditions;
pub mod imagewatch;
pub mod promotion;

pub use common::{CosignVerify, GitSource, KeylessVerify, RefusedTag, SecretRef, Verify};
pub use imagewatch::{
    AppliedImage, ArgocdSourceTarget, DigestMode, HelmTarget, ImageWatch, ImageWatchSpec,
    ImageWatchStatus, KustomizeTarget, LatestImage, RegistryCredentials, RegistryProvider,
    TagOrder, TagRules, Target, WorkloadTarget,
};
pub use promotion::{PromotionPolicy, PromotionPolicySpec, PromotionPolicyStatus};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// API group of every imagewatch resource.
pub const GROUP: &str = "imagewatch.dev";
/// Field manager used for every write the operator makes (status only).
pub const FIELD_MANAGER: &str = "imagewatch";

/// Both CustomResourceDefinitions, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![ImageWatch::crd(), PromotionPolicy::crd()]
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
