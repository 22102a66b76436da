//! Git writer: read current state from Git, commit and push edits.
//!
//! Position in the operator: after the tag policy picked an image, the
//! controller asks this module for the manifests at the branch head, plans
//! an edit, and hands it back here to be committed and pushed. The
//! controller decides *what* a manifest should say; this module only knows
//! how to get the current files of a branch, turn a set of whole-file edits
//! into a commit on top of the branch head, and publish that commit without
//! ever overwriting someone else's work.
//!
//! Shape of the API:
//!
//! * [`RepoCache`] keeps one bare repository per remote URL and credential
//!   identity on local disk so
//!   that every reconcile only transfers what changed since the last one.
//!   [`RepoCache::open_or_clone`] hands out a [`Repo`], which holds an
//!   exclusive lease on that directory until it is dropped.
//! * [`Repo::fetch`] updates `refs/remotes/origin/<branch>` and returns the
//!   branch head; [`Repo::read_files_under`] and [`Repo::read_file`] read
//!   blobs straight from the object database (there is never a worktree).
//! * [`Repo::commit_edits`] writes a commit object on top of a parent;
//!   [`Repo::push`] publishes it as a fast-forward only.
//! * The writer (`writer/commit_loop.rs`) ties these together: fetch, plan
//!   edits against the fresh head, commit, push, and start over on a fresh
//!   head when another writer won the race. [`WritePoint`] names its stages.
//! * [`Repo::commit_edits_signed`] signs commits with an SSH or OpenPGP key
//!   ([`CommitSigner`]); [`Repo::push_with`] can force-push a private push
//!   branch under a lease, after [`Repo::check_push_branch`] confirmed that
//!   it holds only our commit (`branch.rs` documents the rule).
//!
//! Everything here is blocking (libgit2 is synchronous). Async callers run
//! it inside `tokio::task::spawn_blocking`; all public types are `Send` so
//! they can move into such a closure.

mod auth;
mod branch;
mod commit;
mod error;
pub mod github_app;
mod known_hosts;
mod push;
mod repo;
mod sign;
mod url;
mod walk;
mod write;
pub mod writer;

pub use auth::GitAuth;
pub use branch::OwnedPushBranch;
pub use commit::{Author, FileEdit};
pub use error::{GitError, Result};
pub use push::{PushMode, PushOutcome};
pub use repo::{Repo, RepoCache};
pub use sign::{CommitSigner, PgpSigner, SigningKeyError, SshSigner};
pub use url::check_tenant_url;
pub use write::WritePoint;

/// Commit ids are libgit2's object ids; re-exported so callers need no
/// direct `git2` import for the common case.
pub use git2::Oid;

/// Bound how long a network operation may hang: `connect` for establishing
/// a connection, `io` for each read or write on it (HTTP and SSH alike).
/// Without this a silent server blocks a `spawn_blocking` thread, and the
/// writer lock of that branch, indefinitely. Durations are clamped to
/// `i32::MAX` milliseconds.
///
/// # Safety
///
/// libgit2 keeps these in unsynchronized process globals: call this once at
/// startup, before any git operation of this module can run on another
/// thread.
pub unsafe fn set_network_timeouts(
    connect: std::time::Duration,
    io: std::time::Duration,
) -> Result<()> {
    let ms = |d: std::time::Duration| i32::try_from(d.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: the caller guarantees no concurrent git operation (see above).
    unsafe {
        git2::opts::set_server_connect_timeout_in_milliseconds(ms(connect))
            .map_err(|e| GitError::git("set connect timeout", e))?;
        git2::opts::set_server_timeout_in_milliseconds(ms(io))
            .map_err(|e| GitError::git("set I/O timeout", e))?;
    }
    Ok(())
}

/// Largest tree libgit2 keeps in its object cache. Its default (4 KiB) leaves out the tree
/// of any directory of more than about a hundred entries (`apps/` of 1,000 Deployments is
/// 35 KiB), so every path looked up under it inflated that tree from the pack again: one
/// read per intent, growing with the number of watches writing the repository.
const CACHED_TREE_MAX: usize = 1 << 20;
/// All objects libgit2 caches at once, every repository together (its default: 256 MiB).
const OBJECT_CACHE_MAX: isize = 64 << 20;

/// Let libgit2 cache trees up to [`CACHED_TREE_MAX`], within [`OBJECT_CACHE_MAX`] in all.
///
/// # Safety
///
/// libgit2 keeps these in unsynchronized process globals: call this once at startup,
/// before any git operation of this module can run on another thread.
pub unsafe fn set_object_cache() -> Result<()> {
    // SAFETY: the caller guarantees no concurrent git operation (see above).
    unsafe {
        git2::opts::set_cache_object_limit(git2::ObjectType::Tree, CACHED_TREE_MAX)
            .map_err(|e| GitError::git("set the tree cache limit", e))?;
        git2::opts::set_cache_max_size(OBJECT_CACHE_MAX)
            .map_err(|e| GitError::git("set the object cache size", e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
