//! Pattern watches on the real parts: one ImageWatch whose image has `*` path segments follows
//! every matching repository, writing each into the target its captures name (`$1..$n`).
//!
//! - A CNCF distribution registry (its own, notifying the operator's webhook receiver):
//!   members found through `GET /v2/_catalog`, one commit for all of them, a new repository
//!   joining on its push event, a member without a target reported on itself.
//! - ECR in moto: members found through `DescribeRepositories`, `hoge/*/*/*` written to
//!   `services/$1/$2/$3/overlays/stg`, as in the field report.

use imagewatch::registry::{Credentials, RegistryClient, RegistryOptions, TagPaging};
use imagewatch_crd::{ImageWatch, imagewatch::MemberStatus};
use imagewatch_e2e::{
    NotifyingRegistry,
    ground::{GitServer, random_suffix},
    setup::{Scenario, TIMEOUT, moto, moto_credentials, ready, webhook_scenario},
    wait_until,
};

fn members(w: &ImageWatch) -> Vec<MemberStatus> {
    w.status
        .as_ref()
        .map(|s| s.members.clone())
        .unwrap_or_default()
}

/// Waits until the watch's Ready condition has `status` and `reason` and `check` holds.
async fn wait_watch(
    s: &Scenario,
    name: &str,
    what: &str,
    check: impl Fn(&ImageWatch) -> bool,
) -> anyhow::Result<ImageWatch> {
    wait_until(what, TIMEOUT, || async {
        let w = s.watches.get(name).await?;
        Ok(check(&w).then_some(w))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", s.operator.log_tail(40)))
}

fn deployment(name: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {image}   # bumped by imagewatch\n"
    )
}

const APPS: [&str; 3] = ["alpha", "beta", "gamma"];

/// What the steps share: the registry, the manifests repository and the scenario.
struct Patterns {
    registry: NotifyingRegistry,
    /// The registry's `host:port`.
    host: String,
    git: GitServer,
    repo_name: String,
    /// The manifests repository's URL.
    url: String,
    s: Scenario,
}

impl Patterns {
    /// The ImageWatch `name` following `host/svc/*/api` into the Deployment `$1-api` at `path`.
    fn watch(&self, name: &str, path: &str) -> String {
        let Self { host, url, s, .. } = self;
        format!(
            r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: {name}, namespace: {ns}}}
spec:
  image: "{host}/svc/*/api"
  tags: {{pattern: "v*"}}
  interval: 1h
  credentials: {{secretRef: {{name: hookreg}}}}
  git: {{url: "{url}", secretRef: {{name: git-creds}}}}
  target:
    workload: {{path: "{path}", kind: Deployment, name: "$1-api", container: api}}
"#,
            ns = s.ns.name
        )
    }
}

#[tokio::test]
async fn a_pattern_follows_every_matching_repository_of_a_distribution_registry()
-> anyhow::Result<()> {
    let (registry, host, s, _) = webhook_scenario("pattern", &[]).await?;
    step_push_three_services_and_an_unmatched_repository(&registry)?;
    step_the_catalog_is_read_in_pages_of_two(&registry, &host).await?;
    let (git, repo_name, url) = step_seed_git_with_v1_for_every_service(&s, &host)?;
    let c = Patterns {
        registry,
        host,
        git,
        repo_name,
        url,
        s,
    };
    step_one_commit_moves_the_three_services(&c).await?;
    step_a_new_repository_becomes_a_member_at_once(&c).await?;
    step_a_members_push_still_moves_that_member(&c).await?;
    step_a_reference_to_a_missing_capture_is_refused(&c).await?;
    step_the_apiserver_refuses_a_star_in_the_host_or_inside_a_segment(&c)
}

/// Three services and one repository the pattern does not match.
fn step_push_three_services_and_an_unmatched_repository(
    registry: &NotifyingRegistry,
) -> anyhow::Result<()> {
    for app in APPS {
        registry.script("push-image.sh", &[&format!("svc/{app}/api:v1.0.0")])?;
        registry.script("push-image.sh", &[&format!("svc/{app}/api:v1.1.0")])?;
    }
    registry.script("push-image.sh", &["svc/alpha/worker:v9.0.0"])?;
    Ok(())
}

/// The catalog, read in pages of two (following the registry's `Link` headers).
async fn step_the_catalog_is_read_in_pages_of_two(
    registry: &NotifyingRegistry,
    host: &str,
) -> anyhow::Result<()> {
    let (user, password) = (
        registry.var("IMAGEWATCH_REGISTRY_USER"),
        registry.var("IMAGEWATCH_REGISTRY_PASSWORD"),
    );
    // The catalog, read in pages of two (following the registry's `Link` headers).
    let client = RegistryClient::with_paging(
        RegistryOptions {
            insecure_hosts: vec![host.to_string()],
            ..RegistryOptions::default()
        },
        TagPaging {
            page_size: Some(2),
            max_pages: 10,
        },
    )?;
    let (names, pages) = client
        .list_repositories_paged(host, &Credentials::basic(&user, &password))
        .await?;
    assert_eq!(
        names,
        vec![
            "svc/alpha/api",
            "svc/alpha/worker",
            "svc/beta/api",
            "svc/gamma/api"
        ]
    );
    assert!(
        pages >= 2,
        "four names in pages of two, read in {pages} page(s)"
    );
    Ok(())
}

/// Git holds v1.0.0 for every service, each in its own overlay; returns the server, the
/// repository's name and its URL.
fn step_seed_git_with_v1_for_every_service(
    s: &Scenario,
    host: &str,
) -> anyhow::Result<(GitServer, String, String)> {
    let seed = tempfile::tempdir()?;
    for app in APPS {
        let dir = seed.path().join(format!("apps/{app}/overlays/stg"));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("deployment.yaml"),
            deployment(
                &format!("{app}-api"),
                &format!("{host}/svc/{app}/api:v1.0.0"),
            ),
        )?;
    }
    let git = s.ground.git()?;
    let repo_name = format!("pattern-{}", s.ns.name);
    let url = git.new_repo(&repo_name, seed.path())?;

    Ok((git, repo_name, url))
}

/// One commit moves the three services; the status lists them, all ready.
async fn step_one_commit_moves_the_three_services(c: &Patterns) -> anyhow::Result<()> {
    let Patterns {
        host,
        git,
        repo_name,
        s,
        ..
    } = c;
    s.apply(&c.watch("services", "apps/$1/overlays/stg"))?;

    // One commit moves the three services; the status lists them, all ready.
    let w = s.wait_ready("services", "True", "Updated").await?;
    let status = w.status.clone().expect("status");
    assert_eq!(status.member_count, Some(3));
    assert_eq!(status.members_ready, Some(3));
    let listed = members(&w);
    assert_eq!(
        listed
            .iter()
            .map(|m| (m.repository.as_str(), m.applied.as_deref(), m.ready))
            .collect::<Vec<_>>(),
        vec![
            ("svc/alpha/api", Some("v1.1.0"), true),
            ("svc/beta/api", Some("v1.1.0"), true),
            ("svc/gamma/api", Some("v1.1.0"), true),
        ]
    );
    assert_eq!(listed[1].captures, vec!["beta"]);
    assert_eq!(
        git.commit_count(repo_name, "main")?,
        2,
        "one commit for all"
    );
    let head = git.git(repo_name, &["rev-parse", "main"])?;
    assert!(
        listed
            .iter()
            .all(|m| m.commit.as_deref() == Some(head.trim()))
    );
    let touched = git.git(repo_name, &["show", "--name-only", "--format=", "main"])?;
    let mut touched: Vec<&str> = touched.lines().filter(|l| !l.is_empty()).collect();
    touched.sort();
    assert_eq!(
        touched,
        vec![
            "apps/alpha/overlays/stg/deployment.yaml",
            "apps/beta/overlays/stg/deployment.yaml",
            "apps/gamma/overlays/stg/deployment.yaml",
        ]
    );
    for app in APPS {
        assert_eq!(
            git.show(
                repo_name,
                "main",
                &format!("apps/{app}/overlays/stg/deployment.yaml")
            )?,
            deployment(
                &format!("{app}-api"),
                &format!("{host}/svc/{app}/api:v1.1.0")
            ),
            "only the tag changed"
        );
    }
    let table = s
        .ground
        .kubectl(&["get", "iw", "services", "-n", &s.ns.name, "-o", "wide"])?;
    assert!(table.contains("MEMBERS"), "{table}");
    let explain = s
        .ground
        .kubectl(&["explain", "imagewatch.status.members"])?;
    assert!(
        explain.contains("captures") && explain.contains("What each `*` of `spec.image` matched"),
        "{explain}"
    );
    Ok(())
}

/// A new repository: its push event (the watch polls only hourly) makes it a member at
/// once. Git has no overlay for it, which is reported on that member; the others stay.
async fn step_a_new_repository_becomes_a_member_at_once(c: &Patterns) -> anyhow::Result<()> {
    let Patterns {
        registry,
        git,
        repo_name,
        s,
        ..
    } = c;
    registry.script("push-image.sh", &["svc/delta/api:v1.0.0"])?;
    let w = wait_watch(s, "services", "svc/delta/api reported", |w| {
        w.status.as_ref().and_then(|st| st.member_count) == Some(4)
    })
    .await?;
    let (state, reason, message) = ready(&w).expect("Ready");
    assert_eq!(
        (state.as_str(), reason.as_str()),
        ("False", "MembersNotReady")
    );
    assert!(
        message.starts_with("1 of 4 members not ready: svc/delta/api: TargetNotFound"),
        "{message}"
    );
    let delta = members(&w)
        .into_iter()
        .find(|m| m.repository == "svc/delta/api")
        .expect("delta listed");
    assert!(!delta.ready);
    assert_eq!(delta.latest.as_deref(), Some("v1.0.0"));
    assert!(
        delta
            .message
            .as_deref()
            .is_some_and(|m| m.contains("apps/delta/overlays/stg")),
        "{delta:?}"
    );
    assert_eq!(members(&w).iter().filter(|m| m.ready).count(), 3);
    assert_eq!(git.commit_count(repo_name, "main")?, 2);
    Ok(())
}

/// A member's push still moves that member.
async fn step_a_members_push_still_moves_that_member(c: &Patterns) -> anyhow::Result<()> {
    let Patterns {
        registry,
        git,
        repo_name,
        s,
        ..
    } = c;
    registry.script("push-image.sh", &["svc/beta/api:v1.2.0"])?;
    let w = wait_watch(s, "services", "svc/beta/api applied v1.2.0", |w| {
        members(w)
            .iter()
            .any(|m| m.repository == "svc/beta/api" && m.applied.as_deref() == Some("v1.2.0"))
    })
    .await?;
    assert_eq!(git.commit_count(repo_name, "main")?, 3);
    assert!(
        git.show(repo_name, "main", "apps/beta/overlays/stg/deployment.yaml")?
            .contains("svc/beta/api:v1.2.0")
    );
    assert_eq!(
        ready(&w).map(|r| r.1).as_deref(),
        Some("MembersNotReady"),
        "delta still has no target"
    );
    Ok(())
}

/// `$n` must name a capture the image has: refused before anything is read.
async fn step_a_reference_to_a_missing_capture_is_refused(c: &Patterns) -> anyhow::Result<()> {
    let Patterns { host, s, .. } = c;
    s.apply(&c.watch("bad-reference", "apps/$2/overlays/stg"))?;
    let bad = s
        .wait_ready("bad-reference", "False", "InvalidSpec")
        .await?;
    let message = ready(&bad).map(|r| r.2).unwrap_or_default();
    assert_eq!(
        message,
        format!(
            "spec.target.workload.path \"apps/$2/overlays/stg\" refers to $2, but spec.image \"{host}/svc/*/api\" has 1 '*' segment ($1)"
        )
    );
    Ok(())
}

/// The apiserver refuses a '*' in the host or inside a segment.
fn step_the_apiserver_refuses_a_star_in_the_host_or_inside_a_segment(
    c: &Patterns,
) -> anyhow::Result<()> {
    let Patterns { host, s, .. } = c;
    for image in [
        format!("{host}/svc-*/api"),
        "*.example.com/svc/api".to_string(),
    ] {
        let yaml = c
            .watch("refused", "apps/x")
            .replace(&format!("\"{host}/svc/*/api\""), &format!("\"{image}\""));
        let (ok, out) = s.ground.kubectl_try(&["apply", "-f", "-"], Some(&yaml))?;
        assert!(!ok, "{image} accepted");
        assert!(
            out.contains("stands for one whole path segment"),
            "{image}: {out}"
        );
    }
    Ok(())
}

fn kustomization(image: &str, tag: &str) -> String {
    format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../../base\nimages:\n  - name: {image}\n    newTag: {tag} # staging\n"
    )
}

#[tokio::test]
async fn an_ecr_pattern_enumerates_repositories_with_describe_repositories() -> anyhow::Result<()> {
    let ground = imagewatch_e2e::Ground::get()?;
    let moto_url = ground.var("IMAGEWATCH_MOTO_URL")?.to_string();
    let aws_env = moto_credentials(ground)?;
    // moto is shared by every test: this test's repositories have their own first segment.
    let top = format!("hoge-{}", random_suffix());
    let registry = "123456789012.dkr.ecr.us-east-1.amazonaws.com";
    let services = [("billing", "api", "stg"), ("search", "web", "stg")];
    for (a, b, c) in services {
        let repo = format!("{top}/{a}/{b}/{c}");
        moto(&["create-repository", &repo], &aws_env)?;
        moto(&["put-image", &repo, "abc1234"], &aws_env)?;
        moto(&["put-image", &repo, "def5678"], &aws_env)?;
        moto(&["put-image", &repo, "latest"], &aws_env)?;
    }
    // Not a member: one segment short.
    moto(
        &["create-repository", &format!("{top}/billing/api")],
        &aws_env,
    )?;

    let env: Vec<(&str, &str)> = aws_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let s =
        Scenario::start_with_env("ecrpattern", &["--aws-endpoint-url", &moto_url], &env).await?;
    let seed = tempfile::tempdir()?;
    for (a, b, c) in services {
        let dir = seed
            .path()
            .join(format!("services/{a}/{b}/{c}/overlays/stg"));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("kustomization.yaml"),
            kustomization(&format!("{registry}/{top}/{a}/{b}/{c}"), "abc1234"),
        )?;
    }
    let git = s.ground.git()?;
    let repo_name = format!("ecrpattern-{}", s.ns.name);
    let url = git.new_repo(&repo_name, seed.path())?;
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: hoge, namespace: {ns}}}
spec:
  image: "{registry}/{top}/*/*/*"
  tags:
    pattern: "regex:^[0-9a-f]{{7,40}}$"
    exclude: [latest]
    order: Newest
  interval: 1h
  credentials: {{provider: aws}}
  git: {{url: "{url}", secretRef: {{name: git-creds}}}}
  target:
    kustomize: {{path: "services/$1/$2/$3/overlays/stg"}}
"#,
        ns = s.ns.name
    ))?;

    let w = s.wait_ready("hoge", "True", "Updated").await?;
    let listed = members(&w);
    assert_eq!(
        listed
            .iter()
            .map(|m| (m.repository.clone(), m.captures.clone(), m.applied.clone()))
            .collect::<Vec<_>>(),
        services
            .iter()
            .map(|(a, b, c)| (
                format!("{top}/{a}/{b}/{c}"),
                vec![a.to_string(), b.to_string(), c.to_string()],
                Some("def5678".to_string())
            ))
            .collect::<Vec<_>>()
    );
    assert_eq!(w.status.as_ref().and_then(|st| st.member_count), Some(2));
    assert_eq!(
        git.commit_count(&repo_name, "main")?,
        2,
        "one commit for both"
    );
    for (a, b, c) in services {
        assert_eq!(
            git.show(
                &repo_name,
                "main",
                &format!("services/{a}/{b}/{c}/overlays/stg/kustomization.yaml")
            )?,
            kustomization(&format!("{registry}/{top}/{a}/{b}/{c}"), "def5678"),
            "only newTag changed, its comment kept"
        );
    }
    let message = git.git(&repo_name, &["log", "-1", "--format=%B", "main"])?;
    assert!(
        message.starts_with("imagewatch: update 2 images"),
        "{message}"
    );
    Ok(())
}
