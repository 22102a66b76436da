//! Tag globs: the small shell-style matcher behind bare and `glob:` patterns and `exclude`
//! entries.
//!
//! Syntax: `*` matches any run of characters (including none), `?` exactly one character,
//! `[abc]`, `[a-z]` one character of a class and `[!x]` (or `[^x]`) one character outside it.
//! Every other character matches itself. A glob always matches the whole tag, never a part of
//! it. There is no escape character: OCI tags are limited to `[A-Za-z0-9_.-]`, so no tag can
//! contain a metacharacter that would need escaping.

use std::fmt;

/// Why a glob was rejected. The text is shown to users after the glob itself.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    /// A `[` with no `]` after it.
    #[error("character class opened at position {position} is never closed with \"]\"")]
    UnclosedClass {
        /// 1-based character position of the `[`.
        position: usize,
    },
    /// `[]` or `[!]`: a class that could never match anything, almost certainly a typo.
    #[error("empty character class at position {position}")]
    EmptyClass {
        /// 1-based character position of the `[`.
        position: usize,
    },
    /// `[z-a]`: rejected rather than silently matching nothing.
    #[error("character range \"{start}-{end}\" is reversed (write \"{end}-{start}\")")]
    ReversedRange {
        /// First character of the range as written.
        start: char,
        /// Last character of the range as written.
        end: char,
    },
}

/// A compiled glob.
#[derive(Clone, PartialEq, Eq)]
pub struct Glob {
    source: String,
    tokens: Vec<Token>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Literal(char),
    AnyRun,
    AnyOne,
    Class {
        negated: bool,
        /// Inclusive ranges; a single character `c` is stored as `(c, c)`.
        ranges: Vec<(char, char)>,
    },
}

impl Token {
    /// Whether this single-character token accepts `c`. `AnyRun` is handled by the matcher
    /// itself because it spans a variable number of characters.
    fn accepts(&self, c: char) -> bool {
        match self {
            Token::Literal(l) => *l == c,
            Token::AnyOne => true,
            Token::Class { negated, ranges } => {
                ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
            }
            Token::AnyRun => false,
        }
    }
}

impl Glob {
    /// Compiles `glob`. Errors point at the offending character so users can fix the spec.
    pub fn new(glob: &str) -> Result<Self, GlobError> {
        let chars: Vec<char> = glob.chars().collect();
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '*' => {
                    // Consecutive stars mean the same as one; collapsing them keeps the matcher's
                    // backtracking trivially bounded.
                    if tokens.last() != Some(&Token::AnyRun) {
                        tokens.push(Token::AnyRun);
                    }
                    i += 1;
                }
                '?' => {
                    tokens.push(Token::AnyOne);
                    i += 1;
                }
                '[' => {
                    let (token, next) = parse_class(&chars, i)?;
                    tokens.push(token);
                    i = next;
                }
                c => {
                    tokens.push(Token::Literal(c));
                    i += 1;
                }
            }
        }
        Ok(Glob {
            source: glob.to_owned(),
            tokens,
        })
    }

    /// The glob as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the glob matches the whole of `text`.
    pub fn matches(&self, text: &str) -> bool {
        // Classic greedy matcher with a single backtrack point: when a later token fails, the most
        // recent `*` absorbs one more character and matching resumes after it. Because every
        // other token consumes exactly one character, remembering only the latest `*` is enough,
        // and the run time is O(len(text) * len(glob)) at worst: no exponential blow-up on
        // patterns like `*a*a*a*b`.
        let text: Vec<char> = text.chars().collect();
        let (mut t, mut p) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while t < text.len() {
            match self.tokens.get(p) {
                Some(Token::AnyRun) => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                Some(token) if token.accepts(text[t]) => {
                    p += 1;
                    t += 1;
                    continue;
                }
                _ => {}
            }
            match star {
                Some((star_p, star_t)) => {
                    p = star_p + 1;
                    t = star_t + 1;
                    star = Some((star_p, star_t + 1));
                }
                None => return false,
            }
        }
        self.tokens[p..].iter().all(|token| *token == Token::AnyRun)
    }

    /// The part of `text` between the glob's literal prefix and literal suffix: for
    /// `canary-*` and `canary-v1.2.4`, `v1.2.4`. `None` when the glob does not match.
    /// The constant parts carry no ordering information, so this is what orders compare.
    pub fn variable_part<'t>(&self, text: &'t str) -> Option<&'t str> {
        if !self.matches(text) {
            return None;
        }
        let prefix: String = self
            .tokens
            .iter()
            .map_while(|t| match t {
                Token::Literal(c) => Some(*c),
                _ => None,
            })
            .collect();
        if prefix.chars().count() == self.tokens.len() {
            // All literal: nothing varies; order on the whole tag.
            return Some(text);
        }
        let suffix: String = {
            let mut rev: Vec<char> = self
                .tokens
                .iter()
                .rev()
                .map_while(|t| match t {
                    Token::Literal(c) => Some(*c),
                    _ => None,
                })
                .collect();
            rev.reverse();
            rev.into_iter().collect()
        };
        let rest = text.strip_prefix(prefix.as_str())?;
        let rest = rest.strip_suffix(suffix.as_str())?;
        Some(rest)
    }

    /// Whether the glob is nothing but stars and so matches every string; callers can skip it.
    pub fn matches_everything(&self) -> bool {
        self.tokens.iter().all(|token| *token == Token::AnyRun) && !self.tokens.is_empty()
    }
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The source text is what a reader of logs or test failures recognises.
        f.debug_tuple("Glob").field(&self.source).finish()
    }
}

/// Parses the class starting at `chars[open] == '['`; returns the token and the index after `]`.
fn parse_class(chars: &[char], open: usize) -> Result<(Token, usize), GlobError> {
    let position = open + 1;
    let mut i = open + 1;
    let negated = matches!(chars.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    loop {
        let Some(&c) = chars.get(i) else {
            return Err(GlobError::UnclosedClass { position });
        };
        if c == ']' {
            if ranges.is_empty() {
                return Err(GlobError::EmptyClass { position });
            }
            return Ok((Token::Class { negated, ranges }, i + 1));
        }
        // `a-z` is a range; a `-` first or last in the class (`[-a]`, `[a-]`) is a literal dash.
        match (chars.get(i + 1), chars.get(i + 2)) {
            (Some('-'), Some(&end)) if end != ']' => {
                if end < c {
                    return Err(GlobError::ReversedRange { start: c, end });
                }
                ranges.push((c, end));
                i += 3;
            }
            _ => {
                ranges.push((c, c));
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(g: &str) -> Glob {
        Glob::new(g).unwrap()
    }

    #[test]
    fn star_matches_any_run_including_empty() {
        let g = glob("canary-*");
        assert!(g.matches("canary-"));
        assert!(g.matches("canary-v1.2.3"));
        assert!(!g.matches("primary-v1.2.3"));
        assert!(!g.matches("xcanary-v1"));
    }

    #[test]
    fn variable_part_strips_literal_prefix_and_suffix() {
        assert_eq!(
            glob("canary-*").variable_part("canary-v1.2.4"),
            Some("v1.2.4")
        );
        assert_eq!(
            glob("build-*-amd64").variable_part("build-17-amd64"),
            Some("17")
        );
        assert_eq!(glob("*").variable_part("v1"), Some("v1"));
        assert_eq!(glob("latest").variable_part("latest"), Some("latest"));
        assert_eq!(glob("canary-*").variable_part("primary-v1"), None);
        assert_eq!(glob("v?.*").variable_part("v1.2"), Some("1.2"));
    }

    #[test]
    fn whole_tag_is_matched() {
        let g = glob("latest");
        assert!(g.matches("latest"));
        assert!(!g.matches("latest-1"));
        assert!(!g.matches("not-latest"));
    }

    #[test]
    fn several_stars_backtrack() {
        let g = glob("*a*a*b");
        assert!(g.matches("aab"));
        assert!(g.matches("xaxaxab"));
        assert!(!g.matches("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
        assert!(glob("*.sig").matches("sha256-abc.sig"));
        assert!(!glob("*.sig").matches("sha256-abc.sig.att"));
        assert!(glob("**").matches(""));
    }

    #[test]
    fn question_mark_is_exactly_one_char() {
        let g = glob("v1.?");
        assert!(g.matches("v1.2"));
        assert!(!g.matches("v1."));
        assert!(!g.matches("v1.10"));
    }

    #[test]
    fn classes_ranges_and_negation() {
        assert!(glob("[abc]x").matches("bx"));
        assert!(!glob("[abc]x").matches("dx"));
        assert!(glob("v[0-9]").matches("v7"));
        assert!(!glob("v[0-9]").matches("va"));
        assert!(glob("[!x]y").matches("ay"));
        assert!(!glob("[!x]y").matches("xy"));
        assert!(glob("[^x]y").matches("ay"));
        assert!(glob("[-a]").matches("-"));
        assert!(glob("[a-]").matches("-"));
        assert!(glob("[a-cx-z]").matches("y"));
        assert!(!glob("[a-cx-z]").matches("m"));
    }

    #[test]
    fn empty_glob_matches_only_empty() {
        assert!(glob("").matches(""));
        assert!(!glob("").matches("a"));
        assert!(!glob("").matches_everything());
        assert!(glob("*").matches_everything());
        assert!(!glob("*a").matches_everything());
    }

    #[test]
    fn malformed_classes_are_rejected() {
        assert_eq!(
            Glob::new("v[0-9"),
            Err(GlobError::UnclosedClass { position: 2 })
        );
        assert_eq!(Glob::new("a[]"), Err(GlobError::EmptyClass { position: 2 }));
        assert_eq!(Glob::new("[!]"), Err(GlobError::EmptyClass { position: 1 }));
        assert_eq!(
            Glob::new("[z-a]"),
            Err(GlobError::ReversedRange {
                start: 'z',
                end: 'a'
            })
        );
        assert_eq!(
            GlobError::UnclosedClass { position: 2 }.to_string(),
            "character class opened at position 2 is never closed with \"]\""
        );
    }
}
