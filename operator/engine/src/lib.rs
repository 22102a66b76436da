//! imagewatch-engine: the pure decisions of imagewatch, with no I/O of their own.
//!
//! The operator (`operator/src`) reads the registry, Git and the cluster, and hands what it read
//! to the functions here: which tag a watch follows ([`policy`]), how a manifest changes to hold
//! it ([`manifests`]), what a PromotionPolicy proposes and whether its gates let it
//! ([`promotion`]), and the whole-file edits the git writer commits ([`edit`]).
//!
//! The crate depends on no tokio, kube, git2, reqwest, hyper, axum or AWS crate (it sees the
//! resource types through `imagewatch-crd` without its `kube` feature), so the compiler keeps
//! these decisions pure; `tests/purity.rs` fails when such a dependency appears.

pub mod argocd;
pub mod choice;
pub mod considered;
pub mod duration;
pub mod edit;
pub mod explain;
pub mod forge;
pub mod group;
pub mod held;
pub mod history;
pub mod manifests;
pub mod members;
pub mod notify;
pub mod pattern;
pub mod platforms;
pub mod policy;
pub mod promotion;
pub mod recheck;
pub mod refused;
pub mod signature;
pub mod stages;
pub mod status;
pub mod values;
pub mod watch_target;
pub mod windows;
