use super::*;
use p256::ecdsa::{
    SigningKey,
    signature::{Signer as _, hazmat::PrehashSigner as _},
};
use p256::pkcs8::LineEnding;

const DIGEST: &str = "sha256:4c8f2ad0a51c5d1b1ddeba8ac5c1bf1ac1c9a1b4d8a0f38e0c66de1f0f3d8a11";
const OTHER: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000001";

fn key(seed: u8) -> SigningKey {
    let mut bytes = [7u8; 32];
    bytes[0] = seed;
    SigningKey::from_slice(&bytes).expect("a valid scalar")
}

fn pem_of(key: &SigningKey) -> String {
    VerifyingKey::from(key)
        .to_public_key_pem(LineEnding::LF)
        .expect("pem")
}

fn trusted(key: &SigningKey) -> Vec<TrustedKey> {
    parse_keys(&pem_of(key)).expect("a public key")
}

fn der_b64(key: &SigningKey, message: &[u8]) -> String {
    let signature: Signature = key.sign(message);
    STANDARD.encode(signature.to_der().as_bytes())
}

fn simple_signing(digest: &str) -> Vec<u8> {
    format!(
        r#"{{"critical":{{"identity":{{"docker-reference":"127.0.0.1:5000/app"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":null}}"#
    )
    .into_bytes()
}

fn dsse_bundle(key: &SigningKey, subject: &str, predicate: &str) -> Vec<u8> {
    let hex = subject.trim_start_matches("sha256:");
    let statement = format!(
        r#"{{"_type":"https://in-toto.io/Statement/v1","subject":[{{"name":"127.0.0.1:5000/app","digest":{{"sha256":"{hex}"}}}}],"predicateType":"{predicate}","predicate":{{}}}}"#
    );
    let sig = der_b64(key, &pae(IN_TOTO_PAYLOAD_TYPE, statement.as_bytes()));
    serde_json::json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"publicKey": {"hint": "x"}, "tlogEntries": []},
        "dsseEnvelope": {
            "payload": STANDARD.encode(statement.as_bytes()),
            "payloadType": IN_TOTO_PAYLOAD_TYPE,
            "signatures": [{"sig": sig, "keyid": ""}]
        }
    })
    .to_string()
    .into_bytes()
}

#[test]
fn keys_are_read_from_pem_and_other_blocks_are_refused() {
    let both = format!("{}\n{}", pem_of(&key(1)), pem_of(&key(2)));
    let keys = parse_keys(&both).expect("two keys");
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0].fingerprint, keys[1].fingerprint);
    assert!(keys[0].fingerprint.starts_with("sha256:"));
    let private = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nabc\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n";
    assert!(
        parse_keys(private)
            .unwrap_err()
            .contains("not a public key")
    );
    assert!(parse_keys("nothing").unwrap_err().contains("no PEM"));
    let garbage = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n";
    assert!(parse_keys(garbage).unwrap_err().contains("P-256"));
    // The set fingerprint does not depend on the order of the keys.
    let reversed = format!("{}\n{}", pem_of(&key(2)), pem_of(&key(1)));
    assert_eq!(
        keys_fingerprint(&keys),
        keys_fingerprint(&parse_keys(&reversed).expect("two keys"))
    );
}

#[test]
fn a_classic_signature_verifies_with_its_key_and_for_its_image_only() {
    let signer = key(1);
    let payload = simple_signing(DIGEST);
    let signature = der_b64(&signer, &payload);
    let fingerprint =
        verify_simple_signing(&payload, &signature, DIGEST, &trusted(&signer)).expect("verified");
    assert_eq!(fingerprint, trusted(&signer)[0].fingerprint);

    let wrong = verify_simple_signing(&payload, &signature, DIGEST, &trusted(&key(2)));
    assert!(wrong.unwrap_err().contains("does not verify"));

    // A valid signature of another image does not vouch for this one.
    let other = simple_signing(OTHER);
    let moved = verify_simple_signing(&other, &der_b64(&signer, &other), DIGEST, &trusted(&signer));
    assert!(moved.unwrap_err().contains("not sha256:4c8f"));

    // A payload changed after signing fails.
    let mut tampered = payload.clone();
    tampered.push(b' ');
    assert!(verify_simple_signing(&tampered, &signature, DIGEST, &trusted(&signer)).is_err());
    assert!(verify_simple_signing(&payload, "%%%", DIGEST, &trusted(&signer)).is_err());
}

#[test]
fn a_dsse_bundle_verifies_over_the_pae_and_names_the_image() {
    let signer = key(3);
    let bundle = dsse_bundle(&signer, DIGEST, COSIGN_SIGN_PREDICATE);
    assert!(verify_bundle(&bundle, DIGEST, &trusted(&signer)).is_ok());
    assert!(
        verify_bundle(&bundle, DIGEST, &trusted(&key(4)))
            .unwrap_err()
            .contains("does not verify")
    );
    let other = dsse_bundle(&signer, OTHER, COSIGN_SIGN_PREDICATE);
    assert!(
        verify_bundle(&other, DIGEST, &trusted(&signer))
            .unwrap_err()
            .contains("subject")
    );
    // An attestation (another predicate) is not a signature of the image.
    let attestation = dsse_bundle(&signer, DIGEST, "https://slsa.dev/provenance/v1");
    assert!(
        verify_bundle(&attestation, DIGEST, &trusted(&signer))
            .unwrap_err()
            .contains("predicate")
    );
    assert!(verify_bundle(b"{}", DIGEST, &trusted(&signer)).is_err());
    assert_eq!(
        pae("t", b"ab"),
        b"DSSEv1 1 t 2 ab".to_vec(),
        "the DSSE spec's encoding"
    );
}

#[test]
fn a_message_signature_bundle_signs_the_image_digest() {
    let signer = key(5);
    let digest_bytes = hex::decode(DIGEST.trim_start_matches("sha256:")).expect("hex");
    let signature: Signature = signer.sign_prehash(&digest_bytes).expect("signed");
    let bundle = |digest: &[u8]| {
        serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "messageSignature": {
                "messageDigest": {"algorithm": "SHA2_256", "digest": STANDARD.encode(digest)},
                "signature": STANDARD.encode(signature.to_der().as_bytes()),
            }
        })
        .to_string()
        .into_bytes()
    };
    assert!(verify_bundle(&bundle(&digest_bytes), DIGEST, &trusted(&signer)).is_ok());
    assert!(verify_bundle(&bundle(&digest_bytes), DIGEST, &trusted(&key(6))).is_err());
    let other = hex::decode(OTHER.trim_start_matches("sha256:")).expect("hex");
    assert!(
        verify_bundle(&bundle(&other), DIGEST, &trusted(&signer))
            .unwrap_err()
            .contains("not sha256:4c8f")
    );
}

#[test]
fn verdicts_combine_to_verified_invalid_or_missing() {
    assert_eq!(combine(vec![]), Verdict::Missing);
    assert_eq!(
        combine(vec![
            (Format::Classic, Err("bad".into())),
            (Format::Bundle, Ok("k".into()))
        ]),
        Verdict::Verified {
            format: Format::Bundle,
            key: "k".into()
        }
    );
    assert_eq!(
        combine(vec![
            (Format::Classic, Err("bad".into())),
            (Format::Bundle, Err("worse".into()))
        ]),
        Verdict::Invalid("classic signature: bad".into())
    );
}

#[test]
fn the_newest_verified_tag_wins_and_newer_ones_are_refused() {
    let verified = Verdict::Verified {
        format: Format::Classic,
        key: "k".into(),
    };
    let c = |tag: &str, verdict: &Verdict| (tag.to_string(), format!("d-{tag}"), verdict.clone());
    // Newest signed: chosen, nothing refused.
    let d = decide(&[c("v3", &verified), c("v2", &verified)]);
    assert_eq!(d.chosen, Some(("v3".into(), "d-v3".into())));
    assert!(d.refused.is_empty());
    // Newest unsigned, the next one invalid, then a verified one: the watch moves to v1.
    let invalid = Verdict::Invalid("wrong key".into());
    let d = decide(&[
        c("v3", &Verdict::Missing),
        c("v2", &invalid),
        c("v1", &verified),
    ]);
    assert_eq!(d.chosen, Some(("v1".into(), "d-v1".into())));
    assert_eq!(d.refused.len(), 2);
    assert_eq!(d.refused[0].tag, "v3");
    assert_eq!(
        d.refused[0].reason(),
        imagewatch_crd::conditions::reason::SIGNATURE_MISSING
    );
    assert_eq!(
        d.refused[1].reason(),
        imagewatch_crd::conditions::reason::SIGNATURE_INVALID
    );
    assert!(d.refused[1].message().contains("wrong key"));
    // Nothing verified: nothing chosen.
    let d = decide(&[c("v3", &Verdict::Missing)]);
    assert_eq!(d.chosen, None);
    assert!(d.refused[0].message().contains("no cosign signature"));
}
