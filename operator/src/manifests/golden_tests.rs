//! Golden tests of the whole edit flow: read the current tag from a fixture
//! manifest, emit the edit, and compare with the expected file byte for byte.
//!
//! Fixtures live in `operator/tests/fixtures/manifests/` (`NAME.yaml` and
//! `NAME.expected.yaml`); they are included by a path relative to this file
//! so the tests also run from a scratch crate that mounts this module.

use super::*;

macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!("../../tests/fixtures/manifests/", $name))
    };
}

/// Plans the edit of `target` in `input` (searched alone, or with `others`)
/// and checks the result against `expected`: equal byte for byte, and
/// differing from the input only inside the located scalar token.
fn check(
    input: &str,
    others: &[(&str, &str)],
    target: &WorkloadTarget,
    change: ImageChange,
    expected: &str,
) -> Plan {
    let mut files = vec![("input.yaml", input)];
    files.extend_from_slice(others);
    let plan = plan_workload_edit(&files, target, &change).unwrap();
    let edit = plan.edit.as_ref().expect("an edit is needed");
    assert_eq!(edit.file, "input.yaml");
    assert_eq!(
        edit.new_contents, expected,
        "output differs from the golden file"
    );

    // Only the scalar's bytes may differ.
    let span = plan.located.span.clone();
    let out = edit.new_contents.as_bytes();
    let inp = input.as_bytes();
    assert_eq!(
        &out[..span.start],
        &inp[..span.start],
        "bytes before the scalar changed"
    );
    let tail = inp.len() - span.end;
    assert_eq!(
        &out[out.len() - tail..],
        &inp[span.end..],
        "bytes after the scalar changed"
    );
    let common_prefix = inp.iter().zip(out).take_while(|(a, b)| a == b).count();
    let common_suffix = inp
        .iter()
        .rev()
        .zip(out.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    assert!(common_prefix >= span.start && common_suffix >= tail);

    // Applying the same change again is a no-op.
    let again = plan_workload_edit(&[("input.yaml", expected)], target, &change).unwrap();
    assert_eq!(again.edit, None, "a second run must find the image current");
    assert_eq!(again.current, edit.new);
    plan
}

fn deploy(name: &str, container: &str) -> WorkloadTarget {
    WorkloadTarget::new(WorkloadKind::Deployment, name, container)
}

fn tag(t: &str) -> ImageChange {
    ImageChange::Tag(t.to_owned())
}

#[test]
fn comments_and_trailing_comment_are_kept() {
    let plan = check(
        fixture!("comments.yaml"),
        &[],
        &deploy("web", "app"),
        tag("1.5.0"),
        fixture!("comments.expected.yaml"),
    );
    assert_eq!(plan.located.style, ScalarStyle::Plain);
    assert_eq!(plan.located.value, "ghcr.io/acme/web:1.4.2");
}

#[test]
fn single_quoted_stays_single_quoted() {
    let plan = check(
        fixture!("single-quoted.yaml"),
        &[],
        &WorkloadTarget::new(WorkloadKind::StatefulSet, "db", "postgres"),
        tag("16.3"),
        fixture!("single-quoted.expected.yaml"),
    );
    assert_eq!(plan.located.style, ScalarStyle::SingleQuoted);
}

#[test]
fn double_quoted_stays_double_quoted() {
    let plan = check(
        fixture!("double-quoted.yaml"),
        &[],
        &WorkloadTarget::new(WorkloadKind::DaemonSet, "node-agent", "agent"),
        tag("v0.10.0"),
        fixture!("double-quoted.expected.yaml"),
    );
    assert_eq!(plan.located.style, ScalarStyle::DoubleQuoted);
}

#[test]
fn flow_style_pod() {
    check(
        fixture!("flow-style.yaml"),
        &[],
        &WorkloadTarget::new(WorkloadKind::Pod, "debug", "tool"),
        tag("3.20"),
        fixture!("flow-style.expected.yaml"),
    );
}

#[test]
fn crlf_line_endings_are_kept() {
    let input = fixture!("crlf.yaml");
    assert!(input.contains("\r\n"), "fixture lost its CRLF line endings");
    check(
        input,
        &[],
        &deploy("win", "app"),
        tag("1.1"),
        fixture!("crlf.expected.yaml"),
    );
}

#[test]
fn byte_order_mark_is_kept() {
    let input = fixture!("bom.yaml");
    assert!(
        input.starts_with('\u{FEFF}'),
        "fixture lost its byte order mark"
    );
    let plan = check(
        input,
        &[],
        &WorkloadTarget::new(WorkloadKind::Pod, "bom", "app"),
        tag("0.2"),
        fixture!("bom.expected.yaml"),
    );
    // The span is in bytes: the BOM and the multi-byte characters before the
    // image shift it away from the parser's character offsets.
    assert_eq!(&input[plan.located.span.clone()], "'acme/bom:0.1'");
}

#[test]
fn multi_document_file_with_end_markers() {
    let plan = check(
        fixture!("multi-doc.yaml"),
        &[],
        &deploy("api", "api"),
        tag("2.1.0"),
        fixture!("multi-doc.expected.yaml"),
    );
    assert_eq!(plan.located.document, 1);
}

#[test]
fn list_items_are_searched() {
    let plan = check(
        fixture!("list.yaml"),
        &[],
        &deploy("cache", "redis"),
        tag("7.4"),
        fixture!("list.expected.yaml"),
    );
    assert_eq!(plan.located.item, Some(1));
    assert_eq!(
        plan.located.path,
        "items[1].spec.template.spec.containers[0].image"
    );
}

#[test]
fn cronjob_job_template() {
    check(
        fixture!("cronjob.yaml"),
        &[],
        &WorkloadTarget::new(WorkloadKind::CronJob, "nightly-report", "report"),
        tag("2024.07.01"),
        fixture!("cronjob.expected.yaml"),
    );
}

#[test]
fn init_container() {
    let plan = check(
        fixture!("init-container.yaml"),
        &[],
        &WorkloadTarget::new(WorkloadKind::Job, "migrate", "schema"),
        tag("42"),
        fixture!("init-container.expected.yaml"),
    );
    assert_eq!(
        plan.located.path,
        "spec.template.spec.initContainers[0].image"
    );
}

#[test]
fn same_name_in_two_namespaces() {
    let input = fixture!("namespaces.yaml");
    let err = plan_workload_edit(&[("input.yaml", input)], &deploy("web", "app"), &tag("1.1"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "container \"app\" of Deployment/web is ambiguous: it matches 2 places: \
         input.yaml (document 1) at spec.template.spec.containers[0].image; \
         input.yaml (document 2) at spec.template.spec.containers[0].image; \
         nothing was changed (give a namespace, or narrow the files searched)"
    );
    let plan = check(
        input,
        &[],
        &deploy("web", "app").with_namespace("production"),
        tag("1.1"),
        fixture!("namespaces.expected.yaml"),
    );
    assert_eq!(plan.located.document, 1);
}

#[test]
fn unparsable_file_is_skipped_with_a_warning() {
    let plan = check(
        fixture!("comments.yaml"),
        &[("broken.yaml", fixture!("broken.yaml"))],
        &deploy("web", "app"),
        tag("1.5.0"),
        fixture!("comments.expected.yaml"),
    );
    assert_eq!(plan.warnings.len(), 1);
    assert_eq!(plan.warnings[0].file, "broken.yaml");
    assert!(
        plan.warnings[0]
            .to_string()
            .starts_with("skipped broken.yaml: invalid YAML at line 4"),
        "{}",
        plan.warnings[0]
    );
}

#[test]
fn registry_with_port() {
    check(
        fixture!("registry-port.yaml"),
        &[],
        &WorkloadTarget::new(WorkloadKind::Pod, "local", "app"),
        tag("1.1"),
        fixture!("registry-port.expected.yaml"),
    );
}

#[test]
fn digest_is_dropped_on_tag_change() {
    let plan = check(
        fixture!("digest.yaml"),
        &[],
        &WorkloadTarget::new(WorkloadKind::ReplicaSet, "pinned", "app"),
        tag("3.2"),
        fixture!("digest.expected.yaml"),
    );
    let edit = plan.edit.unwrap();
    assert!(edit.old.contains("@sha256:"));
    assert_eq!(edit.new, "registry.example.com:443/acme/app:3.2");
}

#[test]
fn full_image_replacement() {
    let input = fixture!("comments.yaml");
    let plan = plan_workload_edit(
        &[("input.yaml", input)],
        &deploy("web", "app"),
        &ImageChange::Image("ghcr.io/acme/web:1.5.0".to_owned()),
    )
    .unwrap();
    assert_eq!(
        plan.edit.unwrap().new_contents,
        fixture!("comments.expected.yaml")
    );
}
