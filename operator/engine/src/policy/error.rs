//! [`PolicyError`]: why a tag policy could not be built.

use super::glob::GlobError;
use super::order::Order;

/// Why a policy could not be built. Messages are complete sentences for users: they quote
/// the offending input and are meant for status conditions and events as they are.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// Text before a `:` in the pattern that is not `glob`, `regex` or `semver`.
    #[error("unknown pattern prefix \"{prefix}:\" (use glob:, regex: or semver:)")]
    UnknownPrefix {
        /// The prefix as written, without the colon.
        prefix: String,
    },
    /// The `regex:` pattern does not compile.
    #[error("invalid regex \"{regex}\": {reason}")]
    InvalidRegex {
        /// The regex as written, without the prefix.
        regex: String,
        /// The regex crate's reason, on one line.
        reason: String,
    },
    /// The glob pattern is malformed.
    #[error("invalid glob \"{glob}\": {reason}")]
    InvalidGlob {
        /// The glob as written, without any prefix.
        glob: String,
        /// What is wrong with it.
        reason: GlobError,
    },
    /// The `semver:` range does not parse.
    #[error("invalid semver range \"{range}\": {reason}")]
    InvalidSemverRange {
        /// The range as written, without the prefix.
        range: String,
        /// The semver crate's reason, or ours.
        reason: String,
    },
    /// An `exclude` entry is malformed.
    #[error("invalid exclude glob \"{glob}\": {reason}")]
    InvalidExclude {
        /// The entry as written.
        glob: String,
        /// What is wrong with it.
        reason: GlobError,
    },
    /// An `exclude` entry with a prefix other than `glob:`.
    #[error(
        "exclude entry \"{entry}\" is not a glob (exclude takes globs, optionally written glob:…)"
    )]
    ExcludeNotGlob {
        /// The entry as written.
        entry: String,
    },
    /// `extract` given with a pattern that has no capture groups to extract from.
    #[error("extract \"{extract}\" needs a regex: pattern to take its groups from")]
    ExtractNeedsRegex {
        /// The template as written.
        extract: String,
    },
    /// `extract` refers to a group the regex does not have.
    #[error(
        "extract \"{extract}\" names no group of the regex: \"{group}\" (available: {available})"
    )]
    ExtractUnknownGroup {
        /// The template as written.
        extract: String,
        /// The group name or number that does not exist.
        group: String,
        /// The references that would work, e.g. `$0, $1, $version`.
        available: String,
    },
    /// `extract` refers to no group at all, so it would give every tag the same value.
    #[error("extract \"{extract}\" references no capture group (write e.g. \"$1\" or \"$name\")")]
    ExtractWithoutGroup {
        /// The template as written.
        extract: String,
    },
    /// [`TagPolicy::prefer_least`] with an order where "least" means nothing useful.
    #[error("pick Lowest applies to order Alphabetical or Numerical only (it is {order:?} here)")]
    LeastNeedsOrder {
        /// The order the policy has.
        order: Order,
    },
    /// `extract` has `${` without `}`.
    #[error("extract \"{extract}\" has a \"${{\" without its closing \"}}\"")]
    ExtractUnterminated {
        /// The template as written.
        extract: String,
    },
}
