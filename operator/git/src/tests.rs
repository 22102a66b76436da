//! End-to-end tests of the git writer (read current state from Git, commit
//! and push edits) against real repositories.
//!
//! Remotes are bare repositories in temporary directories reached through
//! `file://` URLs; "other writers" are `git` CLI clones pushing to them.
//! One test starts a private `sshd` on loopback to exercise key auth and
//! host key verification, and one a fake HTTP server that always answers
//! 401, to prove bad credentials fail fast instead of looping.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::*;

// ---------------------------------------------------------------- helpers

/// Run the git CLI isolated from any user or system configuration.
fn git(cwd: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(cwd)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Other Writer")
        .env("GIT_AUTHOR_EMAIL", "other@example.com")
        .env("GIT_COMMITTER_NAME", "Other Writer")
        .env("GIT_COMMITTER_EMAIL", "other@example.com")
        .output()
        .expect("git CLI runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn write(path: &Path, contents: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, contents).unwrap();
}

struct Fixture {
    tmp: TempDir,
    remote: PathBuf,
    url: String,
    seed: Oid,
}

impl Fixture {
    /// A bare remote whose `main` has one commit with nested files.
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let remote = tmp.path().join("remote.git");
        git(
            tmp.path(),
            &["init", "--bare", "--initial-branch=main", "remote.git"],
        );
        let work = tmp.path().join("seed");
        git(
            tmp.path(),
            &["clone", "--quiet", remote.to_str().unwrap(), "seed"],
        );
        git(&work, &["checkout", "--quiet", "-b", "main"]);
        write(
            &work.join("apps/web/deploy.yaml"),
            "image: registry.example.com/web:1.0.0\n",
        );
        write(&work.join("apps/web/kustomization.yml"), "resources: []\n");
        write(&work.join("apps/web/README.md"), "# web\n");
        write(
            &work.join("apps/api/deploy.yaml"),
            "image: registry.example.com/api:2.0.0\n",
        );
        write(&work.join("infra/db.yaml"), "replicas: 1\n");
        write(&work.join("top.yaml"), "kind: List\n");
        write(&work.join("scripts/run.sh"), "#!/bin/sh\n");
        std::fs::set_permissions(
            work.join("scripts/run.sh"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "--quiet", "-m", "seed"]);
        git(&work, &["push", "--quiet", "origin", "main"]);
        let seed = Oid::from_str(&git(&work, &["rev-parse", "HEAD"])).unwrap();
        let url = format!("file://{}", remote.display());
        Fixture {
            tmp,
            remote,
            url,
            seed,
        }
    }

    fn cache(&self) -> RepoCache {
        RepoCache::new(self.tmp.path().join("cache"))
    }

    /// Commit and push a change from an independent CLI clone.
    fn other_writer_push(&self, name: &str, path: &str, contents: &str) -> Oid {
        let work = self.tmp.path().join(name);
        if !work.exists() {
            git(
                self.tmp.path(),
                &["clone", "--quiet", self.remote.to_str().unwrap(), name],
            );
        } else {
            git(&work, &["pull", "--quiet", "--ff-only", "origin", "main"]);
        }
        write(&work.join(path), contents);
        git(&work, &["add", "-A"]);
        git(
            &work,
            &["commit", "--quiet", "-m", &format!("other: {path}")],
        );
        git(&work, &["push", "--quiet", "origin", "HEAD:main"]);
        Oid::from_str(&git(&work, &["rev-parse", "HEAD"])).unwrap()
    }

    fn remote_git(&self, args: &[&str]) -> String {
        let mut all = vec!["--git-dir", self.remote.to_str().unwrap()];
        all.extend_from_slice(args);
        git(self.tmp.path(), &all)
    }

    fn remote_main(&self) -> Oid {
        Oid::from_str(&self.remote_git(&["rev-parse", "main"])).unwrap()
    }

    fn remote_file(&self, path: &str) -> String {
        self.remote_git(&["show", &format!("main:{path}")])
    }
}

fn author() -> Author {
    Author {
        name: "imagewatch".into(),
        email: "imagewatch@example.com".into(),
    }
}

fn edit(path: &str, contents: &str) -> FileEdit {
    FileEdit {
        path: path.into(),
        contents: contents.as_bytes().to_vec(),
    }
}

/// Object id of `path` in the tree of `commit`.
fn entry_id(repo: &Repo, commit: Oid, path: &str) -> Oid {
    repo.commit_tree(commit)
        .unwrap()
        .get_path(Path::new(path))
        .unwrap()
        .id()
}

// ------------------------------------------------------------------ tests

#[test]
fn public_types_are_send() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<Repo>();
    send_sync::<RepoCache>();
    send_sync::<GitAuth>();
    send_sync::<GitError>();
    send_sync::<PushOutcome>();
}

#[test]
fn clone_cache_is_reused() {
    let fx = Fixture::new();
    let cache = fx.cache();
    let dir = {
        let repo = cache.open_or_clone(&fx.url, &GitAuth::Anonymous).unwrap();
        assert_eq!(repo.cached_head("main").unwrap(), None);
        let head = repo.fetch("main", &GitAuth::Anonymous).unwrap();
        assert_eq!(head, fx.seed);
        assert!(repo.raw().is_bare());
        repo.path().to_owned()
    };
    // Something only the first open could have put there.
    std::fs::write(dir.join("marker"), "first").unwrap();

    let repo = cache.open_or_clone(&fx.url, &GitAuth::Anonymous).unwrap();
    assert_eq!(repo.path(), dir);
    assert!(dir.join("marker").exists(), "second open recloned");
    // Objects and refs from the first fetch are there without fetching.
    assert_eq!(repo.cached_head("main").unwrap(), Some(fx.seed));
    drop(repo);

    // One clone directory, no leftovers from the atomic init.
    let entries: Vec<_> = std::fs::read_dir(cache.root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].starts_with("local_"), "{entries:?}");
    assert_eq!(cache.dir_for(&fx.url, &GitAuth::Anonymous).unwrap(), dir);
}

#[test]
fn a_cache_dir_of_another_url_is_not_reused() {
    let fx = Fixture::new();
    let cache = fx.cache();
    let dir = cache.dir_for(&fx.url, &GitAuth::Anonymous).unwrap();
    // Simulate a stale or foreign repository in our slot.
    git2::Repository::init_bare(&dir).unwrap();
    std::fs::write(dir.join("marker"), "foreign").unwrap();
    let repo = cache.open_or_clone(&fx.url, &GitAuth::Anonymous).unwrap();
    assert!(!dir.join("marker").exists());
    assert_eq!(repo.fetch("main", &GitAuth::Anonymous).unwrap(), fx.seed);
}

#[test]
fn fetch_is_incremental_and_follows_the_branch() {
    let fx = Fixture::new();
    let cache = fx.cache();
    let repo = cache.open_or_clone(&fx.url, &GitAuth::Anonymous).unwrap();
    assert_eq!(repo.fetch("main", &GitAuth::Anonymous).unwrap(), fx.seed);
    let next = fx.other_writer_push("w1", "infra/db.yaml", "replicas: 3\n");
    assert_eq!(repo.fetch("main", &GitAuth::Anonymous).unwrap(), next);
    assert_eq!(
        repo.read_file(next, "infra/db.yaml").unwrap().as_deref(),
        Some(&b"replicas: 3\n"[..])
    );
    // Tags and other branches are not fetched.
    fx.remote_git(&["branch", "feature", "main"]);
    repo.fetch("main", &GitAuth::Anonymous).unwrap();
    assert!(
        repo.raw()
            .find_reference("refs/remotes/origin/feature")
            .is_err()
    );
}

#[test]
fn missing_branch_and_missing_repo() {
    let fx = Fixture::new();
    let cache = fx.cache();
    let repo = cache.open_or_clone(&fx.url, &GitAuth::Anonymous).unwrap();
    let err = repo
        .fetch("does-not-exist", &GitAuth::Anonymous)
        .unwrap_err();
    assert!(matches!(err, GitError::BranchNotFound { .. }), "{err}");
    assert_eq!(err.category(), "not_found");
    let err = repo.fetch("bad..name", &GitAuth::Anonymous).unwrap_err();
    assert!(matches!(err, GitError::InvalidBranch { .. }), "{err}");
    drop(repo);

    let missing = format!("file://{}", fx.tmp.path().join("nope.git").display());
    let err = cache
        .open_or_clone(&missing, &GitAuth::Anonymous)
        .unwrap_err();
    assert_eq!(err.category(), "not_found", "{err}");
    assert!(
        !cache
            .dir_for(&missing, &GitAuth::Anonymous)
            .unwrap()
            .exists()
    );
}

#[test]
fn deleted_branch_drops_stale_tracking_ref() {
    let fx = Fixture::new();
    fx.remote_git(&["branch", "gone", "main"]);
    let cache = fx.cache();
    let repo = cache.open_or_clone(&fx.url, &GitAuth::Anonymous).unwrap();
    repo.fetch("gone", &GitAuth::Anonymous).unwrap();
    fx.remote_git(&["branch", "-D", "gone"]);
    let err = repo.fetch("gone", &GitAuth::Anonymous).unwrap_err();
    assert!(matches!(err, GitError::BranchNotFound { .. }), "{err}");
    assert_eq!(repo.cached_head("gone").unwrap(), None);
}

#[test]
fn read_files_under_only_reads_the_prefix() {
    let fx = Fixture::new();
    let cache = fx.cache();
    let repo = cache.open_or_clone(&fx.url, &GitAuth::Anonymous).unwrap();
    let head = repo.fetch("main", &GitAuth::Anonymous).unwrap();

    let files = repo.read_files_under(head, "apps/web").unwrap();
    let names: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        names,
        ["apps/web/deploy.yaml", "apps/web/kustomization.yml"]
    );
    assert_eq!(files[0].1, b"image: registry.example.com/web:1.0.0\n");

    // Same result for sloppy spellings of the prefix.
    assert_eq!(repo.read_files_under(head, "./apps/web/").unwrap(), files);

    let names: Vec<String> = repo
        .read_files_under(head, "apps")
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert_eq!(
        names,
        [
            "apps/api/deploy.yaml",
            "apps/web/deploy.yaml",
            "apps/web/kustomization.yml"
        ]
    );
    assert_eq!(repo.read_files_under(head, "").unwrap().len(), 5);

    for bad in ["nope", "top.yaml", "apps/../infra"] {
        let err = repo.read_files_under(head, bad).unwrap_err();
        assert!(matches!(err, GitError::PathNotFound { .. }), "{bad}: {err}");
    }

    assert_eq!(
        repo.read_file(head, "top.yaml").unwrap().as_deref(),
        Some(&b"kind: List\n"[..])
    );
    assert_eq!(repo.read_file(head, "apps/missing.yaml").unwrap(), None);
    assert_eq!(repo.read_file(head, "apps").unwrap(), None);
}

#[test]
fn read_files_under_never_touches_sibling_trees() {
    // Build a commit whose sibling subtree object is then deleted from the
    // object database: reading under the prefix must not notice, reading
    // the whole repository must. That is what "cost is the subtree's"
    // means, independent of timing.
    let tmp = tempfile::tempdir().unwrap();
    let raw = git2::Repository::init_bare(tmp.path().join("r.git")).unwrap();
    let blob = |s: &str| raw.blob(s.as_bytes()).unwrap();
    let tree = |entries: &[(&str, Oid, i32)]| {
        let mut b = raw.treebuilder(None).unwrap();
        for (n, id, mode) in entries {
            b.insert(n, *id, *mode).unwrap();
        }
        b.write().unwrap()
    };
    let wanted = tree(&[("a.yaml", blob("a: 1\n"), 0o100644)]);
    let huge = tree(&[("x.yaml", blob("x: 1\n"), 0o100644)]);
    let apps = tree(&[("web", wanted, 0o040000)]);
    let root = tree(&[("apps", apps, 0o040000), ("monorepo", huge, 0o040000)]);
    let sig = git2::Signature::now("t", "t@example.com").unwrap();
    let root_tree = raw.find_tree(root).unwrap();
    let commit = raw.commit(None, &sig, &sig, "c", &root_tree, &[]).unwrap();
    drop(root_tree);
    let hex = huge.to_string();
    std::fs::remove_file(
        tmp.path()
            .join("r.git/objects")
            .join(&hex[..2])
            .join(&hex[2..]),
    )
    .unwrap();
    drop(raw);

    // Read through a cached Repo whose object database borrows r.git's
    // objects (git "alternates"), so the damaged store is what it reads.
    let url = format!("file://{}", tmp.path().join("r.git").display());
    let cache = RepoCache::new(tmp.path().join("cache"));
    let repo = cache.open_or_clone(&url, &GitAuth::Anonymous).unwrap();
    std::fs::write(
        repo.path().join("objects/info/alternates"),
        format!("{}\n", tmp.path().join("r.git/objects").display()),
    )
    .unwrap();
    drop(repo);
    let repo = cache.open_or_clone(&url, &GitAuth::Anonymous).unwrap();

    let files = repo.read_files_under(commit, "apps").unwrap();
    assert_eq!(
        files,
        vec![("apps/web/a.yaml".to_owned(), b"a: 1\n".to_vec())]
    );
    assert!(repo.read_files_under(commit, "").is_err());
}

#[test]
fn commit_edits_rewrites_only_the_edited_path() {
    let fx = Fixture::new();
    let cache = fx.cache();
    let repo = cache.open_or_clone(&fx.url, &GitAuth::Anonymous).unwrap();
    let head = repo.fetch("main", &GitAuth::Anonymous).unwrap();

    let commit = repo
        .commit_edits(
            "main",
            head,
            &[
                edit(
                    "apps/web/deploy.yaml",
                    "image: registry.example.com/web:1.1.0\n",
                ),
                edit("apps/new/svc.yaml", "kind: Service\n"),
                edit("scripts/run.sh", "#!/bin/sh\necho hi\n"),
            ],
            "web: 1.0.0 -> 1.1.0",
            &author(),
        )
        .unwrap()
        .expect("something changed");

    let c = repo.raw().find_commit(commit).unwrap();
    assert_eq!(c.parent_ids().collect::<Vec<_>>(), [head]);
    assert_eq!(c.message().unwrap(), "web: 1.0.0 -> 1.1.0\n");
    assert_eq!(c.author().name().unwrap(), "imagewatch");
    assert_eq!(c.committer().email().unwrap(), "imagewatch@example.com");

    // Untouched entries keep their object ids, at every level.
    for same in [
        "top.yaml",
        "infra",
        "apps/api",
        "apps/web/kustomization.yml",
        "apps/web/README.md",
    ] {
        assert_eq!(
            entry_id(&repo, commit, same),
            entry_id(&repo, head, same),
            "{same}"
        );
    }
    for changed in ["apps", "apps/web", "apps/web/deploy.yaml", "scripts"] {
        assert_ne!(
            entry_id(&repo, commit, changed),
            entry_id(&repo, head, changed),
            "{changed}"
        );
    }
    assert_eq!(
        repo.read_file(commit, "apps/web/deploy.yaml").unwrap(),
        Some(b"image: registry.example.com/web:1.1.0\n".to_vec())
    );
    assert_eq!(
        repo.read_file(commit, "apps/new/svc.yaml").unwrap(),
        Some(b"kind: Service\n".to_vec())
    );
    // The executable bit survives a content edit.
    let tree = repo.commit_tree(commit).unwrap();
    let run = tree.get_path(Path::new("scripts/run.sh")).unwrap();
    assert_eq!(run.filemode(), 0o100755);

    // Only our private ref moved; the branch mirror and the remote did not.
    assert_eq!(
        repo.raw()
            .refname_to_id("refs/imagewatch/pending/main")
            .unwrap(),
        commit
    );
    assert_eq!(repo.cached_head("main").unwrap(), Some(head));
    assert_eq!(fx.remote_main(), head);
}

#[test]
fn commit_edits_without_changes_is_none() {
    let fx = Fixture::new();
    let cache = fx.cache();
    let repo = cache.open_or_clone(&fx.url, &GitAuth::Anonymous).unwrap();
    let head = repo.fetch("main", &GitAuth::Anonymous).unwrap();
    let same = edit("infra/db.yaml", "replicas: 1\n");
    assert_eq!(
        repo.commit_edits("main", head, &[same], "noop", &author())
            .unwrap(),
        None
    );
    assert_eq!(
        repo.commit_edits("main", head, &[], "noop", &author())
            .unwrap(),
        None
    );
    assert!(
        repo.raw()
            .find_reference("refs/imagewatch/pending/main")
            .is_err()
    );
}

#[test]
fn commit_edits_refuses_bad_edits() {
    let fx = Fixture::new();
    let cache = fx.cache();
    let repo = cache.open_or_clone(&fx.url, &GitAuth::Anonymous).unwrap();
    let head = repo.fetch("main", &GitAuth::Anonymous).unwrap();
    for bad in [
        edit("apps", "x"),                // replaces a directory
        edit("top.yaml/inner.yaml", "x"), // descends into a file
        edit("../escape.yaml", "x"),
        edit(".git/config", "x"),
    ] {
        let err = repo
            .commit_edits("main", head, std::slice::from_ref(&bad), "m", &author())
            .unwrap_err();
        assert!(
            matches!(err, GitError::InvalidEdit { .. }),
            "{}: {err}",
            bad.path
        );
    }
}

#[test]
fn push_moves_the_remote_branch() {
    let fx = Fixture::new();
    let cache = fx.cache();
    let repo = cache.open_or_clone(&fx.url, &GitAuth::Anonymous).unwrap();
    let head = repo.fetch("main", &GitAuth::Anonymous).unwrap();
    let commit = repo
        .commit_edits(
            "main",
            head,
            &[edit("infra/db.yaml", "replicas: 2\n")],
            "db: scale to 2",
            &author(),
        )
        .unwrap()
        .unwrap();
    let outcome = repo.push("main", commit, &GitAuth::Anonymous).unwrap();
    assert_eq!(
        outcome,
        PushOutcome {
            branch: "main".into(),
            commit,
            previous: Some(head),
        }
    );
    assert_eq!(fx.remote_main(), commit);
    assert_eq!(
        fx.remote_git(&["log", "-1", "--format=%s|%an|%P", "main"]),
        format!("db: scale to 2|imagewatch|{head}")
    );
    assert_eq!(fx.remote_file("infra/db.yaml"), "replicas: 2");
    assert_eq!(repo.cached_head("main").unwrap(), Some(commit));
    // The remote repository is still consistent.
    fx.remote_git(&["fsck", "--strict"]);
}

#[test]
fn stale_push_is_rejected_not_forced() {
    let fx = Fixture::new();
    let cache = fx.cache();
    let repo = cache.open_or_clone(&fx.url, &GitAuth::Anonymous).unwrap();
    let head = repo.fetch("main", &GitAuth::Anonymous).unwrap();
    let commit = repo
        .commit_edits(
            "main",
            head,
            &[edit("top.yaml", "kind: Other\n")],
            "m",
            &author(),
        )
        .unwrap()
        .unwrap();
    let theirs = fx.other_writer_push("w1", "infra/db.yaml", "replicas: 9\n");
    let err = repo.push("main", commit, &GitAuth::Anonymous).unwrap_err();
    assert!(matches!(err, GitError::PushRejected { .. }), "{err}");
    assert_eq!(err.category(), "push_rejected");
    assert_eq!(fx.remote_main(), theirs);
    // Our tracking ref was not advanced to the rejected commit.
    assert_eq!(repo.cached_head("main").unwrap(), Some(head));
}

#[tokio::test]
async fn usable_from_spawn_blocking() {
    let fx = Fixture::new();
    let cache = Arc::new(fx.cache());
    let url = fx.url.clone();
    // Two concurrent users of one URL are serialized by the cache lease.
    let tasks: Vec<_> = (0..2)
        .map(|i| {
            let cache = cache.clone();
            let url = url.clone();
            tokio::task::spawn_blocking(move || {
                let repo = cache.open_or_clone(&url, &GitAuth::Anonymous)?;
                // The lease is held from here to the push: the other task fetches after it.
                let head = repo.fetch("main", &GitAuth::Anonymous)?;
                let edits = [edit(&format!("apps/t{i}.yaml"), "x: 1\n")];
                let commit = repo
                    .commit_edits("main", head, &edits, &format!("task {i}"), &author())?
                    .expect("a new file changes the tree");
                repo.push("main", commit, &GitAuth::Anonymous)
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(fx.remote_file("apps/t0.yaml"), "x: 1");
    assert_eq!(fx.remote_file("apps/t1.yaml"), "x: 1");
}

// ------------------------------------------------- HTTP: bad credentials

/// Minimal HTTP server that answers every request with 401 Basic and
/// counts requests, stopping when dropped.
struct Always401 {
    port: u16,
    requests: Arc<AtomicUsize>,
    with_auth: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Always401 {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(AtomicUsize::new(0));
        let with_auth = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, a, s) = (requests.clone(), with_auth.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while !s.load(Ordering::Relaxed) && Instant::now() < deadline {
                match listener.accept() {
                    Ok((stream, _)) => serve_401(stream, &r, &a),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Always401 {
            port,
            requests,
            with_auth,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Always401 {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_401(mut stream: TcpStream, requests: &AtomicUsize, with_auth: &AtomicUsize) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    // Keep-alive: answer every request on this connection.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            buf.drain(..end + 4);
            requests.fetch_add(1, Ordering::Relaxed);
            if head.contains("\nauthorization: basic ") {
                with_auth.fetch_add(1, Ordering::Relaxed);
            }
            let resp = "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"git\"\r\n\
                        Content-Length: 0\r\n\r\n";
            if stream.write_all(resp.as_bytes()).is_err() {
                return;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[test]
fn bad_http_credentials_fail_fast() {
    let server = Always401::start();
    let url = format!("http://127.0.0.1:{}/org/repo.git", server.port);
    let tmp = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(tmp.path());

    let auth = GitAuth::Basic {
        username: "bot".into(),
        password: "wrong-token".into(),
    };
    let err = cache.open_or_clone(&url, &auth).unwrap_err();
    assert!(matches!(err, GitError::AuthFailed { .. }), "{err}");
    assert_eq!(err.category(), "auth");
    assert!(!err.to_string().contains("wrong-token"), "{err}");
    // One anonymous probe, one try with credentials, then we stop.
    assert_eq!(server.with_auth.load(Ordering::Relaxed), 1);
    assert!(server.requests.load(Ordering::Relaxed) <= 3);

    let err = cache.open_or_clone(&url, &GitAuth::Anonymous).unwrap_err();
    assert!(matches!(err, GitError::AuthFailed { .. }), "{err}");
    assert!(err.to_string().contains("none are configured"), "{err}");
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

// ------------------------------------------------------- SSH end to end

/// A private sshd on loopback serving the fixture's repositories, stopped
/// (by its own pid) when dropped.
struct Sshd {
    child: Child,
    port: u16,
    host_pub: String,
    client_key: String,
    user: String,
    _dir: TempDir,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path) -> (String, String) {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "test", "-f"])
        .arg(path)
        .stdout(Stdio::null())
        .status()
        .expect("ssh-keygen runs");
    assert!(status.success());
    let private = std::fs::read_to_string(path).unwrap();
    let public = std::fs::read_to_string(path.with_extension("pub")).unwrap();
    (private, public.trim().to_owned())
}

impl Sshd {
    /// Starts the server. Panics, naming what is missing, when this machine cannot run a
    /// private sshd (`/usr/sbin/sshd` or `ssh-keygen` missing, not root): the test tier
    /// provides all three.
    fn start() -> Self {
        let sshd = Path::new("/usr/sbin/sshd");
        let uid = Command::new("id")
            .arg("-u")
            .output()
            .unwrap_or_else(|e| panic!("cannot run `id -u`: {e}"));
        let mut missing = Vec::new();
        if !sshd.exists() {
            missing.push("/usr/sbin/sshd (openssh-server)");
        }
        if Command::new("ssh-keygen").arg("-?").output().is_err() {
            missing.push("ssh-keygen");
        }
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            missing.push("root (sshd serves the repositories as root)");
        }
        assert!(
            missing.is_empty(),
            "the SSH end-to-end test cannot run a private sshd, missing: {}",
            missing.join(", ")
        );
        // sshd refuses to start without its privilege separation directory.
        std::fs::create_dir_all("/run/sshd").expect("create /run/sshd");
        let dir = tempfile::tempdir().unwrap();
        let (_, host_pub) = keygen(&dir.path().join("host_ed25519"));
        let (client_key, client_pub) = keygen(&dir.path().join("client_ed25519"));
        std::fs::write(
            dir.path().join("authorized_keys"),
            format!("{client_pub}\n"),
        )
        .unwrap();
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {dir}/host_ed25519\n\
             PidFile {dir}/sshd.pid\nAuthorizedKeysFile {dir}/authorized_keys\n\
             StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nUsePAM no\n\
             LogLevel ERROR\n",
            dir = dir.path().display()
        );
        std::fs::write(dir.path().join("sshd_config"), config).unwrap();
        let child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(dir.path().join("sshd_config"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start /usr/sbin/sshd");
        let server = Sshd {
            child,
            port,
            host_pub,
            client_key,
            user: "root".into(),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() <= deadline,
                "sshd did not listen on 127.0.0.1:{port} within 10 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    fn url(&self, repo: &Path) -> String {
        format!(
            "ssh://{}@127.0.0.1:{}{}",
            self.user,
            self.port,
            repo.display()
        )
    }

    /// known_hosts line for this server, as `ssh-keyscan -p` prints it.
    fn known_hosts(&self) -> String {
        let mut parts = self.host_pub.split_whitespace();
        let (t, k) = (parts.next().unwrap(), parts.next().unwrap());
        format!("[127.0.0.1]:{} {t} {k}\n", self.port)
    }

    fn auth(&self, known_hosts: String) -> GitAuth {
        GitAuth::Ssh {
            private_key: self.client_key.clone(),
            passphrase: None,
            known_hosts,
        }
    }
}

#[test]
fn ssh_end_to_end_with_host_key_verification() {
    let sshd = Sshd::start();
    let fx = Fixture::new();
    let url = sshd.url(&fx.remote);
    let cache = fx.cache();

    // Unknown host: refused before authenticating, no clone left behind.
    let err = cache
        .open_or_clone(&url, &sshd.auth(String::new()))
        .unwrap_err();
    assert!(matches!(err, GitError::UnknownHostKey { .. }), "{err}");
    assert_eq!(err.category(), "unknown_host_key");
    assert!(
        err.to_string()
            .contains(&format!("[127.0.0.1]:{}", sshd.port))
    );
    assert!(
        !cache
            .dir_for(&url, &sshd.auth(String::new()))
            .unwrap()
            .exists()
    );

    // A plain entry for the host is not valid for a non-default port.
    let plain = sshd
        .known_hosts()
        .replace(&format!("[127.0.0.1]:{}", sshd.port), "127.0.0.1");
    let err = cache.open_or_clone(&url, &sshd.auth(plain)).unwrap_err();
    assert!(matches!(err, GitError::UnknownHostKey { .. }), "{err}");

    // Right host, wrong key: refused as a mismatch.
    let (_, impostor) = keygen(&fx.tmp.path().join("impostor"));
    let mut parts = impostor.split_whitespace();
    let wrong = format!(
        "[127.0.0.1]:{} {} {}\n",
        sshd.port,
        parts.next().unwrap(),
        parts.next().unwrap()
    );
    let err = cache.open_or_clone(&url, &sshd.auth(wrong)).unwrap_err();
    assert!(matches!(err, GitError::HostKeyMismatch { .. }), "{err}");
    assert_eq!(err.category(), "unknown_host_key");

    // Known host, but a key the server does not accept: auth failure, fast.
    let (stranger, _) = keygen(&fx.tmp.path().join("stranger"));
    let bad_key = GitAuth::Ssh {
        private_key: stranger,
        passphrase: None,
        known_hosts: sshd.known_hosts(),
    };
    let err = cache.open_or_clone(&url, &bad_key).unwrap_err();
    assert_eq!(err.category(), "auth", "{err}");

    // Everything right: fetch, commit, push over SSH.
    let auth = sshd.auth(sshd.known_hosts());
    let repo = cache.open_or_clone(&url, &auth).unwrap();
    let head = repo.fetch("main", &auth).unwrap();
    assert_eq!(head, fx.seed);
    let commit = repo
        .commit_edits(
            "main",
            head,
            &[edit("infra/db.yaml", "replicas: 4\n")],
            "db: 4 replicas over ssh",
            &author(),
        )
        .unwrap()
        .unwrap();
    repo.push("main", commit, &auth).unwrap();
    assert_eq!(fx.remote_main(), commit);

    // A stale push over the smart protocol is rejected as well.
    let stale = repo
        .commit_edits(
            "main",
            commit,
            &[edit("top.yaml", "kind: Stale\n")],
            "stale",
            &author(),
        )
        .unwrap()
        .unwrap();
    let theirs = fx.other_writer_push("w1", "infra/db.yaml", "replicas: 6\n");
    let err = repo.push("main", stale, &auth).unwrap_err();
    assert!(matches!(err, GitError::PushRejected { .. }), "{err}");
    assert_eq!(fx.remote_main(), theirs);

    // A server-side refusal (hook, protected branch) arrives through the
    // per-ref status report as a rejection carrying the server's message.
    let hook = fx.remote.join("hooks/pre-receive");
    write(&hook, "#!/bin/sh\necho 'main is protected' >&2\nexit 1\n");
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let head = repo.fetch("main", &auth).unwrap();
    assert_eq!(head, theirs);
    let hooked = repo
        .commit_edits(
            "main",
            head,
            &[edit("top.yaml", "kind: Hooked\n")],
            "hooked",
            &author(),
        )
        .unwrap()
        .unwrap();
    let err = repo.push("main", hooked, &auth).unwrap_err();
    assert!(
        matches!(&err, GitError::PushRejected { message, .. } if message.contains("hook")),
        "{err}"
    );
    assert_eq!(fx.remote_main(), theirs);
}
