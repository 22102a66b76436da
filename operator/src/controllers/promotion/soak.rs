//! Soak step of a PromotionPolicy reconcile with `gates.soakSince: FirstApplied`, between the
//! source and the candidate: the changes of `from.path` read from the source branch's history
//! (`read::changes`, at most `SOURCE_HISTORY_CHANGES`) become source states, and the engine's
//! `promotion::soak::pick` chooses the newest one first applied at least the soak ago. The
//! soak gate then counts from that first application.

use super::read::GitRead;
use crate::error::PromotionError;
use std::time::Duration;

use imagewatch_crd::promotion::SoakSince;

use crate::controllers::parse_duration;
use crate::promotion::{self, SourceState};

use crate::promotion::soak::{self as soaking, SourceChange};

/// The state chosen from the source's history, and when to look again.
pub(super) struct SoakedSource {
    /// Seconds until a newer state has soaked (the choice moves on then).
    pub(super) next_in: Option<Duration>,
}

/// With `gates.soakSince: FirstApplied` and a soak, the source state to propose (in place of
/// the current one) and when the choice changes next; `None` otherwise.
pub(super) fn soak_from_history(
    spec: &imagewatch_crd::PromotionPolicySpec,
    gates: &imagewatch_crd::promotion::Gates,
    read: &GitRead,
) -> Result<Option<(SourceState, SoakedSource)>, PromotionError> {
    let (Some(soak), Some(SoakSince::FirstApplied), Some(path)) = (
        gates.soak.as_deref(),
        gates.soak_since,
        spec.from.path.as_deref(),
    ) else {
        return Ok(None);
    };
    let required = parse_duration(soak).unwrap_or_default();
    let path = path.trim_matches('/');
    let mut history = Vec::new();
    for (commit, at, files) in &read.source_history {
        let inventory = promotion::inventory(files, path);
        // A state the source could not be promoted from (no image, no tag) is skipped: it
        // was never a candidate.
        let Ok(state) = promotion::sources_from_inventory(&inventory, path, None, None) else {
            continue;
        };
        history.push(SourceChange {
            commit: commit.clone(),
            at: *at,
            images: state.images,
        });
    }
    let now = jiff::Timestamp::now();
    let Some(picked) = soaking::pick(&history, now, required) else {
        return Ok(None);
    };
    let chosen = &history[picked.index];
    let label = if picked.index == 0 {
        format!("{path} (first applied in {})", short(&picked.commit))
    } else {
        format!(
            "{path} at {} (first applied in {}; the source has moved on {} time{} since)",
            short(&chosen.commit),
            short(&picked.commit),
            picked.index,
            if picked.index == 1 { "" } else { "s" }
        )
    };
    let state = SourceState {
        images: chosen.images.clone(),
        applied: vec![(label, Some(picked.first_applied))],
        commits: vec![chosen.commit.clone()],
    };
    Ok(Some((
        state,
        SoakedSource {
            next_in: soaking::next_change_in(&history, &picked, now, required),
        },
    )))
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}
