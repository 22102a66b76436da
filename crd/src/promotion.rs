//! `PromotionPolicy`: what one stage runs is proposed to another (staging → production),
//! usually as a pull request, behind gates.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
#[cfg(feature = "kube")]
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::common::ForgeProvider;
use crate::common::{GitSource, SecretRef, Verify};
use crate::imagewatch::OnGitChange;

/// Proposes what a source stage runs to a target stage, with image references rewritten,
/// a release's tags aligned, and gates checked first.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(
    feature = "kube",
    derive(CustomResource, KubeSchema),
    kube(
        group = "imagewatch.dev",
        version = "v1alpha1",
        kind = "PromotionPolicy",
        namespaced,
        status = "PromotionPolicyStatus",
        shortname = "pp",
        category = "imagewatch-all",
        derive = "PartialEq",
        doc = "Proposes what a source stage runs to a target stage, behind gates, by commit or pull request.",
        printcolumn(
            name = "From",
            type_ = "string",
            json_path = ".status.source",
            description = "Source of the candidate"
        ),
        printcolumn(
            name = "To",
            type_ = "string",
            json_path = ".spec.to.path",
            description = "Target path"
        ),
        printcolumn(
            name = "Candidate",
            type_ = "string",
            json_path = ".status.candidateSummary",
            description = "Images proposed"
        ),
        printcolumn(
            name = "Gates",
            type_ = "string",
            json_path = ".status.gatesSummary",
            description = "Gates passed / total"
        ),
        printcolumn(
            name = "PR",
            type_ = "string",
            json_path = ".status.pullRequest.url",
            description = "Open pull request"
        ),
        printcolumn(
            name = "Ready",
            type_ = "string",
            json_path = ".status.conditions[?(@.type==\"Ready\")].status",
            description = "Ready condition"
        ),
        printcolumn(
            name = "Changed",
            type_ = "date",
            json_path = ".status.history[0].time",
            description = "When the last promotion was written to Git",
            priority = "1"
        ),
        printcolumn(
            name = "Age",
            type_ = "date",
            json_path = ".metadata.creationTimestamp"
        )
    )
)]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new("(has(self.mode) && self.mode == 'Commit') || has(self.pullRequest)").message("spec.pullRequest is required in mode PullRequest (the default)")))]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new("!has(self.gates) || !has(self.gates.soakSince) || self.gates.soakSince != 'FirstApplied' || has(self.from.path)").message("gates.soakSince FirstApplied reads the Git history of from.path: set from.path, or use soakSince Running with a watchSelector")))]
#[serde(rename_all = "camelCase")]
pub struct PromotionPolicySpec {
    /// Where the candidate comes from.
    pub from: PromotionSource,
    /// Where it goes.
    pub to: PromotionTarget,
    /// Followers take the leader's tag (the images of one release move together).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub align_tags: Option<AlignTags>,
    /// Checks that must pass before anything is proposed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gates: Option<Gates>,
    /// `PullRequest` (default) or `Commit` (directly to the target branch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PromotionMode>,
    /// Pull request settings (mode `PullRequest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<PullRequestSettings>,
    /// Promote exactly these tags (image name → tag) instead of the current candidate: a rollback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<BTreeMap<String, String>>,
    /// Stop proposing. Status keeps reporting the candidate and gates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// What to do with an image whose tag in `to.path` was last changed by a commit this
    /// policy did not make (a revert, a hand edit, another tool) and differs from what the
    /// policy last promoted there (`status.lastPromotions`). `HoldUntilNewer` (default): do
    /// not propose that image again until the source offers a tag other than the one that was
    /// replaced. `Hold`: not until the policy is annotated `imagewatch.dev/resume=<commit>`
    /// naming that commit. `Overwrite`: propose it anyway. Other images of the candidate are
    /// still proposed; a tag chosen by `pin` is never held. A hold is reported in
    /// `status.held` and as `Held=True` with reason `ChangedInGit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_git_change: Option<OnGitChange>,
    /// When changes may be written: `Allow` windows (only inside one) and `Deny` windows
    /// (never inside one), each a cron schedule with a duration and a time zone. An admin
    /// freeze (the operator's freeze ConfigMap) stops every object of a namespace or of the
    /// cluster the same way (reason `Frozen`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub windows: Option<Vec<crate::common::Window>>,
    /// Where messages about this object go, and which happenings each wants (see the
    /// `Notification` fields). Delivery is asynchronous and never delays a commit.
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.all(a, self.exists_one(b, b.name == a.name))").message("notify names must be unique")))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 10))]
    pub notify: Option<Vec<crate::common::Notification>>,
    /// How often gates are evaluated again when nothing else changes (a soak ending, an
    /// Application becoming healthy), e.g. `1m`. Between 10s and 24h. Defaults to 1m.
    /// Changes of the source ImageWatches are acted on at once.
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("duration(self) >= duration('10s') && duration(self) <= duration('24h')").message("interval must be between 10s and 24h")))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"), length(max = 32))]
    pub interval: Option<String>,
}

impl PromotionPolicySpec {
    /// The delivery mode (`PullRequest` when unset).
    pub fn mode(&self) -> PromotionMode {
        self.mode.unwrap_or_default()
    }
    /// Whether proposing is suspended.
    pub fn is_suspended(&self) -> bool {
        self.suspend.unwrap_or(false)
    }
    /// Re-evaluation interval text (`1m` when unset).
    pub fn interval_or_default(&self) -> &str {
        self.interval.as_deref().unwrap_or("1m")
    }
}

/// The source of a candidate. Exactly one field is set.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new("has(self.watchSelector) != has(self.path)").message("exactly one of from.watchSelector and from.path must be set")))]
#[serde(rename_all = "camelCase")]
pub struct PromotionSource {
    /// ImageWatches in this namespace whose applied tags form the candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch_selector: Option<LabelSelector>,
    /// An overlay directory (in `to.git`'s repository) whose images are copied: the
    /// `images:` of its kustomization, the `kustomize.images` of its
    /// `.argocd-source-*.yaml` files and the containers of its workloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("!self.startsWith('/') && !self.split('/').exists(s, s == '..')").message("path must be relative to the repository root and must not contain '..'")))]
    #[schemars(length(max = 1024))]
    pub path: Option<String>,
    /// Branch `path` is read from (and, for the `application` gate, the history the
    /// Application's revision is compared with). Defaults to `to.git.branch` (`main`), or the
    /// source watches' branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub branch: Option<String>,
}

/// The target of a promotion.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct PromotionTarget {
    /// Git repository (its `pushBranch` is not used: pull requests always come from
    /// `imagewatch/promote-<namespace>-<name>`); omitted: the source watches' repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,
    /// Directory (overlay) whose image references are updated, relative to the repository
    /// root. Every place in it holding a promoted image is updated.
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("!self.startsWith('/') && !self.split('/').exists(s, s == '..')").message("path must be relative to the repository root and must not contain '..'")))]
    #[schemars(length(min = 1, max = 1024))]
    pub path: String,
    /// Branch the change is proposed to (the pull request's base). Defaults to
    /// `to.git.branch` (`main`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub branch: Option<String>,
    /// Prefix rewrites applied to every promoted image reference (e.g. a staging account's
    /// registry → production's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_rewrite: Option<Vec<ImageRewrite>>,
    /// Registry credentials used by the `imageExists` gate for the rewritten references.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_secret_ref: Option<SecretRef>,
}

/// One prefix rewrite.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct ImageRewrite {
    /// Prefix to replace.
    #[schemars(length(min = 1, max = 512))]
    pub from: String,
    /// Replacement.
    #[schemars(length(max = 512))]
    pub to: String,
}

/// Tag alignment within a release.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct AlignTags {
    /// Image (last path segment, e.g. `my-api`) whose tag is authoritative.
    #[schemars(length(min = 1, max = 256))]
    pub leader: String,
    /// Images that take the leader's tag.
    pub followers: Vec<String>,
}

/// Gates checked before a promotion.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct Gates {
    /// Every promoted reference (after rewrite) must exist in its registry (manifest HEAD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_exists: Option<bool>,
    /// The candidate must have been applied in the source for at least this long, e.g. `30m`.
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("duration(self) >= duration('0s')").message("soak must be a duration such as 30m")))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"), length(max = 32))]
    pub soak: Option<String>,
    /// What `soak` counts from. `Running` (the default): the candidate is what the source runs
    /// now, once it has run there that long. `FirstApplied`: the candidate is the newest state
    /// of `from.path` first applied at least `soak` ago, read from the source branch's Git
    /// history (so it survives restarts), whether or not the source still runs it; a source
    /// that gets a new build more often than the soak still promotes. Needs `from.path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak_since: Option<SoakSince>,
    /// An Argo CD Application that must be Synced and Healthy at a revision holding the candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<ApplicationRef>,
    /// Require a human approval: the annotation `imagewatch.dev/approve` on this object set to
    /// `status.candidateId` (or `status.candidateSummary`). Who may approve is who may
    /// annotate the object (RBAC `patch` on promotionpolicies); the operator only reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<bool>,
    /// Every promoted reference (after rewrite) must carry, in the target registry, a cosign
    /// signature by one of these keys, e.g. `{cosign: {secretRef: {name: cosign-keys}}}`:
    /// the classic `sha256-<digest>.sig` tag or a Sigstore bundle referrer. Failing reasons
    /// `SignatureMissing` / `SignatureInvalid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Verify>,
}

/// What `gates.soak` counts from.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum SoakSince {
    /// Since the source applied what it runs now.
    #[default]
    Running,
    /// Since the source first applied the state proposed (the newest one old enough).
    FirstApplied,
}

/// An Argo CD Application.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct ApplicationRef {
    /// Application name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Application namespace (usually `argocd`).
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
}

/// How a promotion is delivered.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum PromotionMode {
    /// One pull request per policy, updated in place.
    #[default]
    PullRequest,
    /// A commit on the target branch.
    Commit,
}

/// Pull request settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct PullRequestSettings {
    /// `github`, `gitlab` or `gitea`.
    pub provider: ForgeProvider,
    /// API base URL for self-hosted forges; omitted: the provider's public API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub api_url: Option<String>,
    /// Secret (in this namespace) with `token` for the forge API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    /// The repository on the forge: `owner/name` (GitHub, Gitea) or the project path
    /// `group/subgroup/name` (GitLab). Omitted: taken from the Git URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub repository: Option<String>,
    /// Title template. Placeholders: `{{summary}}` (the images and tags), `{{path}}`,
    /// `{{branch}}`, `{{policy}}`. Defaults to `Promote {{summary}} to {{path}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub title: Option<String>,
    /// Labels added to the pull request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// Merge automatically when the forge's checks pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_merge: Option<bool>,
}

/// Observed state of a PromotionPolicy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct PromotionPolicyStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The last value of the annotation `imagewatch.dev/requestedAt` the operator acted on:
    /// a new value asks for an immediate re-check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub last_handled_requested_at: Option<String>,
    /// Human-readable source (selector or path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Images proposed, after rewrite and alignment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidate: Vec<PromotedImage>,
    /// One line summary of the candidate (`my-api:v1.2.4, worker:v1.2.4`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_summary: Option<String>,
    /// Short fingerprint of the candidate (images and tags). With `gates.approval`, a person
    /// approves exactly this candidate: `kubectl annotate pp <name> imagewatch.dev/approve=<id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_id: Option<String>,
    /// Each gate's result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<GateStatus>,
    /// `passed/total`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gates_summary: Option<String>,
    /// The open pull request, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<PullRequestRef>,
    /// The most recent promotions, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_promotions: Vec<Promotion>,
    /// The last 10 changes written to Git (one per promoted image), newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub history: Vec<crate::common::ChangeRecord>,
    /// The failure `Failing` messages were sent for, and to which destinations (cleared with
    /// the `Recovered` messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_notified: Option<crate::common::FailureNotified>,
    /// The images not proposed again because a commit the policy did not make changed them
    /// in the target after the policy promoted them (see `spec.onGitChange`), one per image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<HeldImage>,
    /// Ready, GatesPassing, PullRequestOpen, and Held once an image was held.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One promoted image.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct PromotedImage {
    /// Image name (last path segment).
    pub name: String,
    /// Full reference in the target (after rewrite).
    pub image: String,
    /// Tag proposed.
    pub tag: String,
    /// Tag the target holds now, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
}

/// An image of the candidate held back by a change in the target made by someone else
/// (`status.held`): the fields of an ImageWatch's `status.held`, for one image.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct HeldImage {
    /// Image name (last path segment), as in `status.candidate`.
    pub name: String,
    /// The commit that last changed the image's tag in `to.path`.
    pub commit: String,
    /// Its author, `Name <email>`.
    pub author: String,
    /// The tag it set.
    pub value: String,
    /// The tag the policy had promoted there, which it replaced.
    pub replaced: String,
}

/// One gate's result.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct GateStatus {
    /// Gate name: imageExists, soak, application, approval.
    pub name: String,
    /// Whether it passes.
    pub passed: bool,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A pull request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct PullRequestRef {
    /// Web URL.
    pub url: String,
    /// Number (GitHub/Gitea) or IID (GitLab).
    pub number: i64,
    /// Source branch.
    pub branch: String,
}

/// A past promotion.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct Promotion {
    /// Image name → tag promoted.
    pub tags: BTreeMap<String, String>,
    /// Commit created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Pull request URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<String>,
    /// When.
    pub at: Time,
}

/// Annotation a person sets to approve a candidate (`gates.approval`): its value is
/// `status.candidateId` or `status.candidateSummary`.
pub const APPROVE_ANNOTATION: &str = "imagewatch.dev/approve";

/// Gate names, as reported in `status.gates[].name`.
pub mod gate {
    /// Every promoted reference exists in its (target) registry.
    pub const IMAGE_EXISTS: &str = "imageExists";
    /// The source has run the candidate long enough.
    pub const SOAK: &str = "soak";
    /// The source's Argo CD Application is Synced and Healthy at a revision with the candidate.
    pub const APPLICATION: &str = "application";
    /// A person approved this candidate.
    pub const APPROVAL: &str = "approval";
    /// Every promoted image carries a cosign signature by a trusted key.
    pub const SIGNATURE: &str = "signature";
}

/// Reasons of PromotionPolicy conditions (besides the shared ones in
/// [`crate::conditions::reason`]).
pub mod reason {
    /// Ready: the target already holds the candidate; nothing to propose.
    pub const UP_TO_DATE: &str = "UpToDate";
    /// Ready: the candidate was committed to the target branch (mode Commit).
    pub const COMMITTED: &str = "Committed";
    /// Ready: a pull request proposes the candidate.
    pub const PROPOSED: &str = "Proposed";
    /// Ready: a candidate differs from the target and waits for its gates.
    pub const WAITING_FOR_GATES: &str = "WaitingForGates";
    /// Ready: a source ImageWatch has not applied a tag yet (or the source path has no images).
    pub const SOURCE_NOT_READY: &str = "SourceNotReady";
    /// Ready: the forge API failed or refused (rate limit, authentication, validation).
    pub const FORGE_ERROR: &str = "ForgeError";
    /// GatesPassing: every gate passes.
    pub const GATES_PASSED: &str = "GatesPassed";
    /// GatesPassing: there is nothing to promote, so no gate was evaluated.
    pub const NOTHING_TO_PROMOTE: &str = "NothingToPromote";
    /// GatesPassing: a promoted image is missing in its registry.
    pub const IMAGE_MISSING: &str = "ImageMissing";
    /// GatesPassing: the source has not run the candidate for the soak time yet.
    pub const SOAKING: &str = "Soaking";
    /// GatesPassing: the Application is not Synced and Healthy at a revision with the candidate.
    pub const APPLICATION_NOT_HEALTHY: &str = "ApplicationNotHealthy";
    /// GatesPassing: nobody approved this candidate yet.
    pub const AWAITING_APPROVAL: &str = "AwaitingApproval";
    /// GatesPassing: a gate could not be evaluated (registry or API failure).
    pub const GATE_ERROR: &str = "GateError";
    /// PullRequestOpen: a pull request is open.
    pub const OPEN: &str = "Open";
    /// PullRequestOpen: no pull request is open.
    pub const NO_PULL_REQUEST: &str = "NoPullRequest";
    /// PullRequestOpen: the open pull request was closed (the target already matches).
    pub const CLOSED: &str = "Closed";
    /// PullRequestOpen: mode Commit opens no pull requests.
    pub const NOT_APPLICABLE: &str = "NotApplicable";
}
