//! known_hosts parsing and host key matching for the git writer (read
//! current state from Git, commit and push edits).
//!
//! libgit2 would otherwise consult `~/.ssh/known_hosts` of the operator's
//! container, which is empty or absent; instead the host keys come from the
//! same secret as the SSH key, and the certificate callback in `auth.rs`
//! asks [`KnownHosts::check`] for a verdict. Anything other than
//! [`Verdict::Trusted`] refuses the connection (fail closed).
//!
//! Supported: plain host patterns, comma-separated lists, `[host]:port`
//! for non-default ports, `*`/`?` wildcards, `!` negation and the
//! `@revoked` marker. Not supported (those lines never trust anything):
//! hashed host names (`|1|salt|hash`, which needs HMAC-SHA1) and
//! `@cert-authority` lines (libssh2 does not present host certificates).
//! A hashed `@revoked` line revokes its key for every host, since we cannot
//! tell which host it names.

/// Outcome of checking a presented host key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A line for this host carries exactly this key.
    Trusted,
    /// No usable line names this host.
    Unknown,
    /// Lines name this host, but none with this key.
    Mismatch,
    /// The key is listed as `@revoked` for this host.
    Revoked,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    None,
    Revoked,
}

#[derive(Debug, Clone)]
struct Entry {
    marker: Marker,
    /// `(negated, lower-cased glob)` pairs.
    patterns: Vec<(bool, String)>,
    key_type: String,
    key: Vec<u8>,
}

/// Parsed known_hosts contents.
#[derive(Debug, Clone, Default)]
pub struct KnownHosts {
    entries: Vec<Entry>,
    /// Hashed lines we could not use; reported so that an "unknown host"
    /// error can be explained.
    hashed_lines: usize,
    /// Keys of hashed `@revoked` lines.
    revoked_anywhere: Vec<Vec<u8>>,
}

impl KnownHosts {
    /// Parse known_hosts text. Malformed lines are skipped, as OpenSSH
    /// does; skipping can only make fewer hosts trusted.
    pub fn parse(text: &str) -> Self {
        let mut out = KnownHosts::default();
        for (lineno, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            let Some(mut first) = fields.next() else {
                continue;
            };
            let marker = match first {
                "@revoked" => Marker::Revoked,
                "@cert-authority" => continue,
                m if m.starts_with('@') => {
                    tracing::warn!(line = lineno + 1, marker = m, "known_hosts: unknown marker");
                    continue;
                }
                _ => Marker::None,
            };
            if marker != Marker::None {
                let Some(next) = fields.next() else {
                    continue;
                };
                first = next;
            }
            let (Some(key_type), Some(key_b64)) = (fields.next(), fields.next()) else {
                tracing::warn!(line = lineno + 1, "known_hosts: line has too few fields");
                continue;
            };
            let Some(key) = base64_decode(key_b64) else {
                tracing::warn!(line = lineno + 1, "known_hosts: key is not valid base64");
                continue;
            };
            if first.starts_with('|') {
                out.hashed_lines += 1;
                // We cannot tell which host a hashed revocation is for, so
                // it revokes the key for every host: trusting less is safe.
                if marker == Marker::Revoked {
                    out.revoked_anywhere.push(key);
                }
                continue;
            }
            let patterns = first
                .split(',')
                .filter(|p| !p.is_empty())
                .map(|p| match p.strip_prefix('!') {
                    Some(neg) => (true, neg.to_ascii_lowercase()),
                    None => (false, p.to_ascii_lowercase()),
                })
                .collect();
            out.entries.push(Entry {
                marker,
                patterns,
                key_type: key_type.to_owned(),
                key,
            });
        }
        out
    }

    /// Number of hashed (`|1|...`) lines that were ignored.
    pub fn hashed_lines(&self) -> usize {
        self.hashed_lines
    }

    /// Check the raw host key blob (SSH wire format, exactly what the
    /// base64 field of a known_hosts line decodes to) that `host` presented
    /// on `port`.
    ///
    /// Name matching follows OpenSSH: on port 22 the name looked up is
    /// `host`; on any other port it is `[host]:port`, so a plain `host` line
    /// does not vouch for a different port.
    pub fn check(&self, host: &str, port: u16, key_type: Option<&str>, key: &[u8]) -> Verdict {
        let host = host.to_ascii_lowercase();
        let name = if port == 22 {
            host
        } else {
            format!("[{host}]:{port}")
        };
        let same_key = |e: &Entry| {
            // The blob embeds its own type name, so equal blobs already
            // mean equal types; the explicit check just refuses lines whose
            // declared type contradicts what the server said.
            e.key == key && key_type.is_none_or(|t| t == e.key_type)
        };
        let matching: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| host_matches(&e.patterns, &name))
            .collect();
        if self.revoked_anywhere.iter().any(|k| k == key)
            || matching
                .iter()
                .any(|e| e.marker == Marker::Revoked && same_key(e))
        {
            return Verdict::Revoked;
        }
        let plain: Vec<&&Entry> = matching
            .iter()
            .filter(|e| e.marker == Marker::None)
            .collect();
        if plain.iter().any(|e| same_key(e)) {
            Verdict::Trusted
        } else if plain.is_empty() {
            Verdict::Unknown
        } else {
            Verdict::Mismatch
        }
    }
}

/// A line applies when some positive pattern matches and no negated one
/// does.
fn host_matches(patterns: &[(bool, String)], name: &str) -> bool {
    let mut positive = false;
    for (negated, pattern) in patterns {
        if glob_match(pattern.as_bytes(), name.as_bytes()) {
            if *negated {
                return false;
            }
            positive = true;
        }
    }
    positive
}

/// `*` and `?` wildcard match, iterative with single backtrack point.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Strict standard-alphabet base64 decoder (padding optional). Host keys
/// are the only base64 we read, so a dependency is not worth it.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let trimmed = s.trim_end_matches('=');
    if s.len() - trimmed.len() > 2 || trimmed.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(trimmed.len() * 3 / 4);
    for chunk in trimmed.as_bytes().chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= value(c)? << (18 - 6 * i);
        }
        out.push((acc >> 16) as u8);
        if chunk.len() > 2 {
            out.push((acc >> 8) as u8);
        }
        if chunk.len() > 3 {
            out.push(acc as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real ed25519 host key blob (github.com's published key).
    const GH_ED25519: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
    // Any other valid blob, to play an impostor.
    const OTHER_ED25519: &str =
        "AAAAC3NzaC1lZDI1NTE5AAAAIPLFGo7f6/GhXpeAA5rcrixQ1pEHFIB76DTnjqraxHXO";

    fn key(b64: &str) -> Vec<u8> {
        base64_decode(b64).expect("test key decodes")
    }

    #[test]
    fn base64_roundtrip_of_known_vectors() {
        assert_eq!(base64_decode("").unwrap(), b"");
        assert_eq!(base64_decode("Zg==").unwrap(), b"f");
        assert_eq!(base64_decode("Zm8=").unwrap(), b"fo");
        assert_eq!(base64_decode("Zm9v").unwrap(), b"foo");
        assert_eq!(base64_decode("Zm9vYg").unwrap(), b"foob");
        assert!(base64_decode("Zm9v!").is_none());
        assert!(base64_decode("Z").is_none());
        assert!(base64_decode("Zg===").is_none());
        let k = key(GH_ED25519);
        // SSH wire format: u32 length + "ssh-ed25519" + u32 length + 32 bytes.
        assert_eq!(&k[4..15], b"ssh-ed25519");
        assert_eq!(k.len(), 4 + 11 + 4 + 32);
    }

    #[test]
    fn plain_host_on_default_port() {
        let kh = KnownHosts::parse(&format!(
            "# comment\n\ngithub.com ssh-ed25519 {GH_ED25519}\n"
        ));
        let k = key(GH_ED25519);
        assert_eq!(
            kh.check("github.com", 22, Some("ssh-ed25519"), &k),
            Verdict::Trusted
        );
        assert_eq!(
            kh.check("GitHub.COM", 22, Some("ssh-ed25519"), &k),
            Verdict::Trusted
        );
        assert_eq!(
            kh.check("github.com", 22, Some("ssh-ed25519"), &key(OTHER_ED25519)),
            Verdict::Mismatch
        );
        assert_eq!(
            kh.check("gitlab.com", 22, Some("ssh-ed25519"), &k),
            Verdict::Unknown
        );
        // A plain entry does not vouch for another port.
        assert_eq!(
            kh.check("github.com", 2222, Some("ssh-ed25519"), &k),
            Verdict::Unknown
        );
        // Declared type contradicting the server's type is not a match.
        assert_eq!(
            kh.check("github.com", 22, Some("ssh-rsa"), &k),
            Verdict::Mismatch
        );
    }

    #[test]
    fn bracketed_port_form() {
        let kh = KnownHosts::parse(&format!(
            "[git.example.com]:2222 ssh-ed25519 {GH_ED25519} comment words\n"
        ));
        let k = key(GH_ED25519);
        assert_eq!(
            kh.check("git.example.com", 2222, Some("ssh-ed25519"), &k),
            Verdict::Trusted
        );
        assert_eq!(
            kh.check("git.example.com", 22, Some("ssh-ed25519"), &k),
            Verdict::Unknown
        );
        assert_eq!(
            kh.check("git.example.com", 2223, Some("ssh-ed25519"), &k),
            Verdict::Unknown
        );
    }

    #[test]
    fn lists_wildcards_and_negation() {
        let kh = KnownHosts::parse(&format!(
            "a.example.com,b.example.com ssh-ed25519 {GH_ED25519}\n\
             *.corp.example,!evil.corp.example ssh-ed25519 {OTHER_ED25519}\n\
             [10.0.0.?]:2200 ssh-ed25519 {OTHER_ED25519}\n"
        ));
        let gh = key(GH_ED25519);
        let other = key(OTHER_ED25519);
        assert_eq!(kh.check("b.example.com", 22, None, &gh), Verdict::Trusted);
        assert_eq!(
            kh.check("git.corp.example", 22, None, &other),
            Verdict::Trusted
        );
        assert_eq!(
            kh.check("evil.corp.example", 22, None, &other),
            Verdict::Unknown
        );
        assert_eq!(kh.check("10.0.0.7", 2200, None, &other), Verdict::Trusted);
        assert_eq!(kh.check("10.0.0.17", 2200, None, &other), Verdict::Unknown);
    }

    #[test]
    fn hashed_entries_are_unsupported_and_fail_closed() {
        // `ssh-keyscan -H` output for github.com: usable by OpenSSH, but we
        // cannot verify the HMAC-SHA1, so the host stays unknown.
        let kh = KnownHosts::parse(&format!(
            "|1|F1E1KeoE/eEWhi10WpGv4OdiO6Y=|3988QV0VE8wmZL7suNrYQLITLCg= ssh-ed25519 {GH_ED25519}\n"
        ));
        assert_eq!(kh.hashed_lines(), 1);
        assert_eq!(
            kh.check("github.com", 22, Some("ssh-ed25519"), &key(GH_ED25519)),
            Verdict::Unknown
        );
        // A hashed revocation cannot be tied to a host, so it revokes the
        // key everywhere, even where a plain line trusts it.
        let kh = KnownHosts::parse(&format!(
            "github.com ssh-ed25519 {GH_ED25519}\n\
             @revoked |1|F1E1KeoE/eEWhi10WpGv4OdiO6Y=|3988QV0VE8wmZL7suNrYQLITLCg= ssh-ed25519 {GH_ED25519}\n"
        ));
        assert_eq!(
            kh.check("github.com", 22, Some("ssh-ed25519"), &key(GH_ED25519)),
            Verdict::Revoked
        );
    }

    #[test]
    fn revoked_and_cert_authority_and_garbage() {
        let kh = KnownHosts::parse(&format!(
            "@revoked * ssh-ed25519 {OTHER_ED25519}\n\
             host.example ssh-ed25519 {OTHER_ED25519}\n\
             @cert-authority *.example ssh-ed25519 {GH_ED25519}\n\
             broken-line-without-key\n\
             bad.example ssh-ed25519 not*base64\n"
        ));
        assert_eq!(
            kh.check("host.example", 22, None, &key(OTHER_ED25519)),
            Verdict::Revoked
        );
        // The CA line must not make the CA key itself a trusted host key.
        assert_eq!(
            kh.check("x.example", 22, None, &key(GH_ED25519)),
            Verdict::Unknown
        );
        assert_eq!(
            kh.check("bad.example", 22, None, &key(GH_ED25519)),
            Verdict::Unknown
        );
    }

    #[test]
    fn empty_known_hosts_trusts_nothing() {
        let kh = KnownHosts::parse("");
        assert_eq!(
            kh.check("github.com", 22, None, &key(GH_ED25519)),
            Verdict::Unknown
        );
    }

    #[test]
    fn glob() {
        assert!(glob_match(b"*", b"anything"));
        assert!(glob_match(b"a*c", b"abbbc"));
        assert!(glob_match(b"a?c", b"abc"));
        assert!(!glob_match(b"a?c", b"abbc"));
        assert!(glob_match(b"*.x.*", b"a.x.b"));
        assert!(!glob_match(b"abc", b"abcd"));
    }
}
