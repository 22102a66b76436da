//! [`HeadLocks`]: one lock per (forge, repository, head branch), so that two reconciles never
//! both find no pull request for one head and both open one (a forge's own duplicate check is
//! not atomic). Built once at start-up and handed to whoever proposes or closes pull requests.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use crate::ForgeClient;

/// The locks of the pull requests being proposed or closed, by forge, repository and head.
#[derive(Debug, Default)]
pub struct HeadLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl HeadLocks {
    /// Waits for the lock of `head` on `forge`'s repository and holds it until the guard drops.
    pub async fn lock(&self, forge: &ForgeClient, head: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let key = format!("{} {} {head}", forge.api_url(), forge.repository());
        let lock = {
            let mut locks = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            // Forget locks nobody holds or waits for, so the map stays small.
            locks.retain(|_, l| Arc::strong_count(l) > 1);
            locks.entry(key).or_default().clone()
        };
        lock.lock_owned().await
    }
}
