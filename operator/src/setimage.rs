//! `imagewatch set-image`: the engine's planning on a local checkout. The directory walk
//! and the atomic writes live here, in the binary, so the engine does no file-system I/O.
//!
//! Place in the flow: the whole pipeline on a local checkout. It reads the
//! manifests under a directory (the "read current tag" step, from disk
//! instead of a Git object store), plans the edit with [`plan_workload_edit_with`]
//! ([`set_image`]) or [`plan_edit_with`] ([`set_target`], every target kind), and
//! emits it by rewriting the file(s) atomically. Nothing is written when the
//! image is already current, or when the target is missing or ambiguous.
//!
//! Directory walk: files ending in `.yaml` or `.yml` (any case), and files
//! named `Kustomization`, recursively, in sorted order. Entries whose name
//! starts with '.' (`.git`, `.github`, editor swap files) are skipped, and so
//! are symbolic links: following them could loop or edit a file outside the
//! directory. Files that cannot be read or are not UTF-8 are skipped with a
//! warning, like files that do not parse. A single-file scope (Helm values,
//! Argo CD source file) is read directly, hidden name or not.
//!
//! Several files (setter markers) are each replaced atomically, one after the
//! other, only after all of them were planned and verified (an I/O error
//! part-way leaves the ones already written).

use std::fmt;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::manifests::{
    EditError, EditOptions, ImageChange, ReadScope, TargetSpec, Warning, WorkloadTarget,
    normalize_path as normalize, plan_edit_with, plan_workload_edit_with,
};

/// What `set_image` did: `file` was rewritten from `old` to `new`
/// (`changed`), or already had the image (`!changed`, `old == new`) and was
/// left untouched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetImageOutcome {
    pub file: PathBuf,
    pub old: String,
    pub new: String,
    pub changed: bool,
    /// Files that were skipped while searching.
    pub warnings: Vec<Warning>,
}

impl fmt::Display for SetImageOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.changed {
            write!(
                f,
                "updated {}: {} -> {}",
                self.file.display(),
                self.old,
                self.new
            )
        } else {
            write!(
                f,
                "unchanged: {} already uses {}",
                self.file.display(),
                self.old
            )
        }
    }
}

/// Sets the image of `target` in the manifests under `dir` (a directory, or
/// a single manifest file).
pub fn set_image(
    dir: &Path,
    target: &WorkloadTarget,
    change: &ImageChange,
) -> Result<SetImageOutcome, EditError> {
    set_image_with(dir, target, change, EditOptions::default())
}

/// [`set_image`] with [`EditOptions`].
pub fn set_image_with(
    dir: &Path,
    target: &WorkloadTarget,
    change: &ImageChange,
    options: EditOptions,
) -> Result<SetImageOutcome, EditError> {
    let mut warnings = Vec::new();
    let manifests = collect_manifests(dir, &mut warnings)?;
    let files: Vec<(&str, &str)> = manifests
        .iter()
        .map(|m| (m.name.as_str(), m.contents.as_str()))
        .collect();

    let mut plan =
        plan_workload_edit_with(&files, target, change, options).map_err(|error| match error {
            // Files skipped while reading are as relevant as unparsable ones.
            EditError::TargetNotFound {
                target,
                reason,
                skipped,
            } => EditError::TargetNotFound {
                target,
                reason,
                skipped: warnings.iter().cloned().chain(skipped).collect(),
            },
            other => other,
        })?;
    warnings.append(&mut plan.warnings);

    let Some(manifest) = plan
        .located
        .as_ref()
        .and_then(|located| manifests.get(located.file_index))
    else {
        return Err(EditError::StaleLocation { file: plan.file });
    };
    let Some(edit) = plan.edit else {
        return Ok(SetImageOutcome {
            file: manifest.path.clone(),
            old: plan.current.clone(),
            new: plan.current,
            changed: false,
            warnings,
        });
    };
    write_atomically(&manifest.path, &edit.new_contents)?;
    Ok(SetImageOutcome {
        file: manifest.path.clone(),
        old: edit.old,
        new: edit.new,
        changed: true,
        warnings,
    })
}

/// One file written by [`set_target`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    pub file: PathBuf,
    /// The image (or tag) before and after; `old` is empty when the target
    /// was added.
    pub old: String,
    pub new: String,
    /// The file did not exist and was created.
    pub created: bool,
}

/// What [`set_target`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetTargetOutcome {
    /// The files written; empty when the image was already current.
    pub changes: Vec<FileChange>,
    /// The file holding the image (the first one for setter markers).
    pub file: PathBuf,
    /// The image before (empty when the target did not exist yet).
    pub current: String,
    /// Files that were skipped while searching, and other notes.
    pub warnings: Vec<Warning>,
}

impl fmt::Display for SetTargetOutcome {
    /// One line per file: `updated FILE: OLD -> NEW`, `updated FILE: added
    /// NEW`, `created FILE: NEW`; or `unchanged: FILE already uses CURRENT`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.changes.is_empty() {
            return write!(
                f,
                "unchanged: {} already uses {}",
                self.file.display(),
                self.current
            );
        }
        for (i, change) in self.changes.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            let file = change.file.display();
            if change.created {
                write!(f, "created {file}: {}", change.new)?;
            } else if change.old.is_empty() {
                write!(f, "updated {file}: added {}", change.new)?;
            } else {
                write!(f, "updated {file}: {} -> {}", change.old, change.new)?;
            }
        }
        Ok(())
    }
}

/// Sets the image of `target` in the files under `root`, the directory the
/// target's paths are relative to (the repository root, or any directory
/// when the paths are empty). Reads what [`TargetSpec::scope`] names, plans
/// with [`plan_edit_with`], and writes the planned files. Nothing is written
/// unless every file was planned and verified; only an I/O error part-way
/// through several files (setter markers) can leave some of them written.
pub fn set_target(
    root: &Path,
    target: &TargetSpec,
    change: &ImageChange,
) -> Result<SetTargetOutcome, EditError> {
    set_target_with(root, target, change, EditOptions::default())
}

/// [`set_target`] with [`EditOptions`].
pub fn set_target_with(
    root: &Path,
    target: &TargetSpec,
    change: &ImageChange,
    options: EditOptions,
) -> Result<SetTargetOutcome, EditError> {
    let mut warnings = Vec::new();
    let manifests = match target.scope() {
        ReadScope::Dir(dir) => {
            let prefix = normalize(&dir);
            let mut manifests = collect_manifests(&root.join(&prefix), &mut warnings)?;
            if !prefix.is_empty() {
                for m in &mut manifests {
                    m.name = format!("{prefix}/{}", m.name);
                }
                for w in &mut warnings {
                    w.file = format!("{prefix}/{}", w.file);
                }
            }
            manifests
        }
        ReadScope::File(file) => {
            let name = normalize(&file);
            let path = root.join(&name);
            match fs::read(&path) {
                Ok(bytes) => vec![Manifest {
                    contents: String::from_utf8(bytes).map_err(|_| EditError::InvalidFile {
                        file: name.clone(),
                        reason: "not valid UTF-8".to_owned(),
                    })?,
                    path,
                    name,
                }],
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(io_error("read", &path)(e)),
            }
        }
    };
    let files: Vec<(&str, &str)> = manifests
        .iter()
        .map(|m| (m.name.as_str(), m.contents.as_str()))
        .collect();
    // Messages name files as paths on disk.
    let shown = |name: String| {
        if name == "." {
            root.display().to_string()
        } else {
            root.join(name).display().to_string()
        }
    };
    let plan = plan_edit_with(&files, target, change, options).map_err(|error| match error {
        // Files skipped while reading are as relevant as unparsable ones.
        EditError::TargetNotFound {
            target,
            reason,
            skipped,
        } => EditError::TargetNotFound {
            target,
            reason,
            skipped: warnings.iter().cloned().chain(skipped).collect(),
        },
        EditError::NotFoundIn {
            file,
            what,
            skipped,
        } => EditError::NotFoundIn {
            file: shown(file),
            what,
            skipped: warnings.iter().cloned().chain(skipped).collect(),
        },
        EditError::MissingFile { file, what } => EditError::MissingFile {
            file: shown(file),
            what,
        },
        EditError::InvalidFile { file, reason } => EditError::InvalidFile {
            file: shown(file),
            reason,
        },
        EditError::AmbiguousIn { file, what, detail } => EditError::AmbiguousIn {
            file: shown(file),
            what,
            detail,
        },
        other => other,
    })?;
    warnings.extend(plan.warnings.iter().cloned());

    let path_of = |name: &str| {
        manifests
            .iter()
            .find(|m| m.name == name)
            .map_or_else(|| root.join(name), |m| m.path.clone())
    };
    // Check every destination before writing anything.
    for edit in plan.edits() {
        if edit.creates_file {
            let path = path_of(&edit.file);
            let parent = path.parent().unwrap_or_else(|| Path::new("."));
            if !parent.as_os_str().is_empty() && !parent.is_dir() {
                return Err(EditError::MissingFile {
                    file: parent.display().to_string(),
                    what: "the directory".to_owned(),
                });
            }
        }
    }
    let mut changes = Vec::new();
    for edit in plan.edits() {
        let path = path_of(&edit.file);
        if edit.creates_file {
            write_new(&path, &edit.new_contents)?;
        } else {
            write_atomically(&path, &edit.new_contents)?;
        }
        changes.push(FileChange {
            file: path,
            old: edit.old.clone(),
            new: edit.new.clone(),
            created: edit.creates_file,
        });
    }
    Ok(SetTargetOutcome {
        changes,
        file: path_of(&plan.file),
        current: plan.current,
        warnings,
    })
}

struct Manifest {
    path: PathBuf,
    /// Path relative to the search root, '/'-separated, for messages.
    name: String,
    contents: String,
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> EditError {
    let path = path.to_path_buf();
    move |source| EditError::Io {
        action,
        path,
        source,
    }
}

fn is_manifest_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.ends_with(".yaml") || lower.ends_with(".yml") || name == "Kustomization"
}

fn collect_manifests(root: &Path, warnings: &mut Vec<Warning>) -> Result<Vec<Manifest>, EditError> {
    let metadata = fs::metadata(root).map_err(io_error("read", root))?;
    let mut manifests = Vec::new();
    if metadata.is_file() {
        let name = root.file_name().map_or_else(
            || root.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        read_manifest(root.to_path_buf(), name, &mut manifests, warnings);
        return Ok(manifests);
    }
    // An explicit stack rather than recursion: depth is bounded by the file
    // system, not by our call stack.
    let mut pending = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = pending.pop() {
        let mut entries = fs::read_dir(&dir)
            .map_err(io_error("read directory", &dir))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(io_error("read directory", &dir))?;
        entries.sort_by_key(|e| e.file_name());
        let mut subdirs = Vec::new();
        for entry in entries {
            let file_name = entry.file_name();
            let file_name = file_name.to_string_lossy();
            if file_name.starts_with('.') {
                continue;
            }
            let name = format!("{prefix}{file_name}");
            let file_type = entry
                .file_type()
                .map_err(io_error("inspect", &entry.path()))?;
            if file_type.is_symlink() {
                if is_manifest_name(&file_name) {
                    warnings.push(Warning {
                        file: name,
                        message: "symbolic links are not followed".to_owned(),
                    });
                }
            } else if file_type.is_dir() {
                subdirs.push((entry.path(), format!("{name}/")));
            } else if file_type.is_file() && is_manifest_name(&file_name) {
                read_manifest(entry.path(), name, &mut manifests, warnings);
            }
        }
        // Reversed so that popping visits subdirectories in sorted order.
        pending.extend(subdirs.into_iter().rev());
    }
    Ok(manifests)
}

fn read_manifest(
    path: PathBuf,
    name: String,
    out: &mut Vec<Manifest>,
    warnings: &mut Vec<Warning>,
) {
    match fs::read(&path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(contents) => out.push(Manifest {
                path,
                name,
                contents,
            }),
            Err(_) => warnings.push(Warning {
                file: name,
                message: "not valid UTF-8".to_owned(),
            }),
        },
        Err(error) => warnings.push(Warning {
            file: name,
            message: format!("cannot be read: {error}"),
        }),
    }
}

/// Replaces `path` with `contents` so that readers see either the old or the
/// new file, never a partial one: write a temporary file in the same
/// directory (same file system, so the rename is atomic), give it the
/// original's permissions, flush it to disk, and rename it over the original.
fn write_atomically(path: &Path, contents: &str) -> Result<(), EditError> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    let permissions = fs::metadata(path)
        .map_err(io_error("read", path))?
        .permissions();
    let mut temp = tempfile::Builder::new()
        .prefix(".imagewatch-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(io_error("create a temporary file in", dir))?;
    temp.write_all(contents.as_bytes())
        .map_err(io_error("write a temporary file for", path))?;
    temp.as_file()
        .set_permissions(permissions)
        .map_err(io_error("set permissions on a temporary file for", path))?;
    temp.as_file()
        .sync_all()
        .map_err(io_error("flush a temporary file for", path))?;
    temp.persist(path)
        .map_err(|e| io_error("replace", path)(e.error))?;
    Ok(())
}

/// Creates `path` with `contents`, atomically and without replacing a file
/// that appeared meanwhile. Readable by everyone, like files made by hand.
fn write_new(path: &Path, contents: &str) -> Result<(), EditError> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    let mut temp = tempfile::Builder::new()
        .prefix(".imagewatch-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(io_error("create a temporary file in", dir))?;
    temp.write_all(contents.as_bytes())
        .map_err(io_error("write a temporary file for", path))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        temp.as_file()
            .set_permissions(fs::Permissions::from_mode(0o644))
            .map_err(io_error("set permissions on a temporary file for", path))?;
    }
    temp.as_file()
        .sync_all()
        .map_err(io_error("flush a temporary file for", path))?;
    temp.persist_noclobber(path)
        .map_err(|e| io_error("create", path)(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifests::{TargetSpec, WorkloadKind};

    const WEB: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web # the frontend
spec:
  template:
    spec:
      containers:
        - name: app
          image: registry.example.com/web:1.0 # bumped by imagewatch
";

    fn write(dir: &Path, rel: &str, contents: &str) -> PathBuf {
        let path = dir.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, contents).unwrap();
        path
    }

    fn web() -> WorkloadTarget {
        WorkloadTarget::new(WorkloadKind::Deployment, "web", "app")
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(d) = pending.pop() {
            for e in fs::read_dir(d).unwrap() {
                let e = e.unwrap();
                if e.file_type().unwrap().is_dir() {
                    pending.push(e.path());
                }
                names.push(e.path().strip_prefix(dir).unwrap().display().to_string());
            }
        }
        names.sort();
        names
    }

    #[test]
    fn rewrites_only_the_image_and_skips_hidden_dirs() {
        let tmp = tempfile::tempdir().unwrap();
        let path = write(tmp.path(), "apps/web/deploy.yaml", WEB);
        // Same workload in .git must not count as a second match.
        let hidden = write(tmp.path(), ".git/objects/copy.yaml", WEB);
        write(tmp.path(), "apps/readme.txt", WEB);
        write(tmp.path(), "apps/broken.yml", "a: b: c\n");

        let outcome = set_image(tmp.path(), &web(), &ImageChange::Tag("1.1".into())).unwrap();
        assert_eq!(
            outcome.to_string(),
            format!(
                "updated {}: registry.example.com/web:1.0 -> registry.example.com/web:1.1",
                path.display()
            )
        );
        let SetImageOutcome {
            file,
            old,
            new,
            changed,
            warnings,
        } = outcome;
        assert!(changed);
        assert_eq!(file, path);
        assert_eq!(old, "registry.example.com/web:1.0");
        assert_eq!(new, "registry.example.com/web:1.1");
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].file, "apps/broken.yml");
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            WEB.replace("web:1.0", "web:1.1")
        );
        assert_eq!(fs::read_to_string(&hidden).unwrap(), WEB);
        // No temporary file is left behind.
        assert!(
            !listing(tmp.path())
                .iter()
                .any(|n| n.contains(".imagewatch-"))
        );
    }

    #[test]
    fn unchanged_writes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let path = write(tmp.path(), "deploy.yaml", WEB);
        let before = fs::metadata(&path).unwrap().modified().unwrap();
        let outcome = set_image(
            tmp.path(),
            &web(),
            &ImageChange::Image("registry.example.com/web:1.0".into()),
        )
        .unwrap();
        assert_eq!(
            outcome,
            SetImageOutcome {
                file: path.clone(),
                old: "registry.example.com/web:1.0".into(),
                new: "registry.example.com/web:1.0".into(),
                changed: false,
                warnings: vec![],
            }
        );
        assert!(outcome.to_string().starts_with("unchanged: "));
        assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), before);
    }

    #[test]
    fn ambiguous_and_missing_targets_write_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let a = write(tmp.path(), "a/deploy.yaml", WEB);
        let b = write(tmp.path(), "b/deploy.yml", WEB);
        let err = set_image(tmp.path(), &web(), &ImageChange::Tag("2".into())).unwrap_err();
        assert_eq!(
            err.to_string(),
            "container \"app\" of Deployment/web is ambiguous: it matches 2 places: \
             a/deploy.yaml (document 1) at spec.template.spec.containers[0].image; \
             b/deploy.yml (document 1) at spec.template.spec.containers[0].image; nothing was \
             changed (give a namespace, or narrow the files searched)"
        );
        let missing = WorkloadTarget::new(WorkloadKind::Deployment, "web", "nope");
        let err = set_image(tmp.path(), &missing, &ImageChange::Tag("2".into())).unwrap_err();
        assert!(matches!(err, EditError::TargetNotFound { .. }), "{err}");
        assert_eq!(fs::read_to_string(a).unwrap(), WEB);
        assert_eq!(fs::read_to_string(b).unwrap(), WEB);
    }

    #[test]
    fn single_file_path_is_accepted() {
        let tmp = tempfile::tempdir().unwrap();
        let path = write(tmp.path(), "deploy.yaml", WEB);
        let outcome = set_image(&path, &web(), &ImageChange::Tag("3".into())).unwrap();
        assert_eq!(outcome.file, path);
        assert!(
            fs::read_to_string(&path)
                .unwrap()
                .contains("web:3 # bumped")
        );
    }

    #[test]
    fn unreadable_inputs_are_warnings_or_errors() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), "deploy.yaml", WEB);
        fs::write(tmp.path().join("binary.yaml"), [0xff, 0xfe, 0x00]).unwrap();
        let outcome = set_image(tmp.path(), &web(), &ImageChange::Tag("4".into())).unwrap();
        assert_eq!(
            outcome.warnings,
            [Warning {
                file: "binary.yaml".into(),
                message: "not valid UTF-8".into()
            }]
        );

        let missing = tmp.path().join("does-not-exist");
        let err = set_image(&missing, &web(), &ImageChange::Tag("4".into())).unwrap_err();
        assert!(matches!(err, EditError::Io { action: "read", .. }), "{err}");
    }

    #[test]
    fn skipped_files_are_named_when_the_target_is_missing() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("binary.yaml"), [0xff]).unwrap();
        write(tmp.path(), "bad.yaml", "[\n");
        let err = set_image(tmp.path(), &web(), &ImageChange::Tag("4".into())).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("2 file(s) were skipped"), "{text}");
        assert!(
            text.contains("skipped binary.yaml: not valid UTF-8"),
            "{text}"
        );
        assert!(text.contains("skipped bad.yaml: invalid YAML"), "{text}");
    }

    #[cfg(unix)]
    #[test]
    fn permissions_are_preserved_and_symlinks_not_followed() {
        use std::os::unix::fs::{PermissionsExt, symlink};
        let tmp = tempfile::tempdir().unwrap();
        let path = write(tmp.path(), "deploy.yaml", WEB);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        let outside = tempfile::tempdir().unwrap();
        let other = write(outside.path(), "other.yaml", &WEB.replace("web", "api"));
        symlink(&other, tmp.path().join("link.yaml")).unwrap();
        symlink(outside.path(), tmp.path().join("linked-dir")).unwrap();

        let outcome = set_image(tmp.path(), &web(), &ImageChange::Tag("5".into())).unwrap();
        assert!(outcome.changed);
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        assert_eq!(
            outcome.warnings,
            [Warning {
                file: "link.yaml".into(),
                message: "symbolic links are not followed".into()
            }]
        );

        let api = WorkloadTarget::new(WorkloadKind::Deployment, "api", "app");
        assert!(set_image(tmp.path(), &api, &ImageChange::Tag("5".into())).is_err());
        assert_eq!(
            fs::read_to_string(other).unwrap(),
            WEB.replace("web", "api")
        );
    }

    fn spec_kustomize(path: &str) -> TargetSpec {
        TargetSpec::Kustomize {
            path: path.into(),
            image: "web".into(),
        }
    }

    #[test]
    fn set_target_kustomize_in_a_subdirectory() {
        let tmp = tempfile::tempdir().unwrap();
        let text = "resources:\n- deploy.yaml\nimages:\n- name: web\n  newTag: v1\n";
        let path = write(tmp.path(), "apps/web/kustomization.yaml", text);
        write(tmp.path(), "apps/web/deploy.yaml", WEB);
        let outcome = set_target(
            tmp.path(),
            &spec_kustomize("apps/web"),
            &ImageChange::Tag("v2".into()),
        )
        .unwrap();
        assert_eq!(
            outcome.to_string(),
            format!("updated {}: web:v1 -> web:v2", path.display())
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), text.replace("v1", "v2"));
        let again = set_target(
            tmp.path(),
            &spec_kustomize("apps/web"),
            &ImageChange::Tag("v2".into()),
        )
        .unwrap();
        assert!(again.changes.is_empty());
        assert_eq!(
            again.to_string(),
            format!("unchanged: {} already uses web:v2", path.display())
        );
        // A file named `Kustomization` is found too.
        let other = write(tmp.path(), "other/Kustomization", "images: []\n");
        let outcome = set_target(
            tmp.path(),
            &spec_kustomize("other"),
            &ImageChange::Tag("v3".into()),
        )
        .unwrap();
        assert_eq!(
            outcome.to_string(),
            format!("updated {}: added web:v3", other.display())
        );
    }

    #[cfg(unix)]
    #[test]
    fn set_target_creates_the_argocd_source_file() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let spec = TargetSpec::ArgocdSource {
            path: "apps/web".into(),
            application: "web".into(),
            image: "web".into(),
        };
        let change = ImageChange::Image("ghcr.io/acme/web:v1".into());
        let err = set_target(tmp.path(), &spec, &change).unwrap_err();
        assert!(
            matches!(err, EditError::MissingFile { ref what, .. } if what == "the directory"),
            "{err}"
        );
        fs::create_dir_all(tmp.path().join("apps/web")).unwrap();
        let outcome = set_target(tmp.path(), &spec, &change).unwrap();
        let path = tmp.path().join("apps/web/.argocd-source-web.yaml");
        assert_eq!(
            outcome.to_string(),
            format!("created {}: ghcr.io/acme/web:v1", path.display())
        );
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "kustomize:\n  images:\n  - web=ghcr.io/acme/web:v1\n"
        );
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        assert!(
            set_target(tmp.path(), &spec, &change)
                .unwrap()
                .changes
                .is_empty()
        );
        assert!(
            !listing(tmp.path())
                .iter()
                .any(|n| n.contains(".imagewatch-"))
        );
    }

    #[test]
    fn set_target_writes_every_setter_file_or_none() {
        let tmp = tempfile::tempdir().unwrap();
        let a_text = "image: acme/web:v1 # {\"$imagewatch\": \"apps:web\"}\n";
        let b_text = "tag: v1 # {\"$imagewatch\": \"apps:web:tag\"}\n";
        let a = write(tmp.path(), "a.yaml", a_text);
        let b = write(tmp.path(), "sub/b.yml", b_text);
        let spec = TargetSpec::Setter {
            path: String::new(),
            marker: "apps:web".into(),
        };
        let outcome = set_target(tmp.path(), &spec, &ImageChange::Tag("v2".into())).unwrap();
        assert_eq!(
            outcome.to_string(),
            format!(
                "updated {}: acme/web:v1 -> acme/web:v2\nupdated {}: v1 -> v2",
                a.display(),
                b.display()
            )
        );
        assert_eq!(fs::read_to_string(&a).unwrap(), a_text.replace("v1", "v2"));
        assert_eq!(fs::read_to_string(&b).unwrap(), b_text.replace("v1", "v2"));
        // A digest-only image cannot go into the tag marker: nothing is written.
        let err = set_target(
            tmp.path(),
            &spec,
            &ImageChange::Image(
                "acme/web@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
                    .into(),
            ),
        )
        .unwrap_err();
        assert!(matches!(err, EditError::NewImageWithoutTag { .. }), "{err}");
        assert_eq!(fs::read_to_string(&a).unwrap(), a_text.replace("v1", "v2"));
    }

    #[test]
    fn set_target_helm_errors_name_the_path_and_write_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let text = "image:\n  tag: v1\n";
        let path = write(tmp.path(), "values.yaml", text);
        let spec = |key: &str| TargetSpec::Helm {
            file: "values.yaml".into(),
            key: key.into(),
        };
        let err = set_target(
            tmp.path(),
            &spec("image.tga"),
            &ImageChange::Tag("v2".into()),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the key path \"image.tga\" (image has no key \"tga\") was not found in {}",
                path.display()
            )
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), text);
        let outcome = set_target(
            tmp.path(),
            &spec("image.tag"),
            &ImageChange::Tag("v2".into()),
        )
        .unwrap();
        assert_eq!(
            outcome.to_string(),
            format!("updated {}: v1 -> v2", path.display())
        );
    }
}
