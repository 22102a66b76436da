//! Which namespaces the controllers watch: all of them, one (`--namespace team-a`), or a list
//! (`--namespace team-a,team-b`, the chart's `watchNamespaces`), so that an install whose RBAC
//! is a Role per namespace never asks the API for anything at cluster scope.
//!
//! A list is one watcher per namespace, merged into one event stream that a single reflector
//! store understands: the first complete listing of every namespace is one `Init` …
//! `InitDone` (the store is ready once all are listed); a namespace re-listed later (after a
//! watch desync) becomes `Apply` for what it lists and `Delete` for what it no longer holds,
//! so one namespace's re-list never drops the other namespaces' objects from the store.

use std::collections::{BTreeMap, BTreeSet};

use futures::{StreamExt as _, stream::BoxStream};
use kube::{
    Api, Client, Resource,
    runtime::watcher::{self, Event},
};
use serde::de::DeserializeOwned;

/// Events of `K` in `namespaces` (empty: all namespaces).
pub fn watch<K>(
    client: Client,
    namespaces: &[String],
    config: watcher::Config,
) -> BoxStream<'static, Result<Event<K>, watcher::Error>>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    match namespaces {
        [] => watcher::watcher(Api::<K>::all(client), config).boxed(),
        [one] => watcher::watcher(Api::<K>::namespaced(client, one), config).boxed(),
        many => {
            let streams = many.iter().enumerate().map(|(i, ns)| {
                watcher::watcher(Api::<K>::namespaced(client.clone(), ns), config.clone())
                    .map(move |event| (i, event))
                    .boxed()
            });
            let mut merger = Merger::new(many.len());
            futures::stream::once(async { Ok(Event::Init) })
                .chain(
                    futures::stream::select_all(streams)
                        .flat_map(move |(i, event)| futures::stream::iter(merger.next(i, event))),
                )
                .boxed()
        }
    }
}

/// Merges the event streams of several namespaces (pure; see the module documentation).
pub(crate) struct Merger<K> {
    /// Objects of each namespace as last seen, by name.
    known: Vec<BTreeMap<String, K>>,
    /// Names listed so far by a namespace's re-list in progress.
    relisting: Vec<Option<BTreeSet<String>>>,
    /// Whether each namespace finished its first listing.
    listed: Vec<bool>,
    /// Whether the merged `InitDone` was sent.
    initialised: bool,
}

type Item<K> = Result<Event<K>, watcher::Error>;

impl<K: Resource + Clone> Merger<K> {
    pub(crate) fn new(namespaces: usize) -> Self {
        Self {
            known: (0..namespaces).map(|_| BTreeMap::new()).collect(),
            relisting: vec![None; namespaces],
            listed: vec![false; namespaces],
            initialised: false,
        }
    }

    /// The merged events for `event` of namespace `i`.
    pub(crate) fn next(&mut self, i: usize, event: Item<K>) -> Vec<Item<K>> {
        let event = match event {
            Ok(event) => event,
            Err(e) => return vec![Err(e)],
        };
        let name = |k: &K| k.meta().name.clone().unwrap_or_default();
        match event {
            Event::Init => {
                self.relisting[i] = Some(BTreeSet::new());
                Vec::new()
            }
            Event::InitApply(k) => {
                if let Some(seen) = &mut self.relisting[i] {
                    seen.insert(name(&k));
                }
                self.known[i].insert(name(&k), k.clone());
                vec![Ok(if self.initialised {
                    Event::Apply(k)
                } else {
                    Event::InitApply(k)
                })]
            }
            Event::InitDone => {
                let seen = self.relisting[i].take().unwrap_or_default();
                let gone: Vec<String> = self.known[i]
                    .keys()
                    .filter(|n| !seen.contains(*n))
                    .cloned()
                    .collect();
                let mut out: Vec<Item<K>> = gone
                    .iter()
                    .filter_map(|n| self.known[i].remove(n))
                    .map(|k| Ok(Event::Delete(k)))
                    .collect();
                self.listed[i] = true;
                if !self.initialised && self.listed.iter().all(|l| *l) {
                    self.initialised = true;
                    out.push(Ok(Event::InitDone));
                }
                out
            }
            Event::Apply(k) => {
                self.known[i].insert(name(&k), k.clone());
                vec![Ok(Event::Apply(k))]
            }
            Event::Delete(k) => {
                self.known[i].remove(&name(&k));
                vec![Ok(Event::Delete(k))]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(ns: &str, name: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.namespace = Some(ns.into());
        c.metadata.name = Some(name.into());
        c
    }

    fn kinds(events: &[Item<ConfigMap>]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                Ok(Event::Apply(k)) => format!("apply {}", k.metadata.name.clone().unwrap()),
                Ok(Event::Delete(k)) => format!("delete {}", k.metadata.name.clone().unwrap()),
                Ok(Event::InitApply(k)) => format!("init {}", k.metadata.name.clone().unwrap()),
                Ok(Event::Init) => "Init".into(),
                Ok(Event::InitDone) => "InitDone".into(),
                Err(_) => "error".into(),
            })
            .collect()
    }

    #[test]
    fn ready_once_every_namespace_is_listed_and_a_relist_stays_in_its_namespace() {
        let mut m = Merger::new(2);
        let mut out = Vec::new();
        for (i, e) in [
            (0, Event::Init),
            (0, Event::InitApply(cm("a", "a1"))),
            (0, Event::InitApply(cm("a", "a2"))),
            (0, Event::InitDone),
            (1, Event::Init),
            (1, Event::InitApply(cm("b", "b1"))),
        ] {
            out.extend(m.next(i, Ok(e)));
        }
        assert_eq!(kinds(&out), ["init a1", "init a2", "init b1"]);
        assert_eq!(kinds(&m.next(1, Ok(Event::InitDone))), ["InitDone"]);
        // Namespace a re-lists without a2: a1 is applied, a2 deleted; b1 is untouched.
        let mut out = Vec::new();
        for e in [
            Event::Init,
            Event::InitApply(cm("a", "a1")),
            Event::InitDone,
        ] {
            out.extend(m.next(0, Ok(e)));
        }
        assert_eq!(kinds(&out), ["apply a1", "delete a2"]);
        assert_eq!(
            kinds(&m.next(1, Ok(Event::Delete(cm("b", "b1"))))),
            ["delete b1"]
        );
    }
}
