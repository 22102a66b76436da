//! The importer on fixtures shaped like each peer's documentation: which watches come out,
//! what the report says, and — for a fixed registry listing — that each watch chooses the tag
//! the source tool would.

use std::collections::BTreeMap;

use imagewatch_crd::{DigestMode, GitSource, ImageWatch, TagOrder, TagPick, Target};
use jiff::Timestamp;

use super::draft::{WatchDraft, object_name, regex_as_glob, star_glob};
use super::*;
use crate::policy::TagInfo;

macro_rules! fixture {
    ($path:literal) => {
        ($path, include_str!(concat!("fixtures/", $path)))
    };
}

fn import(files: &[(&str, &str)], options: &Options) -> (Inputs, Imported) {
    let mut inputs = Inputs::default();
    let mut read = Imported::default();
    for (name, text) in files {
        // Paths are relative to the peer's directory, as `imagewatch import DIR` makes them.
        let relative = name.split_once('/').map_or(*name, |(_, rest)| rest);
        read_file(relative, text, &mut inputs, &mut read);
    }
    let mut imported = translate(&inputs, options);
    imported.notes.extend(read.notes);
    (inputs, imported)
}

fn watch<'a>(imported: &'a Imported, name: &str) -> &'a ImageWatch {
    imported
        .watches
        .iter()
        .find(|w| w.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| {
            let names: Vec<_> = imported.watches.iter().map(|w| &w.metadata.name).collect();
            panic!("no watch {name}; have {names:?}")
        })
}

fn has_note(imported: &Imported, source: &str, severity: Severity, text: &str) -> bool {
    imported
        .notes
        .iter()
        .any(|n| n.source.contains(source) && n.severity == severity && n.message.contains(text))
}

fn listed(tags: &[&str]) -> Vec<TagInfo> {
    tags.iter().copied().map(TagInfo::new).collect()
}

/// Tags pushed one minute apart, in the order given.
fn pushed_in_order(tags: &[&str]) -> Vec<TagInfo> {
    tags.iter()
        .enumerate()
        .map(|(i, tag)| TagInfo {
            pushed_at: Some(Timestamp::from_second(1_700_000_000 + 60 * i as i64).unwrap()),
            ..TagInfo::new(*tag)
        })
        .collect()
}

/// The tag the watch holds for this listing, as the reconciler would choose it.
fn chosen(watch: &ImageWatch, listing: &[TagInfo]) -> Option<String> {
    if let Some(pin) = &watch.spec.pin {
        return listing.iter().any(|t| &t.tag == pin).then(|| pin.clone());
    }
    let rules = watch.spec.tags.clone().unwrap_or_default();
    let policy =
        crate::policy::TagPolicy::from_rules(&rules).expect("a generated watch has a valid policy");
    policy.select(listing).map(|t| t.tag.clone())
}

const COSIGN: &str = "sha256-9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08.sig";

#[test]
fn flux_v1_annotations_become_workload_watches() {
    let (_, imported) = import(
        &[
            fixture!("flux-v1/apps/podinfo/deployment.yaml"),
            fixture!("flux-v1/apps/helloworld/deployment.yaml"),
        ],
        &Options::default(),
    );
    let names: Vec<_> = imported
        .watches
        .iter()
        .filter_map(|w| w.metadata.name.as_deref())
        .collect();
    assert_eq!(
        names,
        [
            "podinfo-podinfod",
            "podinfo-init",
            "helloworld-helloworld",
            "helloworld-sidecar",
            "redis-redis",
        ]
    );

    let podinfod = watch(&imported, "podinfo-podinfod");
    assert_eq!(podinfod.metadata.namespace.as_deref(), Some("demo"));
    assert_eq!(podinfod.spec.image, "stefanprodan/podinfo");
    let target = podinfod.spec.target.workload.as_ref().unwrap();
    assert_eq!(
        (
            target.path.as_str(),
            target.kind.as_str(),
            target.name.as_str()
        ),
        ("apps/podinfo", "Deployment", "podinfo")
    );
    assert_eq!(target.container, "podinfod");
    let tags = podinfod.spec.tags.as_ref().unwrap();
    assert_eq!(tags.pattern.as_deref(), Some("semver:~3.1"));
    assert_eq!(tags.order, None);
    // Flux v1 semver: the highest version inside ~3.1, releases only.
    let listing = listed(&["3.1.0", "3.1.5", "3.2.0", "3.1.6-rc.1", "latest", COSIGN]);
    assert_eq!(chosen(podinfod, &listing).as_deref(), Some("3.1.5"));

    // regex: newest match (Flux v1: by creation time; here the push order stands for it).
    let init = watch(&imported, "podinfo-init");
    assert_eq!(
        init.spec.tags.as_ref().unwrap().order,
        Some(TagOrder::Newest)
    );
    let listing = pushed_in_order(&["3.10.1", "3.10.2", "3.11.0", "3.10.3", "edge"]);
    assert_eq!(chosen(init, &listing).as_deref(), Some("3.10.3"));
    assert!(has_note(
        &imported,
        "container init",
        Severity::Differs,
        "creation time"
    ));

    // The older flux.weave.works form; glob:master-*; a container without a filter is glob:*.
    let hello = watch(&imported, "helloworld-helloworld");
    let listing = pushed_in_order(&["master-07a1b6b", "master-a1b2c3d", "dev-9e8f7a6"]);
    assert_eq!(chosen(hello, &listing).as_deref(), Some("master-a1b2c3d"));
    let sidecar = watch(&imported, "helloworld-sidecar");
    assert_eq!(sidecar.spec.tags.as_ref().unwrap().pattern, None);
    assert_eq!(chosen(sidecar, &listing).as_deref(), Some("dev-9e8f7a6"));

    // Locked: the current tag is held.
    let redis = watch(&imported, "redis-redis");
    assert_eq!(redis.spec.pin.as_deref(), Some("5.0.7"));
    assert_eq!(
        chosen(redis, &listed(&["5.0.7", "6.0.0"])).as_deref(),
        Some("5.0.7")
    );

    // Not automated: no watch, and the report says why.
    assert!(has_note(
        &imported,
        "Deployment demo/manual",
        Severity::NotTranslated,
        "without fluxcd.io/automated"
    ));
}

#[test]
fn flux_v2_policies_become_watches_where_their_markers_are() {
    let files = [
        fixture!("flux-v2/clusters/my-cluster/podinfo-automation.yaml"),
        fixture!("flux-v2/apps/podinfo/deployment.yaml"),
        fixture!("flux-v2/apps/app/kustomization.yaml"),
        fixture!("flux-v2/apps/redis/release.yaml"),
    ];
    let (inputs, imported) = import(&files, &Options::default());
    assert_eq!(imported.watches.len(), 3, "{:#?}", imported.notes);

    // A full-image marker on a container: a workload target.
    let podinfo = watch(&imported, "podinfo");
    assert_eq!(podinfo.metadata.namespace.as_deref(), Some("flux-system"));
    assert_eq!(podinfo.spec.image, "ghcr.io/stefanprodan/podinfo");
    assert_eq!(podinfo.spec.interval.as_deref(), Some("5m"));
    let target = podinfo.spec.target.workload.as_ref().unwrap();
    assert_eq!(
        (target.path.as_str(), target.container.as_str()),
        ("apps/podinfo", "podinfod")
    );
    let tags = podinfo.spec.tags.as_ref().unwrap();
    assert_eq!(tags.pattern.as_deref(), Some("semver:5.0.x"));
    // Flux's default exclusionList (^.*\.sig$) carried over as a glob.
    assert_eq!(tags.exclude.as_deref(), Some(&["*.sig".to_owned()][..]));
    let listing = listed(&["5.0.0", "5.0.3", "5.1.0", "5.0.4-rc.1", COSIGN, "latest"]);
    assert_eq!(chosen(podinfo, &listing).as_deref(), Some("5.0.3"));

    // A :tag marker on a kustomization image: a kustomize target; filterTags + extract +
    // numerical asc: the greatest extracted timestamp of main-* tags.
    let app = watch(&imported, "app-main");
    let kustomize = app.spec.target.kustomize.as_ref().unwrap();
    assert_eq!(kustomize.path, "apps/app");
    assert_eq!(kustomize.image.as_deref(), Some("ghcr.io/org/app"));
    let tags = app.spec.tags.as_ref().unwrap();
    assert_eq!(
        tags.pattern.as_deref(),
        Some("regex:^main-[a-fA-F0-9]+-(?P<ts>.*)")
    );
    assert_eq!(tags.extract.as_deref(), Some("$ts"));
    assert_eq!(tags.order, Some(TagOrder::Numerical));
    assert_eq!(
        app.spec
            .credentials
            .as_ref()
            .and_then(|c| c.secret_ref.as_ref())
            .map(|s| s.name.as_str()),
        Some("ghcr-auth")
    );
    let listing = listed(&[
        "main-abc1234-1606234201",
        "main-def5678-1606364286",
        "main-0a0b0c0-1606334092",
        "dev-1111111-1700000000",
        "feature-x-1800000000",
    ]);
    assert_eq!(
        chosen(app, &listing).as_deref(),
        Some("main-def5678-1606364286")
    );

    // A :tag marker in a one-document HelmRelease: its key path; alphabetical desc.
    let redis = watch(&imported, "redis");
    let helm = redis.spec.target.helm.as_ref().unwrap();
    assert_eq!(helm.file, "apps/redis/release.yaml");
    assert_eq!(helm.tag, "spec.values.image.tag");
    assert_eq!(
        redis.spec.tags.as_ref().unwrap().pick,
        Some(TagPick::Lowest)
    );
    let listing = listed(&["16.04", "16.04.1", "16.10", "20.04", "20.10"]);
    assert_eq!(chosen(redis, &listing).as_deref(), Some("16.04"));

    // A semver range with filterTags cannot be one pattern.
    assert!(has_note(
        &imported,
        "ImagePolicy flux-system/orphan",
        Severity::NotTranslated,
        "a watch has one pattern"
    ));

    // --rewrite-markers: the kustomization's two markers name the new watch.
    let rewrites = marker_rewrites(&inputs, &imported);
    let lines = &rewrites["apps/app/kustomization.yaml"];
    assert_eq!(
        lines,
        &BTreeMap::from([
            (7, "flux-system:app-main".to_owned()),
            (8, "flux-system:app-main".to_owned())
        ])
    );
    let text = files[2].1;
    let rewritten = rewrite_markers(text, lines).unwrap();
    assert!(rewritten.contains(
        "newTag: main-abc1234-1606234201 # {\"$imagewatch\": \"flux-system:app-main:tag\"}"
    ));
    assert!(!rewritten.contains("$imagepolicy"));
    assert_eq!(rewritten.lines().count(), text.lines().count());
}

#[test]
fn a_policy_without_markers_is_reported() {
    let (_, imported) = import(
        &[fixture!(
            "flux-v2/clusters/my-cluster/podinfo-automation.yaml"
        )],
        &Options::default(),
    );
    assert!(imported.watches.is_empty());
    assert!(has_note(
        &imported,
        "ImagePolicy flux-system/podinfo",
        Severity::NotTranslated,
        "no setter marker names this policy"
    ));
}

#[test]
fn argocd_image_updater_annotations_and_image_updaters_become_watches() {
    let (_, imported) = import(
        &[
            fixture!("argocd/applications.yaml"),
            fixture!("argocd/imageupdater.yaml"),
        ],
        &Options::default(),
    );

    // Seed 001's shape: kustomization write-back, git:secret, ignore-tags.
    let api = watch(&imported, "my-api-stg-api");
    assert_eq!(api.metadata.namespace.as_deref(), Some("my-api"));
    let kustomize = api.spec.target.kustomize.as_ref().unwrap();
    assert_eq!(kustomize.path, "apps/my-api/overlays/stg");
    let git = api.spec.git.as_ref().unwrap();
    assert_eq!(git.url, "https://github.com/org/manifests.git");
    assert_eq!(git.branch.as_deref(), Some("main"));
    assert_eq!(git.secret_ref.as_ref().unwrap().name, "git-creds");
    let tags = api.spec.tags.as_ref().unwrap();
    assert_eq!(tags.pattern.as_deref(), Some("semver:~1.2"));
    // The platforms annotation carries over as tags.platforms.
    assert_eq!(
        tags.platforms,
        Some(vec!["linux/amd64".to_string(), "linux/arm64".to_string()])
    );
    let listing = listed(&[
        "1.2.0",
        "1.2.7",
        "1.2.8-debug",
        "1.3.0",
        "latest",
        "1.2.9-rc.1",
        COSIGN,
    ]);
    assert_eq!(chosen(api, &listing).as_deref(), Some("1.2.7"));

    // The migration guide's Application: nginx's allow-tags with a constraint cannot be one
    // pattern; redis (latest = newest-build) writes helm values.
    assert!(has_note(
        &imported,
        "Application production-app",
        Severity::NotTranslated,
        "a watch has one pattern"
    ));
    let redis = watch(&imported, "production-app-redis");
    let helm = redis.spec.target.helm.as_ref().unwrap();
    assert_eq!(
        (helm.file.as_str(), helm.tag.as_str()),
        ("values.yaml", "image.tag")
    );
    assert_eq!(
        redis.spec.git.as_ref().map(|g| g.url.as_str()),
        Some("git@github.com:myorg/myrepo.git")
    );
    assert_eq!(
        redis.spec.tags.as_ref().unwrap().order,
        Some(TagOrder::Newest)
    );
    let listing = pushed_in_order(&["6.2.1", "7.0.0", "6.2.0"]);
    assert_eq!(chosen(redis, &listing).as_deref(), Some("6.2.0"));
    assert!(has_note(
        &imported,
        "image redis",
        Severity::Differs,
        "pull-secret"
    ));

    // Default write-back (argocd): the .argocd-source file; alphabetical among allowed tags.
    let guestbook = watch(&imported, "guestbook-gb");
    let source = guestbook.spec.target.argocd_source.as_ref().unwrap();
    assert_eq!(
        (source.path.as_str(), source.application.as_str()),
        ("guestbook", "guestbook")
    );
    assert_eq!(guestbook.spec.git.as_ref().unwrap().branch, None);
    // A platform that is not os/arch is reported and left out; the others carry over.
    assert_eq!(
        guestbook.spec.tags.as_ref().unwrap().platforms,
        Some(vec!["linux/arm/v7".to_string()])
    );
    assert!(has_note(
        &imported,
        "image gb",
        Severity::NotTranslated,
        "\"windows\" is not a platform"
    ));
    assert!(
        !imported
            .notes
            .iter()
            .any(|n| n.message.contains("platforms are not checked"))
    );
    let listing = listed(&["rel-1", "rel-9", "rel-10", "latest", "zz-debug"]);
    assert_eq!(chosen(guestbook, &listing).as_deref(), Some("rel-9"));

    // ImageUpdater: settings merged from spec, ref and image; helm values in the app's path.
    let myapp = watch(&imported, "my-app-myapp");
    let helm = myapp.spec.target.helm.as_ref().unwrap();
    assert_eq!(
        (helm.file.as_str(), helm.tag.as_str()),
        ("deploy/values.yaml", "image.tag")
    );
    assert_eq!(myapp.metadata.namespace.as_deref(), Some("my-app"));
    let listing = listed(&["0.9.0", "1.0.0", "1.0.4", "1.1.0"]);
    assert_eq!(chosen(myapp, &listing).as_deref(), Some("1.0.4"));
    let nginx = watch(&imported, "my-app-nginx");
    assert_eq!(
        nginx.spec.target.helm.as_ref().unwrap().tag,
        "nginx.image.tag"
    );
    // ImageUpdater's commonUpdateSettings.platforms.
    assert_eq!(
        nginx.spec.tags.as_ref().unwrap().platforms,
        Some(vec!["linux/amd64".to_string(), "linux/arm/v7".to_string()])
    );
    let listing = listed(&["1.26.0", "1.26.3", "1.26.99", "1.27.0"]);
    assert_eq!(chosen(nginx, &listing).as_deref(), Some("1.26.3"));
    assert!(has_note(
        &imported,
        "applicationRefs[1]",
        Severity::NotTranslated,
        "no imported Application matches"
    ));
}

#[test]
fn keel_policies_become_ranges_from_the_running_tag() {
    let (_, imported) = import(
        &[fixture!("keel/apps/deployments.yaml")],
        &Options::default(),
    );
    let wd = watch(&imported, "wd-wd");
    assert_eq!(
        wd.spec.tags.as_ref().unwrap().pattern.as_deref(),
        Some("semver:>=0.0.8 <1.0.0")
    );
    let listing = listed(&["0.0.8", "0.0.9", "0.1.0", "1.0.0", "0.2.0-rc.1"]);
    assert_eq!(chosen(wd, &listing).as_deref(), Some("0.1.0"));

    let db = watch(&imported, "db-postgres");
    assert_eq!(
        db.spec.target.workload.as_ref().unwrap().kind,
        "StatefulSet"
    );
    let listing = listed(&["16.2.0", "16.2.3", "16.3.0", "17.0.0"]);
    assert_eq!(chosen(db, &listing).as_deref(), Some("16.2.3"));

    // force + match-tag: the same tag, following its digest.
    let latest = watch(&imported, "latest-app-app");
    assert_eq!(latest.spec.pin.as_deref(), Some("latest"));
    assert_eq!(latest.spec.digest, Some(DigestMode::Follow));
}

#[test]
fn options_override_namespace_and_git_and_the_output_is_valid_yaml() {
    let options = Options {
        namespace: Some("team-a".into()),
        git: Some(GitSource {
            url: "https://git.example.com/org/manifests.git".into(),
            branch: Some("main".into()),
            secret_ref: None,
            push_branch: None,
            pull_request: None,
        }),
    };
    let (_, imported) = import(
        &[
            fixture!("flux-v1/apps/podinfo/deployment.yaml"),
            fixture!("keel/apps/deployments.yaml"),
        ],
        &options,
    );
    assert!(!imported.watches.is_empty());
    for w in &imported.watches {
        assert_eq!(w.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(w.spec.git, options.git);
    }
    let yaml = render(&imported.watches).unwrap();
    let back: Vec<ImageWatch> = serde_saphyr::from_multiple(&yaml).unwrap();
    assert_eq!(back.len(), imported.watches.len());
    for (a, b) in back.iter().zip(&imported.watches) {
        assert_eq!(a.spec, b.spec);
        assert_eq!(a.metadata.name, b.metadata.name);
    }
    assert!(yaml.contains("apiVersion: imagewatch.dev/v1alpha1"));
    assert!(!yaml.contains("status"));
    let report = render_report(&imported);
    assert!(report.starts_with(&format!("imported {} watch(es)", imported.watches.len())));
}

#[test]
fn names_are_kubernetes_names_and_unique() {
    assert_eq!(object_name(&["My_App", "web.1"]), "my-app-web-1");
    assert_eq!(object_name(&["", "--"]), "imported");
    assert_eq!(object_name(&[&"a".repeat(80)]).len(), 63);
    let target = Target {
        workload: None,
        kustomize: None,
        helm: None,
        argocd_source: None,
    };
    let mut watches: Vec<ImageWatch> = (0..3)
        .map(|_| {
            WatchDraft::new("web".into(), "x/y".into(), target.clone()).build(&Options::default())
        })
        .collect();
    dedupe_names(&mut watches);
    let names: Vec<_> = watches
        .iter()
        .filter_map(|w| w.metadata.name.clone())
        .collect();
    assert_eq!(names, ["web", "web-2", "web-3"]);
}

#[test]
fn simple_regex_exclusions_have_globs() {
    assert_eq!(regex_as_glob(r"^.*\.sig$").as_deref(), Some("*.sig"));
    assert_eq!(regex_as_glob("^dev-.*").as_deref(), Some("dev-*"));
    assert_eq!(regex_as_glob("latest").as_deref(), Some("*latest*"));
    assert_eq!(regex_as_glob("^v[0-9]+$"), None);
    assert_eq!(star_glob("master-*"), "master-*");
    assert_eq!(star_glob("v1.?-*"), r"regex:^v1\.\?\-.*$");
}
