//! The `pattern` and `exclude` fields: which tags are candidates at all.
//!
//! A pattern is `""`/`*` (every tag), a glob (bare or `glob:`), a regular expression
//! (`regex:`) or a semver range (`semver:`). Exclude entries are globs only.

use regex::Regex;

use super::PolicyError;
use super::glob::Glob;
use super::order::parse_version;
use super::range::Range;

/// A compiled `pattern`.
#[derive(Clone, Debug)]
pub enum Pattern {
    /// `""`, `*`, `glob:` or `glob:*`: the common case, kept apart so it costs nothing.
    All,
    Glob(Glob),
    /// Searched, not anchored: `regex:canary` matches `my-canary-1`. Anchor with `^…$` for a
    /// whole-tag match, as the regex crate's `is_match` does.
    Regex(Regex),
    /// The tag must parse as a version (see [`parse_version`]) and satisfy the range.
    Semver(Range),
}

impl Pattern {
    /// Parses a pattern; see the module documentation of `policy` for the syntax.
    pub fn parse(pattern: &str) -> Result<Self, PolicyError> {
        // Surrounding blanks are never part of a tag (tags are `[A-Za-z0-9_.-]`), so trimming
        // only forgives YAML quoting slips; it cannot change what matches.
        let pattern = pattern.trim();
        let Some((prefix, body)) = pattern.split_once(':') else {
            return glob_pattern(pattern);
        };
        let body = body.trim();
        match prefix {
            "glob" => glob_pattern(body),
            "regex" => {
                Regex::new(body)
                    .map(Pattern::Regex)
                    .map_err(|error| PolicyError::InvalidRegex {
                        regex: body.to_owned(),
                        reason: regex_error_summary(&error),
                    })
            }
            "semver" => parse_range(body).map(Pattern::Semver),
            // A tag can never contain ':', so a colon always means an intended prefix.
            _ => Err(PolicyError::UnknownPrefix {
                prefix: prefix.to_owned(),
            }),
        }
    }

    /// Whether `tag` passes this pattern (exclusions are checked separately).
    pub fn matches(&self, tag: &str) -> bool {
        match self {
            Pattern::All => true,
            Pattern::Glob(glob) => glob.matches(tag),
            Pattern::Regex(regex) => regex.is_match(tag),
            Pattern::Semver(range) => parse_version(tag).is_some_and(|v| range.matches(&v)),
        }
    }
}

fn glob_pattern(glob: &str) -> Result<Pattern, PolicyError> {
    if glob.is_empty() {
        return Ok(Pattern::All);
    }
    let compiled = Glob::new(glob).map_err(|reason| PolicyError::InvalidGlob {
        glob: glob.to_owned(),
        reason,
    })?;
    Ok(if compiled.matches_everything() {
        Pattern::All
    } else {
        Pattern::Glob(compiled)
    })
}

/// Parses one `exclude` entry: a glob, optionally written with the `glob:` prefix.
pub fn parse_exclude(entry: &str) -> Result<Glob, PolicyError> {
    let trimmed = entry.trim();
    let glob = match trimmed.split_once(':') {
        None => trimmed,
        Some(("glob", body)) => body.trim(),
        Some(_) => {
            return Err(PolicyError::ExcludeNotGlob {
                entry: entry.to_owned(),
            });
        }
    };
    Glob::new(glob).map_err(|reason| PolicyError::InvalidExclude {
        glob: entry.to_owned(),
        reason,
    })
}

/// Parses a `semver:` range with the meaning the peers give it (see [`Range`]).
fn parse_range(range: &str) -> Result<Range, PolicyError> {
    Range::parse(range).map_err(|reason| PolicyError::InvalidSemverRange {
        range: range.to_owned(),
        reason,
    })
}

/// The regex crate's syntax errors are a multi-line caret diagram ending in `error: …`; the
/// last line is what fits a status condition or an event.
fn regex_error_summary(error: &regex::Error) -> String {
    match error {
        regex::Error::Syntax(text) => text
            .lines()
            .rev()
            .find_map(|line| line.trim().strip_prefix("error:"))
            .map_or_else(|| text.trim().to_owned(), |line| line.trim().to_owned()),
        regex::Error::CompiledTooBig(limit) => {
            format!("the compiled regex exceeds the size limit of {limit} bytes")
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_range_spellings_mean_the_same() {
        let spaced = parse_range(">=1.2 <2").unwrap();
        let commas = parse_range(">=1.2, <2").unwrap();
        let loose = parse_range(">= v1.2 , < 2").unwrap();
        for (version, expected) in [
            ("1.1.9", false),
            ("1.2.0", true),
            ("1.9.9", true),
            ("2.0.0", false),
        ] {
            let v = semver::Version::parse(version).unwrap();
            assert_eq!(spaced.matches(&v), expected, "{version}");
            assert_eq!(commas.matches(&v), expected, "{version}");
            assert_eq!(loose.matches(&v), expected, "{version}");
        }
    }

    #[test]
    fn prefixes_are_recognised() {
        assert!(matches!(Pattern::parse("").unwrap(), Pattern::All));
        assert!(matches!(Pattern::parse("*").unwrap(), Pattern::All));
        assert!(matches!(Pattern::parse("glob:").unwrap(), Pattern::All));
        assert!(matches!(Pattern::parse(" glob:* ").unwrap(), Pattern::All));
        assert!(matches!(
            Pattern::parse("canary-*").unwrap(),
            Pattern::Glob(_)
        ));
        assert!(matches!(
            Pattern::parse("glob:canary-*").unwrap(),
            Pattern::Glob(_)
        ));
        assert!(matches!(
            Pattern::parse("regex:^a(?:b)$").unwrap(),
            Pattern::Regex(_)
        ));
        assert!(matches!(
            Pattern::parse("semver:^1").unwrap(),
            Pattern::Semver(_)
        ));
    }

    #[test]
    fn regex_errors_are_one_line() {
        let error = Pattern::parse("regex:^(canary").unwrap_err().to_string();
        assert_eq!(error, r#"invalid regex "^(canary": unclosed group"#);
    }

    #[test]
    fn range_errors_name_the_range() {
        let error = |range: &str| Pattern::parse(range).unwrap_err().to_string();
        assert_eq!(
            error("semver:"),
            r#"invalid semver range "": the range is empty (write semver:* to accept every release)"#
        );
        assert_eq!(
            error("semver:^1 ||"),
            r#"invalid semver range "^1 ||": an alternative next to "||" is empty"#
        );
        assert!(
            error("semver:>=1.2.x.y").starts_with(r#"invalid semver range ">=1.2.x.y": "#),
            "{}",
            error("semver:>=1.2.x.y")
        );
        assert!(error("semver:>=").starts_with(r#"invalid semver range ">=": "#));
        assert!(error("semver:>=1,").starts_with(r#"invalid semver range ">=1,": "#));
        assert!(error("semver:latest").starts_with(r#"invalid semver range "latest": "#));
    }

    #[test]
    fn exclude_entries_are_globs() {
        assert!(parse_exclude("*.sig").unwrap().matches("sha256-1.sig"));
        assert!(parse_exclude("glob:*.sig").unwrap().matches("sha256-1.sig"));
        assert_eq!(
            parse_exclude("regex:^latest$").unwrap_err().to_string(),
            r#"exclude entry "regex:^latest$" is not a glob (exclude takes globs, optionally written glob:…)"#
        );
        assert_eq!(
            parse_exclude("v[1").unwrap_err().to_string(),
            r#"invalid exclude glob "v[1": character class opened at position 2 is never closed with "]""#
        );
    }
}
