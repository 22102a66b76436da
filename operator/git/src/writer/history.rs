//! Who last changed a target's value in Git: the history half of `spec.onGitChange`. Blocking
//! (libgit2), run by a batch while planning an intent, and only when Git's value differs both
//! from what the watch wants and from what imagewatch last wrote (the engine's
//! `held::needs_history`), so the steady state reads no history at all.
//!
//! From the head, the walk follows the value back: to a parent holding the same file blob
//! (or, failing that, the same value), so a merge that brought the value from a side branch
//! is passed through to the commit on that branch that set it. The first commit none of whose
//! parents holds the value set it. The commit is imagewatch's for a watch (or a
//! PromotionPolicy) when its message carries the trailer naming it and its committer is
//! imagewatch's identity; the decision itself is `imagewatch_engine::held::decide`.
//!
//! A promotion reads the history of its target's places through [`HistoryReader`], which the
//! writer lends with its committer identity (`GitWriter::history`), on a clone leased from
//! the writer's cache.

use git2::{Commit, Oid};

use imagewatch_engine::held::{GitChange, Trailer};

use crate::{Author, GitError, Repo};
use imagewatch_engine::manifests;

use super::{GitChangeGuard, WriteRequest};

/// [`last_change`] for code outside the writer, telling imagewatch's commits by the writer's
/// committer identity.
#[derive(Debug, Clone)]
pub struct HistoryReader {
    author: Author,
}

impl HistoryReader {
    pub fn new(author: Author) -> Self {
        Self { author }
    }

    /// The commit that last changed the value `value_of` reads from `file`, walking back
    /// from `head`; it is ours when it carries `trailer` and the writer's identity.
    pub fn last_change(
        &self,
        repo: &Repo,
        head: Oid,
        file: &str,
        value_of: &dyn Fn(&str) -> Option<String>,
        trailer: Trailer<'_>,
    ) -> Result<GitChange, GitError> {
        last_change(repo, head, file, value_of, (trailer, &self.author))
    }
}

/// `spec.onGitChange`: whether Git's value, which differs from what the intent wants, is a
/// change someone else made that the watch holds to. The history is read only when Git also
/// differs from what imagewatch last wrote.
pub(super) fn held_by_git(
    repo: &Repo,
    head: git2::Oid,
    req: &WriteRequest,
    guard: &GitChangeGuard,
    (current, file): (&str, Option<String>),
    desired: &str,
    author: &Author,
) -> Result<Option<imagewatch_engine::held::Hold>, GitError> {
    use imagewatch_engine::held::{Decision, Hold, Situation, decide, needs_history};
    let situation = Situation {
        mode: guard.mode,
        last_written: Some(guard.last_written.as_str()),
        current,
        desired,
        resume: guard.resume.as_deref(),
    };
    if !needs_history(&situation) {
        return Ok(None);
    }
    // The edited file, normalized by the batch (`None`: it leaves the repository).
    let Some(file) = file else {
        return Ok(None);
    };
    // The target's value in one version of its file (`None` when it is not there).
    let value_of = |text: &str| -> Option<String> {
        let files = [(file.as_str(), text)];
        manifests::plan_edit_with(&files, &req.target, &req.change, req.edit)
            .ok()
            .map(|plan| plan.edit.map_or(plan.current, |e| e.old))
    };
    let trailer = imagewatch_engine::held::Trailer::watch(&req.watch);
    let change = last_change(repo, head, &file, &value_of, (trailer, author))?;
    Ok(match decide(&situation, Some(&change)) {
        Decision::Write => None,
        Decision::Hold(change) => {
            tracing::info!(
                watch = %req.watch,
                file = %file,
                commit = %change.commit,
                author = %change.author,
                "the target was changed in Git by someone else; not overwritten"
            );
            Some(Hold {
                change,
                mode: guard.mode,
            })
        }
    })
}

/// Commits walked at most; past that the oldest commit reached is named (and, not being
/// imagewatch's, holds the watch: unsure is never a reason to write).
const MAX_WALK: usize = 2_000;

/// The commit that last changed the value `value_of` reads from `file`, walking back from
/// `head`. `trailer` (naming the watch or policy) and `author` tell imagewatch's own commits.
pub(super) fn last_change(
    repo: &Repo,
    head: Oid,
    file: &str,
    value_of: &dyn Fn(&str) -> Option<String>,
    (trailer, author): (Trailer<'_>, &Author),
) -> Result<GitChange, GitError> {
    let raw = repo.raw();
    let value_at = |commit: &Commit<'_>| -> Option<String> {
        let blob = blob_at(commit, file)?;
        let blob = raw.find_blob(blob).ok()?;
        let text = std::str::from_utf8(blob.content()).ok()?;
        value_of(text)
    };
    let mut commit = raw
        .find_commit(head)
        .map_err(|e| GitError::git("reading the history", e))?;
    let value = value_at(&commit);
    for _ in 0..MAX_WALK {
        let blob = blob_at(&commit, file);
        let parents: Vec<Commit<'_>> = commit.parents().collect();
        let same_blob = parents
            .iter()
            .find(|p| blob.is_some() && blob_at(p, file) == blob);
        let next = match same_blob {
            Some(p) => Some(p.clone()),
            None => parents.iter().find(|p| value_at(p) == value).cloned(),
        };
        match next {
            Some(parent) => commit = parent,
            None => break,
        }
    }
    Ok(describe(
        &commit,
        value.unwrap_or_default(),
        trailer,
        author,
    ))
}

fn blob_at(commit: &Commit<'_>, file: &str) -> Option<Oid> {
    let tree = commit.tree().ok()?;
    let entry = tree.get_path(std::path::Path::new(file)).ok()?;
    Some(entry.id())
}

fn describe(commit: &Commit<'_>, value: String, trailer: Trailer<'_>, ours: &Author) -> GitChange {
    let author = commit.author();
    let committer = commit.committer();
    let message = String::from_utf8_lossy(commit.message_bytes());
    GitChange {
        commit: commit.id().to_string(),
        author: format!(
            "{} <{}>",
            String::from_utf8_lossy(author.name_bytes()),
            String::from_utf8_lossy(author.email_bytes())
        ),
        ours: trailer.is_in(&message) && committer.email_bytes() == ours.email.as_bytes(),
        value,
    }
}
