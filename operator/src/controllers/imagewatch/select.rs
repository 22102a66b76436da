//! The select step (pure): the tag a watch writes, from what the scan found — its own
//! rules' choice or its pin, its group's tag (the newest every member has, see `group.rs`),
//! and with `spec.verify` or `spec.tags.platforms` the newest tag whose signature verifies
//! and whose image provides every wanted platform (the engine's `choice::choose`); then
//! the image reference to write, for the watch and its group's other members, the tags it
//! considered and `status.latest`. Reads [`RepoScan`] and [`Lookups`]; hands on a
//! [`Selection`] to the write step.

use imagewatch_crd::{DigestMode, ImageWatch, LatestImage};
use imagewatch_engine::choice::{self, NoChoice};
use imagewatch_engine::considered::Considered;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::dereference::Rules;
use super::scan::{Lookups, RepoScan};
use crate::controllers::ReconcileError;
use crate::error::{GroupWait, InternalError, NoTag};
use crate::policy;

/// The tag a watch (or one member of a pattern) writes (step 4).
pub(super) struct Selection {
    /// The tag.
    pub(super) tag: String,
    /// The better tags refused (signature, platforms), best first.
    pub(super) refused: Vec<crate::signature::Refused>,
    /// The image reference written.
    pub(super) image: String,
    /// `status.latest`.
    pub(super) latest: LatestImage,
    /// With a group: who lacks a newer tag, when some member has one.
    pub(super) waiting: Option<String>,
    /// With a group: the image written for each other member, in the scan's order.
    pub(super) others: Vec<String>,
}

/// Step 4: the tag `watch` writes to `own`, from what the scan looked up.
pub(super) fn select(
    watch: &ImageWatch,
    rules: &Rules,
    own: &RepoScan,
    lookups: &Lookups,
) -> Result<Selection, ReconcileError> {
    let (mut waiting, mut others) = (None, Vec::new());
    if let Some(group) = &lookups.group {
        let Some(tag) = group.decision.tag.as_deref() else {
            return Err(ReconcileError::WaitingForGroup(GroupWait::NoCommonTag {
                group: group.name.clone(),
                decision: group.decision.clone(),
            }));
        };
        waiting = (!group.decision.waiting_for.is_empty())
            .then(|| imagewatch_engine::group::waiting_message(&group.name, &group.decision));
        for (member, scan, digest) in &group.members {
            others.push(image_for(&member.watch, &scan.image, tag, Some(digest))?);
        }
    }
    let chosen = choice::choose(&lookups.plan, &lookups.looked).map_err(|e| match e {
        NoChoice::NoTag => no_tag(watch, rules, own),
        NoChoice::Missing(tag) => {
            ReconcileError::tag_not_found(watch.spec.pin.as_deref(), &own.image, &tag)
        }
        NoChoice::Refused(refused) => ReconcileError::Refused(refused),
        NoChoice::NoManifest => ReconcileError::NoMatchingTags(NoTag::NoCandidateManifest {
            image: own.image.clone(),
        }),
    })?;
    Ok(Selection {
        image: image_for(watch, &own.image, &chosen.tag, chosen.digest.as_deref())?,
        latest: latest(rules, own, lookups, &chosen.tag, chosen.digest.as_deref()),
        tag: chosen.tag,
        refused: chosen.refused,
        waiting,
        others,
    })
}

/// Why the watch's own rules choose no tag.
fn no_tag(watch: &ImageWatch, rules: &Rules, me: &RepoScan) -> ReconcileError {
    let tags = watch.spec.tags.clone().unwrap_or_default();
    let pattern = tags.pattern.as_deref().unwrap_or("*");
    let policy = &rules.policy;
    let matching = me
        .scan
        .tags
        .iter()
        .filter(|t| policy.matches(&t.tag))
        .count();
    ReconcileError::NoMatchingTags(if matching == 0 {
        NoTag::none_matches(&me.image, me.scan.listed, pattern)
    } else {
        NoTag::unorderable(&me.image, matching, pattern, rules.order)
    })
}

/// The tags ranking above `chosen` (every ranked tag without one) and why each was not
/// chosen: a tag rule, or one of `refused`, the pin, the group.
pub(super) fn considered(
    watch: &ImageWatch,
    rules: &Rules,
    me: &RepoScan,
    chosen: Option<&Selection>,
) -> Considered {
    let pin = watch.spec.pin.as_deref().filter(|p| !p.is_empty());
    let (tag, refused, group) = match chosen {
        Some(s) => (
            Some(s.tag.as_str()),
            &s.refused[..],
            watch.spec.group.as_deref(),
        ),
        None => (None, &[][..], None),
    };
    let chosen = tag
        .or(pin)
        .map(str::to_owned)
        .or_else(|| rules.policy.select(&me.scan.tags).map(|t| t.tag.clone()));
    imagewatch_engine::considered::considered(
        &rules.policy,
        &me.scan.tags,
        chosen.as_deref(),
        imagewatch_engine::considered::Besides {
            refused,
            pin,
            group,
        },
    )
}

/// The image reference to write for `tag` of `image` (`digest` is required to pin or
/// follow it).
fn image_for(
    watch: &ImageWatch,
    image: &str,
    tag: &str,
    digest: Option<&str>,
) -> Result<String, ReconcileError> {
    match (watch.spec.digest.unwrap_or_default(), digest) {
        (DigestMode::Tag, _) => Ok(format!("{image}:{tag}")),
        (DigestMode::Pin | DigestMode::Follow, Some(digest)) => {
            Ok(format!("{image}:{tag}@{digest}"))
        }
        (DigestMode::Pin | DigestMode::Follow, None) => {
            Err(ReconcileError::Internal(InternalError::NoDigest {
                image: image.to_string(),
                tag: tag.to_string(),
            }))
        }
    }
}

/// `status.latest` for `tag`: under `Newest`, when the tag appeared and how that is
/// known; otherwise the time the registry lists, if any.
fn latest(
    rules: &Rules,
    me: &RepoScan,
    lookups: &Lookups,
    tag: &str,
    digest: Option<&str>,
) -> LatestImage {
    let listed = me
        .scan
        .tags
        .iter()
        .find(|t| t.tag == tag)
        .and_then(|t| t.pushed_at);
    let appeared = (rules.order == policy::Order::Newest)
        .then(|| lookups.appeared.iter().find(|(t, _)| t == tag))
        .flatten()
        .map(|(_, a)| a);
    match appeared {
        Some(appeared) => LatestImage {
            tag: tag.to_owned(),
            digest: digest.map(str::to_owned),
            pushed_at: None,
            appeared_at: appeared.at.map(Time),
            appeared_from: Some(appeared.source.as_str().to_owned()),
        },
        None => LatestImage {
            tag: tag.to_owned(),
            digest: digest.map(str::to_owned),
            pushed_at: listed.map(Time),
            appeared_at: None,
            appeared_from: None,
        },
    }
}
