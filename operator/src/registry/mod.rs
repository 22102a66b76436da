//! Scan step: tags and digests from container registries.
//!
//! The controller turns a watched image into a [`RepositoryRef`], loads [`Credentials`] from
//! the watch's pull secret with [`from_dockerconfigjson`], asks a [`TagSource`] for the
//! repository's tags, lets the policy choose one, and then resolves only that tag's digest
//! with [`TagSource::digest`]. Failures are [`RegistryError`]s whose messages carry the
//! registry's own explanation and whose [`RegistryError::category`] labels metrics.
//!
//! - [`reference`](mod@reference): image name → registry host + repository path; tag/digest grammar; ECR hosts.
//! - [`dockerconfig`]: credentials for one host out of a `.dockerconfigjson` secret.
//! - [`auth`]: credentials, `WWW-Authenticate` parsing, the shared bearer-token cache.
//! - [`distribution`]: [`RegistryClient`], the OCI distribution API client and default
//!   [`TagSource`]. Registries with richer APIs (ECR, with push times) get their own
//!   `TagSource`, chosen with [`is_ecr_host`].
//! - [`ratelimit`]: per-host request rate, pauses after 429, retries of 5xx and timeouts.
//! - [`settings`]: per-registry settings (plain HTTP, extra CA, rate, lookup budget) and
//!   their JSON/YAML format, read with [`parse_registries_config`].
//! - [`metadata`]: image `created` times for `Newest` ordering on registries whose tag
//!   lists carry no times, bounded per scan and cached by digest.
//!
//! # Newest order
//!
//! Tag lists of the distribution API have no times. When a watch orders by `Newest`, the
//! controller calls [`TagSource::list_with_times`] instead of [`TagSource::list`]; the
//! [`RegistryClient`] then reads each image's `created` (at most a budget of new lookups
//! per repository per scan, see [`RegistryClient::list_tags_with_times`]), while sources
//! whose listing already has push times (ECR) just list.

pub mod artifacts;
pub mod auth;
pub mod distribution;
pub mod dockerconfig;
pub mod ecr;
pub mod error;
pub mod metadata;
pub mod ratelimit;
pub mod reference;
pub mod settings;

#[cfg(test)]
mod created_tests;
#[cfg(test)]
mod live_registry_tests;
#[cfg(test)]
mod protocol_tests;
#[cfg(test)]
mod resilience_tests;
#[cfg(test)]
mod test_server;

pub use auth::Credentials;
pub use distribution::{RateLimitWaits, RegistryClient, RegistryOptions, TagPaging};
pub use dockerconfig::{dockerconfig_hosts, from_dockerconfigjson};
pub use error::RegistryError;
pub use metadata::TimedTags;
pub use reference::{
    DOCKER_HUB_REGISTRY, RepositoryRef, is_docker_hub_host, is_ecr_host, is_valid_digest,
    is_valid_tag,
};
pub use settings::{RegistrySettings, parse_registries_config};

use futures::future::BoxFuture;

/// One tag as seen by a tag source (shared with the tag policy, which orders them).
pub use crate::policy::TagInfo;

/// Where the controller gets tags and digests from. Object-safe (boxed futures, no
/// `async_trait`) so the controller can hold `Arc<dyn TagSource>` and pick the
/// implementation per registry.
pub trait TagSource: Send + Sync {
    /// All tags of `repo`.
    fn list<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        creds: &'a Credentials,
    ) -> BoxFuture<'a, Result<Vec<TagInfo>, RegistryError>>;

    /// Manifest digest of `reference` (a tag or a digest) in `repo`; `Ok(None)` when it does
    /// not exist.
    fn digest<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        reference: &'a str,
        creds: &'a Credentials,
    ) -> BoxFuture<'a, Result<Option<String>, RegistryError>>;

    /// All tags of `repo` with `pushed_at` filled as far as this source can, for `Newest`
    /// ordering; `budget` bounds extra per-tag lookups (`None`: the source's default). The
    /// default is [`Self::list`], right for sources whose listing carries push times.
    fn list_with_times<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        creds: &'a Credentials,
        budget: Option<u32>,
    ) -> BoxFuture<'a, Result<Vec<TagInfo>, RegistryError>> {
        let _ = budget;
        self.list(repo, creds)
    }
}
