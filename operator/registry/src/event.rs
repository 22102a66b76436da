//! What a registry event says: which repository changed, and when. Triggers (`sources/`)
//! produce it; the router, the index and the peers of sharding consume it.

/// A registry said something changed in a repository.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RegistryEvent {
    /// Registry host\[:port\] as watches spell it (e.g. `123456789012.dkr.ecr.us-east-1.amazonaws.com`).
    pub registry: String,
    /// Repository path inside the registry (e.g. `team/my-api`).
    pub repository: String,
    /// Tag, when the event names one.
    pub tag: Option<String>,
    /// Manifest digest, when the event names one.
    pub digest: Option<String>,
    /// Where it came from: `distribution`, `dockerhub`, `ghcr`, `harbor`, `quay`, `generic`, `sqs`.
    pub source: &'static str,
    /// When the registry says the event happened, when the payload says (the time a new tag
    /// is ordered by under `order: Newest`).
    pub at: Option<jiff::Timestamp>,
}
