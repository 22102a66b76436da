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
mod draft;
pub mod flux_v1;
pub mod flux_v2;
pub mod keel;
pub mod load;
mod markers;
mod model;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use imagewatch_crd::ImageWatch;
use serde_json::Value;

pub use markers::{Marker, MarkerPart, PathStep, find_markers, rewrite_markers};
pub use model::{Imported, Inputs, Note, Options, Severity, SourceObject};

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
