//! Triggers: what makes imagewatch look at a registry repository now instead of at its next
//! polling interval — registry webhooks and SQS messages (ECR via EventBridge).
//!
//! A trigger never causes a commit by itself: it only asks the repository index to rescan the
//! named repository, and only when some watch references it. The registry's answer decides.

pub use imagewatch_registry::RegistryEvent;

pub mod config;
pub mod eventbridge;
pub mod routing;
pub mod sqs;
pub mod start;
pub mod webhook;
