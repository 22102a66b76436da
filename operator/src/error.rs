//! Reconcile errors of both controllers and how each is handled: a spec the user must fix
//! waits for a change (stalled), a transient failure is retried with backoff.
//!
//! Every error has a [`Category`] — who can fix it: the user (the object or what it names),
//! nobody (transient: the registry, Git, the forge or the API server failed and a retry may
//! pass), or us (internal). The category, the `Ready` reason, the metric label and whether
//! it stalls are written once per error type, in its [`Classify::class`], so dashboards
//! and alerts can group by them without high cardinality.
//!
//! The variants carry what failed as fields, and their `Display` is the message the status
//! reports: [`SpecError`] the field at fault and what is wrong with it (the parser's typed
//! error where there is one); [`CredentialsError`] the Secret ([`NamedSecret`]: purpose,
//! namespace, name) and what it lacks; [`NoTag`] the image and why none of its tags
//! qualifies; [`TargetError`] and [`SourceError`] the place in Git (a [`MissingPath`], the
//! writer's or the candidate's error); [`GroupWait`] the group and the tags or the member it
//! waits for; [`CatalogError`] the registry, the pattern and the registry's answer;
//! [`Denial`] the namespace and the allow-list's or Argo CD's answer; [`InternalError`]
//! the task or the invariant that failed. Where a check elsewhere words its own refusal,
//! its text is kept beside the field it checked (`Rule`, `Unusable`, `Edit`, `Project`).

use imagewatch_crd::{
    conditions::reason as common_reason, conditions::reason, promotion::reason as promotion_reason,
};
use imagewatch_engine::promotion::CandidateError;

use crate::{forge::ForgeError, git::GitError, writer::WriteError};

/// Any error, boxed: the inner error of a field a parser or a check refused.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a reconcile did not reach `Ready=True`.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The spec cannot be acted on.
    #[error("{0}")]
    InvalidSpec(SpecError),
    /// A referenced Secret is missing or incomplete.
    #[error("{0}")]
    CredentialsNotFound(CredentialsError),
    /// The registry failed or refused.
    #[error("registry: {0}")]
    Registry(#[from] crate::registry::RegistryError),
    /// No tag matches the rules.
    #[error("{0}")]
    NoMatchingTags(NoTag),
    /// The pinned tag is not in the registry.
    #[error("spec.pin {tag:?} does not exist in {image}")]
    PinnedTagNotFound {
        /// `spec.pin`.
        tag: String,
        /// The image.
        image: String,
    },
    /// The target is missing or ambiguous in Git.
    #[error("{0}")]
    TargetNotFound(TargetError),
    /// The watch's group has no common tag yet, or a member is unusable.
    #[error("{0}")]
    WaitingForGroup(GroupWait),
    /// A pattern image's registry does not list its repositories to us.
    #[error("{0}")]
    CatalogUnavailable(CatalogError),
    /// The object's namespace may not use what it names (see `allow.rs`); nothing was read
    /// or written.
    #[error("{0}")]
    NotAllowed(Denial),
    /// `spec.verify` or `spec.tags.platforms`: no candidate tag qualifies; the newest one
    /// refused and why.
    #[error("{}", .0.message())]
    Refused(Box<crate::signature::Refused>),
    /// The forge's pull request API failed or refused (`spec.git.pullRequest`).
    #[error("{0}")]
    Forge(#[from] crate::forge::ForgeError),
    /// Git failed.
    #[error("git: {0}")]
    Git(#[from] crate::git::GitError),
    /// The Kubernetes API failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A blocking task panicked or was cancelled.
    #[error("internal: {0}")]
    Internal(InternalError),
}

/// What of a spec cannot be acted on: the field at fault and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// `field`'s value is refused by its parser or check: `spec.tags: …`. For a value read
    /// from another object, `field` names that object too (`Argo CD Application ns/app`).
    #[error("{field}: {error}")]
    Invalid {
        /// The field, as the message names it.
        field: String,
        /// Why its value is refused.
        error: BoxError,
    },
    /// `field` is not a duration such as `5m`.
    #[error("{field} {value:?} is not a duration")]
    NotADuration {
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
    },
    /// `field` must name a directory relative to the repository root.
    #[error("{field} {path:?} must be a directory relative to the repository root")]
    NotADirectory {
        /// The field.
        field: &'static str,
        /// Its value.
        path: String,
    },
    /// `field` is not set, and must be (`when`: in which case).
    #[error("{field} is required{}", .when.map(|w| format!(" {w}")).unwrap_or_default())]
    Required {
        /// The field.
        field: &'static str,
        /// The case that requires it (`in mode PullRequest`), if not every case.
        when: Option<&'static str>,
    },
    /// `spec.git.pullRequest` without a `spec.git.pushBranch` other than `spec.git.branch`.
    #[error("spec.git.pullRequest needs a spec.git.pushBranch other than spec.git.branch")]
    PullRequestWithoutPushBranch,
    /// `spec.credentials.provider: aws` with an image of a registry that is not ECR.
    #[error(
        "spec.credentials.provider aws needs an ECR image (<account>.dkr.ecr.<region>.amazonaws.com/…), not {registry}"
    )]
    AwsProviderNeedsEcr {
        /// The image's registry.
        registry: String,
    },
    /// `<field>.cosign.keyless`: not supported yet.
    #[error(
        "{field}.cosign.keyless is not supported yet (it needs Fulcio and Rekor); use \
         {field}.cosign.secretRef with cosign public keys"
    )]
    KeylessUnsupported {
        /// The verification's field (`spec.verify`, `spec.gates.signature`).
        field: String,
    },
    /// `<field>.cosign` without a `secretRef`.
    #[error("{field}.cosign needs secretRef (a Secret with cosign public keys)")]
    CosignWithoutSecretRef {
        /// The verification's field (`spec.verify`, `spec.gates.signature`).
        field: String,
    },
    /// A `secretRef.name` that cannot be the name of a Secret.
    #[error(
        "{purpose} secretRef.name {name:?} is not a Secret name: it must be a DNS subdomain \
         name (lower-case letters, digits, '-' and '.') of a Secret in namespace {namespace}"
    )]
    NotASecretName {
        /// What the Secret is for (`registry`, `git`, `cosign`, …).
        purpose: &'static str,
        /// The name given.
        name: String,
        /// The object's namespace.
        namespace: String,
    },
    /// `spec.group` on a watch of a pattern image.
    #[error(
        "spec.group cannot be used with a pattern image ({image}): a pattern already writes all its repositories together"
    )]
    GroupWithPattern {
        /// `spec.image`.
        image: String,
    },
    /// A pattern member's expanded `spec.target` is also another member's.
    #[error(
        "its target is also {other}'s: use $1..${wildcards} in spec.target so every repository has its own"
    )]
    SharedTarget {
        /// The other member's repository.
        other: String,
        /// How many `*` segments the pattern has.
        wildcards: usize,
    },
    /// No `spec.git`, and no Argo CD Application manages the object to supply it.
    #[error(
        "spec.git is not set and no Argo CD Application manages this object (no tracking annotation or app.kubernetes.io/instance label)"
    )]
    NoGitRepository,
    /// A PromotionPolicy without `spec.to.git` whose source watches name no repository.
    #[error("spec.to.git is not set and no source ImageWatch names a repository")]
    NoTargetRepository,
    /// `field` breaks a rule checked elsewhere, worded by that check (the words name the
    /// field, or the part of it at fault).
    #[error("{problem}")]
    Rule {
        /// The field checked.
        field: &'static str,
        /// The check's words.
        problem: String,
    },
    /// The target's directory or file leaves the repository (the writer's check).
    #[error(transparent)]
    Path(Box<WriteError>),
    /// The promotion's sources and rules make no valid candidate (conflicting sources, an
    /// unknown pinned image, an invalid rewrite).
    #[error(transparent)]
    Candidate(Box<CandidateError>),
}

impl SpecError {
    /// `field`'s value, refused by `error`: `"{field}: {error}"`.
    pub fn invalid(field: impl Into<String>, error: impl Into<BoxError>) -> Self {
        Self::Invalid {
            field: field.into(),
            error: error.into(),
        }
    }

    /// `field` breaks a rule checked elsewhere; `problem` is that check's wording.
    pub fn rule(field: &'static str, problem: impl Into<String>) -> Self {
        Self::Rule {
            field,
            problem: problem.into(),
        }
    }

    /// `field`'s `value` is not a duration.
    pub fn not_a_duration(field: &'static str, value: impl Into<String>) -> Self {
        Self::NotADuration {
            field,
            value: value.into(),
        }
    }
}

/// A Secret an object names, and what it is for: `git Secret team-a/git-creds`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedSecret {
    /// What it is for: `registry`, `git`, `cosign`, `forge`, `notification`.
    pub purpose: &'static str,
    /// Its namespace (the object's).
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl NamedSecret {
    /// The `purpose` Secret `namespace/name`.
    pub fn new(purpose: &'static str, namespace: &str, name: &str) -> Self {
        Self {
            purpose,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

impl std::fmt::Display for NamedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} Secret {}/{}",
            self.purpose, self.namespace, self.name
        )
    }
}

/// Why the credentials an object names cannot be used: the Secret, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The Secret does not exist.
    #[error("{secret} not found")]
    NotFound {
        /// The Secret.
        secret: NamedSecret,
    },
    /// The Secret lacks the key its kind needs.
    #[error("{secret} has no {key} key")]
    MissingKey {
        /// The Secret.
        secret: NamedSecret,
        /// The key.
        key: &'static str,
    },
    /// A registry Secret without credentials for the image's registry.
    #[error("{secret} has no entry for {registry}")]
    NoEntryFor {
        /// The Secret.
        secret: NamedSecret,
        /// The registry host.
        registry: String,
    },
    /// A value that is not text.
    #[error("{secret}: key {key} is not PEM text")]
    NotText {
        /// The Secret.
        secret: NamedSecret,
        /// The key holding it.
        key: String,
    },
    /// A value that cannot be used.
    #[error("{secret}: key {key}: {error}")]
    BadValue {
        /// The Secret.
        secret: NamedSecret,
        /// The key holding it.
        key: String,
        /// What is wrong with it.
        error: BoxError,
    },
    /// A cosign Secret without a public key.
    #[error("{secret} holds no public key")]
    NoPublicKey {
        /// The Secret.
        secret: NamedSecret,
    },
    /// The Secret has none of the key sets its kind accepts.
    #[error("{secret} needs {needs}")]
    Incomplete {
        /// The Secret.
        secret: NamedSecret,
        /// The keys it needs, as the message names them.
        needs: &'static str,
    },
    /// The Secret's content cannot be used: unparsable, incomplete or invalid keys.
    #[error("{secret}: {error}")]
    Unusable {
        /// The Secret.
        secret: NamedSecret,
        /// What is wrong with it.
        error: BoxError,
    },
    /// The operator may not list the labelled Secrets that hold Git credentials for a watch
    /// without `spec.git` (an Argo CD Application's repository).
    #[error(
        "the operator may not list the Secrets labelled {label}=true in {namespace} that hold \
         Git credentials for a watch without spec.git: set the chart value \
         rbac.gitFromArgocd=true, or set spec.git with a secretRef"
    )]
    CannotListLabelled {
        /// The label, set to `true` on those Secrets.
        label: &'static str,
        /// The namespace.
        namespace: String,
    },
}

impl CredentialsError {
    /// `secret`'s content cannot be used, for `error`.
    pub fn unusable(secret: NamedSecret, error: impl Into<BoxError>) -> Self {
        Self::Unusable {
            secret,
            error: error.into(),
        }
    }
}

/// Why no tag of an image can be written: the image, and what its tags lack.
#[derive(Debug, thiserror::Error)]
pub enum NoTag {
    /// No listed tag matches `spec.tags.pattern`.
    #[error("none of the {listed} tags of {image} matches pattern {pattern:?}")]
    NoneMatches {
        /// The image.
        image: String,
        /// How many tags were listed.
        listed: usize,
        /// The pattern (`*` when unset).
        pattern: String,
    },
    /// Some tags match the pattern, but none can be ordered by the order.
    #[error(
        "{matching} tags of {image} match pattern {pattern:?} but none can be ordered by {order:?} (e.g. not a version); set spec.tags.order or spec.tags.extract"
    )]
    Unorderable {
        /// The image.
        image: String,
        /// How many tags match the pattern.
        matching: usize,
        /// The pattern (`*` when unset).
        pattern: String,
        /// The order.
        order: imagewatch_engine::policy::Order,
    },
    /// Every candidate tag was listed without a manifest.
    #[error("no candidate tag of {image} has a manifest")]
    NoCandidateManifest {
        /// The image.
        image: String,
    },
    /// The chosen tag is listed, but its manifest does not exist.
    #[error("tag {tag} of {image} is listed but its manifest does not exist")]
    ListedWithoutManifest {
        /// The image.
        image: String,
        /// The tag.
        tag: String,
    },
    /// The tag's digest has no manifest (asked for its platforms).
    #[error("tag {tag} of {image} ({digest}) has no manifest")]
    DigestWithoutManifest {
        /// The image.
        image: String,
        /// The tag.
        tag: String,
        /// Its digest.
        digest: String,
    },
}

impl NoTag {
    /// None of the `listed` tags of `image` matches `pattern`.
    pub fn none_matches(image: &str, listed: usize, pattern: &str) -> Self {
        Self::NoneMatches {
            image: image.to_string(),
            listed,
            pattern: pattern.to_string(),
        }
    }

    /// `matching` tags of `image` match `pattern`, none can be ordered by `order`.
    pub fn unorderable(
        image: &str,
        matching: usize,
        pattern: &str,
        order: imagewatch_engine::policy::Order,
    ) -> Self {
        Self::Unorderable {
            image: image.to_string(),
            matching,
            pattern: pattern.to_string(),
            order,
        }
    }
}

/// A directory a spec names that is not on its branch.
#[derive(Debug, thiserror::Error)]
#[error("{field} {path:?} does not exist on branch {branch}")]
pub struct MissingPath {
    /// The field naming it (`spec.to.path`, `spec.from.path`).
    pub field: &'static str,
    /// The path.
    pub path: String,
    /// The branch read.
    pub branch: String,
}

/// Why the place to write is not in Git, or cannot be edited there.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The writer finds no place to edit: a file, key, image or directory not on the
    /// branch, or ambiguous; a planned path not in the repository.
    #[error(transparent)]
    Write(Box<WriteError>),
    /// No `spec.git`, and no Argo CD to supply it.
    #[error("spec.git is not set and the Argo CD Application API is not installed")]
    NoApplicationApi,
    /// The target directory is not on the branch.
    #[error(transparent)]
    PathNotFound(MissingPath),
    /// The target holds none of the candidate's images.
    #[error(transparent)]
    Candidate(Box<CandidateError>),
    /// An edit of `field`'s files cannot be planned; `problem` names the file and why.
    #[error("{problem}")]
    Edit {
        /// The field naming the files (`spec.to.path`).
        field: &'static str,
        /// The file and why.
        problem: String,
    },
}

/// Why a promotion's source has no complete candidate yet.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The source directory is not on its branch.
    #[error(transparent)]
    PathNotFound(MissingPath),
    /// The source holds no images, or not the `alignTags` leader.
    #[error(transparent)]
    Candidate(Box<CandidateError>),
    /// What `field` selects cannot be read as a source, in the words of the reading (they
    /// name the watch or file).
    #[error("{problem}")]
    Unusable {
        /// The field selecting the source (`spec.from.watchSelector`, `spec.from.path`).
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
}

impl SourceError {
    /// What `field` selects cannot be read as a source: `problem`.
    pub fn unusable(field: &'static str, problem: impl Into<String>) -> Self {
        Self::Unusable {
            field,
            problem: problem.into(),
        }
    }
}

/// Why a watch of a group (`spec.group`) waits: the group, and the tags or the member it
/// waits for.
#[derive(Debug, thiserror::Error)]
pub enum GroupWait {
    /// No tag is common to every member yet.
    #[error("{}", imagewatch_engine::group::waiting_message(.group, .decision))]
    NoCommonTag {
        /// The group.
        group: String,
        /// What the group decided: who lacks which tag.
        decision: imagewatch_engine::group::GroupDecision,
    },
    /// A member cannot be prepared: its spec, its Secret or its registry failed.
    #[error("group {group}: member {member} is not usable: {error}")]
    MemberUnusable {
        /// The group.
        group: String,
        /// The member's name.
        member: String,
        /// Why.
        error: Box<ReconcileError>,
    },
    /// A member cannot take the group's tag: no manifest, a platform missing, its registry
    /// failed.
    #[error("group {group}: member {member}: {error}")]
    Member {
        /// The group.
        group: String,
        /// The member's name.
        member: String,
        /// Why.
        error: Box<ReconcileError>,
    },
}

impl GroupWait {
    /// `member` of `group` cannot be prepared, for `error`.
    pub fn unusable(group: &str, member: String, error: ReconcileError) -> Self {
        Self::MemberUnusable {
            group: group.to_string(),
            member,
            error: Box::new(error),
        }
    }

    /// `member` of `group` cannot take the group's tag, for `error`.
    pub fn member(group: &str, member: String, error: ReconcileError) -> Self {
        Self::Member {
            group: group.to_string(),
            member,
            error: Box::new(error),
        }
    }
}

/// Why the repositories of a pattern image's registry cannot be listed: the registry, the
/// pattern and the registry's answer.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// ECR (through the operator's AWS identity) refused `ecr:DescribeRepositories`.
    #[error(
        "cannot list the repositories of {registry} for pattern {pattern} (ecr:DescribeRepositories: {error}); allow ecr:DescribeRepositories to the operator's AWS identity"
    )]
    Ecr {
        /// The registry.
        registry: String,
        /// The pattern, under the registry.
        pattern: String,
        /// ECR's answer.
        error: Box<crate::registry::RegistryError>,
    },
    /// The registry does not serve `GET /v2/_catalog` to these credentials.
    #[error(
        "registry {registry} does not list its repositories to these credentials (GET /v2/_catalog: {error}); a pattern image needs a registry that serves the catalog, or ECR"
    )]
    Catalog {
        /// The registry.
        registry: String,
        /// The pattern, under the registry.
        pattern: String,
        /// The registry's answer.
        error: Box<crate::registry::RegistryError>,
    },
}

/// Why a namespace may not use what its object names: the namespace, and the allow-list's
/// or Argo CD's answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    /// No rule of the allow-list covers the namespace.
    #[error(
        "no rule of the operator's allow-list covers namespace {namespace}: it may use no Git repository or registry"
    )]
    NoRule {
        /// The namespace.
        namespace: String,
    },
    /// The rules covering the namespace do not grant `what`.
    #[error(
        "{what} is not allowed for namespace {namespace} by allow-list rule {}",
        quoted(.rules)
    )]
    NotGranted {
        /// What was asked: `image …`, `Git repository …`, `path … of …`, the AWS identity.
        what: String,
        /// The namespace.
        namespace: String,
        /// The names of the rules covering it.
        rules: Vec<String>,
    },
    /// The allow-list is configured but cannot be used (not read yet, deleted, invalid), so
    /// nothing is allowed.
    #[error("the operator's allow-list ConfigMap {configmap} {problem}")]
    ListUnusable {
        /// The ConfigMap's name.
        configmap: String,
        /// What is wrong with it.
        problem: String,
    },
    /// With `gitFrom: ArgocdProject`: the AppProject of the Application managing the object
    /// does not admit it, or cannot be found; `problem` names the Application and AppProject.
    #[error("{problem}")]
    Project {
        /// The object's namespace.
        namespace: String,
        /// What the AppProject check found.
        problem: String,
    },
    /// The Argo CD Application an object names does not exist or does not deploy to its
    /// namespace, so it cannot supply `spec.git`.
    #[error(
        "the Argo CD Application {application} named by this object's tracking annotation or \
         app.kubernetes.io/instance label does not exist or does not deploy to namespace \
         {namespace}; only an Application whose spec.destination.namespace is {namespace} \
         (or that lives in {namespace}) can supply spec.git"
    )]
    ForeignApplication {
        /// The Application, `namespace/name`.
        application: String,
        /// The object's namespace.
        namespace: String,
    },
}

impl Denial {
    /// The AppProject check refused an object of `namespace`: `problem`.
    pub fn project(namespace: &str, problem: impl Into<String>) -> Self {
        Self::Project {
            namespace: namespace.to_string(),
            problem: problem.into(),
        }
    }
}

/// `"a", "b"`: names quoted, comma-separated.
fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A failure of the operator itself: a task that did not answer, or a step that found
/// what an earlier one ruled out.
#[derive(Debug, thiserror::Error)]
pub enum InternalError {
    /// The git writer did not take the work, stopped before answering, or its task failed.
    #[error(transparent)]
    Writer(Box<WriteError>),
    /// A blocking task panicked or was cancelled.
    #[error("{what} task: {error}")]
    Task {
        /// What the task did (`git`).
        what: &'static str,
        /// How it ended.
        error: tokio::task::JoinError,
    },
    /// The writer answered a batch without the first request's result.
    #[error("no write result")]
    NoWriteResult,
    /// A pattern member's outcome before its reconcile.
    #[error("not reconciled")]
    NotReconciled,
    /// A pinned or followed digest is to be written, but none was confirmed.
    #[error("no digest of {image}:{tag} to write")]
    NoDigest {
        /// The image.
        image: String,
        /// The tag.
        tag: String,
    },
    /// The planned edits, planned again on the branch's head, change nothing.
    #[error("the planned edits change nothing")]
    NothingToCommit,
    /// Neither the watches nor `spec.from.path` were read as the source.
    #[error("no source was read")]
    NoSource,
    /// A deleted policy's pull request names no repository that can be found.
    #[error("the repository is unknown")]
    UnknownRepository,
}

impl ReconcileError {
    /// A tag a watch asks for (`tag` of `image`) does not exist: its pin (`pin`), or a
    /// tag the listing holds without a manifest. A tag is never written on a listing's word
    /// alone.
    pub fn tag_not_found(pin: Option<&str>, image: &str, tag: &str) -> Self {
        if pin == Some(tag) {
            Self::PinnedTagNotFound {
                tag: tag.to_string(),
                image: image.to_string(),
            }
        } else {
            Self::NoMatchingTags(NoTag::ListedWithoutManifest {
                image: image.to_string(),
                tag: tag.to_string(),
            })
        }
    }
}

/// Who can fix a failed reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    /// The user: the object's spec, a Secret it names, the image or the manifests in Git.
    User,
    /// Nobody: a dependency failed (registry, Git server, forge, Kubernetes API); a retry
    /// with backoff may pass.
    Transient,
    /// The operator itself: a task panicked or stopped.
    Internal,
}

impl Category {
    /// The metric label value: `user`, `transient` or `internal`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Transient => "transient",
            Self::Internal => "internal",
        }
    }
}

/// How one failure is handled: everything the status, the metrics and the retry read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Class {
    /// The `Ready` reason.
    pub reason: &'static str,
    /// The low-cardinality metric label.
    pub label: &'static str,
    /// Who can fix it.
    pub fixed_by: Category,
    /// Whether only a change by the user fixes it: not retried quickly; the object is
    /// looked at again when it changes, and at its polling interval.
    pub stalled: bool,
}

/// The classification of an error type, written once per type as [`Classify::class`]; the
/// rest is read from it.
pub trait Classify {
    /// This error's class.
    fn class(&self) -> Class;

    /// The `Ready` reason reported for this error.
    fn reason(&self) -> &'static str {
        self.class().reason
    }

    /// Low-cardinality metric label.
    fn category(&self) -> &'static str {
        self.class().label
    }

    /// Who can fix this error.
    fn fixed_by(&self) -> Category {
        self.class().fixed_by
    }

    /// Whether only a change by the user can fix it.
    fn is_stalled(&self) -> bool {
        self.class().stalled
    }

    /// Counts this error in `imagewatch_reconcile_errors_total` of `controller`.
    fn count(&self, metrics: &crate::telemetry::Metrics, controller: &str) {
        let class = self.class();
        count(metrics, controller, class.fixed_by, class.reason);
    }
}

const fn class(
    reason: &'static str,
    label: &'static str,
    fixed_by: Category,
    stalled: bool,
) -> Class {
    Class {
        reason,
        label,
        fixed_by,
        stalled,
    }
}

/// Git: denied, not found or a refused request need the user's credentials or spec; the
/// rest may pass on a retry.
fn git_fixed_by(e: &GitError) -> Category {
    if !e.is_transient() && e.category() != "other" {
        Category::User
    } else {
        Category::Transient
    }
}

/// A forge: a configuration it refuses is the user's; the rest may pass on a retry.
fn forge_fixed_by(e: &ForgeError) -> Category {
    match e {
        ForgeError::InvalidConfig(_) => Category::User,
        _ => Category::Transient,
    }
}

/// The writer's errors as the controllers report them: a target the manifests do not hold
/// is `TargetNotFound`, a path outside the repository is the spec's fault, Git is Git.
impl From<WriteError> for ReconcileError {
    fn from(error: WriteError) -> Self {
        match error {
            WriteError::Git(e) => Self::Git(e),
            e @ (WriteError::Edit(_)
            | WriteError::DirectoryNotFound { .. }
            | WriteError::PlannedPath { .. }) => {
                Self::TargetNotFound(TargetError::Write(Box::new(e)))
            }
            e @ (WriteError::DirectoryOutside { .. } | WriteError::FileOutside { .. }) => {
                Self::InvalidSpec(SpecError::Path(Box::new(e)))
            }
            e @ (WriteError::NotAccepting | WriteError::Stopped | WriteError::Task(_)) => {
                Self::Internal(InternalError::Writer(Box::new(e)))
            }
        }
    }
}

impl Classify for ReconcileError {
    fn class(&self) -> Class {
        use Category::{Internal, Transient, User};
        match self {
            Self::InvalidSpec(_) => class(reason::INVALID_SPEC, "invalid_spec", User, true),
            Self::CredentialsNotFound(_) => {
                class(reason::CREDENTIALS_NOT_FOUND, "credentials", User, false)
            }
            Self::Registry(e) => {
                // Denied, not found, a refused request: only the user's credentials or spec help.
                let fixed_by = if e.is_transient() { Transient } else { User };
                class(reason::REGISTRY_ERROR, "registry", fixed_by, false)
            }
            Self::NoMatchingTags(_) => {
                class(reason::NO_MATCHING_TAGS, "no_matching_tags", User, false)
            }
            Self::PinnedTagNotFound { .. } => class(
                reason::PINNED_TAG_NOT_FOUND,
                "pinned_tag_not_found",
                User,
                false,
            ),
            Self::TargetNotFound(_) => {
                class(reason::TARGET_NOT_FOUND, "target_not_found", User, true)
            }
            Self::WaitingForGroup(_) => {
                class(reason::WAITING_FOR_GROUP, "waiting_for_group", User, false)
            }
            Self::CatalogUnavailable(_) => class(
                reason::CATALOG_UNAVAILABLE,
                "catalog_unavailable",
                Transient,
                true,
            ),
            Self::NotAllowed(_) => class(reason::NOT_ALLOWED, "not_allowed", User, true),
            Self::Refused(refused) => class(refused.reason(), refused.category(), User, false),
            Self::Git(e @ GitError::CacheFull { .. }) => {
                class(reason::CACHE_FULL, "cache_full", git_fixed_by(e), false)
            }
            Self::Git(e) => class(reason::GIT_ERROR, "git", git_fixed_by(e), false),
            Self::Forge(e) => class(
                reason::FORGE_ERROR,
                "forge",
                forge_fixed_by(e),
                matches!(e, ForgeError::InvalidConfig(_)),
            ),
            Self::Kube(_) => class(reason::INTERNAL_ERROR, "kube", Transient, false),
            Self::Internal(_) => class(reason::INTERNAL_ERROR, "internal", Internal, false),
        }
    }
}

impl ReconcileError {
    /// Low-cardinality metric label: the same as [`Classify::category`].
    pub fn label(&self) -> &'static str {
        self.category()
    }
}

/// How the status step sees a reconcile's failure.
impl imagewatch_engine::status::Failure for ReconcileError {
    fn reason(&self) -> &'static str {
        Classify::reason(self)
    }

    fn is_stalled(&self) -> bool {
        Classify::is_stalled(self)
    }

    fn refused(&self) -> Option<&crate::signature::Refused> {
        match self {
            Self::Refused(refused) => Some(refused),
            _ => None,
        }
    }
}

fn count(metrics: &crate::telemetry::Metrics, controller: &str, category: Category, reason: &str) {
    metrics
        .reconcile_errors
        .get_or_create(&crate::telemetry::ReconcileErrorLabels {
            controller: controller.to_string(),
            category: category.as_str().to_string(),
            reason: reason.to_string(),
        })
        .inc();
}

/// Why a policy reconcile did not reach its goal.
#[derive(Debug, thiserror::Error)]
pub enum PromotionError {
    /// The spec cannot be acted on.
    #[error("{0}")]
    InvalidSpec(SpecError),
    /// A Secret is missing or incomplete.
    #[error("{0}")]
    CredentialsNotFound(CredentialsError),
    /// The source has no complete candidate yet.
    #[error("{0}")]
    SourceNotReady(SourceError),
    /// A source watch is healthy but has not applied its first tag yet (a policy created
    /// together with its watches): the same `Ready` reason, but a Normal Event, because
    /// nothing is wrong; the watch's status change reconciles the policy again.
    #[error("waiting for ImageWatch {} to apply a first tag", .watches.join(", "))]
    SourceWaiting {
        /// The watches waited for.
        watches: Vec<String>,
    },
    /// `to.path` (or a place in it) cannot be found or edited.
    #[error("{0}")]
    TargetNotFound(TargetError),
    /// The policy's namespace may not use what it names; nothing was read or written.
    #[error("{0}")]
    NotAllowed(Denial),
    /// Git failed.
    #[error("git: {0}")]
    Git(#[from] GitError),
    /// The forge failed or refused.
    #[error("{0}")]
    Forge(#[from] ForgeError),
    /// The Kubernetes API failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A blocking task failed.
    #[error("internal: {0}")]
    Internal(InternalError),
    /// Any other failure of the steps promotion shares with the ImageWatch controller
    /// (registry, signatures, catalogs, …), with its own reason and category.
    #[error("{0}")]
    Other(ReconcileError),
}

impl From<WriteError> for PromotionError {
    fn from(e: WriteError) -> Self {
        Self::from(ReconcileError::from(e))
    }
}

impl From<ReconcileError> for PromotionError {
    fn from(e: ReconcileError) -> Self {
        match e {
            ReconcileError::InvalidSpec(m) => Self::InvalidSpec(m),
            ReconcileError::CredentialsNotFound(m) => Self::CredentialsNotFound(m),
            ReconcileError::TargetNotFound(m) => Self::TargetNotFound(m),
            ReconcileError::NotAllowed(m) => Self::NotAllowed(m),
            ReconcileError::Git(g) => Self::Git(g),
            ReconcileError::Kube(k) => Self::Kube(k),
            // Registry, signature, forge and the rest keep their own reason and category.
            other => Self::Other(other),
        }
    }
}

impl Classify for PromotionError {
    fn class(&self) -> Class {
        use Category::{Internal, Transient, User};
        match self {
            Self::InvalidSpec(_) => class(common_reason::INVALID_SPEC, "invalid_spec", User, true),
            Self::CredentialsNotFound(_) => class(
                common_reason::CREDENTIALS_NOT_FOUND,
                "credentials",
                User,
                false,
            ),
            Self::SourceNotReady(_) => class(
                promotion_reason::SOURCE_NOT_READY,
                "source_not_ready",
                User,
                true,
            ),
            Self::SourceWaiting { .. } => class(
                promotion_reason::SOURCE_NOT_READY,
                "source_waiting",
                User,
                true,
            ),
            Self::TargetNotFound(_) => class(
                common_reason::TARGET_NOT_FOUND,
                "target_not_found",
                User,
                true,
            ),
            Self::NotAllowed(_) => class(common_reason::NOT_ALLOWED, "not_allowed", User, true),
            Self::Git(e) => class(common_reason::GIT_ERROR, "git", git_fixed_by(e), false),
            Self::Forge(e) => class(
                promotion_reason::FORGE_ERROR,
                "forge",
                forge_fixed_by(e),
                false,
            ),
            Self::Kube(_) => class(reason::INTERNAL_ERROR, "kube", Transient, false),
            Self::Internal(_) => class(reason::INTERNAL_ERROR, "internal", Internal, false),
            Self::Other(e) => e.class(),
        }
    }
}

/// How the status step sees a promotion's failure.
impl imagewatch_engine::status::Failure for PromotionError {
    fn reason(&self) -> &'static str {
        Classify::reason(self)
    }

    fn is_stalled(&self) -> bool {
        Classify::is_stalled(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::GitError;

    #[test]
    fn a_full_clone_cache_has_its_own_reason_and_is_retried() {
        let full = ReconcileError::Git(GitError::CacheFull {
            path: "/var/cache/imagewatch/git".into(),
            message: "No space left on device".into(),
        });
        assert_eq!(full.reason(), reason::CACHE_FULL);
        assert_eq!(full.category(), "cache_full");
        assert!(!full.is_stalled());
        assert!(full.to_string().contains("/var/cache/imagewatch/git"));
        let other = ReconcileError::Git(GitError::InvalidBranch {
            branch: "x y".into(),
        });
        assert_eq!(other.reason(), reason::GIT_ERROR);
        assert_eq!(other.category(), "git");
    }

    fn no_rule() -> Denial {
        Denial::NoRule {
            namespace: "team-a".into(),
        }
    }

    fn unlisted_catalog() -> CatalogError {
        CatalogError::Catalog {
            registry: "registry.example".into(),
            pattern: "team/*".into(),
            error: Box::new(crate::registry::RegistryError::Unauthorized {
                registry: "registry.example".into(),
                message: "denied".into(),
            }),
        }
    }

    #[test]
    fn each_error_says_who_can_fix_it() {
        use Category::*;
        let cases: Vec<(ReconcileError, Category)> = vec![
            (
                ReconcileError::InvalidSpec(SpecError::NoGitRepository),
                User,
            ),
            (
                ReconcileError::CredentialsNotFound(CredentialsError::NotFound {
                    secret: NamedSecret::new("git", "ns", "x"),
                }),
                User,
            ),
            (
                ReconcileError::NoMatchingTags(NoTag::NoCandidateManifest { image: "x".into() }),
                User,
            ),
            (
                ReconcileError::TargetNotFound(TargetError::NoApplicationApi),
                User,
            ),
            (ReconcileError::NotAllowed(no_rule()), User),
            (
                ReconcileError::Git(GitError::AuthFailed {
                    url: "https://git.example/r.git".into(),
                    reason: "denied".into(),
                }),
                User,
            ),
            (
                ReconcileError::Git(GitError::CacheFull {
                    path: "/c".into(),
                    message: "full".into(),
                }),
                Transient,
            ),
            (
                ReconcileError::CatalogUnavailable(unlisted_catalog()),
                Transient,
            ),
            (
                ReconcileError::Internal(InternalError::NoWriteResult),
                Internal,
            ),
        ];
        let metrics = crate::telemetry::Metrics::new();
        ReconcileError::NotAllowed(no_rule()).count(&metrics, "imagewatch");
        let text = metrics.render();
        assert!(
            text.contains(
                "imagewatch_reconcile_errors_total{controller=\"imagewatch\",category=\"user\",reason=\"NotAllowed\"} 1"
            ),
            "{text}"
        );
        for (error, want) in cases {
            assert_eq!(error.fixed_by(), want, "{error:?}");
            assert!(["user", "transient", "internal"].contains(&want.as_str()));
            assert_eq!(error.label(), error.category());
        }
        // Everything the user must fix and that waits for a change is in category `user`,
        // except an unlisted pattern catalog, which the registry may start to list.
        for stalled in [
            ReconcileError::InvalidSpec(SpecError::NoGitRepository),
            ReconcileError::TargetNotFound(TargetError::NoApplicationApi),
            ReconcileError::NotAllowed(no_rule()),
        ] {
            assert!(stalled.is_stalled());
            assert_eq!(stalled.fixed_by(), User);
        }
    }

    /// The messages the status reports, one or more per family, as they read.
    #[test]
    fn messages_read_as_before() {
        let image = || "registry.example/team/api".to_string();
        let cases: Vec<(String, &str)> = vec![
            (
                ReconcileError::InvalidSpec(SpecError::invalid("spec.tags.platforms", "bad"))
                    .to_string(),
                "spec.tags.platforms: bad",
            ),
            (
                SpecError::not_a_duration("spec.interval", "5x").to_string(),
                "spec.interval \"5x\" is not a duration",
            ),
            (
                SpecError::Required {
                    field: "spec.pullRequest",
                    when: Some("in mode PullRequest"),
                }
                .to_string(),
                "spec.pullRequest is required in mode PullRequest",
            ),
            (
                SpecError::Required {
                    field: "spec.pullRequest",
                    when: None,
                }
                .to_string(),
                "spec.pullRequest is required",
            ),
            (
                SpecError::KeylessUnsupported {
                    field: "spec.verify".into(),
                }
                .to_string(),
                "spec.verify.cosign.keyless is not supported yet (it needs Fulcio and Rekor); use \
                 spec.verify.cosign.secretRef with cosign public keys",
            ),
            (
                SpecError::SharedTarget {
                    other: "team/worker".into(),
                    wildcards: 2,
                }
                .to_string(),
                "its target is also team/worker's: use $1..$2 in spec.target so every repository has its own",
            ),
            (
                SpecError::NotASecretName {
                    purpose: "git",
                    name: "a/b".into(),
                    namespace: "team-a".into(),
                }
                .to_string(),
                "git secretRef.name \"a/b\" is not a Secret name: it must be a DNS subdomain name \
                 (lower-case letters, digits, '-' and '.') of a Secret in namespace team-a",
            ),
            (
                ReconcileError::CredentialsNotFound(CredentialsError::NotFound {
                    secret: NamedSecret::new("git", "team-a", "git-creds"),
                })
                .to_string(),
                "git Secret team-a/git-creds not found",
            ),
            (
                CredentialsError::Incomplete {
                    secret: NamedSecret::new("forge", "team-a", "forge"),
                    needs: "key token, or githubAppID+githubAppInstallationID+githubAppPrivateKey",
                }
                .to_string(),
                "forge Secret team-a/forge needs key token, or \
                 githubAppID+githubAppInstallationID+githubAppPrivateKey",
            ),
            (
                CredentialsError::CannotListLabelled {
                    label: "imagewatch.dev/git-credentials",
                    namespace: "team-a".into(),
                }
                .to_string(),
                "the operator may not list the Secrets labelled imagewatch.dev/git-credentials=true \
                 in team-a that hold Git credentials for a watch without spec.git: set the chart \
                 value rbac.gitFromArgocd=true, or set spec.git with a secretRef",
            ),
            (
                ReconcileError::NoMatchingTags(NoTag::none_matches(&image(), 3, "v*")).to_string(),
                "none of the 3 tags of registry.example/team/api matches pattern \"v*\"",
            ),
            (
                NoTag::unorderable(&image(), 2, "*", imagewatch_engine::policy::Order::Semver)
                    .to_string(),
                "2 tags of registry.example/team/api match pattern \"*\" but none can be ordered \
                 by Semver (e.g. not a version); set spec.tags.order or spec.tags.extract",
            ),
            (
                ReconcileError::PinnedTagNotFound {
                    tag: "v1".into(),
                    image: image(),
                }
                .to_string(),
                "spec.pin \"v1\" does not exist in registry.example/team/api",
            ),
            (
                ReconcileError::TargetNotFound(TargetError::NoApplicationApi).to_string(),
                "spec.git is not set and the Argo CD Application API is not installed",
            ),
            (
                PromotionError::TargetNotFound(TargetError::PathNotFound(MissingPath {
                    field: "spec.to.path",
                    path: "overlays/prod".into(),
                    branch: "main".into(),
                }))
                .to_string(),
                "spec.to.path \"overlays/prod\" does not exist on branch main",
            ),
            (
                PromotionError::SourceWaiting {
                    watches: vec!["api".into(), "worker".into()],
                }
                .to_string(),
                "waiting for ImageWatch api, worker to apply a first tag",
            ),
            (
                ReconcileError::WaitingForGroup(GroupWait::NoCommonTag {
                    group: "release".into(),
                    decision: imagewatch_engine::group::GroupDecision {
                        tag: None,
                        waiting_for: vec![("worker".into(), "v2".into())],
                    },
                })
                .to_string(),
                "group release: no tag is common to every member; waiting: worker has no v2",
            ),
            (
                GroupWait::member(
                    "release",
                    "worker".into(),
                    ReconcileError::PinnedTagNotFound {
                        tag: "v1".into(),
                        image: image(),
                    },
                )
                .to_string(),
                "group release: member worker: spec.pin \"v1\" does not exist in \
                 registry.example/team/api",
            ),
            (
                ReconcileError::CatalogUnavailable(unlisted_catalog()).to_string(),
                "registry registry.example does not list its repositories to these credentials \
                 (GET /v2/_catalog: registry registry.example denied access: denied); a pattern \
                 image needs a registry that serves the catalog, or ECR",
            ),
            (
                ReconcileError::NotAllowed(Denial::NotGranted {
                    what: "image registry.example/team/api".into(),
                    namespace: "team-a".into(),
                    rules: vec!["team-a".into(), "shared".into()],
                })
                .to_string(),
                "image registry.example/team/api is not allowed for namespace team-a by \
                 allow-list rule \"team-a\", \"shared\"",
            ),
            (
                Denial::ListUnusable {
                    configmap: "imagewatch-allow".into(),
                    problem: "does not exist".into(),
                }
                .to_string(),
                "the operator's allow-list ConfigMap imagewatch-allow does not exist",
            ),
            (
                ReconcileError::Internal(InternalError::NoDigest {
                    image: image(),
                    tag: "v1".into(),
                })
                .to_string(),
                "internal: no digest of registry.example/team/api:v1 to write",
            ),
            (
                PromotionError::Internal(InternalError::NothingToCommit).to_string(),
                "internal: the planned edits change nothing",
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }

    #[test]
    fn promotion_keeps_the_reason_and_category_of_a_shared_step() {
        let shared = PromotionError::from(ReconcileError::CatalogUnavailable(unlisted_catalog()));
        assert_eq!(shared.reason(), reason::CATALOG_UNAVAILABLE);
        assert_eq!(shared.category(), "catalog_unavailable");
        assert_eq!(shared.fixed_by(), Category::Transient);
        let internal = PromotionError::from(ReconcileError::Internal(InternalError::NoWriteResult));
        assert_eq!(internal.reason(), "InternalError");
        assert_eq!(internal.fixed_by(), Category::Internal);
        let waiting =
            PromotionError::SourceNotReady(SourceError::unusable("spec.from.path", "no tag"));
        assert_eq!(waiting.fixed_by(), Category::User);
        assert!(waiting.is_stalled());
        let metrics = crate::telemetry::Metrics::new();
        shared.count(&metrics, "promotionpolicy");
        assert!(metrics.render().contains(
            "imagewatch_reconcile_errors_total{controller=\"promotionpolicy\",category=\"transient\",reason=\"CatalogUnavailable\"} 1"
        ));
    }
}
