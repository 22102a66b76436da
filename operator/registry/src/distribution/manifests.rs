//! Manifest digests: a tag (or a digest) resolved with `HEAD /v2/<name>/manifests/<ref>`, as
//! `docker pull` would see it, falling back to `GET` and hashing the body.

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use sha2::{Digest as _, Sha256};

use super::{
    Endpoint, MANIFEST_ACCEPT, MAX_MANIFEST_BYTES, RegistryClient, read_body, read_failure,
};
use crate::auth::Credentials;
use crate::error::RegistryError;
use crate::reference::{RepositoryRef, is_valid_digest, is_valid_tag};

const DIGEST_HEADER: &str = "docker-content-digest";

impl RegistryClient {
    /// Resolves a tag (or checks a digest) to the manifest digest, as `docker pull` would
    /// see it. `Ok(None)` when the registry answers 404.
    ///
    /// Uses `HEAD` so that Docker Hub does not count the request against pull limits; falls
    /// back to `GET` and hashes the body when the registry sends no `Docker-Content-Digest`
    /// or does not allow `HEAD`.
    pub async fn manifest_digest(
        &self,
        repo: &RepositoryRef,
        reference: &str,
        creds: &Credentials,
    ) -> Result<Option<String>, RegistryError> {
        let is_digest = reference.contains(':');
        let valid = if is_digest {
            is_valid_digest(reference)
        } else {
            is_valid_tag(reference)
        };
        if !valid {
            return Err(RegistryError::InvalidReference(format!(
                "{reference:?} is neither a valid tag nor a valid digest"
            )));
        }
        let url = self.repo_url(repo, &format!("manifests/{reference}"))?;

        let head = self
            .send(repo, creds, Method::HEAD, &url, MANIFEST_ACCEPT)
            .await?;
        match head.status() {
            StatusCode::NOT_FOUND => return Ok(None),
            StatusCode::METHOD_NOT_ALLOWED => {}
            status if status.is_success() => {
                if let Some(digest) = digest_header(head.headers())? {
                    return Ok(Some(digest));
                }
                // A HEAD that succeeds for a digest reference proves the digest exists.
                if is_digest {
                    return Ok(Some(reference.to_string()));
                }
            }
            _ => {
                return Err(read_failure(head)
                    .await
                    .into_error(repo, Endpoint::Registry));
            }
        }

        tracing::debug!(%repo, reference, "no digest from HEAD; fetching the manifest");
        let get = self
            .send(repo, creds, Method::GET, &url, MANIFEST_ACCEPT)
            .await?;
        let status = get.status();
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(read_failure(get).await.into_error(repo, Endpoint::Registry));
        }
        if let Some(digest) = digest_header(get.headers())? {
            return Ok(Some(digest));
        }
        let body = read_body(get, MAX_MANIFEST_BYTES).await?;
        Ok(Some(format!(
            "sha256:{}",
            hex::encode(Sha256::digest(&body))
        )))
    }
}

pub(super) fn digest_header(headers: &HeaderMap) -> Result<Option<String>, RegistryError> {
    let Some(value) = headers.get(DIGEST_HEADER) else {
        return Ok(None);
    };
    let digest = value.to_str().map(str::trim).unwrap_or_default();
    if is_valid_digest(digest) {
        Ok(Some(digest.to_string()))
    } else {
        Err(RegistryError::Protocol(format!(
            "registry sent an invalid Docker-Content-Digest {value:?}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn digest_header_validation() {
        let mut map = HeaderMap::new();
        assert_eq!(digest_header(&map).unwrap(), None);
        let digest = format!("sha256:{}", "ab".repeat(32));
        map.insert(DIGEST_HEADER, HeaderValue::from_str(&digest).unwrap());
        assert_eq!(digest_header(&map).unwrap(), Some(digest));
        map.insert(DIGEST_HEADER, HeaderValue::from_static("sha256:nothex"));
        assert!(matches!(
            digest_header(&map),
            Err(RegistryError::Protocol(_))
        ));
    }
}
