//! The unit of a Git write: one whole-file edit. The pure planners (`promotion::edits`, and the
//! controllers above them) produce these; the git writer in the operator turns a set of them
//! into one commit.

/// Replace (or create) the file at `path` with `contents`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEdit {
    /// Repository-relative path with `/` separators, e.g. `apps/web/deploy.yaml`.
    pub path: String,
    pub contents: Vec<u8>,
}
