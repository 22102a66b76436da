//! Kustomize targets: the `images:` entry of a kustomization.
//!
//! ```yaml
//! images:
//! - name: web                      # matched against the target's image name
//!   newName: ghcr.io/acme/web      # the repository, when it differs from name
//!   newTag: "1.4.2"
//!   digest: sha256:…               # wins over newTag when kustomize renders
//! ```
//!
//! The image an entry produces is `newName or name`, then `:newTag`, then
//! `@digest`; that is the plan's `current`. The new reference is mapped back
//! onto the fields:
//! * `newName` is written only when the new repository differs from `name`,
//!   or when an existing `newName` differs from it; an existing `newName`
//!   equal to the new repository is kept.
//! * `newTag` gets the new tag; a [`ImageChange::Image`] without a tag
//!   removes it.
//! * `digest` gets the new digest; a reference without one removes the line
//!   (a stale digest would keep the old image running).
//!
//! Missing fields are inserted after the field that precedes them in the
//! order `name`, `newName`, `newTag`, `digest`, indented like their siblings
//! (or appended inside a flow mapping). A missing entry is appended to
//! `images:` in the style of its items; a missing `images:` key is added at
//! the end of the document. Everything else keeps its bytes.

use super::EditError;
use super::edit::{ImageChange, Plan, PlannedEdit};
use super::files::{find_file, join};
use super::image_ref::ImageRef;
use super::locate::ScalarToken;
use super::patch::{Doc, Splice, Value, after_line, delete_lines, insert_lines, starts_line};
use super::yaml::{NodeId, NodeKind};

/// File names kustomize accepts, in its order of preference.
pub(crate) const FILE_NAMES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// Fields of an entry, in canonical order.
const FIELDS: [&str; 4] = ["name", "newName", "newTag", "digest"];

/// What to do with one field of the entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Want {
    Keep,
    Set(String),
    Remove,
}

/// An existing field of the matched entry.
struct Field {
    key: NodeId,
    value: NodeId,
    token: ScalarToken,
    /// `images[<i>].<key>`.
    path: String,
}

pub(crate) fn plan<N: AsRef<str>>(
    files: &[(N, &str)],
    dir: &str,
    image: &str,
    change: &ImageChange,
) -> Result<Plan, EditError> {
    let found: Vec<_> = FILE_NAMES
        .iter()
        .filter_map(|name| find_file(files, &join(dir, name)))
        .collect();
    let (index, name, text) = match found.as_slice() {
        [] => {
            return Err(EditError::NotFoundIn {
                file: if dir.is_empty() {
                    ".".into()
                } else {
                    dir.into()
                },
                what: "a kustomization file (kustomization.yaml, kustomization.yml or \
                       Kustomization)"
                    .into(),
                skipped: Vec::new(),
            });
        }
        [one] => *one,
        several => {
            return Err(EditError::AmbiguousIn {
                file: if dir.is_empty() {
                    ".".into()
                } else {
                    dir.into()
                },
                what: "the kustomization file".into(),
                detail: format!(
                    "found {} (kustomize refuses this too)",
                    several
                        .iter()
                        .map(|(_, n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    };
    let doc = Doc::parse(name, index, text)?;
    let root = doc.root();
    if let Some(root) = root
        && !matches!(doc.stream.node(root).kind, NodeKind::Mapping(_))
    {
        return Err(doc.invalid("the kustomization is not a mapping"));
    }
    let images = match root {
        Some(root) => doc.get(root, "images", "images")?,
        None => None,
    };

    // The matching entry, if any.
    let mut entry = None;
    if let Some(images) = images.filter(|&id| !doc.is_null(id)) {
        let NodeKind::Sequence(items) = &doc.stream.node(images).kind else {
            return Err(doc.invalid("images is not a list"));
        };
        let mut matches = Vec::new();
        for (i, &item) in items.iter().enumerate() {
            if matches!(doc.stream.node(item).kind, NodeKind::Mapping(_))
                && let Some(name_id) = doc.get(item, "name", &format!("images[{i}].name"))?
                && doc.stream.scalar(name_id) == Some(image)
            {
                matches.push((i, item));
            }
        }
        if matches.len() > 1 {
            return Err(EditError::AmbiguousIn {
                file: name.to_owned(),
                what: format!("the images entry named {image:?}"),
                detail: format!(
                    "it appears {} times (images[{}])",
                    matches.len(),
                    matches
                        .iter()
                        .map(|(i, _)| i.to_string())
                        .collect::<Vec<_>>()
                        .join("], images[")
                ),
            });
        }
        entry = matches.pop();
    }

    let fields = match entry {
        Some((i, item)) => {
            let mut fields: [Option<Field>; 4] = Default::default();
            for (slot, key) in fields.iter_mut().zip(FIELDS) {
                let path = format!("images[{i}].{key}");
                let Some(value) = doc.get(item, key, &path)? else {
                    continue;
                };
                let token = doc.scalar(value, &path)?;
                let NodeKind::Mapping(entries) = &doc.stream.node(item).kind else {
                    continue;
                };
                let key = entries
                    .iter()
                    .find(|&&(_, v)| v == value)
                    .map(|&(k, _)| k)
                    .unwrap_or(value);
                *slot = Some(Field {
                    key,
                    value,
                    token,
                    path,
                });
            }
            Some((item, fields))
        }
        None => None,
    };

    let value =
        |fields: &[Option<Field>; 4], i: usize| fields[i].as_ref().map(|f| f.token.value.clone());
    let current = match &fields {
        Some((_, f)) => compose(
            &value(f, 1).unwrap_or_else(|| image.to_owned()),
            value(f, 2).as_deref(),
            value(f, 3).as_deref(),
        ),
        None => String::new(),
    };
    let existing_new_name = fields.as_ref().and_then(|(_, f)| value(f, 1));
    let base = existing_new_name
        .clone()
        .unwrap_or_else(|| image.to_owned());

    // What each of newName, newTag, digest should become.
    let (wants, new) = match change {
        ImageChange::Tag(tag) => (
            [Want::Keep, Want::Set(tag.clone()), Want::Remove],
            compose(&base, Some(tag), None),
        ),
        ImageChange::Image(reference) => {
            let parsed = ImageRef::parse(reference).map_err(EditError::InvalidNewImage)?;
            let repository = parsed.repository();
            let new_name = match &existing_new_name {
                Some(existing) if *existing == repository => Want::Keep,
                Some(_) => Want::Set(repository),
                None if repository != image => Want::Set(repository),
                None => Want::Keep,
            };
            let opt = |v: Option<&str>| v.map_or(Want::Remove, |v| Want::Set(v.to_owned()));
            (
                [new_name, opt(parsed.tag()), opt(parsed.digest())],
                reference.clone(),
            )
        }
    };

    let mut plan = Plan {
        file: name.to_owned(),
        current: current.clone(),
        located: None,
        edit: None,
        more: Vec::new(),
        warnings: Vec::new(),
    };
    if fields.is_some() && new == current {
        return Ok(plan);
    }

    // A field this edit changes that other places alias (`newTag: &t v1` … `newTag: *t`):
    // named in the plan, so the edit is refused unless asked for (EditOptions).
    if let Some((_, f)) = &fields {
        plan.located = wants
            .iter()
            .zip(&f[1..])
            .filter_map(|(want, field)| {
                let field = field.as_ref()?;
                let changes = match want {
                    Want::Keep => false,
                    Want::Set(v) => field.token.value != *v,
                    Want::Remove => true,
                };
                (changes && !field.token.shared_with.is_empty())
                    .then(|| doc.located(&field.token, &field.path))
            })
            .next();
    }

    let splices = match &fields {
        Some((item, fields)) => edit_entry(&doc, *item, fields, &wants)?,
        None => vec![add_entry(&doc, root, images, image, &wants)?],
    };
    if splices.is_empty() {
        return Ok(plan);
    }
    plan.edit = Some(PlannedEdit {
        file: name.to_owned(),
        file_index: index,
        old: current,
        new,
        new_contents: doc.apply(splices)?,
        creates_file: false,
    });
    Ok(plan)
}

/// `repository[:tag][@digest]`.
fn compose(repository: &str, tag: Option<&str>, digest: Option<&str>) -> String {
    let mut out = repository.to_owned();
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

/// Splices turning the existing entry `item` into the wanted one.
fn edit_entry(
    doc: &Doc<'_>,
    item: NodeId,
    fields: &[Option<Field>; 4],
    wants: &[Want; 3],
) -> Result<Vec<Splice>, EditError> {
    let NodeKind::Mapping(entries) = &doc.stream.node(item).kind else {
        return Err(doc.invalid("an images entry is not a mapping"));
    };
    let flow = doc.stream.node(item).flow;
    let key_col = entries
        .first()
        .map(|&(k, _)| doc.column(doc.stream.node(k).span.start))
        .unwrap_or_default();
    let layout = doc.layout();
    let mut splices = Vec::new();
    // Inserted fields, grouped by the field they follow.
    let mut inserts: Vec<(usize, String)> = Vec::new();
    for (offset, want) in wants.iter().enumerate() {
        let slot = offset + 1;
        let field = fields[slot].as_ref();
        match (want, field) {
            (Want::Keep, _) | (Want::Remove, None) => {}
            (Want::Set(v), Some(f)) if f.token.value == *v => {}
            (Want::Set(v), Some(f)) => splices.push(doc.set(&f.token, v)),
            (Want::Remove, Some(f)) => splices.push(remove_field(doc, entries, f, flow)?),
            (Want::Set(v), None) => {
                // After the closest preceding field that stays.
                let anchor = (0..slot)
                    .rev()
                    .find(|&i| fields[i].is_some() && (i == 0 || wants[i - 1] != Want::Remove))
                    .unwrap_or(0);
                let text = if flow {
                    format!(", {}: {}", FIELDS[slot], super::patch::plain(v))
                } else {
                    layout.entry(FIELDS[slot], &Value::str(v.clone()), key_col)
                };
                inserts.push((anchor, text));
            }
        }
    }
    for (anchor, field) in fields.iter().enumerate() {
        let text: String = inserts
            .iter()
            .filter(|(a, _)| *a == anchor)
            .map(|(_, t)| t.as_str())
            .collect();
        if text.is_empty() {
            continue;
        }
        let Some(field) = field.as_ref() else {
            return Err(doc.invalid("the images entry has no name"));
        };
        let end = doc.end_of(field.value);
        splices.push(if flow {
            Splice::insert(end, text)
        } else {
            insert_lines(after_line(doc.text, end), &text, layout.eol)
        });
    }
    Ok(splices)
}

/// Removes one `key: value` field of an entry.
fn remove_field(
    doc: &Doc<'_>,
    entries: &[(NodeId, NodeId)],
    field: &Field,
    flow: bool,
) -> Result<Splice, EditError> {
    let position = entries
        .iter()
        .position(|&(k, _)| k == field.key)
        .ok_or_else(|| doc.invalid("an images entry changed while it was read"))?;
    let key_start = doc.stream.node(field.key).span.start;
    let end = doc.end_of(field.value);
    let next_key_start = entries
        .get(position + 1)
        .map(|&(k, _)| doc.stream.node(k).span.start);
    if flow {
        return Ok(match position.checked_sub(1) {
            // `, key: value` after the previous field.
            Some(previous) => Splice::delete(doc.end_of(entries[previous].1)..end),
            None => match next_key_start {
                Some(next) => Splice::delete(key_start..next),
                None => return Err(doc.invalid("cannot remove the only field of an entry")),
            },
        });
    }
    if starts_line(doc.text, key_start) {
        Ok(delete_lines(doc.text, key_start, end))
    } else {
        // `- key: value` opening the entry: the next field moves up.
        match next_key_start {
            Some(next) => Ok(Splice::delete(key_start..next)),
            None => Err(doc.invalid("cannot remove the only field of an entry")),
        }
    }
}

/// Splice adding a new entry for `image` to `images` (or adding `images`).
fn add_entry(
    doc: &Doc<'_>,
    root: Option<NodeId>,
    images: Option<NodeId>,
    image: &str,
    wants: &[Want; 3],
) -> Result<Splice, EditError> {
    let mut fields = vec![("name".to_owned(), Value::str(image))];
    for (i, want) in wants.iter().enumerate() {
        if let Want::Set(v) = want {
            fields.push((FIELDS[i + 1].to_owned(), Value::str(v.clone())));
        }
    }
    let entry = Value::Map(fields);
    match images {
        Some(images) if doc.is_null(images) => {
            let NodeKind::Mapping(entries) = root
                .map(|r| &doc.stream.node(r).kind)
                .ok_or_else(|| doc.invalid("the kustomization is empty"))?
            else {
                return Err(doc.invalid("the kustomization is not a mapping"));
            };
            let key = entries
                .iter()
                .find(|&&(_, v)| v == images)
                .map(|&(k, _)| k)
                .ok_or_else(|| doc.invalid("images changed while it was read"))?;
            doc.fill_null(key, images, &Value::Seq(vec![entry]))
        }
        Some(images) => doc.append_item(images, &entry),
        None => doc.add_entry(root, "images", &Value::Seq(vec![entry])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifests::{TargetSpec, plan_edit};

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn run(text: &str, image: &str, change: ImageChange) -> Result<Option<String>, EditError> {
        let target = TargetSpec::Kustomize {
            path: String::new(),
            image: image.to_owned(),
        };
        plan_edit(&[("kustomization.yaml", text)], &target, &change)
            .map(|plan| plan.edit.map(|e| e.new_contents))
    }

    fn tag(t: &str) -> ImageChange {
        ImageChange::Tag(t.to_owned())
    }

    fn image(r: &str) -> ImageChange {
        ImageChange::Image(r.to_owned())
    }

    #[test]
    fn flow_entries_are_edited_in_flow_style() {
        let text = format!("images: [{{name: web, newTag: '1', digest: {DIGEST}}}]\n");
        assert_eq!(
            run(&text, "web", tag("2")).unwrap().unwrap(),
            "images: [{name: web, newTag: '2'}]\n"
        );
        assert_eq!(
            run(
                "images: [{name: web}]\n",
                "web",
                image(&format!("x.io/web:3@{DIGEST}"))
            )
            .unwrap()
            .unwrap(),
            format!(
                "images: [{{name: web, newName: x.io/web, newTag: \"3\", digest: {DIGEST}}}]\n"
            )
        );
        assert_eq!(
            run("images: []\n", "web", tag("v1")).unwrap().unwrap(),
            "images: [{name: web, newTag: v1}]\n"
        );
        assert_eq!(
            run("{resources: [a.yaml]}\n", "web", tag("v1"))
                .unwrap()
                .unwrap(),
            "{resources: [a.yaml], images: [{name: web, newTag: v1}]}\n"
        );
    }

    #[test]
    fn fields_are_removed_and_added_around_the_first_key() {
        // The field removed opens the entry: the next one moves up.
        let text = format!("images:\n- digest: {DIGEST}\n  name: web\n  newTag: v1\n");
        assert_eq!(
            run(&text, "web", tag("v2")).unwrap().unwrap(),
            "images:\n- name: web\n  newTag: v2\n"
        );
        // An image without a tag removes newTag; with a digest it is added
        // after the field before it.
        let text = "images:\n- name: web\n  newTag: v1 # old\n";
        assert_eq!(
            run(text, "web", image(&format!("web@{DIGEST}")))
                .unwrap()
                .unwrap(),
            format!("images:\n- name: web\n  digest: {DIGEST}\n")
        );
        assert_eq!(
            run(text, "web", image("web")).unwrap().unwrap(),
            "images:\n- name: web\n"
        );
        // A newName that no longer applies is set back to the name.
        let text = "images:\n- name: web\n  newName: old.io/web\n  newTag: v1\n";
        assert_eq!(
            run(text, "web", image("web:v1")).unwrap().unwrap(),
            "images:\n- name: web\n  newName: web\n  newTag: v1\n"
        );
    }

    #[test]
    fn empty_files_and_empty_images_get_a_list() {
        assert_eq!(
            run("", "web", tag("v1")).unwrap().unwrap(),
            "images:\n- name: web\n  newTag: v1\n"
        );
        assert_eq!(
            run("# nothing yet", "web", tag("v1")).unwrap().unwrap(),
            "# nothing yet\nimages:\n- name: web\n  newTag: v1"
        );
        assert_eq!(
            run("images:\nresources:\n  - a.yaml\n", "web", tag("v1"))
                .unwrap()
                .unwrap(),
            "images:\n  - name: web\n    newTag: v1\nresources:\n  - a.yaml\n"
        );
        assert_eq!(
            run("images: ~ # none\n", "web", tag("v1"))
                .unwrap()
                .unwrap(),
            "images: [{name: web, newTag: v1}] # none\n"
        );
        // No final newline: none is added.
        assert_eq!(
            run("images:\n- name: db\n  newTag: v1", "web", tag("v2"))
                .unwrap()
                .unwrap(),
            "images:\n- name: db\n  newTag: v1\n- name: web\n  newTag: v2"
        );
    }

    #[test]
    fn already_current_is_none() {
        let text = format!(
            "images:\n- name: web\n  newName: ghcr.io/a/web\n  newTag: v1\n  digest: {DIGEST}\n"
        );
        assert_eq!(
            run(&text, "web", image(&format!("ghcr.io/a/web:v1@{DIGEST}"))).unwrap(),
            None
        );
        assert_eq!(
            run("images:\n- name: web\n  newTag: v1\n", "web", tag("v1")).unwrap(),
            None
        );
    }

    #[test]
    fn malformed_kustomizations_are_errors() {
        for (text, needle) in [
            ("images: {a: b}\n", "images is not a list"),
            ("- a\n", "not a mapping"),
            (
                "images:\n- name: web\n  newTag: [1]\n",
                "images[0].newTag is not a string",
            ),
            ("images:\n- name: web\n  newTag: |\n    1\n", "block scalar"),
            ("x: &a v1\nimages:\n- name: web\n  newTag: *a\n", "alias"),
            ("images: [\n", "invalid YAML"),
            ("images: []\nimages: []\n", "more than once"),
        ] {
            let err = run(text, "web", tag("2")).unwrap_err();
            assert!(err.to_string().contains(needle), "{text:?}: {err}");
        }
    }
}
