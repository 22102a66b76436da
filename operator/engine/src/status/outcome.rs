//! What a reconcile found and did, as the status step receives it. The operator fills these
//! from its registry, Git and forge calls; the status is built from them alone.
//!
//! The failures are the operator's own error type, seen through [`Failure`]: its condition
//! reason, its message and whether it lasts until something changes.

use std::fmt;

use imagewatch_crd::LatestImage;
use imagewatch_crd::conditions::reason;

use crate::forge::PullRequest;
use crate::refused::Refused;

/// A failure as the status reports it.
pub trait Failure: fmt::Display {
    /// The `Ready` reason (low cardinality).
    fn reason(&self) -> &'static str;
    /// Whether it lasts until the spec or the cluster changes (no retry before the interval).
    fn is_stalled(&self) -> bool;
    /// The tag refused (its signature, a missing platform), when that is the failure.
    fn refused(&self) -> Option<&Refused> {
        None
    }
}

/// What Git holds and what was done, for one intent.
#[derive(Debug, Clone)]
pub struct WriteResult {
    /// File holding the image.
    pub file: String,
    /// Image in Git before this write.
    pub current_before: String,
    /// Image in Git after this write (equals `current_before` when nothing was written).
    pub current_after: String,
    /// Image the watch wants.
    pub desired: String,
    /// Whether Git differs from what the watch wants (only meaningful for a dry run).
    pub changed_needed: bool,
    /// The commit holding this intent's edit, when this write made one (shared by every
    /// intent of the batch).
    pub commit: Option<String>,
    /// Head of the written branch after this write (the push branch in push-branch mode, when
    /// it exists).
    pub head: String,
    /// Fetch/commit/push rounds (1 unless a push was rejected).
    pub attempts: u32,
    /// Git holds a change someone else made, which this write did not overwrite
    /// (`spec.onGitChange`); `changed_needed` is then false.
    pub held: Option<crate::held::Hold>,
    /// When the writer made the commit and when its push went through, when it pushed one.
    pub pushed: Option<(std::time::Instant, std::time::Instant)>,
}

impl WriteResult {
    /// The commit of the written branch that holds the wanted image: the one this write
    /// made, or, when the branch already held it (an earlier reconcile pushed it and failed
    /// before its pull request was recorded), the branch's head.
    #[must_use]
    pub fn holding_commit(&self) -> Option<String> {
        self.commit
            .clone()
            .or_else(|| (self.current_after == self.desired).then(|| self.head.clone()))
    }
}

/// What was done with the pull request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrAction {
    /// Opened a new one.
    Opened,
    /// Changed the open one (title, body; its branch was pushed).
    Updated,
    /// The open one was already right.
    Unchanged,
    /// Closed the open one: `branch` already holds the tag.
    Closed,
    /// `branch` holds the tag and no pull request is open.
    NotNeeded,
}

impl PrAction {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Opened => "opened",
            Self::Updated => "updated",
            Self::Unchanged => "unchanged",
            Self::Closed => "closed",
            Self::NotNeeded => "not_needed",
        }
    }

    /// The Event reason, for actions worth one.
    pub fn event_reason(self) -> Option<&'static str> {
        match self {
            Self::Opened => Some("PullRequestOpened"),
            Self::Updated => Some("PullRequestUpdated"),
            Self::Closed => Some("PullRequestClosed"),
            Self::Unchanged | Self::NotNeeded => None,
        }
    }

    /// The `PullRequestOpen` condition reason.
    pub fn condition_reason(self) -> &'static str {
        match self {
            Self::Opened => reason::OPENED,
            Self::Updated => reason::UPDATED,
            Self::Unchanged => reason::OPEN,
            Self::Closed => reason::CLOSED,
            Self::NotNeeded => reason::UP_TO_DATE,
        }
    }
}

/// The pull request step of one reconcile.
#[derive(Debug, Clone)]
pub struct Delivered {
    /// The pull request acted on (open, or just closed).
    pub pull_request: Option<PullRequest>,
    /// What was done.
    pub action: PrAction,
    /// Tag proposed (or held by `branch`).
    pub tag: String,
    /// Head branch.
    pub branch: String,
    /// Label and auto-merge problems (the pull request stands).
    pub warnings: Vec<String>,
    /// The push branch's commit proposing the tag: pushed by this reconcile, or by an
    /// earlier one that failed before the pull request was recorded.
    pub commit: Option<String>,
}

/// What a successful reconcile of a watch of one repository found and did.
#[derive(Debug)]
pub struct Outcome {
    /// The tag chosen.
    pub latest: LatestImage,
    /// The writer's answer (none when nothing was handed to it).
    pub write: Option<WriteResult>,
    /// Why the write was a dry run (`spec.suspend`, `spec.windows`, a freeze), if it was.
    pub paused: Option<crate::windows::Pause>,
    /// Group members still missing a newer tag (`WaitingForGroup`).
    pub waiting: Option<String>,
    /// With `spec.verify` or `spec.tags.platforms`: the newest better tag refused.
    pub refused: Option<Box<Refused>>,
    /// With `spec.git.pullRequest`: what was done with the pull request.
    pub pull_request: Option<Delivered>,
    /// A commit a registry event led to: where the push's time went so far (the status
    /// write is the last stage).
    pub stages: Option<crate::stages::PushStages>,
}

/// What one reconcile found and did for one member of a pattern watch.
#[derive(Debug)]
pub struct MemberResult<E> {
    /// Repository path inside the registry.
    pub repository: String,
    /// What the `*`s matched.
    pub captures: Vec<String>,
    /// The tag chosen for it, when one was.
    pub latest: Option<String>,
    /// With `spec.verify` or `spec.tags.platforms`: the newest better tag of this member
    /// refused, while an older one that qualifies is written.
    pub refused: Option<Refused>,
    /// The writer's answer, or why the member could not get that far.
    pub outcome: Result<WriteResult, E>,
    /// With `spec.git.pullRequest` per member: what was done with its pull request.
    pub pull_request: Option<Delivered>,
    /// A commit a registry event led to: the event's stages.
    pub stages: Option<crate::stages::PushStages>,
}

/// What one reconcile of a pattern watch found and did.
#[derive(Debug)]
pub struct PatternOutcome<E> {
    /// `spec.image`.
    pub image: String,
    /// Repositories the registry listed.
    pub listed: usize,
    /// One result per matching repository, sorted by repository.
    pub members: Vec<MemberResult<E>>,
    /// Why every write was a dry run (`spec.suspend`, `spec.windows`, a freeze), if it was.
    pub paused: Option<crate::windows::Pause>,
    /// With `spec.git.pullRequest` and `perMember: false`: the one pull request for all.
    pub pull_request: Option<Delivered>,
}

impl<E: Failure> PatternOutcome<E> {
    /// Whether a member failed for a reason that may pass by itself (registry, Git), so the
    /// watch should be retried before its interval.
    pub fn has_transient_failure(&self) -> bool {
        self.members
            .iter()
            .any(|m| m.outcome.as_ref().is_err_and(|e| !e.is_stalled()))
    }
}

impl<E> PatternOutcome<E> {
    /// Members whose write made a commit.
    pub fn committed(&self) -> impl Iterator<Item = (&MemberResult<E>, &WriteResult)> {
        self.members.iter().filter_map(|m| match &m.outcome {
            Ok(w) if w.commit.is_some() => Some((m, w)),
            _ => None,
        })
    }
}

/// What a successful reconcile found and did.
// One value per reconcile, moved once into the status: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Reconciled<E> {
    /// A watch of one repository.
    Single(Outcome),
    /// A pattern watch: one result per matching repository.
    Pattern(PatternOutcome<E>),
}

impl<E> Reconciled<E> {
    /// The `outcome` label of `imagewatch_reconciles_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Reconciled::Single(_) => "ok",
            Reconciled::Pattern(p) if p.members.is_empty() => "no_matching_repositories",
            Reconciled::Pattern(p) if p.members.iter().any(|m| m.outcome.is_err()) => {
                "members_not_ready"
            }
            Reconciled::Pattern(_) => "ok",
        }
    }

    /// Why nothing was written (suspended, outside the windows, frozen), if so.
    pub fn pause(&self) -> Option<&crate::windows::Pause> {
        match self {
            Reconciled::Single(o) => o.paused.as_ref(),
            Reconciled::Pattern(p) => p.paused.as_ref(),
        }
    }

    /// How long until a closed window opens, when that is sooner than `interval`: the
    /// watch is looked at again then, not at its next poll.
    pub fn requeue_within(
        &self,
        interval: std::time::Duration,
        now: jiff::Timestamp,
    ) -> std::time::Duration {
        let opens = self.pause().and_then(|p| p.opens());
        match opens.and_then(|at| std::time::Duration::try_from(now.duration_until(at)).ok()) {
            // One second past the opening: the window is open by then on every clock.
            Some(left) => (left + std::time::Duration::from_secs(1)).min(interval),
            None => interval,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::WriteResult;

    fn write(before: &str, after: &str, commit: Option<&str>) -> WriteResult {
        WriteResult {
            file: "d.yaml".into(),
            current_before: before.into(),
            current_after: after.into(),
            desired: "r/api:v2".into(),
            changed_needed: false,
            commit: commit.map(str::to_owned),
            head: "head".into(),
            attempts: 1,
            held: None,
            pushed: None,
        }
    }

    #[test]
    fn the_commit_holding_the_image_is_this_writes_or_the_head_already_holding_it() {
        assert_eq!(
            write("r/api:v1", "r/api:v2", Some("c2")).holding_commit(),
            Some("c2".into())
        );
        // Pushed by an earlier reconcile that failed before its pull request was recorded.
        assert_eq!(
            write("r/api:v2", "r/api:v2", None).holding_commit(),
            Some("head".into())
        );
        // Held back (a person's change): the head does not hold the wanted image.
        assert_eq!(write("r/api:v1", "r/api:v1", None).holding_commit(), None);
    }
}
