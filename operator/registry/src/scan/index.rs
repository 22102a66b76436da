//! Repository index: one registry scan per repository per interval, however many watches use
//! it, and immediate rescans when a trigger names the repository.
//!
//! Reconciles ask the index for a repository's tags with the interval they tolerate. A scan
//! younger than that (and not invalidated by an event since) is shared; otherwise the first
//! caller scans while the others wait for its result (single flight). Digests resolved for a
//! scan are cached with it, so a HEAD is made once per tag per scan, not once per watch.
//!
//! Scans are keyed by repository *and* credentials: watches in different namespaces never share
//! a scan made with another namespace's Secret.
//!
//! Pattern watches also ask for a registry's list of repositories (its catalog, or ECR's
//! `DescribeRepositories`) with the same rules: one listing per registry and credentials per
//! interval, single flight, and an event naming a repository the cached list lacks (a new
//! repository) makes the next caller list again.

use std::{
    collections::HashMap,
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::Mutex;

use crate::RegistryError;
use imagewatch_engine::policy::TagInfo;

/// Which credentials a scan used.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CredentialKey {
    /// No credentials.
    Anonymous,
    /// A dockerconfigjson Secret.
    Secret {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The operator's own cloud identity (ECR).
    Ambient,
}

/// One scanned repository with one set of credentials.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScanKey {
    /// Registry host\[:port\].
    pub registry: String,
    /// Repository path.
    pub repository: String,
    /// Credentials used.
    pub credentials: CredentialKey,
    /// Whether push times were asked for (Newest order on registries that do not list them).
    pub with_times: bool,
}

/// The result of one scan.
#[derive(Debug)]
pub struct Scan {
    /// Tags, at most the index's bound (the newest ones when push times are known).
    pub tags: Vec<TagInfo>,
    /// Tags the registry listed before bounding.
    pub listed: usize,
    /// When the scan finished.
    pub at: Instant,
    digests: Mutex<HashMap<String, Option<String>>>,
}

impl Scan {
    /// The digest of `tag` for this scan: the one the listing carried, a cached lookup, or
    /// `fetch` (run once per tag per scan).
    pub async fn digest<F, Fut>(&self, tag: &str, fetch: F) -> Result<Option<String>, RegistryError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<String>, RegistryError>>,
    {
        if let Some(d) = self
            .tags
            .iter()
            .find(|t| t.tag == tag)
            .and_then(|t| t.digest.clone())
        {
            return Ok(Some(d));
        }
        let mut digests = self.digests.lock().await;
        if let Some(known) = digests.get(tag) {
            return Ok(known.clone());
        }
        let fetched = fetch().await?;
        digests.insert(tag.to_string(), fetched.clone());
        Ok(fetched)
    }
}

/// One listed registry with one set of credentials.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CatalogKey {
    /// Registry host\[:port\].
    pub registry: String,
    /// Credentials used.
    pub credentials: CredentialKey,
}

/// The repositories of one registry, as one listing saw them.
#[derive(Debug)]
pub struct Catalog {
    /// Repository names, sorted, without duplicates.
    pub repositories: Vec<String>,
    /// When the listing finished.
    pub at: Instant,
}

impl Catalog {
    /// Whether the listing holds `repository`.
    pub fn contains(&self, repository: &str) -> bool {
        self.repositories
            .binary_search_by(|r| r.as_str().cmp(repository))
            .is_ok()
    }
}

/// Something cached with the time it was made.
trait Made {
    fn at(&self) -> Instant;
}

impl Made for Scan {
    fn at(&self) -> Instant {
        self.at
    }
}

impl Made for Catalog {
    fn at(&self) -> Instant {
        self.at
    }
}

struct Entry<T> {
    /// Held while scanning, so concurrent callers wait for one scan.
    current: Mutex<Option<Arc<T>>>,
    /// Set when an event names the repository; the next caller rescans.
    stale: std::sync::atomic::AtomicBool,
}

impl<T> Default for Entry<T> {
    fn default() -> Self {
        Self {
            current: Mutex::new(None),
            stale: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl<T: Made> Entry<T> {
    /// The cached value when it is younger than `max_age` and not stale; otherwise `make`'s,
    /// made by the first caller while the others wait. `Ok((value, made_now))`.
    async fn get<F, Fut>(&self, max_age: Duration, make: F) -> Result<(Arc<T>, bool), RegistryError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, RegistryError>>,
    {
        use std::sync::atomic::Ordering;
        let mut current = self.current.lock().await;
        let stale = self.stale.load(Ordering::Acquire);
        if let Some(existing) = current.as_ref()
            && !stale
            && existing.at().elapsed() < max_age
        {
            return Ok((existing.clone(), false));
        }
        // Clear before scanning: an event arriving during the scan marks it stale again.
        self.stale.store(false, Ordering::Release);
        let made = match make().await {
            Ok(made) => Arc::new(made),
            Err(e) => {
                if stale {
                    self.stale.store(true, Ordering::Release);
                }
                return Err(e);
            }
        };
        *current = Some(made.clone());
        Ok((made, true))
    }

    fn mark_stale(&self) {
        self.stale.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Counters for metrics and tests.
#[derive(Debug, Default)]
pub struct IndexStats {
    /// Scans made.
    pub scans: std::sync::atomic::AtomicU64,
    /// Requests answered from a shared scan.
    pub shared: std::sync::atomic::AtomicU64,
    /// Repository listings made (pattern watches).
    pub listings: std::sync::atomic::AtomicU64,
}

/// The index (shared by every reconcile).
pub struct RepositoryIndex {
    entries: std::sync::Mutex<HashMap<ScanKey, Arc<Entry<Scan>>>>,
    catalogs: std::sync::Mutex<HashMap<CatalogKey, Arc<Entry<Catalog>>>>,
    max_tags: usize,
    /// Counters.
    pub stats: IndexStats,
}

impl RepositoryIndex {
    /// An index keeping at most `max_tags` tags per repository.
    pub fn new(max_tags: usize) -> Self {
        Self {
            entries: std::sync::Mutex::default(),
            catalogs: std::sync::Mutex::default(),
            max_tags: max_tags.max(1),
            stats: IndexStats::default(),
        }
    }

    fn entry(&self, key: &ScanKey) -> Arc<Entry<Scan>> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.entry(key.clone()).or_default().clone()
    }

    /// The repositories of `key`'s registry, from a listing at most `max_age` old (and made
    /// after the last event naming a repository it lacked), running `list` when none is.
    /// `list` returns the names in any order.
    pub async fn repositories<F, Fut>(
        &self,
        key: &CatalogKey,
        max_age: Duration,
        list: F,
    ) -> Result<Arc<Catalog>, RegistryError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<String>, RegistryError>>,
    {
        let entry = {
            let mut catalogs = self.catalogs.lock().unwrap_or_else(|p| p.into_inner());
            catalogs.entry(key.clone()).or_default().clone()
        };
        let (catalog, made) = entry
            .get(max_age, || async {
                let mut repositories = list().await?;
                repositories.sort();
                repositories.dedup();
                Ok(Catalog {
                    repositories,
                    at: Instant::now(),
                })
            })
            .await?;
        if made {
            self.stats
                .listings
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(catalog)
    }

    /// The tags of `key`'s repository, from a scan at most `max_age` old (and newer than the
    /// last event naming it), running `scan` when none is.
    pub async fn tags<F, Fut>(
        &self,
        key: &ScanKey,
        max_age: Duration,
        scan: F,
    ) -> Result<Arc<Scan>, RegistryError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<TagInfo>, RegistryError>>,
    {
        use std::sync::atomic::Ordering;
        let entry = self.entry(key);
        let max_tags = self.max_tags;
        let (scan, made) = entry
            .get(max_age, || async {
                let listed = scan().await?;
                let count = listed.len();
                Ok(Scan {
                    tags: bound_tags(listed, max_tags),
                    listed: count,
                    at: Instant::now(),
                    digests: Mutex::default(),
                })
            })
            .await?;
        if made {
            self.stats.scans.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stats.shared.fetch_add(1, Ordering::Relaxed);
        }
        Ok(scan)
    }

    /// Marks stale every scan of `registry` whose repository `repository` accepts; whether
    /// there was one.
    fn mark_scans_stale(&self, registry: &str, repository: impl Fn(&str) -> bool) -> bool {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut known = false;
        for (key, entry) in entries.iter() {
            if key.registry == registry && repository(&key.repository) {
                entry.mark_stale();
                known = true;
            }
        }
        known
    }

    /// Marks every scan of `registry`/`repository` stale, and every listing of `registry`
    /// that lacks `repository` (a new repository a pattern watch may match). Returns whether
    /// any scan of the repository was known.
    pub fn invalidate(&self, registry: &str, repository: &str) -> bool {
        let known = self.mark_scans_stale(registry, |r| r == repository);
        let catalogs = self.catalogs.lock().unwrap_or_else(|p| p.into_inner());
        for (key, entry) in catalogs.iter() {
            if key.registry != registry {
                continue;
            }
            // A listing in progress may or may not see the repository: list again after it.
            let lacks = match entry.current.try_lock() {
                Ok(current) => current.as_ref().is_none_or(|c| !c.contains(repository)),
                Err(_) => true,
            };
            if lacks {
                entry.mark_stale();
            }
        }
        known
    }

    /// Marks stale every scan of `registry` whose repository `repository` accepts, and every
    /// listing of `registry`: the next caller scans (lists) afresh. For a re-check asked for
    /// by a person.
    pub fn refresh(&self, registry: &str, repository: impl Fn(&str) -> bool) {
        self.mark_scans_stale(registry, repository);
        let catalogs = self.catalogs.lock().unwrap_or_else(|p| p.into_inner());
        for (key, entry) in catalogs.iter() {
            if key.registry == registry {
                entry.mark_stale();
            }
        }
    }

    /// Forgets the scans and listings no watch references any more: those `keep_scan` and
    /// `keep_catalog` refuse. A scan in progress is not disturbed (its callers hold the entry).
    /// Returns how many were forgotten.
    pub fn retain(
        &self,
        keep_scan: impl Fn(&ScanKey) -> bool,
        keep_catalog: impl Fn(&CatalogKey) -> bool,
    ) -> usize {
        let mut forgotten = 0;
        {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            let before = entries.len();
            entries.retain(|k, _| keep_scan(k));
            forgotten += before - entries.len();
        }
        let mut catalogs = self.catalogs.lock().unwrap_or_else(|p| p.into_inner());
        let before = catalogs.len();
        catalogs.retain(|k, _| keep_catalog(k));
        forgotten + before - catalogs.len()
    }

    /// Number of registry listings (pattern watches) tracked.
    pub fn catalogs_len(&self) -> usize {
        self.catalogs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Number of repositories (with distinct credentials) tracked.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Keeps at most `max` tags: the most recently pushed when push times are known, otherwise
/// the last ones listed (registries list in lexical or push order; either way the tail holds
/// the newest of a release train). Pure.
pub fn bound_tags(mut tags: Vec<TagInfo>, max: usize) -> Vec<TagInfo> {
    if tags.len() <= max {
        return tags;
    }
    if tags.iter().all(|t| t.pushed_at.is_some()) {
        tags.sort_by(|a, b| {
            b.pushed_at
                .cmp(&a.pushed_at)
                .then_with(|| b.tag.cmp(&a.tag))
        });
        tags.truncate(max);
        tags
    } else {
        tags.split_off(tags.len() - max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn key(repo: &str) -> ScanKey {
        ScanKey {
            registry: "r.example".into(),
            repository: repo.into(),
            credentials: CredentialKey::Anonymous,
            with_times: false,
        }
    }

    fn tags(n: usize) -> Vec<TagInfo> {
        (0..n).map(|i| TagInfo::new(format!("v{i}"))).collect()
    }

    #[tokio::test]
    async fn concurrent_callers_share_one_scan() {
        let index = Arc::new(RepositoryIndex::new(1000));
        let calls = Arc::new(AtomicU32::new(0));
        let mut handles = Vec::new();
        for _ in 0..200 {
            let index = index.clone();
            let calls = calls.clone();
            handles.push(tokio::spawn(async move {
                index
                    .tags(&key("app"), Duration::from_secs(60), || async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        Ok(tags(3))
                    })
                    .await
                    .map(|s| s.tags.len())
            }));
        }
        for h in handles {
            assert_eq!(h.await.unwrap().unwrap(), 3);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(index.stats.shared.load(Ordering::SeqCst), 199);
    }

    #[tokio::test]
    async fn an_event_forces_one_rescan_of_that_repository_only() {
        let index = RepositoryIndex::new(1000);
        let calls = AtomicU32::new(0);
        let scan = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(tags(1))
        };
        index
            .tags(&key("a"), Duration::from_secs(60), scan)
            .await
            .unwrap();
        index
            .tags(&key("b"), Duration::from_secs(60), scan)
            .await
            .unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(index.invalidate("r.example", "a"));
        assert!(!index.invalidate("r.example", "unknown"));
        index
            .tags(&key("a"), Duration::from_secs(60), scan)
            .await
            .unwrap();
        index
            .tags(&key("a"), Duration::from_secs(60), scan)
            .await
            .unwrap();
        index
            .tags(&key("b"), Duration::from_secs(60), scan)
            .await
            .unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            3,
            "a rescanned once, b not at all"
        );
    }

    #[tokio::test]
    async fn an_old_scan_is_refreshed() {
        let index = RepositoryIndex::new(1000);
        let calls = AtomicU32::new(0);
        let scan = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(tags(1))
        };
        index
            .tags(&key("a"), Duration::from_secs(60), scan)
            .await
            .unwrap();
        index.tags(&key("a"), Duration::ZERO, scan).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_scan_is_not_cached_and_keeps_the_event() {
        let index = RepositoryIndex::new(1000);
        index
            .tags(&key("a"), Duration::from_secs(60), || async { Ok(tags(1)) })
            .await
            .unwrap();
        index.invalidate("r.example", "a");
        let err = index
            .tags(&key("a"), Duration::from_secs(60), || async {
                Err(RegistryError::Transport("down".into()))
            })
            .await;
        assert!(err.is_err());
        let calls = AtomicU32::new(0);
        index
            .tags(&key("a"), Duration::from_secs(60), || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok(tags(2))
            })
            .await
            .unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "the event still asks for a rescan"
        );
    }

    #[tokio::test]
    async fn digests_are_fetched_once_per_scan() {
        let index = RepositoryIndex::new(1000);
        let scan = index
            .tags(&key("a"), Duration::from_secs(60), || async { Ok(tags(2)) })
            .await
            .unwrap();
        let calls = AtomicU32::new(0);
        for _ in 0..5 {
            let d = scan
                .digest("v1", || async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Ok(Some("sha256:1".to_string()))
                })
                .await
                .unwrap();
            assert_eq!(d.as_deref(), Some("sha256:1"));
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    fn catalog_key(registry: &str) -> CatalogKey {
        CatalogKey {
            registry: registry.into(),
            credentials: CredentialKey::Anonymous,
        }
    }

    #[tokio::test]
    async fn one_listing_per_registry_and_interval_shared_by_concurrent_callers() {
        let index = Arc::new(RepositoryIndex::new(1000));
        let calls = Arc::new(AtomicU32::new(0));
        let mut handles = Vec::new();
        for _ in 0..50 {
            let index = index.clone();
            let calls = calls.clone();
            handles.push(tokio::spawn(async move {
                index
                    .repositories(
                        &catalog_key("r.example"),
                        Duration::from_secs(60),
                        || async move {
                            calls.fetch_add(1, Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            Ok(vec!["b/api".into(), "a/api".into(), "b/api".into()])
                        },
                    )
                    .await
                    .map(|c| c.repositories.clone())
            }));
        }
        for h in handles {
            assert_eq!(h.await.unwrap().unwrap(), vec!["a/api", "b/api"]);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(index.stats.listings.load(Ordering::SeqCst), 1);
        // Another registry is listed on its own; an old listing is refreshed.
        index
            .repositories(
                &catalog_key("other.example"),
                Duration::from_secs(60),
                || async { Ok(vec![]) },
            )
            .await
            .unwrap();
        index
            .repositories(&catalog_key("r.example"), Duration::ZERO, || async {
                Ok(vec![])
            })
            .await
            .unwrap();
        assert_eq!(index.stats.listings.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn an_event_for_a_new_repository_relists_its_registry_only() {
        let index = RepositoryIndex::new(1000);
        let calls = AtomicU32::new(0);
        let list = |names: Vec<String>| {
            let calls = &calls;
            move || async move {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok(names)
            }
        };
        let key = catalog_key("r.example");
        let first = index
            .repositories(
                &key,
                Duration::from_secs(60),
                list(vec!["svc/a/api".into()]),
            )
            .await
            .unwrap();
        assert!(first.contains("svc/a/api") && !first.contains("svc/b/api"));
        // An event for a repository the listing already has: no new listing.
        index.invalidate("r.example", "svc/a/api");
        index
            .repositories(&key, Duration::from_secs(60), list(vec![]))
            .await
            .unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Events for another registry change nothing here.
        index.invalidate("other.example", "svc/b/api");
        index
            .repositories(&key, Duration::from_secs(60), list(vec![]))
            .await
            .unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // A new repository: the next caller lists again and sees it.
        index.invalidate("r.example", "svc/b/api");
        let second = index
            .repositories(
                &key,
                Duration::from_secs(60),
                list(vec!["svc/a/api".into(), "svc/b/api".into()]),
            )
            .await
            .unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(second.contains("svc/b/api"));
    }

    #[tokio::test]
    async fn a_failed_listing_is_not_cached() {
        let index = RepositoryIndex::new(1000);
        let key = catalog_key("r.example");
        let err = index
            .repositories(&key, Duration::from_secs(60), || async {
                Err(RegistryError::Transport("down".into()))
            })
            .await;
        assert!(err.is_err());
        let listed = index
            .repositories(&key, Duration::from_secs(60), || async {
                Ok(vec!["x".into()])
            })
            .await
            .unwrap();
        assert_eq!(listed.repositories, vec!["x"]);
        assert_eq!(index.stats.listings.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn scans_no_watch_references_are_forgotten() {
        let index = RepositoryIndex::new(10);
        for repo in ["kept", "gone"] {
            index
                .tags(&key(repo), Duration::from_secs(60), || async {
                    Ok(tags(2))
                })
                .await
                .unwrap();
        }
        index
            .repositories(
                &catalog_key("r.example"),
                Duration::from_secs(60),
                || async { Ok(vec!["a".to_string()]) },
            )
            .await
            .unwrap();
        assert_eq!((index.len(), index.catalogs_len()), (2, 1));
        let forgotten = index.retain(|k| k.repository == "kept", |_| false);
        assert_eq!(forgotten, 2);
        assert_eq!((index.len(), index.catalogs_len()), (1, 0));
        // The kept scan is still served from the cache.
        let before = index.stats.scans.load(std::sync::atomic::Ordering::Relaxed);
        index
            .tags(&key("kept"), Duration::from_secs(60), || async {
                Ok(tags(2))
            })
            .await
            .unwrap();
        assert_eq!(
            index.stats.scans.load(std::sync::atomic::Ordering::Relaxed),
            before
        );
    }

    #[test]
    fn the_tag_cache_is_bounded_to_the_newest() {
        let many: Vec<TagInfo> = (0..10_000)
            .map(|i| TagInfo {
                tag: format!("b{i}"),
                digest: None,
                pushed_at: Some(jiff::Timestamp::from_second(1_700_000_000 + i).unwrap()),
            })
            .collect();
        let kept = bound_tags(many, 1000);
        assert_eq!(kept.len(), 1000);
        assert_eq!(kept[0].tag, "b9999");
        assert!(
            kept.iter()
                .all(|t| t.tag.trim_start_matches('b').parse::<i64>().unwrap() >= 9000)
        );
        let listed = bound_tags(tags(10_000), 1000);
        assert_eq!(listed.len(), 1000);
        assert_eq!(listed.last().unwrap().tag, "v9999");
    }
}
