//! Text surgery shared by the target kinds that may add or remove lines
//! (Kustomize entries, Argo CD source files): splicing several changes into
//! one file, finding line boundaries, and rendering the few small YAML values
//! that are ever inserted, in the layout the file already uses.
//!
//! Everything works on byte offsets into the original text, so bytes outside
//! the splices are untouched by construction: line endings (CRLF stays CRLF,
//! and inserted lines use the file's own), a byte order mark, comments and
//! other documents.

use std::ops::Range;

use super::EditError;
use super::edit::render_scalar;
use super::locate::{Located, ScalarStyle, ScalarToken, scalar_token_of};
use super::yaml::{self, Lookup, NodeId, NodeKind, Stream, is_null};

/// One parsed file being edited.
pub(crate) struct Doc<'a> {
    /// File name as given by the caller.
    pub name: &'a str,
    /// Index of the file in the caller's slice.
    pub index: usize,
    pub text: &'a str,
    pub stream: Stream,
}

impl<'a> Doc<'a> {
    /// Parses a file the target lives in; unlike files merely searched, a
    /// syntax error here is an error.
    pub fn parse(name: &'a str, index: usize, text: &'a str) -> Result<Self, EditError> {
        let stream = yaml::parse_stream(text).map_err(|e| EditError::InvalidFile {
            file: name.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            name,
            index,
            text,
            stream,
        })
    }

    pub fn invalid(&self, reason: impl Into<String>) -> EditError {
        EditError::InvalidFile {
            file: self.name.to_owned(),
            reason: reason.into(),
        }
    }

    /// Root of the first document, `None` for an empty file (no document, or
    /// only comments, or an empty document).
    pub fn root(&self) -> Option<NodeId> {
        let root = *self.stream.documents.first()?;
        match &self.stream.node(root).kind {
            NodeKind::Scalar { value, style, .. } if is_null(value, *style) => None,
            _ => Some(root),
        }
    }

    /// Whether `id` is a null scalar (`key:`, `key: ~`).
    pub fn is_null(&self, id: NodeId) -> bool {
        matches!(&self.stream.node(id).kind,
            NodeKind::Scalar { value, style, .. } if is_null(value, *style))
    }

    /// The value of `key` in mapping `map`; `path` names the key in errors.
    pub fn get(&self, map: NodeId, key: &str, path: &str) -> Result<Option<NodeId>, EditError> {
        match self.stream.get(map, key) {
            Lookup::Found(id) => match self.stream.node(id).kind {
                NodeKind::Alias => Err(self.invalid(format!(
                    "{path} is a YAML alias, which is not followed because editing the anchored \
                     value would change every place that uses it"
                ))),
                _ => Ok(Some(id)),
            },
            Lookup::Missing => Ok(None),
            Lookup::Duplicate => {
                Err(self.invalid(format!("the key {path} appears more than once")))
            }
            Lookup::NotAMapping => Err(self.invalid(format!(
                "{} is not a mapping",
                path.rsplit_once('.')
                    .map_or("the document", |(parent, _)| parent)
            ))),
        }
    }

    /// The editable string scalar `id`; `path` names it in errors.
    pub fn scalar(&self, id: NodeId, path: &str) -> Result<ScalarToken, EditError> {
        scalar_token_of(self.text, &self.stream, id, path).map_err(|reason| self.invalid(reason))
    }

    /// A [`Located`] for a scalar of this file's first document.
    pub fn located(&self, token: &ScalarToken, path: &str) -> Located {
        Located {
            file: self.name.to_owned(),
            file_index: self.index,
            document: 0,
            item: None,
            path: path.to_owned(),
            span: token.span.clone(),
            style: token.style,
            value: token.value.clone(),
            shared_with: token.shared_with.clone(),
        }
    }

    /// Splice replacing a scalar token with `value` in the token's quoting
    /// style.
    pub fn set(&self, token: &ScalarToken, value: &str) -> Splice {
        Splice::replace(token.span.clone(), render_scalar(token.style, value))
    }

    /// The file with `splices` applied.
    pub fn apply(&self, splices: Vec<Splice>) -> Result<String, EditError> {
        apply(self.text, splices).ok_or_else(|| EditError::VerificationFailed {
            file: self.name.to_owned(),
            detail: "the planned changes overlap".to_owned(),
        })
    }

    pub fn column(&self, pos: usize) -> usize {
        column(self.text, pos)
    }

    pub fn end_of(&self, id: NodeId) -> usize {
        self.stream.end_of(self.text, id)
    }

    pub fn start_of(&self, id: NodeId) -> usize {
        item_start(self.text, &self.stream, id)
    }

    pub fn layout(&self) -> Layout {
        Layout::detect(self.text, &self.stream)
    }

    /// Appends `value` as the last item of the non-empty or flow sequence
    /// `seq`, in the sequence's style and indentation.
    pub fn append_item(&self, seq: NodeId, value: &Value) -> Result<Splice, EditError> {
        let node = self.stream.node(seq);
        let NodeKind::Sequence(items) = &node.kind else {
            return Err(self.invalid("expected a list"));
        };
        match (items.last(), node.flow) {
            (Some(&last), true) => Ok(Splice::insert(
                self.end_of(last),
                format!(", {}", flow(value)),
            )),
            (None, true) => {
                let at = after_open_bracket(self.text, &self.stream, seq)
                    .ok_or_else(|| self.invalid("cannot find the opening bracket of a list"))?;
                Ok(Splice::insert(at, flow(value)))
            }
            (Some(&last), false) => {
                let start = self.start_of(last);
                let dash = dash_column(self.text, start)
                    .ok_or_else(|| self.invalid("cannot find the indentation of a list"))?;
                let keys = match &self.stream.node(last).kind {
                    NodeKind::Mapping(_) if !self.stream.node(last).flow => self.column(start),
                    _ => dash + 2,
                };
                let layout = self.layout();
                Ok(insert_lines(
                    after_line(self.text, self.end_of(last)),
                    &layout.item(value, dash, keys),
                    layout.eol,
                ))
            }
            (None, false) => Err(self.invalid("unexpected empty block list")),
        }
    }

    /// Adds `key: value` as the last entry of `map`, or, for an empty file
    /// (`map` is `None`), as the first line of a new document at its end.
    pub fn add_entry(
        &self,
        map: Option<NodeId>,
        key: &str,
        value: &Value,
    ) -> Result<Splice, EditError> {
        let layout = self.layout();
        let Some(map) = map else {
            if self.stream.documents.len() > 1 {
                return Err(self.invalid("the first document is empty"));
            }
            let mut text = String::new();
            if !self.text.is_empty() && !self.text.ends_with('\n') {
                text.push_str(layout.eol);
            }
            text.push_str(&layout.entry(key, value, 0));
            return Ok(Splice::insert(self.text.len(), text));
        };
        let node = self.stream.node(map);
        let NodeKind::Mapping(entries) = &node.kind else {
            return Err(self.invalid("expected a mapping"));
        };
        match (entries.first(), node.flow) {
            (Some(&(last_key, last_value)), true) => {
                let last = if self.stream.node(last_value).span.is_empty() {
                    last_key
                } else {
                    last_value
                };
                Ok(Splice::insert(
                    self.end_of(last),
                    format!(", {}: {}", plain(key), flow(value)),
                ))
            }
            (None, true) => {
                let at = after_open_bracket(self.text, &self.stream, map)
                    .ok_or_else(|| self.invalid("cannot find the opening brace of a mapping"))?;
                Ok(Splice::insert(
                    at,
                    format!("{}: {}", plain(key), flow(value)),
                ))
            }
            (Some(&(first, _)), false) => {
                let col = self.column(self.stream.node(first).span.start);
                Ok(insert_lines(
                    after_line(self.text, self.end_of(map)),
                    &layout.entry(key, value, col),
                    layout.eol,
                ))
            }
            (None, false) => Err(self.invalid("unexpected empty block mapping")),
        }
    }

    /// Gives `key`, whose value `null` is empty (`key:` or `key: ~`), the
    /// collection `value` instead.
    pub fn fill_null(&self, key: NodeId, null: NodeId, value: &Value) -> Result<Splice, EditError> {
        let null_node = self.stream.node(null);
        if let Some(token) = yaml::scalar_token(self.text, null_node) {
            return Ok(Splice::replace(token, flow(value)));
        }
        let layout = self.layout();
        let key_node = self.stream.node(key);
        let key_col = self.column(key_node.span.start);
        let key_end = yaml::scalar_token(self.text, key_node).map_or(key_node.span.end, |r| r.end);
        let lines = match value {
            Value::Seq(items) => {
                let dash = key_col + layout.seq_indent;
                items
                    .iter()
                    .map(|item| layout.item(item, dash, dash + 2))
                    .collect::<String>()
            }
            Value::Map(entries) => entries
                .iter()
                .map(|(k, v)| layout.entry(k, v, key_col + layout.map_indent))
                .collect(),
            Value::Str(_) => return Err(self.invalid("expected a collection")),
        };
        Ok(insert_lines(
            after_line(self.text, key_end),
            &lines,
            layout.eol,
        ))
    }
}

/// Replace `range` of the source with `text` (an insertion when the range is
/// empty, a deletion when the text is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Splice {
    pub range: Range<usize>,
    pub text: String,
}

impl Splice {
    pub fn replace(range: Range<usize>, text: impl Into<String>) -> Self {
        Self {
            range,
            text: text.into(),
        }
    }

    pub fn insert(at: usize, text: impl Into<String>) -> Self {
        Self::replace(at..at, text)
    }

    pub fn delete(range: Range<usize>) -> Self {
        Self::replace(range, "")
    }
}

/// Applies `splices` to `source`. Insertions at the same offset keep their
/// order. `None` when two splices overlap or one is out of bounds (a bug in
/// the caller, reported rather than producing a garbled file).
///
/// Whether the file ends with a line break is a property of the file, kept
/// here once for every splice: a non-empty source without a final line break
/// gives a result without one. So whole-line splices ([`insert_lines`],
/// [`delete_lines`]) always work on lines with their break, also on the last
/// line, and two of them next to each other there cannot overlap.
pub(crate) fn apply(source: &str, mut splices: Vec<Splice>) -> Option<String> {
    // Stable: equal starts keep the caller's order; an insertion sorts before
    // a replacement starting at the same offset.
    splices.sort_by_key(|s| (s.range.start, s.range.end));
    let mut out = String::with_capacity(source.len() + 64);
    let mut pos = 0;
    for splice in &splices {
        if splice.range.start < pos || splice.range.end > source.len() {
            return None;
        }
        out.push_str(source.get(pos..splice.range.start)?);
        out.push_str(&splice.text);
        pos = splice.range.end;
    }
    out.push_str(source.get(pos..)?);
    if !source.is_empty() && !source.ends_with('\n') {
        let body = out
            .strip_suffix('\n')
            .map(|t| t.strip_suffix('\r').unwrap_or(t));
        if let Some(body) = body {
            out.truncate(body.len());
        }
    }
    Some(out)
}

/// The file's line ending: that of its first line, `\n` when it has none.
pub(crate) fn eol(text: &str) -> &'static str {
    match text.find('\n') {
        Some(i) if i > 0 && text.as_bytes()[i - 1] == b'\r' => "\r\n",
        _ => "\n",
    }
}

/// Offset of the start of the line holding `pos`.
pub(crate) fn line_start(text: &str, pos: usize) -> usize {
    text[..pos].rfind('\n').map_or(0, |i| i + 1)
}

/// Offset just after the line break ending the line that holds the byte
/// before `pos` (the line of a token ending at `pos`), and whether there was
/// a line break (there is none on a last line without a final newline).
pub(crate) fn after_line(text: &str, pos: usize) -> (usize, bool) {
    if pos > 0 && text.as_bytes()[pos - 1] == b'\n' {
        // A block scalar's span already includes its line break.
        return (pos, true);
    }
    match text[pos..].find('\n') {
        Some(i) => (pos + i + 1, true),
        None => (text.len(), false),
    }
}

/// Column (in characters) of `pos`, not counting a byte order mark.
pub(crate) fn column(text: &str, pos: usize) -> usize {
    let start = line_start(text, pos);
    text[start..pos]
        .trim_start_matches('\u{FEFF}')
        .chars()
        .count()
}

/// Whether only blanks precede `pos` on its line.
pub(crate) fn starts_line(text: &str, pos: usize) -> bool {
    text[line_start(text, pos)..pos]
        .trim_start_matches('\u{FEFF}')
        .chars()
        .all(|c| c == ' ' || c == '\t')
}

/// Column of the `-` introducing the block sequence item that starts at
/// `item_start` (the item's first token).
pub(crate) fn dash_column(text: &str, item_start: usize) -> Option<usize> {
    let start = line_start(text, item_start);
    let dash = text[start..item_start].rfind('-')?;
    Some(column(text, start + dash))
}

/// Inserts `lines` (each ending with a line break) as new lines at `at`, an
/// offset returned by [`after_line`]. After a last line without a final
/// newline a break is added in front; [`apply`] drops the one at the end, so
/// the file still ends without one.
pub(crate) fn insert_lines(at: (usize, bool), lines: &str, eol: &str) -> Splice {
    match at {
        (at, true) => Splice::insert(at, lines),
        (at, false) => Splice::insert(at, format!("{eol}{lines}")),
    }
}

/// Deletes the whole lines from the one holding `start` to the one holding
/// the byte before `end`, line break included. On a last line without a
/// final newline that is the rest of the file; [`apply`] then drops the break
/// the line before now ends with.
pub(crate) fn delete_lines(text: &str, start: usize, end: usize) -> Splice {
    Splice::delete(line_start(text, start)..after_line(text, end).0)
}

/// A small YAML value to insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Str(String),
    Seq(Vec<Value>),
    Map(Vec<(String, Value)>),
}

impl Value {
    pub fn str(s: impl Into<String>) -> Self {
        Self::Str(s.into())
    }
}

/// Indentation habits of a file, so that inserted text looks like its
/// neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Extra indentation of a nested block mapping's keys.
    pub map_indent: usize,
    /// Extra indentation of a block sequence's `-` under its key (0 is the
    /// `kubectl`/`kustomize` habit of `key:\n- item`).
    pub seq_indent: usize,
    pub eol: &'static str,
}

impl Layout {
    /// Learns the layout from the first nested block mapping and block
    /// sequence of the file; defaults are 2 and 0.
    pub fn detect(text: &str, stream: &Stream) -> Self {
        let mut map_indent = None;
        let mut seq_indent = None;
        for node in &stream.nodes {
            let NodeKind::Mapping(entries) = &node.kind else {
                continue;
            };
            if node.flow {
                continue;
            }
            for &(key, value) in entries {
                let key_col = column(text, stream.node(key).span.start);
                let value_node = stream.node(value);
                if value_node.flow {
                    continue;
                }
                match &value_node.kind {
                    NodeKind::Mapping(inner) if map_indent.is_none() => {
                        if let Some(&(first, _)) = inner.first() {
                            let col = column(text, stream.node(first).span.start);
                            map_indent = col.checked_sub(key_col).filter(|&d| d > 0);
                        }
                    }
                    NodeKind::Sequence(items) if seq_indent.is_none() => {
                        if let Some(&first) = items.first() {
                            seq_indent = dash_column(text, item_start(text, stream, first))
                                .and_then(|dash| dash.checked_sub(key_col));
                        }
                    }
                    _ => {}
                }
            }
            if map_indent.is_some() && seq_indent.is_some() {
                break;
            }
        }
        Self {
            map_indent: map_indent.unwrap_or(2),
            seq_indent: seq_indent.unwrap_or(0),
            eol: eol(text),
        }
    }

    /// `key: value` as block lines with the key at column `col`.
    pub fn entry(&self, key: &str, value: &Value, col: usize) -> String {
        let pad = " ".repeat(col);
        let key = plain(key);
        match value {
            Value::Str(s) => format!("{pad}{key}: {}{}", plain(s), self.eol),
            Value::Seq(items) if items.is_empty() => format!("{pad}{key}: []{}", self.eol),
            Value::Map(entries) if entries.is_empty() => format!("{pad}{key}: {{}}{}", self.eol),
            Value::Seq(items) => {
                let mut out = format!("{pad}{key}:{}", self.eol);
                let dash = col + self.seq_indent;
                for item in items {
                    out.push_str(&self.item(item, dash, dash + 2));
                }
                out
            }
            Value::Map(entries) => {
                let mut out = format!("{pad}{key}:{}", self.eol);
                for (k, v) in entries {
                    out.push_str(&self.entry(k, v, col + self.map_indent));
                }
                out
            }
        }
    }

    /// A block sequence item with its `-` at column `dash` and, for a
    /// mapping, its keys at column `keys`.
    pub fn item(&self, value: &Value, dash: usize, keys: usize) -> String {
        let pad = " ".repeat(dash);
        match value {
            Value::Map(entries) if !entries.is_empty() => {
                let keys = keys.max(dash + 2);
                let mut out = String::new();
                for (i, (k, v)) in entries.iter().enumerate() {
                    let line = self.entry(k, v, keys);
                    if i == 0 {
                        // `- ` takes the place of the first key's indentation.
                        out.push_str(&pad);
                        out.push('-');
                        out.push_str(&line[dash + 1..]);
                    } else {
                        out.push_str(&line);
                    }
                }
                out
            }
            other => format!("{pad}- {}{}", flow(other), self.eol),
        }
    }
}

/// `value` in flow style (`[a, b]`, `{k: v}`, a scalar).
pub(crate) fn flow(value: &Value) -> String {
    match value {
        Value::Str(s) => plain(s),
        Value::Seq(items) => {
            let items: Vec<String> = items.iter().map(flow).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Map(entries) => {
            let entries: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{}: {}", plain(k), flow(v)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
    }
}

/// A string as a plain scalar when that reads back as the same string, else
/// double-quoted.
pub(crate) fn plain(s: &str) -> String {
    render_scalar(ScalarStyle::Plain, s)
}

/// Offset of the first token of a collection item (its first key for a block
/// mapping, its first character otherwise).
pub(crate) fn item_start(text: &str, stream: &Stream, id: NodeId) -> usize {
    let node = stream.node(id);
    match &node.kind {
        NodeKind::Mapping(entries) if !node.flow => entries
            .first()
            .map_or(node.span.start, |&(k, _)| stream.node(k).span.start),
        NodeKind::Scalar { .. } => {
            super::yaml::scalar_token(text, node).map_or(node.span.start, |r| r.start)
        }
        _ => node.span.start,
    }
}

/// Offset just inside the opening bracket of a flow collection.
pub(crate) fn after_open_bracket(text: &str, stream: &Stream, id: NodeId) -> Option<usize> {
    let span = stream.node(id).span.clone();
    let open = text.get(span.clone())?.find(['[', '{'])?;
    Some(span.start + open + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifests::yaml::parse_stream;

    #[test]
    fn splices_apply_in_order_and_refuse_overlaps() {
        let text = "abcdef";
        let out = apply(
            text,
            vec![
                Splice::replace(4..5, "E"),
                Splice::insert(1, "1"),
                Splice::insert(1, "2"),
                Splice::delete(2..3),
            ],
        )
        .unwrap();
        assert_eq!(out, "a12bdEf");
        assert_eq!(
            apply(text, vec![Splice::delete(1..3), Splice::delete(2..4)]),
            None
        );
        assert_eq!(apply(text, vec![Splice::delete(5..9)]), None);
    }

    #[test]
    fn lines_and_columns() {
        let text = "\u{FEFF}a: 1\r\n  - b # c\r\nlast";
        assert_eq!(eol(text), "\r\n");
        assert_eq!(eol("x"), "\n");
        let b = text.find('b').unwrap();
        assert_eq!(column(text, b), 4);
        assert_eq!(dash_column(text, b), Some(2));
        assert_eq!(column(text, text.find('a').unwrap()), 0);
        assert!(starts_line(text, text.find('a').unwrap()));
        assert!(!starts_line(text, b));
        assert_eq!(after_line(text, b + 1), (text.find("last").unwrap(), true));
        assert_eq!(after_line(text, text.len()), (text.len(), false));
        let ins = insert_lines(after_line(text, text.len()), "x: 2\r\n", "\r\n");
        assert_eq!(apply(text, vec![ins]).unwrap(), format!("{text}\r\nx: 2"));
        let del = delete_lines(text, text.find("last").unwrap(), text.len());
        assert_eq!(apply(text, vec![del]).unwrap(), "\u{FEFF}a: 1\r\n  - b # c");
    }

    #[test]
    fn layout_is_learned_and_rendered() {
        let text = "a:\n    b: 1\nc:\n  - d\n";
        let layout = Layout::detect(text, &parse_stream(text).unwrap());
        assert_eq!((layout.map_indent, layout.seq_indent), (4, 2));
        let layout = Layout::detect("x: 1\r\n", &parse_stream("x: 1\r\n").unwrap());
        assert_eq!((layout.map_indent, layout.seq_indent), (2, 0));
        assert_eq!(layout.eol, "\r\n");
        let value = Value::Map(vec![(
            "images".into(),
            Value::Seq(vec![
                Value::str("a=b:1"),
                Value::Map(vec![
                    ("name".into(), Value::str("web")),
                    ("newTag".into(), Value::str("1.10")),
                ]),
            ]),
        )]);
        assert_eq!(
            layout.entry("kustomize", &value, 0),
            "kustomize:\r\n  images:\r\n  - a=b:1\r\n  - name: web\r\n    newTag: \"1.10\"\r\n"
        );
        assert_eq!(
            flow(&value),
            "{images: [a=b:1, {name: web, newTag: \"1.10\"}]}"
        );
    }
}
