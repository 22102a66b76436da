//! imagewatch: a Kubernetes operator that moves new container image tags into GitOps
//! manifest repositories.
//!
//! Flow: triggers (polling, later registry events) → registry scan → tag policy → read the
//! current tag from Git → edit intent → git writer (commit, push, retry) → status, Events, metrics.

pub mod app;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod controllers;
pub mod error;
pub mod explain;
pub mod import;
pub mod notify;
pub mod setimage;

// The pure decisions live in the `imagewatch-engine` crate, the clients in the crates beside
// it (see the code layout in operator/README.md); these paths name them from the binary.
pub use imagewatch_engine::{manifests, policy};
pub use imagewatch_forge as forge;
pub use imagewatch_git::{self as git, writer};
pub use imagewatch_registry::{self as registry, scan, signature};
pub use imagewatch_sources as sources;
pub use imagewatch_support::{http, ttl_cache};
pub use imagewatch_telemetry as telemetry;

/// Promotion decisions: [`imagewatch_engine::promotion`], plus the reading of listed ImageWatch
/// objects into the parts it takes.
pub mod promotion {
    pub use imagewatch_engine::promotion::*;

    use imagewatch_crd::ImageWatch;
    use kube::ResourceExt;

    /// [`imagewatch_engine::promotion::sources_from_watches`] of listed ImageWatch objects.
    pub fn sources_from_watches(watches: &[ImageWatch]) -> Result<SourceState, String> {
        let names: Vec<String> = watches.iter().map(|w| w.name_any()).collect();
        let parts: Vec<WatchSource<'_>> = watches
            .iter()
            .zip(&names)
            .map(|(watch, name)| WatchSource {
                name,
                spec: &watch.spec,
                status: watch.status.as_ref(),
            })
            .collect();
        imagewatch_engine::promotion::sources_from_watches(&parts)
    }
}
