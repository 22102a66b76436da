//! The status of a pattern watch's members (`status.members`, the counts and the aggregated
//! `Ready`), from what one reconcile found and did for each member.

use std::fmt;

use imagewatch_crd::{ImageWatchStatus, imagewatch::MemberStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::refused::{Refusal, Refused};
use crate::signature::Verdict as SignatureVerdict;

/// A failure as the operator's error type presents it: a refused tag (reason and message
/// from the refusal), one that lasts until something changes, or one that is retried.
#[derive(Debug)]
enum Failed {
    Refused(Refused),
    Stalled(&'static str, &'static str),
    Transient(&'static str, &'static str),
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failed::Refused(refused) => f.write_str(&refused.message()),
            Failed::Stalled(_, message) | Failed::Transient(_, message) => f.write_str(message),
        }
    }
}

impl Failure for Failed {
    fn reason(&self) -> &'static str {
        match self {
            Failed::Refused(refused) => refused.reason(),
            Failed::Stalled(reason, _) | Failed::Transient(reason, _) => reason,
        }
    }

    fn is_stalled(&self) -> bool {
        matches!(self, Failed::Stalled(..))
    }

    fn refused(&self) -> Option<&Refused> {
        match self {
            Failed::Refused(refused) => Some(refused),
            _ => None,
        }
    }
}

type MemberResult = super::MemberResult<Failed>;
type PatternOutcome = super::PatternOutcome<Failed>;

fn t(secs: i64) -> Time {
    Time(jiff::Timestamp::from_second(secs).unwrap())
}

fn written(file: &str, before: &str, after: &str, commit: Option<&str>) -> WriteResult {
    WriteResult {
        pushed: None,
        file: file.into(),
        current_before: before.into(),
        current_after: after.into(),
        desired: after.into(),
        changed_needed: before != after,
        commit: commit.map(str::to_string),
        head: "head0000000000000".into(),
        attempts: 1,
        held: None,
    }
}

fn member(repo: &str, outcome: Result<WriteResult, Failed>) -> MemberResult {
    MemberResult {
        repository: repo.into(),
        captures: vec![repo.split('/').nth(1).unwrap_or_default().to_string()],
        latest: Some("v2".into()),
        refused: None,
        outcome,
        pull_request: None,
        stages: None,
    }
}

#[test]
fn members_verified_one_by_one() {
    let refused = |tag: &str, verdict| Refused {
        tag: tag.into(),
        digest: "sha256:1111".into(),
        why: Refusal::Signature(verdict),
    };
    let mut held_back = member(
        "svc/b/api",
        Ok(written(
            "apps/b/d.yaml",
            "r.io/svc/b/api:v1",
            "r.io/svc/b/api:v2",
            Some("abcdef0123456789"),
        )),
    );
    held_back.refused = Some(refused("v3", SignatureVerdict::Missing));
    let o = outcome(vec![
        // Signed: written, ready.
        member(
            "svc/a/api",
            Ok(written(
                "apps/a/d.yaml",
                "r.io/svc/a/api:v1",
                "r.io/svc/a/api:v2",
                Some("abcdef0123456789"),
            )),
        ),
        // Its newest tag unsigned, an older verified one written.
        held_back,
        // No candidate verifies: nothing written.
        member(
            "svc/c/api",
            Err(Failed::Refused(refused(
                "v2",
                SignatureVerdict::Invalid("classic signature: no key".into()),
            ))),
        ),
    ]);
    let members = member_statuses(&[], &o);
    assert!(members[0].ready && members[0].reason == "Updated");
    let b = &members[1];
    assert!(!b.ready);
    assert_eq!(b.reason, "SignatureMissing");
    assert_eq!(b.applied.as_deref(), Some("v2"));
    assert_eq!(b.commit.as_deref(), Some("abcdef0123456789"));
    let message = b.message.as_deref().unwrap_or_default();
    assert!(
        message.contains("the newest verified tag") && message.contains("refused newer tag v3"),
        "{message}"
    );
    let c = &members[2];
    assert!(!c.ready && c.applied.is_none() && c.commit.is_none());
    assert_eq!(c.reason, "SignatureInvalid");
    assert!(
        c.message.as_deref().unwrap_or_default().contains("no key"),
        "{c:?}"
    );
    let v = verdict(&members, &o);
    assert_eq!(v.reason, "MembersNotReady");
    assert!(
        v.message.starts_with("2 of 3 members not ready")
            && v.message.contains("svc/b/api: SignatureMissing")
            && v.message.contains("svc/c/api: SignatureInvalid"),
        "{}",
        v.message
    );
}

fn outcome(members: Vec<MemberResult>) -> PatternOutcome {
    PatternOutcome {
        image: "r.io/svc/*/api".into(),
        listed: 10,
        members,
        paused: None,
        pull_request: None,
    }
}

#[test]
fn every_member_up_to_date_is_ready() {
    let o = outcome(vec![
        member(
            "svc/b/api",
            Ok(written(
                "apps/b/d.yaml",
                "r.io/svc/b/api:v2",
                "r.io/svc/b/api:v2",
                None,
            )),
        ),
        member(
            "svc/a/api",
            Ok(written(
                "apps/a/d.yaml",
                "r.io/svc/a/api:v2",
                "r.io/svc/a/api:v2",
                None,
            )),
        ),
    ]);
    let members = member_statuses(&[], &o);
    assert_eq!(
        members
            .iter()
            .map(|m| m.repository.as_str())
            .collect::<Vec<_>>(),
        vec!["svc/a/api", "svc/b/api"],
        "sorted by repository"
    );
    assert!(members.iter().all(|m| m.ready && m.reason == "UpToDate"));
    assert_eq!(members[0].commit.as_deref(), Some("head0000000000000"));
    assert_eq!(members[0].captures, vec!["a"]);
    let v = verdict(&members, &o);
    assert_eq!(
        v,
        Verdict {
            ready: true,
            reason: "UpToDate",
            message: "2 members up to date".into()
        }
    );
}

#[test]
fn the_update_event_names_the_commit_and_the_changes() {
    let o = outcome(vec![
        member(
            "svc/a/api",
            Ok(written(
                "apps/a/d.yaml",
                "r.io/svc/a/api:v1",
                "r.io/svc/a/api:v2",
                Some("abcdef0123456789"),
            )),
        ),
        member(
            "svc/b/api",
            Ok(written(
                "apps/b/d.yaml",
                "r.io/svc/b/api:v2",
                "r.io/svc/b/api:v2",
                None,
            )),
        ),
        member(
            "svc/c/api",
            Ok(written(
                "apps/c/d.yaml",
                "r.io/svc/c/api:v1",
                "r.io/svc/c/api:v2",
                Some("abcdef0123456789"),
            )),
        ),
    ]);
    assert_eq!(
        updated_note(&o).as_deref(),
        Some(
            "2 members updated (commit abcdef012345): apps/a/d.yaml: r.io/svc/a/api:v1 -> r.io/svc/a/api:v2; apps/c/d.yaml: r.io/svc/c/api:v1 -> r.io/svc/c/api:v2"
        )
    );
    let quiet = outcome(vec![member(
        "svc/b/api",
        Ok(written(
            "apps/b/d.yaml",
            "r.io/svc/b/api:v2",
            "r.io/svc/b/api:v2",
            None,
        )),
    )]);
    assert_eq!(updated_note(&quiet), None);
}

#[test]
fn one_failing_member_makes_the_watch_not_ready_and_is_named() {
    let o = outcome(vec![
        member(
            "svc/a/api",
            Ok(written(
                "apps/a/d.yaml",
                "r.io/svc/a/api:v1",
                "r.io/svc/a/api:v2",
                Some("abcdef0123456789"),
            )),
        ),
        member(
            "svc/b/api",
            Err(Failed::Stalled(
                "TargetNotFound",
                "no YAML files under apps/b/overlays/stg",
            )),
        ),
    ]);
    let members = member_statuses(&[], &o);
    assert_eq!(members[0].reason, "Updated");
    assert_eq!(members[0].commit.as_deref(), Some("abcdef0123456789"));
    assert_eq!(
        members[0].message.as_deref(),
        Some("apps/a/d.yaml: r.io/svc/a/api:v1 -> r.io/svc/a/api:v2 (commit abcdef012345)")
    );
    assert!(!members[1].ready);
    assert_eq!(members[1].reason, "TargetNotFound");
    let v = verdict(&members, &o);
    assert!(!v.ready);
    assert_eq!(v.reason, "MembersNotReady");
    assert_eq!(
        v.message,
        "1 of 2 members not ready: svc/b/api: TargetNotFound: no YAML files under apps/b/overlays/stg"
    );
    assert!(
        !o.has_transient_failure(),
        "a missing target waits for a change"
    );
    assert_eq!(o.committed().count(), 1);
}

#[test]
fn the_message_names_the_first_few_failing_members() {
    let o = outcome(
        (0..5)
            .map(|i| {
                member(
                    &format!("svc/m{i}/api"),
                    Err(Failed::Transient("RegistryError", "registry: down")),
                )
            })
            .collect(),
    );
    let members = member_statuses(&[], &o);
    let v = verdict(&members, &o);
    assert!(
        v.message
            .starts_with("5 of 5 members not ready: svc/m0/api: RegistryError")
    );
    assert!(v.message.ends_with("; and 2 more"), "{}", v.message);
    assert!(!v.message.contains("svc/m3/api"));
    assert!(o.has_transient_failure());
}

#[test]
fn a_failing_member_keeps_what_git_held() {
    let previous = vec![MemberStatus {
        repository: "svc/a/api".into(),
        captures: vec!["a".into()],
        latest: Some("v1".into()),
        applied: Some("v1".into()),
        commit: Some("c1".into()),
        file: Some("apps/a/d.yaml".into()),
        ready: true,
        reason: "UpToDate".into(),
        message: None,
        pull_request: None,
        held: None,
    }];
    let o = outcome(vec![member(
        "svc/a/api",
        Err(Failed::Transient("NoMatchingTags", "none")),
    )]);
    let members = member_statuses(&previous, &o);
    assert_eq!(members[0].applied.as_deref(), Some("v1"));
    assert_eq!(members[0].commit.as_deref(), Some("c1"));
    assert!(!members[0].ready);
}

#[test]
fn an_update_is_reported_until_something_else_happens() {
    let first = outcome(vec![member(
        "svc/a/api",
        Ok(written(
            "f",
            "r.io/svc/a/api:v1",
            "r.io/svc/a/api:v2",
            Some("c2"),
        )),
    )]);
    let members = member_statuses(&[], &first);
    let v = verdict(&members, &first);
    assert_eq!(
        (v.ready, v.reason, v.message.as_str()),
        (
            true,
            "Updated",
            "1 of 1 member updated: svc/a/api v2 (commit c2)"
        )
    );
    // The next poll finds Git current: nothing in the status changes.
    let again = outcome(vec![member(
        "svc/a/api",
        Ok(written("f", "r.io/svc/a/api:v2", "r.io/svc/a/api:v2", None)),
    )]);
    let next = member_statuses(&members, &again);
    assert_eq!(next, members);
    assert_eq!(verdict(&next, &again), v);
}

#[test]
fn a_suspended_pattern_says_what_would_change() {
    let mut o = outcome(vec![
        member(
            "svc/a/api",
            Ok(WriteResult {
                pushed: None,
                changed_needed: true,
                desired: "r.io/svc/a/api:v2".into(),
                ..written("f", "r.io/svc/a/api:v1", "r.io/svc/a/api:v1", None)
            }),
        ),
        member(
            "svc/b/api",
            Ok(written("g", "r.io/svc/b/api:v2", "r.io/svc/b/api:v2", None)),
        ),
    ]);
    o.paused = Some(Pause::Suspended);
    let members = member_statuses(&[], &o);
    assert!(!members[0].ready && members[1].ready);
    assert_eq!(members[0].applied.as_deref(), Some("v1"));
    let v = verdict(&members, &o);
    assert_eq!(v.reason, "Suspended");
    assert!(
        v.message.starts_with("suspended: 1 of 2 members not up to date: svc/a/api: Suspended: suspended: f holds r.io/svc/a/api:v1, the rules choose r.io/svc/a/api:v2"),
        "{}",
        v.message
    );
}

#[test]
fn no_member_is_its_own_reason() {
    let o = outcome(vec![]);
    let v = verdict(&[], &o);
    assert_eq!(v.reason, "NoMatchingRepositories");
    assert_eq!(
        v.message,
        "no repository matches r.io/svc/*/api (10 listed in the registry)"
    );
}

#[test]
fn the_status_lists_at_most_200_members_and_counts_all() {
    let o = outcome(
        (0..250)
            .map(|i| {
                let repo = format!("svc/m{i:03}/api");
                let image = format!("r.io/{repo}:v2");
                member(&repo, Ok(written("f", &image, &image, None)))
            })
            .collect(),
    );
    let previous = ImageWatchStatus {
        latest: Some(imagewatch_crd::LatestImage {
            tag: "old".into(),
            digest: None,
            pushed_at: None,
            appeared_at: None,
            appeared_from: None,
        }),
        ..Default::default()
    };
    let s = pattern_status(&previous, &o, Some(3), &t(10));
    assert_eq!(s.members.len(), MAX_LISTED_MEMBERS);
    assert_eq!(s.member_count, Some(250));
    assert_eq!(s.members_ready, Some(250));
    assert_eq!(s.members[0].repository, "svc/m000/api");
    assert_eq!(s.latest, None, "a pattern has no single latest tag");
    let ready = conditions::ready_of(Some(&s)).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "UpToDate")
    );
    assert_eq!(ready.message, "250 members up to date");
    assert_eq!(ready.observed_generation, Some(3));
    // The same outcome again is no change at all.
    let again = pattern_status(&s, &o, Some(3), &t(20));
    assert!(!conditions::status_changed(Some(&s), &again));
}
