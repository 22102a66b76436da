//! Fields shared by both resources: Secret references and the Git location to write to.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// A Secret in the same namespace as the object that names it. Cross-namespace references are
/// not allowed: a team can only use credentials it can already read.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    /// Name of the Secret, in the same namespace as this object.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Where in Git the desired state lives and how to write to it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitSource {
    /// Repository URL: `https://…` (token or basic auth) or `ssh://git@host/…` / `git@host:…`
    /// (SSH key with known_hosts). `file://` URLs are accepted for local testing.
    #[x_kube(validation = kube::core::Rule::new("self.startsWith('https://') || self.startsWith('http://') || self.startsWith('ssh://') || self.startsWith('file://') || self.matches('^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:.+$')").message("url must be https://, http://, ssh://, file:// or user@host:path"))]
    #[schemars(length(min = 1, max = 2048))]
    pub url: String,
    /// Branch to commit to. Defaults to `main`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub branch: Option<String>,
    /// Secret with Git credentials, in this namespace: `username` + `password` (or `token`) for
    /// HTTPS; `sshPrivateKey` + `knownHosts` for SSH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    /// Push to this branch instead of `branch` (commits are still based on `branch`), e.g.
    /// `imagewatch/{name}` for a branch a pull request or CI picks up. `{namespace}` and
    /// `{name}` are replaced by the watch's. The operator force-updates only branches whose
    /// commits it made itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub push_branch: Option<String>,
}

impl GitSource {
    /// The branch to write to (`main` when unset).
    pub fn branch(&self) -> &str {
        self.branch.as_deref().unwrap_or("main")
    }
}
