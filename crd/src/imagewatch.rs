//! `ImageWatch`: one watched image repository → one place in Git.
//!
//! A watch follows one registry repository with its own tag rule and writes the chosen tag into
//! exactly one target (a workload's container, a kustomization image, a Helm value, …). Two
//! watches on the same image with different rules drive two workloads independently.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
#[cfg(feature = "kube")]
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{ChangeRecord, GitSource, RefusedTag, SecretRef, Verify};

/// Follow new tags of one container image and write the chosen tag into one place in a Git
/// repository of manifests.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(
    feature = "kube",
    derive(CustomResource, KubeSchema),
    kube(
        group = "imagewatch.dev",
        version = "v1alpha1",
        kind = "ImageWatch",
        namespaced,
        status = "ImageWatchStatus",
        shortname = "iw",
        category = "imagewatch-all",
        derive = "PartialEq",
        doc = "Follows new tags of one container image and writes the chosen tag into one place in a Git repository of manifests.",
        printcolumn(
            name = "Image",
            type_ = "string",
            json_path = ".spec.image",
            description = "Watched image repository"
        ),
        printcolumn(
            name = "Pattern",
            type_ = "string",
            json_path = ".spec.tags.pattern",
            description = "Tag pattern"
        ),
        printcolumn(
            name = "Latest",
            type_ = "string",
            json_path = ".status.latest.tag",
            description = "Newest tag matching the rules"
        ),
        printcolumn(
            name = "Applied",
            type_ = "string",
            json_path = ".status.applied.tag",
            description = "Tag written to Git"
        ),
        printcolumn(
            name = "Members",
            type_ = "integer",
            json_path = ".status.memberCount",
            description = "Repositories matching a pattern image",
            priority = "1"
        ),
        printcolumn(
            name = "PR",
            type_ = "string",
            json_path = ".status.pullRequest.url",
            description = "Pull request of the push branch (spec.git.pullRequest)",
            priority = "1"
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
            description = "When the last change was written to Git",
            priority = "1"
        ),
        printcolumn(
            name = "Age",
            type_ = "date",
            json_path = ".metadata.creationTimestamp"
        )
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ImageWatchSpec {
    /// Image repository to follow, without tag or digest, e.g.
    /// `123456789012.dkr.ecr.ap-northeast-1.amazonaws.com/my-api` or `ghcr.io/org/app`.
    ///
    /// A pattern: path segments that are `*` each match one segment of a repository name,
    /// e.g. `123456789012.dkr.ecr.ap-northeast-1.amazonaws.com/hoge/*/*/*`. The watch then
    /// follows every matching repository of the registry (ECR: `DescribeRepositories`;
    /// other registries: `GET /v2/_catalog`) and writes each one's tag into its own target:
    /// `$1`..`$n` (or `${1}`) in the target's fields stand for what the `*`s matched, in
    /// order, and `$$` for a `$`. A pattern names its registry host, which holds no `*`.
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("!self.contains('@') && !self.matches(':[^/]*$')").message("image must be a repository without tag or digest (put tag rules in spec.tags)")))]
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("!self.contains('*') || (self.split('/').size() >= 2 && (self.split('/')[0].contains('.') || self.split('/')[0].contains(':') || self.split('/')[0] == 'localhost') && !self.split('/')[0].contains('*') && self.split('/').all(s, s == '*' || !s.contains('*')))").message("a '*' in image stands for one whole path segment of the repository (e.g. registry.example.com/team/*/api): the image must start with its registry host, which holds no '*', and a segment is either '*' or has no '*'")))]
    #[schemars(length(min = 1, max = 512))]
    pub image: String,

    /// Which tags are candidates and how they are ordered. Omitted: every tag, ordered by semver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<TagRules>,

    /// What is written: `Tag` (default) writes `image:tag`; `Pin` writes `image:tag@sha256:…`;
    /// `Follow` keeps the same tag and follows its digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<DigestMode>,

    /// Hold this exact tag (a manual pin or a rollback). Empty: follow the tag rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub pin: Option<String>,

    /// Stop writing to Git. Status keeps reporting the latest tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// Edit the target's image also when it is a YAML anchor that other places alias
    /// (`image: &img nginx:1.0` ... `image: *img`), which changes every one of them. Omitted or
    /// false: such an edit is refused (`Ready=False TargetNotFound`) with a message naming the
    /// aliases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit_shared_anchor: Option<bool>,

    /// What to do when the target's value in Git was last changed by a commit imagewatch did
    /// not make (a revert, a hand edit, another tool) and differs from what imagewatch last
    /// wrote there. `HoldUntilNewer` (default): write nothing until the registry has a tag
    /// other than the one that was replaced. `Hold`: write nothing until the watch is annotated
    /// `imagewatch.dev/resume=<commit>` naming that commit. `Overwrite`: write the chosen tag
    /// anyway. A hold is reported as `Held=True` with reason `ChangedInGit`.
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

    /// Polling interval used as a fallback when no registry event arrives, e.g. `5m`.
    /// Between 10s and 24h. Defaults to 5m.
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("duration(self) >= duration('10s') && duration(self) <= duration('24h')").message("interval must be between 10s and 24h")))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"), length(max = 32))]
    pub interval: Option<String>,

    /// Registry credentials. Omitted: anonymous access, except for an ECR image
    /// (`<account>.dkr.ecr.<region>.amazonaws.com/…`), read with the operator's AWS identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<RegistryCredentials>,

    /// Git repository and branch holding the manifests. Omitted: taken from the Argo CD
    /// Application that manages this object (its `spec.source` repoURL, targetRevision and
    /// path; target paths are then relative to that path), with credentials from a Secret in
    /// this namespace labelled `imagewatch.dev/git-credentials: "true"` whose annotation
    /// `imagewatch.dev/url-prefix` prefixes the URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,

    /// The one place in Git that holds this image's tag.
    pub target: Target,

    /// Write only tags whose image carries a cosign signature by one of these keys, e.g.
    /// `{cosign: {secretRef: {name: cosign-keys}}}`. A newer tag without one is refused
    /// (`status.refused`, `SignatureMissing` / `SignatureInvalid`) and the watch stays on, or
    /// moves to, the newest verified tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verify>,

    /// Watches sharing a group commit together, and only when every member has a tag and they
    /// agree on it (a multi-image release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub group: Option<String>,
}

/// Which tags are candidates and how the best one is chosen.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new("!has(self.pick) || self.pick == 'Highest' || (has(self.order) && (self.order == 'Alphabetical' || self.order == 'Numerical'))").message("tags.pick: Lowest applies only to order Alphabetical or Numerical")))]
#[serde(rename_all = "camelCase")]
pub struct TagRules {
    /// Candidate tags: a glob (`canary-*`, the default kind; also written `glob:canary-*`),
    /// a regular expression (`regex:^canary-v(?P<version>.+)$`) or a semver range with the
    /// meaning Flux and Argo CD Image Updater give it (`semver:>=1.2 <2`, `semver:1.2` is
    /// 1.2.x, `semver:~1.4 || ^2`). Omitted: every tag. Signature and attestation tags
    /// (`sha256-<digest>.sig`, `.att`, `.sbom`, `sha256-<digest>`) are never candidates
    /// unless the pattern contains `sha256-`.
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("!self.contains(':') || self.startsWith('glob:') || self.startsWith('regex:') || self.startsWith('semver:')").message("pattern prefix must be glob:, regex: or semver: (or none, for a glob)")))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub pattern: Option<String>,

    /// Globs of tags never chosen, e.g. `latest`, `*.sig`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub exclude: Option<Vec<String>>,

    /// How candidates are ordered; the greatest wins. Defaults to `Semver`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<TagOrder>,

    /// With order `Alphabetical` or `Numerical`: `Highest` (the default) chooses the greatest
    /// value, `Lowest` the least (Flux's `order: desc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pick: Option<TagPick>,

    /// With a `regex:` pattern: the part of the tag that is ordered, e.g. `$version` or `$1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub extract: Option<String>,

    /// Platforms every written tag's image must provide, as `os/arch` or `os/arch/variant`
    /// (`[linux/amd64, linux/arm64]`, `linux/arm/v7`). A tag is a candidate only when its
    /// image index (or manifest list) has an entry for each, or its single image's config is
    /// that platform; a newer tag lacking one is refused (`status.refused`,
    /// `PlatformMissing`) and the watch stays on (or moves to) the newest tag that has them
    /// all. Omitted: any platform.
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("self.all(p, p.matches('^[a-z0-9_]+/[a-z0-9_]+(/[a-z0-9_]+)?$'))").message("tags.platforms: each entry must be os/arch or os/arch/variant in lower case (e.g. linux/amd64, linux/arm64, linux/arm/v7)")))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), inner(length(max = 64)))]
    pub platforms: Option<Vec<String>>,
}

/// Which end of the order wins.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum TagPick {
    /// The greatest value.
    #[default]
    Highest,
    /// The least value (Alphabetical and Numerical only).
    Lowest,
}

/// Order of candidate tags.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum TagOrder {
    /// Semantic version of the tag: an optional `v` and two or three numbers (`1.2`,
    /// `v1.2.3-rc.1`, zero-padded `2024.01.15`); other tags, all-digit ones included, are
    /// skipped.
    #[default]
    Semver,
    /// Push time reported by the registry; the most recent wins.
    Newest,
    /// Byte-wise string order; the greatest wins.
    Alphabetical,
    /// The tag read as a number (build numbers); non-numeric tags are skipped.
    Numerical,
}

/// What a watch, or a PromotionPolicy for each image of its target, does when someone else
/// changed its target in Git (`spec.onGitChange`): `HoldUntilNewer` (default) keeps Git's
/// value until a tag other than the replaced one comes, `Hold` until the
/// `imagewatch.dev/resume=<commit>` annotation names the commit, `Overwrite` writes anyway.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum OnGitChange {
    /// Keep Git's value until the registry has a tag other than the one that was replaced.
    #[default]
    HoldUntilNewer,
    /// Keep Git's value until the watch is annotated `imagewatch.dev/resume=<commit>`.
    Hold,
    /// Write the chosen tag over it.
    Overwrite,
}

/// A change in Git made by someone else that the watch does not overwrite (`status.held`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct HeldChange {
    /// The commit that last changed the target's value.
    pub commit: String,
    /// Its author, `Name <email>`.
    pub author: String,
    /// The value it set (an image reference, or a bare tag).
    pub value: String,
    /// The value imagewatch had written there, which it replaced.
    pub replaced: String,
}

/// What is written for the chosen tag.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum DigestMode {
    /// `image:tag`.
    #[default]
    Tag,
    /// `image:tag@sha256:…`, so a re-pushed tag cannot change what runs.
    Pin,
    /// The same tag, following its digest (`image:tag@sha256:…` updated when the tag moves).
    Follow,
}

/// Registry credentials.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct RegistryCredentials {
    /// `generic` (a dockerconfigjson Secret or anonymous) or `aws` (ECR through the operator's
    /// AWS identity; a `secretRef` beside it is not used). Defaults to `aws` for an ECR image
    /// without `secretRef`, else `generic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<RegistryProvider>,
    /// A `kubernetes.io/dockerconfigjson` Secret in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
}

/// How registry credentials are obtained.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RegistryProvider {
    /// A dockerconfigjson Secret, or anonymous.
    #[default]
    Generic,
    /// Amazon ECR, with the operator's AWS credentials (IRSA, Pod Identity, environment).
    Aws,
}

/// The place in Git that holds the tag. Exactly one field is set.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[cfg_attr(feature = "kube", x_kube(validation = Rule::new("[has(self.workload), has(self.kustomize), has(self.helm), has(self.argocdSource)].filter(x, x).size() == 1").message("exactly one of target.workload, target.kustomize, target.helm, target.argocdSource must be set")))]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// A container (or initContainer) of one workload in the YAML files under `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadTarget>,
    /// An `images[]` entry of the `kustomization.yaml` in `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<KustomizeTarget>,
    /// A key path in a Helm values file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<HelmTarget>,
    /// The `.argocd-source-<application>.yaml` file in `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argocd_source: Option<ArgocdSourceTarget>,
}

/// A workload's container, found by kind, name and container name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct WorkloadTarget {
    /// Directory in the repository searched (recursively) for YAML files, e.g. `apps/my-api/overlays/stg`.
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("!self.startsWith('/') && !self.split('/').exists(s, s == '..')").message("path must be relative to the repository root and must not contain '..'")))]
    #[schemars(length(max = 1024))]
    pub path: String,
    /// Workload kind: Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob or Pod.
    #[schemars(regex(
        pattern = r"^(Deployment|StatefulSet|DaemonSet|ReplicaSet|Job|CronJob|Pod)$"
    ))]
    pub kind: String,
    /// Workload name (`metadata.name`).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Container (or initContainer) name.
    #[schemars(length(min = 1, max = 63))]
    pub container: String,
    /// Workload namespace, when two documents share kind and name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
}

/// A kustomization `images[]` entry.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct KustomizeTarget {
    /// Directory holding `kustomization.yaml`.
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("!self.startsWith('/') && !self.split('/').exists(s, s == '..')").message("path must be relative to the repository root and must not contain '..'")))]
    #[schemars(length(max = 1024))]
    pub path: String,
    /// The entry's `name` (the image name used in the base manifests). Defaults to
    /// `spec.image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
}

/// A Helm values file and the key path of the tag.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct HelmTarget {
    /// Values file, relative to the repository root.
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("!self.startsWith('/') && !self.split('/').exists(s, s == '..')").message("file must be relative to the repository root and must not contain '..'")))]
    #[schemars(length(min = 1, max = 1024))]
    pub file: String,
    /// Dotted key path of the tag, e.g. `canary.image.tag`.
    #[schemars(length(min = 1, max = 256))]
    pub tag: String,
}

/// Argo CD's `.argocd-source-<application>.yaml` parameter override file.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct ArgocdSourceTarget {
    /// Directory of the Application's source.
    #[cfg_attr(feature = "kube", x_kube(validation = Rule::new("!self.startsWith('/') && !self.split('/').exists(s, s == '..')").message("path must be relative to the repository root and must not contain '..'")))]
    #[schemars(length(max = 1024))]
    pub path: String,
    /// Argo CD Application name.
    #[schemars(length(min = 1, max = 253))]
    pub application: String,
    /// The image's name as the Application's kustomize images or Helm parameters know it.
    /// Defaults to `spec.image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub image: Option<String>,
}

/// Observed state of an ImageWatch.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct ImageWatchStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The best tag the registry holds under the tag rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<LatestImage>,
    /// The tag Git holds for the target, and the commit that wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<AppliedImage>,
    /// Pattern images: how many repositories match `spec.image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_count: Option<i64>,
    /// Pattern images: how many matching repositories are up to date in Git.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members_ready: Option<i64>,
    /// Pattern images: the matching repositories and how each one stands, sorted by
    /// repository; at most the first 200 are listed (`memberCount` has the total).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 200))]
    pub members: Vec<MemberStatus>,
    /// With `spec.verify` or `spec.tags.platforms`: the newest tag refused because its
    /// signature does not verify or its image lacks a wanted platform (newer than the tag
    /// chosen, or the only candidate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<RefusedTag>,
    /// The tags the registry holds that rank above the one written (or every tag, when none
    /// qualifies) and the first rule that refused each: the best 20, best first. What
    /// `imagewatch explain` prints for "why not my tag?".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub refused_tags: Vec<RefusedTag>,
    /// The last 10 changes written to Git, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub history: Vec<ChangeRecord>,
    /// The failure `Failing` messages were sent for, and to which destinations (cleared with
    /// the `Recovered` messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_notified: Option<crate::common::FailureNotified>,
    /// With `spec.git.pullRequest`: the pull request from the push branch, as last seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<WatchPullRequest>,
    /// The change in Git by someone else the watch holds to (see `spec.onGitChange`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldChange>,
    /// The last value of the annotation `imagewatch.dev/requestedAt` the operator acted on:
    /// a new value asks for an immediate re-check (registry listed afresh, Git compared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub last_handled_requested_at: Option<String>,
    /// `Ready` summarises the watch; its reason says what happened. For a pattern image it is
    /// `True` only when every member is up to date, else `MembersNotReady` names the first
    /// members that are not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The pull request of a watch's push branch.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct WatchPullRequest {
    /// Number (GitLab: IID).
    pub number: i64,
    /// Web URL.
    pub url: String,
    /// `open`, `closed` or `merged`.
    pub state: crate::common::PullRequestState,
    /// Head (push) branch.
    pub branch: String,
    /// The tag it proposes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// One repository matching a pattern image, and what Git holds for its target.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// Repository path inside the registry, e.g. `hoge/billing/api/stg`.
    pub repository: String,
    /// What each `*` of `spec.image` matched, in order: the values of `$1`, `$2`, ….
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub captures: Vec<String>,
    /// The best tag of this repository under the tag rules (or the pinned tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<String>,
    /// The tag Git holds for this member's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<String>,
    /// The commit that wrote `applied`, or at which Git was found up to date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// File in Git holding this member's image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Whether Git holds the tag this member should run.
    pub ready: bool,
    /// Why it is (not) ready, as a `Ready` reason: `UpToDate`, `Updated`, `TargetNotFound`,
    /// `NoMatchingTags`, `RegistryError`, `Suspended`, ….
    pub reason: String,
    /// Details, e.g. what was written or why nothing could be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// With `spec.git.pullRequest` (`perMember`): this repository's pull request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<WatchPullRequest>,
    /// The change in Git by someone else this member holds to (see `spec.onGitChange`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldChange>,
}

/// The best tag found in the registry.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct LatestImage {
    /// Tag.
    pub tag: String,
    /// Manifest digest (`sha256:…`) the registry reported for the tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// When the registry says the image was pushed, if it says (orders other than `Newest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pushed_at: Option<Time>,
    /// Under `order: Newest`, the time the tag is ordered by: when the tag appeared. Kept
    /// across operator restarts through this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub appeared_at: Option<Time>,
    /// Where `appearedAt` comes from: `RegistryEvent` (the event's timestamp), `FirstListed`
    /// (the first listing that had the tag), `ImageTime` (the tag was there before the
    /// operator's first listing: the image's created or ECR push time, which a re-tag
    /// shares with the image's other tags), `Status` (restored after a restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub appeared_from: Option<String>,
}

/// What Git holds for the target.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "kube"), derive(JsonSchema))]
#[cfg_attr(feature = "kube", derive(KubeSchema))]
#[serde(rename_all = "camelCase")]
pub struct AppliedImage {
    /// Tag in Git.
    pub tag: String,
    /// Full image reference written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Commit that wrote it (or the commit at which Git was found up to date).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// When imagewatch wrote or verified it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Time>,
}

impl ImageWatchSpec {
    /// Polling interval text (`5m` when unset).
    pub fn interval_or_default(&self) -> &str {
        self.interval.as_deref().unwrap_or("5m")
    }
    /// Whether writes are suspended.
    pub fn is_suspended(&self) -> bool {
        self.suspend.unwrap_or(false)
    }
    /// Whether `image` is a pattern (has `*` path segments) that follows many repositories.
    pub fn is_pattern(&self) -> bool {
        self.image.contains('*')
    }
}
