//! Groups (a multi-image release): watches sharing `spec.group` in one namespace move
//! together, and only to a tag every member has — never a partial release.
//!
//! The decision is pure: given each member's candidate tags (the tags its own rules accept),
//! the group's tag is the best tag that *every* member has, ordered by the rules of the first
//! member by name (so every member computes the same answer). Members whose own best tag is
//! newer wait, and the status names who is missing it.

use std::collections::BTreeSet;

use crate::policy::{TagInfo, TagPolicy};

/// One member as the decision sees it.
#[derive(Debug, Clone)]
pub struct Member<'a> {
    /// Watch name.
    pub name: &'a str,
    /// Its rules.
    pub policy: &'a TagPolicy,
    /// Tags of its repository.
    pub tags: &'a [TagInfo],
}

/// What the group should run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDecision {
    /// The best tag every member has (None: no tag is common to all members).
    pub tag: Option<String>,
    /// Members that lack a newer tag some other member already has: `(missing member, tag)`.
    pub waiting_for: Vec<(String, String)>,
}

/// Decides the group's tag. `members` may be in any order.
pub fn decide(members: &[Member<'_>]) -> GroupDecision {
    let mut sorted: Vec<&Member<'_>> = members.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(b.name));
    let Some(leader) = sorted.first() else {
        return GroupDecision {
            tag: None,
            waiting_for: Vec::new(),
        };
    };
    let accepted = |m: &Member<'_>| -> BTreeSet<String> {
        m.tags
            .iter()
            .filter(|t| m.policy.matches(&t.tag))
            .map(|t| t.tag.clone())
            .collect()
    };
    let sets: Vec<BTreeSet<String>> = sorted.iter().map(|m| accepted(m)).collect();
    let common: Vec<TagInfo> = leader
        .tags
        .iter()
        .filter(|t| sets.iter().all(|s| s.contains(&t.tag)))
        .cloned()
        .collect();
    let tag = leader.policy.select(&common).map(|t| t.tag.clone());
    // Someone's own best tag that is not the group's tag, and the members that lack it.
    let mut waiting_for = Vec::new();
    for member in &sorted {
        let Some(best) = member.policy.select(member.tags) else {
            continue;
        };
        if Some(&best.tag) == tag.as_ref() {
            continue;
        }
        for (other, set) in sorted.iter().zip(&sets) {
            if !set.contains(&best.tag)
                && !waiting_for
                    .iter()
                    .any(|(n, t): &(String, String)| n == other.name && *t == best.tag)
            {
                waiting_for.push((other.name.to_string(), best.tag.clone()));
            }
        }
    }
    GroupDecision { tag, waiting_for }
}

/// A human-readable summary of who is missing what, for the `WaitingForGroup` condition.
pub fn waiting_message(group: &str, decision: &GroupDecision) -> String {
    let parts: Vec<String> = decision
        .waiting_for
        .iter()
        .map(|(name, tag)| format!("{name} has no {tag}"))
        .collect();
    match &decision.tag {
        Some(tag) => format!("group {group} runs {tag}; waiting: {}", parts.join(", ")),
        None => format!(
            "group {group}: no tag is common to every member; waiting: {}",
            parts.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Order;

    fn tags(list: &[&str]) -> Vec<TagInfo> {
        list.iter().map(|t| TagInfo::new(*t)).collect()
    }

    #[test]
    fn a_release_moves_only_when_every_image_has_the_tag() {
        let p = TagPolicy::new("v*", &[], Order::Semver, None).unwrap();
        let api = tags(&["v1.2.3", "v1.2.4"]);
        let worker = tags(&["v1.2.3"]);
        let migrate = tags(&["v1.2.3", "v1.2.4"]);
        let members = [
            Member {
                name: "my-api",
                policy: &p,
                tags: &api,
            },
            Member {
                name: "my-api-worker",
                policy: &p,
                tags: &worker,
            },
            Member {
                name: "my-api-migrate",
                policy: &p,
                tags: &migrate,
            },
        ];
        let d = decide(&members);
        assert_eq!(d.tag.as_deref(), Some("v1.2.3"));
        assert_eq!(
            d.waiting_for,
            vec![("my-api-worker".to_string(), "v1.2.4".to_string())]
        );
        assert!(waiting_message("release", &d).contains("my-api-worker has no v1.2.4"));

        let worker = tags(&["v1.2.3", "v1.2.4"]);
        let members = [
            Member {
                name: "my-api",
                policy: &p,
                tags: &api,
            },
            Member {
                name: "my-api-worker",
                policy: &p,
                tags: &worker,
            },
            Member {
                name: "my-api-migrate",
                policy: &p,
                tags: &migrate,
            },
        ];
        let d = decide(&members);
        assert_eq!(d.tag.as_deref(), Some("v1.2.4"));
        assert!(d.waiting_for.is_empty());
    }

    #[test]
    fn every_member_computes_the_same_answer_in_any_order() {
        let p = TagPolicy::new("*", &[], Order::Semver, None).unwrap();
        let a = tags(&["1.0.0", "2.0.0"]);
        let b = tags(&["1.0.0", "2.0.0", "3.0.0"]);
        let one = decide(&[
            Member {
                name: "a",
                policy: &p,
                tags: &a,
            },
            Member {
                name: "b",
                policy: &p,
                tags: &b,
            },
        ]);
        let two = decide(&[
            Member {
                name: "b",
                policy: &p,
                tags: &b,
            },
            Member {
                name: "a",
                policy: &p,
                tags: &a,
            },
        ]);
        assert_eq!(one, two);
        assert_eq!(one.tag.as_deref(), Some("2.0.0"));
        assert_eq!(
            one.waiting_for,
            vec![("a".to_string(), "3.0.0".to_string())]
        );
    }

    #[test]
    fn nothing_in_common_means_no_tag() {
        let p = TagPolicy::new("*", &[], Order::Semver, None).unwrap();
        let a = tags(&["1.0.0"]);
        let b = tags(&["2.0.0"]);
        let d = decide(&[
            Member {
                name: "a",
                policy: &p,
                tags: &a,
            },
            Member {
                name: "b",
                policy: &p,
                tags: &b,
            },
        ]);
        assert_eq!(d.tag, None);
        assert_eq!(d.waiting_for.len(), 2);
    }
}
