//! Preview environments for real (field report 004): an ApplicationSet with the pull-request
//! generator on a real Gitea makes one Application per pull request labelled `preview`. The
//! preview's kustomize base carries its ImageWatch; the ApplicationSet's template names it
//! and points it at the pull request's tags (`pr-<number>-<sha>`, pushed by CI). imagewatch
//! writes each new tag into the preview's `.argocd-source-<application>.yaml`, Argo CD
//! deploys it and the node runs it. Closing the pull request removes the Application, its
//! Deployment and its watch; imagewatch lets go without an error or a commit.

use imagewatch_crd::{ImageWatch, conditions::DEPLOYED};
use imagewatch_e2e::{
    Ground,
    argocd::{ArgoCd, SYNC_TIMEOUT},
    gitea::{ADMIN, Gitea},
    ground::random_suffix,
    node::{node_deployment, wait_pod_ready_with},
    operator::metric,
    setup::{Scenario, TIMEOUT, create_secret, node_scenario},
    wait_until,
};
use kube::Api;

/// The preview's kustomize base in the application's repository.
fn base(image: &str, git_url: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "deploy/preview/kustomization.yaml",
            "resources: [deployment.yaml, imagewatch.yaml]\n".into(),
        ),
        (
            "deploy/preview/deployment.yaml",
            node_deployment("web", &format!("{image}:main")),
        ),
        (
            "deploy/preview/imagewatch.yaml",
            format!(
                r#"# The ApplicationSet's template sets the pattern and the Application per preview.
apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata:
  name: web
spec:
  image: {image}
  tags: {{pattern: "pr-0-*", order: Newest}}
  interval: 1h
  credentials: {{secretRef: {{name: hookreg}}}}
  git: {{url: "{git_url}", secretRef: {{name: gitea-git}}}}
  target:
    argocdSource: {{path: deploy/preview, application: preview-0}}
"#
            ),
        ),
    ]
}

/// Deletes the ApplicationSet (and so its Applications) when dropped.
struct SetGuard {
    ground: &'static Ground,
    namespace: String,
    name: String,
}

impl Drop for SetGuard {
    fn drop(&mut self) {
        let _ = self.ground.kubectl_try(
            &[
                "delete",
                "applicationsets.argoproj.io",
                &self.name,
                "-n",
                &self.namespace,
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        );
    }
}

/// The ApplicationSet of the previews: one Application `preview-<sfx>-<number>` per pull
/// request of `repo` (on the Gitea at `api`) labelled `preview`, deploying the base with
/// the pull request's name suffix, label, tag pattern and Application name.
#[allow(clippy::too_many_arguments)]
fn application_set(
    argocd: &ArgoCd,
    set_name: &str,
    sfx: &str,
    repo: &str,
    api: &str,
    token_secret: &str,
    git_url: &str,
    namespace: &str,
) -> String {
    let (owner, name) = repo.split_once('/').unwrap_or((ADMIN, repo));
    format!(
        r#"apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {{name: {set_name}, namespace: {argo}}}
spec:
  generators:
  - pullRequest:
      gitea:
        owner: {owner}
        repo: {name}
        api: {api}
        tokenRef: {{secretName: {token_secret}, key: token}}
        labels: [preview]
      requeueAfterSeconds: 2
  template:
    metadata:
      name: 'preview-{sfx}-{{{{number}}}}'
      finalizers: [resources-finalizer.argocd.argoproj.io]
    spec:
      project: default
      source:
        repoURL: "{git_url}"
        targetRevision: main
        path: deploy/preview
        kustomize:
          nameSuffix: '-pr-{{{{number}}}}'
          commonLabels: {{preview: 'pr-{{{{number}}}}'}}
          patches:
          - target: {{kind: ImageWatch}}
            patch: |-
              - {{op: replace, path: /spec/tags/pattern, value: 'pr-{{{{number}}}}-*'}}
              - {{op: replace, path: /spec/target/argocdSource/application, value: 'preview-{sfx}-{{{{number}}}}'}}
      destination: {{server: "https://kubernetes.default.svc", namespace: {ns}}}
      syncPolicy: {{automated: {{prune: true}}}}
"#,
        argo = argocd.namespace,
        ns = namespace,
    )
}

#[tokio::test]
async fn an_application_set_preview_per_pull_request_follows_its_tags() -> anyhow::Result<()> {
    let (registry, host, s, argocd) = node_scenario("argo-pv").await?;
    let mut gitea = Gitea::start().await?;
    gitea.serve_git_over_https(s.ground)?;
    let image_repo = format!("argo/web-{}", random_suffix());
    let image = format!("{host}/{image_repo}");
    let push = |tag: &str| {
        registry.script(
            "push-image.sh",
            &["--runnable", &format!("{image_repo}:{tag}")],
        )
    };
    push("main")?;

    // The application's repository: its preview base on main, and two pull requests, one
    // labelled `preview`.
    let repo = gitea.create_repo("web").await?;
    let git_url = gitea.git_url(&repo);
    for (path, content) in base(&image, &git_url) {
        gitea.put_file(&repo, path, &content, "main", None).await?;
    }
    let label = gitea.create_label(&repo, "preview").await?;
    let head_a = gitea
        .put_file(&repo, "src/a.txt", "feature a\n", "feature-a", Some("main"))
        .await?;
    gitea
        .put_file(&repo, "src/b.txt", "feature b\n", "feature-b", Some("main"))
        .await?;
    // CI builds the pull request's head before it is labelled.
    push(&format!("pr-1-{}", &head_a[..7]))?;
    let pr = gitea
        .open_pull(&repo, "feature-a", "main", "Feature A", &[label])
        .await?;
    anyhow::ensure!(pr == 1, "the first pull request is #{pr}");
    let unlabelled = gitea
        .open_pull(&repo, "feature-b", "main", "Feature B", &[])
        .await?;

    create_secret(
        &s.admin,
        &s.ns.name,
        "gitea-git",
        "Opaque",
        &[("username", ADMIN), ("password", &gitea.token)],
    )
    .await?;
    let sfx = random_suffix();
    let token_secret = format!("gitea-{sfx}");
    s.ground.kubectl(&[
        "create",
        "secret",
        "generic",
        &token_secret,
        "-n",
        &argocd.namespace,
        &format!("--from-literal=token={}", gitea.token),
    ])?;
    s.ground.kubectl(&[
        "label",
        "secret",
        &token_secret,
        "-n",
        &argocd.namespace,
        "argocd.argoproj.io/secret-type=scm-creds",
    ])?;
    let set_name = format!("previews-{sfx}");
    let app_of = |n: i64| format!("preview-{sfx}-{n}");
    argocd.apply(
        &application_set(
            &argocd,
            &set_name,
            &sfx,
            &repo,
            &gitea.url,
            &token_secret,
            &git_url,
            &s.ns.name,
        ),
        &[],
    )?;
    let _set = SetGuard {
        ground: s.ground,
        namespace: argocd.namespace.clone(),
        name: set_name.clone(),
    };

    // One Application, for the labelled pull request; its Pod runs the pull request's image.
    let apps = argocd.applications(&s.admin);
    argocd
        .wait_synced_healthy(&s.admin, &app_of(pr), None)
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n--- Gitea ---\n{}", gitea.log_tail()))?;
    assert!(
        apps.get_opt(&app_of(unlabelled)).await?.is_none(),
        "no preview for the unlabelled pull request"
    );
    let watch = format!("web-pr-{pr}");
    let selector = format!("preview=pr-{pr}");
    wait_pod_ready_with(
        &s.admin,
        &s.ns.name,
        &selector,
        &format!("{image}:pr-1-{}", &head_a[..7]),
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n--- operator ---\n{}", s.operator.log_tail(40)))?;
    let file = format!("deploy/preview/.argocd-source-{}.yaml", app_of(pr));
    let written = gitea.file(&repo, "main", &file).await?;
    assert!(
        written.contains(&format!("- {image}="))
            && written.contains(&format!(":pr-1-{}", &head_a[..7])),
        "{written}"
    );

    // A new commit on the pull request: CI pushes its image, the preview runs it.
    let head_a2 = gitea
        .put_file(&repo, "src/a.txt", "feature a, again\n", "feature-a", None)
        .await?;
    let tag2 = format!("pr-1-{}", &head_a2[..7]);
    push(&tag2)?;
    s.wait_applied(&watch, &tag2).await?;
    wait_pod_ready_with(&s.admin, &s.ns.name, &selector, &format!("{image}:{tag2}")).await?;
    let deployed = wait_until("the preview Deployed", TIMEOUT, || async {
        let w: ImageWatch = s.watches.get(&watch).await?;
        let c = w
            .status
            .as_ref()
            .and_then(|st| st.conditions.iter().find(|c| c.type_ == DEPLOYED))
            .cloned();
        Ok(c.filter(|c| c.status == "True"))
    })
    .await?;
    assert!(
        deployed.message.contains(&app_of(pr)),
        "{}",
        deployed.message
    );

    let last_tag = format!("pr-1-{}", &"f".repeat(7));
    close_and_let_go(&s, &gitea, &repo, pr, &app_of(pr), &watch, || {
        push(&last_tag)
    })
    .await
}

/// The pull request closes: the Application, its Deployment and its watch go; a later push
/// for it is ignored, nothing is committed for it and nothing fails.
async fn close_and_let_go(
    s: &Scenario,
    gitea: &Gitea,
    repo: &str,
    pr: i64,
    app: &str,
    watch: &str,
    push: impl Fn() -> anyhow::Result<String>,
) -> anyhow::Result<()> {
    let apps = ArgoCd::get(s.ground)?.applications(&s.admin);
    let head = gitea.branch_head(repo, "main").await?;
    gitea.close_pull(repo, pr).await?;
    wait_until("the preview Application removed", SYNC_TIMEOUT, || async {
        Ok(apps.get_opt(app).await?.is_none().then_some(()))
    })
    .await?;
    let watches: Api<ImageWatch> = Api::namespaced(s.admin.clone(), &s.ns.name);
    wait_until("the preview's watch removed", TIMEOUT, || async {
        Ok(watches.get_opt(watch).await?.is_none().then_some(()))
    })
    .await?;
    // CI pushes once more for the closed pull request: the notification arrives and is
    // ignored, since no watch follows the tag any more.
    let ignored = r#"imagewatch_events_total{source="distribution",outcome="ignored"}"#;
    let before = metric(&s.operator.metrics().await?, ignored);
    push()?;
    wait_until("the last push ignored", TIMEOUT, || async {
        let now = metric(&s.operator.metrics().await?, ignored);
        Ok((now > before).then_some(()))
    })
    .await?;
    // imagewatch's Warning Events only: the preview's Pods being deleted may draw the
    // kubelet's own.
    let warnings = s.ground.kubectl(&[
        "get",
        "events",
        "-n",
        &s.ns.name,
        "--field-selector",
        "type=Warning,involvedObject.kind=ImageWatch",
        "-o",
        "name",
    ])?;
    assert!(warnings.trim().is_empty(), "Warning Events: {warnings}");
    assert_eq!(
        gitea.branch_head(repo, "main").await?,
        head,
        "no commit after the pull request closed"
    );
    let metrics = s.operator.metrics().await?;
    assert!(
        !metrics
            .lines()
            .any(|l| l.starts_with("imagewatch_reconcile_errors_total") && !l.ends_with(" 0")),
        "{metrics}"
    );
    Ok(())
}
