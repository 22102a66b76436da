//! The git writer against the test ground's real git server over smart HTTP (HTTPS, with the
//! ground's CA) with basic auth:
//! 50 intents submitted at once become one commit; a push that lands between our fetch and
//! our push is kept and ours is re-planned on top; bad credentials fail every intent of the
//! batch without writing anything.

use std::{
    path::Path,
    process::Command,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::future::join_all;
use imagewatch::{
    git::{Author, GitAuth, GitError, WritePoint},
    manifests::{ImageChange, TargetSpec, WorkloadTarget},
    telemetry::Metrics,
    writer::{GitWriter, WriteError, WriteRequest, WriterOptions},
};
use imagewatch_e2e::{GitServer, Ground, ground::random_suffix};

const DIR: &str = "apps/fleet";

fn deployment(name: &str, tag: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: registry.example.com/{name}:{tag} # pinned by imagewatch\n"
    )
}

/// A repository with `n` Deployments `svc-NN`: the even ones in their own files, the odd ones
/// together in `apps/fleet/odd.yaml`.
fn seed(git: &GitServer, n: usize) -> anyhow::Result<(String, String)> {
    let dir = tempfile::tempdir()?;
    let fleet = dir.path().join(DIR);
    std::fs::create_dir_all(&fleet)?;
    let mut odd = Vec::new();
    for i in 0..n {
        let name = format!("svc-{i:02}");
        if i % 2 == 0 {
            std::fs::write(
                fleet.join(format!("{name}.yaml")),
                deployment(&name, "1.0.0"),
            )?;
        } else {
            odd.push(deployment(&name, "1.0.0"));
        }
    }
    std::fs::write(fleet.join("odd.yaml"), odd.join("---\n"))?;
    let name = format!("writer-{}", random_suffix());
    git.new_repo(&name, dir.path())?;
    Ok((name.clone(), format!("{}/{name}.git", git.base_url)))
}

/// Makes this process's libgit2 trust the ground's git CA (the operator gets it through
/// `SSL_CERT_FILE`). Every test calls it before any libgit2 use, so the global option is set
/// once, before anything reads it.
fn trust_ground_ca(ground: &Ground) -> anyhow::Result<()> {
    static TRUSTED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let bundle = ground.var("IMAGEWATCH_GIT_CA_BUNDLE")?.to_string();
    TRUSTED
        .get_or_init(|| {
            // SAFETY: called once (OnceLock), before this process makes any libgit2 call that
            // reads the certificate locations.
            unsafe { git2::opts::set_ssl_cert_file(&bundle) }.map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| anyhow::anyhow!("trusting {bundle}: {e}"))
}

fn request(url: &str, auth: &GitAuth, i: usize, tag: &str) -> WriteRequest {
    let name = format!("svc-{i:02}");
    WriteRequest {
        url: url.to_string(),
        branch: "main".into(),
        auth: auth.clone(),
        target: TargetSpec::Workload {
            path: DIR.into(),
            target: WorkloadTarget {
                kind: "Deployment".into(),
                name: name.clone(),
                container: "app".into(),
                namespace: None,
            },
        },
        change: ImageChange::Image(format!("registry.example.com/{name}:{tag}")),
        edit: Default::default(),
        watch: format!("fleet/{name}"),
        dry_run: false,
        push_branch: None,
        guard: None,
    }
}

fn writer(
    cache: &Path,
    window: Duration,
    hook: Option<imagewatch::writer::WriteHook>,
) -> GitWriter {
    let mut options = WriterOptions::new(Author {
        name: "imagewatch".into(),
        email: "imagewatch@e2e.invalid".into(),
    });
    options.batch_window = window;
    options.batch_quiet = window;
    options.hook = hook;
    GitWriter::with_options(cache, options, Arc::new(Metrics::new()))
}

fn auth(git: &GitServer) -> GitAuth {
    GitAuth::Basic {
        username: git.user.clone(),
        password: git.token.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_intents_over_http_become_one_commit() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    trust_ground_ca(ground)?;
    let git = ground.git()?;
    let (repo, url) = seed(&git, 50)?;
    let cache = tempfile::tempdir()?;
    let writer = writer(cache.path(), Duration::from_secs(2), None);
    let auth = auth(&git);

    let results = join_all((0..50).map(|i| writer.apply(request(&url, &auth, i, "2.0.0")))).await;

    let head = git.git(&repo, &["rev-parse", "main"])?.trim().to_string();
    assert_eq!(
        git.commit_count(&repo, "main")?,
        2,
        "exactly one new commit"
    );
    for (i, r) in results.iter().enumerate() {
        let r = r.as_ref().map_err(|e| anyhow::anyhow!("svc-{i:02}: {e}"))?;
        assert_eq!(r.commit.as_deref(), Some(head.as_str()), "svc-{i:02}");
        assert!(r.current_after.ends_with(":2.0.0"), "{r:?}");
        assert!(r.current_before.ends_with(":1.0.0"), "{r:?}");
    }
    let numstat = git.git(&repo, &["diff", "--numstat", "main^", "main"])?;
    let (added, removed) = numstat.lines().fold((0, 0), |(a, d), l| {
        let mut f = l.split_whitespace();
        let mut n = || f.next().and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
        (a + n(), d + n())
    });
    assert_eq!((added, removed), (50, 50), "{numstat}");
    assert_eq!(numstat.lines().count(), 26, "25 single files + odd.yaml");
    let message = git.git(&repo, &["log", "-1", "--format=%s", "main"])?;
    assert_eq!(message.trim(), "imagewatch: update 50 images");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_push_racing_ours_over_http_is_kept() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    trust_ground_ca(ground)?;
    let git = ground.git()?;
    let (repo, url) = seed(&git, 4)?;
    let bare = git.repo_dir(&repo);
    let work = tempfile::tempdir()?;
    let theirs = Arc::new(Mutex::new(String::new()));
    let hook = {
        let theirs = theirs.clone();
        let fired = AtomicBool::new(false);
        let work = work.path().to_path_buf();
        Arc::new(move |point: WritePoint| {
            if point != WritePoint::BeforePush || fired.swap(true, Ordering::SeqCst) {
                return;
            }
            // A person pushes straight into the served repository after our fetch.
            let run = |args: &[&str]| {
                let out = Command::new("git")
                    .args(args)
                    .current_dir(&work)
                    .env("GIT_CONFIG_GLOBAL", "/dev/null")
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .env("GIT_AUTHOR_NAME", "A Person")
                    .env("GIT_AUTHOR_EMAIL", "person@e2e.invalid")
                    .env("GIT_COMMITTER_NAME", "A Person")
                    .env("GIT_COMMITTER_EMAIL", "person@e2e.invalid")
                    .output()
                    .expect("git runs");
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                String::from_utf8_lossy(&out.stdout).trim().to_string()
            };
            run(&["clone", "--quiet", bare.to_str().expect("utf-8 path"), "w"]);
            std::fs::write(work.join("w/NOTES.md"), "by a person\n").expect("write");
            run(&["-C", "w", "add", "NOTES.md"]);
            run(&["-C", "w", "commit", "--quiet", "-m", "notes"]);
            run(&["-C", "w", "push", "--quiet", "origin", "main"]);
            *theirs.lock().expect("lock") = run(&["-C", "w", "rev-parse", "HEAD"]);
        }) as imagewatch::writer::WriteHook
    };
    let cache = tempfile::tempdir()?;
    let writer = writer(cache.path(), Duration::from_millis(500), Some(hook));
    let auth = auth(&git);
    let results = join_all((0..4).map(|i| writer.apply(request(&url, &auth, i, "3.0.0")))).await;
    let theirs = theirs.lock().expect("lock").clone();
    assert!(!theirs.is_empty(), "the racing push happened");
    let head = git.git(&repo, &["rev-parse", "main"])?.trim().to_string();
    for r in &results {
        let r = r.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?;
        assert_eq!(r.attempts, 2);
        assert_eq!(r.commit.as_deref(), Some(head.as_str()));
    }
    assert_eq!(git.git(&repo, &["rev-parse", "main^"])?.trim(), theirs);
    assert_eq!(git.show(&repo, "main", "NOTES.md")?, "by a person\n");
    assert_eq!(git.commit_count(&repo, "main")?, 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_fail_every_intent_and_write_nothing() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    trust_ground_ca(ground)?;
    let git = ground.git()?;
    let (repo, url) = seed(&git, 2)?;
    let cache = tempfile::tempdir()?;
    let writer = writer(cache.path(), Duration::from_millis(300), None);
    let bad = GitAuth::Basic {
        username: git.user.clone(),
        password: "wrong-token".into(),
    };
    let results = join_all((0..2).map(|i| writer.apply(request(&url, &bad, i, "2.0.0")))).await;
    for r in results {
        match r {
            Err(WriteError::Git(GitError::AuthFailed { .. })) => {}
            other => anyhow::bail!("expected AuthFailed, got {other:?}"),
        }
    }
    assert_eq!(git.commit_count(&repo, "main")?, 1);
    Ok(())
}
