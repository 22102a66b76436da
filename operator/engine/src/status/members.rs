//! The status of a pattern watch (pure): one `status.members` entry per matching repository,
//! the counts, and the `Ready` condition aggregated over every member.

use std::collections::HashMap;

use imagewatch_crd::{ImageWatchStatus, conditions::reason, imagewatch::MemberStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::outcome::{Failure, MemberResult, PatternOutcome, WriteResult};
use super::{self as conditions, applied_tag, short};
use crate::windows::Pause;

/// Members listed in `status.members` (sorted by repository); `memberCount` has the total.
pub const MAX_LISTED_MEMBERS: usize = 200;

/// Members named in the `Ready` message when some are not ready.
const NAMED_IN_MESSAGE: usize = 3;

/// The note of the `Updated` Event of a reconcile that committed for some members: the
/// commit and the first members' changes. `None` when nothing was committed.
pub fn updated_note<E>(outcome: &PatternOutcome<E>) -> Option<String> {
    let committed: Vec<(&MemberResult<E>, &WriteResult)> = outcome.committed().collect();
    let (_, first) = committed.first()?;
    let mut parts: Vec<String> = committed
        .iter()
        .take(NAMED_IN_MESSAGE)
        .map(|(_, w)| format!("{}: {} -> {}", w.file, w.current_before, w.current_after))
        .collect();
    if committed.len() > NAMED_IN_MESSAGE {
        parts.push(format!("and {} more", committed.len() - NAMED_IN_MESSAGE));
    }
    Some(format!(
        "{} {} updated (commit {}): {}",
        committed.len(),
        if committed.len() == 1 {
            "member"
        } else {
            "members"
        },
        short(first.commit.as_deref().unwrap_or_default()),
        parts.join("; ")
    ))
}

/// The tag of an image reference (empty when it has none).
pub use super::tag_of;

/// Every member's status (all of them, sorted by repository), from this reconcile's results
/// and the previous statuses (which keep `commit` stable while Git does not change, and say
/// what Git held when a member cannot be read now).
pub fn member_statuses<E: Failure>(
    previous: &[MemberStatus],
    outcome: &PatternOutcome<E>,
) -> Vec<MemberStatus> {
    let before: HashMap<&str, &MemberStatus> = previous
        .iter()
        .map(|m| (m.repository.as_str(), m))
        .collect();
    let mut out: Vec<MemberStatus> = outcome
        .members
        .iter()
        .map(|m| {
            member_status(
                before.get(m.repository.as_str()).copied(),
                m,
                outcome.paused.as_ref(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.repository.cmp(&b.repository));
    out
}

fn member_status<E: Failure>(
    previous: Option<&MemberStatus>,
    member: &MemberResult<E>,
    paused: Option<&Pause>,
) -> MemberStatus {
    let base = MemberStatus {
        repository: member.repository.clone(),
        captures: member.captures.clone(),
        latest: member.latest.clone(),
        applied: previous.and_then(|p| p.applied.clone()),
        commit: previous.and_then(|p| p.commit.clone()),
        file: previous.and_then(|p| p.file.clone()),
        ready: false,
        reason: String::new(),
        message: None,
        pull_request: match &member.pull_request {
            Some(d) => super::status_of(d, previous.and_then(|p| p.pull_request.as_ref())),
            None => previous.and_then(|p| p.pull_request.clone()),
        },
        held: previous.and_then(|p| p.held.clone()),
    };
    let write = match &member.outcome {
        Ok(write) => write,
        Err(e) => {
            return MemberStatus {
                reason: e.reason().to_string(),
                message: Some(e.to_string()),
                ..base
            };
        }
    };
    let applied = applied_tag(&write.current_after);
    let same_as_before = previous.is_some_and(|p| p.applied.as_deref() == Some(applied.as_str()));
    let commit = match &write.commit {
        Some(commit) => commit.clone(),
        None => previous
            .filter(|_| same_as_before)
            .and_then(|p| p.commit.clone())
            .unwrap_or_else(|| write.head.clone()),
    };
    let mut status = MemberStatus {
        applied: Some(applied),
        commit: Some(commit),
        file: Some(write.file.clone()),
        held: write.held.as_ref().map(|h| h.change.clone()),
        ..base
    };
    if let Some(hold) = &write.held {
        // Git holds what someone else chose, on purpose: up to date with that choice.
        status.ready = true;
        status.reason = reason::CHANGED_IN_GIT.to_string();
        status.message = Some(format!("{}: {}", write.file, hold.message()));
        return status;
    }
    if let Some(pause) = paused.filter(|p| p.shows(write.changed_needed)) {
        status.ready = !write.changed_needed;
        status.reason = pause.reason().to_string();
        status.message = Some(if write.changed_needed {
            format!(
                "{}: {} holds {}, the rules choose {} (not written)",
                pause.label(),
                write.file,
                write.current_before,
                write.desired
            )
        } else {
            format!(
                "{}: {} holds {}",
                pause.label(),
                write.file,
                write.current_after
            )
        });
        return status;
    }
    if let Some(refused) = &member.refused {
        // Written what verifies, but a newer tag is held back: not ready, and says why.
        let done = match &write.commit {
            Some(commit) => format!(
                "{}: {} -> {} (commit {}), the newest verified tag",
                write.file,
                write.current_before,
                write.current_after,
                short(commit)
            ),
            None => format!(
                "{} holds {}, the newest verified tag",
                write.file, write.current_after
            ),
        };
        status.reason = refused.reason().to_string();
        status.message = Some(format!("{done}; refused newer {}", refused.message()));
        return status;
    }
    status.ready = true;
    if let Some(commit) = &write.commit {
        status.reason = reason::UPDATED.to_string();
        status.message = Some(format!(
            "{}: {} -> {} (commit {})",
            write.file,
            write.current_before,
            write.current_after,
            short(commit)
        ));
    } else if let Some(p) =
        previous.filter(|p| same_as_before && p.ready && p.reason == reason::UPDATED)
    {
        // Just updated and now simply current: keep saying what the update was, so a poll
        // does not rewrite the status.
        status.reason = p.reason.clone();
        status.message = p.message.clone();
    } else {
        status.reason = reason::UP_TO_DATE.to_string();
        status.message = Some(format!("{} holds {}", write.file, write.current_after));
    }
    status
}

/// The aggregated `Ready` verdict over every member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// `Ready` status.
    pub ready: bool,
    /// `Ready` reason.
    pub reason: &'static str,
    /// `Ready` message.
    pub message: String,
}

/// `True` when every member is up to date (`Updated` if some member's last write is what the
/// members report, else `UpToDate`); `False` with `MembersNotReady` naming the first members
/// that are not, `Suspended`, or `NoMatchingRepositories`.
pub fn verdict<E>(members: &[MemberStatus], outcome: &PatternOutcome<E>) -> Verdict {
    let total = members.len();
    if total == 0 {
        return Verdict {
            ready: false,
            reason: reason::NO_MATCHING_REPOSITORIES,
            message: format!(
                "no repository matches {} ({} listed in the registry)",
                outcome.image, outcome.listed
            ),
        };
    }
    let plural = |n: usize| if n == 1 { "member" } else { "members" };
    let not_ready: Vec<&MemberStatus> = members.iter().filter(|m| !m.ready).collect();
    let named = |list: &[&MemberStatus]| -> String {
        let mut parts: Vec<String> = list
            .iter()
            .take(NAMED_IN_MESSAGE)
            .map(|m| {
                format!(
                    "{}: {}: {}",
                    m.repository,
                    m.reason,
                    m.message.as_deref().unwrap_or("")
                )
            })
            .collect();
        if list.len() > NAMED_IN_MESSAGE {
            parts.push(format!("and {} more", list.len() - NAMED_IN_MESSAGE));
        }
        parts.join("; ")
    };
    if let Some(pause) = outcome.paused.as_ref().filter(|p| {
        p.shows(
            outcome
                .members
                .iter()
                .any(|m| m.outcome.as_ref().is_ok_and(|w| w.changed_needed)),
        )
    }) {
        let message = if not_ready.is_empty() {
            format!(
                "{}: nothing is written; {total} {} up to date",
                pause.label(),
                plural(total)
            )
        } else {
            format!(
                "{}: {} of {total} {} not up to date: {}",
                pause.label(),
                not_ready.len(),
                plural(total),
                named(&not_ready)
            )
        };
        return Verdict {
            ready: false,
            reason: pause.reason(),
            message,
        };
    }
    if !not_ready.is_empty() {
        return Verdict {
            ready: false,
            reason: reason::MEMBERS_NOT_READY,
            message: format!(
                "{} of {total} {} not ready: {}",
                not_ready.len(),
                plural(total),
                named(&not_ready)
            ),
        };
    }
    let updated: Vec<&MemberStatus> = members
        .iter()
        .filter(|m| m.reason == reason::UPDATED)
        .collect();
    if updated.is_empty() {
        return Verdict {
            ready: true,
            reason: reason::UP_TO_DATE,
            message: format!("{total} {} up to date", plural(total)),
        };
    }
    let mut parts: Vec<String> = updated
        .iter()
        .take(NAMED_IN_MESSAGE)
        .map(|m| {
            format!(
                "{} {} (commit {})",
                m.repository,
                m.applied.as_deref().unwrap_or(""),
                short(m.commit.as_deref().unwrap_or(""))
            )
        })
        .collect();
    if updated.len() > NAMED_IN_MESSAGE {
        parts.push(format!("and {} more", updated.len() - NAMED_IN_MESSAGE));
    }
    Verdict {
        ready: true,
        reason: reason::UPDATED,
        message: format!(
            "{} of {total} {} updated: {}",
            updated.len(),
            plural(total),
            parts.join(", ")
        ),
    }
}

/// The status a pattern watch's reconcile should leave: members (the first
/// [`MAX_LISTED_MEMBERS`]), counts and the aggregated `Ready` condition. Pure.
pub fn pattern_status<E: Failure>(
    previous: &ImageWatchStatus,
    outcome: &PatternOutcome<E>,
    generation: Option<i64>,
    now: &Time,
) -> ImageWatchStatus {
    let members = member_statuses(&previous.members, outcome);
    let verdict = verdict(&members, outcome);
    let ready_count = members.iter().filter(|m| m.ready).count();
    let condition: Condition = conditions::ready_condition(
        verdict.ready,
        verdict.reason,
        &verdict.message,
        generation,
        now,
    );
    let total = members.len();
    let mut listed = members;
    listed.truncate(MAX_LISTED_MEMBERS);
    ImageWatchStatus {
        observed_generation: generation,
        // A pattern has no single latest or applied tag; its members have them.
        latest: None,
        applied: None,
        member_count: Some(i64::try_from(total).unwrap_or(i64::MAX)),
        members_ready: Some(i64::try_from(ready_count).unwrap_or(i64::MAX)),
        members: listed,
        refused: None,
        refused_tags: Vec::new(),
        failure_notified: previous.failure_notified.clone(),
        history: crate::history::prepend(
            &previous.history,
            outcome
                .committed()
                .map(|(m, w)| {
                    let pull_request = m
                        .pull_request
                        .as_ref()
                        .or(outcome.pull_request.as_ref())
                        .and_then(|d| d.pull_request.as_ref())
                        .map(|p| p.url.as_str());
                    let tag = m
                        .latest
                        .clone()
                        .unwrap_or_else(|| super::applied_tag(&w.current_after));
                    let change = crate::history::Change {
                        tag: &tag,
                        image: Some(&m.repository),
                        digest: None,
                        commit: w.commit.as_deref(),
                        pull_request,
                    };
                    crate::history::record(change, m.stages.as_ref(), None, now)
                })
                .collect(),
        ),
        pull_request: match &outcome.pull_request {
            Some(d) => super::status_of(d, previous.pull_request.as_ref()),
            None => previous.pull_request.clone(),
        },
        held: None,
        last_handled_requested_at: previous.last_handled_requested_at.clone(),
        conditions: super::held::held_condition(
            conditions::merge_condition(&previous.conditions, condition),
            outcome.members.iter().find_map(|m| match &m.outcome {
                Ok(w) => w.held.as_ref().map(|h| (m.repository.as_str(), h)),
                Err(_) => None,
            }),
            generation,
            now,
        ),
    }
}

#[cfg(test)]
mod tests;
