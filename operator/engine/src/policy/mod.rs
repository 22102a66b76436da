//! Tag-selection policy: which tag of an image repository a watch follows.
//!
//! A [`TagPolicy`] is built once from a watch's `pattern`, `exclude`, `order` and `extract`
//! fields and then asked to [`select`](TagPolicy::select) the best tag among those a registry
//! lists. Everything here is pure (no I/O, no clock): the same tags give the same answer
//! whatever order the registry listed them in.
//!
//! # Pattern
//!
//! | pattern                         | candidates                                              |
//! |---------------------------------|---------------------------------------------------------|
//! | `""`, `*`                       | every tag                                               |
//! | `canary-*`, `glob:canary-*`     | tags the glob matches as a whole (`*`, `?`, `[a-z]`, `[!x]`); orders compare what the wildcards matched (the glob's literal prefix and suffix are dropped), so `canary-*` orders `canary-v1.2.4` as version `v1.2.4` |
//! | `regex:^canary-v(?P<version>.+)$` | tags the regex matches; **not** implicitly anchored     |
//! | `semver:>=1.2, <2`, `semver:>=1.2 <2` | tags that parse as versions inside the range      |
//!
//! Prefixes are lower-case; any other text before a `:` is an error (a tag cannot contain
//! `:`). Blanks around the pattern and after the prefix are ignored.
//!
//! `exclude` entries are globs (optionally written `glob:…`); a tag matching any of them is
//! never chosen, whatever the pattern and order say.
//!
//! `extract` (only with `regex:`) is a replacement template such as `$version`, `$1` or
//! `${1}.${2}`: the ordered value is the template filled in from the match instead of the whole
//! tag. Every group it names must exist in the regex. An empty `extract` means none.
//!
//! # Order
//!
//! The greatest candidate wins. A candidate whose ordered value cannot be read for the order is
//! skipped, never chosen:
//!
//! - [`Order::Semver`]: the value read as a semantic version, as the peers' library reads
//!   it: an optional `v`, two or three numbers (`1.2` is 1.2.0), leading zeros dropped
//!   (`2024.01.05` is 2024.1.5). A single number (`7`, `1234567`) is not a version, nor is a
//!   fourth number. Prereleases order below their release (`1.2.4-rc.1` < `1.2.4`) and take
//!   part in the order unless the pattern is `semver:`.
//! - [`Order::Newest`]: the registry's push time; tags without one are skipped. `extract` plays
//!   no part (it cannot change a push time).
//! - [`Order::Alphabetical`]: byte-wise comparison (`Z` < `a`, `10` < `9`).
//! - [`Order::Numerical`]: the value read as an exact decimal, `-?[0-9]+(\.[0-9]+)?` (no sign
//!   `+`, exponent, `inf` or `nan`; no size limit, so `9` < `10` < `99999999999999999999`).
//!
//! With [`TagPolicy::prefer_least`] (Alphabetical and Numerical only, Flux's `order: desc`)
//! the least candidate wins instead.
//!
//! Ties (equal versions such as `1.2` and `1.2.0`, versions that differ only in build metadata
//! such as `1.2.3+9` and `1.2.3+10`, equal numbers such as `7` and `007`, equal push times,
//! equal extracted values) go to the byte-wise greatest tag, so the choice never depends on
//! input order.
//!
//! # `semver:` ranges
//!
//! Ranges mean what they mean in Flux, Argo CD Image Updater, Kargo and Keel (the
//! Masterminds/semver constraint language; see `range.rs`): `1.2` is 1.2.x, `x`/`*` are
//! wildcards, `||` separates alternatives, `1.2 - 1.4` is a hyphen range, `!=`, `~` and `^`
//! exist, and a prerelease only matches an alternative that names some prerelease
//! (`>=1.2.4-0` admits `1.3.0-rc.1`; `>=1.2` admits none). The order remains the one given; a
//! `semver:` pattern only filters.
//!
//! # Signatures and attestations
//!
//! Tags cosign and other supply-chain tools push next to an image (`sha256-<64 hex>.sig`,
//! `.att`, `.sbom`, and the bare `sha256-<64 hex>` of the OCI referrers fallback) are never
//! candidates, unless the pattern names them: a glob or regex that contains `sha256-`.

mod error;
mod extract;
mod glob;
mod order;
mod pattern;
mod range;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::cmp::Ordering;

pub use error::PolicyError;
pub use glob::GlobError;

use extract::Template;
use glob::Glob;
pub use order::Order;
use order::{Decimal, parse_version};
use pattern::{Pattern, parse_exclude};

/// One tag as listed by a registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TagInfo {
    /// The tag, e.g. `v1.2.3`.
    pub tag: String,
    /// Manifest digest (`sha256:…`) when the registry reported it.
    pub digest: Option<String>,
    /// When the tag was pushed, if the registry reports it; required by [`Order::Newest`].
    pub pushed_at: Option<jiff::Timestamp>,
}

impl TagInfo {
    /// A tag with neither digest nor push time.
    pub fn new(tag: impl Into<String>) -> Self {
        TagInfo {
            tag: tag.into(),
            digest: None,
            pushed_at: None,
        }
    }
}

/// Checks a pattern without building a policy, e.g. to reject a spec before anything else runs.
///
/// # Errors
///
/// The error [`TagPolicy::new`] would return for this pattern.
pub fn validate_pattern(pattern: &str) -> Result<(), PolicyError> {
    Pattern::parse(pattern).map(drop)
}

/// A compiled tag policy. Cheap to clone; build it once per spec change, not per poll.
#[derive(Clone, Debug)]
pub struct TagPolicy {
    /// The pattern as written (for messages).
    pattern_text: String,
    pattern: Pattern,
    exclude: Vec<Glob>,
    order: Order,
    extract: Option<Template>,
    /// The pattern mentions `sha256-`, so signature and attestation tags may be candidates.
    names_artifacts: bool,
    /// The least candidate wins instead of the greatest.
    least: bool,
}

impl TagPolicy {
    /// Builds a policy.
    ///
    /// `pattern`: `""` or `"*"` matches all; `"glob:canary-*"` or bare `"canary-*"` is a glob;
    /// `"regex:^canary-v(?P<version>.+)$"`; `"semver:>=1.2, <2"` (also `">=1.2 <2"`).
    /// `exclude`: globs. `extract`: e.g. `"$version"` or `"$1"`, the part of the tag that is
    /// ordered; only valid with regex patterns (`Some("")` counts as not given).
    ///
    /// # Errors
    ///
    /// A [`PolicyError`] naming the malformed pattern, exclude entry or extract template.
    pub fn new(
        pattern: &str,
        exclude: &[String],
        order: Order,
        extract: Option<&str>,
    ) -> Result<Self, PolicyError> {
        let names_artifacts = pattern.contains("sha256-");
        let pattern_text = pattern.trim().to_owned();
        let pattern = Pattern::parse(pattern)?;
        let exclude = exclude
            .iter()
            .map(|entry| parse_exclude(entry))
            .collect::<Result<Vec<_>, _>>()?;
        // An empty string is how an unset optional field often arrives from YAML templating.
        let extract = match extract.map(str::trim).filter(|e| !e.is_empty()) {
            None => None,
            Some(template) => match &pattern {
                Pattern::Regex(regex) => Some(Template::parse(template, regex)?),
                _ => {
                    return Err(PolicyError::ExtractNeedsRegex {
                        extract: template.to_owned(),
                    });
                }
            },
        };
        Ok(TagPolicy {
            pattern_text,
            pattern,
            exclude,
            order,
            extract,
            names_artifacts,
            least: false,
        })
    }

    /// The least candidate wins instead of the greatest (Flux's `order: desc`). Only for
    /// [`Order::Alphabetical`] and [`Order::Numerical`]; ties still go to the greatest tag.
    ///
    /// # Errors
    ///
    /// [`PolicyError::LeastNeedsOrder`] for the other orders.
    pub fn prefer_least(mut self) -> Result<Self, PolicyError> {
        if !matches!(self.order, Order::Alphabetical | Order::Numerical) {
            return Err(PolicyError::LeastNeedsOrder { order: self.order });
        }
        self.least = true;
        Ok(self)
    }

    /// The policy of an ImageWatch's `spec.tags` (its defaults: every tag, semver order,
    /// the highest wins).
    ///
    /// # Errors
    /// What [`new`](Self::new) and [`prefer_least`](Self::prefer_least) refuse.
    pub fn from_rules(tags: &imagewatch_crd::TagRules) -> Result<Self, PolicyError> {
        use imagewatch_crd::{TagOrder, TagPick};
        let order = match tags.order.unwrap_or_default() {
            TagOrder::Semver => Order::Semver,
            TagOrder::Newest => Order::Newest,
            TagOrder::Alphabetical => Order::Alphabetical,
            TagOrder::Numerical => Order::Numerical,
        };
        let policy = Self::new(
            tags.pattern.as_deref().unwrap_or(""),
            tags.exclude.as_deref().unwrap_or(&[]),
            order,
            tags.extract.as_deref(),
        )?;
        match tags.pick.unwrap_or_default() {
            TagPick::Highest => Ok(policy),
            TagPick::Lowest => policy.prefer_least(),
        }
    }

    /// The order this policy was built with.
    #[must_use]
    pub fn order(&self) -> Order {
        self.order
    }

    /// Whether `tag` passes the pattern and no exclude glob matches it. A matching tag can
    /// still be skipped by [`select`](Self::select) when its ordered value does not parse for
    /// the order (e.g. `latest` under [`Order::Semver`]).
    #[must_use]
    pub fn matches(&self, tag: &str) -> bool {
        !self.is_excluded(tag) && self.pattern.matches(tag)
    }

    /// The best tag among candidates according to the order, or `None` when no tag qualifies.
    #[must_use]
    pub fn select<'a>(&self, tags: &'a [TagInfo]) -> Option<&'a TagInfo> {
        match self.order {
            // SemVer 2.0 (item 10): build metadata plays no part in precedence, so tags that
            // differ only in it tie, and the tie rule decides (the `semver` crate's `Ord`
            // would compare it).
            Order::Semver => self.best_by(tags, |_, value| {
                parse_version(value).map(|v| semver::Version {
                    build: semver::BuildMetadata::EMPTY,
                    ..v
                })
            }),
            Order::Numerical => self.best_by(tags, |_, value| Decimal::parse(value)),
            Order::Alphabetical => self.best_by(tags, |_, value| Some(value.to_owned())),
            Order::Newest => self.best_by(tags, |info, _| info.pushed_at),
        }
    }

    /// The best `limit` candidates, best first: [`select`](Self::select), then the best of
    /// the rest, and so on.
    #[must_use]
    pub fn ranked(&self, tags: &[TagInfo], limit: usize) -> Vec<TagInfo> {
        let mut rest: Vec<TagInfo> = tags.to_vec();
        let mut ranked = Vec::new();
        while ranked.len() < limit {
            let Some(best) = self.select(&rest).cloned() else {
                break;
            };
            rest.retain(|t| t != &best);
            ranked.push(best);
        }
        ranked
    }

    /// The first of the tag rules that leaves `tag` out, or `None` when it is a candidate:
    /// a supply-chain artifact tag, an `exclude` glob, the pattern (a `semver:` range apart),
    /// then the order (a value it cannot read). The same checks as [`select`](Self::select),
    /// in that order.
    #[must_use]
    pub fn rule_refusal(&self, info: &TagInfo) -> Option<RuleRefusal> {
        let tag = info.tag.as_str();
        if !self.names_artifacts && is_artifact_tag(tag) {
            return Some(RuleRefusal::Artifact);
        }
        if let Some(glob) = self.exclude.iter().find(|glob| glob.matches(tag)) {
            return Some(RuleRefusal::Exclude(glob.source().to_owned()));
        }
        if !self.pattern.matches(tag) {
            let in_range =
                matches!(self.pattern, Pattern::Semver(_)) && parse_version(tag).is_some();
            return Some(if in_range {
                RuleRefusal::Range(self.pattern_text.clone())
            } else {
                RuleRefusal::Pattern(self.pattern_text.clone())
            });
        }
        if self.select(std::slice::from_ref(info)).is_none() {
            return Some(RuleRefusal::NotOrderable(self.order));
        }
        None
    }

    /// The listed tags that rank above `chosen` (every tag with a rank, when nothing is
    /// chosen), best first, each with the rule that leaves it out (`None`: a candidate the
    /// rules admit, left out by something else — a signature, a platform, a pin, a group).
    ///
    /// Tags outside the rules are ranked by the same order on what they would be compared
    /// by (a glob's wildcard part, a regex's `extract`, else the whole tag), so `v2.0.0` ranks
    /// above `v1.9.0` whatever the pattern; a tag the order cannot read at all (`latest` under
    /// `Semver`) ranks nowhere and is not listed.
    #[must_use]
    pub fn ranked_above(
        &self,
        tags: &[TagInfo],
        chosen: Option<&TagInfo>,
    ) -> Vec<(TagInfo, Option<RuleRefusal>)> {
        let bar = chosen.map(|c| (self.loose_rank(c), c));
        let beats = |rank: &Rank, info: &TagInfo| match &bar {
            None => true,
            Some((None, _)) => true,
            Some((Some(bar_rank), bar_info)) => {
                if info.tag == bar_info.tag {
                    return false;
                }
                let by_rank = rank.cmp(bar_rank);
                let by_rank = if self.least {
                    by_rank.reverse()
                } else {
                    by_rank
                };
                by_rank.then_with(|| tie_break(info, bar_info)) == Ordering::Greater
            }
        };
        let mut above: Vec<(Rank, &TagInfo)> = tags
            .iter()
            .filter_map(|info| self.loose_rank(info).map(|rank| (rank, info)))
            .filter(|(rank, info)| beats(rank, info))
            .collect();
        above.sort_by(|(a_rank, a), (b_rank, b)| {
            let by_rank = a_rank.cmp(b_rank);
            let by_rank = if self.least {
                by_rank.reverse()
            } else {
                by_rank
            };
            by_rank.then_with(|| tie_break(a, b)).reverse()
        });
        above
            .into_iter()
            .map(|(_, info)| (info.clone(), self.rule_refusal(info)))
            .collect()
    }

    /// What the order compares for `info`, read leniently: the value [`select`](Self::select)
    /// would order where the rules admit the tag, else the part a pattern would compare.
    fn loose_rank(&self, info: &TagInfo) -> Option<Rank> {
        let tag = info.tag.as_str();
        let value: Cow<'_, str> = match (&self.pattern, &self.extract) {
            (Pattern::Regex(regex), Some(template)) => regex
                .captures(tag)
                .map_or(Cow::Borrowed(tag), |c| Cow::Owned(template.expand(&c))),
            (Pattern::Glob(glob), _) => Cow::Borrowed(glob.variable_part(tag).unwrap_or(tag)),
            _ => Cow::Borrowed(tag),
        };
        match self.order {
            Order::Semver => parse_version(&value).map(|v| {
                Rank::Version(semver::Version {
                    build: semver::BuildMetadata::EMPTY,
                    ..v
                })
            }),
            Order::Numerical => Decimal::parse(&value).map(Rank::Number),
            Order::Alphabetical => Some(Rank::Text(value.into_owned())),
            Order::Newest => info.pushed_at.map(Rank::Time),
        }
    }

    fn is_excluded(&self, tag: &str) -> bool {
        (!self.names_artifacts && is_artifact_tag(tag))
            || self.exclude.iter().any(|glob| glob.matches(tag))
    }

    /// The value the order compares for `tag` (the extracted part, or the tag itself), or
    /// `None` when the tag is not a candidate.
    fn ordered_value<'t>(&self, tag: &'t str) -> Option<Cow<'t, str>> {
        if self.is_excluded(tag) {
            return None;
        }
        match (&self.pattern, &self.extract) {
            (Pattern::Regex(regex), Some(template)) => regex
                .captures(tag)
                .map(|captures| Cow::Owned(template.expand(&captures))),
            // A glob's literal prefix and suffix are the same for every candidate: order on
            // what the wildcards matched, so `canary-*` orders `canary-v1.2.4` as `v1.2.4`.
            (Pattern::Glob(glob), _) => glob.variable_part(tag).map(Cow::Borrowed),
            (pattern, _) => pattern.matches(tag).then_some(Cow::Borrowed(tag)),
        }
    }

    /// The candidate with the greatest key; candidates without a key are skipped.
    fn best_by<'a, K: Ord>(
        &self,
        tags: &'a [TagInfo],
        key: impl Fn(&TagInfo, &str) -> Option<K>,
    ) -> Option<&'a TagInfo> {
        tags.iter()
            .filter_map(|info| {
                let value = self.ordered_value(&info.tag)?;
                Some((key(info, &value)?, info))
            })
            .max_by(|(a_key, a), (b_key, b)| {
                let by_key = a_key.cmp(b_key);
                let by_key = if self.least { by_key.reverse() } else { by_key };
                by_key.then_with(|| tie_break(a, b))
            })
            .map(|(_, info)| info)
    }
}

/// The first tag rule that leaves a tag out (see [`TagPolicy::rule_refusal`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleRefusal {
    /// A signature, attestation or SBOM tag, and the pattern names none.
    Artifact,
    /// The `exclude` glob (as written) that matches it.
    Exclude(String),
    /// The pattern (as written) does not match it.
    Pattern(String),
    /// A version outside the `semver:` range (the pattern as written).
    Range(String),
    /// The order cannot read its value (not a version, not a number, no push time).
    NotOrderable(Order),
}

impl RuleRefusal {
    /// The rule's name, as `status.refusedTags[].reason` gives it.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Artifact => "Artifact",
            Self::Exclude(_) => "Exclude",
            Self::Pattern(_) => "Pattern",
            Self::Range(_) => "Range",
            Self::NotOrderable(_) => "NotOrderable",
        }
    }

    /// Why, in words (after the tag).
    #[must_use]
    pub fn message(&self) -> String {
        match self {
            Self::Artifact => {
                "is a signature, attestation or SBOM tag (a pattern naming sha256- admits it)".into()
            }
            Self::Exclude(glob) => format!("matches exclude {glob:?}"),
            Self::Pattern(pattern) => format!("does not match pattern {pattern:?}"),
            Self::Range(pattern) => format!("is a version outside the range {pattern:?}"),
            Self::NotOrderable(Order::Semver) => {
                "is not a version, so order Semver cannot place it (set spec.tags.extract or another order)".into()
            }
            Self::NotOrderable(Order::Numerical) => {
                "is not a number, so order Numerical cannot place it".into()
            }
            Self::NotOrderable(Order::Newest) => {
                "has no push time yet, so order Newest cannot place it".into()
            }
            Self::NotOrderable(Order::Alphabetical) => "cannot be ordered".into(),
        }
    }
}

/// The value an order compares, for ranking tags the rules leave out too.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Rank {
    Version(semver::Version),
    Number(Decimal),
    Text(String),
    Time(jiff::Timestamp),
}

/// Whether `tag` is one a supply-chain tool pushes next to an image rather than an image to
/// run: `sha256-<64 hex>` (the OCI referrers fallback tag) or that followed by `.sig`, `.att`
/// or `.sbom` (cosign's signature, attestation and SBOM tags).
fn is_artifact_tag(tag: &str) -> bool {
    let Some(rest) = tag.strip_prefix("sha256-") else {
        return false;
    };
    let (Some(hex), Some(suffix)) = (rest.get(..64), rest.get(64..)) else {
        return false;
    };
    hex.bytes().all(|b| b.is_ascii_hexdigit()) && matches!(suffix, "" | ".sig" | ".att" | ".sbom")
}

/// Total order on everything a caller can see, so equal keys never leave the choice to input
/// order: the greatest tag wins; the same tag listed twice (which a registry should not do)
/// goes to the later push, then the greater digest.
fn tie_break(a: &TagInfo, b: &TagInfo) -> Ordering {
    a.tag
        .cmp(&b.tag)
        .then_with(|| a.pushed_at.cmp(&b.pushed_at))
        .then_with(|| a.digest.cmp(&b.digest))
}
