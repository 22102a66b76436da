//! Credentials and host verification for the git writer (read current state
//! from Git, commit and push edits).
//!
//! Every network operation (ls-remote, fetch, push) builds its libgit2
//! callbacks through a [`Connection`], which
//!
//! * answers credential requests from [`GitAuth`] and gives up as soon as
//!   the remote asks again for the same URL (it rejected what we sent; a
//!   bad token must not turn into an endless retry loop inside libgit2),
//! * verifies SSH host keys against the known_hosts text from the secret
//!   and refuses unknown or changed keys (fail closed), and
//! * remembers *why* a callback aborted, because libgit2 only reports a
//!   generic "callback failed" to the caller.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

use git2::{CertificateCheckStatus, Cred, CredentialType, RemoteCallbacks};

use super::error::GitError;
use super::known_hosts::{KnownHosts, Verdict};
use super::url::{RemoteUrl, Transport};

/// How to authenticate to a remote.
///
/// `Debug` never prints secrets.
#[derive(Clone, Default)]
pub enum GitAuth {
    /// No credentials; the remote must allow anonymous access. Only
    /// suitable for `https://` and `file://` remotes (SSH always needs a
    /// key and known_hosts).
    #[default]
    Anonymous,
    /// HTTPS basic auth. For token-based providers the token is the
    /// password and the username is whatever the provider expects (for
    /// example `x-access-token` or `oauth2`).
    Basic { username: String, password: String },
    /// SSH public key auth.
    Ssh {
        /// Private key text (PEM or OpenSSH format).
        private_key: String,
        /// Passphrase of an encrypted private key.
        passphrase: Option<String>,
        /// known_hosts file contents; the server's host key must be listed
        /// here or the connection is refused.
        known_hosts: String,
    },
}

impl fmt::Debug for GitAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GitAuth::Anonymous => f.write_str("Anonymous"),
            GitAuth::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            GitAuth::Ssh {
                passphrase,
                known_hosts,
                ..
            } => f
                .debug_struct("Ssh")
                .field("private_key", &"<redacted>")
                .field("passphrase", &passphrase.as_ref().map(|_| "<redacted>"))
                .field("known_hosts_lines", &known_hosts.lines().count())
                .finish(),
        }
    }
}

impl GitAuth {
    /// SHA-256 over the kind and material of these credentials (never the credentials
    /// themselves): the identity that keys clones, recent fetches and writer tasks, so that
    /// what one credential fetched is never read on behalf of another.
    pub fn fingerprint(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        let mut field = |s: &str| {
            h.update((s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        };
        match self {
            GitAuth::Anonymous => field("anonymous"),
            GitAuth::Basic { username, password } => {
                field("basic");
                field(username);
                field(password);
            }
            GitAuth::Ssh {
                private_key,
                passphrase,
                known_hosts,
            } => {
                field("ssh");
                field(private_key);
                field(passphrase.as_deref().unwrap_or(""));
                field(known_hosts);
            }
        }
        h.finalize().into()
    }
}

/// Per-operation state shared by the callbacks of one libgit2 call.
#[derive(Default)]
struct CallbackState {
    /// Credential requests seen per URL.
    credential_requests: HashMap<String, u32>,
    /// Why a callback aborted the operation, if one did.
    failure: Option<GitError>,
}

/// Everything needed to talk to one remote for one operation.
pub struct Connection<'a> {
    auth: &'a GitAuth,
    url: &'a str,
    remote: &'a RemoteUrl,
    known_hosts: KnownHosts,
    state: RefCell<CallbackState>,
}

/// Remotes already warned about, so the plain-http warning is logged once per remote and
/// not on every fetch and push.
static PLAIN_HTTP_WARNED: WarnedOnce = WarnedOnce::new();

/// A set of keys each of which is reported once per process (bounded: after
/// [`WarnedOnce::MAX`] keys, new ones are reported again rather than remembered).
pub struct WarnedOnce(std::sync::Mutex<Option<std::collections::HashSet<String>>>);

impl WarnedOnce {
    const MAX: usize = 1024;

    pub const fn new() -> Self {
        Self(std::sync::Mutex::new(None))
    }

    /// Whether `key` is reported for the first time.
    pub fn first(&self, key: &str) -> bool {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let seen = seen.get_or_insert_with(Default::default);
        if seen.contains(key) {
            return false;
        }
        if seen.len() < Self::MAX {
            seen.insert(key.to_owned());
        }
        true
    }
}

impl<'a> Connection<'a> {
    pub fn new(auth: &'a GitAuth, url: &'a str, remote: &'a RemoteUrl) -> Self {
        let known_hosts = match auth {
            GitAuth::Ssh { known_hosts, .. } => KnownHosts::parse(known_hosts),
            // No known_hosts configured means no SSH host is trusted.
            _ => KnownHosts::default(),
        };
        if remote.transport == Transport::Http
            && matches!(auth, GitAuth::Basic { .. })
            && PLAIN_HTTP_WARNED.first(url)
        {
            tracing::warn!(
                url,
                "sending git credentials over plain http; use https to keep them secret \
                 (said once per remote)"
            );
        }
        Connection {
            auth,
            url,
            remote,
            known_hosts,
            state: RefCell::new(CallbackState::default()),
        }
    }

    /// Callbacks for a fetch/push/connect of this connection's remote.
    pub fn callbacks(&self) -> RemoteCallbacks<'_> {
        let mut cb = RemoteCallbacks::new();
        cb.credentials(|url, username_from_url, allowed| {
            self.credentials(url, username_from_url, allowed)
        });
        cb.certificate_check(|cert, host| {
            let Some(hostkey) = cert.as_hostkey() else {
                // TLS: keep libgit2's own verdict (system trust store).
                return Ok(CertificateCheckStatus::CertificatePassthrough);
            };
            let port = self.remote.ssh_port();
            let shown = if port == 22 {
                host.to_owned()
            } else {
                format!("[{host}]:{port}")
            };
            let Some(key) = hostkey.hostkey() else {
                // Only hashes were offered; we cannot compare against
                // known_hosts without the raw key.
                return Err(self.fail(GitError::UnknownHostKey { host: shown }));
            };
            let key_type = hostkey.hostkey_type().map(|t| t.name());
            match self.known_hosts.check(host, port, key_type, key) {
                Verdict::Trusted => Ok(CertificateCheckStatus::CertificateOk),
                Verdict::Unknown => {
                    if self.known_hosts.hashed_lines() > 0 {
                        tracing::warn!(
                            host = %shown,
                            hashed_lines = self.known_hosts.hashed_lines(),
                            "known_hosts has hashed (|1|...) lines, which are not supported; \
                             list the host in plain form"
                        );
                    }
                    Err(self.fail(GitError::UnknownHostKey { host: shown }))
                }
                Verdict::Mismatch | Verdict::Revoked => Err(self.fail(GitError::HostKeyMismatch {
                    host: shown,
                    key_type: key_type.unwrap_or("unknown").to_owned(),
                })),
            }
        });
        cb
    }

    fn credentials(
        &self,
        url: &str,
        username_from_url: Option<&str>,
        allowed: CredentialType,
    ) -> Result<Cred, git2::Error> {
        // SSH first asks for just a user name when the URL has none; that
        // is not an authentication attempt, so it is not counted.
        if allowed == CredentialType::USERNAME {
            return Cred::username(username_from_url.unwrap_or("git"));
        }
        let attempt = {
            let mut state = self.state.borrow_mut();
            let n = state.credential_requests.entry(url.to_owned()).or_default();
            *n += 1;
            *n
        };
        if attempt > 1 {
            return Err(self.fail(
                self.auth_failed("the remote rejected the configured credentials".to_owned()),
            ));
        }
        match self.auth {
            GitAuth::Anonymous => Err(self.fail(self.auth_failed(
                "the remote requires credentials, but none are configured".to_owned(),
            ))),
            GitAuth::Basic { username, password } => {
                if !allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
                    return Err(self.fail(self.auth_failed(format!(
                        "the remote does not accept username/password (it offers {allowed:?})"
                    ))));
                }
                let user = match (username.as_str(), username_from_url) {
                    ("", Some(u)) => u,
                    ("", None) => "git",
                    (u, _) => u,
                };
                Cred::userpass_plaintext(user, password)
            }
            GitAuth::Ssh {
                private_key,
                passphrase,
                ..
            } => {
                if !allowed.intersects(CredentialType::SSH_MEMORY | CredentialType::SSH_KEY) {
                    return Err(self.fail(self.auth_failed(format!(
                        "the remote does not accept an SSH key (it offers {allowed:?})"
                    ))));
                }
                let user = username_from_url.unwrap_or("git");
                Cred::ssh_key_from_memory(user, None, private_key, passphrase.as_deref()).map_err(
                    |e| {
                        self.fail(self.auth_failed(format!(
                            "the SSH private key cannot be used: {}",
                            e.message()
                        )))
                    },
                )
            }
        }
    }

    fn auth_failed(&self, reason: String) -> GitError {
        GitError::AuthFailed {
            url: self.url.to_owned(),
            reason,
        }
    }

    /// Record why a callback aborts and produce the error libgit2 expects.
    fn fail(&self, err: GitError) -> git2::Error {
        let e = git2::Error::from_str(&err.to_string());
        self.state.borrow_mut().failure = Some(err);
        e
    }

    /// Turn a failed libgit2 network call into a [`GitError`], preferring
    /// the precise reason a callback recorded.
    pub fn error(&self, op: &'static str, err: git2::Error) -> GitError {
        match self.state.borrow_mut().failure.take() {
            Some(recorded) => recorded,
            None => GitError::remote(op, self.url, err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_http_warning_is_given_once_per_remote() {
        let warned = WarnedOnce::new();
        assert!(warned.first("http://git.example/a.git"));
        assert!(!warned.first("http://git.example/a.git"));
        assert!(warned.first("http://git.example/b.git"));
        assert!(!warned.first("http://git.example/b.git"));
    }

    #[test]
    fn debug_redacts_secrets() {
        let a = GitAuth::Basic {
            username: "bot".into(),
            password: "hunter2".into(),
        };
        let s = format!("{a:?}");
        assert!(s.contains("bot") && !s.contains("hunter2"), "{s}");
        let a = GitAuth::Ssh {
            private_key: "-----BEGIN OPENSSH PRIVATE KEY----- secretbits".into(),
            passphrase: Some("pp".into()),
            known_hosts: "h ssh-ed25519 AAAA\n".into(),
        };
        let s = format!("{a:?}");
        assert!(!s.contains("secretbits") && !s.contains("\"pp\""), "{s}");
    }

    #[test]
    fn gives_up_on_second_credential_request() {
        let auth = GitAuth::Basic {
            username: "bot".into(),
            password: "bad".into(),
        };
        let url = "https://git.example.com/org/repo.git";
        let remote = RemoteUrl::parse(url).unwrap();
        let conn = Connection::new(&auth, url, &remote);
        assert!(
            conn.credentials(url, None, CredentialType::USER_PASS_PLAINTEXT)
                .is_ok()
        );
        assert!(
            conn.credentials(url, None, CredentialType::USER_PASS_PLAINTEXT)
                .is_err()
        );
        let err = conn.error("fetch", git2::Error::from_str("callback error"));
        assert!(matches!(err, GitError::AuthFailed { .. }), "{err}");
        assert_eq!(err.category(), "auth");
    }

    #[test]
    fn anonymous_refuses_credential_requests() {
        let auth = GitAuth::Anonymous;
        let url = "https://git.example.com/org/repo.git";
        let remote = RemoteUrl::parse(url).unwrap();
        let conn = Connection::new(&auth, url, &remote);
        assert!(
            conn.credentials(url, None, CredentialType::USER_PASS_PLAINTEXT)
                .is_err()
        );
        let err = conn.error("fetch", git2::Error::from_str("callback error"));
        assert!(err.to_string().contains("none are configured"), "{err}");
    }
}
