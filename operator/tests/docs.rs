//! The documents say what the code does, and fail here when one of them drifts:
//!
//! - every flag of `imagewatch run` is in the chart README's configuration reference, and it
//!   names none that does not exist;
//! - every condition reason the code defines is in the reason → fix table of
//!   `samples/README.md`, and the table names none that does not exist;
//! - the chart README's values table is the one generated from `values.yaml` and
//!   `values.schema.json` (`just generate` writes it: `IMAGEWATCH_UPDATE_DOCS=1`);
//! - the sample IAM policies allow every AWS API action the operator calls, and the EKS
//!   trust policies let the operator's role be assumed;
//! - the Argo CD health checks in the EKS recipe are the chart's Lua scripts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(relative: &str) -> String {
    let path = repo().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The text of the section under `heading` (a line starting with it), up to the next heading
/// of the same or a higher level.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = text
        .lines()
        .scan(0usize, |offset, line| {
            let at = *offset;
            *offset += line.len() + 1;
            Some((at, line))
        })
        .find(|(_, line)| line.trim_end() == heading)
        .map(|(at, _)| at)
        .unwrap_or_else(|| panic!("no section {heading:?}"));
    let body = &text[start..];
    let mut offset = 0;
    for (i, line) in body.lines().enumerate() {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if i > 0 && hashes > 0 && hashes <= level && line[hashes..].starts_with(' ') {
            return &body[..offset];
        }
        offset += line.len() + 1;
    }
    body
}

/// The text between the marker lines `<!-- NAME:begin -->` and `<!-- NAME:end -->`.
fn between<'a>(text: &'a str, name: &str) -> (usize, usize, &'a str) {
    let begin = format!("<!-- {name}:begin -->\n");
    let end = format!("<!-- {name}:end -->");
    let start = text
        .find(&begin)
        .unwrap_or_else(|| panic!("no marker {begin:?}"))
        + begin.len();
    let stop = text[start..]
        .find(&end)
        .unwrap_or_else(|| panic!("no marker {end:?}"))
        + start;
    (start, stop, &text[start..stop])
}

/// The first cell of every table row of `text` whose first cell is backticked.
fn first_cells(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`').map(|(cell, _)| cell.to_owned()))
        .collect()
}

#[test]
fn every_run_flag_is_in_the_configuration_reference() {
    let command = imagewatch::cli::Cli::command();
    let run = command
        .find_subcommand("run")
        .expect("the CLI has a run subcommand");
    let all: BTreeSet<String> = run
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|l| *l != "help")
        .map(|l| format!("--{l}"))
        .collect();
    let visible: BTreeSet<String> = run
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .filter(|l| *l != "help")
        .map(|l| format!("--{l}"))
        .collect();
    let readme = read("charts/imagewatch/README.md");
    let documented: BTreeSet<String> = first_cells(section(&readme, "## Configuration reference"))
        .into_iter()
        .filter(|c| c.starts_with("--"))
        .collect();
    let missing: Vec<_> = visible.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&all).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "charts/imagewatch/README.md `## Configuration reference`: flags of `imagewatch run` \
         missing: {missing:?}; documented but not defined: {unknown:?}"
    );
}

/// The string values of the `pub const` items of every `pub mod reason` block of `source`.
fn reason_consts(source: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = source;
    while let Some(at) = rest.find("pub mod reason {") {
        let block = &rest[at..];
        let end = block.find("\n}").unwrap_or(block.len());
        for line in block[..end].lines() {
            let line = line.trim();
            if let Some(value) = line
                .strip_prefix("pub const ")
                .and_then(|l| l.split_once(": &str = \""))
                .and_then(|(_, v)| v.strip_suffix("\";"))
            {
                out.insert(value.to_owned());
            }
        }
        rest = &block[end..];
    }
    out
}

#[test]
fn every_condition_reason_has_a_row_in_the_reason_table() {
    let mut defined = BTreeSet::new();
    for file in ["crd/src/conditions.rs", "crd/src/promotion.rs"] {
        let found = reason_consts(&read(file));
        assert!(!found.is_empty(), "{file}: no `pub mod reason` constants");
        defined.extend(found);
    }
    let readme = read("samples/README.md");
    let (_, _, table) = between(&readme, "reasons");
    let documented: BTreeSet<String> = first_cells(table).into_iter().collect();
    let missing: Vec<_> = defined.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&defined).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "samples/README.md reason table: reasons missing: {missing:?}; rows for reasons the \
         code does not define: {unknown:?}"
    );
}

#[test]
fn the_reason_constants_are_read_from_the_source() {
    let source = "pub mod reason {\n    /// Doc.\n    pub const A: &str = \"Alpha\";\n}\nconst B: &str = \"Beta\";\n";
    assert_eq!(reason_consts(source), BTreeSet::from(["Alpha".to_owned()]));
}

/// The comments of `values.yaml` by key path: the comment lines right above a key and the
/// comment after its value.
fn value_comments(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut pending: Vec<String> = Vec::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(comment) = trimmed.strip_prefix('#') {
            pending.push(comment.strip_prefix(' ').unwrap_or(comment).to_owned());
            continue;
        }
        let indent = line.len() - trimmed.len();
        let key = trimmed
            .split_once(':')
            .map(|(k, _)| k)
            .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        let Some(key) = key else {
            pending.clear();
            continue;
        };
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        stack.push((indent, key.to_owned()));
        let path: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).collect();
        let value = &trimmed[key.len() + 1..];
        // A comment after the value (not a `#` inside a quoted string).
        if let Some((before, comment)) = value.split_once(" #")
            && before.matches('"').count() % 2 == 0
        {
            pending.push(comment.trim().to_owned());
        }
        let text = pending.join(" ").trim().to_owned();
        if !text.is_empty() {
            out.insert(path.join("."), text);
        }
        pending.clear();
    }
    out
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The rows under `schema` (keys, types, defaults from `values`, descriptions from
/// `comments` or the schema); returns the keys without a description of their own, which
/// the caller's row covers (its default shows them).
fn value_rows(
    schema: &Value,
    values: &Value,
    prefix: &str,
    comments: &BTreeMap<String, String>,
    rows: &mut Vec<[String; 4]>,
) -> Vec<String> {
    let mut uncovered = Vec::new();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return uncovered;
    };
    for (key, property) in properties {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let default = values.get(key).cloned().unwrap_or(Value::Null);
        let description = comments.get(&path).cloned().or_else(|| {
            property
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        let kind = match property.get("type") {
            Some(Value::String(t)) => t.clone(),
            Some(Value::Array(types)) => types
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" or "),
            _ => "any".to_owned(),
        };
        let nested = property
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| !p.is_empty());
        let mut children = Vec::new();
        let open = if nested {
            value_rows(property, &default, &path, comments, &mut children)
        } else {
            Vec::new()
        };
        match description {
            Some(description) => {
                // An object's row shows its whole default when some key under it has no row.
                let shown = match (&default, nested && open.is_empty()) {
                    (Value::Null, _) | (_, true) => "—".to_owned(),
                    (other, false) => format!("`{}`", cell(&other.to_string())),
                };
                rows.push([format!("`{path}`"), kind, shown, cell(&description)]);
            }
            None if nested => uncovered.extend(open),
            None => uncovered.push(path),
        }
        rows.extend(children);
    }
    uncovered
}

/// The values table of the chart README, from `values.yaml` (keys, defaults, comments) and
/// `values.schema.json` (types; descriptions where no comment is).
fn values_table() -> String {
    let schema: Value = serde_json::from_str(&read("charts/imagewatch/values.schema.json"))
        .expect("values.schema.json parses");
    let text = read("charts/imagewatch/values.yaml");
    let values: Value = serde_saphyr::from_str(&text).expect("values.yaml parses");
    let mut rows = Vec::new();
    let uncovered = value_rows(&schema, &values, "", &value_comments(&text), &mut rows);
    assert!(
        uncovered.is_empty(),
        "values without a comment in values.yaml, a description in values.schema.json or a \
         described parent: {uncovered:?}"
    );
    let mut out = String::from(
        "| Key | Type | Default | Description |\n|-----|------|---------|-------------|\n",
    );
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

#[test]
fn values_comments_are_read_by_key() {
    let text = "# The image.\nimage:\n  repository: x\n  tag: \"\"  # the app version\n\n# off\nfreeze: {}\n";
    let comments = value_comments(text);
    assert_eq!(
        comments.get("image").map(String::as_str),
        Some("The image.")
    );
    assert_eq!(
        comments.get("image.tag").map(String::as_str),
        Some("the app version")
    );
    assert_eq!(comments.get("image.repository"), None);
    assert_eq!(comments.get("freeze").map(String::as_str), Some("off"));
}

#[test]
fn the_chart_readme_values_table_is_generated_from_the_values() {
    let path = repo().join("charts/imagewatch/README.md");
    let readme = read("charts/imagewatch/README.md");
    let (start, stop, current) = between(&readme, "values");
    let wanted = values_table();
    if std::env::var_os("IMAGEWATCH_UPDATE_DOCS").is_some() {
        let updated = format!("{}{wanted}{}", &readme[..start], &readme[stop..]);
        std::fs::write(&path, updated).expect("write the chart README");
        return;
    }
    assert!(
        current == wanted,
        "charts/imagewatch/README.md: the values table is not the one values.yaml and \
         values.schema.json give; run `just generate`"
    );
}

/// Every key of `values.yaml` is in the schema (so in the table): the schema refuses unknown
/// keys, and the table is generated from it.
#[test]
fn every_value_is_in_the_schema() {
    fn walk(values: &Value, schema: &Value, path: &str, missing: &mut Vec<String>) {
        let Some(map) = values.as_object() else {
            return;
        };
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        for (key, value) in map {
            let path = format!("{path}{key}");
            match properties.get(key) {
                Some(sub) => walk(value, sub, &format!("{path}."), missing),
                None => missing.push(path),
            }
        }
    }
    let schema: Value =
        serde_json::from_str(&read("charts/imagewatch/values.schema.json")).expect("schema");
    let values: Value =
        serde_saphyr::from_str(&read("charts/imagewatch/values.yaml")).expect("values");
    let mut missing = Vec::new();
    walk(&values, &schema, "", &mut missing);
    assert!(missing.is_empty(), "values not in the schema: {missing:?}");
}

/// The IAM actions each AWS SDK operation the operator calls needs. A new call fails
/// [`the_iam_policies_allow_every_aws_call`] until it is added here and to the policies.
const AWS_ACTIONS: &[(&str, &str, &[&str])] = &[
    ("aws-sdk-ecr", "describe_images", &["ecr:DescribeImages"]),
    (
        "aws-sdk-ecr",
        "describe_repositories",
        &["ecr:DescribeRepositories"],
    ),
    // The token opens the registry API of the same host: manifests (signatures, platforms)
    // and blobs (signature payloads, image configs). Digests come from DescribeImages.
    (
        "aws-sdk-ecr",
        "get_authorization_token",
        &[
            "ecr:GetAuthorizationToken",
            "ecr:BatchGetImage",
            "ecr:GetDownloadUrlForLayer",
        ],
    ),
    ("aws-sdk-sqs", "receive_message", &["sqs:ReceiveMessage"]),
    ("aws-sdk-sqs", "delete_message", &["sqs:DeleteMessage"]),
    (
        "aws-sdk-sqs",
        "delete_message_batch",
        &["sqs:DeleteMessage"],
    ),
    (
        "aws-sdk-sqs",
        "change_message_visibility",
        &["sqs:ChangeMessageVisibility"],
    ),
    (
        "aws-sdk-sqs",
        "change_message_visibility_batch",
        &["sqs:ChangeMessageVisibility"],
    ),
];

/// The operation names (snake case) of an AWS SDK crate at the version `Cargo.lock` pins,
/// read from its source in the cargo registry.
fn sdk_operations(krate: &str) -> BTreeSet<String> {
    let lock = read("Cargo.lock");
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains(&format!("name = \"{krate}\"\n")))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("Cargo.lock pins no {krate}"))
        .to_owned();
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let sources = home.join("registry/src");
    let dirs = std::fs::read_dir(&sources)
        .unwrap_or_else(|e| panic!("{}: {e} (the cargo registry sources)", sources.display()));
    for index in dirs.filter_map(Result::ok) {
        let operations = index
            .path()
            .join(format!("{krate}-{version}/src/operation"));
        if let Ok(entries) = std::fs::read_dir(&operations) {
            return entries
                .filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
        }
    }
    panic!(
        "no source of {krate} {version} under {}: build the workspace first",
        sources.display()
    );
}

/// The non-test Rust sources of the operator.
/// The source directories of the operator's crates that do I/O.
const OPERATOR_SOURCES: [&str; 7] = [
    "operator/src",
    "operator/support/src",
    "operator/telemetry/src",
    "operator/registry/src",
    "operator/git/src",
    "operator/forge/src",
    "operator/sources/src",
];

fn operator_sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir)
            .expect("read_dir")
            .filter_map(Result::ok)
        {
            let path = entry.path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() {
                if name != "testdata" && name != "fixtures" {
                    walk(&path, out);
                }
            } else if name.ends_with(".rs") && !name.contains("tests") {
                let text = std::fs::read_to_string(&path).expect("read");
                // Unit tests sit at the end of a file, behind `#[cfg(test)]`.
                let code = text
                    .find("#[cfg(test)]")
                    .map_or(text.as_str(), |at| &text[..at])
                    .to_owned();
                out.push((path, code));
            }
        }
    }
    let mut out = Vec::new();
    // The binary and the client crates beside it (the engine makes no calls).
    for src in OPERATOR_SOURCES {
        walk(&repo().join(src), &mut out);
    }
    out
}

/// The IAM actions of an IAM policy document.
fn policy_actions(policy: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for statement in policy["Statement"].as_array().into_iter().flatten() {
        match &statement["Action"] {
            Value::String(a) => {
                out.insert(a.clone());
            }
            Value::Array(actions) => {
                out.extend(actions.iter().filter_map(Value::as_str).map(str::to_owned));
            }
            _ => {}
        }
    }
    out
}

#[test]
fn the_iam_policies_allow_every_aws_call() {
    let sources = operator_sources();
    let mut needed = BTreeSet::new();
    for krate in ["aws-sdk-ecr", "aws-sdk-sqs", "aws-sdk-sts"] {
        let module = krate.replace('-', "_");
        let operations = sdk_operations(krate);
        assert!(!operations.is_empty(), "{krate}: no operations found");
        for (path, code) in sources.iter().filter(|(_, c)| c.contains(&module)) {
            for operation in &operations {
                if !code.contains(&format!(".{operation}()")) {
                    continue;
                }
                let actions = AWS_ACTIONS
                    .iter()
                    .find(|(k, o, _)| *k == krate && o == operation)
                    .map(|(_, _, a)| *a)
                    .unwrap_or_else(|| {
                        panic!(
                            "{} calls {krate} {operation}: add its IAM actions to AWS_ACTIONS \
                             here and to samples/eks-ecr/iam-policy.json",
                            path.display()
                        )
                    });
                needed.extend(actions.iter().map(|a| (*a).to_owned()));
            }
        }
    }
    assert!(
        needed.contains("ecr:DescribeImages") && needed.contains("sqs:ReceiveMessage"),
        "the scan found no ECR or SQS call: {needed:?}"
    );
    let known: BTreeSet<String> = AWS_ACTIONS
        .iter()
        .flat_map(|(_, _, a)| a.iter().map(|a| (*a).to_owned()))
        .collect();
    let full: Value =
        serde_json::from_str(&read("samples/eks-ecr/iam-policy.json")).expect("policy parses");
    let granted = policy_actions(&full);
    let missing: Vec<_> = needed.difference(&granted).collect();
    assert!(
        missing.is_empty(),
        "samples/eks-ecr/iam-policy.json lacks {missing:?}"
    );
    // Every sample policy: nothing the operator never calls, and the SQS consumer's actions
    // together (messages are deleted when handled and handed back at shutdown).
    let sqs: BTreeSet<String> = [
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:ChangeMessageVisibility",
    ]
    .map(str::to_owned)
    .into();
    let mut policies = 0;
    for sample in std::fs::read_dir(repo().join("samples"))
        .expect("samples")
        .filter_map(Result::ok)
    {
        let path = sample.path().join("iam-policy.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        policies += 1;
        let policy: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let actions = policy_actions(&policy);
        let unknown: Vec<_> = actions.difference(&known).collect();
        assert!(
            unknown.is_empty(),
            "{}: actions the operator never calls: {unknown:?}",
            path.display()
        );
        if actions.iter().any(|a| a.starts_with("sqs:")) {
            let lacking: Vec<_> = sqs.difference(&actions).collect();
            assert!(lacking.is_empty(), "{}: lacks {lacking:?}", path.display());
        }
    }
    assert!(
        policies >= 3,
        "expected the sample IAM policies, found {policies}"
    );
}

#[test]
fn the_eks_trust_policies_let_the_operator_assume_its_role() {
    let irsa: Value =
        serde_json::from_str(&read("samples/eks-ecr/irsa-trust-policy.json")).expect("parses");
    assert!(
        policy_actions(&irsa).contains("sts:AssumeRoleWithWebIdentity"),
        "{irsa}"
    );
    let text = irsa.to_string();
    assert!(
        text.contains("system:serviceaccount:imagewatch:imagewatch"),
        "the IRSA trust policy names another ServiceAccount: {text}"
    );
    let pod_identity: Value =
        serde_json::from_str(&read("samples/eks-ecr/pod-identity-trust-policy.json"))
            .expect("parses");
    let actions = policy_actions(&pod_identity);
    assert!(
        actions.contains("sts:AssumeRole") && actions.contains("sts:TagSession"),
        "{actions:?}"
    );
    assert!(pod_identity.to_string().contains("pods.eks.amazonaws.com"));
}

/// Every `resource.customizations.health.imagewatch.dev_<Kind>` value anywhere in `value`.
fn health_checks(value: &Value, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if let (Some(kind), Some(lua)) = (
                    key.strip_prefix("resource.customizations.health.imagewatch.dev_"),
                    v.as_str(),
                ) {
                    out.insert(kind.to_owned(), lua.to_owned());
                } else {
                    health_checks(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| health_checks(v, out)),
        _ => {}
    }
}

#[test]
fn the_eks_recipe_health_checks_are_the_charts() {
    let dir = repo().join("samples/eks-ecr");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir)
        .expect("samples/eks-ecr")
        .filter_map(Result::ok)
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("argocd-") && name.ends_with(".yaml")) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).expect("read");
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut found = BTreeMap::new();
        docs.iter().for_each(|d| health_checks(d, &mut found));
        for kind in ["ImageWatch", "PromotionPolicy"] {
            let lua = found
                .get(kind)
                .unwrap_or_else(|| panic!("{name} has no health check for {kind}"));
            let chart = read(&format!(
                "charts/imagewatch/argocd/imagewatch.dev_{kind}.lua"
            ));
            assert_eq!(
                lua.trim(),
                chart.trim(),
                "{name}: the {kind} health check differs from the chart's Lua"
            );
        }
        files += 1;
    }
    assert!(
        files >= 2,
        "expected argocd-values.yaml and argocd-cm-patch.yaml"
    );
}
