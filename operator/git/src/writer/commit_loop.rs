//! The writer's one fetch → plan → commit → push → retry loop. Blocking (libgit2): runs on
//! the blocking pool. A batch of intents (`batch.rs`) and a planned commit (`commit.rs`) are
//! two [`Plan`]s over this loop; nothing else in the operator commits or pushes.
//!
//! Each attempt: read the head (a fresh fetch, or a head this process read or pushed moments
//! ago, see below); in push-branch mode, check that the push branch holds nothing but our own
//! commit (rule in `branch.rs`); ask the plan for the edits and message on that head;
//! commit them once (signed when a signer is set); push. A rejected push (another writer moved
//! the branch) starts over on the new head after a backoff: edits are idempotent "set X to
//! Y", so planning again yields exactly what is still needed, or nothing. A rejection on a
//! head that did not move (protected branch, hook, permissions) is returned at once. A commit
//! is only created on a head the remote showed us, so a process killed at any point leaves
//! either nothing or a complete commit on the remote, and the next run plans again from
//! whatever the remote holds: no duplicate, nothing lost.
//!
//! Reading without fetching ([`Reuse::Recent`], plain mode only): the loop may first plan on
//! the head fetched by an earlier write when that fetch is still in [`WriteConfig::fetched`]
//! (`--git-read-reuse`); when that plan finds nothing to change (the steady state) the write
//! ends without touching the network, and when it finds a change the loop fetches and plans
//! again. Committing on our last push ([`WriteConfig::known_head`]): a write with edits commits
//! on the commit this writer pushed last, without fetching, and the push goes through only if
//! the remote still holds exactly that commit ([`PushMode::FastForwardFrom`]); if anyone else
//! moved the branch the push is refused before anything is sent and the loop fetches at once.
//! "Nothing to do" is only ever answered on a fetch or on a recent fetch, never on our push.

use std::time::{Duration, Instant};

use crate::{
    Author, CommitSigner, FileEdit, GitAuth, GitError, Oid, OwnedPushBranch, PushMode, Repo,
    RepoCache, WritePoint,
};
use imagewatch_support::ttl_cache::TtlCache;

use super::message::CommitTemplate;

/// How the writer commits (the same for intents and planned commits).
pub(super) struct WriteConfig<'a> {
    pub author: &'a Author,
    pub signer: Option<&'a CommitSigner>,
    pub attempts: u32,
    pub template: &'a CommitTemplate,
    /// Called at each [`WritePoint`] (test hooks).
    pub hook: &'a (dyn Fn(WritePoint) + Sync),
    /// The head of each (repository URL, branch) fetched recently enough to read again
    /// without fetching, for a write that turns out to change nothing.
    pub fetched: &'a FetchTimes,
    /// The commit this writer pushed to the branch last, when its last write pushed one: a
    /// write with edits commits on it without fetching first (see the module docs).
    pub known_head: Option<Oid>,
}

/// The head each (repository URL, branch, credential fingerprint) had when this process last
/// fetched it, kept for `--git-read-reuse` (an empty cache when that is zero). The
/// credentials are part of the key: a head fetched with one tenant's credentials is never
/// read for a watch whose own credentials did not fetch it.
pub type FetchTimes = TtlCache<(String, String, [u8; 32]), Oid>;

/// Where a write goes.
pub(super) struct Destination<'a> {
    pub url: &'a str,
    pub branch: &'a str,
    /// Commit on `branch`'s head and force-push here (under a lease) instead of
    /// fast-forwarding `branch`.
    pub push_branch: Option<&'a str>,
    pub auth: &'a GitAuth,
}

impl<'a> Destination<'a> {
    /// A destination; a push branch that is empty or the branch itself means none.
    pub fn new(
        url: &'a str,
        branch: &'a str,
        push_branch: Option<&'a str>,
        auth: &'a GitAuth,
    ) -> Self {
        Self {
            url,
            branch,
            push_branch: push_branch.filter(|p| !p.is_empty() && *p != branch),
            auth,
        }
    }
}

/// Whether a write may start on a head it did not fetch itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reuse {
    /// Plan on a recent fetch or on our last push first (plain mode only).
    Recent,
    /// Always fetch first.
    Never,
}

/// The commit a plan asks for on one head.
pub(super) struct Planned {
    pub edits: Vec<FileEdit>,
    pub message: String,
}

/// Plans a write on each head the loop reads: the commit wanted on `head`, or `None` when
/// the branch already holds it. `owned` is the push branch, when it exists and is ours. An
/// error fails the whole write.
pub(super) trait Plan {
    fn plan(
        &mut self,
        repo: &Repo,
        head: Oid,
        owned: Option<&OwnedPushBranch>,
    ) -> crate::Result<Option<Planned>>;
}

/// How a write ended.
pub(super) enum Ending {
    /// Nothing to write. `head`: the branch head, or the push branch's tip when it is ours.
    Unchanged { head: Oid },
    /// The push branch already holds exactly these edits on this head (a run killed after
    /// pushing): nothing pushed, no second commit.
    AlreadyPushed { tip: Oid },
    /// `commit` was pushed: the push started at `pushing` and was accepted at `pushed_at`.
    Pushed {
        commit: Oid,
        pushing: Instant,
        pushed_at: Instant,
    },
    /// Failed before a plan was committed (clone, fetch, push-branch check, the plan itself).
    NotPlanned(GitError),
    /// Committing or pushing what was planned on `head` failed.
    NotPushed { error: GitError, head: Oid },
}

/// What a write did, with what the metrics need.
pub(super) struct Run {
    pub ending: Ending,
    /// Fetch/commit/push rounds (1 unless a push was rejected).
    pub attempts: u32,
    /// Pushes the remote rejected.
    pub rejections: u32,
    /// The write was answered on a recent fetch, without fetching.
    pub reused_fetch: bool,
}

impl Run {
    /// The run of a write with nothing to do (no intents).
    pub fn empty() -> Self {
        Self {
            ending: Ending::Unchanged {
                head: Oid::ZERO_SHA1,
            },
            attempts: 0,
            rejections: 0,
            reused_fetch: false,
        }
    }

    /// The category of the git error that failed the write, if one did.
    pub fn failure(&self) -> Option<&'static str> {
        match &self.ending {
            Ending::NotPlanned(e) | Ending::NotPushed { error: e, .. } => Some(e.category()),
            _ => None,
        }
    }

    /// The commit pushed, if one was.
    pub fn pushed(&self) -> Option<Oid> {
        match self.ending {
            Ending::Pushed { commit, .. } => Some(commit),
            _ => None,
        }
    }
}

/// Time a write spent in each phase, summed over its attempts.
#[derive(Default)]
struct Phases {
    fetch: Duration,
    plan: Duration,
    commit: Duration,
    push: Duration,
}

/// Runs one write to `dest` on its clone in `cache`, planned by `plan`.
pub(super) fn write(
    cache: &RepoCache,
    dest: &Destination<'_>,
    reuse: Reuse,
    config: &WriteConfig<'_>,
    plan: &mut dyn Plan,
) -> Run {
    let mut run = Run::empty();
    let repo = match cache.open_or_clone(dest.url, dest.auth) {
        Ok(repo) => repo,
        Err(e) => return run.ended(Ending::NotPlanned(e)),
    };
    let fetched_key = (
        dest.url.to_string(),
        dest.branch.to_string(),
        dest.auth.fingerprint(),
    );
    let max_attempts = config.attempts.max(1);
    // Heads (branch, push branch) we last pushed on, and why that push was refused.
    let mut rejected: Option<(Oid, Option<Oid>, GitError)> = None;
    let mut spent = Phases::default();
    // A recent fetch's head and our last push, if the clone still holds them (plain mode).
    let held = |head: Option<Oid>| head.filter(|h| repo.raw().find_commit(*h).is_ok());
    let (mut reused, mut known) = match (reuse, dest.push_branch) {
        (Reuse::Recent, None) => (
            held(config.fetched.get(&fetched_key, Instant::now())),
            held(config.known_head),
        ),
        _ => (None, None),
    };
    loop {
        run.attempts += 1;
        let (head, tip) = match reused.or(known) {
            Some(head) => (head, None),
            None => {
                let started = Instant::now();
                let heads = match fetch(&repo, dest) {
                    Ok(heads) => heads,
                    Err(e) => {
                        config.fetched.forget(&fetched_key);
                        return run.ended(Ending::NotPlanned(e));
                    }
                };
                spent.fetch += started.elapsed();
                config.fetched.put(fetched_key.clone(), started, heads.0);
                (config.hook)(WritePoint::Fetched);
                heads
            }
        };
        if let Some((old_head, old_tip, err)) = rejected.take()
            && old_head == head
            && old_tip == tip
        {
            // Nothing moved, so the rejection was not a race (protected branch, hook,
            // permissions): trying again cannot help.
            return run.ended(Ending::NotPlanned(err));
        }
        // Push-branch mode: may we overwrite it?
        let owned = match (dest.push_branch, tip) {
            (Some(push_branch), Some(tip)) => {
                match repo.check_push_branch(push_branch, tip, head, config.author) {
                    Ok(owned) => Some(owned),
                    Err(e) => return run.ended(Ending::NotPlanned(e)),
                }
            }
            _ => None,
        };
        let unchanged = owned.as_ref().map_or(head, |o| o.tip);

        let planning = Instant::now();
        let planned = match plan.plan(&repo, head, owned.as_ref()) {
            Ok(planned) => planned,
            Err(e) => return run.ended(Ending::NotPlanned(e)),
        };
        let Some(Planned { edits, message }) = planned else {
            if reused.is_none() && known.take().is_some() {
                // Nothing to write on our last push: an answer that nothing is needed is
                // only given on a fetch.
                run.attempts -= 1;
                continue;
            }
            run.reused_fetch = reused.is_some();
            return run.ended(Ending::Unchanged { head: unchanged });
        };
        if reused.take().is_some() {
            // Something to write: commit on our last push (which the push checks) or on a
            // fresh fetch.
            run.attempts -= 1;
            continue;
        }
        // Committing on our last push, not on a fetch: the push goes through only if the
        // remote still holds exactly that commit.
        let on_known = known.take().is_some();

        let committing = Instant::now();
        spent.plan += committing.duration_since(planning);
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
            // The edits add up to the head's own contents (answered on a fetch only).
            Ok(None) if on_known => {
                run.attempts -= 1;
                continue;
            }
            Ok(None) => return run.ended(Ending::Unchanged { head: unchanged }),
            Err(error) => return run.ended(Ending::NotPushed { error, head }),
        };
        (config.hook)(WritePoint::Committed);
        let pushing = Instant::now();
        spent.commit += pushing.duration_since(committing);

        if let Some(owned) = &owned
            && owned.base == head
            && same_tree(&repo, commit, owned.tip)
        {
            tracing::info!(
                url = dest.url,
                branch = target_ref,
                commit = %owned.tip,
                "push branch already holds these edits"
            );
            return run.ended(Ending::AlreadyPushed { tip: owned.tip });
        }

        (config.hook)(WritePoint::BeforePush);
        let mode = match dest.push_branch {
            None => PushMode::FastForwardFrom { expected: head },
            Some(_) => PushMode::ForceWithLease { expected: tip },
        };
        let on_send = || (config.hook)(WritePoint::Pushing);
        let pushed = repo.push_with(target_ref, commit, dest.auth, mode, Some(&on_send));
        spent.push += pushing.elapsed();
        match pushed {
            Ok(_) => {
                // The tracking ref still shows the head before our push: fetch next time.
                config.fetched.forget(&fetched_key);
                (config.hook)(WritePoint::Pushed);
                tracing::info!(
                    url = dest.url,
                    branch = target_ref,
                    %commit,
                    edits = edits.len(),
                    attempt = run.attempts,
                    fetch_ms = spent.fetch.as_millis() as u64,
                    plan_ms = spent.plan.as_millis() as u64,
                    commit_ms = spent.commit.as_millis() as u64,
                    push_ms = spent.push.as_millis() as u64,
                    "committed"
                );
                return run.ended(Ending::Pushed {
                    commit,
                    pushing,
                    pushed_at: Instant::now(),
                });
            }
            Err(err @ GitError::PushRejected { .. }) if on_known => {
                // The branch moved since our last push: fetch and plan again at once (no
                // race to back off from), without using up an attempt.
                run.rejections += 1;
                run.attempts -= 1;
                tracing::debug!(url = dest.url, branch = target_ref, reason = %err, "branch moved since our last push; fetching");
                rejected = Some((head, tip, err));
            }
            Err(err @ GitError::PushRejected { .. }) if run.attempts < max_attempts => {
                run.rejections += 1;
                wait_after_rejection(dest.url, target_ref, run.attempts, max_attempts, &err);
                rejected = Some((head, tip, err));
            }
            Err(error) => {
                run.rejections += u32::from(matches!(error, GitError::PushRejected { .. }));
                return run.ended(Ending::NotPushed { error, head });
            }
        }
    }
}

impl Run {
    fn ended(mut self, ending: Ending) -> Self {
        if let Ending::NotPlanned(e) | Ending::NotPushed { error: e, .. } = &ending {
            tracing::warn!(error = %e, "git write failed");
        }
        self.ending = ending;
        self
    }
}

/// Fetches the branch and, in push-branch mode, the push branch: (branch head, push branch tip).
fn fetch(repo: &Repo, dest: &Destination<'_>) -> crate::Result<(Oid, Option<Oid>)> {
    match dest.push_branch {
        None => Ok((repo.fetch(dest.branch, dest.auth)?, None)),
        Some(push_branch) => {
            let heads = repo.fetch_many(&[dest.branch, push_branch], dest.auth)?;
            let head =
                heads
                    .first()
                    .copied()
                    .flatten()
                    .ok_or_else(|| GitError::BranchNotFound {
                        url: dest.url.to_owned(),
                        branch: dest.branch.to_owned(),
                    })?;
            Ok((head, heads.get(1).copied().flatten()))
        }
    }
}

fn same_tree(repo: &Repo, a: Oid, b: Oid) -> bool {
    match (repo.tree_and_parent(a), repo.tree_and_parent(b)) {
        (Ok((ta, _)), Ok((tb, _))) => ta == tb,
        _ => false,
    }
}

/// Logs a rejected push and waits its backoff before the branch is fetched and the edits
/// planned again on the new head.
fn wait_after_rejection(url: &str, branch: &str, attempt: u32, max_attempts: u32, err: &GitError) {
    let delay = backoff(attempt);
    tracing::info!(
        url,
        branch,
        attempt,
        max_attempts,
        reason = %err,
        delay_ms = delay.as_millis() as u64,
        "push rejected; fetching and planning again"
    );
    std::thread::sleep(delay);
}

/// 100 ms, 200 ms, 400 ms, ... capped at 2 s, plus up to 50 % jitter so that writers racing
/// for the same branch do not retry in lockstep.
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
