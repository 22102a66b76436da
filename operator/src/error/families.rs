//! What each failure carries, by family: the field of a spec at fault, the Secret and what
//! it lacks, the tags of an image, the place in Git, the registry's catalog, the
//! allow-list's answer, the invariant that failed. Each `Display` is the message the status
//! reports. The families stand on their own (a group's wait, which holds a member's whole
//! error, is beside `ReconcileError` in the parent).

use imagewatch_engine::promotion::CandidateError;

use crate::writer::WriteError;

/// Any error, boxed: the inner error of a field a parser or a check refused.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
