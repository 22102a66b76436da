//! Status step of a PromotionPolicy reconcile: the status this reconcile leaves (pure), its
//! server-side apply when it changed, and the Events of a promotion.

#[cfg(test)]
use super::fixtures::{candidate, cond, outcome, policy, pr, t};
use crate::error::Classify as _;
use crate::error::PromotionError;
use imagewatch_engine::status::promotion::{Delivery, Outcome};

use imagewatch_crd::{
    PromotionPolicy, PromotionPolicyStatus,
    conditions::{GATES_PASSING, READY},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::events::{Event, EventType},
};
use serde_json::json;

use crate::{
    forge::EnsureAction,
    promotion::{self},
};

#[cfg(test)]
use crate::promotion::GateReport;

pub use imagewatch_engine::status::{short, truncate};

/// Step 6 (pure, in the engine): the status this reconcile leaves.
pub fn build_status(
    policy: &PromotionPolicy,
    result: &Result<Outcome, PromotionError>,
    now: &Time,
) -> PromotionPolicyStatus {
    imagewatch_engine::status::promotion::build_status(
        policy.status.as_ref(),
        policy.metadata.generation,
        result,
        now,
    )
}

pub(super) async fn patch_status_if_changed(
    policy: &PromotionPolicy,
    status: PromotionPolicyStatus,
    client: &Client,
) -> Result<(), PromotionError> {
    if policy.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<PromotionPolicy> =
        Api::namespaced(client.clone(), &policy.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": "imagewatch.dev/v1alpha1",
        "kind": "PromotionPolicy",
        "status": status,
    });
    let params = PatchParams::apply(imagewatch_crd::FIELD_MANAGER).force();
    match api
        .patch_status(&policy.name_any(), &params, &Patch::Apply(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub(super) fn ready_of(policy: &PromotionPolicy) -> Option<&Condition> {
    policy
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == READY))
}

pub(super) fn gates_of(policy: &PromotionPolicy) -> Option<&Condition> {
    policy
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == GATES_PASSING))
}

/// The Event a reconcile result deserves, if any (pure).
pub fn event_for(
    policy: &PromotionPolicy,
    result: &Result<Outcome, PromotionError>,
) -> Option<Event> {
    let normal = |reason: &str, action: &str, note: String| Event {
        type_: EventType::Normal,
        reason: reason.into(),
        note: Some(truncate(&note, 1024)),
        action: action.into(),
        secondary: None,
    };
    match result {
        Ok(o) => {
            let summary = o.candidate.summary();
            match &o.delivery {
                Delivery::Committed { commit } => Some(normal(
                    "Promoted",
                    "Commit",
                    format!(
                        "committed {} to {} ({}): {summary}",
                        short(commit),
                        o.branch,
                        o.path
                    ),
                )),
                Delivery::Proposed {
                    pull_request,
                    action: EnsureAction::Created,
                    ..
                } => Some(normal(
                    "PullRequestOpened",
                    "Propose",
                    format!(
                        "opened #{} {}: {summary}",
                        pull_request.number, pull_request.url
                    ),
                )),
                Delivery::Proposed {
                    pull_request,
                    pushed: true,
                    ..
                } => Some(normal(
                    "PullRequestUpdated",
                    "Propose",
                    format!(
                        "updated #{} {}: {summary}",
                        pull_request.number, pull_request.url
                    ),
                )),
                Delivery::UpToDate {
                    closed: Some(pr), ..
                } => Some(normal(
                    "PullRequestClosed",
                    "Close",
                    format!(
                        "closed #{} {}: {} already holds {summary}",
                        pr.number, pr.url, o.path
                    ),
                )),
                Delivery::Closed(closed) => {
                    let previous = ready_of(policy);
                    previous.is_none_or(|c| c.reason != closed.reason).then(|| {
                        normal(
                            closed.reason,
                            "Wait",
                            format!("{summary} waits: {}", closed.why),
                        )
                    })
                }
                Delivery::Gated => {
                    let (reason, message) = o.gates.as_ref()?.failing.clone()?;
                    let previous = gates_of(policy);
                    previous
                        .is_none_or(|c| c.reason != reason)
                        .then(|| normal(reason, "Gate", message))
                }
                _ => None,
            }
        }
        Err(e) => {
            let message = e.to_string();
            let previous = ready_of(policy);
            previous
                .is_none_or(|c| c.reason != e.reason() || c.message != truncate(&message, 1024))
                .then(|| Event {
                    type_: match e {
                        PromotionError::SourceWaiting { .. } => EventType::Normal,
                        _ => EventType::Warning,
                    },
                    reason: e.reason().into(),
                    note: Some(truncate(&message, 1024)),
                    action: "Reconcile".into(),
                    secondary: None,
                })
        }
    }
}

/// The Warning Event of the holds that start with `new` (pure): images held on a commit the
/// policy's previous status did not hold them on, once each.
pub fn held_event(policy: &PromotionPolicy, new: &PromotionPolicyStatus) -> Option<Event> {
    let before = policy
        .status
        .as_ref()
        .map(|s| s.held.as_slice())
        .unwrap_or_default();
    let mode = policy.spec.on_git_change.unwrap_or_default();
    let started: Vec<String> = new
        .held
        .iter()
        .filter(|h| {
            !before
                .iter()
                .any(|b| b.name == h.name && b.commit == h.commit)
        })
        .map(|h| promotion::held::message(h, mode, &policy.name_any()))
        .collect();
    (!started.is_empty()).then(|| Event {
        type_: EventType::Warning,
        reason: imagewatch_crd::conditions::reason::CHANGED_IN_GIT.into(),
        note: Some(truncate(&started.join("; "), 1024)),
        action: "Hold".into(),
        secondary: None,
    })
}

pub(super) async fn publish_events(
    policy: &PromotionPolicy,
    result: &Result<Outcome, PromotionError>,
    new_status: &PromotionPolicyStatus,
    recorder: &kube::runtime::events::Recorder,
) {
    let events = [event_for(policy, result), held_event(policy, new_status)];
    for event in events.iter().flatten() {
        if let Err(e) = recorder.publish(event, &policy.object_ref(&())).await {
            tracing::warn!(error = %e, "cannot publish Event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forge::ForgeError;
    use crate::promotion::{
        GateFacts,
        gates::{ImageCheck, ImageFact},
    };
    use imagewatch_crd::conditions::PULL_REQUEST_OPEN;
    use imagewatch_crd::promotion::{PromotionMode, PullRequestRef};
    use std::time::Duration;

    #[test]
    fn a_candidate_outside_its_windows_waits_and_says_when_they_open() {
        let p = policy(json!({}));
        let closed = imagewatch_engine::windows::Closed {
            reason: "OutsideWindow",
            why: "outside allow window spec.windows[0] (0 9 * * 1-5 for 8h, UTC); the next window opens at 2026-12-07T09:00:00Z".into(),
            opens: Some("2026-12-07T09:00:00Z".parse().unwrap()),
        };
        let result = Ok(outcome(Delivery::Closed(closed), None, "v1"));
        let s = build_status(&p, &result, &t(10));
        let ready = cond(&s, READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "OutsideWindow")
        );
        assert!(
            ready
                .message
                .contains("the next window opens at 2026-12-07T09:00:00Z")
                && ready
                    .message
                    .contains("waits to be proposed to overlays/production"),
            "{}",
            ready.message
        );
        let event = event_for(&p, &result).expect("an Event when it starts waiting");
        assert_eq!(event.reason, "OutsideWindow");
        // Said once: not again while it still waits.
        let waiting = PromotionPolicy {
            status: Some(s),
            ..p
        };
        assert!(event_for(&waiting, &result).is_none());
    }

    #[test]
    fn a_gated_candidate_names_the_gate() {
        let p = policy(json!({}));
        let report = promotion::evaluate(
            &GateFacts {
                image_exists: Some(vec![ImageFact {
                    reference: "r/acct222/my-api:v2".into(),
                    expected_digest: None,
                    check: ImageCheck::Missing,
                }]),
                ..Default::default()
            },
            jiff::Timestamp::from_second(0).unwrap(),
        );
        let s = build_status(
            &p,
            &Ok(outcome(Delivery::Gated, Some(report), "v1")),
            &t(10),
        );
        assert_eq!(cond(&s, GATES_PASSING).reason, "ImageMissing");
        assert_eq!(cond(&s, GATES_PASSING).status, "False");
        assert_eq!(cond(&s, READY).reason, "WaitingForGates");
        assert_eq!(s.gates_summary.as_deref(), Some("0/1"));
        assert_eq!(s.candidate_summary.as_deref(), Some("my-api:v2"));
        assert_eq!(s.candidate[0].current.as_deref(), Some("v1"));
        assert!(s.last_promotions.is_empty());
        assert!(
            event_for(
                &p,
                &Ok(outcome(
                    Delivery::Gated,
                    s.gates_summary.as_ref().map(|_| GateReport {
                        failing: Some(("ImageMissing", "x".into())),
                        ..Default::default()
                    }),
                    "v1"
                ))
            )
            .is_some()
        );
    }

    #[test]
    fn a_proposal_records_the_pull_request_and_the_promotion() {
        let p = policy(json!({}));
        let o = outcome(
            Delivery::Proposed {
                pull_request: pr(3),
                action: EnsureAction::Created,
                commit: "abcdef1234567890".into(),
                pushed: true,
            },
            Some(GateReport::default()),
            "v1",
        );
        let s = build_status(&p, &Ok(o.clone()), &t(10));
        assert_eq!(cond(&s, PULL_REQUEST_OPEN).status, "True");
        assert_eq!(
            cond(&s, PULL_REQUEST_OPEN).message,
            "https://github.test/o/r/pull/3"
        );
        assert_eq!(cond(&s, READY).reason, "Proposed");
        assert_eq!(s.pull_request.as_ref().map(|p| p.number), Some(3));
        assert_eq!(s.last_promotions.len(), 1);
        assert_eq!(s.last_promotions[0].tags["my-api"], "v2");
        // The history has one change per promoted image, by the promotion.
        let change = &s.history[0];
        assert_eq!(
            (
                change.image.as_deref(),
                change.tag.as_str(),
                change.trigger.as_str(),
                change.pull_request.as_deref()
            ),
            (
                Some("my-api"),
                "v2",
                "Promotion",
                Some("https://github.test/o/r/pull/3")
            )
        );
        let e = event_for(&p, &Ok(o.clone())).unwrap();
        assert_eq!(e.reason, "PullRequestOpened");

        // The same state again records nothing new.
        let mut again = p.clone();
        again.status = Some(s.clone());
        let unchanged = outcome(
            Delivery::Proposed {
                pull_request: pr(3),
                action: EnsureAction::Unchanged,
                commit: "abcdef1234567890".into(),
                pushed: false,
            },
            Some(GateReport::default()),
            "v1",
        );
        let s2 = build_status(&again, &Ok(unchanged.clone()), &t(20));
        assert_eq!(s2, s, "nothing changes, so no status write");
        assert!(event_for(&again, &Ok(unchanged)).is_none());
    }

    #[test]
    fn up_to_date_closes_and_clears_the_pull_request() {
        let mut p = policy(json!({}));
        p.status = Some(PromotionPolicyStatus {
            pull_request: Some(PullRequestRef {
                url: "u".into(),
                number: 3,
                branch: "b".into(),
            }),
            ..Default::default()
        });
        let o = outcome(
            Delivery::UpToDate {
                closed: Some(pr(3)),
            },
            None,
            "v2",
        );
        let s = build_status(&p, &Ok(o.clone()), &t(10));
        assert!(s.pull_request.is_none());
        assert_eq!(cond(&s, PULL_REQUEST_OPEN).reason, "Closed");
        assert_eq!(cond(&s, GATES_PASSING).status, "Unknown");
        assert_eq!(cond(&s, READY).reason, "UpToDate");
        assert_eq!(event_for(&p, &Ok(o)).unwrap().reason, "PullRequestClosed");
    }

    #[test]
    fn a_held_image_is_held_true_with_one_event_and_others_still_go() {
        let mut p = policy(json!({"mode": "Commit"}));
        let held = imagewatch_crd::HeldImage {
            name: "my-api".into(),
            commit: "badc0de000000000".into(),
            author: "Jane <jane@example.com>".into(),
            value: "v1".into(),
            replaced: "v2".into(),
        };
        // Nothing left to propose: Ready says why, Held names commit, author and tag.
        let all_held = Outcome {
            mode: PromotionMode::Commit,
            candidate: candidate("v1").with_holds(vec![held.clone()]),
            ..outcome(Delivery::UpToDate { closed: None }, None, "v1")
        };
        let s = build_status(&p, &Ok(all_held.clone()), &t(10));
        assert_eq!(cond(&s, READY).reason, "ChangedInGit");
        assert_eq!(cond(&s, imagewatch_crd::conditions::HELD).status, "True");
        assert_eq!(
            cond(&s, imagewatch_crd::conditions::HELD).reason,
            "ChangedInGit"
        );
        let message = &cond(&s, imagewatch_crd::conditions::HELD).message;
        assert!(
            message.starts_with(
                "my-api: commit badc0de00000 by Jane <jane@example.com> set v1 over v2"
            ),
            "{message}"
        );
        assert_eq!(cond(&s, GATES_PASSING).reason, "NothingToPromote");
        assert_eq!(s.held, vec![held.clone()]);
        assert!(s.last_promotions.is_empty());
        let event = held_event(&p, &s).expect("a hold that starts is an Event");
        assert_eq!(
            (event.type_, event.reason.as_str(), event.action.as_str()),
            (EventType::Warning, "ChangedInGit", "Hold")
        );
        p.status = Some(s);
        let again = build_status(&p, &Ok(all_held), &t(20));
        assert_eq!(
            Some(&again),
            p.status.as_ref(),
            "no status write while held"
        );
        assert!(held_event(&p, &again).is_none(), "once per hold");

        // The source offers another tag: promoted, and no longer held.
        let committed = Outcome {
            mode: PromotionMode::Commit,
            ..outcome(
                Delivery::Committed {
                    commit: "feed".into(),
                },
                Some(GateReport::default()),
                "v1",
            )
        };
        let s = build_status(&p, &Ok(committed), &t(30));
        assert_eq!(cond(&s, imagewatch_crd::conditions::HELD).reason, "NotHeld");
        assert_eq!(cond(&s, imagewatch_crd::conditions::HELD).status, "False");
        assert!(s.held.is_empty());
        assert_eq!(s.last_promotions[0].tags["my-api"], "v2");
    }

    #[test]
    fn errors_keep_the_last_known_state() {
        let mut p = policy(json!({}));
        p.status = Some(PromotionPolicyStatus {
            candidate_summary: Some("my-api:v2".into()),
            ..Default::default()
        });
        let err = PromotionError::Forge(ForgeError::RateLimited {
            provider: "github",
            retry_after: Some(Duration::from_secs(30)),
            message: "API rate limit exceeded".into(),
        });
        let s = build_status(&p, &Err(err), &t(10));
        assert_eq!(s.candidate_summary.as_deref(), Some("my-api:v2"));
        assert_eq!(cond(&s, READY).reason, "ForgeError");
        assert!(cond(&s, READY).message.contains("retry in 30s"));
    }
}
