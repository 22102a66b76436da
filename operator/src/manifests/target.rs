//! Every kind of place in Git that can hold an image, and one entry point to plan an edit
//! of any of them: the controller's git writer reads the [`ReadScope`] of a target from the
//! tree, then calls [`plan_edit`].

use super::{EditError, ImageChange, Plan, WorkloadTarget, plan_workload_edit};

/// A place in the repository that holds one image reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TargetSpec {
    /// A workload's container in any YAML file under `path`.
    Workload {
        /// Directory searched recursively.
        path: String,
        /// Kind/name/container.
        target: WorkloadTarget,
    },
    /// The `images[]` entry named `image` of the kustomization in `path`.
    Kustomize {
        /// Directory holding `kustomization.yaml` (or `.yml`, or `Kustomization`).
        path: String,
        /// The entry's `name`.
        image: String,
    },
    /// A dotted key path (`canary.image.tag`) in a Helm values file.
    Helm {
        /// The values file.
        file: String,
        /// Key path of the tag.
        key: String,
    },
    /// Argo CD's `.argocd-source-<application>.yaml` in `path`.
    ArgocdSource {
        /// Directory of the Application's source.
        path: String,
        /// Application name.
        application: String,
        /// Image name as the Application's kustomize/helm knows it.
        image: String,
    },
    /// Setter marker comments (`# {"$imagewatch": "<namespace>:<name>"}`) in files under `path`.
    Setter {
        /// Directory searched recursively.
        path: String,
        /// `<namespace>:<name>` of the watch.
        marker: String,
    },
}

/// What must be read from the tree to plan an edit of a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadScope {
    /// Every YAML file under a directory (recursively).
    Dir(String),
    /// One file, which may not exist yet.
    File(String),
}

impl TargetSpec {
    /// What to read.
    pub fn scope(&self) -> ReadScope {
        match self {
            Self::Workload { path, .. }
            | Self::Setter { path, .. }
            | Self::Kustomize { path, .. } => ReadScope::Dir(path.clone()),
            Self::Helm { file, .. } => ReadScope::File(file.clone()),
            Self::ArgocdSource {
                path, application, ..
            } => ReadScope::File(join(path, &format!(".argocd-source-{application}.yaml"))),
        }
    }
}

fn join(dir: &str, name: &str) -> String {
    let dir = dir.trim_matches('/');
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Plans the edit of `target` in `files` (`(repo-relative path, contents)`, as read for
/// [`TargetSpec::scope`]). Pure.
pub fn plan_edit<N: AsRef<str>>(
    files: &[(N, &str)],
    target: &TargetSpec,
    change: &ImageChange,
) -> Result<Plan, EditError> {
    match target {
        TargetSpec::Workload { target, .. } => plan_workload_edit(files, target, change),
        other => Err(EditError::UnsupportedTarget(format!(
            "target {other:?} is not supported yet"
        ))),
    }
}
