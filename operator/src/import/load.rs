//! The I/O edge of `imagewatch import`: reading a directory of manifests, listing the same
//! kinds from a cluster, and writing rewritten markers back. Everything it reads goes through
//! the pure [`super::read_file`] and [`super::translate`].

use std::path::{Path, PathBuf};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;

use super::model::{Imported, Inputs, Severity, SourceObject};
use super::read_file;

/// Largest file read; manifests are far smaller, anything bigger is not one.
const MAX_FILE: u64 = 4 * 1024 * 1024;

/// Every `*.yaml` / `*.yml` file under `dir` (not following symlinks, skipping `.git`), as
/// paths relative to `dir` with `/` separators, sorted.
///
/// # Errors
///
/// When `dir` cannot be read.
pub fn yaml_files(dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            let path = entry.path();
            if kind.is_dir() {
                if entry.file_name() != ".git" {
                    pending.push(path);
                }
                continue;
            }
            let name = entry.file_name().to_string_lossy().to_ascii_lowercase();
            if kind.is_file() && (name.ends_with(".yaml") || name.ends_with(".yml")) {
                let relative = path
                    .strip_prefix(dir)
                    .unwrap_or(&path)
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/");
                out.push((relative, path));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Reads the files under `dir` into `inputs`; unreadable files become notes.
///
/// # Errors
///
/// When `dir` itself cannot be listed.
pub fn read_dir(dir: &Path, inputs: &mut Inputs, out: &mut Imported) -> std::io::Result<()> {
    for (relative, path) in yaml_files(dir)? {
        let too_big = std::fs::metadata(&path).is_ok_and(|m| m.len() > MAX_FILE);
        if too_big {
            out.note(
                &relative,
                Severity::NotTranslated,
                "larger than 4 MiB; not read as a manifest",
            );
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(text) => read_file(&relative, &text, inputs, out),
            Err(error) => out.note(
                &relative,
                Severity::NotTranslated,
                format!("cannot be read ({error})"),
            ),
        }
    }
    Ok(())
}

/// The kinds `--from-cluster` lists: (group, version, kind, plural).
const KINDS: &[(&str, &str, &str, &str)] = &[
    ("apps", "v1", "Deployment", "deployments"),
    ("apps", "v1", "StatefulSet", "statefulsets"),
    ("apps", "v1", "DaemonSet", "daemonsets"),
    ("batch", "v1", "CronJob", "cronjobs"),
    (
        "image.toolkit.fluxcd.io",
        "v1",
        "ImageRepository",
        "imagerepositories",
    ),
    (
        "image.toolkit.fluxcd.io",
        "v1",
        "ImagePolicy",
        "imagepolicies",
    ),
    (
        "image.toolkit.fluxcd.io",
        "v1beta2",
        "ImageRepository",
        "imagerepositories",
    ),
    (
        "image.toolkit.fluxcd.io",
        "v1beta2",
        "ImagePolicy",
        "imagepolicies",
    ),
    ("argoproj.io", "v1alpha1", "Application", "applications"),
    (
        "argocd-image-updater.argoproj.io",
        "v1alpha1",
        "ImageUpdater",
        "imageupdaters",
    ),
];

/// Lists [`KINDS`] in every namespace the client may read. A kind whose API is not served
/// (its CRD is not installed, or that version is not) is skipped; a Flux kind served at `v1`
/// is not read again at `v1beta2`.
///
/// # Errors
///
/// Only for a failure that is not "not found": the listing is then incomplete.
pub async fn read_cluster(
    client: kube::Client,
    inputs: &mut Inputs,
    out: &mut Imported,
) -> Result<(), kube::Error> {
    let mut served: Vec<&str> = Vec::new();
    for &(group, version, kind, plural) in KINDS {
        if served.contains(&kind) {
            continue;
        }
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let list = match api.list(&ListParams::default()).await {
            Ok(list) => list,
            Err(kube::Error::Api(status)) if status.code == 404 => continue,
            Err(kube::Error::Api(status)) if status.code == 403 => {
                out.note(
                    &format!("{kind}.{group}"),
                    Severity::NotTranslated,
                    format!("listing is forbidden ({})", status.message),
                );
                continue;
            }
            Err(error) => return Err(error),
        };
        served.push(kind);
        for item in list.items {
            let Ok(mut value) = serde_json::to_value(&item) else {
                continue;
            };
            // List items do not always carry their type.
            if let Value::Object(map) = &mut value {
                map.insert(
                    "apiVersion".into(),
                    Value::String(resource.api_version.clone()),
                );
                map.insert("kind".into(), Value::String(kind.to_owned()));
            }
            inputs.objects.push(SourceObject { file: None, value });
        }
    }
    Ok(())
}
