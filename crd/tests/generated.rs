//! The CRD YAML committed in the chart is exactly what the Rust types generate.
//! Fix a failure with `just generate`.

use std::path::PathBuf;

fn chart_crds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/imagewatch/crds")
}

#[test]
fn committed_crds_match_the_types() {
    for crd in imagewatch_crd::crds() {
        let name = imagewatch_crd::crd_file_name(&crd);
        let path = chart_crds_dir().join(&name);
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} is missing ({e}); run `just generate`", path.display()));
        let generated = imagewatch_crd::render_crd_yaml(&crd).expect("render");
        assert!(
            committed == generated,
            "{} drifted from the Rust types; run `just generate` and commit the result",
            path.display()
        );
    }
}

#[test]
fn only_generated_crds_are_in_the_chart() {
    let expected: Vec<String> = imagewatch_crd::crds()
        .iter()
        .map(imagewatch_crd::crd_file_name)
        .collect();
    for entry in std::fs::read_dir(chart_crds_dir()).expect("crds dir") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .to_string();
        assert!(
            expected.contains(&name),
            "unexpected file {name} in charts/imagewatch/crds"
        );
    }
}

/// Server-side defaults would show as drift in Argo CD (the object in the cluster would differ
/// from the one in Git), so the schemas carry none.
#[test]
fn schemas_declare_no_defaults() {
    for crd in imagewatch_crd::crds() {
        let json = serde_json::to_value(&crd).expect("json");
        let mut stack = vec![&json];
        while let Some(v) = stack.pop() {
            match v {
                serde_json::Value::Object(map) => {
                    assert!(
                        !map.contains_key("default"),
                        "a default in {:?}",
                        crd.metadata.name
                    );
                    stack.extend(map.values());
                }
                serde_json::Value::Array(items) => stack.extend(items.iter()),
                _ => {}
            }
        }
    }
}

#[test]
fn every_field_has_a_description() {
    fn walk(path: &str, schema: &serde_json::Value, missing: &mut Vec<String>) {
        if let Some(props) = schema.get("properties").and_then(|p| p.as_object()) {
            for (key, child) in props {
                let child_path = format!("{path}.{key}");
                // metadata/apiVersion/kind are described by Kubernetes itself.
                let builtin =
                    path.is_empty() && matches!(key.as_str(), "metadata" | "apiVersion" | "kind");
                if !builtin && child.get("description").is_none() {
                    missing.push(child_path.clone());
                }
                walk(&child_path, child, missing);
            }
        }
        if let Some(items) = schema.get("items") {
            walk(&format!("{path}[]"), items, missing);
        }
    }
    let mut missing = Vec::new();
    for crd in imagewatch_crd::crds() {
        let json = serde_json::to_value(&crd).expect("json");
        let schema = &json["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        walk("", &schema["properties"]["spec"], &mut missing);
        walk("", &schema["properties"]["status"], &mut missing);
    }
    assert!(
        missing.is_empty(),
        "fields without a description: {missing:?}"
    );
}

#[test]
fn target_requires_exactly_one_kind_by_cel() {
    let crd = serde_json::to_string(&imagewatch_crd::crds()[0]).expect("json");
    assert!(crd.contains("exactly one of target.workload"));
    assert!(crd.contains("pattern prefix must be glob:, regex: or semver:"));
    assert!(crd.contains("interval must be between 10s and 24h"));
    assert!(crd.contains("tags.pick: Lowest applies only to order Alphabetical or Numerical"));
}

/// kubectl expands a category before it resolves a resource name, so a category equal to a
/// plural, singular or short name makes `kubectl get NAME OBJECT` ambiguous.
#[test]
fn the_category_shadows_no_resource_name() {
    let crds = imagewatch_crd::crds();
    let mut names = Vec::new();
    for crd in &crds {
        let n = &crd.spec.names;
        names.push(n.plural.clone());
        names.extend(n.singular.clone());
        names.extend(n.short_names.clone().unwrap_or_default());
        names.push(n.kind.to_lowercase());
    }
    for crd in &crds {
        let categories = crd.spec.names.categories.clone().unwrap_or_default();
        assert_eq!(categories, vec![imagewatch_crd::CATEGORY.to_string()]);
        for c in categories {
            assert!(!names.contains(&c), "category {c} shadows a resource name");
        }
    }
}

/// Descriptions are paragraphs: a line break only between paragraphs or before a list item or
/// an indented line, never inside a sentence (`kubectl explain` wraps text itself).
#[test]
fn descriptions_have_no_hard_line_breaks() {
    let mut ragged = Vec::new();
    for crd in imagewatch_crd::crds() {
        let json = serde_json::to_value(&crd).expect("json");
        let mut stack = vec![&json];
        while let Some(v) = stack.pop() {
            match v {
                serde_json::Value::Object(map) => {
                    if let Some(serde_json::Value::String(d)) = map.get("description") {
                        for (i, line) in d.split('\n').enumerate().skip(1) {
                            let prev = d.split('\n').nth(i - 1).unwrap_or("");
                            let t = line.trim_start();
                            let meaningful = line.is_empty()
                                || prev.is_empty()
                                || t.starts_with("- ")
                                || t.starts_with("* ")
                                || line.starts_with("    ")
                                || t.split_once(". ").is_some_and(|(n, _)| {
                                    !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())
                                });
                            if !meaningful {
                                ragged.push(format!("{line:?} in {d:?}"));
                            }
                        }
                    }
                    stack.extend(map.values());
                }
                serde_json::Value::Array(items) => stack.extend(items.iter()),
                _ => {}
            }
        }
    }
    assert!(ragged.is_empty(), "hard line breaks: {ragged:#?}");
}
