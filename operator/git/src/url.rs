//! Remote URL parsing for the git writer (read current state from Git,
//! commit and push edits).
//!
//! libgit2 parses URLs itself; we parse them too because two decisions are
//! ours: which known_hosts name an SSH connection must match (that depends
//! on the port, which libgit2 does not hand to the certificate callback),
//! and which cache directory a remote gets (readable, and never containing
//! secrets).

use sha2::{Digest, Sha256};

use super::error::GitError;

/// How the remote is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Https,
    Http,
    Ssh,
    File,
}

/// The parts of a remote URL this module cares about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteUrl {
    pub transport: Transport,
    pub user: Option<String>,
    /// Lower-cased host name, without IPv6 brackets; empty for `file://`.
    pub host: String,
    pub port: Option<u16>,
    /// Path on the server, without the leading slash of scheme URLs.
    pub path: String,
}

impl RemoteUrl {
    /// Parse `https://`, `http://`, `ssh://`, `file://` and scp-like
    /// `user@host:path` remotes.
    ///
    /// Passwords inside the URL are refused: they would end up in the cache
    /// directory's config, in logs and in error messages. Credentials belong
    /// in [`super::GitAuth`].
    pub fn parse(url: &str) -> Result<Self, GitError> {
        let invalid = |reason: &str| GitError::InvalidUrl {
            url: redact(url),
            reason: reason.to_owned(),
        };
        if url.is_empty() {
            return Err(invalid("empty"));
        }
        if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(invalid("contains whitespace or control characters"));
        }

        if let Some((scheme, rest)) = url.split_once("://") {
            let transport = match scheme.to_ascii_lowercase().as_str() {
                "https" => Transport::Https,
                "http" => Transport::Http,
                "ssh" | "git+ssh" | "ssh+git" => Transport::Ssh,
                "file" => Transport::File,
                _ => return Err(invalid("unsupported scheme (use https, http, ssh or file)")),
            };
            let (authority, path) = match rest.find('/') {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, ""),
            };
            if transport == Transport::File {
                if !authority.is_empty() && !authority.eq_ignore_ascii_case("localhost") {
                    return Err(invalid("file:// URLs must not name a host"));
                }
                if path.is_empty() {
                    return Err(invalid("missing path"));
                }
                return Ok(RemoteUrl {
                    transport,
                    user: None,
                    host: String::new(),
                    port: None,
                    path: path.to_owned(),
                });
            }
            let (user, hostport) = match authority.rsplit_once('@') {
                Some((userinfo, hostport)) => {
                    if userinfo.contains(':') {
                        return Err(invalid(
                            "embedded passwords are not allowed; put credentials in the auth secret",
                        ));
                    }
                    (Some(userinfo.to_owned()), hostport)
                }
                None => (None, authority),
            };
            let (host, port) = split_host_port(hostport).map_err(invalid)?;
            if path.is_empty() {
                return Err(invalid("missing repository path"));
            }
            return Ok(RemoteUrl {
                transport,
                user,
                host,
                port,
                path: path.to_owned(),
            });
        }

        // scp-like syntax: [user@]host:path, where "host" contains no '/'.
        // Git treats anything with a '/' before the first ':' as a local
        // path; we do not support bare local paths (use file://).
        let (authority, path) = split_scp(url)
            .ok_or_else(|| invalid("not a URL; use https://, ssh://, file:// or user@host:path"))?;
        let (user, host) = match authority.rsplit_once('@') {
            Some((user, host)) => (Some(user.to_owned()), host),
            None => (None, authority),
        };
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() {
            return Err(invalid("missing host"));
        }
        if path.is_empty() {
            return Err(invalid("missing repository path"));
        }
        Ok(RemoteUrl {
            transport: Transport::Ssh,
            user,
            host: host.to_ascii_lowercase(),
            port: None,
            path: path.trim_start_matches('/').to_owned(),
        })
    }

    /// Port used for SSH connections (22 unless the URL says otherwise).
    pub fn ssh_port(&self) -> u16 {
        self.port.unwrap_or(22)
    }

    /// Directory name for this remote in the clone cache: readable
    /// `host_path` plus a short hash of the full URL and the credential
    /// identity, so that two URLs that sanitize to the same text, and two
    /// credentials for one URL, still get separate clones. `credentials`: the fingerprint of
    /// the credential identity (`GitAuth::fingerprint`).
    pub fn cache_dir_name(&self, raw_url: &str, credentials: [u8; 32]) -> String {
        let mut readable = String::new();
        let host = if self.transport == Transport::File {
            "local"
        } else {
            &self.host
        };
        let mut last_was_sep = false;
        for c in host
            .chars()
            .chain(std::iter::once('_'))
            .chain(self.path.chars())
        {
            let c = if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            };
            if c == '_' && last_was_sep {
                continue;
            }
            last_was_sep = c == '_';
            readable.push(c);
        }
        let readable: String = readable.trim_matches(['_', '.']).chars().take(80).collect();
        let mut hasher = Sha256::new();
        hasher.update((raw_url.len() as u64).to_le_bytes());
        hasher.update(raw_url.as_bytes());
        hasher.update(credentials);
        let digest = hasher.finalize();
        let short = hex::encode(&digest[..8]);
        if readable.is_empty() {
            short
        } else {
            format!("{readable}-{short}")
        }
    }
}

/// Whether a tenant's object may name `url` as its Git repository: only encrypted network
/// remotes (`https://`, `ssh://`, scp-like `user@host:path`). Plain `http://` would send the
/// repository's credentials and content in the clear; `file://` and local paths would read
/// the operator's own disk (other tenants' clones among it); `ext::` and other transports
/// would run commands. The CRD refuses these at apply; this also covers URLs from elsewhere
/// (an Argo CD Application's `repoURL`, objects stored before that rule).
pub fn check_tenant_url(url: &str) -> std::result::Result<(), String> {
    const REFUSED: &str = "is refused: use https://host/…, ssh://[user@]host/… or user@host:path (file://, local paths and other transports are not allowed)";
    let remote = RemoteUrl::parse(url).map_err(|_| format!("Git URL {} {REFUSED}", redact(url)))?;
    let host_ok = !remote.host.is_empty()
        && !remote.host.starts_with('-')
        && !remote.host.contains(['/', '\\']);
    // `..` would let a URL that starts with an allowed prefix name another repository.
    let dotted = remote.path.split('/').any(|seg| {
        let seg = seg.to_ascii_lowercase().replace("%2e", ".");
        seg == "." || seg == ".."
    });
    if dotted {
        return Err(format!(
            "Git URL {} is refused: its path must not contain '.' or '..' segments",
            redact(url)
        ));
    }
    match remote.transport {
        Transport::File => Err(format!("Git URL {} {REFUSED}", redact(url))),
        Transport::Http => Err(format!(
            "Git URL {} is refused: plain http:// sends the repository's credentials and \
             content in the clear; use https:// (or ssh://, user@host:path)",
            redact(url)
        )),
        _ if !host_ok => Err(format!("Git URL {} {REFUSED}", redact(url))),
        // scp-like needs a user: `host:path` is ambiguous with local paths on some clients.
        Transport::Ssh if !url.contains("://") && remote.user.is_none() => {
            Err(format!("Git URL {} {REFUSED}", redact(url)))
        }
        _ => Ok(()),
    }
}

/// Split `host[:port]` or `[v6addr][:port]`.
fn split_host_port(s: &str) -> Result<(String, Option<u16>), &'static str> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or("unterminated '[' in host")?;
        match after {
            "" => (host, None),
            _ => {
                let port = after.strip_prefix(':').ok_or("garbage after ']' in host")?;
                (host, Some(port))
            }
        }
    } else {
        match s.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err("missing host");
    }
    let port = match port {
        None => None,
        Some(p) => Some(p.parse::<u16>().map_err(|_| "invalid port")?),
    };
    Ok((host.to_ascii_lowercase(), port))
}

/// Split scp-like `authority:path`, honouring `[v6]` brackets in the host.
fn split_scp(url: &str) -> Option<(&str, &str)> {
    let search_from = match (url.find('['), url.find(']')) {
        (Some(open), Some(close)) if open < close => close,
        _ => 0,
    };
    let colon = search_from + url[search_from..].find(':')?;
    let (authority, path) = (&url[..colon], &url[colon + 1..]);
    if authority.contains('/') {
        return None;
    }
    Some((authority, path))
}

/// The URL with any userinfo password replaced, for error messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rsplit_once('@') {
        Some((userinfo, hostport)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{hostport}{}", &rest[authority_end..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        let u = RemoteUrl::parse("https://github.com/org/repo.git").unwrap();
        assert_eq!(u.transport, Transport::Https);
        assert_eq!(u.host, "github.com");
        assert_eq!(u.port, None);
        assert_eq!(u.path, "org/repo.git");

        let u = RemoteUrl::parse("ssh://git@Git.Example.com:2222/org/repo.git").unwrap();
        assert_eq!(u.transport, Transport::Ssh);
        assert_eq!(u.user.as_deref(), Some("git"));
        assert_eq!(u.host, "git.example.com");
        assert_eq!(u.ssh_port(), 2222);

        let u = RemoteUrl::parse("git@github.com:org/repo.git").unwrap();
        assert_eq!(u.transport, Transport::Ssh);
        assert_eq!(u.user.as_deref(), Some("git"));
        assert_eq!(u.host, "github.com");
        assert_eq!(u.ssh_port(), 22);
        assert_eq!(u.path, "org/repo.git");

        let u = RemoteUrl::parse("ssh://git@[::1]:2200/repo").unwrap();
        assert_eq!(u.host, "::1");
        assert_eq!(u.port, Some(2200));

        let u = RemoteUrl::parse("git@[fe80::1]:repo.git").unwrap();
        assert_eq!(u.host, "fe80::1");
        assert_eq!(u.path, "repo.git");

        let u = RemoteUrl::parse("file:///tmp/x/remote.git").unwrap();
        assert_eq!(u.transport, Transport::File);
        assert_eq!(u.path, "tmp/x/remote.git");
    }

    #[test]
    fn rejects_bad_urls() {
        for bad in [
            "",
            "/local/path",
            "./relative",
            "ftp://host/x",
            "https://user:hunter2@host/x",
            "https://host:notaport/x",
            "https://host",
            "file://otherhost/x",
            "https://host/with space",
        ] {
            let err = RemoteUrl::parse(bad).unwrap_err();
            assert!(matches!(err, GitError::InvalidUrl { .. }), "{bad}: {err}");
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn cache_dir_names_are_readable_and_distinct() {
        let a = "https://github.com/org/repo.git";
        let b = "https://github.com/org/repo-git";
        let anonymous = super::super::GitAuth::Anonymous.fingerprint();
        let na = RemoteUrl::parse(a).unwrap().cache_dir_name(a, anonymous);
        let nb = RemoteUrl::parse(b).unwrap().cache_dir_name(b, anonymous);
        assert!(na.starts_with("github.com_org_repo.git-"), "{na}");
        assert_ne!(na, nb);
        assert!(
            na.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        );
        let f = "file:///tmp/a/../b.git";
        let nf = RemoteUrl::parse(f).unwrap().cache_dir_name(f, anonymous);
        assert!(nf.starts_with("local_tmp_a_.._b.git-"), "{nf}");
    }

    #[test]
    fn each_credential_gets_its_own_clone() {
        let url = "https://git.example.com/team-b/manifests.git";
        let remote = RemoteUrl::parse(url).unwrap();
        let basic = |password: &str| super::super::GitAuth::Basic {
            username: "git".into(),
            password: password.into(),
        };
        let anonymous = remote.cache_dir_name(url, super::super::GitAuth::Anonymous.fingerprint());
        let b = remote.cache_dir_name(url, basic("team-b-token").fingerprint());
        let a = remote.cache_dir_name(url, basic("team-a-token").fingerprint());
        assert_ne!(anonymous, b);
        assert_ne!(a, b);
        assert_eq!(
            b,
            remote.cache_dir_name(url, basic("team-b-token").fingerprint())
        );
        assert!(!b.contains("team-b-token"));
    }

    #[test]
    fn tenants_may_name_network_remotes_only() {
        for good in [
            "https://github.com/org/repo.git",
            "https://127.0.0.1:8443/repo.git",
            "ssh://git@github.com/org/repo.git",
            "git@github.com:org/repo.git",
        ] {
            assert_eq!(check_tenant_url(good), Ok(()), "{good}");
        }
        for bad in [
            "file:///var/cache/imagewatch/git/x",
            "/var/cache/imagewatch/git/x",
            "./repo",
            "ext::sh -c touch% /tmp/pwned",
            "git://github.com/org/repo.git",
            "https://-oProxyCommand=x/repo",
            "fd::17",
            "https://git.example.com/team-a/../team-b/m.git",
            "https://git.example.com/team-a/%2E%2e/team-b/m.git",
        ] {
            let err = check_tenant_url(bad).unwrap_err();
            assert!(
                err.contains("refused") || err.contains("not"),
                "{bad}: {err}"
            );
        }
        for plain in [
            "http://127.0.0.1:8080/repo.git",
            "HTTP://git.example.com/org/repo.git",
            "http://git@git.example.com/org/repo.git",
        ] {
            let err = check_tenant_url(plain).unwrap_err();
            assert!(
                err.contains("plain http:// sends") && err.contains("use https://"),
                "{plain}: {err}"
            );
        }
    }
}
