//! The building of status (pure): what a reconcile found and did ([`outcome`]) becomes the
//! status it leaves — an ImageWatch's ([`build_status`], with its pattern members in
//! [`members`]) and a PromotionPolicy's ([`promotion::build_status`]).
//!
//! This file holds the conditions: merging a new condition into a status keeps
//! `lastTransitionTime` stable when its status does not change, and [`status_changed`] says
//! whether a status write is needed at all.

mod held;
pub mod members;
pub mod outcome;
pub mod promotion;
mod pull_request;
mod watch;

pub use outcome::{
    Delivered, Failure, MemberResult, Outcome, PatternOutcome, PrAction, Reconciled, WriteResult,
};
pub use pull_request::status_of;
pub use watch::build_status;

use imagewatch_crd::ImageWatchStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Merges `new` into `existing` by type. The transition time of `new` is replaced by the
/// existing one when the status (True/False/Unknown) is unchanged, so `lastTransitionTime`
/// only moves on real transitions.
pub fn merge_condition(existing: &[Condition], mut new: Condition) -> Vec<Condition> {
    let mut out: Vec<Condition> = existing
        .iter()
        .filter(|c| c.type_ != new.type_)
        .cloned()
        .collect();
    if let Some(old) = existing.iter().find(|c| c.type_ == new.type_)
        && old.status == new.status
    {
        new.last_transition_time = old.last_transition_time.clone();
    }
    out.push(new);
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}

/// A `Ready` condition.
pub fn ready_condition(
    ready: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    Condition {
        type_: imagewatch_crd::conditions::READY.to_string(),
        status: if ready { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message: truncate(message, 1024),
        observed_generation: generation,
        last_transition_time: now.clone(),
    }
}

/// The `Ready` condition of a status, if present.
pub fn ready_of(status: Option<&ImageWatchStatus>) -> Option<&Condition> {
    status.and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == imagewatch_crd::conditions::READY)
    })
}

/// The `Held` condition of a status, if present.
pub fn held_of(status: &ImageWatchStatus) -> Option<&Condition> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == imagewatch_crd::conditions::HELD)
}

/// Whether two statuses differ in anything but timestamps that only move when something
/// else changes. Used to skip a status patch when nothing changed.
pub fn status_changed(old: Option<&ImageWatchStatus>, new: &ImageWatchStatus) -> bool {
    match old {
        None => true,
        Some(old) => {
            // `applied.at` is refreshed only together with a new commit or tag, so plain
            // equality is the right test.
            old != new
        }
    }
}

pub use crate::values::{applied_tag, is_bare_tag, short, tag_of};

/// `text`, cut at `max` bytes on a character boundary (with an ellipsis when cut).
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Time {
        Time(jiff::Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn transition_time_is_kept_when_status_is_unchanged() {
        let first = vec![ready_condition(true, "UpToDate", "a", Some(1), &t(100))];
        let merged = merge_condition(
            &first,
            ready_condition(true, "Updated", "b", Some(2), &t(200)),
        );
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].last_transition_time, t(100));
        assert_eq!(merged[0].reason, "Updated");
    }

    #[test]
    fn transition_time_moves_when_status_flips() {
        let first = vec![ready_condition(true, "UpToDate", "a", Some(1), &t(100))];
        let merged = merge_condition(
            &first,
            ready_condition(false, "RegistryError", "b", Some(1), &t(200)),
        );
        assert_eq!(merged[0].last_transition_time, t(200));
        assert_eq!(merged[0].status, "False");
    }

    #[test]
    fn other_condition_types_are_kept() {
        let mut other = ready_condition(true, "X", "y", None, &t(1));
        other.type_ = "Other".into();
        let merged = merge_condition(
            &[other.clone()],
            ready_condition(true, "UpToDate", "", None, &t(5)),
        );
        assert_eq!(merged.len(), 2);
        assert!(merged.contains(&other));
    }

    #[test]
    fn identical_status_is_not_a_change() {
        let s = ImageWatchStatus {
            observed_generation: Some(1),
            conditions: vec![ready_condition(true, "UpToDate", "m", Some(1), &t(1))],
            ..Default::default()
        };
        assert!(!status_changed(Some(&s), &s.clone()));
        assert!(status_changed(None, &s));
    }

    #[test]
    fn long_messages_are_truncated_on_a_char_boundary() {
        let msg = "é".repeat(2000);
        let c = ready_condition(false, "R", &msg, None, &t(1));
        assert!(c.message.len() <= 1024 + '…'.len_utf8());
    }
}
