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
pub mod forge;
pub mod git;
pub mod http;
pub mod import;
pub mod notify;
pub mod registry;
pub mod scan;
pub mod setimage;
pub mod signature;
pub mod sources;
pub mod telemetry;
pub mod ttl_cache;
pub mod writer;

// The pure decisions live in the `imagewatch-engine` crate; these paths keep naming them.
pub use imagewatch_engine::{manifests, policy};

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
