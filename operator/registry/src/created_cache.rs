//! Scan step, the memory of created-time lookups: what is remembered per tag and per
//! manifest digest, bounded, and which tags a scan looks up next (`plan_lookups`); and per
//! digest the platforms an image provides (`spec.tags.platforms`). No I/O: the lookups
//! themselves are in [`super::metadata`] and [`super::platforms`]; the cache lives in the
//! client.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use imagewatch_engine::platforms::Platform;
use tokio::time::Instant;

/// A tag's remembered time is checked again (one `HEAD`; a blob read only if the tag moved)
/// after this long, using budget left over by never-seen tags.
pub const RECHECK_AFTER: Duration = Duration::from_secs(24 * 3600);
/// A tag whose lookup failed (broken manifest, missing blob) is tried again after this long.
pub const RETRY_FAILED_AFTER: Duration = Duration::from_secs(3600);
/// Bound on remembered digests; beyond it the digest cache starts over (tag answers stay).
const MAX_DIGESTS: usize = 100_000;
/// Bound on repositories with remembered tag times; the least recently used go first.
const MAX_REPOSITORIES: usize = 4096;

/// What is remembered about one tag.
#[derive(Debug, Clone, PartialEq)]
pub struct TagTime {
    pub created: Option<jiff::Timestamp>,
    /// Digest the time was read for, when known.
    pub digest: Option<String>,
    pub checked: Instant,
    /// The lookup failed; `created` is whatever an earlier lookup found.
    pub failed: bool,
}

/// Remembered tag times of one repository.
#[derive(Debug, Default)]
pub struct RepoTimes {
    listed_before: bool,
    /// Tags of the repository's first listing that are still listed. A tag that was never
    /// looked up and is not in here appeared after the first scan: a fresh push.
    baseline: HashSet<String>,
    pub tags: HashMap<String, TagTime>,
}

impl RepoTimes {
    /// Forgets tags that are no longer listed; the first listing becomes the baseline.
    pub fn prune(&mut self, listing: &[String]) {
        let current: HashSet<&str> = listing.iter().map(String::as_str).collect();
        self.tags.retain(|tag, _| current.contains(tag.as_str()));
        if self.listed_before {
            self.baseline.retain(|tag| current.contains(tag.as_str()));
        } else {
            self.baseline = listing.iter().cloned().collect();
            self.listed_before = true;
        }
    }
}

/// Chooses up to `budget` tags of `listing` to look up now, most useful first:
///
/// 1. tags never looked up that appeared after the repository's first scan (fresh pushes),
///    in reverse listing order;
/// 2. other tags never looked up, in reverse listing order: registries tend to list tags
///    oldest first (or sorted, where newer versions sort later), so the end of the list is
///    the better guess for recent images;
/// 3. known tags due for a re-check (a day after the last check; failed ones after an
///    hour), least recently checked first.
pub fn plan_lookups(
    listing: &[String],
    times: &RepoTimes,
    now: Instant,
    budget: usize,
) -> Vec<String> {
    let unknown = || {
        listing
            .iter()
            .rev()
            .filter(|t| !times.tags.contains_key(*t))
    };
    let fresh = unknown().filter(|t| !times.baseline.contains(*t));
    let older = unknown().filter(|t| times.baseline.contains(*t));
    let mut due: Vec<(&String, Instant)> = listing
        .iter()
        .filter_map(|t| {
            let known = times.tags.get(t)?;
            let age = if known.failed {
                RETRY_FAILED_AFTER
            } else {
                RECHECK_AFTER
            };
            (now.saturating_duration_since(known.checked) >= age).then_some((t, known.checked))
        })
        .collect();
    due.sort_by_key(|(_, checked)| *checked);
    fresh
        .chain(older)
        .chain(due.into_iter().map(|(t, _)| t))
        .take(budget)
        .cloned()
        .collect()
}

/// Caches shared by all clones of a client.
#[derive(Debug, Default)]
pub struct MetadataCache {
    /// `registry@digest` of a manifest (tag target or index entry) or of a config blob →
    /// its created time. Content-addressed, so never stale.
    digests: Mutex<HashMap<String, Option<jiff::Timestamp>>>,
    /// `registry@digest` of a manifest or config blob → the platforms its image provides
    /// (`spec.tags.platforms`). Content-addressed too.
    platforms: Mutex<HashMap<String, Arc<Vec<Platform>>>>,
    repos: Mutex<HashMap<(String, String), RepoSlot>>,
    tick: std::sync::atomic::AtomicU64,
}

#[derive(Debug)]
struct RepoSlot {
    times: Arc<tokio::sync::Mutex<RepoTimes>>,
    used: u64,
}

impl MetadataCache {
    pub fn digest(&self, registry: &str, digest: &str) -> Option<Option<jiff::Timestamp>> {
        let digests = self.digests.lock().unwrap_or_else(|e| e.into_inner());
        digests.get(&format!("{registry}@{digest}")).copied()
    }

    pub fn remember_digest(&self, registry: &str, digest: &str, created: Option<jiff::Timestamp>) {
        let mut digests = self.digests.lock().unwrap_or_else(|e| e.into_inner());
        if digests.len() >= MAX_DIGESTS {
            digests.clear();
        }
        digests.insert(format!("{registry}@{digest}"), created);
    }

    /// The platforms the image of `digest` (a manifest or a config blob) provides, if read.
    pub fn platforms(&self, registry: &str, digest: &str) -> Option<Arc<Vec<Platform>>> {
        let platforms = self.platforms.lock().unwrap_or_else(|e| e.into_inner());
        platforms.get(&format!("{registry}@{digest}")).cloned()
    }

    pub fn remember_platforms(&self, registry: &str, digest: &str, provided: Arc<Vec<Platform>>) {
        let mut platforms = self.platforms.lock().unwrap_or_else(|e| e.into_inner());
        if platforms.len() >= MAX_DIGESTS {
            platforms.clear();
        }
        platforms.insert(format!("{registry}@{digest}"), provided);
    }

    /// The remembered tag times of one repository. Holding its lock while looking up makes
    /// concurrent scans of one repository share the lookups instead of repeating them.
    pub fn repo(&self, registry: &str, path: &str) -> Arc<tokio::sync::Mutex<RepoTimes>> {
        let used = self.tick.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut repos = self.repos.lock().unwrap_or_else(|e| e.into_inner());
        let key = (registry.to_string(), path.to_string());
        if let Some(slot) = repos.get_mut(&key) {
            slot.used = used;
            return slot.times.clone();
        }
        if repos.len() >= MAX_REPOSITORIES
            && let Some(oldest) = repos
                .iter()
                .min_by_key(|(_, slot)| slot.used)
                .map(|(k, _)| k.clone())
        {
            repos.remove(&oldest);
        }
        let times = Arc::new(tokio::sync::Mutex::new(RepoTimes::default()));
        repos.insert(
            key,
            RepoSlot {
                times: times.clone(),
                used,
            },
        );
        times
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn tags(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn known(checked: Instant, failed: bool) -> TagTime {
        TagTime {
            created: None,
            digest: None,
            checked,
            failed,
        }
    }

    #[test]
    fn lookup_plan_prefers_new_tags_then_the_end_of_the_list() {
        let mut times = RepoTimes::default();
        let first = tags(&["a", "b", "c", "d", "e"]);
        times.prune(&first);
        let now = Instant::now();
        assert_eq!(plan_lookups(&first, &times, now, 2), tags(&["e", "d"]));
        for t in ["e", "d"] {
            times.tags.insert(t.into(), known(now, false));
        }
        // Second scan: "z" is new (listed first by a registry sorting by name); "b" is gone.
        let second = tags(&["a", "c", "d", "e", "z"]);
        times.prune(&second);
        assert_eq!(
            plan_lookups(&second, &times, now, 10),
            tags(&["z", "c", "a"])
        );
        assert_eq!(plan_lookups(&second, &times, now, 1), tags(&["z"]));
        // A new tag stays first in line until it has been looked up.
        let third = tags(&["a", "c", "d", "e", "y", "z"]);
        times.prune(&third);
        assert_eq!(plan_lookups(&third, &times, now, 2), tags(&["z", "y"]));
        assert!(plan_lookups(&third, &times, now, 0).is_empty());

        // A day later the known tags are due again, after the unknown ones, least recently
        // checked first.
        times
            .tags
            .insert("e".into(), known(now + Duration::from_secs(1), false));
        let day_later = now + RECHECK_AFTER + Duration::from_secs(1);
        assert_eq!(
            plan_lookups(&third, &times, day_later, 10),
            tags(&["z", "y", "c", "a", "d", "e"])
        );
        assert_eq!(
            plan_lookups(&third, &times, now + RECHECK_AFTER, 10),
            tags(&["z", "y", "c", "a", "d"])
        );

        // Failed lookups are retried after an hour.
        let mut times = RepoTimes::default();
        let listing = tags(&["x"]);
        times.prune(&listing);
        times.tags.insert("x".into(), known(now, true));
        assert!(plan_lookups(&listing, &times, now, 5).is_empty());
        assert_eq!(
            plan_lookups(&listing, &times, now + RETRY_FAILED_AFTER, 5),
            tags(&["x"])
        );
    }

    #[test]
    fn caches_are_bounded() {
        let cache = MetadataCache::default();
        cache.remember_digest("r", "sha256:1", None);
        assert_eq!(cache.digest("r", "sha256:1"), Some(None));
        assert_eq!(cache.digest("other", "sha256:1"), None);
        let first = cache.repo("r", "a");
        assert!(Arc::ptr_eq(&first, &cache.repo("r", "a")));
        for i in 0..MAX_REPOSITORIES {
            cache.repo("r", &format!("p{i}"));
        }
        // "a" was the least recently used and made room.
        assert!(!Arc::ptr_eq(&first, &cache.repo("r", "a")));
    }
}
