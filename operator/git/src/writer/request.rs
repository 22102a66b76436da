//! What the writer is asked ([`WriteRequest`], an edit intent) and what it answers
//! ([`WriteResult`]).

use imagewatch_engine::manifests::{EditOptions, ImageChange, TargetSpec};

use crate::GitAuth;

/// One edit intent (or, when `dry_run`, only a question: what would change?).
#[derive(Debug, Clone)]
pub struct WriteRequest {
    /// Repository URL.
    pub url: String,
    /// Branch: read from, and the base of every commit.
    pub branch: String,
    /// Credentials.
    pub auth: GitAuth,
    /// The place in the repository that holds the image.
    pub target: TargetSpec,
    /// The image to write.
    pub change: ImageChange,
    /// Whether the edit may change places that alias the target's value.
    pub edit: EditOptions,
    /// `namespace/name` of the watch, for the commit message.
    pub watch: String,
    /// Read only: report what would change, write nothing.
    pub dry_run: bool,
    /// Push-branch mode: commit on `branch`'s head, force-push to this branch (e.g.
    /// `imagewatch/my-api`) instead of fast-forwarding `branch`. Refused when the push
    /// branch holds commits we did not make.
    pub push_branch: Option<String>,
    /// `spec.onGitChange`: what protects a change someone else made in Git from this
    /// intent (`None`: nothing, as with `Overwrite`).
    pub guard: Option<GitChangeGuard>,
}

/// What a watch knows of its own last write, for the writer to tell a change someone else
/// made in Git (see `history.rs` and `imagewatch_engine::held`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitChangeGuard {
    /// `spec.onGitChange`.
    pub mode: imagewatch_crd::OnGitChange,
    /// What imagewatch last wrote to the target (`status.applied`, or while held the value
    /// the hold replaced).
    pub last_written: String,
    /// The value of the resume annotation, if any.
    pub resume: Option<String>,
}

/// What Git holds and what was done, for one intent.
pub use imagewatch_engine::status::WriteResult;
