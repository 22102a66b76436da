//! Deliver step of a PromotionPolicy reconcile: the candidate as a commit on the target branch
//! (mode `Commit`) or on the policy's pull request branch (mode `PullRequest`), both through
//! the git writer (the one commit path: its clone, its per-branch order, its signing and its
//! retry), and the forge client of the pull request.

use super::decide::Decision;
use super::read::{Location, utf8_files};
use super::shared::Shared;
use crate::error::{InternalError, PromotionError, SpecError};
use std::sync::Arc;

use imagewatch_crd::PromotionPolicy;
use kube::ResourceExt;

use crate::cluster::secrets;
use crate::controllers::SecretReader;
use crate::{
    forge::ForgeClient,
    git::{FileEdit, GitError, Oid, Repo},
    promotion::{
        self,
        render::{self, TextContext},
    },
    writer::{CommitOutcome, CommitRequest},
};

/// What the deliver step uses: the git writer (the one commit path), and for the pull
/// request the forge token's Secret, the forge HTTP client and the metrics forge calls are
/// counted in.
#[derive(Clone, Copy)]
pub(super) struct DeliverContext<'a> {
    pub(super) writer: &'a crate::writer::GitWriter,
    pub(super) secrets: SecretReader<'a>,
    pub(super) http: &'a reqwest::Client,
    pub(super) metrics: &'a Arc<crate::telemetry::Metrics>,
}

impl<'a> DeliverContext<'a> {
    /// The deliver step's view of what the policy reconciles share.
    pub(super) fn of(shared: &'a Shared) -> Self {
        DeliverContext {
            writer: &shared.ctx.writer,
            secrets: SecretReader::of(&shared.ctx),
            http: &shared.ctx.forge_http,
            metrics: &shared.ctx.metrics,
        }
    }
}

/// Mode `PullRequest`, the candidate already in the target: closes the pull request still
/// open from `head` into `base`, if any (the one it proposed is no longer needed).
pub(super) async fn close_stale(
    forge: &ForgeClient,
    head: &str,
    base: &str,
) -> Result<Option<crate::forge::PullRequest>, PromotionError> {
    let Some(open) = forge.find_open(head, base).await? else {
        return Ok(None);
    };
    forge.close(&open).await?;
    Ok(Some(open))
}

/// Mode `PullRequest`: opens (or updates) the pull request from `head` into `base` for the
/// candidate, titled and described from it and its gate report.
pub(super) async fn propose(
    forge: &ForgeClient,
    settings: &imagewatch_crd::promotion::PullRequestSettings,
    (head, base): (&str, &str),
    (candidate, report): (&promotion::Candidate, &promotion::gates::GateReport),
    text: TextContext<'_>,
) -> Result<crate::forge::Ensured, PromotionError> {
    Ok(forge
        .ensure(&crate::forge::NewPullRequest {
            head: head.to_owned(),
            base: base.to_owned(),
            title: render::title(settings.title.as_deref(), candidate, text),
            body: render::body(candidate, &report.gates, text),
            labels: settings.labels.clone().unwrap_or_default(),
            auto_merge: settings.auto_merge.unwrap_or(false),
        })
        .await?)
}

pub(super) async fn forge_client(
    policy: &PromotionPolicy,
    git_url: &str,
    ctx: &DeliverContext<'_>,
) -> Result<ForgeClient, PromotionError> {
    let settings = policy.spec.pull_request.as_ref().ok_or_else(|| {
        PromotionError::InvalidSpec(SpecError::Required {
            field: "spec.pullRequest",
            when: Some("in mode PullRequest"),
        })
    })?;
    let token = match &settings.secret_ref {
        Some(secret) => {
            let namespace = policy.namespace().unwrap_or_default();
            Some(secrets::forge_token(&ctx.secrets, &namespace, &secret.name).await?)
        }
        None => None,
    };
    Ok(ForgeClient::new(
        settings.provider,
        settings.api_url.as_deref(),
        settings.repository.as_deref(),
        git_url,
        token,
        ctx.http.clone(),
    )?
    .with_metrics(ctx.metrics.clone()))
}

/// What planning a promotion commit on a fetched head needs: the writer asks again on the
/// new head when a push is rejected.
pub(super) struct Planner {
    pub(super) decision: Decision,
    /// `namespace/name` of the policy, for the commit message.
    pub(super) policy: String,
    /// The source, for the commit message.
    pub(super) source: String,
    /// The target branch, for the commit message.
    pub(super) branch: String,
}

impl Planner {
    /// The edits and message on `head`; `None` when the target already holds the candidate.
    pub(super) fn plan(
        &self,
        repo: &Repo,
        head: Oid,
    ) -> crate::git::Result<Option<(Vec<FileEdit>, String)>> {
        let decision = &self.decision;
        let files = utf8_files(repo.read_files_under(head, &decision.to_path)?);
        let target = promotion::inventory(&files, &decision.to_path);
        let candidate = decision
            .candidate(&target)
            .map_err(|e| GitError::apply(e.to_string()))?;
        if candidate.is_current() {
            return Ok(None);
        }
        let edits =
            promotion::plan_target_edits(&files, &target, &candidate).map_err(GitError::apply)?;
        let message = render::commit_message(
            &candidate,
            &edits.changes,
            TextContext {
                policy: &self.policy,
                source: &self.source,
                path: &decision.to_path,
                branch: &self.branch,
            },
        );
        Ok(Some((edits.files, message)))
    }
}

/// Mode Commit: the edits on `to.branch`, through the git writer (signed, in the task of
/// that branch), recomputed on the fetched head of every attempt (a rejected push is
/// fetched, re-planned and pushed again; never forced).
pub(super) async fn commit_to_target(
    ctx: &DeliverContext<'_>,
    location: &Location,
    decision: Decision,
    policy_name: &str,
) -> Result<Option<String>, PromotionError> {
    let planner = Planner {
        decision,
        policy: policy_name.to_string(),
        source: format!("PromotionPolicy {policy_name}"),
        branch: location.base.clone(),
    };
    let result = ctx
        .writer
        .commit(CommitRequest {
            url: location.url.clone(),
            branch: location.base.clone(),
            auth: location.auth.clone(),
            push_branch: None,
            plan: Box::new(move |repo, head| planner.plan(repo, head)),
        })
        .await?;
    Ok(match result.outcome {
        CommitOutcome::Pushed { commit } => Some(commit),
        CommitOutcome::AlreadyPushed { .. } | CommitOutcome::NothingToDo { .. } => None,
    })
}

/// Mode PullRequest: one commit with the edits on the fetched target head, published to the
/// policy's own branch through the git writer (signed, in the task of that branch). The
/// edits are those planned on `base_head`; the writer plans again if the target moved since.
/// An existing branch is overwritten (with a lease on the tip inspected) only when it holds
/// nothing but our earlier commit (`git::Repo::check_push_branch`), and only when its content
/// or base differ. Returns the branch's head and whether it was pushed.
pub(super) async fn push_pull_request_branch(
    ctx: &DeliverContext<'_>,
    location: &Location,
    branch: &str,
    base_head: Oid,
    edits: Vec<FileEdit>,
    message: String,
    planner: Planner,
) -> Result<(String, bool), PromotionError> {
    let result = ctx
        .writer
        .commit(CommitRequest {
            url: location.url.clone(),
            branch: location.base.clone(),
            auth: location.auth.clone(),
            push_branch: Some(branch.to_string()),
            plan: Box::new(move |repo, head| {
                if head == base_head {
                    Ok(Some((edits.clone(), message.clone())))
                } else {
                    planner.plan(repo, head)
                }
            }),
        })
        .await?;
    match result.outcome {
        CommitOutcome::Pushed { commit } => Ok((commit, true)),
        CommitOutcome::AlreadyPushed { head } => Ok((head, false)),
        CommitOutcome::NothingToDo { .. } => {
            Err(PromotionError::Internal(InternalError::NothingToCommit))
        }
    }
}
