//! Scan step, created times for registries that do not list push times: reading an image's
//! `created` from its config blob, and remembering the answers so that each image is read
//! once.
//!
//! The OCI distribution API lists tags without times. For [`Order::Newest`] the client reads
//! `created` from each tag's image config: resolve the tag to its manifest digest (`HEAD`,
//! which Docker Hub does not count as a pull), fetch the manifest by digest (for a multi-arch
//! index, the `linux/amd64` entry, else the first real platform), then the config blob.
//! Results are cached by manifest digest, which is immutable, so tags sharing an image and
//! later scans cost no blob reads; per repository each tag's answer is remembered too, so a
//! known tag costs nothing at all until it is re-checked (daily, with one `HEAD`).
//!
//! A per-scan budget bounds the lookups; the rest wait for later scans. Which tags are looked
//! up first, see `plan_lookups`.
//!
//! [`Order::Newest`]: imagewatch_engine::policy::Order::Newest

use futures::StreamExt as _;
use reqwest::header::CONTENT_TYPE;
use reqwest::{Method, StatusCode};
use sha2::{Digest as _, Sha256};
use tokio::time::Instant;

use super::auth::Credentials;
use super::created_cache::{TagTime, plan_lookups};
use std::sync::atomic::Ordering;

use super::distribution::{
    Endpoint, MANIFEST_ACCEPT, MAX_MANIFEST_BYTES, RegistryClient, read_body, read_failure,
};
use super::error::RegistryError;
use super::reference::{RepositoryRef, is_valid_digest};
use imagewatch_engine::policy::TagInfo;

/// Index (multi-platform) media types.
pub const INDEX_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// A content descriptor inside a manifest or index.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: Option<String>,
    pub digest: String,
    #[serde(default)]
    pub size: Option<u64>,
    #[serde(default)]
    pub platform: Option<Platform>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Platform {
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub architecture: String,
}

/// What a manifest body says about where `created` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Manifest {
    /// An index or manifest list: pick one entry and read that manifest.
    Index(Vec<Descriptor>),
    /// An image manifest: `created` is in the config blob.
    Image { config: Descriptor },
    /// Docker schema 1: the time is inline in the first history entry.
    Schema1 { created: Option<jiff::Timestamp> },
}

/// Parses a manifest body; `content_type` is the response's header, used when the body has
/// no `mediaType` (it is optional in OCI manifests).
pub fn parse_manifest(body: &[u8], content_type: Option<&str>) -> Result<Manifest, RegistryError> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Raw {
        #[serde(default)]
        schema_version: Option<u32>,
        #[serde(default)]
        media_type: Option<String>,
        #[serde(default)]
        manifests: Option<Vec<Descriptor>>,
        #[serde(default)]
        config: Option<Descriptor>,
        #[serde(default)]
        history: Option<Vec<Schema1History>>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Schema1History {
        #[serde(default)]
        v1_compatibility: Option<String>,
    }

    let raw: Raw = serde_json::from_slice(body)
        .map_err(|e| RegistryError::Protocol(format!("manifest is not valid JSON: {e}")))?;
    let media_type = raw.media_type.as_deref().or(content_type).map(|t| {
        t.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    });
    let is_index = media_type
        .as_deref()
        .is_some_and(|t| INDEX_TYPES.contains(&t))
        || (raw.config.is_none() && raw.manifests.is_some());
    if is_index {
        let entries = raw.manifests.unwrap_or_default();
        if entries.is_empty() {
            return Err(RegistryError::Protocol(
                "image index lists no manifests".into(),
            ));
        }
        return Ok(Manifest::Index(entries));
    }
    if let Some(config) = raw.config {
        return Ok(Manifest::Image { config });
    }
    if raw.schema_version == Some(1) {
        let created = raw
            .history
            .unwrap_or_default()
            .first()
            .and_then(|h| h.v1_compatibility.as_deref())
            .and_then(|v1| parse_created(v1.as_bytes()));
        return Ok(Manifest::Schema1 { created });
    }
    Err(RegistryError::Protocol(format!(
        "manifest of type {} has neither a config nor manifests",
        media_type.as_deref().unwrap_or("(none)")
    )))
}

/// The index entry whose config gives the time: `linux/amd64`, else the first entry that is
/// a real platform (not an attestation, which BuildKit marks `unknown/unknown`), else the
/// first entry.
pub fn pick_platform(entries: &[Descriptor]) -> Option<&Descriptor> {
    let is = |d: &Descriptor, os: &str, arch: &str| {
        d.platform
            .as_ref()
            .is_some_and(|p| p.os == os && p.architecture == arch)
    };
    entries
        .iter()
        .find(|d| is(d, "linux", "amd64"))
        .or_else(|| entries.iter().find(|d| !is(d, "unknown", "unknown")))
        .or_else(|| entries.first())
}

/// `created` of an image config (or a schema-1 `v1Compatibility` entry). Missing, malformed
/// and Unix-epoch values (reproducible builds write the epoch, which says nothing about
/// age) are `None`.
pub fn parse_created(config: &[u8]) -> Option<jiff::Timestamp> {
    #[derive(serde::Deserialize)]
    struct Raw {
        #[serde(default)]
        created: Option<String>,
    }
    let raw: Raw = serde_json::from_slice(config).ok()?;
    let created: jiff::Timestamp = raw.created?.trim().parse().ok()?;
    (created != jiff::Timestamp::UNIX_EPOCH).then_some(created)
}

/// Tags with created times, as read by [`RegistryClient::list_tags_with_times`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedTags {
    /// Every listed tag, in listing order; `pushed_at` is the image's `created` where it is
    /// known (looked up in this scan or an earlier one). `digest` is left empty: resolve the
    /// chosen tag with [`RegistryClient::manifest_digest`].
    pub tags: Vec<TagInfo>,
    /// Tags looked up in this call (at most the budget).
    pub looked_up: usize,
    /// Tags that have never been looked up and still wait for budget. While this is not
    /// zero, a `Newest` choice may miss the newest tag; scans keep working through them.
    pub pending: usize,
}

/// Failures that end a listing's lookups instead of marking one tag: they would repeat for
/// every tag (credentials, rate limit, registry down).
fn is_fatal(error: &RegistryError) -> bool {
    matches!(
        error,
        RegistryError::RateLimited { .. }
            | RegistryError::Unauthorized { .. }
            | RegistryError::Transport(_)
            | RegistryError::InvalidCredentials(_)
            | RegistryError::InvalidConfig(_)
    )
}

/// Lookups of one listing run this many at a time (the rate limit still applies).
const LOOKUP_CONCURRENCY: usize = 4;
/// Config blobs larger than this are not read (real ones are a few KiB).
const MAX_CONFIG_BYTES: usize = 8 * 1024 * 1024;
/// Index → manifest → config; an index inside an index is followed once more.
const MAX_INDEX_DEPTH: usize = 2;

impl RegistryClient {
    /// The `created` time of the image `reference` (a tag or digest) names; for a
    /// multi-platform index, of its `linux/amd64` image (else the first real platform).
    ///
    /// `Ok(None)` when the tag does not exist or the image records no usable time. Answers
    /// are cached by digest: looking up the same image again costs one `HEAD` (or nothing,
    /// for a digest).
    pub async fn image_created(
        &self,
        repo: &RepositoryRef,
        reference: &str,
        creds: &Credentials,
    ) -> Result<Option<jiff::Timestamp>, RegistryError> {
        Ok(self
            .lookup_created(repo, reference, creds)
            .await?
            .and_then(|(_, created)| created))
    }

    /// All tags of `repo` with created times, looking up at most `budget` tags that have no
    /// remembered time (see [`Self::list_tags_with_times`] for which).
    pub async fn list_with_created(
        &self,
        repo: &RepositoryRef,
        creds: &Credentials,
        budget: u32,
    ) -> Result<Vec<TagInfo>, RegistryError> {
        Ok(self
            .list_tags_with_times(repo, creds, Some(budget))
            .await?
            .tags)
    }

    /// Lists the tags of `repo` and fills `pushed_at` with each image's `created` time, for
    /// ordering by newest on registries whose tag list has no times.
    ///
    /// Times are remembered per repository, so each tag is looked up once. Each call looks
    /// up at most `budget` tags (`None`: the host's `metadataBudget`, see
    /// [`Self::metadata_budget`]): first tags that appeared since the repository's first
    /// scan, then the rest of the never-looked-up tags from the end of the listing backwards,
    /// then known tags due for their daily re-check. Lookups of one repository are shared:
    /// a concurrent call waits and then finds the times.
    ///
    /// Fails on errors that would hit every tag (401/403, 429, unreachable registry); times
    /// found before the failure are kept for the next call. A tag whose own lookup fails
    /// (broken manifest, missing blob) keeps no time and is tried again an hour later.
    pub async fn list_tags_with_times(
        &self,
        repo: &RepositoryRef,
        creds: &Credentials,
        budget: Option<u32>,
    ) -> Result<TimedTags, RegistryError> {
        let listing = self.list_tags(repo, creds).await?;
        let budget = budget.unwrap_or_else(|| self.metadata_budget(&repo.registry));
        let slot = self.inner.metadata.repo(&repo.registry, &repo.path);
        let mut times = slot.lock().await;
        times.prune(&listing);
        let plan = plan_lookups(
            &listing,
            &times,
            Instant::now(),
            usize::try_from(budget).unwrap_or(usize::MAX),
        );
        let looked_up = plan.len();
        if looked_up > 0 {
            tracing::debug!(%repo, looked_up, "looking up created times");
        }
        let mut lookups = futures::stream::iter(plan)
            .map(|tag| async move {
                let result = self.lookup_created(repo, &tag, creds).await;
                (tag, result)
            })
            .buffer_unordered(LOOKUP_CONCURRENCY);
        while let Some((tag, result)) = lookups.next().await {
            let checked = Instant::now();
            let entry = match result {
                Ok(Some((digest, created))) => TagTime {
                    created,
                    digest: Some(digest),
                    checked,
                    failed: false,
                },
                Err(error) if is_fatal(&error) => return Err(error),
                outcome => {
                    // Gone since the listing (Ok(None)) or broken: keep an earlier answer.
                    if let Err(error) = &outcome {
                        tracing::debug!(%repo, tag, %error, "cannot read the created time of a tag");
                    }
                    let earlier = times.tags.get(&tag);
                    TagTime {
                        created: earlier.and_then(|t| t.created),
                        digest: earlier.and_then(|t| t.digest.clone()),
                        checked,
                        failed: true,
                    }
                }
            };
            times.tags.insert(tag, entry);
        }
        drop(lookups);

        let pending = listing
            .iter()
            .filter(|t| !times.tags.contains_key(*t))
            .count();
        let tags = listing
            .into_iter()
            .map(|tag| TagInfo {
                pushed_at: times.tags.get(&tag).and_then(|t| t.created),
                digest: None,
                tag,
            })
            .collect();
        Ok(TimedTags {
            tags,
            looked_up,
            pending,
        })
    }

    /// Resolves `reference` to its manifest digest and that image's created time.
    /// `Ok(None)` when the reference does not exist.
    async fn lookup_created(
        &self,
        repo: &RepositoryRef,
        reference: &str,
        creds: &Credentials,
    ) -> Result<Option<(String, Option<jiff::Timestamp>)>, RegistryError> {
        let cache = &self.inner.metadata;
        let registry = repo.registry.as_str();
        let top = if reference.contains(':') {
            if !is_valid_digest(reference) {
                return Err(RegistryError::InvalidReference(format!(
                    "{reference:?} is not a valid digest"
                )));
            }
            reference.to_string()
        } else {
            // HEAD (Docker Hub does not count it as a pull) tells whether anything changed.
            match self.manifest_digest(repo, reference, creds).await? {
                Some(digest) => digest,
                None => return Ok(None),
            }
        };
        if let Some(created) = cache.digest(registry, &top) {
            return Ok(Some((top, created)));
        }

        let mut current = top.clone();
        let mut depth = 0;
        let created = loop {
            let Some((body, content_type)) = self.fetch_manifest(repo, &current, creds).await?
            else {
                return Ok(None);
            };
            let manifest = parse_manifest(&body, content_type.as_deref())?;
            if !matches!(manifest, Manifest::Schema1 { .. }) {
                verify_digest(&current, &body)?;
            }
            match manifest {
                Manifest::Schema1 { created } => break created,
                Manifest::Index(entries) => {
                    if depth == MAX_INDEX_DEPTH {
                        return Err(RegistryError::Protocol(format!(
                            "{repo}@{top}: image indexes nested more than {MAX_INDEX_DEPTH} deep"
                        )));
                    }
                    depth += 1;
                    let entry = pick_platform(&entries).ok_or_else(|| {
                        RegistryError::Protocol("image index lists no manifests".into())
                    })?;
                    if !is_valid_digest(&entry.digest) {
                        return Err(RegistryError::Protocol(format!(
                            "{repo}@{current}: index entry has invalid digest {:?}",
                            entry.digest
                        )));
                    }
                    current = entry.digest.clone();
                    if let Some(created) = cache.digest(registry, &current) {
                        break created;
                    }
                }
                Manifest::Image { config } => {
                    if let Some(created) = cache.digest(registry, &config.digest) {
                        cache.remember_digest(registry, &current, created);
                        break created;
                    }
                    let created = self.fetch_config_created(repo, &config, creds).await?;
                    cache.remember_digest(registry, &config.digest, created);
                    cache.remember_digest(registry, &current, created);
                    break created;
                }
            }
        };
        cache.remember_digest(registry, &top, created);
        Ok(Some((top, created)))
    }

    /// `GET` of a manifest by digest; `Ok(None)` on 404. Returns the body and Content-Type.
    pub(super) async fn fetch_manifest(
        &self,
        repo: &RepositoryRef,
        digest: &str,
        creds: &Credentials,
    ) -> Result<Option<(Vec<u8>, Option<String>)>, RegistryError> {
        let url = self.repo_url(repo, &format!("manifests/{digest}"))?;
        self.inner.metadata_fetches.fetch_add(1, Ordering::Relaxed);
        let response = self
            .send(repo, creds, Method::GET, &url, MANIFEST_ACCEPT)
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !response.status().is_success() {
            return Err(read_failure(response)
                .await
                .into_error(repo, Endpoint::Registry));
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = read_body(response, MAX_MANIFEST_BYTES).await?;
        Ok(Some((body, content_type)))
    }

    /// Reads `created` from an image config blob.
    async fn fetch_config_created(
        &self,
        repo: &RepositoryRef,
        config: &Descriptor,
        creds: &Credentials,
    ) -> Result<Option<jiff::Timestamp>, RegistryError> {
        let body = self
            .fetch_config(repo, &config.digest, config.size, creds)
            .await?;
        Ok(parse_created(&body))
    }

    /// `GET` of an image config blob (`digest`, of `size` when the manifest says), checked
    /// against its digest.
    pub(super) async fn fetch_config(
        &self,
        repo: &RepositoryRef,
        digest: &str,
        size: Option<u64>,
        creds: &Credentials,
    ) -> Result<Vec<u8>, RegistryError> {
        if !is_valid_digest(digest) {
            return Err(RegistryError::Protocol(format!(
                "{repo}: manifest names config digest {digest:?}"
            )));
        }
        if size.is_some_and(|size| size > MAX_CONFIG_BYTES as u64) {
            return Err(RegistryError::Protocol(format!(
                "{repo}: image config {digest} is larger than {MAX_CONFIG_BYTES} bytes"
            )));
        }
        let url = self.repo_url(repo, &format!("blobs/{digest}"))?;
        self.inner.metadata_fetches.fetch_add(1, Ordering::Relaxed);
        // Registries often redirect blobs to object storage; reqwest follows the redirect and
        // drops the Authorization header when it leaves the registry's host.
        let response = self.send(repo, creds, Method::GET, &url, "*/*").await?;
        if !response.status().is_success() {
            return Err(read_failure(response)
                .await
                .into_error(repo, Endpoint::Registry));
        }
        let body = read_body(response, MAX_CONFIG_BYTES).await?;
        verify_digest(digest, &body)?;
        Ok(body)
    }
}

/// Checks a body against its `sha256:` digest (other algorithms are trusted as they are).
pub(super) fn verify_digest(digest: &str, body: &[u8]) -> Result<(), RegistryError> {
    let Some(expected) = digest.strip_prefix("sha256:") else {
        return Ok(());
    };
    let actual = hex::encode(Sha256::digest(body));
    if actual.eq_ignore_ascii_case(expected) {
        Ok(())
    } else {
        Err(RegistryError::Protocol(format!(
            "content of {digest} does not match its digest (sha256:{actual})"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn manifests_of_every_kind() {
        let index = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[
            {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:aa","size":1,"platform":{"os":"linux","architecture":"arm64"}},
            {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:bb","size":1,"platform":{"os":"linux","architecture":"amd64"}}]}"#;
        let Manifest::Index(entries) = parse_manifest(index, None).unwrap() else {
            panic!()
        };
        assert_eq!(pick_platform(&entries).unwrap().digest, "sha256:bb");

        // Docker manifest list, type only in the Content-Type header.
        let list = br#"{"schemaVersion":2,"manifests":[{"digest":"sha256:cc"}]}"#;
        assert!(matches!(
            parse_manifest(
                list,
                Some("application/vnd.docker.distribution.manifest.list.v2+json")
            )
            .unwrap(),
            Manifest::Index(_)
        ));

        let image = br#"{"schemaVersion":2,"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:dd","size":10},"layers":[]}"#;
        assert_eq!(
            parse_manifest(image, Some("application/vnd.oci.image.manifest.v1+json")).unwrap(),
            Manifest::Image {
                config: Descriptor {
                    media_type: Some("application/vnd.oci.image.config.v1+json".into()),
                    digest: "sha256:dd".into(),
                    size: Some(10),
                    platform: None,
                }
            }
        );

        let schema1 = br#"{"schemaVersion":1,"name":"a","tag":"b","history":[{"v1Compatibility":"{\"created\":\"2016-01-02T03:04:05.678Z\"}"}]}"#;
        assert_eq!(
            parse_manifest(schema1, None).unwrap(),
            Manifest::Schema1 {
                created: Some(ts("2016-01-02T03:04:05.678Z"))
            }
        );

        for bad in [
            &b"nope"[..],
            br#"{"schemaVersion":2}"#,
            br#"{"manifests":[]}"#,
        ] {
            assert_eq!(
                parse_manifest(bad, None).unwrap_err().category(),
                "protocol"
            );
        }
    }

    #[test]
    fn platform_choice_skips_attestations() {
        let d = |digest: &str, os: &str, arch: &str| Descriptor {
            media_type: None,
            digest: digest.into(),
            size: None,
            platform: Some(Platform {
                os: os.into(),
                architecture: arch.into(),
            }),
        };
        let entries = vec![d("att", "unknown", "unknown"), d("arm", "linux", "arm64")];
        assert_eq!(pick_platform(&entries).unwrap().digest, "arm");
        let entries = vec![d("att", "unknown", "unknown")];
        assert_eq!(pick_platform(&entries).unwrap().digest, "att");
        assert_eq!(pick_platform(&[]), None);
    }

    #[test]
    fn created_values() {
        assert_eq!(
            parse_created(
                br#"{"created":"2024-05-06T07:08:09.123456789Z","architecture":"amd64"}"#
            ),
            Some(ts("2024-05-06T07:08:09.123456789Z"))
        );
        assert_eq!(
            parse_created(br#"{"created":"2024-05-06T09:08:09+02:00"}"#),
            Some(ts("2024-05-06T07:08:09Z"))
        );
        assert_eq!(
            parse_created(br#"{"created":"1970-01-01T00:00:00Z"}"#),
            None
        );
        assert_eq!(parse_created(br#"{"architecture":"amd64"}"#), None);
        assert_eq!(parse_created(br#"{"created":"yesterday"}"#), None);
        assert_eq!(parse_created(br#"{"created":7}"#), None);
        assert_eq!(parse_created(b"garbage"), None);
    }
}
