//! Container image references: `[registry[:port]/]path[:tag][@algorithm:digest]`.
//!
//! Place in the flow: after the image scalar has been read from Git (see
//! `locate`), this module parses its value so a new tag can be put in
//! (`ImageRef::with_tag`); the formatted result is what `edit` emits.
//!
//! Parsing follows the grammar of the distribution project's `reference`
//! package (the one Docker, containerd and Kubernetes tooling share) but never
//! normalises: `nginx` stays `nginx` rather than becoming
//! `docker.io/library/nginx`, because the manifest must keep the spelling its
//! authors chose. Formatting a parsed reference gives back the input exactly.

use std::fmt;
use std::str::FromStr;

/// Longest repository name (registry included) the reference grammar allows.
const MAX_NAME_LEN: usize = 255;
/// Longest tag the reference grammar allows.
const MAX_TAG_LEN: usize = 128;

/// Why a string is not a valid image reference or tag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageRefError {
    #[error("image reference is empty")]
    Empty,
    #[error("image reference {reference:?} contains whitespace or a control character")]
    InvalidCharacter { reference: String },
    #[error("image reference {reference:?} has an invalid registry host {registry:?}")]
    InvalidRegistry { reference: String, registry: String },
    #[error(
        "image reference {reference:?} has an invalid repository path {path:?} \
         (path components are lowercase letters and digits, separated by '.', '_', '__' or '-')"
    )]
    InvalidPath { reference: String, path: String },
    #[error(
        "image reference {reference:?} has a repository name longer than {MAX_NAME_LEN} characters"
    )]
    NameTooLong { reference: String },
    #[error(
        "invalid image tag {tag:?} (a tag is 1 to 128 characters of letters, digits, '_', '.' \
         and '-', and must not start with '.' or '-')"
    )]
    InvalidTag { tag: String },
    #[error(
        "image reference {reference:?} has an invalid digest {digest:?} \
         (expected algorithm:hex, e.g. sha256 followed by 64 lowercase hex digits)"
    )]
    InvalidDigest { reference: String, digest: String },
}

/// A parsed image reference. Every part keeps the exact spelling of the input.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageRef {
    registry: Option<String>,
    path: String,
    tag: Option<String>,
    digest: Option<String>,
}

impl ImageRef {
    /// Parses a reference such as `nginx`, `ghcr.io/org/app:1.2.3`,
    /// `localhost:5000/app:1.0` or `app@sha256:<64 hex>`.
    pub fn parse(reference: &str) -> Result<Self, ImageRefError> {
        if reference.is_empty() {
            return Err(ImageRefError::Empty);
        }
        if reference
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(ImageRefError::InvalidCharacter {
                reference: reference.to_owned(),
            });
        }

        // The digest is split off first: it contains a ':' that must not be
        // mistaken for a tag separator.
        let (name_and_tag, digest) = match reference.split_once('@') {
            Some((before, digest)) => {
                validate_digest(digest).map_err(|()| ImageRefError::InvalidDigest {
                    reference: reference.to_owned(),
                    digest: digest.to_owned(),
                })?;
                (before, Some(digest.to_owned()))
            }
            None => (reference, None),
        };

        let (name, tag) = split_tag(name_and_tag);
        if let Some(tag) = tag {
            validate_tag(tag)?;
        }
        let tag = tag.map(str::to_owned);

        if name.len() > MAX_NAME_LEN {
            return Err(ImageRefError::NameTooLong {
                reference: reference.to_owned(),
            });
        }

        let (registry, path) = split_registry(name);
        if let Some(registry) = registry
            && check_registry(registry).is_err()
        {
            return Err(ImageRefError::InvalidRegistry {
                reference: reference.to_owned(),
                registry: registry.to_owned(),
            });
        }
        if check_path(path).is_err() {
            return Err(ImageRefError::InvalidPath {
                reference: reference.to_owned(),
                path: path.to_owned(),
            });
        }

        Ok(Self {
            registry: registry.map(str::to_owned),
            path: path.to_owned(),
            tag,
            digest,
        })
    }

    /// Registry host, with port if one was given (`localhost:5000`).
    pub fn registry(&self) -> Option<&str> {
        self.registry.as_deref()
    }

    /// Repository path inside the registry (`org/app`).
    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// Digest including its algorithm (`sha256:…`), without the `@`.
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// Everything before the tag and digest: `[registry/]path`.
    pub fn repository(&self) -> String {
        match &self.registry {
            Some(registry) => format!("{registry}/{}", self.path),
            None => self.path.clone(),
        }
    }

    /// The same repository with `tag`. Any digest is dropped: it pinned the
    /// content of the old tag, and keeping it would make runtimes ignore the
    /// new tag entirely (a digest wins over a tag when both are present).
    pub fn with_tag(&self, tag: &str) -> Result<Self, ImageRefError> {
        validate_tag(tag)?;
        Ok(Self {
            registry: self.registry.clone(),
            path: self.path.clone(),
            tag: Some(tag.to_owned()),
            digest: None,
        })
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(registry) = &self.registry {
            write!(f, "{registry}/")?;
        }
        f.write_str(&self.path)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl FromStr for ImageRef {
    type Err = ImageRefError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Checks a tag against `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
pub fn validate_tag(tag: &str) -> Result<(), ImageRefError> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut chars = tag.chars();
    let valid = tag.len() <= MAX_TAG_LEN
        && chars.next().is_some_and(word)
        && chars.all(|c| word(c) || c == '.' || c == '-');
    if valid {
        Ok(())
    } else {
        Err(ImageRefError::InvalidTag {
            tag: tag.to_owned(),
        })
    }
}

/// Splits `name` (a reference without tag and digest) into its registry host, when its first
/// component names one, and the repository path. The distribution project's rule, which
/// Docker follows: the first component is a host if it has a `.` or a `:` (a port, an IPv6
/// literal), is `localhost`, or has an uppercase letter; otherwise the whole name is a path
/// (on Docker Hub).
pub fn split_registry(name: &str) -> (Option<&str>, &str) {
    match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.chars().any(|c| c.is_ascii_uppercase()) =>
        {
            (Some(first), rest)
        }
        _ => (None, name),
    }
}

/// Splits a tag off `name_and_tag` (a reference without digest): a `:` after the last `/` is
/// the tag's; an earlier one is a registry port (`localhost:5000/app`).
pub fn split_tag(name_and_tag: &str) -> (&str, Option<&str>) {
    let last_slash = name_and_tag.rfind('/');
    match name_and_tag.rfind(':') {
        Some(colon) if last_slash.is_none_or(|slash| colon > slash) => {
            (&name_and_tag[..colon], Some(&name_and_tag[colon + 1..]))
        }
        _ => (name_and_tag, None),
    }
}

/// Why a registry host (`host[:port]`, `[v6]:port`) is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostProblem {
    #[error("registry host {0:?} has an unclosed '['")]
    UnclosedBracket(String),
    #[error("registry host {0:?} is not a valid IPv6 literal")]
    InvalidIpv6(String),
    #[error("registry host {0:?} is malformed")]
    Malformed(String),
    #[error("registry host {0:?} is not a valid host name")]
    InvalidName(String),
    #[error("registry host {0:?} has an invalid port")]
    InvalidPort(String),
}

/// Checks a registry host: DNS labels of letters, digits and inner `-` (at most 63 each, 253
/// in all), or a bracketed IPv6 literal, and an optional port 1–65535.
pub fn check_registry(host: &str) -> Result<(), HostProblem> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (inside, after) = rest
            .split_once(']')
            .ok_or_else(|| HostProblem::UnclosedBracket(host.to_owned()))?;
        if inside.is_empty()
            || !inside
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return Err(HostProblem::InvalidIpv6(host.to_owned()));
        }
        match after {
            "" => (None, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (None, Some(port)),
                None => return Err(HostProblem::Malformed(host.to_owned())),
            },
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) => (Some(name), Some(port)),
            None => (Some(host), None),
        }
    };
    if let Some(name) = name {
        let label_ok = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        };
        if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
            return Err(HostProblem::InvalidName(host.to_owned()));
        }
    }
    if let Some(port) = port {
        let valid = !port.is_empty()
            && port.len() <= 5
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u16>().is_ok_and(|p| p != 0);
        if !valid {
            return Err(HostProblem::InvalidPort(host.to_owned()));
        }
    }
    Ok(())
}

/// Longest repository path (without the registry) a registry accepts.
pub const MAX_PATH_LEN: usize = 255;

/// Why a repository path is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathProblem {
    #[error("repository path is empty")]
    Empty,
    #[error("repository path is longer than {MAX_PATH_LEN} characters")]
    TooLong,
    #[error("repository path {0:?} must be lowercase")]
    Uppercase(String),
    #[error(
        "repository path component {0:?} is invalid (allowed: lowercase letters, digits, and \
         single '.', '_', '__' or '-' runs between them)"
    )]
    Component(String),
}

/// Checks a repository path: `/`-separated components of lowercase letters and digits,
/// joined inside a component by `.`, `_`, `__` or any run of `-`.
pub fn check_path(path: &str) -> Result<(), PathProblem> {
    if path.is_empty() {
        return Err(PathProblem::Empty);
    }
    if path.len() > MAX_PATH_LEN {
        return Err(PathProblem::TooLong);
    }
    if path.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(PathProblem::Uppercase(path.to_owned()));
    }
    match path.split('/').find(|c| !is_valid_path_component(c)) {
        Some(component) => Err(PathProblem::Component(component.to_owned())),
        None => Ok(()),
    }
}

fn is_valid_path_component(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !bytes.first().is_some_and(|&b| alnum(b)) || !bytes.last().is_some_and(|&b| alnum(b)) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if alnum(b) {
            i += 1;
            continue;
        }
        // A separator run: exactly '.', '_' or '__', or any number of '-'.
        let run_start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let run = &component[run_start..i];
        let ok = matches!(run, "." | "_" | "__") || run.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// Whether `tag` is a valid tag (see [`validate_tag`]).
pub fn is_valid_tag(tag: &str) -> bool {
    validate_tag(tag).is_ok()
}

/// Whether `digest` is a valid `algorithm:encoded` digest (sha256, sha384 and sha512 as
/// lowercase hex of their length).
pub fn is_valid_digest(digest: &str) -> bool {
    validate_digest(digest).is_ok()
}

/// Digest: `algorithm:encoded`, algorithm `[a-z0-9]+([+._-][a-z0-9]+)*`.
/// The well-known algorithms must have hex of the right length; others only
/// need the OCI character set.
fn validate_digest(digest: &str) -> Result<(), ()> {
    let (algorithm, encoded) = digest.split_once(':').ok_or(())?;
    let alg_ok = !algorithm.is_empty()
        && algorithm.split(['+', '.', '_', '-']).all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    if !alg_ok {
        return Err(());
    }
    let lower_hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let encoded_ok = match algorithm {
        "sha256" => encoded.len() == 64 && lower_hex(encoded),
        "sha384" => encoded.len() == 96 && lower_hex(encoded),
        "sha512" => encoded.len() == 128 && lower_hex(encoded),
        _ => {
            !encoded.is_empty()
                && encoded
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'=' | b'_' | b'-'))
        }
    };
    if encoded_ok { Ok(()) } else { Err(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_grammar_splits_and_checks_what_both_readers_need() {
        assert_eq!(split_registry("nginx"), (None, "nginx"));
        assert_eq!(split_registry("team/app"), (None, "team/app"));
        assert_eq!(split_registry("localhost/app"), (Some("localhost"), "app"));
        assert_eq!(
            split_registry("[::1]:5000/app"),
            (Some("[::1]:5000"), "app")
        );
        assert_eq!(split_registry("Host/app"), (Some("Host"), "app"));
        assert_eq!(
            split_tag("localhost:5000/app"),
            ("localhost:5000/app", None)
        );
        assert_eq!(
            split_tag("localhost:5000/app:1"),
            ("localhost:5000/app", Some("1"))
        );
        assert_eq!(split_tag("localhost:5000"), ("localhost", Some("5000")));
        assert_eq!(check_registry("ghcr.io"), Ok(()));
        assert_eq!(check_registry("[::ffff:1.2.3.4]:443"), Ok(()));
        assert_eq!(
            check_registry("host.io:99999"),
            Err(HostProblem::InvalidPort("host.io:99999".into()))
        );
        assert_eq!(
            check_registry(&format!("{}.io", "a".repeat(64))),
            Err(HostProblem::InvalidName(format!("{}.io", "a".repeat(64))))
        );
        assert_eq!(check_path("org/app"), Ok(()));
        assert_eq!(check_path(""), Err(PathProblem::Empty));
        assert_eq!(
            check_path("Org/app"),
            Err(PathProblem::Uppercase("Org/app".into()))
        );
        assert_eq!(
            check_path("org//app"),
            Err(PathProblem::Component(String::new()))
        );
        assert!(is_valid_tag("v1.2.3") && !is_valid_tag(".x"));
        assert!(is_valid_digest(&format!("sha256:{}", "a".repeat(64))));
        assert!(!is_valid_digest("sha256:abc"));
    }

    const SHA: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /// (registry, path, tag, digest)
    type Parts<'a> = (Option<&'a str>, &'a str, Option<&'a str>, Option<&'a str>);

    fn parts(r: &ImageRef) -> Parts<'_> {
        (r.registry(), r.path(), r.tag(), r.digest())
    }

    #[test]
    fn parses_common_forms_and_round_trips() {
        let cases: &[(&str, Parts)] = &[
            ("nginx", (None, "nginx", None, None)),
            ("nginx:1.27", (None, "nginx", Some("1.27"), None)),
            (
                "library/nginx:latest",
                (None, "library/nginx", Some("latest"), None),
            ),
            (
                "ghcr.io/org/app:v1.2.3",
                (Some("ghcr.io"), "org/app", Some("v1.2.3"), None),
            ),
            ("localhost/app", (Some("localhost"), "app", None, None)),
            (
                "localhost:5000/app:1.0",
                (Some("localhost:5000"), "app", Some("1.0"), None),
            ),
            (
                "localhost:5000/team/app",
                (Some("localhost:5000"), "team/app", None, None),
            ),
            (
                "[::1]:5000/app:2",
                (Some("[::1]:5000"), "app", Some("2"), None),
            ),
            ("Registry/app", (Some("Registry"), "app", None, None)),
            (
                "123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/svc:2024-01-01_abc",
                (
                    Some("123456789012.dkr.ecr.eu-west-1.amazonaws.com"),
                    "team/svc",
                    Some("2024-01-01_abc"),
                    None,
                ),
            ),
            (
                "my-app__x/y.z--w:1",
                (None, "my-app__x/y.z--w", Some("1"), None),
            ),
        ];
        for (input, expected) in cases {
            let parsed = ImageRef::parse(input).unwrap();
            assert_eq!(parts(&parsed), *expected, "{input}");
            assert_eq!(parsed.to_string(), *input);
        }
    }

    #[test]
    fn parses_digests() {
        let with_tag = format!("quay.io/org/app:1.0@{SHA}");
        let parsed = ImageRef::parse(&with_tag).unwrap();
        assert_eq!(
            parts(&parsed),
            (Some("quay.io"), "org/app", Some("1.0"), Some(SHA))
        );
        assert_eq!(parsed.to_string(), with_tag);

        let digest_only = format!("localhost:5000/app@{SHA}");
        let parsed = ImageRef::parse(&digest_only).unwrap();
        assert_eq!(
            parts(&parsed),
            (Some("localhost:5000"), "app", None, Some(SHA))
        );
        assert_eq!(parsed.repository(), "localhost:5000/app");
    }

    #[test]
    fn repository_excludes_tag_and_digest() {
        assert_eq!(ImageRef::parse("nginx:1").unwrap().repository(), "nginx");
        assert_eq!(
            ImageRef::parse("localhost:5000/a/b:1")
                .unwrap()
                .repository(),
            "localhost:5000/a/b"
        );
    }

    #[test]
    fn with_tag_replaces_tag_and_drops_digest() {
        let r = ImageRef::parse(&format!("localhost:5000/app:1.0@{SHA}")).unwrap();
        assert_eq!(
            r.with_tag("1.1").unwrap().to_string(),
            "localhost:5000/app:1.1"
        );
        let untagged = ImageRef::parse("nginx").unwrap();
        assert_eq!(untagged.with_tag("1.27").unwrap().to_string(), "nginx:1.27");
        assert_eq!(
            untagged.with_tag("-bad"),
            Err(ImageRefError::InvalidTag { tag: "-bad".into() })
        );
    }

    #[test]
    fn rejects_invalid_references() {
        for bad in [
            "",
            " nginx",
            "nginx:",
            "nginx:-x",
            "Nginx",
            "org/App",
            "org//app",
            "/app",
            "app/",
            "app@sha256:abc",
            "app@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
            "app@",
            "bad_host.io/app",
            "host.io:port/app",
            "host.io:/app",
            "[::1/app",
            "a..b",
            "a___b",
            "{{ .Values.image }}",
            "${IMAGE}",
            "app:1:2",
        ] {
            assert!(ImageRef::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        let long = format!("{}:1", "a".repeat(256));
        assert!(matches!(
            ImageRef::parse(&long),
            Err(ImageRefError::NameTooLong { .. })
        ));
        let long_tag = format!("app:{}", "a".repeat(129));
        assert!(matches!(
            ImageRef::parse(&long_tag),
            Err(ImageRefError::InvalidTag { .. })
        ));
    }

    #[test]
    fn from_str_matches_parse() {
        let r: ImageRef = "ghcr.io/a/b:c".parse().unwrap();
        assert_eq!(r, ImageRef::parse("ghcr.io/a/b:c").unwrap());
    }
}
