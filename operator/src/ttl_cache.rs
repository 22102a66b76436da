//! A small map whose entries are used for a fixed time after they were stored: the caches of
//! Secrets, Argo CD Application sources and recent git fetches.
//!
//! Kept rather than moka / mini-moka: callers stamp an entry with the instant its read
//! *started* and ask with an explicit `now`, so the TTL counts from the read and tests drive
//! time with made-up instants. moka's time-to-live starts at insertion on its own clock,
//! which tests cannot move, so the 15 s boundary and the pruning test would need sleeps.

use std::{
    collections::HashMap,
    hash::Hash,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

/// Above this many entries, expired ones are dropped when one is added.
const PRUNE_AT: usize = 1024;

/// Values by key, each handed out for `ttl` after the moment it was stored at.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    ttl: Duration,
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    /// An empty cache whose entries last `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::default(),
        }
    }

    /// The value stored for `key` less than the TTL before `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(key)
            .filter(|(at, _)| now.saturating_duration_since(*at) < self.ttl)
            .map(|(_, value)| value.clone())
    }

    /// Stores `value` for `key` as of `at`.
    pub fn put(&self, key: K, at: Instant, value: V) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= PRUNE_AT {
            let ttl = self.ttl;
            entries.retain(|_, (t, _)| at.saturating_duration_since(*t) < ttl);
        }
        entries.insert(key, (at, value));
    }

    /// Forgets `key`.
    pub fn forget(&self, key: &K) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_last_their_ttl_and_can_be_forgotten() {
        let cache = TtlCache::new(Duration::from_secs(15));
        let t0 = Instant::now();
        assert_eq!(cache.get(&"a", t0), None);
        cache.put("a", t0, 1);
        assert_eq!(cache.get(&"a", t0 + Duration::from_secs(14)), Some(1));
        assert_eq!(cache.get(&"b", t0), None);
        assert_eq!(cache.get(&"a", t0 + Duration::from_secs(15)), None);
        cache.put("a", t0, 2);
        cache.forget(&"a");
        assert_eq!(cache.get(&"a", t0), None);
    }

    #[test]
    fn expired_entries_are_pruned_when_the_cache_is_large() {
        let cache = TtlCache::new(Duration::from_secs(1));
        let t0 = Instant::now();
        for i in 0..PRUNE_AT {
            cache.put(i, t0, i);
        }
        cache.put(PRUNE_AT, t0 + Duration::from_secs(2), PRUNE_AT);
        assert_eq!(cache.entries.lock().unwrap().len(), 1);
    }
}
