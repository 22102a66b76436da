//! The members of a pattern watch (pure): every `$n` of the target must name one of the
//! pattern's `*` captures, each member's target is the target with its captures filled in,
//! and two members must never write one place.

use std::collections::HashMap;

use imagewatch_crd::Target;

use crate::pattern::{capture_references, expand_captures};

/// The target's text fields that `$n` may appear in, by their spec path.
fn target_fields(target: &Target) -> Vec<(&'static str, &str)> {
    let mut fields = Vec::new();
    if let Some(w) = &target.workload {
        fields.push(("spec.target.workload.path", w.path.as_str()));
        fields.push(("spec.target.workload.name", w.name.as_str()));
        fields.push(("spec.target.workload.container", w.container.as_str()));
        if let Some(ns) = &w.namespace {
            fields.push(("spec.target.workload.namespace", ns.as_str()));
        }
    }
    if let Some(k) = &target.kustomize {
        fields.push(("spec.target.kustomize.path", k.path.as_str()));
        if let Some(image) = &k.image {
            fields.push(("spec.target.kustomize.image", image.as_str()));
        }
    }
    if let Some(h) = &target.helm {
        fields.push(("spec.target.helm.file", h.file.as_str()));
        fields.push(("spec.target.helm.tag", h.tag.as_str()));
    }
    if let Some(a) = &target.argocd_source {
        fields.push(("spec.target.argocdSource.path", a.path.as_str()));
        fields.push((
            "spec.target.argocdSource.application",
            a.application.as_str(),
        ));
        if let Some(image) = &a.image {
            fields.push(("spec.target.argocdSource.image", image.as_str()));
        }
    }
    fields
}

/// Checks that every `$n` in the target refers to one of the pattern's `wildcards` captures.
/// The message names the field, the reference and the image's capture count.
pub fn check_references(target: &Target, image: &str, wildcards: usize) -> Result<(), String> {
    for (field, value) in target_fields(target) {
        let references = capture_references(value).map_err(|e| format!("{field}: {e}"))?;
        if let Some(n) = references.into_iter().find(|n| *n > wildcards) {
            return Err(format!(
                "{field} {value:?} refers to ${n}, but spec.image {image:?} has {wildcards} '*' segment{} (${}{})",
                if wildcards == 1 { "" } else { "s" },
                if wildcards == 0 { "none" } else { "1" },
                if wildcards > 1 {
                    format!("..${wildcards}")
                } else {
                    String::new()
                },
            ));
        }
    }
    Ok(())
}

/// The target of one member: every text field with `$1..$n` replaced by its captures.
pub fn expand_target(target: &Target, captures: &[String]) -> Target {
    let x = |s: &str| expand_captures(s, captures);
    let mut out = target.clone();
    if let Some(w) = &mut out.workload {
        w.path = x(&w.path);
        w.name = x(&w.name);
        w.container = x(&w.container);
        w.namespace = w.namespace.as_deref().map(x);
    }
    if let Some(k) = &mut out.kustomize {
        k.path = x(&k.path);
        k.image = k.image.as_deref().map(x);
    }
    if let Some(h) = &mut out.helm {
        h.file = x(&h.file);
        h.tag = x(&h.tag);
    }
    if let Some(a) = &mut out.argocd_source {
        a.path = x(&a.path);
        a.application = x(&a.application);
        a.image = a.image.as_deref().map(x);
    }
    out
}

/// For each member's target key, the index of an earlier member with the same key (two
/// members must never write one place: the second would undo the first).
pub fn shared_targets<K: Eq + std::hash::Hash>(keys: &[K]) -> Vec<Option<usize>> {
    let mut first: HashMap<&K, usize> = HashMap::new();
    let mut out = vec![None; keys.len()];
    for (i, key) in keys.iter().enumerate() {
        match first.get(key) {
            Some(&j) => {
                out[i] = Some(j);
                if out[j].is_none() {
                    out[j] = Some(i);
                }
            }
            None => {
                first.insert(key, i);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use imagewatch_crd::{HelmTarget, KustomizeTarget, WorkloadTarget};

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn workload(path: &str, name: &str) -> Target {
        Target {
            workload: Some(WorkloadTarget {
                path: path.into(),
                kind: "Deployment".into(),
                name: name.into(),
                container: "app".into(),
                namespace: None,
            }),
            kustomize: None,
            helm: None,
            argocd_source: None,
        }
    }

    fn kustomize(path: &str) -> Target {
        Target {
            workload: None,
            kustomize: Some(KustomizeTarget {
                path: path.into(),
                image: None,
            }),
            helm: None,
            argocd_source: None,
        }
    }

    #[test]
    fn references_must_name_existing_captures() {
        let image = "r.example.com/hoge/*/*/*";
        assert_eq!(
            check_references(&kustomize("services/$1/$2/$3/overlays/stg"), image, 3),
            Ok(())
        );
        let err =
            check_references(&kustomize("services/$1/$4/overlays/stg"), image, 3).unwrap_err();
        assert_eq!(
            err,
            "spec.target.kustomize.path \"services/$1/$4/overlays/stg\" refers to $4, but spec.image \"r.example.com/hoge/*/*/*\" has 3 '*' segments ($1..$3)"
        );
        let err =
            check_references(&workload("apps/$1", "$2-api"), "r.io/svc/*/api", 1).unwrap_err();
        assert!(
            err.starts_with("spec.target.workload.name \"$2-api\" refers to $2")
                && err.ends_with("has 1 '*' segment ($1)"),
            "{err}"
        );
        let err = check_references(&kustomize("apps/$x"), image, 3).unwrap_err();
        assert!(
            err.starts_with("spec.target.kustomize.path: a '$'"),
            "{err}"
        );
        let helm = Target {
            workload: None,
            kustomize: None,
            helm: Some(HelmTarget {
                file: "values.yaml".into(),
                tag: "$2.image.tag".into(),
            }),
            argocd_source: None,
        };
        assert!(check_references(&helm, image, 3).is_ok());
        assert!(check_references(&helm, image, 1).is_err());
    }

    #[test]
    fn targets_expand_in_every_text_field() {
        let caps = strings(&["billing", "api", "eu"]);
        let t = expand_target(&workload("services/$1/$2/$3/overlays/stg", "$1-$2"), &caps);
        let w = t.workload.unwrap();
        assert_eq!(w.path, "services/billing/api/eu/overlays/stg");
        assert_eq!(w.name, "billing-api");
        assert_eq!(w.container, "app");
        let t = expand_target(&kustomize("apps/${1}x/$$"), &caps);
        assert_eq!(t.kustomize.unwrap().path, "apps/billingx/$");
    }

    #[test]
    fn members_sharing_a_target_are_found() {
        assert_eq!(shared_targets(&["a", "b", "c"]), vec![None, None, None]);
        assert_eq!(
            shared_targets(&["a", "b", "a", "a"]),
            vec![Some(2), None, Some(0), Some(0)]
        );
    }
}
