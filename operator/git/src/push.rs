//! Publishing commits for the git writer (read current state from Git,
//! commit and push edits).
//!
//! A push here is always a plain fast-forward of `refs/heads/<branch>`:
//! the refspec never carries `+`, so a branch that moved since our fetch is
//! left alone and the push is reported as [`GitError::PushRejected`]. The
//! rejection can come from two places, and both are handled:
//!
//! * libgit2 itself, before sending anything, when the remote's advertised
//!   tip is not an ancestor of our commit (`NotFastForward`);
//! * the server, per ref, in its report (branch moved between
//!   advertisement and update, protected branch, hook refusal), delivered
//!   through the `push_update_reference` callback.
//!
//! [`PushMode::FastForwardFrom`] adds an exact check: the remote must still hold the very
//! commit ours was made on, checked in `push_negotiation` (below) on the tip advertised on
//! this connection.
//!
//! The one exception is a private push branch ([`PushMode::ForceWithLease`]):
//! it is rewritten with `+`, but only when the remote still holds exactly
//! the tip we inspected. The check runs in `push_negotiation`, on the tip
//! the server advertised on this very connection, and the server itself
//! refuses the update if the ref moved after that advertisement (the
//! update command carries the old id), so a commit someone pushed after
//! our inspection is never overwritten.

use std::cell::{Cell, RefCell};

use git2::{ErrorCode, Oid, ProxyOptions, PushOptions};

use super::auth::{Connection, GitAuth};
use super::commit::pending_ref;
use super::error::{GitError, Result};
use super::repo::{Repo, tracking_ref, validate_branch};

/// A successful push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushOutcome {
    pub branch: String,
    /// The commit the remote branch now points at.
    pub commit: Oid,
    /// The remote branch tip we replaced (`None` if the branch was created).
    pub previous: Option<Oid>,
}

/// How a push may move the remote branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushMode {
    /// Only forward: the remote tip must be an ancestor of the new commit.
    FastForward,
    /// Only forward, and only from `expected`: the remote tip must be exactly the commit the
    /// new one was made on (it may be older than a fetch, e.g. the writer's own last push),
    /// so neither a commit pushed since nor a branch reset since is ever overwritten.
    FastForwardFrom { expected: Oid },
    /// Replace the remote tip whatever it is, provided it is still
    /// `expected` (`None`: the branch must not exist yet). For private push
    /// branches only.
    ForceWithLease { expected: Option<Oid> },
}

impl Repo {
    /// Push `commit` to `refs/heads/<branch>` on the remote, fast-forward
    /// only. On success `refs/remotes/origin/<branch>` points at `commit`.
    pub fn push(&self, branch: &str, commit: Oid, auth: &GitAuth) -> Result<PushOutcome> {
        self.push_with(branch, commit, auth, PushMode::FastForward, None)
    }

    /// [`Repo::push`] with a choice of [`PushMode`]. `on_send`, when given,
    /// is called once, after the remote has been contacted and before the
    /// ref update is sent (while the pack is built): a hook for tests that
    /// need to act in the middle of a push.
    pub fn push_with(
        &self,
        branch: &str,
        commit: Oid,
        auth: &GitAuth,
        mode: PushMode,
        on_send: Option<&dyn Fn()>,
    ) -> Result<PushOutcome> {
        self.send(branch, commit, auth, mode, on_send)
            .map_err(|e| self.cache_error(e))
    }

    fn send(
        &self,
        branch: &str,
        commit: Oid,
        auth: &GitAuth,
        mode: PushMode,
        on_send: Option<&dyn Fn()>,
    ) -> Result<PushOutcome> {
        validate_branch(branch)?;
        self.repo
            .find_commit(commit)
            .map_err(|e| GitError::git("find commit to push", e))?;
        // Push from a ref (libgit2 resolves the source side as a revision);
        // the pending ref also keeps the commit reachable meanwhile.
        let pending = pending_ref(branch);
        self.repo
            .reference(&pending, commit, true, "imagewatch: push")
            .map_err(|e| GitError::git("update pending ref", e))?;
        let force = match mode {
            PushMode::FastForward | PushMode::FastForwardFrom { .. } => "",
            PushMode::ForceWithLease { .. } => "+",
        };
        let refspec = format!("{force}{pending}:refs/heads/{branch}");

        let rejection: RefCell<Option<String>> = RefCell::new(None);
        let previous: RefCell<Option<Oid>> = RefCell::new(None);
        let lease_broken: RefCell<Option<Option<Oid>>> = RefCell::new(None);
        let sent = Cell::new(false);
        let notify_send = || {
            if !sent.replace(true)
                && let Some(hook) = on_send
            {
                hook();
            }
        };
        let conn = Connection::new(auth, &self.url, &self.remote);
        let mut callbacks = conn.callbacks();
        callbacks.push_update_reference(|refname, status| {
            if let Some(message) = status {
                tracing::debug!(refname, message, "remote rejected ref update");
                *rejection.borrow_mut() = Some(message.to_owned());
            }
            Ok(())
        });
        callbacks.push_negotiation(|updates| {
            if let Some(u) = updates.first() {
                let old = u.src();
                let old = (!old.is_zero()).then_some(old);
                *previous.borrow_mut() = old;
                let expected = match mode {
                    PushMode::FastForward => old,
                    PushMode::FastForwardFrom { expected } => Some(expected),
                    PushMode::ForceWithLease { expected } => expected,
                };
                if old != expected {
                    *lease_broken.borrow_mut() = Some(old);
                    return Err(git2::Error::from_str("branch moved since it was read"));
                }
            }
            Ok(())
        });
        callbacks.pack_progress(|_, _, _| notify_send());
        callbacks.push_transfer_progress(|_, _, _| notify_send());
        let mut proxy = ProxyOptions::new();
        proxy.auto();
        let mut opts = PushOptions::new();
        opts.remote_callbacks(callbacks).proxy_options(proxy);

        let mut remote = self
            .repo
            .remote_anonymous(&self.url)
            .map_err(|e| GitError::remote("push", &self.url, e))?;
        let pushed = remote.push(&[refspec.as_str()], Some(&mut opts));
        drop(opts);
        if let Some(now) = lease_broken.into_inner() {
            let now = now.map_or_else(|| "deleted".to_owned(), |c| format!("now at {c}"));
            return Err(GitError::PushRejected {
                branch: branch.to_owned(),
                message: format!("the branch moved since it was inspected ({now})"),
            });
        }
        match pushed {
            Ok(()) => {}
            Err(e) if e.code() == ErrorCode::NotFastForward => {
                return Err(GitError::PushRejected {
                    branch: branch.to_owned(),
                    message: format!("non-fast-forward: {}", e.message()),
                });
            }
            Err(e) => return Err(conn.error("push to", e)),
        }
        if let Some(message) = rejection.into_inner() {
            return Err(GitError::PushRejected {
                branch: branch.to_owned(),
                message,
            });
        }

        self.repo
            .reference(&tracking_ref(branch), commit, true, "imagewatch: pushed")
            .map_err(|e| GitError::git("update remote-tracking ref", e))?;
        // The tracking ref keeps the commit reachable now.
        if let Ok(mut r) = self.repo.find_reference(&pending)
            && r.target() == Some(commit)
        {
            // Leftover pending refs are harmless; not worth failing over.
            let _ = r.delete();
        }
        let previous = previous.into_inner();
        tracing::info!(url = %self.url, branch, %commit, ?previous, "pushed");
        Ok(PushOutcome {
            branch: branch.to_owned(),
            commit,
            previous,
        })
    }
}
