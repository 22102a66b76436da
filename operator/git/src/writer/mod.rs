//! Write step: the git writer. Reconciles hand it edit intents ("set this target to this
//! image"); it turns every intent arriving for one (repository, branch) within a short
//! window into one commit.
//!
//! Shape: [`GitWriter`] keeps one writer task per [`WriterKey`] (repository URL, branch, push
//! branch, credentials), reached through a channel. [`GitWriter::apply`] sends a job (the
//! intent plus a one-shot reply channel) and waits for its own [`WriteResult`]. The task
//! collects jobs until the batching window after the first one closes (or the batch is
//! full), then runs the batch on the blocking pool (`batch.rs`: plan all, commit once, over the
//! one fetch → plan → commit → push → retry loop of `commit_loop.rs`). A task that stays idle exits to free its memory; the
//! next intent starts a new one.
//!
//! A promotion's commit ([`GitWriter::commit`], a [`CommitRequest`]: file edits with a message,
//! planned on the fetched head, onto a branch or a pull-request branch) goes through the same
//! task of its (repository, branch), the same clone, the same signing and the same re-planning
//! after a rejected push (`commit.rs`): this writer is the only code that commits and pushes.
//! [`GitWriter::clones`] lends its clone cache to readers (a promotion reads its target at
//! the base commit before deciding), so a repository used by several controllers is cloned
//! once per credential.
//!
//! Credentials are part of the key: watches in different namespaces may name different
//! Secrets for the same repository, and one watch's intent must never be pushed with another
//! watch's credentials.
//!
//! The current image is read from Git (desired state), never from the live cluster. A commit
//! holds only the intended edits; shared branches are only ever fast-forwarded. In push-branch
//! mode ([`WriteRequest::push_branch`]) the commit is based on the branch head and
//! force-pushed to the push branch, but only while that branch holds nothing but our own
//! commit (rule in `branch.rs`).
//!
//! Test hook, only in builds with the `test-hooks` feature (the e2e crate enables it; the
//! release binary has no such code): `IMAGEWATCH_TEST_CRASH_POINT` (`--test-crash-point`)
//! set to `after-fetch`, `after-commit`, `before-push`, `mid-push` or `after-push` aborts the
//! process at that point of a write, so tests can prove that a restart completes the work
//! without a duplicate commit.

mod batch;
mod commit;
mod commit_loop;
mod error;
mod history;
mod message;
mod request;

use std::{
    collections::HashMap,
    path::Path,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::{mpsc, oneshot};

pub use commit::{CommitOutcome, CommitRequest, CommitResult, PlanEdits};
pub use commit_loop::backoff;
pub use error::WriteError;
pub use history::HistoryReader;
pub use message::{
    Change, CommitTemplate, DEFAULT_COMMIT_TEMPLATE, TemplateError, short_image, subject,
};

use crate::{Author, CommitSigner, GitAuth, RepoCache, WritePoint};
use imagewatch_engine::manifests::{ImageChange, TargetSpec};
use imagewatch_telemetry::{GitReadLabels, Metrics, PushLabels};

pub use request::{GitChangeGuard, WriteRequest, WriteResult};

/// A callback run at each point of a write (tests only).
pub type WriteHook = Arc<dyn Fn(WritePoint) + Send + Sync>;

/// How the writer batches, commits and signs.
#[derive(Clone)]
pub struct WriterOptions {
    /// Author and committer of our commits.
    pub author: Author,
    /// Rounds of a write whose push is rejected (non-fast-forward) before giving up.
    pub push_attempts: u32,
    /// Intents arriving within this time after the first one of a batch join it.
    pub batch_window: Duration,
    /// A batch closes early when no intent arrived for this long.
    pub batch_quiet: Duration,
    /// Most intents in one batch.
    pub max_batch: usize,
    /// A writer task with nothing to do for this long exits.
    pub idle_timeout: Duration,
    /// A batch that changes nothing may read a head fetched this recently (zero: always
    /// fetch); see `batch.rs`.
    pub reuse_fetch: Duration,
    /// Commit message template.
    pub commit_template: CommitTemplate,
    /// Signs commits when set.
    pub signer: Option<CommitSigner>,
    /// Test hook: abort the process at this point of a write.
    #[cfg(feature = "test-hooks")]
    pub crash_point: Option<WritePoint>,
    /// Test hook: called at each point of a write.
    pub hook: Option<WriteHook>,
}

impl std::fmt::Debug for WriterOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterOptions")
            .field("author", &self.author)
            .field("push_attempts", &self.push_attempts)
            .field("batch_window", &self.batch_window)
            .field("batch_quiet", &self.batch_quiet)
            .field("max_batch", &self.max_batch)
            .field("idle_timeout", &self.idle_timeout)
            .field("reuse_fetch", &self.reuse_fetch)
            .field("signer", &self.signer)
            .field("hook", &self.hook.as_ref().map(|_| "<fn>"))
            .finish_non_exhaustive()
    }
}

impl WriterOptions {
    /// Defaults: 5 push attempts, a 1 s window, at most 500 intents per batch, idle writers
    /// exit after 5 min, the default commit template, no signing.
    pub fn new(author: Author) -> Self {
        Self {
            author,
            push_attempts: 5,
            batch_window: Duration::from_secs(1),
            batch_quiet: Duration::from_millis(20),
            max_batch: 500,
            idle_timeout: Duration::from_secs(300),
            reuse_fetch: Duration::ZERO,
            commit_template: CommitTemplate::default(),
            signer: None,
            #[cfg(feature = "test-hooks")]
            crash_point: None,
            hook: None,
        }
    }
}

/// The unit that has exactly one writer task: repository URL, branch, push branch and a
/// fingerprint of the credentials.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WriterKey {
    /// Repository URL.
    pub url: String,
    /// Branch.
    pub branch: String,
    /// Push branch, if any.
    pub push_branch: Option<String>,
    /// SHA-256 of the credentials (never the credentials themselves).
    pub credentials: [u8; 32],
}

impl WriterKey {
    /// The key of a request.
    pub fn of(request: &WriteRequest) -> Self {
        Self::new(
            &request.url,
            &request.branch,
            request.push_branch.as_deref(),
            &request.auth,
        )
    }

    /// The key of a planned commit: the same task as the intents for its branch (or
    /// pull-request branch).
    pub fn of_commit(request: &CommitRequest) -> Self {
        Self::new(
            &request.url,
            &request.branch,
            request.push_branch.as_deref(),
            &request.auth,
        )
    }

    fn new(url: &str, branch: &str, push_branch: Option<&str>, auth: &GitAuth) -> Self {
        Self {
            url: url.to_string(),
            branch: branch.to_string(),
            push_branch: push_branch
                .filter(|p| !p.is_empty() && *p != branch)
                .map(str::to_string),
            credentials: auth.fingerprint(),
        }
    }
}

/// Work for a writer task and where its answer goes.
enum Job {
    /// An ImageWatch intent (batched with the others of its branch).
    Intent(Box<IntentJob>),
    /// A planned commit (a promotion's), written on its own after the intents it arrived with.
    Commit {
        request: CommitRequest,
        reply: oneshot::Sender<Result<CommitResult, WriteError>>,
    },
}

/// An intent and where its answer goes.
struct IntentJob {
    request: WriteRequest,
    reply: oneshot::Sender<Result<WriteResult, WriteError>>,
}

/// State shared by the writer and its tasks.
struct Shared {
    cache: Arc<RepoCache>,
    options: WriterOptions,
    metrics: Arc<Metrics>,
    tasks: Mutex<HashMap<WriterKey, (u64, mpsc::Sender<Job>)>>,
    next_task: AtomicU64,
    fetched: commit_loop::FetchTimes,
    unchanged: Unchanged,
}

/// Intents that the last batches found already satisfied, with the head they were read at:
/// the same intent on the same (recently fetched) head is answered without a batch.
#[derive(Default)]
struct Unchanged(Mutex<UnchangedEntries>);

/// The answers of [`Unchanged`], and the newest head each branch was read at.
#[derive(Default)]
struct UnchangedEntries {
    answers: HashMap<UnchangedKey, WriteResult>,
    /// Head of the last batch remembered per branch: answers read at an older one are never
    /// given again.
    heads: HashMap<WriterKey, String>,
    /// Size at which the next prune runs: twice what the last one kept (at least
    /// [`UNCHANGED_PRUNE_AT`]), so that adding an answer costs O(1) amortised however many
    /// watches there are.
    prune_at: usize,
}

/// An intent, as far as its answer depends on it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct UnchangedKey {
    writer: WriterKey,
    target: TargetSpec,
    change: ImageChange,
    dry_run: bool,
}

impl UnchangedKey {
    fn of(request: &WriteRequest) -> Self {
        Self {
            writer: WriterKey::of(request),
            target: request.target.clone(),
            change: request.change.clone(),
            dry_run: request.dry_run,
        }
    }
}

/// Above this many answers (or twice what the last prune kept), those read at another head
/// than their branch's newest one are dropped when one is added.
const UNCHANGED_PRUNE_AT: usize = 50_000;

impl UnchangedEntries {
    fn get(&self, key: &UnchangedKey, head: &str) -> Option<WriteResult> {
        self.answers.get(key).filter(|r| r.head == head).cloned()
    }

    fn put(&mut self, key: UnchangedKey, result: WriteResult) {
        match self.heads.get_mut(&key.writer) {
            Some(head) if *head == result.head => {}
            Some(head) => head.clone_from(&result.head),
            None => {
                self.heads.insert(key.writer.clone(), result.head.clone());
            }
        }
        if self.answers.len() >= self.prune_at.max(UNCHANGED_PRUNE_AT) {
            self.prune();
        }
        self.answers.insert(key, result);
    }

    /// Drops the answers read at an older head than their branch's newest. Answers at the
    /// newest head are each a live intent's, so they are kept however many there are: a
    /// fixed bound below the number of watches would empty the cache over and over, and
    /// every check would read Git again.
    fn prune(&mut self) {
        let heads = &self.heads;
        self.answers
            .retain(|k, r| heads.get(&k.writer).is_some_and(|h| *h == r.head));
        let live: std::collections::HashSet<&WriterKey> =
            self.answers.keys().map(|k| &k.writer).collect();
        let kept: HashMap<WriterKey, String> = self
            .heads
            .iter()
            .filter(|(w, _)| live.contains(w))
            .map(|(w, h)| (w.clone(), h.clone()))
            .collect();
        self.heads = kept;
        self.prune_at = self.answers.len().saturating_mul(2);
    }
}

impl Unchanged {
    fn get(&self, key: &UnchangedKey, head: &str) -> Option<WriteResult> {
        let entries = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        entries.get(key, head)
    }

    fn put(&self, key: UnchangedKey, result: WriteResult) {
        let mut entries = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        entries.put(key, result);
    }
}

/// Batches intents per (repository, branch) into commits and owns the clone cache.
pub struct GitWriter {
    shared: Arc<Shared>,
}

/// Jobs that may wait in one task's queue.
const QUEUE: usize = 4096;

impl GitWriter {
    /// A writer keeping its clones under `cache_dir/git`, with default options.
    pub fn new(cache_dir: &Path, author: Author, attempts: u32, metrics: Arc<Metrics>) -> Self {
        let mut options = WriterOptions::new(author);
        options.push_attempts = attempts;
        Self::with_options(cache_dir, options, metrics)
    }

    /// A writer keeping its clones under `cache_dir/git`.
    pub fn with_options(cache_dir: &Path, options: WriterOptions, metrics: Arc<Metrics>) -> Self {
        let fetched = commit_loop::FetchTimes::new(options.reuse_fetch);
        Self {
            shared: Arc::new(Shared {
                cache: Arc::new(RepoCache::new(cache_dir.join("git"))),
                options,
                metrics,
                tasks: Mutex::default(),
                next_task: AtomicU64::new(0),
                fetched,
                unchanged: Unchanged::default(),
            }),
        }
    }

    /// The clone cache (one bare clone per repository and credential, under `cache_dir/git`)
    /// for code that must read a repository before deciding what to commit; reads lease the
    /// clone like the writer's own tasks do. Committing and pushing stay with the writer.
    pub fn clones(&self) -> &Arc<RepoCache> {
        &self.shared.cache
    }

    /// Reads who last changed a value in Git (`history.rs`), telling imagewatch's commits by
    /// this writer's committer identity: a promotion's target, read on a leased clone.
    pub fn history(&self) -> HistoryReader {
        HistoryReader::new(self.shared.options.author.clone())
    }

    /// Writer tasks currently alive.
    pub fn active_writers(&self) -> usize {
        self.shared
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Queues the intent with the others for its repository and branch and waits for its
    /// result: the target is read from Git at the fetched head and, unless `dry_run`, the
    /// change is committed and pushed (together with the rest of the batch) when Git differs.
    pub async fn apply(&self, request: WriteRequest) -> Result<WriteResult, WriteError> {
        // Already answered on the head fetched moments ago: nothing to read again.
        if !self.shared.options.reuse_fetch.is_zero() {
            let key = UnchangedKey::of(&request);
            let branch = (
                request.url.clone(),
                request.branch.clone(),
                key.writer.credentials,
            );
            if key.writer.push_branch.is_none()
                && let Some(head) = self.shared.fetched.get(&branch, Instant::now())
                && let Some(result) = self.shared.unchanged.get(&key, &head.to_string())
            {
                count_reads(&self.shared.metrics, "unchanged", 1);
                return Ok(result);
            }
        }
        let key = WriterKey::of(&request);
        let (reply, answer) = oneshot::channel();
        self.submit(&key, Job::Intent(Box::new(IntentJob { request, reply })))
            .await?;
        answer.await.map_err(|_| WriteError::Stopped)?
    }

    /// What `request`'s own branch holds of its edit, without writing anything: the
    /// target's current image, and whether the branch still lacks the edit
    /// (`changed_needed`). A pull request reads its base this way, after its head branch
    /// was written; it is answered on the same clone, in order with the intents before it.
    pub async fn read_base(&self, request: &WriteRequest) -> Result<WriteResult, WriteError> {
        self.apply(WriteRequest {
            push_branch: None,
            dry_run: true,
            ..request.clone()
        })
        .await
    }

    /// Queues a planned commit (a promotion's) in the task of its (repository, branch) and
    /// waits for it: fetched, planned, committed (signed like every commit) and pushed, and
    /// planned again on the new head when the push is rejected. It runs after the intents
    /// queued before it, on the same clone.
    pub async fn commit(&self, request: CommitRequest) -> Result<CommitResult, WriteError> {
        let key = WriterKey::of_commit(&request);
        let (reply, answer) = oneshot::channel();
        self.submit(&key, Job::Commit { request, reply }).await?;
        answer.await.map_err(|_| WriteError::Stopped)?
    }

    /// Hands `job` to the task of `key`, starting one when needed.
    async fn submit(&self, key: &WriterKey, mut job: Job) -> Result<(), WriteError> {
        // A task that just retired closes its queue; the retry reaches a fresh one.
        for _ in 0..3 {
            let (id, sender) = self.sender_for(key);
            match sender.send(job).await {
                Ok(()) => return Ok(()),
                Err(mpsc::error::SendError(back)) => {
                    job = back;
                    self.forget(key, id);
                }
            }
        }
        Err(WriteError::NotAccepting)
    }

    fn sender_for(&self, key: &WriterKey) -> (u64, mpsc::Sender<Job>) {
        let mut tasks = self
            .shared
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((id, sender)) = tasks.get(key)
            && !sender.is_closed()
        {
            return (*id, sender.clone());
        }
        let id = self.shared.next_task.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = mpsc::channel(QUEUE);
        tasks.insert(key.clone(), (id, sender.clone()));
        tracing::debug!(url = %key.url, branch = %key.branch, push_branch = ?key.push_branch, "starting git writer task");
        tokio::spawn(run_task(self.shared.clone(), key.clone(), id, receiver));
        (id, sender)
    }

    fn forget(&self, key: &WriterKey, id: u64) {
        let mut tasks = self
            .shared
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if tasks.get(key).is_some_and(|(i, _)| *i == id) {
            tasks.remove(key);
        }
    }
}

/// One writer task: collect a batch, write it, repeat; retire when idle.
async fn run_task(shared: Arc<Shared>, key: WriterKey, id: u64, mut receiver: mpsc::Receiver<Job>) {
    let options = &shared.options;
    // The commit this task pushed last, while nothing else moved the branch since.
    let mut known_head = None;
    loop {
        let first = tokio::select! {
            job = receiver.recv() => match job {
                Some(job) => job,
                None => return,
            },
            () = tokio::time::sleep(options.idle_timeout) => {
                // Leave the map first, so no new sender is handed out; then close the queue
                // and write whatever slipped in meanwhile.
                {
                    let mut tasks = shared.tasks.lock().unwrap_or_else(PoisonError::into_inner);
                    if tasks.get(&key).is_some_and(|(i, _)| *i == id) {
                        tasks.remove(&key);
                    }
                }
                receiver.close();
                let mut rest = Vec::new();
                while let Ok(job) = receiver.try_recv() {
                    rest.push(job);
                }
                if !rest.is_empty() {
                    write_jobs(&shared, rest, &mut known_head).await;
                }
                tracing::debug!(url = %key.url, branch = %key.branch, "git writer task idle; exiting");
                return;
            }
        };
        let mut jobs = vec![first];
        // A batch closes when no further intent arrived for the quiet period, or at the
        // window's end at the latest: a lone push is written at once, a burst becomes one
        // commit.
        let deadline = tokio::time::Instant::now() + options.batch_window;
        while jobs.len() < options.max_batch.max(1) {
            let quiet_end = (tokio::time::Instant::now() + options.batch_quiet).min(deadline);
            match tokio::time::timeout_at(quiet_end, receiver.recv()).await {
                Ok(Some(job)) => jobs.push(job),
                Ok(None) | Err(_) => break,
            }
        }
        write_jobs(&shared, jobs, &mut known_head).await;
    }
}

/// Writes what a task collected: the intents as one batch, then each planned commit, in
/// arrival order. `known_head` is the commit the task pushed last, updated here.
async fn write_jobs(shared: &Arc<Shared>, jobs: Vec<Job>, known_head: &mut Option<git2::Oid>) {
    let mut intents = Vec::new();
    let mut commits = Vec::new();
    for job in jobs {
        match job {
            Job::Intent(job) => intents.push(*job),
            Job::Commit { request, reply } => commits.push((request, reply)),
        }
    }
    if !intents.is_empty() {
        *known_head = write_intents(shared, intents, *known_head).await;
    }
    for (request, reply) in commits {
        // A planned commit fetches and moves the branch itself.
        *known_head = None;
        let result = write_planned(shared, request).await;
        // The caller may have gone away (shutdown); the write stands either way.
        let _ = reply.send(result);
    }
}

/// The hook run at each point of a write: the test hooks (crash point, callback).
fn write_hook(options: &WriterOptions) -> impl Fn(WritePoint) + Sync + use<> {
    #[cfg(feature = "test-hooks")]
    let crash_point = options.crash_point;
    let hook = options.hook.clone();
    move |point: WritePoint| {
        #[cfg(feature = "test-hooks")]
        if crash_point == Some(point) {
            tracing::error!(
                point = point.name(),
                "test hook IMAGEWATCH_TEST_CRASH_POINT: aborting the process"
            );
            std::process::abort();
        }
        if let Some(hook) = &hook {
            hook(point);
        }
    }
}

/// Runs `write` on the blocking pool inside `span`, with the writer's commit settings
/// (`known_head`: the branch head our last push left, if any).
async fn on_blocking_pool<T: Send + 'static>(
    shared: &Arc<Shared>,
    span: tracing::Span,
    known_head: Option<git2::Oid>,
    write: impl FnOnce(&Shared, &commit_loop::WriteConfig<'_>) -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    let shared = shared.clone();
    tokio::task::spawn_blocking(move || {
        let _span = span.enter();
        let options = &shared.options;
        let hook = write_hook(options);
        let config = commit_loop::WriteConfig {
            author: &options.author,
            signer: options.signer.as_ref(),
            attempts: options.push_attempts,
            template: &options.commit_template,
            hook: &hook,
            fetched: &shared.fetched,
            known_head,
        };
        write(&shared, &config)
    })
    .await
}

/// Writes one planned commit on the blocking pool.
async fn write_planned(
    shared: &Arc<Shared>,
    request: CommitRequest,
) -> Result<CommitResult, WriteError> {
    let span = tracing::info_span!(
        "commit",
        repository = %request.url,
        branch = %request.branch,
        push_branch = ?request.push_branch,
    );
    let outcome = on_blocking_pool(shared, span, None, move |shared, config| {
        commit::write_commit(&shared.cache, request, config)
    })
    .await;
    match outcome {
        Ok((result, run)) => {
            record_write(&shared.metrics, &run);
            count_reads(&shared.metrics, "fetch", 1);
            result
        }
        Err(e) => {
            tracing::error!(error = %e, "git writer commit panicked or was cancelled");
            Err(WriteError::Task(e.to_string()))
        }
    }
}

/// Writes one batch of intents on the blocking pool and answers every job; returns the commit
/// it pushed (see [`batch::BatchOutcome::pushed_head`]).
async fn write_intents(
    shared: &Arc<Shared>,
    jobs: Vec<IntentJob>,
    known_head: Option<git2::Oid>,
) -> Option<git2::Oid> {
    let (requests, replies): (Vec<WriteRequest>, Vec<_>) =
        jobs.into_iter().map(|j| (j.request, j.reply)).unzip();
    let count = requests.len();
    // What an unchanged answer would be remembered under (not in push-branch mode).
    let unchanged_keys: Vec<Option<UnchangedKey>> = if shared.options.reuse_fetch.is_zero() {
        Vec::new()
    } else {
        requests
            .iter()
            .map(|r| Some(UnchangedKey::of(r)).filter(|k| k.writer.push_branch.is_none()))
            .collect()
    };
    // One span per batch (fetch, plan, commit, push): its log lines carry the repository.
    let span = tracing::info_span!(
        "commit",
        repository = %requests.first().map(|r| r.url.as_str()).unwrap_or_default(),
        branch = %requests.first().map(|r| r.branch.as_str()).unwrap_or_default(),
        intents = count,
    );
    let outcome = on_blocking_pool(shared, span, known_head, move |shared, config| {
        batch::write_batch(&shared.cache, &requests, config)
    })
    .await;
    let mut pushed_head = None;
    let results = match outcome {
        Ok(outcome) => {
            pushed_head = outcome.pushed_head;
            record_write(&shared.metrics, &outcome.run);
            let source = if outcome.run.reused_fetch {
                "recent-fetch"
            } else {
                "fetch"
            };
            count_reads(&shared.metrics, source, count as u64);
            outcome.results
        }
        Err(e) => {
            tracing::error!(error = %e, "git writer batch panicked or was cancelled");
            (0..count)
                .map(|_| Err(WriteError::Task(e.to_string())))
                .collect()
        }
    };
    for (key, result) in unchanged_keys.into_iter().zip(&results) {
        if let (Some(key), Ok(r)) = (key, result)
            && r.commit.is_none()
            && !r.changed_needed
            && r.held.is_none()
        {
            shared.unchanged.put(key, r.clone());
        }
    }
    for (reply, result) in replies.into_iter().zip(results) {
        // The caller may have gone away (shutdown); the write stands either way.
        let _ = reply.send(result);
    }
    pushed_head
}

fn count_reads(metrics: &Metrics, source: &str, n: u64) {
    metrics
        .git_reads
        .get_or_create(&GitReadLabels {
            source: source.to_string(),
        })
        .inc_by(n);
}

fn record_write(metrics: &Metrics, run: &commit_loop::Run) {
    let push = |outcome: &str, n: u64| {
        if n > 0 {
            metrics
                .git_pushes
                .get_or_create(&PushLabels {
                    outcome: outcome.to_string(),
                })
                .inc_by(n);
        }
    };
    push("rejected", u64::from(run.rejections));
    if run.pushed().is_some() {
        metrics.commits.inc();
        push("ok", 1);
    }
    if let Some(category) = run.failure() {
        push(category, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use imagewatch_engine::manifests::EditOptions;

    fn request(auth: GitAuth, push_branch: Option<&str>) -> WriteRequest {
        WriteRequest {
            url: "https://git.example/x.git".into(),
            branch: "main".into(),
            auth,
            target: TargetSpec::Helm {
                file: "values.yaml".into(),
                key: "image.tag".into(),
            },
            change: ImageChange::Tag("1".into()),
            edit: EditOptions::default(),
            watch: "ns/w".into(),
            dry_run: false,
            push_branch: push_branch.map(str::to_string),
            guard: None,
        }
    }

    #[test]
    fn keys_separate_credentials_and_push_branches() {
        let basic = |p: &str| GitAuth::Basic {
            username: "u".into(),
            password: p.into(),
        };
        let a = WriterKey::of(&request(basic("s3cret-one"), None));
        assert_eq!(a, WriterKey::of(&request(basic("s3cret-one"), None)));
        assert_ne!(a, WriterKey::of(&request(basic("s3cret-two"), None)));
        assert_ne!(a, WriterKey::of(&request(GitAuth::Anonymous, None)));
        assert_ne!(
            a,
            WriterKey::of(&request(basic("s3cret-one"), Some("imagewatch/w")))
        );
        // A push branch equal to the branch (or empty) is plain mode.
        assert_eq!(
            a,
            WriterKey::of(&request(basic("s3cret-one"), Some("main")))
        );
        assert_eq!(a, WriterKey::of(&request(basic("s3cret-one"), Some(""))));
        assert!(!format!("{a:?}").contains("s3cret"));
    }

    fn answer(head: &str) -> WriteResult {
        WriteResult {
            pushed: None,
            file: "values.yaml".into(),
            current_before: "app:1".into(),
            current_after: "app:1".into(),
            desired: "app:1".into(),
            changed_needed: false,
            commit: None,
            head: head.into(),
            attempts: 1,
            held: None,
        }
    }

    fn unchanged_key(url: &str, file: usize) -> UnchangedKey {
        let mut r = request(GitAuth::Anonymous, None);
        r.url = url.into();
        r.target = TargetSpec::Helm {
            file: format!("apps/{file}/values.yaml"),
            key: "image.tag".into(),
        };
        UnchangedKey::of(&r)
    }

    #[test]
    fn unchanged_answers_at_the_newest_head_survive_any_number_of_watches() {
        let mut entries = UnchangedEntries::default();
        // More answers than the prune bound, all read at the head of their branch.
        let watches = UNCHANGED_PRUNE_AT + 1_000;
        for i in 0..watches {
            let url = if i % 2 == 0 {
                "https://git.example/a.git"
            } else {
                "https://git.example/b.git"
            };
            entries.put(unchanged_key(url, i), answer("h1"));
        }
        assert_eq!(entries.answers.len(), watches);
        for i in [0, 1, watches / 2, watches - 1] {
            let url = if i % 2 == 0 {
                "https://git.example/a.git"
            } else {
                "https://git.example/b.git"
            };
            assert!(
                entries.get(&unchanged_key(url, i), "h1").is_some(),
                "answer {i}"
            );
        }
        // Branch a moves on: its older answers go at the next prune, b's stay.
        entries.put(unchanged_key("https://git.example/a.git", 0), answer("h2"));
        entries.prune();
        assert_eq!(entries.answers.len(), 1 + watches / 2);
        assert!(
            entries
                .get(&unchanged_key("https://git.example/a.git", 2), "h1")
                .is_none()
        );
        assert!(
            entries
                .get(&unchanged_key("https://git.example/b.git", 1), "h1")
                .is_some()
        );
        assert!(
            entries
                .get(&unchanged_key("https://git.example/a.git", 0), "h2")
                .is_some()
        );
        assert_eq!(entries.heads.len(), 2);
        // The next prune waits until the cache has doubled.
        assert_eq!(entries.prune_at, 2 * entries.answers.len());
    }
}
