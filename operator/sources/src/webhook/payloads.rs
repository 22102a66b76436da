//! Webhook payloads → [`RegistryEvent`]s: one pure parser per provider, no I/O.
//!
//! Every event is normalised the way watches spell images ([`RepositoryRef::parse`]): the
//! host lower-cased, Docker Hub as `registry-1.docker.io` with `library/` for official images.
//! Tags and digests are checked against the distribution grammar so nothing odd travels
//! further (they end up in logs and, after the registry confirms them, in Git).
//!
//! Payloads that are well-formed but name nothing to rescan (pulls, blob uploads, deletes,
//! npm packages, GitHub pings) are *ignored*: [`Parsed::ignored`] counts them. A body that
//! is not the provider's JSON, or a push that lacks what identifies the repository, is a
//! [`ParseError`]; parsers never panic on outside data.
//!
//! Formats, as the providers document them:
//! - distribution: `{"events":[{action, target:{mediaType, repository, tag?, digest, url},
//!   request:{host}}]}` (content type `application/vnd.docker.distribution.events.v1+json`);
//!   `request.host` is the Host header the pusher used, e.g. `127.0.0.1:5000`.
//! - Docker Hub: `{push_data:{tag}, repository:{repo_name}}`; no digest.
//! - GitHub: `{action, package|registry_package:{name, package_type, ecosystem, owner:{login},
//!   package_version:{version, container_metadata:{tag:{name, digest}}}}}`.
//! - Harbor: `{type:"PUSH_ARTIFACT", event_data:{resources:[{tag, digest, resource_url}],
//!   repository:{repo_full_name}}}`; Harbor 1.x says `pushImage`; the CloudEvents format
//!   says `type:"harbor.artifact.pushed"` and carries the same object under `data`.
//! - Quay: `{docker_url:"quay.io/ns/repo", updated_tags:["v1"]}` (older Quay sent
//!   `updated_tags` as an object `{tag: image id}`).
//! - generic: `{"registry":"host[:port]","repository":"path","tag":"…","digest":"…"}`.

use serde::Deserialize;
use serde_json::Value;

use super::Provider;
use crate::RegistryEvent;
use imagewatch_registry::reference::{RepositoryRef, is_valid_digest, is_valid_tag};

/// Registry host of GitHub's Container registry.
pub const GHCR_REGISTRY: &str = "ghcr.io";

/// Host Docker Hub payloads are attributed to; the same canonical spelling the registry
/// module gives Docker Hub images (`registry::reference::DOCKER_HUB_REGISTRY`).
pub const DOCKER_HUB_REGISTRY: &str = "registry-1.docker.io";

/// Manifest media types whose push names an image version (OCI manifest and index, Docker
/// v2 manifest and manifest list). Everything else a registry reports (blobs, configs,
/// layers) is ignored.
pub const MANIFEST_MEDIA_TYPES: [&str; 4] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// A payload that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The body is not JSON of the provider's shape.
    #[error("{provider} payload is not valid JSON of the expected shape: {source}")]
    Json {
        /// Provider name.
        provider: &'static str,
        /// The decoder's complaint (position and expectation; never the payload itself).
        #[source]
        source: serde_json::Error,
    },
    /// The JSON names a push but lacks, or has an invalid, registry, repository, tag or digest.
    #[error("{provider} payload: {message}")]
    Invalid {
        /// Provider name.
        provider: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// What a payload says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Pushes to forward, without duplicates, in payload order.
    pub events: Vec<RegistryEvent>,
    /// Notifications in the payload that name nothing to rescan (a delivery carrying a
    /// single ignored notification counts one).
    pub ignored: usize,
}

impl Parsed {
    fn push(&mut self, event: RegistryEvent) {
        if !self.events.contains(&event) {
            self.events.push(event);
        }
    }

    fn ignored_one() -> Parsed {
        Parsed {
            events: Vec::new(),
            ignored: 1,
        }
    }
}

/// Provider-independent parse options.
#[derive(Debug, Clone, Default)]
pub struct ParseOptions {
    /// Registry host to attribute distribution events to instead of `request.host` (the
    /// name watches use, when pushers reach the registry under another name).
    pub distribution_host: Option<String>,
}

/// Parses a body from `provider`.
pub fn parse(
    provider: Provider,
    body: &[u8],
    options: &ParseOptions,
) -> Result<Parsed, ParseError> {
    match provider {
        Provider::Distribution => parse_distribution(body, options.distribution_host.as_deref()),
        Provider::DockerHub => parse_dockerhub(body),
        Provider::Ghcr => parse_ghcr(body),
        Provider::Harbor => parse_harbor(body),
        Provider::Quay => parse_quay(body),
        Provider::Generic => parse_generic(body),
    }
}

fn decode<'a, T: Deserialize<'a>>(provider: Provider, body: &'a [u8]) -> Result<T, ParseError> {
    serde_json::from_slice(body).map_err(|source| ParseError::Json {
        provider: provider.name(),
        source,
    })
}

fn invalid(provider: Provider, message: impl Into<String>) -> ParseError {
    ParseError::Invalid {
        provider: provider.name(),
        message: message.into(),
    }
}

/// Non-empty, trimmed string or `None`.
fn present(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|s| !s.is_empty())
}

/// Builds a normalised event; `host` and `repository` are as the payload spells them.
fn event(
    provider: Provider,
    host: &str,
    repository: &str,
    tag: Option<&str>,
    digest: Option<&str>,
) -> Result<RegistryEvent, ParseError> {
    let host = host.trim().to_ascii_lowercase();
    let repository = repository.trim().trim_matches('/');
    // A first component is a registry only if it looks like a host (a dot, a port, or
    // localhost), the rule image references follow; anything else would silently turn
    // into a Docker Hub repository.
    let looks_like_host =
        host.contains('.') || host.contains(':') || host.starts_with('[') || host == "localhost";
    if host.contains('/') {
        return Err(invalid(
            provider,
            format!("registry host {host:?} contains a path"),
        ));
    }
    if !looks_like_host {
        return Err(invalid(
            provider,
            format!("registry host {host:?} is not a host name with a dot or a port"),
        ));
    }
    let reference = RepositoryRef::parse(&format!("{host}/{repository}"))
        .map_err(|e| invalid(provider, e.to_string()))?;
    let tag = match present(tag) {
        Some(tag) if is_valid_tag(tag) => Some(tag.to_string()),
        Some(tag) => return Err(invalid(provider, format!("invalid tag {tag:?}"))),
        None => None,
    };
    let digest = match present(digest) {
        Some(digest) if is_valid_digest(digest) => Some(digest.to_string()),
        Some(digest) => return Err(invalid(provider, format!("invalid digest {digest:?}"))),
        None => None,
    };
    Ok(RegistryEvent {
        registry: reference.registry,
        repository: reference.path,
        tag,
        digest,
        source: provider.name(),
        at: None,
    })
}

/// `scheme://authority/…` → `authority`.
fn url_authority(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next()?;
    // Drop user info, should a URL carry any.
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    (!authority.is_empty()).then_some(authority)
}

// ---------------------------------------------------------------------------------------
// CNCF distribution
// ---------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct DistributionEnvelope {
    events: Vec<DistributionEvent>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct DistributionEvent {
    action: Option<String>,
    /// RFC 3339; an unreadable one is treated as absent (it only orders new tags).
    timestamp: Option<String>,
    target: DistributionTarget,
    request: DistributionRequest,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct DistributionTarget {
    media_type: Option<String>,
    repository: Option<String>,
    tag: Option<String>,
    digest: Option<String>,
    url: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct DistributionRequest {
    host: Option<String>,
}

/// Whether `media_type` (parameters allowed) is one of [`MANIFEST_MEDIA_TYPES`].
pub fn is_manifest_media_type(media_type: &str) -> bool {
    let essence = media_type.split(';').next().unwrap_or_default().trim();
    MANIFEST_MEDIA_TYPES
        .iter()
        .any(|m| m.eq_ignore_ascii_case(essence))
}

/// CNCF distribution notification envelope. Only `push` events of a manifest media type
/// count; blob pushes, pulls, mounts and deletes are ignored. The registry host is
/// `host_override` when given, else `request.host`, else the authority of `target.url`.
pub fn parse_distribution(body: &[u8], host_override: Option<&str>) -> Result<Parsed, ParseError> {
    let provider = Provider::Distribution;
    let envelope: DistributionEnvelope = decode(provider, body)?;
    let mut parsed = Parsed::default();
    for item in envelope.events {
        let is_push = item.action.as_deref() == Some("push");
        let is_manifest = item
            .target
            .media_type
            .as_deref()
            .is_some_and(is_manifest_media_type);
        if !(is_push && is_manifest) {
            parsed.ignored += 1;
            continue;
        }
        let repository = present(item.target.repository.as_deref())
            .ok_or_else(|| invalid(provider, "manifest push without target.repository"))?;
        let host = present(host_override)
            .or_else(|| present(item.request.host.as_deref()))
            .or_else(|| item.target.url.as_deref().and_then(url_authority))
            .ok_or_else(|| {
                invalid(
                    provider,
                    "manifest push without request.host or target.url; configure the registry host",
                )
            })?;
        let mut event = event(
            provider,
            host,
            repository,
            item.target.tag.as_deref(),
            item.target.digest.as_deref(),
        )?;
        event.at = item
            .timestamp
            .as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok());
        parsed.push(event);
    }
    Ok(parsed)
}

// ---------------------------------------------------------------------------------------
// Docker Hub
// ---------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct DockerHubPayload {
    push_data: Option<DockerHubPushData>,
    repository: Option<DockerHubRepository>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct DockerHubPushData {
    tag: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct DockerHubRepository {
    repo_name: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
}

/// Docker Hub repository webhook (pushes only; Docker Hub sends no other kind). The event
/// is attributed to [`DOCKER_HUB_REGISTRY`]; official images get `library/`.
pub fn parse_dockerhub(body: &[u8]) -> Result<Parsed, ParseError> {
    let provider = Provider::DockerHub;
    let payload: DockerHubPayload = decode(provider, body)?;
    let (Some(push), Some(repo)) = (payload.push_data, payload.repository) else {
        return Err(invalid(provider, "missing push_data or repository"));
    };
    let repository = match present(repo.repo_name.as_deref()) {
        Some(name) => name.to_string(),
        None => match (
            present(repo.namespace.as_deref()),
            present(repo.name.as_deref()),
        ) {
            (Some(namespace), Some(name)) => format!("{namespace}/{name}"),
            _ => return Err(invalid(provider, "missing repository.repo_name")),
        },
    };
    let mut parsed = Parsed::default();
    parsed.push(event(
        provider,
        DOCKER_HUB_REGISTRY,
        &repository,
        push.tag.as_deref(),
        None,
    )?);
    Ok(parsed)
}

// ---------------------------------------------------------------------------------------
// GitHub (GHCR)
// ---------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct GithubPayload {
    action: Option<String>,
    package: Option<GithubPackage>,
    registry_package: Option<GithubPackage>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct GithubPackage {
    name: Option<String>,
    package_type: Option<String>,
    ecosystem: Option<String>,
    owner: Option<GithubOwner>,
    package_version: Option<GithubPackageVersion>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct GithubOwner {
    login: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct GithubPackageVersion {
    version: Option<String>,
    container_metadata: Option<GithubContainerMetadata>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct GithubContainerMetadata {
    tag: Option<GithubContainerTag>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct GithubContainerTag {
    name: Option<String>,
    digest: Option<String>,
}

fn is_container_package(package: &GithubPackage) -> bool {
    [&package.package_type, &package.ecosystem]
        .into_iter()
        .flatten()
        .any(|kind| kind.eq_ignore_ascii_case("container") || kind.eq_ignore_ascii_case("docker"))
}

/// GitHub `package` or `registry_package` event (tell them apart by which object is
/// present; `X-GitHub-Event` is not needed). Only `published` / `updated` actions of
/// container packages count; other packages, actions and events (e.g. `ping`) are ignored.
/// Registry `ghcr.io`, repository `<owner>/<package name>` lower-cased, tag from
/// `package_version.container_metadata.tag.name` when not empty.
pub fn parse_ghcr(body: &[u8]) -> Result<Parsed, ParseError> {
    let provider = Provider::Ghcr;
    let payload: GithubPayload = decode(provider, body)?;
    let Some(package) = payload.registry_package.or(payload.package) else {
        return Ok(Parsed::ignored_one());
    };
    let action = payload.action.as_deref().unwrap_or_default();
    if !matches!(action, "published" | "updated") || !is_container_package(&package) {
        return Ok(Parsed::ignored_one());
    }
    let owner = present(package.owner.as_ref().and_then(|o| o.login.as_deref()))
        .ok_or_else(|| invalid(provider, "container package without owner.login"))?;
    let name = present(package.name.as_deref())
        .ok_or_else(|| invalid(provider, "container package without name"))?;
    let repository = format!("{owner}/{name}").to_ascii_lowercase();
    let version = package.package_version.unwrap_or_default();
    let tag = version
        .container_metadata
        .as_ref()
        .and_then(|m| m.tag.as_ref());
    let tag_name = tag.and_then(|t| present(t.name.as_deref()));
    // A container version's `version` is its manifest digest.
    let digest = tag
        .and_then(|t| present(t.digest.as_deref()))
        .or_else(|| present(version.version.as_deref()).filter(|v| v.starts_with("sha256:")));
    let mut parsed = Parsed::default();
    parsed.push(event(
        provider,
        GHCR_REGISTRY,
        &repository,
        tag_name,
        digest,
    )?);
    Ok(parsed)
}

// ---------------------------------------------------------------------------------------
// Harbor
// ---------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct HarborPayload {
    #[serde(rename = "type")]
    kind: Option<String>,
    event_data: Option<HarborEventData>,
    data: Option<HarborEventData>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct HarborEventData {
    resources: Vec<HarborResource>,
    repository: Option<HarborRepository>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct HarborResource {
    tag: Option<String>,
    digest: Option<String>,
    resource_url: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct HarborRepository {
    repo_full_name: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
}

/// `host/path/repo:tag` or `host/path/repo@digest` → (`host`, `path/repo`).
fn split_resource_url(url: &str) -> Option<(&str, &str)> {
    let url = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (host, rest) = url.split_once('/')?;
    let rest = rest.split_once('@').map_or(rest, |(repo, _)| repo);
    let rest = match rest.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => rest,
    };
    Some((host, rest))
}

/// Harbor webhook, Default (`PUSH_ARTIFACT`, 1.x `pushImage`) or CloudEvents
/// (`harbor.artifact.pushed`) format. One event per resource; the registry host comes from
/// `resource_url`, the repository from `repository.repo_full_name`.
pub fn parse_harbor(body: &[u8]) -> Result<Parsed, ParseError> {
    let provider = Provider::Harbor;
    let payload: HarborPayload = decode(provider, body)?;
    let kind = payload.kind.as_deref().unwrap_or_default();
    if !matches!(
        kind,
        "PUSH_ARTIFACT" | "pushImage" | "harbor.artifact.pushed"
    ) {
        return Ok(Parsed::ignored_one());
    }
    let data = payload
        .event_data
        .or(payload.data)
        .ok_or_else(|| invalid(provider, "push without event_data"))?;
    if data.resources.is_empty() {
        return Ok(Parsed::ignored_one());
    }
    let repo = data.repository.unwrap_or_default();
    let full_name = present(repo.repo_full_name.as_deref())
        .map(str::to_string)
        .or_else(|| {
            match (
                present(repo.namespace.as_deref()),
                present(repo.name.as_deref()),
            ) {
                (Some(namespace), Some(name)) => Some(format!("{namespace}/{name}")),
                _ => None,
            }
        });
    let mut parsed = Parsed::default();
    for resource in data.resources {
        let url = present(resource.resource_url.as_deref())
            .ok_or_else(|| invalid(provider, "resource without resource_url"))?;
        let (host, url_repository) = split_resource_url(url)
            .ok_or_else(|| invalid(provider, format!("resource_url {url:?} names no host")))?;
        let repository = full_name.as_deref().unwrap_or(url_repository);
        parsed.push(event(
            provider,
            host,
            repository,
            resource.tag.as_deref(),
            resource.digest.as_deref(),
        )?);
    }
    Ok(parsed)
}

// ---------------------------------------------------------------------------------------
// Quay
// ---------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct QuayPayload {
    docker_url: Option<String>,
    updated_tags: Option<Value>,
    build_id: Option<Value>,
}

/// Quay "Push to Repository" notification: `docker_url` names host and repository, one
/// event per entry of `updated_tags` (a list, or in older Quay an object keyed by tag).
/// Build notifications (they carry `build_id`) are ignored: their push arrives on its own.
pub fn parse_quay(body: &[u8]) -> Result<Parsed, ParseError> {
    let provider = Provider::Quay;
    let payload: QuayPayload = decode(provider, body)?;
    if payload.build_id.is_some() && payload.updated_tags.is_none() {
        return Ok(Parsed::ignored_one());
    }
    let docker_url = present(payload.docker_url.as_deref())
        .ok_or_else(|| invalid(provider, "missing docker_url"))?;
    let docker_url = docker_url
        .split_once("://")
        .map_or(docker_url, |(_, rest)| rest);
    let (host, repository) = docker_url
        .split_once('/')
        .ok_or_else(|| invalid(provider, format!("docker_url {docker_url:?} names no host")))?;
    let tags: Vec<&str> = match &payload.updated_tags {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| invalid(provider, "updated_tags holds a non-string"))
            })
            .collect::<Result<_, _>>()?,
        Some(Value::Object(map)) => map.keys().map(String::as_str).collect(),
        Some(_) => {
            return Err(invalid(
                provider,
                "updated_tags is neither a list nor an object",
            ));
        }
    };
    let mut parsed = Parsed::default();
    if tags.is_empty() {
        // A push without tags still says the repository changed.
        parsed.push(event(provider, host, repository, None, None)?);
    }
    for tag in tags {
        parsed.push(event(provider, host, repository, Some(tag), None)?);
    }
    Ok(parsed)
}

// ---------------------------------------------------------------------------------------
// Generic
// ---------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct GenericPayload {
    registry: String,
    repository: String,
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    digest: Option<String>,
}

/// Our own format, for CI pipelines and registries we have no parser for:
///
/// ```json
/// {"registry": "registry.example.com:5000", "repository": "team/app", "tag": "v1.2.3", "digest": "sha256:…"}
/// ```
///
/// `registry` and `repository` are required, `tag` and `digest` optional; images are
/// spelled as in watches (`docker.io` is Docker Hub). Signed like GitHub's: header
/// `X-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`.
pub fn parse_generic(body: &[u8]) -> Result<Parsed, ParseError> {
    let provider = Provider::Generic;
    let payload: GenericPayload = decode(provider, body)?;
    let mut parsed = Parsed::default();
    parsed.push(event(
        provider,
        &payload.registry,
        &payload.repository,
        payload.tag.as_deref(),
        payload.digest.as_deref(),
    )?);
    Ok(parsed)
}

#[cfg(test)]
#[path = "payloads_tests.rs"]
mod tests;
