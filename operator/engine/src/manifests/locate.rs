//! Finding a workload container's `image` scalar in manifest source text.
//!
//! Place in the flow: reads the current tag from Git. Given the text of every
//! manifest file, [`find_workload_image`] returns the exact byte range of the
//! one `image` token to edit, its quoting style and its decoded value.
//!
//! What is searched: documents whose `kind` and `metadata.name` match the
//! target (also each entry of a `kind: List` document's `items`), then the
//! pod spec of that kind (`spec.template.spec`, `spec.jobTemplate.spec.
//! template.spec` for CronJob, `spec` for Pod), then its `containers` and
//! `initContainers`, for the container with the target's name.
//!
//! Choosing among several matches (the namespace rule):
//! 1. Objects of the right kind and name are collected from all files. When
//!    the target has a namespace, objects with a *different*
//!    `metadata.namespace` are dropped.
//! 2. Only objects that actually contain the named container with an `image`
//!    field remain. This lets a Kustomize patch that repeats the kind/name
//!    without an image coexist with the base it patches.
//! 3. When the target has a namespace and some remaining object states it
//!    explicitly, only those win; objects without `metadata.namespace` (whose
//!    namespace is decided at apply time) count only if none states it.
//! 4. Exactly one image field must remain; two or more are reported as
//!    [`EditError::Ambiguous`] naming every place, none as
//!    [`EditError::TargetNotFound`] saying whether the object or the
//!    container was missing.
//!
//! Files that do not parse are skipped and reported as warnings; YAML aliases
//! on the way to the image are not followed, because editing an anchored
//! value would silently change other objects too.

use std::ops::Range;

use super::yaml::{self, Lookup, NodeId, NodeKind, Stream, is_null};
use super::{
    DocLocation, EditError, NotFound, Site, Warning, WorkloadKind, WorkloadSummary, WorkloadTarget,
};
use granit_parser::ScalarStyle as RawStyle;

/// Quoting style of the located image token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarStyle {
    Plain,
    SingleQuoted,
    DoubleQuoted,
}

/// The image field chosen for editing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// File name as given by the caller.
    pub file: String,
    /// Index of that file in the caller's slice.
    pub file_index: usize,
    /// Zero-based document index in the file.
    pub document: usize,
    /// Index in `items` when the object is inside a `kind: List`.
    pub item: Option<usize>,
    /// YAML path of the image field, e.g. `spec.template.spec.containers[0].image`.
    pub path: String,
    /// Byte range of the scalar token in the file, quotes included, node
    /// properties (`!!str`, `&anchor`) excluded.
    pub span: Range<usize>,
    pub style: ScalarStyle,
    /// The decoded image string.
    pub value: String,
    /// When the scalar defines an anchor (`&img nginx:1.0`): the places that
    /// alias it (`*img`), which an edit of it changes too. See
    /// [`super::EditOptions::edit_shared_anchor`].
    pub shared_with: Vec<String>,
}

impl Located {
    pub fn site(&self) -> Site {
        Site {
            location: DocLocation {
                file: self.file.clone(),
                document: self.document,
                item: self.item,
            },
            path: self.path.clone(),
        }
    }
}

/// A successful search: the image field, plus the files that were skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    pub located: Located,
    pub warnings: Vec<Warning>,
    /// (documents, nodes) of the file holding the image, for the edit's self-check.
    pub(crate) shape: (usize, usize),
    /// The text of the document holding the image (from the start of its first line to the
    /// end of its last token) and its node count, so the self-check can re-parse just it.
    pub(crate) document: Option<(Range<usize>, usize)>,
}

/// Locates the image of `target` in `files` (`(name, contents)` pairs).
/// Pure: the names are only used in results and messages.
pub fn find_workload_image<N: AsRef<str>>(
    files: &[(N, &str)],
    target: &WorkloadTarget,
) -> Result<Search, EditError> {
    target.workload_kind().map_err(EditError::InvalidTarget)?;
    let mut warnings = Vec::new();
    let mut parsed = Vec::with_capacity(files.len());
    for (file_index, (name, text)) in files.iter().enumerate() {
        let name = name.as_ref();
        match yaml::parse_stream(text) {
            Ok(stream) => parsed.push((name, file_index, *text, stream)),
            Err(error) => warnings.push(Warning {
                file: name.to_owned(),
                message: error.to_string(),
            }),
        }
    }
    let parsed: Vec<(&str, usize, &str, &Stream)> = parsed
        .iter()
        .map(|(name, index, text, stream)| (*name, *index, *text, stream))
        .collect();
    find_in_parsed(&parsed, target, warnings)
}

/// [`find_workload_image`] on files already parsed: `(name, index, text, stream)`.
pub(crate) fn find_in_parsed(
    files: &[(&str, usize, &str, &Stream)],
    target: &WorkloadTarget,
    warnings: Vec<Warning>,
) -> Result<Search, EditError> {
    let query = Query {
        kind: target.workload_kind().map_err(EditError::InvalidTarget)?,
        name: &target.name,
        container: &target.container,
        // An empty namespace (e.g. an unset field of a resource) means none.
        namespace: target.namespace.as_deref().filter(|ns| !ns.is_empty()),
    };
    let mut candidates = Vec::new();
    for &(name, file_index, text, stream) in files {
        let file = FileCtx {
            name,
            index: file_index,
            text,
            stream,
        };
        for (document, &root) in stream.documents.iter().enumerate() {
            if stream.get_str(root, "kind") == Some("List") {
                if let Lookup::Found(items) = stream.get(root, "items")
                    && let NodeKind::Sequence(items) = &stream.node(items).kind
                {
                    for (item, &object) in items.iter().enumerate() {
                        file.consider(object, document, Some(item), &query, &mut candidates);
                    }
                }
            } else {
                file.consider(root, document, None, &query, &mut candidates);
            }
        }
    }
    let mut search = select(candidates, &query, target, warnings)?;
    let file = files.iter().find(|f| f.1 == search.located.file_index);
    search.shape = file.map_or((0, 0), |f| (f.3.documents.len(), f.3.nodes.len()));
    search.document = file.and_then(|&(_, _, text, stream)| {
        let d = search.located.document;
        let root = *stream.documents.get(d)?;
        // Nodes are stored as they complete, so a document's root is its last node.
        let first = match d {
            0 => 0,
            _ => *stream.documents.get(d - 1)? + 1,
        };
        let start = text[..stream.node(root).span.start]
            .rfind('\n')
            .map_or(0, |i| i + 1);
        let end = stream.end_of(text, root);
        (start <= end).then_some((start..end, root + 1 - first))
    });
    Ok(search)
}

/// The target with its kind resolved.
struct Query<'a> {
    kind: WorkloadKind,
    name: &'a str,
    container: &'a str,
    namespace: Option<&'a str>,
}

/// One object whose kind and name match the target.
struct Candidate {
    location: DocLocation,
    file_index: usize,
    namespace: Option<String>,
    containers: Vec<String>,
    note: Option<String>,
    sites: Vec<SiteEval>,
}

/// One `image` field of a container with the target's name.
enum SiteEval {
    Usable {
        path: String,
        span: Range<usize>,
        style: ScalarStyle,
        value: String,
        shared_with: Vec<String>,
    },
    Unsupported {
        path: String,
        reason: String,
    },
}

impl SiteEval {
    fn path(&self) -> &str {
        match self {
            Self::Usable { path, .. } | Self::Unsupported { path, .. } => path,
        }
    }
}

struct FileCtx<'a> {
    name: &'a str,
    index: usize,
    text: &'a str,
    stream: &'a Stream,
}

impl FileCtx<'_> {
    fn consider(
        &self,
        object: NodeId,
        document: usize,
        item: Option<usize>,
        query: &Query<'_>,
        out: &mut Vec<Candidate>,
    ) {
        let stream = self.stream;
        if stream.get_str(object, "kind") != Some(query.kind.as_str()) {
            return;
        }
        let Lookup::Found(metadata) = stream.get(object, "metadata") else {
            return;
        };
        if stream.get_str(metadata, "name") != Some(query.name) {
            return;
        }
        let namespace = stream
            .get_str(metadata, "namespace")
            .filter(|ns| !ns.is_empty())
            .map(str::to_owned);
        let prefix = item.map(|i| format!("items[{i}].")).unwrap_or_default();
        let mut candidate = Candidate {
            location: DocLocation {
                file: self.name.to_owned(),
                document,
                item,
            },
            file_index: self.index,
            namespace,
            containers: Vec::new(),
            note: None,
            sites: Vec::new(),
        };
        self.evaluate(object, &prefix, query, &mut candidate);
        out.push(candidate);
    }

    /// Walks to the pod spec and collects the containers of the object.
    fn evaluate(&self, object: NodeId, prefix: &str, query: &Query<'_>, c: &mut Candidate) {
        let stream = self.stream;
        let mut node = object;
        let mut path = prefix.trim_end_matches('.').to_owned();
        for key in query.kind.pod_spec_path() {
            push_key(&mut path, key);
            match self.step(node, key) {
                Step::Node(next) => node = next,
                Step::Absent => {
                    c.note = Some(format!("it has no {path}"));
                    return;
                }
                Step::Blocked(reason) => {
                    // The container may be behind this; surface it rather
                    // than report a misleading "not found".
                    c.sites.push(SiteEval::Unsupported { path, reason });
                    return;
                }
            }
        }
        let pod_spec_path = path;
        for field in ["containers", "initContainers"] {
            let mut path = pod_spec_path.clone();
            push_key(&mut path, field);
            let list = match self.step(node, field) {
                Step::Node(list) => list,
                Step::Absent => continue,
                Step::Blocked(reason) => {
                    c.sites.push(SiteEval::Unsupported { path, reason });
                    continue;
                }
            };
            let NodeKind::Sequence(items) = &stream.node(list).kind else {
                continue;
            };
            for (index, &container) in items.iter().enumerate() {
                let Some(name) = stream.get_str(container, "name") else {
                    continue;
                };
                c.containers.push(name.to_owned());
                if name != query.container {
                    continue;
                }
                let path = format!("{path}[{index}].image");
                match stream.get(container, "image") {
                    Lookup::Found(image) => c.sites.push(self.image_site(image, path)),
                    Lookup::Duplicate => c.sites.push(SiteEval::Unsupported {
                        path,
                        reason: "the container has more than one image key".to_owned(),
                    }),
                    Lookup::Missing | Lookup::NotAMapping => {
                        c.note = Some(format!("container {name:?} has no image field"));
                    }
                }
            }
        }
    }

    fn step(&self, node: NodeId, key: &str) -> Step {
        match self.stream.get(node, key) {
            Lookup::Found(next) => match &self.stream.node(next).kind {
                NodeKind::Alias => Step::Blocked(format!(
                    "{key:?} is a YAML alias, which is not followed because editing the \
                     anchored value would change every object that uses it"
                )),
                NodeKind::Mapping(_) | NodeKind::Sequence(_) => Step::Node(next),
                NodeKind::Scalar { .. } => Step::Absent,
            },
            Lookup::Duplicate => Step::Blocked(format!("the key {key:?} appears more than once")),
            Lookup::Missing | Lookup::NotAMapping => Step::Absent,
        }
    }

    fn image_site(&self, image: NodeId, path: String) -> SiteEval {
        match scalar_token_of(self.text, self.stream, image, "the image") {
            Ok(token) => SiteEval::Usable {
                path,
                span: token.span,
                style: token.style,
                value: token.value,
                shared_with: token.shared_with,
            },
            Err(reason) => SiteEval::Unsupported { path, reason },
        }
    }
}

/// An editable string scalar: its token, quoting style and decoded value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScalarToken {
    /// Byte range of the token, quotes included, node properties excluded.
    pub span: Range<usize>,
    pub style: ScalarStyle,
    pub value: String,
    /// The aliases of the anchor this scalar defines, if any.
    pub shared_with: Vec<String>,
}

/// Checks that node `id` of `stream` (parsed from `text`) is a string scalar
/// that can be rewritten in place, and returns its token. `what` names the
/// value in the reason given otherwise ("the image", "canary.image.tag").
///
/// Refused: aliases (editing the anchored value would change every user of
/// it), collections, nulls, non-string YAML tags, block scalars, and tokens
/// whose position cannot be pinned down exactly.
pub(crate) fn scalar_token_of(
    text: &str,
    stream: &Stream,
    id: NodeId,
    what: &str,
) -> Result<ScalarToken, String> {
    let node = stream.node(id);
    let (value, raw_style, tag) = match &node.kind {
        NodeKind::Scalar {
            value, style, tag, ..
        } => (value, *style, tag),
        NodeKind::Alias => {
            return Err(format!(
                "{what} is a YAML alias; edit the anchored value instead, since it may be \
                 shared with other objects"
            ));
        }
        NodeKind::Mapping(_) | NodeKind::Sequence(_) => {
            return Err(format!("{what} is not a string"));
        }
    };
    if is_null(value, raw_style) {
        return Err(format!("{what} is empty"));
    }
    if let Some(tag) = tag
        && !matches!(tag.as_str(), "tag:yaml.org,2002:str" | "!")
    {
        return Err(format!("{what} has the YAML tag {tag}"));
    }
    let style = match raw_style {
        RawStyle::Plain => ScalarStyle::Plain,
        RawStyle::SingleQuoted => ScalarStyle::SingleQuoted,
        RawStyle::DoubleQuoted => ScalarStyle::DoubleQuoted,
        RawStyle::Literal | RawStyle::Folded => {
            return Err(format!(
                "{what} is a block scalar ('|' or '>'); write it as a plain or quoted string"
            ));
        }
    };
    let unknown = || "its position in the file could not be determined".to_owned();
    let span = yaml::scalar_token(text, node).ok_or_else(unknown)?;
    if !token_matches(&text[span.clone()], style, value) {
        return Err(unknown());
    }
    Ok(ScalarToken {
        span,
        style,
        value: value.clone(),
        shared_with: stream.aliases_of(id),
    })
}

enum Step {
    Node(NodeId),
    Absent,
    Blocked(String),
}

fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

/// Sanity check that the parser's span really is the token: the edit must
/// never overwrite anything but the image.
pub(crate) fn token_matches(token: &str, style: ScalarStyle, value: &str) -> bool {
    let quoted = |q: char| token.len() >= 2 && token.starts_with(q) && token.ends_with(q);
    match style {
        ScalarStyle::DoubleQuoted => quoted('"'),
        ScalarStyle::SingleQuoted => quoted('\''),
        // A plain scalar spanning lines is folded: line breaks and the
        // indentation around them become single spaces.
        ScalarStyle::Plain => {
            let multi_line = token.contains(['\n', '\r']);
            let untrimmed = token.trim() == token;
            token == value
                || (multi_line
                    && untrimmed
                    && token.split_whitespace().eq(value.split_whitespace()))
        }
    }
}

fn select(
    candidates: Vec<Candidate>,
    query: &Query<'_>,
    target: &WorkloadTarget,
    warnings: Vec<Warning>,
) -> Result<Search, EditError> {
    // Rule 1: drop objects explicitly in another namespace.
    let (in_scope, elsewhere): (Vec<_>, Vec<_>) =
        candidates
            .into_iter()
            .partition(|c| match (query.namespace, &c.namespace) {
                (Some(wanted), Some(ns)) => wanted == ns,
                _ => true,
            });
    if in_scope.is_empty() {
        let mut other_namespaces: Vec<String> =
            elsewhere.into_iter().filter_map(|c| c.namespace).collect();
        other_namespaces.sort();
        other_namespaces.dedup();
        return Err(EditError::TargetNotFound {
            target: Box::new(target.clone()),
            reason: NotFound::NoWorkload { other_namespaces },
            skipped: warnings,
        });
    }

    // Rule 2: keep objects that have the container's image field.
    let (mut with_image, without): (Vec<_>, Vec<_>) =
        in_scope.into_iter().partition(|c| !c.sites.is_empty());
    if with_image.is_empty() {
        let workloads = without
            .into_iter()
            .map(|c| WorkloadSummary {
                location: c.location,
                namespace: c.namespace,
                containers: c.containers,
                note: c.note,
            })
            .collect();
        return Err(EditError::TargetNotFound {
            target: Box::new(target.clone()),
            reason: NotFound::NoContainer { workloads },
            skipped: warnings,
        });
    }

    // Rule 3: an explicit namespace match beats an unstated namespace.
    if let Some(wanted) = query.namespace
        && with_image
            .iter()
            .any(|c| c.namespace.as_deref() == Some(wanted))
    {
        with_image.retain(|c| c.namespace.as_deref() == Some(wanted));
    }

    // Rule 4: exactly one image field.
    let mut sites: Vec<(DocLocation, usize, SiteEval)> = with_image
        .into_iter()
        .flat_map(|c| {
            let (location, file_index) = (c.location, c.file_index);
            c.sites
                .into_iter()
                .map(move |eval| (location.clone(), file_index, eval))
        })
        .collect();
    if sites.len() > 1 {
        return Err(EditError::Ambiguous {
            target: Box::new(target.clone()),
            sites: sites
                .iter()
                .map(|(location, _, eval)| Site {
                    location: location.clone(),
                    path: eval.path().to_owned(),
                })
                .collect(),
        });
    }
    let Some((location, file_index, eval)) = sites.pop() else {
        // Unreachable in practice (with_image is non-empty and each entry has
        // a site), but an error beats a panic.
        return Err(EditError::TargetNotFound {
            target: Box::new(target.clone()),
            reason: NotFound::NoWorkload {
                other_namespaces: Vec::new(),
            },
            skipped: warnings,
        });
    };
    match eval {
        SiteEval::Usable {
            path,
            span,
            style,
            value,
            shared_with,
        } => Ok(Search {
            located: Located {
                file: location.file,
                file_index,
                document: location.document,
                item: location.item,
                path,
                span,
                style,
                value,
                shared_with,
            },
            warnings,
            shape: (0, 0),
            document: None,
        }),
        SiteEval::Unsupported { path, reason } => Err(EditError::Unsupported {
            target: Box::new(target.clone()),
            site: Site { location, path },
            reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifests::WorkloadKind;

    fn target(kind: WorkloadKind, name: &str, container: &str) -> WorkloadTarget {
        WorkloadTarget::new(kind, name, container)
    }

    fn find(text: &str, t: &WorkloadTarget) -> Result<Search, EditError> {
        find_workload_image(&[("m.yaml", text)], t)
    }

    fn token<'a>(text: &'a str, s: &Search) -> &'a str {
        &text[s.located.span.clone()]
    }

    const DEPLOY: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  template:
    spec:
      initContainers:
        - name: migrate
          image: 'app:1.0'
      containers:
        - name: app
          image: \"app:1.0\" # pinned
        - name: sidecar
          image: proxy:2
";

    #[test]
    fn finds_containers_and_init_containers() {
        let t = target(WorkloadKind::Deployment, "web", "app");
        let s = find(DEPLOY, &t).unwrap();
        assert_eq!(token(DEPLOY, &s), "\"app:1.0\"");
        assert_eq!(s.located.style, ScalarStyle::DoubleQuoted);
        assert_eq!(s.located.value, "app:1.0");
        assert_eq!(s.located.path, "spec.template.spec.containers[0].image");

        let t = target(WorkloadKind::Deployment, "web", "migrate");
        let s = find(DEPLOY, &t).unwrap();
        assert_eq!(token(DEPLOY, &s), "'app:1.0'");
        assert_eq!(s.located.style, ScalarStyle::SingleQuoted);
        assert_eq!(s.located.path, "spec.template.spec.initContainers[0].image");

        let t = target(WorkloadKind::Deployment, "web", "sidecar");
        let s = find(DEPLOY, &t).unwrap();
        assert_eq!(token(DEPLOY, &s), "proxy:2");
        assert_eq!(s.located.style, ScalarStyle::Plain);
    }

    #[test]
    fn missing_workload_and_missing_container_are_told_apart() {
        let err = find(DEPLOY, &target(WorkloadKind::Deployment, "api", "app")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no Deployment named \"api\" was found in the manifests"
        );
        let err = find(DEPLOY, &target(WorkloadKind::StatefulSet, "web", "app")).unwrap_err();
        assert!(matches!(
            err,
            EditError::TargetNotFound {
                reason: NotFound::NoWorkload { .. },
                ..
            }
        ));
        let err = find(DEPLOY, &target(WorkloadKind::Deployment, "web", "db")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Deployment/web has no container or init container named \"db\" with an image: \
             m.yaml (document 1) has containers \"app\", \"sidecar\", \"migrate\""
        );
    }

    #[test]
    fn container_without_image_is_reported() {
        let text = "kind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: a\n";
        let err = find(text, &target(WorkloadKind::Pod, "p", "a")).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("has containers \"a\" (container \"a\" has no image field)"),
            "{err}"
        );
    }

    #[test]
    fn flow_style_is_supported() {
        let text = "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, image: \"x:1\"}, {name: b, image: y:2}]}\n";
        let s = find(text, &target(WorkloadKind::Pod, "p", "b")).unwrap();
        assert_eq!(token(text, &s), "y:2");
        let s = find(text, &target(WorkloadKind::Pod, "p", "a")).unwrap();
        assert_eq!(token(text, &s), "\"x:1\"");
    }

    #[test]
    fn namespace_rule() {
        let text = "\
kind: Deployment
metadata: {name: web, namespace: a}
spec: {template: {spec: {containers: [{name: app, image: 'x:1'}]}}}
---
kind: Deployment
metadata: {name: web}
spec: {template: {spec: {containers: [{name: app, image: 'x:2'}]}}}
---
kind: Deployment
metadata: {name: web, namespace: b}
spec: {template: {spec: {containers: [{name: app, image: 'x:3'}]}}}
";
        let t = target(WorkloadKind::Deployment, "web", "app");
        let err = find(text, &t).unwrap_err();
        let EditError::Ambiguous { sites, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(sites.len(), 3);
        assert!(
            err.to_string().contains(
                "m.yaml (document 1) at spec.template.spec.containers[0].image; m.yaml (document 2)"
            ),
            "{err}"
        );

        let s = find(text, &t.clone().with_namespace("b")).unwrap();
        assert_eq!(s.located.value, "x:3");
        // No object states namespace "c": the one without a namespace wins.
        let s = find(text, &t.clone().with_namespace("c")).unwrap();
        assert_eq!(s.located.value, "x:2");
    }

    #[test]
    fn kind_is_resolved_from_the_given_text() {
        // Kinds come from CLI arguments and resource fields as typed.
        let s = find(DEPLOY, &WorkloadTarget::new("deploy", "web", "app")).unwrap();
        assert_eq!(s.located.value, "app:1.0");
        let s = find(DEPLOY, &WorkloadTarget::new("DEPLOYMENT", "web", "app")).unwrap();
        assert_eq!(s.located.value, "app:1.0");
        let err = find(DEPLOY, &WorkloadTarget::new("Service", "web", "app")).unwrap_err();
        assert!(matches!(err, EditError::InvalidTarget(_)));
        assert!(
            err.to_string()
                .starts_with("invalid target: unsupported workload kind \"Service\"")
        );
        // An empty namespace is no namespace.
        let t = WorkloadTarget::new("Deployment", "web", "app").with_namespace("");
        assert_eq!(t.to_string(), "container \"app\" of Deployment/web");
        assert!(find(DEPLOY, &t).is_ok());
    }

    #[test]
    fn namespace_only_elsewhere_is_reported() {
        let text = "kind: Pod\nmetadata: {name: p, namespace: a}\nspec: {containers: [{name: c, image: x}]}\n";
        let t = target(WorkloadKind::Pod, "p", "c").with_namespace("z");
        let err = find(text, &t).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no Pod named \"p\" in namespace \"z\" (or without a namespace) was found in the \
             manifests; it exists only in namespace(s) \"a\""
        );
    }

    #[test]
    fn patches_without_image_do_not_make_it_ambiguous() {
        let base = "kind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {containers: [{name: app, image: x:1}]}}}\n";
        let patch = "kind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {containers: [{name: app, resources: {}}]}}}\n";
        let s = find_workload_image(
            &[("patch.yaml", patch), ("base.yaml", base)],
            &target(WorkloadKind::Deployment, "web", "app"),
        )
        .unwrap();
        assert_eq!(s.located.file, "base.yaml");
        assert_eq!(s.located.file_index, 1);
    }

    #[test]
    fn aliases_block_scalars_and_tags_are_refused() {
        let t = target(WorkloadKind::Pod, "p", "a");
        for (text, needle) in [
            (
                "kind: Pod\nmetadata: {name: p, labels: {x: &i app:1}}\nspec: {containers: [{name: a, image: *i}]}\n",
                "alias",
            ),
            (
                "kind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: a\n    image: |\n      app:1\n",
                "block scalar",
            ),
            (
                "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, image: !!int 5}]}\n",
                "YAML tag",
            ),
            (
                "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, image: }]}\n",
                "empty",
            ),
            (
                "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, image: [x]}]}\n",
                "not a string",
            ),
            (
                "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, image: x, image: y}]}\n",
                "more than one image",
            ),
            (
                "kind: Pod\nmetadata: {name: p, annotations: &s {containers: [{name: a, image: x}]}}\nspec: *s\n",
                "alias",
            ),
        ] {
            let err = find(text, &t).unwrap_err();
            assert!(
                matches!(err, EditError::Unsupported { .. }),
                "{text}: {err}"
            );
            assert!(err.to_string().contains(needle), "{err}");
        }
    }

    #[test]
    fn explicit_str_tag_and_anchor_are_skipped_in_the_span() {
        let text = "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, image: !!str &img \"x:1\"}]}\n";
        let s = find(text, &target(WorkloadKind::Pod, "p", "a")).unwrap();
        assert_eq!(token(text, &s), "\"x:1\"");
    }

    #[test]
    fn unparsable_files_become_warnings() {
        let files = [("bad.yaml", "a: b: c\n"), ("good.yaml", DEPLOY)];
        let s =
            find_workload_image(&files, &target(WorkloadKind::Deployment, "web", "app")).unwrap();
        assert_eq!(s.warnings.len(), 1);
        assert_eq!(s.warnings[0].file, "bad.yaml");
        assert!(
            s.warnings[0]
                .to_string()
                .starts_with("skipped bad.yaml: invalid YAML at line 1")
        );

        let err = find_workload_image(&files, &target(WorkloadKind::Job, "x", "y")).unwrap_err();
        assert!(
            err.to_string()
                .contains("1 file(s) were skipped and not searched: skipped bad.yaml"),
            "{err}"
        );
    }

    #[test]
    fn malformed_structures_never_panic() {
        let t = target(WorkloadKind::Deployment, "web", "app");
        for text in [
            "",
            "---\n...\n",
            "kind: Deployment\n",
            "kind: Deployment\nmetadata: web\n",
            "kind: Deployment\nmetadata: {name: web}\nspec: 3\n",
            "kind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {containers: 7}}}\n",
            "kind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {containers: [1, [2], {name: [x]}]}}}\n",
            "kind: List\nitems: 5\n",
            "kind: List\nitems: [1, {kind: Deployment}]\n",
            "- kind: Deployment\n",
            "kind: [Deployment]\n",
            "? [a]\n: b\n",
        ] {
            assert!(find(text, &t).is_err(), "{text}");
        }
    }
}
