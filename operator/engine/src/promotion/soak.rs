//! `gates.soakSince: FirstApplied` (pure): which source state to propose when the source
//! moves faster than the soak.
//!
//! With `Running` (the default), the candidate is what the source runs now and the soak counts
//! from when it was applied, so a source that gets a new build more often than the soak
//! never proposes anything. With `FirstApplied`, the controller reads the source's Git
//! history (the changes of `from.path`, newest first) and the candidate is the newest state
//! of the source that was first applied at least the soak ago, whether or not the source
//! still runs it; production keeps moving, one soaked state behind the source.

use std::time::Duration;

use jiff::Timestamp;

use super::candidate::SourceImage;

/// One change of the source in Git: the commit, its time, and the images the source held
/// after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceChange {
    /// Commit id.
    pub commit: String,
    /// Commit time.
    pub at: Timestamp,
    /// The source's images after the commit.
    pub images: Vec<SourceImage>,
}

/// The state chosen from the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Soaked {
    /// Index into the history (0: the source's current state).
    pub index: usize,
    /// When that state was first applied (its oldest occurrence in the history read).
    pub first_applied: Timestamp,
    /// The commit that first applied it.
    pub commit: String,
}

/// The images of a state, compared without where they were read.
fn key(images: &[SourceImage]) -> Vec<(&str, &str, Option<&str>)> {
    let mut key: Vec<_> = images
        .iter()
        .map(|i| (i.repository.as_str(), i.tag.as_str(), i.digest.as_deref()))
        .collect();
    key.sort();
    key
}

/// The first application of the state at `index`: the oldest change, at or before `index` in
/// time, that applied the same images (a state applied, left and applied again counts from
/// its first time).
fn first_application(history: &[SourceChange], index: usize) -> (Timestamp, &str) {
    let wanted = key(&history[index].images);
    history[index..]
        .iter()
        .filter(|c| key(&c.images) == wanted)
        .map(|c| (c.at, c.commit.as_str()))
        .min_by_key(|(at, _)| *at)
        .unwrap_or((history[index].at, history[index].commit.as_str()))
}

/// Picks the newest state of `history` (newest first) first applied at least `soak` before
/// `now`. `None` when the history is empty; when no state has soaked yet, the current state
/// (index 0) with its first application, so the gate can say how long is left.
pub fn pick(history: &[SourceChange], now: Timestamp, soak: Duration) -> Option<Soaked> {
    if history.is_empty() {
        return None;
    }
    let soaked = |at: Timestamp| {
        now.duration_since(at)
            .try_into()
            .is_ok_and(|ran: Duration| ran >= soak)
    };
    let chosen = (0..history.len())
        .map(|i| (i, first_application(history, i)))
        .find(|(_, (at, _))| soaked(*at))
        .unwrap_or_else(|| (0, first_application(history, 0)));
    let (index, (first_applied, commit)) = chosen;
    Some(Soaked {
        index,
        first_applied,
        commit: commit.to_string(),
    })
}

/// How long until a state newer than `picked` has soaked, when the choice moves on; `None`
/// when `picked` is the current state.
pub fn next_change_in(
    history: &[SourceChange],
    picked: &Soaked,
    now: Timestamp,
    soak: Duration,
) -> Option<Duration> {
    (0..picked.index.min(history.len()))
        .filter_map(|i| {
            let (first, _) = first_application(history, i);
            let ran: Duration = now.duration_since(first).try_into().unwrap_or_default();
            soak.checked_sub(ran)
        })
        .filter(|left| !left.is_zero())
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    /// `(commit, second, tag)`, newest first.
    fn history(changes: &[(&str, i64, &str)]) -> Vec<SourceChange> {
        changes
            .iter()
            .map(|(commit, second, tag)| SourceChange {
                commit: commit.to_string(),
                at: at(*second),
                images: vec![
                    SourceImage::parse(&format!("r.io/my-api:{tag}"), "overlays/stg").unwrap(),
                ],
            })
            .collect()
    }

    #[test]
    fn a_build_every_20s_with_a_60s_soak_proposes_the_newest_state_60s_old() {
        // Staging got v1 at 0 s, then a new build every 20 s; it is 130 s now.
        let h = history(&[
            ("c7", 120, "v7"),
            ("c6", 100, "v6"),
            ("c5", 80, "v5"),
            ("c4", 60, "v4"),
            ("c3", 40, "v3"),
            ("c2", 20, "v2"),
            ("c1", 0, "v1"),
        ]);
        let s = pick(&h, at(130), Duration::from_secs(60)).unwrap();
        assert_eq!((s.index, s.commit.as_str()), (3, "c4"));
        assert_eq!(h[s.index].images[0].tag, "v4");
        // 20 s later the choice has moved on: production keeps moving.
        let s = pick(&h, at(150), Duration::from_secs(60)).unwrap();
        assert_eq!(h[s.index].images[0].tag, "v5");
    }

    #[test]
    fn the_next_look_is_when_the_next_newer_state_has_soaked() {
        let h = history(&[("c3", 120, "v3"), ("c2", 100, "v2"), ("c1", 0, "v1")]);
        let s = pick(&h, at(130), Duration::from_secs(60)).unwrap();
        assert_eq!(s.index, 2);
        // v2 soaks at 160 s, v3 at 180 s: look again in 30 s.
        let next = next_change_in(&h, &s, at(130), Duration::from_secs(60));
        assert_eq!(next, Some(Duration::from_secs(30)));
        let current = pick(&h, at(200), Duration::from_secs(60)).unwrap();
        assert_eq!(current.index, 0);
        assert_eq!(
            next_change_in(&h, &current, at(200), Duration::from_secs(60)),
            None
        );
    }

    #[test]
    fn nothing_soaked_yet_gives_the_current_state_with_its_first_application() {
        let h = history(&[("c2", 50, "v2"), ("c1", 30, "v1")]);
        let s = pick(&h, at(60), Duration::from_secs(60)).unwrap();
        assert_eq!((s.index, s.first_applied), (0, at(50)));
    }

    #[test]
    fn a_state_applied_again_counts_from_its_first_application() {
        // v1 at 0 s, v2 at 40 s (bad), reverted to v1 at 50 s: v1 has run since 0 s.
        let h = history(&[("c3", 50, "v1"), ("c2", 40, "v2"), ("c1", 0, "v1")]);
        let s = pick(&h, at(70), Duration::from_secs(60)).unwrap();
        assert_eq!(
            (s.index, s.first_applied, s.commit.as_str()),
            (0, at(0), "c1")
        );
    }

    #[test]
    fn a_zero_soak_proposes_the_current_state() {
        let h = history(&[("c2", 50, "v2"), ("c1", 0, "v1")]);
        assert_eq!(pick(&h, at(50), Duration::ZERO).unwrap().index, 0);
    }

    #[test]
    fn an_empty_history_picks_nothing() {
        assert_eq!(pick(&[], at(0), Duration::from_secs(1)), None);
    }

    #[test]
    fn states_compare_by_images_not_by_where_they_were_read() {
        let mut h = history(&[("c2", 10, "v1"), ("c1", 0, "v1")]);
        h[0].images[0].from = "overlays/stg/kustomization.yaml".into();
        let s = pick(&h, at(5), Duration::from_secs(60)).unwrap();
        assert_eq!(s.first_applied, at(0));
    }
}
