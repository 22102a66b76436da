//! cosign signatures of images, verified with public keys (no Fulcio, no Rekor).
//!
//! Two places hold a signature of the image with digest `sha256:<hex>`:
//!
//! - **classic**: the tag `sha256-<hex>.sig`, an OCI manifest whose layers are simple-signing
//!   payloads (`critical.image.docker-manifest-digest` names the image), each with the
//!   annotation `dev.cosignproject.cosign/signature`: a base64 ECDSA signature over the layer;
//! - **bundle** (cosign v3): the OCI referrers fallback tag `sha256-<hex>`, an index whose
//!   manifests with artifact type `application/vnd.dev.sigstore.bundle.v0.3+json` carry a
//!   Sigstore bundle layer: a DSSE envelope (an in-toto statement whose subject is the image,
//!   signed over the DSSE pre-authentication encoding) or a `messageSignature` over the image
//!   digest.
//!
//! This module is pure: keys, payloads and the decision which tag may be written. The
//! registry reads are in [`fetch`].

pub mod fetch;

pub use imagewatch_engine::refused::{Refusal, Refused};
pub use imagewatch_engine::signature::{Format, Verdict};

use base64::{Engine as _, engine::general_purpose::STANDARD};
use p256::ecdsa::{
    DerSignature, Signature, VerifyingKey,
    signature::{Verifier as _, hazmat::PrehashVerifier as _},
};
use p256::pkcs8::{DecodePublicKey as _, EncodePublicKey as _};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

/// Annotation of a classic signature layer holding the base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// Artifact type (and layer media type) of a Sigstore bundle stored as an OCI referrer.
pub const BUNDLE_ARTIFACT_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// Predicate type of the statement `cosign sign` puts in a DSSE bundle.
pub const COSIGN_SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
/// DSSE payload type of an in-toto statement.
pub const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// A public key signatures are checked with.
#[derive(Clone, Debug)]
pub struct TrustedKey {
    key: VerifyingKey,
    /// `sha256:<hex>` of the key's SubjectPublicKeyInfo (DER).
    pub fingerprint: String,
}

/// The ECDSA P-256 public keys in `pem` (one or more `PUBLIC KEY` blocks, as `cosign
/// generate-key-pair` writes `cosign.pub`). Other blocks are an error, so a private key put
/// in by mistake is not silently ignored.
pub fn parse_keys(pem: &str) -> Result<Vec<TrustedKey>, String> {
    const BEGIN: &str = "-----BEGIN ";
    let mut keys = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find(BEGIN) {
        let block = &rest[start..];
        let label_end = block[BEGIN.len()..]
            .find("-----")
            .ok_or("a PEM block has no closing dashes")?;
        let label = &block[BEGIN.len()..BEGIN.len() + label_end];
        let end_marker = format!("-----END {label}-----");
        let end = block
            .find(&end_marker)
            .ok_or_else(|| format!("PEM block {label:?} has no END line"))?;
        let text = &block[..end + end_marker.len()];
        if label != "PUBLIC KEY" {
            return Err(format!(
                "PEM block {label:?} is not a public key (expected \"PUBLIC KEY\")"
            ));
        }
        let key = VerifyingKey::from_public_key_pem(text)
            .map_err(|e| format!("not an ECDSA P-256 public key: {e}"))?;
        let der = key
            .to_public_key_der()
            .map_err(|e| format!("cannot encode the public key: {e}"))?;
        keys.push(TrustedKey {
            key,
            fingerprint: format!("sha256:{}", hex::encode(Sha256::digest(der.as_bytes()))),
        });
        rest = &block[end + end_marker.len()..];
    }
    if keys.is_empty() {
        return Err("holds no PEM \"PUBLIC KEY\" block".into());
    }
    Ok(keys)
}

/// One fingerprint for a set of keys (cache key): SHA-256 over the sorted key fingerprints.
pub fn keys_fingerprint(keys: &[TrustedKey]) -> String {
    let mut prints: Vec<&str> = keys.iter().map(|k| k.fingerprint.as_str()).collect();
    prints.sort_unstable();
    prints.dedup();
    hex::encode(Sha256::digest(prints.join(",").as_bytes()))
}

/// Decodes a signature: ASN.1 DER (what cosign writes) or the fixed 64-byte `r || s` form.
fn decode_signature(bytes: &[u8]) -> Result<Signature, String> {
    if let Ok(der) = DerSignature::from_bytes(bytes) {
        return Signature::from_der(der.as_bytes()).map_err(|e| e.to_string());
    }
    Signature::from_slice(bytes).map_err(|_| "the signature is neither DER nor r||s".to_string())
}

fn decode_base64(text: &str, what: &str) -> Result<Vec<u8>, String> {
    STANDARD
        .decode(text.trim())
        .map_err(|_| format!("{what} is not base64"))
}

/// The fingerprint of the first key under which `verify` holds.
fn first_key(keys: &[TrustedKey], verify: impl Fn(&VerifyingKey) -> bool) -> Option<String> {
    keys.iter()
        .find(|k| verify(&k.key))
        .map(|k| k.fingerprint.clone())
}

#[derive(Deserialize)]
struct SimpleSigning {
    critical: SimpleSigningCritical,
}
#[derive(Deserialize)]
struct SimpleSigningCritical {
    image: SimpleSigningImage,
    #[serde(rename = "type", default)]
    kind: String,
}
#[derive(Deserialize)]
struct SimpleSigningImage {
    #[serde(rename = "docker-manifest-digest")]
    digest: String,
}

/// Checks one classic signature layer: `payload` (the layer blob) signed as `signature_b64`
/// by one of `keys`, naming `digest`. Returns the key's fingerprint.
pub fn verify_simple_signing(
    payload: &[u8],
    signature_b64: &str,
    digest: &str,
    keys: &[TrustedKey],
) -> Result<String, String> {
    let signature = decode_signature(&decode_base64(signature_b64, "the signature")?)?;
    let key = first_key(keys, |k| k.verify(payload, &signature).is_ok())
        .ok_or("the signature does not verify with any configured key")?;
    let parsed: SimpleSigning = serde_json::from_slice(payload)
        .map_err(|e| format!("the signed payload is not a simple-signing document: {e}"))?;
    if parsed.critical.kind != "cosign container image signature" {
        return Err(format!(
            "the signed payload is of type {:?}, not a cosign container image signature",
            parsed.critical.kind
        ));
    }
    if parsed.critical.image.digest != digest {
        return Err(format!(
            "the signature is for {}, not {digest}",
            parsed.critical.image.digest
        ));
    }
    Ok(key)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bundle {
    #[serde(default)]
    media_type: String,
    dsse_envelope: Option<Envelope>,
    message_signature: Option<MessageSignature>,
}
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    payload: String,
    payload_type: String,
    signatures: Vec<EnvelopeSignature>,
}
#[derive(Deserialize)]
struct EnvelopeSignature {
    sig: String,
}
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageSignature {
    message_digest: MessageDigest,
    signature: String,
}
#[derive(Deserialize)]
struct MessageDigest {
    algorithm: String,
    digest: String,
}
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Statement {
    #[serde(rename = "_type", default)]
    kind: String,
    #[serde(default)]
    subject: Vec<Subject>,
    #[serde(default)]
    predicate_type: String,
}
#[derive(Deserialize)]
struct Subject {
    #[serde(default)]
    digest: std::collections::BTreeMap<String, String>,
}

/// DSSE pre-authentication encoding: `DSSEv1 <len(type)> <type> <len(body)> <body>`.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Checks a Sigstore bundle (`v0.3` JSON) for the image `digest` (`sha256:<hex>`) with `keys`.
/// Returns the fingerprint of the key that verified it.
pub fn verify_bundle(bundle: &[u8], digest: &str, keys: &[TrustedKey]) -> Result<String, String> {
    let hex_digest = digest
        .strip_prefix("sha256:")
        .ok_or_else(|| format!("{digest} is not a sha256 digest"))?;
    let bundle: Bundle = serde_json::from_slice(bundle)
        .map_err(|e| format!("the bundle is not a Sigstore bundle: {e}"))?;
    if !bundle
        .media_type
        .starts_with("application/vnd.dev.sigstore.bundle")
    {
        return Err(format!(
            "the bundle has media type {:?}, not a Sigstore bundle",
            bundle.media_type
        ));
    }
    match (bundle.dsse_envelope, bundle.message_signature) {
        (Some(envelope), _) => {
            if envelope.payload_type != IN_TOTO_PAYLOAD_TYPE {
                return Err(format!(
                    "the DSSE envelope holds {:?}, not an in-toto statement",
                    envelope.payload_type
                ));
            }
            let payload = decode_base64(&envelope.payload, "the DSSE payload")?;
            let message = pae(&envelope.payload_type, &payload);
            let mut key = None;
            for signature in &envelope.signatures {
                let Ok(bytes) = decode_base64(&signature.sig, "a DSSE signature") else {
                    continue;
                };
                let Ok(signature) = decode_signature(&bytes) else {
                    continue;
                };
                key = first_key(keys, |k| k.verify(&message, &signature).is_ok());
                if key.is_some() {
                    break;
                }
            }
            let key = key.ok_or("the DSSE signature does not verify with any configured key")?;
            let statement: Statement = serde_json::from_slice(&payload)
                .map_err(|e| format!("the DSSE payload is not an in-toto statement: {e}"))?;
            if !statement.kind.starts_with("https://in-toto.io/Statement/") {
                return Err(format!(
                    "the DSSE payload is of type {:?}, not an in-toto statement",
                    statement.kind
                ));
            }
            if statement.predicate_type != COSIGN_SIGN_PREDICATE {
                return Err(format!(
                    "the statement's predicate is {:?}, not a cosign signature ({COSIGN_SIGN_PREDICATE})",
                    statement.predicate_type
                ));
            }
            let names_image = statement.subject.iter().any(|s| {
                s.digest
                    .get("sha256")
                    .is_some_and(|d| d.eq_ignore_ascii_case(hex_digest))
            });
            if !names_image {
                return Err(format!("the signed statement's subject is not {digest}"));
            }
            Ok(key)
        }
        (None, Some(message)) => {
            if message.message_digest.algorithm != "SHA2_256" {
                return Err(format!(
                    "the message digest algorithm is {:?}, not SHA2_256",
                    message.message_digest.algorithm
                ));
            }
            let signed = decode_base64(&message.message_digest.digest, "the message digest")?;
            if hex::encode(&signed) != hex_digest.to_ascii_lowercase() {
                return Err(format!(
                    "the signature is for sha256:{}, not {digest}",
                    hex::encode(&signed)
                ));
            }
            let signature = decode_signature(&decode_base64(&message.signature, "the signature")?)?;
            first_key(keys, |k| k.verify_prehash(&signed, &signature).is_ok())
                .ok_or_else(|| "the signature does not verify with any configured key".into())
        }
        (None, None) => {
            Err("the bundle has neither a DSSE envelope nor a message signature".into())
        }
    }
}

/// The verdict on one image from what its signature artifacts held: `Verified` as soon as
/// one verifies, `Invalid` (with the first reason) when some exist but none does, `Missing`
/// when there are none.
pub fn combine(results: Vec<(Format, Result<String, String>)>) -> Verdict {
    let mut first_error = None;
    for (format, result) in results {
        match result {
            Ok(key) => return Verdict::Verified { format, key },
            Err(reason) => {
                first_error
                    .get_or_insert_with(|| format!("{} signature: {reason}", format.as_str()));
            }
        }
    }
    match first_error {
        Some(reason) => Verdict::Invalid(reason),
        None => Verdict::Missing,
    }
}

/// Which tag may be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The best candidate whose signature verified, with its digest.
    pub chosen: Option<(String, String)>,
    /// Better candidates refused, best first.
    pub refused: Vec<Refused>,
}

/// Given candidates best first, each with its digest and verdict, the first verified one wins;
/// every better one is refused. Candidates after the winner are not looked at.
pub fn decide(ranked: &[(String, String, Verdict)]) -> Decision {
    let mut refused = Vec::new();
    for (tag, digest, verdict) in ranked {
        match verdict {
            Verdict::Verified { .. } => {
                return Decision {
                    chosen: Some((tag.clone(), digest.clone())),
                    refused,
                };
            }
            other => refused.push(Refused {
                tag: tag.clone(),
                digest: digest.clone(),
                why: Refusal::Signature(other.clone()),
            }),
        }
    }
    Decision {
        chosen: None,
        refused,
    }
}

#[cfg(test)]
mod tests;
