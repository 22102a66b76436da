//! Reading artifacts stored next to images: a manifest's body by tag or digest, and a blob,
//! both bounded and checked against their digests (used for cosign signatures).

use reqwest::{Method, StatusCode};
use sha2::{Digest as _, Sha256};

use super::auth::Credentials;
use super::distribution::{
    Endpoint, MANIFEST_ACCEPT, MAX_MANIFEST_BYTES, RegistryClient, read_body, read_failure,
};
use super::error::RegistryError;
use super::reference::{RepositoryRef, is_valid_digest, is_valid_tag};

/// Checks a body against its `sha256:` digest.
fn check_digest(digest: &str, body: &[u8]) -> Result<(), RegistryError> {
    let actual = format!("sha256:{}", hex::encode(Sha256::digest(body)));
    if digest.starts_with("sha256:") && !actual.eq_ignore_ascii_case(digest) {
        return Err(RegistryError::Protocol(format!(
            "content of {digest} does not match its digest ({actual})"
        )));
    }
    Ok(())
}

impl RegistryClient {
    /// `GET` of the manifest `reference` (a tag or a digest): its body, `Ok(None)` on 404. A
    /// body fetched by digest is checked against it.
    pub async fn manifest_body(
        &self,
        repo: &RepositoryRef,
        reference: &str,
        creds: &Credentials,
    ) -> Result<Option<Vec<u8>>, RegistryError> {
        let is_digest = reference.contains(':');
        if !(if is_digest {
            is_valid_digest(reference)
        } else {
            is_valid_tag(reference)
        }) {
            return Err(RegistryError::InvalidReference(format!(
                "{reference:?} is neither a valid tag nor a valid digest"
            )));
        }
        let url = self.repo_url(repo, &format!("manifests/{reference}"))?;
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
        let body = read_body(response, MAX_MANIFEST_BYTES).await?;
        if is_digest {
            check_digest(reference, &body)?;
        }
        Ok(Some(body))
    }

    /// `GET` of the blob `digest`, at most `limit` bytes, checked against the digest.
    pub async fn blob(
        &self,
        repo: &RepositoryRef,
        digest: &str,
        creds: &Credentials,
        limit: usize,
    ) -> Result<Vec<u8>, RegistryError> {
        if !is_valid_digest(digest) {
            return Err(RegistryError::Protocol(format!(
                "{repo}: a manifest names blob digest {digest:?}"
            )));
        }
        let url = self.repo_url(repo, &format!("blobs/{digest}"))?;
        let response = self.send(repo, creds, Method::GET, &url, "*/*").await?;
        if !response.status().is_success() {
            return Err(read_failure(response)
                .await
                .into_error(repo, Endpoint::Registry));
        }
        let body = read_body(response, limit).await?;
        check_digest(digest, &body)?;
        Ok(body)
    }
}
