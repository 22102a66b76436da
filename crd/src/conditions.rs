//! The condition vocabulary: condition types and the reasons the operator reports.
//!
//! Reasons are stable CamelCase words (Argo CD health checks and alerts match on them); the
//! message carries the detail.

/// Condition type summarising whether the object does what it asks for.
pub const READY: &str = "Ready";
/// PromotionPolicy: whether every gate passes.
pub const GATES_PASSING: &str = "GatesPassing";
/// PromotionPolicy, and an ImageWatch with `spec.git.pullRequest`: whether a pull request is
/// open.
pub const PULL_REQUEST_OPEN: &str = "PullRequestOpen";
/// ImageWatch: whether the Argo CD Applications that deploy the last commit's file have
/// synced a revision containing it and are Healthy. Absent when Argo CD is not followed.
pub const DEPLOYED: &str = "Deployed";
/// ImageWatch: whether the watch holds to a change someone else made in Git (a revert, a
/// hand edit, another tool) instead of writing its chosen tag (`spec.onGitChange`).
/// PromotionPolicy: whether an image of the candidate is not proposed again for such a
/// change in the target (`status.held`).
pub const HELD: &str = "Held";
/// The annotation that resumes a watch or policy held with `spec.onGitChange: Hold`; its
/// value names the commit held to (`status.held.commit`, or at least its first 7 characters).
pub const RESUME_ANNOTATION: &str = "imagewatch.dev/resume";

/// Reasons used on `Ready`.
pub mod reason {
    /// Git already holds the chosen tag.
    pub const UP_TO_DATE: &str = "UpToDate";
    /// A new tag was committed and pushed.
    pub const UPDATED: &str = "Updated";
    /// No tag in the registry matches the tag rules.
    pub const NO_MATCHING_TAGS: &str = "NoMatchingTags";
    /// The spec cannot be acted on (e.g. a regex that does not compile).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// A referenced Secret is missing or lacks the expected keys.
    pub const CREDENTIALS_NOT_FOUND: &str = "CredentialsNotFound";
    /// The registry refused or failed a request.
    pub const REGISTRY_ERROR: &str = "RegistryError";
    /// The target workload/container could not be found in Git, or is ambiguous.
    pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
    /// Cloning, fetching, committing or pushing failed.
    pub const GIT_ERROR: &str = "GitError";
    /// `spec.git.pullRequest`: the forge's pull request API failed or refused (rate limit,
    /// authentication, validation); the message carries the forge's answer.
    pub const FORGE_ERROR: &str = "ForgeError";
    /// The operator's clone cache has no space (or quota) left: nothing was committed; the
    /// message names the directory. Retried until space is freed.
    pub const CACHE_FULL: &str = "CacheFull";
    /// An unexpected failure talking to the Kubernetes API (or a bug): retried with backoff;
    /// the message says what failed.
    pub const INTERNAL_ERROR: &str = "InternalError";
    /// `PullRequestOpen`: the watch's pull request was opened by this reconcile.
    pub const OPENED: &str = "Opened";
    /// `PullRequestOpen`: the watch's pull request is open and already proposes the tag.
    pub const OPEN: &str = "Open";
    /// `PullRequestOpen`: the watch's pull request was closed (Git already holds the tag).
    pub const CLOSED: &str = "Closed";
    /// `PullRequestOpen`: the watch's pull request was merged; none is open.
    pub const MERGED: &str = "Merged";
    /// `spec.suspend` is true: nothing is written.
    pub const SUSPENDED: &str = "Suspended";
    /// The pinned tag does not exist in the registry.
    pub const PINNED_TAG_NOT_FOUND: &str = "PinnedTagNotFound";
    /// Waiting for the other members of `spec.group`.
    pub const WAITING_FOR_GROUP: &str = "WaitingForGroup";
    /// The object was seen but not reconciled yet.
    pub const PROGRESSING: &str = "Progressing";
    /// Pattern image: some matching repositories are not up to date in Git (the message
    /// names the first ones and why; `status.members` has each one).
    pub const MEMBERS_NOT_READY: &str = "MembersNotReady";
    /// Pattern image: no repository of the registry matches it.
    pub const NO_MATCHING_REPOSITORIES: &str = "NoMatchingRepositories";
    /// Pattern image: the registry does not list its repositories to these credentials
    /// (no `/v2/_catalog`, or `DescribeRepositories` is not allowed).
    pub const CATALOG_UNAVAILABLE: &str = "CatalogUnavailable";
    /// The object asks for something its namespace is not allowed: a Git URL, path or
    /// registry outside the admin's allow-list (or its Argo CD AppProject), the operator's
    /// cloud identity, or an Argo CD Application that does not deploy to its namespace. The
    /// message names the rule; nothing was read or written.
    pub const NOT_ALLOWED: &str = "NotAllowed";
    /// `spec.verify` (or a signature gate): the newest candidate tag has no cosign signature.
    /// The message names the tag; the watch stays on (or moves to) the newest verified tag.
    pub const SIGNATURE_MISSING: &str = "SignatureMissing";
    /// `spec.verify` (or a signature gate): the newest candidate tag's cosign signature does
    /// not verify with the configured keys, or signs another image. The message says why.
    pub const SIGNATURE_INVALID: &str = "SignatureInvalid";
    /// `spec.tags.platforms`: the newest candidate tag's image (index entries, or a single
    /// image's config) lacks a wanted platform. The message names the tag and the missing
    /// platforms; the watch stays on (or moves to) the newest tag that provides them all.
    pub const PLATFORM_MISSING: &str = "PlatformMissing";
    /// `spec.windows`: a change is due but no Allow window is open, or a Deny window is;
    /// nothing is written (no commit, no pull request opened or updated). The message names
    /// the change waiting and when the next window opens; it is written then.
    pub const OUTSIDE_WINDOW: &str = "OutsideWindow";
    /// An admin freeze (the operator's freeze ConfigMap, for the cluster or the object's
    /// namespace): nothing is written until it is lifted. The message gives the freeze's
    /// reason and the change waiting.
    pub const FROZEN: &str = "Frozen";

    /// `Held` (and `Ready`): the target's value in Git was last changed by a commit imagewatch
    /// did not make, and differs from what imagewatch last wrote; nothing is written over it
    /// (`spec.onGitChange`). The message names the commit, its author and the value it set.
    /// On a PromotionPolicy: an image's tag in the target was so changed after the policy
    /// promoted it, and the image is not proposed again.
    pub const CHANGED_IN_GIT: &str = "ChangedInGit";
    /// `Held`: nothing holds the watch (or the policy's images) back.
    pub const NOT_HELD: &str = "NotHeld";

    /// `Deployed`: every Argo CD Application deploying the committed file runs the commit
    /// (synced at a revision containing it, and Healthy); the message says how long it took.
    pub const DEPLOYED: &str = "Deployed";
    /// `Deployed`: the commit was made; the Applications have not synced it or are not
    /// Healthy yet (the message says what each shows).
    pub const WAITING_FOR_SYNC: &str = "WaitingForSync";
    /// `Deployed`: the Applications did not run the commit within the time allowed
    /// (`--argocd-deploy-timeout`); the message says what each showed.
    pub const NOT_DEPLOYED: &str = "NotDeployed";
    /// `Deployed`: no Argo CD Application that serves the watch's namespace deploys the
    /// committed file, so the commit is not followed to a running Pod.
    pub const NO_APPLICATION: &str = "NoApplication";
}
