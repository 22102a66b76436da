//! Component tests of the git writer against real repositories (`file://` remotes, the git
//! CLI as the other writers): batching into one commit, re-planning after a lost race,
//! per-intent failures, dry runs, commit messages, SSH signing, idle tasks, a write
//! interrupted at every point, and planned commits (promotions) on the intents' clone.

mod support;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::future::join_all;
use imagewatch::{
    controllers::ReconcileError,
    error::Classify as _,
    git::{FileEdit, GitAuth, GitError, SshSigner, WritePoint},
    telemetry::{GitReadLabels, Metrics, PushLabels},
    writer::{CommitOutcome, CommitRequest, CommitTemplate, GitWriter, WriteError},
};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_intents_make_one_commit() {
    let fx = Fixture::new(25, 25);
    let writer = fx.writer(options(Duration::from_secs(2)));
    let names: Vec<String> = (0..25).map(single).chain((0..25).map(bundled)).collect();
    let results = join_all(names.iter().map(|n| writer.apply(fx.request(n, "2.0.0")))).await;

    let head = fx.head("main");
    assert_eq!(fx.commit_count("main"), 2, "exactly one new commit");
    assert_eq!(fx.remote_git(&["rev-parse", "main^"]), fx.seed);
    for (name, result) in names.iter().zip(&results) {
        let r = result.as_ref().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.commit.as_deref(), Some(head.as_str()), "{name}");
        assert_eq!(r.head, head);
        assert_eq!(r.current_before, image(name, "1.0.0"));
        assert_eq!(r.current_after, image(name, "2.0.0"));
        assert_eq!(r.desired, image(name, "2.0.0"));
        let file = if name.starts_with("single") {
            format!("{DIR}/{name}.yaml")
        } else {
            format!("{DIR}/bundle.yaml")
        };
        assert_eq!(r.file, file);
        assert_eq!(r.attempts, 1);
    }
    // All 50 edits are in the commit, byte-minimal, including the 25 in one file.
    let changed = fx.remote_git(&["diff", "--name-only", &fx.seed, &head]);
    assert_eq!(changed.lines().count(), 26, "{changed}");
    let bundle = fx.show("main", &format!("{DIR}/bundle.yaml"));
    for n in 0..25 {
        assert!(bundle.contains(&format!("{}   # kept", image(&bundled(n), "2.0.0"))));
    }
    assert!(!bundle.contains("1.0.0"));
    let stat = fx.remote_git(&["diff", "--numstat", &fx.seed, &head]);
    let (added, removed) = stat.lines().fold((0, 0), |(a, r), l| {
        let mut it = l.split_whitespace();
        let n = |s: Option<&str>| s.unwrap().parse::<usize>().unwrap();
        (a + n(it.next()), r + n(it.next()))
    });
    assert_eq!((added, removed), (50, 50), "one line per edit");
    let message = fx.remote_git(&["log", "-1", "--format=%an <%ae>%n%B", "main"]);
    assert!(
        message
            .starts_with("imagewatch <imagewatch@example.com>\nimagewatch: update 50 images\n\n"),
        "{message}"
    );
    assert_eq!(
        message.lines().filter(|l| l.starts_with("- team/")).count(),
        50
    );
    assert!(message.contains(&format!(
        "- team/single-07: {DIR}/single-07.yaml: {} -> {}",
        image("single-07", "1.0.0"),
        image("single-07", "2.0.0")
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_edit_has_a_one_line_subject_and_templates_apply() {
    let fx = Fixture::new(2, 0);
    let writer = fx.writer(options(Duration::from_millis(50)));
    writer.apply(fx.request(&single(0), "1.2.4")).await.unwrap();
    let message = fx.remote_git(&["log", "-1", "--format=%B", "main"]);
    assert_eq!(
        message,
        format!(
            "imagewatch: single-00 1.0.0 -> 1.2.4\n\n- team/single-00: {DIR}/single-00.yaml: {} -> {}\n\n\
             Imagewatch-Watch: team/single-00",
            image("single-00", "1.0.0"),
            image("single-00", "1.2.4")
        )
    );

    let mut o = options(Duration::from_millis(50));
    o.commit_template =
        CommitTemplate::parse("deploy({{branch}}): {{count}} image(s)\\n\\n{{watches}}").unwrap();
    let writer = fx.writer(o);
    writer.apply(fx.request(&single(1), "9")).await.unwrap();
    let message = fx.remote_git(&["log", "-1", "--format=%B", "main"]);
    // Whatever the template, the trailer that tells imagewatch's commits ends the message.
    assert_eq!(
        message,
        "deploy(main): 1 image(s)\n\nteam/single-01\n\nImagewatch-Watch: team/single-01"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_push_between_our_fetch_and_push_is_kept_and_we_retry() {
    let fx = Arc::new(Fixture::new(3, 0));
    let theirs = Arc::new(Mutex::new(None));
    let mut o = options(Duration::from_millis(300));
    {
        let fx = fx.clone();
        let theirs = theirs.clone();
        let fired = AtomicBool::new(false);
        o.hook = Some(Arc::new(move |point| {
            if point == WritePoint::BeforePush && !fired.swap(true, Ordering::SeqCst) {
                // Another writer lands a commit after our fetch, before our push.
                let c = fx.other_writer_push("main", "other/README.md", "# changed by a person\n");
                *theirs.lock().unwrap() = Some(c);
            }
        }));
    }
    let writer = fx.writer(o);
    let results = join_all([
        writer.apply(fx.request(&single(0), "2.0.0")),
        writer.apply(fx.request(&single(1), "2.0.0")),
    ])
    .await;
    let theirs = theirs.lock().unwrap().clone().expect("the hook ran");
    let head = fx.head("main");
    for r in &results {
        let r = r.as_ref().unwrap();
        assert_eq!(r.attempts, 2, "rejected once, then pushed");
        assert_eq!(r.commit.as_deref(), Some(head.as_str()));
    }
    // Both changes survive: ours sits directly on theirs, and their commit is untouched.
    assert_eq!(fx.remote_git(&["rev-parse", "main^"]), theirs);
    assert_eq!(fx.commit_count("main"), 3);
    assert_eq!(fx.show("main", "other/README.md"), "# changed by a person");
    assert!(
        fx.show("main", &format!("{DIR}/single-00.yaml"))
            .contains(":2.0.0")
    );
    assert!(
        fx.show("main", &format!("{DIR}/single-01.yaml"))
            .contains(":2.0.0")
    );
    assert_eq!(
        fx.remote_git(&["diff", "--name-only", &theirs, &head])
            .lines()
            .count(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_intent_someone_else_satisfied_drops_out_on_retry() {
    let fx = Arc::new(Fixture::new(2, 0));
    let mut o = options(Duration::from_millis(300));
    {
        let fx = fx.clone();
        let fired = AtomicBool::new(false);
        o.hook = Some(Arc::new(move |point| {
            if point == WritePoint::BeforePush && !fired.swap(true, Ordering::SeqCst) {
                // A person makes exactly our edit of single-00 first.
                let name = single(0);
                fx.other_writer_push(
                    "main",
                    &format!("{DIR}/{name}.yaml"),
                    &deployment(&name, &image(&name, "2.0.0")),
                );
            }
        }));
    }
    let writer = fx.writer(o);
    let results = join_all([
        writer.apply(fx.request(&single(0), "2.0.0")),
        writer.apply(fx.request(&single(1), "2.0.0")),
    ])
    .await;
    let head = fx.head("main");
    let satisfied = results[0].as_ref().unwrap();
    assert_eq!(satisfied.commit, None, "nothing left to do for it");
    assert_eq!(satisfied.current_before, image(&single(0), "2.0.0"));
    assert!(!satisfied.changed_needed);
    let written = results[1].as_ref().unwrap();
    assert_eq!(written.commit.as_deref(), Some(head.as_str()));
    // Our commit holds only single-01's edit.
    let changed = fx.remote_git(&["diff", "--name-only", "main^", "main"]);
    assert_eq!(changed, format!("{DIR}/single-01.yaml"));
    assert_eq!(fx.commit_count("main"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_intent_does_not_block_the_others() {
    let fx = Fixture::new(2, 0);
    let writer = fx.writer(options(Duration::from_millis(500)));
    let mut missing_dir = fx.request(&single(1), "2.0.0");
    missing_dir.target = imagewatch::manifests::TargetSpec::Workload {
        path: "apps/nowhere".into(),
        target: imagewatch::manifests::WorkloadTarget {
            kind: "Deployment".into(),
            name: single(1),
            container: "app".into(),
            namespace: None,
        },
    };
    let results = join_all([
        writer.apply(fx.request(&single(0), "2.0.0")),
        writer.apply(fx.request("does-not-exist", "2.0.0")),
        writer.apply(missing_dir),
        writer.apply(fx.request(&single(1), "2.0.0")),
    ])
    .await;
    let head = fx.head("main");
    assert_eq!(
        results[0].as_ref().unwrap().commit.as_deref(),
        Some(head.as_str())
    );
    assert_eq!(
        results[3].as_ref().unwrap().commit.as_deref(),
        Some(head.as_str())
    );
    match &results[1] {
        Err(e @ WriteError::Edit(_)) => assert!(e.to_string().contains("does-not-exist"), "{e}"),
        other => panic!("expected an edit error, got {other:?}"),
    }
    match &results[2] {
        Err(WriteError::DirectoryNotFound { dir, branch, .. }) => {
            assert_eq!((dir.as_str(), branch.as_str()), ("apps/nowhere", "main"));
        }
        other => panic!("expected DirectoryNotFound, got {other:?}"),
    }
    // The controllers report both as the target not found.
    for result in results.into_iter().skip(1).take(2) {
        let error = ReconcileError::from(result.unwrap_err());
        assert_eq!(error.reason(), "TargetNotFound", "{error}");
    }
    assert_eq!(fx.commit_count("main"), 2);
    assert_eq!(
        fx.remote_git(&["diff", "--name-only", &fx.seed, "main"])
            .lines()
            .count(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dry_run_never_writes() {
    let fx = Fixture::new(2, 0);
    let writer = fx.writer(options(Duration::from_millis(300)));
    // Alone.
    let mut dry = fx.request(&single(0), "2.0.0");
    dry.dry_run = true;
    let r = writer.apply(dry.clone()).await.unwrap();
    assert!(r.changed_needed);
    assert_eq!(r.commit, None);
    assert_eq!(r.current_before, image(&single(0), "1.0.0"));
    assert_eq!(r.current_after, image(&single(0), "1.0.0"));
    assert_eq!(r.desired, image(&single(0), "2.0.0"));
    assert_eq!(r.head, fx.seed);
    assert_eq!(fx.head("main"), fx.seed);
    // In a batch with a real write: only the real edit is committed.
    let results = join_all([
        writer.apply(dry),
        writer.apply(fx.request(&single(1), "2.0.0")),
    ])
    .await;
    let head = fx.head("main");
    assert_eq!(results[0].as_ref().unwrap().commit, None);
    assert_eq!(
        results[1].as_ref().unwrap().commit.as_deref(),
        Some(head.as_str())
    );
    assert_eq!(
        fx.remote_git(&["diff", "--name-only", &fx.seed, "main"]),
        format!("{DIR}/single-01.yaml")
    );
    assert!(
        fx.show("main", &format!("{DIR}/single-00.yaml"))
            .contains(":1.0.0")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_to_date_intents_make_no_commit() {
    let fx = Fixture::new(1, 0);
    let writer = fx.writer(options(Duration::from_millis(50)));
    let r = writer.apply(fx.request(&single(0), "1.0.0")).await.unwrap();
    assert_eq!(r.commit, None);
    assert!(!r.changed_needed);
    assert_eq!(r.head, fx.seed);
    assert_eq!(fx.commit_count("main"), 1);
}

/// Checks that change nothing read the head fetched moments ago; anything to write is
/// planned again and committed on a fresh fetch, so a commit pushed by someone else in the
/// meantime is neither lost nor duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_op_checks_reuse_a_recent_fetch_and_writes_fetch_again() {
    let fx = Fixture::new(3, 0);
    let fetches = Arc::new(AtomicUsize::new(0));
    let mut o = options(Duration::from_millis(20));
    o.reuse_fetch = Duration::from_secs(600);
    let counter = fetches.clone();
    o.hook = Some(Arc::new(move |point| {
        if point == WritePoint::Fetched {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    }));
    let metrics = Arc::new(Metrics::new());
    let writer = GitWriter::with_options(&fx.tmp.path().join("cache"), o, metrics.clone());
    let fetched = || fetches.load(Ordering::SeqCst);
    let reads = |source: &str| {
        metrics
            .git_reads
            .get_or_create(&GitReadLabels {
                source: source.into(),
            })
            .get()
    };

    // The first check fetches; the same check again is answered from it without a batch,
    // and another unchanged target is planned on that fetch.
    let r = writer.apply(fx.request(&single(0), "1.0.0")).await.unwrap();
    assert_eq!((r.commit.as_deref(), fetched()), (None, 1));
    let r = writer.apply(fx.request(&single(0), "1.0.0")).await.unwrap();
    assert_eq!((r.commit, r.head), (None, fx.seed.clone()));
    assert_eq!(r.current_before, image(&single(0), "1.0.0"));
    let r = writer.apply(fx.request(&single(2), "1.0.0")).await.unwrap();
    assert_eq!(r.commit, None);
    assert_eq!(fetched(), 1, "unchanged checks read the recent fetch");
    assert_eq!(
        (reads("fetch"), reads("unchanged"), reads("recent-fetch")),
        (1, 1, 1)
    );

    // Someone else sets single-01 to 3.0.0. Our stale read says it needs a change, so the
    // batch fetches, sees 3.0.0 and commits nothing.
    let theirs = fx.other_writer_push(
        "main",
        &format!("{DIR}/{}.yaml", single(1)),
        &deployment(&single(1), &image(&single(1), "3.0.0")),
    );
    let r = writer.apply(fx.request(&single(1), "3.0.0")).await.unwrap();
    assert_eq!(r.commit, None);
    assert_eq!(r.current_before, image(&single(1), "3.0.0"));
    assert_eq!(r.head, theirs);
    assert_eq!(fetched(), 2);
    assert_eq!(fx.commit_count("main"), 2);

    // A real change fetches (their commit is the parent of ours), commits and pushes.
    let r = writer.apply(fx.request(&single(2), "2.0.0")).await.unwrap();
    let ours = r.commit.expect("a commit");
    assert_eq!(fx.head("main"), ours);
    assert_eq!(fx.remote_git(&["rev-parse", "main^"]), theirs);
    assert_eq!(fetched(), 3);
    // After our own push the next check fetches again, then reads that fetch.
    let r = writer.apply(fx.request(&single(2), "2.0.0")).await.unwrap();
    assert_eq!((r.commit, r.head), (None, ours.clone()));
    assert_eq!(fetched(), 4);
    writer.apply(fx.request(&single(0), "1.0.0")).await.unwrap();
    assert_eq!(fetched(), 4);
    assert_eq!(fx.commit_count("main"), 3);
    // The answer for single-00 read at the seed was not reused at the new head.
    assert_eq!((reads("unchanged"), reads("recent-fetch")), (1, 2));
}

/// A write right after our own push commits on that push without fetching. When the branch
/// moved meanwhile, whether forward (a person's commit) or back (a reset to an older commit),
/// the push is refused, and the write fetches and lands on what the remote holds: their
/// commit is kept and the commits the reset removed do not come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_after_our_push_commits_on_it_and_fetches_when_the_branch_moved() {
    let fx = Fixture::new(4, 0);
    let fetches = Arc::new(AtomicUsize::new(0));
    let mut o = options(Duration::from_millis(20));
    let counter = fetches.clone();
    o.hook = Some(Arc::new(move |point| {
        if point == WritePoint::Fetched {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    }));
    let writer = fx.writer(o);
    let fetched = || fetches.load(Ordering::SeqCst);

    let first = writer.apply(fx.request(&single(0), "2.0.0")).await.unwrap();
    let first = first.commit.expect("a commit");
    assert_eq!(fetched(), 1);
    let second = writer.apply(fx.request(&single(1), "2.0.0")).await.unwrap();
    assert_eq!(fetched(), 1, "committed on our own push, no fetch");
    assert_eq!(second.attempts, 1);
    assert_eq!(fx.head("main"), second.commit.clone().expect("a commit"));
    assert_eq!(fx.remote_git(&["rev-parse", "main^"]), first);

    // A person pushes: our next write is refused on our last push, fetches, keeps theirs.
    let theirs = fx.other_writer_push("main", "other/README.md", "# changed by a person\n");
    let third = writer.apply(fx.request(&single(2), "2.0.0")).await.unwrap();
    assert_eq!(fetched(), 2);
    assert_eq!(third.attempts, 1, "a stale last push costs no attempt");
    assert_eq!(fx.head("main"), third.commit.clone().expect("a commit"));
    assert_eq!(fx.remote_git(&["rev-parse", "main^"]), theirs);
    assert_eq!(fx.show("main", "other/README.md"), "# changed by a person");
    assert_eq!(fx.commit_count("main"), 5);

    // The branch is reset to the seed: a fast-forward from the seed would be possible, but
    // the push must not bring back the commits the reset removed.
    fx.remote_git(&["update-ref", "refs/heads/main", &fx.seed]);
    let fourth = writer.apply(fx.request(&single(3), "2.0.0")).await.unwrap();
    assert_eq!(fetched(), 3);
    assert_eq!(fx.head("main"), fourth.commit.clone().expect("a commit"));
    assert_eq!(fx.remote_git(&["rev-parse", "main^"]), fx.seed);
    assert_eq!(fx.commit_count("main"), 2);
    assert!(
        fx.show("main", &format!("{DIR}/{}.yaml", single(0)))
            .contains(":1.0.0")
    );

    // Nothing to write on our last push: that answer is only given on a fetch.
    let again = writer.apply(fx.request(&single(3), "2.0.0")).await.unwrap();
    assert_eq!(again.commit, None);
    assert!(!again.changed_needed);
    assert_eq!(fetched(), 4);
    assert_eq!(fx.commit_count("main"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_are_signed_with_an_ssh_key() {
    let fx = Fixture::new(1, 0);
    let key = fx.tmp.path().join("signing_key");
    git(
        fx.tmp.path(),
        &["version"], // the git CLI is present; ssh-keygen comes with it here
    );
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "imagewatch", "-f"])
        .arg(&key)
        .status()
        .expect("ssh-keygen runs");
    assert!(status.success());
    let signer = SshSigner::from_file(&key).unwrap();
    let mut o = options(Duration::from_millis(50));
    o.signer = Some(signer.clone().into());
    let writer = fx.writer(o);
    let r = writer.apply(fx.request(&single(0), "2.0.0")).await.unwrap();
    let commit = r.commit.unwrap();

    let raw = fx.remote_git(&["cat-file", "commit", &commit]);
    assert!(
        raw.contains("gpgsig -----BEGIN SSH SIGNATURE-----"),
        "{raw}"
    );
    // git itself verifies it, as `git verify-commit` does for a developer with
    // gpg.ssh.allowedSignersFile.
    let allowed = fx.tmp.path().join("allowed_signers");
    std::fs::write(
        &allowed,
        format!("imagewatch@example.com {}\n", signer.public_key()),
    )
    .unwrap();
    let out = std::process::Command::new("git")
        .args(["--git-dir", fx.remote.to_str().unwrap()])
        .args(["-c", "gpg.format=ssh"])
        .arg("-c")
        .arg(format!("gpg.ssh.allowedSignersFile={}", allowed.display()))
        .args(["verify-commit", "-v", &commit])
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("Good \"git\" signature for imagewatch@example.com"),
        "{text}"
    );
    // The signed commit is otherwise an ordinary commit of ours.
    assert_eq!(
        fx.remote_git(&["rev-parse", &format!("{commit}^")]),
        fx.seed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_writer_tasks_exit_and_come_back() {
    let fx = Fixture::new(1, 0);
    let mut o = options(Duration::from_millis(20));
    o.idle_timeout = Duration::from_millis(200);
    let writer = fx.writer(o);
    writer.apply(fx.request(&single(0), "2.0.0")).await.unwrap();
    assert_eq!(writer.active_writers(), 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while writer.active_writers() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the idle task did not exit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = writer.apply(fx.request(&single(0), "3.0.0")).await.unwrap();
    assert!(r.commit.is_some());
    assert_eq!(fx.commit_count("main"), 3);
}

/// A write interrupted at any point (the hook panics, which fails the batch like a crash
/// of its task) and then done again leaves exactly one commit with exactly the edits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_write_completes_once_when_retried() {
    for point in WritePoint::ALL {
        let fx = Fixture::new(2, 0);
        let mut o = options(Duration::from_millis(100));
        let fired = Arc::new(AtomicUsize::new(0));
        {
            let fired = fired.clone();
            o.hook = Some(Arc::new(move |p| {
                if p == point && fired.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("simulated crash at {}", point.name());
                }
            }));
        }
        let writer = fx.writer(o);
        let first = join_all([
            writer.apply(fx.request(&single(0), "2.0.0")),
            writer.apply(fx.request(&single(1), "2.0.0")),
        ])
        .await;
        assert!(
            first.iter().all(|r| r.is_err()),
            "{}: {first:?}",
            point.name()
        );
        let pushed_before_crash = point == WritePoint::Pushed;
        assert_eq!(
            fx.commit_count("main"),
            if pushed_before_crash { 2 } else { 1 },
            "{}",
            point.name()
        );

        let again = join_all([
            writer.apply(fx.request(&single(0), "2.0.0")),
            writer.apply(fx.request(&single(1), "2.0.0")),
        ])
        .await;
        for r in &again {
            let r = r.as_ref().unwrap();
            assert_eq!(r.commit.is_some(), !pushed_before_crash, "{}", point.name());
            assert_eq!(r.head, fx.head("main"));
        }
        assert_eq!(
            fx.commit_count("main"),
            2,
            "{}: exactly one commit",
            point.name()
        );
        assert_eq!(
            fx.remote_git(&["diff", "--name-only", &fx.seed, "main"])
                .lines()
                .count(),
            2,
            "{}",
            point.name()
        );
    }
}

/// A planned commit (what a PromotionPolicy commits) goes through the writer: on the clone
/// the intents use (one per repository and credential), planned again on the new head after
/// a lost race, and onto a pull-request branch only once for the same edits on the same head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planned_commits_share_the_clone_and_are_planned_again_after_a_lost_race() {
    let fx = Arc::new(Fixture::new(1, 0));
    let writer = fx.writer(options(Duration::from_millis(50)));
    let intent = writer.apply(fx.request(&single(0), "2.0.0")).await.unwrap();
    assert!(intent.commit.is_some());

    // Another writer pushes after our first plan; the second plan sees its commit.
    let plans = Arc::new(AtomicUsize::new(0));
    let theirs = Arc::new(Mutex::new(None));
    let plan = {
        let (fx, plans, theirs) = (fx.clone(), plans.clone(), theirs.clone());
        move |repo: &imagewatch::git::Repo, head: imagewatch::git::Oid| {
            if plans.fetch_add(1, Ordering::SeqCst) == 0 {
                let c = fx.other_writer_push("main", "other/README.md", "# changed by a person\n");
                *theirs.lock().unwrap() = Some(c);
            }
            let readme = repo.read_file(head, "other/README.md")?.unwrap_or_default();
            Ok(Some((
                vec![imagewatch::git::FileEdit {
                    path: "promoted/README.md".into(),
                    contents: readme,
                }],
                "promote: copy the README".to_string(),
            )))
        }
    };
    let result = writer
        .commit(CommitRequest {
            url: fx.url.clone(),
            branch: "main".into(),
            auth: GitAuth::Anonymous,
            push_branch: None,
            plan: Box::new(plan),
        })
        .await
        .unwrap();
    let head = fx.head("main");
    assert_eq!(
        result.outcome,
        CommitOutcome::Pushed {
            commit: head.clone()
        }
    );
    assert_eq!(result.attempts, 2);
    assert_eq!(plans.load(Ordering::SeqCst), 2);
    let theirs = theirs.lock().unwrap().clone().unwrap();
    assert_eq!(fx.remote_git(&["rev-parse", "main^"]), theirs);
    assert_eq!(
        fx.show("main", "promoted/README.md"),
        "# changed by a person"
    );
    assert_eq!(
        fx.remote_git(&["log", "-1", "--format=%an%n%B", "main"]),
        "imagewatch\npromote: copy the README"
    );

    // A pull-request branch: pushed once; the same edits on the same head push nothing.
    let to_branch = |contents: &'static str| CommitRequest {
        url: fx.url.clone(),
        branch: "main".into(),
        auth: GitAuth::Anonymous,
        push_branch: Some("imagewatch/promote-team-my-api".into()),
        plan: Box::new(move |_: &imagewatch::git::Repo, _| {
            Ok(Some((
                vec![imagewatch::git::FileEdit {
                    path: "promoted/tag".into(),
                    contents: contents.as_bytes().to_vec(),
                }],
                "promote: v2".to_string(),
            )))
        }),
    };
    let first = writer.commit(to_branch("v2\n")).await.unwrap();
    let tip = fx.head("imagewatch/promote-team-my-api");
    assert_eq!(
        first.outcome,
        CommitOutcome::Pushed {
            commit: tip.clone()
        }
    );
    assert_eq!(fx.remote_git(&["rev-parse", &format!("{tip}^")]), head);
    let again = writer.commit(to_branch("v2\n")).await.unwrap();
    assert_eq!(
        again.outcome,
        CommitOutcome::AlreadyPushed { head: tip.clone() }
    );
    assert_eq!(fx.head("imagewatch/promote-team-my-api"), tip);

    // Intents and planned commits used one clone.
    let clones = std::fs::read_dir(fx.tmp.path().join("cache/git"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().is_dir())
        .count();
    assert_eq!(clones, 1);
}

/// A planned commit that loses every race gives up after its attempts with the rejection;
/// a plan that fails fails the commit; edits that add up to the head are nothing to do.
/// Nothing of ours reaches the remote in any of the three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_commit_gives_up_after_its_attempts_and_reports_plan_errors() {
    let fx = Arc::new(Fixture::new(1, 0));
    let mut opts = options(Duration::from_millis(20));
    opts.push_attempts = 2;
    let metrics = Arc::new(Metrics::new());
    let writer = GitWriter::with_options(&fx.tmp.path().join("cache"), opts, metrics.clone());
    let request = |plan: imagewatch::writer::PlanEdits| CommitRequest {
        url: fx.url.clone(),
        branch: "main".into(),
        auth: GitAuth::Anonymous,
        push_branch: None,
        plan,
    };
    let edit = |contents: &str| FileEdit {
        path: "promoted/tag".into(),
        contents: contents.as_bytes().to_vec(),
    };

    // Someone always beats us between our fetch and our push.
    let plans = Arc::new(AtomicUsize::new(0));
    let beaten = {
        let (fx, plans) = (fx.clone(), plans.clone());
        move |_: &imagewatch::git::Repo, _| {
            let n = plans.fetch_add(1, Ordering::SeqCst);
            fx.other_writer_push("main", "other/README.md", &format!("# edit {n}\n"));
            Ok(Some((vec![edit("mine\n")], "promote: mine".to_string())))
        }
    };
    let err = writer.commit(request(Box::new(beaten))).await.unwrap_err();
    assert!(
        matches!(err, WriteError::Git(GitError::PushRejected { .. })),
        "{err:?}"
    );
    assert_eq!(plans.load(Ordering::SeqCst), 2, "one plan per attempt");
    let rejected = metrics
        .git_pushes
        .get_or_create(&PushLabels {
            outcome: "rejected".into(),
        })
        .get();
    assert_eq!(rejected, 2, "both pushes were refused");

    // The plan itself fails.
    let failing = |_: &imagewatch::git::Repo, _| Err(GitError::apply("manifest does not parse"));
    let err = writer.commit(request(Box::new(failing))).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "computing edits failed: manifest does not parse"
    );

    // Edits equal to what the head holds: nothing to do, on the head read.
    let head = fx.head("main");
    let readme = fx.show("main", "other/README.md") + "\n";
    let same = move |_: &imagewatch::git::Repo, _| {
        Ok(Some((
            vec![FileEdit {
                path: "other/README.md".into(),
                contents: readme.as_bytes().to_vec(),
            }],
            "promote: nothing".to_string(),
        )))
    };
    let result = writer.commit(request(Box::new(same))).await.unwrap();
    assert_eq!(
        result.outcome,
        CommitOutcome::NothingToDo { head: head.clone() }
    );
    assert_eq!(fx.head("main"), head);
    assert!(
        fx.remote_git(&["log", "--format=%an", "main"])
            .lines()
            .all(|author| author != "imagewatch"),
        "nothing of ours was pushed"
    );
}
