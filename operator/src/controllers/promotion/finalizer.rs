//! Finalizer step of a PromotionPolicy: the finalizer held while a pull request is recorded,
//! and the cleanup when a policy is deleted (its pull request closed on the forge, retried
//! with backoff, then given up with a Warning Event).

use super::deliver::{DeliverContext, forge_client};
#[cfg(test)]
use super::fixtures::{outcome, policy, pr, t};
use super::read::{ReadContext, list_source_watches, target_repository};
use super::shared::Shared;
use crate::error::{InternalError, PromotionError};
use imagewatch_engine::status::truncate;
use std::{collections::HashMap, time::Duration};

/// Finalizer held while the policy has a pull request open: a deleted policy closes it first.
pub const FINALIZER: &str = "imagewatch.dev/close-pull-request";

/// Longest wait between two attempts to close a deleted policy's pull request.
const CLOSE_RETRY_MAX: Duration = Duration::from_secs(60);

use imagewatch_crd::{PromotionPolicy, PromotionPolicyStatus, promotion::PullRequestRef};
use kube::{
    Client, Resource, ResourceExt,
    api::{ApiResource, ObjectMeta},
    core::DeserializeGuard,
    runtime::{
        controller::Action,
        events::{Event, EventType},
        reflector::ObjectRef,
    },
};
use tokio::sync::Mutex;

use crate::{
    forge::{ForgeError, PullRequest},
    telemetry::PromotionLabels,
};

#[cfg(test)]
use crate::promotion::GateReport;

pub use crate::cluster::finalizers::{FinalizerChange, finalizer_patch_of, patch_finalizer_of};

/// What cleaning up after a deleted policy uses: the client its finalizer is removed with,
/// what reading the target repository and building the forge client read, the policies'
/// failure counts and close timeout, the metrics and the Event recorder.
#[derive(Clone, Copy)]
pub(super) struct FinalizerContext<'a> {
    pub(super) client: &'a Client,
    pub(super) read: ReadContext<'a>,
    pub(super) deliver: DeliverContext<'a>,
    pub(super) failures: &'a Mutex<HashMap<ObjectRef<DeserializeGuard<PromotionPolicy>>, u32>>,
    pub(super) close_timeout: Duration,
    pub(super) metrics: &'a crate::telemetry::Metrics,
    pub(super) recorder: &'a kube::runtime::events::Recorder,
}

impl<'a> FinalizerContext<'a> {
    /// The finalizer step's view of what the policy reconciles share.
    pub(super) fn of(shared: &'a Shared) -> Self {
        FinalizerContext {
            client: &shared.ctx.client,
            read: ReadContext::of(shared),
            deliver: DeliverContext::of(shared),
            failures: &shared.failures,
            close_timeout: shared.close_timeout,
            metrics: &shared.ctx.metrics,
            recorder: &shared.ctx.recorder,
        }
    }
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

/// Applies [`finalizer_patch`] to the policy `meta` names. Through a dynamic API, so that an
/// object which does not match the schema can still lose its finalizer. A failed test (the
/// finalizers changed since `meta` was read) is answered by reading the object again and
/// patching once more; an object already gone is done.
pub(super) async fn patch_finalizer(
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

pub(super) async fn add_finalizer(client: &Client, meta: &ObjectMeta) -> Result<(), kube::Error> {
    patch_finalizer(client, meta, FinalizerChange::Add).await
}

pub(super) async fn remove_finalizer(
    client: &Client,
    meta: &ObjectMeta,
) -> Result<(), kube::Error> {
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
        // 2 s doubling: the `attempts`-th wait (1-based, the tenth at most), as of backon's
        // schedule; capped below.
        _ => {
            use backon::{BackoffBuilder as _, ExponentialBuilder};
            ExponentialBuilder::new()
                .with_min_delay(Duration::from_secs(2))
                .with_factor(2.0)
                .without_max_delay()
                .without_max_times()
                .build()
                .nth(attempts.clamp(1, 10) as usize - 1)
                .unwrap_or(CLOSE_RETRY_MAX)
        }
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
pub(super) async fn close_recorded(
    policy: &PromotionPolicy,
    recorded: &PullRequestRef,
    ctx: &FinalizerContext<'_>,
) -> Result<bool, PromotionError> {
    // The repository URL only names the forge's repository when `pullRequest.repository` or
    // `pullRequest.apiUrl` are not set; the source watches may be gone already.
    let git_url = if policy.spec.to.git.is_some() {
        target_repository(policy, &[], &ctx.read).await.map(|r| r.0)
    } else {
        match list_source_watches(policy, ctx.client).await {
            Ok(watches) => target_repository(policy, &watches, &ctx.read)
                .await
                .map(|r| r.0),
            Err(e) => Err(e),
        }
    };
    let forge =
        match forge_client(policy, git_url.as_deref().unwrap_or_default(), &ctx.deliver).await {
            Ok(forge) => forge,
            Err(PromotionError::Forge(ForgeError::InvalidConfig(_))) if git_url.is_err() => {
                return Err(git_url.err().unwrap_or_else(|| {
                    PromotionError::Internal(InternalError::UnknownRepository)
                }));
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
pub(super) async fn finalize(
    policy: &PromotionPolicy,
    key: ObjectRef<DeserializeGuard<PromotionPolicy>>,
    ctx: &FinalizerContext<'_>,
) -> Result<Action, PromotionError> {
    if !has_finalizer(policy.meta()) {
        return Ok(Action::await_change());
    }
    let client = ctx.client;
    let Some(recorded) = policy.status.as_ref().and_then(|s| s.pull_request.clone()) else {
        remove_finalizer(client, policy.meta()).await?;
        ctx.failures.lock().await.remove(&key);
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
    let result = close_recorded(policy, &recorded, ctx).await;
    let attempts = match &result {
        Ok(_) => 0,
        Err(_) => {
            let mut failures = ctx.failures.lock().await;
            let n = failures.entry(key.clone()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        }
    };
    let step = close_step(
        result.as_ref().err(),
        since_deletion,
        ctx.close_timeout,
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
                ctx.close_timeout.as_secs()
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
    ctx.metrics
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
    if let Err(e) = ctx.recorder.publish(&event, &policy.object_ref(&())).await {
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
            ctx.failures.lock().await.remove(&key);
            Ok(Action::await_change())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::promotion::build_status;
    use crate::error::{CredentialsError, NamedSecret, SpecError};
    use crate::forge::EnsureAction;
    use crate::git::GitError;
    use imagewatch_crd::promotion::PromotionMode;
    use imagewatch_engine::status::promotion::{Delivery, Outcome};
    use serde_json::json;

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
        let secret = PromotionError::CredentialsNotFound(CredentialsError::NotFound {
            secret: NamedSecret::new("forge", "t", "forge-token"),
        });
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
        let spec = PromotionError::InvalidSpec(SpecError::Required {
            field: "spec.pullRequest",
            when: None,
        });
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
