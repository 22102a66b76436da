//! `spec.git.pullRequest` of an ImageWatch: the edit goes to the push branch and one pull
//! request from it into `branch` is opened and kept current.
//!
//! Each reconcile first asks the writer (a dry run on `branch`) whether `branch` already
//! holds the chosen image. When it does, an open pull request of the push branch is closed
//! (merged, or a person wrote the tag) and nothing is pushed. Otherwise the edit is written to
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forge::{ForgeProvider, PullRequestState};

    fn settings() -> GitPullRequest {
        GitPullRequest {
            provider: ForgeProvider::Gitea,
            api_url: None,
            secret_ref: None,
            repository: None,
            title: None,
            body: None,
            labels: Some(vec!["image-update".into(), "tag/{{tag}}".into(), "".into()]),
            auto_merge: Some(true),
            per_member: None,
        }
    }

    fn vars() -> TextVars {
        TextVars {
            image: "registry.test/team/api".into(),
            tag: "v1.2.4".into(),
            watch: "team/api".into(),
            branch: "main".into(),
            file: "apps/api/deployment.yaml".into(),
            before: "registry.test/team/api:v1.2.3".into(),
            group: String::new(),
        }
    }

    #[test]
    fn templates_name_the_change() {
        let p = proposal(&settings(), "imagewatch/team-api", &vars());
        assert_eq!(p.title, "Update registry.test/team/api to v1.2.4");
        assert!(
            p.body
                .contains("`main` holds `registry.test/team/api:v1.2.3`")
        );
        assert!(p.body.contains("apps/api/deployment.yaml"));
        assert_eq!(p.labels, ["image-update", "tag/v1.2.4"]);
        assert_eq!(p.head, "imagewatch/team-api");
        assert_eq!(p.base, "main");
        assert!(p.auto_merge);
        let mut own = settings();
        own.title = Some("chore({{watch}}): {{tag}} {{unknown}}".into());
        assert_eq!(
            proposal(&own, "h", &vars()).title,
            "chore(team/api): v1.2.4 {{unknown}}"
        );
        assert_eq!(default_push_branch("team", "api"), "imagewatch/team-api");
        assert_eq!(
            member_push_branch("imagewatch/team-all", "hoge/billing/api/"),
            "imagewatch/team-all-hoge-billing-api"
        );
        assert_eq!(
            group_push_branch("team", "release"),
            "imagewatch/team-group-release"
        );
        let grouped = TextVars {
            group: "release".into(),
            ..vars()
        };
        assert_eq!(
            proposal(&settings(), "h", &grouped).title,
            "Update group release to v1.2.4"
        );
    }

    #[test]
    fn a_group_proposes_the_same_text_from_every_member() {
        let members = |first: usize| {
            let mut m = vec![
                (
                    "registry.test:5000/team/api:v2".to_string(),
                    "apps/api.yaml".to_string(),
                ),
                (
                    "registry.test:5000/team/worker@sha256:ab".to_string(),
                    "apps/worker.yaml".to_string(),
                ),
            ];
            m.rotate_left(first);
            m
        };
        let base = TextVars {
            group: "release".into(),
            ..vars()
        };
        let a = group_vars(base.clone(), &members(0));
        let b = group_vars(
            TextVars {
                watch: "team/worker".into(),
                image: "registry.test:5000/team/worker".into(),
                ..base
            },
            &members(1),
        );
        assert_eq!(a, b);
        assert_eq!(
            a.image,
            "registry.test:5000/team/api, registry.test:5000/team/worker"
        );
        assert_eq!(a.file, "apps/api.yaml, apps/worker.yaml");
        assert_eq!(a.watch, "team/group release");
    }

    fn pr(number: i64, state: PullRequestState) -> PullRequest {
        PullRequest {
            number,
            url: format!("http://gitea.test/o/r/pulls/{number}"),
            title: String::new(),
            body: String::new(),
            head: "imagewatch/team-api".into(),
            base: "main".into(),
            head_sha: None,
            labels: vec![],
            auto_merge: false,
            node_id: None,
            state,
        }
    }

    #[test]
    fn the_status_records_the_pull_request_and_its_end() {
        let opened = Delivered {
            pull_request: Some(pr(4, PullRequestState::Open)),
            action: PrAction::Opened,
            tag: "v2".into(),
            branch: "imagewatch/team-api".into(),
            warnings: vec![],
            commit: None,
        };
        let record = status_of(&opened, None).unwrap();
        assert_eq!(
            (record.number, record.state),
            (4, crate::forge::PullRequestState::Open)
        );
        assert_eq!(record.tag.as_deref(), Some("v2"));
        assert!(wants_finalizer(Some(&record)));

        let closed = Delivered {
            action: PrAction::Closed,
            ..opened.clone()
        };
        let after = status_of(&closed, Some(&record)).unwrap();
        assert_eq!(after.state, crate::forge::PullRequestState::Closed);
        assert!(!wants_finalizer(Some(&after)));

        // Nothing open any more, and the forge says how the recorded one ended (closed by
        // an earlier reconcile whose status was overwritten, or by a person).
        let ended = Delivered {
            pull_request: Some(pr(4, PullRequestState::Closed)),
            action: PrAction::NotNeeded,
            ..opened.clone()
        };
        let after = status_of(&ended, Some(&record)).unwrap();
        assert_eq!(
            (after.number, after.state),
            (4, crate::forge::PullRequestState::Closed)
        );
        assert!(!wants_finalizer(Some(&after)));

        let gone = Delivered {
            pull_request: None,
            action: PrAction::NotNeeded,
            ..opened
        };
        assert_eq!(
            status_of(&gone, Some(&record)).unwrap().state,
            crate::forge::PullRequestState::Merged
        );
        assert_eq!(status_of(&gone, None), None);
        assert!(!wants_finalizer(None));
    }

    #[test]
    fn a_pushed_branch_is_an_update() {
        assert_eq!(action_of(EnsureAction::Created, true), PrAction::Opened);
        assert_eq!(action_of(EnsureAction::Unchanged, true), PrAction::Updated);
        assert_eq!(
            action_of(EnsureAction::Unchanged, false),
            PrAction::Unchanged
        );
        assert_eq!(PrAction::Closed.event_reason(), Some("PullRequestClosed"));
        assert_eq!(PrAction::Unchanged.event_reason(), None);
    }
}
