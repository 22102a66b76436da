//! The pull request record of a status: what a pull request step leaves in
//! `status.pullRequest` (of the watch, or of one member).

use imagewatch_crd::{PullRequestState, imagewatch::WatchPullRequest};

use super::outcome::{Delivered, PrAction};

/// The status record after a step (pure): the pull request acted on, or (nothing open) the
/// last one recorded, marked as no longer open.
pub fn status_of(
    delivered: &Delivered,
    previous: Option<&WatchPullRequest>,
) -> Option<WatchPullRequest> {
    match (&delivered.pull_request, delivered.action) {
        (Some(pr), PrAction::Closed) => Some(WatchPullRequest {
            number: pr.number,
            url: pr.url.clone(),
            state: PullRequestState::Closed,
            branch: delivered.branch.clone(),
            tag: Some(delivered.tag.clone()),
        }),
        (Some(pr), _) => Some(WatchPullRequest {
            number: pr.number,
            url: pr.url.clone(),
            state: pr.state,
            branch: delivered.branch.clone(),
            tag: Some(delivered.tag.clone()),
        }),
        (None, _) => previous.map(|p| WatchPullRequest {
            state: if p.state == PullRequestState::Open {
                // Gone from the open list while `branch` got the tag: merged (or closed by
                // a person); the forge has the final word on the web page.
                PullRequestState::Merged
            } else {
                p.state
            },
            ..p.clone()
        }),
    }
}
