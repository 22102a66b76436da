//! OpenPGP commit signing checked by the real `gpg`: the writer commits with an armored
//! OpenPGP key (as `--signing-key` loads it), and `git verify-commit` — gpg with only the
//! exported public key in a throw-away GNUPGHOME — must call the signature good. A commit
//! whose content no longer matches its signature must be called bad, so the check can fail.

mod support;

use std::{path::Path, process::Command, time::Duration};

use imagewatch::git::CommitSigner;
use support::*;

/// An empty GNUPGHOME holding only imported public keys; stops any gpg daemon on drop.
struct GnupgHome(tempfile::TempDir);

impl GnupgHome {
    fn new() -> Self {
        // Short path: gpg's sockets live in the home directory.
        let dir = tempfile::Builder::new()
            .prefix("iw-gpg")
            .tempdir_in("/tmp")
            .unwrap();
        Self(dir)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    fn import(&self, armored_public_key: &str) {
        let file = self.path().join("public.asc");
        std::fs::write(&file, armored_public_key).unwrap();
        let out = Command::new("gpg")
            .arg("--homedir")
            .arg(self.path())
            .args(["--batch", "--import"])
            .arg(&file)
            .output()
            .expect("gpg runs");
        assert!(
            out.status.success(),
            "gpg --import: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `git verify-commit --raw -v commit` in `git_dir` with gpg in this home: (ok, output).
    fn verify_commit(&self, git_dir: &Path, commit: &str) -> (bool, String) {
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(git_dir)
            .args([
                "-c",
                "gpg.program=gpg",
                "verify-commit",
                "--raw",
                "-v",
                commit,
            ])
            .env("GNUPGHOME", self.path())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .expect("git runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }
}

impl Drop for GnupgHome {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .arg("--homedir")
            .arg(self.path())
            .args(["--kill", "all"])
            .output();
    }
}

/// Commits one edit signed with the key in `key_file` and checks the result with gpg.
async fn signed_commit_verifies_with_gpg(key_file: &str, signer_fingerprint: &str, uid: &str) {
    let fx = Fixture::new(1, 0);
    let key = fx.tmp.path().join("signing-key.asc");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("git/src/testdata")
            .join(key_file),
        &key,
    )
    .unwrap();
    let signer = CommitSigner::from_file(&key).unwrap();
    assert_eq!(signer.format(), "openpgp");
    let mut o = options(Duration::from_millis(50));
    o.signer = Some(signer.clone());
    let writer = fx.writer(o);
    let r = writer.apply(fx.request(&single(0), "2.0.0")).await.unwrap();
    let commit = r.commit.unwrap();

    let raw = fx.remote_git(&["cat-file", "commit", &commit]);
    assert!(
        raw.contains("\ngpgsig -----BEGIN PGP SIGNATURE-----\n"),
        "{raw}"
    );

    let gnupg = GnupgHome::new();
    gnupg.import(&signer.public_key());
    let (ok, text) = gnupg.verify_commit(&fx.remote, &commit);
    assert!(ok, "{key_file}: {text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("[GNUPG:] GOODSIG ") && l.ends_with(uid)),
        "good signature of {uid}: {text}"
    );
    assert!(
        text.contains(&format!("[GNUPG:] VALIDSIG {signer_fingerprint} ")),
        "signed by {signer_fingerprint}: {text}"
    );

    // The same signature over a changed commit (other message) is bad: gpg really checks it.
    let tampered = raw.replacen("imagewatch", "imagewatcH", 1);
    assert_ne!(tampered, raw);
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(&fx.remote)
        .args(["hash-object", "-t", "commit", "-w", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(format!("{tampered}\n").as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(out.status.success());
    let forged = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let (ok, text) = gnupg.verify_commit(&fx.remote, &forged);
    assert!(!ok, "a tampered commit verified: {text}");
    assert!(text.contains("[GNUPG:] BADSIG"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ed25519_signed_commits_verify_with_gpg() {
    signed_commit_verifies_with_gpg(
        "openpgp-ed25519.asc",
        "0C038580A4A2A3E0A9012C8578A564EBDC3E3DA9",
        "imagewatch test <imagewatch-test@example.com>",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsa_signed_commits_verify_with_gpg() {
    signed_commit_verifies_with_gpg(
        "openpgp-rsa3072.asc",
        "19E68F3F31DC6A7EF6F518F98946736B235F4868",
        "imagewatch rsa test <imagewatch-rsa@example.com>",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signing_subkey_signs_and_verifies_with_gpg() {
    signed_commit_verifies_with_gpg(
        "openpgp-signing-subkey.asc",
        "CB229FC15FEAA5FA4CF9BC751E5C875F264E59AF",
        "imagewatch subkey test <imagewatch-subkey@example.com>",
    )
    .await;
}
