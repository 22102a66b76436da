//! Dereference step: reads the Secrets a watch names (same namespace only) and turns them into
//! registry and Git credentials.
//!
//! A git Secret holds one of (checked in this order):
//!
//! * a GitHub App: `githubAppID`, `githubAppInstallationID`, `githubAppPrivateKey` and
//!   optionally `githubAppEnterpriseBaseUrl` (Argo CD's key names). An installation token is
//!   obtained from GitHub (shared by every watch through the process-wide cache of
//!   [`InstallationTokens`]) and sent as `x-access-token:<token>`;
//! * an SSH key: `sshPrivateKey` (or `identity`) plus `knownHosts` (or `known_hosts`) and
//!   optionally `passphrase`;
//! * HTTPS basic auth: `password` or `token`, with `username` (default `x-access-token`).

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::Api;

use crate::error::{CredentialsError, NamedSecret, ReconcileError, SpecError};
use crate::ttl_cache::TtlCache;
use crate::{
    git::{
        GitAuth, GitError,
        github_app::{GithubAppCredentials, GithubAppError, InstallationTokens, TOKEN_USERNAME},
    },
    registry::Credentials,
    telemetry::CredentialLabels,
};

/// Secret keys of a GitHub App (the names Argo CD uses in repository Secrets).
pub mod github_app_keys {
    /// The app's id (or client id).
    pub const APP_ID: &str = "githubAppID";
    /// The installation's id.
    pub const INSTALLATION_ID: &str = "githubAppInstallationID";
    /// The app's private key, PEM.
    pub const PRIVATE_KEY: &str = "githubAppPrivateKey";
    /// API base URL of GitHub Enterprise Server (`https://ghe.example.com/api/v3`).
    pub const ENTERPRISE_BASE_URL: &str = "githubAppEnterpriseBaseUrl";
}

/// How long a Secret read from the API server is used before it is read again. Every watch
/// of a namespace usually names the same pull and git Secrets, so without this each
/// reconcile would read them again; a rotated Secret is seen within this time.
pub const SECRET_CACHE_TTL: Duration = Duration::from_secs(15);

type SecretData = Arc<BTreeMap<String, ByteString>>;

/// Secrets recently read, by `(namespace, name)`. Only Secrets that exist are kept, so a
/// Secret created after a watch named it is found by the next reconcile.
/// What reading Secrets needs from the controller that asks: its API client, the short-lived
/// Secret cache and the metrics. The controllers' shared context implements it, so this
/// module never sees the controllers.
pub trait SecretAccess {
    /// The API client Secrets are read with (the operator's own identity).
    fn client(&self) -> &kube::Client;
    /// Secrets read in the last few seconds, by (namespace, name).
    fn secret_cache(&self) -> &SecretCache;
    /// Where credential refreshes are counted.
    fn metrics(&self) -> &crate::telemetry::Metrics;
}

impl<T: SecretAccess + ?Sized> SecretAccess for Arc<T> {
    fn client(&self) -> &kube::Client {
        (**self).client()
    }
    fn secret_cache(&self) -> &SecretCache {
        (**self).secret_cache()
    }
    fn metrics(&self) -> &crate::telemetry::Metrics {
        (**self).metrics()
    }
}

pub type SecretCache = TtlCache<(String, String), SecretData>;

/// An empty [`SecretCache`].
pub fn secret_cache() -> SecretCache {
    TtlCache::new(SECRET_CACHE_TTL)
}

async fn read_secret(
    ctx: &impl SecretAccess,
    namespace: &str,
    name: &str,
    purpose: &'static str,
) -> Result<SecretData, ReconcileError> {
    if !is_secret_name(name) {
        // A name with '/' would become a subresource request, `..` another path: refuse it
        // before it reaches the API.
        return Err(ReconcileError::InvalidSpec(SpecError::NotASecretName {
            purpose,
            name: name.to_string(),
            namespace: namespace.to_string(),
        }));
    }
    let key = (namespace.to_string(), name.to_string());
    let api: Api<Secret> = Api::namespaced(ctx.client().clone(), namespace);
    let read = || async {
        let secret = api.get_opt(name).await?;
        Ok::<_, kube::Error>(secret.map(|s| Arc::new(s.data.unwrap_or_default())))
    };
    match ctx.secret_cache().get_or_read(&key, read).await? {
        Some(data) => Ok(data),
        None => Err(ReconcileError::CredentialsNotFound(
            CredentialsError::NotFound {
                secret: NamedSecret::new(purpose, namespace, name),
            },
        )),
    }
}

/// Whether `name` is a DNS subdomain name (RFC 1123), the form of a Secret's name (pure).
pub fn is_secret_name(name: &str) -> bool {
    let label_ok = |label: &str| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    !name.is_empty() && name.len() <= 253 && name.split('.').all(label_ok)
}

fn text(data: &BTreeMap<String, ByteString>, key: &str) -> Option<String> {
    data.get(key)
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
        .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
        .filter(|s| !s.is_empty())
}

/// Registry credentials from a `kubernetes.io/dockerconfigjson` Secret for `registry_host`.
pub async fn registry_credentials(
    ctx: &impl SecretAccess,
    namespace: &str,
    name: &str,
    registry_host: &str,
) -> Result<Credentials, ReconcileError> {
    let data = read_secret(ctx, namespace, name, "registry").await?;
    let Some(json) = data
        .get(".dockerconfigjson")
        .or_else(|| data.get(".dockercfg"))
    else {
        return Err(ReconcileError::CredentialsNotFound(
            CredentialsError::MissingKey {
                secret: NamedSecret::new("registry", namespace, name),
                key: ".dockerconfigjson",
            },
        ));
    };
    match crate::registry::from_dockerconfigjson(&json.0, registry_host) {
        Ok(Some(creds)) => Ok(creds),
        Ok(None) => Err(ReconcileError::CredentialsNotFound(
            CredentialsError::NoEntryFor {
                secret: NamedSecret::new("registry", namespace, name),
                registry: registry_host.to_string(),
            },
        )),
        Err(e) => Err(ReconcileError::CredentialsNotFound(
            CredentialsError::unusable(NamedSecret::new("registry", namespace, name), e),
        )),
    }
}

/// The cosign public keys in the Secret `namespace/name`: every data value is PEM with one or
/// more `PUBLIC KEY` blocks.
pub async fn cosign_keys(
    ctx: &impl SecretAccess,
    namespace: &str,
    name: &str,
) -> Result<Vec<crate::signature::TrustedKey>, ReconcileError> {
    let data = read_secret(ctx, namespace, name, "cosign").await?;
    let mut keys = Vec::new();
    for (key, value) in data.iter() {
        let text = String::from_utf8(value.0.clone()).map_err(|_| {
            ReconcileError::CredentialsNotFound(CredentialsError::NotText {
                secret: NamedSecret::new("cosign", namespace, name),
                key: key.clone(),
            })
        })?;
        keys.extend(crate::signature::parse_keys(&text).map_err(|e| {
            ReconcileError::CredentialsNotFound(CredentialsError::BadValue {
                secret: NamedSecret::new("cosign", namespace, name),
                key: key.clone(),
                error: e.into(),
            })
        })?);
    }
    if keys.is_empty() {
        return Err(ReconcileError::CredentialsNotFound(
            CredentialsError::NoPublicKey {
                secret: NamedSecret::new("cosign", namespace, name),
            },
        ));
    }
    Ok(keys)
}

/// What a git Secret holds.
#[derive(Debug, Clone)]
pub enum GitSecret {
    /// Credentials used as they are.
    Static(GitAuth),
    /// A GitHub App: an installation token is obtained when credentials are needed.
    GithubApp(GithubAppCredentials),
}

/// Git credentials from the Secret `namespace/name` (see the module documentation for the
/// keys). For a GitHub App this obtains an installation token (cached process-wide, counted in
/// `imagewatch_credential_refreshes_total{kind="github-app"}` when GitHub is asked).
pub async fn git_credentials(
    ctx: &impl SecretAccess,
    namespace: &str,
    name: &str,
) -> Result<GitAuth, ReconcileError> {
    let data = read_secret(ctx, namespace, name, "git").await?;
    let described = || NamedSecret::new("git", namespace, name);
    let secret = git_secret_from_data(&data).map_err(|missing| {
        ReconcileError::CredentialsNotFound(CredentialsError::unusable(described(), missing))
    })?;
    match secret {
        GitSecret::Static(auth) => Ok(auth),
        GitSecret::GithubApp(app) => {
            let token = github_app_token(ctx, &app)
                .await
                .map_err(|e| github_app_error(e, &app, &described()))?;
            Ok(GitAuth::Basic {
                username: TOKEN_USERNAME.to_string(),
                password: token,
            })
        }
    }
}

/// The API token in the forge Secret `namespace/name` of a PromotionPolicy: its `token` key,
/// or an installation token when it holds GitHub App keys (like a git Secret).
pub async fn forge_token(
    ctx: &impl SecretAccess,
    namespace: &str,
    name: &str,
) -> Result<String, ReconcileError> {
    let data = read_secret(ctx, namespace, name, "forge").await?;
    let described = || NamedSecret::new("forge", namespace, name);
    if let Some(app) = github_app_from_data(&data) {
        let app = app.map_err(|e| {
            ReconcileError::CredentialsNotFound(CredentialsError::unusable(described(), e))
        })?;
        return github_app_token(ctx, &app)
            .await
            .map_err(|e| github_app_error(e, &app, &described()));
    }
    text(&data, "token").ok_or_else(|| {
        ReconcileError::CredentialsNotFound(CredentialsError::Incomplete {
            secret: described(),
            needs: "key token, or githubAppID+githubAppInstallationID+githubAppPrivateKey",
        })
    })
}

/// The `address` (a webhook URL) and `token` (an HMAC key) keys of the notification Secret
/// `namespace/name`; either may be absent.
pub async fn notification_secret(
    ctx: &impl SecretAccess,
    namespace: &str,
    name: &str,
) -> Result<(Option<String>, Option<String>), ReconcileError> {
    let data = read_secret(ctx, namespace, name, "notification").await?;
    Ok((text(&data, "address"), text(&data, "token")))
}

/// An installation token from the process-wide cache; a call to GitHub is counted.
async fn github_app_token(
    ctx: &impl SecretAccess,
    app: &GithubAppCredentials,
) -> Result<String, GithubAppError> {
    let tokens = InstallationTokens::shared()?;
    let token = tokens
        .token(app, |outcome| {
            ctx.metrics()
                .credential_refreshes
                .get_or_create(&CredentialLabels {
                    kind: "github-app".to_string(),
                    outcome: outcome.to_string(),
                })
                .inc();
        })
        .await?;
    Ok(token.token)
}

/// How a failure to get an installation token is reported (pure): a Secret whose values
/// cannot be used is `CredentialsNotFound`; a refusal by GitHub (wrong app id or key, unknown
/// installation) is a git authentication failure at the token endpoint; rate limits, server
/// errors and unreachable hosts are network failures, retried with backoff.
pub fn github_app_error(
    e: GithubAppError,
    app: &GithubAppCredentials,
    secret: &NamedSecret,
) -> ReconcileError {
    let url = app.token_url();
    match &e {
        GithubAppError::InvalidConfig(_) | GithubAppError::InvalidKey(_) => {
            ReconcileError::CredentialsNotFound(CredentialsError::unusable(secret.clone(), e))
        }
        GithubAppError::Unauthorized { .. } | GithubAppError::InstallationNotFound { .. } => {
            ReconcileError::Git(GitError::AuthFailed {
                url,
                reason: format!("{e} (in {secret})"),
            })
        }
        GithubAppError::Rejected { status, .. } if *status < 500 => {
            ReconcileError::Git(GitError::AuthFailed {
                url,
                reason: format!("{e} (in {secret})"),
            })
        }
        GithubAppError::Rejected { .. }
        | GithubAppError::RateLimited { .. }
        | GithubAppError::Network { .. }
        | GithubAppError::InvalidResponse { .. } => {
            let message = format!("{e} (in {secret})");
            ReconcileError::Git(GitError::Network {
                op: "get a GitHub App installation token",
                url,
                source: None,
                message,
            })
        }
    }
}

/// GitHub App credentials, when the Secret has any of their keys (pure). `Some(Err)` names
/// what is missing or wrong.
pub fn github_app_from_data(
    data: &BTreeMap<String, ByteString>,
) -> Option<Result<GithubAppCredentials, String>> {
    use github_app_keys::*;
    let app_id = text(data, APP_ID);
    let installation = text(data, INSTALLATION_ID);
    let key = text(data, PRIVATE_KEY);
    if app_id.is_none() && installation.is_none() && key.is_none() {
        return None;
    }
    let (Some(app_id), Some(installation), Some(key)) = (app_id, installation, key) else {
        let missing: Vec<&str> = [
            (APP_ID, data.contains_key(APP_ID)),
            (INSTALLATION_ID, data.contains_key(INSTALLATION_ID)),
            (PRIVATE_KEY, data.contains_key(PRIVATE_KEY)),
        ]
        .iter()
        .filter(|(_, present)| !present)
        .map(|(k, _)| *k)
        .collect();
        return Some(Err(if missing.is_empty() {
            format!("has an empty {APP_ID}, {INSTALLATION_ID} or {PRIVATE_KEY}")
        } else {
            format!(
                "has GitHub App keys but no {} (a GitHub App needs {APP_ID}, {INSTALLATION_ID} \
                 and {PRIVATE_KEY})",
                missing.join(", ")
            )
        }));
    };
    Some(
        GithubAppCredentials::new(
            &app_id,
            &installation,
            &format!("{key}\n"),
            text(data, ENTERPRISE_BASE_URL).as_deref(),
        )
        .map_err(|e| e.to_string()),
    )
}

/// Pure mapping of git Secret data to what it holds.
pub fn git_secret_from_data(data: &BTreeMap<String, ByteString>) -> Result<GitSecret, String> {
    if let Some(app) = github_app_from_data(data) {
        return app.map(GitSecret::GithubApp);
    }
    git_auth_from_data(data).map(GitSecret::Static)
}

/// Pure mapping of Secret data to static [`GitAuth`] (SSH key or HTTPS basic auth).
pub fn git_auth_from_data(data: &BTreeMap<String, ByteString>) -> Result<GitAuth, String> {
    if let Some(key) = text(data, "sshPrivateKey").or_else(|| text(data, "identity")) {
        let known_hosts = text(data, "knownHosts")
            .or_else(|| text(data, "known_hosts"))
            .ok_or_else(|| {
                "has an SSH key but no knownHosts (host keys are always verified)".to_string()
            })?;
        return Ok(GitAuth::Ssh {
            private_key: format!("{key}\n"),
            passphrase: text(data, "passphrase"),
            known_hosts,
        });
    }
    let secret = text(data, "password").or_else(|| text(data, "token"));
    match secret {
        Some(password) => Ok(GitAuth::Basic {
            username: text(data, "username").unwrap_or_else(|| "x-access-token".to_string()),
            password,
        }),
        None => Err(
            "needs keys username+password, token, sshPrivateKey+knownHosts, or \
             githubAppID+githubAppInstallationID+githubAppPrivateKey"
                .to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Classify as _;

    #[test]
    fn secret_names_are_dns_subdomains() {
        for good in ["git-creds", "a", "regcred.v2", "0abc"] {
            assert!(is_secret_name(good), "{good}");
        }
        for bad in [
            "team-b/b-git",
            "../..",
            "..",
            "",
            "Git",
            "-x",
            "x-",
            "a..b",
            "a b",
        ] {
            assert!(!is_secret_name(bad), "{bad}");
        }
        assert!(!is_secret_name(&"a".repeat(254)));
    }

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    #[test]
    fn token_only_uses_a_default_username() {
        match git_auth_from_data(&data(&[("token", "abc\n")])).unwrap() {
            GitAuth::Basic { username, password } => {
                assert_eq!(username, "x-access-token");
                assert_eq!(password, "abc");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn ssh_key_requires_known_hosts() {
        let err = git_auth_from_data(&data(&[("sshPrivateKey", "KEY")])).unwrap_err();
        assert!(err.contains("knownHosts"), "{err}");
    }

    #[test]
    fn empty_secret_says_what_is_needed() {
        let err = git_auth_from_data(&data(&[])).unwrap_err();
        assert!(err.contains("username+password"), "{err}");
        let err = git_secret_from_data(&data(&[])).unwrap_err();
        assert!(err.contains("githubAppPrivateKey"), "{err}");
    }

    const KEY: &str = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----";

    #[test]
    fn github_app_keys_win_and_default_to_github_com() {
        let secret = git_secret_from_data(&data(&[
            ("githubAppID", "123\n"),
            ("githubAppInstallationID", "456"),
            ("githubAppPrivateKey", KEY),
            // Argo CD repository Secrets carry these too; they do not matter here.
            ("url", "https://github.com/org/manifests"),
            ("type", "git"),
            ("token", "ignored"),
        ]))
        .unwrap();
        let GitSecret::GithubApp(app) = secret else {
            panic!("not a GitHub App: {secret:?}");
        };
        assert_eq!(app.app_id, "123");
        assert_eq!(app.installation_id, 456);
        assert_eq!(app.api_url, "https://api.github.com");
        assert!(
            app.private_key
                .starts_with("-----BEGIN RSA PRIVATE KEY-----")
        );
        let ghe = git_secret_from_data(&data(&[
            ("githubAppID", "1"),
            ("githubAppInstallationID", "2"),
            ("githubAppPrivateKey", KEY),
            (
                "githubAppEnterpriseBaseUrl",
                "https://ghe.example.com/api/v3/",
            ),
        ]))
        .unwrap();
        assert!(
            matches!(ghe, GitSecret::GithubApp(ref a) if a.api_url == "https://ghe.example.com/api/v3"),
            "{ghe:?}"
        );
    }

    #[test]
    fn incomplete_github_app_keys_name_what_is_missing() {
        let err =
            git_secret_from_data(&data(&[("githubAppID", "1"), ("githubAppPrivateKey", KEY)]))
                .unwrap_err();
        assert!(err.contains("no githubAppInstallationID"), "{err}");
        let err = git_secret_from_data(&data(&[
            ("githubAppID", "1"),
            ("githubAppInstallationID", "x"),
            ("githubAppPrivateKey", KEY),
        ]))
        .unwrap_err();
        assert!(err.contains("githubAppInstallationID \"x\""), "{err}");
    }

    #[test]
    fn github_app_failures_get_the_right_reason() {
        use imagewatch_crd::conditions::reason;
        let app = GithubAppCredentials::new("1", "2", KEY, None).unwrap();
        let secret = &NamedSecret::new("git", "ns", "creds");
        let unauthorized = github_app_error(
            GithubAppError::Unauthorized {
                app_id: "1".into(),
                message: "Bad credentials".into(),
            },
            &app,
            secret,
        );
        assert_eq!(unauthorized.reason(), reason::GIT_ERROR);
        let msg = unauthorized.to_string();
        assert!(
            msg.contains("https://api.github.com/app/installations/2/access_tokens")
                && msg.contains("githubAppPrivateKey")
                && msg.contains("ns/creds"),
            "{msg}"
        );
        assert!(matches!(
            unauthorized,
            ReconcileError::Git(GitError::AuthFailed { .. })
        ));
        let missing = github_app_error(
            GithubAppError::InstallationNotFound {
                app_id: "1".into(),
                installation_id: 2,
                message: "Not Found".into(),
            },
            &app,
            secret,
        );
        assert!(missing.to_string().contains("installation 2"), "{missing}");
        let bad_key = github_app_error(
            GithubAppError::InvalidKey("is not PEM".into()),
            &app,
            secret,
        );
        assert_eq!(bad_key.reason(), reason::CREDENTIALS_NOT_FOUND);
        let down = github_app_error(
            GithubAppError::Rejected {
                status: 503,
                message: "unavailable".into(),
            },
            &app,
            secret,
        );
        assert!(
            matches!(&down, ReconcileError::Git(g) if g.is_transient()),
            "{down}"
        );
    }
}
