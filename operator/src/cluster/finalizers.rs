//! Finalizers of any namespaced object, added and removed with tested JSON patches: the
//! PromotionPolicy controller's (while a pull request is recorded) and the ImageWatch
//! controller's (`spec.git.pullRequest`). Both controllers use these two functions and
//! nothing else to touch finalizers.
//!
//! kube-runtime's `finalizer` helper does not fit: it puts its finalizer on every object
//! it reconciles and routes every deletion through cleanup. Here the finalizer is held only
//! while a pull request is recorded (most objects never carry one, and deleting them waits
//! for nothing), is added from inside a reconcile step right before the pull request can
//! exist, and must not drop a finalizer someone else added meanwhile (the patches test).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
};
use serde_json::json;

/// A change of an object's finalizers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalizerChange {
    /// Add the finalizer.
    Add,
    /// Remove the finalizer.
    Remove,
}

/// The JSON patch adding or removing `finalizer` in `meta`, `None` when there is nothing to
/// do (pure). Each patch tests what it changes, so a concurrent change of the finalizers
/// makes it fail (and the reconcile retry) instead of dropping someone else's finalizer.
pub fn finalizer_patch_of(
    meta: &ObjectMeta,
    finalizer: &str,
    change: FinalizerChange,
) -> Option<serde_json::Value> {
    let current = meta.finalizers.clone().unwrap_or_default();
    let at = current.iter().position(|f| f == finalizer);
    match (change, at) {
        (FinalizerChange::Add, Some(_)) | (FinalizerChange::Remove, None) => None,
        (FinalizerChange::Add, None) if current.is_empty() => Some(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
        ])),
        (FinalizerChange::Add, None) => Some(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
        ])),
        (FinalizerChange::Remove, Some(i)) => Some(json!([
            {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": finalizer},
            {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
        ])),
    }
}

/// Applies [`finalizer_patch_of`] to the object `meta` names, of any namespaced `resource`.
/// Through a dynamic API, so that an object which does not match the schema can still lose
/// its finalizer. A failed test (the finalizers changed since `meta` was read) is answered by
/// reading the object again and patching once more; an object already gone is done.
pub async fn patch_finalizer_of(
    client: &Client,
    resource: &ApiResource,
    meta: &ObjectMeta,
    finalizer: &str,
    change: FinalizerChange,
) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        meta.namespace.as_deref().unwrap_or_default(),
        resource,
    );
    let name = meta.name.clone().unwrap_or_default();
    let mut meta = meta.clone();
    for attempt in 0..2 {
        let Some(ops) = finalizer_patch_of(&meta, finalizer, change) else {
            return Ok(());
        };
        let patch: Patch<()> =
            Patch::Json(serde_json::from_value(ops).map_err(kube::Error::SerdeError)?);
        match api.patch(&name, &PatchParams::default(), &patch).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(kube::Error::Api(s)) if (s.code == 422 || s.code == 409) && attempt == 0 => {
                match api.get_opt(&name).await? {
                    Some(fresh) => meta = fresh.metadata,
                    None => return Ok(()),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
