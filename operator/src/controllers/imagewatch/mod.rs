//! The ImageWatch pipeline. One reconcile of one `ImageWatch`, top to bottom, one file per
//! step; each step hands the next one named value and never calls a step before it:
//!
//! 1. validate (`validate.rs`, pure): the image (one repository or a pattern), tag rules,
//!    interval, platforms and windows → [`validate::Validated`];
//! 2. dereference (`dereference.rs`, reads the cluster): the allow-list asks first, then the
//!    Git location (`spec.git` or the managing Argo CD Application), the registry
//!    credentials, the cosign keys of `spec.verify`, and the group's other members or the
//!    pattern's repositories → `Dereferenced<Single>` / `Dereferenced<Pattern>`;
//! 3. scan (`scan.rs`, reads the registry): each repository's tags through the shared
//!    index; the group's tag confirmed in its members; the digests, platforms and signature
//!    verdicts choosing a tag needs (the engine's `choice::plan`) → `Scanned<SingleScan>` /
//!    `Scanned<PatternScan>`;
//! 4. select (`select.rs`, pure, the engine's `choice::choose`): the tag, the image to write,
//!    the tags considered and `status.latest` → `Selection`;
//! 5. write (`write.rs`): one `deliver` hands every write intent to the git writer at once
//!    (a group's members and a pattern's in one batch), proposes them in pull requests
//!    (`pull_request.rs`), counts the push stages and follows the commit → `Delivery`;
//! 6. status (`status.rs`, built by the engine's `status` module): `latest`, `applied`,
//!    `Ready`, Events and metrics — patched only when changed.
//!
//! This file runs them in order: [`reconcile_single`] for a watch of one repository,
//! [`reconcile_pattern`] for a pattern image (`*` path segments, see `members.rs`), whose
//! members are scanned and selected one by one and written together; a member that fails
//! is reported on itself. Each step's context borrows only the services it uses
//! (`DereferenceContext`, `ScanContext`, `WriteContext`). A deleted watch first closes its
//! open pull requests (`pull_request::finalize`).

// The steps, in the order a reconcile runs them (blank lines keep rustfmt from sorting them).
mod validate;

mod dereference;

mod scan;

mod select;

mod write;

pub mod status;

// What the steps use.
use crate::error::Classify as _;
pub use imagewatch_engine::group;
use imagewatch_engine::status as conditions;
pub mod members;
pub mod pull_request;
mod spec_rules;

use std::{sync::Arc, time::Duration};

use imagewatch_crd::ImageWatch;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    ResourceExt,
    core::DeserializeGuard,
    runtime::{controller::Action, reflector::ObjectRef},
};

use crate::controllers::Context;
use crate::controllers::ReconcileError;
use crate::controllers::parse_duration;
use crate::controllers::recheck;
use crate::error::{InternalError, SpecError};
use crate::registry::RepositoryRef;
use crate::sources::routing::{PushStages, Stage};
use crate::{manifests::TargetSpec, telemetry::ReconcileLabels};
pub(crate) use dereference::signature_keys;
use dereference::{DereferenceContext, dereference_pattern, dereference_single, shard_key};
use imagewatch_engine::considered::Considered;
use members::{MemberResult, PatternImage, PatternOutcome};
use scan::{PatternScan, ScanContext, Scanned, SingleScan, scan_pattern, scan_single};
use select::select;
use spec_rules::ValidatedRules;
use status::{build_status, patch_status_if_changed, publish_events};
use validate::{Followed, Validated, validate};
use write::{
    Intent, Intents, Proposal, Shape, WriteContext, Written, deliver, pull_request_settings,
    write_request,
};

/// What a successful reconcile of a watch of one repository found and did.
pub use imagewatch_engine::status::Outcome;
pub use status::Reconciled;

/// The reconcile entry point used by the controller.
pub async fn reconcile(
    guard: Arc<DeserializeGuard<ImageWatch>>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let key = ObjectRef::from_obj(guard.as_ref());
    let watch = match &guard.0 {
        Ok(watch) => watch,
        Err(invalid) => {
            // The object does not match our types (e.g. written by a newer or older version):
            // say so on its status and wait for it to change.
            crate::cluster::invalid::report_invalid_object::<ImageWatch>(&ctx.client, invalid)
                .await?;
            return Ok(Action::await_change());
        }
    };
    let interval =
        parse_duration(watch.spec.interval_or_default()).unwrap_or(Duration::from_secs(300));
    // HA: only the replica holding the shard of the watch's Git repository works on it (and
    // holds the shard until the status is written).
    let _shard = match &ctx.shards {
        None => None,
        Some(_) => match ctx.enter_shard(&shard_key(watch, &DereferenceContext::of(&ctx)).await) {
            Some(guard) => guard,
            None => return Ok(Action::requeue(interval)),
        },
    };
    if watch.metadata.deletion_timestamp.is_some() {
        return pull_request::finalize(watch, pull_request::FinalizeContext::of(&ctx)).await;
    }
    ctx.with_work_slot(reconcile_holding_slot(watch, key, interval, &ctx))
        .await
}

/// Steps 1–5 of [`reconcile`], run while holding a work slot (given back while waiting for
/// the git writer).
async fn reconcile_holding_slot(
    watch: &ImageWatch,
    key: ObjectRef<DeserializeGuard<ImageWatch>>,
    interval: Duration,
    ctx: &Context,
) -> Result<Action, ReconcileError> {
    let started = std::time::Instant::now();
    let handled_before = watch
        .status
        .as_ref()
        .and_then(|s| s.last_handled_requested_at.as_deref());
    let recheck = recheck::pending(watch.annotations(), handled_before);
    if recheck.is_some() {
        recheck::refresh_scans(&ctx.index, &watch.spec.image);
    }
    let mut considered = None;
    let result = reconcile_watch(watch, ctx, &mut considered).await;
    let outcome_label = match &result {
        Ok(reconciled) => reconciled.metric_label(),
        Err(e) => {
            e.count(&ctx.metrics, crate::controllers::IMAGEWATCH_CONTROLLER);
            e.category()
        }
    };
    ctx.metrics
        .reconciles
        .get_or_create(&ReconcileLabels {
            outcome: outcome_label.to_string(),
        })
        .inc();

    let now = Time(jiff::Timestamp::now());
    let mut new_status = build_status(watch, &result, considered.as_ref(), &now);
    // The deployment of the last commit, as the Argo CD Applications show it.
    if let Some(deployment) = ctx.deploys.deployment(&key) {
        new_status.conditions = status::merge_condition(
            &new_status.conditions,
            imagewatch_engine::argocd::deployed_condition(
                &deployment,
                watch.metadata.generation,
                &now,
            ),
        );
    }
    new_status.last_handled_requested_at =
        recheck::handled_after(recheck.as_deref(), handled_before);
    publish_events(watch, &result, &new_status, &ctx.recorder).await;
    if let Some(value) = &recheck {
        let found = conditions::ready_of(Some(&new_status))
            .map(|c| format!("Ready={} {}", c.status, c.reason))
            .unwrap_or_default();
        recheck::report(
            &ctx.recorder,
            &ctx.metrics,
            &crate::controllers::object_ref(watch),
            "ImageWatch",
            value,
            &found,
        )
        .await;
    }
    // The finalizer goes once no open pull request is recorded (after a successful step).
    if result.is_ok()
        && pull_request::has_finalizer(watch)
        && pull_request::open_records(Some(&new_status)).is_empty()
    {
        pull_request::remove_finalizer(&ctx.client, watch).await?;
    }
    let notify = status::notifications(watch, &mut new_status);
    let failing_due = notify.as_ref().and_then(|n| n.failing_due);
    patch_status_if_changed(watch, new_status, &ctx.client).await?;
    if let Some(n) = notify {
        ctx.notifier.send(&n.target, &n.destinations, n.outgoing);
    }
    if let Ok(Reconciled::Single(Outcome {
        stages: Some(stages),
        ..
    })) = &result
    {
        observe_stages(ctx, stages);
    }

    tracing::debug!(watch = %watch.name_any(), elapsed_ms = started.elapsed().as_millis() as u64, outcome = outcome_label, "reconciled");
    let after = match result {
        // Members that failed for a passing reason (registry, Git) are retried with backoff,
        // without holding back the others.
        Ok(Reconciled::Pattern(p)) if p.has_transient_failure() => ctx.backoff(key, interval).await,
        Ok(reconciled) => {
            ctx.reset_backoff(&key).await;
            reconciled.requeue_within(interval, jiff::Timestamp::now())
        }
        Err(e) if e.is_stalled() => {
            ctx.reset_backoff(&key).await;
            interval
        }
        Err(ReconcileError::CredentialsNotFound(_)) => interval.min(Duration::from_secs(30)),
        Err(ReconcileError::Registry(crate::registry::RegistryError::RateLimited {
            retry_after: Some(after),
            ..
        })) => after.max(Duration::from_secs(1)),
        Err(_) => ctx.backoff(key, interval).await,
    };
    // A `Failing` notification falls due before then: look again at that time.
    Ok(Action::requeue(match failing_due {
        Some(due) => after.min(due + Duration::from_secs(1)),
        None => after,
    }))
}

/// Steps 1–5, for one repository or for every member of a pattern. A watch of one
/// repository leaves in `considered` the tags it looked at, once it has them (its status
/// reports them whether or not a tag could be written).
async fn reconcile_watch(
    watch: &ImageWatch,
    ctx: &Context,
    considered: &mut Option<Considered>,
) -> Result<Reconciled, ReconcileError> {
    let Validated { rules, followed } = validate(watch)?;
    match followed {
        Followed::Single(repo) => reconcile_single(watch, rules, repo, ctx, considered)
            .await
            .map(Reconciled::Single),
        Followed::Pattern(pattern) => reconcile_pattern(watch, rules, pattern, ctx)
            .await
            .map(Reconciled::Pattern),
    }
}

/// Steps 2–5 for a watch of one repository.
async fn reconcile_single(
    watch: &ImageWatch,
    rules: ValidatedRules,
    repo: RepositoryRef,
    ctx: &Context,
    considered: &mut Option<Considered>,
) -> Result<Outcome, ReconcileError> {
    let found = dereference_single(watch, rules, repo, &DereferenceContext::of(ctx)).await?;
    let Scanned {
        git,
        rules,
        followed: SingleScan { own, lookups },
    } = scan_single(watch, found, &ScanContext::of(ctx)).await?;
    // What the rules alone leave out, until a tag is chosen.
    *considered = Some(select::considered(watch, &rules, &own, None));
    let lookups = lookups?;
    let selection = select(watch, &rules, &own, &lookups)?;
    *considered = Some(select::considered(watch, &rules, &own, Some(&selection)));
    ctx.pending
        .stage(&own.repo.registry, &own.repo.path, Stage::Selected);

    // A group writes every member at once, so the batching writer makes one commit.
    let mut others = Vec::new();
    let members = lookups.group.map(|g| g.members).unwrap_or_default();
    for ((member, scan, _), image) in members.into_iter().zip(&selection.others) {
        let git = member.git?;
        others.push(write_request(
            &member.watch,
            &member.rules,
            &scan,
            &git,
            image.clone(),
        )?);
    }
    let intent = Intent {
        request: write_request(watch, &rules, &own, &git, selection.image.clone())?,
        registry: own.repo.registry.clone(),
        repository: own.repo.path.clone(),
    };
    let pull_request = pull_request_settings(watch, &rules.pause).map(|settings| Proposal {
        settings,
        forge_url: git.url.clone(),
        shape: Shape::Watch {
            image: own.image.clone(),
            tag: selection.tag.clone(),
        },
    });
    let intents = Intents {
        own: vec![intent],
        others,
        pull_request,
    };
    let delivery = deliver(watch, intents, &WriteContext::of(ctx)).await?;
    let Some(Written { result, stages, .. }) = delivery.writes.into_iter().next() else {
        return Err(ReconcileError::Internal(InternalError::NoWriteResult));
    };
    Ok(Outcome {
        latest: selection.latest,
        write: Some(result?),
        paused: rules.pause.clone(),
        waiting: selection.waiting,
        refused: selection.refused.into_iter().next().map(Box::new),
        pull_request: delivery.pull_request,
        stages,
    })
}

/// Steps 2–5 for a pattern watch: list the registry's repositories (shared through the
/// index), then for each matching one scan, select and confirm a tag with the watch's rules
/// and make its write intent for the expanded target. Every intent goes to the writer at
/// once, so one commit per repository and branch carries them. A member that fails (no tag,
/// no target in Git, a registry error) is reported on itself; the others proceed.
async fn reconcile_pattern(
    watch: &ImageWatch,
    rules: ValidatedRules,
    pattern: PatternImage,
    ctx: &Context,
) -> Result<PatternOutcome, ReconcileError> {
    let found = dereference_pattern(watch, rules, pattern, &DereferenceContext::of(ctx)).await?;
    let Scanned {
        git,
        rules,
        followed:
            PatternScan {
                pattern,
                listed,
                members,
            },
    } = scan_pattern(watch, found, &ScanContext::of(ctx)).await;

    // Select per member, and its write intent.
    let mut results = Vec::with_capacity(members.len());
    let mut requests: Vec<Option<crate::writer::WriteRequest>> = Vec::with_capacity(members.len());
    for member in members {
        let mut result = MemberResult {
            repository: member.repository,
            captures: member.captures,
            latest: None,
            pull_request: None,
            refused: None,
            stages: None,
            outcome: Err(ReconcileError::Internal(InternalError::NotReconciled)),
        };
        let request = member.scanned.and_then(|(me, lookups)| {
            let selection = select(watch, &rules, &me, &lookups)?;
            result.latest = Some(selection.tag.clone());
            result.refused = selection.refused.into_iter().next();
            write_request(watch, &rules, &me, &git, selection.image)
        });
        match request {
            Ok(request) => requests.push(Some(request)),
            Err(e) => {
                result.outcome = Err(e);
                requests.push(None);
            }
        }
        results.push(result);
    }

    // Two members must never write one place (the second would undo the first).
    let keys: Vec<Option<TargetSpec>> = requests
        .iter()
        .map(|request| request.as_ref().map(|r| r.target.clone()))
        .collect();
    let shared = members::shared_targets(&keys);
    let mut own = Vec::new();
    let mut indices = Vec::new();
    for (i, request) in requests.into_iter().enumerate() {
        match (request, shared[i]) {
            (Some(_), Some(other)) => {
                results[i].outcome = Err(ReconcileError::InvalidSpec(SpecError::SharedTarget {
                    other: results[other].repository.clone(),
                    wildcards: pattern.wildcards(),
                }));
            }
            (Some(request), None) => {
                indices.push(i);
                own.push(Intent {
                    request,
                    registry: pattern.registry.clone(),
                    repository: results[i].repository.clone(),
                });
            }
            (None, _) => {}
        }
    }
    let pull_request = pull_request_settings(watch, &rules.pause).map(|settings| Proposal {
        shape: Shape::Pattern {
            per_member: settings.per_member.unwrap_or(true),
        },
        settings,
        forge_url: git.url.clone(),
    });
    let intents = Intents {
        own,
        others: Vec::new(),
        pull_request,
    };
    let delivery = deliver(watch, intents, &WriteContext::of(ctx)).await?;
    for (i, written) in indices.into_iter().zip(delivery.writes) {
        results[i].outcome = written.result;
        results[i].stages = written.stages;
        results[i].pull_request = written.pull_request;
    }
    Ok(PatternOutcome {
        image: watch.spec.image.clone(),
        listed,
        members: results,
        paused: rules.pause.clone(),
        pull_request: delivery.pull_request,
    })
}

/// Counts where the push's time went, its status now written.
fn observe_stages(ctx: &Context, stages: &PushStages) {
    for (stage, spent) in stages.durations(Some(std::time::Instant::now())) {
        ctx.metrics
            .push_stage_seconds
            .get_or_create(&crate::telemetry::StageLabels {
                stage: stage.to_owned(),
            })
            .observe(spent.as_secs_f64());
    }
}
