use super::*;

fn p(text: &str) -> Platform {
    Platform::parse(text).unwrap()
}

fn wanted(texts: &[&str]) -> Vec<Platform> {
    Platform::parse_all(texts).unwrap()
}

fn index(fixture: &str) -> Vec<Platform> {
    match read_manifest(None, fixture.as_bytes()).unwrap() {
        Provided::Index(platforms) => platforms,
        other => panic!("not an index: {other:?}"),
    }
}

#[test]
fn platforms_parse_as_os_arch_and_an_optional_variant() {
    assert_eq!(
        p("linux/arm/v7"),
        Platform {
            os: "linux".into(),
            architecture: "arm".into(),
            variant: Some("v7".into())
        }
    );
    assert_eq!(p("linux/amd64").to_string(), "linux/amd64");
    assert_eq!(p("linux/arm/v7").to_string(), "linux/arm/v7");
    for bad in [
        "linux",
        "linux/",
        "/amd64",
        "linux/arm/v7/x",
        "Linux/AMD64",
        "linux amd64",
        "",
    ] {
        let error = Platform::parse(bad).unwrap_err();
        assert!(error.contains("os/arch"), "{bad}: {error}");
    }
    // Duplicates are asked for once.
    assert_eq!(wanted(&["linux/amd64", "linux/amd64"]).len(), 1);
}

#[test]
fn an_index_with_amd64_and_arm64_provides_both_and_not_its_attestation() {
    let provided = index(include_str!("fixtures/index-amd64-arm64.json"));
    assert_eq!(list(&provided), "linux/amd64, linux/arm64/v8");
    assert!(missing(&wanted(&["linux/amd64", "linux/arm64"]), &provided).is_empty());
    // arm64 and arm64/v8 are the same platform.
    assert!(missing(&wanted(&["linux/arm64/v8"]), &provided).is_empty());
    // The attestation entry is no platform: asking for unknown/unknown is not met by it.
    assert_eq!(
        missing(&wanted(&["unknown/unknown", "linux/s390x"]), &provided),
        wanted(&["unknown/unknown", "linux/s390x"])
    );
}

#[test]
fn a_single_amd64_image_needs_its_config_and_lacks_arm64() {
    let provided = read_manifest(None, include_str!("fixtures/image-amd64.json").as_bytes());
    assert_eq!(
        provided,
        Ok(Provided::Config {
            digest: "sha256:4444444444444444444444444444444444444444444444444444444444444444"
                .into(),
            size: Some(1470),
        })
    );
    let platform = read_config(include_str!("fixtures/config-amd64.json").as_bytes()).unwrap();
    assert_eq!(platform, p("linux/amd64"));
    assert_eq!(
        missing(
            &wanted(&["linux/amd64", "linux/arm64"]),
            std::slice::from_ref(&platform)
        ),
        wanted(&["linux/arm64"])
    );
    assert!(missing(&wanted(&["linux/amd64"]), &[platform]).is_empty());
}

#[test]
fn an_arm_variant_matches_only_the_same_variant() {
    let v7 = read_config(include_str!("fixtures/config-arm-v7.json").as_bytes()).unwrap();
    assert_eq!(v7, p("linux/arm/v7"));
    assert!(missing(&wanted(&["linux/arm/v7"]), std::slice::from_ref(&v7)).is_empty());
    // No variant asked: any arm image does.
    assert!(missing(&wanted(&["linux/arm"]), std::slice::from_ref(&v7)).is_empty());
    assert_eq!(
        missing(&wanted(&["linux/arm/v6"]), std::slice::from_ref(&v7)),
        wanted(&["linux/arm/v6"])
    );
    // An arm image without a variant does not prove v7.
    assert_eq!(
        missing(&wanted(&["linux/arm/v7"]), &[p("linux/arm")]),
        wanted(&["linux/arm/v7"])
    );
}

#[test]
fn a_docker_manifest_list_v2_is_an_index() {
    let provided = index(include_str!("fixtures/docker-list-v2.json"));
    assert_eq!(list(&provided), "linux/amd64, linux/arm/v6, linux/arm/v7");
    assert!(
        missing(
            &wanted(&["linux/amd64", "linux/arm/v7", "linux/arm/v6"]),
            &provided
        )
        .is_empty()
    );
    assert_eq!(
        missing(&wanted(&["linux/arm64", "linux/amd64"]), &provided),
        wanted(&["linux/arm64"])
    );
}

#[test]
fn the_media_type_may_come_from_the_response_header() {
    let body = br#"{"schemaVersion":2,"manifests":[{"digest":"sha256:aa","platform":{"os":"linux","architecture":"amd64"}}],"config":null}"#;
    // `config: null` with an index Content-Type: the header decides.
    assert_eq!(
        read_manifest(
            Some("application/vnd.oci.image.index.v1+json; charset=utf-8"),
            body
        ),
        Ok(Provided::Index(vec![p("linux/amd64")]))
    );
    assert!(read_manifest(None, b"{\"schemaVersion\":1}").is_err());
    assert!(read_manifest(None, b"not json").is_err());
    assert!(read_config(b"{\"created\":\"2026-01-01T00:00:00Z\"}").is_err());
}
