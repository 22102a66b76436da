//! Scenario tests of whole policies: pattern, exclude, order and extract together, as a watch
//! uses them.

use jiff::Timestamp;

use super::*;

fn tags(names: &[&str]) -> Vec<TagInfo> {
    names.iter().copied().map(TagInfo::new).collect()
}

fn pushed(tag: &str, at: &str) -> TagInfo {
    TagInfo {
        pushed_at: Some(at.parse::<Timestamp>().unwrap()),
        ..TagInfo::new(tag)
    }
}

fn policy(pattern: &str, exclude: &[&str], order: Order, extract: Option<&str>) -> TagPolicy {
    let exclude: Vec<String> = exclude.iter().map(ToString::to_string).collect();
    TagPolicy::new(pattern, &exclude, order, extract).unwrap()
}

fn pick<'a>(policy: &TagPolicy, tags: &'a [TagInfo]) -> Option<&'a str> {
    policy.select(tags).map(|info| info.tag.as_str())
}

fn error(pattern: &str, exclude: &[&str], order: Order, extract: Option<&str>) -> String {
    let exclude: Vec<String> = exclude.iter().map(ToString::to_string).collect();
    TagPolicy::new(pattern, &exclude, order, extract)
        .unwrap_err()
        .to_string()
}

/// Every rotation and the reversal of every rotation: enough to move each tag to the front
/// and to the back, which is where an order-dependent `max` would go wrong.
fn arrangements(tags: &[TagInfo]) -> Vec<Vec<TagInfo>> {
    let mut out = Vec::new();
    for shift in 0..tags.len() {
        let mut rotated = tags.to_vec();
        rotated.rotate_left(shift);
        out.push(rotated.clone());
        rotated.reverse();
        out.push(rotated);
    }
    out
}

#[test]
fn canary_and_primary_follow_different_tags_of_one_repository() {
    let seed = tags(&["canary-v1.2.3", "canary-v1.2.4", "primary-v1.2.3"]);
    let canary = policy(
        "regex:^canary-v(?P<version>.+)$",
        &[],
        Order::Semver,
        Some("$version"),
    );
    let primary = policy(
        "regex:^primary-v(?P<version>.+)$",
        &[],
        Order::Semver,
        Some("$version"),
    );
    assert_eq!(pick(&canary, &seed), Some("canary-v1.2.4"));
    assert_eq!(pick(&primary, &seed), Some("primary-v1.2.3"));

    // Index references work the same as names.
    let canary_by_index = policy("regex:^canary-v(.+)$", &[], Order::Semver, Some("$1"));
    assert_eq!(pick(&canary_by_index, &seed), Some("canary-v1.2.4"));
}

#[test]
fn globs_select_the_track_and_order_on_the_wildcard_part() {
    let seed = tags(&["canary-v1.2.3", "canary-v1.10.0", "primary-v1.2.3"]);
    // The glob picks the track; its literal prefix is dropped, so "canary-v1.10.0" is ordered
    // as version v1.10.0 and wins over v1.2.3.
    assert_eq!(
        pick(&policy("canary-*", &[], Order::Semver, None), &seed),
        Some("canary-v1.10.0")
    );
    // Alphabetical order compares the wildcard part byte-wise ("v1.2.3" > "v1.10.0"), which
    // shows why semver order is usually wanted.
    assert_eq!(
        pick(&policy("canary-*", &[], Order::Alphabetical, None), &seed),
        Some("canary-v1.2.3")
    );
    assert_eq!(
        pick(
            &policy("glob:primary-*", &[], Order::Alphabetical, None),
            &seed
        ),
        Some("primary-v1.2.3")
    );
    // A tag whose wildcard part is not a version is skipped by semver order.
    let odd = tags(&["canary-latest"]);
    assert_eq!(
        pick(&policy("canary-*", &[], Order::Semver, None), &odd),
        None
    );
}

#[test]
fn v_prefixes_are_accepted_and_ordered_as_versions() {
    // Only a lower-case `v`, as in Masterminds/semver (Flux, Argo CD Image Updater): `V1.9.5`
    // is not a version and is skipped.
    let seed = tags(&["v1.9.0", "1.10.0", "v1.2.3", "V1.9.5"]);
    assert_eq!(
        pick(&policy("", &[], Order::Semver, None), &seed),
        Some("1.10.0")
    );
    let seed = tags(&["v1.9.0", "v1.10.0", "v1.9.5", "V1.9.9"]);
    assert_eq!(
        pick(&policy("v*", &[], Order::Semver, None), &seed),
        Some("v1.10.0")
    );
    assert_eq!(
        pick(
            &policy("semver:>=1.9 <1.10", &[], Order::Semver, None),
            &seed
        ),
        Some("v1.9.5")
    );
}

#[test]
fn a_missing_patch_reads_as_zero_and_one_number_is_no_version() {
    let seed = tags(&["1", "1.2", "1.1.9"]);
    assert_eq!(
        pick(&policy("*", &[], Order::Semver, None), &seed),
        Some("1.2")
    );
    let seed = tags(&["1.2", "1.2.1"]);
    assert_eq!(
        pick(&policy("*", &[], Order::Semver, None), &seed),
        Some("1.2.1")
    );
    // 1.2 and 1.2.0 are the same version; the tie goes to the greater tag.
    let seed = tags(&["1.2.0", "1.2"]);
    assert_eq!(
        pick(&policy("*", &[], Order::Semver, None), &seed),
        Some("1.2.0")
    );
    // An all-digit tag (a short commit SHA, a build number) does not compete under Semver, as
    // in Flux, Kargo and Keel; Numerical orders it.
    let seed = tags(&["1234567", "v1.3.0", "7"]);
    assert_eq!(
        pick(&policy("*", &[], Order::Semver, None), &seed),
        Some("v1.3.0")
    );
    assert_eq!(
        pick(&policy("*", &[], Order::Numerical, None), &seed),
        Some("1234567")
    );
}

#[test]
fn zero_padded_calver_orders_as_a_version() {
    let seed = tags(&["2024.01.15", "2024.1.9", "2023.12.31", "2024.02.01-rc.1"]);
    let semver = policy("*", &[], Order::Semver, None);
    assert_eq!(pick(&semver, &seed), Some("2024.02.01-rc.1"));
    let releases = policy("semver:>=2024.1", &[], Order::Semver, None);
    assert_eq!(pick(&releases, &seed), Some("2024.01.15"));
    let january = policy("semver:2024.01", &[], Order::Semver, None);
    assert!(january.matches("2024.01.15"));
    assert!(!january.matches("2024.02.01"));
}

#[test]
fn prereleases_order_below_their_release() {
    let all = policy("*", &[], Order::Semver, None);
    let seed = tags(&["1.2.3", "1.2.4-rc.1", "1.2.4"]);
    assert_eq!(pick(&all, &seed), Some("1.2.4"));
    // With a glob or regex pattern prereleases compete like any version.
    let seed = tags(&["1.2.3", "1.2.4-rc.1", "1.2.4-rc.2", "1.2.4-beta.9"]);
    assert_eq!(pick(&all, &seed), Some("1.2.4-rc.2"));
    // Numeric identifiers compare as numbers: rc.10 > rc.9.
    let seed = tags(&["v2.0.0-rc.9", "v2.0.0-rc.10"]);
    assert_eq!(pick(&all, &seed), Some("v2.0.0-rc.10"));
}

#[test]
fn semver_ranges_admit_prereleases_only_when_they_mention_one() {
    let seed = tags(&["1.2.3", "1.2.4-rc.1", "1.3.0-rc.1", "2.0.0"]);
    let stable = policy("semver:>=1.2, <2", &[], Order::Semver, None);
    assert_eq!(pick(&stable, &seed), Some("1.2.3"));
    assert!(!stable.matches("1.2.4-rc.1"));
    assert!(stable.matches("v1.2.3"));
    assert!(!stable.matches("2.0.0"));
    // A prerelease comparator admits prereleases of every version in its alternative (as in
    // Masterminds/semver, not only of the same major.minor.patch as in npm or Cargo).
    let rc = policy("semver:>=1.2.4-rc.0, <2", &[], Order::Semver, None);
    assert_eq!(pick(&rc, &seed), Some("1.3.0-rc.1"));
    assert!(rc.matches("1.2.4-rc.1"));
    assert!(!rc.matches("1.2.3-rc.1"));
    // The peers' "include prereleases" idiom.
    let any = policy("semver:>=0.0.0-0", &[], Order::Semver, None);
    assert_eq!(pick(&any, &seed), Some("2.0.0"));
    assert!(any.matches("1.3.0-rc.1"));
    // A bare version is that minor line, not a caret range: Flux picks 1.0.0 here.
    let seed = tags(&["1.0.0", "1.1.0", "2.0.0"]);
    assert_eq!(
        pick(&policy("semver:1.0", &[], Order::Semver, None), &seed),
        Some("1.0.0")
    );
    // Alternatives, hyphen ranges and exclusions.
    let seed = tags(&["1.4.2", "1.5.0", "2.3.1", "3.0.0"]);
    assert_eq!(
        pick(
            &policy("semver:~1.4 || ^2", &[], Order::Semver, None),
            &seed
        ),
        Some("2.3.1")
    );
    assert_eq!(
        pick(&policy("semver:1.4 - 2.0", &[], Order::Semver, None), &seed),
        Some("1.5.0")
    );
    assert_eq!(
        pick(
            &policy("semver:>=1 !=2.3.1 <3", &[], Order::Semver, None),
            &seed
        ),
        Some("1.5.0")
    );
    // The range filters; the order is still the one given.
    let seed = vec![
        pushed("1.2.3", "2024-01-02T00:00:00Z"),
        pushed("1.2.9", "2024-01-01T00:00:00Z"),
        pushed("3.0.0", "2024-01-03T00:00:00Z"),
    ];
    let newest_in_range = policy("semver:^1.2", &[], Order::Newest, None);
    assert_eq!(pick(&newest_in_range, &seed), Some("1.2.3"));
}

#[test]
fn unparsable_tags_are_ignored() {
    let semver = policy("", &[], Order::Semver, None);
    let seed = tags(&[
        "latest",
        "main",
        "sha-0d3f2a1",
        "1.2.3.4",
        "1234567",
        "V2.0.0",
        "1.2.3",
    ]);
    assert_eq!(pick(&semver, &seed), Some("1.2.3"));
    let seed = tags(&["latest", "main", "sha-0d3f2a1"]);
    assert_eq!(pick(&semver, &seed), None);
    assert_eq!(pick(&semver, &[]), None);
    // A regex match whose extracted part is not a version is skipped too.
    let extracted = policy("regex:^build-(.+)$", &[], Order::Semver, Some("$1"));
    let seed = tags(&["build-nightly", "build-1.0.1", "1.9.9"]);
    assert_eq!(pick(&extracted, &seed), Some("build-1.0.1"));
}

#[test]
fn latest_and_signatures_are_excluded() {
    let seed = tags(&[
        "v1.0.0",
        "v1.1.0",
        "latest",
        "sha256-9f2c.sig",
        "sha256-9f2c.att",
    ]);
    let alphabetical = policy(
        "*",
        &["latest", "*.sig", "*.att"],
        Order::Alphabetical,
        None,
    );
    assert_eq!(pick(&alphabetical, &seed), Some("v1.1.0"));
    assert!(!alphabetical.matches("latest"));
    assert!(!alphabetical.matches("sha256-9f2c.sig"));
    assert!(alphabetical.matches("v1.0.0"));
    // Without the excludes the signature would win byte-wise.
    let unfiltered = policy("*", &[], Order::Alphabetical, None);
    assert_eq!(pick(&unfiltered, &seed), Some("v1.1.0"));
    let seed = tags(&["v1.0.0", "zz-latest", "zz.sig"]);
    assert_eq!(pick(&unfiltered, &seed), Some("zz.sig"));
    assert_eq!(
        pick(
            &policy("*", &["zz-*", "glob:*.sig"], Order::Alphabetical, None),
            &seed
        ),
        Some("v1.0.0")
    );
    // Exclusions also beat an explicit regex match and a newer push.
    let seed = vec![
        pushed("v1.0.0", "2024-01-01T00:00:00Z"),
        pushed("latest", "2024-06-01T00:00:00Z"),
    ];
    assert_eq!(
        pick(&policy("regex:.*", &["latest"], Order::Newest, None), &seed),
        Some("v1.0.0")
    );
}

#[test]
fn git_sha_tags_follow_the_newest_push() {
    let old = "0d3f2a1c9b8e7d6c5b4a39281706f5e4d3c2b1a0";
    let new = "9f8e7d6c5b4a39281706f5e4d3c2b1a00d3f2a1c";
    let unpushed = "ffffffffffffffffffffffffffffffffffffffff";
    assert_eq!(old.len(), 40);
    let seed = vec![
        pushed(old, "2024-03-01T10:00:00Z"),
        pushed(new, "2024-03-02T10:00:00Z"),
        pushed("abc1234", "2024-02-01T00:00:00Z"),
        // Newer pushes that the pattern must keep out.
        pushed("latest", "2024-03-05T00:00:00Z"),
        pushed("abcdef", "2024-03-05T00:00:00Z"),
        pushed(
            "0D3F2A1C9B8E7D6C5B4A39281706F5E4D3C2B1A0",
            "2024-03-05T00:00:00Z",
        ),
        pushed(&format!("{new}0"), "2024-03-05T00:00:00Z"),
        // Without a push time a tag cannot take part in Newest, however well it matches.
        TagInfo::new(unpushed),
    ];
    let sha = policy("regex:^[0-9a-f]{7,40}$", &[], Order::Newest, None);
    assert_eq!(pick(&sha, &seed), Some(new));
    assert!(sha.matches(unpushed));
    assert!(sha.matches("abc1234"));
    assert!(!sha.matches("abcdef"));
}

#[test]
fn newest_ties_go_to_the_greatest_tag() {
    let seed = vec![
        pushed("b", "2024-01-01T00:00:00Z"),
        pushed("c", "2024-01-01T00:00:00Z"),
        pushed("a", "2024-01-01T00:00:00Z"),
    ];
    assert_eq!(
        pick(&policy("", &[], Order::Newest, None), &seed),
        Some("c")
    );
}

#[test]
fn pull_request_globs_do_not_leak_into_other_prs() {
    let seed = vec![
        pushed("pr-12-0d3f2a1", "2024-01-01T00:00:00Z"),
        pushed("pr-12-9f8e7d6", "2024-01-02T00:00:00Z"),
        pushed("pr-123-aaaaaaa", "2024-01-03T00:00:00Z"),
        pushed("pr-1-bbbbbbb", "2024-01-04T00:00:00Z"),
        pushed("xpr-12-ccccccc", "2024-01-05T00:00:00Z"),
    ];
    let pr12 = policy("pr-12-*", &[], Order::Newest, None);
    assert_eq!(pick(&pr12, &seed), Some("pr-12-9f8e7d6"));
    assert!(!pr12.matches("pr-123-aaaaaaa"));
    assert!(!pr12.matches("xpr-12-ccccccc"));
    let any_pr = policy("glob:pr-[0-9]*-???????", &[], Order::Newest, None);
    assert_eq!(pick(&any_pr, &seed), Some("pr-1-bbbbbbb"));
    assert!(!any_pr.matches("pr-x-bbbbbbb"));
    assert!(!any_pr.matches("pr-1-bbbbbb"));
}

#[test]
fn build_numbers_order_numerically() {
    let seed = tags(&["9", "10", "8", "latest", "1.0.0"]);
    let numerical = policy("", &[], Order::Numerical, None);
    assert_eq!(pick(&numerical, &seed), Some("10"));
    // Alphabetically "9" > "10": the reason Numerical exists.
    assert_eq!(
        pick(&policy("", &[], Order::Alphabetical, None), &seed),
        Some("latest")
    );
    assert_eq!(
        pick(&policy("[0-9]*", &[], Order::Alphabetical, None), &seed),
        Some("9")
    );

    let seed = tags(&["build-9", "build-10", "build-x", "build-", "release-99"]);
    let builds = policy("regex:^build-(\\d*|x)$", &[], Order::Numerical, Some("$1"));
    assert_eq!(pick(&builds, &seed), Some("build-10"));

    // Beyond u64, and decimals compared as numbers.
    let seed = tags(&["18446744073709551615", "99999999999999999999"]);
    assert_eq!(pick(&numerical, &seed), Some("99999999999999999999"));
    let seed = tags(&["1.5", "1.10"]);
    assert_eq!(pick(&numerical, &seed), Some("1.5"));
    // 7 and 007 are the same number; the greater tag wins the tie.
    let seed = tags(&["007", "7"]);
    assert_eq!(pick(&numerical, &seed), Some("7"));
}

#[test]
fn alphabetical_is_byte_wise() {
    let seed = tags(&["Zeta", "alpha", "Alpha"]);
    assert_eq!(
        pick(&policy("", &[], Order::Alphabetical, None), &seed),
        Some("alpha")
    );
}

#[test]
fn extracted_values_decide_alphabetical_order_and_ties_fall_back_to_the_tag() {
    let seed = tags(&["b-2024-01", "a-2024-03", "c-2024-02", "d-2024-03"]);
    let by_date = policy(
        r"regex:^[a-z]-(?P<date>\d{4}-\d{2})$",
        &[],
        Order::Alphabetical,
        Some("${date}"),
    );
    assert_eq!(pick(&by_date, &seed), Some("d-2024-03"));
}

#[test]
fn empty_extract_counts_as_none() {
    let seed = tags(&["1.0.0", "2.0.0"]);
    let p = policy("*", &[], Order::Semver, Some(""));
    assert_eq!(pick(&p, &seed), Some("2.0.0"));
}

#[test]
fn invalid_regex_is_reported() {
    assert_eq!(
        error("regex:^canary-v(?P<version>.+$", &[], Order::Semver, None),
        r#"invalid regex "^canary-v(?P<version>.+$": unclosed group"#
    );
    assert!(matches!(
        validate_pattern("regex:[z-a]"),
        Err(PolicyError::InvalidRegex { .. })
    ));
}

#[test]
fn unknown_prefix_is_reported() {
    assert_eq!(
        error("foo:bar", &[], Order::Semver, None),
        r#"unknown pattern prefix "foo:" (use glob:, regex: or semver:)"#
    );
    assert_eq!(
        validate_pattern("Regex:^a$"),
        Err(PolicyError::UnknownPrefix {
            prefix: "Regex".into()
        })
    );
}

#[test]
fn bad_extract_is_reported() {
    assert_eq!(
        error(
            "regex:^canary-v(?P<version>.+)$",
            &[],
            Order::Semver,
            Some("$x")
        ),
        r#"extract "$x" names no group of the regex: "x" (available: $0, $1, $version)"#
    );
    assert_eq!(
        error("canary-*", &[], Order::Semver, Some("$1")),
        r#"extract "$1" needs a regex: pattern to take its groups from"#
    );
    assert_eq!(
        error("semver:^1", &[], Order::Semver, Some("$1")),
        r#"extract "$1" needs a regex: pattern to take its groups from"#
    );
    assert_eq!(
        error("regex:^v(.+)$", &[], Order::Semver, Some("v")),
        r#"extract "v" references no capture group (write e.g. "$1" or "$name")"#
    );
}

#[test]
fn other_invalid_input_is_reported() {
    assert_eq!(
        error("canary-[0-9", &[], Order::Semver, None),
        r#"invalid glob "canary-[0-9": character class opened at position 8 is never closed with "]""#
    );
    assert_eq!(
        error("*", &["ok-*", "[]"], Order::Semver, None),
        r#"invalid exclude glob "[]": empty character class at position 1"#
    );
    assert!(
        error("semver:>=1.2 <two", &[], Order::Semver, None)
            .starts_with(r#"invalid semver range ">=1.2 <two": "#)
    );
    assert_eq!(validate_pattern("semver:>=1.2 <2"), Ok(()));
    assert_eq!(validate_pattern(""), Ok(()));
}

#[test]
fn the_choice_does_not_depend_on_input_order() {
    let t = "2024-01-01T00:00:00Z";
    let seed = vec![
        pushed("1.2", t),
        pushed("1.2.0", t),
        pushed("v1.2.0", t),
        pushed("1.1.9", "2024-02-01T00:00:00Z"),
        pushed("007", t),
        pushed("7", t),
        pushed("latest", t),
        TagInfo::new("1.0.0"),
    ];
    // The same tag listed twice with different metadata must not make the result flip.
    let mut duplicated = seed.clone();
    duplicated.push(TagInfo {
        digest: Some("sha256:aa".into()),
        ..pushed("7", t)
    });
    duplicated.push(TagInfo {
        digest: Some("sha256:bb".into()),
        ..pushed("7", t)
    });

    let cases = [
        // One-number tags (7, 007) are not versions, so Semver reaches the tie between 1.2,
        // 1.2.0 and v1.2.0 with or without excluding them.
        (policy("", &[], Order::Semver, None), "v1.2.0"),
        (policy("", &["*7"], Order::Semver, None), "v1.2.0"),
        (policy("", &[], Order::Numerical, None), "7"),
        (policy("", &[], Order::Alphabetical, None), "v1.2.0"),
        (policy("", &[], Order::Newest, None), "1.1.9"),
        (policy("[0-9]*", &["1.1.9"], Order::Newest, None), "7"),
    ];
    for (policy, expected) in &cases {
        for arrangement in arrangements(&seed) {
            assert_eq!(pick(policy, &arrangement), Some(*expected), "{policy:?}");
        }
        let mut winners = arrangements(&duplicated)
            .iter()
            .map(|tags| policy.select(tags).cloned())
            .collect::<Vec<_>>();
        winners.dedup();
        assert_eq!(winners.len(), 1, "{policy:?}: {winners:?}");
    }
    let tie = policy("[0-9]*", &["1.1.9"], Order::Newest, None);
    let winner = arrangements(&duplicated)
        .iter()
        .map(|tags| tie.select(tags).cloned())
        .next()
        .flatten()
        .unwrap();
    assert_eq!(winner.digest.as_deref(), Some("sha256:bb"));
}

#[test]
fn a_glob_orders_on_what_its_wildcards_matched() {
    let tags: Vec<TagInfo> = [
        "canary-v1.2.3",
        "canary-v1.2.10",
        "canary-v1.2.4",
        "primary-v9.9.9",
    ]
    .into_iter()
    .map(TagInfo::new)
    .collect();
    let policy = TagPolicy::new("canary-*", &[], Order::Semver, None).unwrap();
    assert_eq!(
        policy.select(&tags).map(|t| t.tag.as_str()),
        Some("canary-v1.2.10")
    );
    let builds: Vec<TagInfo> = ["build-9", "build-10", "build-x"]
        .into_iter()
        .map(TagInfo::new)
        .collect();
    let policy = TagPolicy::new("build-*", &[], Order::Numerical, None).unwrap();
    assert_eq!(
        policy.select(&builds).map(|t| t.tag.as_str()),
        Some("build-10")
    );
}

#[test]
fn signature_and_attestation_tags_are_never_candidates_unless_named() {
    let digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    let artifacts = [
        format!("sha256-{digest}.sig"),
        format!("sha256-{digest}.att"),
        format!("sha256-{digest}.sbom"),
        format!("sha256-{digest}"),
    ];
    let mut seed = tags(&["v1.0.0", "v1.1.0"]);
    seed.extend(artifacts.iter().map(TagInfo::new));
    for order in [Order::Alphabetical, Order::Semver] {
        let all = policy("*", &[], order, None);
        assert_eq!(pick(&all, &seed), Some("v1.1.0"), "{order:?}");
        assert!(artifacts.iter().all(|tag| !all.matches(tag)));
    }
    // Newest: the signature is pushed after the image it signs.
    let mut pushed_seed = vec![pushed("v1.1.0", "2024-01-01T00:00:00Z")];
    pushed_seed.extend(
        artifacts
            .iter()
            .map(|tag| pushed(tag, "2024-01-01T00:00:05Z")),
    );
    assert_eq!(
        pick(&policy("", &[], Order::Newest, None), &pushed_seed),
        Some("v1.1.0")
    );
    // A glob that merely matches them is not enough; one that names them is.
    assert!(!policy("*.sig", &[], Order::Alphabetical, None).matches(&artifacts[0]));
    let signatures = policy("sha256-*.sig", &[], Order::Alphabetical, None);
    assert_eq!(pick(&signatures, &seed), Some(artifacts[0].as_str()));
    let regex = policy(
        r"regex:^sha256-[0-9a-f]{64}$",
        &[],
        Order::Alphabetical,
        None,
    );
    assert_eq!(pick(&regex, &seed), Some(artifacts[3].as_str()));
    // Look-alikes stay ordinary tags.
    let all = policy("*", &[], Order::Alphabetical, None);
    for tag in [
        "sha256-abc.sig",
        "sha256-é",
        &format!("sha256-{digest}.tar"),
    ] {
        assert!(all.matches(tag), "{tag}");
    }
}

#[test]
fn prefer_least_picks_the_smallest_alphabetical_or_numerical_value() {
    let seed = tags(&["b", "a", "c", "10", "9"]);
    let least = |order| policy("", &[], order, None).prefer_least().unwrap();
    assert_eq!(pick(&least(Order::Alphabetical), &seed), Some("10"));
    assert_eq!(pick(&least(Order::Numerical), &seed), Some("9"));
    // Equal numbers still go to the greatest tag.
    let seed = tags(&["007", "7", "8"]);
    assert_eq!(pick(&least(Order::Numerical), &seed), Some("7"));
    for order in [Order::Semver, Order::Newest] {
        assert_eq!(
            policy("", &[], order, None)
                .prefer_least()
                .unwrap_err()
                .to_string(),
            format!(
                "pick Lowest applies to order Alphabetical or Numerical only (it is {order:?} here)"
            )
        );
    }
}

/// `fixtures/tag-selection.tsv`: the peers' own selection tests, one row per case.
#[test]
fn peers_choose_the_same_tag() {
    let fixture = include_str!("fixtures/tag-selection.tsv");
    let mut rows = 0;
    for (number, line) in fixture.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let columns: Vec<&str> = line.split('\t').collect();
        assert_eq!(columns.len(), 5, "line {}: {line:?}", number + 1);
        let (pattern, order, listing, expected, source) =
            (columns[0], columns[1], columns[2], columns[3], columns[4]);
        let (order, least) = match order.strip_suffix("Lowest") {
            Some(order) => (order, true),
            None => (order, false),
        };
        let order = match order {
            "Semver" => Order::Semver,
            "Alphabetical" => Order::Alphabetical,
            "Numerical" => Order::Numerical,
            "Newest" => Order::Newest,
            other => panic!("line {}: unknown order {other:?}", number + 1),
        };
        let mut built = policy(pattern, &[], order, None);
        if least {
            built = built.prefer_least().unwrap();
        }
        let listing = tags(&listing.split(' ').collect::<Vec<_>>());
        let expected = (expected != "none").then_some(expected);
        for arrangement in arrangements(&listing) {
            assert_eq!(
                pick(&built, &arrangement),
                expected,
                "line {}: {source}",
                number + 1
            );
        }
        rows += 1;
    }
    assert!(rows >= 25, "only {rows} rows");
}

/// SemVer gives build metadata no precedence: `1.2.3+9` and `1.2.3+10` tie, and ties go to
/// the byte-wise greatest tag (the `semver` crate's own `Ord` would pick `+10`).
#[test]
fn versions_differing_only_in_build_metadata_tie_to_the_greatest_tag() {
    let semver = policy("", &[], Order::Semver, None);
    assert_eq!(
        pick(&semver, &tags(&["1.2.3+10", "1.2.3+9"])),
        Some("1.2.3+9")
    );
    assert_eq!(
        pick(&semver, &tags(&["1.2.3+9", "1.2.3+10"])),
        Some("1.2.3+9")
    );
    assert_eq!(
        pick(&semver, &tags(&["v1.2.3+build.b", "1.2.3+build.a"])),
        Some("v1.2.3+build.b")
    );
    // Still below the next version, and above its prerelease.
    assert_eq!(
        pick(&semver, &tags(&["1.2.3+99", "1.2.4", "1.2.4-rc.1+1"])),
        Some("1.2.4")
    );
}
