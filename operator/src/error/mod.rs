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

use crate::{forge::ForgeError, git::GitError, writer::WriteError};

mod families;
pub use families::{
    BoxError, CatalogError, CredentialsError, Denial, InternalError, MissingPath, NamedSecret,
    NoTag, SourceError, SpecError, TargetError,
};

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
mod tests;
