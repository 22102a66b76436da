//! Property-based fuzzing of the byte-minimal YAML editor (`manifests::plan_workload_edit`,
//! `plan_edit`, `replace_scalar`).
//!
//! Generated Deployments vary names, one to three containers (plus optional init
//! containers), indentation (2 or 4, sequences indented or not), the image's quoting (plain,
//! single, double, double with an escape), node properties before it (`!!str`, `&anchor`),
//! block or flow container mappings, the image on the key's line or the next, comments on
//! lines and between them, CRLF line endings, a BOM, and other documents before and after
//! it. Editing one container's image to a random valid reference must:
//! - succeed, reading the generated image as the current one;
//! - change nothing outside the image token: the bytes before the token's span and after it
//!   are identical to the input's;
//! - keep a quoted token's quoting style;
//! - read back: planning again on the output needs no edit and finds the new image.
//!
//! Arbitrary text, and generated manifests and the repository's manifest fixtures with
//! random character-level damage, must never panic any planner; whenever a workload plan
//! does produce an edit, the same prefix/suffix and read-back properties hold.
//!
//! The seed is fixed so runs are reproducible; set `PROPTEST_RNG_SEED` (and `PROPTEST_CASES`)
//! to explore further.

use std::path::Path;
use std::sync::LazyLock;

use imagewatch::manifests::{
    ImageChange, ImageRef, Located, Plan, ScalarStyle, TargetSpec, WorkloadTarget, plan_edit,
    plan_workload_edit, replace_scalar,
};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{RngSeed, TestCaseError};

fn config() -> ProptestConfig {
    let base = ProptestConfig::default();
    let cases = if std::env::var_os("PROPTEST_CASES").is_some() {
        base.cases
    } else {
        256
    };
    let rng_seed = if std::env::var_os("PROPTEST_RNG_SEED").is_some() {
        base.rng_seed
    } else {
        RngSeed::Fixed(0x1e57_f00d_0000_0003)
    };
    ProptestConfig {
        cases,
        rng_seed,
        failure_persistence: None,
        ..base
    }
}

const FILE: &str = "deploy.yaml";

// ---------------------------------------------------------------------------------------
// Image references
// ---------------------------------------------------------------------------------------

fn path_component() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-z0-9]{1,8}",
        1 => ("[a-z0-9]{1,4}", prop_oneof![Just("."), Just("_"), Just("__"), Just("-"), Just("--")], "[a-z0-9]{1,4}")
            .prop_map(|(a, sep, b)| format!("{a}{sep}{b}")),
    ]
}

/// A valid image reference (`ImageRef::parse` accepts it), with or without registry, tag and
/// digest.
fn image_ref() -> impl Strategy<Value = String> {
    let registry = prop_oneof![
        3 => Just(None),
        1 => Just(Some("ghcr.io".to_owned())),
        1 => Just(Some("localhost:5000".to_owned())),
        1 => Just(Some("localhost".to_owned())),
        1 => Just(Some("123456789012.dkr.ecr.us-east-1.amazonaws.com".to_owned())),
        1 => Just(Some("[::1]:5000".to_owned())),
        1 => Just(Some("Registry.Example.com:443".to_owned())),
        1 => ("[a-z][a-z0-9-]{0,6}[a-z0-9]\\.[a-z]{2,4}", prop::option::of(1u16..65535))
            .prop_map(|(host, port)| Some(match port {
                Some(port) => format!("{host}:{port}"),
                None => host,
            })),
    ];
    let tag = prop_oneof![
        3 => "[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,15}",
        1 => (0u32..20, 0u32..20, 0u32..20).prop_map(|(a, b, c)| format!("v{a}.{b}.{c}")),
        // Tags that look like other YAML types as plain scalars.
        1 => prop_oneof![Just("1"), Just("1.10"), Just("true"), Just("null"), Just("0x1F"), Just("1e3")]
            .prop_map(str::to_owned),
    ];
    let digest = "[0-9a-f]{64}".prop_map(|hex| format!("sha256:{hex}"));
    (
        registry,
        prop::collection::vec(path_component(), 1..4),
        prop::option::weighted(0.8, tag),
        prop::option::weighted(0.2, digest),
    )
        .prop_map(|(registry, path, tag, digest)| {
            let mut image = String::new();
            if let Some(registry) = registry {
                image.push_str(&registry);
                image.push('/');
            }
            image.push_str(&path.join("/"));
            if let Some(tag) = tag {
                image.push(':');
                image.push_str(&tag);
            }
            if let Some(digest) = digest {
                image.push('@');
                image.push_str(&digest);
            }
            image
        })
        .prop_filter("a valid image reference", |image| {
            ImageRef::parse(image).is_ok()
        })
}

// ---------------------------------------------------------------------------------------
// Generated Deployments
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quote {
    Plain,
    Single,
    Double,
    /// Double-quoted with the first character written as an escape (`"\x67hcr.io/…"`).
    DoubleEscaped,
}

#[derive(Debug, Clone)]
struct Container {
    name: String,
    image: String,
    quote: Quote,
    /// Node properties written before the token (`!!str `, `&img `).
    properties: &'static str,
    /// `- {name: …, image: …}` instead of a block mapping.
    flow: bool,
    image_first: bool,
    /// `image:` with the value on the following line.
    image_on_next_line: bool,
    /// A `ports:` entry after the name and image.
    ports: bool,
    /// How the `image` key is written: `image`, `'image'` or `"image"`.
    key: &'static str,
    /// Blanks between `image:` and the value. Never a tab alone: YAML parsers (saphyr,
    /// libyaml) reject `key:<TAB>plain`, so no manifest in the wild has it.
    separator: &'static str,
    /// Blanks after the token, before any comment and the line break.
    trailing: &'static str,
    /// A flow mapping broken over two lines.
    flow_multiline: bool,
}

#[derive(Debug, Clone)]
struct Manifest {
    name: String,
    namespace: Option<String>,
    indent: usize,
    indent_sequences: bool,
    containers: Vec<Container>,
    init_containers: Vec<Container>,
    /// Comments for lines of the Deployment: line `i` gets `comments[i % len]` when it is
    /// `Some` (trailing comment) and `full_line[i % len]` puts a comment line before it.
    comments: Vec<Option<String>>,
    full_line: Vec<bool>,
    before: Vec<ExtraDoc>,
    after: Vec<ExtraDoc>,
    leading_marker: bool,
    /// `%YAML 1.2` before the first document (which then starts with `---`).
    directive: bool,
    /// `...` after every document but the last.
    end_markers: bool,
    crlf: bool,
    bom: bool,
    trailing_newline: bool,
}

#[derive(Debug, Clone, Copy)]
enum ExtraDoc {
    ServiceSameName,
    DeploymentOtherName,
    ConfigMapMentioningImage,
    CommentOnly,
    Empty,
    ListOfOthers,
}

fn dns_name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,8}[a-z0-9]?".prop_filter("not a YAML null", |n| n != "null")
}

fn quote() -> impl Strategy<Value = Quote> {
    prop_oneof![
        3 => Just(Quote::Plain),
        2 => Just(Quote::Single),
        2 => Just(Quote::Double),
        1 => Just(Quote::DoubleEscaped),
    ]
}

fn container(name: String) -> impl Strategy<Value = Container> {
    (
        image_ref(),
        quote(),
        prop_oneof![
            6 => Just(""),
            1 => Just("!!str "),
            1 => Just("&img "),
            1 => Just("!!str &img "),
        ],
        prop::bool::weighted(0.2),
        any::<bool>(),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.3),
        (
            prop_oneof![6 => Just("image"), 1 => Just("'image'"), 1 => Just("\"image\"")],
            prop_oneof![6 => Just(" "), 1 => Just("   "), 1 => Just(" \t")],
            prop_oneof![6 => Just(""), 1 => Just("  "), 1 => Just("\t")],
            any::<bool>(),
        ),
    )
        .prop_map(
            move |(
                image,
                quote,
                properties,
                flow,
                image_first,
                next_line,
                ports,
                (key, separator, trailing, flow_multiline),
            )| Container {
                name: name.clone(),
                image,
                quote,
                properties,
                flow,
                image_first,
                image_on_next_line: next_line && !flow,
                ports,
                key,
                separator,
                trailing,
                flow_multiline,
            },
        )
}

fn comment_text() -> impl Strategy<Value = String> {
    "[ -~éü漢🦀]{0,16}".prop_map(|text| format!("#{text}"))
}

fn extra_doc() -> impl Strategy<Value = ExtraDoc> {
    prop_oneof![
        Just(ExtraDoc::ServiceSameName),
        Just(ExtraDoc::DeploymentOtherName),
        Just(ExtraDoc::ConfigMapMentioningImage),
        Just(ExtraDoc::CommentOnly),
        Just(ExtraDoc::Empty),
        Just(ExtraDoc::ListOfOthers),
    ]
}

fn manifest() -> impl Strategy<Value = Manifest> {
    let names = (
        dns_name(),
        prop::collection::btree_set(dns_name(), 1..6),
        1usize..=3,
    );
    names.prop_flat_map(|(name, container_names, want)| {
        let names: Vec<String> = container_names.into_iter().collect();
        let split = want.min(names.len());
        let containers: Vec<_> = names[..split].iter().cloned().map(container).collect();
        let init: Vec<_> = names[split..]
            .iter()
            .take(2)
            .cloned()
            .map(container)
            .collect();
        (
            Just(name),
            prop::option::weighted(0.3, dns_name()),
            prop_oneof![Just(2usize), Just(4usize)],
            any::<bool>(),
            containers,
            init,
            prop::collection::vec(prop::option::weighted(0.25, comment_text()), 1..40),
            prop::collection::vec(prop::bool::weighted(0.1), 1..40),
            (
                prop::collection::vec(extra_doc(), 0..3),
                prop::collection::vec(extra_doc(), 0..3),
            ),
            (
                any::<bool>(),
                prop::bool::weighted(0.3),
                prop::bool::weighted(0.3),
            ),
            (
                prop::bool::weighted(0.8),
                prop::bool::weighted(0.15),
                prop::bool::weighted(0.15),
            ),
        )
            .prop_map(
                |(
                    name,
                    namespace,
                    indent,
                    indent_sequences,
                    containers,
                    init_containers,
                    comments,
                    full_line,
                    (before, after),
                    (leading_marker, crlf, bom),
                    (trailing_newline, directive, end_markers),
                )| Manifest {
                    name,
                    namespace,
                    indent,
                    indent_sequences,
                    containers,
                    init_containers,
                    comments,
                    full_line,
                    before,
                    after,
                    leading_marker,
                    directive,
                    end_markers,
                    crlf,
                    bom,
                    trailing_newline,
                },
            )
    })
}

fn render_token(c: &Container) -> String {
    // A plain scalar cannot start with `[` (a flow sequence), so IPv6 registries are quoted.
    let quote = if c.quote == Quote::Plain && c.image.starts_with('[') {
        Quote::Double
    } else {
        c.quote
    };
    let token = match quote {
        Quote::Plain => c.image.clone(),
        Quote::Single => format!("'{}'", c.image),
        Quote::Double => format!("\"{}\"", c.image),
        Quote::DoubleEscaped => {
            let mut chars = c.image.chars();
            let first = chars.next().unwrap();
            format!("\"\\x{:02x}{}\"", u32::from(first), chars.as_str())
        }
    };
    format!("{}{token}{}", c.properties, c.trailing)
}

impl Manifest {
    fn all_containers(&self) -> impl Iterator<Item = &Container> {
        self.containers.iter().chain(&self.init_containers)
    }

    /// The Deployment's lines (no line terminators), before comments are added.
    fn deployment_lines(&self) -> Vec<String> {
        let u = " ".repeat(self.indent);
        let mut lines = vec![
            "apiVersion: apps/v1".to_owned(),
            "kind: Deployment".to_owned(),
            "metadata:".to_owned(),
            format!("{u}name: {}", self.name),
        ];
        if let Some(ns) = &self.namespace {
            lines.push(format!("{u}namespace: {ns}"));
        }
        lines.push("spec:".to_owned());
        lines.push(format!("{u}replicas: 2"));
        lines.push(format!("{u}template:"));
        lines.push(format!("{u}{u}spec:"));
        let list_indent = format!("{u}{u}{u}{}", if self.indent_sequences { &u } else { "" });
        for (field, list) in [
            ("containers", &self.containers),
            ("initContainers", &self.init_containers),
        ] {
            if list.is_empty() {
                continue;
            }
            lines.push(format!("{u}{u}{u}{field}:"));
            for c in list {
                self.container_lines(c, &list_indent, &mut lines);
            }
        }
        lines
    }

    fn container_lines(&self, c: &Container, dash_indent: &str, lines: &mut Vec<String>) {
        let token = render_token(c);
        let (key, sep) = (c.key, c.separator);
        if c.flow {
            let image = format!("{key}:{sep}{token}");
            let name = format!("name: {}", c.name);
            let (first, second) = if c.image_first {
                (image, name)
            } else {
                (name, image)
            };
            if c.flow_multiline {
                lines.push(format!("{dash_indent}- {{{first},"));
                lines.push(format!("{dash_indent}    {second}}}"));
            } else {
                lines.push(format!("{dash_indent}- {{{first}, {second}}}"));
            }
            return;
        }
        let key_indent = format!("{dash_indent}  ");
        let mut entries: Vec<Vec<String>> = Vec::new();
        entries.push(vec![format!("name: {}", c.name)]);
        let image = if c.image_on_next_line {
            vec![
                format!("{key}:"),
                format!("{}{token}", " ".repeat(self.indent)),
            ]
        } else {
            vec![format!("{key}:{sep}{token}")]
        };
        if c.image_first {
            entries.insert(0, image);
        } else {
            entries.push(image);
        }
        if c.ports {
            entries.push(vec![
                "ports:".to_owned(),
                format!("{}- containerPort: 8080", " ".repeat(self.indent)),
            ]);
        }
        for (i, entry) in entries.into_iter().enumerate() {
            for (j, line) in entry.into_iter().enumerate() {
                let lead = if i == 0 && j == 0 {
                    format!("{dash_indent}- ")
                } else {
                    key_indent.clone()
                };
                lines.push(format!("{lead}{line}"));
            }
        }
    }

    fn extra(&self, doc: ExtraDoc) -> String {
        let name = &self.name;
        let container = &self.containers[0].name;
        match doc {
            ExtraDoc::ServiceSameName => format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  ports:\n  - port: 80 # http\n"
            ),
            ExtraDoc::DeploymentOtherName => format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}-other\nspec:\n  template:\n    spec:\n      containers:\n      - name: {container}\n        image: other.example.com/other:1\n"
            ),
            ExtraDoc::ConfigMapMentioningImage => format!(
                "kind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  image: \"x:1\"\n  note: |\n    image: {}\n    more\n",
                self.containers[0].image
            ),
            ExtraDoc::CommentOnly => "# nothing here: kind: Deployment\n".to_owned(),
            ExtraDoc::Empty => String::new(),
            ExtraDoc::ListOfOthers => format!(
                "apiVersion: v1\nkind: List\nitems:\n- kind: Deployment\n  metadata: {{name: {name}-x}}\n  spec: {{template: {{spec: {{containers: [{{name: {container}, image: a:1}}]}}}}}}\n"
            ),
        }
    }

    fn render(&self) -> String {
        let mut deployment = String::new();
        for (i, line) in self.deployment_lines().into_iter().enumerate() {
            if self.full_line[i % self.full_line.len()] {
                deployment.push_str("# a comment line: with - [yaml] {syntax}\n");
            }
            deployment.push_str(&line);
            if let Some(comment) = &self.comments[i % self.comments.len()] {
                deployment.push(' ');
                deployment.push_str(comment);
            }
            deployment.push('\n');
        }
        let mut docs: Vec<String> = self.before.iter().map(|&d| self.extra(d)).collect();
        docs.push(deployment);
        docs.extend(self.after.iter().map(|&d| self.extra(d)));
        let mut text = String::new();
        if self.bom {
            text.push('\u{feff}');
        }
        if self.directive {
            text.push_str("%YAML 1.2\n---\n");
        } else if self.leading_marker {
            text.push_str("---\n");
        }
        text.push_str(&docs.join(if self.end_markers {
            "...\n---\n"
        } else {
            "---\n"
        }));
        if !self.trailing_newline && self.after.is_empty() {
            text.pop();
        }
        if self.crlf {
            text = text.replace('\n', "\r\n");
        }
        text
    }
}

// ---------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------

fn fail(message: String) -> TestCaseError {
    TestCaseError::fail(message)
}

/// The edit touched only the located token, and the result reads back.
fn check_edit(
    text: &str,
    target: &WorkloadTarget,
    change: &ImageChange,
    plan: &Plan,
) -> Result<(), TestCaseError> {
    let located: &Located = plan
        .located
        .as_ref()
        .ok_or_else(|| fail("a workload plan without a located token".into()))?;
    let span = located.span.clone();
    prop_assert!(
        text.get(span.clone()).is_some(),
        "span {:?} is not a token of the input",
        span
    );
    prop_assert_eq!(&plan.current, &located.value);
    let Some(edit) = &plan.edit else {
        // Nothing to do: the change asks for what is there.
        if let ImageChange::Image(image) = change {
            prop_assert_eq!(&plan.current, image);
        }
        return Ok(());
    };
    prop_assert_eq!(&edit.old, &plan.current);
    prop_assert_ne!(&edit.new, &plan.current);
    if let ImageChange::Image(image) = change {
        prop_assert_eq!(&edit.new, image);
    }
    let out = edit.new_contents.as_str();
    let (prefix, suffix) = (&text[..span.start], &text[span.end..]);
    prop_assert!(
        out.len() >= prefix.len() + suffix.len() && out.starts_with(prefix),
        "bytes before the token changed:\n{:?}\n=>\n{:?}",
        text,
        out
    );
    prop_assert!(
        out.ends_with(suffix),
        "bytes after the token changed:\n{:?}\n=>\n{:?}",
        text,
        out
    );
    let token = &out[span.start..out.len() - suffix.len()];
    match located.style {
        ScalarStyle::SingleQuoted => {
            prop_assert_eq!(token, format!("'{}'", edit.new));
        }
        ScalarStyle::DoubleQuoted => {
            prop_assert_eq!(token, format!("\"{}\"", edit.new));
        }
        ScalarStyle::Plain => {
            prop_assert!(
                token == edit.new || token == format!("\"{}\"", edit.new),
                "plain token {:?} for {:?}",
                token,
                edit.new
            );
        }
    }
    // The public splice gives the same text.
    let spliced = replace_scalar(text, located, &edit.new)
        .map_err(|e| fail(format!("replace_scalar refused the located token: {e}")))?;
    prop_assert_eq!(&spliced, out);
    // Read back: no edit needed, the new image is current, at the same place.
    for again_change in [ImageChange::Image(edit.new.clone()), change.clone()] {
        let again = plan_workload_edit(&[(FILE, out)], target, &again_change).map_err(|e| {
            fail(format!(
                "the edited file cannot be planned again: {e}\n{out:?}"
            ))
        })?;
        prop_assert!(
            again.edit.is_none(),
            "a second run would edit again: {:?}",
            again.edit
        );
        prop_assert_eq!(&again.current, &edit.new);
        prop_assert_eq!(
            again.located.as_ref().map(|l| l.span.start),
            Some(span.start)
        );
    }
    Ok(())
}

/// Plans against arbitrary text: no panic; any edit obeys [`check_edit`].
fn plan_anything(
    text: &str,
    target: &WorkloadTarget,
    change: &ImageChange,
) -> Result<(), TestCaseError> {
    match plan_workload_edit(&[(FILE, text)], target, change) {
        Ok(plan) => check_edit(text, target, change, &plan),
        Err(error) => {
            let _ = error.to_string();
            Ok(())
        }
    }
}

/// Every other target kind on a file named as that kind expects: no panic.
fn plan_other_targets(text: &str, change: &ImageChange) {
    let targets = [
        (
            "kustomization.yaml",
            TargetSpec::Kustomize {
                path: String::new(),
                image: "web".into(),
            },
        ),
        (
            "values.yaml",
            TargetSpec::Helm {
                file: "values.yaml".into(),
                key: "canary.image.tag".into(),
            },
        ),
        (
            "values.yaml",
            TargetSpec::Helm {
                file: "values.yaml".into(),
                key: "image".into(),
            },
        ),
        (
            ".argocd-source-web.yaml",
            TargetSpec::ArgocdSource {
                path: String::new(),
                application: "web".into(),
                image: "web".into(),
            },
        ),
        (
            "a.yaml",
            TargetSpec::Setter {
                path: String::new(),
                marker: "apps:web".into(),
            },
        ),
    ];
    for (file, target) in &targets {
        if let Err(error) = plan_edit(&[(*file, text)], target, change) {
            let _ = error.to_string();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Damage
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Damage {
    Insert(Index, char),
    Delete(Index, usize),
    Replace(Index, char),
    Truncate(Index),
    /// Duplicate a line (the one holding the position).
    DuplicateLine(Index),
}

fn yaml_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => proptest::sample::select(vec![
            ' ', '\n', '\r', '\t', '-', ':', '#', '\'', '"', '[', ']', '{', '}', ',', '!', '&',
            '*', '|', '>', '%', '@', '`', '?', '\\', '\u{feff}', 'é',
        ]),
        1 => any::<char>(),
    ]
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        3 => (any::<Index>(), yaml_char()).prop_map(|(i, c)| Damage::Insert(i, c)),
        2 => (any::<Index>(), 1usize..4).prop_map(|(i, n)| Damage::Delete(i, n)),
        2 => (any::<Index>(), yaml_char()).prop_map(|(i, c)| Damage::Replace(i, c)),
        1 => any::<Index>().prop_map(Damage::Truncate),
        1 => any::<Index>().prop_map(Damage::DuplicateLine),
    ]
}

fn apply_damage(text: &mut String, damage: &Damage) {
    let boundaries: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(text.len()))
        .collect();
    let at = |i: &Index| boundaries[i.index(boundaries.len())];
    match damage {
        Damage::Insert(i, c) => text.insert(at(i), *c),
        Damage::Delete(i, n) => {
            let start = i.index(boundaries.len());
            let end = (start + n).min(boundaries.len() - 1);
            text.replace_range(boundaries[start]..boundaries[end], "");
        }
        Damage::Replace(i, c) => {
            let start = i.index(boundaries.len());
            if start + 1 < boundaries.len() {
                text.replace_range(boundaries[start]..boundaries[start + 1], &c.to_string());
            }
        }
        Damage::Truncate(i) => text.truncate(at(i)),
        Damage::DuplicateLine(i) => {
            let pos = at(i);
            let start = text[..pos].rfind('\n').map_or(0, |p| p + 1);
            let end = text[pos..].find('\n').map_or(text.len(), |p| pos + p + 1);
            let line = text[start..end].to_owned();
            text.insert_str(start, &line);
        }
    }
}

struct FixtureFile {
    name: String,
    text: String,
}

static MANIFEST_FIXTURES: LazyLock<Vec<FixtureFile>> = LazyLock::new(|| {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("engine/tests/fixtures/manifests");
    let mut files: Vec<FixtureFile> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .map(|path| FixtureFile {
            name: path.file_name().unwrap().to_string_lossy().into_owned(),
            text: std::fs::read_to_string(&path).unwrap(),
        })
        .collect();
    files.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(!files.is_empty(), "expected manifest fixtures");
    files
});

/// Workload targets that the manifest fixtures contain.
fn fixture_targets() -> Vec<WorkloadTarget> {
    vec![
        WorkloadTarget::new("Deployment", "web", "app"),
        WorkloadTarget::new("Deployment", "web", "metrics"),
        WorkloadTarget::new("Deployment", "cache", "redis"),
        WorkloadTarget::new("Deployment", "api", "api"),
        WorkloadTarget::new("CronJob", "report", "report"),
        WorkloadTarget::new("Pod", "debug", "debug"),
        WorkloadTarget::new("Deployment", "web", "app").with_namespace("prod"),
    ]
}

fn change() -> impl Strategy<Value = ImageChange> {
    prop_oneof![
        3 => image_ref().prop_map(ImageChange::Image),
        1 => "[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,15}".prop_map(ImageChange::Tag),
    ]
}

// ---------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    #[test]
    fn editing_one_image_changes_only_its_token(
        manifest in manifest(),
        pick in any::<Index>(),
        change in change(),
    ) {
        let text = manifest.render();
        let all: Vec<&Container> = manifest.all_containers().collect();
        let chosen = all[pick.index(all.len())];
        let target = WorkloadTarget::new("Deployment", manifest.name.clone(), chosen.name.clone());
        let plan = plan_workload_edit(&[(FILE, text.as_str())], &target, &change)
            .map_err(|e| fail(format!("planning failed: {e}\n{text}")))?;
        prop_assert_eq!(&plan.current, &chosen.image, "read the wrong image from\n{}", text);
        let located = plan.located.as_ref().unwrap();
        let expected_style = match chosen.quote {
            Quote::Plain if !chosen.image.starts_with('[') => ScalarStyle::Plain,
            Quote::Single => ScalarStyle::SingleQuoted,
            _ => ScalarStyle::DoubleQuoted,
        };
        prop_assert_eq!(located.style, expected_style);
        check_edit(&text, &target, &change, &plan)?;
    }

    #[test]
    fn arbitrary_text_never_panics_the_planners(
        text in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..400)
                .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
            "[-:#'\"\\[\\]{}!&*|>%@?,. \n\r\ta-z0-9]{0,300}",
            any::<String>(),
        ],
        change in change(),
    ) {
        for target in fixture_targets() {
            plan_anything(&text, &target, &change)?;
        }
        plan_other_targets(&text, &change);
    }

    #[test]
    fn damaged_manifests_never_panic_and_edits_stay_minimal(
        manifest in manifest(),
        damage in prop::collection::vec(damage(), 1..4),
        change in change(),
    ) {
        let mut text = manifest.render();
        for d in &damage {
            apply_damage(&mut text, d);
        }
        for c in manifest.all_containers() {
            let target = WorkloadTarget::new("Deployment", manifest.name.clone(), c.name.clone());
            plan_anything(&text, &target, &change)?;
        }
    }

    #[test]
    fn damaged_fixtures_never_panic_and_edits_stay_minimal(
        fixture in any::<Index>(),
        damage in prop::collection::vec(damage(), 0..4),
        change in change(),
    ) {
        let fixture = &MANIFEST_FIXTURES[fixture.index(MANIFEST_FIXTURES.len())];
        let mut text = fixture.text.clone();
        for d in &damage {
            apply_damage(&mut text, d);
        }
        for target in fixture_targets() {
            plan_anything(&text, &target, &change)?;
        }
        plan_other_targets(&text, &change);
    }

    #[test]
    fn replace_scalar_rejects_stale_locations_without_panicking(
        manifest in manifest(),
        start in any::<Index>(),
        len in 0usize..12,
        style in prop_oneof![
            Just(ScalarStyle::Plain),
            Just(ScalarStyle::SingleQuoted),
            Just(ScalarStyle::DoubleQuoted),
        ],
        value in "[a-z:/'\" ]{0,8}",
        new in prop_oneof![image_ref(), any::<String>()],
    ) {
        let text = manifest.render();
        let start = start.index(text.len() + 2);
        let located = Located {
            file: FILE.into(),
            file_index: 0,
            document: 0,
            item: None,
            path: "spec.template.spec.containers[0].image".into(),
            span: start..start + len,
            style,
            value,
            shared_with: Vec::new(),
        };
        if let Ok(out) = replace_scalar(&text, &located, &new) {
            // Accepted only for a real token: everything around it is kept.
            prop_assert!(out.starts_with(&text[..located.span.start]));
            prop_assert!(out.ends_with(&text[located.span.end..]));
        }
    }
}
