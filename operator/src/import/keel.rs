//! Keel: `keel.sh/policy` on workloads (annotation or label).
//!
//! Keel updates the running workload; the watch writes the same choice to Git, where the
//! workload's manifest lives. Its semver policies are relative to the tag running now, so the
//! range is built from the current tag: `patch` → `~1.4.2`-like (`>=1.4.2 <1.5.0`), `minor` →
//! `>=1.4.2 <2.0.0`, `major` → `>=1.4.2`, `all` → the same with prereleases admitted.

use imagewatch_crd::{DigestMode, TagOrder, Target, WorkloadTarget};
use serde_json::Value;

use super::draft::{
    WatchDraft, describe, dir_of, name_of, namespace_of, object_name, rules, split_image, star_glob,
};
use super::flux_v1::{containers, pod_spec};
use super::model::{Imported, Inputs, Options, Severity};

fn keel<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    let key = format!("keel.sh/{key}");
    super::draft::annotation(value, &key).or_else(|| {
        value
            .pointer("/metadata/labels")
            .and_then(|labels| labels.get(&key))
            .and_then(Value::as_str)
    })
}

/// The range a semver policy means for the tag running now, or why there is none.
fn range_for(policy: &str, current: &str) -> Result<String, String> {
    let version = semver::Version::parse(current.strip_prefix('v').unwrap_or(current))
        .map_err(|_| format!("the current tag {current:?} is not a semantic version"))?;
    if !version.pre.is_empty() {
        return Err(format!(
            "the current tag {current:?} is a prerelease: Keel then follows only the same \
             prerelease identifier, which no range expresses"
        ));
    }
    let base = format!("{}.{}.{}", version.major, version.minor, version.patch);
    Ok(match policy {
        "patch" => format!(">={base} <{}.{}.0", version.major, version.minor + 1),
        "minor" => format!(">={base} <{}.0.0", version.major + 1),
        "major" => format!(">={base}"),
        // Prereleases count too.
        _ => format!(">={base}-0"),
    })
}

pub(super) fn translate(inputs: &Inputs, options: &Options, out: &mut Imported) {
    for object in &inputs.objects {
        let value = &object.value;
        let Some(policy) = keel(value, "policy").map(str::trim) else {
            continue;
        };
        let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
        let source = describe(object);
        let Some(pod_spec) = pod_spec(kind) else {
            out.note(
                &source,
                Severity::NotTranslated,
                format!("keel.sh/policy on a {kind}: only workloads are translated"),
            );
            continue;
        };
        if policy == "never" {
            continue;
        }
        out.note(
            &source,
            Severity::Differs,
            "Keel updated the running workload; the watch writes the same choice to Git, the \
             desired state",
        );
        for (container, image) in containers(value, pod_spec) {
            let at = format!("{source} container {container}");
            let Some((repository, current)) = split_image(&image) else {
                out.note(
                    &at,
                    Severity::NotTranslated,
                    format!("{image:?} is not an image reference"),
                );
                continue;
            };
            let current = current.unwrap_or_else(|| "latest".to_owned());
            let mut pin = None;
            let mut digest = None;
            let tag_rules = match policy {
                "all" | "major" | "minor" | "patch" => match range_for(policy, &current) {
                    Ok(range) => rules(
                        Some(format!("semver:{range}")),
                        Vec::new(),
                        TagOrder::Semver,
                    ),
                    Err(reason) => {
                        out.note(&at, Severity::NotTranslated, reason);
                        continue;
                    }
                },
                "force" if keel(value, "match-tag") == Some("true") => {
                    pin = Some(current.clone());
                    digest = Some(DigestMode::Follow);
                    rules(None, Vec::new(), TagOrder::Semver)
                }
                "force" => rules(None, Vec::new(), TagOrder::Newest),
                other => match other
                    .strip_prefix("glob:")
                    .map(star_glob)
                    .or_else(|| other.strip_prefix("regexp:").map(|r| format!("regex:{r}")))
                {
                    Some(pattern) => rules(Some(pattern), Vec::new(), TagOrder::Newest),
                    None => {
                        out.note(
                            &at,
                            Severity::NotTranslated,
                            format!("unknown keel.sh/policy {other:?}"),
                        );
                        continue;
                    }
                },
            };
            if let Err(error) = crate::policy::TagPolicy::from_rules(&tag_rules) {
                out.note(&at, Severity::NotTranslated, error.to_string());
                continue;
            }
            if tag_rules.order == Some(TagOrder::Newest) {
                out.note(
                    &at,
                    Severity::Differs,
                    "Keel moved to whichever matching tag was pushed last; the watch does the \
                     same by push time (order: Newest)",
                );
            }
            let target = Target {
                workload: Some(WorkloadTarget {
                    path: object.file.as_deref().map(dir_of).unwrap_or_default(),
                    kind: kind.to_owned(),
                    name: name_of(value).to_owned(),
                    container: container.clone(),
                    namespace: namespace_of(value).map(str::to_owned),
                }),
                kustomize: None,
                helm: None,
                argocd_source: None,
            };
            let mut draft = WatchDraft::new(
                object_name(&[name_of(value), &container]),
                repository,
                target,
            );
            draft.namespace = namespace_of(value).map(str::to_owned);
            draft.rules = tag_rules;
            draft.pin = pin;
            draft.digest = digest;
            out.watches.push(draft.build(options));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Order, TagInfo, TagPolicy};

    /// keel-hq/keel internal/policy/semver_test.go `Test_shouldUpdate`: (policy, running,
    /// new, whether Keel updates). The rows with a running prerelease are not importable and
    /// are checked to be refused instead.
    #[test]
    fn the_imported_range_updates_when_keel_would() {
        let rows = [
            ("all", "1.4.5", "1.4.3", false),
            ("all", "1.4.5", "1.4.6", true),
            ("all", "1.4.5", "1.4.5", false),
            ("major", "1.4.5", "1.5.5", true),
            ("major", "1.4.5", "2.4.5", true),
            ("patch", "1.4.5", "1.4.6", true),
            ("patch", "1.4.5", "1.4.4", false),
            ("patch", "1.4.5", "2.4.6", false),
            ("patch", "1.4.5", "1.4.5", false),
            ("minor", "1.4.5", "1.5.5", true),
            ("minor", "1.4.5", "1.4.6", true),
            ("minor", "1.4.5", "1.4.5-xx", false),
            ("minor", "v1.0.0", "v1.0.1-metadata", false),
            ("all", "1.4.5", "3050", false),
        ];
        for (policy, current, new, updates) in rows {
            let range = range_for(policy, current).unwrap();
            let built =
                TagPolicy::new(&format!("semver:{range}"), &[], Order::Semver, None).unwrap();
            let listing = [TagInfo::new(current), TagInfo::new(new)];
            let chosen = built.select(&listing).map(|t| t.tag.as_str());
            assert_eq!(
                chosen == Some(new) && new != current,
                updates,
                "{policy} {current} → {new}: {range} chose {chosen:?}"
            );
        }
        for current in ["v1.0.0-metadata", "1.4.5-xx"] {
            assert!(
                range_for("minor", current)
                    .unwrap_err()
                    .contains("prerelease")
            );
        }
    }
}
