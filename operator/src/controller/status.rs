//! Status step (pure): builds the desired `ImageWatch` status and conditions from a reconcile
//! outcome, keeping `lastTransitionTime` stable when a condition's status does not change.

use imagewatch_crd::ImageWatchStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Merges `new` into `existing` by type. The transition time of `new` is replaced by the
/// existing one when the status (True/False/Unknown) is unchanged, so `lastTransitionTime`
/// only moves on real transitions.
pub fn merge_condition(existing: &[Condition], mut new: Condition) -> Vec<Condition> {
    let mut out: Vec<Condition> = existing
        .iter()
        .filter(|c| c.type_ != new.type_)
        .cloned()
        .collect();
    if let Some(old) = existing.iter().find(|c| c.type_ == new.type_)
        && old.status == new.status
    {
        new.last_transition_time = old.last_transition_time.clone();
    }
    out.push(new);
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}

/// A `Ready` condition.
pub fn ready_condition(
    ready: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    Condition {
        type_: imagewatch_crd::conditions::READY.to_string(),
        status: if ready { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message: truncate(message, 1024),
        observed_generation: generation,
        last_transition_time: now.clone(),
    }
}

/// The `Ready` condition of a status, if present.
pub fn ready_of(status: Option<&ImageWatchStatus>) -> Option<&Condition> {
    status.and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == imagewatch_crd::conditions::READY)
    })
}

/// Whether two statuses differ in anything but timestamps that only move when something
/// else changes. Used to skip a status patch when nothing changed.
pub fn status_changed(old: Option<&ImageWatchStatus>, new: &ImageWatchStatus) -> bool {
    match old {
        None => true,
        Some(old) => {
            // `applied.at` is refreshed only together with a new commit or tag, so plain
            // equality is the right test.
            old != new
        }
    }
}

/// Reports `Ready=False InvalidSpec` on an object that does not match its schema (read
/// through `DeserializeGuard`), so one bad object is visible on itself instead of stopping the
/// stream or being skipped silently.
pub async fn report_invalid_object<K>(
    client: &kube::Client,
    invalid: &kube::core::error_boundary::InvalidObject,
) -> Result<(), kube::Error>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let (Some(name), Some(namespace)) = (
        invalid.metadata.name.clone(),
        invalid.metadata.namespace.clone(),
    ) else {
        return Ok(());
    };
    let kind = K::kind(&());
    let now = Time(jiff::Timestamp::now());
    let condition = ready_condition(
        false,
        imagewatch_crd::conditions::reason::INVALID_SPEC,
        &format!(
            "the object does not match the {kind} schema: {}",
            invalid.error
        ),
        invalid.metadata.generation,
        &now,
    );
    let api: kube::Api<K> = kube::Api::namespaced(client.clone(), &namespace);
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": kind,
        "status": { "observedGeneration": invalid.metadata.generation, "conditions": [condition] },
    });
    let params = kube::api::PatchParams::apply(imagewatch_crd::FIELD_MANAGER).force();
    match api
        .patch_status(&name, &params, &kube::api::Patch::Apply(&patch))
        .await
    {
        Ok(_) => Ok(()),
        // Deleted meanwhile: nothing to report on.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Time {
        Time(jiff::Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn transition_time_is_kept_when_status_is_unchanged() {
        let first = vec![ready_condition(true, "UpToDate", "a", Some(1), &t(100))];
        let merged = merge_condition(
            &first,
            ready_condition(true, "Updated", "b", Some(2), &t(200)),
        );
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].last_transition_time, t(100));
        assert_eq!(merged[0].reason, "Updated");
    }

    #[test]
    fn transition_time_moves_when_status_flips() {
        let first = vec![ready_condition(true, "UpToDate", "a", Some(1), &t(100))];
        let merged = merge_condition(
            &first,
            ready_condition(false, "RegistryError", "b", Some(1), &t(200)),
        );
        assert_eq!(merged[0].last_transition_time, t(200));
        assert_eq!(merged[0].status, "False");
    }

    #[test]
    fn other_condition_types_are_kept() {
        let mut other = ready_condition(true, "X", "y", None, &t(1));
        other.type_ = "Other".into();
        let merged = merge_condition(
            &[other.clone()],
            ready_condition(true, "UpToDate", "", None, &t(5)),
        );
        assert_eq!(merged.len(), 2);
        assert!(merged.contains(&other));
    }

    #[test]
    fn identical_status_is_not_a_change() {
        let s = ImageWatchStatus {
            observed_generation: Some(1),
            conditions: vec![ready_condition(true, "UpToDate", "m", Some(1), &t(1))],
            ..Default::default()
        };
        assert!(!status_changed(Some(&s), &s.clone()));
        assert!(status_changed(None, &s));
    }

    #[test]
    fn long_messages_are_truncated_on_a_char_boundary() {
        let msg = "é".repeat(2000);
        let c = ready_condition(false, "R", &msg, None, &t(1));
        assert!(c.message.len() <= 1024 + '…'.len_utf8());
    }
}
