//! Dereference step for watches without `spec.git`: the repository, revision and base path
//! come from the Argo CD Application that manages the ImageWatch object itself.
//!
//! Argo CD marks what it manages either with the annotation `argocd.argoproj.io/tracking-id`
//! (`<app>:<group>/<kind>:<namespace>/<name>`, where `<app>` is `<namespace>_<name>` when
//! Applications live outside Argo CD's own namespace) or with the label
//! `app.kubernetes.io/instance: <app>` (label tracking; annotation tracking is Argo CD's default
//! since 3.0, `application.resourceTrackingMethod` chooses). Credentials come from a
//! Secret in the watch's namespace labelled `imagewatch.dev/git-credentials: "true"` whose
//! annotation `imagewatch.dev/url-prefix` is the longest prefix of the repository URL.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams},
};

use crate::error::{CredentialsError, Denial, ReconcileError, SpecError, TargetError};
use crate::ttl_cache::TtlCache;

/// Annotation Argo CD writes with annotation-based resource tracking.
pub const TRACKING_ANNOTATION: &str = "argocd.argoproj.io/tracking-id";
/// Label Argo CD writes with label-based resource tracking (`resourceTrackingMethod: label`).
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Label marking a Secret as Git credentials for watches in its namespace.
pub const CREDENTIALS_LABEL: &str = "imagewatch.dev/git-credentials";
/// Annotation holding the URL prefix a credentials Secret is for.
pub const URL_PREFIX_ANNOTATION: &str = "imagewatch.dev/url-prefix";

/// Which Application manages an object (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplicationKey {
    /// Application namespace (None: Argo CD's own namespace).
    pub namespace: Option<String>,
    /// Application name.
    pub name: String,
}

/// Finds the managing Application from an object's annotations and labels (pure).
pub fn managing_application(
    annotations: &std::collections::BTreeMap<String, String>,
    labels: &std::collections::BTreeMap<String, String>,
) -> Option<ApplicationKey> {
    if let Some(id) = annotations.get(TRACKING_ANNOTATION) {
        let app = id.split(':').next().unwrap_or_default();
        if !app.is_empty() {
            return Some(match app.split_once('_') {
                Some((ns, name)) => ApplicationKey {
                    namespace: Some(ns.to_string()),
                    name: name.to_string(),
                },
                None => ApplicationKey {
                    namespace: None,
                    name: app.to_string(),
                },
            });
        }
    }
    labels
        .get(INSTANCE_LABEL)
        .filter(|v| !v.is_empty())
        .map(|name| ApplicationKey {
            namespace: None,
            name: name.clone(),
        })
}

/// The Git location an Application deploys from (see [`imagewatch_engine::argocd::git_source`]
/// for single- and multi-source Applications).
pub use imagewatch_engine::argocd::GitSource as ApplicationSource;

/// Whether the Application `app` (living in `app_namespace`) may be the source of an object
/// in `namespace` (pure): it lives in that namespace (Applications in any namespace), or it
/// deploys to it (`spec.destination.namespace`). Anyone can write a tracking annotation or an
/// instance label, so naming another tenant's Application must not lend its repository.
pub fn deploys_to(app_namespace: &str, app: &serde_json::Value, namespace: &str) -> bool {
    imagewatch_engine::argocd::Application::parse(app_namespace, "", app)
        .serves_namespace(namespace)
}

/// The refusal of an Application that does not exist or does not deploy to `namespace`:
/// the same words either way, so a tenant learns nothing about other tenants' Applications.
fn not_deploying_here(app_ns: &str, name: &str, namespace: &str) -> ReconcileError {
    ReconcileError::NotAllowed(Denial::ForeignApplication {
        application: format!("{app_ns}/{name}"),
        namespace: namespace.to_string(),
    })
}

/// Picks the credentials Secret with the longest `url-prefix` matching `url` (pure).
pub fn best_credentials<'a>(secrets: &'a [Secret], url: &str) -> Option<&'a Secret> {
    secrets
        .iter()
        .filter_map(|s| {
            let prefix = s.annotations().get(URL_PREFIX_ANNOTATION)?;
            url.starts_with(prefix.as_str())
                .then_some((prefix.len(), s))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, s)| s)
}

fn application_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"),
        "applications",
    )
}

/// Resolves the Application managing a watch and returns its source, plus the name of the
/// credentials Secret for its URL (if one is labelled in `namespace`).
///
/// `target_path` is the first path of the object's target: for a multi-source Application,
/// `$<ref>/…` picks the `ref` source of that name.
pub async fn resolve(
    client: &Client,
    argocd_namespace: &str,
    namespace: &str,
    annotations: &std::collections::BTreeMap<String, String>,
    labels: &std::collections::BTreeMap<String, String>,
    target_path: Option<&str>,
) -> Result<(ApplicationSource, Option<String>), ReconcileError> {
    let key = managing_application(annotations, labels)
        .ok_or_else(|| ReconcileError::InvalidSpec(SpecError::NoGitRepository))?;
    let app_ns = key
        .namespace
        .clone()
        .unwrap_or_else(|| argocd_namespace.to_string());
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &app_ns, &application_resource());
    let app = match api.get_opt(&key.name).await {
        Ok(Some(app)) if deploys_to(&app_ns, &app.data, namespace) => app,
        Ok(_) => return Err(not_deploying_here(&app_ns, &key.name, namespace)),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            return Err(ReconcileError::TargetNotFound(
                TargetError::NoApplicationApi,
            ));
        }
        Err(e) => return Err(e.into()),
    };
    let application = imagewatch_engine::argocd::Application::parse(&app_ns, &key.name, &app.data);
    let source = imagewatch_engine::argocd::git_source(&application, target_path).map_err(|e| {
        ReconcileError::InvalidSpec(SpecError::invalid(
            format!("Argo CD Application {app_ns}/{}", key.name),
            e,
        ))
    })?;
    crate::git::check_tenant_url(&source.repo_url).map_err(|e| {
        ReconcileError::InvalidSpec(SpecError::invalid(
            format!(
                "Argo CD Application {app_ns}/{} spec.source.repoURL",
                key.name
            ),
            e,
        ))
    })?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let labelled = secrets
        .list(&ListParams::default().labels(&format!("{CREDENTIALS_LABEL}=true")))
        .await
        .map_err(|e| match e {
            // The default install may not list Secrets (least privilege): say which chart
            // value grants it instead of an internal error.
            kube::Error::Api(status) if status.code == 403 => {
                ReconcileError::CredentialsNotFound(CredentialsError::CannotListLabelled {
                    label: CREDENTIALS_LABEL,
                    namespace: namespace.to_string(),
                })
            }
            e => e.into(),
        })?;
    let secret = best_credentials(&labelled.items, &source.repo_url).map(|s| s.name_any());
    Ok((source, secret))
}

/// How long a resolved Application source (and its credentials Secret's name) is used before
/// the Application is read again. Every watch of an application shares one answer, and a
/// changed `repoURL`, `targetRevision` or `path` is seen within this time.
pub const RESOLVE_CACHE_TTL: Duration = Duration::from_secs(15);

/// Key: Application namespace and name, the namespace searched for credentials, and the
/// `$<ref>` the target names (multi-source), if any.
type ResolveKey = (String, String, String, String);
type Resolved = (ApplicationSource, Option<String>);

/// Application sources resolved recently; only successes are kept.
pub type ResolveCache = TtlCache<ResolveKey, Resolved>;

/// An empty [`ResolveCache`].
pub fn resolve_cache() -> ResolveCache {
    TtlCache::new(RESOLVE_CACHE_TTL)
}

/// [`resolve`], answered from `cache` when the same Application was resolved for the same
/// namespace within [`RESOLVE_CACHE_TTL`].
pub async fn resolve_cached(
    cache: &ResolveCache,
    client: &Client,
    argocd_namespace: &str,
    namespace: &str,
    annotations: &std::collections::BTreeMap<String, String>,
    labels: &std::collections::BTreeMap<String, String>,
    target_path: Option<&str>,
) -> Result<Resolved, ReconcileError> {
    // Without a managing Application, `resolve` says so (nothing to cache).
    let reference = target_path
        .filter(|p| p.starts_with('$'))
        .and_then(|p| p.split('/').next())
        .unwrap_or_default();
    let key = managing_application(annotations, labels).map(|app| {
        (
            app.namespace
                .unwrap_or_else(|| argocd_namespace.to_string()),
            app.name,
            namespace.to_string(),
            reference.to_string(),
        )
    });
    let now = Instant::now();
    if let Some(resolved) = key.as_ref().and_then(|key| cache.get(key, now)) {
        return Ok(resolved);
    }
    let resolved = resolve(
        client,
        argocd_namespace,
        namespace,
        annotations,
        labels,
        target_path,
    )
    .await?;
    if let Some(key) = key {
        cache.put(key, now, resolved.clone());
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn tracking_annotation_wins_and_names_apps_in_any_namespace() {
        let key = managing_application(
            &map(&[(
                TRACKING_ANNOTATION,
                "team-a_my-api:imagewatch.dev/ImageWatch:my-api/canary",
            )]),
            &map(&[(INSTANCE_LABEL, "other")]),
        );
        assert_eq!(
            key,
            Some(ApplicationKey {
                namespace: Some("team-a".into()),
                name: "my-api".into()
            })
        );
        let key = managing_application(
            &map(&[(TRACKING_ANNOTATION, "my-api:imagewatch.dev/ImageWatch:ns/x")]),
            &map(&[]),
        );
        assert_eq!(
            key.map(|k| (k.namespace, k.name)),
            Some((None, "my-api".into()))
        );
    }

    #[test]
    fn instance_label_is_the_fallback() {
        let key = managing_application(&map(&[]), &map(&[(INSTANCE_LABEL, "my-api-stg")]));
        assert_eq!(key.map(|k| k.name), Some("my-api-stg".into()));
        assert_eq!(managing_application(&map(&[]), &map(&[])), None);
    }

    #[test]
    fn only_an_application_deploying_to_the_namespace_lends_its_source() {
        let app = |dest: &str| serde_json::json!({"spec": {"destination": {"namespace": dest}}});
        assert!(deploys_to("argocd", &app("team-a"), "team-a"));
        assert!(!deploys_to("argocd", &app("team-b"), "team-a"));
        assert!(!deploys_to(
            "argocd",
            &serde_json::json!({"spec": {}}),
            "team-a"
        ));
        // Applications in any namespace: an Application of team-a's own namespace.
        assert!(deploys_to("team-a", &app("elsewhere"), "team-a"));
        assert!(!deploys_to("team-b", &app("team-b"), "team-a"));
        let refused = not_deploying_here("argocd", "b-app", "team-a").to_string();
        assert!(
            refused.contains("does not exist or does not deploy"),
            "{refused}"
        );
    }

    #[test]
    fn the_longest_matching_prefix_wins() {
        let secret = |name: &str, prefix: &str| {
            let mut s = Secret::default();
            s.metadata.name = Some(name.into());
            s.metadata.annotations = Some(map(&[(URL_PREFIX_ANNOTATION, prefix)]));
            s
        };
        let all = vec![
            secret("org", "https://github.com/org/"),
            secret("repo", "https://github.com/org/manifests"),
            secret("other", "https://gitlab.com/"),
        ];
        assert_eq!(
            best_credentials(&all, "https://github.com/org/manifests.git").map(|s| s.name_any()),
            Some("repo".into())
        );
        assert_eq!(
            best_credentials(&all, "https://github.com/org/x.git").map(|s| s.name_any()),
            Some("org".into())
        );
        assert!(best_credentials(&all, "https://example.com/x.git").is_none());
    }
}
