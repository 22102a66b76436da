//! `spec.verify`: only tags whose images carry a cosign signature by a trusted key are
//! written. Real cosign (built from its Go module by `e2e/scripts/cosign.sh`), key-based and
//! offline, signs images in the ground's registry, in the classic `sha256-<digest>.sig`
//! format and as a Sigstore bundle through the OCI referrers fallback tag.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use imagewatch_crd::{ImageWatch, PromotionPolicy, conditions};
use imagewatch_e2e::{
    ground::{Registry, random_suffix, repo_root},
    setup::{Scenario, TIMEOUT, applied_of, create_secret, policy_condition, ready, refused_of},
    wait_until,
};
use kube::Api;

/// cosign with a private home: its own Docker config for the ground's registry, its own
/// `TUF_ROOT`, and a closed proxy port so it cannot reach the internet.
struct Cosign {
    bin: PathBuf,
    home: tempfile::TempDir,
    /// `--new-bundle-format=false`: the classic `.sig` tag.
    classic: bool,
}

impl Cosign {
    fn new(registry: &Registry, classic: bool) -> anyhow::Result<Self> {
        let script = repo_root().join("e2e/scripts/cosign.sh");
        let out = Command::new(&script).arg("path").output()?;
        anyhow::ensure!(
            out.status.success(),
            "{} path failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let bin = PathBuf::from(String::from_utf8(out.stdout)?.trim());
        anyhow::ensure!(bin.is_file(), "cosign not found at {}", bin.display());
        let home = tempfile::tempdir()?;
        std::fs::create_dir_all(home.path().join("docker"))?;
        std::fs::write(
            home.path().join("docker/config.json"),
            registry.dockerconfigjson(),
        )?;
        Ok(Self { bin, home, classic })
    }

    fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let home = self.home.path();
        let out = Command::new(&self.bin)
            .args(args)
            .current_dir(home)
            .env("HOME", home)
            .env("DOCKER_CONFIG", home.join("docker"))
            .env("TUF_ROOT", home.join("tuf"))
            .env("SIGSTORE_NO_CACHE", "true")
            .env("HTTPS_PROXY", "http://127.0.0.1:9")
            .env("HTTP_PROXY", "http://127.0.0.1:9")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("COSIGN_PASSWORD", "")
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "cosign {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A new key pair `<name>.key` / `<name>.pub`; returns the public key's PEM.
    fn key_pair(&self, name: &str) -> anyhow::Result<String> {
        self.run(&["generate-key-pair", "--output-key-prefix", name])?;
        Ok(std::fs::read_to_string(
            self.home.path().join(format!("{name}.pub")),
        )?)
    }

    /// Signs `image@digest` with the key `name`.
    fn sign(&self, name: &str, image: &str, digest: &str) -> anyhow::Result<()> {
        let key = self.home.path().join(format!("{name}.key"));
        let key = key.to_string_lossy();
        let reference = format!("{image}@{digest}");
        let mut args = vec![
            "sign",
            "--key",
            &key,
            "--allow-insecure-registry",
            "--tlog-upload=false",
            "--use-signing-config=false",
            "--yes",
        ];
        if self.classic {
            args.push("--new-bundle-format=false");
        }
        args.push(&reference);
        self.run(&args)?;
        Ok(())
    }
}

fn seed(dir: &Path, image: &str) -> anyhow::Result<()> {
    let app = dir.join("apps/app");
    std::fs::create_dir_all(&app)?;
    std::fs::write(
        app.join("deployment.yaml"),
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: {image}:v0.9.0\n"
        ),
    )?;
    Ok(())
}

/// Waits until the watch refuses `tag` with `reason` (and Ready says so).
async fn wait_refused(
    s: &Scenario,
    name: &str,
    tag: &str,
    reason: &str,
) -> anyhow::Result<ImageWatch> {
    wait_until(
        &format!("{name} refuses {tag} ({reason})"),
        TIMEOUT,
        || async {
            let w = s.watches.get(name).await?;
            let ok = refused_of(&w) == Some((tag.to_string(), reason.to_string()))
                && ready(&w).is_some_and(|(st, r, _)| st == "False" && r == reason);
            Ok(ok.then_some(w))
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", s.operator.log_tail(40)))
}

async fn signed_tags_only(classic: bool) -> anyhow::Result<()> {
    let prefix = if classic { "sig-classic" } else { "sig-bundle" };
    let s = Scenario::start(prefix, &[]).await?;
    let ground = s.ground;
    let registry = ground.registry()?;
    let git = ground.git()?;
    let ns = s.ns.name.clone();
    let cosign = Cosign::new(&registry, classic)?;
    let trusted = cosign.key_pair("trusted")?;
    cosign.key_pair("stranger")?;
    create_secret(
        &s.admin,
        &ns,
        "cosign-keys",
        "Opaque",
        &[("cosign.pub", &trusted)],
    )
    .await?;

    let repo = format!("e2e/signed-{}", random_suffix());
    let image = format!("{}/{repo}", registry.host);
    let seed_dir = tempfile::tempdir()?;
    seed(seed_dir.path(), &image)?;
    let repo_name = format!("manifests-{ns}");
    let git_url = git.new_repo(&repo_name, seed_dir.path())?;
    let file = "apps/app/deployment.yaml";

    // Signed → committed.
    let d1 = registry.push(&repo, "v1.0.0")?;
    cosign.sign("trusted", &image, &d1)?;
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: app, namespace: {ns}}}
spec:
  image: {image}
  interval: 10s
  credentials: {{secretRef: {{name: regcred}}}}
  git: {{url: "{git_url}", secretRef: {{name: git-creds}}}}
  target: {{workload: {{path: apps/app, kind: Deployment, name: app, container: app}}}}
  verify: {{cosign: {{secretRef: {{name: cosign-keys}}}}}}
"#
    ))?;
    s.wait_applied("app", "v1.0.0").await?;
    assert!(git.show(&repo_name, "main", file)?.contains(":v1.0.0"));
    let commits = git.commit_count(&repo_name, "main")?;

    // An unsigned newer tag → not committed; status names it, SignatureMissing.
    let d2 = registry.push(&repo, "v1.1.0")?;
    let w = wait_refused(&s, "app", "v1.1.0", "SignatureMissing").await?;
    assert_eq!(applied_of(&w).as_deref(), Some("v1.0.0"));
    let message = ready(&w).map(|r| r.2).unwrap_or_default();
    assert!(
        message.contains("v1.1.0") && message.contains("v1.0.0"),
        "{message}"
    );

    // Signed with a key the watch does not trust → SignatureInvalid, not committed.
    let d3 = registry.push(&repo, "v1.2.0")?;
    cosign.sign("stranger", &image, &d3)?;
    let w = wait_refused(&s, "app", "v1.2.0", "SignatureInvalid").await?;
    assert_eq!(applied_of(&w).as_deref(), Some("v1.0.0"));
    assert_eq!(git.commit_count(&repo_name, "main")?, commits);
    assert!(git.show(&repo_name, "main", file)?.contains(":v1.0.0"));

    // The unsigned tag signed later → committed then (the newest verified tag), while the
    // newer one stays refused.
    cosign.sign("trusted", &image, &d2)?;
    s.wait_applied("app", "v1.1.0").await?;
    let w = wait_refused(&s, "app", "v1.2.0", "SignatureInvalid").await?;
    assert_eq!(applied_of(&w).as_deref(), Some("v1.1.0"));
    assert!(git.show(&repo_name, "main", file)?.contains(":v1.1.0"));
    assert_eq!(git.commit_count(&repo_name, "main")?, commits + 1);

    // And the newest, once signed by the trusted key too → committed, nothing refused.
    cosign.sign("trusted", &image, &d3)?;
    let w = s.wait_applied("app", "v1.2.0").await?;
    let w = wait_until("refusal cleared", TIMEOUT, || async {
        let w2 = s.watches.get("app").await?;
        Ok((refused_of(&w2).is_none() && ready(&w2).is_some_and(|r| r.0 == "True")).then_some(w2))
    })
    .await
    .unwrap_or(w);
    assert_eq!(refused_of(&w), None, "{:?}", w.status);
    assert!(git.show(&repo_name, "main", file)?.contains(":v1.2.0"));

    let metrics = s.operator.metrics().await?;
    for outcome in ["verified", "missing", "invalid"] {
        assert!(
            metrics.contains(&format!(
                "imagewatch_signature_checks_total{{kind=\"ImageWatch\",outcome=\"{outcome}\"}}"
            )),
            "no {outcome} signature checks counted:\n{metrics}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn only_signed_tags_are_written_classic_signatures() -> anyhow::Result<()> {
    signed_tags_only(true).await
}

#[tokio::test]
async fn only_signed_tags_are_written_sigstore_bundles() -> anyhow::Result<()> {
    signed_tags_only(false).await
}

/// (applied tag, ready, reason, message) of the member `repository` of a pattern watch.
fn member_of(w: &ImageWatch, repository: &str) -> Option<(Option<String>, bool, String, String)> {
    let m = w
        .status
        .as_ref()?
        .members
        .iter()
        .find(|m| m.repository == repository)?;
    Some((
        m.applied.clone(),
        m.ready,
        m.reason.clone(),
        m.message.clone().unwrap_or_default(),
    ))
}

/// Waits until member `repository` of `name` has `applied` and `reason`.
async fn wait_member(
    s: &Scenario,
    name: &str,
    repository: &str,
    applied: Option<&str>,
    reason: &str,
) -> anyhow::Result<(ImageWatch, String)> {
    wait_until(
        &format!("{name}: member {repository} at {applied:?} with {reason}"),
        TIMEOUT,
        || async {
            let w = s.watches.get(name).await?;
            Ok(member_of(&w, repository)
                .filter(|m| m.0.as_deref() == applied && m.2 == reason)
                .map(|m| (w, m.3)))
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", s.operator.log_tail(40)))
}

/// `spec.verify` on a pattern image: each member's tag is verified in its own repository.
/// The signed member is committed, the unsigned one is not (`SignatureMissing`); a newer
/// unsigned tag of the signed member is refused while its verified tag stays; the unsigned
/// member, signed later, is committed then.
#[tokio::test]
async fn a_pattern_verifies_each_member_in_its_own_repository() -> anyhow::Result<()> {
    let s = Scenario::start("sig-pattern", &[]).await?;
    let registry = s.ground.registry()?;
    let git = s.ground.git()?;
    let ns = s.ns.name.clone();
    let cosign = Cosign::new(&registry, false)?;
    let trusted = cosign.key_pair("trusted")?;
    create_secret(
        &s.admin,
        &ns,
        "cosign-keys",
        "Opaque",
        &[("cosign.pub", &trusted)],
    )
    .await?;

    let top = format!("e2e/sigpat-{}", random_suffix());
    let signed = format!("{top}/signed/api");
    let unsigned = format!("{top}/unsigned/api");
    let signed_digest = registry.push(&signed, "v1.0.0")?;
    let unsigned_digest = registry.push(&unsigned, "v1.0.0")?;
    cosign.sign(
        "trusted",
        &format!("{}/{signed}", registry.host),
        &signed_digest,
    )?;

    let seed_dir = tempfile::tempdir()?;
    for app in ["signed", "unsigned"] {
        let dir = seed_dir.path().join(format!("apps/{app}"));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("deployment.yaml"),
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {app}\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {}/{top}/{app}/api:v0.9.0\n",
                registry.host
            ),
        )?;
    }
    let repo_name = format!("manifests-{ns}");
    let git_url = git.new_repo(&repo_name, seed_dir.path())?;
    let file = |app: &str| format!("apps/{app}/deployment.yaml");
    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: services, namespace: {ns}}}
spec:
  image: "{host}/{top}/*/api"
  interval: 10s
  credentials: {{secretRef: {{name: regcred}}}}
  git: {{url: "{git_url}", secretRef: {{name: git-creds}}}}
  target: {{workload: {{path: "apps/$1", kind: Deployment, name: "$1", container: api}}}}
  verify: {{cosign: {{secretRef: {{name: cosign-keys}}}}}}
"#,
        host = registry.host
    ))?;

    // Signed member committed; unsigned member not, and says why.
    wait_member(&s, "services", &signed, Some("v1.0.0"), "Updated").await?;
    let (w, message) = wait_member(&s, "services", &unsigned, None, "SignatureMissing").await?;
    assert!(
        message.contains("v1.0.0") && message.contains(&unsigned_digest),
        "{message}"
    );
    let (status, reason, ready_message) = ready(&w).unwrap_or_default();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "MembersNotReady")
    );
    assert!(
        ready_message.contains(&format!("{unsigned}: SignatureMissing")),
        "{ready_message}"
    );
    assert!(
        git.show(&repo_name, "main", &file("signed"))?
            .contains("signed/api:v1.0.0")
    );
    assert!(
        git.show(&repo_name, "main", &file("unsigned"))?
            .contains("unsigned/api:v0.9.0")
    );
    let commits = git.commit_count(&repo_name, "main")?;

    // A newer unsigned tag of the signed member: refused, its verified tag stays.
    registry.push(&signed, "v1.1.0")?;
    let (_, message) =
        wait_member(&s, "services", &signed, Some("v1.0.0"), "SignatureMissing").await?;
    assert!(
        message.contains("the newest verified tag") && message.contains("refused newer tag v1.1.0"),
        "{message}"
    );
    assert_eq!(git.commit_count(&repo_name, "main")?, commits);

    // The unsigned member signed later: committed then.
    cosign.sign(
        "trusted",
        &format!("{}/{unsigned}", registry.host),
        &unsigned_digest,
    )?;
    wait_member(&s, "services", &unsigned, Some("v1.0.0"), "Updated").await?;
    assert!(
        git.show(&repo_name, "main", &file("unsigned"))?
            .contains("unsigned/api:v1.0.0")
    );
    assert!(
        git.show(&repo_name, "main", &file("signed"))?
            .contains("signed/api:v1.0.0")
    );
    assert_eq!(git.commit_count(&repo_name, "main")?, commits + 1);
    Ok(())
}

async fn wait_gate(
    s: &Scenario,
    api: &Api<PromotionPolicy>,
    type_: &str,
    reason: &str,
) -> anyhow::Result<PromotionPolicy> {
    wait_until(&format!("{type_} reason {reason}"), TIMEOUT, || async {
        let p = api.get("my-api").await?;
        Ok(policy_condition(&p, type_)
            .is_some_and(|c| c.1 == reason)
            .then_some(p))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n--- operator log ---\n{}", s.operator.log_tail(40)))
}

/// The PromotionPolicy gate `signature` checks each promoted image in the target registry:
/// unsigned → `SignatureMissing`, a stranger's key → `SignatureInvalid`, nothing committed;
/// signed by the trusted key → committed.
#[tokio::test]
async fn the_signature_gate_promotes_only_signed_images() -> anyhow::Result<()> {
    let s = Scenario::start("sig-gate", &[]).await?;
    let registry = s.ground.registry()?;
    let git = s.ground.git()?;
    let ns = s.ns.name.clone();
    let cosign = Cosign::new(&registry, false)?;
    let trusted = cosign.key_pair("trusted")?;
    cosign.key_pair("stranger")?;
    create_secret(
        &s.admin,
        &ns,
        "cosign-keys",
        "Opaque",
        &[("cosign.pub", &trusted)],
    )
    .await?;

    let sfx = random_suffix();
    let stg = format!("{}/stg-{sfx}", registry.host);
    let prd_repo = format!("prd-{sfx}/my-api");
    let prd = format!("{}/prd-{sfx}", registry.host);
    let digest = registry.push(&prd_repo, "v2.0.0")?;

    let dir = tempfile::tempdir()?;
    for (overlay, image) in [
        ("staging", format!("{stg}/my-api:v2.0.0")),
        ("production", format!("{prd}/my-api:v1.0.0")),
    ] {
        let path = dir.path().join("overlays").join(overlay);
        std::fs::create_dir_all(&path)?;
        std::fs::write(
            path.join("kustomization.yaml"),
            format!(
                "resources:\n- ../../base\nimages:\n- name: my-api\n  newName: {}\n  newTag: {}\n",
                image.rsplit_once(':').map(|(n, _)| n).unwrap_or_default(),
                image.rsplit_once(':').map(|(_, t)| t).unwrap_or_default()
            ),
        )?;
    }
    let repo = format!("sig-gate-{ns}");
    let url = git.new_repo(&repo, dir.path())?;
    let commits = git.commit_count(&repo, "main")?;

    s.apply(&format!(
        r#"apiVersion: imagewatch.dev/v1alpha1
kind: PromotionPolicy
metadata: {{name: my-api, namespace: {ns}}}
spec:
  from: {{path: overlays/staging}}
  to:
    git: {{url: "{url}", branch: main, secretRef: {{name: git-creds}}}}
    path: overlays/production
    imageRewrite: [{{from: "{stg}/", to: "{prd}/"}}]
    registrySecretRef: {{name: regcred}}
  gates:
    signature: {{cosign: {{secretRef: {{name: cosign-keys}}}}}}
  mode: Commit
  interval: 10s
"#
    ))?;
    let policies: Api<PromotionPolicy> = Api::namespaced(s.admin.clone(), &ns);

    // Keyless (Fulcio/Rekor) is in the schema for later and refused precisely now; both
    // kinds at once are refused at apply.
    let keyless = |verify: &str| {
        format!(
            r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: keyless, namespace: {ns}}}
spec:
  image: {prd}/my-api
  credentials: {{secretRef: {{name: regcred}}}}
  git: {{url: "{url}", secretRef: {{name: git-creds}}}}
  target: {{kustomize: {{path: overlays/production, image: my-api}}}}
  verify: {{cosign: {verify}}}
"#
        )
    };
    let (ok, out) = s.ground.kubectl_try(
        &["apply", "-f", "-"],
        Some(&keyless(
            "{secretRef: {name: cosign-keys}, keyless: {issuer: https://issuer.example}}",
        )),
    )?;
    assert!(
        !ok && out.contains("exactly one of verify.cosign.secretRef and verify.cosign.keyless"),
        "{out}"
    );
    s.apply(&keyless("{keyless: {issuer: https://issuer.example}}"))?;
    let w = s.wait_ready("keyless", "False", "InvalidSpec").await?;
    let message = ready(&w).map(|r| r.2).unwrap_or_default();
    assert!(
        message.contains("keyless is not supported yet"),
        "{message}"
    );

    let p = wait_gate(&s, &policies, conditions::GATES_PASSING, "SignatureMissing").await?;
    let message = policy_condition(&p, conditions::GATES_PASSING)
        .map(|c| c.2)
        .unwrap_or_default();
    assert!(
        message.contains(&format!("{prd}/my-api:v2.0.0")),
        "{message}"
    );
    assert_eq!(git.commit_count(&repo, "main")?, commits);

    cosign.sign("stranger", &format!("{prd}/my-api"), &digest)?;
    wait_gate(&s, &policies, conditions::GATES_PASSING, "SignatureInvalid").await?;
    assert_eq!(git.commit_count(&repo, "main")?, commits);

    cosign.sign("trusted", &format!("{prd}/my-api"), &digest)?;
    wait_gate(&s, &policies, conditions::READY, "Committed").await?;
    assert_eq!(git.commit_count(&repo, "main")?, commits + 1);
    let production = git.show(&repo, "main", "overlays/production/kustomization.yaml")?;
    assert!(production.contains("v2.0.0"), "{production}");
    let metrics = s.operator.metrics().await?;
    assert!(
        metrics.contains(
            "imagewatch_signature_checks_total{kind=\"PromotionPolicy\",outcome=\"verified\"}"
        ),
        "{metrics}"
    );
    Ok(())
}
