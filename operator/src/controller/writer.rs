//! Write step: the git writer. One persistent bare clone per repository and one writer at a
//! time per (repository, branch); git work runs on the blocking pool.
//!
//! The current image is read from Git (desired state), never from the live cluster. A commit
//! holds only the intended edit; a rejected push is fetched, re-planned on the new head and
//! pushed again (never forced).

use std::{collections::HashMap, path::Path, sync::Arc};

use tokio::sync::Mutex;

use super::ReconcileError;
use crate::{
    git::{self, Author, GitAuth, RepoCache},
    manifests::{self, ImageChange, WorkloadTarget},
    telemetry::{Metrics, PushLabels},
};

/// One edit to make (or, when `dry_run`, only to inspect).
#[derive(Debug, Clone)]
pub struct WriteRequest {
    /// Repository URL.
    pub url: String,
    /// Branch.
    pub branch: String,
    /// Credentials.
    pub auth: GitAuth,
    /// Directory searched for the workload.
    pub path: String,
    /// The workload container.
    pub target: WorkloadTarget,
    /// The image to write.
    pub change: ImageChange,
    /// `namespace/name` of the watch, for the commit message.
    pub watch: String,
    /// Read only: report what would change, write nothing.
    pub dry_run: bool,
}

/// What Git holds and what was done.
#[derive(Debug, Clone)]
pub struct WriteResult {
    /// File holding the image.
    pub file: String,
    /// Image in Git before this write.
    pub current_before: String,
    /// Image in Git after this write (equals `current_before` when nothing was written).
    pub current_after: String,
    /// Image the watch wants.
    pub desired: String,
    /// Whether Git differs from what the watch wants (only meaningful for a dry run).
    pub changed_needed: bool,
    /// Commit created and pushed by this write.
    pub commit: Option<String>,
    /// Branch head after this write.
    pub head: String,
    /// Push attempts (1 unless a push was rejected).
    pub attempts: u32,
}

/// (repository URL, branch): the unit that has exactly one writer at a time.
type WriterKey = (String, String);

/// Serialises writes per (repository, branch) and owns the clone cache.
pub struct GitWriter {
    cache: Arc<RepoCache>,
    locks: Mutex<HashMap<WriterKey, Arc<Mutex<()>>>>,
    author: Author,
    attempts: u32,
    metrics: Arc<Metrics>,
}

impl GitWriter {
    /// A writer keeping its clones under `cache_dir/git`.
    pub fn new(cache_dir: &Path, author: Author, attempts: u32, metrics: Arc<Metrics>) -> Self {
        Self {
            cache: Arc::new(RepoCache::new(cache_dir.join("git"))),
            locks: Mutex::default(),
            author,
            attempts: attempts.max(1),
            metrics,
        }
    }

    async fn lock_for(&self, url: &str, branch: &str) -> Arc<Mutex<()>> {
        let mut locks = self.locks.lock().await;
        locks
            .entry((url.to_string(), branch.to_string()))
            .or_insert_with(|| Arc::new(Mutex::new(())))
            .clone()
    }

    /// Reads the target from Git at the branch head and, unless `dry_run`, commits and pushes
    /// the change when Git differs.
    pub async fn apply(&self, request: WriteRequest) -> Result<WriteResult, ReconcileError> {
        let lock = self.lock_for(&request.url, &request.branch).await;
        let _guard = lock.lock().await;
        let cache = self.cache.clone();
        let author = self.author.clone();
        let attempts = self.attempts;
        let result = tokio::task::spawn_blocking(move || {
            write_blocking(&cache, &request, &author, attempts)
        })
        .await
        .map_err(|e| ReconcileError::Internal(format!("git task: {e}")))?;
        let outcome = match &result {
            Ok(r) if r.commit.is_some() => Some("ok"),
            Ok(_) => None,
            Err(ReconcileError::Git(e)) => Some(e.category()),
            Err(_) => None,
        };
        if let Some(outcome) = outcome {
            self.metrics
                .git_pushes
                .get_or_create(&PushLabels {
                    outcome: outcome.to_string(),
                })
                .inc();
        }
        if let Ok(r) = &result {
            if r.commit.is_some() {
                self.metrics.commits.inc();
            }
            if r.attempts > 1 {
                self.metrics
                    .git_pushes
                    .get_or_create(&PushLabels {
                        outcome: "rejected".to_string(),
                    })
                    .inc_by(u64::from(r.attempts - 1));
            }
        }
        result
    }
}

/// Files under `path` as UTF-8 text; other files are skipped (they cannot hold our YAML).
fn text_files(files: Vec<(String, Vec<u8>)>) -> Vec<(String, String)> {
    files
        .into_iter()
        .filter_map(|(name, bytes)| String::from_utf8(bytes).ok().map(|text| (name, text)))
        .collect()
}

fn write_blocking(
    cache: &RepoCache,
    req: &WriteRequest,
    author: &Author,
    attempts: u32,
) -> Result<WriteResult, ReconcileError> {
    let repo = cache.open_or_clone(&req.url, &req.auth)?;
    let mut last: Option<(String, String, String)> = None; // (file, before, after)
    let mut plan_error: Option<ReconcileError> = None;
    let outcome = git::write_with_retry(
        &repo,
        &req.branch,
        &req.auth,
        attempts,
        |repo, head| {
            let files = text_files(repo.read_files_under(head, &req.path)?);
            let borrowed: Vec<(String, &str)> =
                files.iter().map(|(n, t)| (n.clone(), t.as_str())).collect();
            match manifests::plan_workload_edit(&borrowed, &req.target, &req.change) {
                Ok(plan) => {
                    let (file, before, after, contents) = match plan.edit {
                        Some(edit) => (
                            edit.file,
                            edit.old,
                            edit.new.clone(),
                            Some(edit.new_contents),
                        ),
                        None => (plan.file, plan.current.clone(), plan.current, None),
                    };
                    last = Some((file.clone(), before.clone(), after.clone()));
                    match contents {
                        Some(contents) if !req.dry_run => {
                            let message = format!(
                                "imagewatch: {} {} -> {}\n\nwatch: {}\nfile: {}\nimage: {} -> {}\n",
                                req.target.name,
                                tag_or_image(&before),
                                tag_or_image(&after),
                                req.watch,
                                file,
                                before,
                                after
                            );
                            Ok(Some((
                                vec![git::FileEdit {
                                    path: file,
                                    contents: contents.into_bytes(),
                                }],
                                message,
                            )))
                        }
                        _ => Ok(None),
                    }
                }
                Err(e) => {
                    plan_error = Some(ReconcileError::TargetNotFound(e.to_string()));
                    Ok(None)
                }
            }
        },
        author,
    );
    if let Some(e) = plan_error {
        return Err(e);
    }
    let outcome = outcome?;
    let (file, before, planned_after) =
        last.ok_or_else(|| ReconcileError::Internal("no plan was made".into()))?;
    let desired = match &req.change {
        ImageChange::Image(image) => image.clone(),
        ImageChange::Tag(_) => planned_after.clone(),
    };
    match outcome {
        git::WriteOutcome::Committed { commit, attempts } => Ok(WriteResult {
            file,
            current_before: before,
            current_after: planned_after,
            desired,
            changed_needed: true,
            head: commit.to_string(),
            commit: Some(commit.to_string()),
            attempts,
        }),
        git::WriteOutcome::NothingToDo { head } => {
            let changed_needed = before != planned_after;
            Ok(WriteResult {
                file,
                current_after: before.clone(),
                current_before: before,
                desired,
                changed_needed,
                commit: None,
                head: head.to_string(),
                attempts: 1,
            })
        }
    }
}

fn tag_or_image(image: &str) -> String {
    manifests::ImageRef::parse(image)
        .ok()
        .and_then(|r| r.tag().map(str::to_string))
        .unwrap_or_else(|| image.to_string())
}
