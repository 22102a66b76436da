//! `spec.git.pullRequest` of an ImageWatch: the edit goes to the push branch and one pull
//! request from it into `branch` is opened and kept current.
//!
//! The write step writes the push branch, then reads `branch` through the writer
//! (`GitWriter::read_base`) and hands both here ([`propose_watch`], [`propose_members`]):
//! does `branch` already hold the chosen image? When it does, an open pull request of the
//! push branch is closed (merged, or a person wrote the tag) and nothing is pushed. Otherwise the edit is written to
//! the push branch (the writer force-updates it only while it holds nothing but the
//! operator's own commits) and [`ForgeClient::ensure`] finds the open pull request by its
//! head branch, updates its title and body, or opens it. Finding it by branch is what makes a
//! restart safe: a pull request opened just before a crash, and not yet recorded in the
//! status, is adopted, never opened twice.
//!
//! While a pull request is recorded the watch carries [`FINALIZER`]; deleting the watch closes
//! it first (see [`finalize`] and [`close_on_delete`]).

use std::{sync::Arc, time::Duration};

use imagewatch_crd::{GitPullRequest, ImageWatch, WatchPullRequest};
use kube::{
    Client, Resource, ResourceExt,
    core::ApiResource,
    runtime::{
        controller::Action,
        events::{Event, EventType},
    },
};

use crate::cluster::finalizers::{FinalizerChange, patch_finalizer_of};
use crate::cluster::secrets;
use crate::controllers::ReconcileError;
use crate::controllers::{Context, SecretReader};
use crate::forge::{EnsureAction, ForgeClient, ForgeError, HeadLocks, NewPullRequest, PullRequest};
use crate::writer::{WriteRequest, WriteResult};
use imagewatch_engine::status::tag_of;

// What a pull request step did, and its status record (pure): in the engine.
pub use imagewatch_engine::status::{Delivered, PrAction, status_of};

/// Finalizer held while a pull request is recorded in the status.
pub const FINALIZER: &str = "imagewatch.dev/close-watch-pull-request";

/// Test hook (only with the `test-hooks` feature): set, the process aborts right after a pull
/// request was opened or updated, before the status records it (a restart must adopt it).
#[cfg(feature = "test-hooks")]
pub const CRASH_AFTER_PULL_REQUEST: &str = "IMAGEWATCH_TEST_CRASH_AFTER_PULL_REQUEST";

/// Title when `pullRequest.title` is unset.
pub const DEFAULT_TITLE: &str = "Update {{image}} to {{tag}}";

/// Title of a group's pull request when `pullRequest.title` is unset.
pub const DEFAULT_GROUP_TITLE: &str = "Update group {{group}} to {{tag}}";

/// Body when `pullRequest.body` is unset.
pub const DEFAULT_BODY: &str = "ImageWatch `{{watch}}` proposes `{{image}}:{{tag}}` in `{{file}}`.\n\n`{{branch}}` holds `{{before}}`. This pull request is kept current by imagewatch: a newer tag updates it, and it is closed when `{{branch}}` holds the tag.";

/// What the templates can name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextVars {
    /// Image repository.
    pub image: String,
    /// Tag proposed.
    pub tag: String,
    /// `namespace/name` of the watch.
    pub watch: String,
    /// Base branch.
    pub branch: String,
    /// File edited.
    pub file: String,
    /// Image the base branch holds.
    pub before: String,
    /// `spec.group`, or empty.
    pub group: String,
}

/// Replaces the placeholders of `template` (pure). Unknown `{{…}}` stay as written.
pub fn render(template: &str, v: &TextVars) -> String {
    [
        ("{{image}}", &v.image),
        ("{{tag}}", &v.tag),
        ("{{watch}}", &v.watch),
        ("{{branch}}", &v.branch),
        ("{{file}}", &v.file),
        ("{{before}}", &v.before),
        ("{{group}}", &v.group),
    ]
    .iter()
    .fold(template.to_string(), |text, (key, value)| {
        text.replace(key, value)
    })
}

/// The push branch of a watch with a pull request and no `pushBranch` (pure).
pub fn default_push_branch(namespace: &str, name: &str) -> String {
    format!("imagewatch/{namespace}-{name}")
}

/// The push branch of one repository of a pattern watch (pure): `base-` and the repository
/// with `/` as `-`, e.g. `imagewatch/team-all-hoge-billing-api`.
pub fn member_push_branch(base: &str, repository: &str) -> String {
    format!("{base}-{}", repository.trim_matches('/').replace('/', "-"))
}

/// The push branch shared by the members of `spec.group` (pure): one pull request per group.
pub fn group_push_branch(namespace: &str, group: &str) -> String {
    format!("imagewatch/{namespace}-group-{group}")
}

/// The repository of an image reference: without digest and tag (pure).
fn repository_of(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    match image.rfind(':') {
        Some(i) if !image[i..].contains('/') => &image[..i],
        _ => image,
    }
}

/// The texts of a group's pull request (pure): the same for every member, whichever
/// reconciles. `members` are each member's (image written, file); `{{image}}` and `{{file}}`
/// list them sorted, `{{watch}}` names the group and `{{before}}` is left out.
pub fn group_vars(vars: TextVars, members: &[(String, String)]) -> TextVars {
    let mut images: Vec<&str> = members.iter().map(|(i, _)| repository_of(i)).collect();
    images.sort_unstable();
    images.dedup();
    let mut files: Vec<&str> = members.iter().map(|(_, f)| f.as_str()).collect();
    files.sort_unstable();
    files.dedup();
    let namespace = vars.watch.split('/').next().unwrap_or_default().to_string();
    TextVars {
        image: images.join(", "),
        file: files.join(", "),
        watch: format!("{namespace}/group {}", vars.group),
        before: "the previous tags".into(),
        ..vars
    }
}

/// The pull request a watch should have (pure).
pub fn proposal(settings: &GitPullRequest, head: &str, vars: &TextVars) -> NewPullRequest {
    NewPullRequest {
        head: head.to_string(),
        base: vars.branch.clone(),
        title: render(
            settings
                .title
                .as_deref()
                .unwrap_or(if vars.group.is_empty() {
                    DEFAULT_TITLE
                } else {
                    DEFAULT_GROUP_TITLE
                }),
            vars,
        ),
        body: render(settings.body.as_deref().unwrap_or(DEFAULT_BODY), vars),
        labels: settings
            .labels
            .iter()
            .flatten()
            .map(|l| render(l, vars))
            .filter(|l| !l.is_empty())
            .collect(),
        auto_merge: settings.auto_merge.unwrap_or(false),
    }
}

/// The action of an [`EnsureAction`] (pure): a pushed branch under an unchanged pull request
/// is an update of it.
pub fn action_of(ensured: EnsureAction, pushed: bool) -> PrAction {
    match ensured {
        EnsureAction::Created => PrAction::Opened,
        EnsureAction::Updated => PrAction::Updated,
        EnsureAction::Unchanged if pushed => PrAction::Updated,
        EnsureAction::Unchanged => PrAction::Unchanged,
    }
}

/// Every open pull request a status records (pure): the watch's and its members'.
pub fn open_records(status: Option<&imagewatch_crd::ImageWatchStatus>) -> Vec<&WatchPullRequest> {
    let Some(status) = status else {
        return Vec::new();
    };
    status
        .pull_request
        .iter()
        .chain(
            status
                .members
                .iter()
                .filter_map(|m| m.pull_request.as_ref()),
        )
        .filter(|p| p.state == crate::forge::PullRequestState::Open)
        .collect()
}

/// Whether a watch with this record needs [`FINALIZER`] (pure).
pub fn wants_finalizer(record: Option<&WatchPullRequest>) -> bool {
    record.is_some_and(|r| r.state == crate::forge::PullRequestState::Open)
}

/// Whether the watch carries [`FINALIZER`].
pub fn has_finalizer(watch: &ImageWatch) -> bool {
    watch.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds [`FINALIZER`] (before a pull request can exist, so that a deletion never misses it).
pub async fn add_finalizer(client: &Client, watch: &ImageWatch) -> Result<(), kube::Error> {
    patch_finalizer_of(
        client,
        &ApiResource::erase::<ImageWatch>(&()),
        watch.meta(),
        FINALIZER,
        FinalizerChange::Add,
    )
    .await
}

/// Removes [`FINALIZER`].
pub async fn remove_finalizer(client: &Client, watch: &ImageWatch) -> Result<(), kube::Error> {
    patch_finalizer_of(
        client,
        &ApiResource::erase::<ImageWatch>(&()),
        watch.meta(),
        FINALIZER,
        FinalizerChange::Remove,
    )
    .await
}

/// The forge client of a watch.
pub async fn client(
    watch: &ImageWatch,
    settings: &GitPullRequest,
    git_url: &str,
    secrets: &impl secrets::SecretAccess,
    metrics: &Arc<crate::telemetry::Metrics>,
    http: &reqwest::Client,
) -> Result<ForgeClient, ReconcileError> {
    let token = match &settings.secret_ref {
        Some(secret) => {
            let namespace = watch.namespace().unwrap_or_default();
            Some(secrets::forge_token(secrets, &namespace, &secret.name).await?)
        }
        None => None,
    };
    Ok(ForgeClient::new(
        settings.provider,
        settings.api_url.as_deref(),
        settings.repository.as_deref(),
        git_url,
        token,
        http.clone(),
    )?
    .with_metrics(metrics.clone()))
}

/// `branch` already holds the tag: close the open pull request of `head`, if any.
///
/// `recorded` is the number of the pull request the status still records as open. When none
/// is open any more, the forge is asked how that one ended (closed by us in a reconcile
/// whose status was not written yet, closed by a person, or merged), so the status says
/// what happened rather than guessing.
pub async fn close_open(
    forge: &ForgeClient,
    locks: &HeadLocks,
    head: &str,
    base: &str,
    tag: &str,
    recorded: Option<i64>,
) -> Result<Delivered, ReconcileError> {
    let _serial = locks.lock(forge, head).await;
    let open = forge.find_open(head, base).await?;
    if let Some(pr) = &open {
        forge.close(pr).await?;
    }
    let ended = match (&open, recorded) {
        (None, Some(number)) => match forge.get(number).await {
            Ok(pr) if pr.state != crate::forge::PullRequestState::Open => Some(pr),
            Ok(_) => None,
            // Deleted (or unreadable): the status keeps its own account.
            Err(e) => {
                tracing::debug!(number, error = %e, "cannot read the recorded pull request");
                None
            }
        },
        _ => None,
    };
    Ok(Delivered {
        action: if open.is_some() {
            PrAction::Closed
        } else {
            PrAction::NotNeeded
        },
        pull_request: open.or(ended),
        tag: tag.to_string(),
        branch: head.to_string(),
        warnings: Vec::new(),
        commit: None,
    })
}

/// The push branch holds the edit: one open pull request for it.
pub async fn propose(
    forge: &ForgeClient,
    locks: &HeadLocks,
    new: &NewPullRequest,
    tag: &str,
    pushed: bool,
) -> Result<Delivered, ReconcileError> {
    let _serial = locks.lock(forge, &new.head).await;
    let ensured = forge.ensure(new).await?;
    #[cfg(feature = "test-hooks")]
    if std::env::var_os(CRASH_AFTER_PULL_REQUEST).is_some() {
        tracing::error!(
            pr = ensured.pull_request.number,
            "test hook {CRASH_AFTER_PULL_REQUEST}: aborting the process before the status records the pull request"
        );
        std::process::abort();
    }
    Ok(Delivered {
        action: action_of(ensured.action, pushed),
        pull_request: Some(ensured.pull_request),
        tag: tag.to_string(),
        branch: new.head.clone(),
        warnings: ensured.warnings,
        commit: None,
    })
}

/// What proposing a watch's writes uses: the forge token's Secret, the client the finalizer
/// is added with, the metrics the forge and the pull request steps are counted in, the
/// forge's HTTP client, and one lock per pull request head, shared by every reconcile.
#[derive(Clone, Copy)]
pub(super) struct ProposeContext<'a> {
    pub(super) secrets: SecretReader<'a>,
    pub(super) client: &'a kube::Client,
    pub(super) metrics: &'a Arc<crate::telemetry::Metrics>,
    pub(super) forge_http: &'a reqwest::Client,
    pub(super) pull_request_locks: &'a HeadLocks,
}

impl<'a> ProposeContext<'a> {
    /// The proposal's view of the shared services.
    pub(super) fn of(ctx: &'a Context) -> Self {
        ProposeContext {
            secrets: SecretReader::of(ctx),
            client: &ctx.client,
            metrics: &ctx.metrics,
            forge_http: &ctx.forge_http,
            pull_request_locks: &ctx.pull_request_locks,
        }
    }
}

/// What closing a deleted watch's pull requests uses: the forge token's Secret, the client
/// the finalizer is removed with, the metrics and the Event recorder.
#[derive(Clone, Copy)]
pub(super) struct FinalizeContext<'a> {
    pub(super) secrets: SecretReader<'a>,
    pub(super) client: &'a Client,
    pub(super) metrics: &'a Arc<crate::telemetry::Metrics>,
    pub(super) recorder: &'a kube::runtime::events::Recorder,
    pub(super) forge_http: &'a reqwest::Client,
}

impl<'a> FinalizeContext<'a> {
    /// The deletion step's view of the shared services.
    pub(super) fn of(ctx: &'a Context) -> Self {
        FinalizeContext {
            secrets: SecretReader::of(ctx),
            client: &ctx.client,
            metrics: &ctx.metrics,
            recorder: &ctx.recorder,
            forge_http: &ctx.forge_http,
        }
    }
}

/// A deleted watch's recorded pull request: closed. `Ok(false)` when it was no longer open.
pub(super) async fn close_on_delete(
    watch: &ImageWatch,
    recorded: &WatchPullRequest,
    ctx: FinalizeContext<'_>,
) -> Result<bool, ReconcileError> {
    let Some(git) = watch.spec.git.as_ref() else {
        return Ok(false);
    };
    let Some(settings) = git.pull_request.as_ref() else {
        return Ok(false);
    };
    if watch.spec.group.as_deref().is_some_and(|g| !g.is_empty()) {
        // The group's pull request belongs to its other members too.
        return Ok(false);
    }
    let forge = client(
        watch,
        settings,
        &git.url,
        &ctx.secrets,
        ctx.metrics,
        ctx.forge_http,
    )
    .await?;
    let pr = PullRequest {
        number: recorded.number,
        url: recorded.url.clone(),
        title: String::new(),
        body: String::new(),
        head: recorded.branch.clone(),
        base: git.branch().to_string(),
        head_sha: None,
        labels: Vec::new(),
        auto_merge: false,
        node_id: None,
        state: Default::default(),
    };
    match forge.close(&pr).await {
        Ok(()) => Ok(true),
        Err(ForgeError::NotFound { .. } | ForgeError::Rejected { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// A deleted watch with [`FINALIZER`]: close its recorded open pull request, then
/// let it go. A forge that fails is retried with backoff for up to ten minutes after the
/// deletion; then the pull request is left open (said in an Event).
pub(super) async fn finalize(
    watch: &ImageWatch,
    ctx: FinalizeContext<'_>,
) -> Result<Action, ReconcileError> {
    if !has_finalizer(watch) {
        return Ok(Action::await_change());
    }
    let recorded: Vec<imagewatch_crd::WatchPullRequest> = open_records(watch.status.as_ref())
        .into_iter()
        .cloned()
        .collect();
    if recorded.is_empty() {
        remove_finalizer(ctx.client, watch).await?;
        return Ok(Action::await_change());
    }
    let pr = recorded
        .iter()
        .map(|r| format!("#{} {}", r.number, r.url))
        .collect::<Vec<_>>()
        .join(", ");
    let mut result = Ok(false);
    for record in &recorded {
        match close_on_delete(watch, record, ctx).await {
            Ok(closed) => {
                if let Ok(any) = &mut result {
                    *any |= closed;
                }
            }
            Err(e) => result = Err(e),
        }
    }
    let since = watch
        .metadata
        .deletion_timestamp
        .as_ref()
        .and_then(|t| jiff::Timestamp::now().duration_since(t.0).try_into().ok())
        .unwrap_or(Duration::ZERO);
    let give_up = since >= Duration::from_secs(600);
    let (type_, reason, note, label) = match &result {
        Ok(true) => (
            EventType::Normal,
            "PullRequestClosed",
            format!("closed {pr}: the ImageWatch was deleted"),
            "closed_on_delete",
        ),
        Ok(false) => (
            EventType::Normal,
            "PullRequestClosed",
            format!("{pr} was already closed, merged or gone: the ImageWatch was deleted"),
            "closed_on_delete",
        ),
        Err(e) if give_up => (
            EventType::Warning,
            "PullRequestLeftOpen",
            format!("gave up closing {pr} of the deleted ImageWatch; it is left open: {e}"),
            "failed",
        ),
        Err(e) => (
            EventType::Warning,
            "PullRequestCloseFailed",
            format!("cannot close {pr} of the deleted ImageWatch, retrying: {e}"),
            "failed",
        ),
    };
    ctx.metrics
        .watch_pull_requests
        .get_or_create(&crate::telemetry::WatchPullRequestLabels {
            action: label.to_string(),
        })
        .inc();
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Delete".into(),
        secondary: None,
    };
    if let Err(e) = ctx
        .recorder
        .publish(&event, &crate::controllers::object_ref(watch))
        .await
    {
        tracing::debug!(error = %e, "cannot publish Event");
    }
    match result {
        Err(e) if !give_up => {
            tracing::warn!(watch = %watch.name_any(), error = %e, "closing the pull request of a deleted watch failed");
            Ok(Action::requeue(Duration::from_secs(5)))
        }
        _ => {
            remove_finalizer(ctx.client, watch).await?;
            Ok(Action::await_change())
        }
    }
}

/// `spec.git.pullRequest` of a watch of one repository, after its push branch was written:
/// when `branch` already holds the image, the open pull request is closed; otherwise one
/// pull request for the push branch is opened or updated. `members` are every write's
/// image and file (a group's members propose the same text). The result is what `branch`
/// holds (a proposal is not applied until it is merged; a PromotionPolicy reading this
/// watch waits for that), with the push branch's commit instants.
pub(super) async fn propose_watch(
    watch: &ImageWatch,
    (settings, forge_url): (&GitPullRequest, &str),
    (mine, image, tag): (&WriteRequest, String, String),
    (write, on_base): (WriteResult, WriteResult),
    members: Vec<(String, String)>,
    ctx: &ProposeContext<'_>,
) -> Result<(WriteResult, Delivered), ReconcileError> {
    let forge = client(
        watch,
        settings,
        forge_url,
        &ctx.secrets,
        ctx.metrics,
        ctx.forge_http,
    )
    .await?;
    let head = mine.push_branch.clone().unwrap_or_default();
    let mut vars = TextVars {
        group: watch.spec.group.clone().unwrap_or_default(),
        image,
        tag,
        watch: mine.watch.clone(),
        branch: mine.branch.clone(),
        file: write.file.clone(),
        before: on_base.current_before.clone(),
    };
    if members.len() > 1 {
        // Every member proposes the same text for the group's one pull request.
        vars = group_vars(vars, &members);
    }
    let step = PrStep {
        head: &head,
        wanted: on_base.changed_needed,
        vars,
        pushed: write.commit.is_some(),
    };
    let pushed = write.pushed;
    let delivered = pull_request_step(watch, settings, &forge, step, ctx).await?;
    Ok((
        WriteResult { pushed, ..on_base },
        Delivered {
            commit: on_base
                .changed_needed
                .then(|| write.holding_commit())
                .flatten(),
            ..delivered
        },
    ))
}

/// One pull request step, after its push branch was written.
struct PrStep<'a> {
    /// Head (push) branch.
    head: &'a str,
    /// Whether `branch` lacks the edit (a pull request is wanted).
    wanted: bool,
    /// The templates' values (`branch` is the base).
    vars: TextVars,
    /// Whether the push branch was just pushed.
    pushed: bool,
}

/// Closes the open pull request of `step.head` when `branch` holds the edit, else opens or
/// updates it (adding [`FINALIZER`] first); counted and logged.
async fn pull_request_step(
    watch: &ImageWatch,
    settings: &GitPullRequest,
    forge: &ForgeClient,
    step: PrStep<'_>,
    ctx: &ProposeContext<'_>,
) -> Result<Delivered, ReconcileError> {
    let result = if !step.wanted {
        let recorded = watch
            .status
            .as_ref()
            .and_then(|s| s.pull_request.as_ref())
            .filter(|p| p.state == crate::forge::PullRequestState::Open && p.branch == step.head)
            .map(|p| p.number);
        close_open(
            forge,
            ctx.pull_request_locks,
            step.head,
            &step.vars.branch,
            &step.vars.tag,
            recorded,
        )
        .await
    } else {
        if !has_finalizer(watch) {
            add_finalizer(ctx.client, watch).await?;
        }
        let new = proposal(settings, step.head, &step.vars);
        propose(
            forge,
            ctx.pull_request_locks,
            &new,
            &step.vars.tag,
            step.pushed,
        )
        .await
    };
    ctx.metrics
        .watch_pull_requests
        .get_or_create(&crate::telemetry::WatchPullRequestLabels {
            action: match &result {
                Ok(d) => d.action.label().to_string(),
                Err(_) => "failed".to_string(),
            },
        })
        .inc();
    for warning in result.iter().flat_map(|d| &d.warnings) {
        tracing::warn!(watch = %watch.name_any(), %warning, "pull request");
    }
    result
}

/// What proposing did with one pattern member's write.
pub(super) enum MemberProposal {
    /// Its push branch was not written: nothing proposed.
    Untouched,
    /// What `branch` holds, and its own pull request (per member).
    Proposed(Box<(WriteResult, Option<Delivered>)>),
    /// Reading `branch`, or its pull request, failed.
    Failed(ReconcileError),
}

/// `spec.git.pullRequest` of a pattern watch, after its members' push branches were written
/// (`pushed`, `None` where that failed) and `branch` was read for each (`bases`): one pull
/// request per member (`perMember`, default) or one for all. Each member's result becomes
/// what `branch` holds, as for a watch of one repository.
#[allow(clippy::too_many_arguments)]
pub(super) async fn propose_members(
    watch: &ImageWatch,
    settings: &GitPullRequest,
    forge_url: &str,
    per_member: bool,
    pushed: Vec<Option<WriteResult>>,
    bases: Vec<Result<WriteResult, crate::writer::WriteError>>,
    heads: &[String],
    ctx: &ProposeContext<'_>,
) -> Result<(Vec<MemberProposal>, Option<Delivered>), ReconcileError> {
    let forge = client(
        watch,
        settings,
        forge_url,
        &ctx.secrets,
        ctx.metrics,
        ctx.forge_http,
    )
    .await?;
    let watch_name = format!(
        "{}/{}",
        watch.namespace().unwrap_or_default(),
        watch.name_any()
    );
    let mut outcomes: Vec<MemberProposal> = Vec::with_capacity(pushed.len());
    // (member index, push branch, write on the push branch, what `branch` holds).
    let mut written = Vec::new();
    for (((i, head), write), base) in heads.iter().enumerate().zip(pushed).zip(bases) {
        outcomes.push(MemberProposal::Untouched);
        let Some(write) = write else {
            continue;
        };
        match base {
            Ok(base) => written.push((i, head.clone(), write, base)),
            Err(e) => outcomes[i] = MemberProposal::Failed(e.into()),
        }
    }
    let vars_of = |write: &WriteResult, base: &WriteResult| TextVars {
        image: tag_less(&base.desired),
        tag: tag_of(&base.desired),
        watch: watch_name.clone(),
        branch: base_branch(watch),
        file: write.file.clone(),
        before: base.current_before.clone(),
        group: String::new(),
    };
    if per_member {
        let steps = written.iter().map(|(_, head, write, base)| {
            let step = PrStep {
                head,
                wanted: base.changed_needed,
                vars: vars_of(write, base),
                pushed: write.commit.is_some(),
            };
            pull_request_step(watch, settings, &forge, step, ctx)
        });
        let delivered = futures::future::join_all(steps).await;
        for ((i, _, _, base), d) in written.into_iter().zip(delivered) {
            outcomes[i] = match d {
                Ok(d) => MemberProposal::Proposed(Box::new((base, Some(d)))),
                Err(e) => MemberProposal::Failed(e),
            };
        }
        return Ok((outcomes, None));
    }
    let Some((_, head, first_write, first_base)) = written.first() else {
        return Ok((outcomes, None));
    };
    let members: Vec<(String, String)> = written
        .iter()
        .map(|(_, _, w, b)| (b.desired.clone(), w.file.clone()))
        .collect();
    let mut tags: Vec<String> = written
        .iter()
        .map(|(_, _, _, b)| tag_of(&b.desired))
        .collect();
    tags.sort();
    tags.dedup();
    let mut vars = group_vars(
        TextVars {
            group: watch.name_any(),
            ..vars_of(first_write, first_base)
        },
        &members,
    );
    vars.tag = tags.join(", ");
    let step = PrStep {
        head,
        wanted: written.iter().any(|(_, _, _, b)| b.changed_needed),
        vars,
        pushed: written.iter().any(|(_, _, w, _)| w.commit.is_some()),
    };
    let delivered = pull_request_step(watch, settings, &forge, step, ctx).await?;
    for (i, _, _, base) in written {
        outcomes[i] = MemberProposal::Proposed(Box::new((base, None)));
    }
    Ok((outcomes, Some(delivered)))
}

/// The branch of `spec.git` (`main` when unset).
fn base_branch(watch: &ImageWatch) -> String {
    watch
        .spec
        .git
        .as_ref()
        .map_or("main", |g| g.branch())
        .to_string()
}

/// An image reference without its tag and digest.
fn tag_less(image: &str) -> String {
    let image = image.split('@').next().unwrap_or(image);
    match image.rfind(':') {
        Some(i) if !image[i..].contains('/') => image[..i].to_string(),
        _ => image.to_string(),
    }
}

#[cfg(test)]
mod tests;
