//! Byte-minimal editing of container images in Kubernetes YAML manifests.
//!
//! This is how imagewatch writes a new image tag into a GitOps repository
//! without disturbing anything else in the file: comments, quoting, key
//! order, indentation, line endings, byte order marks and other documents
//! all stay byte-for-byte as they were, so the resulting commit diff is one
//! token wide.
//!
//! The flow, in module order:
//! 1. [`workload`]: the [`WorkloadTarget`] says which kind/name/container.
//! 2. `yaml` parses each file into a node tree whose spans are byte ranges.
//! 3. [`locate`] reads the current image from the files read from Git
//!    ([`find_workload_image`]), enforcing that exactly one place matches.
//! 4. [`image_ref`] computes the new reference ([`ImageRef::with_tag`]).
//! 5. [`edit`] emits the edit: it rewrites that one scalar token
//!    ([`replace_scalar`]) and checks the result ([`plan_workload_edit`]).
//! 6. `imagewatch set-image` (the binary's `setimage` module) walks a directory, plans
//!    with these functions and writes atomically.
//!
//! Everything up to and including [`edit`] is pure (no I/O), so the
//! controller can use it on blobs read from a Git tree.
//!
//! Other places than workload containers ([`TargetSpec`]: a Kustomize
//! `images:` entry, a Helm values key, an Argo CD `.argocd-source-<app>.yaml`,
//! setter marker comments) go through [`plan_edit`], which dispatches to one
//! module per kind (`kustomize`, `helm`, `argocd`, `setter`). Those may add or
//! remove whole lines (a missing Kustomize entry, a stale digest), done by
//! `patch` in the file's own layout and line endings; every such plan is
//! verified by planning again on its result.

mod argocd;
pub mod edit;
mod files;
mod helm;
pub mod image_ref;
mod kustomize;
pub mod locate;
mod patch;
mod setter;
pub mod target;
pub mod workload;
pub mod yaml;

#[cfg(test)]
mod golden_tests;

use std::fmt;
use std::path::PathBuf;

pub use edit::{
    ImageChange, Plan, PlannedEdit, plan_workload_edit, plan_workload_edit_with, replace_scalar,
};
/// A target path as the planners name files (no `./`, no trailing `/`).
pub use files::normalize as normalize_path;
pub use image_ref::{ImageRef, ImageRefError};
pub use locate::{Located, ScalarStyle, Search, find_workload_image};
pub use target::{ReadScope, TargetSpec, plan_edit, plan_edit_with};
pub use workload::{WorkloadKind, WorkloadTarget, WorkloadTargetError};
pub use yaml::YamlError;

/// How far an edit may reach beyond its target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EditOptions {
    /// Edit a value that other places alias (`image: &img nginx:1.0` … `image: *img`),
    /// changing every one of them. Off: such an edit is refused with
    /// [`EditError::SharedAnchor`], naming them.
    pub edit_shared_anchor: bool,
}

impl EditOptions {
    /// Refuses `plan` when it would change a value other places alias, unless allowed.
    fn check(self, plan: &Plan) -> Result<(), EditError> {
        match &plan.located {
            Some(located)
                if plan.edit.is_some()
                    && !located.shared_with.is_empty()
                    && !self.edit_shared_anchor =>
            {
                Err(EditError::SharedAnchor {
                    file: located.file.clone(),
                    path: located.path.clone(),
                    aliases: located.shared_with.clone(),
                })
            }
            _ => Ok(()),
        }
    }
}

/// A document inside one of the searched files.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DocLocation {
    /// The file name as given by the caller.
    pub file: String,
    /// Zero-based index of the YAML document in the file (`---` separated).
    /// Shown one-based to users ("document 1" is the first).
    pub document: usize,
    /// Zero-based index in `items` when the document is a `kind: List`.
    pub item: Option<usize>,
}

impl fmt::Display for DocLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (document {}", self.file, self.document + 1)?;
        if let Some(item) = self.item {
            write!(f, ", items[{item}]")?;
        }
        f.write_str(")")
    }
}

/// A container's `image` field: document plus the YAML path inside it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Site {
    pub location: DocLocation,
    /// Dotted path from the object root, e.g.
    /// `spec.template.spec.containers[0].image`.
    pub path: String,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}", self.location, self.path)
    }
}

/// A file that was left out of the search (it did not parse, or could not
/// be read). Callers should show these: a skipped file may be the one that
/// holds the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub file: String,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "skipped {}: {}", self.file, self.message)
    }
}

/// A workload that matched kind and name but has no usable container of the
/// requested name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadSummary {
    pub location: DocLocation,
    pub namespace: Option<String>,
    /// Names of its containers, then of its init containers.
    pub containers: Vec<String>,
    /// Extra detail, e.g. "container \"app\" has no image field".
    pub note: Option<String>,
}

/// Why the target could not be found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotFound {
    /// No object of the requested kind and name (in the requested namespace).
    NoWorkload {
        /// Namespaces the kind/name does exist in, when a namespace was
        /// requested and only other namespaces matched.
        other_namespaces: Vec<String>,
    },
    /// The workload exists but none of its copies has the container with an
    /// image field.
    NoContainer { workloads: Vec<WorkloadSummary> },
}

/// Errors of locating, planning and writing an image edit. The messages are
/// shown to users as they are, so each names the file and document involved.
/// Large fields are boxed to keep `Result<_, EditError>` small.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error("{}", describe_not_found(target, reason, skipped))]
    TargetNotFound {
        target: Box<WorkloadTarget>,
        reason: NotFound,
        /// Files skipped during the search; the target may be in one.
        skipped: Vec<Warning>,
    },
    #[error(
        "{target} is ambiguous: it matches {} places: {}; nothing was changed \
         (give a namespace, or narrow the files searched)",
        sites.len(),
        join(sites, "; ")
    )]
    Ambiguous {
        target: Box<WorkloadTarget>,
        sites: Vec<Site>,
    },
    /// The value to edit defines a YAML anchor that other places alias, so an
    /// edit would change them too.
    #[error(
        "{path} in {file} is a YAML anchor that {} other place(s) alias: {}; editing it would \
         change them too, so nothing was changed (edit each place on its own, or set \
         editSharedAnchor: true / --edit-shared-anchor to change all of them)",
        aliases.len(),
        aliases.join("; ")
    )]
    SharedAnchor {
        file: String,
        path: String,
        aliases: Vec<String>,
    },
    /// This kind of target cannot be edited by this version.
    #[error("{0}")]
    UnsupportedTarget(String),
    /// A file, key, entry or marker that a non-workload target names does
    /// not exist (and is not one that may be added).
    #[error("{what} was not found in {file}{}", skipped_note(skipped))]
    NotFoundIn {
        /// The file (or directory) searched.
        file: String,
        what: String,
        /// Files skipped during the search; the target may be in one.
        skipped: Vec<Warning>,
    },
    /// A file the target names does not exist.
    #[error("{what} {file} does not exist; nothing was changed")]
    MissingFile { file: String, what: String },
    /// The file exists but cannot be edited safely for this target.
    #[error("cannot edit {file}: {reason}; nothing was changed")]
    InvalidFile { file: String, reason: String },
    /// More than one place matches a non-workload target.
    #[error("{what} is ambiguous in {file}: {detail}; nothing was changed")]
    AmbiguousIn {
        file: String,
        what: String,
        detail: String,
    },
    /// The target holds only a tag, but the new image has none.
    #[error(
        "the new image {image:?} has no tag, but {place} holds only a tag; give an image with \
         a tag"
    )]
    NewImageWithoutTag { image: String, place: String },
    #[error("cannot edit the image of {target} in {site}: {reason}")]
    Unsupported {
        target: Box<WorkloadTarget>,
        site: Site,
        reason: String,
    },
    #[error(
        "the current image {current:?} of {target} in {site} is not a valid image reference, \
         so its tag cannot be replaced (use a full image instead of a tag): {source}"
    )]
    InvalidCurrentImage {
        target: Box<WorkloadTarget>,
        site: Box<Site>,
        current: String,
        source: ImageRefError,
    },
    #[error("invalid new image: {0}")]
    InvalidNewImage(ImageRefError),
    #[error("invalid target: {0}")]
    InvalidTarget(WorkloadTargetError),
    #[error(
        "the located image does not match the text of {file} (was the file changed after it \
         was searched?)"
    )]
    StaleLocation { file: String },
    #[error("self-check after editing {file} failed: {detail}; nothing was changed")]
    VerificationFailed { file: String, detail: String },
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn join<T: fmt::Display>(items: &[T], separator: &str) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(separator)
}

fn skipped_note(skipped: &[Warning]) -> String {
    if skipped.is_empty() {
        String::new()
    } else {
        format!(
            " [note: {} file(s) were skipped and not searched: {}]",
            skipped.len(),
            join(skipped, "; ")
        )
    }
}

fn quoted_list(items: &[String]) -> String {
    items
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn describe_not_found(target: &WorkloadTarget, reason: &NotFound, skipped: &[Warning]) -> String {
    let mut text = match reason {
        NotFound::NoWorkload { other_namespaces } => {
            let mut text = format!("no {} named {:?}", target.kind_name(), target.name);
            if let Some(ns) = target.namespace.as_deref().filter(|ns| !ns.is_empty()) {
                text.push_str(&format!(" in namespace {ns:?} (or without a namespace)"));
            }
            text.push_str(" was found in the manifests");
            if !other_namespaces.is_empty() {
                text.push_str(&format!(
                    "; it exists only in namespace(s) {}",
                    quoted_list(other_namespaces)
                ));
            }
            text
        }
        NotFound::NoContainer { workloads } => {
            let details = workloads
                .iter()
                .map(|w| {
                    let mut d = format!("{} has ", w.location);
                    if w.containers.is_empty() {
                        d.push_str("no containers");
                    } else {
                        d.push_str(&format!("containers {}", quoted_list(&w.containers)));
                    }
                    if let Some(note) = &w.note {
                        d.push_str(&format!(" ({note})"));
                    }
                    d
                })
                .collect::<Vec<_>>()
                .join("; ");
            format!(
                "{}/{} has no container or init container named {:?} with an image: {details}",
                target.kind_name(),
                target.name,
                target.container
            )
        }
    };
    text.push_str(&skipped_note(skipped));
    text
}
