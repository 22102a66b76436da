//! Git over HTTPS as a GitHub App, and OpenPGP-signed commits, end to end: the operator (a real
//! process under the chart's RBAC) reads a git Secret holding GitHub App credentials, gets an
//! installation token from a GitHub API stub served by this test (which checks the app's JWT
//! with `openssl`, as GitHub checks it with the app's public key), and pushes a commit with
//! `x-access-token:<token>` to the ground's git server program over HTTPS. The commit is signed
//! with an armored OpenPGP key and verified by the real `gpg`.
//!
//! GitHub accepts installation tokens with the user name `x-access-token`; the ground's HTTPS
//! server is started once more here, on the same repositories and token, expecting that user.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use axum::{
    Router,
    extract::{Path as UrlPath, State},
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::post,
};
use base64::Engine as _;
use imagewatch_e2e::{
    Ground, Operator,
    ground::{random_suffix, repo_root},
    setup::{Scenario, create_secret, ready, seed_canary_primary},
    wait_until,
};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
const APP_ID: &str = "123456";
const INSTALLATION: u64 = 4242;

fn testdata(name: &str) -> PathBuf {
    repo_root().join("operator/git/src/testdata").join(name)
}

/// GitHub's `POST /app/installations/{id}/access_tokens`: the JWT must be signed by the app's
/// key (checked with `openssl dgst -verify` and the app's public key) and issued by the app;
/// the answer is the documented token object carrying the git server's token.
#[derive(Clone)]
struct GithubApi {
    token: String,
    public_key: PathBuf,
    issued: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
}

impl GithubApi {
    async fn start(&self) -> anyhow::Result<String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let app = Router::new()
            .route("/app/installations/{id}/access_tokens", post(issue))
            .with_state(self.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(base)
    }
}

/// Whether `jwt` is an RS256 JWT over its first two parts, signed by `public_key` (PEM file),
/// with `iss` = [`APP_ID`]; checked with the openssl CLI.
fn jwt_is_valid(jwt: &str, public_key: &Path) -> anyhow::Result<bool> {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let Some((input, signature)) = jwt.rsplit_once('.') else {
        return Ok(false);
    };
    let Some((_, claims)) = input.split_once('.') else {
        return Ok(false);
    };
    let claims: serde_json::Value = serde_json::from_slice(&b64.decode(claims)?)?;
    if claims["iss"] != json!(123456) {
        return Ok(false);
    }
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("input"), input)?;
    std::fs::write(dir.path().join("signature"), b64.decode(signature)?)?;
    let out = Command::new("openssl")
        .args(["dgst", "-sha256", "-verify"])
        .arg(public_key)
        .arg("-signature")
        .arg(dir.path().join("signature"))
        .arg(dir.path().join("input"))
        .output()
        .context("running openssl")?;
    Ok(out.status.success())
}

async fn issue(
    State(api): State<GithubApi>,
    UrlPath(id): UrlPath<u64>,
    headers: HeaderMap,
) -> impl IntoResponse {
    let jwt = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_string();
    let accept =
        headers.get("accept").and_then(|v| v.to_str().ok()) == Some("application/vnd.github+json");
    let key = api.public_key.clone();
    let valid = tokio::task::spawn_blocking(move || jwt_is_valid(&jwt, &key))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(false);
    if !valid || !accept {
        api.refused.fetch_add(1, Ordering::SeqCst);
        return (
            StatusCode::UNAUTHORIZED,
            json!({"message": "A JSON web token could not be decoded", "documentation_url": "https://docs.github.com/rest"})
                .to_string(),
        );
    }
    if id != INSTALLATION {
        return (
            StatusCode::NOT_FOUND,
            json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app"})
                .to_string(),
        );
    }
    api.issued.fetch_add(1, Ordering::SeqCst);
    let expires_at = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_hours(1))
        .map(|t| t.round(jiff::Unit::Second).unwrap_or(t))
        .unwrap_or_else(|_| jiff::Timestamp::now());
    (
        StatusCode::CREATED,
        json!({
            "token": api.token,
            "expires_at": expires_at.to_string(),
            "permissions": {"contents": "write", "metadata": "read"},
            "repository_selection": "all",
        })
        .to_string(),
    )
}

/// The ground's HTTPS git server program (`e2e/scripts/git_http.py`) on the ground's
/// repositories, TLS certificate and token, accepting the user `x-access-token`.
struct AppGitServer {
    child: Child,
    base_url: String,
}

impl AppGitServer {
    async fn start(ground: &Ground) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let git = ground.state.join("git");
        let log = std::fs::File::create(ground.state.join(format!("git-app-{port}.log")))?;
        let child = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
            .arg("-u")
            .arg(repo_root().join("e2e/scripts/git_http.py"))
            .args(["--port", &port.to_string(), "--user", "x-access-token"])
            .arg("--root")
            .arg(git.join("repos"))
            .arg("--token-file")
            .arg(git.join("token"))
            .arg("--tls-cert")
            .arg(git.join("tls/server.crt"))
            .arg("--tls-key")
            .arg(git.join("tls/server.key"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting git_http.py")?;
        let server = Self {
            child,
            base_url: format!("https://127.0.0.1:{port}"),
        };
        wait_until("app git server listening", TIMEOUT, || async move {
            Ok(tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ()))
        })
        .await?;
        Ok(server)
    }
}

impl Drop for AppGitServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sample's canary watch as `name`, on our registry and repository, with `secret`.
fn watch(name: &str, ns: &str, image: &str, git_url: &str, secret: &str) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(repo_root().join("samples/canary-primary/imagewatches.yaml"))?;
    let canary = text
        .split("---")
        .next()
        .context("sample has a first document")?;
    Ok(canary
        .replace(
            "metadata:\n  name: my-api-canary\n",
            &format!("metadata:\n  name: {name}\n"),
        )
        .replace("namespace: my-api", &format!("namespace: {ns}"))
        .replace("registry.example.com/my-api", image)
        .replace("https://git.example.com/org/manifests.git", git_url)
        .replace(
            "secretRef: {name: git-creds}",
            &format!("secretRef: {{name: {secret}}}"),
        )
        .replace("interval: 1m", "interval: 10s"))
}

fn app_secret_data<'a>(
    api: &'a str,
    installation: &'a str,
    key: &'a str,
) -> Vec<(&'static str, &'a str)> {
    vec![
        ("githubAppID", APP_ID),
        ("githubAppInstallationID", installation),
        ("githubAppPrivateKey", key),
        ("githubAppEnterpriseBaseUrl", api),
    ]
}

/// `value` of the metric line starting with `prefix`.
fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_github_app_pushes_an_openpgp_signed_commit() -> anyhow::Result<()> {
    let signing_key = testdata("openpgp-ed25519.asc");
    let s = Scenario::start(
        "ghapp",
        &["--signing-key", signing_key.to_str().context("utf-8 path")?],
    )
    .await?;
    let ground = s.ground;
    let registry = ground.registry()?;
    let git = ground.git()?;
    let ns = s.ns.name.clone();

    let api = GithubApi {
        token: git.token.clone(),
        public_key: testdata("github-app-public.pem"),
        issued: Arc::default(),
        refused: Arc::default(),
    };
    let api_url = api.start().await?;
    let app_git = AppGitServer::start(ground).await?;

    let image_repo = format!("e2e/ghapp-{}", random_suffix());
    let image = format!("{}/{image_repo}", registry.host);
    registry.push(&image_repo, "canary-v1.2.3")?;
    let repo = format!("manifests-{ns}");
    seed_canary_primary(ground, &repo, &image)?;
    let git_url = format!("{}/{repo}.git", app_git.base_url);

    let key = std::fs::read_to_string(testdata("github-app-pkcs1.pem"))?;
    let other_key = std::fs::read_to_string(testdata("github-app-other-pkcs1.pem"))?;
    let installation = INSTALLATION.to_string();
    for (secret, data) in [
        ("github-app", app_secret_data(&api_url, &installation, &key)),
        ("wrong-installation", app_secret_data(&api_url, "999", &key)),
        (
            "wrong-key",
            app_secret_data(&api_url, &installation, &other_key),
        ),
    ] {
        create_secret(&s.admin, &ns, secret, "Opaque", &data).await?;
    }

    // Git already holds the newest tag: Ready, having read the repository as the app.
    s.apply(&watch("app", &ns, &image, &git_url, "github-app")?)?;
    s.wait_ready("app", "True", "UpToDate").await?;
    assert_eq!(git.commit_count(&repo, "main")?, 1);

    // A new tag is committed and pushed with the installation token, signed with OpenPGP.
    registry.push(&image_repo, "canary-v1.2.4")?;
    let applied = s.wait_applied("app", "canary-v1.2.4").await?;
    assert_eq!(git.commit_count(&repo, "main")?, 2);
    let head = git.git(&repo, &["rev-parse", "main"])?.trim().to_string();
    assert_eq!(
        applied
            .status
            .as_ref()
            .and_then(|st| st.applied.as_ref())
            .and_then(|a| a.commit.as_deref()),
        Some(head.as_str())
    );
    let raw = git.git(&repo, &["cat-file", "commit", "main"])?;
    assert!(
        raw.contains("\ngpgsig -----BEGIN PGP SIGNATURE-----\n"),
        "{raw}"
    );
    let verdict =
        imagewatch_e2e::setup::verify_openpgp_commit(&git.repo_dir(&repo), "main", &signing_key)?;
    assert!(
        verdict.contains("[GNUPG:] VALIDSIG 0C038580A4A2A3E0A9012C8578A564EBDC3E3DA9 "),
        "{verdict}"
    );

    // One token served every fetch and push; no JWT was refused.
    assert_eq!(api.issued.load(Ordering::SeqCst), 1);
    assert_eq!(api.refused.load(Ordering::SeqCst), 0);
    let metrics = s.operator.metrics().await?;
    assert_eq!(
        metric(
            &metrics,
            "imagewatch_credential_refreshes_total{kind=\"github-app\",outcome=\"ok\"}"
        ),
        1.0,
        "{metrics}"
    );

    // An installation the app does not have, and a key that is not the app's: Ready=False with
    // GitHub's verdict and what to check, and nothing is written.
    s.apply(&watch(
        "no-installation",
        &ns,
        &image,
        &git_url,
        "wrong-installation",
    )?)?;
    let w = s.wait_ready("no-installation", "False", "GitError").await?;
    let message = ready(&w).map(|r| r.2).unwrap_or_default();
    assert!(
        message.contains("installation 999") && message.contains("githubAppInstallationID"),
        "{message}"
    );
    s.apply(&watch("bad-key", &ns, &image, &git_url, "wrong-key")?)?;
    let w = s.wait_ready("bad-key", "False", "GitError").await?;
    let message = ready(&w).map(|r| r.2).unwrap_or_default();
    assert!(
        message.contains("HTTP 401") && message.contains("githubAppPrivateKey"),
        "{message}"
    );
    assert!(api.refused.load(Ordering::SeqCst) >= 1);
    let metrics = s.operator.metrics().await?;
    for outcome in ["not_found", "unauthorized"] {
        assert!(
            metric(
                &metrics,
                &format!(
                    "imagewatch_credential_refreshes_total{{kind=\"github-app\",outcome=\"{outcome}\"}}"
                )
            ) >= 1.0,
            "{outcome}: {metrics}"
        );
    }
    assert_eq!(git.commit_count(&repo, "main")?, 2);
    Ok(())
}

#[tokio::test]
async fn a_passphrase_protected_openpgp_key_stops_the_operator_with_a_clear_message()
-> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground.install_crds()?;
    let key = testdata("openpgp-encrypted.asc");
    let mut operator = Operator::start(
        ground,
        &format!("signing-key-{}", random_suffix()),
        &ground.kubeconfig,
        &[
            "--signing-key",
            key.to_str().context("utf-8 path")?,
            "--namespace",
            "imagewatch-none",
        ],
    )?;
    wait_until("operator exits", TIMEOUT, || {
        let exited = !operator.is_running();
        async move { Ok(exited.then_some(())) }
    })
    .await?;
    let log = operator.log_tail(20);
    assert!(
        log.contains("openpgp-encrypted.asc")
            && log.contains("protected by a passphrase")
            && log.contains("94E5B9FE2CAB66B2ACDC1E1FD6B19022ED815E2D"),
        "{log}"
    );
    Ok(())
}
