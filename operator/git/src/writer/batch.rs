//! One batch of the git writer: every intent collected for one (repository, branch) during
//! the batching window becomes at most one commit. A [`Plan`] of the writer's one loop
//! (`commit_loop.rs`: fetch, plan, commit, push, retry).
//!
//! On each head the loop reads, every intent is planned in arrival order on an in-memory
//! overlay of file contents (so a later intent sees an earlier intent's edit of the same
//! file), and the overlay is committed once. A rejected push plans again on the new head:
//! intents are idempotent "set X to Y", so an intent someone else already satisfied simply
//! drops out. Nothing but the planned edits ever enters a commit. In push-branch mode the
//! edits of our own push branch are carried over onto the new head first.
//!
//! An intent whose planning fails gets its own error; the others still commit. A dry-run
//! intent (suspended watch) is planned but never enters the overlay.

use std::collections::{BTreeMap, HashMap};

use crate::{Author, FileEdit, GitError, Oid, OwnedPushBranch, Repo, RepoCache};
use imagewatch_engine::manifests::{self, ImageChange, ReadScope};

use super::{
    WriteError, WriteRequest, WriteResult,
    commit_loop::{self, Destination, Ending, Plan, Planned, Reuse, Run, WriteConfig},
    message::{Change, CommitTemplate},
};

/// What a batch did, for the callers and for metrics.
pub(super) struct BatchOutcome {
    /// One result per request, in request order.
    pub results: Vec<Result<WriteResult, WriteError>>,
    /// The loop's run: how it ended, attempts, rejections, whether a recent fetch answered.
    pub run: Run,
    /// The commit this batch pushed to the branch itself (plain mode), for
    /// [`WriteConfig::known_head`] of the next batch.
    pub pushed_head: Option<Oid>,
}

/// The plan of one intent in one attempt.
enum Intent {
    Failed(WriteError),
    Done(Done),
}

struct Done {
    file: String,
    before: String,
    after: String,
    desired: String,
    changed_needed: bool,
    /// Its edit is in the overlay (not a dry run, and Git differed).
    contributes: bool,
    /// Git holds a change someone else made, not overwritten (`spec.onGitChange`).
    held: Option<imagewatch_engine::held::Hold>,
}

/// The intents of a batch as a [`Plan`]: every intent planned on the head, in arrival order,
/// over one overlay; the last attempt's plans are kept for the results.
struct Intents<'a> {
    requests: &'a [WriteRequest],
    branch: &'a str,
    push_branch: Option<&'a str>,
    author: &'a Author,
    template: &'a CommitTemplate,
    planned: Vec<Intent>,
}

impl Plan for Intents<'_> {
    fn plan(
        &mut self,
        repo: &Repo,
        head: Oid,
        owned: Option<&OwnedPushBranch>,
    ) -> crate::Result<Option<Planned>> {
        // Push-branch mode: the edits of our own push branch are carried over onto the head.
        let mut overlay = Overlay::default();
        if let Some(owned) = owned {
            for edit in repo.carry_over(owned, head)? {
                overlay.files.insert(edit.path, edit.contents);
            }
        }
        let carried_any = !overlay.files.is_empty();
        let mut reads = Reads::default();
        self.planned = self
            .requests
            .iter()
            .map(|req| {
                plan_one(
                    repo,
                    (head, self.branch),
                    &mut overlay,
                    &mut reads,
                    req,
                    self.author,
                )
            })
            .collect();
        let changes: Vec<Change> = self
            .requests
            .iter()
            .zip(&self.planned)
            .filter_map(|(req, p)| match p {
                Intent::Done(d) if d.contributes => Some(Change {
                    watch: req.watch.clone(),
                    file: d.file.clone(),
                    before: d.before.clone(),
                    after: d.after.clone(),
                }),
                _ => None,
            })
            .collect();
        let edits = overlay.into_edits();
        if edits.is_empty() || (changes.is_empty() && !carried_any) {
            return Ok(None);
        }
        let target_ref = self.push_branch.unwrap_or(self.branch);
        let message = match owned {
            Some(owned) if changes.is_empty() => {
                // Only carried-over edits: the push branch is rebased with its own message.
                repo.commit_message(owned.tip)
                    .unwrap_or_else(|_| format!("imagewatch: rebase onto {}\n", self.branch))
            }
            _ => self.template.render(&changes, target_ref),
        };
        Ok(Some(Planned { edits, message }))
    }
}

/// Runs one batch. `requests` share URL, branch, push branch and credentials.
pub(super) fn write_batch(
    cache: &RepoCache,
    requests: &[WriteRequest],
    config: &WriteConfig<'_>,
) -> BatchOutcome {
    let Some(first) = requests.first() else {
        return BatchOutcome {
            results: Vec::new(),
            run: Run::empty(),
            pushed_head: None,
        };
    };
    let dest = Destination::new(
        &first.url,
        &first.branch,
        first.push_branch.as_deref(),
        &first.auth,
    );
    let mut intents = Intents {
        requests,
        branch: dest.branch,
        push_branch: dest.push_branch,
        author: config.author,
        template: config.template,
        planned: Vec::new(),
    };
    let run = commit_loop::write(cache, &dest, Reuse::Recent, config, &mut intents);
    let planned = std::mem::take(&mut intents.planned);
    let attempts = run.attempts;
    let results = match &run.ending {
        Ending::Unchanged { head } => finish(planned, None, *head, attempts, None),
        Ending::AlreadyPushed { tip } => finish(planned, Some(*tip), *tip, attempts, None),
        Ending::Pushed {
            commit,
            pushing,
            pushed_at,
        } => finish(
            planned,
            Some(*commit),
            *commit,
            attempts,
            Some((*pushing, *pushed_at)),
        ),
        Ending::NotPlanned(e) => requests
            .iter()
            .map(|_| Err(WriteError::Git(e.duplicate())))
            .collect(),
        Ending::NotPushed { error, head } => fail_contributors(planned, error, *head, attempts),
    };
    let pushed_head = run.pushed().filter(|_| dest.push_branch.is_none());
    BatchOutcome {
        results,
        run,
        pushed_head,
    }
}

/// Results when the batch ended without a git failure. `commit` is the commit holding the
/// contributing edits (if any); `head` the branch head afterwards; `pushed` the instants of
/// the push's stages (`imagewatch_push_stage_seconds`) when this batch pushed `commit`.
fn finish(
    planned: Vec<Intent>,
    commit: Option<Oid>,
    head: Oid,
    attempts: u32,
    pushed: Option<(std::time::Instant, std::time::Instant)>,
) -> Vec<Result<WriteResult, WriteError>> {
    let head = head.to_string();
    let commit = commit.map(|c| c.to_string());
    planned
        .into_iter()
        .map(|p| match p {
            Intent::Failed(e) => Err(e),
            Intent::Done(d) => Ok(d.result(commit.as_deref(), &head, attempts, pushed)),
        })
        .collect()
}

/// Results when committing or pushing failed: intents with an edit get the error; intents
/// that needed no write (already current, dry run) and intents that failed planning keep
/// their own outcome.
fn fail_contributors(
    planned: Vec<Intent>,
    error: &GitError,
    head: Oid,
    attempts: u32,
) -> Vec<Result<WriteResult, WriteError>> {
    let head = head.to_string();
    planned
        .into_iter()
        .map(|p| match p {
            Intent::Failed(e) => Err(e),
            Intent::Done(d) if d.contributes => Err(WriteError::Git(error.duplicate())),
            Intent::Done(d) => Ok(d.result(None, &head, attempts, None)),
        })
        .collect()
}

impl Done {
    /// This intent's result: `commit` holds its edit when it contributed one (and was
    /// pushed at `pushed`); otherwise Git still holds what it read.
    fn result(
        self,
        commit: Option<&str>,
        head: &str,
        attempts: u32,
        pushed: Option<(std::time::Instant, std::time::Instant)>,
    ) -> WriteResult {
        let commit = commit.filter(|_| self.contributes).map(str::to_owned);
        WriteResult {
            pushed: pushed.filter(|_| commit.is_some()),
            held: self.held,
            current_after: if commit.is_some() {
                self.after
            } else {
                self.before.clone()
            },
            commit,
            current_before: self.before,
            file: self.file,
            desired: self.desired,
            changed_needed: self.changed_needed,
            head: head.to_owned(),
            attempts,
        }
    }
}

/// Contents of the files changed so far in this attempt, by repository path.
#[derive(Default)]
struct Overlay {
    files: BTreeMap<String, Vec<u8>>,
}

impl Overlay {
    fn into_edits(self) -> Vec<FileEdit> {
        self.files
            .into_iter()
            .map(|(path, contents)| FileEdit { path, contents })
            .collect()
    }
}

/// `(repository path, contents)` of the YAML files under a directory.
type DirFiles = Vec<(String, Vec<u8>)>;

/// Reads from the fetched head, shared by the intents of one attempt.
#[derive(Default)]
struct Reads {
    /// Directory → its YAML files (`None`: no such directory).
    dirs: HashMap<String, Option<DirFiles>>,
    /// File → its contents (`None`: no such file).
    files: HashMap<String, Option<Vec<u8>>>,
}

fn plan_one(
    repo: &Repo,
    (head, branch): (Oid, &str),
    overlay: &mut Overlay,
    reads: &mut Reads,
    req: &WriteRequest,
    author: &Author,
) -> Intent {
    let files = match read_scope(repo, head, branch, overlay, reads, &req.target.scope()) {
        Ok(files) => files,
        Err(e) => return Intent::Failed(e),
    };
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let plan = match manifests::plan_edit_with(&borrowed, &req.target, &req.change, req.edit) {
        Ok(plan) => plan,
        Err(e) => return Intent::Failed(WriteError::Edit(e)),
    };
    let desired_of = |planned_new: &str| match &req.change {
        ImageChange::Image(image) => image.clone(),
        ImageChange::Tag(_) => planned_new.to_string(),
    };
    if let (Some(edit), Some(guard)) = (&plan.edit, &req.guard) {
        let file = normalize_path(&edit.file);
        let desired = desired_of(&edit.new);
        match super::history::held_by_git(
            repo,
            head,
            req,
            guard,
            (&edit.old, file),
            &desired,
            author,
        ) {
            Ok(None) => {}
            Ok(Some(hold)) => {
                return Intent::Done(Done {
                    desired: desired_of(&edit.new),
                    file: edit.file.clone(),
                    before: edit.old.clone(),
                    after: edit.old.clone(),
                    changed_needed: false,
                    contributes: false,
                    held: Some(hold),
                });
            }
            Err(e) => return Intent::Failed(WriteError::Git(e)),
        }
    }
    match plan.edit {
        Some(edit) if !req.dry_run => {
            let Some(path) = normalize_path(&edit.file) else {
                return Intent::Failed(WriteError::PlannedPath { path: edit.file });
            };
            overlay
                .files
                .insert(path.clone(), edit.new_contents.into_bytes());
            Intent::Done(Done {
                desired: desired_of(&edit.new),
                file: path,
                before: edit.old,
                after: edit.new,
                changed_needed: true,
                contributes: true,
                held: None,
            })
        }
        Some(edit) => Intent::Done(Done {
            desired: desired_of(&edit.new),
            file: edit.file,
            after: edit.old.clone(),
            before: edit.old,
            changed_needed: true,
            contributes: false,
            held: None,
        }),
        None => Intent::Done(Done {
            desired: desired_of(&plan.current),
            file: plan.file,
            after: plan.current.clone(),
            before: plan.current,
            changed_needed: false,
            contributes: false,
            held: None,
        }),
    }
}

/// The files a target's plan needs, as of the head plus the overlay, as text (files that
/// are not UTF-8 cannot hold our YAML and are left out).
fn read_scope(
    repo: &Repo,
    head: Oid,
    branch: &str,
    overlay: &Overlay,
    reads: &mut Reads,
    scope: &ReadScope,
) -> Result<Vec<(String, String)>, WriteError> {
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).ok();
    match scope {
        ReadScope::Dir(dir) => {
            let dir = normalize_dir(dir)
                .ok_or_else(|| WriteError::DirectoryOutside { dir: dir.clone() })?;
            if !reads.dirs.contains_key(&dir) {
                let read = match repo.read_files_under(head, &dir) {
                    Ok(mut files) => {
                        // Kustomize also accepts a kustomization without an extension.
                        let kustomization = if dir.is_empty() {
                            "Kustomization".to_string()
                        } else {
                            format!("{dir}/Kustomization")
                        };
                        if let Some(contents) = repo.read_file(head, &kustomization)? {
                            files.push((kustomization, contents));
                            files.sort_by(|a, b| a.0.cmp(&b.0));
                        }
                        Some(files)
                    }
                    Err(GitError::PathNotFound { .. }) => None,
                    Err(e) => return Err(WriteError::Git(e)),
                };
                reads.dirs.insert(dir.clone(), read);
            }
            let base = reads.dirs.get(&dir).and_then(Option::as_ref);
            let mut files: BTreeMap<&str, &[u8]> = base
                .into_iter()
                .flatten()
                .map(|(p, c)| (p.as_str(), c.as_slice()))
                .collect();
            let prefix = if dir.is_empty() {
                String::new()
            } else {
                format!("{dir}/")
            };
            for (path, contents) in overlay.files.range(prefix.clone()..) {
                if !path.starts_with(&prefix) {
                    break;
                }
                if has_yaml_extension(path) || path.rsplit('/').next() == Some("Kustomization") {
                    files.insert(path, contents);
                }
            }
            if base.is_none() && files.is_empty() {
                return Err(WriteError::DirectoryNotFound {
                    dir,
                    branch: branch.to_string(),
                    head,
                });
            }
            Ok(files
                .into_iter()
                .filter_map(|(p, c)| text(c).map(|t| (p.to_string(), t)))
                .collect())
        }
        ReadScope::File(file) => {
            let file = normalize_path(file)
                .ok_or_else(|| WriteError::FileOutside { file: file.clone() })?;
            if let Some(contents) = overlay.files.get(&file) {
                return Ok(text(contents).map(|t| (file, t)).into_iter().collect());
            }
            if !reads.files.contains_key(&file) {
                let read = repo.read_file(head, &file)?;
                reads.files.insert(file.clone(), read);
            }
            Ok(reads
                .files
                .get(&file)
                .and_then(Option::as_deref)
                .and_then(text)
                .map(|t| (file, t))
                .into_iter()
                .collect())
        }
    }
}

fn has_yaml_extension(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    lower.ends_with(".yaml") || lower.ends_with(".yml")
}

/// `a/b` form of a directory ("" for the root); `None` when it leaves the repository.
fn normalize_dir(path: &str) -> Option<String> {
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// Like [`normalize_dir`], but a file path must name something.
fn normalize_path(path: &str) -> Option<String> {
    normalize_dir(path).filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(normalize_dir("./apps//x/").as_deref(), Some("apps/x"));
        assert_eq!(normalize_dir("/").as_deref(), Some(""));
        assert_eq!(normalize_dir("a/../b"), None);
        assert_eq!(normalize_path("."), None);
        assert_eq!(normalize_path("/a/b.yaml").as_deref(), Some("a/b.yaml"));
    }
}
