//! Reconcile errors and how each is handled: a spec the user must fix waits for a change
//! (stalled), a transient failure is retried with backoff.

use imagewatch_crd::conditions::reason;

/// Why a reconcile did not reach `Ready=True`.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The spec cannot be acted on.
    #[error("{0}")]
    InvalidSpec(String),
    /// A referenced Secret is missing or incomplete.
    #[error("{0}")]
    CredentialsNotFound(String),
    /// The registry failed or refused.
    #[error("registry: {0}")]
    Registry(#[from] crate::registry::RegistryError),
    /// No tag matches the rules.
    #[error("{0}")]
    NoMatchingTags(String),
    /// The pinned tag is not in the registry.
    #[error("{0}")]
    PinnedTagNotFound(String),
    /// The target is missing or ambiguous in Git.
    #[error("{0}")]
    TargetNotFound(String),
    /// The watch's group has no common tag yet, or a member is unusable.
    #[error("{0}")]
    WaitingForGroup(String),
    /// A pattern image's registry does not list its repositories to us.
    #[error("{0}")]
    CatalogUnavailable(String),
    /// The object's namespace may not use what it names (see `allow.rs`); nothing was read
    /// or written.
    #[error("{0}")]
    NotAllowed(String),
    /// `spec.verify`: no candidate tag's signature verifies; the newest one and why.
    #[error("{}", .0.message())]
    Signature(Box<crate::signature::Refused>),
    /// The forge's pull request API failed or refused (`spec.git.pullRequest`).
    #[error("{0}")]
    Forge(#[from] crate::forge::ForgeError),
    /// Git failed.
    #[error("git: {0}")]
    Git(#[from] crate::git::GitError),
    /// The Kubernetes API failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A blocking task panicked or was cancelled.
    #[error("internal: {0}")]
    Internal(String),
}

impl ReconcileError {
    /// The `Ready` reason reported for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidSpec(_) => reason::INVALID_SPEC,
            Self::CredentialsNotFound(_) => reason::CREDENTIALS_NOT_FOUND,
            Self::Registry(_) => reason::REGISTRY_ERROR,
            Self::NoMatchingTags(_) => reason::NO_MATCHING_TAGS,
            Self::PinnedTagNotFound(_) => reason::PINNED_TAG_NOT_FOUND,
            Self::TargetNotFound(_) => reason::TARGET_NOT_FOUND,
            Self::WaitingForGroup(_) => reason::WAITING_FOR_GROUP,
            Self::CatalogUnavailable(_) => reason::CATALOG_UNAVAILABLE,
            Self::NotAllowed(_) => reason::NOT_ALLOWED,
            Self::Signature(refused) => refused.reason(),
            Self::Git(crate::git::GitError::CacheFull { .. }) => reason::CACHE_FULL,
            Self::Git(_) => reason::GIT_ERROR,
            Self::Forge(_) => reason::FORGE_ERROR,
            Self::Kube(_) | Self::Internal(_) => "InternalError",
        }
    }

    /// Low-cardinality metric label.
    pub fn category(&self) -> &'static str {
        match self {
            Self::InvalidSpec(_) => "invalid_spec",
            Self::CredentialsNotFound(_) => "credentials",
            Self::Registry(_) => "registry",
            Self::NoMatchingTags(_) => "no_matching_tags",
            Self::PinnedTagNotFound(_) => "pinned_tag_not_found",
            Self::TargetNotFound(_) => "target_not_found",
            Self::WaitingForGroup(_) => "waiting_for_group",
            Self::CatalogUnavailable(_) => "catalog_unavailable",
            Self::NotAllowed(_) => "not_allowed",
            Self::Signature(_) => "signature",
            Self::Git(crate::git::GitError::CacheFull { .. }) => "cache_full",
            Self::Git(_) => "git",
            Self::Forge(_) => "forge",
            Self::Kube(_) => "kube",
            Self::Internal(_) => "internal",
        }
    }

    /// Whether only a change by the user can fix it. Such errors are not retried quickly:
    /// the object is looked at again when it changes, and at its polling interval (the registry
    /// or Git may change under it).
    pub fn is_stalled(&self) -> bool {
        matches!(
            self,
            Self::InvalidSpec(_)
                | Self::Forge(crate::forge::ForgeError::InvalidConfig(_))
                | Self::TargetNotFound(_)
                | Self::CatalogUnavailable(_)
                | Self::NotAllowed(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::GitError;

    #[test]
    fn a_full_clone_cache_has_its_own_reason_and_is_retried() {
        let full = ReconcileError::Git(GitError::CacheFull {
            path: "/var/cache/imagewatch/git".into(),
            message: "No space left on device".into(),
        });
        assert_eq!(full.reason(), reason::CACHE_FULL);
        assert_eq!(full.category(), "cache_full");
        assert!(!full.is_stalled());
        assert!(full.to_string().contains("/var/cache/imagewatch/git"));
        let other = ReconcileError::Git(GitError::InvalidBranch {
            branch: "x y".into(),
        });
        assert_eq!(other.reason(), reason::GIT_ERROR);
        assert_eq!(other.category(), "git");
    }
}
