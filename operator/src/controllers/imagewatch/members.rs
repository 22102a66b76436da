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
//! The pipeline (`mod.rs`) lists the registry's repositories through the index, keeps those
//! the pattern matches, and runs the single-watch steps (scan, select, write intent) for each
//! one with [`expand_target`]'s target; every intent goes to the writer at once, so they share
//! one commit per repository and branch. What can be decided without I/O is in the engine
//! and named here: checking the `$n` references and expanding targets
//! (`imagewatch_engine::members`), and turning the members' results into `status.members`
//! and the aggregated `Ready` condition (`imagewatch_engine::status::members`).

use crate::controllers::ReconcileError;

// Checking and expanding the `$n` of a member's target (pure): in the engine.
pub use imagewatch_engine::members::{check_references, expand_target, shared_targets};

// The status of the members (pure): in the engine.
pub use imagewatch_engine::status::members::{
    MAX_LISTED_MEMBERS, Verdict, member_statuses, pattern_status, tag_of, updated_note, verdict,
};

/// What one reconcile found and did for one member.
pub type MemberResult = imagewatch_engine::status::MemberResult<ReconcileError>;
/// What one reconcile of a pattern watch found and did.
pub type PatternOutcome = imagewatch_engine::status::PatternOutcome<ReconcileError>;

pub use crate::registry::pattern_image::{PatternImage, parse_pattern_image, pattern_matches};

#[cfg(test)]
mod tests {
    //! The pattern image parsing and matching (`registry::pattern_image`). The status of
    //! the members is tested in the engine, next to it (`status/members/tests.rs`).

    use super::*;

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
}
