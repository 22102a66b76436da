//! `semver:` ranges, read the way Flux, Argo CD Image Updater, Kargo and Keel read them: the
//! constraint language of the Go library Masterminds/semver v3, which all four use.
//!
//! Cargo's and npm's ranges look the same but differ in meaning (Cargo reads `1.2` as `^1.2`;
//! npm admits a prerelease only for the `major.minor.patch` a comparator names and has no
//! `!=`), so a rule copied from a peer would pick another tag. No Rust crate implements this
//! language, hence this small parser on top of the `semver` crate's versions.
//!
//! Grammar: alternatives separated by `||`; within one, comparators separated by blanks or one
//! comma (`>=1.2 <2`, `>=1.2, <2`); a comparator is an optional operator (`=`, `!=`, `>`, `<`,
//! `>=`, `=>`, `<=`, `=<`, `~`, `~>`, `^`), optional blanks and a partial version: an optional
//! `v`, one to three numbers of which any may be a wildcard `x`, `X` or `*` (what follows a
//! wildcard is ignored), an optional `-prerelease` and `+build`. `A - B` (blanks around the
//! dash) is `>=A, <=B`.
//!
//! Meaning, per comparator (a missing number counts as a wildcard):
//!
//! | written | means |
//! |---|---|
//! | `1.2.3`, `=1.2.3` | exactly 1.2.3 (build metadata ignored) |
//! | `1.2`, `1.2.x`, `=1.2` | `>=1.2.0, <1.3.0` (like `~1.2`) |
//! | `1`, `1.x`, `1.*` | `>=1.0.0, <2.0.0` |
//! | `*`, `x` | any release |
//! | `~1.2.3` | `>=1.2.3, <1.3.0`; `~1.2` the same from 1.2.0; `~1` is `>=1.0.0, <2.0.0` |
//! | `^1.2.3` | `>=1.2.3, <2.0.0`; `^0.2.3` is `<0.3.0`; `^0.0.3` is exactly 0.0.3 |
//! | `>1.2` | greater than every 1.2.x, i.e. `>=1.3.0`; `>1` is `>=2.0.0` |
//! | `<=1.2` | up to every 1.2.x |
//! | `!=1.2` | not any 1.2.x |
//!
//! Prereleases: a version with a prerelease satisfies an alternative only when some comparator
//! of that alternative has a prerelease itself — any prerelease, of any version: `>=1.2.4-0`
//! admits `1.3.0-rc.1` (npm would not). Without one, `*` and `>=0` match releases only.

use std::cmp::Ordering;

use semver::{Prerelease, Version};

/// A parsed range: it matches when any alternative matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    alternatives: Vec<Alternative>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Alternative {
    comparators: Vec<Comparator>,
    /// Some comparator names a prerelease, so prerelease versions may match.
    admits_prereleases: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// No operator, or `=`.
    Exact,
    NotEqual,
    Greater,
    Less,
    GreaterOrEqual,
    LessOrEqual,
    Tilde,
    Caret,
}

/// The first number that was a wildcard (or missing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wildcard {
    None,
    Major,
    Minor,
    Patch,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Comparator {
    op: Op,
    /// Wildcards read as zero; no build metadata.
    version: Version,
    wildcard: Wildcard,
}

impl Range {
    /// Parses a range. The error is a sentence fragment naming what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Err("the range is empty (write semver:* to accept every release)".into());
        }
        let alternatives = text
            .split("||")
            .map(parse_alternative)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Range { alternatives })
    }

    /// Whether `version` satisfies the range.
    pub fn matches(&self, version: &Version) -> bool {
        self.alternatives.iter().any(|alternative| {
            (version.pre.is_empty() || alternative.admits_prereleases)
                && alternative.comparators.iter().all(|c| c.matches(version))
        })
    }
}

fn parse_alternative(text: &str) -> Result<Alternative, String> {
    if text.trim().is_empty() {
        return Err("an alternative next to \"||\" is empty".into());
    }
    // (operator, version text, whether a comma came before it)
    let mut items: Vec<(&str, &str, bool)> = Vec::new();
    let mut rest = text.trim_start();
    let mut after_comma = false;
    while !rest.is_empty() {
        let op_len = ["!=", ">=", "=>", "<=", "=<", "~>", "=", ">", "<", "~", "^"]
            .iter()
            .find(|op| rest.starts_with(*op))
            .map_or(0, |op| op.len());
        let (op, after) = rest.split_at(op_len);
        let after = after.trim_start();
        let end = after
            .find(|c: char| c.is_whitespace() || c == ',')
            .unwrap_or(after.len());
        if end == 0 {
            return Err(if op.is_empty() {
                format!("unexpected {:?}", after.chars().next().unwrap_or(','))
            } else {
                format!("operator \"{op}\" is not followed by a version")
            });
        }
        items.push((op, &after[..end], after_comma));
        let tail = after[end..].trim_start();
        after_comma = false;
        rest = match tail.strip_prefix(',') {
            Some(next) => {
                after_comma = true;
                let next = next.trim_start();
                if next.is_empty() {
                    return Err("a comma is not followed by a comparator".into());
                }
                next
            }
            None => tail,
        };
    }

    let mut comparators = Vec::new();
    let mut index = 0;
    while index < items.len() {
        let (op, version, _) = items[index];
        // `A - B`: the dash stands alone between two versions without operators.
        if let Some(&("", "-", comma)) = items.get(index + 1) {
            let upper = items.get(index + 2).copied();
            match upper {
                Some(("", upper, false)) if op.is_empty() && !comma && upper != "-" => {
                    comparators.push(comparator(">=", version)?);
                    comparators.push(comparator("<=", upper)?);
                    index += 3;
                    continue;
                }
                _ => {
                    return Err(format!(
                        "a hyphen range is written \"A - B\" with plain versions on both sides \
                         (near {:?})",
                        format!("{op}{version} -")
                    ));
                }
            }
        }
        comparators.push(comparator(op, version)?);
        index += 1;
    }
    let admits_prereleases = comparators.iter().any(|c| !c.version.pre.is_empty());
    Ok(Alternative {
        comparators,
        admits_prereleases,
    })
}

fn comparator(op: &str, text: &str) -> Result<Comparator, String> {
    let op = match op {
        "" | "=" => Op::Exact,
        "!=" => Op::NotEqual,
        ">" => Op::Greater,
        "<" => Op::Less,
        ">=" | "=>" => Op::GreaterOrEqual,
        "<=" | "=<" => Op::LessOrEqual,
        "~" | "~>" => Op::Tilde,
        _ => Op::Caret,
    };
    let invalid = |why: &str| format!("{text:?} is not a version{why}");
    let body = text.strip_prefix('v').unwrap_or(text);
    let core_end = body.find(['-', '+']).unwrap_or(body.len());
    let (core, suffix) = body.split_at(core_end);
    let (pre, build) = match suffix.split_once('+') {
        Some((pre, build)) => (pre, Some(build)),
        None => (suffix, None),
    };
    let pre = pre.strip_prefix('-');
    let numbers: Vec<&str> = core.split('.').collect();
    if numbers.len() > 3 {
        return Err(invalid(" (at most major.minor.patch)"));
    }
    let mut parsed = [0u64; 3];
    let mut wildcard = Wildcard::None;
    for (position, number) in numbers.iter().enumerate() {
        let is_wild = matches!(*number, "x" | "X" | "*");
        if !is_wild && (number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit())) {
            return Err(invalid(
                " (a number or x, X or * expected between the dots)",
            ));
        }
        if wildcard != Wildcard::None {
            continue;
        }
        if is_wild {
            wildcard = [Wildcard::Major, Wildcard::Minor, Wildcard::Patch][position];
        } else {
            parsed[position] = number
                .parse()
                .map_err(|_| invalid(" (a number is too large)"))?;
        }
    }
    if wildcard == Wildcard::None && numbers.len() < 3 {
        wildcard = [Wildcard::Major, Wildcard::Minor, Wildcard::Patch][numbers.len()];
    }
    let pre = match pre {
        None if suffix.starts_with('-') => return Err(invalid(" (empty prerelease)")),
        None => Prerelease::EMPTY,
        Some(pre) => Prerelease::new(pre).map_err(|e| invalid(&format!(" ({e})")))?,
    };
    if let Some(build) = build {
        semver::BuildMetadata::new(build).map_err(|e| invalid(&format!(" ({e})")))?;
    }
    let [major, minor, patch] = parsed;
    Ok(Comparator {
        op,
        version: Version {
            pre,
            ..Version::new(major, minor, patch)
        },
        wildcard,
    })
}

/// Precedence as `SemVer` 2.0 defines it: build metadata plays no part.
fn precedence(a: &Version, b: &Version) -> Ordering {
    (a.major, a.minor, a.patch)
        .cmp(&(b.major, b.minor, b.patch))
        .then_with(|| a.pre.cmp(&b.pre))
}

impl Comparator {
    fn matches(&self, v: &Version) -> bool {
        let c = &self.version;
        let order = precedence(v, c);
        let wild = self.wildcard != Wildcard::None;
        match self.op {
            Op::Exact if wild => self.tilde(v),
            Op::Exact => order == Ordering::Equal,
            Op::Tilde => self.tilde(v),
            Op::NotEqual => self.not_equal(v),
            Op::Greater => match self.wildcard {
                Wildcard::None | Wildcard::Major => order == Ordering::Greater,
                // `>1`: beyond every 1.x.y.
                Wildcard::Minor => v.major > c.major,
                // `>1.2`: beyond every 1.2.x.
                Wildcard::Patch => (v.major, v.minor) > (c.major, c.minor),
            },
            Op::Less => order == Ordering::Less,
            Op::GreaterOrEqual => order != Ordering::Less,
            Op::LessOrEqual if !wild => order != Ordering::Greater,
            Op::LessOrEqual => {
                !(v.major > c.major
                    || (v.major == c.major
                        && v.minor > c.minor
                        && self.wildcard != Wildcard::Minor))
            }
            Op::Caret => self.caret(v),
        }
    }

    fn tilde(&self, v: &Version) -> bool {
        let c = &self.version;
        if precedence(v, c) == Ordering::Less {
            return false;
        }
        // `~0.0.0` and `~*` accept everything from there on.
        if (c.major, c.minor, c.patch) == (0, 0, 0)
            && matches!(self.wildcard, Wildcard::None | Wildcard::Major)
        {
            return true;
        }
        v.major == c.major && (v.minor == c.minor || self.wildcard == Wildcard::Minor)
    }

    fn caret(&self, v: &Version) -> bool {
        let c = &self.version;
        if precedence(v, c) == Ordering::Less {
            return false;
        }
        if c.major > 0 || self.wildcard == Wildcard::Minor {
            return v.major == c.major;
        }
        if v.major > 0 {
            return false;
        }
        if c.minor > 0 || self.wildcard == Wildcard::Patch {
            return v.minor == c.minor;
        }
        if v.minor > 0 {
            return false;
        }
        v.patch == c.patch
    }

    fn not_equal(&self, v: &Version) -> bool {
        let c = &self.version;
        if self.wildcard != Wildcard::None {
            if v.major != c.major {
                return true;
            }
            match self.wildcard {
                Wildcard::Minor => return false,
                _ if v.minor != c.minor => return true,
                Wildcard::Patch => return v.pre != c.pre,
                _ if v.patch != c.patch => return true,
                _ => {}
            }
        }
        precedence(v, c) != Ordering::Equal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How Masterminds' `NewVersion` reads the versions of its own tests: missing numbers are
    /// zero. (Candidate tags are read more strictly, see `order::parse_version`.)
    fn lenient(text: &str) -> Version {
        let core_end = text.find(['-', '+']).unwrap_or(text.len());
        let (core, rest) = text.split_at(core_end);
        let padded = match core.split('.').count() {
            1 => format!("{core}.0.0{rest}"),
            2 => format!("{core}.0{rest}"),
            _ => text.to_owned(),
        };
        Version::parse(padded.trim_start_matches('v')).unwrap()
    }

    /// `operator/src/policy/fixtures/semver-ranges.tsv`: range, version, expected, source.
    #[test]
    fn peer_range_fixtures() {
        let fixture = include_str!("fixtures/semver-ranges.tsv");
        let mut rows = 0;
        for (number, line) in fixture.lines().enumerate() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let columns: Vec<&str> = line.split('\t').collect();
            assert!(columns.len() >= 4, "line {}: {line:?}", number + 1);
            let (range, version, expected) = (columns[0], columns[1], columns[2]);
            let parsed = Range::parse(range);
            match expected {
                "error" => assert!(
                    parsed.is_err(),
                    "line {}: {range:?} should be refused",
                    number + 1
                ),
                "parses" => assert!(
                    parsed.is_ok(),
                    "line {}: {range:?} should parse: {parsed:?}",
                    number + 1
                ),
                "true" | "false" => {
                    let parsed = parsed.unwrap_or_else(|e| {
                        panic!("line {}: {range:?} should parse: {e}", number + 1)
                    });
                    assert_eq!(
                        parsed.matches(&lenient(version)),
                        expected == "true",
                        "line {}: {range:?} on {version:?} ({})",
                        number + 1,
                        columns[3]
                    );
                }
                other => panic!("line {}: unknown expectation {other:?}", number + 1),
            }
            rows += 1;
        }
        assert!(rows > 200, "only {rows} fixture rows");
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let error = |range: &str| Range::parse(range).unwrap_err();
        assert_eq!(error(">="), "operator \">=\" is not followed by a version");
        assert_eq!(error(">=1,"), "a comma is not followed by a comparator");
        assert_eq!(error("1 ||"), "an alternative next to \"||\" is empty");
        assert_eq!(
            error("latest"),
            "\"latest\" is not a version (a number or x, X or * expected between the dots)"
        );
        assert_eq!(
            error("1.2.3.4"),
            "\"1.2.3.4\" is not a version (at most major.minor.patch)"
        );
        assert!(error("1 - >2").starts_with("a hyphen range is written"));
    }
}
