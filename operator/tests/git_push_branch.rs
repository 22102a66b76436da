//! Push-branch mode of the git writer against a real repository: the commit is based on the
//! target branch head and force-pushed to the push branch — only while that branch holds
//! nothing but our own commit.

mod support;

use std::time::Duration;

use imagewatch::{
    git::GitError,
    writer::{WriteError, WriteRequest},
};
use support::*;

const PUSH: &str = "imagewatch/team";

fn to_push_branch(mut r: WriteRequest) -> WriteRequest {
    r.push_branch = Some(PUSH.into());
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_branch_lifecycle() {
    let fx = Fixture::new(3, 0);
    let writer = fx.writer(options(Duration::from_millis(50)));
    let file = |n: usize| format!("{DIR}/{}.yaml", single(n));

    // 1. Created, one commit on top of main; main untouched.
    let r = writer
        .apply(to_push_branch(fx.request(&single(0), "2.0.0")))
        .await
        .unwrap();
    let tip = fx.head(PUSH);
    assert_eq!(r.commit.as_deref(), Some(tip.as_str()));
    assert_eq!(r.head, tip);
    assert_eq!(fx.head("main"), fx.seed);
    assert_eq!(fx.remote_git(&["rev-parse", &format!("{tip}^")]), fx.seed);
    assert!(fx.show(PUSH, &file(0)).contains(":2.0.0"));

    // 2. The same intent again (e.g. after a restart): no new commit, the tip stays.
    let r = writer
        .apply(to_push_branch(fx.request(&single(0), "2.0.0")))
        .await
        .unwrap();
    assert_eq!(r.commit, None);
    assert_eq!(r.head, tip);
    assert_eq!(fx.head(PUSH), tip);

    // 3. Another watch on the same push branch: the earlier edit is carried over, still one
    //    commit on top of main.
    let r = writer
        .apply(to_push_branch(fx.request(&single(1), "2.0.0")))
        .await
        .unwrap();
    let tip = fx.head(PUSH);
    assert_eq!(r.commit.as_deref(), Some(tip.as_str()));
    assert_eq!(fx.remote_git(&["rev-parse", &format!("{tip}^")]), fx.seed);
    assert!(fx.show(PUSH, &file(0)).contains(":2.0.0"));
    assert!(fx.show(PUSH, &file(1)).contains(":2.0.0"));

    // 4. main moves on (an unrelated file): the next write rebases the push branch onto it,
    //    keeping both edits; a newer tag replaces the older one.
    let main = fx.other_writer_push("main", "other/README.md", "# moved\n");
    writer
        .apply(to_push_branch(fx.request(&single(0), "3.0.0")))
        .await
        .unwrap();
    let tip = fx.head(PUSH);
    assert_eq!(fx.remote_git(&["rev-parse", &format!("{tip}^")]), main);
    assert!(fx.show(PUSH, &file(0)).contains(":3.0.0"));
    assert!(fx.show(PUSH, &file(1)).contains(":2.0.0"));
    assert_eq!(fx.show(PUSH, "other/README.md"), "# moved");
    assert_eq!(
        fx.remote_git(&["rev-list", "--count", &format!("main..{PUSH}")]),
        "1"
    );

    // 5. A person pushes a commit on top: we refuse to overwrite it, and leave it alone.
    let theirs = fx.other_writer_push(PUSH, "other/NOTES.md", "please keep\n");
    let err = writer
        .apply(to_push_branch(fx.request(&single(2), "2.0.0")))
        .await
        .unwrap_err();
    match &err {
        WriteError::Git(GitError::PushBranchNotOurs { branch, reason, .. }) => {
            assert_eq!(branch, PUSH);
            assert!(reason.contains("other@example.com"), "{reason}");
        }
        other => panic!("expected PushBranchNotOurs, got {other:?}"),
    }
    assert!(
        err.to_string()
            .contains("refusing to overwrite push branch"),
        "{err}"
    );
    assert_eq!(fx.head(PUSH), theirs);
    assert_eq!(fx.head("main"), main);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_branch_we_did_not_create_is_never_overwritten() {
    let fx = Fixture::new(1, 0);
    // A person's branch of the same name, one commit on main.
    let theirs = fx.other_writer_push("main", "other/README.md", "# base\n");
    fx.remote_git(&["branch", PUSH, &theirs]);
    let writer = fx.writer(options(Duration::from_millis(50)));
    let err = writer
        .apply(to_push_branch(fx.request(&single(0), "2.0.0")))
        .await
        .unwrap_err();
    assert!(
        matches!(err, WriteError::Git(GitError::PushBranchNotOurs { .. })),
        "{err}"
    );
    assert_eq!(fx.head(PUSH), theirs);
    // Our commit amended by a person (same author email, different committer) is not ours
    // either.
    let fx = Fixture::new(1, 0);
    let writer = fx.writer(options(Duration::from_millis(50)));
    writer
        .apply(to_push_branch(fx.request(&single(0), "2.0.0")))
        .await
        .unwrap();
    let work = fx.tmp.path().join("amend");
    git(
        fx.tmp.path(),
        &[
            "clone",
            "--quiet",
            "--branch",
            PUSH,
            fx.remote.to_str().unwrap(),
            "amend",
        ],
    );
    git(
        &work,
        &["commit", "--quiet", "--amend", "-m", "reworded by a person"],
    );
    git(&work, &["push", "--quiet", "--force", "origin", PUSH]);
    let amended = fx.head(PUSH);
    let err = writer
        .apply(to_push_branch(fx.request(&single(0), "3.0.0")))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("committed by Other Writer"),
        "{err}"
    );
    assert_eq!(fx.head(PUSH), amended);
}
