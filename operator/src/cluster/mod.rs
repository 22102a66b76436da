//! The Kubernetes edge the controllers share: the Secrets a watch names, Argo CD lookups and
//! the following of commits to running Applications (`deploy`), the
//! admin's allow-list (decided in `allow`, read in `allowance`), admin freezes (`freeze`), the
//! namespaces watched, and the
//! Leases and peer endpoint of sharding.

pub mod allow;
pub mod allowance;
pub mod argocd;
pub mod deploy;
pub mod finalizers;
pub mod freeze;
pub mod invalid;
pub mod namespaces;
pub mod secrets;
pub mod shard;
