//! Tree editing and commit creation for the git writer (read current state
//! from Git, commit and push edits).
//!
//! Edits are whole-file replacements. Only the trees on the paths from the
//! root to each edited file are rebuilt (starting from the parent commit's
//! trees, so every other entry keeps its object id); untouched subtrees are
//! never even read. The commit object is written to the cache repository
//! and kept reachable by a private ref, `refs/imagewatch/pending/<branch>`;
//! no branch and no remote-tracking ref is moved here — that only happens
//! once the remote accepted the push.

use std::collections::BTreeMap;

use git2::{ObjectType, Oid, Signature, Tree};
// The whole-file edit lives in the pure core (`imagewatch-engine`); the writer commits it.
pub use imagewatch_engine::edit::FileEdit;

use super::error::{GitError, Result};
use super::repo::{Repo, is_regular_file, validate_branch};
use super::sign::CommitSigner;

const MODE_FILE: i32 = 0o100644;
const MODE_TREE: i32 = 0o040000;
const MODE_SYMLINK: i32 = 0o120000;
const MODE_SUBMODULE: i32 = 0o160000;

/// Author and committer identity of the commits we create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Author {
    pub name: String,
    pub email: String,
}

/// The private ref that keeps our not-yet-pushed commit for `branch`.
pub fn pending_ref(branch: &str) -> String {
    format!("refs/imagewatch/pending/{branch}")
}

/// Edits arranged as a directory tree.
enum Node {
    File(Oid),
    Dir(BTreeMap<String, Node>),
}

impl Repo {
    /// Create a commit whose parent is `parent` and whose tree is the
    /// parent's tree with `edits` applied.
    ///
    /// Returns `None` when the edits change nothing (every file already has
    /// the given contents), so callers never push empty commits. Otherwise
    /// returns the new commit, which is also stored in
    /// `refs/imagewatch/pending/<branch>`; no branch is updated.
    ///
    /// Existing files keep their mode (an executable stays executable); new
    /// files are `100644`. Replacing a directory, symlink or submodule with
    /// a file, and paths that contain `.`, `..`, `.git` or empty components,
    /// are [`GitError::InvalidEdit`].
    pub fn commit_edits(
        &self,
        branch: &str,
        parent: Oid,
        edits: &[FileEdit],
        message: &str,
        author: &Author,
    ) -> Result<Option<Oid>> {
        self.commit_edits_signed(branch, parent, edits, message, author, None)
    }

    /// [`Repo::commit_edits`], signing the commit with `signer` when given
    /// (an SSH signature in the `gpgsig` header, as `git commit -S` writes
    /// with `gpg.format = ssh`).
    pub fn commit_edits_signed(
        &self,
        branch: &str,
        parent: Oid,
        edits: &[FileEdit],
        message: &str,
        author: &Author,
        signer: Option<&CommitSigner>,
    ) -> Result<Option<Oid>> {
        self.write_commit(branch, parent, edits, message, author, signer)
            .map_err(|e| self.cache_error(e))
    }

    fn write_commit(
        &self,
        branch: &str,
        parent: Oid,
        edits: &[FileEdit],
        message: &str,
        author: &Author,
        signer: Option<&CommitSigner>,
    ) -> Result<Option<Oid>> {
        validate_branch(branch)?;
        let parent_commit = self
            .repo
            .find_commit(parent)
            .map_err(|e| GitError::git("read parent commit", e))?;
        let parent_tree = parent_commit
            .tree()
            .map_err(|e| GitError::git("read parent tree", e))?;
        if edits.is_empty() {
            return Ok(None);
        }

        let mut root = BTreeMap::new();
        for edit in edits {
            let parts = split_path(&edit.path)?;
            let blob = self
                .repo
                .blob(&edit.contents)
                .map_err(|e| GitError::git("write blob", e))?;
            insert(&mut root, &parts, blob, &edit.path)?;
        }

        let new_tree = self.build_tree(Some(&parent_tree), &root, "")?;
        if new_tree == parent_tree.id() {
            return Ok(None);
        }

        let message = git2::message_prettify(message, None)
            .map_err(|e| GitError::git("format commit message", e))?;
        if message.trim().is_empty() {
            return Err(GitError::InvalidEdit {
                path: String::new(),
                reason: "commit message is empty".to_owned(),
            });
        }
        let sig = Signature::now(&author.name, &author.email)
            .map_err(|e| GitError::git("build commit signature", e))?;
        let tree = self
            .repo
            .find_tree(new_tree)
            .map_err(|e| GitError::git("read new tree", e))?;
        // No update_ref here: libgit2 would insist that the ref currently
        // points at `parent`, which a leftover pending ref from an earlier
        // attempt does not.
        let commit = match signer {
            None => self
                .repo
                .commit(None, &sig, &sig, &message, &tree, &[&parent_commit])
                .map_err(|e| GitError::git("create commit", e))?,
            Some(signer) => {
                let buffer = self
                    .repo
                    .commit_create_buffer(&sig, &sig, &message, &tree, &[&parent_commit])
                    .map_err(|e| GitError::git("create commit buffer", e))?;
                let content = buffer.as_str().map_err(|_| GitError::Signing {
                    message: "commit object is not UTF-8".to_owned(),
                })?;
                let signature = signer.sign(content.as_bytes())?;
                self.repo
                    .commit_signed(content, &signature, Some("gpgsig"))
                    .map_err(|e| GitError::git("create signed commit", e))?
            }
        };
        self.repo
            .reference(
                &pending_ref(branch),
                commit,
                true,
                "imagewatch: pending commit",
            )
            .map_err(|e| GitError::git("update pending ref", e))?;
        tracing::debug!(url = %self.url, branch, %parent, %commit, files = edits.len(), "created commit");
        Ok(Some(commit))
    }

    /// Write the tree for one directory: `base` (the parent commit's tree
    /// at this path, if any) with `children` replaced.
    fn build_tree(
        &self,
        base: Option<&Tree<'_>>,
        children: &BTreeMap<String, Node>,
        dir: &str,
    ) -> Result<Oid> {
        let mut builder = self
            .repo
            .treebuilder(base)
            .map_err(|e| GitError::git("start tree", e))?;
        for (name, node) in children {
            let path = if dir.is_empty() {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            let existing = base.and_then(|t| t.get_name(name));
            match node {
                Node::File(blob) => {
                    let mode = match existing.as_ref().map(|e| e.filemode()) {
                        None => MODE_FILE,
                        Some(m) if is_regular_file(m) => m,
                        Some(m) => {
                            return Err(GitError::InvalidEdit {
                                path,
                                reason: format!("cannot replace a {} with a file", kind_name(m)),
                            });
                        }
                    };
                    builder
                        .insert(name, *blob, mode)
                        .map_err(|e| GitError::git("insert tree entry", e))?;
                }
                Node::Dir(grandchildren) => {
                    let subtree = match &existing {
                        None => None,
                        Some(e) if e.kind() == Some(ObjectType::Tree) => Some(
                            self.repo
                                .find_tree(e.id())
                                .map_err(|e| GitError::git("read tree", e))?,
                        ),
                        Some(e) => {
                            return Err(GitError::InvalidEdit {
                                path,
                                reason: format!(
                                    "is a {}, not a directory",
                                    kind_name(e.filemode())
                                ),
                            });
                        }
                    };
                    let oid = self.build_tree(subtree.as_ref(), grandchildren, &path)?;
                    builder
                        .insert(name, oid, MODE_TREE)
                        .map_err(|e| GitError::git("insert tree entry", e))?;
                }
            }
        }
        builder.write().map_err(|e| GitError::git("write tree", e))
    }
}

fn kind_name(mode: i32) -> &'static str {
    match mode {
        MODE_TREE => "directory",
        MODE_SYMLINK => "symlink",
        MODE_SUBMODULE => "submodule",
        _ => "file",
    }
}

/// Split and validate an edit path.
fn split_path(path: &str) -> Result<Vec<&str>> {
    let invalid = |reason: &str| GitError::InvalidEdit {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    if path.is_empty() {
        return Err(invalid("empty path"));
    }
    if path.contains('\0') {
        return Err(invalid("path contains NUL"));
    }
    let parts: Vec<&str> = path.split('/').collect();
    for part in &parts {
        match *part {
            "" => {
                return Err(invalid(
                    "empty path component (leading, trailing or double '/')",
                ));
            }
            "." | ".." => return Err(invalid("'.' and '..' are not allowed")),
            p if p.eq_ignore_ascii_case(".git") => {
                return Err(invalid("'.git' is not allowed"));
            }
            _ => {}
        }
    }
    Ok(parts)
}

/// Add one file to the edit tree, refusing contradictory edits.
fn insert(tree: &mut BTreeMap<String, Node>, parts: &[&str], blob: Oid, path: &str) -> Result<()> {
    let Some((last, dirs)) = parts.split_last() else {
        return Err(GitError::InvalidEdit {
            path: path.to_owned(),
            reason: "empty path".to_owned(),
        });
    };
    let mut cur = tree;
    for dir in dirs {
        let node = cur
            .entry((*dir).to_owned())
            .or_insert_with(|| Node::Dir(BTreeMap::new()));
        cur = match node {
            Node::Dir(children) => children,
            Node::File(_) => {
                return Err(GitError::InvalidEdit {
                    path: path.to_owned(),
                    reason: format!("another edit writes a file at {dir:?}"),
                });
            }
        };
    }
    match cur.get(*last) {
        None => {
            cur.insert((*last).to_owned(), Node::File(blob));
            Ok(())
        }
        // The same file twice with identical contents is harmless.
        Some(Node::File(existing)) if *existing == blob => Ok(()),
        Some(Node::File(_)) => Err(GitError::InvalidEdit {
            path: path.to_owned(),
            reason: "edited twice with different contents".to_owned(),
        }),
        Some(Node::Dir(_)) => Err(GitError::InvalidEdit {
            path: path.to_owned(),
            reason: "other edits treat this path as a directory".to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_validation() {
        assert_eq!(split_path("a/b.yaml").unwrap(), vec!["a", "b.yaml"]);
        for bad in [
            "",
            "/a",
            "a/",
            "a//b",
            "./a",
            "a/../b",
            ".git/config",
            "x/.GIT/y",
            "a\0b",
        ] {
            assert!(split_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn contradictory_edits() {
        let a = Oid::from_bytes(&[1; 20]).unwrap();
        let b = Oid::from_bytes(&[2; 20]).unwrap();
        let mut t = BTreeMap::new();
        insert(&mut t, &["x", "y"], a, "x/y").unwrap();
        insert(&mut t, &["x", "y"], a, "x/y").unwrap();
        assert!(insert(&mut t, &["x", "y"], b, "x/y").is_err());
        assert!(insert(&mut t, &["x"], a, "x").is_err());
        assert!(insert(&mut t, &["x", "y", "z"], a, "x/y/z").is_err());
    }
}
