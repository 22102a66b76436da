//! Errors of the git writer (read current state from Git, commit and push
//! edits).
//!
//! libgit2 reports most failures as a numeric code plus a free-form message.
//! This file turns them into variants the controller can act on (retry,
//! surface an auth problem on the resource status, back off on network
//! trouble) and gives each a stable [`GitError::category`] for metrics and
//! status conditions.

use std::path::{Path, PathBuf};

use git2::{ErrorClass, ErrorCode, Oid};

/// Result type of the git writer.
pub type Result<T, E = GitError> = std::result::Result<T, E>;

/// Everything that can go wrong while reading from or writing to a remote.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitError {
    /// The remote URL could not be understood or is not allowed.
    #[error("invalid git remote URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },

    /// The remote refused the credentials, or asked for a kind of
    /// credential that is not configured.
    #[error("authentication to {url} failed: {reason}")]
    AuthFailed { url: String, reason: String },

    /// The SSH server presented a host key for which known_hosts has no
    /// entry. The connection was refused before any credential was sent.
    #[error(
        "SSH host key of {host} is not listed in known_hosts; refusing to connect \
         (add a plain, unhashed `{host} <type> <key>` line)"
    )]
    UnknownHostKey { host: String },

    /// known_hosts lists the host, but with a different key (or the key is
    /// marked `@revoked`). Either the server rotated its key or someone is
    /// in the middle; both need a human.
    #[error("SSH host key of {host} ({key_type}) does not match known_hosts; refusing to connect")]
    HostKeyMismatch { host: String, key_type: String },

    /// The remote did not accept the new branch tip: someone else moved the
    /// branch first (non-fast-forward), or a server-side rule refused it.
    #[error("push to branch {branch:?} was rejected: {message}")]
    PushRejected { branch: String, message: String },

    /// The remote repository does not exist (or is invisible with the
    /// configured credentials).
    #[error("remote repository {url} was not found: {message}")]
    RepoNotFound { url: String, message: String },

    /// The branch does not exist on the remote.
    #[error("branch {branch:?} does not exist on {url}")]
    BranchNotFound { url: String, branch: String },

    /// A path asked for does not exist in the given commit.
    #[error("path {path:?} does not exist in commit {commit}")]
    PathNotFound { commit: Oid, path: String },

    /// Talking to the remote failed below the git protocol: DNS, TCP, TLS,
    /// HTTP status, SSH transport.
    /// A failure outside libgit2 (an HTTPS token endpoint) has no libgit2 error.
    #[error("{op} {url}: {message}")]
    Network {
        op: &'static str,
        url: String,
        message: String,
        #[source]
        source: Option<git2::Error>,
    },

    /// A branch name that git would not accept as `refs/heads/<name>`.
    #[error("invalid branch name {branch:?}")]
    InvalidBranch { branch: String },

    /// A file edit that cannot be applied (bad path, path collides with a
    /// directory or symlink, conflicting duplicate).
    #[error("invalid edit of {path:?}: {reason}")]
    InvalidEdit { path: String, reason: String },

    /// The filesystem of the clone cache is full (ENOSPC) or over its quota (EDQUOT): a
    /// clone, fetch, commit or ref update could not write. Nothing was pushed; freeing space
    /// there (or giving the cache a larger volume) lets the next attempt succeed.
    #[error(
        "clone cache {} has no space left: {message} (free space on that volume or move \
         the cache directory to a larger one)",
        path.display()
    )]
    CacheFull {
        /// The cache directory that ran out of space.
        path: PathBuf,
        /// What failed to be written, as the system reported it.
        message: String,
    },

    /// Local filesystem trouble in the clone cache.
    #[error("git cache directory {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Push-branch mode: the push branch exists on the remote and holds
    /// commits we did not make, so force-pushing it would destroy someone
    /// else's work. See `Repo::check_push_branch` for the rule.
    #[error(
        "refusing to overwrite push branch {branch:?}: its tip {commit} {reason} \
         (delete the branch or choose another push branch)"
    )]
    PushBranchNotOurs {
        branch: String,
        commit: Oid,
        reason: String,
    },

    /// Signing a commit failed.
    #[error("signing the commit failed: {message}")]
    Signing { message: String },

    /// The caller's edit computation inside the writer's loop
    /// failed (for example a manifest that does not parse); nothing was
    /// committed.
    #[error("computing edits failed: {source}")]
    Apply {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// Any other libgit2 failure (corrupt object, missing commit, ...).
    #[error("git {op} failed: {message}")]
    Git {
        op: &'static str,
        message: String,
        #[source]
        source: git2::Error,
    },
}

impl GitError {
    /// Stable, low-cardinality label for metrics and status reasons: one of
    /// `auth`, `unknown_host_key`, `push_rejected`, `push_branch_not_ours`,
    /// `not_found`, `network`, `cache_full`, `other`.
    pub fn category(&self) -> &'static str {
        match self {
            GitError::AuthFailed { .. } => "auth",
            GitError::UnknownHostKey { .. } | GitError::HostKeyMismatch { .. } => {
                "unknown_host_key"
            }
            GitError::PushRejected { .. } => "push_rejected",
            GitError::PushBranchNotOurs { .. } => "push_branch_not_ours",
            GitError::RepoNotFound { .. }
            | GitError::BranchNotFound { .. }
            | GitError::PathNotFound { .. } => "not_found",
            GitError::Network { .. } => "network",
            GitError::CacheFull { .. } => "cache_full",
            GitError::InvalidUrl { .. }
            | GitError::InvalidBranch { .. }
            | GitError::InvalidEdit { .. }
            | GitError::Io { .. }
            | GitError::Apply { .. }
            | GitError::Signing { .. }
            | GitError::Git { .. } => "other",
        }
    }

    /// Whether trying again later, without any change of configuration, may
    /// succeed. Auth, host key and not-found problems need a human. A full cache is
    /// retried: space is often freed without any change to the operator's configuration.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            GitError::Network { .. }
                | GitError::PushRejected { .. }
                | GitError::Io { .. }
                | GitError::CacheFull { .. }
        )
    }

    /// Whether this failure is the local filesystem running out of space or quota while
    /// writing to the clone cache.
    ///
    /// I/O errors are judged by their OS error; libgit2 failures by class and message: it
    /// reports failed system calls with class `Os` and appends `strerror(errno)`. Text from
    /// the remote (a server whose own disk is full) arrives with other classes or as a push
    /// rejection, and is not ours to free.
    pub fn is_out_of_space(&self) -> bool {
        match self {
            GitError::CacheFull { .. } => true,
            GitError::Io { source, .. } => io_out_of_space(source),
            GitError::Network {
                source: Some(source),
                ..
            }
            | GitError::Git { source, .. } => {
                source.class() == ErrorClass::Os && message_out_of_space(source.message())
            }
            _ => false,
        }
    }

    /// This error as seen from the clone cache at `dir`: an out-of-space failure becomes
    /// [`GitError::CacheFull`] naming `dir`; anything else is returned unchanged.
    pub fn in_cache(self, dir: &Path) -> GitError {
        if matches!(self, GitError::CacheFull { .. }) || !self.is_out_of_space() {
            return self;
        }
        let message = match &self {
            GitError::Io { path, source } => format!("{}: {source}", path.display()),
            GitError::Network {
                source: Some(source),
                ..
            }
            | GitError::Git { source, .. } => source.message().to_owned(),
            other => other.to_string(),
        };
        GitError::CacheFull {
            path: dir.to_path_buf(),
            message,
        }
    }

    /// An equivalent error (same variant, fields and message), for handing
    /// one failure to several waiting callers: `GitError` is not `Clone`
    /// because its sources (`git2::Error`, `std::io::Error`) are not.
    pub fn duplicate(&self) -> GitError {
        fn dup_git(e: &git2::Error) -> git2::Error {
            git2::Error::new(e.code(), e.class(), e.message())
        }
        match self {
            GitError::InvalidUrl { url, reason } => GitError::InvalidUrl {
                url: url.clone(),
                reason: reason.clone(),
            },
            GitError::AuthFailed { url, reason } => GitError::AuthFailed {
                url: url.clone(),
                reason: reason.clone(),
            },
            GitError::UnknownHostKey { host } => GitError::UnknownHostKey { host: host.clone() },
            GitError::HostKeyMismatch { host, key_type } => GitError::HostKeyMismatch {
                host: host.clone(),
                key_type: key_type.clone(),
            },
            GitError::PushRejected { branch, message } => GitError::PushRejected {
                branch: branch.clone(),
                message: message.clone(),
            },
            GitError::PushBranchNotOurs {
                branch,
                commit,
                reason,
            } => GitError::PushBranchNotOurs {
                branch: branch.clone(),
                commit: *commit,
                reason: reason.clone(),
            },
            GitError::Signing { message } => GitError::Signing {
                message: message.clone(),
            },
            GitError::RepoNotFound { url, message } => GitError::RepoNotFound {
                url: url.clone(),
                message: message.clone(),
            },
            GitError::BranchNotFound { url, branch } => GitError::BranchNotFound {
                url: url.clone(),
                branch: branch.clone(),
            },
            GitError::PathNotFound { commit, path } => GitError::PathNotFound {
                commit: *commit,
                path: path.clone(),
            },
            GitError::Network {
                op,
                url,
                message,
                source,
            } => GitError::Network {
                op,
                url: url.clone(),
                message: message.clone(),
                source: source.as_ref().map(dup_git),
            },
            GitError::InvalidBranch { branch } => GitError::InvalidBranch {
                branch: branch.clone(),
            },
            GitError::InvalidEdit { path, reason } => GitError::InvalidEdit {
                path: path.clone(),
                reason: reason.clone(),
            },
            GitError::Io { path, source } => GitError::Io {
                path: path.clone(),
                source: match source.raw_os_error() {
                    Some(code) => std::io::Error::from_raw_os_error(code),
                    None => std::io::Error::new(source.kind(), source.to_string()),
                },
            },
            GitError::CacheFull { path, message } => GitError::CacheFull {
                path: path.clone(),
                message: message.clone(),
            },
            GitError::Apply { source } => GitError::Apply {
                source: source.to_string().into(),
            },
            GitError::Git {
                op,
                message,
                source,
            } => GitError::Git {
                op,
                message: message.clone(),
                source: dup_git(source),
            },
        }
    }

    /// Wrap a failure of the caller's own edit computation.
    pub fn apply(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        GitError::Apply {
            source: source.into(),
        }
    }

    /// Wrap a libgit2 failure of a purely local operation.
    pub fn git(op: &'static str, source: git2::Error) -> Self {
        GitError::Git {
            op,
            message: source.message().to_owned(),
            source,
        }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        GitError::Io {
            path: path.into(),
            source,
        }
    }

    /// Classify a libgit2 failure of an operation that talked to `url`.
    ///
    /// Callers check for failures recorded by our own callbacks first (they
    /// carry the precise reason); this is the fallback for everything that
    /// libgit2 decided on its own.
    pub fn remote(op: &'static str, url: &str, source: git2::Error) -> Self {
        let message = source.message().to_owned();
        let lower = message.to_ascii_lowercase();
        match source.code() {
            ErrorCode::Auth => {
                return GitError::AuthFailed {
                    url: url.to_owned(),
                    reason: message,
                };
            }
            ErrorCode::NotFastForward => {
                // Only pushes produce this; the caller replaces it with a
                // PushRejected that names the branch.
                return GitError::Git {
                    op,
                    message,
                    source,
                };
            }
            ErrorCode::Certificate => {
                return GitError::Network {
                    op,
                    url: url.to_owned(),
                    message: format!("certificate rejected: {message}"),
                    source: Some(source),
                };
            }
            _ => {}
        }
        // libgit2 has no dedicated code for "repository missing": file://
        // says "could not find repository" or "failed to resolve path",
        // smart HTTP surfaces the 404 and
        // most SSH servers print "does not appear to be a git repository"
        // or "not found" on stderr.
        if lower.contains("could not find repository")
            || lower.contains("failed to resolve path")
            || lower.contains("status code: 404")
            || lower.contains("does not appear to be a git repository")
            || lower.contains("repository not found")
        {
            return GitError::RepoNotFound {
                url: url.to_owned(),
                message,
            };
        }
        if lower.contains("status code: 401") || lower.contains("status code: 403") {
            return GitError::AuthFailed {
                url: url.to_owned(),
                reason: message,
            };
        }
        match source.class() {
            ErrorClass::Net
            | ErrorClass::Http
            | ErrorClass::Ssh
            | ErrorClass::Ssl
            | ErrorClass::Os => GitError::Network {
                op,
                url: url.to_owned(),
                message,
                source: Some(source),
            },
            _ => GitError::Git {
                op,
                message,
                source,
            },
        }
    }
}

/// ENOSPC or EDQUOT (the standard library maps both OS codes to these kinds).
fn io_out_of_space(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// Whether a system error text is ENOSPC or EDQUOT (glibc and musl wordings).
fn message_out_of_space(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower.contains("no space left on device") || lower.contains("quota exceeded")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_are_stable() {
        let e = GitError::PushRejected {
            branch: "main".into(),
            message: "non-fast-forward".into(),
        };
        assert_eq!(e.category(), "push_rejected");
        assert!(e.is_transient());
        let e = GitError::UnknownHostKey { host: "h".into() };
        assert_eq!(e.category(), "unknown_host_key");
        assert!(!e.is_transient());
        let e = GitError::remote(
            "fetch",
            "https://x",
            git2::Error::new(ErrorCode::Auth, ErrorClass::Http, "nope"),
        );
        assert_eq!(e.category(), "auth");
        let e = GitError::remote(
            "fetch",
            "https://x",
            git2::Error::new(
                ErrorCode::GenericError,
                ErrorClass::Http,
                "unexpected http status code: 404",
            ),
        );
        assert_eq!(e.category(), "not_found");
        let e = GitError::remote(
            "fetch",
            "https://x",
            git2::Error::new(
                ErrorCode::GenericError,
                ErrorClass::Net,
                "failed to resolve address",
            ),
        );
        assert_eq!(e.category(), "network");
    }

    #[test]
    fn out_of_space_becomes_cache_full_naming_the_cache() {
        let cache = Path::new("/var/cache/imagewatch/git");
        // libgit2 writing a fetched pack: class Os, strerror appended.
        let e = GitError::remote(
            "fetch",
            "https://git.example/r.git",
            git2::Error::new(
                ErrorCode::GenericError,
                ErrorClass::Os,
                "cannot extend packfile '/var/cache/imagewatch/git/r/objects/pack/x.pack': No space left on device",
            ),
        );
        assert_eq!(e.category(), "network", "libgit2 alone cannot tell");
        let e = e.in_cache(cache);
        assert_eq!(e.category(), "cache_full");
        assert!(e.is_transient());
        let text = e.to_string();
        assert!(
            text.starts_with(
                "clone cache /var/cache/imagewatch/git has no space left: cannot extend packfile"
            ),
            "{text}"
        );
        // A loose object of a commit.
        let e = GitError::git(
            "write blob",
            git2::Error::new(
                ErrorCode::GenericError,
                ErrorClass::Os,
                "failed to write object: Disk quota exceeded",
            ),
        )
        .in_cache(cache);
        assert_eq!(e.category(), "cache_full");
        // Creating the clone directory.
        let e = GitError::io(
            "/var/cache/imagewatch/git",
            std::io::Error::from(std::io::ErrorKind::StorageFull),
        );
        assert!(e.is_out_of_space());
        let e = e.in_cache(cache);
        assert!(matches!(&e, GitError::CacheFull { path, .. } if path == cache));
        assert!(e.duplicate().is_out_of_space());
        // Applying twice keeps the first directory.
        let again = e.in_cache(Path::new("/elsewhere"));
        assert!(matches!(&again, GitError::CacheFull { path, .. } if path == cache));
    }

    #[test]
    fn other_failures_are_not_cache_full() {
        let cache = Path::new("/c");
        // The remote's disk is full: its words arrive over the wire, not as our OS error.
        let remote = GitError::remote(
            "push",
            "https://git.example/r.git",
            git2::Error::new(
                ErrorCode::GenericError,
                ErrorClass::Net,
                "remote: fatal: write error: No space left on device",
            ),
        );
        assert_eq!(remote.in_cache(cache).category(), "network");
        let rejected = GitError::PushRejected {
            branch: "main".into(),
            message: "unpack failed: No space left on device".into(),
        };
        assert_eq!(rejected.in_cache(cache).category(), "push_rejected");
        let denied = GitError::io(
            "/c",
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        );
        assert_eq!(denied.in_cache(cache).category(), "other");
        let refused = GitError::remote(
            "fetch",
            "https://git.example/r.git",
            git2::Error::new(
                ErrorCode::GenericError,
                ErrorClass::Os,
                "failed to connect to git.example: Connection refused",
            ),
        );
        assert_eq!(refused.in_cache(cache).category(), "network");
    }

    #[test]
    fn duplicates_keep_variant_and_message() {
        let errors = [
            GitError::PushRejected {
                branch: "main".into(),
                message: "stale".into(),
            },
            GitError::remote(
                "fetch",
                "https://x",
                git2::Error::new(ErrorCode::Auth, ErrorClass::Http, "nope"),
            ),
            GitError::io("/tmp/x", std::io::Error::other("disk full")),
            GitError::io("/tmp/x", std::io::Error::from_raw_os_error(28)),
            GitError::CacheFull {
                path: "/tmp/x".into(),
                message: "No space left on device".into(),
            },
            GitError::apply("bad yaml"),
            GitError::PushBranchNotOurs {
                branch: "imagewatch/x".into(),
                commit: Oid::ZERO_SHA1,
                reason: "was authored by someone@example.com".into(),
            },
        ];
        for e in errors {
            let d = e.duplicate();
            assert_eq!(d.to_string(), e.to_string());
            assert_eq!(d.category(), e.category());
            assert_eq!(d.is_transient(), e.is_transient());
            assert_eq!(d.is_out_of_space(), e.is_out_of_space());
        }
    }
}
