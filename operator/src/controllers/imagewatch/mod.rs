//! The ImageWatch pipeline. One reconcile of one `ImageWatch`, top to bottom, one file per
//! step:
//!
//! 1. validate (`validate.rs`, pure): tag rules, interval, platforms, windows;
//! 2. dereference (`dereference.rs`, I/O): first the allow-list asks — may the watch's
//!    namespace read its image and write its Git target, before anything it names is read —
//!    then registry credentials, the Git location (`spec.git` or the managing Argo CD
//!    Application), the cosign keys of `spec.verify`;
//! 3. scan (`scan.rs`, step 3a): the repository's tags through the shared index; digests,
//!    which confirm a tag exists (manifest HEAD); signature verdicts. Then select
//!    (`select.rs`, step 3b; pure but for those lookups): the tag to run — the rules' choice,
//!    the pin, the group's tag (`group.rs`) or the newest verified one;
//! 4. write (`write.rs`): the edit intent to the git writer, which reads the target's current
//!    image from Git and commits and pushes when it differs; the pull request hand-off
//!    (`pull_request.rs`);
//! 5. status (`status.rs`, built by the engine's `status` module): `latest`, `applied`,
//!    `Ready`, Events and metrics — patched only when changed.
//!
//! This file runs them in order ([`reconcile`]) and hands each step what the one before
//! found, with the step's own context built from the shared [`Context`]: [`AllowList`],
//! `DereferenceContext`, `ScanContext`, `SelectContext` and `WriteContext` borrow only the
//! services their step uses. A pattern image (`*` path segments, see `members.rs`) runs steps 2–4 once per
//! matching repository of the registry, listed through the index, and hands every member's
//! write intent to the writer at once; step 5 reports each member and an aggregated `Ready`.
//! A deleted watch first closes its open pull requests (`pull_request::finalize`).

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

use std::{sync::Arc, time::Duration};

use futures::StreamExt as _;
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
use crate::scan::index::CatalogKey;
use crate::sources::routing::{PushStages, Stage};
use crate::writer::WriteRequest;
use crate::{manifests::TargetSpec, registry::RepositoryRef, telemetry::ReconcileLabels};
use dereference::{AllowList, check_registry_allowed};
use dereference::{
    DereferenceContext, GitLocation, Rules, VerifyKeys, resolve_git, rules, shard_key, verify_keys,
};
pub(crate) use dereference::{signature_keys, target_path};
use imagewatch_engine::considered::Considered;
use members::{MemberResult, PatternImage, PatternOutcome};
pub(crate) use scan::count_signature_check;
use scan::{ScanContext, catalog_error, prepare, scan_repository};
use select::{Choice, SelectContext, choose, group_choice, image_for};
use status::{build_status, patch_status_if_changed, publish_events};
use validate::validate_rules;
use write::{WriteContext, pattern_pull_requests, write_and_propose, write_request};

/// Members of a pattern watch scanned at the same time.
const MEMBER_CONCURRENCY: usize = 8;

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

/// Steps 1–4, for one repository or for every member of a pattern. A watch of one
/// repository leaves in `considered` the tags it looked at, once it has them (its status
/// reports them whether or not a tag could be written).
async fn reconcile_watch(
    watch: &ImageWatch,
    ctx: &Context,
    considered: &mut Option<Considered>,
) -> Result<Reconciled, ReconcileError> {
    check_registry_allowed(watch, AllowList::of(ctx)).await?;
    match members::parse_pattern_image(&watch.spec.image) {
        Ok(None) => reconcile_single(watch, ctx, considered)
            .await
            .map(Reconciled::Single),
        Ok(Some(pattern)) => reconcile_pattern(watch, &pattern, ctx)
            .await
            .map(Reconciled::Pattern),
        Err(message) => Err(ReconcileError::InvalidSpec(SpecError::rule(
            "spec.image",
            message,
        ))),
    }
}

/// Steps 1–4 for a pattern watch: list the registry's repositories (shared through the
/// index), then for each matching one scan, select and confirm a tag with the watch's rules
/// and make its write intent for the expanded target. Every intent goes to the writer at
/// once, so one commit per repository and branch carries them. A member that fails (no tag,
/// no target in Git, a registry error) is reported on itself; the others proceed.
async fn reconcile_pattern(
    watch: &ImageWatch,
    pattern: &PatternImage,
    ctx: &Context,
) -> Result<PatternOutcome, ReconcileError> {
    let spec = &watch.spec;
    if spec.group.as_deref().is_some_and(|g| !g.is_empty()) {
        return Err(ReconcileError::InvalidSpec(SpecError::GroupWithPattern {
            image: spec.image.clone(),
        }));
    }
    members::check_references(&spec.target, &spec.image, pattern.wildcards())
        .map_err(|e| ReconcileError::InvalidSpec(SpecError::rule("spec.target", e)))?;
    let (dereference, scan, write_step) = (
        DereferenceContext::of(ctx),
        ScanContext::of(ctx),
        WriteContext::of(ctx),
    );
    let git = resolve_git(watch, &dereference).await?;
    let validated = validate_rules(watch)?;
    let rules = Arc::new(rules(watch, &dereference, &pattern.registry, validated).await?);
    // With spec.verify: every member's tag is verified in its own repository, with one key set.
    let verify = verify_keys(watch, &rules, &dereference).await?;

    // Members: the registry's repositories matching the pattern.
    let catalog_key = CatalogKey {
        registry: pattern.registry.clone(),
        credentials: rules.credential_key.clone(),
    };
    let catalog = scan
        .index
        .repositories(&catalog_key, rules.interval, || async {
            if rules.use_ecr {
                scan.ecr.list_repositories(&pattern.registry, "").await
            } else {
                scan.registry
                    .list_repositories(&pattern.registry, &rules.creds)
                    .await
            }
        })
        .await
        .map_err(|e| catalog_error(e, pattern, rules.use_ecr))?;
    let matched: Vec<(String, Vec<String>)> = catalog
        .repositories
        .iter()
        .filter_map(|name| {
            crate::registry::ecr::match_pattern(&pattern.pattern, name)
                .map(|captures| (name.clone(), captures))
        })
        .collect();
    tracing::debug!(watch = %watch.name_any(), listed = catalog.repositories.len(), members = matched.len(), "pattern members");

    // Scan, select and confirm per member (bounded concurrency, order kept).
    let planned: Vec<(MemberResult, Option<WriteRequest>)> =
        futures::stream::iter(matched.into_iter().map(|(repository, captures)| {
            plan_member(
                watch,
                (&dereference, &scan),
                (&rules, verify.as_ref()),
                pattern,
                &git,
                repository,
                captures,
            )
        }))
        .buffered(MEMBER_CONCURRENCY)
        .collect()
        .await;

    // Two members must never write one place (the second would undo the first).
    let names: Vec<String> = planned
        .iter()
        .map(|(result, _)| result.repository.clone())
        .collect();
    let keys: Vec<Option<TargetSpec>> = planned
        .iter()
        .map(|(_, request)| request.as_ref().map(|r| r.target.clone()))
        .collect();
    let shared = members::shared_targets(&keys);
    let mut results = Vec::with_capacity(planned.len());
    let mut requests = Vec::new();
    for (i, (mut result, request)) in planned.into_iter().enumerate() {
        match (request, shared[i]) {
            (Some(_), Some(other)) => {
                result.outcome = Err(ReconcileError::InvalidSpec(SpecError::SharedTarget {
                    other: names[other].clone(),
                    wildcards: pattern.wildcards(),
                }));
            }
            (Some(request), None) => requests.push((i, request)),
            (None, _) => {}
        }
        results.push(result);
    }

    // Write every intent at once: the batching writer makes one commit per repository and
    // branch.
    let (indices, mut requests): (Vec<usize>, Vec<WriteRequest>) = requests.into_iter().unzip();
    let pr_settings = spec
        .git
        .as_ref()
        .and_then(|g| g.pull_request.clone())
        .filter(|_| rules.pause.is_none());
    let per_member = pr_settings
        .as_ref()
        .is_some_and(|p| p.per_member.unwrap_or(true));
    if pr_settings.is_some() {
        for (k, request) in requests.iter_mut().enumerate() {
            let Some(branch) = request
                .push_branch
                .clone()
                .filter(|b| !b.is_empty() && *b != request.branch)
            else {
                return Err(ReconcileError::InvalidSpec(
                    SpecError::PullRequestWithoutPushBranch,
                ));
            };
            if per_member {
                request.push_branch = Some(pull_request::member_push_branch(
                    &branch,
                    &results[indices[k]].repository,
                ));
            }
        }
    }
    let on_base: Vec<WriteRequest> = requests
        .iter()
        .map(|r| WriteRequest {
            push_branch: None,
            dry_run: true,
            ..r.clone()
        })
        .collect();
    let heads: Vec<Option<String>> = requests.iter().map(|r| r.push_branch.clone()).collect();
    // Where a direct commit lands (pull requests are followed once merged, not here).
    let locations: Vec<(String, String, crate::git::GitAuth)> = requests
        .iter()
        .filter(|r| r.push_branch.is_none())
        .map(|r| (r.url.clone(), r.branch.clone(), r.auth.clone()))
        .collect();
    let writes = write_step
        .slots
        .without_work_slot(futures::future::join_all(
            requests.into_iter().map(|r| write_step.writer.apply(r)),
        ))
        .await;
    // The first commit made, with every member file it holds, is followed to Argo CD.
    let mut followed: Option<(String, Vec<String>, Option<std::time::Instant>)> = None;
    for (&i, write) in indices.iter().zip(writes) {
        if let Ok(w) = &write
            && let Some(commit) = &w.commit
        {
            // Per-stage times are counted for watches of one repository only: a pattern's
            // members are listed and chosen together.
            let stages = push_stages(ctx, &pattern.registry, &results[i].repository, w);
            results[i].stages = stages;
            let pushed = stages.map(|s| s.received);
            match &mut followed {
                None => followed = Some((commit.clone(), vec![w.file.clone()], pushed)),
                Some((first, files, at)) if first == commit => {
                    files.push(w.file.clone());
                    *at = match (*at, pushed) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                Some(_) => {}
            }
        }
        results[i].outcome = write.map_err(ReconcileError::from);
    }
    if let (Some((commit, files, pushed)), Some(first)) = (followed, locations.first()) {
        follow_commit(watch, ctx, first.clone(), &commit, files, pushed);
    }
    let mut pull_request = None;
    if let Some(settings) = pr_settings {
        pull_request = pattern_pull_requests(
            watch,
            &settings,
            &git.url,
            per_member,
            &mut results,
            &indices,
            on_base,
            &heads,
            &write_step,
        )
        .await?;
    }
    Ok(PatternOutcome {
        image: spec.image.clone(),
        listed: catalog.repositories.len(),
        members: results,
        paused: rules.pause.clone(),
        pull_request,
    })
}

/// Steps 2–3 for one member: scan, select (with `spec.verify`, the newest tag verified in
/// this member's repository), confirm; then its write intent. Failures are the member's,
/// not the watch's.
async fn plan_member(
    watch: &ImageWatch,
    (dereference, scan): (&DereferenceContext<'_>, &ScanContext<'_>),
    (rules, verify): (&Arc<Rules>, Option<&VerifyKeys>),
    pattern: &PatternImage,
    git: &GitLocation,
    repository: String,
    captures: Vec<String>,
) -> (MemberResult, Option<WriteRequest>) {
    let mut result = MemberResult {
        repository: repository.clone(),
        captures: captures.clone(),
        latest: None,
        pull_request: None,
        refused: None,
        stages: None,
        outcome: Err(ReconcileError::Internal(InternalError::NotReconciled)),
    };
    let repo = RepositoryRef {
        registry: pattern.registry.clone(),
        path: repository.clone(),
    };
    let target = members::expand_target(&watch.spec.target, &captures);
    let planned = async {
        let me = scan_repository(
            watch,
            scan,
            rules.clone(),
            repo,
            pattern.member_image(&repository),
            target,
        )
        .await?;
        let Choice {
            tag,
            digest,
            refused,
        } = choose(&me, scan, verify, None).await?;
        result.latest = Some(tag.clone());
        result.refused = refused.into_iter().next();
        write_request(
            &me,
            dereference,
            image_for(&me, &tag, digest.as_deref())?,
            Some(git.clone()),
        )
        .await
    }
    .await;
    match planned {
        Ok(request) => (result, Some(request)),
        Err(e) => {
            result.outcome = Err(e);
            (result, None)
        }
    }
}

/// Steps 1–4 for a watch of one repository.
async fn reconcile_single(
    watch: &ImageWatch,
    ctx: &Context,
    considered: &mut Option<Considered>,
) -> Result<Outcome, ReconcileError> {
    // Where to write first: a missing or wrong Git location is reported before any registry
    // verdict.
    let select = SelectContext::of(ctx);
    let (dereference, scan) = (&select.dereference, &select.scan);
    let write_step = WriteContext::of(ctx);
    let git = resolve_git(watch, dereference).await?;
    let me = prepare(watch, dereference, scan).await?;
    let spec = &watch.spec;
    let stage = |stage| ctx.pending.stage(&me.repo.registry, &me.repo.path, stage);
    stage(Stage::Listed);
    // What the rules alone leave out, until a tag is chosen.
    *considered = Some(select::considered(&me, None, &[], None));

    // 3b. select: the watch's own choice, or its group's.
    let group = match spec.group.as_deref().filter(|g| !g.is_empty()) {
        Some(group) => Some(group_choice(&me, group, &select).await?),
        None => None,
    };
    // With spec.verify: only a tag whose signature verifies is written.
    let verify = verify_keys(watch, &me.rules, dereference).await?;
    let Choice {
        tag,
        digest,
        refused,
    } = choose(
        &me,
        scan,
        verify.as_ref(),
        group.as_ref().map(|g| g.tag.as_str()),
    )
    .await?;
    *considered = Some(select::considered(
        &me,
        Some(&tag),
        &refused,
        spec.group.as_deref(),
    ));
    let refused = refused.into_iter().next();
    let latest = select::latest(&me, scan, &tag, digest.as_deref());
    stage(Stage::Selected);

    // 4. write: a group writes every member at once, so the batching writer makes one commit.
    let pr_settings = spec
        .git
        .as_ref()
        .and_then(|g| g.pull_request.clone())
        .filter(|_| me.rules.pause.is_none());
    let forge_url = git.url.clone();
    let mine = write_request(
        &me,
        dereference,
        image_for(&me, &tag, digest.as_deref())?,
        Some(git),
    )
    .await?;
    if let Some(settings) = pr_settings {
        let others = group.as_ref().map(|g| g.others.clone()).unwrap_or_default();
        let (write, delivered) = write_and_propose(
            watch,
            &me,
            mine,
            others,
            &settings,
            &forge_url,
            &tag,
            &write_step,
        )
        .await?;
        let stages = delivered
            .commit
            .as_ref()
            .and_then(|_| push_stages(ctx, &me.repo.registry, &me.repo.path, &write));
        return Ok(Outcome {
            latest,
            write: Some(write),
            paused: None,
            waiting: group.and_then(|g| g.waiting),
            refused: refused.map(Box::new),
            pull_request: Some(delivered),
            stages,
        });
    }
    let location = (mine.url.clone(), mine.branch.clone(), mine.auth.clone());
    let write = match &group {
        Some(g) if !g.others.is_empty() => {
            let mut requests = vec![mine];
            requests.extend(g.others.iter().cloned());
            let results = write_step
                .slots
                .without_work_slot(futures::future::join_all(
                    requests.into_iter().map(|r| write_step.writer.apply(r)),
                ))
                .await;
            let mut results = results.into_iter().map(|r| r.map_err(ReconcileError::from));
            let own = results
                .next()
                .unwrap_or_else(|| Err(ReconcileError::Internal(InternalError::NoWriteResult)))?;
            for other in results {
                if let Err(e) = other {
                    tracing::warn!(watch = %watch.name_any(), error = %e, "a group member's write failed");
                }
            }
            own
        }
        _ => {
            write_step
                .slots
                .without_work_slot(write_step.writer.apply(mine))
                .await?
        }
    };
    let mut stages = None;
    if let Some(commit) = &write.commit {
        stages = push_stages(ctx, &me.repo.registry, &me.repo.path, &write);
        follow_commit(
            watch,
            ctx,
            location,
            commit,
            vec![write.file.clone()],
            stages.map(|s| s.received),
        );
    }
    Ok(Outcome {
        latest,
        write: Some(write),
        paused: me.rules.pause.clone(),
        waiting: group.and_then(|g| g.waiting),
        refused: refused.map(Box::new),
        pull_request: None,
        stages,
    })
}

/// The stages of the registry push that led to this commit, if an event started it (the
/// writer's commit and push instants added); the push → commit latency is counted.
fn push_stages(
    ctx: &Context,
    registry: &str,
    repository: &str,
    write: &imagewatch_engine::status::WriteResult,
) -> Option<PushStages> {
    let mut stages = ctx.pending.take(registry, repository)?;
    if let Some((committed, pushed)) = write.pushed {
        stages.committed = Some(committed);
        stages.pushed = Some(pushed);
    }
    ctx.metrics
        .push_to_commit_seconds
        .observe(stages.received.elapsed().as_secs_f64());
    Some(stages)
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

/// Hands a commit of this reconcile to the deployment tracker, which asks Argo CD to refresh
/// the Applications deploying `files` and follows them (`Deployed`).
fn follow_commit(
    watch: &ImageWatch,
    ctx: &Context,
    (url, branch, auth): (String, String, crate::git::GitAuth),
    commit: &str,
    files: Vec<String>,
    pushed_at: Option<std::time::Instant>,
) {
    ctx.deploys.committed(
        &ctx.client,
        &ctx.metrics,
        crate::cluster::deploy::Committed {
            watch: ObjectRef::new(&watch.name_any()).within(&watch.namespace().unwrap_or_default()),
            object: crate::controllers::object_ref(watch),
            url,
            branch,
            auth,
            commit: commit.to_owned(),
            files,
            pushed_at,
        },
    );
}
