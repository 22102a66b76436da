//! The status of an ImageWatch after one reconcile: `latest`, `applied`, `refused`, the
//! pull request record and the `Ready` and `PullRequestOpen` conditions. A pattern watch's
//! status is built by [`super::members::pattern_status`].

use imagewatch_crd::{AppliedImage, ImageWatchSpec, ImageWatchStatus, conditions::reason};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::outcome::{Failure, Outcome, PrAction, Reconciled};
use super::{self as conditions, applied_tag, is_bare_tag, members, pull_request, short};
use crate::considered::Considered;
use crate::history;
use crate::refused::Refused;

/// The status a reconcile of a watch (its `spec`, its `previous` status and the
/// `generation` it read) should leave, from what it found and did (or the failure that
/// stopped it), and the tags it looked at (`considered`, a watch of one repository that got
/// as far as the registry's tags).
pub fn build_status<E: Failure>(
    spec: &ImageWatchSpec,
    previous: Option<&ImageWatchStatus>,
    generation: Option<i64>,
    result: &Result<Reconciled<E>, E>,
    considered: Option<&Considered>,
    now: &Time,
) -> ImageWatchStatus {
    let previous = previous.cloned().unwrap_or_default();
    let result = match result {
        Ok(Reconciled::Pattern(outcome)) => {
            return members::pattern_status(&previous, outcome, generation, now);
        }
        Ok(Reconciled::Single(outcome)) => Ok(outcome),
        Err(e) => Err(e),
    };
    // A pattern that failed as a whole keeps reporting its members as last seen; a watch of
    // one repository has none.
    let pattern = spec.is_pattern();
    let mut next = ImageWatchStatus {
        observed_generation: generation,
        latest: previous.latest.clone().filter(|_| !pattern),
        applied: previous.applied.clone().filter(|_| !pattern),
        member_count: previous.member_count.filter(|_| pattern),
        last_handled_requested_at: previous.last_handled_requested_at.clone(),
        members_ready: previous.members_ready.filter(|_| pattern),
        members: if pattern {
            previous.members.clone()
        } else {
            Vec::new()
        },
        refused: match result {
            Ok(outcome) => outcome.refused.as_deref().map(refused_tag),
            Err(e) => match e.refused() {
                Some(refused) => Some(refused_tag(refused)),
                None => previous.refused.clone(),
            },
        },
        refused_tags: match considered {
            Some(c) => c.refused.clone(),
            None if pattern => Vec::new(),
            None => previous.refused_tags.clone(),
        },
        history: previous.history.clone(),
        failure_notified: previous.failure_notified.clone(),
        pull_request: previous.pull_request.clone(),
        held: previous.held.clone().filter(|_| !pattern),
        conditions: previous.conditions.clone(),
    };
    // A commit to `branch`, or to the push branch of a pull request.
    let proposed = |o: &Outcome| o.pull_request.as_ref().and_then(|d| d.commit.clone());
    if let Ok(outcome) = result
        && let Some(write) = &outcome.write
        && let Some(commit) = write.commit.clone().or_else(|| proposed(outcome))
    {
        let pull_request = outcome
            .pull_request
            .as_ref()
            .and_then(|d| d.pull_request.as_ref())
            .map(|p| p.url.as_str());
        let change = history::Change {
            tag: &outcome.latest.tag,
            image: None,
            digest: outcome.latest.digest.as_deref(),
            commit: Some(&commit),
            pull_request,
        };
        let record = history::record(change, outcome.stages.as_ref(), None, now);
        next.history = history::prepend(&next.history, vec![record]);
    }
    if let Ok(Outcome {
        pull_request: Some(delivered),
        ..
    }) = result
    {
        next.pull_request = pull_request::status_of(delivered, previous.pull_request.as_ref());
        let open = next
            .pull_request
            .as_ref()
            .filter(|p| p.state == imagewatch_crd::PullRequestState::Open);
        let message = match (open, &next.pull_request) {
            (Some(p), _) => format!("#{} {} proposes {}", p.number, p.url, delivered.tag),
            (None, Some(p)) => format!(
                "#{} {} is {}: the base branch holds {}",
                p.number, p.url, p.state, delivered.tag
            ),
            (None, None) => format!("the base branch holds {}", delivered.tag),
        };
        let mut message = message;
        if !delivered.warnings.is_empty() {
            message.push_str(&format!(" ({})", delivered.warnings.join("; ")));
        }
        // Nothing open any more: the reason keeps saying how the last one ended.
        let reason = match (delivered.action, &next.pull_request) {
            (PrAction::NotNeeded, Some(p))
                if p.state == imagewatch_crd::PullRequestState::Closed =>
            {
                "Closed"
            }
            (PrAction::NotNeeded, Some(p))
                if p.state == imagewatch_crd::PullRequestState::Merged =>
            {
                reason::MERGED
            }
            (action, _) => action.condition_reason(),
        };
        let mut condition =
            conditions::ready_condition(open.is_some(), reason, &message, generation, now);
        condition.type_ = imagewatch_crd::conditions::PULL_REQUEST_OPEN.to_string();
        next.conditions = conditions::merge_condition(&next.conditions, condition);
    }
    let condition = match result {
        Ok(outcome) => {
            next.latest = Some(outcome.latest.clone());
            if let Some(write) = &outcome.write {
                next.held = write.held.as_ref().map(|h| h.change.clone());
                let tag = applied_tag(&write.current_after);
                // A bare tag (Helm `image.tag`) is no image reference.
                let image =
                    (!is_bare_tag(&write.current_after)).then(|| write.current_after.clone());
                let same_as_before = previous
                    .applied
                    .as_ref()
                    .is_some_and(|a| holds(a, &write.current_after));
                next.applied = Some(AppliedImage {
                    tag,
                    image,
                    commit: Some(write.commit.clone().unwrap_or_else(|| {
                        previous
                            .applied
                            .as_ref()
                            .filter(|_| same_as_before)
                            .and_then(|a| a.commit.clone())
                            .unwrap_or_else(|| write.head.clone())
                    })),
                    at: if write.commit.is_some() || !same_as_before {
                        Some(now.clone())
                    } else {
                        previous.applied.as_ref().and_then(|a| a.at.clone())
                    },
                });
            }
            if let (Some(refused), Some(w), false) =
                (&outcome.refused, &outcome.write, outcome.paused.is_some())
            {
                let done = match &w.commit {
                    Some(commit) => format!(
                        "{}: {} -> {} (commit {}), the newest verified tag",
                        w.file,
                        w.current_before,
                        w.current_after,
                        short(commit)
                    ),
                    None => format!(
                        "{} holds {}, the newest verified tag",
                        w.file, w.current_after
                    ),
                };
                conditions::ready_condition(
                    false,
                    refused.reason(),
                    &format!("{done}; refused newer {}", refused.message()),
                    generation,
                    now,
                )
            } else if let Some(message) = &outcome.waiting {
                conditions::ready_condition(
                    false,
                    reason::WAITING_FOR_GROUP,
                    message,
                    generation,
                    now,
                )
            } else if let Some(pause) = outcome
                .paused
                .as_ref()
                .filter(|p| p.shows(outcome.write.as_ref().is_some_and(|w| w.changed_needed)))
            {
                let message = match &outcome.write {
                    Some(w) if w.changed_needed => format!(
                        "{}: Git holds {}, the rules choose {} (not written)",
                        pause.label(),
                        w.current_before,
                        w.desired
                    ),
                    _ => format!("{}: nothing is written", pause.label()),
                };
                conditions::ready_condition(false, pause.reason(), &message, generation, now)
            } else if let Some((w, hold)) = outcome
                .write
                .as_ref()
                .and_then(|w| w.held.as_ref().map(|h| (w, h)))
            {
                // Git holds what someone chose on purpose: the watch does what it is told.
                conditions::ready_condition(
                    true,
                    reason::CHANGED_IN_GIT,
                    &format!("{}: {}", w.file, hold.message()),
                    generation,
                    now,
                )
            } else {
                match &outcome.write {
                    Some(w) if w.commit.is_some() => conditions::ready_condition(
                        true,
                        reason::UPDATED,
                        &format!(
                            "{}: {} -> {} (commit {})",
                            w.file,
                            w.current_before,
                            w.current_after,
                            short(w.commit.as_deref().unwrap_or_default())
                        ),
                        generation,
                        now,
                    ),
                    Some(w) => conditions::ready_condition(
                        true,
                        reason::UP_TO_DATE,
                        &format!("{} holds {}", w.file, w.current_after),
                        generation,
                        now,
                    ),
                    None => {
                        conditions::ready_condition(true, reason::UP_TO_DATE, "", generation, now)
                    }
                }
            }
        }
        Err(e) => conditions::ready_condition(false, e.reason(), &e.to_string(), generation, now),
    };
    // A watch that was just Updated and is now simply current keeps its Updated condition
    // (with the commit) until something else happens: no status write on every poll.
    let condition = match (conditions::ready_of(Some(&previous)), result) {
        (Some(old), Ok(outcome))
            if old.status == "True"
                && old.observed_generation == generation
                && old.reason == reason::UPDATED
                && condition.reason == reason::UP_TO_DATE
                && previous
                    .applied
                    .as_ref()
                    .zip(outcome.write.as_ref())
                    .is_some_and(|(a, w)| holds(a, &w.current_after)) =>
        {
            old.clone()
        }
        _ => condition,
    };
    next.conditions = conditions::merge_condition(&next.conditions, condition);
    if let Ok(outcome) = result
        && outcome.paused.is_none()
    {
        let held = outcome
            .write
            .as_ref()
            .and_then(|w| w.held.as_ref().map(|h| (w.file.as_str(), h)));
        next.conditions = super::held::held_condition(next.conditions, held, generation, now);
    }
    next
}

/// The status form of a refused tag.
fn refused_tag(refused: &Refused) -> imagewatch_crd::RefusedTag {
    imagewatch_crd::RefusedTag {
        tag: refused.tag.clone(),
        digest: Some(refused.digest.clone()),
        reason: refused.reason().to_string(),
        message: refused.message(),
    }
}

/// Whether `applied` says Git holds `value` (an image reference, or a bare tag).
fn holds(applied: &AppliedImage, value: &str) -> bool {
    match &applied.image {
        Some(image) => image == value,
        None => is_bare_tag(value) && applied.tag == value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{WriteResult, ready_of, status_changed, tag_of};
    use imagewatch_crd::LatestImage;
    use std::fmt;

    /// A failure as the operator's error type presents itself.
    #[derive(Debug)]
    struct Failed(&'static str, &'static str);

    impl fmt::Display for Failed {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.1)
        }
    }

    impl Failure for Failed {
        fn reason(&self) -> &'static str {
            self.0
        }
        fn is_stalled(&self) -> bool {
            false
        }
    }

    fn spec() -> ImageWatchSpec {
        serde_json::from_value(serde_json::json!({
            "image": "r.io/app",
            "target": {"workload": {
                "path": "apps/d.yaml", "kind": "Deployment", "name": "app", "container": "app"
            }}
        }))
        .unwrap()
    }

    fn t(secs: i64) -> Time {
        Time(jiff::Timestamp::from_second(secs).unwrap())
    }

    fn outcome(before: &str, after: &str, commit: Option<&str>) -> Outcome {
        Outcome {
            latest: LatestImage {
                tag: tag_of(after),
                digest: None,
                pushed_at: None,
                appeared_at: None,
                appeared_from: None,
            },
            write: Some(WriteResult {
                pushed: None,
                file: "apps/d.yaml".into(),
                current_before: before.into(),
                current_after: after.into(),
                desired: after.into(),
                changed_needed: before != after,
                commit: commit.map(str::to_string),
                head: "head0000000000000".into(),
                attempts: 1,
                held: None,
            }),
            paused: None,
            waiting: None,
            refused: None,
            pull_request: None,
            stages: None,
        }
    }

    fn single(o: Outcome) -> Result<Reconciled<Failed>, Failed> {
        Ok(Reconciled::Single(o))
    }

    #[test]
    fn a_hold_is_held_true_and_ready_then_not_held_once_written() {
        let spec = spec();
        let mut held = outcome("r.io/app:v1", "r.io/app:v1", None);
        if let Some(w) = held.write.as_mut() {
            w.desired = "r.io/app:v2".into();
            w.held = Some(crate::held::Hold {
                change: imagewatch_crd::HeldChange {
                    commit: "0123456789abcdef".into(),
                    author: "Jane <jane@example.com>".into(),
                    value: "r.io/app:v1".into(),
                    replaced: "r.io/app:v2".into(),
                },
                mode: imagewatch_crd::OnGitChange::HoldUntilNewer,
            });
        }
        let s = build_status(&spec, None, Some(1), &single(held), None, &t(10));
        let cond = |s: &ImageWatchStatus, type_: &str| {
            s.conditions
                .iter()
                .find(|c| c.type_ == type_)
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        let (status, reason, message) = cond(&s, "Held").unwrap();
        assert_eq!((status.as_str(), reason.as_str()), ("True", "ChangedInGit"));
        assert!(message.contains("0123456789ab") && message.contains("Jane <jane@example.com>"));
        assert_eq!(cond(&s, "Ready").unwrap().1, "ChangedInGit");
        assert_eq!(
            s.held.as_ref().map(|h| h.replaced.as_str()),
            Some("r.io/app:v2")
        );
        // What Git holds is still `applied`.
        assert_eq!(s.applied.as_ref().map(|a| a.tag.as_str()), Some("v1"));

        let written = single(outcome("r.io/app:v1", "r.io/app:v3", Some("feed")));
        let after = build_status(&spec, Some(&s), Some(1), &written, None, &t(20));
        assert_eq!(cond(&after, "Held").unwrap().1, "NotHeld");
        assert_eq!(after.held, None);
        // A watch never held has no `Held` condition.
        let plain = build_status(&spec, None, Some(1), &written, None, &t(20));
        assert!(cond(&plain, "Held").is_none());
    }

    #[test]
    fn a_commit_is_ready_updated_and_stays_so_while_git_is_current() {
        let spec = spec();
        let committed = single(outcome(
            "r.io/app:v1",
            "r.io/app:v2",
            Some("abcdef0123456789"),
        ));
        let s = build_status(&spec, None, Some(2), &committed, None, &t(10));
        let ready = ready_of(Some(&s)).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Updated")
        );
        assert_eq!(
            ready.message,
            "apps/d.yaml: r.io/app:v1 -> r.io/app:v2 (commit abcdef012345)"
        );
        let applied = s.applied.clone().unwrap();
        assert_eq!(applied.tag, "v2");
        assert_eq!(applied.commit.as_deref(), Some("abcdef0123456789"));
        // The commit is the newest change of the history; without an event it was a poll.
        assert_eq!(s.history.len(), 1);
        assert_eq!(
            (
                s.history[0].tag.as_str(),
                s.history[0].commit.as_deref(),
                s.history[0].trigger.as_str()
            ),
            ("v2", Some("abcdef0123456789"), "Poll")
        );
        assert_eq!(s.latest.as_ref().map(|l| l.tag.as_str()), Some("v2"));
        // The next poll finds Git current: nothing to write.
        let current = single(outcome("r.io/app:v2", "r.io/app:v2", None));
        let again = build_status(&spec, Some(&s), Some(2), &current, None, &t(20));
        assert!(!status_changed(Some(&s), &again), "{again:?}");
    }

    #[test]
    fn a_bare_tag_in_git_is_the_applied_tag_and_stays_put_while_current() {
        // A Helm `image.tag` key holds the tag alone.
        let spec = spec();
        let mut o = outcome("v1", "v2", Some("abcdef0123456789"));
        o.latest.tag = "v2".into();
        let s = build_status(&spec, None, Some(2), &single(o), None, &t(10));
        let applied = s.applied.clone().unwrap();
        assert_eq!((applied.tag.as_str(), applied.image), ("v2", None));
        let mut current = outcome("v2", "v2", None);
        current.latest.tag = "v2".into();
        let again = build_status(&spec, Some(&s), Some(2), &single(current), None, &t(20));
        assert!(!status_changed(Some(&s), &again), "{again:?}");
        assert_eq!(super::applied_tag("r.io:5000/app:v3"), "v3");
        assert_eq!(super::applied_tag("v3.1-rc.1"), "v3.1-rc.1");
        assert_eq!(super::applied_tag("r.io/app"), "");
    }

    #[test]
    fn a_failure_is_not_ready_with_its_reason_and_keeps_what_git_held() {
        let spec = spec();
        let committed = single(outcome("r.io/app:v1", "r.io/app:v2", Some("c2")));
        let before = build_status(&spec, None, Some(1), &committed, None, &t(10));
        let failed: Result<Reconciled<Failed>, Failed> =
            Err(Failed("RegistryError", "registry r.io: connection refused"));
        let s = build_status(&spec, Some(&before), Some(1), &failed, None, &t(20));
        let ready = ready_of(Some(&s)).unwrap();
        assert_eq!(
            (
                ready.status.as_str(),
                ready.reason.as_str(),
                ready.message.as_str()
            ),
            (
                "False",
                "RegistryError",
                "registry r.io: connection refused"
            )
        );
        assert_eq!(
            s.applied, before.applied,
            "what Git holds is still reported"
        );
        assert_eq!(s.latest, before.latest);
    }
}
