//! One reconcile of one `ImageWatch`, top to bottom:
//!
//! 1. validate (pure): tag rules, interval, target kind;
//! 2. dereference (I/O): registry credentials, tag list;
//! 3. select (pure): the tag to run; then confirm it exists (manifest HEAD);
//! 4. write: read the target's current image from Git, commit and push when it differs;
//! 5. status: `latest`, `applied`, `Ready`, Events and metrics — patched only when changed.

use std::{sync::Arc, time::Duration};

use imagewatch_crd::{
    AppliedImage, DigestMode, ImageWatch, ImageWatchStatus, LatestImage, RegistryProvider,
    TagOrder, conditions::reason,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    core::DeserializeGuard,
    runtime::{
        controller::Action,
        events::{Event, EventType},
        reflector::ObjectRef,
    },
};
use serde_json::json;

use super::{
    Context, ReconcileError,
    index::{CredentialKey, ScanKey},
    parse_duration, secrets, status,
    writer::{WriteRequest, WriteResult},
};
use crate::{
    manifests::{ImageChange, WorkloadTarget},
    policy::{self, TagPolicy},
    registry::{Credentials, RepositoryRef},
    telemetry::{ReconcileLabels, RegistryLabels},
};

/// What a successful reconcile found and did.
#[derive(Debug)]
pub struct Outcome {
    latest: LatestImage,
    write: Option<WriteResult>,
    suspended: bool,
}

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
            report_undeserializable(&ctx, invalid).await?;
            return Ok(Action::await_change());
        }
    };
    let interval =
        parse_duration(watch.spec.interval_or_default()).unwrap_or(Duration::from_secs(300));
    let started = std::time::Instant::now();
    let result = reconcile_watch(watch, &ctx).await;
    let outcome_label = match &result {
        Ok(_) => "ok",
        Err(e) => e.category(),
    };
    ctx.metrics
        .reconciles
        .get_or_create(&ReconcileLabels {
            outcome: outcome_label.to_string(),
        })
        .inc();

    let now = Time(jiff::Timestamp::now());
    let new_status = build_status(watch, &result, &now);
    publish_events(watch, &result, &ctx).await;
    patch_status_if_changed(watch, new_status, &ctx).await?;

    tracing::debug!(watch = %watch.name_any(), elapsed_ms = started.elapsed().as_millis() as u64, outcome = outcome_label, "reconciled");
    match result {
        Ok(_) => {
            ctx.reset_backoff(&key).await;
            Ok(Action::requeue(interval))
        }
        Err(e) if e.is_stalled() => {
            ctx.reset_backoff(&key).await;
            Ok(Action::requeue(interval))
        }
        Err(ReconcileError::CredentialsNotFound(_)) => {
            Ok(Action::requeue(interval.min(Duration::from_secs(30))))
        }
        Err(ReconcileError::Registry(crate::registry::RegistryError::RateLimited {
            retry_after: Some(after),
            ..
        })) => Ok(Action::requeue(after.max(Duration::from_secs(1)))),
        Err(_) => Ok(Action::requeue(ctx.backoff(key, interval).await)),
    }
}

/// Steps 1–4.
async fn reconcile_watch(watch: &ImageWatch, ctx: &Context) -> Result<Outcome, ReconcileError> {
    let namespace = watch.namespace().unwrap_or_default();
    let spec = &watch.spec;

    // 1. validate
    let tags = spec.tags.clone().unwrap_or_default();
    let order = match tags.order.unwrap_or_default() {
        TagOrder::Semver => policy::Order::Semver,
        TagOrder::Newest => policy::Order::Newest,
        TagOrder::Alphabetical => policy::Order::Alphabetical,
        TagOrder::Numerical => policy::Order::Numerical,
    };
    let tag_policy = TagPolicy::new(
        tags.pattern.as_deref().unwrap_or(""),
        tags.exclude.as_deref().unwrap_or(&[]),
        order,
        tags.extract.as_deref(),
    )
    .map_err(|e| ReconcileError::InvalidSpec(format!("spec.tags: {e}")))?;
    if parse_duration(spec.interval_or_default()).is_none() {
        return Err(ReconcileError::InvalidSpec(format!(
            "spec.interval {:?} is not a duration",
            spec.interval_or_default()
        )));
    }
    let workload = spec.target.workload.as_ref().ok_or_else(|| {
        ReconcileError::InvalidSpec(
            "spec.target: only target.workload is supported by this version of imagewatch"
                .to_string(),
        )
    })?;
    let repo = RepositoryRef::parse(&spec.image)
        .map_err(|e| ReconcileError::InvalidSpec(format!("spec.image: {e}")))?;
    let credentials = spec.credentials.clone().unwrap_or_default();
    if credentials.provider == Some(RegistryProvider::Aws) {
        return Err(ReconcileError::InvalidSpec(
            "spec.credentials.provider aws is not supported by this version of imagewatch"
                .to_string(),
        ));
    }

    // 2. dereference
    let creds = match &credentials.secret_ref {
        Some(secret) => {
            secrets::registry_credentials(&ctx.client, &namespace, &secret.name, &repo.registry)
                .await?
        }
        None => Credentials::Anonymous,
    };
    let git = resolve_git(watch, ctx).await?;

    // 3. select, from the repository's shared scan
    let scan_key = ScanKey {
        registry: repo.registry.clone(),
        repository: repo.path.clone(),
        credentials: match &credentials.secret_ref {
            Some(secret) => CredentialKey::Secret {
                namespace: namespace.clone(),
                name: secret.name.clone(),
            },
            None => CredentialKey::Anonymous,
        },
        with_times: false,
    };
    let interval = parse_duration(spec.interval_or_default()).unwrap_or(Duration::from_secs(300));
    let scan = ctx
        .index
        .tags(&scan_key, interval, || async {
            registry_call(ctx, &repo, ctx.registry.list_tags(&repo, &creds).await)
                .map(|tags| tags.into_iter().map(policy::TagInfo::new).collect())
        })
        .await
        .map_err(ReconcileError::from)?;
    let (tag, digest) = match spec.pin.as_deref().filter(|p| !p.is_empty()) {
        Some(pin) => {
            let digest = scan
                .digest(pin, || async {
                    registry_call(
                        ctx,
                        &repo,
                        ctx.registry.manifest_digest(&repo, pin, &creds).await,
                    )
                })
                .await?;
            match digest {
                Some(d) => (pin.to_string(), d),
                None => {
                    return Err(ReconcileError::PinnedTagNotFound(format!(
                        "spec.pin {pin:?} does not exist in {}",
                        spec.image
                    )));
                }
            }
        }
        None => {
            let chosen = tag_policy.select(&scan.tags).ok_or_else(|| {
                let pattern = tags.pattern.as_deref().unwrap_or("*");
                let matching = scan.tags.iter().filter(|t| tag_policy.matches(&t.tag)).count();
                ReconcileError::NoMatchingTags(if matching == 0 {
                    format!(
                        "none of the {} tags of {} matches pattern {pattern:?}",
                        scan.listed, spec.image
                    )
                } else {
                    format!(
                        "{matching} tags of {} match pattern {pattern:?} but none can be ordered by {:?} (e.g. not a version); set spec.tags.order or spec.tags.extract",
                        spec.image, order
                    )
                })
            })?;
            // Never write a tag on the list's word alone: the manifest must exist.
            let digest = scan
                .digest(&chosen.tag, || async {
                    registry_call(
                        ctx,
                        &repo,
                        ctx.registry
                            .manifest_digest(&repo, &chosen.tag, &creds)
                            .await,
                    )
                })
                .await?;
            match digest {
                Some(d) => (chosen.tag.clone(), d),
                None => {
                    return Err(ReconcileError::NoMatchingTags(format!(
                        "tag {} of {} is listed but its manifest does not exist",
                        chosen.tag, spec.image
                    )));
                }
            }
        }
    };
    let latest = LatestImage {
        tag: tag.clone(),
        digest: Some(digest.clone()),
        pushed_at: None,
    };

    // 4. write
    let image = match spec.digest.unwrap_or_default() {
        DigestMode::Tag => format!("{}:{}", spec.image, tag),
        DigestMode::Pin | DigestMode::Follow => format!("{}:{}@{}", spec.image, tag, digest),
    };
    let request = WriteRequest {
        url: git.url,
        branch: git.branch,
        auth: git.auth,
        path: join_path(&git.base_path, &workload.path),
        target: WorkloadTarget {
            kind: workload.kind.clone(),
            name: workload.name.clone(),
            container: workload.container.clone(),
            namespace: workload.namespace.clone(),
        },
        change: ImageChange::Image(image),
        watch: format!("{}/{}", namespace, watch.name_any()),
        dry_run: spec.is_suspended(),
    };
    let write = ctx.writer.apply(request).await?;
    if write.commit.is_some()
        && let Some(since) = ctx.pending.take(&repo.registry, &repo.path)
    {
        ctx.metrics
            .push_to_commit_seconds
            .observe(since.elapsed().as_secs_f64());
    }
    Ok(Outcome {
        latest,
        write: Some(write),
        suspended: spec.is_suspended(),
    })
}

/// Where to write: the repository, branch, credentials and the base path target paths are
/// relative to.
struct GitLocation {
    url: String,
    branch: String,
    auth: crate::git::GitAuth,
    base_path: String,
}

/// `spec.git`, or the Argo CD Application managing the watch.
async fn resolve_git(watch: &ImageWatch, ctx: &Context) -> Result<GitLocation, ReconcileError> {
    let namespace = watch.namespace().unwrap_or_default();
    if let Some(git) = &watch.spec.git {
        let auth = match &git.secret_ref {
            Some(secret) => secrets::git_credentials(&ctx.client, &namespace, &secret.name).await?,
            None => crate::git::GitAuth::Anonymous,
        };
        return Ok(GitLocation {
            url: git.url.clone(),
            branch: git.branch().to_string(),
            auth,
            base_path: String::new(),
        });
    }
    let (source, secret) = super::argocd::resolve(
        &ctx.client,
        &ctx.argocd_namespace,
        &namespace,
        watch.annotations(),
        watch.labels(),
    )
    .await?;
    let auth = match secret {
        Some(name) => secrets::git_credentials(&ctx.client, &namespace, &name).await?,
        None => crate::git::GitAuth::Anonymous,
    };
    Ok(GitLocation {
        url: source.repo_url,
        branch: source.branch,
        auth,
        base_path: source.path,
    })
}

/// `base/path`, without leading or trailing slashes.
fn join_path(base: &str, path: &str) -> String {
    let base = base.trim_matches('/');
    let path = path.trim_matches('/');
    match (base.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (false, true) => base.to_string(),
        (false, false) => format!("{base}/{path}"),
    }
}

fn registry_call<T>(
    ctx: &Context,
    repo: &RepositoryRef,
    result: Result<T, crate::registry::RegistryError>,
) -> Result<T, crate::registry::RegistryError> {
    let outcome = match &result {
        Ok(_) => "ok",
        Err(e) => e.category(),
    };
    ctx.metrics
        .registry_requests
        .get_or_create(&RegistryLabels {
            registry: repo.registry.clone(),
            outcome: outcome.to_string(),
        })
        .inc();
    result
}

/// Step 5 (pure): the status this reconcile should leave.
pub fn build_status(
    watch: &ImageWatch,
    result: &Result<Outcome, ReconcileError>,
    now: &Time,
) -> ImageWatchStatus {
    let previous = watch.status.clone().unwrap_or_default();
    let generation = watch.metadata.generation;
    let mut next = ImageWatchStatus {
        observed_generation: generation,
        latest: previous.latest.clone(),
        applied: previous.applied.clone(),
        conditions: previous.conditions.clone(),
    };
    let condition = match result {
        Ok(outcome) => {
            next.latest = Some(outcome.latest.clone());
            if let Some(write) = &outcome.write {
                let tag = tag_of(&write.current_after);
                let same_as_before = previous
                    .applied
                    .as_ref()
                    .is_some_and(|a| a.image.as_deref() == Some(write.current_after.as_str()));
                next.applied = Some(AppliedImage {
                    tag,
                    image: Some(write.current_after.clone()),
                    commit: Some(write.commit.clone().unwrap_or_else(|| {
                        previous
                            .applied
                            .as_ref()
                            .filter(|_| same_as_before)
                            .and_then(|a| a.commit.clone())
                            .unwrap_or_else(|| write.head.clone())
                    })),
                    at: if write.commit.is_some() || !same_as_before {
                        Some(now.clone())
                    } else {
                        previous.applied.as_ref().and_then(|a| a.at.clone())
                    },
                });
            }
            if outcome.suspended {
                let message = match &outcome.write {
                    Some(w) if w.changed_needed => format!(
                        "suspended: Git holds {}, the rules choose {} (not written)",
                        w.current_before, w.desired
                    ),
                    _ => "suspended: nothing is written".to_string(),
                };
                status::ready_condition(false, reason::SUSPENDED, &message, generation, now)
            } else {
                match &outcome.write {
                    Some(w) if w.commit.is_some() => status::ready_condition(
                        true,
                        reason::UPDATED,
                        &format!(
                            "{}: {} -> {} (commit {})",
                            w.file,
                            w.current_before,
                            w.current_after,
                            short(w.commit.as_deref().unwrap_or_default())
                        ),
                        generation,
                        now,
                    ),
                    Some(w) => status::ready_condition(
                        true,
                        reason::UP_TO_DATE,
                        &format!("{} holds {}", w.file, w.current_after),
                        generation,
                        now,
                    ),
                    None => status::ready_condition(true, reason::UP_TO_DATE, "", generation, now),
                }
            }
        }
        Err(e) => status::ready_condition(false, e.reason(), &e.to_string(), generation, now),
    };
    // A watch that was just Updated and is now simply current keeps its Updated condition
    // (with the commit) until something else happens: no status write on every poll.
    let condition = match (status::ready_of(Some(&previous)), result) {
        (Some(old), Ok(outcome))
            if old.status == "True"
                && old.observed_generation == generation
                && old.reason == reason::UPDATED
                && condition.reason == reason::UP_TO_DATE
                && previous.applied.as_ref().and_then(|a| a.image.as_deref())
                    == outcome.write.as_ref().map(|w| w.current_after.as_str()) =>
        {
            old.clone()
        }
        _ => condition,
    };
    next.conditions = status::merge_condition(&previous.conditions, condition);
    next
}

fn tag_of(image: &str) -> String {
    crate::manifests::ImageRef::parse(image)
        .ok()
        .and_then(|r| r.tag().map(str::to_string))
        .unwrap_or_default()
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

async fn patch_status_if_changed(
    watch: &ImageWatch,
    new_status: ImageWatchStatus,
    ctx: &Context,
) -> Result<(), ReconcileError> {
    if !status::status_changed(watch.status.as_ref(), &new_status) {
        return Ok(());
    }
    let api: Api<ImageWatch> =
        Api::namespaced(ctx.client.clone(), &watch.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": "imagewatch.dev/v1alpha1",
        "kind": "ImageWatch",
        "status": new_status,
    });
    let params = PatchParams::apply(imagewatch_crd::FIELD_MANAGER).force();
    match api
        .patch_status(&watch.name_any(), &params, &Patch::Apply(&patch))
        .await
    {
        Ok(_) => Ok(()),
        // Deleted while we worked: nothing to report on.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn publish_events(
    watch: &ImageWatch,
    result: &Result<Outcome, ReconcileError>,
    ctx: &Context,
) {
    let previous = status::ready_of(watch.status.as_ref());
    let event = match result {
        Ok(Outcome {
            write: Some(w),
            suspended: false,
            ..
        }) if w.commit.is_some() => Some(Event {
            type_: EventType::Normal,
            reason: reason::UPDATED.into(),
            note: Some(format!(
                "{}: {} -> {} (commit {})",
                w.file,
                w.current_before,
                w.current_after,
                short(w.commit.as_deref().unwrap_or_default())
            )),
            action: "Commit".into(),
            secondary: None,
        }),
        Err(e) => {
            let message = e.to_string();
            let is_new = previous.is_none_or(|c| c.reason != e.reason() || c.message != message);
            is_new.then(|| Event {
                type_: EventType::Warning,
                reason: e.reason().into(),
                note: Some(message),
                action: "Reconcile".into(),
                secondary: None,
            })
        }
        _ => None,
    };
    if let Some(event) = event
        && let Err(e) = ctx
            .recorder
            .publish(&event, &super::object_ref(watch))
            .await
    {
        tracing::warn!(error = %e, "cannot publish Event");
    }
}

async fn report_undeserializable(
    ctx: &Context,
    invalid: &kube::core::error_boundary::InvalidObject,
) -> Result<(), ReconcileError> {
    let (Some(name), Some(namespace)) = (
        invalid.metadata.name.clone(),
        invalid.metadata.namespace.clone(),
    ) else {
        return Ok(());
    };
    let now = Time(jiff::Timestamp::now());
    let condition = status::ready_condition(
        false,
        reason::INVALID_SPEC,
        &format!(
            "the object does not match the ImageWatch schema: {}",
            invalid.error
        ),
        invalid.metadata.generation,
        &now,
    );
    let api: Api<ImageWatch> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = json!({
        "apiVersion": "imagewatch.dev/v1alpha1",
        "kind": "ImageWatch",
        "status": { "observedGeneration": invalid.metadata.generation, "conditions": [condition] },
    });
    let params = PatchParams::apply(imagewatch_crd::FIELD_MANAGER).force();
    match api
        .patch_status(&name, &params, &Patch::Apply(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
