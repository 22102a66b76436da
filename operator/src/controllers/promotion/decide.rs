//! Decide step of a PromotionPolicy reconcile (pure): from the source and the target's
//! inventory to the candidate, through the engine's `promotion` module. The facts its gates
//! need from registries are read next (`gates.rs`); `promotion::evaluate` judges them.

#[cfg(test)]
use super::fixtures::policy;
use crate::error::{PromotionError, SourceError, SpecError, TargetError};
use std::collections::BTreeMap;

use imagewatch_crd::ImageWatch;
use kube::ResourceExt;

use crate::promotion::{self, Candidate, CandidateError, CandidateInput, Inventory, SourceState};

/// The candidate inputs that are plain data (for the pure builder, also inside a retry loop).
#[derive(Clone)]
pub(super) struct Decision {
    pub(super) source: SourceState,
    pub(super) rewrite: Vec<imagewatch_crd::promotion::ImageRewrite>,
    pub(super) align: Option<imagewatch_crd::promotion::AlignTags>,
    pub(super) pin: Option<BTreeMap<String, String>>,
    pub(super) to_path: String,
    /// Images not proposed again (`spec.onGitChange`, found by the holds step in `held.rs`).
    pub(super) held: Vec<imagewatch_crd::HeldImage>,
}

impl Decision {
    /// The candidate on `target`, its held images not proposed (also when a rejected push
    /// makes the writer plan again on a newer head).
    pub(super) fn candidate(&self, target: &Inventory) -> Result<Candidate, CandidateError> {
        promotion::build_candidate(CandidateInput {
            sources: &self.source.images,
            rewrite: &self.rewrite,
            align: self.align.as_ref(),
            pin: self.pin.as_ref().filter(|p| !p.is_empty()),
            target,
            target_path: &self.to_path,
        })
        .map(|c| c.with_holds(self.held.clone()))
    }
}

/// The names of the source watches that have applied no tag yet and report no failure (no
/// status yet, or `Ready` not `False`); `None` when there are none. Pure.
pub(super) fn first_tag_pending(watches: &[ImageWatch]) -> Option<Vec<String>> {
    let pending: Vec<String> = watches
        .iter()
        .filter(|w| {
            let status = w.status.as_ref();
            let failing = status
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "False");
            status.and_then(|s| s.applied.as_ref()).is_none() && !failing
        })
        .map(|w| w.name_any())
        .collect();
    (!pending.is_empty()).then_some(pending)
}

pub(super) fn candidate_error(e: CandidateError) -> PromotionError {
    match e {
        CandidateError::NothingInTarget { .. } => {
            PromotionError::TargetNotFound(TargetError::Candidate(Box::new(e)))
        }
        CandidateError::EmptySource | CandidateError::LeaderMissing(..) => {
            PromotionError::SourceNotReady(SourceError::Candidate(Box::new(e)))
        }
        _ => PromotionError::InvalidSpec(SpecError::Candidate(Box::new(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::promotion::event_for;
    use kube::runtime::events::EventType;
    use serde_json::json;

    fn source_watch(name: &str, status: serde_json::Value) -> ImageWatch {
        serde_json::from_value(json!({
            "apiVersion": "imagewatch.dev/v1alpha1", "kind": "ImageWatch",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"image": "r/my-api", "git": {"url": "https://g/x.git"},
                     "target": {"helm": {"file": "v.yaml", "tag": "image.tag"}}},
            "status": status,
        }))
        .unwrap()
    }

    /// A policy created together with its watches: they have not applied a tag yet, which
    /// is a wait, not a failure: no Warning Event.
    #[test]
    fn a_source_watch_without_a_first_tag_yet_is_a_wait_not_a_warning() {
        let applied = json!({"applied": {"tag": "v1", "image": "r/my-api:v1"}});
        let failing = json!({"conditions": [{"type": "Ready", "status": "False",
            "reason": "RegistryError", "message": "x", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        let healthy = [
            source_watch("api", applied.clone()),
            source_watch("worker", serde_json::Value::Null),
        ];
        let watches = first_tag_pending(&healthy).expect("a watch to wait for");
        assert_eq!(
            PromotionError::SourceWaiting { watches }.to_string(),
            "waiting for ImageWatch worker to apply a first tag"
        );
        assert_eq!(first_tag_pending(&[source_watch("api", applied)]), None);
        // A failing watch is a source that is not ready: reported as before.
        assert_eq!(first_tag_pending(&[source_watch("api", failing)]), None);

        let p = policy(json!({}));
        let waiting = Err(PromotionError::SourceWaiting {
            watches: vec!["worker".into()],
        });
        let event = event_for(&p, &waiting).expect("an Event");
        assert_eq!(event.type_, EventType::Normal);
        assert_eq!(event.reason, "SourceNotReady");
        let not_ready = Err(PromotionError::SourceNotReady(SourceError::unusable(
            "spec.from.watchSelector",
            "broken",
        )));
        assert_eq!(event_for(&p, &not_ready).unwrap().type_, EventType::Warning);
    }
}
