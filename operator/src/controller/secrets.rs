//! Dereference step: reads the Secrets a watch names (same namespace only) and turns them into
//! registry and Git credentials.

use std::collections::BTreeMap;

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{Api, Client};

use super::error::ReconcileError;
use crate::{git::GitAuth, registry::Credentials};

async fn read_secret(
    client: &Client,
    namespace: &str,
    name: &str,
    purpose: &str,
) -> Result<BTreeMap<String, ByteString>, ReconcileError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await? {
        Some(secret) => Ok(secret.data.unwrap_or_default()),
        None => Err(ReconcileError::CredentialsNotFound(format!(
            "{purpose} Secret {namespace}/{name} not found"
        ))),
    }
}

fn text(data: &BTreeMap<String, ByteString>, key: &str) -> Option<String> {
    data.get(key)
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
        .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
        .filter(|s| !s.is_empty())
}

/// Registry credentials from a `kubernetes.io/dockerconfigjson` Secret for `registry_host`.
pub async fn registry_credentials(
    client: &Client,
    namespace: &str,
    name: &str,
    registry_host: &str,
) -> Result<Credentials, ReconcileError> {
    let data = read_secret(client, namespace, name, "registry").await?;
    let Some(json) = data
        .get(".dockerconfigjson")
        .or_else(|| data.get(".dockercfg"))
    else {
        return Err(ReconcileError::CredentialsNotFound(format!(
            "registry Secret {namespace}/{name} has no .dockerconfigjson key"
        )));
    };
    match crate::registry::from_dockerconfigjson(&json.0, registry_host) {
        Ok(Some(creds)) => Ok(creds),
        Ok(None) => Err(ReconcileError::CredentialsNotFound(format!(
            "registry Secret {namespace}/{name} has no entry for {registry_host}"
        ))),
        Err(e) => Err(ReconcileError::CredentialsNotFound(format!(
            "registry Secret {namespace}/{name}: {e}"
        ))),
    }
}

/// Git credentials: `username` + `password` or `token` (HTTPS), or `sshPrivateKey` (+ `knownHosts`).
pub async fn git_credentials(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<GitAuth, ReconcileError> {
    let data = read_secret(client, namespace, name, "git").await?;
    git_auth_from_data(&data).map_err(|missing| {
        ReconcileError::CredentialsNotFound(format!("git Secret {namespace}/{name}: {missing}"))
    })
}

/// Pure mapping of Secret data to [`GitAuth`].
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
        None => Err("needs keys username+password, token, or sshPrivateKey+knownHosts".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
