//! `extract` templates: which part of a regex match is ordered, e.g. `$version` or `$1`.
//!
//! The syntax is the `regex` crate's replacement syntax (`$name`, `$1`, `${name}`, `$$` for a
//! literal `$`; a name is the longest run of `[_0-9A-Za-z]`, so `$1a` means the group named
//! `1a` and `${1}a` is group 1 followed by `a`). Unlike `Captures::expand`, which silently
//! expands an unknown group to nothing, every reference is resolved when the policy is built, so
//! a typo is reported at once instead of making every tag unorderable.

use regex::{Captures, Regex};

use super::PolicyError;

/// A parsed template with its group references resolved to indices.
#[derive(Clone, Debug)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Group(usize),
}

impl Template {
    /// Parses `template` against `regex`, whose groups the references must name.
    pub fn parse(template: &str, regex: &Regex) -> Result<Self, PolicyError> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = template;
        while let Some(dollar) = rest.find('$') {
            literal.push_str(&rest[..dollar]);
            let after = &rest[dollar + 1..];
            if let Some(tail) = after.strip_prefix('$') {
                literal.push('$');
                rest = tail;
                continue;
            }
            let (name, tail) = if let Some(braced) = after.strip_prefix('{') {
                let Some(close) = braced.find('}') else {
                    return Err(PolicyError::ExtractUnterminated {
                        extract: template.to_owned(),
                    });
                };
                (&braced[..close], &braced[close + 1..])
            } else {
                let end = after
                    .find(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
                    .unwrap_or(after.len());
                if end == 0 {
                    // A `$` not followed by a name is literal, as in the regex crate.
                    literal.push('$');
                    rest = after;
                    continue;
                }
                (&after[..end], &after[end..])
            };
            if !literal.is_empty() {
                parts.push(Part::Literal(std::mem::take(&mut literal)));
            }
            parts.push(Part::Group(resolve(template, name, regex)?));
            rest = tail;
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        if !parts.iter().any(|part| matches!(part, Part::Group(_))) {
            // Without a group every tag would get the same key and the order would decide nothing.
            return Err(PolicyError::ExtractWithoutGroup {
                extract: template.to_owned(),
            });
        }
        Ok(Template { parts })
    }

    /// The template filled in from one match. A group that did not take part in the match
    /// (an optional group) contributes nothing.
    pub fn expand(&self, captures: &Captures<'_>) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Group(index) => {
                    out.push_str(captures.get(*index).map_or("", |m| m.as_str()));
                }
            }
        }
        out
    }
}

/// Resolves a group reference the way the regex crate does: all digits is an index, anything
/// else a group name.
fn resolve(template: &str, name: &str, regex: &Regex) -> Result<usize, PolicyError> {
    let found = match name.parse::<usize>() {
        Ok(index) => (index < regex.captures_len()).then_some(index),
        Err(_) => regex.capture_names().position(|n| n == Some(name)),
    };
    found.ok_or_else(|| PolicyError::ExtractUnknownGroup {
        extract: template.to_owned(),
        group: name.to_owned(),
        available: available_groups(regex),
    })
}

/// `$0, $1, $version`: what the user could have written instead.
fn available_groups(regex: &Regex) -> String {
    regex
        .capture_names()
        .enumerate()
        .flat_map(|(index, name)| {
            let mut refs = vec![format!("${index}")];
            refs.extend(name.map(|n| format!("${n}")));
            refs
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(regex: &str, template: &str, text: &str) -> String {
        let regex = Regex::new(regex).unwrap();
        let template = Template::parse(template, &regex).unwrap();
        template.expand(&regex.captures(text).unwrap())
    }

    fn error(regex: &str, template: &str) -> String {
        let regex = Regex::new(regex).unwrap();
        Template::parse(template, &regex).unwrap_err().to_string()
    }

    #[test]
    fn named_indexed_and_braced_references() {
        let re = r"^(?P<name>[a-z]+)-v(?P<version>.+)$";
        assert_eq!(expand(re, "$version", "canary-v1.2.3"), "1.2.3");
        assert_eq!(expand(re, "$2", "canary-v1.2.3"), "1.2.3");
        assert_eq!(expand(re, "${2}", "canary-v1.2.3"), "1.2.3");
        assert_eq!(expand(re, "${name}.$version", "canary-v1"), "canary.1");
        assert_eq!(expand(re, "$0", "canary-v1"), "canary-v1");
        assert_eq!(expand(re, "$$$version$", "canary-v1"), "$1$");
        assert_eq!(expand(re, "${1}x", "canary-v1"), "canaryx");
    }

    #[test]
    fn optional_group_that_did_not_match_is_empty() {
        assert_eq!(expand(r"^(a)?(b)$", "[$1]$2", "b"), "[]b");
    }

    #[test]
    fn unknown_groups_are_errors() {
        assert_eq!(
            error(r"^v(?P<version>.+)$", "$x"),
            r#"extract "$x" names no group of the regex: "x" (available: $0, $1, $version)"#
        );
        assert_eq!(
            error(r"^v(.+)$", "$2"),
            r#"extract "$2" names no group of the regex: "2" (available: $0, $1)"#
        );
        // `$1a` is the group named "1a", exactly as the regex crate reads it.
        assert_eq!(
            error(r"^v(.+)$", "$1a"),
            r#"extract "$1a" names no group of the regex: "1a" (available: $0, $1)"#
        );
    }

    #[test]
    fn templates_without_groups_or_unterminated_braces_are_errors() {
        assert_eq!(
            error(r"^v(.+)$", "version"),
            r#"extract "version" references no capture group (write e.g. "$1" or "$name")"#
        );
        assert_eq!(
            error(r"^v(.+)$", "$$1"),
            r#"extract "$$1" references no capture group (write e.g. "$1" or "$name")"#
        );
        assert_eq!(
            error(r"^v(.+)$", "${1"),
            r#"extract "${1" has a "${" without its closing "}""#
        );
    }
}
