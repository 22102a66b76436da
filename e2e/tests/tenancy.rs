//! Tenants stay in their lane: one operator serves several namespaces (tenants), and nothing
//! one tenant's credentials fetched is shown to another; the CRDs refuse Secret names that are
//! paths and Git URLs that are not network remotes; a namespaced install can read nothing
//! outside its namespaces; the admin's allow-list refuses what a namespace may not use.
//!
//! Every test runs the real operator binary under the chart's RBAC (rendered with
//! `watchNamespaces`), against the ground's apiserver, registry and git server (which serves
//! nothing without credentials: a watch without a git Secret cannot read it).

use std::time::Duration;

use imagewatch_crd::{ImageWatch, PromotionPolicy};
use imagewatch_e2e::{
    Ground, Operator, TestNamespace,
    argocd::{AppGuard, ArgoCd},
    ground::{GitServer, Registry, random_suffix},
    operator::metric,
    setup::{create_git_secret, create_secret, ready},
    wait_until,
};
use kube::{Api, Client};

const TIMEOUT: Duration = Duration::from_secs(90);

fn watch_yaml(ns: &str, name: &str, git: &str, secret_ref: &str) -> String {
    format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: {name}, namespace: {ns}}}
spec:
  image: registry.example.com/my-api
  git: {{url: "{git}"{secret_ref}}}
  target:
    workload: {{path: apps/x, kind: Deployment, name: x, container: x}}
"#
    )
}

#[tokio::test]
async fn secret_names_and_git_urls_are_checked_at_apply() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground.install_crds()?;
    let ns = TestNamespace::create(ground, "tenant-apply").await?;
    let refused = [
        (
            "https://git.example.com/org/m.git",
            ", secretRef: {name: team-b/b-git}",
            "secretRef.name",
        ),
        (
            "https://git.example.com/org/m.git",
            ", secretRef: {name: ../..}",
            "secretRef.name",
        ),
        (
            "https://git.example.com/org/m.git",
            ", secretRef: {name: Git-Creds}",
            "secretRef.name",
        ),
        ("file:///var/cache/imagewatch/git/x", "", "file://"),
        ("/var/cache/imagewatch/git/x", "", "file://"),
        ("ext::sh -c touch% /tmp/pwned", "", "file://"),
        ("git://git.example.com/org/m.git", "", "file://"),
        ("https://-oProxyCommand=x/m.git", "", "file://"),
        (
            "http://127.0.0.1:8080/m.git",
            "",
            "http:// (credentials and content in the clear)",
        ),
        (
            "HTTP://git.example.com/org/m.git",
            "",
            "http:// (credentials",
        ),
    ];
    for (i, (url, secret_ref, expected)) in refused.iter().enumerate() {
        let yaml = watch_yaml(&ns.name, &format!("bad-{i}"), url, secret_ref);
        let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&yaml))?;
        assert!(!ok, "{url} {secret_ref}: was accepted");
        assert!(out.contains(expected), "{url} {secret_ref}: {out}");
    }
    let accepted = [
        "https://git.example.com/org/m.git",
        "https://127.0.0.1:8443/m.git",
        "ssh://git@git.example.com:2222/org/m.git",
        "git@github.com:org/m.git",
    ];
    for (i, url) in accepted.iter().enumerate() {
        let yaml = watch_yaml(
            &ns.name,
            &format!("good-{i}"),
            url,
            ", secretRef: {name: git-creds.v2}",
        );
        let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&yaml))?;
        assert!(ok, "{url}: refused: {out}");
    }
    // A PromotionPolicy's target repository follows the same rule.
    for (i, (url, accept)) in [
        ("http://git.example.com/org/m.git", false),
        ("file:///var/cache/imagewatch/git/x", false),
        ("https://git.example.com/org/m.git", true),
    ]
    .iter()
    .enumerate()
    {
        let yaml = format!(
            r#"apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata: {{name: policy-{i}, namespace: {ns}}}
spec:
  from: {{watchSelector: {{matchLabels: {{app: my-api}}}}}}
  to:
    git: {{url: "{url}", branch: main}}
    path: overlays/production
  mode: Commit
"#,
            ns = ns.name
        );
        let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&yaml))?;
        assert_eq!(ok, *accept, "PromotionPolicy with {url}: {out}");
        if !accept {
            assert!(out.contains("spec.to.git.url"), "{url}: {out}");
        }
    }
    Ok(())
}

/// Three namespaces (the operator's, team-a's, team-b's) and an Argo CD namespace; the
/// operator runs as its ServiceAccount under the chart's RBAC rendered with
/// `watchNamespaces: [team-a, team-b]`.
struct Tenants {
    ground: &'static Ground,
    op: TestNamespace,
    a: TestNamespace,
    b: TestNamespace,
    /// The ground's real Argo CD (its namespace holds the Applications and AppProjects).
    argocd: ArgoCd,
    operator: Operator,
    account: String,
}

impl Tenants {
    async fn start(extra: &[&str], set: &[&str]) -> anyhow::Result<Self> {
        let ground = Ground::get()?;
        ground.install_crds()?;
        // The ground's real Argo CD: its Applications and AppProjects, its controller.
        let argocd = ArgoCd::get(ground)?;
        let op = TestNamespace::create(ground, "tenant-op").await?;
        let a = TestNamespace::create(ground, "team-a").await?;
        let b = TestNamespace::create(ground, "team-b").await?;
        let release = format!("iw-{}", op.name);
        let watched = format!("watchNamespaces={{{},{}}}", a.name, b.name);
        let argocd_ns = format!("argocd.namespace={}", argocd.namespace);
        let mut values = vec![watched.as_str(), argocd_ns.as_str()];
        values.extend(set);
        ground.install_chart_rbac_with(&release, &op.name, &values)?;
        let account = format!("{release}-imagewatch");
        let (kubeconfig, _) = op.service_account(ground, &account).await?;
        let admin = ground.admin().await?;
        let registry = ground.registry()?;
        for ns in [&a.name, &b.name] {
            create_secret(
                &admin,
                ns,
                "regcred",
                "kubernetes.io/dockerconfigjson",
                &[(".dockerconfigjson", &registry.dockerconfigjson())],
            )
            .await?;
        }
        let namespaces = format!("{},{}", a.name, b.name);
        let mut flags = vec![
            "--insecure-registry",
            registry.host.as_str(),
            "--namespace",
            namespaces.as_str(),
            "--argocd-namespace",
            argocd.namespace.as_str(),
            "--pod-namespace",
            op.name.as_str(),
            "--git-read-reuse",
            "60s",
        ];
        let extra: Vec<String> = extra
            .iter()
            .map(|e| e.replace("{account}", &account))
            .collect();
        flags.extend(extra.iter().map(String::as_str));
        let operator = Operator::start(ground, &op.name, &kubeconfig, &flags)?;
        Ok(Self {
            ground,
            op,
            a,
            b,
            argocd,
            operator,
            account,
        })
    }

    fn apply(&self, yaml: &str) -> anyhow::Result<()> {
        let (ok, out) = self.ground.kubectl_try(&["apply", "-f", "-"], Some(yaml))?;
        anyhow::ensure!(ok, "kubectl apply failed: {out}");
        Ok(())
    }

    async fn wait_reason(&self, ns: &str, name: &str, reason: &str) -> anyhow::Result<ImageWatch> {
        let api: Api<ImageWatch> = Api::namespaced(self.ground.admin().await?, ns);
        wait_until(&format!("{ns}/{name} reason {reason}"), TIMEOUT, || async {
            let w = api.get(name).await?;
            Ok(ready(&w).filter(|(_, r, _)| r == reason).map(|_| w))
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", self.operator.log_tail(40)))
    }

    /// `kubectl auth can-i` as the operator's ServiceAccount.
    fn can_i(&self, args: &[&str]) -> anyhow::Result<bool> {
        let who = format!("system:serviceaccount:{}:{}", self.op.name, self.account);
        let mut all = vec!["auth", "can-i", "--as", who.as_str()];
        all.extend(args);
        let (_, out) = self.ground.kubectl_try(&all, None)?;
        Ok(out.trim_start().starts_with("yes"))
    }
}

/// A seed repository whose Deployment runs `image:v1.0.0`, with a marker line only its
/// readers can know.
fn seed(image: &str, marker: &str) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let apps = dir.path().join("apps/b");
    std::fs::create_dir_all(&apps)?;
    std::fs::write(
        apps.join("deployment.yaml"),
        format!(
            "# {marker}\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {image}:v1.0.0\n"
        ),
    )?;
    Ok(dir)
}

/// What team-b owns and team-a must never see: its private repository (content marker and
/// head commit included) and its Argo CD Applications.
struct TeamB {
    /// The image team-b's watch follows.
    image: String,
    /// A string only team-b's file holds.
    marker: String,
    repo: String,
    url: String,
    /// The repository's head commit.
    head: String,
    /// The Application in Argo CD's namespace.
    b_app: String,
    /// The Application in team-b's own namespace.
    b_own: String,
}

/// The target of every watch in these tenancy steps.
const TARGET: &str =
    "target: {workload: {path: apps/b, kind: Deployment, name: api, container: api}}";

#[tokio::test]
async fn a_tenant_never_sees_another_tenants_repository() -> anyhow::Result<()> {
    let t = Tenants::start(&[], &[]).await?;
    step_the_namespaced_install_reads_secrets_in_its_namespaces_only(&t)?;
    let git = t.ground.git()?;
    let admin = t.ground.admin().await?;
    let tb = step_team_b_watches_a_private_repository(&t, &git, &admin).await?;
    let _apps = step_team_b_has_argo_cd_applications(&t, &tb)?;
    let (by_url, mut seen) = step_team_a_reaching_for_it_is_refused(&t, &tb).await?;
    step_a_gate_naming_team_bs_application_shows_nothing(&t, &tb, &git, &admin, &mut seen).await?;
    step_nothing_of_team_b_reaches_team_a(&t, &tb, &by_url, seen)?;
    step_team_b_is_still_served_and_its_repository_unchanged(&t, &tb, &git).await
}

/// Namespaced install: the ServiceAccount reads Secrets in its namespaces only, and nothing
/// at cluster scope.
fn step_the_namespaced_install_reads_secrets_in_its_namespaces_only(
    t: &Tenants,
) -> anyhow::Result<()> {
    let (a, b) = (t.a.name.clone(), t.b.name.clone());
    assert!(t.can_i(&["get", "secrets", "-n", &a])?);
    assert!(t.can_i(&["list", "imagewatches.imagewatch.dev", "-n", &b])?);
    assert!(!t.can_i(&["get", "secrets", "-n", "default"])?);
    assert!(!t.can_i(&["get", "secrets", "-n", &t.argocd.namespace])?);
    assert!(!t.can_i(&["list", "imagewatches.imagewatch.dev", "--all-namespaces"])?);
    assert!(!t.can_i(&["get", "secrets", "--all-namespaces"])?);
    assert!(!t.can_i(&["create", "events.events.k8s.io", "-n", "default"])?);
    Ok(())
}

/// team-b: a private repository, read and written with team-b's credentials.
async fn step_team_b_watches_a_private_repository(
    t: &Tenants,
    git: &GitServer,
    admin: &Client,
) -> anyhow::Result<TeamB> {
    let b = t.b.name.clone();
    let registry = t.ground.registry()?;
    let image_repo = format!("e2e/tenant-{}", random_suffix());
    registry.push(&image_repo, "v1.0.0")?;
    let image = format!("{}/{image_repo}", registry.host);
    let marker = format!("team-b-secret-{}", random_suffix());
    let repo = format!("tenant-b-{}", random_suffix());
    let url = git.new_repo(&repo, seed(&image, &marker)?.path())?;
    let head = git.git(&repo, &["rev-parse", "main"])?.trim().to_string();
    create_git_secret(admin, &b, git).await?;
    let target = TARGET;
    t.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: b-api, namespace: {b}}}
spec:
  image: {image}
  credentials: {{secretRef: {{name: regcred}}}}
  git: {{url: "{url}", secretRef: {{name: git-creds}}}}
  {target}
"#
    ))?;
    t.wait_reason(&b, "b-api", "UpToDate").await?;
    let (b_app, b_own) = (
        format!("b-app-{}", random_suffix()),
        format!("b-own-{}", random_suffix()),
    );
    Ok(TeamB {
        image,
        marker,
        repo,
        url,
        head,
        b_app,
        b_own,
    })
}

/// team-b's Argo CD Applications: one in Argo CD's namespace, one in team-b's own.
fn step_team_b_has_argo_cd_applications(t: &Tenants, tb: &TeamB) -> anyhow::Result<AppGuard> {
    let b = t.b.name.clone();
    let TeamB {
        url, b_app, b_own, ..
    } = tb;
    let mut apps = String::new();
    for (app_ns, name) in [(t.argocd.namespace.as_str(), &b_app), (b.as_str(), &b_own)] {
        apps.push_str(&format!(
            r#"---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {{name: {name}, namespace: {app_ns}}}
spec:
  project: default
  source: {{repoURL: "{url}", targetRevision: HEAD, path: ""}}
  destination: {{server: "https://kubernetes.default.svc", namespace: {b}}}
"#
        ));
    }
    let apps = t.argocd.apply(&apps, &[b_app.as_str()])?;
    Ok(apps)
}

/// team-a, without credentials for that repository: by URL, and by naming team-b's
/// Applications in a tracking annotation (both forms) or an instance label. Returns the
/// watch by URL and every status team-a was shown.
async fn step_team_a_reaching_for_it_is_refused(
    t: &Tenants,
    tb: &TeamB,
) -> anyhow::Result<(ImageWatch, Vec<String>)> {
    let (a, b) = (t.a.name.clone(), t.b.name.clone());
    let TeamB {
        image,
        repo,
        url,
        b_app,
        b_own,
        ..
    } = tb;
    let target = TARGET;
    let watch = |name: &str, meta: &str, git: &str| {
        format!(
            r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata:
  name: {name}
  namespace: {a}
{meta}
spec:
  image: {image}
  credentials: {{secretRef: {{name: regcred}}}}
{git}
  {target}
"#
        )
    };
    t.apply(&watch("by-url", "", &format!("  git: {{url: \"{url}\"}}")))?;
    t.apply(&watch(
        "by-annotation",
        &format!(
            "  annotations: {{argocd.argoproj.io/tracking-id: \"{b_app}:imagewatch.dev/ImageWatch:{a}/by-annotation\"}}"
        ),
        "",
    ))?;
    t.apply(&watch(
        "by-namespaced-annotation",
        &format!(
            "  annotations: {{argocd.argoproj.io/tracking-id: \"{b}_{b_own}:imagewatch.dev/ImageWatch:{a}/x\"}}"
        ),
        "",
    ))?;
    t.apply(&watch(
        "by-label",
        &format!("  labels: {{app.kubernetes.io/instance: {b_app}}}"),
        "",
    ))?;

    let by_url = t.wait_reason(&a, "by-url", "GitError").await?;
    let mut seen = vec![serde_json::to_string(&by_url.status)?];
    for name in ["by-annotation", "by-namespaced-annotation", "by-label"] {
        let w = t.wait_reason(&a, name, "NotAllowed").await?;
        let status = serde_json::to_string(&w.status)?;
        assert!(
            !status.contains(url.as_str()),
            "{name} shows team-b's URL: {status}"
        );
        assert!(
            !status.contains(repo.as_str()),
            "{name} shows team-b's repository: {status}"
        );
        seen.push(status);
    }
    Ok((by_url, seen))
}

/// A PromotionPolicy of team-a (in its own repository) whose application gate names
/// team-b's Application: answered as if it did not exist, nothing of it shown.
async fn step_a_gate_naming_team_bs_application_shows_nothing(
    t: &Tenants,
    tb: &TeamB,
    git: &GitServer,
    admin: &Client,
    seen: &mut Vec<String>,
) -> anyhow::Result<()> {
    let a = t.a.name.clone();
    let b_app = &tb.b_app;
    let a_dir = tempfile::tempdir()?;
    for (overlay, tag) in [("staging", "v2.0.0"), ("production", "v1.0.0")] {
        let path = a_dir.path().join("overlays").join(overlay);
        std::fs::create_dir_all(&path)?;
        std::fs::write(
            path.join("kustomization.yaml"),
            format!(
                "resources: []\nimages:\n- name: api\n  newName: registry.example.com/api\n  newTag: {tag}\n"
            ),
        )?;
    }
    let a_repo = format!("tenant-a-{}", random_suffix());
    let a_url = git.new_repo(&a_repo, a_dir.path())?;
    create_git_secret(admin, &a, git).await?;
    t.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata: {{name: borrow-gate, namespace: {a}}}
spec:
  from: {{path: overlays/staging}}
  to:
    git: {{url: "{a_url}", branch: main, secretRef: {{name: git-creds}}}}
    path: overlays/production
  gates:
    application: {{name: {b_app}, namespace: {argocd}}}
  mode: Commit
  interval: 10s
"#,
        argocd = t.argocd.namespace
    ))?;
    let policies: Api<PromotionPolicy> = Api::namespaced(admin.clone(), &a);
    let gated = wait_until("borrow-gate's application gate", TIMEOUT, || async {
        let p = policies.get("borrow-gate").await?;
        let c = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "GatesPassing"))
            .cloned();
        Ok(c.filter(|c| c.reason == "ApplicationNotHealthy")
            .map(|c| (c.message, p)))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", t.operator.log_tail(40)))?;
    assert!(
        gated
            .0
            .contains("does not exist or does not deploy to this namespace"),
        "{}",
        gated.0
    );
    assert_eq!(git.commit_count(&a_repo, "main")?, 1, "nothing promoted");
    seen.push(serde_json::to_string(&gated.1.status)?);
    Ok(())
}

/// The Events of team-a's namespace, once every watch has reported, and everything else
/// team-a was shown hold nothing of team-b's repository.
fn step_nothing_of_team_b_reaches_team_a(
    t: &Tenants,
    tb: &TeamB,
    by_url: &ImageWatch,
    mut seen: Vec<String>,
) -> anyhow::Result<()> {
    let a = t.a.name.clone();
    let TeamB { marker, head, .. } = tb;
    seen.push(
        t.ground
            .kubectl(&["get", "events.events.k8s.io", "-n", &a, "-o", "json"])?,
    );
    for text in &seen {
        assert!(
            !text.contains(marker.as_str()),
            "team-b's file content shown to team-a: {text}"
        );
        assert!(
            !text.contains(head.as_str()),
            "team-b's head commit shown to team-a: {text}"
        );
        assert!(
            !text.contains(&head[..12]),
            "team-b's head commit shown to team-a: {text}"
        );
    }
    let by_url_status = serde_json::to_value(&by_url.status)?;
    assert!(by_url_status["applied"].is_null(), "{by_url_status}");
    Ok(())
}

/// team-b is still served, and team-a's attempts changed nothing in team-b's repository.
async fn step_team_b_is_still_served_and_its_repository_unchanged(
    t: &Tenants,
    tb: &TeamB,
    git: &GitServer,
) -> anyhow::Result<()> {
    let b = t.b.name.clone();
    let repo = &tb.repo;
    t.wait_reason(&b, "b-api", "UpToDate").await?;
    assert_eq!(git.commit_count(repo, "main")?, 1);
    Ok(())
}

#[tokio::test]
async fn the_allow_list_refuses_what_a_namespace_may_not_use() -> anyhow::Result<()> {
    // The chart's name for the ConfigMap, <fullname>-allow: its RBAC grants that one.
    let t = Tenants::start(
        &["--allow-list-configmap", "{account}-allow"],
        &["allowList.enabled=true"],
    )
    .await?;
    let registry = t.ground.registry()?;
    let git = t.ground.git()?;
    let admin = t.ground.admin().await?;
    step_team_a_may_use_its_repository_under_apps_a_only(&t, &git, &registry, &admin).await?;
    step_watches_outside_the_rules_are_refused_and_read_nothing(&t).await?;
    step_a_gate_asking_ecr_with_the_operators_identity_is_refused(&t, &git, &admin).await?;
    step_a_widened_rule_is_picked_up_without_touching_the_watch(&t, &git, &registry).await
}

/// The allow-list ConfigMap (the chart's name, `<fullname>-allow`): team-a may use the
/// ground's git server under `paths` and the registry's `e2e` prefix; team-b has no rule.
fn allow_list(t: &Tenants, git: &GitServer, registry: &Registry, paths: &str) -> String {
    let configmap = format!("{}-allow", t.account);
    let a = &t.a.name;
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: {configmap}, namespace: {op}}}
data:
  allow.yaml: |
    rules:
      - name: team-a-rule
        namespaces: [{a}]
        git: [{{urlPrefix: "{prefix}", paths: [{paths}]}}]
        registries: ["{host}/e2e"]
"#,
        op = t.op.name,
        prefix = git.base_url,
        host = registry.host
    )
}

/// team-a may use its repository, but only under apps/a; team-b has no rule. Each applies a
/// watch writing under apps/b.
async fn step_team_a_may_use_its_repository_under_apps_a_only(
    t: &Tenants,
    git: &GitServer,
    registry: &Registry,
    admin: &Client,
) -> anyhow::Result<()> {
    let (a, b) = (t.a.name.clone(), t.b.name.clone());
    let image_repo = format!("e2e/allow-{}", random_suffix());
    registry.push(&image_repo, "v1.0.0")?;
    let image = format!("{}/{image_repo}", registry.host);
    let repo = format!("allow-a-{}", random_suffix());
    let url = git.new_repo(&repo, seed(&image, "team-a")?.path())?;
    create_git_secret(admin, &a, git).await?;
    t.apply(&allow_list(t, git, registry, "apps/a"))?;
    let watch = |ns: &str, name: &str| {
        format!(
            r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: {name}, namespace: {ns}}}
spec:
  image: {image}
  credentials: {{secretRef: {{name: regcred}}}}
  git: {{url: "{url}", secretRef: {{name: git-creds}}}}
  target: {{workload: {{path: apps/b, kind: Deployment, name: api, container: api}}}}
"#
        )
    };
    t.apply(&watch(&a, "api"))?;
    t.apply(&watch(&b, "api"))?;
    Ok(())
}

/// Both watches are refused (NotAllowed) naming the rule or its absence, nothing is read,
/// and the refusals are Events and metrics.
async fn step_watches_outside_the_rules_are_refused_and_read_nothing(
    t: &Tenants,
) -> anyhow::Result<()> {
    let (a, b) = (t.a.name.clone(), t.b.name.clone());
    let w = t.wait_reason(&a, "api", "NotAllowed").await?;
    let message = ready(&w).map(|r| r.2).unwrap_or_default();
    assert!(
        message.contains("team-a-rule") && message.contains("apps/b"),
        "{message}"
    );
    let w = t.wait_reason(&b, "api", "NotAllowed").await?;
    let message = ready(&w).map(|r| r.2).unwrap_or_default();
    assert!(
        message.contains(&b) && message.contains("no rule"),
        "{message}"
    );
    // Nothing was read: no clone of the repository in the operator's cache.
    let clones = std::fs::read_dir(t.operator.cache_dir.join("git"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(clones, 0, "a refused watch left a clone");
    let events = t
        .ground
        .kubectl(&["get", "events.events.k8s.io", "-n", &a, "-o", "json"])?;
    assert!(events.contains("NotAllowed"), "{events}");
    let metrics = t.operator.metrics().await?;
    assert!(
        metric(
            &metrics,
            "imagewatch_not_allowed_total{kind=\"ImageWatch\",check=\"path\"}"
        ) >= 1.0,
        "{metrics}"
    );
    assert!(
        metric(
            &metrics,
            "imagewatch_not_allowed_total{kind=\"ImageWatch\",check=\"namespace\"}"
        ) >= 1.0,
        "{metrics}"
    );
    Ok(())
}

/// A PromotionPolicy of team-a whose imageExists gate would read an ECR repository with
/// the operator's AWS identity: the rule allows neither that registry nor the identity,
/// so nothing is asked of ECR and nothing is written.
async fn step_a_gate_asking_ecr_with_the_operators_identity_is_refused(
    t: &Tenants,
    git: &GitServer,
    admin: &Client,
) -> anyhow::Result<()> {
    let a = t.a.name.clone();
    // A PromotionPolicy of team-a whose imageExists gate would read an ECR repository with
    // the operator's AWS identity: the rule allows neither that registry nor the identity,
    // so nothing is asked of ECR and nothing is written.
    let ecr = "123456789012.dkr.ecr.us-east-1.amazonaws.com/team-b/api";
    let promo_dir = tempfile::tempdir()?;
    for (overlay, tag) in [("staging", "v2.0.0"), ("production", "v1.0.0")] {
        let path = promo_dir.path().join("apps/a").join(overlay);
        std::fs::create_dir_all(&path)?;
        std::fs::write(
            path.join("kustomization.yaml"),
            format!("resources: []\nimages:\n- name: api\n  newName: {ecr}\n  newTag: {tag}\n"),
        )?;
    }
    let promo_repo = format!("allow-promo-{}", random_suffix());
    let promo_url = git.new_repo(&promo_repo, promo_dir.path())?;
    t.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata: {{name: ecr-gate, namespace: {a}}}
spec:
  from: {{path: apps/a/staging}}
  to:
    git: {{url: "{promo_url}", branch: main, secretRef: {{name: git-creds}}}}
    path: apps/a/production
  gates: {{imageExists: true}}
  mode: Commit
  interval: 10s
"#
    ))?;
    let policies: Api<PromotionPolicy> = Api::namespaced(admin.clone(), &a);
    let refused = wait_until("ecr-gate NotAllowed", TIMEOUT, || async {
        let p = policies.get("ecr-gate").await?;
        Ok(p.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
            .filter(|c| c.reason == "NotAllowed")
            .map(|c| c.message.clone()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", t.operator.log_tail(40)))?;
    assert!(
        refused.contains("team-a-rule") && refused.contains("operator's AWS identity"),
        "{refused}"
    );
    assert_eq!(
        git.commit_count(&promo_repo, "main")?,
        1,
        "nothing promoted"
    );
    let metrics = t.operator.metrics().await?;
    assert!(
        metric(
            &metrics,
            "imagewatch_not_allowed_total{kind=\"PromotionPolicy\",check=\"aws\"}"
        ) >= 1.0,
        "{metrics}"
    );
    Ok(())
}

/// The admin widens the rule: the change is picked up without touching the watch.
async fn step_a_widened_rule_is_picked_up_without_touching_the_watch(
    t: &Tenants,
    git: &GitServer,
    registry: &Registry,
) -> anyhow::Result<()> {
    let (a, b) = (t.a.name.clone(), t.b.name.clone());
    // The admin widens the rule: the change is picked up without touching the watch.
    t.apply(&allow_list(t, git, registry, "apps/a, apps/b"))?;
    t.wait_reason(&a, "api", "UpToDate").await?;
    assert_eq!(
        ready(&t.wait_reason(&b, "api", "NotAllowed").await?).map(|r| r.0),
        Some("False".to_string())
    );
    Ok(())
}

/// Puts `files` (path, content) into a new repository of the ground's git server named
/// `name`; returns its URL.
fn repository(git: &GitServer, name: &str, files: &[(String, String)]) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    for (path, content) in files {
        let file = dir.path().join(path);
        std::fs::create_dir_all(file.parent().unwrap_or(dir.path()))?;
        std::fs::write(file, content)?;
    }
    git.new_repo(name, dir.path())
}

/// A kustomize overlay whose only image is `registry.example.com/api:<tag>`.
fn overlay(tag: &str) -> String {
    format!(
        "resources: []\nimages:\n- name: api\n  newName: registry.example.com/api\n  newTag: {tag}\n"
    )
}

/// An AppProject of the ground's Argo CD: `sourceRepos`, one destination namespace.
fn app_project(argocd: &ArgoCd, name: &str, source_repos: &str, namespace: &str) -> String {
    format!(
        r#"---
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata: {{name: {name}, namespace: {argo}}}
spec:
  sourceRepos: [{source_repos}]
  destinations: [{{server: "https://kubernetes.default.svc", namespace: {namespace}}}]
"#,
        argo = argocd.namespace
    )
}

/// An Application of `project` deploying `path` of `url` into `namespace` (synced by Argo CD
/// when `automated`).
fn project_application(
    argocd: &ArgoCd,
    name: &str,
    project: &str,
    url: &str,
    path: &str,
    namespace: &str,
    automated: bool,
) -> String {
    let sync = if automated {
        "\n  syncPolicy: {automated: {prune: true}}"
    } else {
        ""
    };
    format!(
        r#"---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {{name: {name}, namespace: {argo}}}
spec:
  project: {project}
  source: {{repoURL: "{url}", targetRevision: main, path: {path}}}
  destination: {{server: "https://kubernetes.default.svc", namespace: {namespace}}}{sync}
"#,
        argo = argocd.namespace
    )
}

/// The allow-list ConfigMap taking Git allowances from Argo CD AppProjects.
fn project_allow_list(t: &Tenants) -> String {
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: {account}-allow, namespace: {op}}}
data:
  allow.yaml: |
    gitFrom: ArgocdProject
    rules: [{{name: registries, namespaceSelector: {{}}, registries: ["*"]}}]
"#,
        account = t.account,
        op = t.op.name,
    )
}

/// With `gitFrom: ArgocdProject`, a watch may use the Git repositories of the `sourceRepos` of
/// the AppProject whose Application manages it. The real Argo CD syncs the watches from Git
/// into team-a under AppProject `team-a-*` and writes their tracking annotations.
#[tokio::test]
async fn the_argocd_project_mode_takes_git_allowances_from_the_app_project() -> anyhow::Result<()> {
    let t = Tenants::start(
        &["--allow-list-configmap", "{account}-allow"],
        &["allowList.enabled=true"],
    )
    .await?;
    let (a, sfx) = (t.a.name.clone(), random_suffix());
    let registry = t.ground.registry()?;
    let git = t.ground.git()?;
    let admin = t.ground.admin().await?;
    let image_repo = format!("e2e/project-{sfx}");
    registry.push(&image_repo, "v1.0.0")?;
    let image = format!("{}/{image_repo}", registry.host);
    let allowed = git.new_repo(&format!("proj-allowed-{sfx}"), seed(&image, "a")?.path())?;
    let other = git.new_repo(&format!("proj-other-{sfx}"), seed(&image, "a")?.path())?;
    create_git_secret(&admin, &a, &git).await?;
    let watch = |name: &str, url: &str| {
        format!(
            r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: {name}}}
spec:
  image: {image}
  credentials: {{secretRef: {{name: regcred}}}}
  git: {{url: "{url}", secretRef: {{name: git-creds}}}}
  target: {{workload: {{path: apps/b, kind: Deployment, name: api, container: api}}}}
"#
        )
    };
    // team-a's watches live in a repository of its project; Argo CD syncs them.
    let config = repository(
        &git,
        &format!("proj-allowed-config-{sfx}"),
        &[
            ("watches/in.yaml".into(), watch("in-project", &allowed)),
            ("watches/out.yaml".into(), watch("outside-project", &other)),
        ],
    )?;
    t.argocd
        .add_git_repository(&format!("proj-config-{sfx}"), &config)?;
    let (project, app) = (format!("team-a-{sfx}"), format!("a-app-{sfx}"));
    t.apply(&project_allow_list(&t))?;
    let _app = t.argocd.apply(
        &format!(
            "{}{}",
            app_project(
                &t.argocd,
                &project,
                &format!("\"{}/proj-allowed-*\"", git.base_url),
                &a
            ),
            project_application(&t.argocd, &app, &project, &config, "watches", &a, true)
        ),
        &[&app],
    )?;
    // One watch Argo CD does not manage, applied by hand.
    t.apply(&watch("unmanaged", &allowed).replace(
        "metadata: {name: unmanaged}",
        &format!("metadata: {{name: unmanaged, namespace: {a}}}"),
    ))?;

    let w = t.wait_reason(&a, "in-project", "UpToDate").await?;
    let tracking = w
        .metadata
        .annotations
        .unwrap_or_default()
        .get("argocd.argoproj.io/tracking-id")
        .cloned()
        .unwrap_or_default();
    assert!(
        tracking.starts_with(&format!("{app}:imagewatch.dev/ImageWatch:{a}/in-project")),
        "the tracking annotation Argo CD wrote: {tracking:?}"
    );
    let w = t.wait_reason(&a, "outside-project", "NotAllowed").await?;
    let message = ready(&w).map(|r| r.2).unwrap_or_default();
    assert!(
        message.contains("sourceRepos") && message.contains(&format!("AppProject {project}")),
        "{message}"
    );
    let w = t.wait_reason(&a, "unmanaged", "NotAllowed").await?;
    let message = ready(&w).map(|r| r.2).unwrap_or_default();
    assert!(
        message.contains("no Argo CD Application manages"),
        "{message}"
    );
    let metrics = t.operator.metrics().await?;
    assert!(
        metric(
            &metrics,
            "imagewatch_not_allowed_total{kind=\"ImageWatch\",check=\"argocd_project\"}"
        ) >= 2.0,
        "{metrics}"
    );
    Ok(())
}

/// With `gitFrom: ArgocdProject`, a PromotionPolicy's target path is admitted only when every
/// Argo CD Application deploying it goes to a destination of the AppProject of the
/// Application managing the policy. Argo CD syncs the policies from Git (AppProject
/// `team-a-*`); team-b's Application, in AppProject `team-b-*`, deploys another overlay.
#[tokio::test]
async fn the_argocd_project_mode_checks_a_promotion_target_against_its_destinations()
-> anyhow::Result<()> {
    let t = Tenants::start(
        &["--allow-list-configmap", "{account}-allow"],
        &["allowList.enabled=true", "allowList.gitFrom=ArgocdProject"],
    )
    .await?;
    anyhow::ensure!(
        t.can_i(&[
            "list",
            "applications.argoproj.io",
            "-n",
            &t.argocd.namespace
        ])?,
        "the chart grants list on Applications in Argo CD's namespace for gitFrom: ArgocdProject"
    );
    let (a, b, sfx) = (t.a.name.clone(), t.b.name.clone(), random_suffix());
    let git = t.ground.git()?;
    let name = format!("dest-allowed-{sfx}");
    // The policies' repository is the one they promote in (their own files in meta/).
    let repo_url = format!("{}/{name}.git", git.base_url);
    let policy = |policy: &str, to: &str| {
        format!(
            r#"apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata: {{name: {policy}}}
spec:
  from: {{path: overlays/staging}}
  to:
    git: {{url: "{repo_url}", branch: main, secretRef: {{name: git-creds}}}}
    path: {to}
  mode: Commit
  interval: 10s
"#
        )
    };
    let url = repository(
        &git,
        &name,
        &[
            (
                "overlays/staging/kustomization.yaml".into(),
                overlay("v2.0.0"),
            ),
            (
                "overlays/production/kustomization.yaml".into(),
                overlay("v1.0.0"),
            ),
            (
                "overlays/team-b/kustomization.yaml".into(),
                overlay("v1.0.0"),
            ),
            (
                "meta/to-own.yaml".into(),
                policy("to-own", "overlays/production"),
            ),
            (
                "meta/to-other.yaml".into(),
                policy("to-other", "overlays/team-b"),
            ),
        ],
    )?;
    anyhow::ensure!(url == repo_url, "{url} != {repo_url}");
    create_git_secret(&t.ground.admin().await?, &a, &git).await?;
    t.argocd.add_git_repository(&format!("dest-{sfx}"), &url)?;
    let (team_a, team_b) = (format!("team-a-{sfx}"), format!("team-b-{sfx}"));
    let (meta, a_prd, b_prd) = (
        format!("a-meta-{sfx}"),
        format!("a-prd-{sfx}"),
        format!("b-prd-{sfx}"),
    );
    t.apply(&project_allow_list(&t))?;
    let repos = format!("\"{}/dest-allowed-*\"", git.base_url);
    let _apps = t.argocd.apply(
        &[
            app_project(&t.argocd, &team_a, &repos, &a),
            app_project(&t.argocd, &team_b, &repos, &b),
            project_application(&t.argocd, &meta, &team_a, &url, "meta", &a, true),
            project_application(
                &t.argocd,
                &a_prd,
                &team_a,
                &url,
                "overlays/production",
                &a,
                false,
            ),
            project_application(
                &t.argocd,
                &b_prd,
                &team_b,
                &url,
                "overlays/team-b",
                &b,
                false,
            ),
        ]
        .concat(),
        &[&meta, &a_prd, &b_prd],
    )?;
    let api: Api<PromotionPolicy> = Api::namespaced(t.ground.admin().await?, &a);
    let wait = |name: &'static str, reason: &'static str| {
        let api = api.clone();
        async move {
            wait_until(
                &format!("{name} Ready reason {reason}"),
                TIMEOUT,
                || async {
                    let Some(p) = api.get_opt(name).await? else {
                        anyhow::bail!("not synced by Argo CD yet");
                    };
                    let c = p
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
                        .cloned();
                    Ok(c.filter(|c| c.reason == reason))
                },
            )
            .await
        }
    };
    wait("to-own", "Committed")
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", t.operator.log_tail(40)))?;
    let refused = wait("to-other", "NotAllowed")
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", t.operator.log_tail(40)))?;
    assert!(
        refused
            .message
            .contains(&format!("destinations of Argo CD AppProject {team_a}")),
        "{}",
        refused.message
    );
    assert!(
        git.show(&name, "main", "overlays/team-b/kustomization.yaml")?
            .contains("newTag: v1.0.0"),
        "team-b's overlay untouched"
    );
    assert!(
        git.show(&name, "main", "overlays/production/kustomization.yaml")?
            .contains("newTag: v2.0.0")
    );
    Ok(())
}
