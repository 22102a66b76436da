//! Scan step, first stage: turning the image a user wrote into a registry host and a
//! repository path.
//!
//! Users write images the way `docker pull` accepts them (`nginx`, `ghcr.io/org/app`,
//! `127.0.0.1:5000/team/app`); the distribution API needs the host to talk to and the
//! repository name inside it. The watched image must not carry a tag or digest: which tag to
//! use is what the scan decides. Also holds the validators for tags and digests that the
//! client uses before putting them into URLs, and the ECR host detection that lets an ECR
//! `TagSource` be chosen for ECR images.

use std::fmt;
use std::str::FromStr;

use super::error::RegistryError;

/// The host the Docker Hub distribution API is served from.
pub const DOCKER_HUB_REGISTRY: &str = "registry-1.docker.io";

/// Names users and pull secrets use for Docker Hub; all mean [`DOCKER_HUB_REGISTRY`].
const DOCKER_HUB_ALIASES: [&str; 3] = ["docker.io", "index.docker.io", DOCKER_HUB_REGISTRY];

/// Docker's limit on the repository name length; registries reject longer names anyway,
/// so failing early gives a clearer message.
const MAX_PATH_LEN: usize = 255;

/// A repository in a registry, without tag or digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepositoryRef {
    /// `host[:port]`, lower-cased; Docker Hub is always [`DOCKER_HUB_REGISTRY`].
    pub registry: String,
    /// Repository name inside the registry, e.g. `library/nginx` or `team/app`.
    pub path: String,
}

impl RepositoryRef {
    /// Parses an image name without tag or digest.
    pub fn parse(image: &str) -> Result<Self, RegistryError> {
        let invalid = |why: String| RegistryError::InvalidReference(format!("{image:?}: {why}"));

        if image.is_empty() {
            return Err(invalid("image is empty".into()));
        }
        if image.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid("contains whitespace or control characters".into()));
        }
        if image.contains("://") {
            return Err(invalid(
                "must not include a URL scheme; write e.g. ghcr.io/org/app".into(),
            ));
        }
        if let Some((_, digest)) = image.split_once('@') {
            return Err(invalid(format!(
                "includes a digest (@{digest}); give the repository only, the digest is resolved by the scan"
            )));
        }

        // Same rule as the Docker CLI: the first component names a registry only if it
        // looks like a host (has a dot or a port, or is localhost); otherwise the whole
        // string is a Docker Hub repository.
        let (registry, remainder) = match image.split_once('/') {
            Some((first, rest))
                if first.contains('.')
                    || first.contains(':')
                    || first.starts_with('[')
                    || first == "localhost" =>
            {
                (first.to_ascii_lowercase(), rest)
            }
            _ => (DOCKER_HUB_REGISTRY.to_string(), image),
        };

        if let Some((_, tag)) = remainder.rsplit_once(':') {
            return Err(invalid(format!(
                "includes a tag (:{tag}); give the repository only, the tag is chosen by the policy"
            )));
        }
        validate_host(&registry).map_err(&invalid)?;
        if remainder.is_empty() {
            return Err(invalid("repository path is empty".into()));
        }

        let mut registry = registry;
        let mut path = remainder.to_string();
        if is_docker_hub_host(&registry) {
            registry = DOCKER_HUB_REGISTRY.to_string();
            // Official images live under `library/` on Docker Hub.
            if !path.contains('/') {
                path = format!("library/{path}");
            }
        }
        validate_path(&path).map_err(invalid)?;
        Ok(RepositoryRef { registry, path })
    }

    /// Whether this repository is on Docker Hub.
    pub fn is_docker_hub(&self) -> bool {
        self.registry == DOCKER_HUB_REGISTRY
    }
}

impl FromStr for RepositoryRef {
    type Err = RegistryError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RepositoryRef::parse(s)
    }
}

impl fmt::Display for RepositoryRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.path)
    }
}

/// Whether `host` is one of the names of Docker Hub (case-insensitive).
pub fn is_docker_hub_host(host: &str) -> bool {
    DOCKER_HUB_ALIASES
        .iter()
        .any(|alias| alias.eq_ignore_ascii_case(host))
}

/// Recognises Amazon ECR private registry hosts, `<account>.dkr.ecr.<region>.amazonaws.com`
/// (also the FIPS `dkr.ecr-fips` form and the China `amazonaws.com.cn` partition), and
/// returns `(account, region)`. The controller uses it to pick the ECR tag source, whose
/// API also reports push times.
pub fn is_ecr_host(host: &str) -> Option<(String, String)> {
    let host = host.to_ascii_lowercase();
    let labels: Vec<&str> = host.split('.').collect();
    let (account, dkr, ecr, region, rest) = match labels.as_slice() {
        [account, dkr, ecr, region, rest @ ..] => (*account, *dkr, *ecr, *region, rest),
        _ => return None,
    };
    let suffix_ok = matches!(rest, ["amazonaws", "com"] | ["amazonaws", "com", "cn"]);
    let account_ok = account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit());
    let region_ok = !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if suffix_ok && account_ok && region_ok && dkr == "dkr" && (ecr == "ecr" || ecr == "ecr-fips") {
        Some((account.to_string(), region.to_string()))
    } else {
        None
    }
}

/// Checks `host[:port]` (including bracketed IPv6 literals).
fn validate_host(host: &str) -> Result<(), String> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (inside, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("registry host {host:?} has an unclosed '['"))?;
        if inside.is_empty()
            || !inside
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return Err(format!(
                "registry host {host:?} is not a valid IPv6 literal"
            ));
        }
        match after {
            "" => (None, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (None, Some(port)),
                None => return Err(format!("registry host {host:?} is malformed")),
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
            return Err(format!("registry host {host:?} is not a valid host name"));
        }
    }
    if let Some(port) = port {
        let valid = !port.is_empty()
            && port.len() <= 5
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u16>().is_ok_and(|p| p != 0);
        if !valid {
            return Err(format!("registry host {host:?} has an invalid port"));
        }
    }
    Ok(())
}

/// Checks the repository path against the distribution spec grammar:
/// components `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*` joined by `/`.
fn validate_path(path: &str) -> Result<(), String> {
    if path.len() > MAX_PATH_LEN {
        return Err(format!(
            "repository path is longer than {MAX_PATH_LEN} characters"
        ));
    }
    if path.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(format!("repository path {path:?} must be lowercase"));
    }
    for component in path.split('/') {
        if !valid_path_component(component) {
            return Err(format!(
                "repository path component {component:?} is invalid (allowed: lowercase letters, digits, and single '.', '_', '__' or '-' runs between them)"
            ));
        }
    }
    Ok(())
}

fn valid_path_component(component: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = component.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) if alnum(first) && alnum(last) => {}
        _ => return false,
    }
    let mut i = 0;
    while i < bytes.len() {
        if bytes.get(i).is_some_and(|&b| alnum(b)) {
            i += 1;
            continue;
        }
        let start = i;
        while bytes.get(i).is_some_and(|&b| !alnum(b)) {
            i += 1;
        }
        let sep = &component[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// Tag grammar from the distribution spec: `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`.
///
/// Tags from registries are checked too, because a chosen tag is later written into
/// manifests in Git and must not smuggle in YAML or path syntax.
pub fn is_valid_tag(tag: &str) -> bool {
    let bytes = tag.as_bytes();
    let Some(&first) = bytes.first() else {
        return false;
    };
    bytes.len() <= 128
        && (first.is_ascii_alphanumeric() || first == b'_')
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-')
}

/// Digest grammar from the OCI image spec, `algorithm:encoded`, with the exact encoded
/// lengths for the registered sha256 and sha512 algorithms.
pub fn is_valid_digest(digest: &str) -> bool {
    let Some((algorithm, encoded)) = digest.split_once(':') else {
        return false;
    };
    let algorithm_ok = !algorithm.is_empty()
        && algorithm.split(['+', '.', '_', '-']).all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    if !algorithm_ok || encoded.is_empty() {
        return false;
    }
    let lower_hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    match algorithm {
        "sha256" => encoded.len() == 64 && lower_hex(encoded),
        "sha512" => encoded.len() == 128 && lower_hex(encoded),
        _ => encoded
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'=' || b == b'_' || b == b'-'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(image: &str) -> (String, String) {
        let r = RepositoryRef::parse(image).unwrap();
        (r.registry, r.path)
    }

    fn err(image: &str) -> String {
        RepositoryRef::parse(image).unwrap_err().to_string()
    }

    #[test]
    fn parses_common_forms() {
        assert_eq!(
            ok("123456789012.dkr.ecr.ap-northeast-1.amazonaws.com/my-api"),
            (
                "123456789012.dkr.ecr.ap-northeast-1.amazonaws.com".into(),
                "my-api".into()
            )
        );
        assert_eq!(
            ok("127.0.0.1:5000/team/app"),
            ("127.0.0.1:5000".into(), "team/app".into())
        );
        assert_eq!(ok("localhost/app"), ("localhost".into(), "app".into()));
        assert_eq!(
            ok("localhost:5000/a/b/c"),
            ("localhost:5000".into(), "a/b/c".into())
        );
        assert_eq!(ok("ghcr.io/org/app"), ("ghcr.io".into(), "org/app".into()));
        assert_eq!(ok("GHCR.io/org/app"), ("ghcr.io".into(), "org/app".into()));
        assert_eq!(ok("[::1]:5000/app"), ("[::1]:5000".into(), "app".into()));
        assert_eq!(
            ok("registry.example.com/a.b/c__d/e-f/g--h"),
            ("registry.example.com".into(), "a.b/c__d/e-f/g--h".into())
        );
    }

    #[test]
    fn docker_hub_normalisation() {
        let hub = DOCKER_HUB_REGISTRY.to_string();
        assert_eq!(ok("nginx"), (hub.clone(), "library/nginx".into()));
        assert_eq!(ok("bitnami/redis"), (hub.clone(), "bitnami/redis".into()));
        assert_eq!(ok("docker.io/x/y"), (hub.clone(), "x/y".into()));
        assert_eq!(ok("docker.io/nginx"), (hub.clone(), "library/nginx".into()));
        assert_eq!(
            ok("index.docker.io/nginx"),
            (hub.clone(), "library/nginx".into())
        );
        assert_eq!(
            ok("registry-1.docker.io/library/nginx"),
            (hub.clone(), "library/nginx".into())
        );
        assert!(RepositoryRef::parse("nginx").unwrap().is_docker_hub());
        assert_eq!(
            RepositoryRef::parse("nginx").unwrap().to_string(),
            "registry-1.docker.io/library/nginx"
        );
    }

    #[test]
    fn rejects_tags_and_digests() {
        assert!(err("nginx:1.25").contains("includes a tag (:1.25)"));
        assert!(err("ghcr.io/org/app:latest").contains("includes a tag (:latest)"));
        assert!(err("127.0.0.1:5000/team/app:v1").contains("includes a tag (:v1)"));
        // Without a slash, `localhost:5000` reads as image `localhost` tagged `5000`, as in Docker.
        assert!(err("localhost:5000").contains("includes a tag"));
        assert!(
            err("nginx@sha256:0000000000000000000000000000000000000000000000000000000000000000")
                .contains("includes a digest")
        );
        assert!(err("ghcr.io/org/app:v1@sha256:abc").contains("includes a digest"));
    }

    #[test]
    fn rejects_malformed() {
        assert!(err("").contains("empty"));
        assert!(err("ghcr.io/").contains("path is empty"));
        assert!(err("https://ghcr.io/org/app").contains("URL scheme"));
        assert!(err("ghcr.io/Org/App").contains("must be lowercase"));
        assert!(err("ghcr.io/org//app").contains("component"));
        assert!(err("ghcr.io/org/-app").contains("component"));
        assert!(err("ghcr.io/org/app.").contains("component"));
        assert!(err("ghcr.io/org/a___b").contains("component"));
        assert!(err("ghcr.io/org/a..b").contains("component"));
        assert!(err("ghcr.io/org/a b").contains("whitespace"));
        assert!(err("bad_host.io/app").contains("not a valid host name"));
        assert!(err("host.io:99999/app").contains("invalid port"));
        assert!(err("host.io:/app").contains("invalid port"));
        assert!(err("[zz]:5000/app").contains("IPv6"));
        assert!(err(&format!("ghcr.io/{}", "a".repeat(300))).contains("longer than"));
    }

    #[test]
    fn ecr_hosts() {
        assert_eq!(
            is_ecr_host("123456789012.dkr.ecr.ap-northeast-1.amazonaws.com"),
            Some(("123456789012".into(), "ap-northeast-1".into()))
        );
        assert_eq!(
            is_ecr_host("123456789012.dkr.ecr-fips.us-east-1.amazonaws.com"),
            Some(("123456789012".into(), "us-east-1".into()))
        );
        assert_eq!(
            is_ecr_host("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn"),
            Some(("123456789012".into(), "cn-north-1".into()))
        );
        assert_eq!(is_ecr_host("12345.dkr.ecr.us-east-1.amazonaws.com"), None);
        assert_eq!(
            is_ecr_host("123456789012.dkr.ecr.us-east-1.amazonaws.com:443"),
            None
        );
        assert_eq!(is_ecr_host("public.ecr.aws"), None);
        assert_eq!(is_ecr_host("ghcr.io"), None);
        assert_eq!(
            is_ecr_host("123456789012.dkr.ecr.us-east-1.amazonaws.com.evil.io"),
            None
        );
    }

    #[test]
    fn tags_and_digests() {
        assert!(is_valid_tag("v1.2.3"));
        assert!(is_valid_tag("_x"));
        assert!(is_valid_tag(&"a".repeat(128)));
        assert!(!is_valid_tag(&"a".repeat(129)));
        assert!(!is_valid_tag(""));
        assert!(!is_valid_tag(".hidden"));
        assert!(!is_valid_tag("-x"));
        assert!(!is_valid_tag("a/b"));
        assert!(!is_valid_tag("a:b"));
        assert!(!is_valid_tag("v1\n"));

        let sha = format!("sha256:{}", "a".repeat(64));
        assert!(is_valid_digest(&sha));
        assert!(is_valid_digest(&format!("sha512:{}", "0".repeat(128))));
        assert!(is_valid_digest(
            "multihash+base58:QmRZxt2b1FVZPNqd8hsiykDL3TdBDeTSPX9Kv46HmX4Gx8"
        ));
        assert!(!is_valid_digest(&format!("sha256:{}", "A".repeat(64))));
        assert!(!is_valid_digest("sha256:abc"));
        assert!(!is_valid_digest("sha256:"));
        assert!(!is_valid_digest(":abc"));
        assert!(!is_valid_digest("abc"));
        assert!(!is_valid_digest("sha256:../../etc"));
    }
}
