//! Shared setup of end-to-end scenarios: an operator running under the chart's RBAC in a fresh
//! namespace, with Secrets for the ground's registry and git server.

use std::{path::Path, time::Duration};

use imagewatch_crd::{ImageWatch, PromotionPolicy, conditions::READY};
use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};

use crate::{
    Ground, NotifyingRegistry, Operator, TestNamespace, ground::random_suffix, ground::repo_root,
    operator::free_port, wait_until,
};

/// How long scenario steps wait for a condition.
pub const TIMEOUT: Duration = Duration::from_secs(90);

/// A namespace with the chart's RBAC, an operator running as its ServiceAccount, and the
/// `regcred` / `git-creds` Secrets for the ground.
pub struct Scenario {
    /// The ground.
    pub ground: &'static Ground,
    /// The namespace (also where the operator's ServiceAccount lives).
    pub ns: TestNamespace,
    /// Admin client.
    pub admin: Client,
    /// The operator process.
    pub operator: Operator,
    /// ImageWatches in the namespace (admin).
    pub watches: Api<ImageWatch>,
}

impl Scenario {
    /// Sets everything up; `extra` are further operator flags.
    pub async fn start(prefix: &str, extra: &[&str]) -> anyhow::Result<Self> {
        Self::start_with_env(prefix, extra, &[]).await
    }

    /// Like [`Scenario::start`], with extra environment for the operator. `{ns}` in `extra`
    /// is replaced by the scenario's namespace.
    pub async fn start_with_env(
        prefix: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let ground = Ground::get()?;
        ground.install_crds()?;
        let ns = TestNamespace::create(ground, prefix).await?;
        let admin = ground.admin().await?;
        let registry = ground.registry()?;
        let git = ground.git()?;
        let release = format!("iw-{}", ns.name);
        ground.install_chart_rbac(&release, &ns.name)?;
        let (kubeconfig, _) = ns
            .service_account(ground, &format!("{release}-imagewatch"))
            .await?;
        create_secret(
            &admin,
            &ns.name,
            "regcred",
            "kubernetes.io/dockerconfigjson",
            &[(".dockerconfigjson", &registry.dockerconfigjson())],
        )
        .await?;
        create_git_secret(&admin, &ns.name, &git).await?;
        // Each test's operator watches only its own namespace: tests run side by side on one
        // apiserver and must not act on each other's objects.
        let mut flags = vec![
            "--insecure-registry",
            registry.host.as_str(),
            "--namespace",
            ns.name.as_str(),
        ];
        let extra: Vec<String> = extra.iter().map(|e| e.replace("{ns}", &ns.name)).collect();
        flags.extend(extra.iter().map(String::as_str));
        let operator = Operator::start_with_env(ground, &ns.name, &kubeconfig, &flags, env)?;
        let watches = Api::namespaced(admin.clone(), &ns.name);
        Ok(Self {
            ground,
            ns,
            admin,
            operator,
            watches,
        })
    }

    /// `kubectl apply -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) -> anyhow::Result<()> {
        let (ok, out) = self.ground.kubectl_try(&["apply", "-f", "-"], Some(yaml))?;
        anyhow::ensure!(ok, "kubectl apply failed: {out}");
        Ok(())
    }

    /// Waits until the watch's Ready condition has `status` and `reason`.
    pub async fn wait_ready(
        &self,
        name: &str,
        status: &str,
        reason: &str,
    ) -> anyhow::Result<ImageWatch> {
        wait_until(
            &format!("{name} Ready={status} reason={reason}"),
            TIMEOUT,
            || async {
                let w = self.watches.get(name).await?;
                Ok(ready(&w)
                    .filter(|(s, r, _)| s == status && r == reason)
                    .map(|_| w))
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", self.operator.log_tail(40)))
    }

    /// Waits until the watch's `status.applied.tag` is `tag`.
    pub async fn wait_applied(&self, name: &str, tag: &str) -> anyhow::Result<ImageWatch> {
        wait_until(&format!("{name} applied {tag}"), TIMEOUT, || async {
            let w = self.watches.get(name).await?;
            let applied = w
                .status
                .as_ref()
                .and_then(|s| s.applied.as_ref())
                .map(|a| a.tag.clone());
            Ok((applied.as_deref() == Some(tag)).then_some(w))
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", self.operator.log_tail(40)))
    }
}

/// A registry of its own that notifies the operator's webhook listener (token in the Secret
/// `hooks`), an operator listening for it (with `extra` flags), and the registry's pull
/// Secret `hookreg`; also returns the registry host and the listener's address.
pub async fn webhook_scenario(
    prefix: &str,
    extra: &[&str],
) -> anyhow::Result<(NotifyingRegistry, String, Scenario, String)> {
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let token = format!("tok-{}", random_suffix());
    let registry = NotifyingRegistry::start(&format!("http://{addr}/hooks/distribution"), &token)?;
    let host = registry.var("IMAGEWATCH_REGISTRY");
    let mut flags = vec![
        "--webhook-addr",
        &addr,
        "--webhook-secret",
        "hooks",
        "--pod-namespace",
        "{ns}",
        "--insecure-registry",
        &host,
    ];
    flags.extend_from_slice(extra);
    let s = Scenario::start(prefix, &flags).await?;
    create_secret(
        &s.admin,
        &s.ns.name,
        "hooks",
        "Opaque",
        &[("distribution-token", &token)],
    )
    .await?;
    let reg_auth = registry.dockerconfigjson();
    create_secret(
        &s.admin,
        &s.ns.name,
        "hookreg",
        "kubernetes.io/dockerconfigjson",
        &[(".dockerconfigjson", &reg_auth)],
    )
    .await?;
    Ok((registry, host, s, addr))
}

/// [`webhook_scenario`] for a test whose Pods Argo CD deploys onto the ground's node: the
/// node must be there (an error saying so otherwise), and its containerd pulls from the
/// scenario's registry. Returns the registry, its host, the scenario and the ground's Argo CD.
pub async fn node_scenario(
    prefix: &str,
) -> anyhow::Result<(NotifyingRegistry, String, Scenario, crate::argocd::ArgoCd)> {
    let (registry, host, s, _) = webhook_scenario(prefix, &[]).await?;
    s.ground
        .var("IMAGEWATCH_NODE_NAME")
        .map_err(|e| anyhow::anyhow!("this test runs Pods on the ground's node: {e}"))?;
    let argocd = crate::argocd::ArgoCd::get(s.ground)?;
    crate::node::trust_registry(s.ground, &host)?;
    Ok((registry, host, s, argocd))
}

/// `(status, reason, message)` of the Ready condition.
pub fn ready(w: &ImageWatch) -> Option<(String, String, String)> {
    let c = w
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == READY)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// `(status, reason, message)` of the condition `type_` of a PromotionPolicy.
pub fn policy_condition(p: &PromotionPolicy, type_: &str) -> Option<(String, String, String)> {
    let c = p
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Polls the PromotionPolicy `name` until `check` holds, for up to `timeout`. On timeout the
/// error adds the policy's status and the operator's log tail to `what`.
pub async fn wait_policy_for(
    s: &Scenario,
    api: &Api<PromotionPolicy>,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&PromotionPolicy) -> bool,
) -> anyhow::Result<PromotionPolicy> {
    wait_until(what, timeout, || async {
        let p = api.get(name).await?;
        Ok(check(&p).then_some(p))
    })
    .await
    .map_err(|e| {
        let status = futures::executor::block_on(api.get(name))
            .ok()
            .and_then(|p| p.status)
            .map(|st| serde_json::to_string_pretty(&st).unwrap_or_default())
            .unwrap_or_default();
        anyhow::anyhow!(
            "{e}\n--- policy status ---\n{status}\n--- operator log ---\n{}",
            s.operator.log_tail(60)
        )
    })
}

/// `(tag, reason)` of the tag the watch refused last (`status.refused`).
pub fn refused_of(w: &ImageWatch) -> Option<(String, String)> {
    let r = w.status.as_ref()?.refused.as_ref()?;
    Some((r.tag.clone(), r.reason.clone()))
}

/// The tag the watch has applied (`status.applied.tag`).
pub fn applied_of(w: &ImageWatch) -> Option<String> {
    Some(w.status.as_ref()?.applied.as_ref()?.tag.clone())
}

/// The count of `imagewatch_reconciles_total{outcome="OUTCOME"}` in the operator's metrics
/// (0 before the first such reconcile).
pub async fn reconciles_with_outcome(s: &Scenario, outcome: &str) -> anyhow::Result<u64> {
    let metrics = s.operator.metrics().await?;
    let prefix = format!("imagewatch_reconciles_total{{outcome=\"{outcome}\"}} ");
    Ok(metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64)
}

/// A new repository `name` on the ground's git server holding the canary-primary sample's
/// manifests, both Deployments on `image` (the sample's own tags); its URL.
pub fn seed_canary_primary(ground: &Ground, name: &str, image: &str) -> anyhow::Result<String> {
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

/// Creates a Secret.
pub async fn create_secret(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
    data: &[(&str, &str)],
) -> anyhow::Result<()> {
    create_secret_with(client, ns, name, type_, data, ObjectMeta::default()).await
}

/// Creates the Secret `git-creds` with the git server's HTTPS credentials.
pub async fn create_git_secret(
    client: &Client,
    ns: &str,
    git: &crate::ground::GitServer,
) -> anyhow::Result<()> {
    create_secret(
        client,
        ns,
        "git-creds",
        "Opaque",
        &[("username", &git.user), ("token", &git.token)],
    )
    .await
}

/// Creates the Secret `argo-git`: the git server's HTTPS credentials for watches whose Git
/// location comes from their Argo CD Application (labelled `imagewatch.dev/git-credentials`,
/// for the URL prefix of the ground's git server). Finding it needs `list` on Secrets, which
/// the chart grants only with `rbac.gitFromArgocd=true`: the scenario's RBAC is rendered
/// with it, as such an install would be.
pub async fn create_argocd_git_secret(
    s: &Scenario,
    git: &crate::ground::GitServer,
) -> anyhow::Result<()> {
    s.ground.install_chart_rbac_with(
        &format!("iw-{}", s.ns.name),
        &s.ns.name,
        &["rbac.gitFromArgocd=true"],
    )?;
    create_secret_with(
        &s.admin,
        &s.ns.name,
        "argo-git",
        "Opaque",
        &[("username", &git.user), ("token", &git.token)],
        ObjectMeta {
            labels: Some([("imagewatch.dev/git-credentials".into(), "true".into())].into()),
            annotations: Some([("imagewatch.dev/url-prefix".into(), git.base_url.clone())].into()),
            ..Default::default()
        },
    )
    .await
}

/// Creates a Secret with extra metadata (labels, annotations).
pub async fn create_secret_with(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
    data: &[(&str, &str)],
    mut meta: ObjectMeta,
) -> anyhow::Result<()> {
    meta.name = Some(name.into());
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    api.create(
        &PostParams::default(),
        &Secret {
            metadata: meta,
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

/// Copies a directory tree.
pub fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
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

/// A sample directory of the repository (`samples/<name>`).
pub fn sample(name: &str) -> std::path::PathBuf {
    repo_root().join("samples").join(name)
}

/// The OpenPGP key files used to sign commits in tests (`operator/git/src/testdata`).
pub fn signing_key(name: &str) -> std::path::PathBuf {
    repo_root().join("operator/git/src/testdata").join(name)
}

/// `git verify-commit --raw rev` in the bare repository `git_dir`, trusting only the public
/// half of `signing_key` (an OpenPGP key) in a GnuPG home of its own; gpg's status lines.
/// Fails when the commit carries no signature or one that does not verify.
pub fn verify_openpgp_commit(
    git_dir: &Path,
    rev: &str,
    signing_key: &Path,
) -> anyhow::Result<String> {
    use anyhow::Context as _;
    use std::process::Command;
    let gnupg = tempfile::Builder::new()
        .prefix("iw-gpg")
        .tempdir_in("/tmp")?;
    let public = imagewatch::git::CommitSigner::from_file(signing_key)?.public_key();
    std::fs::write(gnupg.path().join("public.asc"), public)?;
    let import = Command::new("gpg")
        .arg("--homedir")
        .arg(gnupg.path())
        .args(["--batch", "--import"])
        .arg(gnupg.path().join("public.asc"))
        .output()
        .context("running gpg (Debian package gnupg)")?;
    anyhow::ensure!(import.status.success(), "gpg --import: {import:?}");
    let verify = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(["verify-commit", "--raw", rev])
        .env("GNUPGHOME", gnupg.path())
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()?;
    let verdict = String::from_utf8_lossy(&verify.stderr).to_string();
    let _ = Command::new("gpgconf")
        .arg("--homedir")
        .arg(gnupg.path())
        .args(["--kill", "all"])
        .output();
    anyhow::ensure!(
        verify.status.success(),
        "git verify-commit {rev}: {verdict}"
    );
    Ok(verdict)
}

/// A new temporary directory holding `files` (path below it, content), with the directories
/// they need.
pub fn tree(files: &[(&str, String)]) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for (path, content) in files {
        let file = dir.path().join(path);
        std::fs::create_dir_all(file.parent().unwrap_or(dir.path()))?;
        std::fs::write(file, content)?;
    }
    Ok(dir)
}

/// `e2e/scripts/moto.sh helpers ARGS` (create-queue, route-ecr-events, create-repository,
/// put-image, put-push-event, …) with `env` (the moto URL and test credentials); its output.
pub fn moto(args: &[&str], env: &[(String, String)]) -> anyhow::Result<String> {
    let out = std::process::Command::new(repo_root().join("e2e/scripts/moto.sh"))
        .arg("helpers")
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "moto {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The environment for [`moto`] and for an operator talking to the ground's moto: the moto
/// URL, the test credentials and region, and no EC2 metadata lookup.
pub fn moto_env(ground: &Ground) -> anyhow::Result<Vec<(String, String)>> {
    let mut env = moto_credentials(ground)?;
    env.push(("AWS_EC2_METADATA_DISABLED".to_string(), "true".to_string()));
    Ok(env)
}

/// The moto URL and the test credentials and region (without [`moto_env`]'s EC2 metadata
/// setting), for [`moto`] and for an operator talking to the ground's moto.
pub fn moto_credentials(ground: &Ground) -> anyhow::Result<Vec<(String, String)>> {
    Ok(vec![
        (
            "IMAGEWATCH_MOTO_URL".to_string(),
            ground.var("IMAGEWATCH_MOTO_URL")?.to_string(),
        ),
        ("AWS_ACCESS_KEY_ID".to_string(), "test".to_string()),
        ("AWS_SECRET_ACCESS_KEY".to_string(), "test".to_string()),
        ("AWS_REGION".to_string(), "us-east-1".to_string()),
    ])
}
