//! Multi-arch tags (`spec.tags.platforms`, issue 34): which of the wanted platforms an image
//! lacks. The operator reads a candidate's manifest (and, for a single image, its config
//! blob) and hands the bytes here; this module parses the platforms they provide and says
//! which wanted ones are missing. A tag missing one is refused (`PlatformMissing`).
//!
//! An image index (OCI) or manifest list (Docker v2) provides the platforms of its
//! `manifests[].platform`; BuildKit's attestation entries (`unknown/unknown`) are not
//! platforms. A single image provides the `os`/`architecture`/`variant` of its config.

use std::fmt;

use serde_json::Value;

/// Index (multi-platform) media types.
pub const INDEX_MEDIA_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// Most platforms one watch may ask for (the CRD's `maxItems`).
pub const MAX_PLATFORMS: usize = 16;

/// A platform: `os/architecture` with an optional `/variant` (`linux/arm/v7`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl Platform {
    /// Parses `os/arch` or `os/arch/variant` (lower-case letters, digits, `_`; what
    /// `docker buildx --platform` and Argo CD Image Updater's `platforms` accept).
    pub fn parse(text: &str) -> Result<Platform, String> {
        let parts: Vec<&str> = text.trim().split('/').collect();
        let valid = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        };
        if !(2..=3).contains(&parts.len()) || !parts.iter().all(|p| valid(p)) {
            return Err(format!(
                "{text:?} is not a platform: write os/arch or os/arch/variant (e.g. linux/arm64, linux/arm/v7)"
            ));
        }
        Ok(Platform {
            os: parts[0].to_string(),
            architecture: parts[1].to_string(),
            variant: parts.get(2).map(|v| v.to_string()),
        })
    }

    /// Parses a list, naming the first bad entry.
    pub fn parse_all<S: AsRef<str>>(entries: &[S]) -> Result<Vec<Platform>, String> {
        let mut out: Vec<Platform> = Vec::new();
        for entry in entries {
            let platform = Platform::parse(entry.as_ref())?;
            if !out.contains(&platform) {
                out.push(platform);
            }
        }
        Ok(out)
    }

    /// BuildKit marks attestation manifests in an index `unknown/unknown`.
    fn is_attestation(&self) -> bool {
        self.os == "unknown" && self.architecture == "unknown"
    }

    /// Whether an image built for `self` runs where `wanted` is asked: same os and
    /// architecture; a wanted variant must match, except that `arm64` without a variant is
    /// `arm64/v8` (the only one there is in practice).
    pub fn provides(&self, wanted: &Platform) -> bool {
        if self.os != wanted.os || self.architecture != wanted.architecture {
            return false;
        }
        let default_variant = (self.architecture == "arm64").then_some("v8");
        let own = self.variant.as_deref().or(default_variant);
        match wanted.variant.as_deref() {
            None => true,
            Some(variant) => own == Some(variant),
        }
    }

    /// Reads a `platform` object (index entry) or an image config: `os`, `architecture`
    /// and an optional `variant`.
    fn from_json(value: &Value) -> Option<Platform> {
        let text = |key: &str| {
            value
                .get(key)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_ascii_lowercase)
        };
        Some(Platform {
            os: text("os")?,
            architecture: text("architecture")?,
            variant: text("variant"),
        })
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(variant) = &self.variant {
            write!(f, "/{variant}")?;
        }
        Ok(())
    }
}

/// What a manifest says about its platforms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Provided {
    /// An index or manifest list: the platforms of its entries (attestations left out).
    Index(Vec<Platform>),
    /// A single image: its platform is in the config blob of this digest (and size).
    Config { digest: String, size: Option<u64> },
}

/// Reads a manifest body. `content_type` is the response's header, used when the body has
/// no `mediaType` (it is optional in OCI manifests).
pub fn read_manifest(content_type: Option<&str>, body: &[u8]) -> Result<Provided, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("manifest is not valid JSON: {e}"))?;
    let media_type = value
        .get("mediaType")
        .and_then(Value::as_str)
        .or(content_type)
        .map(|t| {
            t.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    let config = value.get("config").filter(|c| !c.is_null());
    let manifests = value.get("manifests").and_then(Value::as_array);
    let is_index = media_type
        .as_deref()
        .is_some_and(|t| INDEX_MEDIA_TYPES.contains(&t))
        || (config.is_none() && manifests.is_some());
    if is_index {
        let mut platforms: Vec<Platform> = manifests
            .into_iter()
            .flatten()
            .filter_map(|entry| entry.get("platform").and_then(Platform::from_json))
            .filter(|p| !p.is_attestation())
            .collect();
        platforms.sort();
        platforms.dedup();
        return Ok(Provided::Index(platforms));
    }
    let Some(config) = config else {
        return Err(format!(
            "manifest of type {} has neither a config nor manifests (a schema-1 manifest names no platform)",
            media_type.as_deref().unwrap_or("(none)")
        ));
    };
    let digest = config
        .get("digest")
        .and_then(Value::as_str)
        .ok_or("the manifest's config has no digest")?;
    Ok(Provided::Config {
        digest: digest.to_string(),
        size: config.get("size").and_then(Value::as_u64),
    })
}

/// The platform of an image config blob (`os`, `architecture`, `variant`).
pub fn read_config(body: &[u8]) -> Result<Platform, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("image config is not valid JSON: {e}"))?;
    Platform::from_json(&value).ok_or_else(|| "image config names no os and architecture".into())
}

/// The wanted platforms none of `provided` provides, in the order they were asked for.
pub fn missing(wanted: &[Platform], provided: &[Platform]) -> Vec<Platform> {
    wanted
        .iter()
        .filter(|w| !provided.iter().any(|p| p.provides(w)))
        .cloned()
        .collect()
}

/// Platforms as words: `linux/amd64, linux/arm64`.
pub fn list(platforms: &[Platform]) -> String {
    if platforms.is_empty() {
        return "none".into();
    }
    platforms
        .iter()
        .map(Platform::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
