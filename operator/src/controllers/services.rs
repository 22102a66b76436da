//! The controllers' shared context seen through the narrow views that lower layers ask for:
//! reading Secrets (`cluster::secrets`) and routing events (`sources::routing`). Those
//! modules define what they need; the context provides it here, so they never import the
//! controllers. [`SecretReader`] is the same view borrowed on its own, for the steps'
//! contexts that read Secrets.

use crate::{
    cluster::secrets::{SecretAccess, SecretCache},
    controllers::Context,
    scan::{appearances::Appearances, index::RepositoryIndex},
    sources::routing::{PendingEvents, RouteTargets},
    telemetry::Metrics,
};

/// What reading a tenant's Secrets takes: the client, the short-lived Secret cache and the
/// metrics credential refreshes are counted in.
#[derive(Clone, Copy)]
pub struct SecretReader<'a> {
    client: &'a kube::Client,
    cache: &'a SecretCache,
    metrics: &'a Metrics,
}

impl<'a> SecretReader<'a> {
    /// The Secret reader of the shared services.
    pub fn of(ctx: &'a Context) -> Self {
        SecretReader {
            client: &ctx.client,
            cache: &ctx.secrets,
            metrics: &ctx.metrics,
        }
    }
}

impl SecretAccess for SecretReader<'_> {
    fn client(&self) -> &kube::Client {
        self.client
    }
    fn secret_cache(&self) -> &SecretCache {
        self.cache
    }
    fn metrics(&self) -> &Metrics {
        self.metrics
    }
}

impl SecretAccess for Context {
    fn client(&self) -> &kube::Client {
        &self.client
    }
    fn secret_cache(&self) -> &SecretCache {
        &self.secrets
    }
    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

impl RouteTargets for Context {
    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
    fn forward_to_peers(&self, event: &crate::registry::RegistryEvent) {
        if let Some(shards) = &self.shards {
            shards.forward(event);
        }
    }
    fn appearances(&self) -> &Appearances {
        &self.appearances
    }
    fn index(&self) -> &RepositoryIndex {
        &self.index
    }
    fn pending(&self) -> &PendingEvents {
        &self.pending
    }
}
