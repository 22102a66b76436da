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
    index::{CredentialKey, Scan, ScanKey},
    parse_duration, secrets, status,
    writer::{WriteRequest, WriteResult},
};
use crate::{
    manifests::{ImageChange, TargetSpec, WorkloadTarget},
    policy::{self, TagPolicy},
    registry::{Credentials, RepositoryRef, TagSource, is_ecr_host},
    telemetry::{ReconcileLabels, RegistryLabels},
};

/// What a successful reconcile found and did.
#[derive(Debug)]
pub struct Outcome {
    latest: LatestImage,
    write: Option<WriteResult>,
    suspended: bool,
    /// Group members still missing a newer tag (`WaitingForGroup`).
    waiting: Option<String>,
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
            status::report_invalid_object::<ImageWatch>(&ctx.client, invalid).await?;
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

/// A watch validated, dereferenced and scanned (steps 1–3a): everything needed to choose and
/// check a tag.
struct Prepared<'w> {
    watch: &'w ImageWatch,
    namespace: String,
    policy: TagPolicy,
    order: policy::Order,
    repo: RepositoryRef,
    creds: Credentials,
    use_ecr: bool,
    scan: Arc<Scan>,
}

/// Steps 1–3a for one watch: validate its spec, read its registry credentials and get the
/// repository's shared scan.
async fn prepare<'w>(watch: &'w ImageWatch, ctx: &Context) -> Result<Prepared<'w>, ReconcileError> {
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
    let policy = TagPolicy::new(
        tags.pattern.as_deref().unwrap_or(""),
        tags.exclude.as_deref().unwrap_or(&[]),
        order,
        tags.extract.as_deref(),
    )
    .map_err(|e| ReconcileError::InvalidSpec(format!("spec.tags: {e}")))?;
    let Some(interval) = parse_duration(spec.interval_or_default()) else {
        return Err(ReconcileError::InvalidSpec(format!(
            "spec.interval {:?} is not a duration",
            spec.interval_or_default()
        )));
    };
    let repo = RepositoryRef::parse(&spec.image)
        .map_err(|e| ReconcileError::InvalidSpec(format!("spec.image: {e}")))?;
    let credentials = spec.credentials.clone().unwrap_or_default();
    // ECR is asked through its API (tags, digests and push times in one call) with the
    // operator's AWS identity, unless the watch brings a pull secret for it.
    let use_ecr = credentials.provider == Some(RegistryProvider::Aws)
        || (is_ecr_host(&repo.registry).is_some() && credentials.secret_ref.is_none());
    if use_ecr && is_ecr_host(&repo.registry).is_none() {
        return Err(ReconcileError::InvalidSpec(format!(
            "spec.credentials.provider aws needs an ECR image (<account>.dkr.ecr.<region>.amazonaws.com/…), not {}",
            repo.registry
        )));
    }

    // 2. dereference
    let creds = match &credentials.secret_ref {
        Some(secret) => {
            secrets::registry_credentials(&ctx.client, &namespace, &secret.name, &repo.registry)
                .await?
        }
        None => Credentials::Anonymous,
    };

    // 3a. the repository's shared scan
    let scan_key = ScanKey {
        registry: repo.registry.clone(),
        repository: repo.path.clone(),
        credentials: match (&credentials.secret_ref, use_ecr) {
            (_, true) => CredentialKey::Ambient,
            (Some(secret), false) => CredentialKey::Secret {
                namespace: namespace.clone(),
                name: secret.name.clone(),
            },
            (None, false) => CredentialKey::Anonymous,
        },
        // Registries other than ECR do not list push times; Newest needs them looked up.
        with_times: order == policy::Order::Newest && !use_ecr,
    };
    let scan = ctx
        .index
        .tags(&scan_key, interval, || async {
            if use_ecr {
                registry_call(ctx, &repo, ctx.ecr.list(&repo, &creds).await)
            } else if scan_key.with_times {
                registry_call(
                    ctx,
                    &repo,
                    ctx.registry.list_tags_with_times(&repo, &creds, None).await,
                )
                .map(|timed| timed.tags)
            } else {
                registry_call(ctx, &repo, ctx.registry.list_tags(&repo, &creds).await)
                    .map(|tags| tags.into_iter().map(policy::TagInfo::new).collect())
            }
        })
        .await
        .map_err(ReconcileError::from)?;
    Ok(Prepared {
        watch,
        namespace,
        policy,
        order,
        repo,
        creds,
        use_ecr,
        scan,
    })
}

impl Prepared<'_> {
    /// The digest of `tag`, once per scan; `None` when its manifest does not exist.
    async fn digest(&self, ctx: &Context, tag: &str) -> Result<Option<String>, ReconcileError> {
        let (repo, creds) = (&self.repo, &self.creds);
        Ok(self
            .scan
            .digest(tag, || async {
                if self.use_ecr {
                    registry_call(ctx, repo, ctx.ecr.digest(repo, tag, creds).await)
                } else {
                    registry_call(
                        ctx,
                        repo,
                        ctx.registry.manifest_digest(repo, tag, creds).await,
                    )
                }
            })
            .await?)
    }

    /// The tag the watch's own rules (or its pin) choose.
    fn own_choice(&self) -> Result<String, ReconcileError> {
        let spec = &self.watch.spec;
        if let Some(pin) = spec.pin.as_deref().filter(|p| !p.is_empty()) {
            return Ok(pin.to_string());
        }
        let tags = spec.tags.clone().unwrap_or_default();
        self.policy.select(&self.scan.tags).map(|t| t.tag.clone()).ok_or_else(|| {
            let pattern = tags.pattern.as_deref().unwrap_or("*");
            let matching = self.scan.tags.iter().filter(|t| self.policy.matches(&t.tag)).count();
            ReconcileError::NoMatchingTags(if matching == 0 {
                format!(
                    "none of the {} tags of {} matches pattern {pattern:?}",
                    self.scan.listed, spec.image
                )
            } else {
                format!(
                    "{matching} tags of {} match pattern {pattern:?} but none can be ordered by {:?} (e.g. not a version); set spec.tags.order or spec.tags.extract",
                    spec.image, self.order
                )
            })
        })
    }

    /// Confirms `tag` exists (never write a tag on a listing's word alone) and returns its
    /// digest.
    async fn confirmed_digest(&self, ctx: &Context, tag: &str) -> Result<String, ReconcileError> {
        let spec = &self.watch.spec;
        match self.digest(ctx, tag).await? {
            Some(d) => Ok(d),
            None if spec.pin.as_deref() == Some(tag) => Err(ReconcileError::PinnedTagNotFound(
                format!("spec.pin {tag:?} does not exist in {}", spec.image),
            )),
            None => Err(ReconcileError::NoMatchingTags(format!(
                "tag {tag} of {} is listed but its manifest does not exist",
                spec.image
            ))),
        }
    }

    /// The image reference to write for `tag`.
    fn image_for(&self, tag: &str, digest: &str) -> String {
        let spec = &self.watch.spec;
        match spec.digest.unwrap_or_default() {
            DigestMode::Tag => format!("{}:{}", spec.image, tag),
            DigestMode::Pin | DigestMode::Follow => format!("{}:{}@{}", spec.image, tag, digest),
        }
    }

    /// The write intent that sets this watch's target to `image`, at `git` (resolved here
    /// when not given).
    async fn write_request(
        &self,
        ctx: &Context,
        image: String,
        git: Option<GitLocation>,
    ) -> Result<WriteRequest, ReconcileError> {
        let watch = self.watch;
        let git = match git {
            Some(git) => git,
            None => resolve_git(watch, ctx).await?,
        };
        Ok(WriteRequest {
            url: git.url,
            branch: git.branch,
            auth: git.auth,
            target: target_spec(&watch.spec.target, &git.base_path, &watch.spec.image)
                .map_err(ReconcileError::InvalidSpec)?,
            change: ImageChange::Image(image),
            watch: format!("{}/{}", self.namespace, watch.name_any()),
            dry_run: watch.spec.is_suspended(),
            push_branch: git.push_branch.map(|template| {
                template
                    .replace("{namespace}", &self.namespace)
                    .replace("{name}", &watch.name_any())
            }),
        })
    }
}

/// Steps 1–4.
async fn reconcile_watch(watch: &ImageWatch, ctx: &Context) -> Result<Outcome, ReconcileError> {
    // Where to write first: a missing or wrong Git location is reported before any registry
    // verdict.
    let git = resolve_git(watch, ctx).await?;
    let me = prepare(watch, ctx).await?;
    let spec = &watch.spec;

    // 3b. select: the watch's own choice, or its group's.
    let group = match spec.group.as_deref().filter(|g| !g.is_empty()) {
        Some(group) => Some(group_choice(&me, group, ctx).await?),
        None => None,
    };
    let tag = match &group {
        Some(g) => g.tag.clone(),
        None => me.own_choice()?,
    };
    let digest = me.confirmed_digest(ctx, &tag).await?;
    let latest = LatestImage {
        tag: tag.clone(),
        digest: Some(digest.clone()),
        pushed_at: me
            .scan
            .tags
            .iter()
            .find(|t| t.tag == tag)
            .and_then(|t| t.pushed_at)
            .map(Time),
    };

    // 4. write: a group writes every member at once, so the batching writer makes one commit.
    let mine = me
        .write_request(ctx, me.image_for(&tag, &digest), Some(git))
        .await?;
    let write = match &group {
        Some(g) if !g.others.is_empty() => {
            let mut requests = vec![mine];
            requests.extend(g.others.iter().cloned());
            let results =
                futures::future::join_all(requests.into_iter().map(|r| ctx.writer.apply(r))).await;
            let mut results = results.into_iter();
            let own = results
                .next()
                .unwrap_or_else(|| Err(ReconcileError::Internal("no write result".into())))?;
            for other in results {
                if let Err(e) = other {
                    tracing::warn!(watch = %watch.name_any(), error = %e, "a group member's write failed");
                }
            }
            own
        }
        _ => ctx.writer.apply(mine).await?,
    };
    if write.commit.is_some()
        && let Some(since) = ctx.pending.take(&me.repo.registry, &me.repo.path)
    {
        ctx.metrics
            .push_to_commit_seconds
            .observe(since.elapsed().as_secs_f64());
    }
    Ok(Outcome {
        latest,
        write: Some(write),
        suspended: spec.is_suspended(),
        waiting: group.and_then(|g| g.waiting),
    })
}

/// What a group decided for one reconcile.
struct GroupChoice {
    /// The tag every member runs.
    tag: String,
    /// Write intents for the other members (same tag).
    others: Vec<WriteRequest>,
    /// Who lacks a newer tag, when some member has one.
    waiting: Option<String>,
}

/// The group's tag: the best tag every member has (see `group::decide`), with the other
/// members' write intents for it.
async fn group_choice(
    me: &Prepared<'_>,
    group: &str,
    ctx: &Context,
) -> Result<GroupChoice, ReconcileError> {
    let store = ctx
        .store
        .get()
        .ok_or_else(|| ReconcileError::Internal("watch store not ready".into()))?;
    let peers: Vec<Arc<DeserializeGuard<ImageWatch>>> = store.state();
    let mut others: Vec<&ImageWatch> = peers
        .iter()
        .filter_map(|g| g.0.as_ref().ok())
        .filter(|w| {
            w.namespace().as_deref() == Some(me.namespace.as_str())
                && w.spec.group.as_deref() == Some(group)
                && w.name_any() != me.watch.name_any()
                && w.metadata.deletion_timestamp.is_none()
        })
        .collect();
    others.sort_by_key(|w| w.name_any());
    let mut prepared = Vec::new();
    for other in &others {
        match prepare(other, ctx).await {
            Ok(p) => prepared.push(p),
            Err(e) => {
                return Err(ReconcileError::WaitingForGroup(format!(
                    "group {group}: member {} is not usable: {e}",
                    other.name_any()
                )));
            }
        }
    }
    let names: Vec<String> = std::iter::once(me)
        .chain(prepared.iter())
        .map(|p| p.watch.name_any())
        .collect();
    let members: Vec<super::group::Member<'_>> = std::iter::once(me)
        .chain(prepared.iter())
        .zip(&names)
        .map(|(p, name)| super::group::Member {
            name,
            policy: &p.policy,
            tags: &p.scan.tags,
        })
        .collect();
    let decision = super::group::decide(&members);
    let Some(tag) = decision.tag.clone() else {
        return Err(ReconcileError::WaitingForGroup(
            super::group::waiting_message(group, &decision),
        ));
    };
    let waiting =
        (!decision.waiting_for.is_empty()).then(|| super::group::waiting_message(group, &decision));
    let mut requests = Vec::new();
    for p in &prepared {
        let digest = p.confirmed_digest(ctx, &tag).await.map_err(|e| {
            ReconcileError::WaitingForGroup(format!(
                "group {group}: member {}: {e}",
                p.watch.name_any()
            ))
        })?;
        requests.push(
            p.write_request(ctx, p.image_for(&tag, &digest), None)
                .await?,
        );
    }
    Ok(GroupChoice {
        tag,
        others: requests,
        waiting,
    })
}

/// Where to write: the repository, branch, credentials and the base path target paths are
/// relative to.
struct GitLocation {
    url: String,
    branch: String,
    auth: crate::git::GitAuth,
    base_path: String,
    push_branch: Option<String>,
}

/// The place in Git a watch's target names, with paths under `base_path` (pure).
pub fn target_spec(
    target: &imagewatch_crd::Target,
    base_path: &str,
    image: &str,
) -> Result<TargetSpec, String> {
    let set = [
        target.workload.is_some(),
        target.kustomize.is_some(),
        target.helm.is_some(),
        target.argocd_source.is_some(),
    ];
    if set.iter().filter(|s| **s).count() != 1 {
        return Err(
            "spec.target: exactly one of workload, kustomize, helm, argocdSource must be set"
                .into(),
        );
    }
    if let Some(w) = &target.workload {
        return Ok(TargetSpec::Workload {
            path: join_path(base_path, &w.path),
            target: WorkloadTarget {
                kind: w.kind.clone(),
                name: w.name.clone(),
                container: w.container.clone(),
                namespace: w.namespace.clone(),
            },
        });
    }
    if let Some(k) = &target.kustomize {
        return Ok(TargetSpec::Kustomize {
            path: join_path(base_path, &k.path),
            image: k.image.clone().unwrap_or_else(|| image.to_string()),
        });
    }
    if let Some(h) = &target.helm {
        return Ok(TargetSpec::Helm {
            file: join_path(base_path, &h.file),
            key: h.tag.clone(),
        });
    }
    if let Some(a) = &target.argocd_source {
        return Ok(TargetSpec::ArgocdSource {
            path: join_path(base_path, &a.path),
            application: a.application.clone(),
            image: a.image.clone().unwrap_or_else(|| image.to_string()),
        });
    }
    Err("spec.target is empty".into())
}

/// `spec.git`, or the Argo CD Application managing the watch.
async fn resolve_git(watch: &ImageWatch, ctx: &Context) -> Result<GitLocation, ReconcileError> {
    let namespace = watch.namespace().unwrap_or_default();
    if let Some(git) = &watch.spec.git {
        let auth = match &git.secret_ref {
            Some(secret) => secrets::git_credentials(ctx, &namespace, &secret.name).await?,
            None => crate::git::GitAuth::Anonymous,
        };
        return Ok(GitLocation {
            url: git.url.clone(),
            branch: git.branch().to_string(),
            auth,
            base_path: String::new(),
            push_branch: git.push_branch.clone(),
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
        Some(name) => secrets::git_credentials(ctx, &namespace, &name).await?,
        None => crate::git::GitAuth::Anonymous,
    };
    Ok(GitLocation {
        url: source.repo_url,
        branch: source.branch,
        auth,
        base_path: source.path,
        push_branch: None,
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
            if let Some(message) = &outcome.waiting {
                status::ready_condition(false, reason::WAITING_FOR_GROUP, message, generation, now)
            } else if outcome.suspended {
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
