//! The Kubernetes edge the controllers share: the Secrets a watch names, Argo CD lookups and
//! the following of commits to running Applications (`deploy`), the
//! admin's allow-list (decided in `allow`, read in `allowance`), admin freezes (`freeze`), the
//! namespaces watched, and the
//! Leases and peer endpoint of sharding.

pub mod allow;
pub mod allowance;
pub mod argocd;
pub mod deploy;
pub mod finalizers;
pub mod freeze;
pub mod invalid;
pub mod namespaces;
pub mod secrets;
pub mod shard;

use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client, runtime::watcher};

/// Follows ConfigMap `name` in `namespace` (an admin's settings: the allow-list, freezes):
/// `apply` gets it after each change, and `None` when it is deleted or missing from a full
/// listing. Watch errors are logged (naming `what`) and the watch retried after 5 s. Runs
/// until the watch stream ends.
pub async fn follow_configmap(
    client: Client,
    namespace: &str,
    name: &str,
    what: &str,
    apply: impl Fn(Option<&ConfigMap>) + Send,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(api, config).boxed();
    let mut seen_in_listing = false;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(cm)) | Ok(watcher::Event::InitApply(cm)) => {
                seen_in_listing = true;
                apply(Some(&cm));
            }
            Ok(watcher::Event::Delete(_)) => apply(None),
            Ok(watcher::Event::Init) => seen_in_listing = false,
            Ok(watcher::Event::InitDone) => {
                if !seen_in_listing {
                    apply(None);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, configmap = %name, "watching the {what} ConfigMap");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    }
}
