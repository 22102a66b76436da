//! The tag an ImageWatch writes, chosen from what was looked up (pure). The scan step asks
//! [`plan`] which tags to look up — the best candidates with `spec.verify` or
//! `spec.tags.platforms`, else exactly the rules', the pin's or the group's tag — and
//! records what it found for each ([`Looked`]: its digest, a missing platform, the
//! signature verdict); the select step hands those to [`choose`].

use crate::policy::{TagInfo, TagPolicy};
use crate::refused::{Refusal, Refused};
use crate::signature::Verdict;

/// Candidate tags looked up per reconcile, best first, with `spec.verify` or
/// `spec.tags.platforms`. Each new digest costs a manifest request (and a config blob for a
/// single image, and the signature's requests); known digests cost nothing.
pub const CANDIDATES: usize = 5;

/// How `spec.verify` takes part in choosing the tag to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyMode {
    /// No verification: the rules' (or the pin's, or the group's) tag.
    Off,
    /// The newest candidate whose signature verifies; newer ones are refused.
    NewestVerified,
    /// Exactly the pinned or the group's tag, only if its signature verifies.
    ThisTag,
}

/// The way a watch verifies: a pin or a group's tag is not traded for an older verified one
/// (that would be another tag than the one asked for, or split the group), so it is written
/// only if it verifies; otherwise the newest verified candidate is chosen. The same holds
/// for a pattern's members, each in its own repository (they have no group).
pub fn verify_mode(verify: bool, pinned: bool, grouped: bool) -> VerifyMode {
    match (verify, pinned || grouped) {
        (false, _) => VerifyMode::Off,
        (true, false) => VerifyMode::NewestVerified,
        (true, true) => VerifyMode::ThisTag,
    }
}

/// What a watch asks of the choice.
pub struct Ask<'a> {
    pub policy: &'a TagPolicy,
    /// The repository's listing.
    pub tags: &'a [TagInfo],
    /// `spec.pin`, when set.
    pub pin: Option<&'a str>,
    /// The tag the watch's group chose, when it has one.
    pub group_tag: Option<&'a str>,
    /// `spec.verify` is set.
    pub verify: bool,
    /// `spec.tags.platforms` is set.
    pub platforms: bool,
    /// `spec.digest` is `Tag`: the image is written without a digest.
    pub tag_only: bool,
}

/// Which tags to look up, and what to check on each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The rules choose no tag: nothing to look up.
    NoTag,
    /// These candidates, best first, until one qualifies.
    Candidates(Vec<String>),
    /// Exactly this tag. `confirm`: its digest is looked up, and it must exist; otherwise
    /// the listing's word is enough (an `image:tag` write of a listed tag).
    One { tag: String, confirm: bool },
}

/// The checks a looked-up digest gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Checks {
    /// Its image provides every wanted platform.
    pub platforms: bool,
    /// Its signature verifies.
    pub signature: bool,
}

/// What to look up for `ask`.
pub fn plan(ask: &Ask<'_>) -> (Plan, Checks) {
    let pinned = ask.pin.is_some();
    let mode = verify_mode(ask.verify, pinned, ask.group_tag.is_some());
    if !pinned && ask.group_tag.is_none() && (mode == VerifyMode::NewestVerified || ask.platforms) {
        let ranked = ask.policy.ranked(ask.tags, CANDIDATES);
        let plan = if ranked.is_empty() {
            Plan::NoTag
        } else {
            Plan::Candidates(ranked.into_iter().map(|t| t.tag).collect())
        };
        let checks = Checks {
            platforms: ask.platforms,
            signature: mode == VerifyMode::NewestVerified,
        };
        return (plan, checks);
    }
    let tag = match ask.group_tag.or(ask.pin) {
        Some(tag) => tag.to_owned(),
        None => match ask.policy.select(ask.tags) {
            Some(t) => t.tag.clone(),
            None => return (Plan::NoTag, Checks::default()),
        },
    };
    if mode == VerifyMode::Off && !ask.platforms {
        // The watch's own choice needs a manifest request only where a digest is written
        // or the listing does not hold it; a group's tag is confirmed in every member.
        let listed = ask.tags.iter().any(|t| t.tag == tag);
        let confirm = ask.group_tag.is_some() || !(ask.tag_only && listed);
        return (Plan::One { tag, confirm }, Checks::default());
    }
    let checks = Checks {
        platforms: ask.platforms,
        signature: mode == VerifyMode::ThisTag,
    };
    (Plan::One { tag, confirm: true }, checks)
}

/// What was looked up for one tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Looked {
    pub tag: String,
    /// Its digest; `None` when its manifest does not exist (or, for a listed `image:tag`
    /// write, when the listing carried none).
    pub digest: Option<String>,
    /// With `spec.tags.platforms`: refused for a missing platform.
    pub platforms: Option<Refused>,
    /// With `spec.verify`: the verdict on its signature.
    pub verdict: Option<Verdict>,
}

impl Looked {
    /// Why this tag may not be written, if it may not: a missing platform, else a
    /// signature that does not verify.
    pub fn refusal(&self) -> Option<Refused> {
        if let Some(refused) = &self.platforms {
            return Some(refused.clone());
        }
        match (&self.verdict, &self.digest) {
            (Some(Verdict::Verified { .. }) | None, _) | (_, None) => None,
            (Some(other), Some(digest)) => Some(Refused {
                tag: self.tag.clone(),
                digest: digest.clone(),
                why: Refusal::Signature(other.clone()),
            }),
        }
    }

    /// Whether this tag may be written: it exists and nothing refuses it.
    pub fn qualifies(&self) -> bool {
        self.digest.is_some() && self.refusal().is_none()
    }
}

/// The tag to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    pub tag: String,
    /// Its digest, when it was looked up (needed to pin or follow it, or to check it).
    pub digest: Option<String>,
    /// The better candidates refused (signature, platforms), best first.
    pub refused: Vec<Refused>,
}

/// Why no tag is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoChoice {
    /// The rules choose no tag.
    NoTag,
    /// The one tag asked for does not exist.
    Missing(String),
    /// Every candidate, or the one tag asked for, was refused; the best refusal.
    Refused(Box<Refused>),
    /// No candidate has a manifest.
    NoManifest,
}

/// The choice, from the plan and what was looked up for it, in the plan's order.
pub fn choose(plan: &Plan, looked: &[Looked]) -> Result<Chosen, NoChoice> {
    match plan {
        Plan::NoTag => Err(NoChoice::NoTag),
        Plan::Candidates(_) => {
            let mut refused = Vec::new();
            for l in looked {
                let Some(digest) = &l.digest else {
                    continue;
                };
                match l.refusal() {
                    Some(r) => refused.push(r),
                    None => {
                        return Ok(Chosen {
                            tag: l.tag.clone(),
                            digest: Some(digest.clone()),
                            refused,
                        });
                    }
                }
            }
            match refused.into_iter().next() {
                Some(first) => Err(NoChoice::Refused(Box::new(first))),
                None => Err(NoChoice::NoManifest),
            }
        }
        Plan::One { tag, confirm } => {
            let digest = looked.first().and_then(|l| l.digest.clone());
            if *confirm && digest.is_none() {
                return Err(NoChoice::Missing(tag.clone()));
            }
            if let Some(refused) = looked.first().and_then(Looked::refusal) {
                return Err(NoChoice::Refused(Box::new(refused)));
            }
            Ok(Chosen {
                tag: tag.clone(),
                digest,
                refused: Vec::new(),
            })
        }
    }
}

#[cfg(test)]
mod tests;
