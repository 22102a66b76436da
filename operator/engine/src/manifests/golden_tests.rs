//! Golden tests of the whole edit flow: read the current tag from a fixture
//! manifest, emit the edit, and compare with the expected file byte for byte.
//!
//! Fixtures live in `operator/engine/tests/fixtures/manifests/` (`NAME.yaml` and
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
    let span = plan.located.as_ref().unwrap().span.clone();
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
    assert_eq!(plan.located.as_ref().unwrap().style, ScalarStyle::Plain);
    assert_eq!(
        plan.located.as_ref().unwrap().value,
        "ghcr.io/acme/web:1.4.2"
    );
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
    assert_eq!(
        plan.located.as_ref().unwrap().style,
        ScalarStyle::SingleQuoted
    );
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
    assert_eq!(
        plan.located.as_ref().unwrap().style,
        ScalarStyle::DoubleQuoted
    );
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
    assert_eq!(
        &input[plan.located.as_ref().unwrap().span.clone()],
        "'acme/bom:0.1'"
    );
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
    assert_eq!(plan.located.as_ref().unwrap().document, 1);
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
    assert_eq!(plan.located.as_ref().unwrap().item, Some(1));
    assert_eq!(
        plan.located.as_ref().unwrap().path,
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
        plan.located.as_ref().unwrap().path,
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
    assert_eq!(plan.located.as_ref().unwrap().document, 1);
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

// ---------------------------------------------------------------------------
// Other target kinds, through `plan_edit`.
// ---------------------------------------------------------------------------

/// The one region where `output` differs from `input`: `(removed, added)`,
/// after stripping the longest common prefix and suffix.
fn diff<'a>(input: &'a str, output: &'a str) -> (&'a str, &'a str) {
    let (a, b) = (input.as_bytes(), output.as_bytes());
    let mut prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    while !input.is_char_boundary(prefix) || !output.is_char_boundary(prefix) {
        prefix -= 1;
    }
    let max_suffix = a.len().min(b.len()) - prefix;
    let mut suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(max_suffix)
        .take_while(|(x, y)| x == y)
        .count();
    while !input.is_char_boundary(a.len() - suffix) || !output.is_char_boundary(b.len() - suffix) {
        suffix -= 1;
    }
    (
        &input[prefix..a.len() - suffix],
        &output[prefix..b.len() - suffix],
    )
}

/// Plans `change` of `target` in `files` and checks every edited file
/// against its golden contents and its expected one-region diff
/// `(file, expected contents, removed, added)`; then that applying the edits
/// makes a second plan find nothing to do.
fn check_target(
    files: &[(&str, &str)],
    target: &TargetSpec,
    change: &ImageChange,
    expected: &[(&str, &str, &str, &str)],
) -> Plan {
    let plan = plan_edit(files, target, change).unwrap();
    let edits: Vec<&PlannedEdit> = plan.edits().collect();
    assert_eq!(
        edits.iter().map(|e| e.file.as_str()).collect::<Vec<_>>(),
        expected.iter().map(|e| e.0).collect::<Vec<_>>(),
        "edited files"
    );
    let mut after: Vec<(String, String)> = files
        .iter()
        .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
        .collect();
    for (edit, (file, contents, removed, added)) in edits.iter().zip(expected) {
        assert_eq!(
            edit.new_contents, *contents,
            "{file} differs from the golden file"
        );
        let input = files
            .iter()
            .find(|(n, _)| n == file)
            .map_or("", |(_, t)| *t);
        assert_eq!(
            edit.creates_file,
            !files.iter().any(|(n, _)| n == file),
            "{file}: creates_file"
        );
        assert_eq!(
            diff(input, &edit.new_contents),
            (*removed, *added),
            "{file}: other bytes changed"
        );
        match after.iter_mut().find(|(n, _)| n == file) {
            Some(slot) => slot.1 = edit.new_contents.clone(),
            None => after.push(((*file).to_owned(), edit.new_contents.clone())),
        }
    }
    let after: Vec<(&str, &str)> = after
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let again = plan_edit(&after, target, change).unwrap();
    assert_eq!(again.edit, None, "a second run must find the image current");
    assert!(again.more.is_empty());
    plan
}

fn kustomize(path: &str, image: &str) -> TargetSpec {
    TargetSpec::Kustomize {
        path: path.to_owned(),
        image: image.to_owned(),
    }
}

fn image(reference: &str) -> ImageChange {
    ImageChange::Image(reference.to_owned())
}

#[test]
fn kustomize_updates_a_plain_new_tag() {
    let input = fixture!("kustomize-plain.yaml");
    let plan = check_target(
        &[
            ("apps/web/prod/replicas.yaml", "kind: Deployment\n"),
            ("apps/web/prod/kustomization.yaml", input),
        ],
        &kustomize("apps/web/prod", "web"),
        &tag("v1.5.0"),
        &[(
            "apps/web/prod/kustomization.yaml",
            fixture!("kustomize-plain.expected.yaml"),
            "4.2",
            "5.0",
        )],
    );
    assert_eq!(plan.current, "ghcr.io/acme/web:v1.4.2");
    let edit = plan.edit.unwrap();
    assert_eq!(
        (edit.old.as_str(), edit.new.as_str()),
        ("ghcr.io/acme/web:v1.4.2", "ghcr.io/acme/web:v1.5.0")
    );
    assert_eq!(plan.located, None);
    // The same image given in full needs no newName change.
    let plan = plan_edit(
        &[("apps/web/prod/kustomization.yaml", input)],
        &kustomize("./apps/web/prod/", "web"),
        &image("ghcr.io/acme/web:v1.5.0"),
    )
    .unwrap();
    assert_eq!(
        plan.edit.unwrap().new_contents,
        fixture!("kustomize-plain.expected.yaml")
    );
}

#[test]
fn kustomize_keeps_quotes_and_rewrites_new_name() {
    check_target(
        &[("kustomization.yaml", fixture!("kustomize-quoted.yaml"))],
        &kustomize("", "api"),
        &image("ghcr.io/acme/api:1.5"),
        &[(
            "kustomization.yaml",
            fixture!("kustomize-quoted.expected.yaml"),
            "registry.example.com/acme/api'\n  newTag: '1.4",
            "ghcr.io/acme/api'\n  newTag: '1.5",
        )],
    );
    // Quoted entry names match too; a numeric-looking tag stays quoted.
    let plan = plan_edit(
        &[("kustomization.yaml", fixture!("kustomize-quoted.yaml"))],
        &kustomize("", "worker"),
        &tag("2024.07.01"),
    )
    .unwrap();
    assert_eq!(
        diff(
            fixture!("kustomize-quoted.yaml"),
            &plan.edit.unwrap().new_contents
        ),
        ("6", "7")
    );
}

#[test]
fn kustomize_adds_a_missing_entry_in_the_list_style() {
    let plan = check_target(
        &[(
            "base/kustomization.yaml",
            fixture!("kustomize-add-entry.yaml"),
        )],
        &kustomize("base", "cache"),
        &image("ghcr.io/acme/redis:7.4-alpine"),
        &[(
            "base/kustomization.yaml",
            fixture!("kustomize-add-entry.expected.yaml"),
            "",
            "    -   name: cache\n        newName: ghcr.io/acme/redis\n        newTag: 7.4-alpine\n",
        )],
    );
    assert_eq!(plan.current, "");
    assert_eq!(plan.edit.unwrap().old, "");
}

#[test]
fn kustomize_adds_images_at_the_end_of_the_document() {
    check_target(
        &[("kustomization.yaml", fixture!("kustomize-no-images.yaml"))],
        &kustomize("", "web"),
        &tag("v1.0.1"),
        &[(
            "kustomization.yaml",
            fixture!("kustomize-no-images.expected.yaml"),
            "",
            "images:\n  - name: web\n    newTag: v1.0.1\n",
        )],
    );
}

#[test]
fn kustomize_removes_the_digest_line() {
    let plan = check_target(
        &[("kustomization.yaml", fixture!("kustomize-digest.yaml"))],
        &kustomize("", "web"),
        &tag("v1.1.0"),
        &[(
            "kustomization.yaml",
            fixture!("kustomize-digest.expected.yaml"),
            "0.0\n    digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef # pinned",
            "1.0",
        )],
    );
    assert_eq!(
        plan.current,
        "web:v1.0.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    // A digest-only entry gets a newTag in place of its digest.
    let plan = plan_edit(
        &[("kustomization.yaml", fixture!("kustomize-digest.yaml"))],
        &kustomize("", "db"),
        &tag("16"),
    )
    .unwrap();
    assert_eq!(
        diff(
            fixture!("kustomize-digest.yaml"),
            &plan.edit.unwrap().new_contents
        ),
        (
            "digest: sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
            "newTag: \"16\""
        )
    );
}

#[test]
fn kustomize_crlf_and_bom_are_kept_when_a_line_is_added() {
    let input = fixture!("kustomize-crlf.yaml");
    assert!(input.starts_with('\u{FEFF}') && input.contains("\r\n"));
    check_target(
        &[("overlay/kustomization.yaml", input)],
        &kustomize("overlay", "web"),
        &tag("v2"),
        &[(
            "overlay/kustomization.yaml",
            fixture!("kustomize-crlf.expected.yaml"),
            "",
            "  newTag: v2\r\n",
        )],
    );
}

#[test]
fn kustomize_errors_name_the_file() {
    let err = plan_edit(
        &[("apps/web/deploy.yaml", "kind: Deployment\n")],
        &kustomize("apps/web", "web"),
        &tag("1"),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "a kustomization file (kustomization.yaml, kustomization.yml or Kustomization) was not \
         found in apps/web"
    );
    let err = plan_edit(
        &[
            ("kustomization.yaml", "images: []\n"),
            ("Kustomization", "images: []\n"),
        ],
        &kustomize("", "web"),
        &tag("1"),
    )
    .unwrap_err();
    assert!(matches!(err, EditError::AmbiguousIn { .. }), "{err}");
    let err = plan_edit(
        &[(
            "kustomization.yaml",
            "images:\n- name: web\n  newTag: a\n- name: web\n  newTag: b\n",
        )],
        &kustomize("", "web"),
        &tag("1"),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the images entry named \"web\" is ambiguous in kustomization.yaml: it appears 2 times \
         (images[0], images[1]); nothing was changed"
    );
}

fn helm(file: &str, key: &str) -> TargetSpec {
    TargetSpec::Helm {
        file: file.to_owned(),
        key: key.to_owned(),
    }
}

#[test]
fn helm_nested_key_with_comments() {
    let plan = check_target(
        &[("charts/web/values.yaml", fixture!("helm-values.yaml"))],
        &helm("charts/web/values.yaml", "canary.image.tag"),
        &tag("v1.5.0"),
        &[(
            "charts/web/values.yaml",
            fixture!("helm-values.expected.yaml"),
            "4.2",
            "5.0",
        )],
    );
    assert_eq!(plan.current, "v1.4.2");
    let located = plan.located.unwrap();
    assert_eq!(located.path, "canary.image.tag");
    assert_eq!(
        &fixture!("helm-values.yaml")[located.span],
        "v1.4.2",
        "the span is the token"
    );
    // A full image gives its tag to a tag key.
    let plan = plan_edit(
        &[("charts/web/values.yaml", fixture!("helm-values.yaml"))],
        &helm("charts/web/values.yaml", "canary.image.tag"),
        &image("ghcr.io/acme/web:v1.5.0"),
    )
    .unwrap();
    assert_eq!(
        plan.edit.unwrap().new_contents,
        fixture!("helm-values.expected.yaml")
    );
    // An empty quoted tag is filled in, quotes kept.
    let plan = plan_edit(
        &[("charts/web/values.yaml", fixture!("helm-values.yaml"))],
        &helm("charts/web/values.yaml", "image.tag"),
        &tag("v1.5.0"),
    )
    .unwrap();
    assert_eq!(
        diff(
            fixture!("helm-values.yaml"),
            &plan.edit.unwrap().new_contents
        ),
        ("", "v1.5.0")
    );
}

#[test]
fn helm_numeric_looking_tag_is_quoted() {
    check_target(
        &[("values.yaml", fixture!("helm-numeric.yaml"))],
        &helm("values.yaml", "image.tag"),
        &tag("16.10"),
        &[(
            "values.yaml",
            fixture!("helm-numeric.expected.yaml"),
            "16.3",
            "\"16.10\"",
        )],
    );
    // Already quoted: only the value changes.
    let plan = plan_edit(
        &[("values.yaml", fixture!("helm-numeric.yaml"))],
        &helm("values.yaml", "sidecar.tag"),
        &tag("1.10"),
    )
    .unwrap();
    assert_eq!(
        diff(
            fixture!("helm-numeric.yaml"),
            &plan.edit.unwrap().new_contents
        ),
        ("9", "10")
    );
}

#[test]
fn helm_full_image_values_and_list_indexes() {
    let values = "sidecars:\n  - name: proxy\n    image: \"envoyproxy/envoy:v1.30.1\"\n";
    let plan = plan_edit(
        &[("values.yaml", values)],
        &helm("values.yaml", "sidecars[0].image"),
        &tag("v1.31.0"),
    )
    .unwrap();
    let edit = plan.edit.unwrap();
    assert_eq!(
        edit.new_contents,
        values.replace("v1.30.1", "v1.31.0"),
        "a full image gets the new tag"
    );
    assert_eq!(edit.new, "envoyproxy/envoy:v1.31.0");
    let plan = plan_edit(
        &[("values.yaml", values)],
        &helm("values.yaml", "sidecars[0].image"),
        &image("ghcr.io/acme/envoy:v2"),
    )
    .unwrap();
    assert_eq!(
        plan.edit.unwrap().new_contents,
        values.replace("envoyproxy/envoy:v1.30.1", "ghcr.io/acme/envoy:v2")
    );
}

#[test]
fn helm_errors_name_the_key_and_the_file() {
    let files = [("charts/web/values.yaml", fixture!("helm-values.yaml"))];
    let err = plan_edit(
        &files,
        &helm("charts/web/values.yaml", "canary.image.digest"),
        &tag("1"),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the key path \"canary.image.digest\" (canary.image has no key \"digest\") was not \
         found in charts/web/values.yaml"
    );
    let err = plan_edit(&files, &helm("values.yaml", "image.tag"), &tag("1")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the Helm values file values.yaml does not exist; nothing was changed"
    );
    let err = plan_edit(
        &files,
        &helm("charts/web/values.yaml", "canary.image"),
        &tag("1"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("is not a string"), "{err}");
    let err = plan_edit(
        &files,
        &helm("charts/web/values.yaml", "image.tag"),
        &image("ghcr.io/acme/web@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
    )
    .unwrap_err();
    assert!(matches!(err, EditError::NewImageWithoutTag { .. }), "{err}");
}

fn argocd() -> TargetSpec {
    TargetSpec::ArgocdSource {
        path: "apps/web".to_owned(),
        application: "web-prod".to_owned(),
        image: "web".to_owned(),
    }
}

#[test]
fn argocd_source_is_updated() {
    let file = "apps/web/.argocd-source-web-prod.yaml";
    assert_eq!(argocd().scope(), ReadScope::File(file.to_owned()));
    let plan = check_target(
        &[(file, fixture!("argocd-source.yaml"))],
        &argocd(),
        &tag("v1.5.0"),
        &[(file, fixture!("argocd-source.expected.yaml"), "4.2", "5.0")],
    );
    assert_eq!(plan.current, "ghcr.io/acme/web:v1.4.2");
}

#[test]
fn argocd_source_is_created() {
    let file = "apps/web/.argocd-source-web-prod.yaml";
    let plan = check_target(
        &[],
        &argocd(),
        &image("ghcr.io/acme/web:v1.5.0"),
        &[(
            file,
            fixture!("argocd-source-create.expected.yaml"),
            "",
            fixture!("argocd-source-create.expected.yaml"),
        )],
    );
    let edit = plan.edit.unwrap();
    assert!(edit.creates_file);
    assert_eq!((edit.old.as_str(), edit.file_index), ("", 0));
}

#[test]
fn argocd_source_helm_parameters() {
    let file = "apps/web/.argocd-source-web-prod.yaml";
    let text = "helm:\n  parameters:\n  - name: image.tag\n    value: \"v1.4.2\"\n    forcestring: true\n  - name: replicas\n    value: \"2\"\n";
    let plan = check_target(
        &[(file, text)],
        &argocd(),
        &image("ghcr.io/acme/web:v1.5.0"),
        &[(file, &text.replace("v1.4.2", "v1.5.0"), "4.2", "5.0")],
    );
    assert_eq!(plan.current, "v1.4.2");
}

fn setter(marker: &str) -> TargetSpec {
    TargetSpec::Setter {
        path: "apps".to_owned(),
        marker: marker.to_owned(),
    }
}

#[test]
fn setter_markers_in_two_files() {
    let files = [
        ("apps/a/widget.yaml", fixture!("setter-a.yaml")),
        ("apps/b/config.yaml", fixture!("setter-b.yaml")),
        ("apps/c/unrelated.yaml", "x: [\n"),
    ];
    let plan = check_target(
        &files,
        &setter("apps:web"),
        &tag("v1.5.0"),
        &[
            (
                "apps/a/widget.yaml",
                fixture!("setter-a.expected.yaml"),
                "4.2",
                "5.0",
            ),
            (
                "apps/b/config.yaml",
                fixture!("setter-b.expected.yaml"),
                "4.2",
                "5.0",
            ),
        ],
    );
    assert_eq!(plan.file, "apps/a/widget.yaml");
    assert_eq!(plan.current, "ghcr.io/acme/web:v1.4.2");
    assert_eq!(plan.more.len(), 1);
    // The tag-only file describes its image from its name and tag markers.
    assert_eq!(plan.more[0].old, "ghcr.io/acme/web:v1.4.2");
    assert_eq!(plan.more[0].new, "ghcr.io/acme/web:v1.5.0");
    // The same full image changes the same bytes; the repository marker stays.
    let plan = plan_edit(
        &files,
        &setter("apps:web"),
        &image("ghcr.io/acme/web:v1.5.0"),
    )
    .unwrap();
    let contents: Vec<&str> = plan.edits().map(|e| e.new_contents.as_str()).collect();
    assert_eq!(
        contents,
        [
            fixture!("setter-a.expected.yaml"),
            fixture!("setter-b.expected.yaml")
        ]
    );
    // The other marker is independent.
    let plan = plan_edit(&files, &setter("apps:db"), &tag("17")).unwrap();
    assert_eq!(plan.edits().count(), 1);
    let err = plan_edit(&files, &setter("apps:nope"), &tag("1")).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "a setter marker # {\"$imagewatch\": \"apps:nope\"} (or apps:nope:tag, \
             apps:nope:name) was not found in apps"
        ),
        "{err}"
    );
}

#[test]
fn setter_refuses_an_unparsable_file_with_its_marker() {
    let files = [
        ("apps/a/widget.yaml", fixture!("setter-a.yaml")),
        (
            "apps/b/broken.yaml",
            "tag: [v1 # {\"$imagewatch\": \"apps:web:tag\"}\n",
        ),
    ];
    let err = plan_edit(&files, &setter("apps:web"), &tag("v2")).unwrap_err();
    assert!(
        matches!(err, EditError::InvalidFile { ref file, .. } if file == "apps/b/broken.yaml"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------
// Shapes kubectl and Helm accept (go-yaml reads them) that a strict YAML 1.2
// scanner refused.
// ---------------------------------------------------------------------------

#[test]
fn flow_sequence_closed_at_its_keys_column() {
    check(
        fixture!("flow-closed-at-key.yaml"),
        &[],
        &deploy("web", "app"),
        tag("1.1.0"),
        fixture!("flow-closed-at-key.expected.yaml"),
    );
    // The container after the flow collections is found too.
    let plan = plan_workload_edit(
        &[("input.yaml", fixture!("flow-closed-at-key.yaml"))],
        &deploy("web", "sidecar"),
        &tag("1.37"),
    )
    .unwrap();
    let edit = plan.edit.expect("an edit");
    assert_eq!(
        diff(fixture!("flow-closed-at-key.yaml"), &edit.new_contents),
        ("6", "7")
    );
}

#[test]
fn quoted_scalar_continued_at_its_keys_column() {
    check(
        fixture!("quoted-continued-at-key.yaml"),
        &[],
        &deploy("web", "app"),
        tag("1.1.0"),
        fixture!("quoted-continued-at-key.expected.yaml"),
    );
}

#[test]
fn kustomize_digest_on_the_last_line_without_a_final_newline() {
    let input = fixture!("kustomize-digest-eof.yaml");
    assert!(!input.ends_with('\n'));
    check_target(
        &[("kustomization.yaml", input)],
        &kustomize("", "web"),
        &tag("v2.1"),
        &[(
            "kustomization.yaml",
            fixture!("kustomize-digest-eof.expected.yaml"),
            "digest: sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
            "newTag: v2.1",
        )],
    );
}

// ---------------------------------------------------------------------------
// Anchors: an edit never changes another place silently.
// ---------------------------------------------------------------------------

#[test]
fn an_anchor_other_containers_alias_is_refused_naming_them() {
    let files = [("input.yaml", fixture!("anchors.yaml"))];
    let err = plan_workload_edit(&files, &deploy("web", "app"), &tag("1.1.0")).unwrap_err();
    let EditError::SharedAnchor { aliases, path, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(path, "spec.template.spec.containers[0].image");
    assert_eq!(
        aliases,
        &[
            "*img at spec.template.spec.containers[1].image (name \"worker\")",
            "*img at spec.template.spec.initContainers[0].image (name \"migrate\")",
        ]
    );
    let message = err.to_string();
    assert!(
        message.contains("worker")
            && message.contains("migrate")
            && message.contains("nothing was changed"),
        "{message}"
    );
    // Through the entry point of every target kind, too.
    let spec = TargetSpec::Workload {
        path: String::new(),
        target: deploy("web", "app"),
    };
    assert!(matches!(
        plan_edit(&files, &spec, &tag("1.1.0")),
        Err(EditError::SharedAnchor { .. })
    ));
    // An alias itself is not followed.
    let err = plan_workload_edit(&files, &deploy("web", "worker"), &tag("1.1.0")).unwrap_err();
    assert!(err.to_string().contains("alias"), "{err}");
}

#[test]
fn an_anchor_may_be_edited_for_all_its_aliases_when_asked() {
    let files = [("input.yaml", fixture!("anchors.yaml"))];
    let options = EditOptions {
        edit_shared_anchor: true,
    };
    let plan =
        plan_workload_edit_with(&files, &deploy("web", "app"), &tag("1.1.0"), options).unwrap();
    let edit = plan.edit.expect("an edit");
    assert_eq!(edit.new_contents, fixture!("anchors.expected.yaml"));
    assert_eq!(plan.located.map(|l| l.shared_with.len()), Some(2));
    // An anchor nothing aliases is edited without asking.
    let plan = plan_workload_edit(&files, &deploy("web", "proxy"), &tag("v1.31.0")).unwrap();
    assert!(plan.edit.is_some());
}

#[test]
fn a_kustomize_images_field_other_entries_alias_is_refused_naming_them() {
    let files = [("kustomization.yaml", fixture!("kustomize-anchors.yaml"))];
    let spec = |image: &str| TargetSpec::Kustomize {
        path: String::new(),
        image: image.into(),
    };
    // A new tag for `a` would move `b` as well.
    let err = plan_edit(&files, &spec("a"), &tag("v2")).unwrap_err();
    let EditError::SharedAnchor { path, aliases, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(path, "images[0].newTag");
    assert_eq!(aliases.len(), 1, "{aliases:?}");
    assert!(aliases[0].contains("images[1].newTag"), "{aliases:?}");
    // A new repository for `c` would move `d`'s `newName`.
    let image = ImageChange::Image("registry.example.com/other:v1".into());
    let err = plan_edit(&files, &spec("c"), &image).unwrap_err();
    assert!(
        matches!(&err, EditError::SharedAnchor { path, .. } if path == "images[2].newName"),
        "{err}"
    );
    // An entry holding an alias is refused as before, naming it.
    let err = plan_edit(&files, &spec("b"), &tag("v2")).unwrap_err();
    assert!(
        err.to_string().contains("images[1].newTag is a YAML alias"),
        "{err}"
    );
    // Nothing shared is changed: `c`'s own tag moves alone.
    let plan = plan_edit(&files, &spec("c"), &tag("v3")).unwrap();
    assert!(plan.edit.is_some());
    // Asked for, the anchored tag moves for both.
    let options = EditOptions {
        edit_shared_anchor: true,
    };
    let plan = plan_edit_with(&files, &spec("a"), &tag("v2"), options).unwrap();
    let edit = plan.edit.expect("an edit");
    assert_eq!(
        edit.new_contents,
        fixture!("kustomize-anchors.expected.yaml")
    );
}
