//! Flux v1 (the archived fluxcd/flux daemon): annotations on workloads.
//!
//! ```yaml
//! metadata:
//!   annotations:
//!     fluxcd.io/automated: "true"              # or flux.weave.works/automated
//!     fluxcd.io/tag.web: semver:~1.4           # or glob:…, regex:…, or a bare glob
//!     fluxcd.io/locked: "true"                 # hold the current tag
//! ```
//!
//! Each container of an automated workload becomes one watch with a workload target. Flux v1
//! ordered glob and regex matches by image creation time and semver matches by version; the
//! watches use `Newest` (push time) and `Semver`.

use imagewatch_crd::{TagOrder, Target, WorkloadTarget};
use serde_json::Value;

use super::draft::{
    WatchDraft, annotation, describe, dir_of, name_of, namespace_of, object_name, rules,
    split_image, star_glob,
};
use super::model::{Imported, Inputs, Options, Severity, SourceObject};

const PREFIXES: [&str; 2] = ["fluxcd.io/", "flux.weave.works/"];

/// Workload kinds Flux v1 automated, with the pointer to their pod spec.
pub(super) fn pod_spec(kind: &str) -> Option<&'static str> {
    match kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => {
            Some("/spec/template/spec")
        }
        "CronJob" => Some("/spec/jobTemplate/spec/template/spec"),
        "Pod" => Some("/spec"),
        _ => None,
    }
}

/// `(name, image)` of every container and init container of a workload.
pub(super) fn containers(value: &Value, pod_spec: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for list in ["containers", "initContainers"] {
        let items = value
            .pointer(&format!("{pod_spec}/{list}"))
            .and_then(Value::as_array);
        for item in items.into_iter().flatten() {
            if let (Some(name), Some(image)) = (
                item.get("name").and_then(Value::as_str),
                item.get("image").and_then(Value::as_str),
            ) {
                out.push((name.to_owned(), image.to_owned()));
            }
        }
    }
    out
}

fn flux_annotation<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    PREFIXES
        .iter()
        .find_map(|prefix| annotation(value, &format!("{prefix}{key}")))
}

fn is_true(text: Option<&str>) -> bool {
    text.is_some_and(|t| t.trim().eq_ignore_ascii_case("true"))
}

/// A Flux v1 tag filter as tag rules, or why it cannot be one.
fn filter_rules(filter: &str) -> Result<imagewatch_crd::TagRules, String> {
    let filter = filter.trim();
    if let Some(range) = filter.strip_prefix("semver:") {
        let pattern = format!("semver:{}", range.trim());
        crate::policy::validate_pattern(&pattern).map_err(|e| e.to_string())?;
        return Ok(rules(Some(pattern), Vec::new(), TagOrder::Semver));
    }
    if let Some(regex) = filter.strip_prefix("regex:") {
        let pattern = format!("regex:{regex}");
        crate::policy::validate_pattern(&pattern).map_err(|e| e.to_string())?;
        return Ok(rules(Some(pattern), Vec::new(), TagOrder::Newest));
    }
    let glob = filter.strip_prefix("glob:").unwrap_or(filter);
    let pattern = star_glob(glob);
    crate::policy::validate_pattern(&pattern).map_err(|e| e.to_string())?;
    let pattern = (!matches!(pattern.as_str(), "" | "*")).then_some(pattern);
    Ok(rules(pattern, Vec::new(), TagOrder::Newest))
}

pub(super) fn translate(inputs: &Inputs, options: &Options, out: &mut Imported) {
    for object in &inputs.objects {
        let value = &object.value;
        let has_flux = super::draft::annotations(value)
            .any(|(k, _)| PREFIXES.iter().any(|prefix| k.starts_with(prefix)));
        if !has_flux {
            continue;
        }
        let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
        let source = describe(object);
        if kind == "HelmRelease" {
            out.note(
                &source,
                Severity::NotTranslated,
                "a Flux v1 HelmRelease names images by values paths (fluxcd.io/tag.<chart-image>); \
                 write a watch with a helm target for the values file that holds the tag",
            );
            continue;
        }
        let Some(pod_spec) = pod_spec(kind) else {
            continue;
        };
        if !is_true(flux_annotation(value, "automated")) {
            if super::draft::annotations(value).any(|(k, _)| k.contains("/tag.")) {
                out.note(
                    &source,
                    Severity::NotTranslated,
                    "tag filters without fluxcd.io/automated: \"true\" updated nothing in Flux \
                     v1; no watch was generated",
                );
            }
            continue;
        }
        let locked = is_true(flux_annotation(value, "locked"));
        for (container, image) in containers(value, pod_spec) {
            translate_container(object, options, out, &source, (&container, &image), locked);
        }
    }
}

fn translate_container(
    object: &SourceObject,
    options: &Options,
    out: &mut Imported,
    source: &str,
    (container, image): (&str, &str),
    locked: bool,
) {
    let value = &object.value;
    let what = format!("{source} container {container}");
    let Some((repository, current)) = split_image(image) else {
        out.note(
            &what,
            Severity::NotTranslated,
            format!("image {image:?} is not an image reference"),
        );
        return;
    };
    let filter = flux_annotation(value, &format!("tag.{container}")).unwrap_or("glob:*");
    let tag_rules = match filter_rules(filter) {
        Ok(tag_rules) => tag_rules,
        Err(reason) => {
            out.note(
                &what,
                Severity::NotTranslated,
                format!("tag filter {filter:?}: {reason}"),
            );
            return;
        }
    };
    if tag_rules.order == Some(TagOrder::Newest) && !locked {
        out.note(
            &what,
            Severity::Differs,
            "Flux v1 ordered glob and regex matches by the image's creation time; the watch \
             uses the registry's push time (order: Newest)",
        );
    }
    let name = name_of(value);
    let target = Target {
        workload: Some(WorkloadTarget {
            path: object.file.as_deref().map(dir_of).unwrap_or_default(),
            kind: value
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            name: name.to_owned(),
            container: container.to_owned(),
            namespace: namespace_of(value).map(str::to_owned),
        }),
        kustomize: None,
        helm: None,
        argocd_source: None,
    };
    if object.file.is_none() {
        out.note(
            &what,
            Severity::Differs,
            "read from the cluster: target.workload.path is the repository root; narrow it to \
             the directory that holds the manifest",
        );
    }
    let mut draft = WatchDraft::new(object_name(&[name, container]), repository, target);
    draft.namespace = namespace_of(value).map(str::to_owned);
    draft.rules = tag_rules;
    if locked {
        match current {
            Some(tag) => {
                out.note(
                    &what,
                    Severity::Differs,
                    format!("fluxcd.io/locked: the watch holds the current tag with pin: {tag}"),
                );
                draft.pin = Some(tag);
            }
            None => {
                out.note(
                    &what,
                    Severity::NotTranslated,
                    "locked, but the image has no tag to hold",
                );
                return;
            }
        }
    }
    out.watches.push(draft.build(options));
}
