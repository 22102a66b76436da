//! Where a push's time goes: the instants one registry event passes on its way to Git and to
//! the watch's status, and the time spent between each and the one before.
//!
//! A push is *received* (the router takes its event), *routed* (the watches whose rules
//! admit its tag are woken), *listed* (a reconcile of one of them has the registry's tags),
//! *selected* (the tag is chosen), *committed* and *pushed* (by the git writer), and its
//! *status written*. [`PushStages::durations`] gives each stage the time from the stage
//! before it, so the stages of one push add up to its received → status written time; a stage
//! not reached (a watch that found nothing to write) is left out, and so is one out of order.
//! The operator observes these in `imagewatch_push_stage_seconds{stage}`.

use std::time::{Duration, Instant};

/// The stage labels, in order (each names the instant reached; its time runs from the one
/// before it).
pub const STAGES: [&str; 6] = [
    "routed",
    "listed",
    "selected",
    "committed",
    "pushed",
    "status_written",
];

/// What led a reconcile to a change: how its registry event arrived, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Trigger {
    /// A registry's notification to the webhook.
    #[default]
    Webhook,
    /// An ECR event through EventBridge and SQS.
    Sqs,
    /// An event another replica received and passed on.
    Peer,
    /// No event: the interval, a re-check, a change of the object.
    Poll,
    /// A PromotionPolicy's gates passed.
    Promotion,
}

impl Trigger {
    /// The trigger of an event from `source` (the event's source label).
    #[must_use]
    pub fn of_source(source: &str) -> Self {
        match source {
            "sqs" => Self::Sqs,
            "peer" => Self::Peer,
            _ => Self::Webhook,
        }
    }

    /// As `status.history[].trigger` gives it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Webhook => "Webhook",
            Self::Sqs => "SQS",
            Self::Peer => "Peer",
            Self::Poll => "Poll",
            Self::Promotion => "Promotion",
        }
    }
}

/// The instants of one push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushStages {
    /// How the event arrived.
    pub trigger: Trigger,
    /// The router took the event.
    pub received: Instant,
    /// The watches were woken.
    pub routed: Instant,
    /// A reconcile had the repository's tags.
    pub listed: Option<Instant>,
    /// The tag was chosen.
    pub selected: Option<Instant>,
    /// The writer committed it.
    pub committed: Option<Instant>,
    /// The writer pushed the commit.
    pub pushed: Option<Instant>,
}

impl PushStages {
    /// A push received at `received` and routed at `routed`.
    #[must_use]
    pub fn new(received: Instant, routed: Instant) -> Self {
        Self {
            trigger: Trigger::Webhook,
            received,
            routed,
            listed: None,
            selected: None,
            committed: None,
            pushed: None,
        }
    }

    /// From the event to the commit, when it was committed.
    #[must_use]
    pub fn push_to_commit(&self) -> Option<Duration> {
        self.committed
            .and_then(|at| at.checked_duration_since(self.received))
    }

    /// Each reached stage with the time since the stage reached before it, in order, ending
    /// with `status_written` when given. An instant earlier than the one before it (a stage
    /// recorded by another watch's reconcile) is left out.
    #[must_use]
    pub fn durations(&self, status_written: Option<Instant>) -> Vec<(&'static str, Duration)> {
        let instants = [
            Some(self.routed),
            self.listed,
            self.selected,
            self.committed,
            self.pushed,
            status_written,
        ];
        let mut out = Vec::new();
        let mut before = self.received;
        for (stage, at) in STAGES.iter().zip(instants) {
            let Some(at) = at else { continue };
            let Some(spent) = at.checked_duration_since(before) else {
                continue;
            };
            out.push((*stage, spent));
            before = at;
        }
        out
    }

    /// From the event to the push (the push → commit latency), when it was pushed.
    #[must_use]
    pub fn to_pushed(&self) -> Option<Duration> {
        self.pushed
            .and_then(|at| at.checked_duration_since(self.received))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_stages_of_a_push_add_up_to_its_whole_time() {
        let t = Instant::now();
        let stages = PushStages {
            trigger: Trigger::Webhook,
            received: t,
            routed: t + ms(1),
            listed: Some(t + ms(21)),
            selected: Some(t + ms(22)),
            committed: Some(t + ms(60)),
            pushed: Some(t + ms(160)),
        };
        let got = stages.durations(Some(t + ms(175)));
        assert_eq!(
            got,
            vec![
                ("routed", ms(1)),
                ("listed", ms(20)),
                ("selected", ms(1)),
                ("committed", ms(38)),
                ("pushed", ms(100)),
                ("status_written", ms(15)),
            ]
        );
        assert_eq!(got.iter().map(|(_, d)| *d).sum::<Duration>(), ms(175));
        assert_eq!(stages.to_pushed(), Some(ms(160)));
    }

    #[test]
    fn stages_not_reached_or_out_of_order_are_left_out() {
        let t = Instant::now();
        let mut stages = PushStages::new(t, t + ms(2));
        // Nothing listed or selected by this reconcile (another watch's scan served it).
        stages.committed = Some(t + ms(40));
        stages.pushed = Some(t + ms(90));
        assert_eq!(
            stages.durations(None),
            vec![("routed", ms(2)), ("committed", ms(38)), ("pushed", ms(50))]
        );
        // A listing before the event (a scan already under way) counts for nothing.
        let mut early = PushStages::new(t + ms(10), t + ms(11));
        early.listed = Some(t);
        early.selected = Some(t + ms(12));
        assert_eq!(
            early.durations(None),
            vec![("routed", ms(1)), ("selected", ms(1))]
        );
        assert_eq!(early.to_pushed(), None);
    }
}
