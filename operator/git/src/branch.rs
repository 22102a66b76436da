//! Private push branches for the git writer (read current state from Git,
//! commit and push edits).
//!
//! In push-branch mode a commit is based on the head of the target branch
//! (say `main`) and published to a separate branch (say
//! `imagewatch/my-api`) that a pull request proposes for merging. That
//! branch is ours alone, so it is rewritten with a force push each time —
//! which is only safe while it really holds nothing but our work.
//!
//! **The ownership rule.** An existing push branch may be overwritten only
//! when its tip
//!
//! 1. was authored *and* committed with our author email (compared without
//!    regard to case) — a person who pushed a fix-up, or amended or rebased
//!    our commit, is the committer of the new tip, so their work is kept;
//! 2. has exactly one parent, and that parent is the target branch head or
//!    one of its ancestors — so the push branch holds exactly one commit
//!    beyond the target branch's history, and that commit is ours by (1).
//!
//! Anything else is [`GitError::PushBranchNotOurs`]: a person must delete
//! the branch (or point the watch at another one). A branch that does not
//! exist is created. Emails are not a proof of identity; the rule protects
//! against accidents, not against someone forging our email.
//!
//! **Carry-over.** Several watches may share one push branch while each
//! batch only re-plans its own intents. So that a batch does not drop the
//! edits an earlier batch made for other watches, the edits of the current
//! tip (its diff against its parent) are carried onto the new head, file by
//! file, when the target branch has not touched that file since; the new
//! intents are then planned on top.

use git2::{Delta, ObjectType, Oid};

use super::commit::{Author, FileEdit};
use super::error::{GitError, Result};
use super::repo::{Repo, is_regular_file};

/// The state of an existing push branch that we may overwrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedPushBranch {
    /// Its tip (our commit).
    pub tip: Oid,
    /// The tip's parent, a commit of the target branch's history.
    pub base: Oid,
}

impl Repo {
    /// Apply the ownership rule (see the module docs) to the fetched tip
    /// `tip` of push branch `branch`, given the fetched head of the target
    /// branch.
    pub fn check_push_branch(
        &self,
        branch: &str,
        tip: Oid,
        target_head: Oid,
        author: &Author,
    ) -> Result<OwnedPushBranch> {
        let commit = self
            .repo
            .find_commit(tip)
            .map_err(|e| GitError::git("read push branch tip", e))?;
        let refuse = |reason: String| GitError::PushBranchNotOurs {
            branch: branch.to_owned(),
            commit: tip,
            reason,
        };
        let ours =
            |email: Option<&str>| email.is_some_and(|e| e.eq_ignore_ascii_case(&author.email));
        let commit_author = commit.author();
        if !ours(commit_author.email().ok()) {
            return Err(refuse(format!(
                "was authored by {} <{}>, not by {}",
                commit_author.name().unwrap_or("?"),
                commit_author.email().unwrap_or("?"),
                author.email
            )));
        }
        let committer = commit.committer();
        if !ours(committer.email().ok()) {
            return Err(refuse(format!(
                "was committed by {} <{}> (amended or rebased by someone else)",
                committer.name().unwrap_or("?"),
                committer.email().unwrap_or("?")
            )));
        }
        if commit.parent_count() != 1 {
            return Err(refuse(format!(
                "has {} parents; ours have exactly one",
                commit.parent_count()
            )));
        }
        let base = commit
            .parent_id(0)
            .map_err(|e| GitError::git("read push branch parent", e))?;
        let on_target = base == target_head
            || self
                .repo
                .graph_descendant_of(target_head, base)
                .map_err(|e| GitError::git("compare push branch with target", e))?;
        if !on_target {
            return Err(refuse(format!(
                "sits on {base}, which is not in the target branch's history \
                 (the branch holds more than our one commit)"
            )));
        }
        Ok(OwnedPushBranch { tip, base })
    }

    /// The edits `branch.tip` made over `branch.base` that still apply to
    /// `onto` unchanged: files the target branch has not touched since
    /// `base` (same blob in `onto` as in `base`, or absent in both).
    /// Deleted, renamed and non-regular files are not carried.
    pub fn carry_over(&self, branch: &OwnedPushBranch, onto: Oid) -> Result<Vec<FileEdit>> {
        let base_tree = self.commit_tree(branch.base)?;
        let tip_tree = self.commit_tree(branch.tip)?;
        let onto_tree = self.commit_tree(onto)?;
        let diff = self
            .repo
            .diff_tree_to_tree(Some(&base_tree), Some(&tip_tree), None)
            .map_err(|e| GitError::git("diff push branch", e))?;
        let mut edits = Vec::new();
        for delta in diff.deltas() {
            if !matches!(delta.status(), Delta::Added | Delta::Modified) {
                continue;
            }
            let new = delta.new_file();
            let Some(path) = new.path().and_then(|p| p.to_str()) else {
                continue;
            };
            if !is_regular_file(i32::from(new.mode())) {
                continue;
            }
            let old_id = delta.old_file().id();
            let onto_id = match onto_tree.get_path(std::path::Path::new(path)) {
                Ok(entry) if entry.kind() == Some(ObjectType::Blob) => entry.id(),
                Ok(_) => continue,
                Err(e) if e.code() == git2::ErrorCode::NotFound => Oid::ZERO_SHA1,
                Err(e) => return Err(GitError::git("look up path", e)),
            };
            if onto_id != old_id {
                tracing::info!(
                    path,
                    "target branch changed the file since the push branch was written; \
                     not carrying its earlier edit"
                );
                continue;
            }
            let blob = self
                .repo
                .find_blob(new.id())
                .map_err(|e| GitError::git("read blob", e))?;
            edits.push(FileEdit {
                path: path.to_owned(),
                contents: blob.content().to_vec(),
            });
        }
        Ok(edits)
    }

    /// Tree and first parent of `commit`.
    pub fn tree_and_parent(&self, commit: Oid) -> Result<(Oid, Option<Oid>)> {
        let c = self
            .repo
            .find_commit(commit)
            .map_err(|e| GitError::git("read commit", e))?;
        Ok((c.tree_id(), c.parent_id(0).ok()))
    }

    /// Full message of `commit`.
    pub fn commit_message(&self, commit: Oid) -> Result<String> {
        let c = self
            .repo
            .find_commit(commit)
            .map_err(|e| GitError::git("read commit", e))?;
        Ok(String::from_utf8_lossy(c.message_bytes()).into_owned())
    }
}
