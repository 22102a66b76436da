//! Sort keys for the orders a policy can use: lenient semantic-version parsing and exact
//! decimal numbers.
//!
//! Both parsers return `None` for text they do not accept; the selection code skips such tags
//! instead of guessing a place for them in the order.

use std::cmp::Ordering;

use semver::Version;

/// Parses a tag (or the extracted part of one) as a semantic version, the way the peers'
/// semver library (Masterminds/semver v3, `NewVersion`) reads tags, minus one-number forms:
/// - one optional leading `v` (lower case, as there);
/// - two or three numbers: a missing patch is zero (`1.2` is 1.2.0, `v1.2-rc.1` is
///   1.2.0-rc.1). A single number (`7`, a short all-digit commit SHA like `1234567`) is not a
///   version here: Flux, Kargo and Keel refuse it too, and it would otherwise outrank every
///   real release. Use [`Order::Numerical`] for build numbers;
/// - leading zeros in the numbers are dropped (`2024.01.05` is 2024.1.5), so zero-padded
///   `CalVer` orders as Argo CD Image Updater orders it;
/// - prerelease and build metadata as `SemVer` 2.0 writes them (no leading zeros in numeric
///   prerelease identifiers).
///
/// Everything else is refused: four numbers (`1.2.3.4`), `V1.2.3`, empty identifiers.
pub fn parse_version(text: &str) -> Option<Version> {
    let text = text.strip_prefix('v').unwrap_or(text);
    let core_end = text.find(['-', '+']).unwrap_or(text.len());
    let (core, rest) = text.split_at(core_end);
    let mut numbers = [0u64; 3];
    let mut count = 0;
    for part in core.split('.') {
        if count == 3 || part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        numbers[count] = part.parse().ok()?;
        count += 1;
    }
    if count < 2 {
        return None;
    }
    let [major, minor, patch] = numbers;
    // The prerelease (`-…`) and build (`+…`) parts are checked by the semver crate.
    Version::parse(&format!("{major}.{minor}.{patch}{rest}")).ok()
}

/// A decimal number read exactly from text: `-?[0-9]+(\.[0-9]+)?`.
///
/// Compared exactly, as decimals, with no size or precision limit: build numbers beyond `u64`
/// and long timestamps order correctly, `1.10` is less than `1.5` (as numbers), and `007`
/// equals `7`. Exponents, `inf`, `nan`, a leading `+` and a bare `.5` or `5.` are not numbers
/// here, so a float parser's surprises never decide which tag is deployed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decimal {
    negative: bool,
    /// Integer digits without leading zeros (empty for zero).
    int: String,
    /// Fraction digits without trailing zeros (empty for an integer).
    frac: String,
}

impl Decimal {
    /// Parses `text`, or `None` when it is not a plain decimal number.
    pub fn parse(text: &str) -> Option<Self> {
        let (negative, unsigned) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
        let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !all_digits(int) || (unsigned.contains('.') && !all_digits(frac)) {
            return None;
        }
        let int = int.trim_start_matches('0');
        let frac = frac.trim_end_matches('0');
        // -0 and 0 are the same number; without this they would compare as different.
        let negative = negative && !(int.is_empty() && frac.is_empty());
        Some(Decimal {
            negative,
            int: int.to_owned(),
            frac: frac.to_owned(),
        })
    }

    fn cmp_magnitude(&self, other: &Self) -> Ordering {
        // Without leading zeros, more integer digits means a larger number; equal lengths compare
        // digit by digit. Fractions without trailing zeros compare digit by digit as strings
        // ("5" > "49" because 0.5 > 0.49; "4" < "49" because 0.4 < 0.49).
        self.int
            .len()
            .cmp(&other.int.len())
            .then_with(|| self.int.cmp(&other.int))
            .then_with(|| self.frac.cmp(&other.frac))
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.negative, other.negative) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => self.cmp_magnitude(other),
            (true, true) => other.cmp_magnitude(self),
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// How candidate tags are ordered; the greatest wins. See the module documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Order {
    /// Semantic version of the tag or the extracted part.
    #[default]
    Semver,
    /// Push time; the most recent wins.
    Newest,
    /// Byte-wise string order.
    Alphabetical,
    /// Exact decimal number.
    Numerical,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Version {
        parse_version(text).unwrap()
    }

    fn d(text: &str) -> Decimal {
        Decimal::parse(text).unwrap()
    }

    #[test]
    fn versions_accept_v_prefix_missing_patch_and_leading_zeros() {
        assert_eq!(v("1.2.3"), Version::new(1, 2, 3));
        assert_eq!(v("v1.2.3"), Version::new(1, 2, 3));
        assert_eq!(v("1.2"), Version::new(1, 2, 0));
        assert_eq!(v("2024.01.05"), Version::new(2024, 1, 5));
        assert_eq!(
            v("v2025.02.03-rc.1"),
            Version::parse("2025.2.3-rc.1").unwrap()
        );
        assert_eq!(v("1.2-rc.1"), Version::parse("1.2.0-rc.1").unwrap());
        assert_eq!(v("1.2.3-rc.1"), Version::parse("1.2.3-rc.1").unwrap());
    }

    #[test]
    fn versions_reject_everything_else() {
        for bad in [
            "",
            "v",
            "vv1.2.3",
            "latest",
            "1.2.3.4",
            "1.",
            "1..2",
            ".1",
            "-rc.1",
            "1.2.3-",
            "1.2.3-rc.01",
            "7",
            "v7",
            "1234567",
            "V1.2.3",
            "1.2.3.4.5",
            "v1.2.x",
            "main-1.2.3",
        ] {
            assert_eq!(parse_version(bad), None, "{bad:?} should not parse");
        }
    }

    #[test]
    fn decimals_parse_plain_numbers_only() {
        for bad in [
            "", "-", "+1", "1e5", "inf", "nan", "NaN", ".5", "5.", "1.2.3", "0x10", " 1", "1_000",
        ] {
            assert_eq!(Decimal::parse(bad), None, "{bad:?} should not parse");
        }
        assert_eq!(d("007"), d("7"));
        assert_eq!(d("-0"), d("0"));
        assert_eq!(d("1.50"), d("1.5"));
        assert_eq!(d("0.0"), d("0"));
    }

    #[test]
    fn decimals_order_numerically() {
        let ascending = [
            "-10",
            "-9.5",
            "-9",
            "-0.5",
            "0",
            "0.05",
            "0.49",
            "0.5",
            "1",
            "1.10",
            "1.5",
            "9",
            "10",
            "100",
            "18446744073709551615",
            "99999999999999999999",
        ];
        for pair in ascending.windows(2) {
            assert!(d(pair[0]) < d(pair[1]), "{} < {}", pair[0], pair[1]);
        }
    }
}
