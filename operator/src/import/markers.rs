//! Flux setter markers (`# {"$imagepolicy": "<namespace>:<policy>[:tag|:name]"}`): where they
//! are, what the marked value is, and what surrounds it — enough to choose the imagewatch target
//! that writes the same value. Also the `--rewrite-markers` text edit.

use std::collections::BTreeMap;

use crate::manifests::yaml::{self, NodeId, NodeKind, Stream};

/// What a marked value holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MarkerPart {
    /// The full image (`repo:tag`).
    Full,
    /// Only the tag (`:tag`).
    Tag,
    /// Only the repository (`:name`); a tag change leaves it alone.
    Name,
    /// Another suffix (`:digest`, …), written after the policy.
    Other(String),
}

/// One step of a key path from a document root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathStep {
    /// A mapping key.
    Key(String),
    /// A sequence index.
    Index(usize),
}

/// What surrounds a marked value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MarkerContext {
    /// The `image` of a container of a workload.
    Workload {
        /// Workload kind.
        kind: String,
        /// `metadata.name`.
        name: String,
        /// `metadata.namespace`, if written.
        namespace: Option<String>,
        /// The container's name.
        container: String,
    },
    /// A kustomization's `images[]` entry.
    Kustomization {
        /// The entry's `name`.
        image: String,
    },
    /// Anywhere else.
    Other {
        /// The file holds one document only (a key path then names one place).
        single_document: bool,
    },
}

/// One marked value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marker {
    /// File, relative to the imported directory.
    pub file: String,
    /// Line number (1-based).
    pub line: usize,
    /// `<namespace>:<name>` of the ImagePolicy.
    pub policy: String,
    /// What the value holds.
    pub part: MarkerPart,
    /// Key path of the value from its document's root.
    pub path: Vec<PathStep>,
    /// The value as it is now.
    pub value: String,
    /// What surrounds it.
    pub context: MarkerContext,
}

/// The marker a comment carries: (`ns:name`, part), if it is one.
fn parse_comment(comment: &str) -> Option<(String, MarkerPart)> {
    let body = comment.strip_prefix('#')?.trim();
    let body = body.strip_prefix('{')?.strip_suffix('}')?.trim();
    let (key, value) = body.split_once(':')?;
    if key.trim() != "\"$imagepolicy\"" {
        return None;
    }
    let value = value.trim().strip_prefix('"')?.strip_suffix('"')?;
    let mut parts = value.splitn(3, ':');
    let namespace = parts.next()?;
    let name = parts.next()?;
    if namespace.is_empty() || name.is_empty() {
        return None;
    }
    let part = match parts.next() {
        None => MarkerPart::Full,
        Some("tag") => MarkerPart::Tag,
        Some("name") => MarkerPart::Name,
        Some(other) => MarkerPart::Other(other.to_owned()),
    };
    Some((format!("{namespace}:{name}"), part))
}

/// Every marked value in one file.
///
/// # Errors
///
/// A sentence saying why the file could not be read for markers (it does not parse).
pub fn find_markers(file: &str, text: &str) -> Result<Vec<Marker>, String> {
    let stream = yaml::parse_stream(text)
        .map_err(|e| format!("holds setter markers but is not valid YAML ({e})"))?;
    let single_document = stream.documents.len() == 1;
    let mut found = Vec::new();
    for &root in &stream.documents {
        // Iterative walk: deeply nested input cannot overflow the stack.
        let mut stack: Vec<(NodeId, Vec<PathStep>)> = vec![(root, Vec::new())];
        while let Some((id, path)) = stack.pop() {
            match &stream.node(id).kind {
                NodeKind::Mapping(entries) => {
                    for &(key, value) in entries.iter().rev() {
                        if let Some(key) = stream.scalar(key) {
                            let mut next = path.clone();
                            next.push(PathStep::Key(key.to_owned()));
                            stack.push((value, next));
                        }
                    }
                }
                NodeKind::Sequence(items) => {
                    for (index, &item) in items.iter().enumerate().rev() {
                        let mut next = path.clone();
                        next.push(PathStep::Index(index));
                        stack.push((item, next));
                    }
                }
                NodeKind::Scalar { value, .. } => {
                    let node = stream.node(id);
                    let Some(span) = yaml::scalar_token(text, node) else {
                        continue;
                    };
                    let line_end = text[span.end..]
                        .find('\n')
                        .map_or(text.len(), |i| span.end + i);
                    let rest = text[span.end..line_end].trim();
                    let Some((policy, part)) = parse_comment(rest) else {
                        continue;
                    };
                    let line = text[..span.start].matches('\n').count() + 1;
                    let context = context_of(&stream, root, &path, single_document);
                    found.push(Marker {
                        file: file.to_owned(),
                        line,
                        policy,
                        part,
                        path,
                        value: value.clone(),
                        context,
                    });
                }
                NodeKind::Alias => {}
            }
        }
    }
    found.sort_by_key(|m| m.line);
    Ok(found)
}

/// Follows `path` from `root`.
fn node_at(stream: &Stream, root: NodeId, path: &[PathStep]) -> Option<NodeId> {
    let mut id = root;
    for step in path {
        id = match (&stream.node(id).kind, step) {
            (NodeKind::Mapping(entries), PathStep::Key(key)) => entries
                .iter()
                .find(|&&(k, _)| stream.scalar(k) == Some(key))
                .map(|&(_, v)| v)?,
            (NodeKind::Sequence(items), PathStep::Index(index)) => *items.get(*index)?,
            _ => return None,
        };
    }
    Some(id)
}

fn keys(path: &[PathStep]) -> Vec<Option<&str>> {
    path.iter()
        .map(|step| match step {
            PathStep::Key(key) => Some(key.as_str()),
            PathStep::Index(_) => None,
        })
        .collect()
}

fn context_of(
    stream: &Stream,
    root: NodeId,
    path: &[PathStep],
    single_document: bool,
) -> MarkerContext {
    let kind = stream.get_str(root, "kind").unwrap_or("");
    let k = keys(path);
    // The pod spec's place for each workload kind.
    let pod_spec: &[&str] = match kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => {
            &["spec", "template", "spec"]
        }
        "CronJob" => &["spec", "jobTemplate", "spec", "template", "spec"],
        "Pod" => &["spec"],
        _ => &[],
    };
    let n = pod_spec.len();
    if n > 0
        && k.len() == n + 3
        && k[..n].iter().zip(pod_spec).all(|(a, b)| *a == Some(*b))
        && matches!(k[n], Some("containers" | "initContainers"))
        && k[n + 1].is_none()
        && k[n + 2] == Some("image")
    {
        let container = node_at(stream, root, &path[..n + 2])
            .and_then(|c| stream.get_str(c, "name"))
            .map(str::to_owned);
        let metadata = node_at(stream, root, &[PathStep::Key("metadata".into())]);
        let name = metadata.and_then(|m| stream.get_str(m, "name"));
        if let (Some(container), Some(name)) = (container, name) {
            return MarkerContext::Workload {
                kind: kind.to_owned(),
                name: name.to_owned(),
                namespace: metadata
                    .and_then(|m| stream.get_str(m, "namespace"))
                    .map(str::to_owned),
                container,
            };
        }
    }
    if kind == "Kustomization"
        && k.len() == 3
        && k[0] == Some("images")
        && k[1].is_none()
        && matches!(k[2], Some("newTag" | "newName"))
        && let Some(image) =
            node_at(stream, root, &path[..2]).and_then(|entry| stream.get_str(entry, "name"))
    {
        return MarkerContext::Kustomization {
            image: image.to_owned(),
        };
    }
    MarkerContext::Other { single_document }
}

/// A key path in the form Helm targets take: `a.b[0].c`, with `\.` for a dot inside a key.
#[must_use]
pub fn dotted(path: &[PathStep]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            PathStep::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&key.replace('.', "\\."));
            }
            PathStep::Index(index) => {
                out.push_str(&format!("[{index}]"));
            }
        }
    }
    out
}

/// Rewrites the Flux markers on the given lines (1-based) into imagewatch markers naming the
/// given watch (`<namespace>:<name>`), keeping any `:tag`/`:name` suffix. Everything else,
/// line endings included, is left byte for byte. Returns `None` when nothing changed.
#[must_use]
pub fn rewrite_markers(text: &str, lines: &BTreeMap<usize, String>) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut changed = false;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let Some(watch) = lines.get(&(index + 1)) else {
            out.push_str(line);
            continue;
        };
        let body_end = line.trim_end_matches(['\n', '\r']).len();
        let (body, ending) = line.split_at(body_end);
        let rewritten = body.rfind('#').and_then(|hash| {
            let (policy, part) = parse_comment(body[hash..].trim_end())?;
            let _ = policy;
            let suffix = match part {
                MarkerPart::Full => String::new(),
                MarkerPart::Tag => ":tag".to_owned(),
                MarkerPart::Name => ":name".to_owned(),
                MarkerPart::Other(_) => return None,
            };
            Some(format!(
                "{}# {{\"$imagewatch\": \"{watch}{suffix}\"}}",
                &body[..hash]
            ))
        });
        match rewritten {
            Some(new) => {
                changed = true;
                out.push_str(&new);
                out.push_str(ending);
            }
            None => out.push_str(line),
        }
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_found_with_their_context() {
        let text = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  namespace: default
spec:
  template:
    spec:
      containers:
        - name: podinfod
          image: ghcr.io/stefanprodan/podinfo:5.0.0 # {\"$imagepolicy\": \"flux-system:podinfo\"}
";
        let found = find_markers("apps/podinfo.yaml", text).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].policy, "flux-system:podinfo");
        assert_eq!(found[0].line, 11);
        assert_eq!(found[0].part, MarkerPart::Full);
        assert_eq!(
            found[0].context,
            MarkerContext::Workload {
                kind: "Deployment".into(),
                name: "podinfo".into(),
                namespace: Some("default".into()),
                container: "podinfod".into(),
            }
        );

        let values = "image:\n  repository: ghcr.io/x/y # {\"$imagepolicy\": \"a:b:name\"}\n  \
                      tag: 1.0.0 # {\"$imagepolicy\": \"a:b:tag\"}\n";
        let found = find_markers("values.yaml", values).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[1].part, MarkerPart::Tag);
        assert_eq!(dotted(&found[1].path), "image.tag");
        assert_eq!(
            found[1].context,
            MarkerContext::Other {
                single_document: true
            }
        );
    }

    #[test]
    fn rewriting_keeps_everything_but_the_marker() {
        let text = "a: x:1 # {\"$imagepolicy\": \"ns:p\"}\r\nb: 2\ntag: 1 #   {\"$imagepolicy\": \"ns:p:tag\"}";
        let lines = BTreeMap::from([(1, "ns:w".to_owned()), (3, "ns:w".to_owned())]);
        assert_eq!(
            rewrite_markers(text, &lines).unwrap(),
            "a: x:1 # {\"$imagewatch\": \"ns:w\"}\r\nb: 2\ntag: 1 # {\"$imagewatch\": \"ns:w:tag\"}"
        );
        assert_eq!(rewrite_markers("b: 2\n", &lines), None);
    }
}
