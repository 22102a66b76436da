//! The select step: the tag a watch writes. Its own rules' choice or its pin, its group's
//! tag (the newest every member has, see `group.rs`), and with `spec.verify` or
//! `spec.tags.platforms` the newest tag whose signature verifies and whose image provides
//! every wanted platform; then the image reference to write and `status.latest`. Reads
//! [`Prepared`] scans and the watch store (for group members); hands on the tag, its digest
//! and a refused tag to the write, and the other members' write intents of a group.

use std::sync::Arc;

use imagewatch_crd::{DigestMode, ImageWatch, LatestImage};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{ResourceExt, core::DeserializeGuard};

use super::dereference::{DereferenceContext, VerifyKeys};
use super::scan::{Prepared, ScanContext, prepare};
use super::write::write_request;
use crate::controllers::Context;
use crate::controllers::ReconcileError;
use crate::error::{GroupWait, InternalError, NoTag};
use crate::policy;
use crate::writer::WriteRequest;

/// Candidate tags checked for a verified signature per reconcile, best first.
const VERIFY_CANDIDATES: usize = 5;
/// Candidate tags checked for `spec.tags.platforms` per reconcile, best first (without
/// `spec.verify`). Each new digest costs a manifest request (and a config blob for a
/// single image); known digests cost nothing.
const PLATFORM_CANDIDATES: usize = 5;

/// How `spec.verify` takes part in choosing the tag to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VerifyMode {
    /// No verification: the rules' (or the pin's, or the group's) tag.
    Off,
    /// The newest candidate whose signature verifies; newer ones are refused.
    NewestVerified,
    /// Exactly the pinned or the group's tag, only if its signature verifies.
    ThisTag,
}

/// The way a watch verifies (pure): a pin or a group's tag is not traded for an older
/// verified one (that would be another tag than the one asked for, or split the group), so
/// it is written only if it verifies; otherwise the newest verified candidate is chosen. The
/// same holds for a pattern's members, each in its own repository (they have no group).
fn verify_mode(verify: bool, pinned: bool, grouped: bool) -> VerifyMode {
    match (verify, pinned || grouped) {
        (false, _) => VerifyMode::Off,
        (true, false) => VerifyMode::NewestVerified,
        (true, true) => VerifyMode::ThisTag,
    }
}

/// What choosing a group's tag reads: the watch cache (the group's other members), and what
/// dereferencing and scanning those members reads. The choice of a tag itself
/// ([`choose`]) makes only the scan's lookups.
#[derive(Clone, Copy)]
pub(super) struct SelectContext<'a> {
    pub(super) store: &'a kube::runtime::reflector::Store<DeserializeGuard<ImageWatch>>,
    pub(super) dereference: DereferenceContext<'a>,
    pub(super) scan: ScanContext<'a>,
}

impl<'a> SelectContext<'a> {
    /// The select step's view of the shared services.
    pub(super) fn of(ctx: &'a Context) -> Self {
        SelectContext {
            store: &ctx.store,
            dereference: DereferenceContext::of(ctx),
            scan: ScanContext::of(ctx),
        }
    }
}

/// The tag a watch writes, from [`choose`].
pub(super) struct Choice {
    /// The tag.
    pub(super) tag: String,
    /// Its digest, when it was looked up (needed to pin or follow it, or to check it).
    pub(super) digest: Option<String>,
    /// The better tags refused (signature, platforms), best first.
    pub(super) refused: Vec<crate::signature::Refused>,
}

/// What a group decided for one reconcile.
pub(super) struct GroupChoice {
    /// The tag every member runs.
    pub(super) tag: String,
    /// Write intents for the other members (same tag).
    pub(super) others: Vec<WriteRequest>,
    /// Who lacks a newer tag, when some member has one.
    pub(super) waiting: Option<String>,
}

/// The group's tag: the best tag every member has (see `group::decide`), with the other
/// members' write intents for it.
pub(super) async fn group_choice(
    me: &Prepared<'_>,
    group: &str,
    ctx: &SelectContext<'_>,
) -> Result<GroupChoice, ReconcileError> {
    let peers: Vec<Arc<DeserializeGuard<ImageWatch>>> = ctx.store.state();
    let mut others: Vec<&ImageWatch> = peers
        .iter()
        .filter_map(|g| g.0.as_ref().ok())
        .filter(|w| {
            w.namespace().as_deref() == Some(me.rules.namespace.as_str())
                && w.spec.group.as_deref() == Some(group)
                && w.name_any() != me.watch.name_any()
                && w.metadata.deletion_timestamp.is_none()
        })
        .collect();
    others.sort_by_key(|w| w.name_any());
    let mut prepared = Vec::new();
    for other in &others {
        match prepare(other, &ctx.dereference, &ctx.scan).await {
            Ok(p) => prepared.push(p),
            Err(e) => {
                return Err(ReconcileError::WaitingForGroup(GroupWait::unusable(
                    group,
                    other.name_any(),
                    e,
                )));
            }
        }
    }
    let names: Vec<String> = std::iter::once(me)
        .chain(prepared.iter())
        .map(|p| p.watch.name_any())
        .collect();
    let members: Vec<imagewatch_engine::group::Member<'_>> = std::iter::once(me)
        .chain(prepared.iter())
        .zip(&names)
        .map(|(p, name)| imagewatch_engine::group::Member {
            name,
            policy: &p.rules.policy,
            tags: &p.scan.tags,
        })
        .collect();
    let decision = imagewatch_engine::group::decide(&members);
    let Some(tag) = decision.tag.clone() else {
        return Err(ReconcileError::WaitingForGroup(GroupWait::NoCommonTag {
            group: group.to_string(),
            decision,
        }));
    };
    let waiting = (!decision.waiting_for.is_empty())
        .then(|| imagewatch_engine::group::waiting_message(group, &decision));
    let mut requests = Vec::new();
    for p in &prepared {
        let digest = p.confirmed_digest(&ctx.scan, &tag).await.map_err(|e| {
            ReconcileError::WaitingForGroup(GroupWait::member(group, p.watch.name_any(), e))
        })?;
        // A member's own spec.tags.platforms holds for the tag written for it here too.
        if let Some(refused) = p.platform_refusal(&ctx.scan, &tag, &digest).await? {
            return Err(ReconcileError::WaitingForGroup(GroupWait::member(
                group,
                p.watch.name_any(),
                ReconcileError::Refused(Box::new(refused)),
            )));
        }
        requests.push(
            write_request(
                p,
                &ctx.dereference,
                image_for(p, &tag, Some(&digest))?,
                None,
            )
            .await?,
        );
    }
    Ok(GroupChoice {
        tag,
        others: requests,
        waiting,
    })
}

/// The tag the watch's own rules (or its pin) choose.
fn own_choice(me: &Prepared<'_>) -> Result<String, ReconcileError> {
    let spec = &me.watch.spec;
    if let Some(pin) = spec.pin.as_deref().filter(|p| !p.is_empty()) {
        return Ok(pin.to_string());
    }
    let tags = spec.tags.clone().unwrap_or_default();
    let policy = &me.rules.policy;
    policy
        .select(&me.scan.tags)
        .map(|t| t.tag.clone())
        .ok_or_else(|| {
            let pattern = tags.pattern.as_deref().unwrap_or("*");
            let matching = me
                .scan
                .tags
                .iter()
                .filter(|t| policy.matches(&t.tag))
                .count();
            ReconcileError::NoMatchingTags(if matching == 0 {
                NoTag::none_matches(&me.image, me.scan.listed, pattern)
            } else {
                NoTag::unorderable(&me.image, matching, pattern, me.rules.order)
            })
        })
}

/// The tag to write, its digest and the newest better tag refused (with `spec.verify`
/// for its signature, see [`verify_mode`]; with `spec.tags.platforms` for a missing
/// platform). `group_tag` is what the watch's group chose.
pub(super) async fn choose(
    me: &Prepared<'_>,
    ctx: &ScanContext<'_>,
    verify: Option<&VerifyKeys>,
    group_tag: Option<&str>,
) -> Result<Choice, ReconcileError> {
    let pinned = me.watch.spec.pin.as_deref().is_some_and(|p| !p.is_empty());
    let mode = verify_mode(verify.is_some(), pinned, group_tag.is_some());
    let platforms = !me.rules.platforms.is_empty();
    if !pinned && group_tag.is_none() && (mode == VerifyMode::NewestVerified || platforms) {
        let keys = verify.filter(|_| mode == VerifyMode::NewestVerified);
        let (tag, digest, refused) = qualified_choice(me, ctx, keys).await?;
        return Ok(Choice {
            tag,
            digest: Some(digest),
            refused,
        });
    }
    let tag = match group_tag {
        Some(tag) => tag.to_string(),
        None => own_choice(me)?,
    };
    if mode == VerifyMode::Off && !platforms {
        // The watch's own choice needs a manifest request only where a digest is written
        // or the listing does not hold it; a group's tag is confirmed in every member.
        let digest = match group_tag {
            Some(_) => Some(me.confirmed_digest(ctx, &tag).await?),
            None => me.digest_to_write(ctx, &tag).await?,
        };
        return Ok(Choice {
            tag,
            digest,
            refused: Vec::new(),
        });
    }
    let digest = me.confirmed_digest(ctx, &tag).await?;
    // A pin or a group's tag is not traded for an older one: it qualifies or nothing is
    // written.
    if let Some(refused) = me.platform_refusal(ctx, &tag, &digest).await? {
        return Err(ReconcileError::Refused(Box::new(refused)));
    }
    if let (VerifyMode::ThisTag, Some(keys)) = (mode, verify) {
        let verdict = me.verdict(ctx, keys, &digest).await?;
        let decision = crate::signature::decide(&[(tag.clone(), digest.clone(), verdict)]);
        if let Some(first) = decision.refused.into_iter().next() {
            return Err(ReconcileError::Refused(Box::new(first)));
        }
    }
    Ok(Choice {
        tag,
        digest: Some(digest),
        refused: Vec::new(),
    })
}

/// With `spec.verify` (`keys`) or `spec.tags.platforms`: the best candidate that
/// qualifies, its digest, and the better candidates refused, best first. Candidates are checked
/// best first and the first that qualifies ends the search: its platforms (a manifest,
/// and for a single image its config, once per digest), then its signature.
async fn qualified_choice(
    me: &Prepared<'_>,
    ctx: &ScanContext<'_>,
    keys: Option<&VerifyKeys>,
) -> Result<(String, String, Vec<crate::signature::Refused>), ReconcileError> {
    let limit = if keys.is_some() {
        VERIFY_CANDIDATES
    } else {
        PLATFORM_CANDIDATES
    };
    let ranked = me.rules.policy.ranked(&me.scan.tags, limit);
    if ranked.is_empty() {
        own_choice(me)?;
    }
    let mut refused_above = Vec::new();
    for candidate in &ranked {
        let tag = &candidate.tag;
        let Some(digest) = me.digest(ctx, tag).await? else {
            continue;
        };
        if let Some(refused) = me.platform_refusal(ctx, tag, &digest).await? {
            refused_above.push(refused);
            continue;
        }
        if let Some(keys) = keys {
            let verdict = me.verdict(ctx, keys, &digest).await?;
            let decision = crate::signature::decide(&[(tag.clone(), digest.clone(), verdict)]);
            if let Some(refused) = decision.refused.into_iter().next() {
                refused_above.push(refused);
                continue;
            }
        }
        return Ok((tag.clone(), digest, refused_above));
    }
    match refused_above.into_iter().next() {
        Some(refused) => Err(ReconcileError::Refused(Box::new(refused))),
        None => Err(ReconcileError::NoMatchingTags(NoTag::NoCandidateManifest {
            image: me.image.clone(),
        })),
    }
}

/// The tags ranking above `chosen` (every ranked tag without one) and why each was not
/// chosen: a tag rule, or one of `refused`, the pin, the group (pure).
pub(super) fn considered(
    me: &Prepared<'_>,
    chosen: Option<&str>,
    refused: &[crate::signature::Refused],
    group: Option<&str>,
) -> imagewatch_engine::considered::Considered {
    let pin = me.watch.spec.pin.as_deref().filter(|p| !p.is_empty());
    let chosen = chosen
        .or(pin)
        .map(str::to_owned)
        .or_else(|| me.rules.policy.select(&me.scan.tags).map(|t| t.tag.clone()));
    imagewatch_engine::considered::considered(
        &me.rules.policy,
        &me.scan.tags,
        chosen.as_deref(),
        imagewatch_engine::considered::Besides {
            refused,
            pin,
            group,
        },
    )
}

/// The image reference to write for `tag` (`digest` is required to pin or follow it).
pub(super) fn image_for(
    me: &Prepared<'_>,
    tag: &str,
    digest: Option<&str>,
) -> Result<String, ReconcileError> {
    match (me.watch.spec.digest.unwrap_or_default(), digest) {
        (DigestMode::Tag, _) => Ok(format!("{}:{}", me.image, tag)),
        (DigestMode::Pin | DigestMode::Follow, Some(digest)) => {
            Ok(format!("{}:{}@{}", me.image, tag, digest))
        }
        (DigestMode::Pin | DigestMode::Follow, None) => {
            Err(ReconcileError::Internal(InternalError::NoDigest {
                image: me.image.clone(),
                tag: tag.to_string(),
            }))
        }
    }
}

/// `status.latest` for `tag`: under `Newest`, when the tag appeared and how that is
/// known; otherwise the time the registry lists, if any.
pub(super) fn latest(
    me: &Prepared<'_>,
    ctx: &ScanContext<'_>,
    tag: &str,
    digest: Option<&str>,
) -> LatestImage {
    let listed = me
        .scan
        .tags
        .iter()
        .find(|t| t.tag == tag)
        .and_then(|t| t.pushed_at);
    let appeared = (me.rules.order == policy::Order::Newest)
        .then(|| ctx.appearances.get(&me.scan_key, tag))
        .flatten();
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

#[cfg(test)]
mod tests {
    use super::{VerifyMode, verify_mode};

    #[test]
    fn a_pin_or_a_group_tag_is_verified_as_it_is_otherwise_the_newest_verified_wins() {
        assert_eq!(verify_mode(false, false, false), VerifyMode::Off);
        assert_eq!(verify_mode(false, true, true), VerifyMode::Off);
        // A watch of one repository and every member of a pattern (never grouped).
        assert_eq!(verify_mode(true, false, false), VerifyMode::NewestVerified);
        assert_eq!(verify_mode(true, true, false), VerifyMode::ThisTag);
        assert_eq!(verify_mode(true, false, true), VerifyMode::ThisTag);
        assert_eq!(verify_mode(true, true, true), VerifyMode::ThisTag);
    }
}
