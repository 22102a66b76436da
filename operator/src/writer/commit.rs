//! Write step, planned commits (promotions): a set of whole-file edits with a message,
//! planned by the caller on the freshly fetched head of a branch, committed once and pushed
//! either onto that branch (fast-forward only) or onto a pull-request branch (force-pushed
//! under a lease, and only while it holds nothing but the operator's own commit; rule in
//! `git/branch.rs`). Blocking (libgit2): runs on the blocking pool.
//!
//! A planned commit runs in the same per-(repository, branch) writer task as the ImageWatch
//! intents of `batch.rs`, on the same clone (one per repository and credential), signed with
//! the same key, and retried the same way: a rejected push fetches again and asks the plan
//! again on the new head (edits are idempotent "set X to Y", so re-planning yields exactly
//! what is still needed, or nothing); a rejection on an unmoved head is returned at once.

use std::time::Instant;

use crate::{
    error::ReconcileError,
    git::{FileEdit, GitAuth, GitError, Oid, PushMode, Repo, RepoCache, WritePoint},
};

use super::batch::{self, BatchConfig, Destination};

/// Plans a commit on a fetched head: the edits and the commit message, or `None` when the
/// branch already holds what is wanted. Called again on the new head after a rejected push.
/// Reads go through the [`Repo`] at that head; other failures can be wrapped with
/// [`GitError::apply`].
pub type PlanEdits =
    Box<dyn FnMut(&Repo, Oid) -> crate::git::Result<Option<(Vec<FileEdit>, String)>> + Send>;

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

/// A planned commit's result, with what the metrics need.
pub(super) struct CommitRun {
    pub result: Result<CommitResult, ReconcileError>,
    /// A commit was pushed.
    pub pushed: bool,
    /// Pushes the remote rejected.
    pub rejected: u32,
    /// Category of the git error that failed the write, if one did.
    pub failure: Option<&'static str>,
}

/// Runs one planned commit on the clone of `request.url` in `cache`.
pub(super) fn write_commit(
    cache: &RepoCache,
    mut request: CommitRequest,
    config: &BatchConfig<'_>,
) -> CommitRun {
    let push_branch = request
        .push_branch
        .clone()
        .filter(|p| !p.is_empty() && *p != request.branch);
    let dest = Destination {
        url: &request.url,
        branch: &request.branch,
        push_branch: push_branch.as_deref(),
        auth: &request.auth,
    };
    let fail = |e: GitError, rejected: u32| {
        tracing::warn!(error = %e, "git write failed");
        CommitRun {
            failure: Some(e.category()),
            result: Err(ReconcileError::Git(e)),
            pushed: false,
            rejected,
        }
    };
    let repo = match cache.open_or_clone(dest.url, dest.auth) {
        Ok(repo) => repo,
        Err(e) => return fail(e, 0),
    };
    let fetched_key = (
        dest.url.to_string(),
        dest.branch.to_string(),
        dest.auth.fingerprint(),
    );
    let max_attempts = config.attempts.max(1);
    // Heads (branch, push branch) we last pushed on, and why that push was refused.
    let mut rejected: Option<(Oid, Option<Oid>, GitError)> = None;
    let mut rejections = 0;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let started = Instant::now();
        let (head, tip) = match batch::fetch(&repo, &dest) {
            Ok(heads) => heads,
            Err(e) => {
                config.fetched.forget(&fetched_key);
                return fail(e, rejections);
            }
        };
        config.fetched.put(fetched_key.clone(), started, head);
        (config.hook)(WritePoint::Fetched);
        if let Some((old_head, old_tip, err)) = rejected.take()
            && old_head == head
            && old_tip == tip
        {
            // Nothing moved, so the rejection was not a race (protected branch, hook,
            // permissions): trying again cannot help.
            return fail(err, rejections);
        }
        // Pull-request branch: may we overwrite it?
        let owned = match (dest.push_branch, tip) {
            (Some(push_branch), Some(tip)) => {
                match repo.check_push_branch(push_branch, tip, head, config.author) {
                    Ok(owned) => Some(owned),
                    Err(e) => return fail(e, rejections),
                }
            }
            _ => None,
        };
        let done = |outcome: CommitOutcome| CommitRun {
            result: Ok(CommitResult {
                outcome,
                attempts: attempt,
            }),
            pushed: false,
            rejected: rejections,
            failure: None,
        };
        let unchanged = owned.as_ref().map_or(head, |o| o.tip).to_string();
        let (edits, message) = match (request.plan)(&repo, head) {
            Ok(Some(plan)) => plan,
            Ok(None) => return done(CommitOutcome::NothingToDo { head: unchanged }),
            Err(e) => return fail(e, rejections),
        };
        let target_ref = dest.push_branch.unwrap_or(dest.branch);
        let commit = match repo.commit_edits_signed(
            target_ref,
            head,
            &edits,
            &message,
            config.author,
            config.signer,
        ) {
            Ok(Some(commit)) => commit,
            // The edits add up to the head's own contents.
            Ok(None) => return done(CommitOutcome::NothingToDo { head: unchanged }),
            Err(e) => return fail(e, rejections),
        };
        (config.hook)(WritePoint::Committed);
        if let Some(owned) = &owned
            && owned.base == head
            && batch::same_tree(&repo, commit, owned.tip)
        {
            return done(CommitOutcome::AlreadyPushed {
                head: owned.tip.to_string(),
            });
        }
        (config.hook)(WritePoint::BeforePush);
        let mode = match dest.push_branch {
            None => PushMode::FastForward,
            Some(_) => PushMode::ForceWithLease { expected: tip },
        };
        let on_send = || (config.hook)(WritePoint::Pushing);
        match repo.push_with(target_ref, commit, dest.auth, mode, Some(&on_send)) {
            Ok(_) => {
                // The tracking ref still shows the head before our push: fetch next time.
                config.fetched.forget(&fetched_key);
                (config.hook)(WritePoint::Pushed);
                tracing::info!(
                    url = dest.url,
                    branch = target_ref,
                    %commit,
                    edits = edits.len(),
                    attempt,
                    "committed planned edits"
                );
                return CommitRun {
                    result: Ok(CommitResult {
                        outcome: CommitOutcome::Pushed {
                            commit: commit.to_string(),
                        },
                        attempts: attempt,
                    }),
                    pushed: true,
                    rejected: rejections,
                    failure: None,
                };
            }
            Err(err @ GitError::PushRejected { .. }) if attempt < max_attempts => {
                rejections += 1;
                batch::wait_after_rejection(dest.url, target_ref, attempt, max_attempts, &err);
                rejected = Some((head, tip, err));
            }
            Err(e) => {
                let rejections = rejections + u32::from(matches!(e, GitError::PushRejected { .. }));
                return fail(e, rejections);
            }
        }
    }
}
