//! A small map whose entries are used for a fixed time after they were stored: the caches of
//! Secrets, Argo CD Application sources and recent git fetches.
//!
//! Kept rather than moka / mini-moka: callers stamp an entry with the instant its read
//! *started* and ask with an explicit `now`, so the TTL counts from the read and tests drive
//! time with made-up instants. moka's time-to-live starts at insertion on its own clock,
//! which tests cannot move, so the 15 s boundary and the pruning test would need sleeps.
//!
//! [`TtlCache::get_or_read`] reads a missing entry once however many callers miss it at the
//! same moment (single flight): when a Secret named by every watch of a namespace expires,
//! the reconciles running at that moment share one read instead of each making its own
//! (a 50,000-watch first sync read its two Secrets 442 times in 250 s before).

use std::{
    collections::HashMap,
    future::Future,
    hash::Hash,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

/// Above this many entries, expired ones are dropped when one is added.
const PRUNE_AT: usize = 1024;

/// Values by key, each handed out for `ttl` after the moment it was stored at.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    ttl: Duration,
    entries: Mutex<HashMap<K, (Instant, V)>>,
    /// The reads in flight, by key: held by the caller reading, awaited by the others.
    reads: Mutex<HashMap<K, Arc<tokio::sync::Mutex<()>>>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    /// An empty cache whose entries last `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::default(),
            reads: Mutex::default(),
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

    /// The value stored for `key` less than the TTL ago; else what `read` finds, stored as of
    /// the moment the read started. Callers that miss `key` at the same time share one read:
    /// the first reads, the others wait for it and take what it stored. A read that finds
    /// nothing (`Ok(None)`) forgets `key`; neither it nor an error is shared, so a waiter then
    /// reads for itself.
    pub async fn get_or_read<E, Fut>(
        &self,
        key: &K,
        read: impl FnOnce() -> Fut,
    ) -> Result<Option<V>, E>
    where
        K: Clone,
        Fut: Future<Output = Result<Option<V>, E>>,
    {
        if let Some(value) = self.get(key, Instant::now()) {
            return Ok(Some(value));
        }
        let flight = {
            let mut reads = self.reads.lock().unwrap_or_else(PoisonError::into_inner);
            reads.entry(key.clone()).or_default().clone()
        };
        let result = {
            let _reading = flight.lock().await;
            match self.get(key, Instant::now()) {
                Some(value) => Ok(Some(value)),
                None => {
                    let started = Instant::now();
                    let result = read().await;
                    match &result {
                        Ok(Some(value)) => self.put(key.clone(), started, value.clone()),
                        Ok(None) => self.forget(key),
                        Err(_) => {}
                    }
                    result
                }
            }
        };
        // The last caller of this flight removes it (the map holds one reference, each caller
        // another): the map of reads stays as small as the reads in progress.
        let mut reads = self.reads.lock().unwrap_or_else(PoisonError::into_inner);
        if Arc::strong_count(&flight) == 2 {
            reads.remove(key);
        }
        result
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

    #[tokio::test]
    async fn callers_missing_one_key_at_once_share_one_read() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let cache: TtlCache<&str, u32> = TtlCache::new(Duration::from_secs(15));
        let reads = AtomicUsize::new(0);
        let opened = tokio::sync::Semaphore::new(0);
        let read = || async {
            reads.fetch_add(1, Ordering::SeqCst);
            let _ = opened.acquire().await;
            Ok::<_, ()>(Some(7))
        };
        // Every caller misses and waits before the one read is let finish.
        let (answers, ()) = futures::join!(
            futures::future::join_all((0..20).map(|_| cache.get_or_read(&"secret", read))),
            async {
                tokio::task::yield_now().await;
                opened.add_permits(1);
            }
        );
        assert!(answers.iter().all(|a| *a == Ok(Some(7))));
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        assert!(cache.reads.lock().unwrap().is_empty());

        // Still fresh: no read. Expired: one more.
        assert_eq!(cache.get_or_read(&"secret", read).await, Ok(Some(7)));
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        cache.put("secret", Instant::now() - Duration::from_secs(16), 7);
        assert_eq!(cache.get_or_read(&"secret", read).await, Ok(Some(7)));
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn nothing_found_and_failures_are_not_shared() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let cache: TtlCache<&str, u32> = TtlCache::new(Duration::from_secs(15));
        cache.put("gone", Instant::now() - Duration::from_secs(20), 1);
        let reads = AtomicUsize::new(0);
        let missing = || async {
            reads.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            Ok::<Option<u32>, String>(None)
        };
        let answers =
            futures::future::join_all((0..3).map(|_| cache.get_or_read(&"gone", missing))).await;
        assert!(answers.iter().all(|a| *a == Ok(None)));
        assert_eq!(reads.load(Ordering::SeqCst), 3);
        assert!(cache.entries.lock().unwrap().is_empty());

        let failing = || async { Err::<Option<u32>, String>("refused".into()) };
        assert_eq!(
            cache.get_or_read(&"gone", failing).await,
            Err("refused".to_string())
        );
        assert_eq!(cache.get(&"gone", Instant::now()), None);
    }
}
