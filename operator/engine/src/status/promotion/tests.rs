//! The status a PromotionPolicy reconcile leaves: `status.lastPromotions` and the `Ready`
//! condition of commits and holds. (The Events and the statuses of pull requests and gates
//! are tested with the operator's controller, which publishes them.)

use std::fmt;

use imagewatch_crd::HeldImage;

use super::*;
use crate::promotion::{CandidateImage, Origin};

/// No failure: these tests build the status of reconciles that succeeded.
#[derive(Debug)]
enum Never {}

impl fmt::Display for Never {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {}
    }
}

impl Failure for Never {
    fn reason(&self) -> &'static str {
        match *self {}
    }
    fn is_stalled(&self) -> bool {
        match *self {}
    }
}

/// The status after `outcome`, from the policy's `previous` one (generation 2).
fn status_after(
    previous: Option<&PromotionPolicyStatus>,
    outcome: Outcome,
    now: &Time,
) -> PromotionPolicyStatus {
    build_status::<Never>(previous, Some(2), &Ok(outcome), now)
}

fn candidate(current: &str) -> Candidate {
    Candidate {
        images: vec![CandidateImage {
            name: "my-api".into(),
            repository: "r/acct222/my-api".into(),
            tag: "v2".into(),
            digest: None,
            origin: Origin::Source,
            source: Some("r/acct111/my-api:v2".into()),
            current: vec![format!("r/acct222/my-api:{current}")],
        }],
        not_in_target: vec![],
        pinned: false,
        held: vec![],
    }
}

/// A commit-mode outcome of the candidate against a target holding `current`.
fn committing(delivery: Delivery, gates: Option<GateReport>, current: &str) -> Outcome {
    Outcome {
        source: "ImageWatches stage=stg".into(),
        mode: PromotionMode::Commit,
        path: "overlays/production".into(),
        branch: "release".into(),
        candidate: candidate(current),
        gates,
        delivery,
        warnings: vec![],
        on_git_change: OnGitChange::default(),
        name: "my-api".into(),
    }
}

fn t(secs: i64) -> Time {
    Time(jiff::Timestamp::from_second(secs).unwrap())
}

fn cond<'a>(s: &'a PromotionPolicyStatus, type_: &str) -> &'a Condition {
    s.conditions.iter().find(|c| c.type_ == type_).unwrap()
}

#[test]
fn history_is_newest_first_and_bounded() {
    let mut status = None;
    for i in 0..12 {
        let o = committing(
            Delivery::Committed {
                commit: format!("c{i:02}"),
            },
            Some(GateReport::default()),
            "v1",
        );
        status = Some(status_after(status.as_ref(), o, &t(i)));
    }
    let s = status.unwrap();
    assert_eq!(s.last_promotions.len(), HISTORY);
    assert_eq!(s.last_promotions[0].commit.as_deref(), Some("c11"));
    assert_eq!(cond(&s, PULL_REQUEST_OPEN).reason, "NotApplicable");
    assert_eq!(cond(&s, READY).reason, "Committed");
}

#[test]
fn a_commit_stays_the_ready_message_once_current() {
    let committed = committing(
        Delivery::Committed {
            commit: "abc".into(),
        },
        Some(GateReport::default()),
        "v1",
    );
    let previous = status_after(None, committed, &t(1));
    let current = committing(Delivery::UpToDate { closed: None }, None, "v2");
    let s = status_after(Some(&previous), current, &t(2));
    assert_eq!(cond(&s, READY).reason, "Committed");
    assert_eq!(cond(&s, GATES_PASSING).reason, "NothingToPromote");
}

#[test]
fn a_held_image_is_not_recorded_as_promoted() {
    let mut c = candidate("v1");
    c.images.push(CandidateImage {
        name: "worker".into(),
        repository: "r/acct222/worker".into(),
        tag: "v2".into(),
        digest: None,
        origin: Origin::Source,
        source: None,
        current: vec!["r/acct222/worker:v1".into()],
    });
    let c = c.with_holds(vec![HeldImage {
        name: "my-api".into(),
        commit: "badc0de000000000".into(),
        author: "Jane <jane@example.com>".into(),
        value: "v1".into(),
        replaced: "v2".into(),
    }]);
    let o = Outcome {
        candidate: c,
        ..committing(
            Delivery::Committed {
                commit: "feed".into(),
            },
            Some(GateReport::default()),
            "v1",
        )
    };
    let s = status_after(None, o, &t(10));
    assert_eq!(cond(&s, READY).reason, "Committed");
    assert!(cond(&s, READY).message.contains("worker v1 -> v2"));
    assert!(!cond(&s, READY).message.contains("my-api v1"));
    assert!(cond(&s, READY).message.contains("held: my-api"));
    assert_eq!(cond(&s, imagewatch_crd::conditions::HELD).status, "True");
    assert_eq!(
        s.last_promotions[0].tags.keys().collect::<Vec<_>>(),
        ["worker"]
    );
}
