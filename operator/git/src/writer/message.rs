//! Commit messages of the git writer, from a template (`--commit-template`).
//!
//! A template is text with `{{name}}` placeholders:
//!
//! | placeholder    | value |
//! |----------------|-------|
//! | `{{subject}}`  | `imagewatch: my-api-canary canary-v1.2.3 -> canary-v1.2.4` for one edit, `imagewatch: update 3 images` for several |
//! | `{{changes}}`  | one line per edit: `- <namespace>/<watch>: <file>: <old image> -> <new image>` |
//! | `{{count}}`    | number of edits |
//! | `{{watches}}`  | the watches (`namespace/name`), comma-separated |
//! | `{{files}}`    | the edited files, comma-separated, each once |
//! | `{{branch}}`   | the branch the commit is pushed to |
//!
//! Every message ends with the trailers that make imagewatch's commits recognisable, one per
//! edited watch, whatever the template: `Imagewatch-Watch: <namespace>/<name>` (see
//! `imagewatch_engine::held`; a change in Git by a commit without it holds the watch).
//!
//! `\n` and `\t` in the flag value stand for a newline and a tab, so a
//! multi-line template fits in one environment variable. The default is
//! `{{subject}}\n\n{{changes}}`. Unknown placeholders are refused at startup.

/// The default template.
pub const DEFAULT_COMMIT_TEMPLATE: &str = "{{subject}}\\n\\n{{changes}}";

const PLACEHOLDERS: [&str; 6] = ["subject", "changes", "count", "watches", "files", "branch"];

/// One edit, as listed in a commit message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `namespace/name` of the watch.
    pub watch: String,
    /// Edited file.
    pub file: String,
    /// Image (or value) before.
    pub before: String,
    /// Image (or value) after.
    pub after: String,
}

/// Why a template is refused.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// `{{name}}` that is not one of the placeholders.
    #[error(
        "unknown placeholder {{{{{0}}}}} in the commit template (known: subject, changes, count, watches, files, branch)"
    )]
    UnknownPlaceholder(String),
    /// `{{` without `}}`.
    #[error("unclosed placeholder in the commit template: {0:?}")]
    Unclosed(String),
    /// Nothing but whitespace.
    #[error("the commit template renders an empty message")]
    Empty,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Placeholder(&'static str),
}

/// A parsed commit message template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitTemplate {
    parts: Vec<Part>,
}

impl Default for CommitTemplate {
    fn default() -> Self {
        Self::parse(DEFAULT_COMMIT_TEMPLATE).unwrap_or(Self {
            parts: vec![Part::Placeholder("subject")],
        })
    }
}

impl CommitTemplate {
    /// Parses a template (see the module docs).
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let text = unescape(text);
        let mut parts = Vec::new();
        let mut rest = text.as_str();
        while let Some(start) = rest.find("{{") {
            if start > 0 {
                parts.push(Part::Text(rest[..start].to_string()));
            }
            let after = &rest[start + 2..];
            let end = after
                .find("}}")
                .ok_or_else(|| TemplateError::Unclosed(rest[start..].to_string()))?;
            let name = after[..end].trim();
            let known = PLACEHOLDERS
                .iter()
                .find(|p| **p == name)
                .ok_or_else(|| TemplateError::UnknownPlaceholder(name.to_string()))?;
            parts.push(Part::Placeholder(known));
            rest = &after[end + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        let only_whitespace = parts
            .iter()
            .all(|p| matches!(p, Part::Text(t) if t.trim().is_empty()));
        if only_whitespace {
            return Err(TemplateError::Empty);
        }
        Ok(Self { parts })
    }

    /// The message for `changes` (at least one) pushed to `branch`.
    pub fn render(&self, changes: &[Change], branch: &str) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Placeholder(name) => out.push_str(&value(name, changes, branch)),
            }
        }
        let out = out.trim().to_string();
        let body = if out.is_empty() {
            // A template of placeholders that all rendered empty: never an empty commit message.
            subject(changes)
        } else {
            out
        };
        // The trailers that tell imagewatch's commits (whatever the template), one per watch.
        let trailers =
            imagewatch_engine::held::trailer_lines(changes.iter().map(|c| c.watch.as_str()));
        format!("{body}\n\n{trailers}")
    }
}

fn value(name: &str, changes: &[Change], branch: &str) -> String {
    match name {
        "subject" => subject(changes),
        "changes" => changes
            .iter()
            .map(|c| format!("- {}: {}: {} -> {}", c.watch, c.file, c.before, c.after))
            .collect::<Vec<_>>()
            .join("\n"),
        "count" => changes.len().to_string(),
        "watches" => changes
            .iter()
            .map(|c| c.watch.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        "files" => {
            let mut files: Vec<&str> = Vec::new();
            for c in changes {
                if !files.contains(&c.file.as_str()) {
                    files.push(&c.file);
                }
            }
            files.join(", ")
        }
        "branch" => branch.to_string(),
        _ => String::new(),
    }
}

/// `imagewatch: <watch> <old> -> <new>` for one edit, `imagewatch: update N images` otherwise.
pub fn subject(changes: &[Change]) -> String {
    match changes {
        [one] => {
            let name = one.watch.rsplit('/').next().unwrap_or(&one.watch);
            format!(
                "imagewatch: {name} {} -> {}",
                short_image(&one.before),
                short_image(&one.after)
            )
        }
        many => format!("imagewatch: update {} images", many.len()),
    }
}

/// The tag of an image reference (with a shortened digest when there is one); the whole
/// text when it is not an image reference with a tag.
pub fn short_image(image: &str) -> String {
    let Ok(parsed) = imagewatch_engine::manifests::ImageRef::parse(image) else {
        return image.to_string();
    };
    let digest = parsed.digest().map(|d| {
        let hex = d.split_once(':').map_or(d, |(_, h)| h);
        format!("@{}", hex.get(..12).unwrap_or(hex))
    });
    match (parsed.tag(), digest) {
        (Some(tag), Some(d)) => format!("{tag}{d}"),
        (Some(tag), None) => tag.to_string(),
        (None, Some(d)) => d,
        (None, None) => image.to_string(),
    }
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(watch: &str, file: &str, before: &str, after: &str) -> Change {
        Change {
            watch: watch.into(),
            file: file.into(),
            before: before.into(),
            after: after.into(),
        }
    }

    #[test]
    fn default_single_and_many() {
        let t = CommitTemplate::default();
        let one = [change(
            "my-api/my-api-canary",
            "apps/stg/deployment-canary.yaml",
            "r.example/my-api:canary-v1.2.3",
            "r.example/my-api:canary-v1.2.4",
        )];
        assert_eq!(
            t.render(&one, "main"),
            "imagewatch: my-api-canary canary-v1.2.3 -> canary-v1.2.4\n\n\
             - my-api/my-api-canary: apps/stg/deployment-canary.yaml: \
             r.example/my-api:canary-v1.2.3 -> r.example/my-api:canary-v1.2.4\n\n\
             Imagewatch-Watch: my-api/my-api-canary\n"
        );
        let three = [
            change("a/w1", "f1.yaml", "x:1", "x:2"),
            change("a/w2", "f1.yaml", "y:1", "y:2"),
            change("b/w3", "f2.yaml", "z:1", "z:2"),
        ];
        let text = t.render(&three, "main");
        assert!(text.starts_with("imagewatch: update 3 images\n\n- a/w1: f1.yaml: x:1 -> x:2\n"));
        assert_eq!(text.lines().count(), 9);
        assert!(text.ends_with(
            "\n\nImagewatch-Watch: a/w1\nImagewatch-Watch: a/w2\nImagewatch-Watch: b/w3\n"
        ));
    }

    #[test]
    fn custom_placeholders_and_escapes() {
        let t = CommitTemplate::parse(
            "chore({{branch}}): {{count}} image(s)\\n\\nwatches: {{watches}}\\nfiles: {{ files }}",
        )
        .unwrap();
        let text = t.render(
            &[
                change("a/w1", "f1.yaml", "x:1", "x:2"),
                change("a/w2", "f1.yaml", "y:1", "y:2"),
            ],
            "release",
        );
        assert_eq!(
            text,
            "chore(release): 2 image(s)\n\nwatches: a/w1, a/w2\nfiles: f1.yaml\n\n\
             Imagewatch-Watch: a/w1\nImagewatch-Watch: a/w2\n"
        );
    }

    #[test]
    fn refuses_bad_templates() {
        assert!(matches!(
            CommitTemplate::parse("{{subjetc}}"),
            Err(TemplateError::UnknownPlaceholder(p)) if p == "subjetc"
        ));
        assert!(matches!(
            CommitTemplate::parse("x {{subject"),
            Err(TemplateError::Unclosed(_))
        ));
        assert!(matches!(
            CommitTemplate::parse(" \\n "),
            Err(TemplateError::Empty)
        ));
    }

    #[test]
    fn short_images() {
        assert_eq!(short_image("r/x:1.2"), "1.2");
        assert_eq!(
            short_image(
                "r/x:1.2@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
            ),
            "1.2@0123456789ab"
        );
        assert_eq!(short_image("1.2.3"), "1.2.3");
    }
}
