//! "Why not my tag?": the tags a watch's registry holds that rank above the tag it writes,
//! and for each the first thing that left it out — a tag rule (pattern, exclude, range,
//! order), its signature, its platforms, the watch's pin or its group. The status keeps the
//! best [`REFUSED_TAGS_LIMIT`] of them in `status.refusedTags`; `imagewatch explain` prints
//! them.

use imagewatch_crd::RefusedTag;
pub use imagewatch_crd::common::REFUSED_TAGS_LIMIT;

use crate::policy::{TagInfo, TagPolicy};
use crate::refused::Refused;

/// What a reconcile of a watch of one repository looked at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Considered {
    /// Tags the registry listed.
    pub listed: usize,
    /// The tags ranking above the one chosen (all ranked tags when none was), best first, at
    /// most [`REFUSED_TAGS_LIMIT`], each with the reason it was left out.
    pub refused: Vec<RefusedTag>,
}

/// Why the tags above the chosen one were not chosen, besides the rules.
#[derive(Clone, Copy, Debug, Default)]
pub struct Besides<'a> {
    /// Candidates refused for their signature or platforms.
    pub refused: &'a [Refused],
    /// `spec.pin`, when set.
    pub pin: Option<&'a str>,
    /// `spec.group` with what the group chose, when the group chose the tag.
    pub group: Option<&'a str>,
}

/// The tags of `tags` above `chosen` under `policy` and why each was left out (pure).
#[must_use]
pub fn considered(
    policy: &TagPolicy,
    tags: &[TagInfo],
    chosen: Option<&str>,
    besides: Besides<'_>,
) -> Considered {
    let chosen_info = chosen.map(|tag| {
        tags.iter()
            .find(|t| t.tag == tag)
            .cloned()
            .unwrap_or_else(|| TagInfo::new(tag))
    });
    let mut refused = Vec::new();
    for (info, rule) in policy.ranked_above(tags, chosen_info.as_ref()) {
        if refused.len() == REFUSED_TAGS_LIMIT {
            break;
        }
        let entry = match rule {
            Some(rule) => RefusedTag {
                tag: info.tag.clone(),
                digest: info.digest.clone(),
                reason: rule.reason().to_owned(),
                message: format!("{} {}", info.tag, rule.message()),
            },
            None => match besides.refused.iter().find(|r| r.tag == info.tag) {
                Some(r) => RefusedTag {
                    tag: r.tag.clone(),
                    digest: Some(r.digest.clone()),
                    reason: r.reason().to_owned(),
                    message: r.message(),
                },
                None => match (besides.pin, besides.group, chosen) {
                    (Some(pin), _, _) => RefusedTag {
                        tag: info.tag.clone(),
                        digest: info.digest.clone(),
                        reason: "Pin".to_owned(),
                        message: format!(
                            "{} is not written: spec.pin holds the watch to {pin}",
                            info.tag
                        ),
                    },
                    (None, Some(group), Some(chosen)) => RefusedTag {
                        tag: info.tag.clone(),
                        digest: info.digest.clone(),
                        reason: "Group".to_owned(),
                        message: format!(
                            "{} is not in every repository of group {group}, which runs {chosen}",
                            info.tag
                        ),
                    },
                    // A candidate the search did not reach (no manifest for it).
                    _ => continue,
                },
            },
        };
        refused.push(entry);
    }
    Considered {
        listed: tags.len(),
        refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platforms::Platform;
    use crate::policy::Order;
    use crate::refused::Refusal;

    fn tags(names: &[&str]) -> Vec<TagInfo> {
        names.iter().map(|t| TagInfo::new(*t)).collect()
    }

    fn reasons(c: &Considered) -> Vec<(&str, &str)> {
        c.refused
            .iter()
            .map(|r| (r.tag.as_str(), r.reason.as_str()))
            .collect()
    }

    #[test]
    fn each_newer_tag_names_the_first_rule_that_refused_it_best_first() {
        let policy = TagPolicy::new(
            "semver:>=1.0, <2",
            &["*-rc*".to_owned()],
            Order::Semver,
            None,
        )
        .unwrap();
        let listed = tags(&[
            "1.4.0",
            "1.5.0-rc1",
            "2.0.0",
            "1.3.0",
            "latest",
            "1.4.1-dev",
            "0.9.0",
        ]);
        let chosen = policy.select(&listed).map(|t| t.tag.clone());
        assert_eq!(chosen.as_deref(), Some("1.4.0"));
        let c = considered(&policy, &listed, chosen.as_deref(), Besides::default());
        assert_eq!(c.listed, 7);
        // 2.0.0 is outside the range; 1.5.0-rc1 is excluded before the range is asked;
        // 1.4.1-dev is a prerelease the range does not admit. Older tags and `latest` (no
        // version: ranks nowhere) are not listed.
        assert_eq!(
            reasons(&c),
            vec![
                ("2.0.0", "Range"),
                ("1.5.0-rc1", "Exclude"),
                ("1.4.1-dev", "Range")
            ]
        );
        assert_eq!(
            c.refused[0].message,
            "2.0.0 is a version outside the range \"semver:>=1.0, <2\""
        );
        assert_eq!(c.refused[1].message, "1.5.0-rc1 matches exclude \"*-rc*\"");
    }

    #[test]
    fn a_glob_ranks_what_its_wildcard_matched_and_names_tags_it_leaves_out() {
        let policy = TagPolicy::new("canary-*", &[], Order::Semver, None).unwrap();
        let listed = tags(&["canary-v1.2.0", "primary-v9.0.0", "v3.0.0", "canary-v1.1.0"]);
        let c = considered(&policy, &listed, Some("canary-v1.2.0"), Besides::default());
        // `primary-v9.0.0` reads as no version; `v3.0.0` does, and the pattern refuses it.
        assert_eq!(reasons(&c), vec![("v3.0.0", "Pattern")]);
        assert_eq!(
            c.refused[0].message,
            "v3.0.0 does not match pattern \"canary-*\""
        );
    }

    #[test]
    fn nothing_chosen_lists_every_tag_the_order_can_place() {
        // Nothing matches `build-*`: every tag that reads as a number is listed, best first;
        // `main` (no number) ranks nowhere.
        let policy = TagPolicy::new("build-*", &[], Order::Numerical, None).unwrap();
        let c = considered(
            &policy,
            &tags(&["12", "7", "main"]),
            None,
            Besides::default(),
        );
        assert_eq!(reasons(&c), vec![("12", "Pattern"), ("7", "Pattern")]);
        // A candidate the rules admit is not "refused" by them.
        let policy = TagPolicy::new("", &[], Order::Numerical, None).unwrap();
        let c = considered(&policy, &tags(&["12", "7"]), None, Besides::default());
        assert_eq!(reasons(&c), vec![]);
        // Under Semver a tag the order cannot read, inside the pattern, is NotOrderable, when
        // it ranks: an `extract` that yields no version.
        let policy = TagPolicy::new("v*", &[], Order::Semver, None).unwrap();
        let info = TagInfo::new("vnext");
        assert_eq!(
            policy.rule_refusal(&info).map(|r| r.reason()),
            Some("NotOrderable")
        );
    }

    #[test]
    fn candidates_above_the_choice_are_refused_by_signature_platform_pin_or_group() {
        let policy = TagPolicy::new("v*", &[], Order::Semver, None).unwrap();
        let listed = tags(&["v1.0.0", "v1.1.0", "v1.2.0", "v1.3.0"]);
        let refused = [
            Refused {
                tag: "v1.3.0".into(),
                digest: "sha256:33".into(),
                why: Refusal::Signature(crate::signature::Verdict::Missing),
            },
            Refused {
                tag: "v1.2.0".into(),
                digest: "sha256:22".into(),
                why: Refusal::PlatformMissing {
                    missing: Platform::parse_all(&["linux/arm64"]).unwrap(),
                    provided: Platform::parse_all(&["linux/amd64"]).unwrap(),
                },
            },
        ];
        let besides = Besides {
            refused: &refused,
            ..Besides::default()
        };
        let c = considered(&policy, &listed, Some("v1.1.0"), besides);
        assert_eq!(
            reasons(&c),
            vec![
                ("v1.3.0", "SignatureMissing"),
                ("v1.2.0", "PlatformMissing")
            ]
        );
        assert_eq!(c.refused[1].digest.as_deref(), Some("sha256:22"));

        let pinned = Besides {
            pin: Some("v1.0.0"),
            ..Besides::default()
        };
        let c = considered(&policy, &listed, Some("v1.0.0"), pinned);
        assert_eq!(c.refused.len(), 3);
        assert_eq!(
            c.refused[0].message,
            "v1.3.0 is not written: spec.pin holds the watch to v1.0.0"
        );

        let grouped = Besides {
            group: Some("web"),
            ..Besides::default()
        };
        let c = considered(&policy, &listed, Some("v1.2.0"), grouped);
        assert_eq!(reasons(&c), vec![("v1.3.0", "Group")]);
        assert_eq!(
            c.refused[0].message,
            "v1.3.0 is not in every repository of group web, which runs v1.2.0"
        );
    }

    #[test]
    fn at_most_twenty_are_kept_the_best_ones() {
        let policy = TagPolicy::new("semver:<1", &[], Order::Semver, None).unwrap();
        let names: Vec<String> = (0..50).map(|i| format!("1.{i}.0")).collect();
        let listed: Vec<TagInfo> = names.iter().map(TagInfo::new).collect();
        let c = considered(&policy, &listed, None, Besides::default());
        assert_eq!(c.refused.len(), REFUSED_TAGS_LIMIT);
        assert_eq!(c.refused[0].tag, "1.49.0");
        assert_eq!(c.refused[19].tag, "1.30.0");
    }

    #[test]
    fn under_pick_lowest_the_tags_below_rank_above() {
        let policy = TagPolicy::new("", &["3".to_owned()], Order::Numerical, None)
            .unwrap()
            .prefer_least()
            .unwrap();
        let listed = tags(&["5", "3", "4"]);
        let c = considered(&policy, &listed, Some("4"), Besides::default());
        assert_eq!(reasons(&c), vec![("3", "Exclude")]);
    }
}
