//! Fields shared by both resources: Secret references and the Git location to write to.

#[cfg(feature = "kube")]
use kube::KubeSchema;
#[cfg(not(feature = "kube"))]
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// CEL rule of a Secret name: a DNS subdomain (RFC 1123), as Kubernetes names Secrets.
pub const SECRET_NAME_RULE: &str =
    "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')";

/// CEL rule of a Git URL: `https://` or `ssh://` with a host that does not start with `-` or
/// `/`, or scp-like `user@host:path`; no whitespace anywhere. Plain `http://` is refused: it
/// would send the repository's credentials, and its content, in the clear.
pub const GIT_URL_RULE: &str = "self.matches('^(https|ssh)://([^@/\\\\s]+@)?[A-Za-z0-9\\\\[][^/\\\\s]*/[^\\\\s]+$') || self.matches('^[A-Za-z0-9._-]+@[A-Za-z0-9][A-Za-z0-9.-]*:[^\\\\s]+$')";

/// A Secret in the same namespace as the object that names it. Cross-namespace references are
/// not allowed: a team can only use credentials it can already read.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    /// Name of the Secret, in the same namespace as this object: a DNS subdomain name
    /// (lower-case letters, digits, `-` and `.`), never a path or `namespace/name`.
    #[cfg_attr(feature = "kube", x_kube(validation = kube::core::Rule::new(SECRET_NAME_RULE).message("secretRef.name must be the name of a Secret in this namespace: a DNS subdomain name (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit); paths and other namespaces' Secrets are refused")))]
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Where in Git the desired state lives and how to write to it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct GitSource {
    /// Repository URL: `https://…` (token or basic auth) or `ssh://git@host/…` /
    /// `git@host:…` (SSH key with known_hosts). Plain `http://` is refused (it sends the
    /// credentials in the clear); so are `file://`, local paths and other transports
    /// (`ext::`, `git://`, …): they would read the operator's own disk or run commands.
    #[cfg_attr(feature = "kube", x_kube(validation = kube::core::Rule::new(GIT_URL_RULE).message("url must be https://host/…, ssh://[user@]host/… or user@host:path; http:// (credentials and content in the clear), file://, local paths and other transports (ext::, git://, …) are refused")))]
    #[schemars(length(min = 1, max = 2048))]
    pub url: String,
    /// Branch to commit to. Defaults to `main`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub branch: Option<String>,
    /// Secret with Git credentials, in this namespace: `username` + `password` (or `token`) for
    /// HTTPS; `sshPrivateKey` + `knownHosts` for SSH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    /// Push to this branch instead of `branch` (commits are still based on `branch`), e.g.
    /// `imagewatch/{name}` for a branch a pull request or CI picks up. `{namespace}` and
    /// `{name}` are replaced by the watch's. The operator force-updates only branches whose
    /// commits it made itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub push_branch: Option<String>,
    /// ImageWatch only (a PromotionPolicy has `spec.pullRequest`): open one pull request from
    /// the push branch into `branch` and keep it current. A newer tag updates the same pull
    /// request; it is closed when `branch` already holds the tag. `pushBranch` defaults to
    /// `imagewatch/{namespace}-{name}` here, and for the members of a `spec.group` to the
    /// shared `imagewatch/{namespace}-group-{group}`: one commit and one pull request per
    /// group. `status.applied` keeps saying what `branch` holds, so a proposal counts as
    /// applied (for a PromotionPolicy too) once it is merged. Pattern images: see
    /// `perMember`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<GitPullRequest>,
}

/// The pull request of an ImageWatch's push branch.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct GitPullRequest {
    /// `github`, `gitlab` or `gitea`.
    pub provider: ForgeProvider,
    /// API base URL for self-hosted forges, e.g. `https://gitea.example.com/api/v1`;
    /// omitted: the provider's API on the Git URL's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub api_url: Option<String>,
    /// Secret (in this namespace) with `token` for the forge API (or GitHub App keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    /// The repository on the forge: `owner/name` (GitHub, Gitea) or the project path
    /// (GitLab). Omitted: taken from the Git URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub repository: Option<String>,
    /// Title template. Placeholders: `{{image}}` (repository), `{{tag}}`, `{{watch}}`
    /// (`namespace/name`), `{{branch}}`, `{{file}}`, `{{group}}`. Defaults to
    /// `Update {{image}} to {{tag}}` (a group's: `Update group {{group}} to {{tag}}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub title: Option<String>,
    /// Body template, with the title's placeholders and `{{before}}` (the image `branch`
    /// holds). Defaults to a short description of the change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8192))]
    pub body: Option<String>,
    /// Labels added to the pull request (templates too, e.g. `image/{{tag}}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20))]
    pub labels: Option<Vec<String>>,
    /// Merge with the forge's own auto-merge once its required checks pass (GitHub auto-merge,
    /// GitLab merge when pipeline succeeds, Gitea merge when checks succeed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_merge: Option<bool>,
    /// Pattern images: one pull request per matching repository, each on its own push branch
    /// `<pushBranch>-<repository with / as ->` (true, the default), or one for all of them on
    /// `pushBranch` (false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_member: Option<bool>,
}

impl GitSource {
    /// The branch to write to (`main` when unset).
    pub fn branch(&self) -> &str {
        self.branch.as_deref().unwrap_or("main")
    }
}

/// Signatures an image must carry before its tag is written.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct Verify {
    /// cosign signatures: the classic `sha256-<digest>.sig` tag or a Sigstore bundle stored
    /// through the OCI referrers fallback tag `sha256-<digest>`.
    pub cosign: CosignVerify,
}

/// Which cosign signatures are trusted. Exactly one field is set.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[cfg_attr(feature = "kube", x_kube(validation = kube::core::Rule::new("has(self.secretRef) != has(self.keyless)").message("exactly one of verify.cosign.secretRef and verify.cosign.keyless must be set")))]
#[serde(rename_all = "camelCase")]
pub struct CosignVerify {
    /// A Secret in this namespace whose data values hold PEM ECDSA P-256 public keys
    /// (`cosign.pub`, one or more `PUBLIC KEY` blocks per value). A signature by any of them
    /// is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    /// Keyless signatures (Fulcio certificates, Rekor): not supported yet; an object naming
    /// it reports `InvalidSpec` and writes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyless: Option<KeylessVerify>,
}

/// The identity a keyless signature's certificate must name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct KeylessVerify {
    /// OIDC issuer of the signer's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub issuer: Option<String>,
    /// Subject (identity) of the signer's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub subject: Option<String>,
}

/// A newer tag that was not written: its signature does not verify (`spec.verify`), or its
/// image lacks a platform of `spec.tags.platforms`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct RefusedTag {
    /// The tag.
    pub tag: String,
    /// Its manifest digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The rule that refused it: `SignatureMissing`, `SignatureInvalid`, `PlatformMissing`
    /// (in `refused`), and in `refusedTags` also `Pattern`, `Exclude`, `Range`, `NotOrderable`,
    /// `Artifact`, `Pin` and `Group`.
    pub reason: String,
    /// Why.
    pub message: String,
}

/// One change an object made in Git (`status.history`, newest first).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct ChangeRecord {
    /// The tag written.
    pub tag: String,
    /// The image it belongs to, when the object writes more than one: a pattern member's
    /// repository, a promoted image's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Its manifest digest, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The commit that wrote it (on the push branch of a pull request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The pull request that proposes it, by URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<String>,
    /// When it was written.
    pub time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    /// What led to it: `Webhook` (a registry notification), `SQS` (an ECR event through
    /// EventBridge and SQS), `Peer` (an event another replica received), `Poll` (the
    /// interval, a re-check or a change of the object), `Promotion` (a PromotionPolicy's
    /// gates passed).
    pub trigger: String,
    /// From the registry event to the commit, in seconds (triggers `Webhook`, `SQS`, `Peer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_to_commit_seconds: Option<f64>,
}

/// How many changes `status.history` keeps.
pub const HISTORY_LIMIT: usize = 10;

/// How many refused tags `status.refusedTags` keeps.
pub const REFUSED_TAGS_LIMIT: usize = 20;

/// A time window of `spec.windows`: it starts at each time `schedule` names, in `timeZone`,
/// and lasts `duration`. With any `Allow` window, changes are written only while one is
/// open; nothing is written while a `Deny` window is open. Outside, the chosen change waits
/// (`Ready=False`, reason `OutsideWindow`, naming when the next window opens) and is written
/// at the opening.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct Window {
    /// `Allow` (the default) or `Deny`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<WindowKind>,
    /// When the window starts: a cron expression of 5 fields (minute hour day-of-month month
    /// day-of-week, e.g. `0 9 * * 1-5`; day-of-week 0 or 7 is Sunday), or 6 with seconds
    /// first.
    #[cfg_attr(feature = "kube", x_kube(validation = kube::core::Rule::new("self.matches('^\\\\s*\\\\S+(\\\\s+\\\\S+){4,5}\\\\s*$')").message("schedule must be a cron expression of 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first)")))]
    #[schemars(length(min = 1, max = 128))]
    pub schedule: String,
    /// How long it stays open from each start, e.g. `8h`, `30m`.
    #[cfg_attr(feature = "kube", x_kube(validation = kube::core::Rule::new("duration(self) > duration('0s') && duration(self) <= duration('8784h')").message("duration must be a duration such as 8h, more than 0s and at most a year (8784h)")))]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"), length(max = 32))]
    pub duration: String,
    /// IANA time zone the schedule is read in, e.g. `Europe/Berlin` (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
}

/// Whether a window lets changes through or keeps them out.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
pub enum WindowKind {
    /// Changes are written only while an Allow window is open.
    #[default]
    Allow,
    /// Nothing is written while a Deny window is open.
    Deny,
}

/// Where messages about an object go and which happenings they carry (`spec.notify[]`).
/// URLs and tokens come from a Secret in the object's namespace; no secret value ever
/// appears in a message, a status, an Event or a log line.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[cfg_attr(feature = "kube", x_kube(validation = kube::core::Rule::new("!(self.type == 'CommitStatus' || self.type == 'PullRequestComment') || has(self.provider)").message("provider (github, gitlab or gitea) is required for CommitStatus and PullRequestComment")))]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    /// Name of this destination, unique in the list: Events and metrics name it.
    #[cfg_attr(feature = "kube", x_kube(validation = kube::core::Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("name must be lower-case letters, digits and '-'")))]
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// `Slack` (an incoming webhook), `Teams` (a Workflows webhook posting an Adaptive Card),
    /// `Webhook` (JSON, signed with HMAC-SHA256 in `X-Signature: sha256=<hex>` when the
    /// Secret has a `token`), `CommitStatus` (on each commit the object makes) or
    /// `PullRequestComment` (on each pull request it opens or updates).
    #[serde(rename = "type")]
    pub type_: NotificationType,
    /// Secret in this namespace: key `address` holds the URL (`Slack`, `Teams`, `Webhook`);
    /// key `token` the HMAC key (`Webhook`, optional) or the forge API token
    /// (`CommitStatus`, `PullRequestComment`).
    pub secret_ref: SecretRef,
    /// The forge of `CommitStatus` and `PullRequestComment`; the repository is the object's
    /// Git repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<ForgeProvider>,
    /// The forge's API base URL when it is not the provider's default for the Git host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub api_url: Option<String>,
    /// The events wanted (default: all of them): `Committed`, `PullRequest` (opened,
    /// updated, merged), `Waiting` (a promotion waits on a gate), `Approved` (its gates
    /// passed), `Held` (Git holds a change someone else made), `Failing` (`Ready=False` for
    /// `failingAfter`), `Recovered` (`Ready=True` after a `Failing` message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8))]
    pub events: Option<Vec<HappeningKind>>,
    /// How long `Ready` must be `False` before a `Failing` message (Go duration; default
    /// `10m`).
    #[cfg_attr(feature = "kube", x_kube(validation = kube::core::Rule::new("self.matches('^([0-9]+(\\\\.[0-9]+)?(ms|s|m|h))+$')").message("failingAfter must be a duration such as 10m or 1h30m")))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub failing_after: Option<String>,
}

/// Where a notification goes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, schemars::JsonSchema)]
pub enum NotificationType {
    /// A Slack incoming webhook.
    Slack,
    /// A Microsoft Teams Workflows webhook.
    Teams,
    /// A JSON webhook, HMAC-signed.
    Webhook,
    /// A commit status on the forge.
    CommitStatus,
    /// A pull request comment on the forge.
    PullRequestComment,
}

impl NotificationType {
    /// Its name as the spec writes it (the `type` label of the notification metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Slack => "Slack",
            Self::Teams => "Teams",
            Self::Webhook => "Webhook",
            Self::CommitStatus => "CommitStatus",
            Self::PullRequestComment => "PullRequestComment",
        }
    }
}

/// What a notification is about.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    schemars::JsonSchema,
)]
pub enum HappeningKind {
    /// A tag was committed.
    Committed,
    /// A pull request was opened, updated or merged.
    PullRequest,
    /// A promotion waits on a gate.
    Waiting,
    /// A promotion's gates passed.
    Approved,
    /// Git holds a change someone else made.
    Held,
    /// `Ready=False` for longer than `failingAfter`.
    Failing,
    /// `Ready=True` again after a `Failing` message.
    Recovered,
}

impl HappeningKind {
    /// Its name as the spec writes it (the `happening` label of the notification metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Committed => "Committed",
            Self::PullRequest => "PullRequest",
            Self::Waiting => "Waiting",
            Self::Approved => "Approved",
            Self::Held => "Held",
            Self::Failing => "Failing",
            Self::Recovered => "Recovered",
        }
    }
}

/// Which destinations were told of the failure that began at `since` (`status.failureNotified`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct FailureNotified {
    /// When `Ready` turned `False` (its `lastTransitionTime`).
    pub since: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    /// The destinations sent a `Failing` message for it.
    #[schemars(length(max = 10))]
    pub destinations: Vec<String>,
}

/// Forge APIs for pull requests.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ForgeProvider {
    /// GitHub (pull requests).
    Github,
    /// GitLab (merge requests).
    Gitlab,
    /// Gitea / Forgejo (pull requests).
    Gitea,
}

/// Where a pull request stands (`status.pullRequest.state`).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PullRequestState {
    /// Open (GitLab: opened).
    #[default]
    Open,
    /// Closed without merging.
    Closed,
    /// Merged.
    Merged,
}

impl PullRequestState {
    /// `open`, `closed`, `merged`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Closed => "closed",
            Self::Merged => "merged",
        }
    }
}

impl std::fmt::Display for PullRequestState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod label_tests {
    use super::{HappeningKind, NotificationType};

    /// The metric labels are the names the spec writes, the same as before they were named.
    #[test]
    fn labels_are_the_spec_names() {
        for t in [
            NotificationType::Slack,
            NotificationType::Teams,
            NotificationType::Webhook,
            NotificationType::CommitStatus,
            NotificationType::PullRequestComment,
        ] {
            assert_eq!(t.as_str(), format!("{t:?}"));
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
        for k in [
            HappeningKind::Committed,
            HappeningKind::PullRequest,
            HappeningKind::Waiting,
            HappeningKind::Approved,
            HappeningKind::Held,
            HappeningKind::Failing,
            HappeningKind::Recovered,
        ] {
            assert_eq!(k.as_str(), format!("{k:?}"));
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
    }
}
