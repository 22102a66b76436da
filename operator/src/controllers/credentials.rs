//! Which registry credentials a watch reads with, from its spec alone (no Secret is read):
//! shared by the ImageWatch steps, the registry-wide token announcements and the sweep.

use imagewatch_crd::{ImageWatch, RegistryProvider};
use kube::ResourceExt;

use crate::{
    registry::{RepositoryRef, is_ecr_host},
    scan::index::CredentialKey,
};

/// Whether a watch in `namespace` reads `registry` through the ECR API, and with which
/// credentials. ECR is asked through its API (tags, digests and push times in one call) with
/// the operator's AWS identity, unless the watch brings a pull secret for it.
pub fn credential_choice(
    credentials: &imagewatch_crd::RegistryCredentials,
    namespace: &str,
    registry: &str,
) -> (bool, CredentialKey) {
    let use_ecr = credentials.provider == Some(RegistryProvider::Aws)
        || (is_ecr_host(registry).is_some() && credentials.secret_ref.is_none());
    let key = match (&credentials.secret_ref, use_ecr) {
        (_, true) => CredentialKey::Ambient,
        (Some(secret), false) => CredentialKey::Secret {
            namespace: namespace.to_string(),
            name: secret.name.clone(),
        },
        (None, false) => CredentialKey::Anonymous,
    };
    (use_ecr, key)
}

/// Which credentials a watch of one repository reads its registry with, and that
/// repository, from its spec alone (no Secret is read). None for pattern watches and
/// images that do not parse.
pub fn credential_key_of(watch: &ImageWatch) -> Option<(CredentialKey, RepositoryRef)> {
    if watch.spec.is_pattern() {
        return None;
    }
    let repo = RepositoryRef::parse(&watch.spec.image).ok()?;
    let credentials = watch.spec.credentials.clone().unwrap_or_default();
    let namespace = watch.namespace().unwrap_or_default();
    let (_, key) = credential_choice(&credentials, &namespace, &repo.registry);
    Some((key, repo))
}
