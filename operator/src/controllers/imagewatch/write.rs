//! The write step: the edit intent handed to the git writer, and the pull request hand-off.
//! A [`WriteRequest`] sets a watch's target (or a pattern member's) to the chosen image at
//! its [`GitLocation`]; the writer batches, commits and pushes it. With
//! `spec.git.pullRequest` the edit goes to the push branch, and the pull request of that
//! branch is opened, updated or closed (see `pull_request.rs`). Reads [`Prepared`] and the
//! chosen image; hands on the [`WriteResult`] and what was done with the pull request.

use imagewatch_crd::ImageWatch;
use kube::ResourceExt;

use std::sync::Arc;

use super::dereference::{DereferenceContext, GitLocation, resolve_git, target_spec};
use super::members::MemberResult;
use super::pull_request;
use super::scan::Prepared;
use super::status::tag_of;
use crate::controllers::ReconcileError;
use crate::controllers::{Context, SecretReader, WorkSlots};
use crate::error::{InternalError, SpecError};
use crate::manifests::{EditOptions, ImageChange};
use crate::telemetry::Metrics;
use crate::writer::{GitChangeGuard, GitWriter, WriteRequest, WriteResult};
use imagewatch_crd::OnGitChange;

/// What the write step uses: the git writer (waited for without holding a work slot), and
/// for a pull request the forge token's Secret, the client the finalizer is added with, and
/// the metrics the forge and the pull request steps are counted in.
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
        }
    }
}

/// The write intent that sets this watch's target to `image`, at `git` (dereferenced here
/// when not given).
pub(super) async fn write_request(
    me: &Prepared<'_>,
    dereference: &DereferenceContext<'_>,
    image: String,
    git: Option<GitLocation>,
) -> Result<WriteRequest, ReconcileError> {
    let watch = me.watch;
    let git = match git {
        Some(git) => git,
        None => resolve_git(watch, dereference).await?,
    };
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
        watch: format!("{}/{}", me.rules.namespace, watch.name_any()),
        dry_run: me.rules.pause.is_some(),
        push_branch: git.push_branch.map(|template| {
            template
                .replace("{namespace}", &me.rules.namespace)
                .replace("{name}", &watch.name_any())
        }),
        guard: git_change_guard(me),
    })
}

/// `spec.onGitChange`: what this watch (or pattern member) last wrote, from its status —
/// the value a hold replaced while held, else `applied` — for the writer to tell a change
/// someone else made. `None` with `Overwrite`, or before anything was written.
fn git_change_guard(me: &Prepared<'_>) -> Option<GitChangeGuard> {
    let watch = me.watch;
    let mode = watch.spec.on_git_change.unwrap_or_default();
    if mode == OnGitChange::Overwrite {
        return None;
    }
    let status = watch.status.as_ref()?;
    let last_written = if watch.spec.is_pattern() {
        let member = status
            .members
            .iter()
            .find(|m| m.repository == me.repo.path)?;
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

/// `spec.git.pullRequest` (see `pull_request.rs`): when `branch` already holds the image, the
/// open pull request is closed and nothing is pushed; otherwise the edit goes to the push
/// branch and one pull request for it is opened or updated. [`pull_request::FINALIZER`] is added
/// before a pull request can exist.
#[allow(clippy::too_many_arguments)]
pub(super) async fn write_and_propose(
    watch: &ImageWatch,
    me: &Prepared<'_>,
    mine: WriteRequest,
    others: Vec<WriteRequest>,
    settings: &imagewatch_crd::GitPullRequest,
    forge_url: &str,
    tag: &str,
    ctx: &WriteContext<'_>,
) -> Result<(WriteResult, pull_request::Delivered), ReconcileError> {
    let head = mine
        .push_branch
        .clone()
        .filter(|b| !b.is_empty() && *b != mine.branch)
        .ok_or_else(|| ReconcileError::InvalidSpec(SpecError::PullRequestWithoutPushBranch))?;
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
        .slots
        .without_work_slot(futures::future::join_all(
            requests.into_iter().map(|r| ctx.writer.apply(r)),
        ))
        .await
        .into_iter()
        .map(|r| r.map_err(ReconcileError::from));
    let write = results
        .next()
        .unwrap_or_else(|| Err(ReconcileError::Internal(InternalError::NoWriteResult)))?;
    let mut members = vec![(write.desired.clone(), write.file.clone())];
    for other in results {
        match other {
            Ok(w) => members.push((w.desired, w.file)),
            Err(e) => {
                tracing::warn!(watch = %watch.name_any(), error = %e, "a group member's write failed")
            }
        }
    }
    let on_base = ctx
        .slots
        .without_work_slot(ctx.writer.apply(on_base))
        .await?;
    let forge = pull_request::client(
        watch,
        settings,
        forge_url,
        &ctx.secrets,
        ctx.metrics,
        ctx.forge_http,
    )
    .await?;
    let mut vars = pull_request::TextVars {
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
        vars = pull_request::group_vars(vars, &members);
    }
    let step = PrStep {
        head: &head,
        wanted: on_base.changed_needed,
        vars,
        pushed: write.commit.is_some(),
    };
    // `status.applied` says what `branch` holds: a proposal is not applied until it is
    // merged (a PromotionPolicy reading this watch waits for that).
    // The outcome's write is `branch` (what is applied); the commit and its instants are
    // the push branch's (what is proposed).
    let pushed = write.pushed;
    pull_request_step(watch, settings, &forge, step, ctx)
        .await
        .map(|d| {
            (
                WriteResult { pushed, ..on_base },
                pull_request::Delivered {
                    commit: on_base
                        .changed_needed
                        .then(|| write.holding_commit())
                        .flatten(),
                    ..d
                },
            )
        })
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
pub(super) async fn pattern_pull_requests(
    watch: &ImageWatch,
    settings: &imagewatch_crd::GitPullRequest,
    forge_url: &str,
    per_member: bool,
    results: &mut [MemberResult],
    indices: &[usize],
    on_base: Vec<WriteRequest>,
    heads: &[Option<String>],
    ctx: &WriteContext<'_>,
) -> Result<Option<pull_request::Delivered>, ReconcileError> {
    let forge = pull_request::client(
        watch,
        settings,
        forge_url,
        &ctx.secrets,
        ctx.metrics,
        ctx.forge_http,
    )
    .await?;
    let bases = ctx
        .slots
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
            Err(e) => results[i].outcome = Err(e.into()),
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
