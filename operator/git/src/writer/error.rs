//! Why the writer did not write: its own error, which the controllers map to their condition
//! reasons (the writer chooses none).

use crate::{GitError, Oid};
use imagewatch_engine::manifests::EditError;

/// Why an intent or a planned commit was not written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Git failed or refused: clone, fetch, push-branch check, commit or push.
    #[error(transparent)]
    Git(#[from] GitError),
    /// The target's edit cannot be planned on the branch's files (file, key, image or
    /// kustomization entry not there, or ambiguous).
    #[error(transparent)]
    Edit(#[from] EditError),
    /// The target's directory is not on the branch.
    #[error("directory {dir:?} does not exist on branch {branch} (commit {head})")]
    DirectoryNotFound {
        /// The directory, relative to the repository root.
        dir: String,
        /// The branch read.
        branch: String,
        /// The commit read.
        head: Oid,
    },
    /// The target's directory leaves the repository (`..`).
    #[error("path {dir:?} leaves the repository")]
    DirectoryOutside {
        /// The directory as the target names it.
        dir: String,
    },
    /// The target's file is not a path in the repository.
    #[error("file {file:?} is not a path in the repository")]
    FileOutside {
        /// The file as the target names it.
        file: String,
    },
    /// A planned edit names a path that is not in the repository.
    #[error("the planned edit names an invalid path {path:?}")]
    PlannedPath {
        /// The path the edit names.
        path: String,
    },
    /// The writer task of the repository did not take the job (it kept closing).
    #[error("the git writer task for this repository is not accepting work")]
    NotAccepting,
    /// The writer task stopped before answering (shutdown).
    #[error("the git writer task stopped before answering")]
    Stopped,
    /// The blocking write panicked or was cancelled (the task's own message: a
    /// `JoinError` cannot be handed to every intent of a batch).
    #[error("git task: {0}")]
    Task(String),
}

impl WriteError {
    /// Whether the manifests or the object's target must change for the write to pass (a
    /// target not found, or a path outside the repository), as opposed to Git failing.
    pub fn is_target(&self) -> bool {
        matches!(
            self,
            Self::Edit(_)
                | Self::DirectoryNotFound { .. }
                | Self::DirectoryOutside { .. }
                | Self::FileOutside { .. }
                | Self::PlannedPath { .. }
        )
    }
}
