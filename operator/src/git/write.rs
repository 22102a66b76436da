//! The fetch → edit → commit → push loop of the git writer (read current
//! state from Git, commit and push edits).
//!
//! Several writers (other imagewatch objects, CI jobs, people) share a
//! branch. We never force-push and never rebase anyone's commits; instead,
//! when the remote moved under us, we throw our commit away, fetch the new
//! head and let the caller recompute its edits against it. That is correct
//! because edits are idempotent assignments ("set image X to tag Y"), not
//! patches: recomputing on a newer head yields exactly the change still
//! needed, or nothing if someone else already made it.

use std::time::Duration;

use git2::Oid;

use super::auth::GitAuth;
use super::commit::{Author, FileEdit};
use super::error::{GitError, Result};
use super::repo::Repo;

/// Points of a write where a hook may run (see the writer's test hooks):
/// after the fetch, after the commit object was created, right before the
/// push, while the push is under way (remote contacted, ref not yet
/// updated), and after the remote accepted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WritePoint {
    Fetched,
    Committed,
    BeforePush,
    Pushing,
    Pushed,
}

impl WritePoint {
    /// The name used by the `IMAGEWATCH_TEST_CRASH_POINT` hook.
    pub fn name(self) -> &'static str {
        match self {
            WritePoint::Fetched => "after-fetch",
            WritePoint::Committed => "after-commit",
            WritePoint::BeforePush => "before-push",
            WritePoint::Pushing => "mid-push",
            WritePoint::Pushed => "after-push",
        }
    }

    /// Every point, in order.
    pub const ALL: [WritePoint; 5] = [
        WritePoint::Fetched,
        WritePoint::Committed,
        WritePoint::BeforePush,
        WritePoint::Pushing,
        WritePoint::Pushed,
    ];

    /// The point named `name` (see [`WritePoint::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// Result of [`write_with_retry`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// `commit` is now the head of the remote branch; `attempts` counts
    /// fetch/commit/push rounds (1 when nobody raced us).
    Committed { commit: Oid, attempts: u32 },
    /// The branch head already had the desired contents.
    NothingToDo { head: Oid },
}

/// Bring `branch` to the state `apply` asks for, racing other writers
/// safely.
///
/// Each attempt: fetch `branch`, call `apply(repo, head)` (which reads the
/// files it needs at `head` and returns the edits plus a commit message, or
/// `None` when everything is already current), commit on top of `head` as
/// `author`, push without force. When the push is rejected, wait briefly
/// and fetch again: if the branch moved (another writer won the race),
/// start over on the new head, up to `max_attempts` rounds; if it did not
/// move, the rejection is a policy (protected branch, hook) and is returned
/// at once. After `max_attempts` lost races the last rejection is returned.
///
/// `apply` fails with a [`GitError`]: git reads propagate with `?`, and
/// other failures can be wrapped with [`GitError::apply`] (or carried out
/// of the closure by the caller, returning `Ok(None)`).
///
/// Blocking (network and sleeps): call from `spawn_blocking`.
pub fn write_with_retry(
    repo: &Repo,
    branch: &str,
    auth: &GitAuth,
    max_attempts: u32,
    apply: impl FnMut(&Repo, Oid) -> Result<Option<(Vec<FileEdit>, String)>>,
    author: &Author,
) -> Result<WriteOutcome> {
    write_with_retry_signed(repo, branch, auth, max_attempts, apply, author, None)
}

/// [`write_with_retry`], signing each commit with `signer` when given.
pub fn write_with_retry_signed(
    repo: &Repo,
    branch: &str,
    auth: &GitAuth,
    max_attempts: u32,
    mut apply: impl FnMut(&Repo, Oid) -> Result<Option<(Vec<FileEdit>, String)>>,
    author: &Author,
    signer: Option<&super::CommitSigner>,
) -> Result<WriteOutcome> {
    let max_attempts = max_attempts.max(1);
    let mut attempt = 0;
    // Head we last pushed on top of, and why that push was refused.
    let mut rejected: Option<(Oid, GitError)> = None;
    loop {
        attempt += 1;
        let head = repo.fetch(branch, auth)?;
        if let Some((old_head, err)) = rejected.take()
            && old_head == head
        {
            // Nobody moved the branch, so the rejection was not a race
            // (protected branch, hook, permissions): retrying cannot help.
            return Err(err);
        }
        let Some((edits, message)) = apply(repo, head)? else {
            return Ok(WriteOutcome::NothingToDo { head });
        };
        let Some(commit) =
            repo.commit_edits_signed(branch, head, &edits, &message, author, signer)?
        else {
            return Ok(WriteOutcome::NothingToDo { head });
        };
        match repo.push(branch, commit, auth) {
            Ok(_) => {
                return Ok(WriteOutcome::Committed {
                    commit,
                    attempts: attempt,
                });
            }
            Err(err @ GitError::PushRejected { .. }) if attempt < max_attempts => {
                let delay = backoff(attempt);
                tracing::info!(
                    url = %repo.url(),
                    branch,
                    attempt,
                    max_attempts,
                    reason = %err,
                    delay_ms = delay.as_millis() as u64,
                    "push rejected, refetching and retrying"
                );
                rejected = Some((head, err));
                std::thread::sleep(delay);
            }
            Err(e) => return Err(e),
        }
    }
}

/// 100 ms, 200 ms, 400 ms, ... capped at 2 s, plus up to 50 % jitter so
/// that writers racing for the same branch do not retry in lockstep.
pub fn backoff(attempt: u32) -> Duration {
    use backon::{BackoffBuilder as _, ExponentialBuilder};
    let max = Duration::from_secs(2);
    let base = ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(max)
        .with_factor(2.0)
        .without_max_times()
        .build()
        .nth(attempt.saturating_sub(1).min(5) as usize)
        .unwrap_or(max);
    // backon's own jitter adds up to 100 %; the spread here stays within 50 %.
    base + base.mul_f64(fastrand::f64() / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        assert!(backoff(1) >= Duration::from_millis(100));
        assert!(backoff(1) <= Duration::from_millis(150));
        assert!(backoff(3) >= Duration::from_millis(400));
        assert!(backoff(30) <= Duration::from_millis(3_000));
        assert!(backoff(30) >= Duration::from_millis(2_000));
    }
}
