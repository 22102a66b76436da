//! Registry webhooks: an HTTP receiver, on its own port, that turns the push notifications of
//! CNCF distribution, Docker Hub, GitHub (GHCR), Harbor, Quay and our own generic format into
//! [`RegistryEvent`]s and forwards them to the trigger sink.
//!
//! Where it sits in the flow: `webhook → RegistryEvent sink → repository index → rescan`.
//! The receiver only forwards. It never contacts a registry and never decides anything:
//! **a payload only triggers a rescan of a repository that some watch references; never a
//! commit on the payload's word.** The tag and digest a payload names are hints; the scan asks
//! the registry, and a tag is written only after the registry confirms the manifest (HEAD).
//! So a forged or replayed payload can at worst cause one extra scan of a watched repository.
//!
//! Layout:
//! - [`payloads`]: pure parsers, one per provider, from the raw body to events.
//! - [`signature`]: per-provider secrets ([`WebhookSecrets`]) and the constant-time checks
//!   (HMAC-SHA256 signatures for GitHub and generic, shared tokens for the others).
//! - [`server`]: the axum router, its state ([`WebhookState`]) and counters.
//!
//! Routes (all `POST`; other methods get 405, unknown paths 404):
//!
//! | route | provider | authentication |
//! |---|---|---|
//! | `/hooks/distribution` | CNCF distribution `notifications.endpoints` | `Authorization: Bearer <distribution-token>` |
//! | `/hooks/dockerhub/{token}` | Docker Hub repository webhook | `<dockerhub-token>` in the path |
//! | `/hooks/ghcr` | GitHub `package` / `registry_package` events | `X-Hub-Signature-256: sha256=<hex>` keyed with `ghcr-secret` |
//! | `/hooks/harbor` | Harbor project webhook (Default or CloudEvents format) | Harbor's "Auth Header": `Bearer <harbor-token>` or the bare token |
//! | `/hooks/quay/{token}` | Quay "Push to Repository" notification | `<quay-token>` in the path |
//! | `/hooks/generic` | our own JSON (see [`payloads::parse_generic`]) | `X-Signature-256: sha256=<hex>` keyed with `generic-secret` |
//!
//! Docker Hub and Quay can only be given a URL, so their token travels in the path; it is
//! compared in constant time like the others, but it appears in any access log that records
//! paths. A provider without a secret is disabled and answers 404, exactly like an unknown
//! path, so a receiver is never open and does not reveal which providers it serves.

pub mod payloads;
pub mod server;
pub mod signature;

#[cfg(test)]
mod live_tests;
#[cfg(test)]
mod server_tests;

pub use payloads::{ParseError, Parsed};
pub use server::{
    CounterSnapshot, DEFAULT_BODY_LIMIT, ProviderCounters, WebhookCounters, WebhookState, router,
    serve, serve_listener,
};
pub use signature::{SecretValue, WebhookSecrets};

use super::RegistryEvent;

/// A webhook sender the receiver understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Provider {
    /// CNCF distribution (`registry:2`, the Debian `docker-registry`, and registries built on it).
    Distribution,
    /// Docker Hub repository webhooks.
    DockerHub,
    /// GitHub `package` / `registry_package` events for the GitHub Container registry.
    Ghcr,
    /// Harbor project webhooks.
    Harbor,
    /// Quay repository notifications.
    Quay,
    /// Our own signed JSON, for CI pipelines and registries without a supported format.
    Generic,
}

impl Provider {
    /// Every provider, in a fixed order (also the order of [`WebhookCounters::snapshot`]).
    pub const ALL: [Provider; 6] = [
        Provider::Distribution,
        Provider::DockerHub,
        Provider::Ghcr,
        Provider::Harbor,
        Provider::Quay,
        Provider::Generic,
    ];

    /// The provider's name: the route segment, the `RegistryEvent::source` and a metric label.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Distribution => "distribution",
            Provider::DockerHub => "dockerhub",
            Provider::Ghcr => "ghcr",
            Provider::Harbor => "harbor",
            Provider::Quay => "quay",
            Provider::Generic => "generic",
        }
    }

    /// The key of the provider's secret in the Kubernetes Secret's data.
    pub fn secret_key(self) -> &'static str {
        match self {
            Provider::Distribution => "distribution-token",
            Provider::DockerHub => "dockerhub-token",
            Provider::Ghcr => "ghcr-secret",
            Provider::Harbor => "harbor-token",
            Provider::Quay => "quay-token",
            Provider::Generic => "generic-secret",
        }
    }

    /// Position in [`Provider::ALL`], used to index per-provider arrays.
    fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
