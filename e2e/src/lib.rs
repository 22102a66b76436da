//! Test support for the end-to-end tests: the shared test ground (real kube-apiserver, registry,
//! moto, git server), a fresh namespace per test, clients for the admin and for a chosen
//! ServiceAccount, and the operator as a real process.
//!
//! The ground is started once by `e2e/scripts/testground.sh up` (`just test` does it) and found
//! through `$IMAGEWATCH_E2E_STATE/env`; when it is not running, the first test starts it.
//! Everything a test starts itself (namespaces, repositories, the operator) is stopped or
//! deleted when its handle drops, also when the test fails.

pub mod argocd;
pub mod bench;
pub mod chart;
pub mod disk;
pub mod faultproxy;
pub mod gitea;
pub mod ground;
pub mod node;
pub mod notifying;
pub mod oci_push;
pub mod operator;
pub mod seed000;
pub mod setup;
pub mod token_registry;
pub mod wait;

pub use ground::{GitServer, Ground, Registry, TestNamespace};
pub use notifying::NotifyingRegistry;
pub use operator::Operator;
pub use wait::wait_until;
