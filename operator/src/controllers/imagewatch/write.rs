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
use super::pull_request::{self, MemberProposal, ProposeContext};
use super::scan::RepoScan;
use crate::cluster::deploy::DeployTracker;
use crate::controllers::ReconcileError;
use crate::controllers::{Context, WorkSlots};
use crate::error::{InternalError, SpecError};
use crate::manifests::{EditOptions, ImageChange};
use crate::sources::routing::{PendingEvents, PushStages};
use crate::writer::{GitChangeGuard, GitWriter, WriteRequest, WriteResult};

/// What the write step uses: the git writer (waited for without holding a work slot), the
/// registry events awaiting their commit, the deployment tracker a commit is handed to, and
/// what proposing the writes in pull requests uses.
#[derive(Clone, Copy)]
pub(super) struct WriteContext<'a> {
    pub(super) writer: &'a GitWriter,
    pub(super) slots: WorkSlots<'a>,
    pub(super) pending: &'a PendingEvents,
    pub(super) deploys: &'a Arc<DeployTracker>,
    pub(super) propose: ProposeContext<'a>,
}

impl<'a> WriteContext<'a> {
    /// The write step's view of the shared services.
    pub(super) fn of(ctx: &'a Context) -> Self {
        WriteContext {
            writer: &ctx.writer,
            slots: ctx.work_slots(),
            pending: &ctx.pending,
            deploys: &ctx.deploys,
            propose: ProposeContext::of(ctx),
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
    let metrics = ctx.propose.metrics;
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
            // The commit proposing the tag, when `branch` lacks it: its push's stages.
            let stages = (on_base.changed_needed && write.holding_commit().is_some())
                .then(|| {
                    ctx.pending.committed(
                        &intent.registry,
                        &intent.repository,
                        write.pushed,
                        metrics,
                    )
                })
                .flatten();
            let mut members = vec![(write.desired.clone(), write.file.clone())];
            members.extend(others);
            let (result, delivered) = pull_request::propose_watch(
                watch,
                (&proposal.settings, &proposal.forge_url),
                (&intent.request, image, tag),
                (write, on_base),
                members,
                &ctx.propose,
            )
            .await?;
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
                    written.stages = ctx.pending.committed(
                        &intent.registry,
                        &intent.repository,
                        w.pushed,
                        metrics,
                    );
                }
            }
            let bases = ctx
                .slots
                .without_work_slot(futures::future::join_all(
                    own.iter().map(|i| ctx.writer.read_base(&i.request)),
                ))
                .await;
            let heads: Vec<String> = own
                .iter()
                .map(|i| i.request.push_branch.clone().unwrap_or_default())
                .collect();
            let pushed = writes
                .iter()
                .map(|w| w.result.as_ref().ok().cloned())
                .collect();
            let (proposed, together) = pull_request::propose_members(
                watch,
                &proposal.settings,
                &proposal.forge_url,
                per_member,
                pushed,
                bases,
                &heads,
                &ctx.propose,
            )
            .await?;
            for (written, proposed) in writes.iter_mut().zip(proposed) {
                match proposed {
                    MemberProposal::Untouched => {}
                    MemberProposal::Proposed(proposed) => {
                        let (base, pull_request) = *proposed;
                        written.result = Ok(base);
                        written.pull_request = pull_request;
                    }
                    MemberProposal::Failed(e) => written.result = Err(e),
                }
            }
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
        written.stages = ctx.pending.committed(
            &intent.registry,
            &intent.repository,
            w.pushed,
            ctx.propose.metrics,
        );
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
            ctx.propose.client,
            ctx.propose.metrics,
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
