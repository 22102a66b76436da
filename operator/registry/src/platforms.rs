//! Select step, multi-arch tags (`spec.tags.platforms`): the platforms the image a digest
//! names provides. One `GET` of the manifest per new digest; for a single image one more of
//! its config blob. Both go through the host's rate limiter like every registry request,
//! count in `metadata_fetches`, and are remembered by digest (content-addressed, so never
//! stale) in the client's metadata cache. What the bytes say is decided in
//! `imagewatch_engine::platforms`.

use std::sync::Arc;

use imagewatch_engine::platforms::{self, Platform, Provided};

use super::auth::Credentials;
use super::distribution::RegistryClient;
use super::error::RegistryError;
use super::metadata::verify_digest;
use super::reference::{RepositoryRef, is_valid_digest};

impl RegistryClient {
    /// The platforms the image of manifest `digest` provides: an index's entries
    /// (attestations left out) or a single image's config platform. `Ok(None)` when the
    /// manifest does not exist.
    pub async fn image_platforms(
        &self,
        repo: &RepositoryRef,
        digest: &str,
        creds: &Credentials,
    ) -> Result<Option<Arc<Vec<Platform>>>, RegistryError> {
        if !is_valid_digest(digest) {
            return Err(RegistryError::InvalidReference(format!(
                "{digest:?} is not a valid digest"
            )));
        }
        let cache = &self.inner.metadata;
        let registry = repo.registry.as_str();
        if let Some(known) = cache.platforms(registry, digest) {
            return Ok(Some(known));
        }
        let Some((body, content_type)) = self.fetch_manifest(repo, digest, creds).await? else {
            return Ok(None);
        };
        verify_digest(digest, &body)?;
        let provided = match platforms::read_manifest(content_type.as_deref(), &body)
            .map_err(|e| RegistryError::Protocol(format!("{repo}@{digest}: {e}")))?
        {
            Provided::Index(entries) => Arc::new(entries),
            Provided::Config {
                digest: config,
                size,
            } => match cache.platforms(registry, &config) {
                Some(known) => known,
                None => {
                    let body = self.fetch_config(repo, &config, size, creds).await?;
                    let platform = platforms::read_config(&body)
                        .map_err(|e| RegistryError::Protocol(format!("{repo}@{config}: {e}")))?;
                    let provided = Arc::new(vec![platform]);
                    cache.remember_platforms(registry, &config, provided.clone());
                    provided
                }
            },
        };
        cache.remember_platforms(registry, digest, provided.clone());
        Ok(Some(provided))
    }
}
