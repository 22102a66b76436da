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

use std::cell::RefCell;

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

impl Repo {
    /// Push `commit` to `refs/heads/<branch>` on the remote, fast-forward
    /// only. On success `refs/remotes/origin/<branch>` points at `commit`.
    pub fn push(&self, branch: &str, commit: Oid, auth: &GitAuth) -> Result<PushOutcome> {
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
        let refspec = format!("{pending}:refs/heads/{branch}");

        let rejection: RefCell<Option<String>> = RefCell::new(None);
        let previous: RefCell<Option<Oid>> = RefCell::new(None);
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
                *previous.borrow_mut() = (!old.is_zero()).then_some(old);
            }
            Ok(())
        });
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
