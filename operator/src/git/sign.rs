//! Commit signing for the git writer (read current state from Git, commit
//! and push edits).
//!
//! Signatures are SSH signatures (the `SSHSIG` format of OpenSSH's
//! `PROTOCOL.sshsig`), exactly what `git commit -S` produces with
//! `gpg.format = ssh`: the signed message is the raw commit object (as
//! `git cat-file commit` prints it, without the `gpgsig` header), the
//! namespace is `git` and the hash SHA-512. The armored signature goes into
//! the commit's `gpgsig` header, so `git verify-commit` (with
//! `gpg.ssh.allowedSignersFile`) and forge UIs ("Verified") accept it.
//!
//! OpenPGP (GPG) signing is not supported.

use std::path::{Path, PathBuf};

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
    /// The file is not an OpenSSH private key.
    #[error(
        "signing key {} is not an OpenSSH private key (\"-----BEGIN OPENSSH PRIVATE KEY-----\"): {message}",
        path.display()
    )]
    Parse { path: PathBuf, message: String },
    /// The key is protected by a passphrase.
    #[error(
        "signing key {} is encrypted; give an unencrypted key (`ssh-keygen -p -N '' -f KEY`)",
        path.display()
    )]
    Encrypted { path: PathBuf },
    /// The key type cannot sign (or signing it failed a self-test).
    #[error("signing key {} cannot sign: {message}", path.display())]
    Unusable { path: PathBuf, message: String },
}

/// Signs commits with an SSH private key (Ed25519, ECDSA P-256 or RSA).
#[derive(Clone)]
pub struct SshSigner {
    key: PrivateKey,
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
        Self::from_openssh(&text).map_err(|e| match e {
            SigningKeyError::Parse { message, .. } => SigningKeyError::Parse {
                path: path.to_owned(),
                message,
            },
            SigningKeyError::Encrypted { .. } => SigningKeyError::Encrypted {
                path: path.to_owned(),
            },
            SigningKeyError::Unusable { message, .. } => SigningKeyError::Unusable {
                path: path.to_owned(),
                message,
            },
            other => other,
        })
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
        let signer = SshSigner { key };
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
    }
}
