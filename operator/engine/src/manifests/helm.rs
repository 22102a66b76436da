//! Helm values targets: one scalar at a key path of a values file.
//!
//! The key path is dotted (`canary.image.tag`), with `[N]` for list items
//! (`sidecars[0].image.tag`) and `\.` for a dot inside a key
//! (`annotations.example\.com/tag`).
//!
//! What is written there depends on what is there now:
//! * a tag (the usual `image.tag` key): the new tag. For
//!   [`ImageChange::Image`] that is the reference's tag (a reference without
//!   one is an error: the key cannot hold a digest or repository);
//! * a full image (the current value contains `/` or `:`, which a tag never
//!   does, e.g. `image: ghcr.io/acme/web:1.0`): the full new reference for
//!   [`ImageChange::Image`], the current reference with the new tag for
//!   [`ImageChange::Tag`].
//!
//! The scalar keeps its quoting; a plain value that would no longer read as
//! the same string (`1.10` would be the float 1.1) becomes double-quoted.

use super::EditError;
use super::edit::{ImageChange, Plan, PlannedEdit};
use super::files::find_file;
use super::image_ref::ImageRef;
use super::patch::Doc;
use super::yaml::{NodeId, NodeKind};

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// Parses `a.b[0].c`.
fn parse_key_path(path: &str) -> Result<Vec<Step>, String> {
    let invalid = |why: &str| format!("invalid key path {path:?}: {why}");
    let mut steps = Vec::new();
    let mut key = String::new();
    // Whether a `.` is allowed/required before the next key.
    let mut after_index = false;
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                key.push(chars.next().ok_or_else(|| invalid("it ends with '\\'"))?);
            }
            '.' => {
                if key.is_empty() && !after_index {
                    return Err(invalid("empty key"));
                }
                if !key.is_empty() {
                    steps.push(Step::Key(std::mem::take(&mut key)));
                }
                after_index = false;
                if chars.peek().is_none() {
                    return Err(invalid("it ends with '.'"));
                }
            }
            '[' => {
                if !key.is_empty() {
                    steps.push(Step::Key(std::mem::take(&mut key)));
                } else if steps.is_empty() {
                    return Err(invalid("it starts with an index"));
                }
                let mut digits = String::new();
                loop {
                    match chars.next() {
                        Some(']') => break,
                        Some(d) if d.is_ascii_digit() => digits.push(d),
                        _ => return Err(invalid("an index is not [digits]")),
                    }
                }
                let index = digits
                    .parse()
                    .map_err(|_| invalid("an index is not [digits]"))?;
                steps.push(Step::Index(index));
                after_index = true;
            }
            c => {
                if after_index {
                    return Err(invalid("expected '.' or '[' after an index"));
                }
                key.push(c);
            }
        }
    }
    if !key.is_empty() {
        steps.push(Step::Key(key));
    }
    if steps.is_empty() {
        return Err(invalid("it is empty"));
    }
    Ok(steps)
}

pub(crate) fn plan<N: AsRef<str>>(
    files: &[(N, &str)],
    file: &str,
    key: &str,
    change: &ImageChange,
) -> Result<Plan, EditError> {
    let steps = parse_key_path(key).map_err(EditError::UnsupportedTarget)?;
    let (index, name, text) = find_file(files, file).ok_or_else(|| EditError::MissingFile {
        file: file.to_owned(),
        what: "the Helm values file".to_owned(),
    })?;
    let doc = Doc::parse(name, index, text)?;
    let not_found = |detail: String| EditError::NotFoundIn {
        file: name.to_owned(),
        what: format!("the key path {key:?} ({detail})"),
        skipped: Vec::new(),
    };
    let Some(mut node) = doc.root() else {
        return Err(not_found("the file is empty".to_owned()));
    };
    let mut walked = String::new();
    for step in &steps {
        let here = if walked.is_empty() {
            "the document".to_owned()
        } else {
            walked.clone()
        };
        node = match step {
            Step::Key(k) => {
                if !walked.is_empty() {
                    walked.push('.');
                }
                walked.push_str(k);
                if !matches!(doc.stream.node(node).kind, NodeKind::Mapping(_)) {
                    return Err(not_found(format!("{here} is not a mapping")));
                }
                doc.get(node, k, &walked)?
                    .ok_or_else(|| not_found(format!("{here} has no key {k:?}")))?
            }
            Step::Index(i) => {
                walked.push_str(&format!("[{i}]"));
                let NodeKind::Sequence(items) = &doc.stream.node(node).kind else {
                    return Err(not_found(format!("{here} is not a list")));
                };
                let item: Option<NodeId> = items.get(*i).copied();
                item.ok_or_else(|| {
                    not_found(format!("{here} has {} item(s), not {}", items.len(), i + 1))
                })?
            }
        };
        if matches!(doc.stream.node(node).kind, NodeKind::Alias) {
            return Err(doc.invalid(format!(
                "{walked} is a YAML alias, which is not followed because editing the anchored \
                 value would change every place that uses it"
            )));
        }
    }
    let token = doc.scalar(node, key)?;
    let current = token.value.clone();
    let full_image = current.contains(['/', ':']);
    let new = match (change, full_image) {
        (ImageChange::Tag(tag), true) => ImageRef::parse(&current)
            .map_err(|e| {
                doc.invalid(format!(
                    "{key} holds {current:?}, which looks like an image but is not a valid \
                     reference, so its tag cannot be replaced: {e}"
                ))
            })?
            .with_tag(tag)
            .map_err(EditError::InvalidNewImage)?
            .to_string(),
        (ImageChange::Tag(tag), false) => tag.clone(),
        (ImageChange::Image(reference), true) => reference.clone(),
        (ImageChange::Image(reference), false) => ImageRef::parse(reference)
            .map_err(EditError::InvalidNewImage)?
            .tag()
            .ok_or_else(|| EditError::NewImageWithoutTag {
                image: reference.clone(),
                place: format!("{key} in {name}"),
            })?
            .to_owned(),
    };
    let located = doc.located(&token, key);
    let mut plan = Plan {
        file: name.to_owned(),
        current: current.clone(),
        located: Some(located),
        edit: None,
        more: Vec::new(),
        warnings: Vec::new(),
    };
    if new != current {
        plan.edit = Some(PlannedEdit {
            file: name.to_owned(),
            file_index: index,
            old: current,
            new_contents: doc.apply(vec![doc.set(&token, &new)])?,
            new,
            creates_file: false,
        });
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_paths() {
        use Step::{Index, Key};
        let k = |s: &str| Key(s.to_owned());
        assert_eq!(
            parse_key_path("canary.image.tag").unwrap(),
            [k("canary"), k("image"), k("tag")]
        );
        assert_eq!(
            parse_key_path("a.b[0][2].c").unwrap(),
            [k("a"), k("b"), Index(0), Index(2), k("c")]
        );
        assert_eq!(
            parse_key_path(r"ann.example\.com/tag").unwrap(),
            [k("ann"), k("example.com/tag")]
        );
        for bad in [
            "", ".", "a.", ".a", "a..b", "[0]", "a[x]", "a[0]b", "a[", "a\\",
        ] {
            assert!(parse_key_path(bad).is_err(), "{bad}");
        }
    }
}
