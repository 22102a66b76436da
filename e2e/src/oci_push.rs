//! Fast image pushes through a registry's HTTP API (OCI distribution spec), for benchmarks that
//! push hundreds of tags: one small config and layer are uploaded once, every other repository
//! gets them by cross-repository mount, and each push is then a single manifest `PUT`.

use std::sync::Arc;

use anyhow::{Context as _, bail, ensure};
use reqwest::{StatusCode, header};
use sha2::{Digest as _, Sha256};

/// OCI image manifest media type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// OCI image index media type (a multi-platform image).
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A blob as a manifest references it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// Media type.
    pub media_type: &'static str,
    /// `sha256:…`.
    pub digest: String,
    /// Bytes.
    pub size: usize,
}

impl Descriptor {
    fn of(media_type: &'static str, bytes: &[u8]) -> Self {
        Self {
            media_type,
            digest: sha256_digest(bytes),
            size: bytes.len(),
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({"mediaType": self.media_type, "digest": self.digest, "size": self.size})
    }
}

/// The blobs every pushed image shares.
#[derive(Debug, Clone)]
pub struct BaseImage {
    /// Repository holding the blobs (mount source).
    pub repository: String,
    /// `os`, `architecture` of the image config.
    pub platform: (String, String),
    /// Image config.
    pub config: Descriptor,
    /// Its only layer.
    pub layer: Descriptor,
    config_bytes: Vec<u8>,
    layer_bytes: Vec<u8>,
}

impl BaseImage {
    /// A minimal linux/amd64 image whose layer is an empty tar archive, stored in `repository`.
    pub fn new(repository: &str) -> Self {
        Self::for_platform(repository, "linux", "amd64")
    }

    /// A minimal image of `os`/`architecture` whose layer is an empty tar archive, stored in
    /// `repository`.
    pub fn for_platform(repository: &str, os: &str, architecture: &str) -> Self {
        // An empty tar archive: two 512-byte zero blocks.
        let layer_bytes = vec![0u8; 1024];
        let config_bytes = serde_json::to_vec(&serde_json::json!({
            "architecture": architecture,
            "os": os,
            "created": "2024-01-01T00:00:00Z",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [sha256_digest(&layer_bytes)]},
        }))
        .expect("static JSON serialises");
        Self {
            repository: repository.to_string(),
            platform: (os.to_string(), architecture.to_string()),
            config: Descriptor::of(OCI_CONFIG, &config_bytes),
            layer: Descriptor::of(OCI_LAYER, &layer_bytes),
            config_bytes,
            layer_bytes,
        }
    }

    /// The manifest of `repository:tag`: the shared blobs, with the reference as an annotation
    /// so every tag has a digest of its own.
    pub fn manifest(&self, repository: &str, tag: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": self.config.json(),
            "layers": [self.layer.json()],
            "annotations": {"org.opencontainers.image.ref.name": tag, "dev.imagewatch.bench": format!("{repository}:{tag}")},
        }))
        .expect("manifest JSON serialises")
    }
}

/// The `Authorization` header value for requests on a set of repositories (push and pull).
pub type Authorizer = Arc<dyn Fn(&[&str]) -> String + Send + Sync>;

/// Pushes through the registry API over plain HTTP (loopback test registries).
#[derive(Clone)]
pub struct ImagePusher {
    http: reqwest::Client,
    base_url: String,
    authorize: Authorizer,
}

impl ImagePusher {
    /// A pusher for `host` (`127.0.0.1:PORT`), authenticating with `authorize`.
    pub fn new(host: &str, authorize: Authorizer) -> anyhow::Result<Self> {
        Ok(Self {
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(256)
                .timeout(std::time::Duration::from_secs(60))
                .build()?,
            base_url: format!("http://{host}"),
            authorize,
        })
    }

    /// A pusher with Basic authentication.
    pub fn basic(host: &str, user: &str, password: &str) -> anyhow::Result<Self> {
        use base64::Engine as _;
        let header = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        Self::new(host, Arc::new(move |_: &[&str]| header.clone()))
    }

    /// Uploads the base image's blobs into its repository.
    pub async fn upload_base(&self, base: &BaseImage) -> anyhow::Result<()> {
        for (descriptor, bytes) in [
            (&base.config, &base.config_bytes),
            (&base.layer, &base.layer_bytes),
        ] {
            let auth = (self.authorize)(&[&base.repository]);
            let start = self
                .http
                .post(format!(
                    "{}/v2/{}/blobs/uploads/",
                    self.base_url, base.repository
                ))
                .header(header::AUTHORIZATION, &auth)
                .send()
                .await?;
            ensure!(
                start.status() == StatusCode::ACCEPTED,
                "starting an upload to {}: {} {}",
                base.repository,
                start.status(),
                start.text().await.unwrap_or_default()
            );
            let location = start
                .headers()
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .context("upload without Location")?
                .to_string();
            let mut url = reqwest::Url::parse(&self.base_url)?.join(&location)?;
            url.query_pairs_mut()
                .append_pair("digest", &descriptor.digest);
            let put = self
                .http
                .put(url)
                .header(header::AUTHORIZATION, &auth)
                .header(header::CONTENT_TYPE, "application/octet-stream")
                .body(bytes.clone())
                .send()
                .await?;
            ensure!(
                put.status() == StatusCode::CREATED,
                "uploading {} to {}: {} {}",
                descriptor.digest,
                base.repository,
                put.status(),
                put.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    /// Makes the base image's blobs available in `repository` by cross-repository mount.
    pub async fn mount_base(&self, base: &BaseImage, repository: &str) -> anyhow::Result<()> {
        let auth = (self.authorize)(&[repository, &base.repository]);
        for descriptor in [&base.config, &base.layer] {
            let mut url =
                reqwest::Url::parse(&format!("{}/v2/{repository}/blobs/uploads/", self.base_url))?;
            url.query_pairs_mut()
                .append_pair("mount", &descriptor.digest)
                .append_pair("from", &base.repository);
            let response = self
                .http
                .post(url)
                .header(header::AUTHORIZATION, &auth)
                .send()
                .await?;
            if response.status() != StatusCode::CREATED {
                bail!(
                    "mounting {} from {} into {repository}: {} {}",
                    descriptor.digest,
                    base.repository,
                    response.status(),
                    response.text().await.unwrap_or_default()
                );
            }
        }
        Ok(())
    }

    /// Pushes `repository:tag` (the base image's blobs must be in `repository`); returns the
    /// manifest digest.
    pub async fn push_tag(
        &self,
        base: &BaseImage,
        repository: &str,
        tag: &str,
    ) -> anyhow::Result<String> {
        let manifest = base.manifest(repository, tag);
        let digest = sha256_digest(&manifest);
        self.put_manifest(repository, tag, OCI_MANIFEST, manifest)
            .await?;
        Ok(digest)
    }

    /// Pushes `repository:tag` as an OCI image index holding one image per entry of `images`
    /// (their blobs must be in `repository`), as a multi-platform build does: each image's
    /// manifest by digest, then the index by tag. Returns the index digest.
    pub async fn push_index(
        &self,
        images: &[&BaseImage],
        repository: &str,
        tag: &str,
    ) -> anyhow::Result<String> {
        let mut manifests = Vec::new();
        for image in images {
            let manifest = image.manifest(repository, tag);
            let digest = sha256_digest(&manifest);
            self.put_manifest(repository, &digest, OCI_MANIFEST, manifest.clone())
                .await?;
            let (os, architecture) = &image.platform;
            manifests.push(serde_json::json!({
                "mediaType": OCI_MANIFEST,
                "digest": digest,
                "size": manifest.len(),
                "platform": {"os": os, "architecture": architecture},
            }));
        }
        let index = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": manifests,
        }))?;
        let digest = sha256_digest(&index);
        self.put_manifest(repository, tag, OCI_INDEX, index).await?;
        Ok(digest)
    }

    async fn put_manifest(
        &self,
        repository: &str,
        reference: &str,
        media_type: &str,
        body: Vec<u8>,
    ) -> anyhow::Result<()> {
        let response = self
            .http
            .put(format!(
                "{}/v2/{repository}/manifests/{reference}",
                self.base_url
            ))
            .header(header::AUTHORIZATION, (self.authorize)(&[repository]))
            .header(header::CONTENT_TYPE, media_type)
            .body(body)
            .send()
            .await?;
        ensure!(
            response.status() == StatusCode::CREATED,
            "pushing {repository}:{reference}: {} {}",
            response.status(),
            response.text().await.unwrap_or_default()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_of_the_bytes() {
        assert_eq!(
            sha256_digest(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn manifests_reference_the_shared_blobs_and_differ_per_tag() {
        let base = BaseImage::new("bench/base");
        let a = base.manifest("bench/app-1", "v1");
        let b = base.manifest("bench/app-1", "v2");
        assert_ne!(sha256_digest(&a), sha256_digest(&b));
        let doc: serde_json::Value = serde_json::from_slice(&a).unwrap();
        assert_eq!(doc["mediaType"], OCI_MANIFEST);
        assert_eq!(doc["config"]["digest"], base.config.digest.as_str());
        assert_eq!(doc["config"]["size"], base.config_bytes.len());
        assert_eq!(doc["layers"][0]["digest"], base.layer.digest.as_str());
        let config: serde_json::Value = serde_json::from_slice(&base.config_bytes).unwrap();
        assert_eq!(config["rootfs"]["diff_ids"][0], base.layer.digest.as_str());
    }
}
