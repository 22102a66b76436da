//! Setter markers: image values marked by a trailing comment, for files no
//! other target kind can address (CRDs of other tools, plain config files).
//!
//! ```yaml
//! image: ghcr.io/acme/web:1.4.2 # {"$imagewatch": "apps:web"}
//! tag: 1.4.2                    # {"$imagewatch": "apps:web:tag"}
//! repository: ghcr.io/acme/web  # {"$imagewatch": "apps:web:name"}
//! ```
//!
//! `apps:web` is the `<namespace>:<name>` of the ImageWatch. The comment must
//! follow a plain or quoted value on the same line, and is JSON:
//! `{"$imagewatch": "<namespace>:<name>[:tag|:name]"}` (blanks are free).
//! Without a suffix the value is the full image; `:tag` marks a value that
//! holds only the tag, `:name` one that holds only the repository (left alone
//! by a tag change). Flux's `$imagepolicy` markers are not read.
//!
//! Only files named `*.yaml` or `*.yml` are read (a README showing a marker
//! is not a manifest). Every marked value under the directory is updated, in as many files as
//! they are in: the plan's `edit` is the first changed file and `more` the
//! others. A file that holds one of this target's markers but does not parse
//! is an error (updating the other files only would leave them
//! inconsistent); other unparsable files are skipped with a warning. A
//! marker that is not after a value (on a line of its own, after a key with
//! a block value) is reported as a warning and ignored.

use super::edit::{ImageChange, Plan, PlannedEdit};
use super::image_ref::ImageRef;
use super::locate::ScalarToken;
use super::patch::Doc;
use super::yaml::{self, NodeId, NodeKind};
use super::{EditError, Warning};

const KEY: &str = "\"$imagewatch\"";

/// What a marked value holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Full,
    Tag,
    Name,
}

/// The marker value of a `# {"$imagewatch": "…"}` comment starting at the
/// `#` of `comment` (the rest of the line).
fn marker_value(comment: &str) -> Option<&str> {
    let body = comment.strip_prefix('#')?.trim();
    let body = body.strip_prefix('{')?.strip_suffix('}')?.trim();
    let (key, value) = body.split_once(':')?;
    if key.trim() != KEY {
        return None;
    }
    let value = value.trim().strip_prefix('"')?.strip_suffix('"')?;
    (!value.contains(['"', '\\'])).then_some(value)
}

/// Which part of `marker`'s image a marker value names, if it is one of
/// `marker`'s.
fn part(value: &str, marker: &str) -> Option<Part> {
    match value.strip_prefix(marker)? {
        "" => Some(Part::Full),
        ":tag" => Some(Part::Tag),
        ":name" => Some(Part::Name),
        _ => None,
    }
}

/// One marked value.
struct Marked {
    part: Part,
    token: ScalarToken,
}

/// Values (not keys) of every collection, and document roots, in order.
fn value_nodes(stream: &yaml::Stream) -> Vec<NodeId> {
    let mut out = Vec::new();
    for node in &stream.nodes {
        match &node.kind {
            NodeKind::Mapping(entries) => out.extend(entries.iter().map(|&(_, v)| v)),
            NodeKind::Sequence(items) => out.extend(items.iter().copied()),
            _ => {}
        }
    }
    out.extend(stream.documents.iter().copied());
    out.sort_unstable();
    out
}

/// The marked values of `marker` in one parsed file, plus warnings about
/// markers that are not attached to a value.
fn marked_values(doc: &Doc<'_>, marker: &str) -> Result<(Vec<Marked>, Vec<Warning>), EditError> {
    let text = doc.text;
    let mut marked = Vec::new();
    let mut attached_lines = Vec::new();
    for id in value_nodes(&doc.stream) {
        let node = doc.stream.node(id);
        if !matches!(node.kind, NodeKind::Scalar { .. }) {
            continue;
        }
        let Some(span) = yaml::scalar_token(text, node) else {
            continue;
        };
        let line_end = text[span.end..]
            .find('\n')
            .map_or(text.len(), |i| span.end + i);
        let rest = text[span.end..line_end].trim_end_matches('\r');
        let trimmed = rest.trim_start_matches([' ', '\t']);
        if trimmed.len() == rest.len() || !trimmed.starts_with('#') {
            continue;
        }
        let Some(part) = marker_value(trimmed).and_then(|v| part(v, marker)) else {
            continue;
        };
        let path = format!("the value marked {trimmed}");
        let token = doc.scalar(id, &path)?;
        attached_lines.push(line_end);
        marked.push(Marked { part, token });
    }
    // Markers of this target that no value carries.
    let mut warnings = Vec::new();
    let mut offset = 0;
    for (number, line) in text.split_inclusive('\n').enumerate() {
        let line_end = offset + line.trim_end_matches('\n').len();
        offset += line.len();
        let Some(key) = line.find(KEY) else {
            continue;
        };
        let Some(hash) = line[..key].rfind('#') else {
            continue;
        };
        let comment = line[hash..].trim_end_matches(['\r', '\n']);
        if marker_value(comment)
            .and_then(|v| part(v, marker))
            .is_some()
            && !attached_lines.contains(&line_end)
        {
            warnings.push(Warning {
                file: doc.name.to_owned(),
                message: format!(
                    "the setter marker on line {} is not after a plain or quoted value on \
                     the same line; it was ignored",
                    number + 1
                ),
            });
        }
    }
    Ok((marked, warnings))
}

/// The image described by the first full value, else by the first name and
/// tag values.
fn describe<'a>(values: impl Iterator<Item = (Part, &'a str)> + Clone) -> String {
    let first = |p: Part| values.clone().find(|&(q, _)| q == p).map(|(_, v)| v);
    match (first(Part::Full), first(Part::Name), first(Part::Tag)) {
        (Some(full), _, _) => full.to_owned(),
        (None, Some(name), Some(tag)) => format!("{name}:{tag}"),
        (None, Some(one), None) | (None, None, Some(one)) => one.to_owned(),
        (None, None, None) => String::new(),
    }
}

pub(crate) fn plan<N: AsRef<str>>(
    files: &[(N, &str)],
    dir: &str,
    marker: &str,
    change: &ImageChange,
) -> Result<Plan, EditError> {
    if marker.is_empty() || marker.contains(['"', '\\']) {
        return Err(EditError::UnsupportedTarget(format!(
            "invalid setter marker {marker:?} (expected <namespace>:<name>)"
        )));
    }
    let new_reference = match change {
        ImageChange::Image(reference) => {
            Some(ImageRef::parse(reference).map_err(EditError::InvalidNewImage)?)
        }
        ImageChange::Tag(_) => None,
    };
    let mut warnings = Vec::new();
    let mut first_file = None;
    let mut all: Vec<(Part, String, String)> = Vec::new(); // (part, old, new)
    let mut edits = Vec::new();
    for (index, (name, text)) in files.iter().enumerate() {
        let name = name.as_ref();
        let lower = name.to_ascii_lowercase();
        if !(lower.ends_with(".yaml") || lower.ends_with(".yml")) || !text.contains(KEY) {
            continue;
        }
        let doc = match Doc::parse(name, index, text) {
            Ok(doc) => doc,
            Err(error) => {
                let ours = text.lines().any(|line| {
                    line.find('#').is_some_and(|hash| {
                        marker_value(line[hash..].trim_end())
                            .and_then(|v| part(v, marker))
                            .is_some()
                    })
                });
                if ours {
                    return Err(error);
                }
                warnings.push(Warning {
                    file: name.to_owned(),
                    message: match error {
                        EditError::InvalidFile { reason, .. } => reason,
                        other => other.to_string(),
                    },
                });
                continue;
            }
        };
        let (marked, mut file_warnings) = marked_values(&doc, marker)?;
        warnings.append(&mut file_warnings);
        if marked.is_empty() {
            continue;
        }
        first_file.get_or_insert_with(|| name.to_owned());
        let mut splices = Vec::new();
        let mut file_values = Vec::new();
        for m in &marked {
            let old = m.token.value.clone();
            let new = match (m.part, change, &new_reference) {
                (Part::Full, ImageChange::Image(reference), _) => reference.clone(),
                (Part::Full, ImageChange::Tag(tag), _) => ImageRef::parse(&old)
                    .map_err(|e| {
                        doc.invalid(format!(
                            "the marked value {old:?} is not a valid image reference, so its \
                             tag cannot be replaced: {e}"
                        ))
                    })?
                    .with_tag(tag)
                    .map_err(EditError::InvalidNewImage)?
                    .to_string(),
                (Part::Tag, ImageChange::Tag(tag), _) => tag.clone(),
                (Part::Tag, ImageChange::Image(reference), Some(parsed)) => parsed
                    .tag()
                    .ok_or_else(|| EditError::NewImageWithoutTag {
                        image: reference.clone(),
                        place: format!("a value marked {marker}:tag in {name}"),
                    })?
                    .to_owned(),
                (Part::Name, ImageChange::Image(_), Some(parsed)) => parsed.repository(),
                (Part::Name, ..) | (Part::Tag, ImageChange::Image(_), None) => old.clone(),
            };
            if new != old {
                splices.push(doc.set(&m.token, &new));
            }
            file_values.push((m.part, old, new));
        }
        if !splices.is_empty() {
            let describe_file = |pick_new: bool| {
                describe(file_values.iter().map(move |(p, old, new)| {
                    (*p, if pick_new { new.as_str() } else { old.as_str() })
                }))
            };
            edits.push(PlannedEdit {
                file: name.to_owned(),
                file_index: index,
                old: describe_file(false),
                new: describe_file(true),
                new_contents: doc.apply(splices)?,
                creates_file: false,
            });
        }
        all.extend(file_values);
    }
    let Some(file) = first_file else {
        return Err(EditError::NotFoundIn {
            file: if dir.is_empty() {
                ".".into()
            } else {
                dir.into()
            },
            what: format!(
                "a setter marker # {{\"$imagewatch\": \"{marker}\"}} (or {marker}:tag, \
                 {marker}:name)"
            ),
            skipped: warnings,
        });
    };
    let mut edits = edits.into_iter();
    Ok(Plan {
        file,
        current: describe(all.iter().map(|(p, old, _)| (*p, old.as_str()))),
        located: None,
        edit: edits.next(),
        more: edits.collect(),
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_comments() {
        assert_eq!(
            marker_value(r#"# {"$imagewatch": "apps:web"}"#),
            Some("apps:web")
        );
        assert_eq!(
            marker_value(r#"#{ "$imagewatch" :"apps:web:tag" }  "#),
            Some("apps:web:tag")
        );
        assert_eq!(marker_value(r#"# {"$imagepolicy": "apps:web"}"#), None);
        assert_eq!(
            marker_value(r#"# {"$imagewatch": "apps:web"} and more"#),
            None
        );
        assert_eq!(marker_value("# plain comment"), None);
        assert_eq!(part("apps:web", "apps:web"), Some(Part::Full));
        assert_eq!(part("apps:web:tag", "apps:web"), Some(Part::Tag));
        assert_eq!(part("apps:web:name", "apps:web"), Some(Part::Name));
        assert_eq!(part("apps:webx", "apps:web"), None);
        assert_eq!(part("apps:web:other", "apps:web"), None);
    }

    fn run(files: &[(&str, &str)], change: ImageChange) -> Result<Plan, EditError> {
        let target = crate::manifests::TargetSpec::Setter {
            path: String::new(),
            marker: "apps:web".to_owned(),
        };
        crate::manifests::plan_edit(files, &target, &change)
    }

    #[test]
    fn markers_in_lists_flow_and_quotes() {
        let text = "images:\n- \"web:v1\" # {\"$imagewatch\": \"apps:web\"}\nx: {a: 1} # {\"$imagewatch\": \"apps:web\"}\n";
        let plan = run(&[("a.yaml", text)], ImageChange::Tag("v2".to_owned())).unwrap();
        assert_eq!(
            plan.edit.unwrap().new_contents,
            text.replace("web:v1", "web:v2")
        );
        // The marker after a flow mapping is not after a value: a warning.
        assert_eq!(plan.warnings.len(), 1);
        assert!(
            plan.warnings[0].message.contains("line 3"),
            "{:?}",
            plan.warnings
        );
    }

    #[test]
    fn tag_markers_need_a_tag() {
        let text = "tag: v1 # {\"$imagewatch\": \"apps:web:tag\"}\n";
        let err = run(
            &[("a.yaml", text)],
            ImageChange::Image(
                "web@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
                    .to_owned(),
            ),
        )
        .unwrap_err();
        assert!(matches!(err, EditError::NewImageWithoutTag { .. }), "{err}");
        let err = run(
            &[(
                "a.yaml",
                "image: '{{ x }}' # {\"$imagewatch\": \"apps:web\"}\n",
            )],
            ImageChange::Tag("v2".to_owned()),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("not a valid image reference"),
            "{err}"
        );
        let plan = run(&[("a.yaml", text)], ImageChange::Tag("v1".to_owned())).unwrap();
        assert_eq!((plan.edit, plan.current.as_str()), (None, "v1"));
    }
}
