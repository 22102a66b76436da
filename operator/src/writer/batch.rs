//! One batch of the git writer: every intent collected for one (repository, branch) during
//! the batching window becomes at most one commit. Blocking (libgit2): runs on the blocking
//! pool.
//!
//! Each attempt: fetch; plan every intent on the fetched head, in arrival order, on an
//! in-memory overlay of file contents (so a later intent sees an earlier intent's edit of the
//! same file); commit the overlay once; push. A rejected push (another writer moved the
//! branch) starts the attempt over on the new head: intents are idempotent "set X to Y", so
//! re-planning yields exactly what is still needed, and an intent someone else already
//! satisfied simply drops out. Nothing but the planned edits ever enters a commit, and a
//! commit is only created on a head the remote showed us (a fresh fetch, or our own last
//! push), so a process killed at any point leaves either nothing or a complete commit on the
//! remote, and the next run re-plans from whatever the remote holds: no duplicate, nothing
//! lost.
//!
//! Committing on our last push: under a burst, the next batch of a branch this task has
//! just pushed plans and commits on that pushed commit without fetching, and the push
//! goes through only if the remote still holds exactly that commit
//! ([`PushMode::FastForwardFrom`]). If anyone else moved the branch meanwhile (a person, CI,
//! another replica), the push is refused before anything is sent, and the batch fetches and
//! plans again at once, like after any rejected push. A batch that finds nothing to write on
//! that commit fetches and plans again too: "nothing to do" is only ever answered on a fetch.
//!
//! An intent whose planning fails gets its own error; the others still commit. A dry-run
//! intent (suspended watch) is planned but never enters the overlay.
//!
//! Reading without fetching: a batch may first plan on the head fetched by an earlier batch
//! when that fetch is still in [`BatchConfig::fetched`] (`--git-read-reuse`). When that plan finds nothing
//! to change (the steady state: every watch re-checks a tag Git already holds), the batch
//! ends without touching the network. When it finds a change, it fetches and plans again like
//! any other batch.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use crate::{
    error::ReconcileError,
    git::{Author, CommitSigner, FileEdit, GitError, PushMode, Repo, RepoCache, WritePoint},
    manifests::{self, ImageChange, ReadScope},
    ttl_cache::TtlCache,
};

use super::{
    WriteRequest, WriteResult,
    message::{Change, CommitTemplate},
};

/// How a batch commits.
pub(crate) struct BatchConfig<'a> {
    pub author: &'a Author,
    pub signer: Option<&'a CommitSigner>,
    pub attempts: u32,
    pub template: &'a CommitTemplate,
    /// Called at each [`WritePoint`] (test hooks).
    pub hook: &'a (dyn Fn(WritePoint) + Sync),
    /// The head of each (repository URL, branch) fetched recently enough to read again
    /// without fetching, for a batch that turns out to change nothing.
    pub fetched: &'a FetchTimes,
    /// The commit this writer pushed to the branch last, when its last batch pushed one: a
    /// batch with edits commits on it without fetching first (see the module docs).
    pub known_head: Option<git2::Oid>,
}

/// The head each (repository URL, branch, credential fingerprint) had when this process last
/// fetched it, kept for `--git-read-reuse` (an empty cache when that is zero). The
/// credentials are part of the key: a head fetched with one tenant's credentials is never
/// read for a watch whose own credentials did not fetch it.
pub(crate) type FetchTimes = TtlCache<(String, String, [u8; 32]), git2::Oid>;

/// What a batch did, for the callers and for metrics.
pub(crate) struct BatchOutcome {
    /// One result per request, in request order.
    pub results: Vec<Result<WriteResult, ReconcileError>>,
    /// The commit now at the head of the pushed branch, when this batch pushed one.
    pub pushed: Option<String>,
    /// Pushes the remote rejected before the final one.
    pub rejected: u32,
    /// Category of the git error that failed the write, if one did.
    pub failure: Option<&'static str>,
    /// The batch was answered on a recent fetch, without fetching.
    pub reused_fetch: bool,
    /// The commit this batch pushed to the branch (plain mode), for
    /// [`BatchConfig::known_head`] of the next batch.
    pub pushed_head: Option<git2::Oid>,
}

/// The plan of one intent in one attempt.
enum Planned {
    Failed(ReconcileError),
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

/// Everything the intents of a batch share (they share a writer key).
pub(super) struct Destination<'a> {
    pub url: &'a str,
    pub branch: &'a str,
    pub push_branch: Option<&'a str>,
    pub auth: &'a crate::git::GitAuth,
}

/// Runs one batch. `requests` share URL, branch, push branch and credentials.
pub(crate) fn write_batch(
    cache: &RepoCache,
    requests: &[WriteRequest],
    config: &BatchConfig<'_>,
) -> BatchOutcome {
    let Some(first) = requests.first() else {
        return BatchOutcome {
            results: Vec::new(),
            pushed: None,
            rejected: 0,
            failure: None,
            reused_fetch: false,
            pushed_head: None,
        };
    };
    let dest = Destination {
        url: &first.url,
        branch: &first.branch,
        push_branch: first
            .push_branch
            .as_deref()
            .filter(|p| !p.is_empty() && *p != first.branch),
        auth: &first.auth,
    };
    let fail_all = |e: GitError, rejected: u32| BatchOutcome {
        failure: Some(e.category()),
        reused_fetch: false,
        pushed_head: None,
        results: requests
            .iter()
            .map(|_| Err(ReconcileError::Git(e.duplicate())))
            .collect(),
        pushed: None,
        rejected,
    };
    let repo = match cache.open_or_clone(dest.url, dest.auth) {
        Ok(repo) => repo,
        Err(e) => return fail_all(e, 0),
    };
    let max_attempts = config.attempts.max(1);
    // Heads (target, push branch) we last pushed on, and why that push was refused.
    let mut rejected: Option<(git2::Oid, Option<git2::Oid>, GitError)> = None;
    let mut rejections = 0;
    let mut attempt = 0;
    // Plan first on the head fetched moments ago, if there is one (see the module docs).
    let fetched_key = (
        dest.url.to_string(),
        dest.branch.to_string(),
        dest.auth.fingerprint(),
    );
    let mut reused = None;
    // Time spent per phase over every attempt, for the log line of a pushed batch.
    let mut spent = Phases::default();
    // The head this writer last saw, to commit on without fetching (plain mode only).
    let mut known = None;
    if dest.push_branch.is_none() {
        // The head that fetch saw, if the clone still holds it.
        reused = config
            .fetched
            .get(&fetched_key, Instant::now())
            .filter(|head| repo.raw().find_commit(*head).is_ok());
        known = config
            .known_head
            .filter(|head| repo.raw().find_commit(*head).is_ok());
    }
    loop {
        attempt += 1;
        let (head, tip) = match reused.or(known) {
            Some(head) => (head, None),
            None => {
                let started = Instant::now();
                let heads = match fetch(&repo, &dest) {
                    Ok(heads) => heads,
                    Err(e) => {
                        config.fetched.forget(&fetched_key);
                        return fail_all(e, rejections);
                    }
                };
                spent.fetch += started.elapsed();
                config.fetched.put(fetched_key.clone(), started, heads.0);
                (config.hook)(WritePoint::Fetched);
                heads
            }
        };
        if let Some((old_head, old_tip, err)) = rejected.take()
            && old_head == head
            && old_tip == tip
        {
            // Nothing moved, so the rejection was not a race (protected branch, hook,
            // permissions): trying again cannot help.
            return fail_all(err, rejections);
        }

        // Push-branch mode: may we overwrite it, and what of its edits do we keep?
        let mut overlay = Overlay::default();
        let owned = match (dest.push_branch, tip) {
            (Some(push_branch), Some(tip)) => {
                match repo
                    .check_push_branch(push_branch, tip, head, config.author)
                    .and_then(|owned| Ok((repo.carry_over(&owned, head)?, owned)))
                {
                    Ok((carried, owned)) => {
                        for edit in carried {
                            overlay.files.insert(edit.path, edit.contents);
                        }
                        Some(owned)
                    }
                    Err(e) => return fail_all(e, rejections),
                }
            }
            _ => None,
        };
        let carried_any = !overlay.files.is_empty();

        let planning = Instant::now();
        let mut reads = Reads::default();
        let planned: Vec<Planned> = requests
            .iter()
            .map(|req| {
                plan_one(
                    &repo,
                    (head, dest.branch),
                    &mut overlay,
                    &mut reads,
                    req,
                    config.author,
                )
            })
            .collect();

        let changes: Vec<Change> = requests
            .iter()
            .zip(&planned)
            .filter_map(|(req, p)| match p {
                Planned::Done(d) if d.contributes => Some(Change {
                    watch: req.watch.clone(),
                    file: d.file.clone(),
                    before: d.before.clone(),
                    after: d.after.clone(),
                }),
                _ => None,
            })
            .collect();
        let target_ref = dest.push_branch.unwrap_or(dest.branch);
        let message = match (&owned, changes.is_empty()) {
            (_, false) => config.template.render(&changes, target_ref),
            // Only carried-over edits: the push branch is rebased with its own message.
            (Some(owned), true) => repo
                .commit_message(owned.tip)
                .unwrap_or_else(|_| format!("imagewatch: rebase onto {}\n", dest.branch)),
            (None, true) => String::new(),
        };
        let edits = overlay.into_edits();
        let unchanged_head = owned.as_ref().map_or(head, |o| o.tip);
        if edits.is_empty() || (changes.is_empty() && !carried_any) {
            if reused.is_none() && known.take().is_some() {
                // Nothing to write on our last push: an answer that nothing is needed is
                // only given on a fresh fetch.
                attempt -= 1;
                continue;
            }
            let mut outcome = finish(requests, planned, None, unchanged_head, attempt, rejections);
            outcome.reused_fetch = reused.is_some();
            return outcome;
        }
        if reused.take().is_some() {
            // Something to write: commit on our last push (which the push checks) or on a
            // fresh fetch.
            attempt -= 1;
            continue;
        }
        // Committing on our last push, not on a fetch: the push goes through only if the
        // remote still holds exactly that commit.
        let on_known = known.take().is_some();

        let committing = Instant::now();
        spent.plan += committing.duration_since(planning);
        let commit = match repo.commit_edits_signed(
            target_ref,
            head,
            &edits,
            &message,
            config.author,
            config.signer,
        ) {
            Ok(Some(commit)) => commit,
            // The edits add up to the head's own contents (answered on a fresh fetch only).
            Ok(None) if on_known => {
                attempt -= 1;
                continue;
            }
            Ok(None) => {
                return finish(requests, planned, None, unchanged_head, attempt, rejections);
            }
            Err(e) => return fail_contributors(requests, planned, e, head, attempt, rejections),
        };
        (config.hook)(WritePoint::Committed);
        let pushing = Instant::now();
        spent.commit += pushing.duration_since(committing);

        // The push branch already holds exactly this change on this head (a run that was
        // killed after pushing): nothing to push, no second commit.
        if let Some(owned) = &owned
            && owned.base == head
            && same_tree(&repo, commit, owned.tip)
        {
            tracing::info!(
                url = dest.url,
                branch = target_ref,
                commit = %owned.tip,
                "push branch already holds these edits"
            );
            let tip = owned.tip.to_string();
            return finish(
                requests,
                planned,
                Some(tip.clone()),
                tip,
                attempt,
                rejections,
            )
            .with_pushed(None);
        }

        (config.hook)(WritePoint::BeforePush);
        let mode = match dest.push_branch {
            None => PushMode::FastForwardFrom { expected: head },
            Some(_) => PushMode::ForceWithLease { expected: tip },
        };
        let on_send = || (config.hook)(WritePoint::Pushing);
        let pushed = repo.push_with(target_ref, commit, dest.auth, mode, Some(&on_send));
        spent.push += pushing.elapsed();
        match pushed {
            Ok(_) => {
                // The tracking ref still shows the head before our push: fetch next time.
                config.fetched.forget(&fetched_key);
                (config.hook)(WritePoint::Pushed);
                tracing::info!(
                    url = dest.url,
                    branch = target_ref,
                    %commit,
                    edits = changes.len(),
                    intents = requests.len(),
                    attempt,
                    fetch_ms = spent.fetch.as_millis() as u64,
                    plan_ms = spent.plan.as_millis() as u64,
                    commit_ms = spent.commit.as_millis() as u64,
                    push_ms = spent.push.as_millis() as u64,
                    "committed batch"
                );
                let c = commit.to_string();
                let mut outcome =
                    finish(requests, planned, Some(c.clone()), c, attempt, rejections)
                        .with_pushed(Some(commit.to_string()));
                // The instants of the push's stages (imagewatch_push_stage_seconds).
                let pushed_at = Instant::now();
                for result in outcome.results.iter_mut().flatten() {
                    if result.commit.is_some() {
                        result.pushed = Some((pushing, pushed_at));
                    }
                }
                outcome.pushed_head = (dest.push_branch.is_none()).then_some(commit);
                return outcome;
            }
            Err(err @ GitError::PushRejected { .. }) if on_known => {
                // The branch moved since our last push: fetch and plan again at once (no
                // race to back off from), without using up an attempt.
                rejections += 1;
                attempt -= 1;
                tracing::debug!(url = dest.url, branch = target_ref, reason = %err, "branch moved since our last push; fetching");
                rejected = Some((head, tip, err));
            }
            Err(err @ GitError::PushRejected { .. }) if attempt < max_attempts => {
                rejections += 1;
                wait_after_rejection(dest.url, target_ref, attempt, max_attempts, &err);
                rejected = Some((head, tip, err));
            }
            Err(e) => {
                let rejections = rejections + u32::from(matches!(e, GitError::PushRejected { .. }));
                return fail_contributors(requests, planned, e, head, attempt, rejections);
            }
        }
    }
}

/// Time a batch spent in each phase, summed over its attempts.
#[derive(Default)]
struct Phases {
    fetch: std::time::Duration,
    plan: std::time::Duration,
    commit: std::time::Duration,
    push: std::time::Duration,
}

impl BatchOutcome {
    fn with_pushed(mut self, pushed: Option<String>) -> Self {
        self.pushed = pushed;
        self
    }
}

pub(super) fn fetch(
    repo: &Repo,
    dest: &Destination<'_>,
) -> crate::git::Result<(git2::Oid, Option<git2::Oid>)> {
    match dest.push_branch {
        None => Ok((repo.fetch(dest.branch, dest.auth)?, None)),
        Some(push_branch) => {
            let heads = repo.fetch_many(&[dest.branch, push_branch], dest.auth)?;
            let head =
                heads
                    .first()
                    .copied()
                    .flatten()
                    .ok_or_else(|| GitError::BranchNotFound {
                        url: dest.url.to_owned(),
                        branch: dest.branch.to_owned(),
                    })?;
            Ok((head, heads.get(1).copied().flatten()))
        }
    }
}

pub(super) fn same_tree(repo: &Repo, a: git2::Oid, b: git2::Oid) -> bool {
    match (repo.tree_and_parent(a), repo.tree_and_parent(b)) {
        (Ok((ta, _)), Ok((tb, _))) => ta == tb,
        _ => false,
    }
}

/// Results when the batch ended without a git failure. `commit` is the commit holding the
/// contributing edits (if any); `head` the branch head afterwards.
fn finish(
    requests: &[WriteRequest],
    planned: Vec<Planned>,
    commit: Option<String>,
    head: impl ToString,
    attempts: u32,
    rejected: u32,
) -> BatchOutcome {
    let head = head.to_string();
    let results = requests
        .iter()
        .zip(planned)
        .map(|(_, p)| match p {
            Planned::Failed(e) => Err(e),
            Planned::Done(d) => Ok(WriteResult {
                pushed: None,
                held: d.held,
                commit: commit.clone().filter(|_| d.contributes),
                current_after: if d.contributes && commit.is_some() {
                    d.after
                } else {
                    d.before.clone()
                },
                current_before: d.before,
                file: d.file,
                desired: d.desired,
                changed_needed: d.changed_needed,
                head: head.clone(),
                attempts,
            }),
        })
        .collect();
    BatchOutcome {
        results,
        pushed: None,
        rejected,
        failure: None,
        reused_fetch: false,
        pushed_head: None,
    }
}

/// Results when committing or pushing failed: intents with an edit get the error; intents
/// that needed no write (already current, dry run) and intents that failed planning keep
/// their own outcome.
fn fail_contributors(
    requests: &[WriteRequest],
    planned: Vec<Planned>,
    error: GitError,
    head: git2::Oid,
    attempts: u32,
    rejected: u32,
) -> BatchOutcome {
    tracing::warn!(error = %error, "git write failed");
    let failure = Some(error.category());
    let head = head.to_string();
    let results = requests
        .iter()
        .zip(planned)
        .map(|(_, p)| match p {
            Planned::Failed(e) => Err(e),
            Planned::Done(d) if d.contributes => Err(ReconcileError::Git(error.duplicate())),
            Planned::Done(d) => Ok(WriteResult {
                pushed: None,
                current_after: d.before.clone(),
                current_before: d.before,
                file: d.file,
                desired: d.desired,
                changed_needed: d.changed_needed,
                commit: None,
                head: head.clone(),
                attempts,
                held: d.held,
            }),
        })
        .collect();
    BatchOutcome {
        results,
        pushed: None,
        rejected,
        failure,
        reused_fetch: false,
        pushed_head: None,
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
    (head, branch): (git2::Oid, &str),
    overlay: &mut Overlay,
    reads: &mut Reads,
    req: &WriteRequest,
    author: &Author,
) -> Planned {
    let files = match read_scope(repo, head, branch, overlay, reads, &req.target.scope()) {
        Ok(files) => files,
        Err(e) => return Planned::Failed(e),
    };
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let plan = match manifests::plan_edit_with(&borrowed, &req.target, &req.change, req.edit) {
        Ok(plan) => plan,
        Err(e) => return Planned::Failed(ReconcileError::TargetNotFound(e.to_string())),
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
                return Planned::Done(Done {
                    desired: desired_of(&edit.new),
                    file: edit.file.clone(),
                    before: edit.old.clone(),
                    after: edit.old.clone(),
                    changed_needed: false,
                    contributes: false,
                    held: Some(hold),
                });
            }
            Err(e) => return Planned::Failed(ReconcileError::Git(e)),
        }
    }
    match plan.edit {
        Some(edit) if !req.dry_run => {
            let Some(path) = normalize_path(&edit.file) else {
                return Planned::Failed(ReconcileError::TargetNotFound(format!(
                    "the planned edit names an invalid path {:?}",
                    edit.file
                )));
            };
            overlay
                .files
                .insert(path.clone(), edit.new_contents.into_bytes());
            Planned::Done(Done {
                desired: desired_of(&edit.new),
                file: path,
                before: edit.old,
                after: edit.new,
                changed_needed: true,
                contributes: true,
                held: None,
            })
        }
        Some(edit) => Planned::Done(Done {
            desired: desired_of(&edit.new),
            file: edit.file,
            after: edit.old.clone(),
            before: edit.old,
            changed_needed: true,
            contributes: false,
            held: None,
        }),
        None => Planned::Done(Done {
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
    head: git2::Oid,
    branch: &str,
    overlay: &Overlay,
    reads: &mut Reads,
    scope: &ReadScope,
) -> Result<Vec<(String, String)>, ReconcileError> {
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).ok();
    match scope {
        ReadScope::Dir(dir) => {
            let dir = normalize_dir(dir).ok_or_else(|| {
                ReconcileError::InvalidSpec(format!("path {dir:?} leaves the repository"))
            })?;
            if !reads.dirs.contains_key(&dir) {
                let read = match repo.read_files_under(head, &dir) {
                    Ok(mut files) => {
                        // Kustomize also accepts a kustomization without an extension.
                        let kustomization = if dir.is_empty() {
                            "Kustomization".to_string()
                        } else {
                            format!("{dir}/Kustomization")
                        };
                        if let Some(contents) = repo
                            .read_file(head, &kustomization)
                            .map_err(ReconcileError::Git)?
                        {
                            files.push((kustomization, contents));
                            files.sort_by(|a, b| a.0.cmp(&b.0));
                        }
                        Some(files)
                    }
                    Err(GitError::PathNotFound { .. }) => None,
                    Err(e) => return Err(ReconcileError::Git(e)),
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
                return Err(ReconcileError::TargetNotFound(format!(
                    "directory {dir:?} does not exist on branch {branch} (commit {head})"
                )));
            }
            Ok(files
                .into_iter()
                .filter_map(|(p, c)| text(c).map(|t| (p.to_string(), t)))
                .collect())
        }
        ReadScope::File(file) => {
            let file = normalize_path(file).ok_or_else(|| {
                ReconcileError::InvalidSpec(format!(
                    "file {file:?} is not a path in the repository"
                ))
            })?;
            if let Some(contents) = overlay.files.get(&file) {
                return Ok(text(contents).map(|t| (file, t)).into_iter().collect());
            }
            if !reads.files.contains_key(&file) {
                let read = repo.read_file(head, &file).map_err(ReconcileError::Git)?;
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

/// Logs a rejected push and waits its backoff before the branch is fetched and the edits
/// planned again on the new head (a batch of intents or a planned commit alike).
pub(super) fn wait_after_rejection(
    url: &str,
    branch: &str,
    attempt: u32,
    max_attempts: u32,
    err: &GitError,
) {
    let delay = crate::git::backoff(attempt);
    tracing::info!(
        url,
        branch,
        attempt,
        max_attempts,
        reason = %err,
        delay_ms = delay.as_millis() as u64,
        "push rejected; fetching and planning again"
    );
    std::thread::sleep(delay);
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
