//! The PromotionPolicy controller: what a source stage runs is proposed to a target stage,
//! behind gates, by pull request (one per policy, updated in place) or by a direct commit.
//!
//! One reconcile of one policy, top to bottom:
//!
//! 1. **validate** (pure): durations, exactly one source, pull request settings, pin tags;
//! 2. **dereference** (I/O): the selected ImageWatches and their `status.applied`, the Git
//!    location and credentials, the Argo CD Application of the `application` gate;
//! 3. **read Git** (blocking): fetch the target branch (and the source branch and the pull
//!    request branch), read `to.path` (and `from.path`), check that the Application's revision
//!    holds the source commits;
//! 4. **decide** (pure, `crate::promotion`): candidate, diff against the target, gates;
//! 5. **write**: nothing when the target already matches (an open pull request is then closed);
//!    otherwise, once every gate passes, a commit on `to.branch` (mode `Commit`, rebased and
//!    retried when the push is rejected) or a commit on `imagewatch/promote-<ns>-<name>`, the
//!    only branch the operator force-pushes, and only while it holds nothing but the
//!    operator's own commit, plus one pull request found, updated or created on the forge;
//! 6. **status** (server-side apply, field manager `imagewatch`): source, candidate, gates,
//!    pull request, the last 10 promotions, conditions `Ready`, `GatesPassing`,
//!    `PullRequestOpen`; Events for each promotion; metrics.
//!
//! Also triggered when an ImageWatch in the policy's namespace changes (a new applied tag
//! makes a new candidate at once), and every `spec.interval` (soaks end, Applications become
//! healthy, approvals arrive).
//!
//! **Deletion.** While a pull request is recorded in `status.pullRequest` (and just before one
//! is opened) the policy carries the finalizer [`FINALIZER`]; it is removed once no pull
//! request is recorded any more (closed, merged, mode Commit). A deleted policy's pull request
//! is closed on the forge (already closed, merged or gone counts as done; the branch stays,
//! as when the operator closes it otherwise), with an Event and a `promotions` count, and the
//! finalizer is removed. A forge that keeps failing is retried with backoff for at most
//! [`PromotionOptions::close_timeout`] after the deletion; then the finalizer is removed
//! anyway and a Warning Event names the pull request left open, so a namespace being deleted
//! never waits on a forge for long.

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use futures::StreamExt;
use imagewatch_crd::{
    ImageWatch, PromotionPolicy, PromotionPolicyStatus,
    conditions::{GATES_PASSING, PULL_REQUEST_OPEN, READY, reason as common_reason},
    promotion::{
        APPROVE_ANNOTATION, PromotedImage, Promotion, PromotionMode, PullRequestRef, reason,
    },
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{
        ApiResource, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, Patch, PatchParams,
    },
    core::{DeserializeGuard, Selector},
    runtime::{
        Controller, WatchStreamExt as _,
        controller::Action,
        events::{Event, EventType},
        reflector::ObjectRef,
        watcher,
    },
};
use serde_json::json;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::{Context, ReconcileError, parse_duration, secrets, status as conditions};
use crate::{
    forge::{EnsureAction, ForgeClient, ForgeError, NewPullRequest, PullRequest},
    git::{
        Author, FileEdit, GitAuth, GitError, Oid, PushMode, RepoCache, WriteOutcome,
        write_with_retry_signed,
    },
    promotion::{
        self, Candidate, CandidateError, CandidateInput, GateFacts, GateReport, Inventory,
        SourceState,
        gates::{
            ApplicationFacts, ApprovalFacts, Containment, ImageCheck, ImageFact, SignatureCheck,
            SignatureFact, SoakFacts, application_state,
        },
        render::{self, TextContext},
    },
    registry::{Credentials, RegistryError, RepositoryRef, TagSource, is_ecr_host},
    telemetry::PromotionLabels,
};

/// Promotions kept in `status.lastPromotions`.
pub const HISTORY: usize = 10;

/// Finalizer held while the policy has a pull request open: a deleted policy closes it first.
pub const FINALIZER: &str = "imagewatch.dev/close-pull-request";

/// Longest wait between two attempts to close a deleted policy's pull request.
const CLOSE_RETRY_MAX: Duration = Duration::from_secs(60);

/// Settings of the PromotionPolicy controller.
#[derive(Debug, Clone)]
pub struct PromotionOptions {
    /// Root of the operator's cache; clones for promotions live in `promotion-git/` under it.
    pub cache_dir: PathBuf,
    /// Author and committer of promotion commits.
    pub author: Author,
    /// Rounds of a rejected push (mode Commit) before giving up for this reconcile.
    pub push_attempts: u32,
    /// Only these namespaces (empty: all).
    pub namespaces: Vec<String>,
    /// Policy reconciles running at once.
    pub concurrency: u16,
    /// After a policy's deletion, how long closing its pull request is retried before the
    /// finalizer is removed anyway.
    pub close_timeout: Duration,
}

impl PromotionOptions {
    /// From `imagewatch run`'s flags.
    pub fn from_run_args(args: &crate::cli::RunArgs) -> Self {
        Self {
            cache_dir: args.cache_dir.clone(),
            author: Author {
                name: args.git_author_name.clone(),
                email: args.git_author_email.clone(),
            },
            push_attempts: args.push_attempts,
            namespaces: args.watched_namespaces(),
            concurrency: args.max_concurrent_reconciles.max(1),
            close_timeout: args.pull_request_close_timeout,
        }
    }
}

/// What every policy reconcile shares.
/// The `controller` label of the PromotionPolicy controller's metrics.
const POLICY_CONTROLLER: &str = "promotionpolicy";

struct Shared {
    ctx: Arc<Context>,
    cache: Arc<RepoCache>,
    author: Author,
    /// Signs promotion commits, as the writer signs every other commit.
    signer: Option<crate::git::CommitSigner>,
    push_attempts: u32,
    http: reqwest::Client,
    failures: Mutex<HashMap<ObjectRef<DeserializeGuard<PromotionPolicy>>, u32>>,
    close_timeout: Duration,
}

/// Readiness condition: the PromotionPolicy cache holds its first list.
pub const POLICY_CACHE: &str = "promotionpolicy-cache";

/// Runs the PromotionPolicy controller until `shutdown` is cancelled. Reconciles use the
/// ImageWatch controller's [`Context`] (Kubernetes client, registry clients, Event recorder,
/// metrics) and their own Git clones.
pub async fn run(ctx: Arc<Context>, options: PromotionOptions, shutdown: CancellationToken) {
    let client = ctx.client.clone();
    let metrics = ctx.metrics.clone();
    let http = match reqwest::Client::builder()
        .user_agent(format!("imagewatch/{}", env!("CARGO_PKG_VERSION")))
        .timeout(Duration::from_secs(30))
        .build()
    {
        Ok(http) => http,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the forge HTTP client; PromotionPolicies are not reconciled");
            return;
        }
    };
    let signer = ctx.writer.signer().cloned();
    let shared = Arc::new(Shared {
        ctx,
        signer,
        cache: Arc::new(RepoCache::new(options.cache_dir.join("promotion-git"))),
        author: options.author.clone(),
        push_attempts: options.push_attempts.max(1),
        http,
        failures: Mutex::default(),
        close_timeout: options.close_timeout,
    });
    let (reader, writer) = kube::runtime::reflector::store();
    let policies = kube::runtime::reflector(
        writer,
        super::namespaces::watch::<DeserializeGuard<PromotionPolicy>>(
            client.clone(),
            &options.namespaces,
            watcher::Config::default().any_semantic(),
        ),
    )
    .inspect(super::on_first_list({
        let metrics = metrics.clone();
        move || metrics.readiness.met(POLICY_CACHE)
    }))
    .applied_objects();
    let watches = super::namespaces::watch::<DeserializeGuard<ImageWatch>>(
        client.clone(),
        &options.namespaces,
        watcher::Config::default().any_semantic(),
    )
    .applied_objects();
    let controller = Controller::for_stream(policies, reader).with_config(
        kube::runtime::controller::Config::default().concurrency(options.concurrency.max(1)),
    );
    let store = controller.store();
    let token = shutdown.clone();
    tracing::info!("PromotionPolicy controller started");
    controller
        .watches_stream(watches, move |watch: DeserializeGuard<ImageWatch>| {
            let namespace = watch.meta().namespace.clone();
            store
                .state()
                .into_iter()
                .filter(|p| p.meta().namespace == namespace)
                .map(|p| ObjectRef::from_obj(p.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(async move { token.cancelled().await })
        .run(
            |policy, shared| async move {
                let metrics = shared.ctx.metrics.clone();
                super::timed(&metrics, POLICY_CONTROLLER, reconcile(policy, shared)).await
            },
            error_policy,
            shared,
        )
        .for_each(|result| {
            if let Err(e) = result {
                super::log_stream_error(&metrics, POLICY_CONTROLLER, &e);
            }
            futures::future::ready(())
        })
        .await;
    tracing::info!("PromotionPolicy controller stopped");
}

/// Why a policy reconcile did not reach its goal.
#[derive(Debug, thiserror::Error)]
pub enum PromotionError {
    /// The spec cannot be acted on.
    #[error("{0}")]
    InvalidSpec(String),
    /// A Secret is missing or incomplete.
    #[error("{0}")]
    CredentialsNotFound(String),
    /// The source has no complete candidate yet.
    #[error("{0}")]
    SourceNotReady(String),
    /// A source watch is healthy but has not applied its first tag yet (a policy created
    /// together with its watches): the same `Ready` reason, but a Normal Event, because
    /// nothing is wrong; the watch's status change reconciles the policy again.
    #[error("{0}")]
    SourceWaiting(String),
    /// `to.path` (or a place in it) cannot be found or edited.
    #[error("{0}")]
    TargetNotFound(String),
    /// The policy's namespace may not use what it names; nothing was read or written.
    #[error("{0}")]
    NotAllowed(String),
    /// Git failed.
    #[error("git: {0}")]
    Git(#[from] GitError),
    /// The forge failed or refused.
    #[error("{0}")]
    Forge(#[from] ForgeError),
    /// The Kubernetes API failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A blocking task failed.
    #[error("internal: {0}")]
    Internal(String),
}

impl From<ReconcileError> for PromotionError {
    fn from(e: ReconcileError) -> Self {
        match e {
            ReconcileError::InvalidSpec(m) => Self::InvalidSpec(m),
            ReconcileError::CredentialsNotFound(m) => Self::CredentialsNotFound(m),
            ReconcileError::TargetNotFound(m) => Self::TargetNotFound(m),
            ReconcileError::NotAllowed(m) => Self::NotAllowed(m),
            ReconcileError::Git(g) => Self::Git(g),
            ReconcileError::Kube(k) => Self::Kube(k),
            other => Self::Internal(other.to_string()),
        }
    }
}

impl PromotionError {
    /// The `Ready` reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidSpec(_) => common_reason::INVALID_SPEC,
            Self::CredentialsNotFound(_) => common_reason::CREDENTIALS_NOT_FOUND,
            Self::SourceNotReady(_) | Self::SourceWaiting(_) => reason::SOURCE_NOT_READY,
            Self::TargetNotFound(_) => common_reason::TARGET_NOT_FOUND,
            Self::NotAllowed(_) => common_reason::NOT_ALLOWED,
            Self::Git(_) => common_reason::GIT_ERROR,
            Self::Forge(_) => reason::FORGE_ERROR,
            Self::Kube(_) | Self::Internal(_) => "InternalError",
        }
    }

    /// Metric label.
    pub fn category(&self) -> &'static str {
        match self {
            Self::InvalidSpec(_) => "invalid_spec",
            Self::CredentialsNotFound(_) => "credentials",
            Self::SourceNotReady(_) => "source_not_ready",
            Self::SourceWaiting(_) => "source_waiting",
            Self::TargetNotFound(_) => "target_not_found",
            Self::NotAllowed(_) => "not_allowed",
            Self::Git(_) => "git",
            Self::Forge(_) => "forge",
            Self::Kube(_) => "kube",
            Self::Internal(_) => "internal",
        }
    }

    /// Only a change (of the spec, the source or the repository) fixes it: no fast retry.
    fn is_stalled(&self) -> bool {
        matches!(
            self,
            Self::InvalidSpec(_)
                | Self::SourceNotReady(_)
                | Self::SourceWaiting(_)
                | Self::TargetNotFound(_)
                | Self::NotAllowed(_)
        )
    }
}

/// What was done with the candidate.
#[derive(Debug, Clone)]
pub enum Delivery {
    /// The target already holds the candidate; `closed` is a pull request closed now.
    UpToDate {
        /// Closed pull request.
        closed: Option<PullRequest>,
    },
    /// Gates do not pass yet; nothing written.
    Gated,
    /// `spec.suspend`; nothing written.
    Suspended,
    /// Committed to the target branch (mode Commit).
    Committed {
        /// The commit.
        commit: String,
    },
    /// A pull request proposes the candidate.
    Proposed {
        /// The pull request.
        pull_request: PullRequest,
        /// What the forge call did.
        action: EnsureAction,
        /// Head commit of the pull request branch.
        commit: String,
        /// Whether the branch was (re)written in this reconcile.
        pushed: bool,
    },
}

/// A successful reconcile.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Human-readable source.
    pub source: String,
    /// Mode.
    pub mode: PromotionMode,
    /// `to.path`.
    pub path: String,
    /// Target branch.
    pub branch: String,
    /// The candidate.
    pub candidate: Candidate,
    /// Gates, when evaluated (only when the candidate differs from the target).
    pub gates: Option<GateReport>,
    /// What was done.
    pub delivery: Delivery,
    /// Non-fatal problems (forge labels, auto-merge).
    pub warnings: Vec<String>,
}

async fn reconcile(
    guard: Arc<DeserializeGuard<PromotionPolicy>>,
    shared: Arc<Shared>,
) -> Result<Action, PromotionError> {
    let key = ObjectRef::from_obj(guard.as_ref());
    let policy = match &guard.0 {
        Ok(policy) => policy,
        Err(invalid) => {
            if invalid.metadata.deletion_timestamp.is_some() && has_finalizer(&invalid.metadata) {
                // The recorded pull request cannot be read from an object that does not parse.
                tracing::warn!(
                    policy = ?invalid.metadata.name,
                    error = %invalid.error,
                    "deleted PromotionPolicy does not match the schema; its pull request (if any) is left open"
                );
                remove_finalizer(&shared.ctx.client, &invalid.metadata).await?;
                return Ok(Action::await_change());
            }
            super::status::report_invalid_object::<PromotionPolicy>(&shared.ctx.client, invalid)
                .await?;
            return Ok(Action::await_change());
        }
    };
    let interval =
        parse_duration(policy.spec.interval_or_default()).unwrap_or(Duration::from_secs(60));
    // HA: the replica holding the shard of the target repository (or, without spec.to.git,
    // of the policy itself) promotes.
    let shard_key = match &policy.spec.to.git {
        Some(git) => git.url.clone(),
        None => format!(
            "promotionpolicy:{}/{}",
            policy.namespace().unwrap_or_default(),
            policy.name_any()
        ),
    };
    let Some(_shard) = shared.ctx.enter_shard(&shard_key) else {
        return Ok(Action::requeue(interval));
    };
    // The status carries history (last promotions) built on the previous status, so read
    // the object itself: the cache may not hold our last status write yet (a finalizer patch
    // or another trigger can start this reconcile before its watch event arrives).
    let api: Api<PromotionPolicy> = Api::namespaced(
        shared.ctx.client.clone(),
        &policy.namespace().unwrap_or_default(),
    );
    let Some(fresh) = api.get_opt(&policy.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let policy = &fresh;
    if policy.meta().deletion_timestamp.is_some() {
        return finalize(policy, key, &shared).await;
    }
    let mut finalizer_present = has_finalizer(policy.meta());
    let result = reconcile_policy(policy, &shared, &mut finalizer_present).await;
    let outcome_label = match &result {
        Ok(o) => match &o.delivery {
            Delivery::UpToDate { closed: Some(_) } => "pr_closed",
            Delivery::UpToDate { closed: None } => "up_to_date",
            Delivery::Gated => "gated",
            Delivery::Suspended => "suspended",
            Delivery::Committed { .. } => "committed",
            Delivery::Proposed {
                action: EnsureAction::Created,
                ..
            } => "pr_opened",
            Delivery::Proposed { pushed: true, .. }
            | Delivery::Proposed {
                action: EnsureAction::Updated,
                ..
            } => "pr_updated",
            Delivery::Proposed { .. } => "pr_current",
        },
        Err(e) => e.category(),
    };
    shared
        .ctx
        .metrics
        .promotions
        .get_or_create(&PromotionLabels {
            outcome: outcome_label.to_string(),
        })
        .inc();
    let now = Time(jiff::Timestamp::now());
    let new_status = build_status(policy, &result, &now);
    publish_events(policy, &result, &shared).await;
    let change = finalizer_change(
        finalizer_present,
        wants_finalizer(&new_status),
        result.is_ok(),
    );
    patch_status_if_changed(policy, new_status, &shared.ctx.client).await?;
    match change {
        Some(FinalizerChange::Add) => add_finalizer(&shared.ctx.client, policy.meta()).await?,
        Some(FinalizerChange::Remove) => {
            remove_finalizer(&shared.ctx.client, policy.meta()).await?
        }
        None => {}
    }
    tracing::debug!(policy = %policy.name_any(), outcome = outcome_label, "reconciled promotion policy");
    match result {
        Ok(outcome) => {
            shared.failures.lock().await.remove(&key);
            let recheck = outcome
                .gates
                .as_ref()
                .and_then(|g| g.recheck_in)
                .map(|d| d + Duration::from_secs(1));
            Ok(Action::requeue(match recheck {
                Some(d) if d < interval => d,
                _ => interval,
            }))
        }
        Err(e) if e.is_stalled() => {
            shared.failures.lock().await.remove(&key);
            Ok(Action::requeue(interval))
        }
        Err(PromotionError::Forge(ref e)) if e.retry_after().is_some() => Ok(Action::requeue(
            e.retry_after()
                .unwrap_or(interval)
                .max(Duration::from_secs(1)),
        )),
        Err(_) => {
            let mut failures = shared.failures.lock().await;
            let n = failures.entry(key).or_insert(0);
            *n = n.saturating_add(1);
            let secs = 2u64
                .saturating_pow((*n).min(10))
                .min(interval.as_secs().max(5));
            Ok(Action::requeue(Duration::from_secs(secs)))
        }
    }
}

fn error_policy(
    obj: Arc<DeserializeGuard<PromotionPolicy>>,
    error: &PromotionError,
    shared: Arc<Shared>,
) -> Action {
    shared
        .ctx
        .metrics
        .promotions
        .get_or_create(&PromotionLabels {
            outcome: error.category().to_string(),
        })
        .inc();
    tracing::warn!(policy = ?obj.meta().name, error = %error, "promotion reconcile failed; retrying");
    Action::requeue(Duration::from_secs(10))
}

/// Whether `meta` carries [`FINALIZER`].
pub fn has_finalizer(meta: &ObjectMeta) -> bool {
    meta.finalizers.iter().flatten().any(|f| f == FINALIZER)
}

/// Whether a policy with this status needs [`FINALIZER`] (pure): while a pull request is
/// recorded. Mode Commit records none, so it never does.
pub fn wants_finalizer(status: &PromotionPolicyStatus) -> bool {
    status.pull_request.is_some()
}

/// A change of a policy's finalizers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalizerChange {
    /// Add [`FINALIZER`].
    Add,
    /// Remove [`FINALIZER`].
    Remove,
}

/// What to do with [`FINALIZER`] after a reconcile (pure). It is removed only after a
/// successful reconcile: a failed one keeps the last known pull request, and adding and
/// removing it on every failure would only make watch events.
pub fn finalizer_change(present: bool, wanted: bool, succeeded: bool) -> Option<FinalizerChange> {
    match (present, wanted) {
        (false, true) => Some(FinalizerChange::Add),
        (true, false) if succeeded => Some(FinalizerChange::Remove),
        _ => None,
    }
}

/// The JSON patch adding or removing [`FINALIZER`] in `meta`, `None` when there is nothing
/// to do (pure). Each patch tests what it changes, so a concurrent change of the finalizers
/// makes it fail (and the reconcile retry) instead of dropping someone else's finalizer.
pub fn finalizer_patch(meta: &ObjectMeta, change: FinalizerChange) -> Option<serde_json::Value> {
    finalizer_patch_of(meta, FINALIZER, change)
}

/// [`finalizer_patch`] for any finalizer name (pure).
pub fn finalizer_patch_of(
    meta: &ObjectMeta,
    finalizer: &str,
    change: FinalizerChange,
) -> Option<serde_json::Value> {
    let current = meta.finalizers.clone().unwrap_or_default();
    let at = current.iter().position(|f| f == finalizer);
    match (change, at) {
        (FinalizerChange::Add, Some(_)) | (FinalizerChange::Remove, None) => None,
        (FinalizerChange::Add, None) if current.is_empty() => Some(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
        ])),
        (FinalizerChange::Add, None) => Some(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
        ])),
        (FinalizerChange::Remove, Some(i)) => Some(json!([
            {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": finalizer},
            {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
        ])),
    }
}

/// Applies [`finalizer_patch`] to the policy `meta` names. Through a dynamic API, so that an
/// object which does not match the schema can still lose its finalizer. A failed test (the
/// finalizers changed since `meta` was read) is answered by reading the object again and
/// patching once more; an object already gone is done.
async fn patch_finalizer(
    client: &Client,
    meta: &ObjectMeta,
    change: FinalizerChange,
) -> Result<(), kube::Error> {
    patch_finalizer_of(
        client,
        &ApiResource::erase::<PromotionPolicy>(&()),
        meta,
        FINALIZER,
        change,
    )
    .await
}

/// [`patch_finalizer`] for any namespaced resource and finalizer name.
pub async fn patch_finalizer_of(
    client: &Client,
    resource: &ApiResource,
    meta: &ObjectMeta,
    finalizer: &str,
    change: FinalizerChange,
) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        meta.namespace.as_deref().unwrap_or_default(),
        resource,
    );
    let name = meta.name.clone().unwrap_or_default();
    let mut meta = meta.clone();
    for attempt in 0..2 {
        let Some(ops) = finalizer_patch_of(&meta, finalizer, change) else {
            return Ok(());
        };
        let patch: Patch<()> =
            Patch::Json(serde_json::from_value(ops).map_err(kube::Error::SerdeError)?);
        match api.patch(&name, &PatchParams::default(), &patch).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(kube::Error::Api(s)) if (s.code == 422 || s.code == 409) && attempt == 0 => {
                match api.get_opt(&name).await? {
                    Some(fresh) => meta = fresh.metadata,
                    None => return Ok(()),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn add_finalizer(client: &Client, meta: &ObjectMeta) -> Result<(), kube::Error> {
    patch_finalizer(client, meta, FinalizerChange::Add).await
}

async fn remove_finalizer(client: &Client, meta: &ObjectMeta) -> Result<(), kube::Error> {
    patch_finalizer(client, meta, FinalizerChange::Remove).await
}

/// What follows an attempt to close a deleted policy's pull request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseStep {
    /// Closed (or nothing left to close): remove the finalizer.
    Done,
    /// Try again after this long.
    Retry(Duration),
    /// Stop trying: remove the finalizer and leave the pull request open.
    GiveUp,
}

/// Whether a close answered by `e` needs nothing more (pure): the pull request is gone (404)
/// or the forge refuses to close it because it is no longer open (closed, merged).
pub fn close_not_needed(e: &ForgeError) -> bool {
    matches!(e, ForgeError::NotFound { .. } | ForgeError::Rejected { .. })
}

/// The step after a close attempt of a policy deleted `since_deletion` ago, the
/// `attempts`-th failure in a row when `failure` is set (pure). Backoff doubles from 2s up to
/// [`CLOSE_RETRY_MAX`] (or waits what the forge asks), never past `timeout`; an error only a
/// change of the (deleted) spec could fix gives up at once.
pub fn close_step(
    failure: Option<&PromotionError>,
    since_deletion: Duration,
    timeout: Duration,
    attempts: u32,
) -> CloseStep {
    let Some(e) = failure else {
        return CloseStep::Done;
    };
    let permanent = matches!(
        e,
        PromotionError::InvalidSpec(_) | PromotionError::Forge(ForgeError::InvalidConfig(_))
    );
    if permanent || since_deletion >= timeout {
        return CloseStep::GiveUp;
    }
    let backoff = match e {
        PromotionError::Forge(f) if f.retry_after().is_some() => {
            f.retry_after().unwrap_or_default()
        }
        _ => Duration::from_secs(2u64.saturating_pow(attempts.clamp(1, 10))),
    };
    let left = timeout - since_deletion;
    CloseStep::Retry(
        backoff
            .min(CLOSE_RETRY_MAX)
            .min(left)
            .max(Duration::from_secs(1)),
    )
}

/// Closes the pull request recorded in a deleted policy's status. `Ok(true)`: it was no
/// longer open.
async fn close_recorded(
    policy: &PromotionPolicy,
    recorded: &PullRequestRef,
    shared: &Shared,
) -> Result<bool, PromotionError> {
    // The repository URL only names the forge's repository when `pullRequest.repository` or
    // `pullRequest.apiUrl` are not set; the source watches may be gone already.
    let git_url = if policy.spec.to.git.is_some() {
        target_repository(policy, &[], shared).await.map(|r| r.0)
    } else {
        match list_source_watches(policy, &shared.ctx.client).await {
            Ok(watches) => target_repository(policy, &watches, shared)
                .await
                .map(|r| r.0),
            Err(e) => Err(e),
        }
    };
    let forge = match forge_client(policy, git_url.as_deref().unwrap_or_default(), shared).await {
        Ok(forge) => forge,
        Err(PromotionError::Forge(ForgeError::InvalidConfig(_))) if git_url.is_err() => {
            return Err(git_url
                .err()
                .unwrap_or_else(|| PromotionError::Internal("the repository is unknown".into())));
        }
        Err(e) => return Err(e),
    };
    let pr = PullRequest {
        number: recorded.number,
        url: recorded.url.clone(),
        title: String::new(),
        body: String::new(),
        head: recorded.branch.clone(),
        base: String::new(),
        head_sha: None,
        labels: Vec::new(),
        auto_merge: false,
        node_id: None,
        state: Default::default(),
    };
    match forge.close(&pr).await {
        Ok(()) => Ok(false),
        Err(e) if close_not_needed(&e) => {
            tracing::debug!(error = %e, url = %recorded.url, "pull request of a deleted policy was not open");
            Ok(true)
        }
        Err(e) => Err(e.into()),
    }
}

/// A deleted policy: close its recorded pull request, then remove [`FINALIZER`]; retry a
/// failing forge until `close_timeout` after the deletion, then give up.
async fn finalize(
    policy: &PromotionPolicy,
    key: ObjectRef<DeserializeGuard<PromotionPolicy>>,
    shared: &Shared,
) -> Result<Action, PromotionError> {
    if !has_finalizer(policy.meta()) {
        return Ok(Action::await_change());
    }
    let client = &shared.ctx.client;
    let Some(recorded) = policy.status.as_ref().and_then(|s| s.pull_request.clone()) else {
        remove_finalizer(client, policy.meta()).await?;
        shared.failures.lock().await.remove(&key);
        return Ok(Action::await_change());
    };
    let now = jiff::Timestamp::now();
    let deleted_at = policy
        .meta()
        .deletion_timestamp
        .as_ref()
        .map_or(now, |t| t.0);
    let since_deletion = now
        .duration_since(deleted_at)
        .try_into()
        .unwrap_or(Duration::ZERO);
    let result = close_recorded(policy, &recorded, shared).await;
    let attempts = match &result {
        Ok(_) => 0,
        Err(_) => {
            let mut failures = shared.failures.lock().await;
            let n = failures.entry(key.clone()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        }
    };
    let step = close_step(
        result.as_ref().err(),
        since_deletion,
        shared.close_timeout,
        attempts,
    );
    let pr = format!("#{} {}", recorded.number, recorded.url);
    let (event_type, reason, note, outcome) = match (&result, step) {
        (Ok(false), _) => (
            EventType::Normal,
            "PullRequestClosed",
            format!("closed {pr}: the PromotionPolicy was deleted"),
            "pr_closed_on_delete",
        ),
        (Ok(true), _) => (
            EventType::Normal,
            "PullRequestClosed",
            format!("{pr} was already closed, merged or gone: the PromotionPolicy was deleted"),
            "pr_closed_on_delete",
        ),
        (Err(e), CloseStep::Retry(after)) => (
            EventType::Warning,
            "PullRequestCloseFailed",
            format!(
                "cannot close {pr} of the deleted PromotionPolicy: {e}; retrying in {}s, for at most {}s after the deletion",
                after.as_secs(),
                shared.close_timeout.as_secs()
            ),
            "pr_close_failed",
        ),
        (Err(e), _) => (
            EventType::Warning,
            "PullRequestLeftOpen",
            format!(
                "gave up closing {pr} of the deleted PromotionPolicy; the pull request is left open: {e}"
            ),
            "pr_left_open",
        ),
    };
    shared
        .ctx
        .metrics
        .promotions
        .get_or_create(&PromotionLabels {
            outcome: outcome.to_string(),
        })
        .inc();
    let event = Event {
        type_: event_type,
        reason: reason.into(),
        note: Some(truncate(&note, 1024)),
        action: "Delete".into(),
        secondary: None,
    };
    // In a namespace being deleted no Event can be created; the log keeps the note.
    if let Err(e) = shared
        .ctx
        .recorder
        .publish(&event, &policy.object_ref(&()))
        .await
    {
        tracing::debug!(error = %e, "cannot publish Event");
    }
    match step {
        CloseStep::Retry(after) => {
            tracing::warn!(policy = %policy.name_any(), note = %note, "closing the pull request of a deleted policy failed");
            Ok(Action::requeue(after))
        }
        CloseStep::Done | CloseStep::GiveUp => {
            if step == CloseStep::GiveUp {
                tracing::warn!(policy = %policy.name_any(), note = %note, "pull request of a deleted policy left open");
            } else {
                tracing::info!(policy = %policy.name_any(), note = %note, "pull request of a deleted policy closed");
            }
            remove_finalizer(client, policy.meta()).await?;
            shared.failures.lock().await.remove(&key);
            Ok(Action::await_change())
        }
    }
}

/// Step 1 (pure): checks what the API server's schema cannot.
pub fn validate(spec: &imagewatch_crd::PromotionPolicySpec) -> Result<(), String> {
    if spec
        .to
        .git
        .as_ref()
        .is_some_and(|g| g.pull_request.is_some())
    {
        return Err(
            "spec.to.git.pullRequest is for ImageWatches; a PromotionPolicy sets spec.pullRequest"
                .into(),
        );
    }
    if parse_duration(spec.interval_or_default()).is_none() {
        return Err(format!(
            "spec.interval {:?} is not a duration",
            spec.interval_or_default()
        ));
    }
    match (&spec.from.watch_selector, &spec.from.path) {
        (Some(_), Some(_)) | (None, None) => {
            return Err(
                "exactly one of spec.from.watchSelector and spec.from.path must be set".into(),
            );
        }
        _ => {}
    }
    let path_ok = |p: &str| !p.starts_with('/') && !p.split('/').any(|s| s == "..");
    if spec.to.path.trim_matches('/').is_empty() || !path_ok(&spec.to.path) {
        return Err(format!(
            "spec.to.path {:?} must be a directory relative to the repository root",
            spec.to.path
        ));
    }
    if let Some(p) = &spec.from.path
        && (!path_ok(p) || p.trim_matches('/').is_empty())
    {
        return Err(format!(
            "spec.from.path {p:?} must be a directory relative to the repository root"
        ));
    }
    if spec.from.path.is_some() && spec.to.git.is_none() {
        return Err("spec.to.git is required with spec.from.path".into());
    }
    if let Some(soak) = spec.gates.as_ref().and_then(|g| g.soak.as_deref())
        && parse_duration(soak).is_none()
    {
        return Err(format!("spec.gates.soak {soak:?} is not a duration"));
    }
    if spec.mode() == PromotionMode::PullRequest && spec.pull_request.is_none() {
        return Err("spec.pullRequest is required in mode PullRequest (the default)".into());
    }
    for rule in spec.to.image_rewrite.iter().flatten() {
        if rule.from.is_empty() {
            return Err("spec.to.imageRewrite: from must not be empty".into());
        }
    }
    for (name, tag) in spec.pin.iter().flatten() {
        crate::manifests::image_ref::validate_tag(tag)
            .map_err(|e| format!("spec.pin {name}: {e}"))?;
    }
    if let Some(align) = &spec.align_tags
        && align.leader.is_empty()
    {
        return Err("spec.alignTags.leader must not be empty".into());
    }
    Ok(())
}

/// Where the promotion reads and writes.
struct Location {
    url: String,
    auth: GitAuth,
    /// `to.branch`.
    base: String,
    /// Branch the source lives on (source watches' branch, or `from.branch`).
    source_branch: String,
}

fn source_label(spec: &imagewatch_crd::PromotionPolicySpec) -> String {
    match (&spec.from.watch_selector, &spec.from.path) {
        (Some(selector), _) => {
            let mut parts: Vec<String> = selector
                .match_labels
                .iter()
                .flatten()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            for e in selector.match_expressions.iter().flatten() {
                parts.push(format!(
                    "{} {} ({})",
                    e.key,
                    e.operator,
                    e.values.clone().unwrap_or_default().join(",")
                ));
            }
            format!("ImageWatches {}", parts.join(","))
        }
        (None, Some(path)) => path.trim_matches('/').to_string(),
        (None, None) => String::new(),
    }
}

async fn list_source_watches(
    policy: &PromotionPolicy,
    client: &Client,
) -> Result<Vec<ImageWatch>, PromotionError> {
    let Some(selector) = &policy.spec.from.watch_selector else {
        return Ok(Vec::new());
    };
    let selector = Selector::try_from(selector.clone())
        .map_err(|e| PromotionError::InvalidSpec(format!("spec.from.watchSelector: {e}")))?;
    let api: Api<ImageWatch> =
        Api::namespaced(client.clone(), &policy.namespace().unwrap_or_default());
    Ok(api
        .list(&ListParams::default().labels_from(&selector))
        .await?
        .items)
}

/// The target repository: its URL, the name of its Git Secret, and its branch.
async fn target_repository(
    policy: &PromotionPolicy,
    watches: &[ImageWatch],
    shared: &Shared,
) -> Result<(String, Option<String>, String), PromotionError> {
    let namespace = policy.namespace().unwrap_or_default();
    let spec = &policy.spec;
    let client = &shared.ctx.client;
    Ok(match (&spec.to.git, watches.first()) {
        (Some(git), _) => (
            git.url.clone(),
            git.secret_ref.as_ref().map(|s| s.name.clone()),
            git.branch().to_string(),
        ),
        (None, Some(watch)) => match &watch.spec.git {
            Some(git) => (
                git.url.clone(),
                git.secret_ref.as_ref().map(|s| s.name.clone()),
                git.branch().to_string(),
            ),
            None => {
                let (source, secret) = super::argocd::resolve(
                    client,
                    &shared.ctx.argocd_namespace,
                    &namespace,
                    watch.annotations(),
                    watch.labels(),
                )
                .await?;
                (source.repo_url, secret, source.branch)
            }
        },
        (None, None) => {
            return Err(PromotionError::InvalidSpec(
                "spec.to.git is not set and no source ImageWatch names a repository".into(),
            ));
        }
    })
}

async fn resolve_location(
    policy: &PromotionPolicy,
    watches: &[ImageWatch],
    shared: &Shared,
) -> Result<Location, PromotionError> {
    let namespace = policy.namespace().unwrap_or_default();
    let spec = &policy.spec;
    let (url, secret, repo_branch) = target_repository(policy, watches, shared).await?;
    crate::git::check_tenant_url(&url).map_err(PromotionError::InvalidSpec)?;
    let ask = super::allow::Ask {
        namespace: &namespace,
        git: Some((url.as_str(), vec![spec.to.path.as_str()])),
        images: Vec::new(),
        aws: false,
    };
    let project = super::allowance::ProjectOf {
        argocd_namespace: &shared.ctx.argocd_namespace,
        namespace: &namespace,
        annotations: policy.annotations(),
        labels: policy.labels(),
    };
    let ctx = &shared.ctx;
    ctx.allowance
        .check(
            &ctx.client,
            &ctx.metrics,
            "PromotionPolicy",
            ask,
            Some(project),
        )
        .await?;
    let project = super::allowance::ProjectOf {
        argocd_namespace: &shared.ctx.argocd_namespace,
        namespace: &namespace,
        annotations: policy.annotations(),
        labels: policy.labels(),
    };
    ctx.allowance
        .check_target(&ctx.client, &ctx.metrics, project, &url, &spec.to.path)
        .await?;
    let auth = match secret {
        Some(name) => secrets::git_credentials(&shared.ctx, &namespace, &name).await?,
        None => GitAuth::Anonymous,
    };
    let watch_branch = watches
        .first()
        .and_then(|w| w.spec.git.as_ref())
        .map(|g| g.branch().to_string());
    Ok(Location {
        url,
        auth,
        base: spec
            .to
            .branch
            .clone()
            .unwrap_or_else(|| repo_branch.clone()),
        source_branch: spec
            .from
            .branch
            .clone()
            .or(watch_branch)
            .unwrap_or(repo_branch),
    })
}

/// Files as `(repository-relative path, text)`.
type Files = Vec<(String, String)>;

/// A commit id and its time.
type Change = (String, jiff::Timestamp);

/// What the blocking Git read found.
struct GitRead {
    base_head: Oid,
    pr_tip: Option<Oid>,
    target_files: Vec<(String, String)>,
    /// `from.path`: files, and the last commit that changed the directory (id, time).
    source: Option<(Files, Option<Change>)>,
    containment: Option<Containment>,
}

fn utf8_files(files: Vec<(String, Vec<u8>)>) -> Vec<(String, String)> {
    files
        .into_iter()
        .filter_map(|(n, b)| String::from_utf8(b).ok().map(|t| (n, t)))
        .collect()
}

/// The last commit (first-parent history, at most 1000 back) that changed `path`.
fn last_change(
    repo: &git2::Repository,
    head: Oid,
    path: &str,
) -> Result<Option<(String, jiff::Timestamp)>, git2::Error> {
    let entry_at = |c: &git2::Commit<'_>| -> Option<Oid> {
        c.tree()
            .ok()?
            .get_path(std::path::Path::new(path))
            .ok()
            .map(|e| e.id())
    };
    let mut commit = repo.find_commit(head)?;
    let current = entry_at(&commit);
    for _ in 0..1000 {
        let Ok(parent) = commit.parent(0) else {
            break;
        };
        if entry_at(&parent) != current {
            break;
        }
        commit = parent;
    }
    let at = jiff::Timestamp::from_second(commit.time().seconds()).ok();
    Ok(at.map(|at| (commit.id().to_string(), at)))
}

/// Whether `revision` is, or descends from, every commit of `commits`.
fn containment(repo: &git2::Repository, revision: &str, commits: &[String]) -> Containment {
    let Ok(rev) = Oid::from_str(revision) else {
        return Containment::Unknown(format!("revision {revision:?} is not a commit id"));
    };
    if repo.find_commit(rev).is_err() {
        return Containment::Unknown(format!(
            "revision {} is not in the fetched history of the source branch",
            revision.get(..12).unwrap_or(revision)
        ));
    }
    for commit in commits {
        let Ok(c) = Oid::from_str(commit) else {
            return Containment::Unknown(format!("source commit {commit:?} is not a commit id"));
        };
        if c == rev {
            continue;
        }
        match repo.graph_descendant_of(rev, c) {
            Ok(true) => {}
            Ok(false) => return Containment::Lacks(commit.clone()),
            Err(e) => return Containment::Unknown(format!("cannot compare with {commit}: {e}")),
        }
    }
    Containment::Contains
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, PromotionError> + Send + 'static,
) -> Result<T, PromotionError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| PromotionError::Internal(format!("git task: {e}")))?
}

/// Reads what the decision needs from Git.
#[allow(clippy::too_many_arguments)]
async fn read_git(
    shared: &Shared,
    location: &Location,
    to_path: String,
    from_path: Option<String>,
    pr_branch: Option<String>,
    revision: Option<String>,
    watch_commits: Vec<String>,
) -> Result<GitRead, PromotionError> {
    let cache = shared.cache.clone();
    let url = location.url.clone();
    let auth = location.auth.clone();
    let base = location.base.clone();
    let source_branch = location.source_branch.clone();
    blocking(move || {
        let repo = cache.open_or_clone(&url, &auth)?;
        let mut branches: Vec<&str> = vec![base.as_str()];
        if source_branch != base {
            branches.push(source_branch.as_str());
        }
        if let Some(b) = pr_branch.as_deref() {
            branches.push(b);
        }
        let heads = repo.fetch_many(&branches, &auth)?;
        let base_head = heads[0].ok_or_else(|| GitError::BranchNotFound {
            url: url.clone(),
            branch: base.clone(),
        })?;
        let source_head = if source_branch != base {
            heads[1].ok_or_else(|| GitError::BranchNotFound {
                url: url.clone(),
                branch: source_branch.clone(),
            })?
        } else {
            base_head
        };
        let pr_tip = if pr_branch.is_some() {
            heads.last().copied().flatten()
        } else {
            None
        };
        let target_files = match repo.read_files_under(base_head, &to_path) {
            Ok(files) => utf8_files(files),
            Err(GitError::PathNotFound { .. }) => {
                return Err(PromotionError::TargetNotFound(format!(
                    "spec.to.path {to_path:?} does not exist on branch {base}"
                )));
            }
            Err(e) => return Err(e.into()),
        };
        let mut commits = watch_commits;
        let source = match &from_path {
            Some(path) => {
                let files = match repo.read_files_under(source_head, path) {
                    Ok(files) => utf8_files(files),
                    Err(GitError::PathNotFound { .. }) => {
                        return Err(PromotionError::SourceNotReady(format!(
                            "spec.from.path {path:?} does not exist on branch {source_branch}"
                        )));
                    }
                    Err(e) => return Err(e.into()),
                };
                let changed = last_change(repo.raw(), source_head, path.trim_matches('/'))
                    .map_err(|e| PromotionError::Internal(format!("git history: {e}")))?;
                commits.extend(changed.as_ref().map(|(c, _)| c.clone()));
                Some((files, changed))
            }
            None => None,
        };
        let containment = revision.map(|rev| containment(repo.raw(), &rev, &commits));
        Ok(GitRead {
            base_head,
            pr_tip,
            target_files,
            source,
            containment,
        })
    })
    .await
}

/// The candidate inputs that are plain data (for the pure builder, also inside a retry loop).
#[derive(Clone)]
struct Decision {
    source: SourceState,
    rewrite: Vec<imagewatch_crd::promotion::ImageRewrite>,
    align: Option<imagewatch_crd::promotion::AlignTags>,
    pin: Option<BTreeMap<String, String>>,
    to_path: String,
}

impl Decision {
    fn candidate(&self, target: &Inventory) -> Result<Candidate, CandidateError> {
        promotion::build_candidate(CandidateInput {
            sources: &self.source.images,
            rewrite: &self.rewrite,
            align: self.align.as_ref(),
            pin: self.pin.as_ref().filter(|p| !p.is_empty()),
            target,
            target_path: &self.to_path,
        })
    }
}

/// The source watches that have applied no tag yet and report no failure (no status yet,
/// or `Ready` not `False`), as a message; `None` when there are none. Pure.
fn first_tag_pending(watches: &[ImageWatch]) -> Option<String> {
    let pending: Vec<String> = watches
        .iter()
        .filter(|w| {
            let status = w.status.as_ref();
            let failing = status
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "False");
            status.and_then(|s| s.applied.as_ref()).is_none() && !failing
        })
        .map(|w| w.name_any())
        .collect();
    (!pending.is_empty()).then(|| {
        format!(
            "waiting for ImageWatch {} to apply a first tag",
            pending.join(", ")
        )
    })
}

fn candidate_error(e: CandidateError) -> PromotionError {
    match e {
        CandidateError::NothingInTarget { .. } => PromotionError::TargetNotFound(e.to_string()),
        CandidateError::EmptySource | CandidateError::LeaderMissing(..) => {
            PromotionError::SourceNotReady(e.to_string())
        }
        _ => PromotionError::InvalidSpec(e.to_string()),
    }
}

/// Steps 1–5. `finalizer_present` tells whether the policy carries [`FINALIZER`]; it is added
/// (and set) before a pull request is opened.
async fn reconcile_policy(
    policy: &PromotionPolicy,
    shared: &Shared,
    finalizer_present: &mut bool,
) -> Result<Outcome, PromotionError> {
    let spec = &policy.spec;
    let namespace = policy.namespace().unwrap_or_default();
    let name = policy.name_any();
    let policy_name = format!("{namespace}/{name}");
    let client = &shared.ctx.client;

    // 1. validate
    validate(spec).map_err(PromotionError::InvalidSpec)?;
    let mode = spec.mode();
    let source = source_label(spec);
    let to_path = spec.to.path.trim_matches('/').to_string();

    // 2. dereference
    let watches = list_source_watches(policy, client).await?;
    let watch_state = if spec.from.watch_selector.is_some() {
        if let Some(waiting) = first_tag_pending(&watches) {
            return Err(PromotionError::SourceWaiting(waiting));
        }
        Some(promotion::sources_from_watches(&watches).map_err(PromotionError::SourceNotReady)?)
    } else {
        None
    };
    let location = resolve_location(policy, &watches, shared).await?;
    let pr_branch = render::branch_name(&namespace, &name);
    let gates_spec = spec.gates.clone().unwrap_or_default();
    let app_facts = match &gates_spec.application {
        Some(app) => Some(read_application(client, &app.namespace, &app.name, &namespace).await?),
        None => None,
    };

    // 3. read Git
    let read = read_git(
        shared,
        &location,
        to_path.clone(),
        spec.from
            .path
            .clone()
            .map(|p| p.trim_matches('/').to_string()),
        (mode == PromotionMode::PullRequest).then(|| pr_branch.clone()),
        app_facts.as_ref().and_then(|a| a.revision.clone()),
        watch_state
            .as_ref()
            .map(|s| s.commits.clone())
            .unwrap_or_default(),
    )
    .await?;

    // 4. decide
    let target = promotion::inventory(&read.target_files, &to_path);
    let source_state = match (watch_state, &read.source) {
        (Some(state), _) => state,
        (None, Some((files, changed))) => {
            let path = spec.from.path.clone().unwrap_or_default();
            let path = path.trim_matches('/');
            let inventory = promotion::inventory(files, path);
            promotion::sources_from_inventory(
                &inventory,
                path,
                changed.as_ref().map(|(c, _)| c.clone()),
                changed.as_ref().map(|(_, at)| *at),
            )
            .map_err(PromotionError::SourceNotReady)?
        }
        (None, None) => return Err(PromotionError::Internal("no source was read".into())),
    };
    let decision = Decision {
        source: source_state.clone(),
        rewrite: spec.to.image_rewrite.clone().unwrap_or_default(),
        align: spec.align_tags.clone(),
        pin: spec.pin.clone(),
        to_path: to_path.clone(),
    };
    let candidate = decision.candidate(&target).map_err(candidate_error)?;
    let mut outcome = Outcome {
        source,
        mode,
        path: to_path.clone(),
        branch: location.base.clone(),
        candidate: candidate.clone(),
        gates: None,
        delivery: Delivery::UpToDate { closed: None },
        warnings: Vec::new(),
    };
    let source_text = outcome.source.clone();
    let text_ctx = TextContext {
        policy: &policy_name,
        source: &source_text,
        path: &to_path,
        branch: &location.base,
    };

    if candidate.is_current() {
        // 5a. nothing to propose; a pull request still open for an older candidate goes.
        if mode == PromotionMode::PullRequest && !spec.is_suspended() {
            let known = policy
                .status
                .as_ref()
                .is_some_and(|s| s.pull_request.is_some());
            let first_look = policy
                .status
                .as_ref()
                .is_none_or(|s| !s.conditions.iter().any(|c| c.type_ == PULL_REQUEST_OPEN));
            if known || (first_look && read.pr_tip.is_some()) {
                let forge = forge_client(policy, &location.url, shared).await?;
                if let Some(open) = forge.find_open(&pr_branch, &location.base).await? {
                    forge.close(&open).await?;
                    outcome.delivery = Delivery::UpToDate { closed: Some(open) };
                }
            }
        }
        return Ok(outcome);
    }

    // Gates.
    let mut facts = GateFacts {
        pinned: candidate.pinned,
        ..Default::default()
    };
    if gates_spec.image_exists.unwrap_or(false) || gates_spec.signature.is_some() {
        check_gate_registries_allowed(policy, &candidate, shared).await?;
    }
    if gates_spec.image_exists.unwrap_or(false) {
        facts.image_exists = Some(check_images(policy, &candidate, shared).await?);
    }
    if let Some(verify) = &gates_spec.signature {
        facts.signature = Some(check_signatures(policy, &candidate, verify, shared).await?);
    }
    if let Some(soak) = gates_spec.soak.as_deref() {
        facts.soak = Some(SoakFacts {
            required: parse_duration(soak).unwrap_or_default(),
            applied: source_state.applied.clone(),
        });
    }
    if let Some(mut app) = app_facts {
        app.containment = read
            .containment
            .clone()
            .unwrap_or_else(|| Containment::Unknown("the Application reports no revision".into()));
        if source_state.commits.is_empty() && app.containment == Containment::Contains {
            app.containment = Containment::Unknown("the source watches recorded no commit".into());
        }
        facts.application = Some(app);
    }
    if gates_spec.approval.unwrap_or(false) {
        facts.approval = Some(ApprovalFacts {
            annotation: policy.annotations().get(APPROVE_ANNOTATION).cloned(),
            id: candidate.id(),
            summary: candidate.summary(),
            namespace: policy.namespace().unwrap_or_default(),
            name: policy.name_any(),
        });
    }
    let report = promotion::evaluate(&facts, jiff::Timestamp::now());
    let passed = report.passed();
    outcome.gates = Some(report.clone());
    if spec.is_suspended() {
        outcome.delivery = Delivery::Suspended;
        return Ok(outcome);
    }
    if !passed {
        outcome.delivery = Delivery::Gated;
        return Ok(outcome);
    }

    // 5b. write.
    match mode {
        PromotionMode::Commit => {
            let commit = commit_to_target(shared, &location, decision, &policy_name).await?;
            outcome.delivery = match commit {
                Some(commit) => Delivery::Committed { commit },
                None => Delivery::UpToDate { closed: None },
            };
        }
        PromotionMode::PullRequest => {
            let edits = promotion::plan_target_edits(&read.target_files, &target, &candidate)
                .map_err(PromotionError::TargetNotFound)?;
            let message = render::commit_message(&candidate, &edits.changes, text_ctx);
            let (commit, pushed) = push_pull_request_branch(
                shared,
                &location,
                &pr_branch,
                read.base_head,
                read.pr_tip,
                edits.files,
                message,
            )
            .await?;
            let settings = spec.pull_request.clone().ok_or_else(|| {
                PromotionError::InvalidSpec("spec.pullRequest is required".into())
            })?;
            let forge = forge_client(policy, &location.url, shared).await?;
            if !*finalizer_present {
                // Before the pull request exists, so that a deletion never misses it.
                add_finalizer(client, policy.meta()).await?;
                *finalizer_present = true;
            }
            let ensured = forge
                .ensure(&NewPullRequest {
                    head: pr_branch.clone(),
                    base: location.base.clone(),
                    title: render::title(settings.title.as_deref(), &candidate, text_ctx),
                    body: render::body(&candidate, &report.gates, text_ctx),
                    labels: settings.labels.clone().unwrap_or_default(),
                    auto_merge: settings.auto_merge.unwrap_or(false),
                })
                .await?;
            outcome.warnings.extend(ensured.warnings);
            outcome.delivery = Delivery::Proposed {
                pull_request: ensured.pull_request,
                action: ensured.action,
                commit,
                pushed,
            };
        }
    }
    Ok(outcome)
}

/// The Argo CD Application a `gates.application` names, as far as the policy in
/// `policy_namespace` may see it: one that neither lives in nor deploys to that namespace is
/// reported like a missing one, so a tenant learns nothing of other tenants' Applications
/// (their sync state, health or revision).
async fn read_application(
    client: &Client,
    namespace: &str,
    name: &str,
    policy_namespace: &str,
) -> Result<ApplicationFacts, PromotionError> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"),
        "applications",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let label = format!("{namespace}/{name}");
    let app = match api.get_opt(name).await {
        Ok(app) => app,
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => return Err(e.into()),
    };
    let app = app.filter(|app| super::argocd::deploys_to(namespace, &app.data, policy_namespace));
    Ok(match app {
        Some(app) => {
            let (sync, health, revision) = application_state(&app.data);
            ApplicationFacts {
                name: label,
                found: true,
                sync,
                health,
                revision,
                containment: Containment::Unknown(String::new()),
            }
        }
        None => ApplicationFacts {
            name: label,
            found: false,
            sync: None,
            health: None,
            revision: None,
            containment: Containment::Unknown(String::new()),
        },
    })
}

/// The registries the image gates read (every promoted repository, after `imageRewrite`)
/// and, for ECR without `to.registrySecretRef`, the operator's AWS identity: allowed to the
/// policy's namespace by the allow-list, or `NotAllowed` before anything is read.
async fn check_gate_registries_allowed(
    policy: &PromotionPolicy,
    candidate: &Candidate,
    shared: &Shared,
) -> Result<(), PromotionError> {
    let namespace = policy.namespace().unwrap_or_default();
    let secret = policy.spec.to.registry_secret_ref.as_ref();
    let images: Vec<&str> = candidate
        .changes()
        .map(|image| image.repository.as_str())
        .collect();
    let aws = secret.is_none()
        && images
            .iter()
            .any(|image| is_ecr_host(image.split('/').next().unwrap_or_default()).is_some());
    let ask = super::allow::Ask {
        namespace: &namespace,
        git: None,
        images,
        aws,
    };
    let ctx = &shared.ctx;
    ctx.allowance
        .check(&ctx.client, &ctx.metrics, "PromotionPolicy", ask, None)
        .await?;
    Ok(())
}

/// `imageExists`: a manifest HEAD for every changed reference, with the target registry's
/// credentials (`to.registrySecretRef`, or ECR through the operator's AWS identity).
async fn check_images(
    policy: &PromotionPolicy,
    candidate: &Candidate,
    shared: &Shared,
) -> Result<Vec<ImageFact>, PromotionError> {
    let ctx = &shared.ctx;
    let namespace = policy.namespace().unwrap_or_default();
    let mut creds_by_host: HashMap<String, Credentials> = HashMap::new();
    let mut facts = Vec::new();
    for image in candidate.changes() {
        let reference = format!("{}:{}", image.repository, image.tag);
        let repo = match RepositoryRef::parse(&image.repository) {
            Ok(r) => r,
            Err(e) => {
                facts.push(ImageFact {
                    reference,
                    expected_digest: image.digest.clone(),
                    check: ImageCheck::Error(e.to_string()),
                });
                continue;
            }
        };
        let secret = policy.spec.to.registry_secret_ref.as_ref();
        let use_ecr = is_ecr_host(&repo.registry).is_some() && secret.is_none();
        let creds = match (secret, creds_by_host.get(&repo.registry)) {
            (_, Some(c)) => c.clone(),
            (Some(secret), None) => {
                let c =
                    secrets::registry_credentials(ctx, &namespace, &secret.name, &repo.registry)
                        .await?;
                creds_by_host.insert(repo.registry.clone(), c.clone());
                c
            }
            (None, None) => Credentials::Anonymous,
        };
        let result = if use_ecr {
            ctx.ecr.digest(&repo, &image.tag, &creds).await
        } else {
            ctx.registry
                .manifest_digest(&repo, &image.tag, &creds)
                .await
        };
        let check = match result {
            Ok(Some(digest)) => ImageCheck::Exists(Some(digest)),
            Ok(None) | Err(RegistryError::NotFound { .. }) => ImageCheck::Missing,
            Err(e) => ImageCheck::Error(e.to_string()),
        };
        facts.push(ImageFact {
            reference,
            expected_digest: image.digest.clone(),
            check,
        });
    }
    Ok(facts)
}

/// `signature`: every changed reference's image, in its target registry, must carry a cosign
/// signature by a key of `verify` (see `crate::signature`).
async fn check_signatures(
    policy: &PromotionPolicy,
    candidate: &Candidate,
    verify: &imagewatch_crd::Verify,
    shared: &Shared,
) -> Result<Vec<SignatureFact>, PromotionError> {
    let ctx = &shared.ctx;
    let namespace = policy.namespace().unwrap_or_default();
    let keys =
        super::reconcile::signature_keys(ctx, &namespace, &verify.cosign, "spec.gates.signature")
            .await?;
    let secret = policy.spec.to.registry_secret_ref.as_ref();
    let cache_key = format!(
        "{}|{}",
        crate::signature::keys_fingerprint(&keys),
        secret.map_or_else(
            || "anonymous".to_string(),
            |s| format!("secret:{namespace}/{}", s.name)
        )
    );
    let mut creds_by_host: HashMap<String, Credentials> = HashMap::new();
    let mut facts = Vec::new();
    for image in candidate.changes() {
        let reference = format!("{}:{}", image.repository, image.tag);
        let repo = match RepositoryRef::parse(&image.repository) {
            Ok(r) => r,
            Err(e) => {
                facts.push(SignatureFact {
                    reference,
                    check: SignatureCheck::Error(e.to_string()),
                });
                continue;
            }
        };
        // ECR without a pull Secret: the operator's AWS identity, as for the image gate; its
        // signatures are read through the registry API with that identity's registry token.
        let use_ecr = is_ecr_host(&repo.registry).is_some() && secret.is_none();
        let creds = match (secret, creds_by_host.get(&repo.registry)) {
            (_, Some(c)) => c.clone(),
            (Some(secret), None) => {
                let c =
                    secrets::registry_credentials(ctx, &namespace, &secret.name, &repo.registry)
                        .await?;
                creds_by_host.insert(repo.registry.clone(), c.clone());
                c
            }
            (None, None) if use_ecr => match ctx.ecr.registry_credentials(&repo.registry).await {
                Ok(c) => {
                    creds_by_host.insert(repo.registry.clone(), c.clone());
                    c
                }
                Err(e) => {
                    facts.push(SignatureFact {
                        reference,
                        check: SignatureCheck::Error(e.to_string()),
                    });
                    continue;
                }
            },
            (None, None) => Credentials::Anonymous,
        };
        let digest = match &image.digest {
            Some(d) => Ok(Some(d.clone())),
            None if use_ecr => ctx.ecr.digest(&repo, &image.tag, &creds).await,
            None => {
                ctx.registry
                    .manifest_digest(&repo, &image.tag, &creds)
                    .await
            }
        };
        let check = match digest {
            Ok(None) => SignatureCheck::Error("not in the registry".into()),
            Err(e) => SignatureCheck::Error(e.to_string()),
            Ok(Some(digest)) => {
                let verdict = crate::signature::fetch::check(
                    &ctx.registry,
                    &ctx.signatures,
                    &cache_key,
                    &repo,
                    &digest,
                    &creds,
                    &keys,
                )
                .await;
                super::reconcile::count_signature_check(
                    ctx,
                    "PromotionPolicy",
                    verdict.as_ref().map_or("error", |v| v.outcome()),
                );
                match verdict {
                    Ok(crate::signature::Verdict::Verified { .. }) => SignatureCheck::Verified,
                    Ok(crate::signature::Verdict::Missing) => SignatureCheck::Missing,
                    Ok(crate::signature::Verdict::Invalid(why)) => SignatureCheck::Invalid(why),
                    Err(e) => SignatureCheck::Error(e.to_string()),
                }
            }
        };
        facts.push(SignatureFact { reference, check });
    }
    Ok(facts)
}

async fn forge_client(
    policy: &PromotionPolicy,
    git_url: &str,
    shared: &Shared,
) -> Result<ForgeClient, PromotionError> {
    let settings = policy.spec.pull_request.as_ref().ok_or_else(|| {
        PromotionError::InvalidSpec("spec.pullRequest is required in mode PullRequest".into())
    })?;
    let token = match &settings.secret_ref {
        Some(secret) => {
            let namespace = policy.namespace().unwrap_or_default();
            Some(secrets::forge_token(&shared.ctx, &namespace, &secret.name).await?)
        }
        None => None,
    };
    Ok(ForgeClient::new(
        settings.provider,
        settings.api_url.as_deref(),
        settings.repository.as_deref(),
        git_url,
        token,
        shared.http.clone(),
    )?
    .with_metrics(shared.ctx.metrics.clone()))
}

/// Mode Commit: the edits on `to.branch`, recomputed on the fetched head of every attempt
/// (a rejected push is fetched, re-planned and pushed again; never forced).
async fn commit_to_target(
    shared: &Shared,
    location: &Location,
    decision: Decision,
    policy_name: &str,
) -> Result<Option<String>, PromotionError> {
    let cache = shared.cache.clone();
    let url = location.url.clone();
    let auth = location.auth.clone();
    let base = location.base.clone();
    let author = shared.author.clone();
    let signer = shared.signer.clone();
    let attempts = shared.push_attempts;
    let policy_name = policy_name.to_string();
    let source_label = format!("PromotionPolicy {policy_name}");
    blocking(move || {
        let repo = cache.open_or_clone(&url, &auth)?;
        let outcome = write_with_retry_signed(
            &repo,
            &base,
            &auth,
            attempts,
            |repo, head| {
                let files = utf8_files(repo.read_files_under(head, &decision.to_path)?);
                let target = promotion::inventory(&files, &decision.to_path);
                let candidate = decision
                    .candidate(&target)
                    .map_err(|e| GitError::apply(e.to_string()))?;
                if candidate.is_current() {
                    return Ok(None);
                }
                let edits = promotion::plan_target_edits(&files, &target, &candidate)
                    .map_err(GitError::apply)?;
                let message = render::commit_message(
                    &candidate,
                    &edits.changes,
                    TextContext {
                        policy: &policy_name,
                        source: &source_label,
                        path: &decision.to_path,
                        branch: &base,
                    },
                );
                Ok(Some((edits.files, message)))
            },
            &author,
            signer.as_ref(),
        )?;
        Ok(match outcome {
            WriteOutcome::Committed { commit, .. } => Some(commit.to_string()),
            WriteOutcome::NothingToDo { .. } => None,
        })
    })
    .await
}

/// Mode PullRequest: one commit with the edits on the fetched target head, published to the
/// policy's own branch. An existing branch is overwritten (with a lease on the tip inspected)
/// only when it holds nothing but our earlier commit (`git::Repo::check_push_branch`), and only
/// when its content or base differ. Returns the branch's head and whether it was pushed.
async fn push_pull_request_branch(
    shared: &Shared,
    location: &Location,
    branch: &str,
    base_head: Oid,
    tip: Option<Oid>,
    edits: Vec<FileEdit>,
    message: String,
) -> Result<(String, bool), PromotionError> {
    let cache = shared.cache.clone();
    let url = location.url.clone();
    let auth = location.auth.clone();
    let author = shared.author.clone();
    let signer = shared.signer.clone();
    let branch = branch.to_string();
    blocking(move || {
        let repo = cache.open_or_clone(&url, &auth)?;
        let Some(commit) = repo.commit_edits_signed(
            &branch,
            base_head,
            &edits,
            &message,
            &author,
            signer.as_ref(),
        )?
        else {
            return Err(PromotionError::Internal(
                "the planned edits change nothing".into(),
            ));
        };
        if let Some(tip) = tip {
            let owned = repo.check_push_branch(&branch, tip, base_head, &author)?;
            let same_tree = repo.raw().find_commit(tip).map(|c| c.tree_id()).ok()
                == repo.raw().find_commit(commit).map(|c| c.tree_id()).ok();
            if same_tree && owned.base == base_head {
                return Ok((tip.to_string(), false));
            }
        }
        repo.push_with(
            &branch,
            commit,
            &auth,
            PushMode::ForceWithLease { expected: tip },
            None,
        )?;
        Ok((commit.to_string(), true))
    })
    .await
}

/// Step 6 (pure): the status this reconcile leaves.
pub fn build_status(
    policy: &PromotionPolicy,
    result: &Result<Outcome, PromotionError>,
    now: &Time,
) -> PromotionPolicyStatus {
    let previous = policy.status.clone().unwrap_or_default();
    let generation = policy.metadata.generation;
    let mut next = previous.clone();
    next.observed_generation = generation;
    let condition = |type_: &str, status: &str, reason: &str, message: &str| Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: truncate(message, 1024),
        observed_generation: generation,
        last_transition_time: now.clone(),
    };
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(e) => {
            next.conditions = conditions::merge_condition(
                &previous.conditions,
                condition(READY, "False", e.reason(), &e.to_string()),
            );
            return next;
        }
    };
    let candidate = &outcome.candidate;
    next.source = Some(outcome.source.clone());
    next.candidate = candidate
        .images
        .iter()
        .map(|i| PromotedImage {
            name: i.name.clone(),
            image: i.repository.clone(),
            tag: i.tag.clone(),
            current: i.current_display(),
        })
        .collect();
    next.candidate_summary = Some(candidate.summary());
    next.candidate_id = Some(candidate.id());
    match &outcome.gates {
        Some(g) => {
            next.gates = g.gates.clone();
            next.gates_summary = Some(g.summary());
        }
        None => {
            next.gates = Vec::new();
            next.gates_summary = None;
        }
    }
    let summary = candidate.summary();
    let changes: Vec<String> = candidate
        .changes()
        .map(|i| {
            format!(
                "{} {} -> {}",
                i.name,
                i.current_display().unwrap_or_default(),
                i.tag
            )
        })
        .collect();
    let mut notes = outcome.warnings.clone();
    if !candidate.not_in_target.is_empty() {
        notes.push(format!(
            "not in {}: {}",
            outcome.path,
            candidate.not_in_target.join(", ")
        ));
    }
    let note = if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join("; "))
    };
    let is_pr = outcome.mode == PromotionMode::PullRequest;
    let mut set = |c: Condition| next.conditions = conditions::merge_condition(&next.conditions, c);
    let gates_condition = match &outcome.gates {
        None => condition(
            GATES_PASSING,
            "Unknown",
            reason::NOTHING_TO_PROMOTE,
            &format!("{} already holds {summary}", outcome.path),
        ),
        Some(g) => match &g.failing {
            Some((r, m)) => condition(GATES_PASSING, "False", r, m),
            None => condition(
                GATES_PASSING,
                "True",
                reason::GATES_PASSED,
                &format!("{} gate(s) pass", g.gates.len()),
            ),
        },
    };
    set(gates_condition);
    let record = |commit: Option<String>, pr: Option<String>| Promotion {
        tags: candidate.tags(),
        commit,
        pull_request: pr,
        at: now.clone(),
    };
    let mut new_promotion: Option<Promotion> = None;
    let mut pull_request = previous.pull_request.clone();
    match &outcome.delivery {
        Delivery::UpToDate { closed } => {
            // A commit just made stays the Ready message until something else happens (the
            // next reconcile finds the target current): no status churn, and people see it.
            let just_committed = previous.conditions.iter().any(|c| {
                c.type_ == READY
                    && c.reason == reason::COMMITTED
                    && c.observed_generation == generation
            }) && previous.candidate_id.as_deref()
                == Some(candidate.id().as_str());
            if !just_committed {
                set(condition(
                    READY,
                    "True",
                    reason::UP_TO_DATE,
                    &format!("{} already holds {summary}{note}", outcome.path),
                ));
            }
            if is_pr {
                pull_request = None;
                let already_closed = previous
                    .conditions
                    .iter()
                    .any(|c| c.type_ == PULL_REQUEST_OPEN && c.status == "False");
                match closed {
                    Some(pr) => set(condition(
                        PULL_REQUEST_OPEN,
                        "False",
                        reason::CLOSED,
                        &format!(
                            "closed {} #{}: {} already holds the candidate",
                            pr.url, pr.number, outcome.path
                        ),
                    )),
                    None if already_closed => {}
                    None => set(condition(
                        PULL_REQUEST_OPEN,
                        "False",
                        reason::NO_PULL_REQUEST,
                        "nothing to propose",
                    )),
                }
            }
        }
        Delivery::Gated => {
            let why = outcome
                .gates
                .as_ref()
                .and_then(|g| g.failing.as_ref())
                .map(|(_, m)| m.clone())
                .unwrap_or_default();
            set(condition(
                READY,
                "True",
                reason::WAITING_FOR_GATES,
                &format!("{} waits for gates: {why}{note}", changes.join(", ")),
            ));
        }
        Delivery::Suspended => {
            set(condition(
                READY,
                "False",
                common_reason::SUSPENDED,
                &format!(
                    "suspended: {} would be proposed to {}",
                    changes.join(", "),
                    outcome.path
                ),
            ));
        }
        Delivery::Committed { commit } => {
            set(condition(
                READY,
                "True",
                reason::COMMITTED,
                &format!(
                    "commit {} on {}: {}{note}",
                    short(commit),
                    outcome.branch,
                    changes.join(", ")
                ),
            ));
            new_promotion = Some(record(Some(commit.clone()), None));
        }
        Delivery::Proposed {
            pull_request: pr,
            action,
            commit,
            pushed,
        } => {
            set(condition(
                READY,
                "True",
                reason::PROPOSED,
                &format!(
                    "pull request #{} proposes {}{note}",
                    pr.number,
                    changes.join(", ")
                ),
            ));
            set(condition(PULL_REQUEST_OPEN, "True", reason::OPEN, &pr.url));
            pull_request = Some(PullRequestRef {
                url: pr.url.clone(),
                number: pr.number,
                branch: pr.head.clone(),
            });
            if *pushed || *action == EnsureAction::Created {
                new_promotion = Some(record(Some(commit.clone()), Some(pr.url.clone())));
            }
        }
    }
    if !is_pr {
        pull_request = None;
        set(condition(
            PULL_REQUEST_OPEN,
            "False",
            reason::NOT_APPLICABLE,
            "mode Commit opens no pull requests",
        ));
    }
    next.pull_request = pull_request;
    if let Some(p) = new_promotion {
        let duplicate = next.last_promotions.first().is_some_and(|last| {
            last.tags == p.tags && last.commit == p.commit && last.pull_request == p.pull_request
        });
        if !duplicate {
            next.last_promotions.insert(0, p);
            next.last_promotions.truncate(HISTORY);
        }
    }
    next
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

async fn patch_status_if_changed(
    policy: &PromotionPolicy,
    status: PromotionPolicyStatus,
    client: &Client,
) -> Result<(), PromotionError> {
    if policy.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<PromotionPolicy> =
        Api::namespaced(client.clone(), &policy.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": "imagewatch.dev/v1alpha1",
        "kind": "PromotionPolicy",
        "status": status,
    });
    let params = PatchParams::apply(imagewatch_crd::FIELD_MANAGER).force();
    match api
        .patch_status(&policy.name_any(), &params, &Patch::Apply(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn ready_of(policy: &PromotionPolicy) -> Option<&Condition> {
    policy
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == READY))
}

fn gates_of(policy: &PromotionPolicy) -> Option<&Condition> {
    policy
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == GATES_PASSING))
}

/// The Event a reconcile result deserves, if any (pure).
pub fn event_for(
    policy: &PromotionPolicy,
    result: &Result<Outcome, PromotionError>,
) -> Option<Event> {
    let normal = |reason: &str, action: &str, note: String| Event {
        type_: EventType::Normal,
        reason: reason.into(),
        note: Some(truncate(&note, 1024)),
        action: action.into(),
        secondary: None,
    };
    match result {
        Ok(o) => {
            let summary = o.candidate.summary();
            match &o.delivery {
                Delivery::Committed { commit } => Some(normal(
                    "Promoted",
                    "Commit",
                    format!(
                        "committed {} to {} ({}): {summary}",
                        short(commit),
                        o.branch,
                        o.path
                    ),
                )),
                Delivery::Proposed {
                    pull_request,
                    action: EnsureAction::Created,
                    ..
                } => Some(normal(
                    "PullRequestOpened",
                    "Propose",
                    format!(
                        "opened #{} {}: {summary}",
                        pull_request.number, pull_request.url
                    ),
                )),
                Delivery::Proposed {
                    pull_request,
                    pushed: true,
                    ..
                } => Some(normal(
                    "PullRequestUpdated",
                    "Propose",
                    format!(
                        "updated #{} {}: {summary}",
                        pull_request.number, pull_request.url
                    ),
                )),
                Delivery::UpToDate {
                    closed: Some(pr), ..
                } => Some(normal(
                    "PullRequestClosed",
                    "Close",
                    format!(
                        "closed #{} {}: {} already holds {summary}",
                        pr.number, pr.url, o.path
                    ),
                )),
                Delivery::Gated => {
                    let (reason, message) = o.gates.as_ref()?.failing.clone()?;
                    let previous = gates_of(policy);
                    previous
                        .is_none_or(|c| c.reason != reason)
                        .then(|| normal(reason, "Gate", message))
                }
                _ => None,
            }
        }
        Err(e) => {
            let message = e.to_string();
            let previous = ready_of(policy);
            previous
                .is_none_or(|c| c.reason != e.reason() || c.message != truncate(&message, 1024))
                .then(|| Event {
                    type_: match e {
                        PromotionError::SourceWaiting(_) => EventType::Normal,
                        _ => EventType::Warning,
                    },
                    reason: e.reason().into(),
                    note: Some(truncate(&message, 1024)),
                    action: "Reconcile".into(),
                    secondary: None,
                })
        }
    }
}

async fn publish_events(
    policy: &PromotionPolicy,
    result: &Result<Outcome, PromotionError>,
    shared: &Shared,
) {
    if let Some(event) = event_for(policy, result)
        && let Err(e) = shared
            .ctx
            .recorder
            .publish(&event, &policy.object_ref(&()))
            .await
    {
        tracing::warn!(error = %e, "cannot publish Event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promotion::{CandidateImage, Origin};
    use imagewatch_crd::PromotionPolicySpec;

    fn policy(extra: serde_json::Value) -> PromotionPolicy {
        let mut spec = json!({
            "from": {"watchSelector": {"matchLabels": {"stage": "stg"}}},
            "to": {"path": "overlays/production", "branch": "release"},
            "pullRequest": {"provider": "github"},
        });
        if let (Some(base), Some(more)) = (spec.as_object_mut(), extra.as_object()) {
            for (k, v) in more {
                base.insert(k.clone(), v.clone());
            }
        }
        let spec: PromotionPolicySpec = serde_json::from_value(spec).unwrap();
        let mut p = PromotionPolicy::new("my-api", spec);
        p.metadata.namespace = Some("team".into());
        p.metadata.generation = Some(2);
        p
    }

    fn candidate(current: &str) -> Candidate {
        Candidate {
            images: vec![CandidateImage {
                name: "my-api".into(),
                repository: "r/acct222/my-api".into(),
                tag: "v2".into(),
                digest: None,
                origin: Origin::Source,
                source: Some("r/acct111/my-api:v2".into()),
                current: vec![format!("r/acct222/my-api:{current}")],
            }],
            not_in_target: vec![],
            pinned: false,
        }
    }

    fn outcome(delivery: Delivery, gates: Option<GateReport>, current: &str) -> Outcome {
        Outcome {
            source: "ImageWatches stage=stg".into(),
            mode: PromotionMode::PullRequest,
            path: "overlays/production".into(),
            branch: "release".into(),
            candidate: candidate(current),
            gates,
            delivery,
            warnings: vec![],
        }
    }

    fn pr(number: i64) -> PullRequest {
        PullRequest {
            number,
            url: format!("https://github.test/o/r/pull/{number}"),
            title: "t".into(),
            body: "b".into(),
            head: "imagewatch/promote-team-my-api".into(),
            base: "release".into(),
            head_sha: None,
            labels: vec![],
            auto_merge: false,
            node_id: None,
            state: Default::default(),
        }
    }

    fn t(secs: i64) -> Time {
        Time(jiff::Timestamp::from_second(secs).unwrap())
    }

    fn cond<'a>(s: &'a PromotionPolicyStatus, type_: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn validation_catches_what_the_schema_cannot() {
        assert!(validate(&policy(json!({})).spec).is_ok());
        let bad = policy(json!({"gates": {"soak": "soon"}}));
        assert!(validate(&bad.spec).unwrap_err().contains("soak"));
        let bad = policy(json!({"pin": {"my-api": "-bad"}}));
        assert!(validate(&bad.spec).unwrap_err().contains("spec.pin"));
        let mut bad = policy(json!({}));
        bad.spec.pull_request = None;
        assert!(validate(&bad.spec).unwrap_err().contains("pullRequest"));
        let bad = policy(json!({"from": {"path": "overlays/stg"}}));
        assert!(validate(&bad.spec).unwrap_err().contains("to.git"));
    }

    #[test]
    fn a_gated_candidate_names_the_gate() {
        let p = policy(json!({}));
        let report = promotion::evaluate(
            &GateFacts {
                image_exists: Some(vec![ImageFact {
                    reference: "r/acct222/my-api:v2".into(),
                    expected_digest: None,
                    check: ImageCheck::Missing,
                }]),
                ..Default::default()
            },
            jiff::Timestamp::from_second(0).unwrap(),
        );
        let s = build_status(
            &p,
            &Ok(outcome(Delivery::Gated, Some(report), "v1")),
            &t(10),
        );
        assert_eq!(cond(&s, GATES_PASSING).reason, "ImageMissing");
        assert_eq!(cond(&s, GATES_PASSING).status, "False");
        assert_eq!(cond(&s, READY).reason, "WaitingForGates");
        assert_eq!(s.gates_summary.as_deref(), Some("0/1"));
        assert_eq!(s.candidate_summary.as_deref(), Some("my-api:v2"));
        assert_eq!(s.candidate[0].current.as_deref(), Some("v1"));
        assert!(s.last_promotions.is_empty());
        assert!(
            event_for(
                &p,
                &Ok(outcome(
                    Delivery::Gated,
                    s.gates_summary.as_ref().map(|_| GateReport {
                        failing: Some(("ImageMissing", "x".into())),
                        ..Default::default()
                    }),
                    "v1"
                ))
            )
            .is_some()
        );
    }

    fn source_watch(name: &str, status: serde_json::Value) -> ImageWatch {
        serde_json::from_value(json!({
            "apiVersion": "imagewatch.dev/v1alpha1", "kind": "ImageWatch",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"image": "r/my-api", "git": {"url": "https://g/x.git"},
                     "target": {"helm": {"file": "v.yaml", "tag": "image.tag"}}},
            "status": status,
        }))
        .unwrap()
    }

    /// A policy created together with its watches: they have not applied a tag yet, which
    /// is a wait, not a failure: no Warning Event.
    #[test]
    fn a_source_watch_without_a_first_tag_yet_is_a_wait_not_a_warning() {
        let applied = json!({"applied": {"tag": "v1", "image": "r/my-api:v1"}});
        let failing = json!({"conditions": [{"type": "Ready", "status": "False",
            "reason": "RegistryError", "message": "x", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        let healthy = [
            source_watch("api", applied.clone()),
            source_watch("worker", serde_json::Value::Null),
        ];
        assert_eq!(
            first_tag_pending(&healthy).as_deref(),
            Some("waiting for ImageWatch worker to apply a first tag")
        );
        assert_eq!(first_tag_pending(&[source_watch("api", applied)]), None);
        // A failing watch is a source that is not ready: reported as before.
        assert_eq!(first_tag_pending(&[source_watch("api", failing)]), None);

        let p = policy(json!({}));
        let waiting = Err(PromotionError::SourceWaiting("waiting".into()));
        let event = event_for(&p, &waiting).expect("an Event");
        assert_eq!(event.type_, EventType::Normal);
        assert_eq!(event.reason, "SourceNotReady");
        let not_ready = Err(PromotionError::SourceNotReady("broken".into()));
        assert_eq!(event_for(&p, &not_ready).unwrap().type_, EventType::Warning);
    }

    #[test]
    fn a_proposal_records_the_pull_request_and_the_promotion() {
        let p = policy(json!({}));
        let o = outcome(
            Delivery::Proposed {
                pull_request: pr(3),
                action: EnsureAction::Created,
                commit: "abcdef1234567890".into(),
                pushed: true,
            },
            Some(GateReport::default()),
            "v1",
        );
        let s = build_status(&p, &Ok(o.clone()), &t(10));
        assert_eq!(cond(&s, PULL_REQUEST_OPEN).status, "True");
        assert_eq!(
            cond(&s, PULL_REQUEST_OPEN).message,
            "https://github.test/o/r/pull/3"
        );
        assert_eq!(cond(&s, READY).reason, "Proposed");
        assert_eq!(s.pull_request.as_ref().map(|p| p.number), Some(3));
        assert_eq!(s.last_promotions.len(), 1);
        assert_eq!(s.last_promotions[0].tags["my-api"], "v2");
        let e = event_for(&p, &Ok(o.clone())).unwrap();
        assert_eq!(e.reason, "PullRequestOpened");

        // The same state again records nothing new.
        let mut again = p.clone();
        again.status = Some(s.clone());
        let unchanged = outcome(
            Delivery::Proposed {
                pull_request: pr(3),
                action: EnsureAction::Unchanged,
                commit: "abcdef1234567890".into(),
                pushed: false,
            },
            Some(GateReport::default()),
            "v1",
        );
        let s2 = build_status(&again, &Ok(unchanged.clone()), &t(20));
        assert_eq!(s2, s, "nothing changes, so no status write");
        assert!(event_for(&again, &Ok(unchanged)).is_none());
    }

    #[test]
    fn history_is_newest_first_and_bounded() {
        let mut p = policy(json!({"mode": "Commit"}));
        for i in 0..12 {
            let o = Outcome {
                mode: PromotionMode::Commit,
                ..outcome(
                    Delivery::Committed {
                        commit: format!("c{i:02}"),
                    },
                    Some(GateReport::default()),
                    "v1",
                )
            };
            p.status = Some(build_status(&p, &Ok(o), &t(i)));
        }
        let s = p.status.unwrap();
        assert_eq!(s.last_promotions.len(), HISTORY);
        assert_eq!(s.last_promotions[0].commit.as_deref(), Some("c11"));
        assert_eq!(cond(&s, PULL_REQUEST_OPEN).reason, "NotApplicable");
        assert_eq!(cond(&s, READY).reason, "Committed");
    }

    #[test]
    fn a_commit_stays_the_ready_message_once_current() {
        let mut p = policy(json!({"mode": "Commit"}));
        let committed = Outcome {
            mode: PromotionMode::Commit,
            ..outcome(
                Delivery::Committed {
                    commit: "abc".into(),
                },
                Some(GateReport::default()),
                "v1",
            )
        };
        p.status = Some(build_status(&p, &Ok(committed), &t(1)));
        let current = Outcome {
            mode: PromotionMode::Commit,
            ..outcome(Delivery::UpToDate { closed: None }, None, "v2")
        };
        let s = build_status(&p, &Ok(current), &t(2));
        assert_eq!(cond(&s, READY).reason, "Committed");
        assert_eq!(cond(&s, GATES_PASSING).reason, "NothingToPromote");
    }

    #[test]
    fn up_to_date_closes_and_clears_the_pull_request() {
        let mut p = policy(json!({}));
        p.status = Some(PromotionPolicyStatus {
            pull_request: Some(PullRequestRef {
                url: "u".into(),
                number: 3,
                branch: "b".into(),
            }),
            ..Default::default()
        });
        let o = outcome(
            Delivery::UpToDate {
                closed: Some(pr(3)),
            },
            None,
            "v2",
        );
        let s = build_status(&p, &Ok(o.clone()), &t(10));
        assert!(s.pull_request.is_none());
        assert_eq!(cond(&s, PULL_REQUEST_OPEN).reason, "Closed");
        assert_eq!(cond(&s, GATES_PASSING).status, "Unknown");
        assert_eq!(cond(&s, READY).reason, "UpToDate");
        assert_eq!(event_for(&p, &Ok(o)).unwrap().reason, "PullRequestClosed");
    }

    #[test]
    fn errors_keep_the_last_known_state() {
        let mut p = policy(json!({}));
        p.status = Some(PromotionPolicyStatus {
            candidate_summary: Some("my-api:v2".into()),
            ..Default::default()
        });
        let err = PromotionError::Forge(ForgeError::RateLimited {
            provider: "github",
            retry_after: Some(Duration::from_secs(30)),
            message: "API rate limit exceeded".into(),
        });
        let s = build_status(&p, &Err(err), &t(10));
        assert_eq!(s.candidate_summary.as_deref(), Some("my-api:v2"));
        assert_eq!(cond(&s, READY).reason, "ForgeError");
        assert!(cond(&s, READY).message.contains("retry in 30s"));
    }

    #[test]
    fn only_a_recorded_pull_request_wants_the_finalizer() {
        let mut status = PromotionPolicyStatus::default();
        assert!(!wants_finalizer(&status));
        status.pull_request = Some(PullRequestRef {
            url: "u".into(),
            number: 3,
            branch: "b".into(),
        });
        assert!(wants_finalizer(&status));

        // Mode Commit records no pull request, so its policies never get the finalizer.
        let p = policy(json!({"mode": "Commit"}));
        let committed = Outcome {
            mode: PromotionMode::Commit,
            ..outcome(
                Delivery::Committed {
                    commit: "abc".into(),
                },
                Some(GateReport::default()),
                "v1",
            )
        };
        assert!(!wants_finalizer(&build_status(&p, &Ok(committed), &t(1))));

        // Opened: wanted; closed because production matches: not any more.
        let p = policy(json!({}));
        let proposed = outcome(
            Delivery::Proposed {
                pull_request: pr(3),
                action: EnsureAction::Created,
                commit: "abc".into(),
                pushed: true,
            },
            Some(GateReport::default()),
            "v1",
        );
        let mut open = p.clone();
        open.status = Some(build_status(&p, &Ok(proposed), &t(1)));
        assert!(wants_finalizer(open.status.as_ref().unwrap()));
        let closed = outcome(
            Delivery::UpToDate {
                closed: Some(pr(3)),
            },
            None,
            "v2",
        );
        assert!(!wants_finalizer(&build_status(&open, &Ok(closed), &t(2))));
        // A failed reconcile keeps the pull request it knew, and so the finalizer.
        let err = PromotionError::Git(GitError::apply("x"));
        assert!(wants_finalizer(&build_status(&open, &Err(err), &t(3))));
    }

    #[test]
    fn the_finalizer_is_removed_only_after_a_successful_reconcile() {
        use FinalizerChange::*;
        assert_eq!(finalizer_change(false, true, true), Some(Add));
        assert_eq!(finalizer_change(false, true, false), Some(Add));
        assert_eq!(finalizer_change(true, false, true), Some(Remove));
        assert_eq!(finalizer_change(true, false, false), None);
        assert_eq!(finalizer_change(true, true, true), None);
        assert_eq!(finalizer_change(false, false, true), None);
    }

    #[test]
    fn finalizer_patches_test_what_they_change() {
        let mut meta = ObjectMeta::default();
        assert!(!has_finalizer(&meta));
        assert_eq!(finalizer_patch(&meta, FinalizerChange::Remove), None);
        assert_eq!(
            finalizer_patch(&meta, FinalizerChange::Add),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
            ]))
        );
        meta.finalizers = Some(vec!["other.example/keep".into()]);
        assert_eq!(
            finalizer_patch(&meta, FinalizerChange::Add),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other.example/keep"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
            ]))
        );
        meta.finalizers = Some(vec!["other.example/keep".into(), FINALIZER.into()]);
        assert!(has_finalizer(&meta));
        assert_eq!(finalizer_patch(&meta, FinalizerChange::Add), None);
        assert_eq!(
            finalizer_patch(&meta, FinalizerChange::Remove),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": FINALIZER},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ]))
        );
    }

    #[test]
    fn closing_on_deletion_retries_with_backoff_then_gives_up() {
        let timeout = Duration::from_secs(300);
        let secs = Duration::from_secs;
        assert_eq!(close_step(None, secs(0), timeout, 0), CloseStep::Done);
        assert_eq!(close_step(None, secs(900), timeout, 7), CloseStep::Done);
        let server = PromotionError::Forge(ForgeError::Server {
            provider: "github",
            status: 502,
            message: "bad gateway".into(),
        });
        assert_eq!(
            close_step(Some(&server), secs(0), timeout, 1),
            CloseStep::Retry(secs(2))
        );
        assert_eq!(
            close_step(Some(&server), secs(10), timeout, 3),
            CloseStep::Retry(secs(8))
        );
        assert_eq!(
            close_step(Some(&server), secs(10), timeout, 9),
            CloseStep::Retry(CLOSE_RETRY_MAX),
            "capped"
        );
        assert_eq!(
            close_step(Some(&server), secs(290), timeout, 9),
            CloseStep::Retry(secs(10)),
            "never past the timeout"
        );
        assert_eq!(
            close_step(Some(&server), secs(300), timeout, 9),
            CloseStep::GiveUp
        );
        let limited = PromotionError::Forge(ForgeError::RateLimited {
            provider: "github",
            retry_after: Some(secs(30)),
            message: "slow down".into(),
        });
        assert_eq!(
            close_step(Some(&limited), secs(0), timeout, 1),
            CloseStep::Retry(secs(30))
        );
        // The Secret went with the namespace: retried like any other failure, within bounds.
        let secret = PromotionError::CredentialsNotFound("forge Secret t/forge-token".into());
        assert_eq!(
            close_step(Some(&secret), secs(1), timeout, 2),
            CloseStep::Retry(secs(4))
        );
        assert_eq!(
            close_step(Some(&secret), secs(301), timeout, 2),
            CloseStep::GiveUp
        );
        // What only the deleted spec could fix is not retried.
        let config = PromotionError::Forge(ForgeError::InvalidConfig("no repository".into()));
        assert_eq!(
            close_step(Some(&config), secs(0), timeout, 1),
            CloseStep::GiveUp
        );
        let spec = PromotionError::InvalidSpec("spec.pullRequest is required".into());
        assert_eq!(
            close_step(Some(&spec), secs(0), timeout, 1),
            CloseStep::GiveUp
        );
    }

    #[test]
    fn a_pull_request_no_longer_open_needs_no_close() {
        assert!(close_not_needed(&ForgeError::NotFound {
            provider: "github",
            message: "Not Found".into(),
        }));
        assert!(close_not_needed(&ForgeError::Rejected {
            provider: "gitlab",
            status: 405,
            message: "merge request is merged".into(),
        }));
        for e in [
            ForgeError::Unauthorized {
                provider: "github",
                status: 401,
                message: "Bad credentials".into(),
            },
            ForgeError::Server {
                provider: "gitea",
                status: 503,
                message: "down".into(),
            },
            ForgeError::Transport {
                provider: "github",
                message: "connection refused".into(),
            },
        ] {
            assert!(!close_not_needed(&e), "{e}");
        }
    }
}
