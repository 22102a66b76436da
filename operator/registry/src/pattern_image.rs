//! The image of a pattern watch (`registry.example.com/team/*/api`): its registry and its
//! repository pattern, and whether an event's repository is one of its members. Pure.

use super::reference::RepositoryRef;
use super::repository_pattern::match_pattern;

/// A pattern image split into its registry and repository pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternImage {
    /// Registry host\[:port\] as written in `spec.image` (used to write members' images).
    pub host: String,
    /// Registry host\[:port\], normalised (lower case; Docker Hub's API host).
    pub registry: String,
    /// Repository pattern, e.g. `hoge/*/*/*`.
    pub pattern: String,
}

impl PatternImage {
    /// How many `*` segments the pattern has: the captures `$1..$n` each member provides.
    pub fn wildcards(&self) -> usize {
        self.pattern.split('/').filter(|s| *s == "*").count()
    }

    /// The image of one member, e.g. `registry.example.com/svc/billing/api`.
    pub fn member_image(&self, repository: &str) -> String {
        format!("{}/{repository}", self.host)
    }
}

/// `Ok(None)` for an image without `*`; the pattern for one with `*` path segments; an error
/// message when the `*`s are misplaced (in the host, inside a segment) or the rest is not a
/// valid repository name.
pub fn parse_pattern_image(image: &str) -> Result<Option<PatternImage>, String> {
    if !image.contains('*') {
        return Ok(None);
    }
    let Some((host, path)) = image.split_once('/') else {
        return Err(format!(
            "spec.image {image:?}: a pattern must start with its registry host, e.g. registry.example.com/team/*/api"
        ));
    };
    let looks_like_host = host.contains('.') || host.contains(':') || host == "localhost";
    if host.contains('*') || !looks_like_host {
        return Err(format!(
            "spec.image {image:?}: a pattern must start with its registry host, which holds no '*' (e.g. registry.example.com/team/*/api)"
        ));
    }
    if let Some(segment) = path.split('/').find(|s| s.contains('*') && *s != "*") {
        return Err(format!(
            "spec.image {image:?}: segment {segment:?} mixes '*' with other characters; a '*' stands for one whole path segment"
        ));
    }
    // Validate the rest as a repository name, with each `*` standing in as a valid segment.
    let stand_in: Vec<&str> = path
        .split('/')
        .map(|s| if s == "*" { "x" } else { s })
        .collect();
    let parsed = RepositoryRef::parse(&format!("{host}/{}", stand_in.join("/")))
        .map_err(|e| format!("spec.image: {e}"))?;
    // Docker Hub may have prefixed `library/`; keep it in front of the pattern.
    let stand_in_len = stand_in.join("/").len();
    let extra = parsed
        .path
        .get(..parsed.path.len().saturating_sub(stand_in_len))
        .unwrap_or_default();
    Ok(Some(PatternImage {
        host: host.to_string(),
        registry: parsed.registry,
        pattern: format!("{extra}{path}"),
    }))
}

/// Whether the pattern image `image` matches `registry`/`repository` (an event's
/// repository). False for images that are not patterns.
pub fn pattern_matches(image: &str, registry: &str, repository: &str) -> bool {
    match parse_pattern_image(image) {
        Ok(Some(p)) => {
            p.registry.eq_ignore_ascii_case(registry)
                && match_pattern(&p.pattern, repository).is_some()
        }
        _ => false,
    }
}
