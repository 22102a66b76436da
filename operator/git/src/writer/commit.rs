//! Write step, planned commits (promotions): a set of whole-file edits with a message,
//! planned by the caller on the freshly fetched head of a branch, committed once and pushed
//! either onto that branch (fast-forward only) or onto a pull-request branch (force-pushed
//! under a lease, and only while it holds nothing but the operator's own commit; rule in
//! `branch.rs`). Blocking (libgit2): runs on the blocking pool.
//!
//! A planned commit runs in the same per-(repository, branch) writer task as the ImageWatch
//! intents of `batch.rs`, on the same clone (one per repository and credential), signed with
//! the same key, and retried the same way: a rejected push fetches again and asks the plan
//! again on the new head (edits are idempotent "set X to Y", so re-planning yields exactly
//! what is still needed, or nothing); a rejection on an unmoved head is returned at once.

use crate::{FileEdit, GitAuth, Oid, OwnedPushBranch, Repo, RepoCache};

use super::WriteError;
use super::commit_loop::{self, Destination, Ending, Plan, Planned, Reuse, Run, WriteConfig};

/// Plans a commit on a fetched head: the edits and the commit message, or `None` when the
/// branch already holds what is wanted. Called again on the new head after a rejected push.
/// Reads go through the [`Repo`] at that head; other failures can be wrapped with
/// [`GitError::apply`].
pub type PlanEdits =
    Box<dyn FnMut(&Repo, Oid) -> crate::Result<Option<(Vec<FileEdit>, String)>> + Send>;

/// A planned commit (a promotion's): where it goes and how its edits are planned.
pub struct CommitRequest {
    /// Repository URL.
    pub url: String,
    /// Branch: the base of the commit (and, without `push_branch`, where it is pushed).
    pub branch: String,
    /// Credentials.
    pub auth: GitAuth,
    /// Pull-request branch: commit on `branch`'s head and force-push here (with a lease on
    /// the tip inspected) instead of fast-forwarding `branch`. Refused when it holds commits
    /// we did not make.
    pub push_branch: Option<String>,
    /// The edits and message, planned on the fetched head.
    pub plan: PlanEdits,
}

impl std::fmt::Debug for CommitRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitRequest")
            .field("url", &self.url)
            .field("branch", &self.branch)
            .field("push_branch", &self.push_branch)
            .finish_non_exhaustive()
    }
}

/// What a planned commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// `commit` was pushed: it is now the head of the branch (or pull-request branch).
    Pushed {
        /// The commit.
        commit: String,
    },
    /// The pull-request branch already holds exactly these edits on this head (`head` is its
    /// tip): nothing pushed, no second commit.
    AlreadyPushed {
        /// Tip of the pull-request branch.
        head: String,
    },
    /// The plan found nothing to change on the fetched head (`head`: the branch head, or
    /// the pull-request branch's tip when it exists).
    NothingToDo {
        /// The head read.
        head: String,
    },
}

/// The answer to a [`CommitRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitResult {
    /// What was done.
    pub outcome: CommitOutcome,
    /// Fetch/commit/push rounds (1 unless a push was rejected).
    pub attempts: u32,
}

/// A planned commit's plan (and any closure of its shape) is a [`Plan`] of the loop.
impl<F> Plan for F
where
    F: FnMut(&Repo, Oid) -> crate::Result<Option<(Vec<FileEdit>, String)>>,
{
    fn plan(
        &mut self,
        repo: &Repo,
        head: Oid,
        _owned: Option<&OwnedPushBranch>,
    ) -> crate::Result<Option<Planned>> {
        Ok(self(repo, head)?.map(|(edits, message)| Planned { edits, message }))
    }
}

/// Runs one planned commit on the clone of `request.url` in `cache`: its result, and the
/// loop's run for the metrics.
pub(super) fn write_commit(
    cache: &RepoCache,
    mut request: CommitRequest,
    config: &WriteConfig<'_>,
) -> (Result<CommitResult, WriteError>, Run) {
    let dest = Destination::new(
        &request.url,
        &request.branch,
        request.push_branch.as_deref(),
        &request.auth,
    );
    let run = commit_loop::write(cache, &dest, Reuse::Never, config, &mut request.plan);
    let outcome = match &run.ending {
        Ending::Unchanged { head } => CommitOutcome::NothingToDo {
            head: head.to_string(),
        },
        Ending::AlreadyPushed { tip } => CommitOutcome::AlreadyPushed {
            head: tip.to_string(),
        },
        Ending::Pushed { commit, .. } => CommitOutcome::Pushed {
            commit: commit.to_string(),
        },
        Ending::NotPlanned(e) | Ending::NotPushed { error: e, .. } => {
            return (Err(WriteError::Git(e.duplicate())), run);
        }
    };
    let result = CommitResult {
        outcome,
        attempts: run.attempts,
    };
    (Ok(result), run)
}
