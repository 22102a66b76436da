//! imagewatch: a Kubernetes operator that moves new container image tags into GitOps
//! manifest repositories.
//!
//! Flow: triggers (polling, later registry events) → registry scan → tag policy → read the
//! current tag from Git → edit intent → git writer (commit, push, retry) → status, Events, metrics.

pub mod cli;
pub mod controller;
pub mod forge;
pub mod git;
pub mod import;
pub mod manifests;
pub mod policy;
pub mod promotion;
pub mod registry;
pub mod signature;
pub mod telemetry;
pub mod triggers;
