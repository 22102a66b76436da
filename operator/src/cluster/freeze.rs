//! Admin freezes: "stop the line" in one command. The operator follows one ConfigMap in its
//! own namespace (`--freeze-configmap`, the chart's `<release>-freeze`); its keys freeze
//! writing:
//!
//! | key | freezes |
//! |-----|---------|
//! | `cluster` | every ImageWatch and PromotionPolicy |
//! | `namespace.<name>` | the objects of namespace `<name>` |
//!
//! The value is the reason shown in status (`Frozen`), e.g. `release 4.2 (alice)`. Deleting
//! the key, or the ConfigMap, lifts the freeze; every object is looked at again at once
//! (the change waiting is written then, not at the next poll). The ConfigMap lives where
//! only the operator's admins can write, so a tenant can neither freeze nor thaw another.

use std::{
    collections::BTreeMap,
    sync::{Arc, RwLock},
};

use kube::Client;

/// The key freezing every object.
pub const CLUSTER_KEY: &str = "cluster";
/// The prefix of a key freezing one namespace.
pub const NAMESPACE_PREFIX: &str = "namespace.";

/// The freezes in force.
#[derive(Debug, Default)]
pub struct Freezes {
    state: RwLock<BTreeMap<String, String>>,
}

impl Freezes {
    /// Freezes from a ConfigMap's data (`None`: none).
    pub fn load(&self, data: Option<&BTreeMap<String, String>>) {
        let freezes = data
            .map(|d| {
                d.iter()
                    .filter(|(k, _)| k.as_str() == CLUSTER_KEY || k.starts_with(NAMESPACE_PREFIX))
                    .map(|(k, v)| (k.clone(), v.trim().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        if let Ok(mut state) = self.state.write() {
            *state = freezes;
        }
    }

    /// Why objects of `namespace` are frozen (the cluster freeze first), if they are.
    pub fn reason_for(&self, namespace: &str) -> Option<String> {
        let state = self.state.read().ok()?;
        let describe = |scope: &str, reason: &String| {
            let reason = if reason.is_empty() {
                "no reason given"
            } else {
                reason.as_str()
            };
            format!("{scope} freeze: {reason}")
        };
        state
            .get(CLUSTER_KEY)
            .map(|r| describe("cluster", r))
            .or_else(|| {
                state
                    .get(&format!("{NAMESPACE_PREFIX}{namespace}"))
                    .map(|r| describe(&format!("namespace {namespace}"), r))
            })
    }

    /// Freezes in force (for the `imagewatch_freezes` gauge).
    pub fn count(&self) -> usize {
        self.state.read().map(|s| s.len()).unwrap_or_default()
    }
}

/// Keeps `freezes` current with ConfigMap `name` in `namespace`; calls `changed` after each
/// change (to look at every object again). Runs until the watch stream ends.
pub async fn follow(
    client: Client,
    namespace: String,
    name: String,
    freezes: Arc<Freezes>,
    changed: impl Fn() + Send,
) {
    let key = name.clone();
    crate::cluster::follow_configmap(client, &namespace, &name, "freeze", move |cm| {
        freezes.load(cm.and_then(|cm| cm.data.as_ref()));
        tracing::info!(configmap = %key, freezes = freezes.count(), "freezes changed");
        changed();
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_namespace_key_freezes_only_that_namespace() {
        let f = Freezes::default();
        f.load(Some(&data(&[("namespace.team-a", "incident 12")])));
        assert_eq!(
            f.reason_for("team-a").as_deref(),
            Some("namespace team-a freeze: incident 12")
        );
        assert_eq!(f.reason_for("team-b"), None);
    }

    #[test]
    fn the_cluster_key_freezes_every_namespace_and_is_named_first() {
        let f = Freezes::default();
        f.load(Some(&data(&[
            ("cluster", "release 4.2"),
            ("namespace.team-a", "incident 12"),
            ("unrelated", "x"),
        ])));
        assert_eq!(
            f.reason_for("team-a").as_deref(),
            Some("cluster freeze: release 4.2")
        );
        assert_eq!(f.count(), 2);
    }

    #[test]
    fn lifting_removes_the_freeze_and_an_empty_reason_still_freezes() {
        let f = Freezes::default();
        f.load(Some(&data(&[("cluster", "")])));
        assert_eq!(
            f.reason_for("x").as_deref(),
            Some("cluster freeze: no reason given")
        );
        f.load(None);
        assert_eq!(f.reason_for("x"), None);
    }
}
