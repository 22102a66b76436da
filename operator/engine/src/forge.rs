//! Pull requests as the operator sees them on any forge (GitHub, GitLab, Gitea): what one
//! is, what one should be, and what making sure of it did. Data only; the forge clients are
//! in the operator's `forge` module.

/// A pull request (GitLab: merge request) as the operator needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    /// Number (GitHub, Gitea) or IID (GitLab).
    pub number: i64,
    /// Web URL.
    pub url: String,
    /// Title.
    pub title: String,
    /// Body (description).
    pub body: String,
    /// Head (source) branch.
    pub head: String,
    /// Base (target) branch.
    pub base: String,
    /// Head commit, when the forge reports it.
    pub head_sha: Option<String>,
    /// Label names.
    pub labels: Vec<String>,
    /// Whether auto-merge is known to be enabled.
    pub auto_merge: bool,
    /// GitHub's GraphQL node id.
    pub node_id: Option<String>,
    /// Open, closed or merged.
    pub state: PullRequestState,
}

/// Where a pull request stands: the type `status.pullRequest.state` has.
pub use imagewatch_crd::common::PullRequestState;

/// What a pull request should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPullRequest {
    /// Head branch (in the same repository).
    pub head: String,
    /// Base branch.
    pub base: String,
    /// Title.
    pub title: String,
    /// Body.
    pub body: String,
    /// Labels to add.
    pub labels: Vec<String>,
    /// Request auto-merge.
    pub auto_merge: bool,
}

/// What the forge client's `ensure` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnsureAction {
    /// Opened a new pull request.
    Created,
    /// Changed the title or body of the open one.
    Updated,
    /// The open one was already right.
    Unchanged,
}

/// The result of the forge client's `ensure`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ensured {
    /// The pull request.
    pub pull_request: PullRequest,
    /// What was done.
    pub action: EnsureAction,
    /// Non-fatal problems (labels, auto-merge).
    pub warnings: Vec<String>,
}
