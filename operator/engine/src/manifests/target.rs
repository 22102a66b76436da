//! Every kind of place in Git that can hold an image, and one entry point to plan an edit
//! of any of them: the controller's git writer reads the [`ReadScope`] of a target from the
//! tree, then calls [`plan_edit`].

use super::files::join;
use super::{
    EditError, EditOptions, ImageChange, Plan, WorkloadTarget, argocd, helm, kustomize,
    plan_workload_edit, plan_workload_edit_with, setter, yaml,
};

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
        /// Key path of the tag (or of a full image: a value containing `/` or `:`);
        /// `[N]` indexes lists (`sidecars[0].image.tag`), `\.` is a dot inside a key.
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
            } => ReadScope::File(Self::argocd_file(path, application)),
        }
    }
}

impl TargetSpec {
    /// The Argo CD source file of an [`TargetSpec::ArgocdSource`] target.
    fn argocd_file(path: &str, application: &str) -> String {
        join(path, &format!(".argocd-source-{application}.yaml"))
    }
}

/// Plans the edit of `target` in `files` (`(repo-relative path, contents)`, as read for
/// [`TargetSpec::scope`]; a [`ReadScope::File`] that does not exist is simply absent).
/// Pure. See [`super::edit`] for how to read the [`Plan`], and each kind's module
/// documentation for its exact semantics:
/// * Workload: [`super::locate`] and [`super::edit`];
/// * Kustomize: the `images:` entry named `image` of `path`'s kustomization;
/// * Helm: the scalar at `key` of `file` (a tag, or a full image);
/// * ArgocdSource: `kustomize.images` (or matching `helm.parameters`) of
///   `.argocd-source-<application>.yaml`, created when missing;
/// * Setter: every value marked `# {"$imagewatch": "<marker>[:tag|:name]"}`.
///
/// Every edit except a workload's (which checks itself) is verified by
/// planning again on the edited files, which must find nothing left to do.
pub fn plan_edit<N: AsRef<str>>(
    files: &[(N, &str)],
    target: &TargetSpec,
    change: &ImageChange,
) -> Result<Plan, EditError> {
    plan_edit_with(files, target, change, EditOptions::default())
}

/// [`plan_edit`] with [`EditOptions`]: by default an edit of a value that other places
/// alias is refused ([`EditError::SharedAnchor`]).
pub fn plan_edit_with<N: AsRef<str>>(
    files: &[(N, &str)],
    target: &TargetSpec,
    change: &ImageChange,
    options: EditOptions,
) -> Result<Plan, EditError> {
    if let TargetSpec::Workload { target, .. } = target {
        return plan_workload_edit_with(files, target, change, options);
    }
    change.validate().map_err(EditError::InvalidNewImage)?;
    let plan = plan_unverified(files, target, change)?;
    options.check(&plan)?;
    verify(files, target, change, &plan)?;
    Ok(plan)
}

fn plan_unverified<N: AsRef<str>>(
    files: &[(N, &str)],
    target: &TargetSpec,
    change: &ImageChange,
) -> Result<Plan, EditError> {
    match target {
        TargetSpec::Workload { target, .. } => plan_workload_edit(files, target, change),
        TargetSpec::Kustomize { path, image } => kustomize::plan(files, path, image, change),
        TargetSpec::Helm { file, key } => helm::plan(files, file, key, change),
        TargetSpec::ArgocdSource {
            path,
            application,
            image,
        } => argocd::plan(
            files,
            &TargetSpec::argocd_file(path, application),
            image,
            change,
        ),
        TargetSpec::Setter { path, marker } => setter::plan(files, path, marker, change),
    }
}

/// Plans again on the edited files: every edited file must parse, and
/// nothing may be left to change (the new image reads back).
fn verify<N: AsRef<str>>(
    files: &[(N, &str)],
    target: &TargetSpec,
    change: &ImageChange,
    plan: &Plan,
) -> Result<(), EditError> {
    let Some(first) = &plan.edit else {
        return Ok(());
    };
    let fail = |file: &str, detail: String| EditError::VerificationFailed {
        file: file.to_owned(),
        detail,
    };
    let mut edited: Vec<(&str, &str)> = files.iter().map(|(n, t)| (n.as_ref(), *t)).collect();
    for edit in plan.edits() {
        yaml::parse_stream(&edit.new_contents)
            .map_err(|e| fail(&edit.file, format!("the edited file does not parse: {e}")))?;
        if edit.creates_file {
            edited.push((&edit.file, &edit.new_contents));
        } else {
            let slot = edited
                .get_mut(edit.file_index)
                .filter(|(name, _)| *name == edit.file)
                .ok_or_else(|| EditError::StaleLocation {
                    file: edit.file.clone(),
                })?;
            slot.1 = &edit.new_contents;
        }
    }
    let again = plan_unverified(&edited, target, change)
        .map_err(|e| fail(&first.file, format!("the target cannot be read back: {e}")))?;
    if let Some(more) = again.edits().next() {
        return Err(fail(
            &more.file,
            format!(
                "the image reads {:?} afterwards, so a second run would change it again",
                more.old
            ),
        ));
    }
    // Setter plans describe several values; the others must read `new`.
    if !matches!(target, TargetSpec::Setter { .. }) && again.current != first.new {
        return Err(fail(
            &first.file,
            format!(
                "the image reads {:?} afterwards instead of {:?}",
                again.current, first.new
            ),
        ));
    }
    Ok(())
}
