//! Emitting the edit: rewriting one image scalar and nothing else.
//!
//! Place in the flow: after `locate` has read the current image from Git,
//! [`plan_workload_edit`] computes the new reference ([`ImageChange`]), rewrites the
//! token with [`replace_scalar`] and re-parses the result as a self-check.
//! The output is the new file contents; writing them (to a working tree or a
//! Git commit) is the caller's business.
//!
//! The result of planning any target ([`super::plan_edit`]) is a [`Plan`]:
//! * `plan.edit` is the change to the first (usually only) file, `None` when
//!   the image is already current;
//! * `plan.more` holds changes to further files, in file order. Only setter
//!   markers ([`super::TargetSpec::Setter`]) can span several files; `more`
//!   is empty for every other target and whenever `edit` is `None`. Use
//!   [`Plan::edits`] to go through all of them. A caller must write every
//!   one of them (in one commit) or none;
//! * a [`PlannedEdit`] with `creates_file` set names a file that did not
//!   exist (an Argo CD source file written for the first time); its `old`
//!   is empty and its `file_index` is the length of the caller's slice;
//! * `plan.located` is the one scalar that holds the image, for targets that
//!   are one scalar (workload containers, Helm values keys); `None` for
//!   targets that are several fields or may add lines.
//!
//! Byte-minimal means: only the bytes of the scalar token change. The token
//! keeps its quoting style; the value is re-escaped for it. A plain token
//! whose new value could not stay plain (it would parse as something else)
//! becomes double-quoted, the only style change made.

use std::ops::Range;

use super::image_ref::{ImageRef, validate_tag};
use super::locate::{Located, ScalarStyle, find_in_parsed, find_workload_image, token_matches};
use super::{EditError, EditOptions, ImageRefError, Warning, WorkloadTarget, yaml};

/// How the image of the target container should change.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ImageChange {
    /// Keep the repository, set this tag, drop any digest (`--tag`).
    Tag(String),
    /// Replace the whole reference with exactly this one (`--image`).
    Image(String),
}

impl ImageChange {
    /// Rejects a malformed tag or image before any file is searched.
    pub fn validate(&self) -> Result<(), ImageRefError> {
        match self {
            Self::Tag(tag) => validate_tag(tag),
            Self::Image(image) => ImageRef::parse(image).map(drop),
        }
    }
}

/// A change to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEdit {
    /// File name as given by the caller.
    pub file: String,
    /// Index of that file in the caller's slice.
    pub file_index: usize,
    /// The image before and after (for targets that hold only a tag, such
    /// as a Helm values key, the tag before and after). `old` is empty when
    /// the target did not exist yet (an added Kustomize entry, a created
    /// file).
    pub old: String,
    pub new: String,
    /// The complete new text of the file.
    pub new_contents: String,
    /// The file does not exist yet and is created by this edit.
    pub creates_file: bool,
}

/// Result of planning: where the image is, the edit if one is needed, and
/// the files that were skipped while searching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// File holding the image (as named by the caller).
    pub file: String,
    /// The image as it is now (empty when the target does not exist yet).
    pub current: String,
    /// Exactly where the image is, when it is one scalar (see the module
    /// documentation).
    pub located: Option<Located>,
    /// `None` when the image already has the requested value.
    pub edit: Option<PlannedEdit>,
    /// Edits of further files (setter markers only); empty when `edit` is
    /// `None`.
    pub more: Vec<PlannedEdit>,
    /// Files skipped during the search (they did not parse).
    pub warnings: Vec<Warning>,
}

impl Plan {
    /// Every file edit: `edit`, then `more`.
    pub fn edits(&self) -> impl Iterator<Item = &PlannedEdit> {
        self.edit.iter().chain(&self.more)
    }
}

/// Plans the edit of `target`'s image in `files` (`(name, contents)` pairs),
/// e.g. the blobs of a Git tree. Pure. `plan.edit` is `None` when the image
/// is already current; otherwise it holds the complete new file contents.
pub fn plan_workload_edit<N: AsRef<str>>(
    files: &[(N, &str)],
    target: &WorkloadTarget,
    change: &ImageChange,
) -> Result<Plan, EditError> {
    plan_workload_edit_with(files, target, change, EditOptions::default())
}

/// [`plan_workload_edit`] with [`EditOptions`].
pub fn plan_workload_edit_with<N: AsRef<str>>(
    files: &[(N, &str)],
    target: &WorkloadTarget,
    change: &ImageChange,
    options: EditOptions,
) -> Result<Plan, EditError> {
    let plan = plan_workload_unchecked(files, target, change)?;
    options.check(&plan)?;
    Ok(plan)
}

fn plan_workload_unchecked<N: AsRef<str>>(
    files: &[(N, &str)],
    target: &WorkloadTarget,
    change: &ImageChange,
) -> Result<Plan, EditError> {
    change.validate().map_err(EditError::InvalidNewImage)?;
    let search = find_workload_image(files, target)?;
    let current = search.located.clone();
    let new = match change {
        ImageChange::Image(image) => image.clone(),
        ImageChange::Tag(tag) => ImageRef::parse(&current.value)
            .map_err(|source| EditError::InvalidCurrentImage {
                target: Box::new(target.clone()),
                site: Box::new(current.site()),
                current: current.value.clone(),
                source,
            })?
            .with_tag(tag)
            .map_err(EditError::InvalidNewImage)?
            .to_string(),
    };
    if new == current.value {
        return Ok(Plan {
            file: current.file.clone(),
            current: current.value.clone(),
            located: Some(current),
            edit: None,
            more: Vec::new(),
            warnings: search.warnings,
        });
    }
    let Some((name, text)) = files.get(current.file_index) else {
        return Err(EditError::StaleLocation {
            file: current.file.clone(),
        });
    };
    let new_contents = replace_scalar(text, &current, &new)?;
    let edited_document = search
        .document
        .as_ref()
        .map(|(range, nodes)| (range.clone(), *nodes, text.len()));
    verify(
        name.as_ref(),
        search.shape,
        edited_document,
        &new_contents,
        &current,
        &new,
        target,
    )?;
    Ok(Plan {
        file: current.file.clone(),
        current: current.value.clone(),
        edit: Some(PlannedEdit {
            file: current.file.clone(),
            file_index: current.file_index,
            old: current.value.clone(),
            new,
            new_contents,
            creates_file: false,
        }),
        located: Some(current),
        more: Vec::new(),
        warnings: search.warnings,
    })
}

/// Returns `source` with the located scalar token replaced by `new_value`,
/// rendered in the token's quoting style. Every other byte is kept.
///
/// Fails with [`EditError::StaleLocation`] when `located` does not describe
/// a token of `source` (e.g. it came from another version of the file).
pub fn replace_scalar(
    source: &str,
    located: &Located,
    new_value: &str,
) -> Result<String, EditError> {
    let stale = || EditError::StaleLocation {
        file: located.file.clone(),
    };
    let token = source.get(located.span.clone()).ok_or_else(stale)?;
    if !token_matches(token, located.style, &located.value) {
        return Err(stale());
    }
    let rendered = render_scalar(located.style, new_value);
    let mut out = String::with_capacity(source.len() - token.len() + rendered.len());
    out.push_str(&source[..located.span.start]);
    out.push_str(&rendered);
    out.push_str(&source[located.span.end..]);
    Ok(out)
}

/// Renders `value` as a scalar token in `style`, falling back to double
/// quotes when the style cannot represent it faithfully.
pub fn render_scalar(style: ScalarStyle, value: &str) -> String {
    match style {
        ScalarStyle::Plain if can_be_plain(value) => value.to_owned(),
        ScalarStyle::SingleQuoted if can_be_single_quoted(value) => {
            format!("'{}'", value.replace('\'', "''"))
        }
        _ => double_quoted(value),
    }
}

/// Characters that YAML (1.1 or 1.2) reads as something other than content.
fn is_special_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{FEFF}' | '\u{2028}' | '\u{2029}')
}

/// Whether `value` survives as a plain scalar in any context (block or
/// flow) and is still read as a string. Deliberately conservative: a false
/// "no" only costs a pair of quotes.
fn can_be_plain(value: &str) -> bool {
    let Some(first) = value.chars().next() else {
        return false;
    };
    // Indicators that would start another construct.
    if "-?:,[]{}#&*!|>'\"%@`".contains(first) || first.is_whitespace() {
        return false;
    }
    if value.ends_with(char::is_whitespace) || value.ends_with(':') {
        return false;
    }
    if value
        .chars()
        .any(|c| is_special_char(c) || matches!(c, ',' | '[' | ']' | '{' | '}'))
    {
        return false;
    }
    // `: ` would start a mapping value, ` #` a comment.
    if value.contains(": ")
        || value.contains(":\t")
        || value.contains(" #")
        || value.contains("\t#")
    {
        return false;
    }
    !resolves_to_non_string(value)
}

/// Whether a plain scalar would be read as null, a boolean, a number or a
/// timestamp by YAML 1.1 or 1.2 loaders (Kubernetes tooling uses both).
fn resolves_to_non_string(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    if matches!(
        lower.as_str(),
        "~" | "null"
            | "true"
            | "false"
            | "yes"
            | "no"
            | "on"
            | "off"
            | "y"
            | "n"
            | ".inf"
            | "+.inf"
            | "-.inf"
            | ".nan"
    ) {
        return true;
    }
    let unsigned = lower.trim_start_matches(['+', '-']);
    if ["0x", "0o", "0b"].iter().any(|p| unsigned.starts_with(p)) {
        return true;
    }
    // Decimal, float, sexagesimal (`1:30`) and date-like forms.
    let numeric_chars = lower
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '+' | '-' | '.' | '_' | ':' | 'e'));
    if numeric_chars && lower.chars().any(|c| c.is_ascii_digit()) {
        return true;
    }
    // Timestamps such as 2024-01-02t10:00:00z.
    let bytes = lower.as_bytes();
    bytes.len() >= 10 && bytes[..4].iter().all(u8::is_ascii_digit) && bytes[4] == b'-'
}

fn can_be_single_quoted(value: &str) -> bool {
    // Line breaks would be folded and other control characters cannot be
    // written at all inside single quotes.
    !value.chars().any(is_special_char)
}

fn double_quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{b}' => out.push_str("\\v"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            '\u{1b}' => out.push_str("\\e"),
            '\u{85}' => out.push_str("\\N"),
            '\u{a0}' => out.push_str("\\_"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c if is_special_char(c) => {
                let code = u32::from(c);
                if code <= 0xFF {
                    out.push_str(&format!("\\x{code:02X}"));
                } else {
                    out.push_str(&format!("\\u{code:04X}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Checks the edited file: it parses to the same shape (documents and nodes) as the original
/// had when the target was found, and the target now reads `new` at the same place. A failure
/// here means a bug or an unforeseen YAML corner case; refusing is better than committing a
/// broken manifest.
///
/// The edit changes bytes of one document only, so the check first re-parses just that
/// document (`document`: its range in the original text, its node count, and the original
/// length); only when that does not confirm the edit is the whole file parsed again, which
/// also gives the precise error. An edit of a large multi-document file so costs little more
/// than finding the target.
fn verify(
    name: &str,
    shape_before: (usize, usize),
    document: Option<(Range<usize>, usize, usize)>,
    new_text: &str,
    located: &Located,
    new: &str,
    target: &WorkloadTarget,
) -> Result<(), EditError> {
    if let Some((range, nodes, old_len)) = document
        && document_confirms_edit(name, range, nodes, old_len, new_text, located, new, target)
    {
        return Ok(());
    }
    let fail = |detail: String| EditError::VerificationFailed {
        file: name.to_owned(),
        detail,
    };
    let stream = yaml::parse_stream(new_text)
        .map_err(|e| fail(format!("the edited file does not parse: {e}")))?;
    if (stream.documents.len(), stream.nodes.len()) != shape_before {
        return Err(fail(
            "the edit changed the structure of the file".to_owned(),
        ));
    }
    let search = find_in_parsed(&[(name, 0, new_text, &stream)], target, Vec::new())
        .map_err(|e| fail(format!("the target cannot be found again: {e}")))?;
    if search.located.value != new || search.located.span.start != located.span.start {
        return Err(fail(format!(
            "the image reads {:?} afterwards instead of {new:?}",
            search.located.value
        )));
    }
    Ok(())
}

/// Whether the edited document alone parses to one document of `nodes` nodes in which the
/// target reads `new` at the located place. The rest of the file is byte for byte what was
/// parsed before.
#[allow(clippy::too_many_arguments)]
fn document_confirms_edit(
    name: &str,
    range: Range<usize>,
    nodes: usize,
    old_len: usize,
    new_text: &str,
    located: &Located,
    new: &str,
    target: &WorkloadTarget,
) -> bool {
    if located.span.start < range.start || located.span.end > range.end {
        return false;
    }
    let Some(end) = (range.end + new_text.len()).checked_sub(old_len) else {
        return false;
    };
    let Some(part) = new_text.get(range.start..end) else {
        return false;
    };
    let Ok(stream) = yaml::parse_stream(part) else {
        return false;
    };
    if stream.documents.len() != 1 || stream.nodes.len() != nodes {
        return false;
    }
    find_in_parsed(&[(name, 0, part, &stream)], target, Vec::new()).is_ok_and(|search| {
        search.located.value == new && search.located.span.start + range.start == located.span.start
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifests::WorkloadKind;

    fn pod(image_token: &str) -> String {
        format!(
            "kind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: {image_token} # keep\n"
        )
    }

    fn edit(text: &str, change: ImageChange) -> Result<Option<PlannedEdit>, EditError> {
        plan_workload_edit(
            &[("pod.yaml".to_owned(), text)],
            &WorkloadTarget::new(WorkloadKind::Pod, "p", "c"),
            &change,
        )
        .map(|plan| plan.edit)
    }

    #[test]
    fn tag_change_keeps_quoting_style() {
        for (before, after) in [
            ("app:1", "app:2"),
            ("'app:1'", "'app:2'"),
            ("\"app:1\"", "\"app:2\""),
        ] {
            let planned = edit(&pod(before), ImageChange::Tag("2".into()))
                .unwrap()
                .unwrap();
            assert_eq!(planned.new_contents, pod(after));
            assert_eq!(
                (planned.old.as_str(), planned.new.as_str()),
                ("app:1", "app:2")
            );
        }
    }

    #[test]
    fn the_self_check_reparses_only_the_edited_document_and_refuses_a_changed_shape() {
        let text = "kind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n    \
                    image: app:1\n---\n  kind: Pod\n  metadata:\n    name: p\n  spec:\n    \
                    containers:\n    - {name: c, image: \"app:1\"} # keep\n---\nkind: Pod\n";
        let target = WorkloadTarget::new(WorkloadKind::Pod, "p", "c");
        let files = [("pods.yaml", text)];
        let search = find_workload_image(&files, &target).unwrap();
        let (range, nodes) = search.document.clone().unwrap();
        assert!(text[range.clone()].starts_with("  kind: Pod"), "{range:?}");
        let new_text = replace_scalar(text, &search.located, "app:2").unwrap();
        assert!(document_confirms_edit(
            "pods.yaml",
            range.clone(),
            nodes,
            text.len(),
            &new_text,
            &search.located,
            "app:2",
            &target,
        ));
        // A document that gained a node is not confirmed (the whole file is checked then).
        let grown = new_text.replacen("name: p\n", "name: p\n    extra: x\n", 1);
        assert!(!document_confirms_edit(
            "pods.yaml",
            range,
            nodes,
            text.len(),
            &grown,
            &search.located,
            "app:2",
            &target,
        ));
        let planned = plan_workload_edit(&files, &target, &ImageChange::Tag("2".into()))
            .unwrap()
            .edit
            .unwrap();
        assert_eq!(planned.new_contents, new_text);
        assert!(planned.new_contents.contains("image: \"app:2\"} # keep"));
        assert!(planned.new_contents.contains("image: app:1\n"));
    }

    #[test]
    fn already_current_is_none() {
        assert_eq!(
            edit(&pod("app:2"), ImageChange::Tag("2".into())).unwrap(),
            None
        );
        assert_eq!(
            edit(&pod("'app:2'"), ImageChange::Image("app:2".into())).unwrap(),
            None
        );
    }

    #[test]
    fn image_change_is_written_verbatim() {
        let planned = edit(&pod("app:1"), ImageChange::Image("ghcr.io/o/app:3".into()))
            .unwrap()
            .unwrap();
        assert_eq!(planned.new_contents, pod("ghcr.io/o/app:3"));
    }

    #[test]
    fn invalid_inputs_are_rejected_before_searching() {
        assert!(matches!(
            edit(&pod("app:1"), ImageChange::Tag("bad tag".into())),
            Err(EditError::InvalidNewImage(ImageRefError::InvalidTag { .. }))
        ));
        assert!(matches!(
            edit(&pod("app:1"), ImageChange::Image("Not An Image".into())),
            Err(EditError::InvalidNewImage(_))
        ));
        let err = edit(&pod("'{{ .Values.image }}'"), ImageChange::Tag("2".into())).unwrap_err();
        assert!(matches!(err, EditError::InvalidCurrentImage { .. }));
        assert!(
            err.to_string().starts_with(
                "the current image \"{{ .Values.image }}\" of container \"c\" of Pod/p in pod.yaml \
             (document 1) at spec.containers[0].image is not a valid image reference"
            ),
            "{err}"
        );
    }

    #[test]
    fn plain_switches_to_double_quotes_only_when_needed() {
        for (value, expected) in [
            ("app:2", "app:2"),
            (
                "registry.io:5000/a/b:1.0@sha256:x",
                "registry.io:5000/a/b:1.0@sha256:x",
            ),
            ("a: b", "\"a: b\""),
            ("a #b", "\"a #b\""),
            ("*x", "\"*x\""),
            ("-x", "\"-x\""),
            ("[x]", "\"[x]\""),
            ("a,b", "\"a,b\""),
            ("true", "\"true\""),
            ("No", "\"No\""),
            ("1.10", "\"1.10\""),
            ("0x1F", "\"0x1F\""),
            ("1:30", "\"1:30\""),
            ("2024-01-02T10:00:00Z", "\"2024-01-02T10:00:00Z\""),
            ("", "\"\""),
            (" x", "\" x\""),
            ("x:", "\"x:\""),
            ("tab\there", "\"tab\\there\""),
            ("q\"\\", "q\"\\"),
            ("'q", "\"'q\""),
        ] {
            assert_eq!(
                render_scalar(ScalarStyle::Plain, value),
                expected,
                "{value:?}"
            );
        }
    }

    #[test]
    fn quoted_styles_escape() {
        assert_eq!(render_scalar(ScalarStyle::SingleQuoted, "it's"), "'it''s'");
        assert_eq!(
            render_scalar(ScalarStyle::SingleQuoted, "a\nb"),
            "\"a\\nb\""
        );
        assert_eq!(
            render_scalar(ScalarStyle::DoubleQuoted, "a\"b\\c\u{1}\u{FEFF}é"),
            "\"a\\\"b\\\\c\\x01\\uFEFFé\""
        );
    }

    #[test]
    fn rendered_scalars_parse_back_to_the_value() {
        for value in [
            "app:2",
            "a: b",
            "it's",
            "a\"b\\c",
            "x\ny",
            "\u{1}\u{85}\u{2028}",
            "true",
            "1.0",
            "é日本",
            " lead",
            "trail ",
            "#x",
            "a #b",
            "",
        ] {
            for style in [
                ScalarStyle::Plain,
                ScalarStyle::SingleQuoted,
                ScalarStyle::DoubleQuoted,
            ] {
                for doc in [
                    format!("k: {}\n", render_scalar(style, value)),
                    format!("k: [{}]\n", render_scalar(style, value)),
                ] {
                    let stream = yaml::parse_stream(&doc).unwrap();
                    let scalars: Vec<_> = (0..stream.nodes.len())
                        .filter_map(|i| stream.scalar(i))
                        .collect();
                    assert_eq!(scalars, ["k", value], "{doc:?}");
                }
            }
        }
    }

    #[test]
    fn replace_scalar_rejects_stale_locations() {
        let text = pod("app:1");
        let search = find_workload_image(
            &[("pod.yaml", text.as_str())],
            &WorkloadTarget::new(WorkloadKind::Pod, "p", "c"),
        )
        .unwrap();
        let mut located = search.located;
        assert_eq!(
            replace_scalar(&text, &located, "app:2").unwrap(),
            pod("app:2")
        );
        assert!(matches!(
            replace_scalar("short", &located, "x"),
            Err(EditError::StaleLocation { .. })
        ));
        located.span = located.span.start - 1..located.span.end;
        assert!(matches!(
            replace_scalar(&text, &located, "x"),
            Err(EditError::StaleLocation { .. })
        ));
        assert!(
            replace_scalar(
                "é",
                &Located {
                    span: 0..1,
                    ..located
                },
                "x"
            )
            .is_err()
        );
    }
}
