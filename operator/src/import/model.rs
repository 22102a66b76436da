//! What an import reads and what it gives back: the objects read, the person's options,
//! the notes of the report and the result.

use imagewatch_crd::{GitSource, ImageWatch};
use serde_json::Value;

use super::markers::Marker;

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
    pub(super) fn note(&mut self, source: &str, severity: Severity, message: impl Into<String>) {
        self.notes.push(Note {
            source: source.to_owned(),
            severity,
            message: message.into(),
        });
    }
}
