//! `imagewatch import`: ImageWatch objects for configuration written for other tools, and a
//! report of what could not be carried over and why.
//!
//! Place in the flow: none — an offline step a person runs once, before the operator sees any
//! watch. Everything here is pure: the caller reads the files (or the cluster objects) and
//! hands over their text or JSON ([`load`] is that I/O edge); [`translate`] decides;
//! [`render`] prints.
//!
//! Sources, one module each:
//! - [`flux_v1`]: Flux v1 workload annotations (`fluxcd.io/automated`, `fluxcd.io/tag.<c>`,
//!   the older `flux.weave.works/*`);
//! - [`flux_v2`]: Flux `ImageRepository` + `ImagePolicy` objects and the setter markers
//!   (`# {"$imagepolicy": "ns:name"}`) in the manifests;
//! - [`argocd`]: Argo CD Image Updater annotations on Applications and its `ImageUpdater`
//!   resources;
//! - [`keel`]: Keel's `keel.sh/policy` annotations.

pub mod argocd;
pub mod flux_v1;
pub mod flux_v2;
pub mod keel;
pub mod load;
mod markers;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use imagewatch_crd::{
    GitSource, ImageWatch, ImageWatchSpec, RegistryCredentials, SecretRef, TagOrder, TagPick,
    TagRules, Target,
};
use serde_json::Value;

pub use markers::{Marker, MarkerPart, PathStep, find_markers, rewrite_markers};

use crate::manifests::ImageRef;

/// One object read from a file or from the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceObject {
    /// File it was read from, relative to the imported directory (`None`: from the cluster).
    pub file: Option<String>,
    /// The object as JSON.
    pub value: Value,
}

/// Everything an import reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Inputs {
    /// Kubernetes objects (workloads, Flux and Argo CD resources).
    pub objects: Vec<SourceObject>,
    /// Flux setter markers found in the files.
    pub markers: Vec<Marker>,
}

/// Choices the person running the import makes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Namespace for every watch; `None`: the namespace of the object each one comes from.
    pub namespace: Option<String>,
    /// `spec.git` for watches whose source does not say where the manifests live.
    pub git: Option<GitSource>,
}

/// How much a note matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Nothing was generated for this part of the source.
    NotTranslated,
    /// A watch was generated, but it behaves differently from the source in the way described.
    Differs,
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Note {
    /// Where it comes from, e.g. `Deployment apps/web (apps/web/deploy.yaml)`.
    pub source: String,
    /// How much it matters.
    pub severity: Severity,
    /// What and why, as a sentence.
    pub message: String,
}

/// The result of an import.
#[derive(Clone, Debug, Default)]
pub struct Imported {
    /// The generated watches, in source order.
    pub watches: Vec<ImageWatch>,
    /// What could not be carried over, or only with a difference.
    pub notes: Vec<Note>,
    /// Flux setter markers with the watch that now writes their value: (index into
    /// [`Inputs::markers`], index into `watches`).
    pub marker_sites: Vec<(usize, usize)>,
}

impl Imported {
    fn note(&mut self, source: &str, severity: Severity, message: impl Into<String>) {
        self.notes.push(Note {
            source: source.to_owned(),
            severity,
            message: message.into(),
        });
    }
}

/// Translates every source found in `inputs`.
#[must_use]
pub fn translate(inputs: &Inputs, options: &Options) -> Imported {
    let mut out = Imported::default();
    flux_v1::translate(inputs, options, &mut out);
    flux_v2::translate(inputs, options, &mut out);
    argocd::translate(inputs, options, &mut out);
    keel::translate(inputs, options, &mut out);
    dedupe_names(&mut out.watches);
    out
}

/// For `--rewrite-markers`: per file, the lines whose Flux marker becomes an imagewatch marker,
/// with the `<namespace>:<name>` of the watch that writes the value.
#[must_use]
pub fn marker_rewrites(
    inputs: &Inputs,
    imported: &Imported,
) -> BTreeMap<String, BTreeMap<usize, String>> {
    let mut out: BTreeMap<String, BTreeMap<usize, String>> = BTreeMap::new();
    for &(marker, watch) in &imported.marker_sites {
        let (Some(marker), Some(watch)) = (inputs.markers.get(marker), imported.watches.get(watch))
        else {
            continue;
        };
        let namespace = watch.metadata.namespace.as_deref().unwrap_or("default");
        let name = watch.metadata.name.as_deref().unwrap_or_default();
        out.entry(marker.file.clone())
            .or_default()
            .insert(marker.line, format!("{namespace}:{name}"));
    }
    out
}

/// The watches as a YAML stream, ready for `kubectl apply -f -`.
///
/// # Errors
///
/// When the YAML serializer fails (it should not on these types).
pub fn render(watches: &[ImageWatch]) -> Result<String, String> {
    let mut out = String::new();
    for watch in watches {
        let yaml = serde_saphyr::to_string(watch).map_err(|e| e.to_string())?;
        out.push_str("---\n");
        out.push_str(&yaml);
        if !yaml.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// The report, one note per paragraph, most serious first.
#[must_use]
pub fn render_report(imported: &Imported) -> String {
    let mut notes = imported.notes.clone();
    notes.sort_by(|a, b| {
        (a.severity, &a.source, &a.message).cmp(&(b.severity, &b.source, &b.message))
    });
    let mut out = String::new();
    let _ = writeln!(
        out,
        "imported {} watch(es); {} note(s)",
        imported.watches.len(),
        notes.len()
    );
    for note in &notes {
        let label = match note.severity {
            Severity::NotTranslated => "not translated",
            Severity::Differs => "differs",
        };
        let _ = writeln!(out, "{label}: {}: {}", note.source, note.message);
    }
    out
}

/// Reads every YAML document of one file into objects (documents that are not mappings with
/// a `kind` are skipped) and its Flux setter markers. A file that does not parse is reported,
/// not fatal.
pub fn read_file(name: &str, text: &str, inputs: &mut Inputs, out: &mut Imported) {
    match serde_saphyr::from_multiple::<Value>(text) {
        Ok(documents) => {
            for value in documents {
                if value.get("kind").and_then(Value::as_str).is_some() {
                    inputs.objects.push(SourceObject {
                        file: Some(name.to_owned()),
                        value,
                    });
                }
            }
        }
        Err(error) => out.note(
            name,
            Severity::NotTranslated,
            format!("the file is not valid YAML ({error}); nothing in it was read"),
        ),
    }
    if text.contains("$imagepolicy") {
        match find_markers(name, text) {
            Ok(found) => inputs.markers.extend(found),
            Err(message) => out.note(name, Severity::NotTranslated, message),
        }
    }
}

/// `Deployment my-ns/web (apps/web/deploy.yaml)`.
fn describe(object: &SourceObject) -> String {
    let value = &object.value;
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("?");
    let name = name_of(value);
    let namespaced = match namespace_of(value) {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    };
    match &object.file {
        Some(file) => format!("{kind} {namespaced} ({file})"),
        None => format!("{kind} {namespaced}"),
    }
}

fn name_of(value: &Value) -> &str {
    value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn namespace_of(value: &Value) -> Option<&str> {
    value.pointer("/metadata/namespace").and_then(Value::as_str)
}

fn annotations(value: &Value) -> impl Iterator<Item = (&str, &str)> {
    value
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
}

fn annotation<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// Directory of a file, relative; `""` for a file at the top.
fn dir_of(file: &str) -> String {
    match file.rfind('/') {
        Some(slash) => file[..slash].to_owned(),
        None => String::new(),
    }
}

/// A Kubernetes object name from parts: lower case, `[a-z0-9-]`, at most 63 characters (so it
/// also fits a label value), never empty.
fn object_name(parts: &[&str]) -> String {
    let mut name = String::new();
    for part in parts.iter().filter(|p| !p.is_empty()) {
        if !name.is_empty() {
            name.push('-');
        }
        for c in part.chars() {
            let c = c.to_ascii_lowercase();
            name.push(if c.is_ascii_alphanumeric() { c } else { '-' });
        }
    }
    let mut name: String = name
        .split('-')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    name.truncate(63);
    let name = name.trim_end_matches('-').to_owned();
    if name.is_empty() {
        "imported".to_owned()
    } else {
        name
    }
}

/// Two sources may produce the same name (one image in two files): later ones get `-2`, `-3`.
fn dedupe_names(watches: &mut [ImageWatch]) {
    let mut seen = BTreeSet::new();
    for watch in watches.iter_mut() {
        let namespace = watch.metadata.namespace.clone().unwrap_or_default();
        let base = watch.metadata.name.clone().unwrap_or_default();
        let mut name = base.clone();
        let mut n = 2;
        while !seen.insert((namespace.clone(), name.clone())) {
            let suffix = format!("-{n}");
            let mut stem = base.clone();
            stem.truncate(63 - suffix.len());
            name = format!("{}{suffix}", stem.trim_end_matches('-'));
            n += 1;
        }
        watch.metadata.name = Some(name);
    }
}

/// Repository and tag of an image reference as a manifest writes it.
fn split_image(image: &str) -> Option<(String, Option<String>)> {
    let parsed = ImageRef::parse(image).ok()?;
    Some((parsed.repository(), parsed.tag().map(str::to_owned)))
}

/// The parts of a watch every translator fills in.
struct WatchDraft {
    name: String,
    namespace: Option<String>,
    image: String,
    rules: TagRules,
    target: Target,
    pin: Option<String>,
    secret: Option<String>,
    git: Option<GitSource>,
    interval: Option<String>,
    digest: Option<imagewatch_crd::DigestMode>,
}

impl WatchDraft {
    fn new(name: String, image: String, target: Target) -> Self {
        WatchDraft {
            name,
            namespace: None,
            image,
            rules: TagRules::default(),
            target,
            pin: None,
            secret: None,
            git: None,
            interval: None,
            digest: None,
        }
    }

    fn build(self, options: &Options) -> ImageWatch {
        let mut watch = ImageWatch::new(
            &self.name,
            ImageWatchSpec {
                image: self.image,
                tags: (self.rules != TagRules::default()).then_some(self.rules),
                digest: self.digest,
                pin: self.pin,
                suspend: None,
                interval: self.interval,
                credentials: self.secret.map(|name| RegistryCredentials {
                    provider: None,
                    secret_ref: Some(SecretRef { name }),
                }),
                git: self.git.or_else(|| options.git.clone()),
                target: self.target,
                group: None,
                edit_shared_anchor: None,
                on_git_change: None,
                windows: None,
                notify: None,
                verify: None,
            },
        );
        watch.metadata.namespace = options.namespace.clone().or(self.namespace);
        watch
    }
}

/// Tag rules from the parts a translator found.
fn rules(pattern: Option<String>, exclude: Vec<String>, order: TagOrder) -> TagRules {
    TagRules {
        pattern,
        exclude: (!exclude.is_empty()).then_some(exclude),
        order: (order != TagOrder::Semver).then_some(order),
        pick: None,
        extract: None,
        platforms: None,
    }
}

/// Sets `pick: Lowest`.
fn lowest(mut rules: TagRules) -> TagRules {
    rules.pick = Some(TagPick::Lowest);
    rules
}

/// A glob of the kind Flux v1 and Keel write (only `*` is special) as an imagewatch pattern:
/// the same glob when it has no other special character, else an anchored regex.
fn star_glob(glob: &str) -> String {
    if !glob.contains(['?', '[', ']', '\\']) {
        return glob.to_owned();
    }
    let parts: Vec<String> = glob.split('*').map(regex::escape).collect();
    format!("regex:^{}$", parts.join(".*"))
}

/// A regex exclusion (Flux `exclusionList`) as an exclude glob, when it is one of the simple
/// shapes that have an exact glob: optional `^`, literal text and `.*`, optional `$`.
fn regex_as_glob(regex: &str) -> Option<String> {
    let (anchored_start, body) = match regex.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, regex),
    };
    let (anchored_end, body) = match body.strip_suffix('$') {
        Some(rest) if !rest.ends_with('\\') => (true, rest),
        _ => (false, body),
    };
    let mut glob = String::new();
    if !anchored_start {
        glob.push('*');
    }
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '.' if chars.peek() == Some(&'*') => {
                chars.next();
                glob.push('*');
            }
            '\\' => match chars.next() {
                Some(escaped @ ('.' | '-' | '_' | '+')) => glob.push(escaped),
                _ => return None,
            },
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => glob.push(c),
            _ => return None,
        }
    }
    if !anchored_end {
        glob.push('*');
    }
    while glob.contains("**") {
        glob = glob.replace("**", "*");
    }
    Some(glob)
}
