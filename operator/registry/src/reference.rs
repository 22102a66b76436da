//! Scan step, first stage: turning the image a user wrote into a registry host and a
//! repository path.
//!
//! Users write images the way `docker pull` accepts them (`nginx`, `ghcr.io/org/app`,
//! `127.0.0.1:5000/team/app`); the distribution API needs the host to talk to and the
//! repository name inside it. The watched image must not carry a tag or digest: which tag to
//! use is what the scan decides. The grammar (where the registry ends, what a valid host,
//! path, tag and digest are) is the engine's `manifests::image_ref`, the one parser of image
//! references, which the manifest editor uses too; this module normalises on top of it
//! (lower-cased host, Docker Hub's names and `library/`). Also the ECR host detection that
//! lets an ECR `TagSource` be chosen for ECR images.

use std::fmt;
use std::str::FromStr;

use imagewatch_engine::manifests::image_ref;
/// Tag and digest grammar: the engine's, shared with the manifest editor.
pub use imagewatch_engine::manifests::image_ref::{is_valid_digest, is_valid_tag};

use super::error::RegistryError;

/// The host the Docker Hub distribution API is served from.
pub const DOCKER_HUB_REGISTRY: &str = "registry-1.docker.io";

/// Names users and pull secrets use for Docker Hub; all mean [`DOCKER_HUB_REGISTRY`].
const DOCKER_HUB_ALIASES: [&str; 3] = ["docker.io", "index.docker.io", DOCKER_HUB_REGISTRY];

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

        // One grammar with the manifest editor's references (the engine's `image_ref`): the
        // first component is a registry only if it looks like a host; otherwise the whole
        // string is a Docker Hub repository.
        let (name, tag) = image_ref::split_tag(image);
        if let Some(tag) = tag {
            return Err(invalid(format!(
                "includes a tag (:{tag}); give the repository only, the tag is chosen by the policy"
            )));
        }
        let (registry, remainder) = match image_ref::split_registry(name) {
            (Some(host), path) => (host.to_ascii_lowercase(), path),
            (None, path) => (DOCKER_HUB_REGISTRY.to_string(), path),
        };
        image_ref::check_registry(&registry).map_err(|p| invalid(p.to_string()))?;

        let mut registry = registry;
        let mut path = remainder.to_string();
        if is_docker_hub_host(&registry) {
            registry = DOCKER_HUB_REGISTRY.to_string();
            // Official images live under `library/` on Docker Hub.
            if !path.is_empty() && !path.contains('/') {
                path = format!("library/{path}");
            }
        }
        image_ref::check_path(&path).map_err(|p| invalid(p.to_string()))?;
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
