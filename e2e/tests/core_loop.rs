//! The core loop end to end on the real apiserver, registry and git server, with the operator
//! running as a process under the chart's ServiceAccount and RBAC:
//! two watches on one image drive two Deployments independently (canary-* / primary-*).

use std::{path::Path, time::Duration};

use imagewatch_crd::{ImageWatch, conditions::READY};
use imagewatch_e2e::{
    Ground, Operator, TestNamespace, ground::random_suffix, ground::repo_root, wait_until,
};
use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{
    Api, Client,
    api::{DeleteParams, ObjectMeta, PostParams},
};

const TIMEOUT: Duration = Duration::from_secs(90);

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &dest)?;
        } else {
            std::fs::copy(entry.path(), dest)?;
        }
    }
    Ok(())
}

/// Seeds a repository from the sample, with the sample's registry host replaced by ours.
fn seed_repo(ground: &Ground, name: &str, image: &str) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    copy_dir(
        &repo_root().join("samples/canary-primary/manifests"),
        dir.path(),
    )?;
    for file in ["deployment-canary.yaml", "deployment-primary.yaml"] {
        let path = dir.path().join("apps/my-api/overlays/stg").join(file);
        let text = std::fs::read_to_string(&path)?
            .replace("registry.example.com/my-api:", &format!("{image}:"));
        std::fs::write(&path, text)?;
    }
    ground.git()?.new_repo(name, dir.path())
}

/// The sample's watches, pointed at our registry, repository and Secrets.
fn sample_watches(
    ns: &str,
    registry: &str,
    image_repo: &str,
    git_url: &str,
) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(repo_root().join("samples/canary-primary/imagewatches.yaml"))?;
    Ok(text
        .replace("namespace: my-api", &format!("namespace: {ns}"))
        .replace(
            "registry.example.com/my-api",
            &format!("{registry}/{image_repo}"),
        )
        .replace("https://git.example.com/org/manifests.git", git_url)
        .replace("interval: 1m", "interval: 10s"))
}

async fn secret(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
    data: &[(&str, &str)],
) -> anyhow::Result<()> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    api.create(
        &PostParams::default(),
        &Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            type_: Some(type_.into()),
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Default::default()
        },
    )
    .await?;
    Ok(())
}

fn ready(w: &ImageWatch) -> Option<(String, String, String)> {
    let c = w
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == READY)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn wait_ready_reason(
    api: &Api<ImageWatch>,
    name: &str,
    status: &str,
    reason: &str,
    op: &Operator,
) -> anyhow::Result<ImageWatch> {
    let got = wait_until(
        &format!("{name} Ready={status} reason={reason}"),
        TIMEOUT,
        || async {
            let w = api.get(name).await?;
            Ok(ready(&w)
                .filter(|(s, r, _)| s == status && r == reason)
                .map(|_| w))
        },
    )
    .await;
    got.map_err(|e| {
        anyhow::anyhow!(
            "{e}\nstatus: {:?}\n--- operator log ---\n{}",
            "",
            op.log_tail(40)
        )
    })
}

async fn wait_applied(
    api: &Api<ImageWatch>,
    name: &str,
    tag: &str,
    op: &Operator,
) -> anyhow::Result<ImageWatch> {
    wait_until(&format!("{name} applied {tag}"), TIMEOUT, || async {
        let w = api.get(name).await?;
        let applied = w
            .status
            .as_ref()
            .and_then(|s| s.applied.as_ref())
            .map(|a| a.tag.clone());
        Ok((applied.as_deref() == Some(tag)).then_some(w))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", op.log_tail(40)))
}

#[tokio::test]
async fn canary_and_primary_follow_their_own_tags() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground.install_crds()?;
    let ns = TestNamespace::create(ground, "core").await?;
    let admin = ground.admin().await?;
    let registry = ground.registry()?;
    let git = ground.git()?;

    // The operator runs with exactly the chart's RBAC.
    let release = format!("iw-{}", ns.name);
    ground.install_chart_rbac(&release, &ns.name)?;
    let (kubeconfig, _) = ns
        .service_account(ground, &format!("{release}-imagewatch"))
        .await?;

    let image_repo = format!("e2e/my-api-{}", random_suffix());
    registry.push(&image_repo, "canary-v1.2.3")?;
    registry.push(&image_repo, "primary-v1.2.3")?;
    let repo_name = format!("manifests-{}", ns.name);
    let git_url = seed_repo(
        ground,
        &repo_name,
        &format!("{}/{image_repo}", registry.host),
    )?;

    secret(
        &admin,
        &ns.name,
        "regcred",
        "kubernetes.io/dockerconfigjson",
        &[(".dockerconfigjson", &registry.dockerconfigjson())],
    )
    .await?;
    secret(
        &admin,
        &ns.name,
        "git-creds",
        "Opaque",
        &[("username", &git.user), ("token", &git.token)],
    )
    .await?;

    let mut op = Operator::start(
        ground,
        &ns.name,
        &kubeconfig,
        &[
            "--insecure-registry",
            &registry.host,
            "--namespace",
            &ns.name,
        ],
    )?;
    let watches = sample_watches(&ns.name, &registry.host, &image_repo, &git_url)?;
    let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&watches))?;
    assert!(ok, "{out}");
    let api: Api<ImageWatch> = Api::namespaced(admin.clone(), &ns.name);

    // Git already holds the newest tags: both Ready, no commit.
    wait_ready_reason(&api, "my-api-canary", "True", "UpToDate", &op).await?;
    wait_ready_reason(&api, "my-api-primary", "True", "UpToDate", &op).await?;
    assert_eq!(git.commit_count(&repo_name, "main")?, 1);
    let dir = "apps/my-api/overlays/stg";
    let primary_before = git.show(
        &repo_name,
        "main",
        &format!("{dir}/deployment-primary.yaml"),
    )?;
    let canary_before = git.show(&repo_name, "main", &format!("{dir}/deployment-canary.yaml"))?;

    // canary-v1.2.4 → only the canary Deployment changes, in one commit.
    registry.push(&image_repo, "canary-v1.2.4")?;
    let canary = wait_applied(&api, "my-api-canary", "canary-v1.2.4", &op).await?;
    assert_eq!(ready(&canary).map(|r| r.1), Some("Updated".to_string()));
    assert_eq!(git.commit_count(&repo_name, "main")?, 2);
    let canary_after = git.show(&repo_name, "main", &format!("{dir}/deployment-canary.yaml"))?;
    assert_eq!(
        canary_after,
        canary_before.replace(":canary-v1.2.3", ":canary-v1.2.4"),
        "only the tag changed, comment and layout kept"
    );
    assert_eq!(
        git.show(
            &repo_name,
            "main",
            &format!("{dir}/deployment-primary.yaml")
        )?,
        primary_before
    );
    let message = git.git(&repo_name, &["log", "-1", "--format=%an%n%B", "main"])?;
    assert!(message.starts_with("imagewatch\n"), "author: {message}");
    assert!(
        message.contains(&format!("{}/my-api-canary", ns.name)),
        "{message}"
    );
    assert!(
        message.contains("deployment-canary.yaml")
            && message.contains("canary-v1.2.3 -> canary-v1.2.4"),
        "{message}"
    );
    let commit = canary
        .status
        .as_ref()
        .and_then(|s| s.applied.as_ref())
        .and_then(|a| a.commit.clone());
    assert_eq!(
        commit.as_deref(),
        Some(git.git(&repo_name, &["rev-parse", "main"])?.trim())
    );

    // primary-v1.2.4 → only primary changes (quoted scalar stays quoted; initContainer untouched).
    registry.push(&image_repo, "primary-v1.2.4")?;
    wait_applied(&api, "my-api-primary", "primary-v1.2.4", &op).await?;
    assert_eq!(git.commit_count(&repo_name, "main")?, 3);
    assert_eq!(
        git.show(
            &repo_name,
            "main",
            &format!("{dir}/deployment-primary.yaml")
        )?,
        primary_before.replace(":primary-v1.2.3\"", ":primary-v1.2.4\"")
    );
    assert_eq!(
        git.show(&repo_name, "main", &format!("{dir}/deployment-canary.yaml"))?,
        canary_after
    );

    // A regex that does not compile → InvalidSpec, no commit.
    let bad_regex = sample_watches(&ns.name, &registry.host, &image_repo, &git_url)?
        .split("---")
        .next()
        .unwrap_or_default()
        .replace("name: my-api-canary", "name: bad-regex")
        .replace("^canary-v(?P<version>", "^canary-v((?P<version>");
    let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&bad_regex))?;
    assert!(ok, "{out}");
    let bad = wait_ready_reason(&api, "bad-regex", "False", "InvalidSpec", &op).await?;
    assert!(
        ready(&bad).is_some_and(|r| r.2.contains("regex")),
        "{:?}",
        ready(&bad)
    );

    // A missing Secret → CredentialsNotFound naming it.
    let no_secret = bad_regex
        .replace("name: bad-regex", "name: no-secret")
        .replace("^canary-v((?P<version>", "^canary-v(?P<version>")
        .replace("name: regcred", "name: does-not-exist");
    let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&no_secret))?;
    assert!(ok, "{out}");
    let missing = wait_ready_reason(&api, "no-secret", "False", "CredentialsNotFound", &op).await?;
    assert!(
        ready(&missing).is_some_and(|r| r.2.contains("does-not-exist")),
        "{:?}",
        ready(&missing)
    );
    assert_eq!(
        git.commit_count(&repo_name, "main")?,
        3,
        "bad watches made no commit"
    );
    api.delete("no-secret", &DeleteParams::default()).await?;
    api.delete("bad-regex", &DeleteParams::default()).await?;

    // An operator restart causes no new commit: after it has reconciled every watch again,
    // Git is unchanged.
    op.restart()?;
    wait_until("reconciles after restart", TIMEOUT, || async {
        let metrics = op.metrics().await.unwrap_or_default();
        let ok = metrics
            .lines()
            .find(|l| l.starts_with("imagewatch_reconciles_total{outcome=\"ok\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        Ok((ok >= 4.0).then_some(()))
    })
    .await?;
    assert_eq!(
        git.commit_count(&repo_name, "main")?,
        3,
        "restart made a commit"
    );

    // Deleting a watch stops its activity: after deleting canary, a new canary tag is not
    // written, while primary (still watched) moves on.
    api.delete("my-api-canary", &DeleteParams::default())
        .await?;
    wait_until("canary watch gone", TIMEOUT, || async {
        Ok(api.get_opt("my-api-canary").await?.is_none().then_some(()))
    })
    .await?;
    registry.push(&image_repo, "canary-v1.2.5")?;
    registry.push(&image_repo, "primary-v1.2.5")?;
    wait_applied(&api, "my-api-primary", "primary-v1.2.5", &op).await?;
    // Let primary be reconciled once more after its commit, so a live canary watch (same
    // interval, pushed earlier) would have had its turn too.
    let before = op.metrics().await?;
    wait_until("one more reconcile round", TIMEOUT, || async {
        Ok((op.metrics().await? != before).then_some(()))
    })
    .await?;
    assert_eq!(
        git.show(&repo_name, "main", &format!("{dir}/deployment-canary.yaml"))?,
        canary_after
    );
    assert_eq!(git.commit_count(&repo_name, "main")?, 4);
    assert!(op.is_running(), "operator exited:\n{}", op.log_tail(40));
    Ok(())
}
