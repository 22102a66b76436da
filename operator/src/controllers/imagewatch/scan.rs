//! The scan step: what the registry says of everything a watch follows. The tags of each
//! repository, from the repository index (one scan per repository and credentials, shared
//! by every watch that reads it), with when each tag appeared under `Newest`; for a group,
//! its other members' tags and the group's tag (`group.rs`) confirmed in each; then what
//! choosing a tag needs looked up (see the engine's `choice::plan`): digests, which confirm
//! a tag exists before it is written, the platforms of `spec.tags.platforms` and the
//! signature verdicts of `spec.verify`, best candidate first until one qualifies.
//! Reads the registry (or ECR) through the index; hands on [`Scanned`] to the select step.

use std::sync::Arc;

use futures::StreamExt as _;
use imagewatch_crd::{DigestMode, ImageWatch};
use imagewatch_engine::choice::{self, Checks, Looked, Plan};
use imagewatch_engine::group::GroupDecision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::dereference::{
    Dereferenced, GitLocation, Group, GroupMember, Pattern, Rules, Single, VerifyKeys,
};
use super::members::{self, PatternImage};
use crate::controllers::Context;
use crate::controllers::ReconcileError;
use crate::error::{GroupWait, NoTag};
use crate::policy;
use crate::registry::ecr::EcrTagSource;
use crate::registry::{RegistryClient, RepositoryRef, TagSource};
use crate::scan::{
    appearances::{Appearances, Appeared},
    index::{RepositoryIndex, Scan, ScanKey},
};
use crate::signature::fetch::VerdictCache;
use crate::sources::routing::{PendingEvents, Stage};
use crate::telemetry::Metrics;

/// Members of a pattern watch scanned at the same time.
const MEMBER_CONCURRENCY: usize = 8;

/// What the scan step reads: the registry (or ECR) through the shared repository index,
/// when each tag appeared, the cache of signature verdicts, and the metrics signature
/// checks are counted in.
#[derive(Clone, Copy)]
pub(super) struct ScanContext<'a> {
    pub(super) registry: &'a RegistryClient,
    pub(super) ecr: &'a EcrTagSource,
    pub(super) index: &'a RepositoryIndex,
    pub(super) appearances: &'a Appearances,
    pub(super) signatures: &'a VerdictCache,
    pub(super) metrics: &'a Metrics,
    /// The registry events awaiting their commit: a listing is one of their stages.
    pub(super) pending: &'a PendingEvents,
}

impl<'a> ScanContext<'a> {
    /// The scan step's view of the shared services.
    pub(super) fn of(ctx: &'a Context) -> Self {
        ScanContext {
            registry: &ctx.registry,
            ecr: &ctx.ecr,
            index: &ctx.index,
            appearances: &ctx.appearances,
            signatures: &ctx.signatures,
            metrics: &ctx.metrics,
            pending: &ctx.pending,
        }
    }
}

/// One repository's listing, shared through the index.
pub(super) struct RepoScan {
    pub(super) repo: RepositoryRef,
    /// The image written: `spec.image`, or one member of a pattern.
    pub(super) image: String,
    /// Where it is written: `spec.target`, or its expansion for one member of a pattern.
    pub(super) target: imagewatch_crd::Target,
    pub(super) scan: Arc<Scan>,
    pub(super) scan_key: ScanKey,
}

/// What choosing a repository's tag looked up.
pub(super) struct Lookups {
    /// Which tags were to be looked up, and how.
    pub(super) plan: Plan,
    /// What was found for them, in the plan's order (it stops at the first that qualifies).
    pub(super) looked: Vec<Looked>,
    /// Under `Newest`: when each looked-up tag appeared.
    pub(super) appeared: Vec<(String, Appeared)>,
    /// The watch's group, when it has one.
    pub(super) group: Option<GroupScan>,
}

/// A group's tag, and its other members at that tag.
pub(super) struct GroupScan {
    pub(super) name: String,
    pub(super) decision: GroupDecision,
    /// With the group's tag: every other member, with the tag's digest in its repository.
    pub(super) members: Vec<(GroupMember, RepoScan, String)>,
}

/// One member of a pattern, scanned.
pub(super) struct PatternMember {
    pub(super) repository: String,
    pub(super) captures: Vec<String>,
    pub(super) scanned: Result<(RepoScan, Lookups), ReconcileError>,
}

/// What the registry says of everything a watch follows (step 3), with the watch's Git
/// location and rules handed on; `F` is what it follows, scanned ([`SingleScan`] or
/// [`PatternScan`]).
pub(super) struct Scanned<F> {
    pub(super) git: GitLocation,
    pub(super) rules: Arc<Rules>,
    pub(super) followed: F,
}

/// One repository: its listing, and what choosing its tag looked up — or what stopped
/// that (its group, its verify keys, the registry), reported with the tags it listed.
pub(super) struct SingleScan {
    pub(super) own: RepoScan,
    pub(super) lookups: Result<Lookups, ReconcileError>,
}

/// The members of a pattern, each scanned on its own.
pub(super) struct PatternScan {
    pub(super) pattern: PatternImage,
    pub(super) listed: usize,
    pub(super) members: Vec<PatternMember>,
}

/// Step 3 for a watch of one repository: its listing; with a group, the group's tag
/// confirmed in every other member; then what choosing its tag needs looked up.
pub(super) async fn scan_single(
    watch: &ImageWatch,
    found: Dereferenced<Single>,
    ctx: &ScanContext<'_>,
) -> Result<Scanned<SingleScan>, ReconcileError> {
    let Dereferenced {
        git,
        rules,
        followed: Single {
            repo,
            verify,
            group,
        },
    } = found;
    let own = scan_repository(
        watch,
        ctx,
        &rules,
        repo,
        watch.spec.image.clone(),
        watch.spec.target.clone(),
    )
    .await?;
    ctx.pending
        .stage(&own.repo.registry, &own.repo.path, Stage::Listed);
    let lookups = async {
        let group = match group {
            Some(group) => Some(scan_group(watch, &rules, &own, group, ctx).await?),
            None => None,
        };
        // With spec.verify: only a tag whose signature verifies is written (a group with
        // no common tag writes none).
        let common = group
            .as_ref()
            .is_none_or(|(_, decision, _)| decision.tag.is_some());
        let verify = if common { verify? } else { None };
        look_up(watch, (&own, &rules), verify.as_ref(), group, ctx).await
    }
    .await;
    Ok(Scanned {
        git,
        rules,
        followed: SingleScan { own, lookups },
    })
}

/// Step 3 for a pattern watch: every member's repository scanned (bounded concurrency,
/// order kept); a member's failure is its own.
pub(super) async fn scan_pattern(
    watch: &ImageWatch,
    found: Dereferenced<Pattern>,
    ctx: &ScanContext<'_>,
) -> Scanned<PatternScan> {
    let Dereferenced {
        git,
        rules,
        followed:
            Pattern {
                pattern,
                verify,
                listed,
                members,
            },
    } = found;
    let members = futures::stream::iter(members.into_iter().map(|(repository, captures)| {
        scan_member(
            watch,
            &rules,
            verify.as_ref(),
            &pattern,
            repository,
            captures,
            ctx,
        )
    }))
    .buffered(MEMBER_CONCURRENCY)
    .collect()
    .await;
    Scanned {
        git,
        rules,
        followed: PatternScan {
            pattern,
            listed,
            members,
        },
    }
}

/// One member of a pattern: its repository scanned (with `spec.verify`, its tags verified in
/// it); a failure is the member's.
async fn scan_member(
    watch: &ImageWatch,
    rules: &Rules,
    verify: Option<&VerifyKeys>,
    pattern: &PatternImage,
    repository: String,
    captures: Vec<String>,
    ctx: &ScanContext<'_>,
) -> PatternMember {
    let repo = RepositoryRef {
        registry: pattern.registry.clone(),
        path: repository.clone(),
    };
    let target = members::expand_target(&watch.spec.target, &captures);
    let scanned = async {
        let me = scan_repository(
            watch,
            ctx,
            rules,
            repo,
            pattern.member_image(&repository),
            target,
        )
        .await?;
        let lookups = look_up(watch, (&me, rules), verify, None, ctx).await?;
        Ok((me, lookups))
    }
    .await;
    PatternMember {
        repository,
        captures,
        scanned,
    }
}

/// A group's name, its tag, and its other members with their listings.
type ScannedGroup = (String, GroupDecision, Vec<(GroupMember, RepoScan)>);

/// A group's other members scanned, and the group's tag (the best tag every member has,
/// see `group::decide`); a member whose repository cannot be read stops the group.
async fn scan_group(
    watch: &ImageWatch,
    rules: &Rules,
    own: &RepoScan,
    group: Group,
    ctx: &ScanContext<'_>,
) -> Result<ScannedGroup, ReconcileError> {
    let name = group.name;
    let mut scanned = Vec::new();
    for member in group.members? {
        let watch = &member.watch;
        match scan_repository(
            watch,
            ctx,
            &member.rules,
            member.repo.clone(),
            watch.spec.image.clone(),
            watch.spec.target.clone(),
        )
        .await
        {
            Ok(scan) => scanned.push((member, scan)),
            Err(e) => {
                return Err(ReconcileError::WaitingForGroup(GroupWait::MemberUnusable {
                    group: name,
                    member: watch.name_any(),
                    error: Box::new(e),
                }));
            }
        }
    }
    // The watch first, then the others by name.
    let names: Vec<String> = std::iter::once(watch.name_any())
        .chain(scanned.iter().map(|(m, _)| m.watch.name_any()))
        .collect();
    let policies = std::iter::once((&rules.policy, &own.scan.tags))
        .chain(scanned.iter().map(|(m, s)| (&m.rules.policy, &s.scan.tags)));
    let members: Vec<imagewatch_engine::group::Member<'_>> = policies
        .zip(&names)
        .map(|((policy, tags), name)| imagewatch_engine::group::Member { name, policy, tags })
        .collect();
    let decision = imagewatch_engine::group::decide(&members);
    Ok((name, decision, scanned))
}

/// Looks up what choosing the tag of one repository needs (see `choice::plan`): with a
/// group's tag, first that tag in every other member (it must exist, and provide the
/// member's own `spec.tags.platforms`); then the plan's tags in order, each one's digest,
/// its platforms and signature as the plan checks them, until one qualifies.
async fn look_up(
    watch: &ImageWatch,
    (me, rules): (&RepoScan, &Rules),
    verify: Option<&VerifyKeys>,
    group: Option<ScannedGroup>,
    ctx: &ScanContext<'_>,
) -> Result<Lookups, ReconcileError> {
    let group_tag = group.as_ref().map(|(_, decision, _)| decision.tag.clone());
    let spec = &watch.spec;
    let ask = choice::Ask {
        policy: &rules.policy,
        tags: &me.scan.tags,
        pin: spec.pin.as_deref().filter(|p| !p.is_empty()),
        group_tag: group_tag.as_ref().and_then(|t| t.as_deref()),
        verify: verify.is_some(),
        platforms: !rules.platforms.is_empty(),
        tag_only: spec.digest.unwrap_or_default() == DigestMode::Tag,
    };
    // No tag common to the group: nothing to look up (the select step says why).
    let (plan, checks) = match group_tag {
        Some(None) => (Plan::NoTag, Checks::default()),
        _ => choice::plan(&ask),
    };
    let mut asks: Vec<Ask<'_>> = Vec::new();
    let mut members = Vec::new();
    if let (Some((name, _, scanned)), Plan::One { tag, .. }) = (&group, &plan) {
        for (member, scan) in scanned {
            asks.push(Ask {
                me: scan,
                rules: &member.rules,
                tag: tag.clone(),
                confirm: true,
                checks: Checks {
                    platforms: !member.rules.platforms.is_empty(),
                    signature: false,
                },
                of: Some((name, &member.watch)),
            });
        }
    }
    let own_tags: Vec<(String, bool)> = match &plan {
        Plan::NoTag => Vec::new(),
        Plan::Candidates(candidates) => candidates.iter().map(|t| (t.clone(), true)).collect(),
        Plan::One { tag, confirm } => vec![(tag.clone(), *confirm)],
    };
    asks.extend(own_tags.into_iter().map(|(tag, confirm)| Ask {
        me,
        rules,
        tag,
        confirm,
        checks,
        of: None,
    }));
    let mut looked = Vec::new();
    for ask in asks {
        let (of, scan) = (ask.of, ask.me);
        let found = match (look_at(ask, verify, ctx).await, of) {
            (Ok(found), _) => found,
            (Err(e), Some((name, member))) => {
                return Err(ReconcileError::WaitingForGroup(GroupWait::member(
                    name,
                    member.name_any(),
                    e,
                )));
            }
            (Err(e), None) => return Err(e),
        };
        match of {
            // A group member that cannot run the group's tag stops the group.
            Some((name, member)) => {
                let problem = match (&found.digest, found.refusal()) {
                    (None, _) => Some(ReconcileError::tag_not_found(
                        member.spec.pin.as_deref(),
                        &scan.image,
                        &found.tag,
                    )),
                    (Some(_), Some(refused)) => Some(ReconcileError::Refused(Box::new(refused))),
                    _ => None,
                };
                if let Some(problem) = problem {
                    return Err(ReconcileError::WaitingForGroup(GroupWait::member(
                        name,
                        member.name_any(),
                        problem,
                    )));
                }
                members.push(found.digest.unwrap_or_default());
            }
            None => {
                let qualifies = found.qualifies();
                looked.push(found);
                if qualifies {
                    break;
                }
            }
        }
    }
    let appeared = if rules.order == policy::Order::Newest {
        looked
            .iter()
            .filter_map(|l| {
                ctx.appearances
                    .get(&me.scan_key, &l.tag)
                    .map(|a| (l.tag.clone(), a))
            })
            .collect()
    } else {
        Vec::new()
    };
    let group = group.map(|(name, decision, scanned)| GroupScan {
        name,
        decision,
        members: scanned
            .into_iter()
            .zip(members)
            .map(|((member, scan), digest)| (member, scan, digest))
            .collect(),
    });
    Ok(Lookups {
        plan,
        looked,
        appeared,
        group,
    })
}

/// One tag to look up in one repository.
struct Ask<'a> {
    me: &'a RepoScan,
    rules: &'a Rules,
    tag: String,
    /// Its digest is looked up (else the listing's digest, if any, is taken).
    confirm: bool,
    checks: Checks,
    /// A group's other member (the group's name, the member).
    of: Option<(&'a str, &'a ImageWatch)>,
}

/// Looks at one tag: its digest (once per scan; `None` when its manifest does not exist),
/// then its platforms (a manifest, and for a single image its config, once per digest),
/// then its signature (counted in `imagewatch_signature_checks_total`).
async fn look_at(
    ask: Ask<'_>,
    verify: Option<&VerifyKeys>,
    ctx: &ScanContext<'_>,
) -> Result<Looked, ReconcileError> {
    let Ask {
        me,
        rules,
        tag,
        confirm,
        checks,
        ..
    } = ask;
    let (repo, creds) = (&me.repo, &rules.creds);
    // Signatures and manifest bodies are read with the watch's credentials, or for ECR
    // reached through the operator's AWS identity, with the registry token that identity is
    // issued (they are not in the ECR API; the same identity reads them through the
    // registry API).
    let api_creds = match (checks.platforms || checks.signature, rules.use_ecr) {
        (false, _) | (true, false) => creds.clone(),
        (true, true) => ctx.ecr.registry_credentials(&repo.registry).await?,
    };
    let digest = if confirm {
        me.scan
            .digest(&tag, || async {
                if rules.use_ecr {
                    ctx.ecr.digest(repo, &tag, creds).await
                } else {
                    ctx.registry.manifest_digest(repo, &tag, creds).await
                }
            })
            .await?
    } else {
        // The digest the listing carried (ECR), if any, costs nothing.
        me.scan
            .tags
            .iter()
            .find(|t| t.tag == tag)
            .and_then(|t| t.digest.clone())
    };
    let mut found = Looked {
        tag,
        digest,
        platforms: None,
        verdict: None,
    };
    let Some(digest) = found.digest.clone() else {
        return Ok(found);
    };
    // spec.tags.platforms: refused when its image lacks a wanted platform. One manifest
    // request per new digest (and one config blob for a single image), remembered by digest.
    if checks.platforms {
        let Some(provided) = ctx
            .registry
            .image_platforms(repo, &digest, &api_creds)
            .await?
        else {
            return Err(ReconcileError::NoMatchingTags(
                NoTag::DigestWithoutManifest {
                    image: me.image.clone(),
                    tag: found.tag.clone(),
                    digest,
                },
            ));
        };
        let missing = imagewatch_engine::platforms::missing(&rules.platforms, &provided);
        if !missing.is_empty() {
            found.platforms = Some(crate::signature::Refused {
                tag: found.tag.clone(),
                digest,
                why: crate::signature::Refusal::PlatformMissing {
                    missing,
                    provided: provided.to_vec(),
                },
            });
            return Ok(found);
        }
    }
    if let (true, Some(keys)) = (checks.signature, verify) {
        let result = crate::signature::fetch::check(
            ctx.registry,
            ctx.signatures,
            &keys.cache_key,
            repo,
            &digest,
            &api_creds,
            &keys.keys,
        )
        .await;
        ctx.metrics.count_signature_check(
            "ImageWatch",
            result.as_ref().map_or("error", |v| v.outcome()),
        );
        found.verdict = Some(result?);
    }
    Ok(found)
}

/// The repository's shared scan.
async fn scan_repository(
    watch: &ImageWatch,
    ctx: &ScanContext<'_>,
    rules: &Rules,
    repo: RepositoryRef,
    image: String,
    target: imagewatch_crd::Target,
) -> Result<RepoScan, ReconcileError> {
    let scan_key = ScanKey {
        registry: repo.registry.clone(),
        repository: repo.path.clone(),
        credentials: rules.credential_key.clone(),
        // Registries other than ECR do not list push times; Newest needs them looked up.
        with_times: rules.order == policy::Order::Newest && !rules.use_ecr,
    };
    let creds = &rules.creds;
    let newest = rules.order == policy::Order::Newest;
    if newest {
        restore_appearance(watch, ctx, &scan_key);
    }
    let scan = ctx
        .index
        .tags(&scan_key, rules.interval, || async {
            let listed = if rules.use_ecr {
                ctx.ecr.list(&repo, creds).await
            } else if scan_key.with_times {
                ctx.registry
                    .list_tags_with_times(&repo, creds, None)
                    .await
                    .map(|timed| timed.tags)
            } else {
                ctx.registry
                    .list_tags(&repo, creds)
                    .await
                    .map(|tags| tags.into_iter().map(policy::TagInfo::new).collect())
            };
            // Newest orders by when each tag appeared, not by its image's time.
            if newest {
                listed.map(|tags| {
                    ctx.appearances
                        .observe(&scan_key, tags, jiff::Timestamp::now())
                })
            } else {
                listed
            }
        })
        .await
        .map_err(ReconcileError::from)?;
    Ok(RepoScan {
        repo,
        image,
        target,
        scan,
        scan_key,
    })
}

/// Gives the ledger the appearance time of the watch's `status.latest` tag, which a restart
/// would otherwise lose; when that changes the ledger, the repository's scan is made again.
fn restore_appearance(watch: &ImageWatch, ctx: &ScanContext<'_>, key: &ScanKey) {
    let Some(latest) = watch.status.as_ref().and_then(|s| s.latest.as_ref()) else {
        return;
    };
    let Some(Time(at)) = latest.appeared_at.clone() else {
        return;
    };
    if ctx.appearances.restore(key, &latest.tag, at) {
        ctx.index.invalidate(&key.registry, &key.repository);
    }
}
