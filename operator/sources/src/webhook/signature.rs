//! Webhook authentication: per-provider secrets and the constant-time checks.
//!
//! GitHub and the generic format sign the raw body (HMAC-SHA256, `sha256=<hex>` in
//! `X-Hub-Signature-256` / `X-Signature-256`). Distribution, Harbor, Docker Hub and Quay
//! cannot sign: they present a shared token (in a header, or in the path where the sender
//! only takes a URL). Every comparison runs in constant time ([`subtle`]); tokens are
//! hashed first so that not even their length leaks.

use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::Provider;

/// A secret's bytes; `Debug` never shows them.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(Vec<u8>);

impl SecretValue {
    /// Wraps raw secret bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        SecretValue(bytes.into())
    }

    /// The secret's bytes.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValue(<redacted>)")
    }
}

/// The secret of each provider; a provider without one is disabled (its route answers 404).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct WebhookSecrets {
    by_provider: [Option<SecretValue>; Provider::ALL.len()],
}

impl WebhookSecrets {
    /// No provider enabled.
    pub fn none() -> Self {
        Self::default()
    }

    /// Reads the data of the Kubernetes Secret that holds the webhook secrets. Keys are
    /// [`Provider::secret_key`] (`distribution-token`, `dockerhub-token`, `ghcr-secret`,
    /// `harbor-token`, `quay-token`, `generic-secret`); other keys are ignored. Values are
    /// trimmed of surrounding whitespace (files written with a trailing newline are common);
    /// an empty value leaves the provider disabled rather than open.
    pub fn from_secret_data(data: &BTreeMap<String, Vec<u8>>) -> Self {
        let mut secrets = Self::default();
        for provider in Provider::ALL {
            if let Some(value) = data.get(provider.secret_key()) {
                secrets = secrets.with(provider, value.trim_ascii());
            }
        }
        secrets
    }

    /// Sets (or, with an empty value, clears) one provider's secret.
    pub fn with(mut self, provider: Provider, secret: impl Into<Vec<u8>>) -> Self {
        let secret = secret.into();
        self.by_provider[provider.index()] = (!secret.is_empty()).then_some(SecretValue(secret));
        self
    }

    /// The provider's secret, if it is enabled.
    pub fn get(&self, provider: Provider) -> Option<&SecretValue> {
        self.by_provider[provider.index()].as_ref()
    }

    /// Providers with a secret, in [`Provider::ALL`] order.
    pub fn enabled(&self) -> Vec<Provider> {
        Provider::ALL
            .into_iter()
            .filter(|p| self.get(*p).is_some())
            .collect()
    }
}

impl std::fmt::Debug for WebhookSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let enabled: Vec<&str> = self.enabled().into_iter().map(Provider::name).collect();
        f.debug_struct("WebhookSecrets")
            .field("enabled", &enabled)
            .finish()
    }
}

/// Whether a presented token equals the expected one, in constant time. Both are hashed
/// with SHA-256 first, so neither the content nor the length of the expected token leaks.
/// An empty expected token never matches.
pub fn tokens_match(expected: &[u8], presented: &[u8]) -> bool {
    if expected.is_empty() {
        return false;
    }
    let expected = Sha256::digest(expected);
    let presented = Sha256::digest(presented);
    expected.as_slice().ct_eq(presented.as_slice()).into()
}

/// The token of an `Authorization` header value: the credentials of a `Bearer` scheme
/// (scheme case-insensitive), else the whole value (Harbor's "Auth Header" may be set to
/// the bare token).
pub fn authorization_token(header_value: &[u8]) -> &[u8] {
    const BEARER: &[u8] = b"bearer ";
    let value = header_value.trim_ascii();
    match value.get(..BEARER.len()) {
        Some(scheme) if scheme.eq_ignore_ascii_case(BEARER) => value[BEARER.len()..].trim_ascii(),
        _ => value,
    }
}

/// `sha256=<lower-case hex HMAC-SHA256 of body keyed with secret>`, the header value
/// GitHub sends and generic senders must send.
pub fn sign_sha256(secret: &[u8], body: &[u8]) -> String {
    format!("sha256={}", hex::encode(hmac_sha256(secret, body)))
}

fn hmac_sha256(secret: &[u8], body: &[u8]) -> [u8; 32] {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => return [0; 32],
    };
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// Checks a `sha256=<hex>` signature header against the body, in constant time. A missing
/// prefix, non-hex or wrongly sized signature, or an empty secret fails.
pub fn verify_sha256(secret: &[u8], body: &[u8], header_value: &[u8]) -> bool {
    if secret.is_empty() {
        return false;
    }
    let value = header_value.trim_ascii();
    let Some(hex_part) = value
        .get(..7)
        .filter(|prefix| prefix.eq_ignore_ascii_case(b"sha256="))
        .and_then(|_| value.get(7..))
    else {
        return false;
    };
    let Ok(presented) = hex::decode(hex_part) else {
        return false;
    };
    if presented.len() != 32 {
        return false;
    }
    let expected = hmac_sha256(secret, body);
    expected.as_slice().ct_eq(presented.as_slice()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_secrets_from_secret_data() {
        let mut data = BTreeMap::new();
        data.insert("distribution-token".to_string(), b"dist-token\n".to_vec());
        data.insert("ghcr-secret".to_string(), b"  gh secret  ".to_vec());
        data.insert("quay-token".to_string(), b" \n".to_vec());
        data.insert("harbor-token".to_string(), Vec::new());
        data.insert("unrelated".to_string(), b"x".to_vec());
        let secrets = WebhookSecrets::from_secret_data(&data);
        assert_eq!(
            secrets.get(Provider::Distribution).map(SecretValue::expose),
            Some(&b"dist-token"[..])
        );
        assert_eq!(
            secrets.get(Provider::Ghcr).map(SecretValue::expose),
            Some(&b"gh secret"[..])
        );
        // Empty and whitespace-only values keep the provider disabled.
        assert_eq!(
            secrets.enabled(),
            vec![Provider::Distribution, Provider::Ghcr]
        );
        assert!(
            WebhookSecrets::from_secret_data(&BTreeMap::new())
                .enabled()
                .is_empty()
        );
    }

    #[test]
    fn debug_never_shows_secrets() {
        let secrets = WebhookSecrets::none().with(Provider::Generic, "hunter2-secret");
        let shown = format!("{secrets:?} {:?}", secrets.get(Provider::Generic));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("generic"), "{shown}");
    }

    #[test]
    fn with_empty_clears() {
        let secrets = WebhookSecrets::none()
            .with(Provider::Quay, "t")
            .with(Provider::Quay, "");
        assert!(secrets.get(Provider::Quay).is_none());
    }

    #[test]
    fn token_comparison() {
        assert!(tokens_match(b"s3cret-token", b"s3cret-token"));
        assert!(!tokens_match(b"s3cret-token", b"s3cret-tokeN"));
        assert!(!tokens_match(b"s3cret-token", b"s3cret-token-longer"));
        assert!(!tokens_match(b"s3cret-token", b"s3cret"));
        assert!(!tokens_match(b"s3cret-token", b""));
        // An empty expected token must never open a route.
        assert!(!tokens_match(b"", b""));
    }

    #[test]
    fn authorization_header_forms() {
        assert_eq!(authorization_token(b"Bearer abc"), b"abc");
        assert_eq!(authorization_token(b"bearer   abc "), b"abc");
        assert_eq!(authorization_token(b"BEARER abc"), b"abc");
        assert_eq!(authorization_token(b"abc"), b"abc");
        assert_eq!(authorization_token(b"Basic dTpw"), b"Basic dTpw");
        assert_eq!(authorization_token(b""), b"");
    }

    #[test]
    fn hmac_signature() {
        // Worked example from GitHub's "Validating webhook deliveries".
        let signature = sign_sha256(b"It's a Secret to Everybody", b"Hello, World!");
        assert_eq!(
            signature,
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
        let body = b"Hello, World!";
        let secret = b"It's a Secret to Everybody";
        assert!(verify_sha256(secret, body, signature.as_bytes()));
        assert!(verify_sha256(
            secret,
            body,
            signature.to_ascii_uppercase().as_bytes()
        ));
        assert!(verify_sha256(
            secret,
            body,
            format!(" {signature} ").as_bytes()
        ));
        // Wrong body, wrong secret.
        assert!(!verify_sha256(
            secret,
            b"Hello, World?",
            signature.as_bytes()
        ));
        assert!(!verify_sha256(b"other", body, signature.as_bytes()));
        // Wrong or missing prefix, non-hex, truncated, extended, empty.
        let hex = &signature["sha256=".len()..];
        for bad in [
            hex.to_string(),
            format!("sha1={hex}"),
            format!("sha256={}", &hex[..62]),
            format!("sha256={hex}00"),
            format!("sha256={}zz", &hex[..62]),
            "sha256=".to_string(),
            String::new(),
        ] {
            assert!(!verify_sha256(secret, body, bad.as_bytes()), "{bad}");
        }
        // An empty secret never verifies, even a signature made with it.
        let empty = sign_sha256(b"", body);
        assert!(!verify_sha256(b"", body, empty.as_bytes()));
    }
}
