//! Argo CD source parameter files: `.argocd-source-<application>.yaml`.
//!
//! Argo CD merges this file (in the Application's source directory) into the
//! Application's source; Argo CD Image Updater writes it back to Git in this
//! form, and imagewatch writes the same:
//!
//! ```yaml
//! kustomize:
//!   images:
//!   - web=ghcr.io/acme/web:1.4.2     # `kustomize edit set image` syntax
//! helm:
//!   parameters:
//!   - name: image.tag
//!     value: "1.4.2"
//!     forcestring: true
//! ```
//!
//! Kustomize images (the main case): the string whose name is the target's
//! image (`name=ref`, or a bare `ref` whose repository is the name) is
//! rewritten; a bare `ref` stays bare while the repository stays the same.
//! A missing string is appended (creating `kustomize.images`, or the whole file
//! with just that, when needed): as `name=ref` for a whole new image, and as
//! `name=*:tag` for a new tag alone. Argo CD passes each string to
//! `kustomize edit set image`, which replaces the overlay's `images[]` entry of
//! `name` whole: `name=ref` and even `name:tag` drop the entry's `newName` (an
//! overlay renaming `name` to a registry's repository then deploys `name:tag`,
//! checked against Argo CD v3.5.1 with kustomize v5.8.1), while the `*` keeps it.
//! An entry already written as `name=*:tag` keeps that form for a new tag.
//!
//! Helm parameters: when `helm.parameters` has an entry named `<image>.tag`
//! or `image.tag`, its `value` gets the new tag, and for a full new image an
//! entry named `<image>.repository`, `<image>.name`, `image.repository` or
//! `image.name` gets the repository (a digest cannot be written there and
//! is left out). Then no kustomize string is added (one that already exists
//! is still updated).

use super::EditError;
use super::edit::{ImageChange, Plan, PlannedEdit};
use super::files::find_file;
use super::image_ref::ImageRef;
use super::locate::ScalarToken;
use super::patch::{Doc, Layout, Splice, Value};
use super::yaml::{NodeId, NodeKind};

/// The name a `kustomize edit set image` argument applies to.
fn entry_name(entry: &str) -> String {
    match entry.split_once('=') {
        Some((name, _)) => name.to_owned(),
        None => match ImageRef::parse(entry) {
            Ok(reference) => reference.repository(),
            Err(_) => entry.to_owned(),
        },
    }
}

/// The reference part of an entry (`ref` of `name=ref`).
fn entry_ref(entry: &str) -> &str {
    entry.split_once('=').map_or(entry, |(_, r)| r)
}

/// A matched scalar.
struct Found {
    token: ScalarToken,
}

pub(crate) fn plan<N: AsRef<str>>(
    files: &[(N, &str)],
    file: &str,
    image: &str,
    change: &ImageChange,
) -> Result<Plan, EditError> {
    let new_ref = |current: Option<&str>| -> Result<String, EditError> {
        match change {
            ImageChange::Image(reference) => Ok(reference.clone()),
            // A tag alone for an image without a string yet, or one already kept by `*`.
            ImageChange::Tag(tag) if current.is_none_or(|c| c.starts_with("*:")) => {
                // Validates the tag the way every other tag is.
                ImageRef::parse(image)
                    .map_err(EditError::InvalidNewImage)?
                    .with_tag(tag)
                    .map_err(EditError::InvalidNewImage)?;
                Ok(format!("*:{tag}"))
            }
            ImageChange::Tag(tag) => {
                let base = match current {
                    Some(current) => {
                        ImageRef::parse(current).map_err(|e| EditError::InvalidFile {
                            file: file.to_owned(),
                            reason: format!(
                                "the kustomize image {current:?} of {image:?} is not a valid \
                                 reference, so its tag cannot be replaced: {e}"
                            ),
                        })?
                    }
                    None => ImageRef::parse(image).map_err(EditError::InvalidNewImage)?,
                };
                Ok(base
                    .with_tag(tag)
                    .map_err(EditError::InvalidNewImage)?
                    .to_string())
            }
        }
    };

    let Some((index, name, text)) = find_file(files, file) else {
        // Create the file with just this image.
        let new = new_ref(None)?;
        let layout = Layout {
            map_indent: 2,
            seq_indent: 0,
            eol: "\n",
        };
        let contents = layout.entry(
            "kustomize",
            &Value::Map(vec![(
                "images".into(),
                Value::Seq(vec![Value::str(format!("{image}={new}"))]),
            )]),
            0,
        );
        return Ok(Plan {
            file: file.to_owned(),
            current: String::new(),
            located: None,
            edit: Some(PlannedEdit {
                file: file.to_owned(),
                file_index: files.len(),
                old: String::new(),
                new,
                new_contents: contents,
                creates_file: true,
            }),
            more: Vec::new(),
            warnings: Vec::new(),
        });
    };

    let doc = Doc::parse(name, index, text)?;
    let root = doc.root();
    if let Some(root) = root
        && !matches!(doc.stream.node(root).kind, NodeKind::Mapping(_))
    {
        return Err(doc.invalid("the file is not a mapping"));
    }

    // Kustomize images.
    let kustomize = match root {
        Some(root) => doc.get(root, "kustomize", "kustomize")?,
        None => None,
    };
    let kustomize_map = kustomize.filter(|&k| !doc.is_null(k));
    if let Some(k) = kustomize_map
        && !matches!(doc.stream.node(k).kind, NodeKind::Mapping(_))
    {
        return Err(doc.invalid("kustomize is not a mapping"));
    }
    let images = match kustomize_map {
        Some(k) => doc.get(k, "images", "kustomize.images")?,
        None => None,
    };
    let images_seq = images.filter(|&i| !doc.is_null(i));
    let mut entry: Option<Found> = None;
    if let Some(seq) = images_seq {
        let NodeKind::Sequence(items) = &doc.stream.node(seq).kind else {
            return Err(doc.invalid("kustomize.images is not a list"));
        };
        let mut matches = Vec::new();
        for (i, &item) in items.iter().enumerate() {
            if let Some(value) = doc.stream.scalar(item)
                && entry_name(value) == image
            {
                matches.push((i, item));
            }
        }
        if matches.len() > 1 {
            return Err(EditError::AmbiguousIn {
                file: name.to_owned(),
                what: format!("the kustomize image {image:?}"),
                detail: format!("{} entries of kustomize.images name it", matches.len()),
            });
        }
        if let Some((i, item)) = matches.pop() {
            entry = Some(Found {
                token: doc.scalar(item, &format!("kustomize.images[{i}]"))?,
            });
        }
    }

    // Helm parameters.
    let (helm_tags, helm_repos) = helm_parameters(&doc, root, image)?;

    let mut splices = Vec::new();
    let (current, new);
    if entry.is_some() || helm_tags.is_empty() {
        let old_entry = entry.as_ref().map(|e| e.token.value.as_str());
        current = old_entry.map(entry_ref).unwrap_or_default().to_owned();
        new = new_ref(old_entry.map(entry_ref))?;
        let bare = old_entry.is_some_and(|e| !e.contains('='))
            && ImageRef::parse(&new).is_ok_and(|r| r.repository() == image);
        let new_entry = if bare {
            new.clone()
        } else {
            format!("{image}={new}")
        };
        match &entry {
            Some(found) if found.token.value == new_entry => {}
            Some(found) => splices.push(doc.set(&found.token, &new_entry)),
            None => splices.push(add_kustomize_image(
                &doc, root, kustomize, images, &new_entry,
            )?),
        }
    } else {
        let tag = helm_tags[0].token.value.clone();
        let repo = helm_repos.first().map(|r| r.token.value.clone());
        current = match &repo {
            Some(repo) => format!("{repo}:{tag}"),
            None => tag,
        };
        new = match (change, &repo) {
            (ImageChange::Tag(t), Some(repo)) => format!("{repo}:{t}"),
            (ImageChange::Tag(t), None) => t.clone(),
            // Parameters hold no digest: the image they describe is repository:tag.
            (ImageChange::Image(r), Some(_)) => {
                let repository = ImageRef::parse(r)
                    .map_err(EditError::InvalidNewImage)?
                    .repository();
                format!("{repository}:{}", tag_of(r, name)?)
            }
            (ImageChange::Image(r), None) => tag_of(r, name)?,
        };
    }
    if !helm_tags.is_empty() {
        let tag = match change {
            ImageChange::Tag(t) => t.clone(),
            ImageChange::Image(r) => tag_of(r, name)?,
        };
        for found in &helm_tags {
            if found.token.value != tag {
                splices.push(doc.set(&found.token, &tag));
            }
        }
        if let ImageChange::Image(r) = change {
            let repository = ImageRef::parse(r)
                .map_err(EditError::InvalidNewImage)?
                .repository();
            for found in &helm_repos {
                if found.token.value != repository {
                    splices.push(doc.set(&found.token, &repository));
                }
            }
        }
    }

    let mut plan = Plan {
        file: name.to_owned(),
        current: current.clone(),
        located: None,
        edit: None,
        more: Vec::new(),
        warnings: Vec::new(),
    };
    if !splices.is_empty() {
        plan.edit = Some(PlannedEdit {
            file: name.to_owned(),
            file_index: index,
            old: current,
            new,
            new_contents: doc.apply(splices)?,
            creates_file: false,
        });
    }
    Ok(plan)
}

fn tag_of(reference: &str, file: &str) -> Result<String, EditError> {
    ImageRef::parse(reference)
        .map_err(EditError::InvalidNewImage)?
        .tag()
        .map(str::to_owned)
        .ok_or_else(|| EditError::NewImageWithoutTag {
            image: reference.to_owned(),
            place: format!("the helm tag parameter in {file}"),
        })
}

/// The `value` scalars of the matching tag and repository parameters.
fn helm_parameters(
    doc: &Doc<'_>,
    root: Option<NodeId>,
    image: &str,
) -> Result<(Vec<Found>, Vec<Found>), EditError> {
    let tag_names = [format!("{image}.tag"), "image.tag".to_owned()];
    let repo_names = [
        format!("{image}.repository"),
        format!("{image}.name"),
        "image.repository".to_owned(),
        "image.name".to_owned(),
    ];
    let mut tags = Vec::new();
    let mut repos = Vec::new();
    let Some(root) = root else {
        return Ok((tags, repos));
    };
    let Some(helm) = doc.get(root, "helm", "helm")?.filter(|&h| !doc.is_null(h)) else {
        return Ok((tags, repos));
    };
    if !matches!(doc.stream.node(helm).kind, NodeKind::Mapping(_)) {
        return Ok((tags, repos));
    }
    let Some(parameters) = doc.get(helm, "parameters", "helm.parameters")? else {
        return Ok((tags, repos));
    };
    let NodeKind::Sequence(items) = &doc.stream.node(parameters).kind else {
        return Ok((tags, repos));
    };
    for (i, &item) in items.iter().enumerate() {
        if !matches!(doc.stream.node(item).kind, NodeKind::Mapping(_)) {
            continue;
        }
        let Some(param) = doc.stream.get_str(item, "name") else {
            continue;
        };
        let list = if tag_names.iter().any(|n| n == param) {
            &mut tags
        } else if repo_names.iter().any(|n| n == param) {
            &mut repos
        } else {
            continue;
        };
        let path = format!("helm.parameters[{i}].value");
        let Some(value) = doc.get(item, "value", &path)? else {
            return Err(doc.invalid(format!("the helm parameter {param:?} has no value")));
        };
        list.push(Found {
            token: doc.scalar(value, &path)?,
        });
    }
    Ok((tags, repos))
}

/// Splice adding `entry` to `kustomize.images`, creating what is missing.
fn add_kustomize_image(
    doc: &Doc<'_>,
    root: Option<NodeId>,
    kustomize: Option<NodeId>,
    images: Option<NodeId>,
    entry: &str,
) -> Result<Splice, EditError> {
    let images_value = Value::Seq(vec![Value::str(entry)]);
    let key_of = |map: NodeId, value: NodeId| match &doc.stream.node(map).kind {
        NodeKind::Mapping(entries) => entries.iter().find(|&&(_, v)| v == value).map(|&(k, _)| k),
        _ => None,
    };
    match (kustomize, images) {
        (None, _) => doc.add_entry(
            root,
            "kustomize",
            &Value::Map(vec![("images".into(), images_value)]),
        ),
        (Some(k), _) if doc.is_null(k) => {
            let key = root
                .and_then(|r| key_of(r, k))
                .ok_or_else(|| doc.invalid("kustomize changed while it was read"))?;
            doc.fill_null(key, k, &Value::Map(vec![("images".into(), images_value)]))
        }
        (Some(k), None) => doc.add_entry(Some(k), "images", &images_value),
        (Some(k), Some(i)) if doc.is_null(i) => {
            let key = key_of(k, i)
                .ok_or_else(|| doc.invalid("kustomize.images changed while it was read"))?;
            doc.fill_null(key, i, &images_value)
        }
        (Some(_), Some(i)) => doc.append_item(i, &Value::str(entry)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifests::{TargetSpec, plan_edit};

    fn run(text: Option<&str>, change: ImageChange) -> Result<Option<String>, EditError> {
        let target = TargetSpec::ArgocdSource {
            path: String::new(),
            application: "app".to_owned(),
            image: "web".to_owned(),
        };
        let files: Vec<(&str, &str)> = text
            .map(|t| (".argocd-source-app.yaml", t))
            .into_iter()
            .collect();
        plan_edit(&files, &target, &change).map(|plan| plan.edit.map(|e| e.new_contents))
    }

    #[test]
    fn entry_names() {
        assert_eq!(entry_name("web=ghcr.io/a/web:1"), "web");
        assert_eq!(entry_name("ghcr.io/a/web:1"), "ghcr.io/a/web");
        assert_eq!(
            entry_name(
                "localhost:5000/web@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
            ),
            "localhost:5000/web"
        );
        assert_eq!(entry_ref("web=x:1"), "x:1");
    }

    #[test]
    fn missing_parts_are_created_in_place() {
        let tag = || ImageChange::Tag("v2".to_owned());
        assert_eq!(
            run(Some(""), tag()).unwrap().unwrap(),
            "kustomize:\n  images:\n  - web=*:v2\n"
        );
        assert_eq!(
            run(Some("kustomize:\n  namePrefix: p-\n"), tag())
                .unwrap()
                .unwrap(),
            "kustomize:\n  namePrefix: p-\n  images:\n  - web=*:v2\n"
        );
        assert_eq!(
            run(Some("kustomize:\n"), tag()).unwrap().unwrap(),
            "kustomize:\n  images:\n  - web=*:v2\n"
        );
        assert_eq!(
            run(Some("kustomize:\n  images:\n"), tag())
                .unwrap()
                .unwrap(),
            "kustomize:\n  images:\n  - web=*:v2\n"
        );
        assert_eq!(
            run(Some("kustomize: {images: [db:1]}\n"), tag())
                .unwrap()
                .unwrap(),
            "kustomize: {images: [db:1, web=*:v2]}\n"
        );
        assert_eq!(
            run(Some("kustomize:\n  images:\n  - web=web:v2\n"), tag()).unwrap(),
            None
        );
    }

    /// `kustomize edit set image web=web:v2` (and `web:v2`) replace the overlay's entry
    /// whole, dropping its `newName` (a rename of `web` to a registry's repository);
    /// `web=*:v2` keeps it.
    #[test]
    fn a_new_tag_alone_keeps_the_overlays_new_name() {
        let tag = ImageChange::Tag("v1.2.5".to_owned());
        assert_eq!(
            run(None, tag.clone()).unwrap().unwrap(),
            "kustomize:\n  images:\n  - web=*:v1.2.5\n"
        );
        // The form stays for the next tag, and a bad tag is refused.
        assert_eq!(
            run(
                Some("kustomize:\n  images:\n  - web=*:v1.2.5\n"),
                ImageChange::Tag("v1.2.6".into())
            )
            .unwrap()
            .unwrap(),
            "kustomize:\n  images:\n  - web=*:v1.2.6\n"
        );
        assert!(
            run(
                Some("kustomize:\n  images:\n  - web=*:v1.2.5\n"),
                ImageChange::Tag("bad tag".into())
            )
            .is_err()
        );
        // A whole image names its repository.
        assert_eq!(
            run(
                None,
                ImageChange::Image("registry.example.com/web:v1.2.5".into())
            )
            .unwrap()
            .unwrap(),
            "kustomize:\n  images:\n  - web=registry.example.com/web:v1.2.5\n"
        );
        // An entry that already names a repository keeps it.
        assert_eq!(
            run(
                Some("kustomize:\n  images:\n  - web=registry.example.com/web:v1.2.4\n"),
                tag
            )
            .unwrap()
            .unwrap(),
            "kustomize:\n  images:\n  - web=registry.example.com/web:v1.2.5\n"
        );
    }

    #[test]
    fn bare_entries_stay_bare_while_the_repository_is_the_name() {
        let image = |r: &str| ImageChange::Image(r.to_owned());
        let text = "kustomize:\n  images:\n  - \"web:v1\"\n";
        assert_eq!(
            run(Some(text), image("web:v2")).unwrap().unwrap(),
            "kustomize:\n  images:\n  - \"web:v2\"\n"
        );
        assert_eq!(
            run(Some(text), image("ghcr.io/a/web:v2")).unwrap().unwrap(),
            "kustomize:\n  images:\n  - \"web=ghcr.io/a/web:v2\"\n"
        );
        let err = run(
            Some("kustomize:\n  images:\n  - web:1\n  - web=x:2\n"),
            image("web:3"),
        )
        .unwrap_err();
        assert!(matches!(err, EditError::AmbiguousIn { .. }), "{err}");
        let err = run(Some("- a\n"), image("web:3")).unwrap_err();
        assert!(err.to_string().contains("not a mapping"), "{err}");
    }

    #[test]
    fn helm_repository_parameters_follow_a_full_image() {
        let text = "helm:\n  parameters:\n  - name: web.repository\n    value: ghcr.io/a/web\n  - name: web.tag\n    value: v1\n";
        assert_eq!(
            run(
                Some(text),
                ImageChange::Image("quay.io/a/web:v2".to_owned())
            )
            .unwrap()
            .unwrap(),
            text.replace("ghcr.io", "quay.io").replace("v1", "v2")
        );
        assert_eq!(
            run(Some(text), ImageChange::Tag("v2".to_owned()))
                .unwrap()
                .unwrap(),
            text.replace("v1", "v2")
        );
        // A digest has no parameter to go to; the tag and repository do.
        let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(
            run(
                Some(text),
                ImageChange::Image(format!("ghcr.io/a/web:v2@{digest}"))
            )
            .unwrap()
            .unwrap(),
            text.replace("v1", "v2")
        );
    }
}
