//! The places in Git an ImageWatch's `spec.target` names (pure): the file it writes, under
//! the base path of its Git location (an Argo CD Application's source path, or none with
//! `spec.git`), for the write intent, the allow-list ask and the managing Application.

use imagewatch_crd::Target;

use crate::manifests::{TargetSpec, WorkloadTarget};

/// The first path a target names (for a multi-source Application, `$<ref>/…` picks the
/// source it is a file of).
pub fn target_path(target: &Target) -> Option<&str> {
    target
        .workload
        .as_ref()
        .map(|w| w.path.as_str())
        .or(target.kustomize.as_ref().map(|k| k.path.as_str()))
        .or(target.helm.as_ref().map(|h| h.file.as_str()))
        .or(target.argocd_source.as_ref().map(|a| a.path.as_str()))
}

/// The place in Git a target names, with paths under `base_path`; `image` names the
/// kustomize and Argo CD source entries that do not name their own.
pub fn target_spec(target: &Target, base_path: &str, image: &str) -> Result<TargetSpec, String> {
    let set = [
        target.workload.is_some(),
        target.kustomize.is_some(),
        target.helm.is_some(),
        target.argocd_source.is_some(),
    ];
    if set.iter().filter(|s| **s).count() != 1 {
        return Err(
            "spec.target: exactly one of workload, kustomize, helm, argocdSource must be set"
                .into(),
        );
    }
    if let Some(w) = &target.workload {
        return Ok(TargetSpec::Workload {
            path: join_path(base_path, &w.path),
            target: WorkloadTarget {
                kind: w.kind.clone(),
                name: w.name.clone(),
                container: w.container.clone(),
                namespace: w.namespace.clone(),
            },
        });
    }
    if let Some(k) = &target.kustomize {
        return Ok(TargetSpec::Kustomize {
            path: join_path(base_path, &k.path),
            image: k.image.clone().unwrap_or_else(|| image.to_string()),
        });
    }
    if let Some(h) = &target.helm {
        return Ok(TargetSpec::Helm {
            file: join_path(base_path, &h.file),
            key: h.tag.clone(),
        });
    }
    if let Some(a) = &target.argocd_source {
        return Ok(TargetSpec::ArgocdSource {
            path: join_path(base_path, &a.path),
            application: a.application.clone(),
            image: a.image.clone().unwrap_or_else(|| image.to_string()),
        });
    }
    Err("spec.target is empty".into())
}

/// The path a target writes, under `base`; a pattern's `$n` and what follows are cut.
pub fn written_path(target: &Target, base: &str) -> String {
    let path = target_path(target).unwrap_or_default();
    let literal = path.split('$').next().unwrap_or_default();
    join_path(base, literal)
}

/// `base/path`, without leading or trailing slashes.
pub fn join_path(base: &str, path: &str) -> String {
    // `$<ref>/file`: a file of a multi-source Application's `ref` source, from its root.
    if let Some(rest) = path.strip_prefix('$') {
        return rest
            .split_once('/')
            .map_or("", |(_, file)| file)
            .trim_matches('/')
            .to_string();
    }
    let base = base.trim_matches('/');
    let path = path.trim_matches('/');
    match (base.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (false, true) => base.to_string(),
        (false, false) => format!("{base}/{path}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_join_under_the_base_and_a_ref_path_starts_at_its_source_root() {
        assert_eq!(join_path("", "apps/web"), "apps/web");
        assert_eq!(join_path("/envs/prod/", "/web/"), "envs/prod/web");
        assert_eq!(join_path("envs/prod", ""), "envs/prod");
        assert_eq!(
            join_path("envs/prod", "$values/charts/web.yaml"),
            "charts/web.yaml"
        );
    }

    #[test]
    fn a_pattern_target_is_asked_for_up_to_its_first_capture() {
        let target: Target = serde_json::from_value(serde_json::json!({
            "kustomize": {"path": "apps/$1/overlay"}
        }))
        .unwrap();
        assert_eq!(written_path(&target, "base"), "base/apps");
        assert_eq!(target_path(&target), Some("apps/$1/overlay"));
    }

    #[test]
    fn a_target_sets_exactly_one_place() {
        let both: Target = serde_json::from_value(serde_json::json!({
            "kustomize": {"path": "a"}, "helm": {"file": "v.yaml", "tag": "image.tag"}
        }))
        .unwrap();
        assert!(
            target_spec(&both, "", "img")
                .unwrap_err()
                .contains("exactly one")
        );
        let kustomize: Target =
            serde_json::from_value(serde_json::json!({"kustomize": {"path": "a"}})).unwrap();
        assert_eq!(
            target_spec(&kustomize, "base", "registry.example.com/web").unwrap(),
            TargetSpec::Kustomize {
                path: "base/a".into(),
                image: "registry.example.com/web".into()
            }
        );
    }
}
