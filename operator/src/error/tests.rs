use super::*;
use crate::git::GitError;

#[test]
fn a_full_clone_cache_has_its_own_reason_and_is_retried() {
    let full = ReconcileError::Git(GitError::CacheFull {
        path: "/var/cache/imagewatch/git".into(),
        message: "No space left on device".into(),
    });
    assert_eq!(full.reason(), reason::CACHE_FULL);
    assert_eq!(full.category(), "cache_full");
    assert!(!full.is_stalled());
    assert!(full.to_string().contains("/var/cache/imagewatch/git"));
    let other = ReconcileError::Git(GitError::InvalidBranch {
        branch: "x y".into(),
    });
    assert_eq!(other.reason(), reason::GIT_ERROR);
    assert_eq!(other.category(), "git");
}

fn no_rule() -> Denial {
    Denial::NoRule {
        namespace: "team-a".into(),
    }
}

fn unlisted_catalog() -> CatalogError {
    CatalogError::Catalog {
        registry: "registry.example".into(),
        pattern: "team/*".into(),
        error: Box::new(crate::registry::RegistryError::Unauthorized {
            registry: "registry.example".into(),
            message: "denied".into(),
        }),
    }
}

#[test]
fn each_error_says_who_can_fix_it() {
    use Category::*;
    let cases: Vec<(ReconcileError, Category)> = vec![
        (
            ReconcileError::InvalidSpec(SpecError::NoGitRepository),
            User,
        ),
        (
            ReconcileError::CredentialsNotFound(CredentialsError::NotFound {
                secret: NamedSecret::new("git", "ns", "x"),
            }),
            User,
        ),
        (
            ReconcileError::NoMatchingTags(NoTag::NoCandidateManifest { image: "x".into() }),
            User,
        ),
        (
            ReconcileError::TargetNotFound(TargetError::NoApplicationApi),
            User,
        ),
        (ReconcileError::NotAllowed(no_rule()), User),
        (
            ReconcileError::Git(GitError::AuthFailed {
                url: "https://git.example/r.git".into(),
                reason: "denied".into(),
            }),
            User,
        ),
        (
            ReconcileError::Git(GitError::CacheFull {
                path: "/c".into(),
                message: "full".into(),
            }),
            Transient,
        ),
        (
            ReconcileError::CatalogUnavailable(unlisted_catalog()),
            Transient,
        ),
        (
            ReconcileError::Internal(InternalError::NoWriteResult),
            Internal,
        ),
    ];
    let metrics = crate::telemetry::Metrics::new();
    ReconcileError::NotAllowed(no_rule()).count(&metrics, "imagewatch");
    let text = metrics.render();
    assert!(
        text.contains(
            "imagewatch_reconcile_errors_total{controller=\"imagewatch\",category=\"user\",reason=\"NotAllowed\"} 1"
        ),
        "{text}"
    );
    for (error, want) in cases {
        assert_eq!(error.fixed_by(), want, "{error:?}");
        assert!(["user", "transient", "internal"].contains(&want.as_str()));
        assert_eq!(error.label(), error.category());
    }
    // Everything the user must fix and that waits for a change is in category `user`,
    // except an unlisted pattern catalog, which the registry may start to list.
    for stalled in [
        ReconcileError::InvalidSpec(SpecError::NoGitRepository),
        ReconcileError::TargetNotFound(TargetError::NoApplicationApi),
        ReconcileError::NotAllowed(no_rule()),
    ] {
        assert!(stalled.is_stalled());
        assert_eq!(stalled.fixed_by(), User);
    }
}

/// The messages the status reports, one or more per family, as they read.
#[test]
fn messages_read_as_before() {
    let image = || "registry.example/team/api".to_string();
    let cases: Vec<(String, &str)> = vec![
        (
            ReconcileError::InvalidSpec(SpecError::invalid("spec.tags.platforms", "bad"))
                .to_string(),
            "spec.tags.platforms: bad",
        ),
        (
            SpecError::not_a_duration("spec.interval", "5x").to_string(),
            "spec.interval \"5x\" is not a duration",
        ),
        (
            SpecError::Required {
                field: "spec.pullRequest",
                when: Some("in mode PullRequest"),
            }
            .to_string(),
            "spec.pullRequest is required in mode PullRequest",
        ),
        (
            SpecError::Required {
                field: "spec.pullRequest",
                when: None,
            }
            .to_string(),
            "spec.pullRequest is required",
        ),
        (
            SpecError::KeylessUnsupported {
                field: "spec.verify".into(),
            }
            .to_string(),
            "spec.verify.cosign.keyless is not supported yet (it needs Fulcio and Rekor); use \
             spec.verify.cosign.secretRef with cosign public keys",
        ),
        (
            SpecError::SharedTarget {
                other: "team/worker".into(),
                wildcards: 2,
            }
            .to_string(),
            "its target is also team/worker's: use $1..$2 in spec.target so every repository has its own",
        ),
        (
            SpecError::NotASecretName {
                purpose: "git",
                name: "a/b".into(),
                namespace: "team-a".into(),
            }
            .to_string(),
            "git secretRef.name \"a/b\" is not a Secret name: it must be a DNS subdomain name \
             (lower-case letters, digits, '-' and '.') of a Secret in namespace team-a",
        ),
        (
            ReconcileError::CredentialsNotFound(CredentialsError::NotFound {
                secret: NamedSecret::new("git", "team-a", "git-creds"),
            })
            .to_string(),
            "git Secret team-a/git-creds not found",
        ),
        (
            CredentialsError::Incomplete {
                secret: NamedSecret::new("forge", "team-a", "forge"),
                needs: "key token, or githubAppID+githubAppInstallationID+githubAppPrivateKey",
            }
            .to_string(),
            "forge Secret team-a/forge needs key token, or \
             githubAppID+githubAppInstallationID+githubAppPrivateKey",
        ),
        (
            CredentialsError::CannotListLabelled {
                label: "imagewatch.dev/git-credentials",
                namespace: "team-a".into(),
            }
            .to_string(),
            "the operator may not list the Secrets labelled imagewatch.dev/git-credentials=true \
             in team-a that hold Git credentials for a watch without spec.git: set the chart \
             value rbac.gitFromArgocd=true, or set spec.git with a secretRef",
        ),
        (
            ReconcileError::NoMatchingTags(NoTag::none_matches(&image(), 3, "v*")).to_string(),
            "none of the 3 tags of registry.example/team/api matches pattern \"v*\"",
        ),
        (
            NoTag::unorderable(&image(), 2, "*", imagewatch_engine::policy::Order::Semver)
                .to_string(),
            "2 tags of registry.example/team/api match pattern \"*\" but none can be ordered \
             by Semver (e.g. not a version); set spec.tags.order or spec.tags.extract",
        ),
        (
            ReconcileError::PinnedTagNotFound {
                tag: "v1".into(),
                image: image(),
            }
            .to_string(),
            "spec.pin \"v1\" does not exist in registry.example/team/api",
        ),
        (
            ReconcileError::TargetNotFound(TargetError::NoApplicationApi).to_string(),
            "spec.git is not set and the Argo CD Application API is not installed",
        ),
        (
            PromotionError::TargetNotFound(TargetError::PathNotFound(MissingPath {
                field: "spec.to.path",
                path: "overlays/prod".into(),
                branch: "main".into(),
            }))
            .to_string(),
            "spec.to.path \"overlays/prod\" does not exist on branch main",
        ),
        (
            PromotionError::SourceWaiting {
                watches: vec!["api".into(), "worker".into()],
            }
            .to_string(),
            "waiting for ImageWatch api, worker to apply a first tag",
        ),
        (
            ReconcileError::WaitingForGroup(GroupWait::NoCommonTag {
                group: "release".into(),
                decision: imagewatch_engine::group::GroupDecision {
                    tag: None,
                    waiting_for: vec![("worker".into(), "v2".into())],
                },
            })
            .to_string(),
            "group release: no tag is common to every member; waiting: worker has no v2",
        ),
        (
            GroupWait::member(
                "release",
                "worker".into(),
                ReconcileError::PinnedTagNotFound {
                    tag: "v1".into(),
                    image: image(),
                },
            )
            .to_string(),
            "group release: member worker: spec.pin \"v1\" does not exist in \
             registry.example/team/api",
        ),
        (
            ReconcileError::CatalogUnavailable(unlisted_catalog()).to_string(),
            "registry registry.example does not list its repositories to these credentials \
             (GET /v2/_catalog: registry registry.example denied access: denied); a pattern \
             image needs a registry that serves the catalog, or ECR",
        ),
        (
            ReconcileError::NotAllowed(Denial::NotGranted {
                what: "image registry.example/team/api".into(),
                namespace: "team-a".into(),
                rules: vec!["team-a".into(), "shared".into()],
            })
            .to_string(),
            "image registry.example/team/api is not allowed for namespace team-a by \
             allow-list rule \"team-a\", \"shared\"",
        ),
        (
            Denial::ListUnusable {
                configmap: "imagewatch-allow".into(),
                problem: "does not exist".into(),
            }
            .to_string(),
            "the operator's allow-list ConfigMap imagewatch-allow does not exist",
        ),
        (
            ReconcileError::Internal(InternalError::NoDigest {
                image: image(),
                tag: "v1".into(),
            })
            .to_string(),
            "internal: no digest of registry.example/team/api:v1 to write",
        ),
        (
            PromotionError::Internal(InternalError::NothingToCommit).to_string(),
            "internal: the planned edits change nothing",
        ),
    ];
    for (got, want) in cases {
        assert_eq!(got, want);
    }
}

#[test]
fn promotion_keeps_the_reason_and_category_of_a_shared_step() {
    let shared = PromotionError::from(ReconcileError::CatalogUnavailable(unlisted_catalog()));
    assert_eq!(shared.reason(), reason::CATALOG_UNAVAILABLE);
    assert_eq!(shared.category(), "catalog_unavailable");
    assert_eq!(shared.fixed_by(), Category::Transient);
    let internal = PromotionError::from(ReconcileError::Internal(InternalError::NoWriteResult));
    assert_eq!(internal.reason(), "InternalError");
    assert_eq!(internal.fixed_by(), Category::Internal);
    let waiting = PromotionError::SourceNotReady(SourceError::unusable("spec.from.path", "no tag"));
    assert_eq!(waiting.fixed_by(), Category::User);
    assert!(waiting.is_stalled());
    let metrics = crate::telemetry::Metrics::new();
    shared.count(&metrics, "promotionpolicy");
    assert!(metrics.render().contains(
        "imagewatch_reconcile_errors_total{controller=\"promotionpolicy\",category=\"transient\",reason=\"CatalogUnavailable\"} 1"
    ));
}
