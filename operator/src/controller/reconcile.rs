//! One reconcile of one `ImageWatch`, top to bottom:
//!
//! 1. validate (pure): tag rules, interval, target kind;
//! 2. dereference (I/O): registry credentials, tag list;
//! 3. select (pure): the tag to run; then confirm it exists (manifest HEAD);
//! 4. write: read the target's current image from Git, commit and push when it differs;
//! 5. status: `latest`, `applied`, `Ready`, Events and metrics — patched only when changed.
//!
//! A pattern image (`*` path segments, see `members.rs`) runs steps 2–4 once per matching
//! repository of the registry, listed through the index, and hands every member's write
//! intent to the writer at once; step 5 reports each member and an aggregated `Ready`.

use std::{sync::Arc, time::Duration};

use futures::StreamExt as _;
use imagewatch_crd::{
    AppliedImage, DigestMode, ImageWatch, ImageWatchStatus, LatestImage, RegistryProvider,
    TagOrder, TagPick, conditions::reason,
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
    index::{CatalogKey, CredentialKey, Scan, ScanKey},
    members::{self, MemberResult, PatternImage, PatternOutcome},
    parse_duration, secrets, status, watch_pr,
    writer::{WriteRequest, WriteResult},
};
use crate::{
    manifests::{EditOptions, ImageChange, TargetSpec, WorkloadTarget},
    policy::{self, TagPolicy},
    registry::{Credentials, RegistryError, RepositoryRef, TagSource, is_ecr_host},
    telemetry::ReconcileLabels,
};

/// Members of a pattern watch scanned at the same time.
const MEMBER_CONCURRENCY: usize = 8;

/// What a successful reconcile of a watch of one repository found and did.
#[derive(Debug)]
pub struct Outcome {
    latest: LatestImage,
    write: Option<WriteResult>,
    suspended: bool,
    /// Group members still missing a newer tag (`WaitingForGroup`).
    waiting: Option<String>,
    /// With `spec.verify`: the newest better tag refused for its signature.
    refused: Option<Box<crate::signature::Refused>>,
    /// With `spec.git.pullRequest`: what was done with the pull request.
    pull_request: Option<watch_pr::Delivered>,
}

/// What a successful reconcile found and did.
// One value per reconcile, moved once into the status: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Reconciled {
    /// A watch of one repository.
    Single(Outcome),
    /// A pattern watch: one result per matching repository.
    Pattern(PatternOutcome),
}

impl Reconciled {
    /// The `outcome` label of `imagewatch_reconciles_total`.
    fn metric_label(&self) -> &'static str {
        match self {
            Reconciled::Single(_) => "ok",
            Reconciled::Pattern(p) if p.members.is_empty() => "no_matching_repositories",
            Reconciled::Pattern(p) if p.members.iter().any(|m| m.outcome.is_err()) => {
                "members_not_ready"
            }
            Reconciled::Pattern(_) => "ok",
        }
    }
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
    // HA: only the replica holding the shard of the watch's Git repository works on it (and
    // holds the shard until the status is written).
    let _shard = match &ctx.shards {
        None => None,
        Some(_) => match ctx.enter_shard(&shard_key(watch, &ctx).await) {
            Some(guard) => guard,
            None => return Ok(Action::requeue(interval)),
        },
    };
    if watch.metadata.deletion_timestamp.is_some() {
        return finalize(watch, &ctx).await;
    }
    ctx.with_work_slot(reconcile_holding_slot(watch, key, interval, &ctx))
        .await
}

/// A deleted watch with [`watch_pr::FINALIZER`]: close its recorded open pull request, then
/// let it go. A forge that fails is retried with backoff for up to ten minutes after the
/// deletion; then the pull request is left open (said in an Event).
async fn finalize(watch: &ImageWatch, ctx: &Context) -> Result<Action, ReconcileError> {
    if !watch_pr::has_finalizer(watch) {
        return Ok(Action::await_change());
    }
    let recorded: Vec<imagewatch_crd::WatchPullRequest> =
        watch_pr::open_records(watch.status.as_ref())
            .into_iter()
            .cloned()
            .collect();
    if recorded.is_empty() {
        watch_pr::remove_finalizer(&ctx.client, watch).await?;
        return Ok(Action::await_change());
    }
    let pr = recorded
        .iter()
        .map(|r| format!("#{} {}", r.number, r.url))
        .collect::<Vec<_>>()
        .join(", ");
    let mut result = Ok(false);
    for record in &recorded {
        match watch_pr::close_on_delete(watch, record, ctx).await {
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
        .publish(&event, &super::object_ref(watch))
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
            watch_pr::remove_finalizer(&ctx.client, watch).await?;
            Ok(Action::await_change())
        }
    }
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
    let result = reconcile_watch(watch, ctx).await;
    let outcome_label = match &result {
        Ok(reconciled) => reconciled.metric_label(),
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
    publish_events(watch, &result, &new_status, ctx).await;
    // The finalizer goes once no open pull request is recorded (after a successful step).
    if result.is_ok()
        && watch_pr::has_finalizer(watch)
        && watch_pr::open_records(Some(&new_status)).is_empty()
    {
        watch_pr::remove_finalizer(&ctx.client, watch).await?;
    }
    patch_status_if_changed(watch, new_status, ctx).await?;

    tracing::debug!(watch = %watch.name_any(), elapsed_ms = started.elapsed().as_millis() as u64, outcome = outcome_label, "reconciled");
    match result {
        // Members that failed for a passing reason (registry, Git) are retried with backoff,
        // without holding back the others.
        Ok(Reconciled::Pattern(p)) if p.has_transient_failure() => {
            Ok(Action::requeue(ctx.backoff(key, interval).await))
        }
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

/// What every repository a watch follows shares: its tag rules, interval and registry
/// credentials (steps 1–2).
struct Rules {
    namespace: String,
    policy: TagPolicy,
    order: policy::Order,
    interval: Duration,
    creds: Credentials,
    use_ecr: bool,
    credential_key: CredentialKey,
}

/// A watch validated, dereferenced and scanned (steps 1–3a) for one repository: everything
/// needed to choose and check a tag.
struct Prepared<'w> {
    watch: &'w ImageWatch,
    rules: Arc<Rules>,
    repo: RepositoryRef,
    /// The image written: `spec.image`, or one member of a pattern.
    image: String,
    /// Where it is written: `spec.target`, or its expansion for one member of a pattern.
    target: imagewatch_crd::Target,
    scan: Arc<Scan>,
    scan_key: ScanKey,
}

/// Step 1 (pure): the tag rules and the interval.
fn validate_rules(
    watch: &ImageWatch,
) -> Result<(TagPolicy, policy::Order, Duration), ReconcileError> {
    let spec = &watch.spec;
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
    .and_then(|policy| match tags.pick.unwrap_or_default() {
        TagPick::Highest => Ok(policy),
        TagPick::Lowest => policy.prefer_least(),
    })
    .map_err(|e| ReconcileError::InvalidSpec(format!("spec.tags: {e}")))?;
    let Some(interval) = parse_duration(spec.interval_or_default()) else {
        return Err(ReconcileError::InvalidSpec(format!(
            "spec.interval {:?} is not a duration",
            spec.interval_or_default()
        )));
    };
    Ok((policy, order, interval))
}

/// Whether a watch in `namespace` reads `registry` through the ECR API, and with which
/// credentials. ECR is asked through its API (tags, digests and push times in one call) with
/// the operator's AWS identity, unless the watch brings a pull secret for it.
fn credential_choice(
    credentials: &imagewatch_crd::RegistryCredentials,
    namespace: &str,
    registry: &str,
) -> (bool, CredentialKey) {
    let use_ecr = credentials.provider == Some(RegistryProvider::Aws)
        || (is_ecr_host(registry).is_some() && credentials.secret_ref.is_none());
    let key = match (&credentials.secret_ref, use_ecr) {
        (_, true) => CredentialKey::Ambient,
        (Some(secret), false) => CredentialKey::Secret {
            namespace: namespace.to_string(),
            name: secret.name.clone(),
        },
        (None, false) => CredentialKey::Anonymous,
    };
    (use_ecr, key)
}

/// Which credentials a watch of one repository reads its registry with, and that
/// repository, from its spec alone (no Secret is read). None for pattern watches and
/// images that do not parse.
pub(super) fn credential_key_of(watch: &ImageWatch) -> Option<(CredentialKey, RepositoryRef)> {
    if watch.spec.is_pattern() {
        return None;
    }
    let repo = RepositoryRef::parse(&watch.spec.image).ok()?;
    let credentials = watch.spec.credentials.clone().unwrap_or_default();
    let namespace = watch.namespace().unwrap_or_default();
    let (_, key) = credential_choice(&credentials, &namespace, &repo.registry);
    Some((key, repo))
}

/// Steps 1–2 for a watch of `registry`: the validated rules and the registry credentials.
async fn rules(
    watch: &ImageWatch,
    ctx: &Context,
    registry: &str,
    (policy, order, interval): (TagPolicy, policy::Order, Duration),
) -> Result<Rules, ReconcileError> {
    let namespace = watch.namespace().unwrap_or_default();
    let credentials = watch.spec.credentials.clone().unwrap_or_default();
    let (use_ecr, credential_key) = credential_choice(&credentials, &namespace, registry);
    if use_ecr && is_ecr_host(registry).is_none() {
        return Err(ReconcileError::InvalidSpec(format!(
            "spec.credentials.provider aws needs an ECR image (<account>.dkr.ecr.<region>.amazonaws.com/…), not {registry}"
        )));
    }

    // 2. dereference
    let creds = match &credentials.secret_ref {
        Some(secret) => {
            secrets::registry_credentials(ctx, &namespace, &secret.name, registry).await?
        }
        None => Credentials::Anonymous,
    };
    if !use_ecr {
        ctx.expect_repositories(&credential_key, registry, &creds)
            .await;
    }
    Ok(Rules {
        namespace,
        policy,
        order,
        interval,
        creds,
        use_ecr,
        credential_key,
    })
}

/// Steps 1–3a for one watch: validate its spec, read its registry credentials and get the
/// repository's shared scan.
async fn prepare<'w>(watch: &'w ImageWatch, ctx: &Context) -> Result<Prepared<'w>, ReconcileError> {
    let spec = &watch.spec;
    let validated = validate_rules(watch)?;
    let repo = RepositoryRef::parse(&spec.image)
        .map_err(|e| ReconcileError::InvalidSpec(format!("spec.image: {e}")))?;
    let rules = Arc::new(rules(watch, ctx, &repo.registry, validated).await?);
    scan_repository(
        watch,
        ctx,
        rules,
        repo,
        spec.image.clone(),
        spec.target.clone(),
    )
    .await
}

/// Step 3a: the repository's shared scan.
async fn scan_repository<'w>(
    watch: &'w ImageWatch,
    ctx: &Context,
    rules: Arc<Rules>,
    repo: RepositoryRef,
    image: String,
    target: imagewatch_crd::Target,
) -> Result<Prepared<'w>, ReconcileError> {
    let scan_key = ScanKey {
        registry: repo.registry.clone(),
        repository: repo.path.clone(),
        credentials: rules.credential_key.clone(),
        // Registries other than ECR do not list push times; Newest needs them looked up.
        with_times: rules.order == policy::Order::Newest && !rules.use_ecr,
    };
    let creds = &rules.creds;
    let newest = rules.order == policy::Order::Newest;
    if newest {
        restore_appearance(watch, ctx, &scan_key);
    }
    let scan = ctx
        .index
        .tags(&scan_key, rules.interval, || async {
            let listed = if rules.use_ecr {
                ctx.ecr.list(&repo, creds).await
            } else if scan_key.with_times {
                ctx.registry
                    .list_tags_with_times(&repo, creds, None)
                    .await
                    .map(|timed| timed.tags)
            } else {
                ctx.registry
                    .list_tags(&repo, creds)
                    .await
                    .map(|tags| tags.into_iter().map(policy::TagInfo::new).collect())
            };
            // Newest orders by when each tag appeared, not by its image's time.
            if newest {
                listed.map(|tags| {
                    ctx.appearances
                        .observe(&scan_key, tags, jiff::Timestamp::now())
                })
            } else {
                listed
            }
        })
        .await
        .map_err(ReconcileError::from)?;
    Ok(Prepared {
        watch,
        rules,
        repo,
        image,
        target,
        scan,
        scan_key,
    })
}

/// Gives the ledger the appearance time of the watch's `status.latest` tag, which a restart
/// would otherwise lose; when that changes the ledger, the repository's scan is made again.
fn restore_appearance(watch: &ImageWatch, ctx: &Context, key: &ScanKey) {
    let Some(latest) = watch.status.as_ref().and_then(|s| s.latest.as_ref()) else {
        return;
    };
    let Some(Time(at)) = latest.appeared_at.clone() else {
        return;
    };
    if ctx.appearances.restore(key, &latest.tag, at) {
        ctx.index.invalidate(&key.registry, &key.repository);
    }
}

impl Prepared<'_> {
    /// The digest of `tag`, once per scan; `None` when its manifest does not exist.
    async fn digest(&self, ctx: &Context, tag: &str) -> Result<Option<String>, ReconcileError> {
        let (repo, creds) = (&self.repo, &self.rules.creds);
        Ok(self
            .scan
            .digest(tag, || async {
                if self.rules.use_ecr {
                    ctx.ecr.digest(repo, tag, creds).await
                } else {
                    ctx.registry.manifest_digest(repo, tag, creds).await
                }
            })
            .await?)
    }

    /// The digest to write for the watch's own choice `tag`, if one is needed. Writing
    /// `image:tag` needs none: the scan's listing of `tag` already proves it exists, so no
    /// manifest request is made. A pinned or followed digest, and a tag the listing does not
    /// hold, go to the registry ([`Self::confirmed_digest`]).
    async fn digest_to_write(
        &self,
        ctx: &Context,
        tag: &str,
    ) -> Result<Option<String>, ReconcileError> {
        let mode = self.watch.spec.digest.unwrap_or_default();
        if mode == DigestMode::Tag
            && let Some(listed) = self.scan.tags.iter().find(|t| t.tag == tag)
        {
            // The digest the listing carried (ECR), if any, costs nothing.
            return Ok(listed.digest.clone());
        }
        self.confirmed_digest(ctx, tag).await.map(Some)
    }

    /// `status.latest` for `tag`: under `Newest`, when the tag appeared and how that is
    /// known; otherwise the time the registry lists, if any.
    fn latest(&self, ctx: &Context, tag: &str, digest: Option<&str>) -> LatestImage {
        let listed = self
            .scan
            .tags
            .iter()
            .find(|t| t.tag == tag)
            .and_then(|t| t.pushed_at);
        let appeared = (self.rules.order == policy::Order::Newest)
            .then(|| ctx.appearances.get(&self.scan_key, tag))
            .flatten();
        match appeared {
            Some(appeared) => LatestImage {
                tag: tag.to_owned(),
                digest: digest.map(str::to_owned),
                pushed_at: None,
                appeared_at: appeared.at.map(Time),
                appeared_from: Some(appeared.source.as_str().to_owned()),
            },
            None => LatestImage {
                tag: tag.to_owned(),
                digest: digest.map(str::to_owned),
                pushed_at: listed.map(Time),
                appeared_at: None,
                appeared_from: None,
            },
        }
    }

    /// The tag the watch's own rules (or its pin) choose.
    fn own_choice(&self) -> Result<String, ReconcileError> {
        let spec = &self.watch.spec;
        if let Some(pin) = spec.pin.as_deref().filter(|p| !p.is_empty()) {
            return Ok(pin.to_string());
        }
        let tags = spec.tags.clone().unwrap_or_default();
        let policy = &self.rules.policy;
        policy.select(&self.scan.tags).map(|t| t.tag.clone()).ok_or_else(|| {
            let pattern = tags.pattern.as_deref().unwrap_or("*");
            let matching = self.scan.tags.iter().filter(|t| policy.matches(&t.tag)).count();
            ReconcileError::NoMatchingTags(if matching == 0 {
                format!(
                    "none of the {} tags of {} matches pattern {pattern:?}",
                    self.scan.listed, self.image
                )
            } else {
                format!(
                    "{matching} tags of {} match pattern {pattern:?} but none can be ordered by {:?} (e.g. not a version); set spec.tags.order or spec.tags.extract",
                    self.image, self.rules.order
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
                format!("spec.pin {tag:?} does not exist in {}", self.image),
            )),
            None => Err(ReconcileError::NoMatchingTags(format!(
                "tag {tag} of {} is listed but its manifest does not exist",
                self.image
            ))),
        }
    }

    /// The signature verdict on `digest`, counted in `imagewatch_signature_checks_total`.
    async fn verdict(
        &self,
        ctx: &Context,
        keys: &VerifyKeys,
        digest: &str,
    ) -> Result<crate::signature::Verdict, ReconcileError> {
        let creds = self.signature_credentials(ctx).await?;
        let result = crate::signature::fetch::check(
            &ctx.registry,
            &ctx.signatures,
            &keys.cache_key,
            &self.repo,
            digest,
            &creds,
            &keys.keys,
        )
        .await;
        count_signature_check(
            ctx,
            "ImageWatch",
            result.as_ref().map_or("error", |v| v.outcome()),
        );
        Ok(result?)
    }

    /// The credentials signatures are read with: the watch's own, or for ECR reached through
    /// the operator's AWS identity, the registry token that identity is issued (signatures
    /// are not in the ECR API; the same identity reads them through the registry API).
    async fn signature_credentials(&self, ctx: &Context) -> Result<Credentials, ReconcileError> {
        if !self.rules.use_ecr {
            return Ok(self.rules.creds.clone());
        }
        let creds = ctx.ecr.registry_credentials(&self.repo.registry).await;
        Ok(creds?)
    }

    /// The tag to write, its digest and (with `spec.verify`) the newest better tag refused
    /// for its signature: see [`verify_mode`]. `group_tag` is what the watch's group chose.
    async fn choose(
        &self,
        ctx: &Context,
        verify: Option<&VerifyKeys>,
        group_tag: Option<&str>,
    ) -> Result<(String, Option<String>, Option<crate::signature::Refused>), ReconcileError> {
        let pinned = self
            .watch
            .spec
            .pin
            .as_deref()
            .is_some_and(|p| !p.is_empty());
        let mode = verify_mode(verify.is_some(), pinned, group_tag.is_some());
        if let (VerifyMode::NewestVerified, Some(keys)) = (mode, verify) {
            let (tag, digest, refused) = self.verified_choice(ctx, keys).await?;
            return Ok((tag, Some(digest), refused));
        }
        let tag = match group_tag {
            Some(tag) => tag.to_string(),
            None => self.own_choice()?,
        };
        if mode == VerifyMode::Off {
            // The watch's own choice needs a manifest request only where a digest is written
            // or the listing does not hold it; a group's tag is confirmed in every member.
            let digest = match group_tag {
                Some(_) => Some(self.confirmed_digest(ctx, &tag).await?),
                None => self.digest_to_write(ctx, &tag).await?,
            };
            return Ok((tag, digest, None));
        }
        let digest = self.confirmed_digest(ctx, &tag).await?;
        if let (VerifyMode::ThisTag, Some(keys)) = (mode, verify) {
            let verdict = self.verdict(ctx, keys, &digest).await?;
            let decision = crate::signature::decide(&[(tag.clone(), digest.clone(), verdict)]);
            if let Some(first) = decision.refused.into_iter().next() {
                return Err(ReconcileError::Signature(Box::new(first)));
            }
        }
        Ok((tag, Some(digest), None))
    }

    /// With `spec.verify`: the best candidate whose signature verifies, its digest, and the
    /// newest better candidate refused (see `signature::decide`).
    async fn verified_choice(
        &self,
        ctx: &Context,
        keys: &VerifyKeys,
    ) -> Result<(String, String, Option<crate::signature::Refused>), ReconcileError> {
        let ranked = self.rules.policy.ranked(&self.scan.tags, VERIFY_CANDIDATES);
        if ranked.is_empty() {
            self.own_choice()?;
        }
        let mut checked = Vec::new();
        for candidate in &ranked {
            let Some(digest) = self.digest(ctx, &candidate.tag).await? else {
                continue;
            };
            let verdict = self.verdict(ctx, keys, &digest).await?;
            let verified = matches!(verdict, crate::signature::Verdict::Verified { .. });
            checked.push((candidate.tag.clone(), digest, verdict));
            if verified {
                break;
            }
        }
        let decision = crate::signature::decide(&checked);
        let newest_refused = decision.refused.into_iter().next();
        match decision.chosen {
            Some((tag, digest)) => Ok((tag, digest, newest_refused)),
            None => match newest_refused {
                Some(refused) => Err(ReconcileError::Signature(Box::new(refused))),
                None => Err(ReconcileError::NoMatchingTags(format!(
                    "no candidate tag of {} has a manifest",
                    self.image
                ))),
            },
        }
    }

    /// The image reference to write for `tag` (`digest` is required to pin or follow it).
    fn image_for(&self, tag: &str, digest: Option<&str>) -> Result<String, ReconcileError> {
        match (self.watch.spec.digest.unwrap_or_default(), digest) {
            (DigestMode::Tag, _) => Ok(format!("{}:{}", self.image, tag)),
            (DigestMode::Pin | DigestMode::Follow, Some(digest)) => {
                Ok(format!("{}:{}@{}", self.image, tag, digest))
            }
            (DigestMode::Pin | DigestMode::Follow, None) => Err(ReconcileError::Internal(format!(
                "no digest of {}:{tag} to write",
                self.image
            ))),
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
            target: target_spec(&self.target, &git.base_path, &self.image)
                .map_err(ReconcileError::InvalidSpec)?,
            change: ImageChange::Image(image),
            edit: EditOptions {
                edit_shared_anchor: watch.spec.edit_shared_anchor.unwrap_or(false),
            },
            watch: format!("{}/{}", self.rules.namespace, watch.name_any()),
            dry_run: watch.spec.is_suspended(),
            push_branch: git.push_branch.map(|template| {
                template
                    .replace("{namespace}", &self.rules.namespace)
                    .replace("{name}", &watch.name_any())
            }),
        })
    }
}

/// Steps 1–4, for one repository or for every member of a pattern.
async fn reconcile_watch(watch: &ImageWatch, ctx: &Context) -> Result<Reconciled, ReconcileError> {
    check_registry_allowed(watch, ctx).await?;
    match members::parse_pattern_image(&watch.spec.image) {
        Ok(None) => reconcile_single(watch, ctx).await.map(Reconciled::Single),
        Ok(Some(pattern)) => reconcile_pattern(watch, &pattern, ctx)
            .await
            .map(Reconciled::Pattern),
        Err(message) => Err(ReconcileError::InvalidSpec(message)),
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
        return Err(ReconcileError::InvalidSpec(format!(
            "spec.group cannot be used with a pattern image ({}): a pattern already writes all its repositories together",
            spec.image
        )));
    }
    members::check_references(&spec.target, &spec.image, pattern.wildcards())
        .map_err(ReconcileError::InvalidSpec)?;
    let git = resolve_git(watch, ctx).await?;
    let validated = validate_rules(watch)?;
    let rules = Arc::new(rules(watch, ctx, &pattern.registry, validated).await?);
    // With spec.verify: every member's tag is verified in its own repository, with one key set.
    let verify = verify_keys(watch, &rules, ctx).await?;

    // Members: the registry's repositories matching the pattern.
    let catalog_key = CatalogKey {
        registry: pattern.registry.clone(),
        credentials: rules.credential_key.clone(),
    };
    let catalog = ctx
        .index
        .repositories(&catalog_key, rules.interval, || async {
            if rules.use_ecr {
                ctx.ecr.list_repositories(&pattern.registry, "").await
            } else {
                ctx.registry
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
                ctx,
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
                result.outcome = Err(ReconcileError::InvalidSpec(format!(
                    "its target is also {}'s: use $1..${} in spec.target so every repository has its own",
                    names[other],
                    pattern.wildcards()
                )));
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
        .filter(|_| !spec.is_suspended());
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
                    "spec.git.pullRequest needs a spec.git.pushBranch other than spec.git.branch"
                        .into(),
                ));
            };
            if per_member {
                request.push_branch = Some(watch_pr::member_push_branch(
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
    let writes = ctx
        .without_work_slot(futures::future::join_all(
            requests.into_iter().map(|r| ctx.writer.apply(r)),
        ))
        .await;
    for (&i, write) in indices.iter().zip(writes) {
        if write.as_ref().is_ok_and(|w| w.commit.is_some())
            && let Some(since) = ctx.pending.take(&pattern.registry, &results[i].repository)
        {
            ctx.metrics
                .push_to_commit_seconds
                .observe(since.as_secs_f64());
        }
        results[i].outcome = write;
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
            ctx,
        )
        .await?;
    }
    Ok(PatternOutcome {
        image: spec.image.clone(),
        listed: catalog.repositories.len(),
        members: results,
        suspended: spec.is_suspended(),
        pull_request,
    })
}

/// `spec.git.pullRequest` of a pattern watch, after its members' push branches were written:
/// one pull request per member (`perMember`, default) or one for all. Each member's result
/// becomes what `branch` holds (a dry run there), as for a watch of one repository.
#[allow(clippy::too_many_arguments)]
async fn pattern_pull_requests(
    watch: &ImageWatch,
    settings: &imagewatch_crd::GitPullRequest,
    forge_url: &str,
    per_member: bool,
    results: &mut [MemberResult],
    indices: &[usize],
    on_base: Vec<WriteRequest>,
    heads: &[Option<String>],
    ctx: &Context,
) -> Result<Option<watch_pr::Delivered>, ReconcileError> {
    let forge = watch_pr::client(watch, settings, forge_url, ctx).await?;
    let bases = ctx
        .without_work_slot(futures::future::join_all(
            on_base.into_iter().map(|r| ctx.writer.apply(r)),
        ))
        .await;
    let watch_name = format!(
        "{}/{}",
        watch.namespace().unwrap_or_default(),
        watch.name_any()
    );
    // (member index, push branch, write on the push branch, what `branch` holds).
    let mut written = Vec::new();
    for ((k, &i), base) in indices.iter().enumerate().zip(bases) {
        let Ok(write) = &results[i].outcome else {
            continue;
        };
        match base {
            Ok(base) => {
                written.push((i, heads[k].clone().unwrap_or_default(), write.clone(), base))
            }
            Err(e) => results[i].outcome = Err(e),
        }
    }
    let vars_of = |write: &WriteResult, base: &WriteResult| watch_pr::TextVars {
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
            match d {
                Ok(d) => {
                    results[i].outcome = Ok(base);
                    results[i].pull_request = Some(d);
                }
                Err(e) => results[i].outcome = Err(e),
            }
        }
        return Ok(None);
    }
    let Some((_, head, first_write, first_base)) = written.first() else {
        return Ok(None);
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
    let mut vars = watch_pr::group_vars(
        watch_pr::TextVars {
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
        results[i].outcome = Ok(base);
    }
    Ok(Some(delivered))
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

/// Steps 2–3 for one member: scan, select (with `spec.verify`, the newest tag verified in
/// this member's repository), confirm; then its write intent. Failures are the member's,
/// not the watch's.
async fn plan_member(
    watch: &ImageWatch,
    ctx: &Context,
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
        outcome: Err(ReconcileError::Internal("not reconciled".into())),
    };
    let repo = RepositoryRef {
        registry: pattern.registry.clone(),
        path: repository.clone(),
    };
    let target = members::expand_target(&watch.spec.target, &captures);
    let planned = async {
        let me = scan_repository(
            watch,
            ctx,
            rules.clone(),
            repo,
            pattern.member_image(&repository),
            target,
        )
        .await?;
        let (tag, digest, refused) = me.choose(ctx, verify, None).await?;
        result.latest = Some(tag.clone());
        result.refused = refused;
        me.write_request(
            ctx,
            me.image_for(&tag, digest.as_deref())?,
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

/// A failed repository listing: "this registry does not list repositories to us" is a
/// condition of its own; anything else is a registry error, retried.
fn catalog_error(error: RegistryError, pattern: &PatternImage, ecr: bool) -> ReconcileError {
    let unlisted = matches!(
        &error,
        RegistryError::NotFound { .. }
            | RegistryError::Unauthorized { .. }
            | RegistryError::Server {
                status: 405 | 501,
                ..
            }
    );
    match (unlisted, ecr) {
        (true, true) => ReconcileError::CatalogUnavailable(format!(
            "cannot list the repositories of {} for pattern {} (ecr:DescribeRepositories: {error}); allow ecr:DescribeRepositories to the operator's AWS identity",
            pattern.registry, pattern.pattern
        )),
        (true, false) => ReconcileError::CatalogUnavailable(format!(
            "registry {} does not list its repositories to these credentials (GET /v2/_catalog: {error}); a pattern image needs a registry that serves the catalog, or ECR",
            pattern.registry
        )),
        (false, _) => ReconcileError::Registry(error),
    }
}

/// Steps 1–4 for a watch of one repository.
async fn reconcile_single(watch: &ImageWatch, ctx: &Context) -> Result<Outcome, ReconcileError> {
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
    // With spec.verify: only a tag whose signature verifies is written.
    let verify = verify_keys(watch, &me.rules, ctx).await?;
    let (tag, digest, refused) = me
        .choose(ctx, verify.as_ref(), group.as_ref().map(|g| g.tag.as_str()))
        .await?;
    let latest = me.latest(ctx, &tag, digest.as_deref());

    // 4. write: a group writes every member at once, so the batching writer makes one commit.
    let pr_settings = spec
        .git
        .as_ref()
        .and_then(|g| g.pull_request.clone())
        .filter(|_| !spec.is_suspended());
    let forge_url = git.url.clone();
    let mine = me
        .write_request(ctx, me.image_for(&tag, digest.as_deref())?, Some(git))
        .await?;
    if let Some(settings) = pr_settings {
        let others = group.as_ref().map(|g| g.others.clone()).unwrap_or_default();
        let (write, delivered) =
            write_and_propose(watch, &me, mine, others, &settings, &forge_url, &tag, ctx).await?;
        return Ok(Outcome {
            latest,
            write: Some(write),
            suspended: false,
            waiting: group.and_then(|g| g.waiting),
            refused: refused.map(Box::new),
            pull_request: Some(delivered),
        });
    }
    let write = match &group {
        Some(g) if !g.others.is_empty() => {
            let mut requests = vec![mine];
            requests.extend(g.others.iter().cloned());
            let results = ctx
                .without_work_slot(futures::future::join_all(
                    requests.into_iter().map(|r| ctx.writer.apply(r)),
                ))
                .await;
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
        _ => ctx.without_work_slot(ctx.writer.apply(mine)).await?,
    };
    if write.commit.is_some()
        && let Some(since) = ctx.pending.take(&me.repo.registry, &me.repo.path)
    {
        ctx.metrics
            .push_to_commit_seconds
            .observe(since.as_secs_f64());
    }
    Ok(Outcome {
        latest,
        write: Some(write),
        suspended: spec.is_suspended(),
        waiting: group.and_then(|g| g.waiting),
        refused: refused.map(Box::new),
        pull_request: None,
    })
}

/// `spec.git.pullRequest` (see `watch_pr.rs`): when `branch` already holds the image, the
/// open pull request is closed and nothing is pushed; otherwise the edit goes to the push
/// branch and one pull request for it is opened or updated. [`watch_pr::FINALIZER`] is added
/// before a pull request can exist.
#[allow(clippy::too_many_arguments)]
async fn write_and_propose(
    watch: &ImageWatch,
    me: &Prepared<'_>,
    mine: WriteRequest,
    others: Vec<WriteRequest>,
    settings: &imagewatch_crd::GitPullRequest,
    forge_url: &str,
    tag: &str,
    ctx: &Context,
) -> Result<(WriteResult, watch_pr::Delivered), ReconcileError> {
    let head = mine
        .push_branch
        .clone()
        .filter(|b| !b.is_empty() && *b != mine.branch)
        .ok_or_else(|| {
            ReconcileError::InvalidSpec(
                "spec.git.pullRequest needs a spec.git.pushBranch other than spec.git.branch"
                    .into(),
            )
        })?;
    let base = mine.branch.clone();
    let on_base = WriteRequest {
        push_branch: None,
        dry_run: true,
        ..mine.clone()
    };
    // The push branch first (nothing is pushed when `branch` already holds the edit), then
    // `branch` as that write fetched it: whether a pull request is still wanted is decided
    // on the newest head, so one merged meanwhile is not answered by opening another.
    // A group's members go together (one batch, one commit on the group's push branch).
    let mut requests = vec![mine];
    requests.extend(others);
    let mut results = ctx
        .without_work_slot(futures::future::join_all(
            requests.into_iter().map(|r| ctx.writer.apply(r)),
        ))
        .await
        .into_iter();
    let write = results
        .next()
        .unwrap_or_else(|| Err(ReconcileError::Internal("no write result".into())))?;
    let mut members = vec![(write.desired.clone(), write.file.clone())];
    for other in results {
        match other {
            Ok(w) => members.push((w.desired, w.file)),
            Err(e) => {
                tracing::warn!(watch = %watch.name_any(), error = %e, "a group member's write failed")
            }
        }
    }
    let on_base = ctx.without_work_slot(ctx.writer.apply(on_base)).await?;
    let forge = watch_pr::client(watch, settings, forge_url, ctx).await?;
    let mut vars = watch_pr::TextVars {
        group: watch.spec.group.clone().unwrap_or_default(),
        image: me.image.clone(),
        tag: tag.to_string(),
        watch: format!("{}/{}", me.rules.namespace, watch.name_any()),
        branch: base.clone(),
        file: write.file.clone(),
        before: on_base.current_before.clone(),
    };
    if members.len() > 1 {
        // Every member proposes the same text for the group's one pull request.
        vars = watch_pr::group_vars(vars, &members);
    }
    let step = PrStep {
        head: &head,
        wanted: on_base.changed_needed,
        vars,
        pushed: write.commit.is_some(),
    };
    // `status.applied` says what `branch` holds: a proposal is not applied until it is
    // merged (a PromotionPolicy reading this watch waits for that).
    pull_request_step(watch, settings, &forge, step, ctx)
        .await
        .map(|d| (on_base, d))
}

/// One pull request step, after its push branch was written.
struct PrStep<'a> {
    /// Head (push) branch.
    head: &'a str,
    /// Whether `branch` lacks the edit (a pull request is wanted).
    wanted: bool,
    /// The templates' values (`branch` is the base).
    vars: watch_pr::TextVars,
    /// Whether the push branch was just pushed.
    pushed: bool,
}

/// Closes the open pull request of `step.head` when `branch` holds the edit, else opens or
/// updates it (adding [`watch_pr::FINALIZER`] first); counted and logged.
async fn pull_request_step(
    watch: &ImageWatch,
    settings: &imagewatch_crd::GitPullRequest,
    forge: &crate::forge::ForgeClient,
    step: PrStep<'_>,
    ctx: &Context,
) -> Result<watch_pr::Delivered, ReconcileError> {
    let result = if !step.wanted {
        watch_pr::close_open(forge, step.head, &step.vars.branch, &step.vars.tag).await
    } else {
        if !watch_pr::has_finalizer(watch) {
            watch_pr::add_finalizer(&ctx.client, watch).await?;
        }
        let new = watch_pr::proposal(settings, step.head, &step.vars);
        watch_pr::propose(forge, &new, &step.vars.tag, step.pushed).await
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

/// Candidate tags checked for a verified signature per reconcile, best first.
const VERIFY_CANDIDATES: usize = 5;

/// How `spec.verify` takes part in choosing the tag to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VerifyMode {
    /// No verification: the rules' (or the pin's, or the group's) tag.
    Off,
    /// The newest candidate whose signature verifies; newer ones are refused.
    NewestVerified,
    /// Exactly the pinned or the group's tag, only if its signature verifies.
    ThisTag,
}

/// The way a watch verifies (pure): a pin or a group's tag is not traded for an older
/// verified one (that would be another tag than the one asked for, or split the group), so
/// it is written only if it verifies; otherwise the newest verified candidate is chosen. The
/// same holds for a pattern's members, each in its own repository (they have no group).
fn verify_mode(verify: bool, pinned: bool, grouped: bool) -> VerifyMode {
    match (verify, pinned || grouped) {
        (false, _) => VerifyMode::Off,
        (true, false) => VerifyMode::NewestVerified,
        (true, true) => VerifyMode::ThisTag,
    }
}

/// The keys `spec.verify` trusts and the cache key of their verdicts; None without it. The
/// cache key carries the credentials the registry is read with (the watch's Secret, or the
/// operator's identity for ECR), so one tenant's verified verdict is not another's.
async fn verify_keys(
    watch: &ImageWatch,
    rules: &Rules,
    ctx: &Context,
) -> Result<Option<VerifyKeys>, ReconcileError> {
    let Some(verify) = &watch.spec.verify else {
        return Ok(None);
    };
    let keys = signature_keys(ctx, &rules.namespace, &verify.cosign, "spec.verify").await?;
    let cache_key = format!(
        "{}|{:?}",
        crate::signature::keys_fingerprint(&keys),
        rules.credential_key
    );
    Ok(Some(VerifyKeys { keys, cache_key }))
}

/// The trusted keys of a `cosign` verification: read from its Secret; keyless is refused.
pub(super) async fn signature_keys(
    ctx: &Context,
    namespace: &str,
    cosign: &imagewatch_crd::CosignVerify,
    field: &str,
) -> Result<Vec<crate::signature::TrustedKey>, ReconcileError> {
    match (&cosign.secret_ref, &cosign.keyless) {
        (_, Some(_)) => Err(ReconcileError::InvalidSpec(format!(
            "{field}.cosign.keyless is not supported yet (it needs Fulcio and Rekor); use \
             {field}.cosign.secretRef with cosign public keys"
        ))),
        (Some(secret), None) => secrets::cosign_keys(ctx, namespace, &secret.name).await,
        (None, None) => Err(ReconcileError::InvalidSpec(format!(
            "{field}.cosign needs secretRef (a Secret with cosign public keys)"
        ))),
    }
}

/// Keys a watch verifies signatures with.
pub(super) struct VerifyKeys {
    pub keys: Vec<crate::signature::TrustedKey>,
    /// Key-set fingerprint and registry credentials, for the verdict cache.
    pub cache_key: String,
}

/// Counts a signature check in `imagewatch_signature_checks_total`.
pub(super) fn count_signature_check(ctx: &Context, kind: &str, outcome: &str) {
    ctx.metrics
        .signature_checks
        .get_or_create(&crate::telemetry::SignatureLabels {
            kind: kind.to_string(),
            outcome: outcome.to_string(),
        })
        .inc();
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
            w.namespace().as_deref() == Some(me.rules.namespace.as_str())
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
            policy: &p.rules.policy,
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
            p.write_request(ctx, p.image_for(&tag, Some(&digest))?, None)
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
#[derive(Clone)]
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

/// The Git repository that decides a watch's shard: `spec.git.url`, else the repository of
/// the Argo CD Application managing it; when neither resolves, the watch itself (so exactly
/// one replica reports the problem).
async fn shard_key(watch: &ImageWatch, ctx: &Context) -> String {
    if let Some(git) = &watch.spec.git {
        return git.url.clone();
    }
    let namespace = watch.namespace().unwrap_or_default();
    match super::argocd::resolve_cached(
        &ctx.argocd_sources,
        &ctx.client,
        &ctx.argocd_namespace,
        &namespace,
        watch.annotations(),
        watch.labels(),
    )
    .await
    {
        Ok((source, _)) => source.repo_url,
        Err(_) => format!("imagewatch:{namespace}/{}", watch.name_any()),
    }
}

/// Step 1 (validate), tenancy: the allow-list must let the watch's namespace read its image
/// (for a pattern, everything its literal prefix covers) and use the operator's AWS identity
/// when it does. Checked before anything is read.
async fn check_registry_allowed(watch: &ImageWatch, ctx: &Context) -> Result<(), ReconcileError> {
    let namespace = watch.namespace().unwrap_or_default();
    let image = watch.spec.image.split('*').next().unwrap_or_default();
    let registry = image.split('/').next().unwrap_or_default();
    let credentials = watch.spec.credentials.clone().unwrap_or_default();
    let (aws, _) = credential_choice(&credentials, &namespace, registry);
    let ask = super::allow::Ask {
        namespace: &namespace,
        git: None,
        images: vec![image],
        aws,
    };
    ctx.allowance
        .check(&ctx.client, &ctx.metrics, "ImageWatch", ask, None)
        .await
}

/// The path a target writes, under `base` (pure); a pattern's `$n` and what follows are cut.
fn target_path(target: &imagewatch_crd::Target, base: &str) -> String {
    let path = [
        target.workload.as_ref().map(|w| w.path.as_str()),
        target.kustomize.as_ref().map(|k| k.path.as_str()),
        target.helm.as_ref().map(|h| h.file.as_str()),
        target.argocd_source.as_ref().map(|a| a.path.as_str()),
    ]
    .into_iter()
    .flatten()
    .next()
    .unwrap_or_default();
    let literal = path.split('$').next().unwrap_or_default();
    join_path(base, literal)
}

/// Step 1 (validate), tenancy: the allow-list (or the managing Application's AppProject)
/// must let the watch's namespace write `url` at its target's path. Checked before the git
/// Secret is read and before Git is.
async fn check_git_allowed(
    watch: &ImageWatch,
    ctx: &Context,
    url: &str,
    base_path: &str,
) -> Result<(), ReconcileError> {
    let namespace = watch.namespace().unwrap_or_default();
    let path = target_path(&watch.spec.target, base_path);
    let ask = super::allow::Ask {
        namespace: &namespace,
        git: Some((url, vec![path.as_str()])),
        images: Vec::new(),
        aws: false,
    };
    let project = super::allowance::ProjectOf {
        argocd_namespace: &ctx.argocd_namespace,
        namespace: &namespace,
        annotations: watch.annotations(),
        labels: watch.labels(),
    };
    ctx.allowance
        .check(&ctx.client, &ctx.metrics, "ImageWatch", ask, Some(project))
        .await
}

/// `spec.git`, or the Argo CD Application managing the watch.
async fn resolve_git(watch: &ImageWatch, ctx: &Context) -> Result<GitLocation, ReconcileError> {
    let namespace = watch.namespace().unwrap_or_default();
    if let Some(git) = &watch.spec.git {
        crate::git::check_tenant_url(&git.url)
            .map_err(|e| ReconcileError::InvalidSpec(format!("spec.git.url: {e}")))?;
        check_git_allowed(watch, ctx, &git.url, "").await?;
        let auth = match &git.secret_ref {
            Some(secret) => secrets::git_credentials(ctx, &namespace, &secret.name).await?,
            None => crate::git::GitAuth::Anonymous,
        };
        return Ok(GitLocation {
            url: git.url.clone(),
            branch: git.branch().to_string(),
            auth,
            base_path: String::new(),
            // With a pull request and no push branch: the watch's own branch.
            // A group's members share one (so one commit and one pull request per group).
            push_branch: git.push_branch.clone().or_else(|| {
                git.pull_request.as_ref().map(|_| {
                    match watch.spec.group.as_deref().filter(|g| !g.is_empty()) {
                        Some(group) => watch_pr::group_push_branch("{namespace}", group),
                        None => watch_pr::default_push_branch("{namespace}", "{name}"),
                    }
                })
            }),
        });
    }
    let (source, secret) = super::argocd::resolve_cached(
        &ctx.argocd_sources,
        &ctx.client,
        &ctx.argocd_namespace,
        &namespace,
        watch.annotations(),
        watch.labels(),
    )
    .await?;
    check_git_allowed(watch, ctx, &source.repo_url, &source.path).await?;
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

/// Step 5 (pure): the status this reconcile should leave.
pub fn build_status(
    watch: &ImageWatch,
    result: &Result<Reconciled, ReconcileError>,
    now: &Time,
) -> ImageWatchStatus {
    let previous = watch.status.clone().unwrap_or_default();
    let generation = watch.metadata.generation;
    let result = match result {
        Ok(Reconciled::Pattern(outcome)) => {
            return members::pattern_status(&previous, outcome, generation, now);
        }
        Ok(Reconciled::Single(outcome)) => Ok(outcome),
        Err(e) => Err(e),
    };
    // A pattern that failed as a whole keeps reporting its members as last seen; a watch of
    // one repository has none.
    let pattern = watch.spec.is_pattern();
    let mut next = ImageWatchStatus {
        observed_generation: generation,
        latest: previous.latest.clone().filter(|_| !pattern),
        applied: previous.applied.clone().filter(|_| !pattern),
        member_count: previous.member_count.filter(|_| pattern),
        members_ready: previous.members_ready.filter(|_| pattern),
        members: if pattern {
            previous.members.clone()
        } else {
            Vec::new()
        },
        refused: match result {
            Ok(outcome) => outcome.refused.as_deref().map(refused_tag),
            Err(ReconcileError::Signature(refused)) => Some(refused_tag(refused)),
            Err(_) => previous.refused.clone(),
        },
        pull_request: previous.pull_request.clone(),
        conditions: previous.conditions.clone(),
    };
    if let Ok(Outcome {
        pull_request: Some(delivered),
        ..
    }) = result
    {
        next.pull_request = watch_pr::status_of(delivered, previous.pull_request.as_ref());
        let open = next.pull_request.as_ref().filter(|p| p.state == "open");
        let message = match (open, &next.pull_request) {
            (Some(p), _) => format!("#{} {} proposes {}", p.number, p.url, delivered.tag),
            (None, Some(p)) => format!(
                "#{} {} is {}: the base branch holds {}",
                p.number, p.url, p.state, delivered.tag
            ),
            (None, None) => format!("the base branch holds {}", delivered.tag),
        };
        let mut message = message;
        if !delivered.warnings.is_empty() {
            message.push_str(&format!(" ({})", delivered.warnings.join("; ")));
        }
        // Nothing open any more: the reason keeps saying how the last one ended.
        let reason = match (delivered.action, &next.pull_request) {
            (watch_pr::PrAction::NotNeeded, Some(p)) if p.state == "closed" => "Closed",
            (watch_pr::PrAction::NotNeeded, Some(p)) if p.state == "merged" => "Merged",
            (action, _) => action.condition_reason(),
        };
        let mut condition =
            status::ready_condition(open.is_some(), reason, &message, generation, now);
        condition.type_ = imagewatch_crd::conditions::PULL_REQUEST_OPEN.to_string();
        next.conditions = status::merge_condition(&next.conditions, condition);
    }
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
            if let (Some(refused), Some(w), false) =
                (&outcome.refused, &outcome.write, outcome.suspended)
            {
                let done = match &w.commit {
                    Some(commit) => format!(
                        "{}: {} -> {} (commit {}), the newest verified tag",
                        w.file,
                        w.current_before,
                        w.current_after,
                        short(commit)
                    ),
                    None => format!(
                        "{} holds {}, the newest verified tag",
                        w.file, w.current_after
                    ),
                };
                status::ready_condition(
                    false,
                    refused.reason(),
                    &format!("{done}; refused newer {}", refused.message()),
                    generation,
                    now,
                )
            } else if let Some(message) = &outcome.waiting {
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
    next.conditions = status::merge_condition(&next.conditions, condition);
    next
}

/// The status form of a refused tag.
fn refused_tag(refused: &crate::signature::Refused) -> imagewatch_crd::RefusedTag {
    imagewatch_crd::RefusedTag {
        tag: refused.tag.clone(),
        digest: Some(refused.digest.clone()),
        reason: refused.reason().to_string(),
        message: refused.message(),
    }
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
    result: &Result<Reconciled, ReconcileError>,
    new_status: &ImageWatchStatus,
    ctx: &Context,
) {
    let previous = status::ready_of(watch.status.as_ref());
    let event = match result {
        Ok(Reconciled::Pattern(outcome)) => {
            // A commit for some members; members newly not ready (or no member at all).
            let updated = members::updated_note(outcome).map(|note| Event {
                type_: EventType::Normal,
                reason: reason::UPDATED.into(),
                note: Some(note),
                action: "Commit".into(),
                secondary: None,
            });
            if let Some(event) = updated {
                publish(watch, &event, ctx).await;
            }
            status::ready_of(Some(new_status))
                .filter(|c| c.status == "False" && c.reason != reason::SUSPENDED)
                .filter(|c| previous.is_none_or(|p| p.reason != c.reason || p.message != c.message))
                .map(|c| Event {
                    type_: EventType::Warning,
                    reason: c.reason.clone(),
                    note: Some(c.message.clone()),
                    action: "Reconcile".into(),
                    secondary: None,
                })
        }
        Ok(Reconciled::Single(Outcome {
            write: Some(w),
            suspended: false,
            ..
        })) if w.commit.is_some() => Some(Event {
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
    if let Some(event) = event {
        publish(watch, &event, ctx).await;
    }
    // The pull requests of the push branches opened, updated or closed.
    let delivered: Vec<&watch_pr::Delivered> = match result {
        Ok(Reconciled::Single(Outcome {
            pull_request: Some(d),
            ..
        })) => vec![d],
        Ok(Reconciled::Pattern(p)) => p
            .pull_request
            .iter()
            .chain(p.members.iter().filter_map(|m| m.pull_request.as_ref()))
            .collect(),
        _ => Vec::new(),
    };
    for d in delivered {
        let (Some(reason), Some(pr)) = (d.action.event_reason(), &d.pull_request) else {
            continue;
        };
        let note = match d.action {
            watch_pr::PrAction::Closed => format!(
                "closed #{} {}: the base branch holds {}",
                pr.number, pr.url, d.tag
            ),
            _ => format!(
                "#{} {} proposes {} from {}",
                pr.number, pr.url, d.tag, d.branch
            ),
        };
        let event = Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note),
            action: "PullRequest".into(),
            secondary: None,
        };
        publish(watch, &event, ctx).await;
    }
    // A newer tag refused for its signature while an older verified one is written.
    if let Ok(Reconciled::Single(Outcome {
        refused: Some(refused),
        ..
    })) = result
    {
        let before = watch.status.as_ref().and_then(|s| s.refused.as_ref());
        if before.is_none_or(|b| b.tag != refused.tag || b.message != refused.message()) {
            let event = Event {
                type_: EventType::Warning,
                reason: refused.reason().into(),
                note: Some(format!("refused {}", refused.message())),
                action: "Verify".into(),
                secondary: None,
            };
            publish(watch, &event, ctx).await;
        }
    }
}

async fn publish(watch: &ImageWatch, event: &Event, ctx: &Context) {
    if let Err(e) = ctx.recorder.publish(event, &super::object_ref(watch)).await {
        tracing::warn!(error = %e, "cannot publish Event");
    }
}

#[cfg(test)]
mod verify_tests {
    use super::{VerifyMode, verify_mode};

    #[test]
    fn a_pin_or_a_group_tag_is_verified_as_it_is_otherwise_the_newest_verified_wins() {
        assert_eq!(verify_mode(false, false, false), VerifyMode::Off);
        assert_eq!(verify_mode(false, true, true), VerifyMode::Off);
        // A watch of one repository and every member of a pattern (never grouped).
        assert_eq!(verify_mode(true, false, false), VerifyMode::NewestVerified);
        assert_eq!(verify_mode(true, true, false), VerifyMode::ThisTag);
        assert_eq!(verify_mode(true, false, true), VerifyMode::ThisTag);
        assert_eq!(verify_mode(true, true, true), VerifyMode::ThisTag);
    }
}
