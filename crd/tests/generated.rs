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
