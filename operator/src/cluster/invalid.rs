//! Objects that do not match their schema (read through `DeserializeGuard`) get
//! `Ready=False InvalidSpec` on their own status, so one bad object is visible on itself
//! instead of stopping the stream or being skipped silently. Both controllers use it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

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
    let condition = imagewatch_engine::status::ready_condition(
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
