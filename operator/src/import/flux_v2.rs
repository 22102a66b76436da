//! Flux v2 image automation: `ImageRepository` + `ImagePolicy` objects, and the setter markers
//! (`# {"$imagepolicy": "<namespace>:<policy>"}`, `:tag`, `:name`) that say where
//! `ImageUpdateAutomation` writes.
//!
//! One watch per marked value that names a tag (full-image and `:tag` markers; `:name` markers
//! change with no tag). The target is the kind that writes the same scalar: a workload
//! container's `image`, a kustomization `images[].newTag`, or, in a file of one document, the
//! key path as a Helm-style target (`spec.values.image.tag` of a HelmRelease, `image.tag` of a
//! values file).

use std::collections::BTreeMap;

use imagewatch_crd::{
    DigestMode, HelmTarget, KustomizeTarget, RegistryProvider, TagOrder, TagRules, Target,
    WorkloadTarget,
};
use serde_json::Value;

use super::draft::{
    WatchDraft, describe, dir_of, lowest, name_of, namespace_of, object_name, regex_as_glob, rules,
};
use super::markers::MarkerPart;
use super::markers::{MarkerContext, dotted};
use super::model::{Imported, Inputs, Options, Severity, SourceObject};

fn is_flux_image(value: &Value, kind: &str) -> bool {
    value.get("kind").and_then(Value::as_str) == Some(kind)
        && value
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| v.starts_with("image.toolkit.fluxcd.io/"))
}

/// `spec.policy` and `spec.filterTags` as tag rules, or why not.
fn policy_rules(policy: &Value, source: &str, out: &mut Imported) -> Result<TagRules, String> {
    let spec = policy.get("spec").unwrap_or(&Value::Null);
    let filter = spec
        .pointer("/filterTags/pattern")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty());
    let extract = spec
        .pointer("/filterTags/extract")
        .and_then(Value::as_str)
        .filter(|e| !e.is_empty());
    if extract.is_some() && filter.is_none() {
        return Err("filterTags.extract without filterTags.pattern".into());
    }
    let descending = |order: Option<&Value>| {
        order
            .and_then(Value::as_str)
            .is_some_and(|o| o.eq_ignore_ascii_case("desc"))
    };
    let with_filter = |order: TagOrder| {
        let mut tag_rules = rules(filter.map(|f| format!("regex:{f}")), Vec::new(), order);
        tag_rules.extract = extract.map(str::to_owned);
        tag_rules
    };
    let choice = spec.get("policy").unwrap_or(&Value::Null);
    let tag_rules = if let Some(semver) = choice.get("semver") {
        let range = semver.get("range").and_then(Value::as_str).unwrap_or("");
        match filter {
            None => rules(
                Some(format!("semver:{range}")),
                Vec::new(),
                TagOrder::Semver,
            ),
            Some(_) if matches!(range.trim(), "*" | "x" | ">=0" | ">=0.0.0") => {
                out.note(
                    source,
                    Severity::Differs,
                    format!(
                        "range {range:?} over filterTags: the watch orders the filtered (or \
                         extracted) versions, prereleases included, where Flux admits releases only"
                    ),
                );
                with_filter(TagOrder::Semver)
            }
            Some(filter) => {
                return Err(format!(
                    "a semver range ({range:?}) together with filterTags.pattern ({filter:?}): a \
                     watch has one pattern, a regex or a range; rewrite it as one regex with \
                     extract and order: Semver, or as a range over whole tags"
                ));
            }
        }
    } else if let Some(alphabetical) = choice.get("alphabetical") {
        let tag_rules = with_filter(TagOrder::Alphabetical);
        if descending(alphabetical.get("order")) {
            lowest(tag_rules)
        } else {
            tag_rules
        }
    } else if let Some(numerical) = choice.get("numerical") {
        out.note(
            source,
            Severity::Differs,
            "numerical: the watch reads plain decimals exactly and skips other tags; Flux reads \
             floats (1e3 too) and fails the whole policy on a tag that is not a number",
        );
        let tag_rules = with_filter(TagOrder::Numerical);
        if descending(numerical.get("order")) {
            lowest(tag_rules)
        } else {
            tag_rules
        }
    } else {
        return Err("spec.policy names none of semver, alphabetical, numerical".into());
    };
    crate::policy::TagPolicy::from_rules(&tag_rules).map_err(|e| e.to_string())?;
    Ok(tag_rules)
}

/// The repository's `exclusionList` (regexes; Flux's default `^.*\.sig$` when absent) as
/// exclude globs, or the first one that has no exact glob.
fn exclusions(repository: &Value) -> Result<Vec<String>, String> {
    let list: Vec<String> = match repository.pointer("/spec/exclusionList") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => vec![r"^.*\.sig$".to_owned()],
    };
    list.iter()
        .map(|regex| {
            regex_as_glob(regex).ok_or_else(|| {
                format!(
                    "exclusionList entry {regex:?} has no exact glob (exclude takes globs); \
                     rewrite it as globs"
                )
            })
        })
        .collect()
}

pub(super) fn translate(inputs: &Inputs, options: &Options, out: &mut Imported) {
    let repositories: BTreeMap<(String, String), &SourceObject> = inputs
        .objects
        .iter()
        .filter(|o| is_flux_image(&o.value, "ImageRepository"))
        .map(|o| {
            let ns = namespace_of(&o.value).unwrap_or("").to_owned();
            ((ns, name_of(&o.value).to_owned()), o)
        })
        .collect();
    let mut used_markers = Vec::new();
    for policy in inputs
        .objects
        .iter()
        .filter(|o| is_flux_image(&o.value, "ImagePolicy"))
    {
        let source = describe(policy);
        let value = &policy.value;
        let namespace = namespace_of(value).unwrap_or("");
        let name = name_of(value);
        let repo_name = value
            .pointer("/spec/imageRepositoryRef/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let repo_namespace = value
            .pointer("/spec/imageRepositoryRef/namespace")
            .and_then(Value::as_str)
            .unwrap_or(namespace);
        let Some(repository) = repositories.get(&(repo_namespace.to_owned(), repo_name.to_owned()))
        else {
            out.note(
                &source,
                Severity::NotTranslated,
                format!("its ImageRepository {repo_namespace}/{repo_name} is not among the imported objects"),
            );
            continue;
        };
        let Some(image) = repository
            .value
            .pointer("/spec/image")
            .and_then(Value::as_str)
        else {
            out.note(
                &source,
                Severity::NotTranslated,
                "its ImageRepository has no spec.image",
            );
            continue;
        };
        let mut tag_rules = match policy_rules(value, &source, out) {
            Ok(tag_rules) => tag_rules,
            Err(reason) => {
                out.note(&source, Severity::NotTranslated, reason);
                continue;
            }
        };
        match exclusions(&repository.value) {
            Ok(globs) => tag_rules.exclude = (!globs.is_empty()).then_some(globs),
            Err(reason) => {
                out.note(&source, Severity::NotTranslated, reason);
                continue;
            }
        }
        // A marker names the policy as `<namespace>:<name>`; a policy file without a namespace
        // is matched on its name alone.
        let sites: Vec<usize> = inputs
            .markers
            .iter()
            .enumerate()
            .filter(|(_, m)| match m.policy.split_once(':') {
                Some((ns, n)) => n == name && (namespace.is_empty() || ns == namespace),
                None => false,
            })
            .map(|(i, _)| i)
            .collect();
        let mut produced = 0;
        for &index in &sites {
            let marker = &inputs.markers[index];
            let at = format!("{source} marker {}:{}", marker.file, marker.line);
            let target = match (&marker.part, &marker.context) {
                (MarkerPart::Name, _) => continue,
                (MarkerPart::Other(suffix), _) => {
                    out.note(
                        &at,
                        Severity::NotTranslated,
                        format!("a :{suffix} marker has no imagewatch counterpart"),
                    );
                    continue;
                }
                (
                    MarkerPart::Full,
                    MarkerContext::Workload {
                        kind,
                        name,
                        namespace,
                        container,
                    },
                ) => Target {
                    workload: Some(WorkloadTarget {
                        path: dir_of(&marker.file),
                        kind: kind.clone(),
                        name: name.clone(),
                        container: container.clone(),
                        namespace: namespace.clone(),
                    }),
                    kustomize: None,
                    helm: None,
                    argocd_source: None,
                },
                (MarkerPart::Tag, MarkerContext::Kustomization { image }) => Target {
                    workload: None,
                    kustomize: Some(KustomizeTarget {
                        path: dir_of(&marker.file),
                        image: Some(image.clone()),
                    }),
                    helm: None,
                    argocd_source: None,
                },
                (
                    MarkerPart::Full | MarkerPart::Tag,
                    MarkerContext::Other {
                        single_document: true,
                    },
                ) => Target {
                    workload: None,
                    kustomize: None,
                    helm: Some(HelmTarget {
                        file: marker.file.clone(),
                        tag: dotted(&marker.path),
                    }),
                    argocd_source: None,
                },
                _ => {
                    out.note(
                        &at,
                        Severity::NotTranslated,
                        "the marked value is neither a workload container's image nor a \
                         kustomization image, in a file of several documents: no watch target \
                         addresses it (imagewatch set-image --setter does, after \
                         --rewrite-markers)",
                    );
                    continue;
                }
            };
            let mut draft = WatchDraft::new(object_name(&[name]), image.to_owned(), target);
            draft.namespace = (!namespace.is_empty()).then(|| namespace.to_owned());
            draft.rules = tag_rules.clone();
            draft.secret = repository
                .value
                .pointer("/spec/secretRef/name")
                .and_then(Value::as_str)
                .map(str::to_owned);
            draft.interval = repository
                .value
                .pointer("/spec/interval")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if let Some(reflect) = value
                .pointer("/spec/digestReflectionPolicy")
                .and_then(Value::as_str)
                .filter(|p| *p != "Never")
            {
                draft.digest = Some(DigestMode::Pin);
                out.note(
                    &at,
                    Severity::Differs,
                    format!("digestReflectionPolicy {reflect}: the watch writes tag@digest (digest: Pin)"),
                );
            }
            let mut watch = draft.build(options);
            match repository.value.pointer("/spec/provider").and_then(Value::as_str) {
                Some("aws") => {
                    let credentials = watch.spec.credentials.get_or_insert_with(Default::default);
                    credentials.provider = Some(RegistryProvider::Aws);
                }
                Some(provider @ ("azure" | "gcp")) => out.note(
                    &at,
                    Severity::Differs,
                    format!("provider {provider}: imagewatch has no {provider} login; give the watch a pull Secret"),
                ),
                _ => {}
            }
            out.watches.push(watch);
            used_markers.push((index, out.watches.len() - 1));
            produced += 1;
        }
        if produced == 0
            && !sites
                .iter()
                .any(|&i| inputs.markers[i].part != MarkerPart::Name)
        {
            out.note(
                &source,
                Severity::NotTranslated,
                "no setter marker names this policy in the imported files (markers live in Git: \
                 import a checkout of the manifests)",
            );
        }
    }
    // `:name` markers follow the watch of the same policy in the same file.
    for (index, marker) in inputs.markers.iter().enumerate() {
        if marker.part != MarkerPart::Name {
            continue;
        }
        if let Some(&(_, watch)) = used_markers.iter().find(|&&(i, _)| {
            let other = &inputs.markers[i];
            other.file == marker.file && other.policy == marker.policy
        }) {
            used_markers.push((index, watch));
        }
    }
    out.marker_sites.extend(used_markers);
}
