//! Whether an image of a PromotionPolicy's candidate is held: the promotion half of
//! `spec.onGitChange` (the watch half, and the decision both share, is [`crate::held`]).
//!
//! An image is held when its tag in `to.path` was last changed by a commit the policy did not
//! make (a revert, a hand edit, another tool) and differs from what the policy last promoted
//! there. The policy then does not propose that image again: with `HoldUntilNewer` until the
//! source offers another tag than the one replaced, with `Hold` until the resume annotation
//! names the commit. The other images of the candidate still go; a tag `spec.pin` chose is
//! never held (a person chose it for this very target).
//!
//! "What the policy last promoted there" is the image's tag in the newest
//! `status.lastPromotions` entry naming it, leaving out the entries of the pull request still
//! open (a proposal is not in the target until merged). Git holding the open pull request's
//! tag is its merge (a squash or rebase merge is made by the forge, not by us).
//!
//! [`decide`] answers without history whenever it can: Git holding the candidate, what the
//! policy promoted, or the open pull request's tag (the steady path), or a hold already
//! recorded in `status.held` for this same tag. Otherwise it asks for the history of the place
//! ([`Decision::ReadHistory`]): the changes of the value, newest first ([`GitChange`]s, read by
//! the controller until [`history_complete`]). The image is held only if every change back to
//! the promoted tag was made by others: a tag that never reached the target (a pull request
//! closed unmerged) holds nothing, and neither does the policy's own commit; past
//! [`HISTORY_LIMIT`] changes all made by others, the image is held.
//!
//! Pure.

use imagewatch_crd::{HeldChange, OnGitChange, PromotionPolicyStatus, promotion::HeldImage};

use super::candidate::{Candidate, target_sites};
use super::inventory::{ImageSite, Inventory, inventory};
use crate::held::{self, GitChange, Holder, same_value};

/// What one image's hold depends on.
#[derive(Debug, Clone, Copy)]
pub struct ImageSituation<'a> {
    /// Image name.
    pub name: &'a str,
    /// `spec.onGitChange`.
    pub mode: OnGitChange,
    /// The tag Git holds (the reference when it has no tag).
    pub current: &'a str,
    /// The candidate's tag.
    pub desired: &'a str,
    /// Whether `spec.pin` chose the tag.
    pub pinned: bool,
    /// The tag the policy last promoted there ([`Promoted::landed`]).
    pub promoted: Option<&'a str>,
    /// The tag the open pull request proposes ([`Promoted::proposed`]).
    pub proposed: Option<&'a str>,
    /// The value of the resume annotation, if any.
    pub resume: Option<&'a str>,
    /// The image's hold in the previous status, if any.
    pub held: Option<&'a HeldImage>,
}

/// Propose, hold, or first read the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Propose the candidate's tag.
    Promote,
    /// Leave the target as it is; report why.
    Hold(HeldImage),
    /// Ask again with the history of the place.
    ReadHistory,
}

/// Propose or hold one image; `history` is the changes of its value, newest first, once
/// [`Decision::ReadHistory`] asked for them.
pub fn decide(s: &ImageSituation<'_>, history: Option<&[GitChange]>) -> Decision {
    if s.mode == OnGitChange::Overwrite || s.pinned || same_value(s.current, s.desired) {
        return Decision::Promote;
    }
    let Some(promoted) = s.promoted else {
        // Never promoted there: nothing of ours to protect, today's behaviour.
        return Decision::Promote;
    };
    if same_value(s.current, promoted) || s.proposed.is_some_and(|p| same_value(s.current, p)) {
        return Decision::Promote;
    }
    let change = match (s.held, history) {
        // The same hold as last time: its commit is already known.
        (Some(h), _) if same_value(&h.value, s.current) && same_value(&h.replaced, promoted) => {
            GitChange {
                commit: h.commit.clone(),
                author: h.author.clone(),
                ours: false,
                value: h.value.clone(),
            }
        }
        (_, None) => return Decision::ReadHistory,
        (_, Some(changes)) => match replaced_by_others(changes, promoted) {
            Some(change) => change.clone(),
            None => return Decision::Promote,
        },
    };
    let situation = held::Situation {
        mode: s.mode,
        last_written: Some(promoted),
        current: s.current,
        desired: s.desired,
        resume: s.resume,
    };
    match held::decide(&situation, Some(&change)) {
        held::Decision::Write => Decision::Promote,
        held::Decision::Hold(c) => Decision::Hold(HeldImage {
            name: s.name.to_string(),
            commit: c.commit,
            author: c.author,
            value: c.value,
            replaced: c.replaced,
        }),
    }
}

/// Whether the changes read so far (newest first) decide: the oldest is the policy's own, set
/// the promoted tag, or is where the file (or the image in it) first appeared.
pub fn history_complete(changes: &[GitChange], promoted: &str) -> bool {
    changes.last().is_some_and(|c| {
        c.ours || c.value.is_empty() || (changes.len() > 1 && same_value(&c.value, promoted))
    })
}

/// Changes of one value the controller reads at most. When that many were all made by others
/// without reaching the promoted tag, the image is held: unsure is never a reason to write.
pub const HISTORY_LIMIT: usize = 8;

/// The newest change, when every change back to one setting `promoted` (or, past
/// [`HISTORY_LIMIT`] changes, every change read) was made by others.
fn replaced_by_others<'c>(changes: &'c [GitChange], promoted: &str) -> Option<&'c GitChange> {
    for (i, change) in changes.iter().enumerate() {
        if i > 0 && same_value(&change.value, promoted) {
            return changes.first();
        }
        if change.ours || change.value.is_empty() {
            return None;
        }
    }
    changes.first().filter(|_| changes.len() >= HISTORY_LIMIT)
}

/// What the policy's status says it promoted to the target.
#[derive(Debug, Clone, Copy, Default)]
pub struct Promoted<'a> {
    status: Option<&'a PromotionPolicyStatus>,
}

impl<'a> Promoted<'a> {
    /// From the policy's previous status.
    pub fn of(status: Option<&'a PromotionPolicyStatus>) -> Self {
        Self { status }
    }

    fn open_pull_request(&self) -> Option<&'a str> {
        self.status
            .and_then(|s| s.pull_request.as_ref())
            .map(|p| p.url.as_str())
    }

    /// The tag of `name` in the newest promotion that is not a proposal of the pull request
    /// still open.
    pub fn landed(&self, name: &str) -> Option<&'a str> {
        let open = self.open_pull_request();
        self.status?
            .last_promotions
            .iter()
            .filter(|p| open.is_none() || p.pull_request.as_deref() != open)
            .find_map(|p| p.tags.get(name))
            .map(String::as_str)
    }

    /// The tag of `name` the open pull request proposes.
    pub fn proposed(&self, name: &str) -> Option<&'a str> {
        let open = self.open_pull_request()?;
        self.status?
            .last_promotions
            .iter()
            .filter(|p| p.pull_request.as_deref() == Some(open))
            .find_map(|p| p.tags.get(name))
            .map(String::as_str)
    }

    /// The image's hold in the status, if any.
    pub fn held(&self, name: &str) -> Option<&'a HeldImage> {
        self.status?.held.iter().find(|h| h.name == name)
    }
}

/// One image to decide on, with the place whose history tells who changed it.
#[derive(Debug, Clone, Copy)]
pub struct HoldCheck<'a> {
    /// What the decision depends on.
    pub situation: ImageSituation<'a>,
    /// The place holding another tag than the candidate's (its file's history is read).
    pub site: &'a ImageSite,
}

/// The images of `candidate` the target holds something else for, each with its situation.
pub fn checks<'a>(
    candidate: &'a Candidate,
    target: &'a Inventory,
    promoted: Promoted<'a>,
    mode: OnGitChange,
    resume: Option<&'a str>,
) -> Vec<HoldCheck<'a>> {
    candidate
        .changes()
        .filter_map(|image| {
            let reference = image.reference();
            let site = target_sites(target, &image.name)
                .into_iter()
                .find(|s| s.reference != reference)?;
            Some(HoldCheck {
                situation: ImageSituation {
                    name: &image.name,
                    mode,
                    current: tag_of(site),
                    desired: &image.tag,
                    pinned: image.origin == super::Origin::Pinned,
                    promoted: promoted.landed(&image.name),
                    proposed: promoted.proposed(&image.name),
                    resume,
                    held: promoted.held(&image.name),
                },
                site,
            })
        })
        .collect()
}

/// The tag a place holds (its reference when it has none).
pub fn tag_of(site: &ImageSite) -> &str {
    site.tag.as_deref().unwrap_or(&site.reference)
}

/// The tag of image `name` in one version of `file` (under `dir`); `None` when the file does
/// not hold it.
pub fn tag_in(file: &str, text: &str, dir: &str, name: &str) -> Option<String> {
    let inventory = inventory(&[(file, text)], dir);
    let sites = target_sites(&inventory, name);
    sites.first().map(|s| tag_of(s).to_string())
}

/// The `Held` condition's message part for one held image: `name: commit … by … set …`.
pub fn message(held: &HeldImage, mode: OnGitChange, policy: &str) -> String {
    let change = HeldChange {
        commit: held.commit.clone(),
        author: held.author.clone(),
        value: held.value.clone(),
        replaced: held.replaced.clone(),
    };
    format!(
        "{}: {}",
        held.name,
        held::message_for(&change, mode, Holder::Policy { name: policy })
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use imagewatch_crd::promotion::{Promotion, PullRequestRef};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::promotion::{CandidateInput, SourceImage, build_candidate};

    const OURS: &str = "c0ffee0000000000000000000000000000000001";
    const REVERT: &str = "badc0de000000000000000000000000000000002";
    const PRD: &str = "prd/.argocd-source-my-api-prd.yaml";

    fn situation(current: &'static str, desired: &'static str) -> ImageSituation<'static> {
        ImageSituation {
            name: "my-api",
            mode: OnGitChange::HoldUntilNewer,
            current,
            desired,
            pinned: false,
            promoted: Some("v1.4.0"),
            proposed: None,
            resume: None,
            held: None,
        }
    }

    fn change(commit: &str, ours: bool, value: &str) -> GitChange {
        GitChange {
            commit: commit.into(),
            author: if ours {
                "imagewatch <imagewatch@example.com>".into()
            } else {
                "Jane Doe <jane@example.com>".into()
            },
            ours,
            value: value.into(),
        }
    }

    /// A person reverted the policy's v1.4.0 to v1.3.9.
    fn reverted() -> Vec<GitChange> {
        vec![
            change(REVERT, false, "v1.3.9"),
            change(OURS, true, "v1.4.0"),
        ]
    }

    fn held_by_revert() -> HeldImage {
        HeldImage {
            name: "my-api".into(),
            commit: REVERT.into(),
            author: "Jane Doe <jane@example.com>".into(),
            value: "v1.3.9".into(),
            replaced: "v1.4.0".into(),
        }
    }

    #[test]
    fn a_revert_holds_until_the_source_offers_another_tag() {
        let s = situation("v1.3.9", "v1.4.0");
        assert_eq!(decide(&s, None), Decision::ReadHistory);
        let history = reverted();
        assert!(history_complete(&history, "v1.4.0"));
        assert!(!history_complete(&history[..1], "v1.4.0"));
        assert_eq!(decide(&s, Some(&history)), Decision::Hold(held_by_revert()));
        // v1.4.1 in the source: promoted over the revert.
        let newer = situation("v1.3.9", "v1.4.1");
        assert_eq!(decide(&newer, Some(&history)), Decision::Promote);
    }

    #[test]
    fn the_steady_path_reads_no_history() {
        // Git holds what the policy promoted; a new candidate goes.
        assert_eq!(
            decide(&situation("v1.4.0", "v1.4.1"), None),
            Decision::Promote
        );
        // Git holds the candidate.
        assert_eq!(
            decide(&situation("v1.4.1", "v1.4.1"), None),
            Decision::Promote
        );
        // Never promoted there.
        let first = ImageSituation {
            promoted: None,
            ..situation("v1.3.9", "v1.4.0")
        };
        assert_eq!(decide(&first, None), Decision::Promote);
        // The open pull request's tag, merged by the forge.
        let merged = ImageSituation {
            proposed: Some("v1.4.1"),
            ..situation("v1.4.1", "v1.4.2")
        };
        assert_eq!(decide(&merged, None), Decision::Promote);
        // A hold already recorded for the same tag: no history read again.
        let recorded = held_by_revert();
        let again = ImageSituation {
            held: Some(&recorded),
            ..situation("v1.3.9", "v1.4.0")
        };
        assert_eq!(decide(&again, None), Decision::Hold(held_by_revert()));
    }

    #[test]
    fn hold_waits_for_the_annotation_naming_the_commit() {
        let s = ImageSituation {
            mode: OnGitChange::Hold,
            ..situation("v1.3.9", "v1.4.1")
        };
        assert!(matches!(
            decide(&s, Some(&reverted())),
            Decision::Hold(h) if h.replaced == "v1.4.0"
        ));
        let wrong = ImageSituation {
            resume: Some("c0ffee0"),
            ..s
        };
        assert!(matches!(
            decide(&wrong, Some(&reverted())),
            Decision::Hold(_)
        ));
        let right = ImageSituation {
            resume: Some(&REVERT[..12]),
            ..s
        };
        assert_eq!(decide(&right, Some(&reverted())), Decision::Promote);
    }

    #[test]
    fn overwrite_and_pins_promote() {
        let overwrite = ImageSituation {
            mode: OnGitChange::Overwrite,
            ..situation("v1.3.9", "v1.4.0")
        };
        assert_eq!(decide(&overwrite, None), Decision::Promote);
        let pinned = ImageSituation {
            pinned: true,
            ..situation("v1.3.9", "v1.4.0")
        };
        assert_eq!(decide(&pinned, None), Decision::Promote);
    }

    #[test]
    fn the_policys_own_commit_or_a_tag_that_never_landed_holds_nothing() {
        let s = situation("v1.3.9", "v1.4.0");
        // A status that lags: the policy's own older commit set v1.3.9.
        let own = [change(OURS, true, "v1.3.9")];
        assert!(history_complete(&own, "v1.4.0"));
        assert_eq!(decide(&s, Some(&own)), Decision::Promote);
        // v1.4.0 was proposed by a pull request closed unmerged: the history never shows it.
        let never = [
            change(REVERT, false, "v1.3.9"),
            change(OURS, true, "v1.3.8"),
        ];
        assert_eq!(decide(&s, Some(&never)), Decision::Promote);
        let appeared = [change(REVERT, false, "v1.3.9"), change(OURS, false, "")];
        assert!(history_complete(&appeared, "v1.4.0"));
        assert_eq!(decide(&s, Some(&appeared)), Decision::Promote);
    }

    #[test]
    fn a_second_hand_edit_and_a_squash_merge_are_followed_back() {
        let s = situation("v1.3.8", "v1.4.0");
        // Ours (merged by the forge's squash, so not ours by identity) → revert → hand edit.
        let history = [
            change("e0", false, "v1.3.8"),
            change(REVERT, false, "v1.3.9"),
            change("5a", false, "v1.4.0"),
        ];
        assert!(!history_complete(&history[..2], "v1.4.0"));
        assert!(history_complete(&history, "v1.4.0"));
        let Decision::Hold(h) = decide(&s, Some(&history)) else {
            panic!("held");
        };
        assert_eq!((h.commit.as_str(), h.value.as_str()), ("e0", "v1.3.8"));
    }

    #[test]
    fn a_history_longer_than_the_limit_by_others_holds() {
        let s = situation("v1.3.0", "v1.4.0");
        // HISTORY_LIMIT changes by others, none of them reaching the promoted tag.
        let history: Vec<GitChange> = (0..HISTORY_LIMIT)
            .map(|i| change(&format!("e{i}"), false, &format!("v1.3.{i}")))
            .collect();
        assert!(!history_complete(&history, "v1.4.0"));
        let Decision::Hold(h) = decide(&s, Some(&history)) else {
            panic!("held: unsure is never a reason to write");
        };
        assert_eq!(h.commit, "e0");
        // One short of the limit and incomplete: still nothing to hold to.
        assert_eq!(
            decide(&s, Some(&history[..HISTORY_LIMIT - 1])),
            Decision::Promote
        );
    }

    fn promotion(tags: &[(&str, &str)], pr: Option<&str>) -> Promotion {
        Promotion {
            tags: tags
                .iter()
                .map(|(n, t)| (n.to_string(), t.to_string()))
                .collect::<BTreeMap<_, _>>(),
            commit: Some("c".into()),
            pull_request: pr.map(str::to_string),
            at: Time(jiff::Timestamp::from_second(0).unwrap()),
        }
    }

    #[test]
    fn what_was_promoted_leaves_out_the_open_pull_request() {
        let status = PromotionPolicyStatus {
            pull_request: Some(PullRequestRef {
                url: "https://forge/pull/4".into(),
                number: 4,
                branch: "imagewatch/promote-team-prd".into(),
            }),
            last_promotions: vec![
                promotion(&[("my-api", "v1.4.2")], Some("https://forge/pull/4")),
                promotion(&[("my-api", "v1.4.1")], Some("https://forge/pull/4")),
                promotion(&[("worker", "v9")], Some("https://forge/pull/3")),
                promotion(&[("my-api", "v1.4.0")], Some("https://forge/pull/3")),
            ],
            held: vec![held_by_revert()],
            ..Default::default()
        };
        let promoted = Promoted::of(Some(&status));
        assert_eq!(promoted.landed("my-api"), Some("v1.4.0"));
        assert_eq!(promoted.proposed("my-api"), Some("v1.4.2"));
        assert_eq!(promoted.landed("worker"), Some("v9"));
        assert_eq!(promoted.held("my-api"), Some(&held_by_revert()));
        let closed = PromotionPolicyStatus {
            pull_request: None,
            ..status
        };
        assert_eq!(Promoted::of(Some(&closed)).landed("my-api"), Some("v1.4.2"));
        assert_eq!(Promoted::of(Some(&closed)).proposed("my-api"), None);
        assert_eq!(Promoted::of(None).landed("my-api"), None);
    }

    #[test]
    fn checks_read_the_place_that_differs_and_per_image() {
        let text =
            "kustomize:\n  images:\n  - r.io/prd/my-api:v1.3.9\n  - r.io/prd/worker:v1.4.0\n";
        let target = inventory(&[(PRD, text)], "prd");
        let candidate = build_candidate(CandidateInput {
            sources: &[
                SourceImage::parse("r.io/prd/my-api:v1.4.0", "stg").unwrap(),
                SourceImage::parse("r.io/prd/worker:v1.4.1", "stg").unwrap(),
            ],
            rewrite: &[],
            align: None,
            pin: None,
            target: &target,
            target_path: "prd",
        })
        .unwrap();
        let status = PromotionPolicyStatus {
            last_promotions: vec![promotion(
                &[("my-api", "v1.4.0"), ("worker", "v1.4.0")],
                None,
            )],
            ..Default::default()
        };
        let checks = checks(
            &candidate,
            &target,
            Promoted::of(Some(&status)),
            OnGitChange::HoldUntilNewer,
            None,
        );
        assert_eq!(checks.len(), 2);
        assert_eq!(checks[0].site.file, PRD);
        assert_eq!(
            (checks[0].situation.current, checks[0].situation.desired),
            ("v1.3.9", "v1.4.0")
        );
        assert_eq!(decide(&checks[0].situation, None), Decision::ReadHistory);
        // worker: Git holds what was promoted; v1.4.1 goes.
        assert_eq!(decide(&checks[1].situation, None), Decision::Promote);
        assert_eq!(
            tag_in(PRD, text, "prd", "my-api").as_deref(),
            Some("v1.3.9")
        );
        assert_eq!(tag_in(PRD, "kustomize: {}\n", "prd", "my-api"), None);

        // Holding my-api leaves worker proposed.
        let held = candidate.with_holds(vec![held_by_revert()]);
        let names: Vec<&str> = held.changes().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["worker"]);
        assert!(!held.is_current());
    }

    #[test]
    fn the_message_names_image_commit_author_and_tags() {
        assert_eq!(
            message(&held_by_revert(), OnGitChange::HoldUntilNewer, "prd"),
            "my-api: commit badc0de00000 by Jane Doe <jane@example.com> set v1.3.9 over v1.4.0, \
             which the policy promoted; not proposed again: promotions resume when the source \
             offers a tag other than v1.4.0"
        );
    }
}
