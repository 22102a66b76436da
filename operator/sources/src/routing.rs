//! Event routing: turns registry events (webhooks, SQS) into rescans and reconciles of exactly
//! the watches that reference the named repository.
//!
//! An event is only a hint. It marks the repository's scan stale in the index and wakes the
//! watches that use it; their reconcile asks the registry itself, so a forged or stale payload
//! can cause at most one rescan of a repository some watch already references — never a commit
//! and never a request to a registry no watch names.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use imagewatch_crd::ImageWatch;
use kube::{
    core::DeserializeGuard,
    runtime::reflector::{ObjectRef, Store},
};
use tokio::sync::mpsc;

use crate::RegistryEvent;
pub use imagewatch_engine::stages::{PushStages, Trigger};
use imagewatch_registry::RepositoryRef;
use imagewatch_telemetry::EventLabels;

/// The watches of `store` whose image is `event`'s repository, or a pattern matching it (so
/// a new repository becomes a member at once). Pure over the store's snapshot.
///
/// A watch of one repository whose tag rules cannot admit the event's tag is left asleep:
/// that tag can neither become its choice nor change what it reports, and its next reconcile
/// still sees the rescan the event causes. Woken whatever the tag: pattern images, group
/// members (the group's choice spans other repositories), pinned watches, watches whose rules
/// do not parse (their reconcile reports why), and every watch when the event names no tag.
pub fn watches_for(
    watches: &[Arc<DeserializeGuard<ImageWatch>>],
    event: &RegistryEvent,
    policies: &mut Policies,
) -> Routed {
    let registry = event.registry.to_ascii_lowercase();
    let mut routed = Routed::default();
    for guard in watches {
        let Ok(w) = guard.0.as_ref() else {
            continue;
        };
        let wake = if w.spec.is_pattern() {
            imagewatch_registry::pattern_image::pattern_matches(
                &w.spec.image,
                &registry,
                &event.repository,
            )
        } else {
            let references = RepositoryRef::parse(&w.spec.image)
                .is_ok_and(|r| r.registry == registry && r.path == event.repository);
            routed.referenced |= references;
            references
                && event
                    .tag
                    .as_deref()
                    .is_none_or(|tag| policies.may_choose(w, tag))
        };
        if wake {
            routed.referenced = true;
            routed.wake.push(ObjectRef::from_obj(guard.as_ref()));
        }
    }
    routed
}

/// Where an event goes.
#[derive(Debug, Default)]
pub struct Routed {
    /// The watches to reconcile.
    pub wake: Vec<ObjectRef<DeserializeGuard<ImageWatch>>>,
    /// Some watch references the event's repository (woken or not).
    pub referenced: bool,
}

/// Above this many distinct tag rules, [`Policies`] starts over.
const MAX_POLICIES: usize = 4096;

/// The tag policies of the watches' rules, built once per distinct rule set (a pattern is
/// compiled once, not once per event and watch).
#[derive(Default)]
pub struct Policies {
    built: HashMap<String, Option<imagewatch_engine::policy::TagPolicy>>,
}

impl Policies {
    /// Whether a push of `tag` may change `watch`'s choice (see [`watches_for`]).
    pub fn may_choose(&mut self, watch: &ImageWatch, tag: &str) -> bool {
        let spec = &watch.spec;
        if spec.group.as_deref().is_some_and(|g| !g.is_empty())
            || spec.pin.as_deref().is_some_and(|p| !p.is_empty())
        {
            return true;
        }
        let rules = spec.tags.clone().unwrap_or_default();
        let Ok(key) = serde_json::to_string(&rules) else {
            return true;
        };
        if self.built.len() >= MAX_POLICIES && !self.built.contains_key(&key) {
            self.built.clear();
        }
        self.built
            .entry(key)
            .or_insert_with(|| imagewatch_engine::policy::TagPolicy::from_rules(&rules).ok())
            .as_ref()
            .is_none_or(|policy| policy.matches(tag))
    }
}

/// How long an event counts for the push → commit latency: a commit later than this was not
/// caused by it alone (a watch that was failing, a suspended watch resumed), so it is not
/// observed, and its entry is dropped.
pub const EVENT_FRESHNESS: Duration = Duration::from_secs(600);

/// At most this many repositories are remembered with a pending event (a burst of events for
/// repositories that never lead to a commit cannot grow it further).
pub const MAX_PENDING_EVENTS: usize = 10_000;

/// Each repository's unhandled event and the stages it has reached so far (see
/// [`PushStages`]), for the push → commit latency and the per-stage times. Bounded: entries
/// older than [`EVENT_FRESHNESS`] are dropped, and at most [`MAX_PENDING_EVENTS`] are kept.
#[derive(Default)]
pub struct PendingEvents {
    since: std::sync::Mutex<HashMap<(String, String), PushStages>>,
}

/// A stage a reconcile reaches for a repository with a pending event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The repository's tags are listed.
    Listed,
    /// The tag to write is chosen.
    Selected,
}

impl PendingEvents {
    /// Remembers the first unhandled event for a repository, received (taken by the router)
    /// at `received` and routed now.
    pub fn mark(&self, registry: &str, repository: &str, received: Instant, trigger: Trigger) {
        self.mark_with(registry, repository, received, trigger, Instant::now());
    }

    /// [`Self::mark`] of a webhook event, routed at `now`.
    pub fn mark_at(&self, registry: &str, repository: &str, received: Instant, now: Instant) {
        self.mark_with(registry, repository, received, Trigger::Webhook, now);
    }

    fn mark_with(
        &self,
        registry: &str,
        repository: &str,
        received: Instant,
        trigger: Trigger,
        now: Instant,
    ) {
        let stages = PushStages {
            trigger,
            ..PushStages::new(received, now)
        };
        let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        if since.len() >= MAX_PENDING_EVENTS {
            since.retain(|_, at| fresh(at.received, now).is_some());
        }
        let key = (registry.to_string(), repository.to_string());
        let full = since.len() >= MAX_PENDING_EVENTS;
        match since.get_mut(&key) {
            Some(at) if fresh(at.received, now).is_some() => {}
            Some(at) => *at = stages,
            None if !full => {
                since.insert(key, stages);
            }
            None => {}
        }
    }

    /// Records that a reconcile reached `stage` for the repository (the first one to does).
    pub fn stage(&self, registry: &str, repository: &str, stage: Stage) {
        self.stage_at(registry, repository, stage, Instant::now());
    }

    /// [`Self::stage`] at `now`.
    pub fn stage_at(&self, registry: &str, repository: &str, stage: Stage, now: Instant) {
        let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        // Every reconcile passes here; most have no pending event to record a stage of.
        if since.is_empty() {
            return;
        }
        if let Some(at) = since.get_mut(&(registry.to_string(), repository.to_string())) {
            let slot = match stage {
                Stage::Listed => &mut at.listed,
                Stage::Selected => &mut at.selected,
            };
            slot.get_or_insert(now);
        }
    }

    /// The repository's pending event and its stages, when there is one and it is fresh; the
    /// entry is removed either way.
    pub fn take(&self, registry: &str, repository: &str) -> Option<PushStages> {
        self.take_at(registry, repository, Instant::now())
    }

    /// The stages of the registry push that led to a commit of `repository`, if an event
    /// started it, with the writer's commit and push instants (`pushed`); the push → commit
    /// latency is counted in `imagewatch_push_to_commit_seconds`.
    pub fn committed(
        &self,
        registry: &str,
        repository: &str,
        pushed: Option<(Instant, Instant)>,
        metrics: &imagewatch_telemetry::Metrics,
    ) -> Option<PushStages> {
        let mut stages = self.take(registry, repository)?;
        if let Some((committed, pushed)) = pushed {
            stages.committed = Some(committed);
            stages.pushed = Some(pushed);
        }
        metrics
            .push_to_commit_seconds
            .observe(stages.received.elapsed().as_secs_f64());
        Some(stages)
    }

    /// [`Self::take`] at `now`.
    pub fn take_at(&self, registry: &str, repository: &str, now: Instant) -> Option<PushStages> {
        let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        since
            .remove(&(registry.to_string(), repository.to_string()))
            .filter(|at| fresh(at.received, now).is_some())
    }

    /// Repositories remembered.
    pub fn len(&self) -> usize {
        self.since.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The age of an event seen `at`, when it is still fresh at `now` (pure).
pub fn fresh(at: Instant, now: Instant) -> Option<Duration> {
    let age = now.saturating_duration_since(at);
    (age <= EVENT_FRESHNESS).then_some(age)
}

/// What the router hands an event on to: the shared services of the ImageWatch controller.
/// The controllers' shared context implements it, so this module never sees the controllers.
pub trait RouteTargets {
    /// Where events are counted.
    fn metrics(&self) -> &imagewatch_telemetry::Metrics;
    /// Hands an event on to the other replicas, when replicas split the work (the owner of
    /// a watch's shard may be another replica); nothing without shards.
    fn forward_to_peers(&self, event: &RegistryEvent);
    /// When each tag appeared (an event's time orders its tag).
    fn appearances(&self) -> &imagewatch_registry::scan::appearances::Appearances;
    /// The repository index an event invalidates.
    fn index(&self) -> &imagewatch_registry::scan::index::RepositoryIndex;
    /// Repositories with an event not yet seen by a reconcile.
    fn pending(&self) -> &PendingEvents;
}

/// Routes events until the channel closes.
pub async fn route(
    mut events: mpsc::Receiver<RegistryEvent>,
    store: Store<DeserializeGuard<ImageWatch>>,
    ctx: Arc<impl RouteTargets>,
    reconcile: mpsc::Sender<ObjectRef<DeserializeGuard<ImageWatch>>>,
) {
    let mut policies = Policies::default();
    while let Some(event) = events.recv().await {
        let received = Instant::now();
        let routed = watches_for(&store.state(), &event, &mut policies);
        let targets = routed.wake;
        let outcome = match (targets.is_empty(), routed.referenced) {
            (false, _) => "matched",
            (true, true) => "tag-not-wanted",
            (true, false) => "ignored",
        };
        ctx.metrics()
            .events
            .get_or_create(&EventLabels {
                source: event.source.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
        if !routed.referenced {
            tracing::debug!(registry = %event.registry, repository = %event.repository, "event for a repository no watch references");
            continue;
        }
        if targets.is_empty() {
            tracing::debug!(registry = %event.registry, repository = %event.repository, tag = ?event.tag, "no watch of the repository admits the tag");
        } else {
            tracing::info!(registry = %event.registry, repository = %event.repository, tag = ?event.tag, source = event.source, watches = targets.len(), "registry event");
        }
        // With several replicas, the owner of a watch's shard may be another replica: tell
        // every peer (an event from a peer is not passed on again).
        if event.source != "peer" {
            ctx.forward_to_peers(&event);
        }
        // Before the rescan: the listing that finds the tag orders it by this time.
        if let Some(tag) = &event.tag {
            ctx.appearances().event(
                &event.registry.to_ascii_lowercase(),
                &event.repository,
                tag,
                event.at.unwrap_or_else(jiff::Timestamp::now),
            );
        }
        ctx.index()
            .invalidate(&event.registry.to_ascii_lowercase(), &event.repository);
        if targets.is_empty() {
            // No reconcile follows, so no commit will be this event's doing.
            continue;
        }
        ctx.pending().mark(
            &event.registry.to_ascii_lowercase(),
            &event.repository,
            received,
            Trigger::of_source(event.source),
        );
        for target in targets {
            if reconcile.send(target).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_fresh_events_are_observed_and_pending_events_are_bounded() {
        let p = PendingEvents::default();
        let t0 = Instant::now();
        let took = |p: &PendingEvents, repo: &str, now: Instant| {
            p.take_at("r", repo, now)
                .map(|s| now.duration_since(s.received))
        };
        p.mark_at("r", "a", t0, t0);
        // A second event does not restart the clock of a fresh one.
        p.mark_at(
            "r",
            "a",
            t0 + Duration::from_secs(5),
            t0 + Duration::from_secs(5),
        );
        assert_eq!(
            took(&p, "a", t0 + Duration::from_secs(7)),
            Some(Duration::from_secs(7))
        );
        assert_eq!(took(&p, "a", t0 + Duration::from_secs(8)), None);
        // Days later, a commit is not the event's doing: nothing observed, entry gone.
        p.mark_at("r", "b", t0, t0);
        assert_eq!(took(&p, "b", t0 + EVENT_FRESHNESS * 2), None);
        assert!(p.is_empty());
        // A stale entry is replaced by a new event's time.
        p.mark_at("r", "c", t0, t0);
        let later = t0 + EVENT_FRESHNESS * 3;
        p.mark_at("r", "c", later, later);
        assert_eq!(
            took(&p, "c", later + Duration::from_secs(1)),
            Some(Duration::from_secs(1))
        );
        // Bounded: stale entries are dropped to make room, fresh ones are never exceeded.
        for i in 0..MAX_PENDING_EVENTS {
            p.mark_at("r", &format!("old-{i}"), t0, t0);
        }
        assert_eq!(p.len(), MAX_PENDING_EVENTS);
        let fresh_at = t0 + EVENT_FRESHNESS * 2;
        p.mark_at("r", "new", fresh_at, fresh_at);
        assert_eq!(p.len(), 1);
        for i in 0..MAX_PENDING_EVENTS + 5 {
            p.mark_at("r", &format!("burst-{i}"), later, later);
        }
        assert!(p.len() <= MAX_PENDING_EVENTS);
    }

    #[test]
    fn a_pending_event_keeps_the_first_listing_and_choice_of_its_repository() {
        let p = PendingEvents::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // No event: nothing recorded.
        p.stage_at("r", "a", Stage::Listed, t0);
        assert!(p.is_empty());
        p.mark_at("r", "a", t0, t0 + ms(1));
        p.stage_at("r", "a", Stage::Listed, t0 + ms(20));
        // A second watch of the repository lists later: the first listing stays.
        p.stage_at("r", "a", Stage::Listed, t0 + ms(30));
        p.stage_at("r", "a", Stage::Selected, t0 + ms(21));
        let stages = p.take_at("r", "a", t0 + ms(40)).expect("pending");
        assert_eq!(stages.routed, t0 + ms(1));
        assert_eq!(stages.listed, Some(t0 + ms(20)));
        assert_eq!(stages.selected, Some(t0 + ms(21)));
        assert_eq!(stages.committed, None);
    }

    fn watch(name: &str, image: &str) -> Arc<DeserializeGuard<ImageWatch>> {
        let obj: ImageWatch = serde_json::from_value(serde_json::json!({
            "apiVersion": "imagewatch.dev/v1alpha1", "kind": "ImageWatch",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"image": image, "git": {"url": "https://g/x.git"},
                     "target": {"workload": {"path": "a", "kind": "Deployment", "name": "x", "container": "x"}}}
        }))
        .unwrap();
        Arc::new(DeserializeGuard(Ok(obj)))
    }

    fn event(registry: &str, repository: &str) -> RegistryEvent {
        RegistryEvent {
            registry: registry.into(),
            repository: repository.into(),
            tag: Some("v1".into()),
            digest: None,
            source: "distribution",
            at: None,
        }
    }

    #[test]
    fn only_watches_of_the_named_repository_are_woken() {
        let all = vec![
            watch("a", "127.0.0.1:5000/team/api"),
            watch("b", "127.0.0.1:5000/team/api"),
            watch("c", "127.0.0.1:5000/team/worker"),
            watch("d", "other.example/team/api"),
        ];
        let mut policies = Policies::default();
        let hit = watches_for(&all, &event("127.0.0.1:5000", "team/api"), &mut policies).wake;
        let names: Vec<_> = hit.iter().map(|r| r.name.clone()).collect();
        assert_eq!(names, vec!["a", "b"]);
        let nobody = watches_for(&all, &event("127.0.0.1:5000", "nobody"), &mut policies);
        assert!(nobody.wake.is_empty() && !nobody.referenced);
        // Registry hosts compare case-insensitively.
        assert_eq!(
            watches_for(&all, &event("OTHER.example", "team/api"), &mut policies)
                .wake
                .len(),
            1
        );
    }

    #[test]
    fn pattern_watches_are_woken_by_their_members_events() {
        let all = vec![
            watch("p", "127.0.0.1:5000/team/*/api"),
            watch("q", "127.0.0.1:5000/team/*/*"),
            watch("plain", "127.0.0.1:5000/team/a/api"),
        ];
        let names = |e: &RegistryEvent| -> Vec<String> {
            watches_for(&all, e, &mut Policies::default())
                .wake
                .iter()
                .map(|r| r.name.clone())
                .collect()
        };
        assert_eq!(
            names(&event("127.0.0.1:5000", "team/a/api")),
            vec!["p", "q", "plain"]
        );
        // A repository no watch knows yet, but the patterns match it.
        assert_eq!(
            names(&event("127.0.0.1:5000", "team/new/api")),
            vec!["p", "q"]
        );
        assert_eq!(
            names(&event("127.0.0.1:5000", "team/new/worker")),
            vec!["q"]
        );
        assert!(names(&event("127.0.0.1:5000", "team/a/b/api")).is_empty());
        assert!(names(&event("other:5000", "team/a/api")).is_empty());
    }

    #[test]
    fn docker_hub_short_names_match_events() {
        let all = vec![watch("n", "nginx")];
        assert_eq!(
            watches_for(
                &all,
                &event("registry-1.docker.io", "library/nginx"),
                &mut Policies::default()
            )
            .wake
            .len(),
            1
        );
    }

    fn with_spec(
        name: &str,
        image: &str,
        extra: serde_json::Value,
    ) -> Arc<DeserializeGuard<ImageWatch>> {
        let mut spec = serde_json::json!({
            "image": image, "git": {"url": "https://g/x.git"},
            "target": {"workload": {"path": "a", "kind": "Deployment", "name": "x", "container": "x"}}
        });
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let obj: ImageWatch = serde_json::from_value(serde_json::json!({
            "apiVersion": "imagewatch.dev/v1alpha1", "kind": "ImageWatch",
            "metadata": {"name": name, "namespace": "ns"}, "spec": spec
        }))
        .unwrap();
        Arc::new(DeserializeGuard(Ok(obj)))
    }

    #[test]
    fn watches_whose_rules_cannot_admit_the_tag_stay_asleep() {
        let image = "127.0.0.1:5000/team/api";
        let all = vec![
            with_spec(
                "c0",
                image,
                serde_json::json!({"tags": {"pattern": "c0-*"}}),
            ),
            with_spec(
                "c1",
                image,
                serde_json::json!({"tags": {"pattern": "c1-*"}}),
            ),
            with_spec(
                "excluded",
                image,
                serde_json::json!({"tags": {"pattern": "c1-*", "exclude": ["c1-rc*"]}}),
            ),
            with_spec(
                "semver",
                image,
                serde_json::json!({"tags": {"pattern": "semver:>=1.0"}}),
            ),
            with_spec("any", image, serde_json::json!({})),
            // Woken whatever the tag.
            with_spec(
                "grouped",
                image,
                serde_json::json!({"tags": {"pattern": "c9-*"}, "group": "g"}),
            ),
            with_spec(
                "pinned",
                image,
                serde_json::json!({"tags": {"pattern": "c9-*"}, "pin": "old"}),
            ),
            with_spec(
                "broken",
                image,
                serde_json::json!({"tags": {"pattern": "regex:("}}),
            ),
            with_spec(
                "pattern",
                "127.0.0.1:5000/team/*",
                serde_json::json!({"tags": {"pattern": "c9-*"}}),
            ),
        ];
        let mut policies = Policies::default();
        let mut names = |tag: Option<&str>| -> Vec<String> {
            let mut e = event("127.0.0.1:5000", "team/api");
            e.tag = tag.map(str::to_string);
            watches_for(&all, &e, &mut policies)
                .wake
                .iter()
                .map(|r| r.name.clone())
                .collect()
        };
        let always = ["grouped", "pinned", "broken", "pattern"];
        let with = |some: &[&str]| -> Vec<String> {
            let mut v: Vec<String> = some.iter().map(|s| s.to_string()).collect();
            v.extend(always.iter().map(|s| s.to_string()));
            let order = [
                "c0", "c1", "excluded", "semver", "any", "grouped", "pinned", "broken", "pattern",
            ];
            v.sort_by_key(|n| order.iter().position(|o| o == n));
            v
        };
        assert_eq!(names(Some("c1-v1.1.0")), with(&["c1", "excluded", "any"]));
        assert_eq!(names(Some("c1-rc1")), with(&["c1", "any"]));
        assert_eq!(names(Some("1.2.0")), with(&["semver", "any"]));
        // An event without a tag wakes every watch of the repository.
        assert_eq!(
            names(None),
            with(&["c0", "c1", "excluded", "semver", "any"])
        );
        // Nobody admits it, but the repository is watched: nothing is woken.
        let only = vec![all[0].clone()];
        let mut e = event("127.0.0.1:5000", "team/api");
        e.tag = Some("c1-v1".into());
        let routed = watches_for(&only, &e, &mut Policies::default());
        assert!(routed.wake.is_empty() && routed.referenced);
    }
}
