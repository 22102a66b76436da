//! Bounded state: the shared caches forget what no object references any more.
//!
//! Every [`SWEEP_EVERY`], once the watch cache has its first full list, the sweep reads the
//! ImageWatches the replica knows and keeps, of the repository index (scans and registry
//! listings), the tag appearances and the per-object failure counters, only the entries a
//! live watch references: the exact (registry, repository, credentials) of an image watch,
//! and any repository of its registry that a pattern watch matches. The PromotionPolicy
//! controller sweeps its own failure counters the same way (`promotion_failures`). What it forgot is
//! counted in `imagewatch_cache_evictions_total{cache}`; what is left is
//! `imagewatch_cache_entries{cache}`. A scan forgotten too early costs one registry request
//! at the next reconcile, nothing else: the caches only save requests.

use std::{
    collections::{HashMap, HashSet},
    hash::Hash,
    sync::Arc,
    time::Duration,
};

use imagewatch_crd::ImageWatch;
use kube::{ResourceExt, core::DeserializeGuard, runtime::reflector::ObjectRef};

use crate::{
    controllers::{Context, credentials, imagewatch::members},
    scan::index::{CatalogKey, CredentialKey, ScanKey},
};

/// How often the caches are swept.
pub const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// What the live watches reference. Pure: built from the objects, asked per cache key.
#[derive(Debug, Default)]
pub struct Referenced {
    /// (registry, repository, credentials) of the image watches; registry lower-case.
    images: HashSet<(String, String, CredentialKey)>,
    /// (registry, repository) of the image watches; registry lower-case.
    repositories: HashSet<(String, String)>,
    /// The images (`registry/team/*`) of the pattern watches.
    patterns: Vec<String>,
    /// Registries (lower-case) a pattern watch lists.
    pattern_registries: HashSet<String>,
}

impl Referenced {
    /// What `watches` reference.
    pub fn of<'a>(watches: impl IntoIterator<Item = &'a ImageWatch>) -> Self {
        let mut referenced = Self::default();
        for watch in watches {
            if watch.spec.is_pattern() {
                if let Ok(Some(p)) = members::parse_pattern_image(&watch.spec.image) {
                    referenced
                        .pattern_registries
                        .insert(p.registry.to_ascii_lowercase());
                }
                referenced.patterns.push(watch.spec.image.clone());
            } else if let Some((credentials, repo)) = credentials::credential_key_of(watch) {
                let registry = repo.registry.to_ascii_lowercase();
                referenced
                    .repositories
                    .insert((registry.clone(), repo.path.clone()));
                referenced.images.insert((registry, repo.path, credentials));
            }
        }
        referenced
    }

    fn by_pattern(&self, registry: &str, repository: &str) -> bool {
        self.patterns
            .iter()
            .any(|image| members::pattern_matches(image, registry, repository))
    }

    /// Whether a scan of `key` is referenced.
    pub fn scan(&self, key: &ScanKey) -> bool {
        let registry = key.registry.to_ascii_lowercase();
        self.images.contains(&(
            registry.clone(),
            key.repository.clone(),
            key.credentials.clone(),
        )) || self.by_pattern(&registry, &key.repository)
    }

    /// Whether a listing of `key`'s registry is referenced.
    pub fn catalog(&self, key: &CatalogKey) -> bool {
        self.pattern_registries
            .contains(&key.registry.to_ascii_lowercase())
    }

    /// Whether a repository (any credentials) is referenced.
    pub fn repository(&self, registry: &str, repository: &str) -> bool {
        let registry = registry.to_ascii_lowercase();
        self.repositories
            .contains(&(registry.clone(), repository.to_string()))
            || self.by_pattern(&registry, repository)
    }
}

/// Sweeps the caches every [`SWEEP_EVERY`] until the process ends.
pub async fn run(ctx: Arc<Context>) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        sweep(&ctx).await;
    }
}

/// One sweep; does nothing before the watch cache has its first full list (an object not
/// listed yet would look unreferenced).
pub async fn sweep(ctx: &Context) {
    let store = &ctx.store;
    if !*ctx.cache_synced.borrow() {
        return;
    }
    let state = store.state();
    let referenced = Referenced::of(state.iter().filter_map(|g| g.0.as_ref().ok()));
    let scans = ctx
        .index
        .retain(|k| referenced.scan(k), |k| referenced.catalog(k));
    let appearances = ctx
        .appearances
        .retain(|registry, repository| referenced.repository(registry, repository));
    // Usually no watch is failing: the set of live objects is only built when one is.
    let failing = !ctx.failures.lock().await.is_empty();
    let live: HashSet<ObjectRef<DeserializeGuard<ImageWatch>>> = if failing {
        state
            .iter()
            .map(|g| ObjectRef::new(&g.name_any()).within(&g.namespace().unwrap_or_default()))
            .collect()
    } else {
        HashSet::new()
    };
    let (failures, failures_left) = {
        let mut failures = ctx.failures.lock().await;
        // One that started failing since is swept next time.
        let forgotten = if failing {
            forget_unlisted(&mut failures, &live)
        } else {
            0
        };
        (forgotten, failures.len())
    };
    for (cache, forgotten, left) in [
        ("scans", scans, ctx.index.len() + ctx.index.catalogs_len()),
        ("appearances", appearances, ctx.appearances.len()),
        ("failures", failures, failures_left),
    ] {
        record(&ctx.metrics, cache, forgotten, left);
    }
}

/// Keeps only the entries of `map` whose key is `live`; returns how many it forgot (pure).
pub fn forget_unlisted<K: Eq + Hash, V>(map: &mut HashMap<K, V>, live: &HashSet<K>) -> usize {
    let before = map.len();
    map.retain(|k, _| live.contains(k));
    before - map.len()
}

/// Records one cache's sweep: `imagewatch_cache_entries{cache}` and what was forgotten.
pub fn record(metrics: &crate::telemetry::Metrics, cache: &str, forgotten: usize, left: usize) {
    metrics
        .cache_entries
        .get_or_create(&cache_labels(cache))
        .set(left as i64);
    if forgotten > 0 {
        metrics
            .cache_evictions
            .get_or_create(&cache_labels(cache))
            .inc_by(forgotten as u64);
        tracing::debug!(
            cache,
            forgotten,
            left,
            "forgot cache entries no live object references"
        );
    }
}

fn cache_labels(cache: &str) -> crate::telemetry::CacheLabels {
    crate::telemetry::CacheLabels {
        cache: cache.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(namespace: &str, image: &str) -> ImageWatch {
        let mut w: ImageWatch = serde_json::from_value(serde_json::json!({
            "apiVersion": "imagewatch.dev/v1alpha1",
            "kind": "ImageWatch",
            "metadata": {"name": "w", "namespace": namespace},
            "spec": {
                "image": image,
                "git": {"url": "https://git.example/r.git", "branch": "main", "path": "apps"},
                "target": {"workload": {"path": "d.yaml", "kind": "Deployment", "name": "api", "container": "api"}}
            }
        }))
        .expect("a valid ImageWatch");
        w.metadata.namespace = Some(namespace.into());
        w
    }

    fn scan_key(registry: &str, repository: &str) -> ScanKey {
        ScanKey {
            registry: registry.into(),
            repository: repository.into(),
            credentials: CredentialKey::Anonymous,
            with_times: false,
        }
    }

    #[test]
    fn counters_of_objects_no_longer_listed_are_forgotten() {
        let mut failures: HashMap<&str, u32> = [("a", 1), ("b", 3), ("c", 2)].into();
        let live: HashSet<&str> = ["a", "c", "d"].into();
        assert_eq!(forget_unlisted(&mut failures, &live), 1);
        assert_eq!(failures, [("a", 1), ("c", 2)].into());
        assert_eq!(forget_unlisted(&mut failures, &live), 0);
    }

    #[test]
    fn only_what_a_live_watch_names_is_referenced() {
        let watches = [
            watch("a", "r.example:5000/team/api"),
            watch("b", "R.example:5000/apps/*"),
        ];
        let referenced = Referenced::of(watches.iter());
        assert!(referenced.scan(&scan_key("r.example:5000", "team/api")));
        assert!(referenced.scan(&scan_key("r.example:5000", "apps/web")));
        assert!(!referenced.scan(&scan_key("r.example:5000", "team/old")));
        assert!(!referenced.scan(&scan_key("other.example", "team/api")));
        let other_credentials = ScanKey {
            credentials: CredentialKey::Secret {
                namespace: "a".into(),
                name: "pull".into(),
            },
            ..scan_key("r.example:5000", "team/api")
        };
        assert!(!referenced.scan(&other_credentials));
        assert!(referenced.catalog(&CatalogKey {
            registry: "r.example:5000".into(),
            credentials: CredentialKey::Anonymous,
        }));
        assert!(!referenced.catalog(&CatalogKey {
            registry: "other.example".into(),
            credentials: CredentialKey::Anonymous,
        }));
        assert!(referenced.repository("r.example:5000", "team/api"));
        assert!(!referenced.repository("r.example:5000", "team/old"));
        assert!(Referenced::of([].iter()).images.is_empty());
    }
}
