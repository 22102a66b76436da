//! A minimal YAML node tree with exact source positions.
//!
//! Place in the flow: first step of reading the current tag from Git. The
//! manifest text is parsed with `granit-parser` events into a flat arena of
//! nodes whose scalar spans are *byte* ranges into the original text, so the
//! edit step can later rewrite exactly one token and leave every other byte
//! alone.
//!
//! Two properties of the parser drive this design:
//! * Its markers count characters, not bytes (a UTF-8 BOM, `é` or a CR of a
//!   CRLF pair each count as one), so every marker is converted.
//! * A scalar's span starts at its node properties (`!!str &anchor value`),
//!   so the span is not always the token itself; `scalar_token` skips them.
//!
//! The arena is flat (children are indices) so that neither building nor
//! dropping a tree recurses: deeply nested input cannot overflow the stack.

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};

use granit_parser::{Event, Options, Parser, ScalarStyle as RawStyle, Span, StructureStyle, Tag};

/// Index of a node in [`Stream::nodes`].
pub type NodeId = usize;

/// Why a manifest file could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum YamlError {
    #[error("invalid YAML at line {line}, column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("the YAML parser failed unexpectedly on this input")]
    ParserPanicked,
    #[error("unexpected YAML event structure ({0})")]
    Structure(&'static str),
}

#[derive(Debug)]
pub enum NodeKind {
    Scalar {
        value: String,
        style: RawStyle,
        /// Rendered tag (`tag:yaml.org,2002:str`, `!custom`), if any.
        tag: Option<String>,
        /// Whether the span starts with node properties (tag or anchor).
        has_properties: bool,
    },
    Sequence(Vec<NodeId>),
    Mapping(Vec<(NodeId, NodeId)>),
    Alias,
}

#[derive(Debug)]
pub struct Node {
    pub kind: NodeKind,
    /// Byte range reported by the parser (for scalars it includes any
    /// properties and the quotes). For block collections only the start is
    /// meaningful; use [`Stream::end_of`] for where a node's text ends.
    pub span: Range<usize>,
    /// Whether a collection is written in flow style (`[a, b]`, `{k: v}`).
    pub flow: bool,
    /// The parser's anchor id: defined on this node (`&a value`), or, for an
    /// alias (`*a`), the one it refers to; 0 for none. Unique in a stream.
    pub anchor: usize,
}

/// All documents of one YAML stream (one file).
#[derive(Debug)]
pub struct Stream {
    pub nodes: Vec<Node>,
    /// Root node of each document, in order.
    pub documents: Vec<NodeId>,
    /// Name of every anchor id (`img` for `&img`), in definition order.
    pub anchor_names: Vec<(usize, String)>,
}

impl Stream {
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    /// The value of a scalar node, or `None` for other nodes.
    pub fn scalar(&self, id: NodeId) -> Option<&str> {
        match &self.nodes.get(id)?.kind {
            NodeKind::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }

    /// Looks up a mapping key by its scalar value.
    pub fn get(&self, map: NodeId, key: &str) -> Lookup {
        let Some(NodeKind::Mapping(entries)) = self.nodes.get(map).map(|n| &n.kind) else {
            return Lookup::NotAMapping;
        };
        let mut found = None;
        for &(k, v) in entries {
            if self.scalar(k) == Some(key) {
                if found.is_some() {
                    return Lookup::Duplicate;
                }
                found = Some(v);
            }
        }
        found.map_or(Lookup::Missing, Lookup::Found)
    }

    /// Byte offset just after the last token of `id` (closing bracket of a
    /// flow collection, last scalar of a block one). Walks down the last
    /// children iteratively.
    pub fn end_of(&self, text: &str, id: NodeId) -> usize {
        let mut id = id;
        loop {
            let node = &self.nodes[id];
            match &node.kind {
                NodeKind::Scalar { .. } => {
                    return scalar_token(text, node).map_or(node.span.end, |r| r.end);
                }
                NodeKind::Alias => return node.span.end,
                _ if node.flow => return node.span.end,
                NodeKind::Sequence(items) => match items.last() {
                    Some(&last) => id = last,
                    None => return node.span.end,
                },
                NodeKind::Mapping(entries) => match entries.last() {
                    // An empty value (`key:`) has a zero-width span; the key
                    // is then the last token.
                    Some(&(key, value)) => {
                        let v = &self.nodes[value];
                        id = if v.span.is_empty() { key } else { value };
                    }
                    None => return node.span.end,
                },
            }
        }
    }

    /// The name of anchor `id` (without `&`).
    pub fn anchor_name(&self, id: usize) -> Option<&str> {
        self.anchor_names
            .iter()
            .find(|(a, _)| *a == id)
            .map(|(_, name)| name.as_str())
    }

    /// Every alias of the anchor defined on node `id`, as the YAML path of the
    /// alias in its document (`spec.template.spec.containers[1].image`), with
    /// the `name` of the mapping holding it when it has one. Empty when `id`
    /// defines no anchor or nothing aliases it. Iterative, like the build.
    pub fn aliases_of(&self, id: NodeId) -> Vec<String> {
        let anchor = self.nodes.get(id).map_or(0, |n| n.anchor);
        let defines = anchor != 0 && !matches!(self.nodes[id].kind, NodeKind::Alias);
        if !defines
            || !self
                .nodes
                .iter()
                .any(|n| matches!(n.kind, NodeKind::Alias) && n.anchor == anchor)
        {
            return Vec::new();
        }
        let mut found = Vec::new();
        for (document, &root) in self.documents.iter().enumerate() {
            // (node, its path, the `name` of the mapping holding it)
            let mut stack = vec![(root, String::new(), None::<String>)];
            while let Some((node, path, holder)) = stack.pop() {
                match &self.nodes[node].kind {
                    NodeKind::Alias if self.nodes[node].anchor == anchor => {
                        let path = if path.is_empty() {
                            "(root)".to_owned()
                        } else {
                            path
                        };
                        let prefix = if self.documents.len() > 1 {
                            format!("document {}: ", document + 1)
                        } else {
                            String::new()
                        };
                        let alias = self.anchor_name(anchor).unwrap_or("?");
                        found.push(match holder {
                            Some(name) => format!("{prefix}*{alias} at {path} (name {name:?})"),
                            None => format!("{prefix}*{alias} at {path}"),
                        });
                    }
                    NodeKind::Sequence(items) => {
                        for (i, &item) in items.iter().enumerate().rev() {
                            stack.push((item, format!("{path}[{i}]"), None));
                        }
                    }
                    NodeKind::Mapping(entries) => {
                        let name = self.get_str(node, "name").map(str::to_owned);
                        for &(k, v) in entries.iter().rev() {
                            let key = self.scalar(k).unwrap_or("?");
                            let child = if path.is_empty() {
                                key.to_owned()
                            } else {
                                format!("{path}.{key}")
                            };
                            stack.push((v, child, name.clone()));
                        }
                    }
                    _ => {}
                }
            }
        }
        found
    }

    /// A mapping value that is a non-null scalar, as a string.
    pub fn get_str(&self, map: NodeId, key: &str) -> Option<&str> {
        match self.get(map, key) {
            Lookup::Found(id) => match &self.nodes.get(id)?.kind {
                NodeKind::Scalar { value, style, .. } if !is_null(value, *style) => Some(value),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Result of looking up a key in a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    Found(NodeId),
    Missing,
    /// YAML forbids duplicate keys, but the event parser does not enforce it;
    /// loaders disagree on which one wins, so callers must not guess.
    Duplicate,
    NotAMapping,
}

/// Whether a scalar resolves to null under the YAML core schema.
pub fn is_null(value: &str, style: RawStyle) -> bool {
    style == RawStyle::Plain && matches!(value, "" | "~" | "null" | "Null" | "NULL")
}

/// Maps the parser's character offsets to byte offsets.
struct CharToByte {
    /// Byte offset of every char, plus the total length; empty when the text
    /// is ASCII-only and offsets coincide.
    table: Vec<usize>,
    len: usize,
}

impl CharToByte {
    fn new(text: &str) -> Self {
        let table = if text.is_ascii() {
            Vec::new()
        } else {
            text.char_indices()
                .map(|(byte, _)| byte)
                .chain(std::iter::once(text.len()))
                .collect()
        };
        Self {
            table,
            len: text.len(),
        }
    }

    fn byte(&self, char_index: usize) -> Option<usize> {
        if self.table.is_empty() {
            (char_index <= self.len).then_some(char_index)
        } else {
            self.table.get(char_index).copied()
        }
    }

    fn range(&self, span: &Span) -> Result<Range<usize>, YamlError> {
        let start = self.byte(span.start.index());
        let end = self.byte(span.end.index());
        match (start, end) {
            (Some(start), Some(end)) if start <= end => Ok(start..end),
            _ => Err(YamlError::Structure("span outside the input")),
        }
    }
}

/// Parses every document of `text`.
///
/// The parser is a third-party state machine; a panic inside it on some
/// malformed input must not take the operator down, so it is contained and
/// reported like a syntax error.
pub fn parse_stream(text: &str) -> Result<Stream, YamlError> {
    match catch_unwind(AssertUnwindSafe(|| build(text))) {
        Ok(result) => result,
        Err(_) => Err(YamlError::ParserPanicked),
    }
}

enum Frame {
    Sequence {
        start: usize,
        flow: bool,
        items: Vec<NodeId>,
        anchor: usize,
    },
    Mapping {
        start: usize,
        flow: bool,
        anchor: usize,
        entries: Vec<(NodeId, NodeId)>,
        key: Option<NodeId>,
    },
}

fn build(text: &str) -> Result<Stream, YamlError> {
    let offsets = CharToByte::new(text);
    let mut nodes: Vec<Node> = Vec::new();
    let mut documents = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    // The parser numbers anchors itself (uniquely in the stream); aliases are
    // never followed, only recorded with the id they refer to, so an edit of
    // an anchored value can name every place that would change with it.
    let mut anchor_names = Vec::new();
    let mut options = Options::default();
    options.emit_comments = false;
    options.emit_anchor_events = true;
    for event in Parser::new_from_str_with_options(text, options) {
        let (event, span) = event.map_err(|e| YamlError::Syntax {
            line: e.marker().line(),
            column: e.marker().col() + 1,
            message: e.info().to_owned(),
        })?;
        let range = offsets.range(&span)?;
        let completed = match event {
            Event::StreamStart | Event::StreamEnd => None,
            Event::Anchor(id, name) => {
                anchor_names.push((id, name.into_owned()));
                None
            }
            Event::DocumentStart(..) | Event::DocumentEnd => {
                if !stack.is_empty() {
                    return Err(YamlError::Structure(
                        "document boundary inside a collection",
                    ));
                }
                None
            }
            Event::Scalar(value, style, anchor, tag) => {
                let tag = tag.map(|t| render_tag(&t));
                Some(Node {
                    kind: NodeKind::Scalar {
                        value: value.into_owned(),
                        style,
                        has_properties: anchor != 0 || tag.is_some(),
                        tag,
                    },
                    span: range,
                    flow: false,
                    anchor,
                })
            }
            Event::Alias(anchor) => Some(Node {
                kind: NodeKind::Alias,
                span: range,
                flow: false,
                anchor,
            }),
            Event::SequenceStart(style, anchor, _) => {
                stack.push(Frame::Sequence {
                    start: range.start,
                    anchor,
                    flow: style == StructureStyle::Flow,
                    items: Vec::new(),
                });
                None
            }
            Event::MappingStart(style, anchor, _) => {
                stack.push(Frame::Mapping {
                    start: range.start,
                    anchor,
                    flow: style == StructureStyle::Flow,
                    entries: Vec::new(),
                    key: None,
                });
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Sequence {
                    start,
                    flow,
                    items,
                    anchor,
                }) => Some(Node {
                    kind: NodeKind::Sequence(items),
                    span: start..range.end.max(start),
                    flow,
                    anchor,
                }),
                _ => return Err(YamlError::Structure("unbalanced sequence end")),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Mapping {
                    start,
                    flow,
                    entries,
                    key: None,
                    anchor,
                }) => Some(Node {
                    kind: NodeKind::Mapping(entries),
                    span: start..range.end.max(start),
                    flow,
                    anchor,
                }),
                _ => return Err(YamlError::Structure("unbalanced mapping end")),
            },
            // Comments are not asked for, unresolved aliases are reported as errors by
            // default; anything else is presentation metadata a later version may add.
            _ => None,
        };
        let Some(node) = completed else { continue };
        let id = nodes.len();
        nodes.push(node);
        match stack.last_mut() {
            None => documents.push(id),
            Some(Frame::Sequence { items, .. }) => items.push(id),
            Some(Frame::Mapping { entries, key, .. }) => match key.take() {
                None => *key = Some(id),
                Some(k) => entries.push((k, id)),
            },
        }
    }
    if !stack.is_empty() {
        return Err(YamlError::Structure("unterminated collection"));
    }
    Ok(Stream {
        nodes,
        documents,
        anchor_names,
    })
}

fn render_tag(tag: &Tag) -> String {
    format!("{}{}", tag.handle(), tag.suffix())
}

/// The byte range of a scalar's token (quotes included, node properties
/// excluded) within `text`, given the parser's span of the node.
///
/// The parser's span is wider than the token in two ways, both handled here:
/// * it starts at node properties (`!tag`, `&anchor`, possibly followed by
///   whitespace, line breaks and comments before the token);
/// * for quoted scalars it ends after trailing blanks and a trailing comment
///   on the same line (`'v'  # note` is one span), so the closing quote is
///   found by scanning the token itself.
pub fn scalar_token(text: &str, node: &Node) -> Option<Range<usize>> {
    let NodeKind::Scalar {
        has_properties,
        style,
        ..
    } = node.kind
    else {
        return None;
    };
    let span = node.span.clone();
    let slice = text.get(span.clone())?;
    let bytes = slice.as_bytes();
    let start = if has_properties {
        skip_properties(bytes)
    } else {
        0
    };
    let end = match style {
        RawStyle::SingleQuoted => closing_single_quote(bytes, start)? + 1,
        RawStyle::DoubleQuoted => closing_double_quote(bytes, start)? + 1,
        // Plain scalars never end in whitespace; trimming is only a guard.
        _ => slice.trim_end_matches([' ', '\t', '\r', '\n']).len(),
    };
    let range = span.start + start..span.start + end;
    (range.start < range.end && text.get(range.clone()).is_some()).then_some(range)
}

/// Offset of the first byte after the node properties at the start of a span.
fn skip_properties(bytes: &[u8]) -> usize {
    let mut i = 0;
    loop {
        while i < bytes.len() && matches!(bytes[i], b' ' | b'\t' | b'\r' | b'\n') {
            i += 1;
        }
        match bytes.get(i) {
            Some(b'#') => {
                while i < bytes.len() && !matches!(bytes[i], b'\r' | b'\n') {
                    i += 1;
                }
            }
            Some(b'!' | b'&') => {
                // Verbatim tags (`!<tag:x>`) may not contain spaces either,
                // so a property always ends at whitespace.
                while i < bytes.len() && !matches!(bytes[i], b' ' | b'\t' | b'\r' | b'\n') {
                    i += 1;
                }
            }
            _ => return i,
        }
    }
}

/// Index of the quote closing a single-quoted token that opens at `open`;
/// `''` inside it is an escaped quote.
fn closing_single_quote(bytes: &[u8], open: usize) -> Option<usize> {
    if bytes.get(open) != Some(&b'\'') {
        return None;
    }
    let mut i = open + 1;
    while i < bytes.len() {
        if bytes[i] == b'\'' {
            if bytes.get(i + 1) == Some(&b'\'') {
                i += 2;
                continue;
            }
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Index of the quote closing a double-quoted token that opens at `open`;
/// a backslash escapes the byte after it (all escapes that matter here,
/// `\"` and `\\`, are ASCII, so stepping by bytes is safe).
fn closing_double_quote(bytes: &[u8], open: usize) -> Option<usize> {
    if bytes.get(open) != Some(&b'"') {
        return None;
    }
    let mut i = open + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str) -> Vec<(String, &str)> {
        let stream = parse_stream(text).unwrap();
        stream
            .nodes
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::Scalar { value, .. } => {
                    let token = scalar_token(text, n).unwrap();
                    Some((value.clone(), &text[token]))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn byte_spans_survive_bom_crlf_and_multibyte_text() {
        let text = "\u{FEFF}# çà 日本\r\nk: 'v' # é\r\n\"ä\": \"x:1\"\r\n";
        assert_eq!(
            tokens(text),
            [
                ("k".to_owned(), "k"),
                ("v".to_owned(), "'v'"),
                ("ä".to_owned(), "\"ä\""),
                ("x:1".to_owned(), "\"x:1\""),
            ]
        );
    }

    #[test]
    fn properties_are_skipped_for_the_token() {
        let text = "a: !!str &x \"q\"\nb: !!str # c\n  plain\n";
        assert_eq!(
            tokens(text),
            [
                ("a".to_owned(), "a"),
                ("q".to_owned(), "\"q\""),
                ("b".to_owned(), "b"),
                ("plain".to_owned(), "plain"),
            ]
        );
    }

    #[test]
    fn documents_are_split() {
        let stream = parse_stream("a: 1\n...\n---\nb: 2\n---\n- x\n").unwrap();
        assert_eq!(stream.documents.len(), 3);
        assert_eq!(stream.get_str(stream.documents[1], "b"), Some("2"));
    }

    #[test]
    fn duplicate_keys_are_reported() {
        let stream = parse_stream("a: 1\na: 2\n").unwrap();
        assert_eq!(stream.get(stream.documents[0], "a"), Lookup::Duplicate);
    }

    #[test]
    fn syntax_errors_are_errors_not_panics() {
        for bad in [
            "a: b: c",
            "[1, 2",
            "{a: 1",
            "a:\n\t- b",
            "\"unterminated",
            "- a\n b: c\n- d",
            "\u{FEFF}a: \u{FEFF}b",
            "*undefined",
            "&a [*a]",
            ": : :",
            "? ? ? ?",
            "%YAML 1.2\n%YAML 1.2\n---\na",
        ] {
            // Either outcome is fine; the point is that nothing panics.
            let _ = parse_stream(bad);
        }
        assert!(matches!(
            parse_stream("a: b: c"),
            Err(YamlError::Syntax { line: 1, .. })
        ));
    }

    #[test]
    fn quoted_tokens_end_at_their_closing_quote() {
        // The parser's spans of these run on to the comment or the blanks.
        let text = "a: 'it''s' # c\nb: \"q\\\"x\\\\\"\t# c\r\nc: ['v' , \"w\" ]\nd: 'x'   \n";
        assert_eq!(
            tokens(text),
            [
                ("a".to_owned(), "a"),
                ("it's".to_owned(), "'it''s'"),
                ("b".to_owned(), "b"),
                ("q\"x\\".to_owned(), "\"q\\\"x\\\\\""),
                ("c".to_owned(), "c"),
                ("v".to_owned(), "'v'"),
                ("w".to_owned(), "\"w\""),
                ("d".to_owned(), "d"),
                ("x".to_owned(), "'x'"),
            ]
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_an_overflow() {
        // The parser has its own recursion limit; the tree is flat anyway.
        let depth = 100_000;
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(parse_stream(&text).is_err());
        let text = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(parse_stream(&text).unwrap().nodes.len(), 200);
    }
}
