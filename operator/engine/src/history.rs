//! `status.history`: the last [`HISTORY_LIMIT`] changes an object wrote to Git, newest
//! first, each with what led to it and how long after the registry push it was committed.

use imagewatch_crd::ChangeRecord;
pub use imagewatch_crd::common::HISTORY_LIMIT;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::stages::{PushStages, Trigger};

/// What one change wrote.
#[derive(Clone, Copy, Debug, Default)]
pub struct Change<'a> {
    /// The tag.
    pub tag: &'a str,
    /// The image it belongs to, when the object writes several.
    pub image: Option<&'a str>,
    /// Its digest, when known.
    pub digest: Option<&'a str>,
    /// The commit.
    pub commit: Option<&'a str>,
    /// The pull request proposing it, by URL.
    pub pull_request: Option<&'a str>,
}

/// The record of `change`, made at `now`; `stages` are those of the registry event that led
/// to it (none: a poll), `trigger` overrides what they say.
#[must_use]
pub fn record(
    change: Change<'_>,
    stages: Option<&PushStages>,
    trigger: Option<Trigger>,
    now: &Time,
) -> ChangeRecord {
    let trigger = trigger
        .or(stages.map(|s| s.trigger))
        .unwrap_or(Trigger::Poll);
    ChangeRecord {
        tag: change.tag.to_owned(),
        image: change.image.map(str::to_owned),
        digest: change.digest.map(str::to_owned),
        commit: change.commit.map(str::to_owned),
        pull_request: change.pull_request.map(str::to_owned),
        time: now.clone(),
        trigger: trigger.as_str().to_owned(),
        // Milliseconds are what a person reads; more digits are noise in a status.
        push_to_commit_seconds: stages
            .and_then(PushStages::push_to_commit)
            .map(|d| (d.as_secs_f64() * 1000.0).round() / 1000.0),
    }
}

/// `previous` with `new` in front (in the order given), without a record that repeats one
/// already there (same image, tag, commit and pull request), at most [`HISTORY_LIMIT`].
#[must_use]
pub fn prepend(previous: &[ChangeRecord], new: Vec<ChangeRecord>) -> Vec<ChangeRecord> {
    let same = |a: &ChangeRecord, b: &ChangeRecord| {
        a.image == b.image
            && a.tag == b.tag
            && a.commit == b.commit
            && a.pull_request == b.pull_request
    };
    let mut out: Vec<ChangeRecord> = Vec::with_capacity(HISTORY_LIMIT);
    for record in new {
        if !previous.iter().chain(out.iter()).any(|p| same(p, &record)) {
            out.push(record);
        }
    }
    out.extend(previous.iter().cloned());
    out.truncate(HISTORY_LIMIT);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn t(secs: i64) -> Time {
        Time(jiff::Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn a_change_from_an_event_carries_its_trigger_and_latency() {
        let at = Instant::now();
        let mut stages = PushStages::new(at, at + Duration::from_millis(2));
        stages.trigger = Trigger::Sqs;
        stages.committed = Some(at + Duration::from_micros(241_400));
        let change = Change {
            tag: "v2",
            commit: Some("abc"),
            ..Change::default()
        };
        let r = record(change, Some(&stages), None, &t(5));
        assert_eq!(r.trigger, "SQS");
        assert_eq!(r.push_to_commit_seconds, Some(0.241));
        let polled = record(change, None, None, &t(5));
        assert_eq!(
            (polled.trigger.as_str(), polled.push_to_commit_seconds),
            ("Poll", None)
        );
        let promoted = record(change, None, Some(Trigger::Promotion), &t(5));
        assert_eq!(promoted.trigger, "Promotion");
    }

    #[test]
    fn history_is_newest_first_bounded_and_never_repeats_a_change() {
        let rec = |tag: &str, commit: &str| {
            record(
                Change {
                    tag,
                    commit: Some(commit),
                    ..Change::default()
                },
                None,
                None,
                &t(1),
            )
        };
        let mut history = Vec::new();
        for i in 0..12 {
            history = prepend(&history, vec![rec(&format!("v{i}"), &format!("c{i}"))]);
        }
        assert_eq!(history.len(), HISTORY_LIMIT);
        assert_eq!(history[0].tag, "v11");
        assert_eq!(history[9].tag, "v2");
        let again = prepend(&history, vec![rec("v11", "c11")]);
        assert_eq!(again, history);
    }
}
