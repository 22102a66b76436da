//! [`Shared`]: what every PromotionPolicy reconcile shares; each step builds its own context
//! from it.

use std::{collections::HashMap, sync::Arc, time::Duration};

use imagewatch_crd::PromotionPolicy;
use kube::{core::DeserializeGuard, runtime::reflector::ObjectRef};
use tokio::sync::Mutex;

use crate::{controllers::Context, git::RepoCache};

/// What every policy reconcile shares.
pub(super) struct Shared {
    pub(super) ctx: Arc<Context>,
    /// The git writer's clone cache, for reading the target before deciding; commits go
    /// through the writer itself (`ctx.writer`).
    pub(super) cache: Arc<RepoCache>,
    pub(super) failures: Mutex<HashMap<ObjectRef<DeserializeGuard<PromotionPolicy>>, u32>>,
    pub(super) close_timeout: Duration,
}
