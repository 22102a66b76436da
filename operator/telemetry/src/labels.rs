//! The label sets of the operator's metric families (one struct per family shape).

use prometheus_client::encoding::EncodeLabelSet;

/// Labels of the SQS consumer's message counts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SqsLabels {
    /// `received`, `delivered`, `ignored`, `malformed`, `deleted`, `receive_error`,
    /// `delete_error`, `released`, `release_error`.
    pub result: String,
}

/// Which controller: `imagewatch` or `promotionpolicy`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `imagewatch` or `promotionpolicy`.
    pub controller: String,
}

/// Labels of a failed reconcile: which controller, who can fix it, and the `Ready` reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileErrorLabels {
    /// `imagewatch` or `promotionpolicy`.
    pub controller: String,
    /// `user`, `transient` or `internal`.
    pub category: String,
    /// The condition reason reported (`InvalidSpec`, `RegistryError`, `GitError`, …).
    pub reason: String,
}

/// Which shared cache: `scans`, `appearances` or `failures`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    /// `scans` (repository index), `appearances` (tag times) or `failures` (backoff counters).
    pub cache: String,
}

/// Labels of a controller stream error (its watch or its runner failing).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerErrorLabels {
    /// `imagewatch` or `promotionpolicy`.
    pub controller: String,
    /// `watch` (listing or watching the objects failed: a missing CRD, RBAC) or `runner`.
    pub error: String,
}

/// The stage of a push a time is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    /// `routed`, `listed`, `selected`, `committed`, `pushed` or `status_written`.
    pub stage: String,
}

/// The kind of object a count is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `ImageWatch` or `PromotionPolicy`.
    pub kind: String,
}

/// Outcome label of one reconcile.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// `ok` or an error category (`invalid_spec`, `registry`, `git`, …).
    pub outcome: String,
}

/// Labels of a registry request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RegistryLabels {
    /// Registry host.
    pub registry: String,
    /// `ok` or an error category.
    pub outcome: String,
}

/// Labels of a registry event (webhook, SQS).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    /// `distribution`, `dockerhub`, `ghcr`, `harbor`, `quay`, `generic`, `sqs`.
    pub source: String,
    /// `matched` (some watch references the repository) or `ignored`.
    pub outcome: String,
}

/// Labels of webhook receiver requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// Provider route (`distribution`, `dockerhub`, `ghcr`, `harbor`, `quay`, `generic`).
    pub provider: String,
    /// `accepted`, `ignored`, `rejected_auth`, `malformed`, `too_large`, `dropped`.
    pub result: String,
}

/// Labels of a git push.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PushLabels {
    /// `ok`, `rejected` or an error category.
    pub outcome: String,
}

/// Labels of a request that Argo CD refresh an Application.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefreshLabels {
    /// `requested`, `forbidden` (RBAC) or `failed`.
    pub outcome: String,
}

/// Labels of a commit followed to the Applications that deploy it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeploymentLabels {
    /// `deployed`, `timed_out` or `no_application`.
    pub outcome: String,
}

/// Labels of a check of Git for a write intent.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GitReadLabels {
    /// Where the answer came from: `fetch` (a batch that fetched), `recent-fetch` (a batch
    /// that changed nothing, read on a fetch made moments ago) or `unchanged` (the same
    /// intent was found satisfied on that same head; no batch).
    pub source: String,
}

/// Labels of a PromotionPolicy promotion step.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PromotionLabels {
    /// `committed`, `pr_opened`, `pr_updated`, `pr_closed`, `up_to_date`, `gated`, `held`
    /// (nothing left to propose: someone else changed the target, `spec.onGitChange`) or an
    /// error category.
    pub outcome: String,
}

/// Labels of an ImageWatch pull request step (`spec.git.pullRequest`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchPullRequestLabels {
    /// `opened`, `updated`, `unchanged`, `closed`, `not_needed`, `closed_on_delete` or
    /// `failed`.
    pub action: String,
}

/// Labels of a forge (pull request API) request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForgeLabels {
    /// `github`, `gitlab` or `gitea`.
    pub provider: String,
    /// `ok` or an error category (`rate_limited`, `unauthorized`, `already_exists`, …).
    pub outcome: String,
}

/// Labels of a notification (`spec.notify`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotificationLabels {
    /// `Slack`, `Teams`, `Webhook`, `CommitStatus` or `PullRequestComment`.
    pub r#type: String,
    /// `Committed`, `PullRequest`, `Waiting`, `Approved`, `Held`, `Failing`, `Recovered`.
    pub happening: String,
    /// `sent`, `failed` (after its retries, or refused), `dropped` (too many waiting).
    pub outcome: String,
}

/// Labels of one shard.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardLabels {
    /// Shard number.
    pub shard: String,
}

/// Labels of a shard ownership change.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardTransitionLabels {
    /// `acquired`, `released` or `lost`.
    pub transition: String,
}

/// A bare outcome label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `ok` or what went wrong.
    pub outcome: String,
}

/// Labels of the watches-by-condition gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct WatchConditionLabels {
    /// The `Ready` condition's status: `True`, `False` or `Unknown` (no condition yet).
    pub ready: String,
    /// The `Ready` condition's reason (`UpToDate`, `GitError`, …; `None` before the first).
    pub reason: String,
}

/// Labels of a registry's rate-limit waits.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RateLimitLabels {
    /// Registry host.
    pub registry: String,
}

/// Labels of an internal queue.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// `events` (registry events to route) or `reconciles` (watches woken by events).
    pub queue: String,
}

/// Labels of a credential refresh (a short-lived token obtained from its issuer).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CredentialLabels {
    /// What issued it: `github-app` (a GitHub App installation token).
    pub kind: String,
    /// `ok` or an error category (`unauthorized`, `not_found`, `rate_limited`, `network`, …).
    pub outcome: String,
}

/// Labels of an object refused by the allow-list.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotAllowedLabels {
    /// `ImageWatch` or `PromotionPolicy`.
    pub kind: String,
    /// What refused: `namespace`, `git_url`, `path`, `registry`, `aws`, `argocd_project`.
    pub check: String,
}

/// Labels of a signature check (`spec.verify`, the signature gate).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignatureLabels {
    /// `ImageWatch` or `PromotionPolicy`.
    pub kind: String,
    /// `verified`, `missing`, `invalid` or `error` (the registry could not be read).
    pub outcome: String,
}
