//! Parser tests on realistic payloads from each provider (`tests/fixtures/webhooks/`),
//! including ignored events and malformed bodies.

use super::*;

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/webhooks")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ev(
    source: &'static str,
    registry: &str,
    repository: &str,
    tag: Option<&str>,
    digest: Option<&str>,
) -> RegistryEvent {
    RegistryEvent {
        registry: registry.into(),
        repository: repository.into(),
        tag: tag.map(Into::into),
        digest: digest.map(Into::into),
        source,
        at: None,
    }
}

const D1: &str = "sha256:5b0bcabd1ed22e9fb1310cf6c2dec7cdef19f0ad69efa1f392e94a4333501270";
const D2: &str = "sha256:8a9e9863dbb6e10edb5adfe917c00da84e1700fa76e7ed02476aa6e6fb8ee0d8";

#[test]
fn distribution_push_keeps_manifests_and_ignores_blobs_and_pulls() {
    let parsed = parse_distribution(&fixture("distribution-push.json"), None).unwrap();
    let mut pushed = ev(
        "distribution",
        "127.0.0.1:5000",
        "team/app",
        Some("v1.2.3"),
        Some(D1),
    );
    // The registry's timestamp of the manifest push.
    pushed.at = Some("2026-03-02T10:14:05.171542893Z".parse().unwrap());
    assert_eq!(parsed.events, vec![pushed]);
    // Two blob pushes (config, layer) and one pull.
    assert_eq!(parsed.ignored, 3);
}

#[test]
fn distribution_host_override_and_tagless_push() {
    let parsed = parse_distribution(
        &fixture("distribution-index-by-digest.json"),
        Some("Registry.Example.com"),
    )
    .unwrap();
    let mut pushed = ev(
        "distribution",
        "registry.example.com",
        "team/app",
        None,
        Some(D1),
    );
    pushed.at = Some("2026-03-02T11:02:44.731200014Z".parse().unwrap());
    assert_eq!(parsed.events, vec![pushed]);
    // Without override, no request.host: the target URL's authority.
    let parsed = parse_distribution(&fixture("distribution-index-by-digest.json"), None).unwrap();
    assert_eq!(parsed.events[0].registry, "10.0.0.7:5000");
}

#[test]
fn distribution_media_types() {
    for media_type in MANIFEST_MEDIA_TYPES {
        assert!(is_manifest_media_type(media_type));
    }
    assert!(is_manifest_media_type(
        "application/vnd.oci.image.manifest.v1+json; charset=utf-8"
    ));
    assert!(!is_manifest_media_type("application/octet-stream"));
    assert!(!is_manifest_media_type(
        "application/vnd.oci.image.layer.v1.tar+gzip"
    ));
    assert!(!is_manifest_media_type(
        "application/vnd.oci.image.config.v1+json"
    ));
}

#[test]
fn distribution_delete_and_empty_are_ignored() {
    let body = br#"{"events":[{"action":"delete","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"team/app","digest":"sha256:5b0bcabd1ed22e9fb1310cf6c2dec7cdef19f0ad69efa1f392e94a4333501270"},"request":{"host":"r.example.com"}}]}"#;
    let parsed = parse_distribution(body, None).unwrap();
    assert!(parsed.events.is_empty());
    assert_eq!(parsed.ignored, 1);
    let parsed = parse_distribution(br#"{"events":[]}"#, None).unwrap();
    assert_eq!(parsed, Parsed::default());
}

#[test]
fn distribution_malformed() {
    for body in [
        &b""[..],
        b"not json",
        b"{\"events\": {}}",
        b"{}",
        b"[1,2]",
        b"{\"events\":[{\"target\":null}]}",
        b"\xff\xfe",
    ] {
        assert!(
            matches!(parse_distribution(body, None), Err(ParseError::Json { .. })),
            "{:?}",
            String::from_utf8_lossy(body)
        );
    }
    // A manifest push that names no repository, or no host at all.
    let no_repo = br#"{"events":[{"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","tag":"v1"},"request":{"host":"r.example.com"}}]}"#;
    assert!(matches!(
        parse_distribution(no_repo, None),
        Err(ParseError::Invalid { .. })
    ));
    let no_host = br#"{"events":[{"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"a/b","tag":"v1"}}]}"#;
    assert!(matches!(
        parse_distribution(no_host, None),
        Err(ParseError::Invalid { .. })
    ));
    // Tags that could not be a tag never travel further.
    let bad_tag = br#"{"events":[{"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"a/b","tag":"v1\nINJECTED"},"request":{"host":"r.example.com"}}]}"#;
    let err = parse_distribution(bad_tag, None).unwrap_err();
    assert!(err.to_string().contains("invalid tag"), "{err}");
    let bad_repo = br#"{"events":[{"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"A/../b","tag":"v1"},"request":{"host":"r.example.com"}}]}"#;
    assert!(parse_distribution(bad_repo, None).is_err());
}

#[test]
fn dockerhub_push() {
    let parsed = parse_dockerhub(&fixture("dockerhub-push.json")).unwrap();
    assert_eq!(
        parsed.events,
        vec![ev(
            "dockerhub",
            "registry-1.docker.io",
            "acme/my-api",
            Some("1.4.0"),
            None
        )]
    );
    assert_eq!(parsed.ignored, 0);
}

#[test]
fn dockerhub_official_image_gets_library() {
    let body = br#"{"push_data":{"tag":"1.27"},"repository":{"repo_name":"nginx","namespace":"library","name":"nginx"}}"#;
    let parsed = parse_dockerhub(body).unwrap();
    assert_eq!(
        parsed.events,
        vec![ev(
            "dockerhub",
            "registry-1.docker.io",
            "library/nginx",
            Some("1.27"),
            None
        )]
    );
    let fallback = br#"{"push_data":{"tag":"x"},"repository":{"namespace":"acme","name":"api"}}"#;
    assert_eq!(
        parse_dockerhub(fallback).unwrap().events[0].repository,
        "acme/api"
    );
}

#[test]
fn dockerhub_malformed() {
    assert!(matches!(
        parse_dockerhub(b"{"),
        Err(ParseError::Json { .. })
    ));
    assert!(matches!(
        parse_dockerhub(br#"{"push_data":{"tag":"x"}}"#),
        Err(ParseError::Invalid { .. })
    ));
    assert!(matches!(
        parse_dockerhub(br#"{"push_data":{"tag":"x"},"repository":{}}"#),
        Err(ParseError::Invalid { .. })
    ));
    assert!(matches!(
        parse_dockerhub(br#"{"push_data":{"tag":7},"repository":{"repo_name":"a/b"}}"#),
        Err(ParseError::Json { .. })
    ));
}

#[test]
fn ghcr_package_published() {
    let parsed = parse_ghcr(&fixture("ghcr-package-published.json")).unwrap();
    assert_eq!(
        parsed.events,
        vec![ev(
            "ghcr",
            "ghcr.io",
            "acme-org/my-api",
            Some("v2.3.0"),
            Some(D2)
        )]
    );
}

#[test]
fn ghcr_registry_package_updated_without_tag() {
    let parsed = parse_ghcr(&fixture("ghcr-registry-package-updated.json")).unwrap();
    assert_eq!(
        parsed.events,
        vec![ev(
            "ghcr",
            "ghcr.io",
            "codertocat/hello-world",
            None,
            Some(D1)
        )]
    );
}

#[test]
fn ghcr_ignores_npm_ping_and_other_actions() {
    let parsed = parse_ghcr(&fixture("ghcr-package-npm.json")).unwrap();
    assert_eq!(parsed, Parsed::ignored_one());
    let ping =
        br#"{"zen":"Keep it logically awesome.","hook_id":1,"hook":{"type":"Organization"}}"#;
    assert_eq!(parse_ghcr(ping).unwrap(), Parsed::ignored_one());
    let deleted = br#"{"action":"deleted","package":{"name":"x","package_type":"container","owner":{"login":"o"}}}"#;
    assert_eq!(parse_ghcr(deleted).unwrap(), Parsed::ignored_one());
}

#[test]
fn ghcr_malformed() {
    assert!(matches!(parse_ghcr(b"[]"), Err(ParseError::Json { .. })));
    let no_owner = br#"{"action":"published","package":{"name":"x","package_type":"CONTAINER"}}"#;
    assert!(matches!(
        parse_ghcr(no_owner),
        Err(ParseError::Invalid { .. })
    ));
}

#[test]
fn harbor_default_format() {
    let parsed = parse_harbor(&fixture("harbor-push-artifact.json")).unwrap();
    assert_eq!(
        parsed.events,
        vec![
            ev(
                "harbor",
                "hub.harbor.example.com",
                "test-webhook/debian",
                Some("latest"),
                Some(D2)
            ),
            ev(
                "harbor",
                "hub.harbor.example.com",
                "test-webhook/debian",
                Some("12.5"),
                Some(D2)
            ),
        ]
    );
}

#[test]
fn harbor_cloudevents_and_v1_formats() {
    let parsed = parse_harbor(&fixture("harbor-cloudevents-pushed.json")).unwrap();
    assert_eq!(
        parsed.events,
        vec![ev(
            "harbor",
            "harbor.example.com:8443",
            "team/application",
            Some("stable"),
            Some(D1)
        )]
    );
    let v1 = br#"{"type":"pushImage","occur_at":1,"operator":"admin","event_data":{"resources":[{"digest":"sha256:5b0bcabd1ed22e9fb1310cf6c2dec7cdef19f0ad69efa1f392e94a4333501270","tag":"","resource_url":"harbor.example.com/library/app@sha256:5b0bcabd1ed22e9fb1310cf6c2dec7cdef19f0ad69efa1f392e94a4333501270"}],"repository":{"name":"app","namespace":"library"}}}"#;
    let parsed = parse_harbor(v1).unwrap();
    assert_eq!(
        parsed.events,
        vec![ev(
            "harbor",
            "harbor.example.com",
            "library/app",
            None,
            Some(D1)
        )]
    );
}

#[test]
fn harbor_ignores_pulls_and_scans() {
    let parsed = parse_harbor(&fixture("harbor-pull-artifact.json")).unwrap();
    assert_eq!(parsed, Parsed::ignored_one());
    let scan = br#"{"type":"SCANNING_COMPLETED","event_data":{"resources":[]}}"#;
    assert_eq!(parse_harbor(scan).unwrap(), Parsed::ignored_one());
}

#[test]
fn harbor_malformed() {
    assert!(matches!(
        parse_harbor(b"{\"type\":"),
        Err(ParseError::Json { .. })
    ));
    assert!(matches!(
        parse_harbor(br#"{"type":"PUSH_ARTIFACT"}"#),
        Err(ParseError::Invalid { .. })
    ));
    let no_url = br#"{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"tag":"v1"}],"repository":{"repo_full_name":"a/b"}}}"#;
    assert!(matches!(
        parse_harbor(no_url),
        Err(ParseError::Invalid { .. })
    ));
    let no_host = br#"{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"tag":"v1","resource_url":"debian:latest"}],"repository":{"repo_full_name":"a/b"}}}"#;
    assert!(matches!(
        parse_harbor(no_host),
        Err(ParseError::Invalid { .. })
    ));
}

#[test]
fn harbor_resource_url_split() {
    assert_eq!(
        split_resource_url("h.example.com:8443/a/b:v1"),
        Some(("h.example.com:8443", "a/b"))
    );
    assert_eq!(
        split_resource_url("h.example.com/a/b@sha256:abc"),
        Some(("h.example.com", "a/b"))
    );
    assert_eq!(
        split_resource_url("https://h.example.com/a/b"),
        Some(("h.example.com", "a/b"))
    );
    assert_eq!(split_resource_url("nohost"), None);
}

#[test]
fn quay_push_list_and_legacy_object() {
    let parsed = parse_quay(&fixture("quay-repository-push.json")).unwrap();
    assert_eq!(
        parsed.events,
        vec![
            ev("quay", "quay.io", "acme/my-api", Some("v3.1.0"), None),
            ev("quay", "quay.io", "acme/my-api", Some("latest"), None),
        ]
    );
    let legacy = br#"{"pushed_image_count":1,"name":"ubuntu","repository":"devtable/ubuntu","docker_url":"quay.example.com:8443/devtable/ubuntu","updated_tags":{"latest":"b750fe79269d2ec9a3c593ef05b4332b1d1a02a62b4accb2c21d589ff2f5f2dc"},"namespace":"devtable"}"#;
    let parsed = parse_quay(legacy).unwrap();
    assert_eq!(
        parsed.events,
        vec![ev(
            "quay",
            "quay.example.com:8443",
            "devtable/ubuntu",
            Some("latest"),
            None
        )]
    );
    let no_tags = br#"{"docker_url":"quay.io/a/b","updated_tags":[]}"#;
    assert_eq!(
        parse_quay(no_tags).unwrap().events,
        vec![ev("quay", "quay.io", "a/b", None, None)]
    );
}

#[test]
fn quay_ignores_build_notifications_and_rejects_malformed() {
    let build = br#"{"build_id":"296ec063","docker_url":"quay.io/a/b","docker_tags":["latest"],"repository":"a/b"}"#;
    assert_eq!(parse_quay(build).unwrap(), Parsed::ignored_one());
    assert!(matches!(parse_quay(b"nope"), Err(ParseError::Json { .. })));
    assert!(matches!(
        parse_quay(br#"{"updated_tags":["v1"]}"#),
        Err(ParseError::Invalid { .. })
    ));
    assert!(matches!(
        parse_quay(br#"{"docker_url":"quay.io","updated_tags":["v1"]}"#),
        Err(ParseError::Invalid { .. })
    ));
    assert!(matches!(
        parse_quay(br#"{"docker_url":"quay.io/a/b","updated_tags":[1]}"#),
        Err(ParseError::Invalid { .. })
    ));
    assert!(matches!(
        parse_quay(br#"{"docker_url":"quay.io/a/b","updated_tags":"v1"}"#),
        Err(ParseError::Invalid { .. })
    ));
}

#[test]
fn generic_payload() {
    let parsed = parse_generic(&fixture("generic-push.json")).unwrap();
    assert_eq!(
        parsed.events,
        vec![ev(
            "generic",
            "123456789012.dkr.ecr.ap-northeast-1.amazonaws.com",
            "my-api",
            Some("canary-v1.2.4"),
            Some(D1)
        )]
    );
    // Spelled like a watch: docker.io means Docker Hub.
    let hub = br#"{"registry":"docker.io","repository":"nginx"}"#;
    assert_eq!(
        parse_generic(hub).unwrap().events,
        vec![ev(
            "generic",
            "registry-1.docker.io",
            "library/nginx",
            None,
            None
        )]
    );
}

#[test]
fn generic_malformed() {
    for body in [
        &br#"{"repository":"a/b"}"#[..],
        br#"{"registry":"r.example.com"}"#,
        br#"{"registry":1,"repository":"a/b"}"#,
        b"",
    ] {
        assert!(matches!(parse_generic(body), Err(ParseError::Json { .. })));
    }
    for body in [
        &br#"{"registry":"r.example.com","repository":"a/b","digest":"sha256:zz"}"#[..],
        br#"{"registry":"r.example.com","repository":"a/b:v1"}"#,
        br#"{"registry":"nodots","repository":"a/b"}"#,
        br#"{"registry":"r.example.com","repository":""}"#,
        br#"{"registry":"r.example.com/x","repository":"a"}"#,
    ] {
        assert!(
            matches!(parse_generic(body), Err(ParseError::Invalid { .. })),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn parse_dispatches_by_provider() {
    let options = ParseOptions {
        distribution_host: Some("registry.example.com".into()),
    };
    let parsed = parse(
        Provider::Distribution,
        &fixture("distribution-push.json"),
        &options,
    )
    .unwrap();
    assert_eq!(parsed.events[0].registry, "registry.example.com");
    for provider in Provider::ALL {
        assert!(parse(provider, b"{not json", &options).is_err());
    }
}
