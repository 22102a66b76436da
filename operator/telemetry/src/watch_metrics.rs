//! The watches' `Ready` conditions as metrics, read from the controller's object cache every
//! few seconds: how many watches stand at each status and reason
//! (`imagewatch_watch_conditions`), how many there are (`imagewatch_watches`), and how long
//! the longest-failing one has been not Ready (`imagewatch_watch_not_ready_seconds_max`, what
//! the chart's `ImageWatchNotReady` alert reads). Sits beside the controller: it only reads
//! the reflector store; [`summarize`] is the pure part.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use imagewatch_crd::{ImageWatch, conditions};
use kube::{core::DeserializeGuard, runtime::reflector::Store};

use crate::{Metrics, WatchConditionLabels};

/// How often the cache is summarised.
const EXPORT_EVERY: Duration = Duration::from_secs(5);

/// Reason label of a watch that has no `Ready` condition yet.
const NO_REASON: &str = "None";
/// Reason label of an object the operator cannot read (it fails to deserialize).
const INVALID_OBJECT: &str = "InvalidObject";
/// Reason label standing in for a reason that is not a plain CamelCase word, so that a
/// status written by someone else cannot make the label set grow without bound.
const OTHER_REASON: &str = "Other";

/// What the metrics say about the watches at one instant.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct WatchSummary {
    /// Every object in the cache, readable or not.
    pub total: usize,
    /// Watches by (`Ready` status, reason).
    pub by_condition: BTreeMap<(String, String), i64>,
    /// The longest time a watch has been not Ready: since its `Ready` condition last changed,
    /// or since its creation when it has no condition yet.
    pub longest_not_ready: Duration,
    /// Since when that watch has been not Ready (what `longest_not_ready` is measured from).
    pub oldest_not_ready: Option<jiff::Timestamp>,
}

/// How long a watch not Ready since `since` has been so at `now` (zero for a time in the
/// future, i.e. clock skew, or when every watch is Ready).
pub fn not_ready_for(since: Option<jiff::Timestamp>, now: jiff::Timestamp) -> Duration {
    since.map_or(Duration::ZERO, |since| {
        now.duration_since(since)
            .try_into()
            .unwrap_or(Duration::ZERO)
    })
}

/// Summarises the watches at `now`. Objects that do not deserialize count as
/// `Unknown`/`InvalidObject`; they have no readable time, so they do not move
/// `longest_not_ready`.
pub fn summarize<'a>(
    watches: impl IntoIterator<Item = Result<&'a ImageWatch, ()>>,
    now: jiff::Timestamp,
) -> WatchSummary {
    // Counted under borrowed labels: a few label pairs, many watches, no allocation per watch.
    let mut counts: HashMap<(&'a str, &'a str), i64> = HashMap::new();
    let mut summary = WatchSummary::default();
    for watch in watches {
        summary.total += 1;
        let Ok(watch) = watch else {
            *counts.entry(("Unknown", INVALID_OBJECT)).or_default() += 1;
            continue;
        };
        let ready = watch
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::READY));
        let (status, reason, since) = match ready {
            Some(c) => (
                match c.status.as_str() {
                    status @ ("True" | "False") => status,
                    _ => "Unknown",
                },
                bounded_reason(&c.reason),
                Some(c.last_transition_time.0),
            ),
            None => (
                "Unknown",
                NO_REASON,
                watch.metadata.creation_timestamp.as_ref().map(|t| t.0),
            ),
        };
        if status != "True"
            && let Some(since) = since
        {
            summary.oldest_not_ready =
                Some(summary.oldest_not_ready.map_or(since, |o| o.min(since)));
        }
        *counts.entry((status, reason)).or_default() += 1;
    }
    summary.longest_not_ready = not_ready_for(summary.oldest_not_ready, now);
    summary.by_condition = counts
        .into_iter()
        .map(|((status, reason), n)| ((status.to_string(), reason.to_string()), n))
        .collect();
    summary
}

/// The reason itself when it is a CamelCase word of at most 64 ASCII letters and digits,
/// else `Other`.
fn bounded_reason(reason: &str) -> &str {
    let plain = !reason.is_empty()
        && reason.len() <= 64
        && reason.starts_with(|c: char| c.is_ascii_uppercase())
        && reason.chars().all(|c| c.is_ascii_alphanumeric());
    if plain {
        reason
    } else if reason.is_empty() {
        NO_REASON
    } else {
        OTHER_REASON
    }
}

/// Exports [`summarize`] of the cache every few seconds until `shutdown`. A (status, reason)
/// pair that no watch holds any more is set to 0 rather than left at its last count.
///
/// `changes` counts the events the cache applied: while it stands still the counts stand
/// still too, and only the time of the longest-failing watch moves on, so the cache is read
/// again only after it changed (not every few seconds over every watch).
pub async fn export(
    metrics: Arc<Metrics>,
    store: Store<DeserializeGuard<ImageWatch>>,
    changes: Arc<AtomicU64>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut exported: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut summarized_at: Option<u64> = None;
    let mut oldest_not_ready = None;
    loop {
        // Read before the cache: a change made while summarizing is summarized next time.
        let seen = changes.load(Ordering::Acquire);
        if summarized_at != Some(seen) {
            summarized_at = Some(seen);
            let state = store.state();
            let summary = summarize(
                state.iter().map(|guard| guard.0.as_ref().map_err(|_| ())),
                jiff::Timestamp::now(),
            );
            oldest_not_ready = summary.oldest_not_ready;
            for count in exported.values_mut() {
                *count = 0;
            }
            exported.extend(summary.by_condition);
            for ((ready, reason), count) in &exported {
                metrics
                    .watch_conditions
                    .get_or_create(&WatchConditionLabels {
                        ready: ready.clone(),
                        reason: reason.clone(),
                    })
                    .set(*count);
            }
            metrics.watches.set(summary.total as i64);
        }
        metrics
            .watch_not_ready_seconds_max
            .set(not_ready_for(oldest_not_ready, jiff::Timestamp::now()).as_secs() as i64);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(EXPORT_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(yaml_status: Option<(&str, &str, &str)>, created: &str) -> ImageWatch {
        let mut value = serde_json::json!({
            "apiVersion": "imagewatch.dev/v1alpha1",
            "kind": "ImageWatch",
            "metadata": {"name": "w", "namespace": "ns", "creationTimestamp": created},
            "spec": {
                "image": "registry.example.com/app",
                "git": {"url": "https://git.example.com/m.git"},
                "target": {"workload": {"path": "apps", "kind": "Deployment", "name": "app",
                                        "container": "app"}}
            }
        });
        if let Some((status, reason, since)) = yaml_status {
            value["status"] = serde_json::json!({"conditions": [{
                "type": "Ready", "status": status, "reason": reason, "message": "",
                "lastTransitionTime": since
            }]});
        }
        serde_json::from_value(value).expect("a valid ImageWatch")
    }

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().expect("a timestamp")
    }

    #[test]
    fn counts_by_status_and_reason_and_finds_the_longest_not_ready() {
        let watches = [
            watch(
                Some(("True", "UpToDate", "2026-01-01T00:00:00Z")),
                "2026-01-01T00:00:00Z",
            ),
            watch(
                Some(("True", "UpToDate", "2026-01-01T00:05:00Z")),
                "2026-01-01T00:00:00Z",
            ),
            watch(
                Some(("False", "GitError", "2026-01-01T00:40:00Z")),
                "2026-01-01T00:00:00Z",
            ),
            watch(
                Some(("False", "RegistryError", "2026-01-01T00:20:00Z")),
                "2026-01-01T00:00:00Z",
            ),
        ];
        let summary = summarize(watches.iter().map(Ok), at("2026-01-01T01:00:00Z"));
        assert_eq!(summary.total, 4);
        assert_eq!(
            summary.by_condition,
            BTreeMap::from([
                (("False".into(), "GitError".into()), 1),
                (("False".into(), "RegistryError".into()), 1),
                (("True".into(), "UpToDate".into()), 2),
            ])
        );
        // RegistryError since 00:20 → 40 minutes; Ready watches do not count.
        assert_eq!(summary.longest_not_ready, Duration::from_secs(40 * 60));
        // Later on, with no watch changed, that time alone moves on.
        assert_eq!(summary.oldest_not_ready, Some(at("2026-01-01T00:20:00Z")));
        assert_eq!(
            not_ready_for(summary.oldest_not_ready, at("2026-01-01T01:10:00Z")),
            Duration::from_secs(50 * 60)
        );
        assert_eq!(
            not_ready_for(None, at("2026-01-01T01:10:00Z")),
            Duration::ZERO
        );
    }

    #[test]
    fn a_watch_without_condition_is_unknown_since_its_creation() {
        let fresh = watch(None, "2026-01-01T00:50:00Z");
        let summary = summarize([Ok(&fresh)], at("2026-01-01T01:00:00Z"));
        assert_eq!(
            summary.by_condition,
            BTreeMap::from([(("Unknown".into(), "None".into()), 1)])
        );
        assert_eq!(summary.longest_not_ready, Duration::from_secs(600));
    }

    #[test]
    fn unreadable_objects_and_odd_reasons_stay_bounded() {
        let odd = watch(
            Some(("False", "not a reason: {secret}", "2026-01-01T00:59:00Z")),
            "2026-01-01T00:00:00Z",
        );
        let summary = summarize([Ok(&odd), Err(())], at("2026-01-01T01:00:00Z"));
        assert_eq!(summary.total, 2);
        assert_eq!(
            summary.by_condition,
            BTreeMap::from([
                (("False".into(), "Other".into()), 1),
                (("Unknown".into(), "InvalidObject".into()), 1),
            ])
        );
        // A transition time in the future (clock skew) counts as zero, not as an error.
        let future = watch(
            Some(("False", "GitError", "2026-01-01T02:00:00Z")),
            "2026-01-01T00:00:00Z",
        );
        let summary = summarize([Ok(&future)], at("2026-01-01T01:00:00Z"));
        assert_eq!(summary.longest_not_ready, Duration::ZERO);
    }
}
