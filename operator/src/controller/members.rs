//! Pattern watches (pure part): one `ImageWatch` whose image has `*` path segments follows
//! every matching repository of its registry — its *members* — and writes each member's tag
//! into that member's own target, where `$1..$n` stand for what the `*`s matched.
//!
//! ```yaml
//! image: 123456789012.dkr.ecr.ap-northeast-1.amazonaws.com/hoge/*/*/*
//! target:
//!   kustomize: {path: services/$1/$2/$3/overlays/stg}
//! ```
//!
//! The reconcile (`reconcile.rs`) lists the registry's repositories through the index, keeps
//! those [`match_pattern`] accepts, and runs the single-watch steps (scan, select, confirm,
//! write intent) for each one with [`expand_target`]'s target; every intent goes to the
//! writer at once, so they share one commit per repository and branch. This module decides
//! what can be decided without I/O: parsing the pattern, checking the `$n` references,
//! expanding targets, spotting members that would share a target, and turning the members'
//! results into `status.members` and the aggregated `Ready` condition.

use std::collections::HashMap;

use imagewatch_crd::{ImageWatchStatus, Target, conditions::reason, imagewatch::MemberStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::{ReconcileError, status, writer::WriteResult};
use crate::registry::{
    RepositoryRef,
    ecr::{capture_references, expand_captures, match_pattern},
};

/// Members listed in `status.members` (sorted by repository); `memberCount` has the total.
pub const MAX_LISTED_MEMBERS: usize = 200;

/// Members named in the `Ready` message when some are not ready.
const NAMED_IN_MESSAGE: usize = 3;

/// A pattern image split into its registry and repository pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternImage {
    /// Registry host\[:port\] as written in `spec.image` (used to write members' images).
    pub host: String,
    /// Registry host\[:port\], normalised (lower case; Docker Hub's API host).
    pub registry: String,
    /// Repository pattern, e.g. `hoge/*/*/*`.
    pub pattern: String,
}

impl PatternImage {
    /// How many `*` segments the pattern has: the captures `$1..$n` each member provides.
    pub fn wildcards(&self) -> usize {
        self.pattern.split('/').filter(|s| *s == "*").count()
    }

    /// The image of one member, e.g. `registry.example.com/svc/billing/api`.
    pub fn member_image(&self, repository: &str) -> String {
        format!("{}/{repository}", self.host)
    }
}

/// `Ok(None)` for an image without `*`; the pattern for one with `*` path segments; an error
/// message when the `*`s are misplaced (in the host, inside a segment) or the rest is not a
/// valid repository name.
pub fn parse_pattern_image(image: &str) -> Result<Option<PatternImage>, String> {
    if !image.contains('*') {
        return Ok(None);
    }
    let Some((host, path)) = image.split_once('/') else {
        return Err(format!(
            "spec.image {image:?}: a pattern must start with its registry host, e.g. registry.example.com/team/*/api"
        ));
    };
    let looks_like_host = host.contains('.') || host.contains(':') || host == "localhost";
    if host.contains('*') || !looks_like_host {
        return Err(format!(
            "spec.image {image:?}: a pattern must start with its registry host, which holds no '*' (e.g. registry.example.com/team/*/api)"
        ));
    }
    if let Some(segment) = path.split('/').find(|s| s.contains('*') && *s != "*") {
        return Err(format!(
            "spec.image {image:?}: segment {segment:?} mixes '*' with other characters; a '*' stands for one whole path segment"
        ));
    }
    // Validate the rest as a repository name, with each `*` standing in as a valid segment.
    let stand_in: Vec<&str> = path
        .split('/')
        .map(|s| if s == "*" { "x" } else { s })
        .collect();
    let parsed = RepositoryRef::parse(&format!("{host}/{}", stand_in.join("/")))
        .map_err(|e| format!("spec.image: {e}"))?;
    // Docker Hub may have prefixed `library/`; keep it in front of the pattern.
    let stand_in_len = stand_in.join("/").len();
    let extra = parsed
        .path
        .get(..parsed.path.len().saturating_sub(stand_in_len))
        .unwrap_or_default();
    Ok(Some(PatternImage {
        host: host.to_string(),
        registry: parsed.registry,
        pattern: format!("{extra}{path}"),
    }))
}

/// Whether the pattern image `image` matches `registry`/`repository` (an event's
/// repository). False for images that are not patterns.
pub fn pattern_matches(image: &str, registry: &str, repository: &str) -> bool {
    match parse_pattern_image(image) {
        Ok(Some(p)) => {
            p.registry.eq_ignore_ascii_case(registry)
                && match_pattern(&p.pattern, repository).is_some()
        }
        _ => false,
    }
}

/// The target's text fields that `$n` may appear in, by their spec path.
fn target_fields(target: &Target) -> Vec<(&'static str, &str)> {
    let mut fields = Vec::new();
    if let Some(w) = &target.workload {
        fields.push(("spec.target.workload.path", w.path.as_str()));
        fields.push(("spec.target.workload.name", w.name.as_str()));
        fields.push(("spec.target.workload.container", w.container.as_str()));
        if let Some(ns) = &w.namespace {
            fields.push(("spec.target.workload.namespace", ns.as_str()));
        }
    }
    if let Some(k) = &target.kustomize {
        fields.push(("spec.target.kustomize.path", k.path.as_str()));
        if let Some(image) = &k.image {
            fields.push(("spec.target.kustomize.image", image.as_str()));
        }
    }
    if let Some(h) = &target.helm {
        fields.push(("spec.target.helm.file", h.file.as_str()));
        fields.push(("spec.target.helm.tag", h.tag.as_str()));
    }
    if let Some(a) = &target.argocd_source {
        fields.push(("spec.target.argocdSource.path", a.path.as_str()));
        fields.push((
            "spec.target.argocdSource.application",
            a.application.as_str(),
        ));
        if let Some(image) = &a.image {
            fields.push(("spec.target.argocdSource.image", image.as_str()));
        }
    }
    fields
}

/// Checks that every `$n` in the target refers to one of the pattern's `wildcards` captures.
/// The message names the field, the reference and the image's capture count.
pub fn check_references(target: &Target, image: &str, wildcards: usize) -> Result<(), String> {
    for (field, value) in target_fields(target) {
        let references = capture_references(value).map_err(|e| format!("{field}: {e}"))?;
        if let Some(n) = references.into_iter().find(|n| *n > wildcards) {
            return Err(format!(
                "{field} {value:?} refers to ${n}, but spec.image {image:?} has {wildcards} '*' segment{} (${}{})",
                if wildcards == 1 { "" } else { "s" },
                if wildcards == 0 { "none" } else { "1" },
                if wildcards > 1 {
                    format!("..${wildcards}")
                } else {
                    String::new()
                },
            ));
        }
    }
    Ok(())
}

/// The target of one member: every text field with `$1..$n` replaced by its captures.
pub fn expand_target(target: &Target, captures: &[String]) -> Target {
    let x = |s: &str| expand_captures(s, captures);
    let mut out = target.clone();
    if let Some(w) = &mut out.workload {
        w.path = x(&w.path);
        w.name = x(&w.name);
        w.container = x(&w.container);
        w.namespace = w.namespace.as_deref().map(x);
    }
    if let Some(k) = &mut out.kustomize {
        k.path = x(&k.path);
        k.image = k.image.as_deref().map(x);
    }
    if let Some(h) = &mut out.helm {
        h.file = x(&h.file);
        h.tag = x(&h.tag);
    }
    if let Some(a) = &mut out.argocd_source {
        a.path = x(&a.path);
        a.application = x(&a.application);
        a.image = a.image.as_deref().map(x);
    }
    out
}

/// For each member's target key, the index of an earlier member with the same key (two
/// members must never write one place: the second would undo the first).
pub fn shared_targets<K: Eq + std::hash::Hash>(keys: &[K]) -> Vec<Option<usize>> {
    let mut first: HashMap<&K, usize> = HashMap::new();
    let mut out = vec![None; keys.len()];
    for (i, key) in keys.iter().enumerate() {
        match first.get(key) {
            Some(&j) => {
                out[i] = Some(j);
                if out[j].is_none() {
                    out[j] = Some(i);
                }
            }
            None => {
                first.insert(key, i);
            }
        }
    }
    out
}

/// What one reconcile found and did for one member.
#[derive(Debug)]
pub struct MemberResult {
    /// Repository path inside the registry.
    pub repository: String,
    /// What the `*`s matched.
    pub captures: Vec<String>,
    /// The tag chosen for it, when one was.
    pub latest: Option<String>,
    /// With `spec.verify`: the newest better tag of this member refused for its signature,
    /// while an older verified one is written.
    pub refused: Option<crate::signature::Refused>,
    /// The writer's answer, or why the member could not get that far.
    pub outcome: Result<WriteResult, ReconcileError>,
    /// With `spec.git.pullRequest` per member: what was done with its pull request.
    pub pull_request: Option<super::watch_pr::Delivered>,
}

/// What one reconcile of a pattern watch found and did.
#[derive(Debug)]
pub struct PatternOutcome {
    /// `spec.image`.
    pub image: String,
    /// Repositories the registry listed.
    pub listed: usize,
    /// One result per matching repository, sorted by repository.
    pub members: Vec<MemberResult>,
    /// Whether `spec.suspend` made every write a dry run.
    pub suspended: bool,
    /// With `spec.git.pullRequest` and `perMember: false`: the one pull request for all.
    pub pull_request: Option<super::watch_pr::Delivered>,
}

impl PatternOutcome {
    /// Whether a member failed for a reason that may pass by itself (registry, Git), so the
    /// watch should be retried before its interval.
    pub fn has_transient_failure(&self) -> bool {
        self.members
            .iter()
            .any(|m| m.outcome.as_ref().is_err_and(|e| !e.is_stalled()))
    }

    /// Members whose write made a commit.
    pub fn committed(&self) -> impl Iterator<Item = (&MemberResult, &WriteResult)> {
        self.members.iter().filter_map(|m| match &m.outcome {
            Ok(w) if w.commit.is_some() => Some((m, w)),
            _ => None,
        })
    }
}

/// The note of the `Updated` Event of a reconcile that committed for some members: the
/// commit and the first members' changes. `None` when nothing was committed.
pub fn updated_note(outcome: &PatternOutcome) -> Option<String> {
    let committed: Vec<(&MemberResult, &WriteResult)> = outcome.committed().collect();
    let (_, first) = committed.first()?;
    let mut parts: Vec<String> = committed
        .iter()
        .take(NAMED_IN_MESSAGE)
        .map(|(_, w)| format!("{}: {} -> {}", w.file, w.current_before, w.current_after))
        .collect();
    if committed.len() > NAMED_IN_MESSAGE {
        parts.push(format!("and {} more", committed.len() - NAMED_IN_MESSAGE));
    }
    Some(format!(
        "{} {} updated (commit {}): {}",
        committed.len(),
        if committed.len() == 1 {
            "member"
        } else {
            "members"
        },
        short(first.commit.as_deref().unwrap_or_default()),
        parts.join("; ")
    ))
}

/// The tag of an image reference (empty when it has none).
pub fn tag_of(image: &str) -> String {
    crate::manifests::ImageRef::parse(image)
        .ok()
        .and_then(|r| r.tag().map(str::to_string))
        .unwrap_or_default()
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// Every member's status (all of them, sorted by repository), from this reconcile's results
/// and the previous statuses (which keep `commit` stable while Git does not change, and say
/// what Git held when a member cannot be read now).
pub fn member_statuses(previous: &[MemberStatus], outcome: &PatternOutcome) -> Vec<MemberStatus> {
    let before: HashMap<&str, &MemberStatus> = previous
        .iter()
        .map(|m| (m.repository.as_str(), m))
        .collect();
    let mut out: Vec<MemberStatus> = outcome
        .members
        .iter()
        .map(|m| {
            member_status(
                before.get(m.repository.as_str()).copied(),
                m,
                outcome.suspended,
            )
        })
        .collect();
    out.sort_by(|a, b| a.repository.cmp(&b.repository));
    out
}

fn member_status(
    previous: Option<&MemberStatus>,
    member: &MemberResult,
    suspended: bool,
) -> MemberStatus {
    let base = MemberStatus {
        repository: member.repository.clone(),
        captures: member.captures.clone(),
        latest: member.latest.clone(),
        applied: previous.and_then(|p| p.applied.clone()),
        commit: previous.and_then(|p| p.commit.clone()),
        file: previous.and_then(|p| p.file.clone()),
        ready: false,
        reason: String::new(),
        message: None,
        pull_request: match &member.pull_request {
            Some(d) => {
                super::watch_pr::status_of(d, previous.and_then(|p| p.pull_request.as_ref()))
            }
            None => previous.and_then(|p| p.pull_request.clone()),
        },
    };
    let write = match &member.outcome {
        Ok(write) => write,
        Err(e) => {
            return MemberStatus {
                reason: e.reason().to_string(),
                message: Some(e.to_string()),
                ..base
            };
        }
    };
    let applied = tag_of(&write.current_after);
    let same_as_before = previous.is_some_and(|p| p.applied.as_deref() == Some(applied.as_str()));
    let commit = match &write.commit {
        Some(commit) => commit.clone(),
        None => previous
            .filter(|_| same_as_before)
            .and_then(|p| p.commit.clone())
            .unwrap_or_else(|| write.head.clone()),
    };
    let mut status = MemberStatus {
        applied: Some(applied),
        commit: Some(commit),
        file: Some(write.file.clone()),
        ..base
    };
    if suspended {
        status.ready = !write.changed_needed;
        status.reason = reason::SUSPENDED.to_string();
        status.message = Some(if write.changed_needed {
            format!(
                "suspended: {} holds {}, the rules choose {} (not written)",
                write.file, write.current_before, write.desired
            )
        } else {
            format!("suspended: {} holds {}", write.file, write.current_after)
        });
        return status;
    }
    if let Some(refused) = &member.refused {
        // Written what verifies, but a newer tag is held back: not ready, and says why.
        let done = match &write.commit {
            Some(commit) => format!(
                "{}: {} -> {} (commit {}), the newest verified tag",
                write.file,
                write.current_before,
                write.current_after,
                short(commit)
            ),
            None => format!(
                "{} holds {}, the newest verified tag",
                write.file, write.current_after
            ),
        };
        status.reason = refused.reason().to_string();
        status.message = Some(format!("{done}; refused newer {}", refused.message()));
        return status;
    }
    status.ready = true;
    if let Some(commit) = &write.commit {
        status.reason = reason::UPDATED.to_string();
        status.message = Some(format!(
            "{}: {} -> {} (commit {})",
            write.file,
            write.current_before,
            write.current_after,
            short(commit)
        ));
    } else if let Some(p) =
        previous.filter(|p| same_as_before && p.ready && p.reason == reason::UPDATED)
    {
        // Just updated and now simply current: keep saying what the update was, so a poll
        // does not rewrite the status.
        status.reason = p.reason.clone();
        status.message = p.message.clone();
    } else {
        status.reason = reason::UP_TO_DATE.to_string();
        status.message = Some(format!("{} holds {}", write.file, write.current_after));
    }
    status
}

/// The aggregated `Ready` verdict over every member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// `Ready` status.
    pub ready: bool,
    /// `Ready` reason.
    pub reason: &'static str,
    /// `Ready` message.
    pub message: String,
}

/// `True` when every member is up to date (`Updated` if some member's last write is what the
/// members report, else `UpToDate`); `False` with `MembersNotReady` naming the first members
/// that are not, `Suspended`, or `NoMatchingRepositories`.
pub fn verdict(members: &[MemberStatus], outcome: &PatternOutcome) -> Verdict {
    let total = members.len();
    if total == 0 {
        return Verdict {
            ready: false,
            reason: reason::NO_MATCHING_REPOSITORIES,
            message: format!(
                "no repository matches {} ({} listed in the registry)",
                outcome.image, outcome.listed
            ),
        };
    }
    let plural = |n: usize| if n == 1 { "member" } else { "members" };
    let not_ready: Vec<&MemberStatus> = members.iter().filter(|m| !m.ready).collect();
    let named = |list: &[&MemberStatus]| -> String {
        let mut parts: Vec<String> = list
            .iter()
            .take(NAMED_IN_MESSAGE)
            .map(|m| {
                format!(
                    "{}: {}: {}",
                    m.repository,
                    m.reason,
                    m.message.as_deref().unwrap_or("")
                )
            })
            .collect();
        if list.len() > NAMED_IN_MESSAGE {
            parts.push(format!("and {} more", list.len() - NAMED_IN_MESSAGE));
        }
        parts.join("; ")
    };
    if outcome.suspended {
        let message = if not_ready.is_empty() {
            format!(
                "suspended: nothing is written; {total} {} up to date",
                plural(total)
            )
        } else {
            format!(
                "suspended: {} of {total} {} not up to date: {}",
                not_ready.len(),
                plural(total),
                named(&not_ready)
            )
        };
        return Verdict {
            ready: false,
            reason: reason::SUSPENDED,
            message,
        };
    }
    if !not_ready.is_empty() {
        return Verdict {
            ready: false,
            reason: reason::MEMBERS_NOT_READY,
            message: format!(
                "{} of {total} {} not ready: {}",
                not_ready.len(),
                plural(total),
                named(&not_ready)
            ),
        };
    }
    let updated: Vec<&MemberStatus> = members
        .iter()
        .filter(|m| m.reason == reason::UPDATED)
        .collect();
    if updated.is_empty() {
        return Verdict {
            ready: true,
            reason: reason::UP_TO_DATE,
            message: format!("{total} {} up to date", plural(total)),
        };
    }
    let mut parts: Vec<String> = updated
        .iter()
        .take(NAMED_IN_MESSAGE)
        .map(|m| {
            format!(
                "{} {} (commit {})",
                m.repository,
                m.applied.as_deref().unwrap_or(""),
                short(m.commit.as_deref().unwrap_or(""))
            )
        })
        .collect();
    if updated.len() > NAMED_IN_MESSAGE {
        parts.push(format!("and {} more", updated.len() - NAMED_IN_MESSAGE));
    }
    Verdict {
        ready: true,
        reason: reason::UPDATED,
        message: format!(
            "{} of {total} {} updated: {}",
            updated.len(),
            plural(total),
            parts.join(", ")
        ),
    }
}

/// The status a pattern watch's reconcile should leave: members (the first
/// [`MAX_LISTED_MEMBERS`]), counts and the aggregated `Ready` condition. Pure.
pub fn pattern_status(
    previous: &ImageWatchStatus,
    outcome: &PatternOutcome,
    generation: Option<i64>,
    now: &Time,
) -> ImageWatchStatus {
    let members = member_statuses(&previous.members, outcome);
    let verdict = verdict(&members, outcome);
    let ready_count = members.iter().filter(|m| m.ready).count();
    let condition: Condition = status::ready_condition(
        verdict.ready,
        verdict.reason,
        &verdict.message,
        generation,
        now,
    );
    let total = members.len();
    let mut listed = members;
    listed.truncate(MAX_LISTED_MEMBERS);
    ImageWatchStatus {
        observed_generation: generation,
        // A pattern has no single latest or applied tag; its members have them.
        latest: None,
        applied: None,
        member_count: Some(i64::try_from(total).unwrap_or(i64::MAX)),
        members_ready: Some(i64::try_from(ready_count).unwrap_or(i64::MAX)),
        members: listed,
        refused: None,
        pull_request: match &outcome.pull_request {
            Some(d) => super::watch_pr::status_of(d, previous.pull_request.as_ref()),
            None => previous.pull_request.clone(),
        },
        conditions: status::merge_condition(&previous.conditions, condition),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use imagewatch_crd::{HelmTarget, KustomizeTarget, WorkloadTarget};

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn t(secs: i64) -> Time {
        Time(jiff::Timestamp::from_second(secs).unwrap())
    }

    fn workload(path: &str, name: &str) -> Target {
        Target {
            workload: Some(WorkloadTarget {
                path: path.into(),
                kind: "Deployment".into(),
                name: name.into(),
                container: "app".into(),
                namespace: None,
            }),
            kustomize: None,
            helm: None,
            argocd_source: None,
        }
    }

    fn kustomize(path: &str) -> Target {
        Target {
            workload: None,
            kustomize: Some(KustomizeTarget {
                path: path.into(),
                image: None,
            }),
            helm: None,
            argocd_source: None,
        }
    }

    #[test]
    fn images_without_a_star_are_not_patterns() {
        assert_eq!(parse_pattern_image("ghcr.io/org/app"), Ok(None));
        assert!(!pattern_matches("ghcr.io/org/app", "ghcr.io", "org/app"));
    }

    #[test]
    fn pattern_images_split_into_registry_and_pattern() {
        let p = parse_pattern_image("123456789012.dkr.ecr.ap-northeast-1.amazonaws.com/hoge/*/*/*")
            .unwrap()
            .unwrap();
        assert_eq!(
            p.registry,
            "123456789012.dkr.ecr.ap-northeast-1.amazonaws.com"
        );
        assert_eq!(p.pattern, "hoge/*/*/*");
        assert_eq!(p.wildcards(), 3);
        assert_eq!(
            p.member_image("hoge/a/b/c"),
            "123456789012.dkr.ecr.ap-northeast-1.amazonaws.com/hoge/a/b/c"
        );
        let p = parse_pattern_image("Registry.Example.com:5000/svc/*/api")
            .unwrap()
            .unwrap();
        assert_eq!(p.registry, "registry.example.com:5000");
        assert_eq!(p.host, "Registry.Example.com:5000");
        let p = parse_pattern_image("docker.io/*").unwrap().unwrap();
        assert_eq!(
            (p.registry.as_str(), p.pattern.as_str()),
            ("registry-1.docker.io", "library/*")
        );
    }

    #[test]
    fn misplaced_stars_are_refused_with_a_reason() {
        for (image, says) in [
            ("team/*/api", "registry host"),
            ("*.example.com/app", "registry host"),
            ("r.example.com/svc-*/api", "mixes '*'"),
            ("r.example.com/team/**", "mixes '*'"),
            ("r.example.com/Team/*", "lowercase"),
            ("r.example.com/team//*", "invalid"),
        ] {
            let err = parse_pattern_image(image).unwrap_err();
            assert!(err.contains(says), "{image}: {err}");
        }
    }

    #[test]
    fn events_match_patterns_by_registry_and_segments() {
        let image = "127.0.0.1:5000/team/*/api";
        assert!(pattern_matches(image, "127.0.0.1:5000", "team/a/api"));
        assert!(!pattern_matches(image, "127.0.0.1:5000", "team/a/worker"));
        assert!(!pattern_matches(image, "127.0.0.1:5000", "team/a/b/api"));
        assert!(!pattern_matches(image, "other:5000", "team/a/api"));
    }

    #[test]
    fn references_must_name_existing_captures() {
        let image = "r.example.com/hoge/*/*/*";
        assert_eq!(
            check_references(&kustomize("services/$1/$2/$3/overlays/stg"), image, 3),
            Ok(())
        );
        let err =
            check_references(&kustomize("services/$1/$4/overlays/stg"), image, 3).unwrap_err();
        assert_eq!(
            err,
            "spec.target.kustomize.path \"services/$1/$4/overlays/stg\" refers to $4, but spec.image \"r.example.com/hoge/*/*/*\" has 3 '*' segments ($1..$3)"
        );
        let err =
            check_references(&workload("apps/$1", "$2-api"), "r.io/svc/*/api", 1).unwrap_err();
        assert!(
            err.starts_with("spec.target.workload.name \"$2-api\" refers to $2")
                && err.ends_with("has 1 '*' segment ($1)"),
            "{err}"
        );
        let err = check_references(&kustomize("apps/$x"), image, 3).unwrap_err();
        assert!(
            err.starts_with("spec.target.kustomize.path: a '$'"),
            "{err}"
        );
        let helm = Target {
            workload: None,
            kustomize: None,
            helm: Some(HelmTarget {
                file: "values.yaml".into(),
                tag: "$2.image.tag".into(),
            }),
            argocd_source: None,
        };
        assert!(check_references(&helm, image, 3).is_ok());
        assert!(check_references(&helm, image, 1).is_err());
    }

    #[test]
    fn targets_expand_in_every_text_field() {
        let caps = strings(&["billing", "api", "eu"]);
        let t = expand_target(&workload("services/$1/$2/$3/overlays/stg", "$1-$2"), &caps);
        let w = t.workload.unwrap();
        assert_eq!(w.path, "services/billing/api/eu/overlays/stg");
        assert_eq!(w.name, "billing-api");
        assert_eq!(w.container, "app");
        let t = expand_target(&kustomize("apps/${1}x/$$"), &caps);
        assert_eq!(t.kustomize.unwrap().path, "apps/billingx/$");
    }

    #[test]
    fn members_sharing_a_target_are_found() {
        assert_eq!(shared_targets(&["a", "b", "c"]), vec![None, None, None]);
        assert_eq!(
            shared_targets(&["a", "b", "a", "a"]),
            vec![Some(2), None, Some(0), Some(0)]
        );
    }

    fn written(file: &str, before: &str, after: &str, commit: Option<&str>) -> WriteResult {
        WriteResult {
            file: file.into(),
            current_before: before.into(),
            current_after: after.into(),
            desired: after.into(),
            changed_needed: before != after,
            commit: commit.map(str::to_string),
            head: "head0000000000000".into(),
            attempts: 1,
        }
    }

    fn member(repo: &str, outcome: Result<WriteResult, ReconcileError>) -> MemberResult {
        MemberResult {
            repository: repo.into(),
            captures: vec![repo.split('/').nth(1).unwrap_or_default().to_string()],
            latest: Some("v2".into()),
            refused: None,
            outcome,
            pull_request: None,
        }
    }

    #[test]
    fn members_verified_one_by_one() {
        use crate::signature::{Refused, Verdict as SignatureVerdict};
        let refused = |tag: &str, verdict| Refused {
            tag: tag.into(),
            digest: "sha256:1111".into(),
            verdict,
        };
        let mut held_back = member(
            "svc/b/api",
            Ok(written(
                "apps/b/d.yaml",
                "r.io/svc/b/api:v1",
                "r.io/svc/b/api:v2",
                Some("abcdef0123456789"),
            )),
        );
        held_back.refused = Some(refused("v3", SignatureVerdict::Missing));
        let o = outcome(vec![
            // Signed: written, ready.
            member(
                "svc/a/api",
                Ok(written(
                    "apps/a/d.yaml",
                    "r.io/svc/a/api:v1",
                    "r.io/svc/a/api:v2",
                    Some("abcdef0123456789"),
                )),
            ),
            // Its newest tag unsigned, an older verified one written.
            held_back,
            // No candidate verifies: nothing written.
            member(
                "svc/c/api",
                Err(ReconcileError::Signature(Box::new(refused(
                    "v2",
                    SignatureVerdict::Invalid("classic signature: no key".into()),
                )))),
            ),
        ]);
        let members = member_statuses(&[], &o);
        assert!(members[0].ready && members[0].reason == "Updated");
        let b = &members[1];
        assert!(!b.ready);
        assert_eq!(b.reason, "SignatureMissing");
        assert_eq!(b.applied.as_deref(), Some("v2"));
        assert_eq!(b.commit.as_deref(), Some("abcdef0123456789"));
        let message = b.message.as_deref().unwrap_or_default();
        assert!(
            message.contains("the newest verified tag") && message.contains("refused newer tag v3"),
            "{message}"
        );
        let c = &members[2];
        assert!(!c.ready && c.applied.is_none() && c.commit.is_none());
        assert_eq!(c.reason, "SignatureInvalid");
        assert!(
            c.message.as_deref().unwrap_or_default().contains("no key"),
            "{c:?}"
        );
        let v = verdict(&members, &o);
        assert_eq!(v.reason, "MembersNotReady");
        assert!(
            v.message.starts_with("2 of 3 members not ready")
                && v.message.contains("svc/b/api: SignatureMissing")
                && v.message.contains("svc/c/api: SignatureInvalid"),
            "{}",
            v.message
        );
    }

    fn outcome(members: Vec<MemberResult>) -> PatternOutcome {
        PatternOutcome {
            image: "r.io/svc/*/api".into(),
            listed: 10,
            members,
            suspended: false,
            pull_request: None,
        }
    }

    #[test]
    fn every_member_up_to_date_is_ready() {
        let o = outcome(vec![
            member(
                "svc/b/api",
                Ok(written(
                    "apps/b/d.yaml",
                    "r.io/svc/b/api:v2",
                    "r.io/svc/b/api:v2",
                    None,
                )),
            ),
            member(
                "svc/a/api",
                Ok(written(
                    "apps/a/d.yaml",
                    "r.io/svc/a/api:v2",
                    "r.io/svc/a/api:v2",
                    None,
                )),
            ),
        ]);
        let members = member_statuses(&[], &o);
        assert_eq!(
            members
                .iter()
                .map(|m| m.repository.as_str())
                .collect::<Vec<_>>(),
            vec!["svc/a/api", "svc/b/api"],
            "sorted by repository"
        );
        assert!(members.iter().all(|m| m.ready && m.reason == "UpToDate"));
        assert_eq!(members[0].commit.as_deref(), Some("head0000000000000"));
        assert_eq!(members[0].captures, vec!["a"]);
        let v = verdict(&members, &o);
        assert_eq!(
            v,
            Verdict {
                ready: true,
                reason: "UpToDate",
                message: "2 members up to date".into()
            }
        );
    }

    #[test]
    fn the_update_event_names_the_commit_and_the_changes() {
        let o = outcome(vec![
            member(
                "svc/a/api",
                Ok(written(
                    "apps/a/d.yaml",
                    "r.io/svc/a/api:v1",
                    "r.io/svc/a/api:v2",
                    Some("abcdef0123456789"),
                )),
            ),
            member(
                "svc/b/api",
                Ok(written(
                    "apps/b/d.yaml",
                    "r.io/svc/b/api:v2",
                    "r.io/svc/b/api:v2",
                    None,
                )),
            ),
            member(
                "svc/c/api",
                Ok(written(
                    "apps/c/d.yaml",
                    "r.io/svc/c/api:v1",
                    "r.io/svc/c/api:v2",
                    Some("abcdef0123456789"),
                )),
            ),
        ]);
        assert_eq!(
            updated_note(&o).as_deref(),
            Some(
                "2 members updated (commit abcdef012345): apps/a/d.yaml: r.io/svc/a/api:v1 -> r.io/svc/a/api:v2; apps/c/d.yaml: r.io/svc/c/api:v1 -> r.io/svc/c/api:v2"
            )
        );
        let quiet = outcome(vec![member(
            "svc/b/api",
            Ok(written(
                "apps/b/d.yaml",
                "r.io/svc/b/api:v2",
                "r.io/svc/b/api:v2",
                None,
            )),
        )]);
        assert_eq!(updated_note(&quiet), None);
    }

    #[test]
    fn one_failing_member_makes_the_watch_not_ready_and_is_named() {
        let o = outcome(vec![
            member(
                "svc/a/api",
                Ok(written(
                    "apps/a/d.yaml",
                    "r.io/svc/a/api:v1",
                    "r.io/svc/a/api:v2",
                    Some("abcdef0123456789"),
                )),
            ),
            member(
                "svc/b/api",
                Err(ReconcileError::TargetNotFound(
                    "no YAML files under apps/b/overlays/stg".into(),
                )),
            ),
        ]);
        let members = member_statuses(&[], &o);
        assert_eq!(members[0].reason, "Updated");
        assert_eq!(members[0].commit.as_deref(), Some("abcdef0123456789"));
        assert_eq!(
            members[0].message.as_deref(),
            Some("apps/a/d.yaml: r.io/svc/a/api:v1 -> r.io/svc/a/api:v2 (commit abcdef012345)")
        );
        assert!(!members[1].ready);
        assert_eq!(members[1].reason, "TargetNotFound");
        let v = verdict(&members, &o);
        assert!(!v.ready);
        assert_eq!(v.reason, "MembersNotReady");
        assert_eq!(
            v.message,
            "1 of 2 members not ready: svc/b/api: TargetNotFound: no YAML files under apps/b/overlays/stg"
        );
        assert!(
            !o.has_transient_failure(),
            "a missing target waits for a change"
        );
        assert_eq!(o.committed().count(), 1);
    }

    #[test]
    fn the_message_names_the_first_few_failing_members() {
        let o = outcome(
            (0..5)
                .map(|i| {
                    member(
                        &format!("svc/m{i}/api"),
                        Err(ReconcileError::Registry(
                            crate::registry::RegistryError::Transport("down".into()),
                        )),
                    )
                })
                .collect(),
        );
        let members = member_statuses(&[], &o);
        let v = verdict(&members, &o);
        assert!(
            v.message
                .starts_with("5 of 5 members not ready: svc/m0/api: RegistryError")
        );
        assert!(v.message.ends_with("; and 2 more"), "{}", v.message);
        assert!(!v.message.contains("svc/m3/api"));
        assert!(o.has_transient_failure());
    }

    #[test]
    fn a_failing_member_keeps_what_git_held() {
        let previous = vec![MemberStatus {
            repository: "svc/a/api".into(),
            captures: vec!["a".into()],
            latest: Some("v1".into()),
            applied: Some("v1".into()),
            commit: Some("c1".into()),
            file: Some("apps/a/d.yaml".into()),
            ready: true,
            reason: "UpToDate".into(),
            message: None,
            pull_request: None,
        }];
        let o = outcome(vec![member(
            "svc/a/api",
            Err(ReconcileError::NoMatchingTags("none".into())),
        )]);
        let members = member_statuses(&previous, &o);
        assert_eq!(members[0].applied.as_deref(), Some("v1"));
        assert_eq!(members[0].commit.as_deref(), Some("c1"));
        assert!(!members[0].ready);
    }

    #[test]
    fn an_update_is_reported_until_something_else_happens() {
        let first = outcome(vec![member(
            "svc/a/api",
            Ok(written(
                "f",
                "r.io/svc/a/api:v1",
                "r.io/svc/a/api:v2",
                Some("c2"),
            )),
        )]);
        let members = member_statuses(&[], &first);
        let v = verdict(&members, &first);
        assert_eq!(
            (v.ready, v.reason, v.message.as_str()),
            (
                true,
                "Updated",
                "1 of 1 member updated: svc/a/api v2 (commit c2)"
            )
        );
        // The next poll finds Git current: nothing in the status changes.
        let again = outcome(vec![member(
            "svc/a/api",
            Ok(written("f", "r.io/svc/a/api:v2", "r.io/svc/a/api:v2", None)),
        )]);
        let next = member_statuses(&members, &again);
        assert_eq!(next, members);
        assert_eq!(verdict(&next, &again), v);
    }

    #[test]
    fn a_suspended_pattern_says_what_would_change() {
        let mut o = outcome(vec![
            member(
                "svc/a/api",
                Ok(WriteResult {
                    changed_needed: true,
                    desired: "r.io/svc/a/api:v2".into(),
                    ..written("f", "r.io/svc/a/api:v1", "r.io/svc/a/api:v1", None)
                }),
            ),
            member(
                "svc/b/api",
                Ok(written("g", "r.io/svc/b/api:v2", "r.io/svc/b/api:v2", None)),
            ),
        ]);
        o.suspended = true;
        let members = member_statuses(&[], &o);
        assert!(!members[0].ready && members[1].ready);
        assert_eq!(members[0].applied.as_deref(), Some("v1"));
        let v = verdict(&members, &o);
        assert_eq!(v.reason, "Suspended");
        assert!(
            v.message.starts_with("suspended: 1 of 2 members not up to date: svc/a/api: Suspended: suspended: f holds r.io/svc/a/api:v1, the rules choose r.io/svc/a/api:v2"),
            "{}",
            v.message
        );
    }

    #[test]
    fn no_member_is_its_own_reason() {
        let o = outcome(vec![]);
        let v = verdict(&[], &o);
        assert_eq!(v.reason, "NoMatchingRepositories");
        assert_eq!(
            v.message,
            "no repository matches r.io/svc/*/api (10 listed in the registry)"
        );
    }

    #[test]
    fn the_status_lists_at_most_200_members_and_counts_all() {
        let o = outcome(
            (0..250)
                .map(|i| {
                    let repo = format!("svc/m{i:03}/api");
                    let image = format!("r.io/{repo}:v2");
                    member(&repo, Ok(written("f", &image, &image, None)))
                })
                .collect(),
        );
        let previous = ImageWatchStatus {
            latest: Some(imagewatch_crd::LatestImage {
                tag: "old".into(),
                digest: None,
                pushed_at: None,
                appeared_at: None,
                appeared_from: None,
            }),
            ..Default::default()
        };
        let s = pattern_status(&previous, &o, Some(3), &t(10));
        assert_eq!(s.members.len(), MAX_LISTED_MEMBERS);
        assert_eq!(s.member_count, Some(250));
        assert_eq!(s.members_ready, Some(250));
        assert_eq!(s.members[0].repository, "svc/m000/api");
        assert_eq!(s.latest, None, "a pattern has no single latest tag");
        let ready = status::ready_of(Some(&s)).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "UpToDate")
        );
        assert_eq!(ready.message, "250 members up to date");
        assert_eq!(ready.observed_generation, Some(3));
        // The same outcome again is no change at all.
        let again = pattern_status(&s, &o, Some(3), &t(20));
        assert!(!status::status_changed(Some(&s), &again));
    }
}
