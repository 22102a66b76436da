//! Commit signing for the git writer (read current state from Git, commit
//! and push edits).
//!
//! Two formats, chosen by the key's content ([`CommitSigner::from_file`]):
//!
//! * **SSH** ([`SshSigner`], an OpenSSH private key): signatures in the
//!   `SSHSIG` format of OpenSSH's `PROTOCOL.sshsig`, exactly what
//!   `git commit -S` produces with `gpg.format = ssh`: the namespace is `git`
//!   and the hash SHA-512. `git verify-commit` checks them with
//!   `gpg.ssh.allowedSignersFile`.
//! * **OpenPGP** ([`PgpSigner`], an ASCII-armored secret key as
//!   `gpg --armor --export-secret-keys` writes it): a binary detached
//!   OpenPGP signature, what `git commit -S` produces with gpg. Pure Rust
//!   (no gpg binary or agent is needed); `git verify-commit` checks them
//!   with gpg and the public key.
//!
//! In both cases the signed message is the raw commit object (as
//! `git cat-file commit` prints it, without the `gpgsig` header) and the
//! armored signature goes into the commit's `gpgsig` header, so forge UIs
//! show the commit as "Verified" once the public key is registered there.

use std::path::{Path, PathBuf};

use pgp::{
    composed::{ArmorOptions, Deserializable, DetachedSignature, SignedSecretKey},
    packet::{KeyFlags, SecretSubkey, SignatureType},
    types::{
        EncryptedSecretParams, KeyDetails, Password, S2kParams, SecretParams, SigningKey,
        StringToKey,
    },
};
use ssh_key::{HashAlg, LineEnding, PrivateKey};

use super::error::{GitError, Result};

/// Namespace git uses for commit and tag signatures.
const GIT_NAMESPACE: &str = "git";

/// Why a signing key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SigningKeyError {
    /// The key file cannot be read.
    #[error("cannot read signing key {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is neither an OpenSSH private key nor an armored OpenPGP
    /// secret key.
    #[error(
        "signing key {} is not an OpenSSH private key (\"-----BEGIN OPENSSH PRIVATE KEY-----\") \
         or an ASCII-armored OpenPGP secret key (\"-----BEGIN PGP PRIVATE KEY BLOCK-----\"): {message}",
        path.display()
    )]
    Parse { path: PathBuf, message: String },
    /// The SSH key is protected by a passphrase.
    #[error(
        "signing key {} is encrypted; give an unencrypted key (`ssh-keygen -p -N '' -f KEY`)",
        path.display()
    )]
    Encrypted { path: PathBuf },
    /// The OpenPGP key is protected by a passphrase.
    #[error(
        "OpenPGP signing key {} ({fingerprint}) is protected by a passphrase; export it without \
         one (`gpg --edit-key KEY passwd` with an empty passphrase in a throw-away GNUPGHOME, \
         then `gpg --armor --export-secret-keys KEY`)",
        path.display()
    )]
    PgpEncrypted { path: PathBuf, fingerprint: String },
    /// The OpenPGP key has no key that may sign (only encryption subkeys,
    /// or every signing key is revoked or expired, or its secret part is
    /// missing, as in `--export-secret-subkeys` stubs).
    #[error("OpenPGP signing key {} has no usable signing key: {message}", path.display())]
    PgpNoSigningKey { path: PathBuf, message: String },
    /// The key type cannot sign (or signing it failed a self-test).
    #[error("signing key {} cannot sign: {message}", path.display())]
    Unusable { path: PathBuf, message: String },
}

impl SigningKeyError {
    /// The same error, naming the file the key came from.
    fn with_path(self, path: &Path) -> Self {
        let path = path.to_owned();
        match self {
            Self::Read { source, .. } => Self::Read { path, source },
            Self::Parse { message, .. } => Self::Parse { path, message },
            Self::Encrypted { .. } => Self::Encrypted { path },
            Self::PgpEncrypted { fingerprint, .. } => Self::PgpEncrypted { path, fingerprint },
            Self::PgpNoSigningKey { message, .. } => Self::PgpNoSigningKey { path, message },
            Self::Unusable { message, .. } => Self::Unusable { path, message },
        }
    }
}

/// Signs commits with the key `--signing-key` names: SSH or OpenPGP,
/// told apart by the key's content.
#[derive(Clone, Debug)]
pub enum CommitSigner {
    /// An OpenSSH key (`gpg.format = ssh`).
    Ssh(SshSigner),
    /// An OpenPGP key (`gpg.format = openpgp`, git's default).
    OpenPgp(PgpSigner),
}

/// Armor line that starts an OpenPGP secret key.
const PGP_PRIVATE_KEY_ARMOR: &str = "-----BEGIN PGP PRIVATE KEY BLOCK-----";

impl CommitSigner {
    /// Load an unencrypted signing key from `path` (as mounted from a
    /// Secret) and check that it can sign.
    pub fn from_file(path: &Path) -> std::result::Result<Self, SigningKeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| SigningKeyError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_text(&text).map_err(|e| e.with_path(path))
    }

    /// Parse a key: an ASCII-armored OpenPGP secret key
    /// (`-----BEGIN PGP PRIVATE KEY BLOCK-----`) or else an OpenSSH private
    /// key.
    pub fn from_text(text: &str) -> std::result::Result<Self, SigningKeyError> {
        if text.contains(PGP_PRIVATE_KEY_ARMOR) {
            PgpSigner::from_armored(text).map(Self::OpenPgp)
        } else {
            SshSigner::from_openssh(text).map(Self::Ssh)
        }
    }

    /// `ssh` or `openpgp`, as git's `gpg.format` names them.
    pub fn format(&self) -> &'static str {
        match self {
            Self::Ssh(_) => "ssh",
            Self::OpenPgp(_) => "openpgp",
        }
    }

    /// The public key to register with a forge or a verifier: an
    /// `authorized_keys` line (SSH) or an armored public key block
    /// (OpenPGP).
    pub fn public_key(&self) -> String {
        match self {
            Self::Ssh(s) => s.public_key(),
            Self::OpenPgp(p) => p.public_key(),
        }
    }

    /// A short identification of the key for logs: the SSH public key or
    /// the OpenPGP fingerprint of the signing (sub)key.
    pub fn key_id(&self) -> String {
        match self {
            Self::Ssh(s) => s.public_key(),
            Self::OpenPgp(p) => p.fingerprint(),
        }
    }

    /// Armored signature of `data` (the raw commit object) for the
    /// commit's `gpgsig` header.
    pub fn sign(&self, data: &[u8]) -> Result<String> {
        match self {
            Self::Ssh(s) => s.sign(data),
            Self::OpenPgp(p) => p.sign(data),
        }
    }

    /// Verify an armored signature made by this key over `data` (for tests
    /// and self-checks).
    pub fn verify(&self, data: &[u8], armored: &str) -> Result<()> {
        match self {
            Self::Ssh(s) => s.verify(data, armored),
            Self::OpenPgp(p) => p.verify(data, armored),
        }
    }
}

impl From<SshSigner> for CommitSigner {
    fn from(s: SshSigner) -> Self {
        Self::Ssh(s)
    }
}

impl From<PgpSigner> for CommitSigner {
    fn from(p: PgpSigner) -> Self {
        Self::OpenPgp(p)
    }
}

/// Which key of an OpenPGP certificate signs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PgpSigningKey {
    Primary,
    Subkey(usize),
}

/// Signs commits with an OpenPGP secret key (RSA, Ed25519, ECDSA, …): with
/// its newest valid signing subkey when it has one (as gpg does), else with
/// the primary key.
#[derive(Clone)]
pub struct PgpSigner {
    /// Boxed: a certificate is large, and signers are moved around in options.
    key: Box<SignedSecretKey>,
    signing: PgpSigningKey,
}

impl std::fmt::Debug for PgpSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgpSigner")
            .field("fingerprint", &self.fingerprint())
            .field("algorithm", &self.signing_key().algorithm())
            .finish()
    }
}

impl PgpSigner {
    /// Parse an ASCII-armored, unencrypted OpenPGP secret key and check
    /// that it can sign.
    pub fn from_armored(text: &str) -> std::result::Result<Self, SigningKeyError> {
        let parse = |message: String| SigningKeyError::Parse {
            path: PathBuf::new(),
            message,
        };
        let (key, _headers) = SignedSecretKey::from_string(text.trim())
            .map_err(|e| parse(format!("unreadable OpenPGP secret key: {e}")))?;
        key.verify_bindings()
            .map_err(|e| parse(format!("the key's self-signatures do not verify: {e}")))?;
        let signing =
            choose_signing_key(&key, pgp::types::Timestamp::now()).map_err(|message| {
                SigningKeyError::PgpNoSigningKey {
                    path: PathBuf::new(),
                    message,
                }
            })?;
        let signer = PgpSigner {
            key: Box::new(key),
            signing,
        };
        match signer.secret_params() {
            SecretParams::Plain(_) => {}
            SecretParams::Encrypted(_) => {
                return Err(SigningKeyError::PgpEncrypted {
                    path: PathBuf::new(),
                    fingerprint: signer.fingerprint(),
                });
            }
        }
        // Fail at startup, not on the first commit.
        let probe = b"imagewatch signing self-test";
        signer
            .sign(probe)
            .and_then(|sig| signer.verify(probe, &sig))
            .map_err(|e| SigningKeyError::Unusable {
                path: PathBuf::new(),
                message: e.to_string(),
            })?;
        Ok(signer)
    }

    fn signing_key(&self) -> &dyn SigningKey {
        match self.signing {
            PgpSigningKey::Primary => &self.key.primary_key,
            PgpSigningKey::Subkey(i) => &self.key.secret_subkeys[i].key,
        }
    }

    fn secret_params(&self) -> &SecretParams {
        match self.signing {
            PgpSigningKey::Primary => self.key.primary_key.secret_params(),
            PgpSigningKey::Subkey(i) => self.key.secret_subkeys[i].key.secret_params(),
        }
    }

    /// Fingerprint (upper-case hex) of the key that signs.
    pub fn fingerprint(&self) -> String {
        format!("{:X}", self.signing_key().fingerprint())
    }

    /// The certificate (public keys, user ids, self-signatures), armored:
    /// what `gpg --armor --export` prints, for `gpg --import` or a forge's
    /// GPG key settings.
    pub fn public_key(&self) -> String {
        self.key
            .to_public_key()
            .to_armored_string(ArmorOptions::default())
            .unwrap_or_else(|e| format!("<unencodable public key: {e}>"))
    }

    /// Armored detached signature (`-----BEGIN PGP SIGNATURE-----`) of
    /// `data`, binary mode, with the signer's fingerprint and the creation
    /// time in the hashed area.
    pub fn sign(&self, data: &[u8]) -> Result<String> {
        let key = self.signing_key();
        let err = |e: pgp::errors::Error| GitError::Signing {
            message: e.to_string(),
        };
        let sig = DetachedSignature::sign_binary_data(
            rand::thread_rng(),
            &Box::new(key),
            &Password::empty(),
            key.hash_alg(),
            data,
        )
        .map_err(err)?;
        sig.to_armored_string(ArmorOptions::default()).map_err(err)
    }

    /// Verify an armored signature made by this key over `data` (for tests
    /// and self-checks).
    pub fn verify(&self, data: &[u8], armored: &str) -> Result<()> {
        let (sig, _) = DetachedSignature::from_string(armored).map_err(|e| GitError::Signing {
            message: format!("unreadable signature: {e}"),
        })?;
        let result = match self.signing {
            PgpSigningKey::Primary => sig.verify(self.key.primary_key.public_key(), data),
            PgpSigningKey::Subkey(i) => {
                sig.verify(self.key.secret_subkeys[i].key.public_key(), data)
            }
        };
        result.map_err(|e| GitError::Signing {
            message: format!("signature does not verify: {e}"),
        })
    }
}

/// The key that signs (pure): the newest subkey whose binding signature
/// allows signing and that is neither revoked nor expired at `now`, else the
/// primary key if its self-signatures allow signing (or say nothing about
/// key usage).
fn choose_signing_key(
    key: &SignedSecretKey,
    now: pgp::types::Timestamp,
) -> std::result::Result<PgpSigningKey, String> {
    let usable_subkey = |sub: &SecretSubkey, sigs: &[pgp::packet::Signature]| {
        let revoked = sigs
            .iter()
            .any(|s| s.typ() == Some(SignatureType::SubkeyRevocation));
        let binding = sigs
            .iter()
            .filter(|s| s.typ() == Some(SignatureType::SubkeyBinding))
            .max_by_key(|s| s.created().map(|t| t.as_secs()).unwrap_or_default());
        let Some(binding) = binding else {
            return false;
        };
        let expired = binding.key_expiration_time().is_some_and(|d| {
            d.as_secs() != 0
                && u64::from(sub.created_at().as_secs()) + u64::from(d.as_secs())
                    <= u64::from(now.as_secs())
        });
        !revoked && !expired && binding.key_flags().sign()
    };
    let subkey = key
        .secret_subkeys
        .iter()
        .enumerate()
        .filter(|(_, s)| usable_subkey(&s.key, &s.signatures))
        .filter(
            |(_, s)| !matches!(s.key.secret_params(), SecretParams::Encrypted(e) if is_gnu_stub(e)),
        )
        .max_by_key(|(_, s)| s.key.created_at().as_secs());
    if let Some((i, _)) = subkey {
        return Ok(PgpSigningKey::Subkey(i));
    }
    if !key.details.revocation_signatures.is_empty() {
        return Err("the primary key is revoked and no subkey may sign".into());
    }
    let self_sigs: Vec<_> = key
        .details
        .users
        .iter()
        .flat_map(|u| u.signatures.iter())
        .chain(key.details.direct_signatures.iter())
        .collect();
    let flags_say_sign = self_sigs.iter().any(|s| s.key_flags().sign());
    let flags_say_nothing = self_sigs
        .iter()
        .all(|s| s.key_flags() == KeyFlags::default());
    if !(flags_say_sign || flags_say_nothing) {
        return Err(
            "neither the primary key nor a valid subkey is marked for signing (usage S)".into(),
        );
    }
    if let SecretParams::Encrypted(e) = key.primary_key.secret_params()
        && is_gnu_stub(e)
    {
        return Err(
            "the primary key's secret part is not in the export (a gnu-dummy stub) and no \
             subkey may sign"
                .into(),
        );
    }
    Ok(PgpSigningKey::Primary)
}

/// Whether secret key material is a GnuPG stub (S2K 101, "gnu-dummy"):
/// exported with `--export-secret-subkeys`, the secret part is not there.
fn is_gnu_stub(params: &EncryptedSecretParams) -> bool {
    let s2k = match params.string_to_key_params() {
        S2kParams::Cfb { s2k, .. }
        | S2kParams::MalleableCfb { s2k, .. }
        | S2kParams::Aead { s2k, .. } => s2k,
        _ => return false,
    };
    matches!(s2k, StringToKey::Private { typ: 101, .. })
}

/// Signs commits with an SSH private key (Ed25519, ECDSA P-256 or RSA).
#[derive(Clone)]
pub struct SshSigner {
    /// Boxed: keeps [`CommitSigner`] small.
    key: Box<PrivateKey>,
}

impl std::fmt::Debug for SshSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshSigner")
            .field("algorithm", &self.key.algorithm().as_str())
            .field("public_key", &self.public_key())
            .finish()
    }
}

impl SshSigner {
    /// Load an unencrypted OpenSSH private key from `path` (as mounted from
    /// a Secret) and check that it can sign.
    pub fn from_file(path: &Path) -> std::result::Result<Self, SigningKeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| SigningKeyError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_openssh(&text).map_err(|e| e.with_path(path))
    }

    /// Parse an OpenSSH private key and check that it can sign.
    pub fn from_openssh(text: &str) -> std::result::Result<Self, SigningKeyError> {
        let key = PrivateKey::from_openssh(text.trim()).map_err(|e| SigningKeyError::Parse {
            path: PathBuf::new(),
            message: e.to_string(),
        })?;
        if key.is_encrypted() {
            return Err(SigningKeyError::Encrypted {
                path: PathBuf::new(),
            });
        }
        let signer = SshSigner { key: Box::new(key) };
        // Fail at startup, not on the first commit.
        signer
            .sign(b"imagewatch signing self-test")
            .map_err(|e| SigningKeyError::Unusable {
                path: PathBuf::new(),
                message: e.to_string(),
            })?;
        Ok(signer)
    }

    /// The public key in `authorized_keys` form (`ssh-ed25519 AAAA… comment`),
    /// for an allowed-signers file or a forge's signing-key settings.
    pub fn public_key(&self) -> String {
        self.key
            .public_key()
            .to_openssh()
            .unwrap_or_else(|e| format!("<unencodable public key: {e}>"))
    }

    /// Armored SSH signature (`-----BEGIN SSH SIGNATURE-----`) of `data`.
    pub fn sign(&self, data: &[u8]) -> Result<String> {
        let sig = self
            .key
            .sign(GIT_NAMESPACE, HashAlg::Sha512, data)
            .map_err(|e| GitError::Signing {
                message: e.to_string(),
            })?;
        sig.to_pem(LineEnding::LF).map_err(|e| GitError::Signing {
            message: e.to_string(),
        })
    }

    /// Verify an armored signature made by this key over `data` (for tests
    /// and self-checks).
    pub fn verify(&self, data: &[u8], armored: &str) -> Result<()> {
        let sig: ssh_key::SshSig =
            armored
                .parse()
                .map_err(|e: ssh_key::Error| GitError::Signing {
                    message: format!("unreadable signature: {e}"),
                })?;
        self.key
            .public_key()
            .verify(GIT_NAMESPACE, data, &sig)
            .map_err(|e| GitError::Signing {
                message: format!("signature does not verify: {e}"),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ssh_key::private::{Ed25519Keypair, KeypairData};

    fn test_key() -> String {
        let pair = Ed25519Keypair::from_seed(&[7; 32]);
        PrivateKey::new(KeypairData::Ed25519(pair), "imagewatch-test")
            .unwrap()
            .to_openssh(LineEnding::LF)
            .unwrap()
            .to_string()
    }

    #[test]
    fn signs_and_verifies() {
        let signer = SshSigner::from_openssh(&test_key()).unwrap();
        let armored = signer.sign(b"tree 123\n\nmessage\n").unwrap();
        assert!(armored.starts_with("-----BEGIN SSH SIGNATURE-----\n"));
        assert!(armored.trim_end().ends_with("-----END SSH SIGNATURE-----"));
        signer.verify(b"tree 123\n\nmessage\n", &armored).unwrap();
        assert!(signer.verify(b"tree 124\n\nmessage\n", &armored).is_err());
        assert!(signer.public_key().starts_with("ssh-ed25519 "));
        assert!(!format!("{signer:?}").contains("PRIVATE"));
    }

    #[test]
    fn rejects_what_is_not_a_key() {
        let err =
            SshSigner::from_openssh("-----BEGIN PGP PRIVATE KEY BLOCK-----\nxx\n").unwrap_err();
        assert!(matches!(err, SigningKeyError::Parse { .. }), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let err = SshSigner::from_file(&missing).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        let err = CommitSigner::from_file(&missing).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        let err = CommitSigner::from_text("hello").unwrap_err();
        assert!(err.to_string().contains("OpenPGP"), "{err}");
    }

    const ED25519: &str = include_str!("testdata/openpgp-ed25519.asc");
    const RSA3072: &str = include_str!("testdata/openpgp-rsa3072.asc");
    const SUBKEY: &str = include_str!("testdata/openpgp-signing-subkey.asc");
    const ENCRYPTED: &str = include_str!("testdata/openpgp-encrypted.asc");

    #[test]
    fn the_format_is_told_by_the_content() {
        let ssh = CommitSigner::from_text(&test_key()).unwrap();
        assert_eq!(ssh.format(), "ssh");
        let pgp = CommitSigner::from_text(ED25519).unwrap();
        assert_eq!(pgp.format(), "openpgp");
        // Leading text before the armor (as `gpg` may write with comments) is fine.
        let commented = format!("# signing key for the bot\n{ED25519}");
        assert_eq!(
            CommitSigner::from_text(&commented).unwrap().format(),
            "openpgp"
        );
    }

    #[test]
    fn openpgp_signs_and_verifies() {
        for (armored, fingerprint) in [
            (ED25519, "0C038580A4A2A3E0A9012C8578A564EBDC3E3DA9"),
            (RSA3072, "19E68F3F31DC6A7EF6F518F98946736B235F4868"),
        ] {
            let signer = CommitSigner::from_text(armored).unwrap();
            let data = b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\nmessage\n";
            let sig = signer.sign(data).unwrap();
            assert!(sig.starts_with("-----BEGIN PGP SIGNATURE-----\n"), "{sig}");
            assert!(
                sig.trim_end().ends_with("-----END PGP SIGNATURE-----"),
                "{sig}"
            );
            signer.verify(data, &sig).unwrap();
            assert!(signer.verify(b"tree 0\n\nmessage\n", &sig).is_err());
            assert_eq!(signer.key_id(), fingerprint);
            assert!(
                signer
                    .public_key()
                    .starts_with("-----BEGIN PGP PUBLIC KEY BLOCK-----")
            );
            assert!(!signer.public_key().contains("PRIVATE"));
            assert!(!format!("{signer:?}").contains("PRIVATE"));
        }
    }

    #[test]
    fn a_signing_subkey_signs_when_there_is_one() {
        // Primary key: certify only; subkey CB22…59AF: sign.
        let CommitSigner::OpenPgp(signer) = CommitSigner::from_text(SUBKEY).unwrap() else {
            panic!("not OpenPGP");
        };
        assert_eq!(
            signer.fingerprint(),
            "CB229FC15FEAA5FA4CF9BC751E5C875F264E59AF"
        );
        let sig = signer.sign(b"x").unwrap();
        signer.verify(b"x", &sig).unwrap();
    }

    #[test]
    fn a_passphrase_protected_openpgp_key_is_refused_clearly() {
        let err = CommitSigner::from_text(ENCRYPTED).unwrap_err();
        assert!(matches!(err, SigningKeyError::PgpEncrypted { .. }), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("signing.asc");
        std::fs::write(&path, ENCRYPTED).unwrap();
        let msg = CommitSigner::from_file(&path).unwrap_err().to_string();
        assert!(
            msg.contains("signing.asc")
                && msg.contains("passphrase")
                && msg.contains("94E5B9FE2CAB66B2ACDC1E1FD6B19022ED815E2D"),
            "{msg}"
        );
    }

    #[test]
    fn a_broken_openpgp_key_is_a_parse_error() {
        let broken = ED25519.replacen('A', "B", 3);
        let err = CommitSigner::from_text(&broken).unwrap_err();
        assert!(
            matches!(
                err,
                SigningKeyError::Parse { .. } | SigningKeyError::Unusable { .. }
            ),
            "{err}"
        );
        let err = CommitSigner::from_text(
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nAAAA\n-----END PGP PRIVATE KEY BLOCK-----\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("OpenPGP"), "{err}");
    }
}
