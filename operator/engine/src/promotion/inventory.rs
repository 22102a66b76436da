//! Which images an overlay holds, and where: the inventory of a directory of manifests.
//!
//! Three kinds of places hold an image, in the order Argo CD's rendering lets them win:
//!
//! 1. [`SiteKind::ArgocdSource`]: a `kustomize.images` string of an
//!    `.argocd-source-<application>.yaml` (`name=ref` or a bare `ref`), the file Argo CD Image
//!    Updater and seed 001's workflow write;
//! 2. [`SiteKind::Kustomize`]: an `images:` entry of a kustomization (`name`, `newName`,
//!    `newTag`, `digest`);
//! 3. [`SiteKind::Workload`]: a container or init container of a Deployment, StatefulSet,
//!    DaemonSet, ReplicaSet, Job, CronJob or Pod.
//!
//! Each image is keyed by its **name**: the last path segment of the repository it resolves to
//! (`111111111111.dkr.ecr.ap-northeast-1.amazonaws.com/team/my-api` → `my-api`), the same
//! name `alignTags` and `pin` use. Every site carries the [`TargetSpec`] that edits it, so the
//! target side of a promotion changes exactly these places with the byte-minimal editor.
//!
//! Pure: the caller reads the files (from a Git tree) and hands them in. Files that do not
//! parse as YAML are reported as warnings and skipped.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::manifests::{ImageRef, TargetSpec, WorkloadKind, WorkloadTarget};

/// The kind of place holding an image, in precedence order (earlier wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SiteKind {
    /// `.argocd-source-<application>.yaml` `kustomize.images`.
    ArgocdSource,
    /// A kustomization `images:` entry.
    Kustomize,
    /// A workload container.
    Workload,
}

impl SiteKind {
    /// Short label for messages.
    pub fn label(self) -> &'static str {
        match self {
            Self::ArgocdSource => "Argo CD source file",
            Self::Kustomize => "kustomization images",
            Self::Workload => "workload container",
        }
    }
}

/// One place holding one image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSite {
    /// Last path segment of the repository (`my-api`).
    pub name: String,
    /// What the place resolves to: `repository[:tag][@digest]`.
    pub reference: String,
    /// The repository part of `reference`.
    pub repository: String,
    /// Tag, if any.
    pub tag: Option<String>,
    /// Digest, if any.
    pub digest: Option<String>,
    /// Kind of place.
    pub kind: SiteKind,
    /// File (repository-relative path).
    pub file: String,
    /// How to edit this place.
    pub target: TargetSpec,
}

/// A file left out of the inventory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// File.
    pub file: String,
    /// Why.
    pub reason: String,
}

/// Every image place under a directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Sites, in file order, then document order.
    pub sites: Vec<ImageSite>,
    /// Files that could not be read.
    pub skipped: Vec<Skipped>,
}

/// The last path segment of a repository (`a/b/my-api` → `my-api`).
pub fn image_name(repository: &str) -> &str {
    repository.rsplit('/').next().unwrap_or(repository)
}

/// A reference split into its parts (no normalisation; invalid references are `None`).
fn split_reference(reference: &str) -> Option<(String, Option<String>, Option<String>)> {
    let parsed = ImageRef::parse(reference).ok()?;
    Some((
        parsed.repository(),
        parsed.tag().map(str::to_string),
        parsed.digest().map(str::to_string),
    ))
}

fn compose(repository: &str, tag: Option<&str>, digest: Option<&str>) -> String {
    let mut out = repository.to_string();
    if let Some(tag) = tag {
        out.push(':');
        out.push_str(tag);
    }
    if let Some(digest) = digest {
        out.push('@');
        out.push_str(digest);
    }
    out
}

/// A scalar as text: strings as they are, numbers and booleans as YAML would print them
/// (an unquoted `newTag: 1.20` arrives as a number).
fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn dir_of(file: &str) -> String {
    match file.rsplit_once('/') {
        Some((dir, _)) => dir.to_string(),
        None => String::new(),
    }
}

fn base_name(file: &str) -> &str {
    file.rsplit('/').next().unwrap_or(file)
}

/// Builds the inventory of `files` (`(repository-relative path, contents)`), which are the
/// YAML files under `dir` (the directory workload targets search).
pub fn inventory<N: AsRef<str>, T: AsRef<str>>(files: &[(N, T)], dir: &str) -> Inventory {
    let mut out = Inventory::default();
    for (name, contents) in files {
        let file = name.as_ref();
        let docs: Vec<Value> = match serde_saphyr::from_multiple::<Value>(contents.as_ref()) {
            Ok(docs) => docs,
            Err(e) => {
                out.skipped.push(Skipped {
                    file: file.to_string(),
                    reason: first_line(&e.to_string()),
                });
                continue;
            }
        };
        let base = base_name(file);
        if let Some(application) = base.strip_prefix(".argocd-source-").and_then(|rest| {
            rest.strip_suffix(".yaml")
                .or_else(|| rest.strip_suffix(".yml"))
        }) {
            for doc in &docs {
                argocd_sites(doc, file, application, &mut out.sites);
            }
            continue;
        }
        if matches!(
            base,
            "kustomization.yaml" | "kustomization.yml" | "Kustomization"
        ) {
            for doc in &docs {
                kustomize_sites(doc, file, &mut out.sites);
            }
            continue;
        }
        for doc in &docs {
            workload_sites(doc, file, dir, &mut out.sites);
        }
    }
    out
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}

fn argocd_sites(doc: &Value, file: &str, application: &str, sites: &mut Vec<ImageSite>) {
    let Some(images) = doc
        .get("kustomize")
        .and_then(|k| k.get("images"))
        .and_then(Value::as_array)
    else {
        return;
    };
    for entry in images.iter().filter_map(Value::as_str) {
        let (entry_name, reference) = match entry.split_once('=') {
            Some((name, reference)) => (name.to_string(), reference),
            None => match split_reference(entry) {
                Some((repository, _, _)) => (repository, entry),
                None => continue,
            },
        };
        let Some((repository, tag, digest)) = split_reference(reference) else {
            continue;
        };
        sites.push(ImageSite {
            name: image_name(&repository).to_string(),
            reference: compose(&repository, tag.as_deref(), digest.as_deref()),
            repository,
            tag,
            digest,
            kind: SiteKind::ArgocdSource,
            file: file.to_string(),
            target: TargetSpec::ArgocdSource {
                path: dir_of(file),
                application: application.to_string(),
                image: entry_name,
            },
        });
    }
}

fn kustomize_sites(doc: &Value, file: &str, sites: &mut Vec<ImageSite>) {
    let Some(images) = doc.get("images").and_then(Value::as_array) else {
        return;
    };
    for entry in images {
        let Some(name) = entry.get("name").and_then(text) else {
            continue;
        };
        let repository = entry
            .get("newName")
            .and_then(text)
            .unwrap_or_else(|| name.clone());
        let tag = entry.get("newTag").and_then(text);
        let digest = entry.get("digest").and_then(text);
        sites.push(ImageSite {
            name: image_name(&repository).to_string(),
            reference: compose(&repository, tag.as_deref(), digest.as_deref()),
            repository,
            tag,
            digest,
            kind: SiteKind::Kustomize,
            file: file.to_string(),
            target: TargetSpec::Kustomize {
                path: dir_of(file),
                image: name,
            },
        });
    }
}

fn workload_sites(doc: &Value, file: &str, dir: &str, sites: &mut Vec<ImageSite>) {
    if doc.get("kind").and_then(Value::as_str) == Some("List") {
        if let Some(items) = doc.get("items").and_then(Value::as_array) {
            for item in items {
                workload_sites(item, file, dir, sites);
            }
        }
        return;
    }
    let Some(kind) = doc
        .get("kind")
        .and_then(Value::as_str)
        .and_then(|k| k.parse::<WorkloadKind>().ok())
        .filter(|k| doc.get("kind").and_then(Value::as_str) == Some(k.as_str()))
    else {
        return;
    };
    let Some(name) = doc
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
    else {
        return;
    };
    let namespace = doc
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
        .map(str::to_string);
    let mut pod = doc;
    for key in kind.pod_spec_path() {
        match pod.get(key) {
            Some(next) => pod = next,
            None => return,
        }
    }
    for list in ["initContainers", "containers"] {
        let Some(containers) = pod.get(list).and_then(Value::as_array) else {
            continue;
        };
        for container in containers {
            let (Some(container_name), Some(image)) = (
                container.get("name").and_then(Value::as_str),
                container.get("image").and_then(Value::as_str),
            ) else {
                continue;
            };
            let Some((repository, tag, digest)) = split_reference(image) else {
                continue;
            };
            sites.push(ImageSite {
                name: image_name(&repository).to_string(),
                reference: compose(&repository, tag.as_deref(), digest.as_deref()),
                repository,
                tag,
                digest,
                kind: SiteKind::Workload,
                file: file.to_string(),
                target: TargetSpec::Workload {
                    path: dir.to_string(),
                    target: WorkloadTarget {
                        kind: kind.as_str().to_string(),
                        name: name.to_string(),
                        container: container_name.to_string(),
                        namespace: namespace.clone(),
                    },
                },
            });
        }
    }
}

impl Inventory {
    /// Sites holding the image `name`.
    pub fn sites_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a ImageSite> + 'a {
        self.sites.iter().filter(move |s| s.name == name)
    }

    /// The image names present, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.sites.iter().map(|s| s.name.clone()).collect();
        names.sort();
        names.dedup();
        names
    }

    /// What the directory runs for each image: the reference of its highest-precedence kind
    /// of place (an Argo CD source file overrides the kustomization, which overrides the
    /// workloads). Places of that kind that disagree are an error naming them.
    pub fn effective(&self) -> Result<BTreeMap<String, &ImageSite>, String> {
        let mut best: BTreeMap<String, Vec<&ImageSite>> = BTreeMap::new();
        for site in &self.sites {
            let slot = best.entry(site.name.clone()).or_default();
            match slot.first().map(|s| s.kind) {
                Some(kind) if kind < site.kind => {}
                Some(kind) if kind == site.kind => slot.push(site),
                _ => *slot = vec![site],
            }
        }
        let mut out = BTreeMap::new();
        for (name, sites) in best {
            let first = sites[0];
            if let Some(other) = sites.iter().find(|s| s.reference != first.reference) {
                return Err(format!(
                    "image {name} is ambiguous: {} holds {} but {} holds {}",
                    first.file, first.reference, other.file, other.reference
                ));
            }
            out.insert(name, first);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARGO: &str = "kustomize:\n  images:\n  - 111111111111.dkr.ecr.ap-northeast-1.amazonaws.com/my-api:v1.2.3\n  - my-api-worker=111111111111.dkr.ecr.ap-northeast-1.amazonaws.com/my-api-worker:v1.2.3\n";
    const KUSTOMIZATION: &str = "resources:\n- ../../base\nimages:\n- name: my-api\n  newName: registry.example.com/team/my-api\n  newTag: 1.20\n- name: sidecar\n  digest: sha256:0000000000000000000000000000000000000000000000000000000000000000\n";
    const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: my-api, namespace: prod}\nspec:\n  template:\n    spec:\n      initContainers:\n      - {name: migrate, image: \"registry.example.com/team/my-api-migrate:v1\"}\n      containers:\n      - name: app\n        image: registry.example.com/team/my-api:v1.2.3 # comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n";

    #[test]
    fn finds_every_kind_of_place() {
        let files = [
            ("ov/.argocd-source-my-api-prd.yaml", ARGO),
            ("ov/kustomization.yaml", KUSTOMIZATION),
            ("ov/deploy/deployment.yaml", DEPLOYMENT),
        ];
        let inv = inventory(&files, "ov");
        assert!(inv.skipped.is_empty());
        let refs: Vec<(&str, &str, SiteKind)> = inv
            .sites
            .iter()
            .map(|s| (s.name.as_str(), s.reference.as_str(), s.kind))
            .collect();
        assert_eq!(
            refs,
            vec![
                (
                    "my-api",
                    "111111111111.dkr.ecr.ap-northeast-1.amazonaws.com/my-api:v1.2.3",
                    SiteKind::ArgocdSource
                ),
                (
                    "my-api-worker",
                    "111111111111.dkr.ecr.ap-northeast-1.amazonaws.com/my-api-worker:v1.2.3",
                    SiteKind::ArgocdSource
                ),
                (
                    "my-api",
                    "registry.example.com/team/my-api:1.2",
                    SiteKind::Kustomize
                ),
                (
                    "sidecar",
                    "sidecar@sha256:0000000000000000000000000000000000000000000000000000000000000000",
                    SiteKind::Kustomize
                ),
                (
                    "my-api-migrate",
                    "registry.example.com/team/my-api-migrate:v1",
                    SiteKind::Workload
                ),
                (
                    "my-api",
                    "registry.example.com/team/my-api:v1.2.3",
                    SiteKind::Workload
                ),
            ]
        );
        assert_eq!(
            inv.sites[0].target,
            TargetSpec::ArgocdSource {
                path: "ov".into(),
                application: "my-api-prd".into(),
                image: "111111111111.dkr.ecr.ap-northeast-1.amazonaws.com/my-api".into()
            }
        );
        assert_eq!(
            inv.sites[1].target,
            TargetSpec::ArgocdSource {
                path: "ov".into(),
                application: "my-api-prd".into(),
                image: "my-api-worker".into()
            }
        );
        assert_eq!(
            inv.sites[5].target,
            TargetSpec::Workload {
                path: "ov".into(),
                target: WorkloadTarget {
                    kind: "Deployment".into(),
                    name: "my-api".into(),
                    container: "app".into(),
                    namespace: Some("prod".into())
                }
            }
        );
    }

    #[test]
    fn the_argocd_source_file_wins_over_kustomize_and_workloads() {
        let files = [
            ("ov/.argocd-source-a.yaml", ARGO),
            ("ov/kustomization.yaml", KUSTOMIZATION),
            ("ov/deployment.yaml", DEPLOYMENT),
        ];
        let inv = inventory(&files, "ov");
        let eff = inv.effective().unwrap();
        assert_eq!(
            eff["my-api"].reference,
            "111111111111.dkr.ecr.ap-northeast-1.amazonaws.com/my-api:v1.2.3"
        );
        assert_eq!(
            eff["my-api-migrate"].reference,
            "registry.example.com/team/my-api-migrate:v1"
        );
        assert_eq!(inv.names().len(), 4);
    }

    #[test]
    fn disagreeing_places_of_one_kind_are_ambiguous() {
        let other = DEPLOYMENT
            .replace("name: my-api, namespace: prod", "name: other")
            .replace("my-api:v1.2.3", "my-api:v9");
        let files = [("a.yaml", DEPLOYMENT.to_string()), ("b.yaml", other)];
        let err = inventory(&files, "").effective().unwrap_err();
        assert!(err.contains("ambiguous") && err.contains("b.yaml"), "{err}");
    }

    #[test]
    fn unparsable_files_are_reported_not_fatal() {
        let files = [("bad.yaml", "a: [\n"), ("ok.yaml", DEPLOYMENT)];
        let inv = inventory(&files, "");
        assert_eq!(inv.skipped.len(), 1);
        assert_eq!(inv.skipped[0].file, "bad.yaml");
        assert_eq!(inv.sites.len(), 2);
    }

    #[test]
    fn names_are_the_last_path_segment() {
        assert_eq!(image_name("a.b/c/d-e"), "d-e");
        assert_eq!(image_name("nginx"), "nginx");
    }
}
