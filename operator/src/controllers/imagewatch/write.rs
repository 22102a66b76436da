//! The write step: the write intents of a watch handed to the git writer, and what follows
//! them — the pull request of `spec.git.pullRequest`, the push-stage metrics of a commit a
//! registry event led to, and the commit handed to the deployment tracker. One
//! [`deliver`] serves a watch of one repository, its group's other members (written with it
//! in one batch, so one commit), the members of a pattern, and pull-request delivery: the
//! edits go to the push branch, the base branch is read through the writer
//! ([`GitWriter::read_base`]), and the pull request of that branch is opened, updated or
//! closed (see `pull_request.rs`). Reads the [`Selection`]s and the Git location; hands on
//! a [`Delivery`] to the status step.

use imagewatch_crd::{ImageWatch, OnGitChange};
use imagewatch_engine::watch_target::target_spec;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use std::sync::Arc;

use super::dereference::{GitLocation, Rules};
use super::pull_request;
use super::scan::RepoScan;
use super::status::tag_of;
use crate::cluster::deploy::DeployTracker;
use crate::controllers::ReconcileError;
use crate::controllers::{Context, SecretReader, WorkSlots};
use crate::error::{InternalError, SpecError};
use crate::manifests::{EditOptions, ImageChange};
use crate::sources::routing::{PendingEvents, PushStages};
use crate::telemetry::Metrics;
use crate::writer::{GitChangeGuard, GitWriter, WriteRequest, WriteResult};

/// What the write step uses: the git writer (waited for without holding a work slot); for
/// a pull request the forge token's Secret, the client the finalizer is added with, and the
/// metrics the forge and the pull request steps are counted in; the registry events
/// awaiting their commit and the deployment tracker a commit is handed to.
#[derive(Clone, Copy)]
pub(super) struct WriteContext<'a> {
    pub(super) writer: &'a GitWriter,
    pub(super) slots: WorkSlots<'a>,
    pub(super) secrets: SecretReader<'a>,
    pub(super) client: &'a kube::Client,
    pub(super) metrics: &'a Arc<Metrics>,
    pub(super) forge_http: &'a reqwest::Client,
    /// One lock per pull request head, shared by every reconcile.
    pub(super) pull_request_locks: &'a crate::forge::HeadLocks,
    pub(super) pending: &'a PendingEvents,
    pub(super) deploys: &'a Arc<DeployTracker>,
}

impl<'a> WriteContext<'a> {
    /// The write step's view of the shared services.
    pub(super) fn of(ctx: &'a Context) -> Self {
        WriteContext {
            writer: &ctx.writer,
            slots: ctx.work_slots(),
            secrets: SecretReader::of(ctx),
            client: &ctx.client,
            metrics: &ctx.metrics,
            forge_http: &ctx.forge_http,
            pull_request_locks: &ctx.pull_request_locks,
            pending: &ctx.pending,
            deploys: &ctx.deploys,
        }
    }
}

/// The write intent that sets `me`'s target (of `watch`, with its `rules`) to `image`, at
/// `git` (pure).
pub(super) fn write_request(
    watch: &ImageWatch,
    rules: &Rules,
    me: &RepoScan,
    git: &GitLocation,
    image: String,
) -> Result<WriteRequest, ReconcileError> {
    let git = git.clone();
    Ok(WriteRequest {
        url: git.url,
        branch: git.branch,
        auth: git.auth,
        target: target_spec(&me.target, &git.base_path, &me.image)
            .map_err(|e| ReconcileError::InvalidSpec(SpecError::rule("spec.target", e)))?,
        change: ImageChange::Image(image),
        edit: EditOptions {
            edit_shared_anchor: watch.spec.edit_shared_anchor.unwrap_or(false),
        },
        watch: format!("{}/{}", rules.namespace, watch.name_any()),
        dry_run: rules.pause.is_some(),
        push_branch: git.push_branch.map(|template| {
            template
                .replace("{namespace}", &rules.namespace)
                .replace("{name}", &watch.name_any())
        }),
        guard: git_change_guard(watch, &me.repo.path),
    })
}

/// `spec.git.pullRequest`, unless the watch is paused (nothing is proposed then).
pub(super) fn pull_request_settings(
    watch: &ImageWatch,
    pause: &Option<imagewatch_engine::windows::Pause>,
) -> Option<imagewatch_crd::GitPullRequest> {
    watch
        .spec
        .git
        .as_ref()
        .and_then(|g| g.pull_request.clone())
        .filter(|_| pause.is_none())
}

/// `spec.onGitChange`: what this watch (or its pattern member `repository`) last wrote,
/// from its status — the value a hold replaced while held, else `applied` — for the writer
/// to tell a change someone else made. `None` with `Overwrite`, or before anything was
/// written.
fn git_change_guard(watch: &ImageWatch, repository: &str) -> Option<GitChangeGuard> {
    let mode = watch.spec.on_git_change.unwrap_or_default();
    if mode == OnGitChange::Overwrite {
        return None;
    }
    let status = watch.status.as_ref()?;
    let last_written = if watch.spec.is_pattern() {
        let member = status.members.iter().find(|m| m.repository == repository)?;
        match &member.held {
            Some(held) => held.replaced.clone(),
            None => member.applied.clone()?,
        }
    } else {
        match &status.held {
            Some(held) => held.replaced.clone(),
            None => {
                let applied = status.applied.as_ref()?;
                applied.image.clone().unwrap_or_else(|| applied.tag.clone())
            }
        }
    };
    Some(GitChangeGuard {
        mode,
        last_written,
        resume: watch
            .annotations()
            .get(imagewatch_crd::conditions::RESUME_ANNOTATION)
            .cloned(),
    })
}

/// One of the watch's own write intents: its request, and the repository it follows (for
/// the push stages of a registry event).
pub(super) struct Intent {
    pub(super) request: WriteRequest,
    pub(super) registry: String,
    pub(super) repository: String,
}

/// Everything a reconcile writes.
pub(super) struct Intents {
    /// The watch's own: one for a watch of one repository, one per member for a pattern.
    pub(super) own: Vec<Intent>,
    /// A group's other members, written with the watch's own in one batch.
    pub(super) others: Vec<WriteRequest>,
    /// `spec.git.pullRequest` (not while paused).
    pub(super) pull_request: Option<Proposal>,
}

/// A pull request to propose the writes in.
pub(super) struct Proposal {
    pub(super) settings: imagewatch_crd::GitPullRequest,
    pub(super) forge_url: String,
    pub(super) shape: Shape,
}

/// Which pull requests propose a reconcile's writes.
pub(super) enum Shape {
    /// A watch of one repository: one pull request, its group's members with it.
    Watch { image: String, tag: String },
    /// A pattern: one per member (`perMember`, the default), or one for all.
    Pattern { per_member: bool },
}

/// What the write step did.
pub(super) struct Delivery {
    /// Per own intent: the writer's answer (with a pull request: what `branch` holds), the
    /// push stages of its commit, and its own pull request (a pattern's, per member).
    pub(super) writes: Vec<Written>,
    /// The pull request of every write, when they share one.
    pub(super) pull_request: Option<pull_request::Delivered>,
}

/// One own intent, delivered.
pub(super) struct Written {
    pub(super) result: Result<WriteResult, ReconcileError>,
    pub(super) stages: Option<PushStages>,
    pub(super) pull_request: Option<pull_request::Delivered>,
}

/// Step 5: every intent to the writer at once (the batching writer makes one commit per
/// repository and branch); then the pull request, or for direct commits the push stages
/// and the first commit followed to Argo CD.
pub(super) async fn deliver(
    watch: &ImageWatch,
    intents: Intents,
    ctx: &WriteContext<'_>,
) -> Result<Delivery, ReconcileError> {
    let Intents {
        mut own,
        others,
        pull_request,
    } = intents;
    if let Some(proposal) = &pull_request {
        for intent in &mut own {
            let request = &mut intent.request;
            let Some(branch) = request
                .push_branch
                .clone()
                .filter(|b| !b.is_empty() && *b != request.branch)
            else {
                return Err(ReconcileError::InvalidSpec(
                    SpecError::PullRequestWithoutPushBranch,
                ));
            };
            if let Shape::Pattern { per_member: true } = proposal.shape {
                request.push_branch = Some(pull_request::member_push_branch(
                    &branch,
                    &intent.repository,
                ));
            }
        }
    }
    let mut requests: Vec<WriteRequest> = own.iter().map(|i| i.request.clone()).collect();
    requests.extend(others);
    let mut results = ctx
        .slots
        .without_work_slot(futures::future::join_all(
            requests.into_iter().map(|r| ctx.writer.apply(r)),
        ))
        .await
        .into_iter()
        .map(|r| r.map_err(ReconcileError::from));
    let mut writes: Vec<Written> = results
        .by_ref()
        .take(own.len())
        .map(|result| Written {
            result,
            stages: None,
            pull_request: None,
        })
        .collect();
    // A group's other members: their status is their own reconcile's.
    let mut others = Vec::new();
    for other in results {
        match other {
            Ok(w) => others.push((w.desired, w.file)),
            Err(e) => {
                tracing::warn!(watch = %watch.name_any(), error = %e, "a group member's write failed")
            }
        }
    }
    let Some(proposal) = pull_request else {
        follow(watch, &own, &mut writes, ctx);
        return Ok(Delivery {
            writes,
            pull_request: None,
        });
    };
    let forge = pull_request::client(
        watch,
        &proposal.settings,
        &proposal.forge_url,
        &ctx.secrets,
        ctx.metrics,
        ctx.forge_http,
    );
    match proposal.shape {
        Shape::Watch { image, tag } => {
            let Some(intent) = own.first() else {
                return Err(ReconcileError::Internal(InternalError::NoWriteResult));
            };
            let write = writes.remove(0).result?;
            let on_base = ctx
                .slots
                .without_work_slot(ctx.writer.read_base(&intent.request))
                .await?;
            let forge = forge.await?;
            let mut members = vec![(write.desired.clone(), write.file.clone())];
            members.extend(others);
            let (result, delivered) = propose_watch(
                watch,
                &proposal.settings,
                &forge,
                (&intent.request, image, tag),
                (write, on_base),
                members,
                ctx,
            )
            .await?;
            let stages = delivered
                .commit
                .as_ref()
                .and_then(|_| push_stages(ctx, &intent.registry, &intent.repository, &result));
            Ok(Delivery {
                writes: vec![Written {
                    result: Ok(result),
                    stages,
                    pull_request: None,
                }],
                pull_request: Some(delivered),
            })
        }
        Shape::Pattern { per_member } => {
            // Per-stage times of a pattern's members: counted on their push branch's commit.
            for (intent, written) in own.iter().zip(writes.iter_mut()) {
                if let Ok(w) = &written.result
                    && w.commit.is_some()
                {
                    written.stages = push_stages(ctx, &intent.registry, &intent.repository, w);
                }
            }
            let bases = ctx
                .slots
                .without_work_slot(futures::future::join_all(
                    own.iter().map(|i| ctx.writer.read_base(&i.request)),
                ))
                .await;
            let forge = forge.await?;
            let heads: Vec<String> = own
                .iter()
                .map(|i| i.request.push_branch.clone().unwrap_or_default())
                .collect();
            let together = pattern_pull_requests(
                watch,
                &proposal.settings,
                &forge,
                per_member,
                &mut writes,
                bases,
                &heads,
                ctx,
            )
            .await?;
            Ok(Delivery {
                writes,
                pull_request: together,
            })
        }
    }
}

/// Direct commits: the push stages of each own write that made a commit, and the first
/// commit made, with every own file it holds, handed to the deployment tracker.
fn follow(watch: &ImageWatch, own: &[Intent], writes: &mut [Written], ctx: &WriteContext<'_>) {
    let mut followed: Option<(String, Vec<String>, Option<std::time::Instant>)> = None;
    for (intent, written) in own.iter().zip(writes.iter_mut()) {
        let Ok(w) = &written.result else {
            continue;
        };
        let Some(commit) = &w.commit else {
            continue;
        };
        written.stages = push_stages(ctx, &intent.registry, &intent.repository, w);
        let pushed = written.stages.as_ref().map(|s| s.received);
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
    if let (Some((commit, files, pushed_at)), Some(first)) = (followed, own.first()) {
        let request = &first.request;
        ctx.deploys.committed(
            ctx.client,
            ctx.metrics,
            crate::cluster::deploy::Committed {
                watch: ObjectRef::new(&watch.name_any())
                    .within(&watch.namespace().unwrap_or_default()),
                object: crate::controllers::object_ref(watch),
                url: request.url.clone(),
                branch: request.branch.clone(),
                auth: request.auth.clone(),
                commit,
                files,
                pushed_at,
            },
        );
    }
}

/// The stages of the registry push that led to this commit, if an event started it (the
/// writer's commit and push instants added); the push → commit latency is counted.
fn push_stages(
    ctx: &WriteContext<'_>,
    registry: &str,
    repository: &str,
    write: &WriteResult,
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

/// `spec.git.pullRequest` of a watch of one repository, after its push branch was written:
/// when `branch` already holds the image, the open pull request is closed; otherwise one
/// pull request for the push branch is opened or updated. `members` are every write's
/// image and file (a group's members propose the same text). The result is what `branch`
/// holds (a proposal is not applied until it is merged; a PromotionPolicy reading this
/// watch waits for that), with the push branch's commit instants.
async fn propose_watch(
    watch: &ImageWatch,
    settings: &imagewatch_crd::GitPullRequest,
    forge: &crate::forge::ForgeClient,
    (mine, image, tag): (&WriteRequest, String, String),
    (write, on_base): (WriteResult, WriteResult),
    members: Vec<(String, String)>,
    ctx: &WriteContext<'_>,
) -> Result<(WriteResult, pull_request::Delivered), ReconcileError> {
    let head = mine.push_branch.clone().unwrap_or_default();
    let mut vars = pull_request::TextVars {
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
        vars = pull_request::group_vars(vars, &members);
    }
    let step = PrStep {
        head: &head,
        wanted: on_base.changed_needed,
        vars,
        pushed: write.commit.is_some(),
    };
    let pushed = write.pushed;
    let delivered = pull_request_step(watch, settings, forge, step, ctx).await?;
    Ok((
        WriteResult { pushed, ..on_base },
        pull_request::Delivered {
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
    vars: pull_request::TextVars,
    /// Whether the push branch was just pushed.
    pushed: bool,
}

/// Closes the open pull request of `step.head` when `branch` holds the edit, else opens or
/// updates it (adding [`pull_request::FINALIZER`] first); counted and logged.
async fn pull_request_step(
    watch: &ImageWatch,
    settings: &imagewatch_crd::GitPullRequest,
    forge: &crate::forge::ForgeClient,
    step: PrStep<'_>,
    ctx: &WriteContext<'_>,
) -> Result<pull_request::Delivered, ReconcileError> {
    let result = if !step.wanted {
        let recorded = watch
            .status
            .as_ref()
            .and_then(|s| s.pull_request.as_ref())
            .filter(|p| p.state == crate::forge::PullRequestState::Open && p.branch == step.head)
            .map(|p| p.number);
        pull_request::close_open(
            forge,
            ctx.pull_request_locks,
            step.head,
            &step.vars.branch,
            &step.vars.tag,
            recorded,
        )
        .await
    } else {
        if !pull_request::has_finalizer(watch) {
            pull_request::add_finalizer(ctx.client, watch).await?;
        }
        let new = pull_request::proposal(settings, step.head, &step.vars);
        pull_request::propose(
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

/// `spec.git.pullRequest` of a pattern watch, after its members' push branches were written:
/// one pull request per member (`perMember`, default) or one for all. Each member's result
/// becomes what `branch` holds (a dry run there), as for a watch of one repository.
#[allow(clippy::too_many_arguments)]
async fn pattern_pull_requests(
    watch: &ImageWatch,
    settings: &imagewatch_crd::GitPullRequest,
    forge: &crate::forge::ForgeClient,
    per_member: bool,
    results: &mut [Written],
    bases: Vec<Result<WriteResult, crate::writer::WriteError>>,
    heads: &[String],
    ctx: &WriteContext<'_>,
) -> Result<Option<pull_request::Delivered>, ReconcileError> {
    let watch_name = format!(
        "{}/{}",
        watch.namespace().unwrap_or_default(),
        watch.name_any()
    );
    // (member index, push branch, write on the push branch, what `branch` holds).
    let mut written = Vec::new();
    for ((i, head), base) in heads.iter().enumerate().zip(bases) {
        let Ok(write) = &results[i].result else {
            continue;
        };
        match base {
            Ok(base) => written.push((i, head.clone(), write.clone(), base)),
            Err(e) => results[i].result = Err(e.into()),
        }
    }
    let vars_of = |write: &WriteResult, base: &WriteResult| pull_request::TextVars {
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
            pull_request_step(watch, settings, forge, step, ctx)
        });
        let delivered = futures::future::join_all(steps).await;
        for ((i, _, _, base), d) in written.into_iter().zip(delivered) {
            match d {
                Ok(d) => {
                    results[i].result = Ok(base);
                    results[i].pull_request = Some(d);
                }
                Err(e) => results[i].result = Err(e),
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
    let mut vars = pull_request::group_vars(
        pull_request::TextVars {
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
    let delivered = pull_request_step(watch, settings, forge, step, ctx).await?;
    for (i, _, _, base) in written {
        results[i].result = Ok(base);
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
