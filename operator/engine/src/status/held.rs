//! The `Held` condition (`spec.onGitChange`), for watches, pattern members and promotion
//! policies alike.

use imagewatch_crd::conditions::reason;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::{self as conditions};

/// The `Held` condition after a reconcile that reached the writer: `True` (`ChangedInGit`)
/// while `held` names a hold (with the file or member it is on), `False` (`NotHeld`) once a
/// watch that was held no longer is, absent on a watch never held.
pub(super) fn held_condition(
    existing: Vec<Condition>,
    held: Option<(&str, &crate::held::Hold)>,
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let message = held.map(|(place, hold)| format!("{place}: {}", hold.message()));
    held_condition_of(
        existing,
        message.as_deref(),
        "no change in Git by someone else holds the watch",
        generation,
        now,
    )
}

/// The `Held` condition: `True` (`ChangedInGit`) with `held`'s message while something is
/// held, `False` (`NotHeld`, saying `not_held`) once what was held no longer is, absent when
/// nothing ever was.
pub(super) fn held_condition_of(
    existing: Vec<Condition>,
    held: Option<&str>,
    not_held: &str,
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let was_held = existing
        .iter()
        .any(|c| c.type_ == imagewatch_crd::conditions::HELD);
    let condition = match held {
        Some(message) => {
            conditions::ready_condition(true, reason::CHANGED_IN_GIT, message, generation, now)
        }
        None if was_held => {
            conditions::ready_condition(false, reason::NOT_HELD, not_held, generation, now)
        }
        None => return existing,
    };
    let condition = Condition {
        type_: imagewatch_crd::conditions::HELD.to_string(),
        ..condition
    };
    conditions::merge_condition(&existing, condition)
}
