//! Property-based fuzzing of the tag policy (`policy::TagPolicy`).
//!
//! Properties:
//! - building a policy from arbitrary pattern, exclude and extract strings returns `Ok` or
//!   `Err` and never panics, and a built policy never panics on arbitrary tags;
//! - for valid policies, `select` returns an element of its input that `matches`, the same
//!   tag whatever the input order, and the same tag from any sub-list that still holds it;
//! - for the pattern `*` (and a glob with a literal prefix), each order agrees with a
//!   reference implementation written here: semver (via the `semver` crate), numerical
//!   (exact, via integers), alphabetical and newest.
//!
//! The seed is fixed so runs are reproducible; set `PROPTEST_RNG_SEED` (and `PROPTEST_CASES`)
//! to explore further.

use imagewatch::policy::{Order, TagInfo, TagPolicy};
use jiff::Timestamp;
use proptest::prelude::*;
use proptest::sample::{Index, subsequence};
use proptest::test_runner::RngSeed;

fn config() -> ProptestConfig {
    let base = ProptestConfig::default();
    let cases = if std::env::var_os("PROPTEST_CASES").is_some() {
        base.cases
    } else {
        256
    };
    let rng_seed = if std::env::var_os("PROPTEST_RNG_SEED").is_some() {
        base.rng_seed
    } else {
        RngSeed::Fixed(0x1e57_f00d_0000_0002)
    };
    ProptestConfig {
        cases,
        rng_seed,
        failure_persistence: None,
        ..base
    }
}

// ---------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------

fn order() -> impl Strategy<Value = Order> {
    prop_oneof![
        Just(Order::Semver),
        Just(Order::Newest),
        Just(Order::Alphabetical),
        Just(Order::Numerical),
    ]
}

/// Any pattern text, weighted towards the prefixes and metacharacters the parser knows.
fn arbitrary_pattern() -> impl Strategy<Value = String> {
    let prefix = prop_oneof![
        Just(""),
        Just("glob:"),
        Just("regex:"),
        Just("semver:"),
        Just(" semver: "),
        Just("Glob:"),
        Just("foo:"),
        Just(":"),
    ];
    prop_oneof![
        2 => any::<String>(),
        4 => (prefix, "[a-z0-9*?\\[\\]!^.(){}|+\\\\$<>=~, :-]{0,24}")
            .prop_map(|(p, body)| format!("{p}{body}")),
        1 => "[\\[\\]!^a-z-]{0,8}",
        1 => proptest::sample::select(vec![
            "regex:(a{1000}){1000}",
            "regex:\\p{Greek}+",
            "regex:(?P<v>",
            "semver:>=1.2 || <1",
            "semver:>= v1.2.3-rc.1 <2",
            "semver:>=",
            "semver:,",
            "glob:[z-a]",
            "[!]",
            "[]",
            "é*[é-ü]",
        ])
        .prop_map(str::to_owned),
    ]
}

fn arbitrary_extract() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop_oneof![
        Just(String::new()),
        Just("$1".to_owned()),
        Just("$version".to_owned()),
        Just("${1}.${2}".to_owned()),
        Just("${".to_owned()),
        Just("$$".to_owned()),
        "[$a-z0-9{}._-]{0,12}",
        any::<String>(),
    ])
}

/// A glob that compiles: literals, `*`, `?` and well-formed classes.
fn valid_glob() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => "[a-z0-9.-]{1,4}",
        3 => Just("*".to_owned()),
        1 => Just("?".to_owned()),
        1 => Just("[0-9]".to_owned()),
        1 => Just("[!a-c]".to_owned()),
        1 => Just("[a-z_]".to_owned()),
    ];
    prop::collection::vec(piece, 0..5).prop_map(|pieces| pieces.concat())
}

fn version_text() -> impl Strategy<Value = String> {
    (
        0u64..4,
        prop::option::of(0u64..4),
        prop::option::of(0u64..4),
    )
        .prop_map(|(major, minor, patch)| match (minor, patch) {
            (Some(minor), Some(patch)) => format!("{major}.{minor}.{patch}"),
            (Some(minor), None) => format!("{major}.{minor}"),
            _ => major.to_string(),
        })
}

fn semver_range() -> impl Strategy<Value = String> {
    let op = prop_oneof![
        Just(""),
        Just("="),
        Just(">"),
        Just(">="),
        Just("<"),
        Just("<="),
        Just("~"),
        Just("^"),
        Just(">= "),
    ];
    let comparator = (op, prop::bool::ANY, version_text())
        .prop_map(|(op, v, version)| format!("{op}{}{version}", if v { "v" } else { "" }));
    prop_oneof![
        1 => Just("*".to_owned()),
        4 => (prop::collection::vec(comparator, 1..3), prop::bool::ANY)
            .prop_map(|(parts, commas)| parts.join(if commas { ", " } else { " " })),
    ]
}

/// A regex with a matching extract template (or none).
fn regex_with_extract() -> impl Strategy<Value = (String, Option<String>)> {
    let prefix = prop_oneof![Just(""), Just("canary-"), Just("v"), Just("release-")];
    let shape = prop_oneof![
        Just(("(?P<version>.+)", vec!["$version", "${version}"])),
        Just(("(.*)", vec!["$1", "${1}"])),
        Just(("([0-9]+)\\.([0-9]+)", vec!["${1}.${2}", "$2", "${2}.${1}"])),
        Just(("[0-9]+", vec![])),
    ];
    (
        prefix,
        shape,
        prop::bool::ANY,
        prop::bool::ANY,
        any::<Index>(),
    )
        .prop_map(|(prefix, (body, extracts), start, end, pick)| {
            let regex = format!(
                "{}{prefix}{body}{}",
                if start { "^" } else { "" },
                if end { "$" } else { "" }
            );
            let extract = (!extracts.is_empty() && pick.index(3) > 0)
                .then(|| extracts[pick.index(extracts.len())].to_owned());
            (format!("regex:{regex}"), extract)
        })
}

#[derive(Debug, Clone)]
struct PolicySpec {
    pattern: String,
    exclude: Vec<String>,
    order: Order,
    extract: Option<String>,
}

impl PolicySpec {
    fn build(&self) -> Result<TagPolicy, imagewatch::policy::PolicyError> {
        TagPolicy::new(
            &self.pattern,
            &self.exclude,
            self.order,
            self.extract.as_deref(),
        )
    }
}

/// Policies that are valid by construction.
fn valid_policy() -> impl Strategy<Value = PolicySpec> {
    let pattern_and_extract = prop_oneof![
        1 => prop_oneof![Just(""), Just("*"), Just("glob:*")].prop_map(|p| (p.to_owned(), None)),
        3 => valid_glob().prop_map(|g| (g, None)),
        1 => valid_glob().prop_map(|g| (format!("glob:{g}"), None)),
        3 => regex_with_extract(),
        2 => semver_range().prop_map(|r| (format!("semver:{r}"), None)),
    ];
    let exclude = prop::collection::vec(
        prop_oneof![valid_glob(), valid_glob().prop_map(|g| format!("glob:{g}"))],
        0..3,
    );
    (pattern_and_extract, exclude, order()).prop_map(|((pattern, extract), exclude, order)| {
        PolicySpec {
            pattern,
            exclude,
            order,
            extract,
        }
    })
}

/// A tag as registries list them, with occasional odd ones.
fn tag_text() -> impl Strategy<Value = String> {
    let version = (
        prop_oneof![
            Just(""),
            Just("v"),
            Just("V"),
            Just("canary-"),
            Just("canary-v"),
            Just("release-"),
        ],
        0u64..5,
        0u64..12,
        0u64..12,
        prop_oneof![
            6 => Just(String::new()),
            1 => (0u64..3).prop_map(|n| format!("-rc.{n}")),
            1 => Just("+build.5".to_owned()),
        ],
        0usize..3,
    )
        .prop_map(|(prefix, major, minor, patch, suffix, parts)| match parts {
            0 => format!("{prefix}{major}{suffix}"),
            1 => format!("{prefix}{major}.{minor}{suffix}"),
            _ => format!("{prefix}{major}.{minor}.{patch}{suffix}"),
        });
    prop_oneof![
        5 => version,
        2 => "-?[0-9]{1,6}(\\.[0-9]{1,3})?",
        2 => "[A-Za-z0-9_][A-Za-z0-9_.-]{0,12}",
        1 => prop_oneof![Just("latest"), Just("main"), Just("2024.01.05"), Just("1.2.3.4")]
            .prop_map(str::to_owned),
        1 => any::<String>(),
    ]
}

fn timestamp(seconds: i64) -> Timestamp {
    Timestamp::from_second(seconds).unwrap()
}

fn tag_info() -> impl Strategy<Value = TagInfo> {
    (
        tag_text(),
        prop::option::of(prop_oneof![Just("sha256:aa"), Just("sha256:bb")]),
        // Few distinct times, so equal push times are common.
        prop::option::of(0i64..4),
    )
        .prop_map(|(tag, digest, pushed)| TagInfo {
            tag,
            digest: digest.map(str::to_owned),
            pushed_at: pushed.map(|s| timestamp(1_700_000_000 + s * 60)),
        })
}

/// Tags and the same tags shuffled. Duplicates are likely (small pools).
fn tags_and_shuffled() -> impl Strategy<Value = (Vec<TagInfo>, Vec<TagInfo>)> {
    prop::collection::vec(tag_info(), 0..14)
        .prop_flat_map(|tags| (Just(tags.clone()), Just(tags).prop_shuffle()))
}

fn shuffled<T: Clone + std::fmt::Debug>(items: Vec<T>) -> impl Strategy<Value = (Vec<T>, Vec<T>)> {
    (Just(items.clone()), Just(items).prop_shuffle())
}

// ---------------------------------------------------------------------------------------
// Reference implementations
// ---------------------------------------------------------------------------------------

/// Strict semver after one optional `v`, as the `semver` crate reads it (the generated
/// versions have three numbers without leading zeros, where the policy's reading agrees).
fn reference_version(tag: &str) -> Option<semver::Version> {
    let text = tag.strip_prefix('v').unwrap_or(tag);
    semver::Version::parse(text).ok()
}

/// `-?digits(.digits)?` as an exact integer scaled by 10^6 (test inputs have at most 6
/// fraction digits and 24 integer digits, well inside `i128`).
fn reference_number(tag: &str) -> Option<i128> {
    let (negative, unsigned) = match tag.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, tag),
    };
    let (int, frac) = match unsigned.split_once('.') {
        Some((int, frac)) => (int, Some(frac)),
        None => (unsigned, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || frac.is_some_and(|f| !digits(f) || f.len() > 6) || int.len() > 24 {
        return None;
    }
    let int: i128 = int.parse().ok()?;
    let frac: i128 = format!("{:0<6}", frac.unwrap_or("")).parse().ok()?;
    let magnitude = int * 1_000_000 + frac;
    Some(if negative { -magnitude } else { magnitude })
}

/// The winner under a key, ties to the greatest (tag, push time, digest), as documented.
fn reference_best<K: Ord>(
    tags: &[TagInfo],
    key: impl Fn(&TagInfo) -> Option<K>,
) -> Option<&TagInfo> {
    tags.iter()
        .filter_map(|t| Some((key(t)?, t)))
        .max_by(|(ka, a), (kb, b)| {
            ka.cmp(kb)
                .then_with(|| a.tag.cmp(&b.tag))
                .then_with(|| a.pushed_at.cmp(&b.pushed_at))
                .then_with(|| a.digest.cmp(&b.digest))
        })
        .map(|(_, t)| t)
}

fn semver_tag() -> impl Strategy<Value = String> {
    let version = (
        prop_oneof![Just("v"), Just("v"), Just("")],
        0u64..4,
        0u64..25,
        0u64..25,
        prop_oneof![
            8 => Just(String::new()),
            1 => prop_oneof![Just("alpha"), Just("rc.1"), Just("rc.10"), Just("rc.2"), Just("0")]
                .prop_map(|p| format!("-{p}")),
            1 => Just("+build.7".to_owned()),
        ],
    )
        .prop_map(|(v, maj, min, pat, suffix)| format!("{v}{maj}.{min}.{pat}{suffix}"));
    // Tags that neither the policy nor the strict reference read as versions.
    let noise = prop_oneof![
        Just("latest"),
        Just("main"),
        Just("stable"),
        Just("sha-3f2a9c1"),
        Just("1.2.3.4"),
        Just("V1.2.3"),
        Just("1234567"),
        Just("vv1.2.3"),
        Just("1.2.3-"),
        Just("v1.x.3"),
    ]
    .prop_map(str::to_owned);
    prop_oneof![6 => version, 1 => noise]
}

fn numeric_tag() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "-?0{0,2}[0-9]{1,22}(\\.[0-9]{1,6})?",
        1 => prop_oneof![
            Just("+1"), Just("1e5"), Just(".5"), Just("5."), Just("nan"), Just("latest"),
            Just("-"), Just("1.2.3"),
        ]
        .prop_map(str::to_owned),
    ]
}

// ---------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------

/// `select` returns a reference into `tags` (not a copy, not another list's element).
fn is_element(tags: &[TagInfo], chosen: &TagInfo) -> bool {
    tags.iter().any(|t| std::ptr::eq(t, chosen))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn building_arbitrary_policies_never_panics(
        pattern in arbitrary_pattern(),
        exclude in prop::collection::vec(arbitrary_pattern(), 0..3),
        order in order(),
        extract in arbitrary_extract(),
        tags in prop::collection::vec(tag_info(), 0..6),
    ) {
        let spec = PolicySpec { pattern, exclude, order, extract };
        match spec.build() {
            Ok(policy) => {
                prop_assert_eq!(policy.order(), order);
                for tag in &tags {
                    let _ = policy.matches(&tag.tag);
                }
                if let Some(chosen) = policy.select(&tags) {
                    prop_assert!(is_element(&tags, chosen));
                    prop_assert!(policy.matches(&chosen.tag));
                }
            }
            Err(error) => {
                let _ = error.to_string();
            }
        }
        // Validation alone agrees with building.
        let validated = imagewatch::policy::validate_pattern(&spec.pattern);
        if spec.build().is_ok() {
            prop_assert!(validated.is_ok());
        }
    }

    #[test]
    fn valid_policies_build(spec in valid_policy()) {
        if let Err(error) = spec.build() {
            prop_assert!(false, "{:?} was rejected: {}", spec, error);
        }
    }

    #[test]
    fn select_is_a_matching_element_and_order_independent(
        spec in valid_policy(),
        (tags, shuffled) in tags_and_shuffled(),
        keep in any::<Vec<bool>>(),
    ) {
        let policy = spec.build().unwrap();
        let chosen = policy.select(&tags);
        let again = policy.select(&shuffled);
        prop_assert_eq!(chosen, again, "input order changed the choice");
        let Some(chosen) = chosen else {
            return Ok(());
        };
        prop_assert!(is_element(&tags, chosen));
        prop_assert!(policy.matches(&chosen.tag), "{:?} does not match its own choice {:?}", spec, chosen.tag);
        // A best element stays best in any sub-list that still holds it.
        let subset: Vec<TagInfo> = tags
            .iter()
            .enumerate()
            .filter(|(i, t)| *t == chosen || keep.get(*i).copied().unwrap_or(true))
            .map(|(_, t)| t.clone())
            .collect();
        prop_assert_eq!(policy.select(&subset), Some(chosen));
        prop_assert_eq!(policy.select(std::slice::from_ref(chosen)), Some(chosen));
    }

    #[test]
    fn semver_order_picks_the_greatest_version(
        (tags, shuffled) in prop::collection::vec(semver_tag(), 0..16)
            .prop_flat_map(shuffled),
        pattern in prop_oneof![Just(""), Just("*"), Just("glob:*")],
        exclude in prop::collection::vec(any::<Index>(), 0..2),
    ) {
        let infos: Vec<TagInfo> = tags.iter().map(TagInfo::new).collect();
        let shuffled: Vec<TagInfo> = shuffled.iter().map(TagInfo::new).collect();
        // Exclude a few of the listed tags by their literal name.
        let excluded: Vec<String> = if tags.is_empty() {
            Vec::new()
        } else {
            exclude.iter().map(|i| tags[i.index(tags.len())].clone()).collect()
        };
        let policy = TagPolicy::new(pattern, &excluded, Order::Semver, None).unwrap();
        let expected = reference_best(&infos, |t| {
            (!excluded.contains(&t.tag)).then(|| reference_version(&t.tag)).flatten()
        });
        prop_assert_eq!(policy.select(&infos), expected);
        prop_assert_eq!(policy.select(&shuffled).map(|t| &t.tag), expected.map(|t| &t.tag));
    }

    #[test]
    fn semver_order_on_a_glob_compares_the_wildcard_part(
        tags in prop::collection::vec(
            prop_oneof![
                4 => semver_tag().prop_map(|t| format!("release-{t}")),
                1 => semver_tag().prop_map(|t| format!("canary-{t}")),
                1 => semver_tag(),
            ],
            0..16,
        ),
    ) {
        let infos: Vec<TagInfo> = tags.iter().map(TagInfo::new).collect();
        let policy = TagPolicy::new("release-*", &[], Order::Semver, None).unwrap();
        let expected = reference_best(&infos, |t| {
            reference_version(t.tag.strip_prefix("release-")?)
        });
        prop_assert_eq!(policy.select(&infos), expected);
    }

    #[test]
    fn numerical_order_is_exact(
        (tags, shuffled) in prop::collection::vec(numeric_tag(), 0..16).prop_flat_map(shuffled),
    ) {
        let infos: Vec<TagInfo> = tags.iter().map(TagInfo::new).collect();
        let shuffled: Vec<TagInfo> = shuffled.iter().map(TagInfo::new).collect();
        let policy = TagPolicy::new("*", &[], Order::Numerical, None).unwrap();
        let expected = reference_best(&infos, |t| reference_number(&t.tag));
        prop_assert_eq!(policy.select(&infos), expected);
        prop_assert_eq!(policy.select(&shuffled).map(|t| &t.tag), expected.map(|t| &t.tag));
    }

    #[test]
    fn alphabetical_and_newest_orders_match_the_reference(
        (tags, shuffled) in prop::collection::vec(tag_info(), 0..16).prop_flat_map(shuffled),
    ) {
        let alphabetical = TagPolicy::new("*", &[], Order::Alphabetical, None).unwrap();
        let expected = reference_best(&tags, |t| Some(t.tag.clone()));
        prop_assert_eq!(alphabetical.select(&tags), expected);
        prop_assert_eq!(alphabetical.select(&shuffled), expected);

        let newest = TagPolicy::new("*", &[], Order::Newest, None).unwrap();
        let expected = reference_best(&tags, |t| t.pushed_at);
        prop_assert_eq!(newest.select(&tags), expected);
        prop_assert_eq!(newest.select(&shuffled), expected);
    }

    #[test]
    fn subsequences_keep_the_winner(
        tags in prop::collection::vec(semver_tag(), 1..12)
            .prop_flat_map(|tags| { let n = tags.len(); (Just(tags.clone()), subsequence(tags, 0..=n)) }),
    ) {
        let (all, some) = tags;
        let all: Vec<TagInfo> = all.iter().map(TagInfo::new).collect();
        let some: Vec<TagInfo> = some.iter().map(TagInfo::new).collect();
        let policy = TagPolicy::new("*", &[], Order::Semver, None).unwrap();
        if let Some(best) = policy.select(&all)
            && some.contains(best)
        {
            prop_assert_eq!(policy.select(&some), Some(best));
        }
    }
}
