//! The PromotionPolicy controller: what a source stage runs is proposed to a target stage,
//! behind gates, by pull request (one per policy, updated in place) or by a direct commit.
//!
//! This file holds the controller runner and the top-level reconcile, which calls the steps in
//! order; each step has its file: `read/` (validate, dereference, read Git and Argo CD, and
//! in `read/gates.rs` the gate facts of the candidate), `decide.rs` (the candidate, pure),
//! `held.rs` (images not proposed again), `deliver.rs` (commit or pull request through the git
//! writer, and every forge call), `status.rs` (status and Events) and `finalizer.rs` (cleanup
//! on delete). Each step takes a context of its own, borrowed from what the reconciles share
//! (`ReadContext`, `GateContext`, `DeliverContext`, `FinalizerContext`; the status step
//! takes the Event recorder and the client alone). No Git is read here but through the git
//! crate's `Repo` on the writer's clone.
//!
//! One reconcile of one policy, top to bottom:
//!
//! 1. **validate** (pure): durations, exactly one source, pull request settings, pin tags;
//! 2. **dereference** (I/O): the selected ImageWatches and their `status.applied`, the Git
//!    location and credentials, the Argo CD Application of the `application` gate;
//! 3. **read Git** (blocking, on the git writer's clone): fetch the target branch (and the
//!    source branch and the pull request branch), read `to.path` (and `from.path`), check
//!    that the Application's revision holds the source commits;
//! 4. **decide** (pure, `crate::promotion`): candidate, diff against the target, the images
//!    held because someone else changed them in the target (`held.rs`: `spec.onGitChange`,
//!    reading the history of a place only when Git differs from both the candidate and the
//!    last promotion); then the read step's last reads, the gate facts of that candidate
//!    (`read/gates.rs`: images in the target registry, signatures, with the soak,
//!    Application and approval facts read before), and the pure evaluation of every gate;
//! 5. **write**: nothing when the target already matches (an open pull request is then closed);
//!    otherwise, once every gate passes, a commit through the git writer on `to.branch` (mode
//!    `Commit`, re-planned and retried when the push is rejected) or on
//!    `imagewatch/promote-<ns>-<name>`, the only branch the operator force-pushes, and only
//!    while it holds nothing but the operator's own commit, plus one pull request found,
//!    updated or created on the forge;
//! 6. **status** (server-side apply, field manager `imagewatch`): source, candidate, gates,
//!    pull request, the last 10 promotions, the held images, conditions `Ready`,
//!    `GatesPassing`, `PullRequestOpen` (and `Held` once an image was held); Events for each
//!    promotion and each new hold; metrics.
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

use crate::error::Classify as _;
use crate::error::{InternalError, SourceError, SpecError, TargetError};
use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use imagewatch_crd::{
    ImageWatch, PromotionPolicy,
    conditions::PULL_REQUEST_OPEN,
    promotion::{PromotionMode, SoakSince},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    Api, Resource, ResourceExt,
    core::DeserializeGuard,
    runtime::{Controller, WatchStreamExt as _, controller::Action, reflector::ObjectRef, watcher},
};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::controllers::Context;
use crate::controllers::parse_duration;
use crate::controllers::recheck;
use crate::{
    forge::EnsureAction,
    promotion::{
        self,
        render::{self, TextContext},
    },
    telemetry::PromotionLabels,
};

mod decide;
mod deliver;
mod finalizer;
#[cfg(test)]
mod fixtures;
mod held;
mod read;
mod shared;
mod soak;
mod status;

use self::decide::{Decision, candidate_error, first_tag_pending};
use self::deliver::{
    DeliverContext, Planner, close_stale, commit_to_target, forge_client, propose,
    push_pull_request_branch,
};
use self::finalizer::{FinalizerContext, add_finalizer, finalize, remove_finalizer};
use self::read::gates::{GateContext, gate_facts};
use self::read::{
    ReadContext, list_source_watches, read_application, read_git, resolve_location, source_label,
};
use self::shared::Shared;
use self::soak::soak_from_history;
use self::status::{patch_status_if_changed, publish_events};
pub use finalizer::{
    CloseStep, FINALIZER, FinalizerChange, close_not_needed, close_step, finalizer_change,
    finalizer_patch, finalizer_patch_of, has_finalizer, patch_finalizer_of, wants_finalizer,
};
pub use read::validate;
pub use status::{build_status, event_for};

// What a reconcile did, and the status it leaves (pure): in the engine.
pub use imagewatch_engine::status::promotion::{Delivery, HISTORY, Outcome};

/// Settings of the PromotionPolicy controller.
#[derive(Debug, Clone)]
pub struct PromotionOptions {
    /// Only these namespaces (empty: all).
    pub namespaces: Vec<String>,
    /// Policy reconciles running at once.
    pub concurrency: u16,
    /// After a policy's deletion, how long closing its pull request is retried before the
    /// finalizer is removed anyway.
    pub close_timeout: Duration,
}

impl PromotionOptions {
    /// From the PromotionPolicy controller's part of the configuration.
    pub fn from_config(config: &crate::config::PromotionConfig) -> Self {
        Self {
            namespaces: config.namespaces.clone(),
            concurrency: config.concurrency.max(1),
            close_timeout: config.pull_request_close_timeout,
        }
    }
}

/// Bounded state: every [`SWEEP_EVERY`](crate::controllers::sweep::SWEEP_EVERY), the
/// failure counters forget the policies the cache no longer holds (deleted while failing).
async fn sweep_failures(
    store: kube::runtime::reflector::Store<DeserializeGuard<PromotionPolicy>>,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    use crate::controllers::sweep;
    if store.wait_until_ready().await.is_err() {
        return;
    }
    let mut tick = tokio::time::interval(sweep::SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let live: std::collections::HashSet<ObjectRef<DeserializeGuard<PromotionPolicy>>> = store
            .state()
            .iter()
            .map(|p| ObjectRef::from_obj(p.as_ref()))
            .collect();
        let (forgotten, left) = {
            let mut failures = shared.failures.lock().await;
            (sweep::forget_unlisted(&mut failures, &live), failures.len())
        };
        sweep::record(&shared.ctx.metrics, "promotion_failures", forgotten, left);
    }
}

/// The `controller` label of the PromotionPolicy controller's metrics.
const POLICY_CONTROLLER: &str = "promotionpolicy";

/// Readiness condition: the PromotionPolicy cache holds its first list.
pub const POLICY_CACHE: &str = "promotionpolicy-cache";

/// Runs the PromotionPolicy controller until `shutdown` is cancelled. Reconciles use the
/// ImageWatch controller's [`Context`] (Kubernetes client, registry clients, Event recorder,
/// metrics) and its git writer: they read through the writer's clones and commit through it.
///
/// `watches` are the ImageWatch changes of the ImageWatch controller's cache (one watch
/// serves both): a changed watch wakes the policies of its namespace.
pub async fn run(
    ctx: Arc<Context>,
    options: PromotionOptions,
    watches: impl futures::Stream<Item = Arc<DeserializeGuard<ImageWatch>>> + Send + 'static,
    shutdown: CancellationToken,
) {
    let client = ctx.client.clone();
    let metrics = ctx.metrics.clone();
    let shared = Arc::new(Shared {
        cache: ctx.writer.clones().clone(),
        ctx,
        failures: Mutex::default(),
        close_timeout: options.close_timeout,
    });
    let (reader, writer) = kube::runtime::reflector::store();
    let policies = kube::runtime::reflector(
        writer,
        crate::cluster::namespaces::watch::<DeserializeGuard<PromotionPolicy>>(
            client.clone(),
            &options.namespaces,
            watcher::Config::default().any_semantic(),
        ),
    )
    .inspect(crate::controllers::on_first_list({
        let metrics = metrics.clone();
        move || metrics.readiness.met(POLICY_CACHE)
    }))
    .applied_objects();
    let controller = Controller::for_stream(policies, reader).with_config(
        kube::runtime::controller::Config::default().concurrency(options.concurrency.max(1)),
    );
    let store = controller.store();
    tokio::spawn(sweep_failures(
        controller.store(),
        shared.clone(),
        shutdown.clone(),
    ));
    let token = shutdown.clone();
    // A freeze set or lifted: every policy is looked at again.
    let thaw_store = controller.store();
    let thaws =
        futures::stream::unfold(shared.ctx.freeze_changes.subscribe(), |mut rx| async move {
            rx.changed().await.ok().map(|_| ((), rx))
        })
        .flat_map(move |_| {
            futures::stream::iter(
                thaw_store
                    .state()
                    .into_iter()
                    .map(|p| ObjectRef::from_obj(p.as_ref()))
                    .collect::<Vec<_>>(),
            )
        });
    tracing::info!("PromotionPolicy controller started");
    controller
        .reconcile_on(thaws)
        .watches_shared_stream(watches, move |watch: Arc<DeserializeGuard<ImageWatch>>| {
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
                crate::controllers::timed(&metrics, POLICY_CONTROLLER, reconcile(policy, shared))
                    .await
            },
            error_policy,
            shared,
        )
        .for_each(|result| {
            if let Err(e) = result {
                crate::controllers::log_stream_error(&metrics, POLICY_CONTROLLER, &e);
            }
            futures::future::ready(())
        })
        .await;
    tracing::info!("PromotionPolicy controller stopped");
}

pub use crate::error::PromotionError;

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
            crate::cluster::invalid::report_invalid_object::<PromotionPolicy>(
                &shared.ctx.client,
                invalid,
            )
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
        return finalize(policy, key, &FinalizerContext::of(&shared)).await;
    }
    let mut finalizer_present = has_finalizer(policy.meta());
    let handled_before = policy
        .status
        .as_ref()
        .and_then(|s| s.last_handled_requested_at.as_deref());
    let recheck = recheck::pending(policy.annotations(), handled_before);
    let result = reconcile_policy(policy, &shared, &mut finalizer_present).await;
    let outcome_label = match &result {
        Ok(o) => match &o.delivery {
            Delivery::UpToDate { closed: Some(_) } => "pr_closed",
            // Nothing left to propose because someone else changed the target.
            Delivery::UpToDate { closed: None } if !o.candidate.held.is_empty() => "held",
            Delivery::UpToDate { closed: None } => "up_to_date",
            Delivery::Gated => "gated",
            Delivery::Suspended => "suspended",
            Delivery::Closed(c) if c.reason == imagewatch_crd::conditions::reason::FROZEN => {
                "frozen"
            }
            Delivery::Closed(_) => "outside_window",
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
        Err(e) => {
            e.count(&shared.ctx.metrics, POLICY_CONTROLLER);
            e.category()
        }
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
    let mut new_status = build_status(policy, &result, &now);
    new_status.last_handled_requested_at =
        recheck::handled_after(recheck.as_deref(), handled_before);
    publish_events(policy, &result, &new_status, &shared.ctx.recorder).await;
    if let Some(value) = &recheck {
        let found = new_status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| format!("Ready={} {}", c.status, c.reason))
            .unwrap_or_default();
        recheck::report(
            &shared.ctx.recorder,
            &shared.ctx.metrics,
            &policy.object_ref(&()),
            "PromotionPolicy",
            value,
            &found,
        )
        .await;
    }
    let change = finalizer_change(
        finalizer_present,
        wants_finalizer(&new_status),
        result.is_ok(),
    );
    let notify = notifications(policy, &mut new_status);
    let failing_due = notify.as_ref().and_then(|n| n.failing_due);
    patch_status_if_changed(policy, new_status, &shared.ctx.client).await?;
    if let Some(n) = notify {
        shared
            .ctx
            .notifier
            .send(&n.target, &n.destinations, n.outgoing);
    }
    match change {
        Some(FinalizerChange::Add) => add_finalizer(&shared.ctx.client, policy.meta()).await?,
        Some(FinalizerChange::Remove) => {
            remove_finalizer(&shared.ctx.client, policy.meta()).await?
        }
        None => {}
    }
    tracing::debug!(policy = %policy.name_any(), outcome = outcome_label, "reconciled promotion policy");
    let after = match result {
        Ok(outcome) => {
            shared.failures.lock().await.remove(&key);
            let opens_in = match &outcome.delivery {
                Delivery::Closed(closed) => closed.opens.and_then(|at| {
                    Duration::try_from(jiff::Timestamp::now().duration_until(at)).ok()
                }),
                _ => None,
            };
            let recheck = outcome
                .gates
                .as_ref()
                .and_then(|g| g.recheck_in)
                .into_iter()
                .chain(opens_in)
                .min()
                .map(|d| d + Duration::from_secs(1));
            match recheck {
                Some(d) if d < interval => d,
                _ => interval,
            }
        }
        Err(e) if e.is_stalled() => {
            shared.failures.lock().await.remove(&key);
            interval
        }
        Err(PromotionError::Forge(ref e)) if e.retry_after().is_some() => e
            .retry_after()
            .unwrap_or(interval)
            .max(Duration::from_secs(1)),
        Err(_) => {
            let mut failures = shared.failures.lock().await;
            let n = failures.entry(key).or_insert(0);
            *n = n.saturating_add(1);
            let secs = 2u64
                .saturating_pow((*n).min(10))
                .min(interval.as_secs().max(5));
            Duration::from_secs(secs)
        }
    };
    // A `Failing` notification falls due before then: look again at that time.
    Ok(Action::requeue(match failing_due {
        Some(due) => after.min(due + Duration::from_secs(1)),
        None => after,
    }))
}

/// The notifications of this reconcile (`spec.notify`); see the ImageWatch controller's.
fn notifications(
    policy: &PromotionPolicy,
    new_status: &mut imagewatch_crd::PromotionPolicyStatus,
) -> Option<crate::controllers::Notifications> {
    crate::controllers::Notifications::of(
        "PromotionPolicy",
        policy.object_ref(&()),
        policy.spec.notify.as_ref(),
        policy.spec.to.git.as_ref().map(|g| g.url.clone()),
        |subject, destinations, now| {
            imagewatch_engine::notify::promotion_notices(
                subject,
                destinations,
                policy.status.as_ref(),
                new_status,
                now,
            )
        },
    )
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
    let (read_step, decide_step, deliver_step) = (
        ReadContext::of(shared),
        GateContext::of(shared),
        DeliverContext::of(shared),
    );

    // 1. validate
    validate(spec).map_err(PromotionError::InvalidSpec)?;
    let windows = imagewatch_engine::windows::parse(spec.windows.as_deref().unwrap_or(&[]))
        .map_err(|e| PromotionError::InvalidSpec(SpecError::rule("spec.windows", e)))?;
    let mode = spec.mode();
    let source = source_label(spec);
    let to_path = spec.to.path.trim_matches('/').to_string();

    // 2. dereference
    let watches = list_source_watches(policy, client).await?;
    let watch_state = if spec.from.watch_selector.is_some() {
        if let Some(waiting) = first_tag_pending(&watches) {
            return Err(PromotionError::SourceWaiting { watches: waiting });
        }
        Some(promotion::sources_from_watches(&watches).map_err(|e| {
            PromotionError::SourceNotReady(SourceError::unusable("spec.from.watchSelector", e))
        })?)
    } else {
        None
    };
    let location = resolve_location(policy, &watches, &read_step).await?;
    let pr_branch = render::branch_name(&namespace, &name);
    let gates_spec = spec.gates.clone().unwrap_or_default();
    let app_facts = match &gates_spec.application {
        Some(app) => Some(read_application(client, &app.namespace, &app.name, &namespace).await?),
        None => None,
    };

    // 3. read Git
    let read = read_git(
        &read_step,
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
        gates_spec.soak_since == Some(SoakSince::FirstApplied),
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
            .map_err(|e| {
                PromotionError::SourceNotReady(SourceError::unusable("spec.from.path", e))
            })?
        }
        (None, None) => return Err(PromotionError::Internal(InternalError::NoSource)),
    };
    // gates.soakSince FirstApplied: the newest state of from.path first applied a soak ago.
    let (source_state, soaked) = match soak_from_history(spec, &gates_spec, &read)? {
        Some((state, soaked)) => (state, Some(soaked)),
        None => (source_state, None),
    };
    let decision = Decision {
        source: source_state.clone(),
        rewrite: spec.to.image_rewrite.clone().unwrap_or_default(),
        align: spec.align_tags.clone(),
        pin: spec.pin.clone(),
        to_path: to_path.clone(),
        held: Vec::new(),
    };
    let unheld = decision.candidate(&target).map_err(candidate_error)?;
    // 4b. holds (spec.onGitChange): the images someone else changed in the target since the
    // last promotion; history is read only for an image Git changed away from both.
    let held = held::find_holds(
        &read_step,
        &location,
        read.base_head,
        policy,
        &unheld,
        &target,
        &to_path,
    )
    .await?;
    let decision = Decision { held, ..decision };
    let candidate = unheld.with_holds(decision.held.clone());
    let mut outcome = Outcome {
        source,
        mode,
        path: to_path.clone(),
        branch: location.base.clone(),
        candidate: candidate.clone(),
        gates: None,
        delivery: Delivery::UpToDate { closed: None },
        warnings: Vec::new(),
        on_git_change: spec.on_git_change.unwrap_or_default(),
        name: name.clone(),
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
                let forge = forge_client(policy, &location.url, &deliver_step).await?;
                let closed = close_stale(&forge, &pr_branch, &location.base).await?;
                outcome.delivery = Delivery::UpToDate { closed };
            }
        }
        return Ok(outcome);
    }

    // The gate facts of the candidate (the last reads), then the gates judged (pure).
    let facts = gate_facts(
        policy,
        &candidate,
        &gates_spec,
        (&source_state, app_facts, read.containment.clone()),
        &decide_step,
    )
    .await?;
    let mut report = promotion::evaluate(&facts, jiff::Timestamp::now());
    // A newer source state soaks later: look again then, not only at the interval.
    if let Some(next) = soaked.as_ref().and_then(|s| s.next_in) {
        report.recheck_in = Some(report.recheck_in.map_or(next, |r| r.min(next)));
    }
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
    // spec.windows and admin freezes: the candidate waits, and is proposed at the opening.
    let freeze = shared.ctx.freezes.reason_for(&namespace);
    if let Some(closed) =
        imagewatch_engine::windows::closed(&windows, freeze.as_deref(), jiff::Timestamp::now())
    {
        outcome.delivery = Delivery::Closed(closed);
        return Ok(outcome);
    }

    // 5b. write.
    match mode {
        PromotionMode::Commit => {
            let commit = commit_to_target(&deliver_step, &location, decision, &policy_name).await?;
            outcome.delivery = match commit {
                Some(commit) => Delivery::Committed { commit },
                None => Delivery::UpToDate { closed: None },
            };
        }
        PromotionMode::PullRequest => {
            let edits = promotion::plan_target_edits(&read.target_files, &target, &candidate)
                .map_err(|e| {
                    PromotionError::TargetNotFound(TargetError::Edit {
                        field: "spec.to.path",
                        problem: e,
                    })
                })?;
            let message = render::commit_message(&candidate, &edits.changes, text_ctx);
            let planner = Planner {
                decision,
                policy: policy_name.clone(),
                source: source_text.clone(),
                branch: location.base.clone(),
            };
            let (commit, pushed) = push_pull_request_branch(
                &deliver_step,
                &location,
                &pr_branch,
                read.base_head,
                edits.files,
                message,
                planner,
            )
            .await?;
            let settings = spec.pull_request.clone().ok_or_else(|| {
                PromotionError::InvalidSpec(SpecError::Required {
                    field: "spec.pullRequest",
                    when: None,
                })
            })?;
            let forge = forge_client(policy, &location.url, &deliver_step).await?;
            if !*finalizer_present {
                // Before the pull request exists, so that a deletion never misses it.
                add_finalizer(client, policy.meta()).await?;
                *finalizer_present = true;
            }
            let ensured = propose(
                &forge,
                &settings,
                (&pr_branch, &location.base),
                (&candidate, &report),
                text_ctx,
            )
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
