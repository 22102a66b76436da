//! Reading an image's signatures from its registry and checking them (see the module above
//! for the formats). Verdicts that verified are remembered by digest, key set and registry
//! credentials; a missing or invalid signature is looked at again on the next check, since it
//! can be added later.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use serde::Deserialize;

use super::{
    BUNDLE_ARTIFACT_TYPE, Format, SIGNATURE_ANNOTATION, TrustedKey, Verdict, combine,
    verify_bundle, verify_simple_signing,
};
use crate::{Credentials, RegistryClient, RegistryError, RepositoryRef};

/// Signature layers or bundle referrers read per image, at most.
const MAX_SIGNATURES: usize = 16;
/// A simple-signing payload or a bundle is a few KiB; more is not a signature.
const MAX_SIGNATURE_BYTES: usize = 1024 * 1024;
/// Verified results remembered, at most (the oldest are forgotten first).
const CACHE_ENTRIES: usize = 4096;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    #[serde(default)]
    layers: Vec<Descriptor>,
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    artifact_type: String,
}

/// The tag `sha256-<hex>` (the referrers fallback tag) of `digest`, or `None` for another
/// algorithm.
fn fallback_tag(digest: &str) -> Option<String> {
    let hex = digest.strip_prefix("sha256:")?;
    Some(format!("sha256-{hex}"))
}

/// Remembered verified verdicts, bounded.
#[derive(Default)]
pub struct VerdictCache {
    inner: Mutex<(HashMap<String, Verdict>, VecDeque<String>)>,
}

impl VerdictCache {
    fn get(&self, key: &str) -> Option<Verdict> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.0.get(key).cloned()
    }

    fn put(&self, key: String, verdict: Verdict) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.0.insert(key.clone(), verdict).is_none() {
            inner.1.push_back(key);
        }
        while inner.1.len() > CACHE_ENTRIES {
            if let Some(old) = inner.1.pop_front() {
                inner.0.remove(&old);
            }
        }
    }
}

/// The verdict on the image `digest` of `repo` under `keys`. `cache_key` identifies the key
/// set and the credentials the registry is read with (see [`super::keys_fingerprint`]).
pub async fn check(
    client: &RegistryClient,
    cache: &VerdictCache,
    cache_key: &str,
    repo: &RepositoryRef,
    digest: &str,
    creds: &Credentials,
    keys: &[TrustedKey],
) -> Result<Verdict, RegistryError> {
    let key = format!("{cache_key}|{}/{}@{digest}", repo.registry, repo.path);
    if let Some(verdict) = cache.get(&key) {
        return Ok(verdict);
    }
    let Some(tag) = fallback_tag(digest) else {
        return Ok(Verdict::Invalid(format!(
            "{digest} is not a sha256 digest; cosign signs sha256 images"
        )));
    };
    let mut results = Vec::new();

    // Classic: sha256-<hex>.sig.
    if let Some(body) = client
        .manifest_body(repo, &format!("{tag}.sig"), creds)
        .await?
    {
        match serde_json::from_slice::<Manifest>(&body) {
            Err(e) => results.push((
                Format::Classic,
                Err(format!("{tag}.sig is not an OCI manifest: {e}")),
            )),
            Ok(manifest) => {
                for layer in manifest.layers.iter().take(MAX_SIGNATURES) {
                    let Some(signature) = layer.annotations.get(SIGNATURE_ANNOTATION) else {
                        continue;
                    };
                    let payload = client
                        .blob(repo, &layer.digest, creds, MAX_SIGNATURE_BYTES)
                        .await?;
                    let result = verify_simple_signing(&payload, signature, digest, keys);
                    let verified = result.is_ok();
                    results.push((Format::Classic, result));
                    if verified {
                        break;
                    }
                }
            }
        }
    }

    // Bundle: the referrers fallback tag sha256-<hex>.
    if !results.iter().any(|(_, r)| r.is_ok())
        && let Some(body) = client.manifest_body(repo, &tag, creds).await?
    {
        match serde_json::from_slice::<Manifest>(&body) {
            Err(e) => results.push((
                Format::Bundle,
                Err(format!("{tag} is not an OCI index: {e}")),
            )),
            Ok(index) => {
                let referrers = index
                    .manifests
                    .iter()
                    .filter(|m| m.artifact_type == BUNDLE_ARTIFACT_TYPE)
                    .take(MAX_SIGNATURES);
                'referrers: for referrer in referrers {
                    let Some(body) = client.manifest_body(repo, &referrer.digest, creds).await?
                    else {
                        continue;
                    };
                    let manifest: Manifest = match serde_json::from_slice(&body) {
                        Ok(m) => m,
                        Err(e) => {
                            results.push((
                                Format::Bundle,
                                Err(format!(
                                    "referrer {} is not a manifest: {e}",
                                    referrer.digest
                                )),
                            ));
                            continue;
                        }
                    };
                    for layer in manifest
                        .layers
                        .iter()
                        .filter(|l| l.media_type == BUNDLE_ARTIFACT_TYPE)
                        .take(MAX_SIGNATURES)
                    {
                        let bundle = client
                            .blob(repo, &layer.digest, creds, MAX_SIGNATURE_BYTES)
                            .await?;
                        let result = verify_bundle(&bundle, digest, keys);
                        let verified = result.is_ok();
                        results.push((Format::Bundle, result));
                        if verified {
                            break 'referrers;
                        }
                    }
                }
            }
        }
    }

    let verdict = combine(results);
    if matches!(verdict, Verdict::Verified { .. }) {
        cache.put(key, verdict.clone());
    }
    Ok(verdict)
}
