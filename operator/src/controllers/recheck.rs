//! The re-check annotation `imagewatch.dev/requestedAt` at the edge: which value is pending
//! is decided in [`imagewatch_engine::recheck`]; here a pending request makes the next scan of
//! the watch's repositories list the registry afresh (the shared scan is marked stale), and is
//! reported: a Normal Event `RecheckRequested` on the object and the counter
//! `imagewatch_recheck_requests_total{kind}`. The handled value goes to
//! `status.lastHandledRequestedAt` with the rest of the status.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

use crate::registry::RepositoryRef;
use crate::registry::pattern_image::parse_pattern_image;
use crate::registry::repository_pattern::match_pattern;
use crate::telemetry::{KindLabels, Metrics};

pub use imagewatch_engine::recheck::{ANNOTATION, handled_after, pending};

/// Event reason of an honoured re-check request.
pub const EVENT_REASON: &str = "RecheckRequested";

/// Marks the shared scans of `image`'s repositories stale (for a pattern image, every
/// repository it matches and the registry's listing), so the reconcile reads the registry.
pub fn refresh_scans(index: &crate::scan::index::RepositoryIndex, image: &str) {
    match parse_pattern_image(image) {
        Ok(Some(pattern)) => index.refresh(&pattern.registry, |repository| {
            match_pattern(&pattern.pattern, repository).is_some()
        }),
        Ok(None) => {
            if let Ok(repo) = RepositoryRef::parse(image) {
                index.refresh(&repo.registry, |repository| repository == repo.path);
            }
        }
        Err(_) => {}
    }
}

/// Reports an honoured request: the Event (its note says what the check found) and the
/// counter.
pub async fn report(
    recorder: &Recorder,
    metrics: &Metrics,
    object: &ObjectReference,
    kind: &str,
    value: &str,
    found: &str,
) {
    metrics
        .recheck_requests
        .get_or_create(&KindLabels {
            kind: kind.to_owned(),
        })
        .inc();
    let event = Event {
        type_: EventType::Normal,
        reason: EVENT_REASON.into(),
        note: Some(format!(
            "re-checked at once ({ANNOTATION}={value}): {found}"
        )),
        action: "Recheck".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, object).await {
        tracing::warn!(error = %e, "cannot publish Event");
    }
}
