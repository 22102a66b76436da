//! The status of a PromotionPolicy after one reconcile (pure): the source, the candidate,
//! the gates, the pull request, the history of promotions and the `Ready`, `GatesPassing`
//! and `PullRequestOpen` conditions.

use imagewatch_crd::{
    OnGitChange, PromotionPolicyStatus,
    conditions::{GATES_PASSING, PULL_REQUEST_OPEN, READY, reason as common_reason},
    promotion::{PromotedImage, Promotion, PromotionMode, PullRequestRef, reason},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::{self as conditions, Failure, short, truncate};
use crate::forge::{EnsureAction, PullRequest};
use crate::promotion::{Candidate, GateReport};

/// Promotions kept in `status.lastPromotions`.
pub const HISTORY: usize = 10;

/// What was done with the candidate.
#[derive(Debug, Clone)]
pub enum Delivery {
    /// The target already holds the candidate; `closed` is a pull request closed now.
    UpToDate {
        /// Closed pull request.
        closed: Option<PullRequest>,
    },
    /// Gates do not pass yet; nothing written.
    Gated,
    /// `spec.suspend`; nothing written.
    Suspended,
    /// `spec.windows` or an admin freeze: the gates pass but writing is closed; nothing
    /// written (no commit, no pull request opened or updated).
    Closed(crate::windows::Closed),
    /// Committed to the target branch (mode Commit).
    Committed {
        /// The commit.
        commit: String,
    },
    /// A pull request proposes the candidate.
    Proposed {
        /// The pull request.
        pull_request: PullRequest,
        /// What the forge call did.
        action: EnsureAction,
        /// Head commit of the pull request branch.
        commit: String,
        /// Whether the branch was (re)written in this reconcile.
        pushed: bool,
    },
}

/// A successful reconcile.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Human-readable source.
    pub source: String,
    /// Mode.
    pub mode: PromotionMode,
    /// `to.path`.
    pub path: String,
    /// Target branch.
    pub branch: String,
    /// The candidate.
    pub candidate: Candidate,
    /// Gates, when evaluated (only when the candidate differs from the target).
    pub gates: Option<GateReport>,
    /// What was done.
    pub delivery: Delivery,
    /// Non-fatal problems (forge labels, auto-merge).
    pub warnings: Vec<String>,
    /// `spec.onGitChange`, for the messages of the candidate's holds.
    pub on_git_change: OnGitChange,
    /// `metadata.name` of the policy, for the resume command of a hold.
    pub name: String,
}

impl Outcome {
    /// The `Held` condition's message: each held image, why, and what resumes it; `None`
    /// when no image is held.
    pub fn held_message(&self) -> Option<String> {
        let held = &self.candidate.held;
        (!held.is_empty()).then(|| {
            held.iter()
                .map(|h| crate::promotion::held::message(h, self.on_git_change, &self.name))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

/// The status a reconcile of a policy (its `previous` status and the `generation` it read)
/// leaves, from what it did (or the failure that stopped it).
pub fn build_status<E: Failure>(
    previous: Option<&PromotionPolicyStatus>,
    generation: Option<i64>,
    result: &Result<Outcome, E>,
    now: &Time,
) -> PromotionPolicyStatus {
    let previous = previous.cloned().unwrap_or_default();
    let mut next = previous.clone();
    next.observed_generation = generation;
    let condition = |type_: &str, status: &str, reason: &str, message: &str| Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: truncate(message, 1024),
        observed_generation: generation,
        last_transition_time: now.clone(),
    };
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(e) => {
            next.conditions = conditions::merge_condition(
                &previous.conditions,
                condition(READY, "False", e.reason(), &e.to_string()),
            );
            return next;
        }
    };
    let candidate = &outcome.candidate;
    next.source = Some(outcome.source.clone());
    next.candidate = candidate
        .images
        .iter()
        .map(|i| PromotedImage {
            name: i.name.clone(),
            image: i.repository.clone(),
            tag: i.tag.clone(),
            current: i.current_display(),
        })
        .collect();
    next.candidate_summary = Some(candidate.summary());
    next.candidate_id = Some(candidate.id());
    next.held = candidate.held.clone();
    let held_message = outcome.held_message();
    next.conditions = super::held::held_condition_of(
        next.conditions,
        held_message.as_deref(),
        "no change in the target by someone else holds an image back",
        generation,
        now,
    );
    match &outcome.gates {
        Some(g) => {
            next.gates = g.gates.clone();
            next.gates_summary = Some(g.summary());
        }
        None => {
            next.gates = Vec::new();
            next.gates_summary = None;
        }
    }
    let summary = candidate.summary();
    let changes: Vec<String> = candidate
        .changes()
        .map(|i| {
            format!(
                "{} {} -> {}",
                i.name,
                i.current_display().unwrap_or_default(),
                i.tag
            )
        })
        .collect();
    let mut notes = outcome.warnings.clone();
    if !candidate.not_in_target.is_empty() {
        notes.push(format!(
            "not in {}: {}",
            outcome.path,
            candidate.not_in_target.join(", ")
        ));
    }
    let held_names = candidate
        .held
        .iter()
        .map(|h| h.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    if !candidate.held.is_empty() {
        notes.push(format!("held: {held_names}, see the Held condition"));
    }
    let note = if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join("; "))
    };
    let is_pr = outcome.mode == PromotionMode::PullRequest;
    let mut set = |c: Condition| next.conditions = conditions::merge_condition(&next.conditions, c);
    let gates_condition = match &outcome.gates {
        None if !candidate.held.is_empty() => condition(
            GATES_PASSING,
            "Unknown",
            reason::NOTHING_TO_PROMOTE,
            &format!(
                "nothing to promote to {}: {held_names} held (changed in Git by someone else)",
                outcome.path
            ),
        ),
        None => condition(
            GATES_PASSING,
            "Unknown",
            reason::NOTHING_TO_PROMOTE,
            &format!("{} already holds {summary}", outcome.path),
        ),
        Some(g) => match &g.failing {
            Some((r, m)) => condition(GATES_PASSING, "False", r, m),
            None => condition(
                GATES_PASSING,
                "True",
                reason::GATES_PASSED,
                &format!("{} gate(s) pass", g.gates.len()),
            ),
        },
    };
    set(gates_condition);
    let record = |commit: Option<String>, pr: Option<String>| Promotion {
        tags: candidate.tags(),
        commit,
        pull_request: pr,
        at: now.clone(),
    };
    let mut new_promotion: Option<Promotion> = None;
    let mut pull_request = previous.pull_request.clone();
    match &outcome.delivery {
        Delivery::UpToDate { closed } => {
            // A commit just made stays the Ready message until something else happens (the
            // next reconcile finds the target current): no status churn, and people see it.
            let just_committed = previous.conditions.iter().any(|c| {
                c.type_ == READY
                    && c.reason == reason::COMMITTED
                    && c.observed_generation == generation
            }) && previous.candidate_id.as_deref()
                == Some(candidate.id().as_str());
            if let Some(message) = &held_message {
                // Nothing left to propose because someone else changed the target.
                set(condition(
                    READY,
                    "True",
                    common_reason::CHANGED_IN_GIT,
                    &format!("nothing to promote to {}: {message}", outcome.path),
                ));
            } else if !just_committed {
                set(condition(
                    READY,
                    "True",
                    reason::UP_TO_DATE,
                    &format!("{} already holds {summary}{note}", outcome.path),
                ));
            }
            if is_pr {
                pull_request = None;
                let already_closed = previous
                    .conditions
                    .iter()
                    .any(|c| c.type_ == PULL_REQUEST_OPEN && c.status == "False");
                match closed {
                    Some(pr) => set(condition(
                        PULL_REQUEST_OPEN,
                        "False",
                        reason::CLOSED,
                        &format!(
                            "closed {} #{}: {} already holds the candidate",
                            pr.url, pr.number, outcome.path
                        ),
                    )),
                    None if already_closed => {}
                    None => set(condition(
                        PULL_REQUEST_OPEN,
                        "False",
                        reason::NO_PULL_REQUEST,
                        "nothing to propose",
                    )),
                }
            }
        }
        Delivery::Gated => {
            let why = outcome
                .gates
                .as_ref()
                .and_then(|g| g.failing.as_ref())
                .map(|(_, m)| m.clone())
                .unwrap_or_default();
            set(condition(
                READY,
                "True",
                reason::WAITING_FOR_GATES,
                &format!("{} waits for gates: {why}{note}", changes.join(", ")),
            ));
        }
        Delivery::Suspended => {
            set(condition(
                READY,
                "False",
                common_reason::SUSPENDED,
                &format!(
                    "suspended: {} would be proposed to {}",
                    changes.join(", "),
                    outcome.path
                ),
            ));
        }
        Delivery::Closed(closed) => {
            set(condition(
                READY,
                "False",
                closed.reason,
                &format!(
                    "{}: {} waits to be proposed to {}",
                    closed.why,
                    changes.join(", "),
                    outcome.path
                ),
            ));
        }
        Delivery::Committed { commit } => {
            set(condition(
                READY,
                "True",
                reason::COMMITTED,
                &format!(
                    "commit {} on {}: {}{note}",
                    short(commit),
                    outcome.branch,
                    changes.join(", ")
                ),
            ));
            new_promotion = Some(record(Some(commit.clone()), None));
        }
        Delivery::Proposed {
            pull_request: pr,
            action,
            commit,
            pushed,
        } => {
            set(condition(
                READY,
                "True",
                reason::PROPOSED,
                &format!(
                    "pull request #{} proposes {}{note}",
                    pr.number,
                    changes.join(", ")
                ),
            ));
            set(condition(PULL_REQUEST_OPEN, "True", reason::OPEN, &pr.url));
            pull_request = Some(PullRequestRef {
                url: pr.url.clone(),
                number: pr.number,
                branch: pr.head.clone(),
            });
            if *pushed || *action == EnsureAction::Created {
                new_promotion = Some(record(Some(commit.clone()), Some(pr.url.clone())));
            }
        }
    }
    if !is_pr {
        pull_request = None;
        set(condition(
            PULL_REQUEST_OPEN,
            "False",
            reason::NOT_APPLICABLE,
            "mode Commit opens no pull requests",
        ));
    }
    next.pull_request = pull_request;
    if let Some(p) = new_promotion {
        let duplicate = next.last_promotions.first().is_some_and(|last| {
            last.tags == p.tags && last.commit == p.commit && last.pull_request == p.pull_request
        });
        if !duplicate {
            let changes = p
                .tags
                .iter()
                .map(|(image, tag)| {
                    let change = crate::history::Change {
                        tag,
                        image: Some(image),
                        digest: None,
                        commit: p.commit.as_deref(),
                        pull_request: p.pull_request.as_deref(),
                    };
                    crate::history::record(
                        change,
                        None,
                        Some(crate::stages::Trigger::Promotion),
                        &p.at,
                    )
                })
                .collect();
            next.history = crate::history::prepend(&next.history, changes);
            next.last_promotions.insert(0, p);
            next.last_promotions.truncate(HISTORY);
        }
    }
    next
}

#[cfg(test)]
mod tests;
