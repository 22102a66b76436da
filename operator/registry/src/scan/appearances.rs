//! When each tag appeared: the time `order: Newest` orders by.
//!
//! Place in the flow: step 3a (scan). A registry's own times are times of *images*, not of
//! tags: a config's `created`, or ECR's `imagePushedAt` (the first push of that digest). A tag
//! added to an existing digest (a re-tag, e.g. a CI cache hit tagged with a new commit SHA)
//! carries the old image's time, ties with the image's other tags, and loses to whichever
//! sorts higher. So a tag's time is when *the tag* appeared:
//!
//! 1. the registry event's timestamp, when an event named the tag (clamped between the
//!    previous listing and now, so a stale or forged timestamp cannot reorder old tags);
//! 2. else the time of the first listing that had it;
//! 3. tags already there at the first listing of this process have no observed appearance:
//!    they keep the registry's image time, except the watch's `status.latest` tag, whose
//!    appearance time the status carries across restarts.
//!
//! The ledger is per [`ScanKey`] (credentials included): nothing one credential saw orders
//! tags for another. Pure apart from a mutex; the clock is passed in.

use std::collections::HashMap;
use std::sync::Mutex;

use jiff::Timestamp;

use crate::scan::index::ScanKey;
use imagewatch_engine::policy::TagInfo;

/// Where a tag's time came from (`status.latest.appearedFrom`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSource {
    /// A registry event's timestamp.
    Event,
    /// The first listing that had the tag.
    Listing,
    /// The registry's time of the image (there before the first listing).
    Registry,
    /// Carried across a restart in the watch's `status.latest`.
    Status,
}

impl TimeSource {
    /// As written in `status.latest.appearedFrom`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Event => "RegistryEvent",
            Self::Listing => "FirstListed",
            Self::Registry => "ImageTime",
            Self::Status => "Status",
        }
    }
}

/// One tag's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appeared {
    /// When the tag appeared (or the registry's image time, see [`TimeSource::Registry`]).
    pub at: Option<Timestamp>,
    pub source: TimeSource,
}

/// The tags of one repository (one [`ScanKey`]) and when each appeared.
#[derive(Debug, Default)]
pub struct Ledger {
    seen: HashMap<String, Appeared>,
    /// When the last listing was observed; `None` before the first.
    last_listing: Option<Timestamp>,
}

impl Ledger {
    /// Records a listing made at `now` and returns its tags with `pushed_at` set to each
    /// tag's appearance time. `events` holds the timestamps of events that named tags of
    /// this repository since the last listing. Tags no longer listed are forgotten (a tag
    /// deleted and pushed again appears again). Pure.
    pub fn observe(
        &mut self,
        listing: Vec<TagInfo>,
        now: Timestamp,
        events: &HashMap<String, Timestamp>,
    ) -> Vec<TagInfo> {
        let first = self.last_listing.is_none();
        let floor = self.last_listing.unwrap_or(now);
        let mut seen = HashMap::with_capacity(listing.len());
        let tags = listing
            .into_iter()
            .map(|mut info| {
                let appeared = match self.seen.get(&info.tag) {
                    Some(known) => *known,
                    None if first => Appeared {
                        at: info.pushed_at,
                        source: TimeSource::Registry,
                    },
                    None => match events.get(&info.tag) {
                        Some(at) => Appeared {
                            at: Some((*at).clamp(floor, now)),
                            source: TimeSource::Event,
                        },
                        None => Appeared {
                            at: Some(now),
                            source: TimeSource::Listing,
                        },
                    },
                };
                info.pushed_at = appeared.at;
                seen.insert(info.tag.clone(), appeared);
                info
            })
            .collect();
        self.seen = seen;
        self.last_listing = Some(now);
        tags
    }

    /// Restores the appearance time `at` of `tag` from a watch's status. It only raises a
    /// time this process could not observe (a tag there at its first listing, or not yet
    /// listed); an observed one stands. Returns whether anything changed.
    pub fn restore(&mut self, tag: &str, at: Timestamp) -> bool {
        let restored = Appeared {
            at: Some(at),
            source: TimeSource::Status,
        };
        match self.seen.get_mut(tag) {
            Some(known) if known.source == TimeSource::Registry && known.at < Some(at) => {
                *known = restored;
                true
            }
            Some(_) => false,
            None if self.last_listing.is_none() => {
                self.seen.insert(tag.to_owned(), restored);
                false
            }
            None => false,
        }
    }

    /// The time of `tag`, if it is known.
    pub fn get(&self, tag: &str) -> Option<Appeared> {
        self.seen.get(tag).copied()
    }
}

/// Every ledger, and the event timestamps not yet consumed by a listing.
#[derive(Default)]
pub struct Appearances {
    ledgers: Mutex<HashMap<ScanKey, Ledger>>,
    /// (registry, repository) → tag → the event's timestamp (the earliest, if several).
    events: Mutex<HashMap<(String, String), HashMap<String, Timestamp>>>,
}

/// Event timestamps kept per repository until a listing consumes them.
const MAX_EVENT_TAGS: usize = 1024;

impl Appearances {
    /// Remembers that an event named `tag` of `registry`/`repository` at `at`.
    pub fn event(&self, registry: &str, repository: &str, tag: &str, at: Timestamp) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let tags = events
            .entry((registry.to_owned(), repository.to_owned()))
            .or_default();
        if tags.len() < MAX_EVENT_TAGS || tags.contains_key(tag) {
            let slot = tags.entry(tag.to_owned()).or_insert(at);
            *slot = (*slot).min(at);
        }
    }

    /// [`Ledger::observe`] for `key`, with the events of its repository.
    pub fn observe(&self, key: &ScanKey, listing: Vec<TagInfo>, now: Timestamp) -> Vec<TagInfo> {
        let events = {
            let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
            events
                .remove(&(key.registry.clone(), key.repository.clone()))
                .unwrap_or_default()
        };
        let mut ledgers = self.ledgers.lock().unwrap_or_else(|p| p.into_inner());
        ledgers
            .entry(key.clone())
            .or_default()
            .observe(listing, now, &events)
    }

    /// [`Ledger::restore`] for `key`.
    pub fn restore(&self, key: &ScanKey, tag: &str, at: Timestamp) -> bool {
        let mut ledgers = self.ledgers.lock().unwrap_or_else(|p| p.into_inner());
        ledgers.entry(key.clone()).or_default().restore(tag, at)
    }

    /// The time of `tag` in `key`'s repository.
    pub fn get(&self, key: &ScanKey, tag: &str) -> Option<Appeared> {
        let ledgers = self.ledgers.lock().unwrap_or_else(|p| p.into_inner());
        ledgers.get(key).and_then(|l| l.get(tag))
    }

    /// Forgets the ledgers, and the pending event times, of repositories no watch references
    /// any more (those `keep(registry, repository)` refuses). Returns how many were forgotten.
    pub fn retain(&self, keep: impl Fn(&str, &str) -> bool) -> usize {
        let mut ledgers = self.ledgers.lock().unwrap_or_else(|p| p.into_inner());
        let before = ledgers.len();
        ledgers.retain(|k, _| keep(&k.registry, &k.repository));
        let forgotten = before - ledgers.len();
        drop(ledgers);
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let before = events.len();
        events.retain(|(registry, repository), _| keep(registry, repository));
        forgotten + before - events.len()
    }

    /// Number of ledgers kept.
    pub fn len(&self) -> usize {
        self.ledgers.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no ledger is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use imagewatch_engine::policy::{Order, TagPolicy};

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn tag(name: &str, created: i64) -> TagInfo {
        TagInfo {
            pushed_at: Some(at(created)),
            ..TagInfo::new(name)
        }
    }

    fn newest(tags: &[TagInfo]) -> String {
        let policy = TagPolicy::new("", &[], Order::Newest, None).unwrap();
        policy
            .select(tags)
            .map(|t| t.tag.clone())
            .unwrap_or_default()
    }

    /// Re-tags of one digest, in descending name order: each is chosen when it appears,
    /// although all carry the same image time and each sorts lower than the one before.
    #[test]
    fn a_retag_is_newest_whatever_its_name_sorts_as() {
        let mut ledger = Ledger::default();
        let none = HashMap::new();
        let mut listing = vec![tag("base", 0), tag("fff0000", 10)];
        let tags = ledger.observe(listing.clone(), at(100), &none);
        assert_eq!(newest(&tags), "fff0000");
        for (i, retag) in ["def5678", "abc1234", "0a1b2c3"].into_iter().enumerate() {
            listing.push(tag(retag, 10));
            let now = at(200 + 100 * i64::try_from(i).unwrap());
            let tags = ledger.observe(listing.clone(), now, &none);
            assert_eq!(newest(&tags), retag);
            assert_eq!(
                ledger.get(retag),
                Some(Appeared {
                    at: Some(now),
                    source: TimeSource::Listing
                })
            );
        }
    }

    #[test]
    fn an_event_timestamp_is_used_within_the_listing_interval() {
        let mut ledger = Ledger::default();
        ledger.observe(vec![tag("a", 0)], at(100), &HashMap::new());
        let events = HashMap::from([
            ("b".to_owned(), at(150)),
            ("c".to_owned(), at(5)), // before the previous listing: clamped up
            ("d".to_owned(), at(999)), // in the future: clamped down
        ]);
        let listing = vec![tag("a", 0), tag("b", 0), tag("c", 0), tag("d", 0)];
        ledger.observe(listing, at(200), &events);
        let time = |t: &str| ledger.get(t).and_then(|a| a.at);
        assert_eq!(time("b"), Some(at(150)));
        assert_eq!(time("c"), Some(at(100)));
        assert_eq!(time("d"), Some(at(200)));
        assert_eq!(ledger.get("b").map(|a| a.source), Some(TimeSource::Event));
        // Tags there at the first listing keep the registry's time.
        assert_eq!(
            ledger.get("a").map(|a| a.source),
            Some(TimeSource::Registry)
        );
        assert_eq!(time("a"), Some(at(0)));
    }

    /// After a restart the chosen re-tag keeps its time from the status, so an older tag
    /// of the same digest that sorts higher does not take its place.
    #[test]
    fn the_status_carries_the_chosen_tags_time_across_a_restart() {
        let listing = vec![tag("def5678", 10), tag("0a1b2c3", 10)];
        // Before the first listing.
        let mut ledger = Ledger::default();
        assert!(!ledger.restore("0a1b2c3", at(500)));
        let tags = ledger.observe(listing.clone(), at(600), &HashMap::new());
        assert_eq!(newest(&tags), "0a1b2c3");
        assert_eq!(
            ledger.get("0a1b2c3").map(|a| a.source),
            Some(TimeSource::Status)
        );
        // After it (another watch listed first): raised, and the caller rescans.
        let mut ledger = Ledger::default();
        assert_eq!(
            newest(&ledger.observe(listing.clone(), at(600), &HashMap::new())),
            "def5678"
        );
        assert!(ledger.restore("0a1b2c3", at(500)));
        assert_eq!(
            newest(&ledger.observe(listing, at(700), &HashMap::new())),
            "0a1b2c3"
        );
        // An observed appearance is never replaced.
        assert!(!ledger.restore("0a1b2c3", at(50)));
    }

    #[test]
    fn a_deleted_tag_pushed_again_appears_again() {
        let mut ledger = Ledger::default();
        let none = HashMap::new();
        ledger.observe(vec![tag("a", 0), tag("b", 0)], at(100), &none);
        ledger.observe(vec![tag("a", 0)], at(200), &none);
        ledger.observe(vec![tag("a", 0), tag("b", 0)], at(300), &none);
        assert_eq!(ledger.get("b").and_then(|a| a.at), Some(at(300)));
    }

    #[test]
    fn repositories_no_watch_references_are_forgotten() {
        use crate::scan::index::CredentialKey;
        let key = |repo: &str| ScanKey {
            registry: "r.example".into(),
            repository: repo.into(),
            credentials: CredentialKey::Anonymous,
            with_times: false,
        };
        let all = Appearances::default();
        all.observe(&key("kept"), vec![tag("a", 0)], at(100));
        all.observe(&key("gone"), vec![tag("a", 0)], at(100));
        all.event("r.example", "gone-too", "b", at(150));
        all.event("r.example", "kept", "b", at(150));
        assert_eq!(all.len(), 2);
        assert_eq!(all.retain(|_, repo| repo == "kept"), 2);
        assert_eq!(all.len(), 1);
        assert!(all.get(&key("kept"), "a").is_some());
        assert!(all.get(&key("gone"), "a").is_none());
        // The kept repository's event is still there for its next listing.
        all.observe(&key("kept"), vec![tag("a", 0), tag("b", 0)], at(200));
        assert_eq!(all.get(&key("kept"), "b").and_then(|a| a.at), Some(at(150)));
    }
}
