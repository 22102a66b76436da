//! Holds step of a PromotionPolicy reconcile, between the candidate and the gates: which
//! images of the candidate are not proposed again because someone else changed them in the
//! target after the policy promoted them (`spec.onGitChange`; the decision is the engine's
//! `promotion::held`).
//!
//! Most reconciles end here without I/O: the engine answers from the candidate, the target
//! as read and the previous status. Only an image whose tag in Git differs both from the
//! candidate and from what the policy last promoted there has its place's history read: on
//! the target head already fetched, on a clone leased from the git writer's cache, through
//! the writer's history reader (`writer/history.rs`), which tells the policy's own commits by
//! their `Imagewatch-Policy` trailer and the writer's committer identity.

use super::read::{Location, ReadContext, blocking};
use crate::error::PromotionError;

use imagewatch_crd::PromotionPolicy;
use kube::ResourceExt;

use crate::{
    git::{GitError, Oid, Repo},
    promotion::{self, Candidate, Inventory},
};

use imagewatch_crd::HeldImage;
use imagewatch_engine::held::{GitChange, Trailer};
use promotion::held::{self as holds, Promoted};

/// Changes of one value followed back at most (a revert of a hand edit of a revert…); past
/// that the image is held (see `promotion::held::HISTORY_LIMIT`).
const MAX_CHANGES: usize = promotion::held::HISTORY_LIMIT;

/// What the history of one place is read for.
struct HistoryAsk {
    /// Image name.
    name: String,
    /// The file holding it.
    file: String,
    /// The tag the policy last promoted there.
    promoted: String,
}

/// The held images of `candidate` (an unheld candidate on `target`, as read at `head`).
pub(super) async fn find_holds(
    ctx: &ReadContext<'_>,
    location: &Location,
    head: Oid,
    policy: &PromotionPolicy,
    candidate: &Candidate,
    target: &Inventory,
    to_path: &str,
) -> Result<Vec<HeldImage>, PromotionError> {
    let mode = policy.spec.on_git_change.unwrap_or_default();
    let resume = policy
        .annotations()
        .get(imagewatch_crd::conditions::RESUME_ANNOTATION)
        .map(String::as_str);
    let checks = holds::checks(
        candidate,
        target,
        Promoted::of(policy.status.as_ref()),
        mode,
        resume,
    );
    let mut held = Vec::new();
    let mut to_read = Vec::new();
    for check in &checks {
        match holds::decide(&check.situation, None) {
            holds::Decision::Promote => {}
            holds::Decision::Hold(h) => held.push(h),
            holds::Decision::ReadHistory => to_read.push(check),
        }
    }
    if to_read.is_empty() {
        return Ok(held);
    }
    let asks: Vec<HistoryAsk> = to_read
        .iter()
        .map(|check| HistoryAsk {
            name: check.situation.name.to_string(),
            file: check.site.file.clone(),
            promoted: check.situation.promoted.unwrap_or_default().to_string(),
        })
        .collect();
    let histories = read_histories(
        ctx,
        location,
        head,
        asks,
        format!(
            "{}/{}",
            policy.namespace().unwrap_or_default(),
            policy.name_any()
        ),
        to_path.to_string(),
    )
    .await?;
    for (check, history) in to_read.iter().zip(&histories) {
        if let holds::Decision::Hold(h) = holds::decide(&check.situation, Some(history)) {
            tracing::info!(
                policy = %policy.name_any(),
                image = %h.name,
                file = %check.site.file,
                commit = %h.commit,
                author = %h.author,
                "an image in the target was changed in Git by someone else; not proposed again"
            );
            held.push(h);
        }
    }
    Ok(held)
}

/// The changes of each asked value, newest first, read on the git writer's clone at `head`
/// (already fetched by the read step).
async fn read_histories(
    ctx: &ReadContext<'_>,
    location: &Location,
    head: Oid,
    asks: Vec<HistoryAsk>,
    policy: String,
    to_path: String,
) -> Result<Vec<Vec<GitChange>>, PromotionError> {
    let cache = ctx.clones.clone();
    let reader = ctx.writer.history();
    let url = location.url.clone();
    let auth = location.auth.clone();
    blocking(move || {
        let repo = cache.open_or_clone(&url, &auth)?;
        let trailer = Trailer::policy(&policy);
        asks.iter()
            .map(|ask| changes_of(&repo, head, &reader, trailer, &to_path, ask).map_err(Into::into))
            .collect()
    })
    .await
}

/// The changes of the value of `ask.name` in `ask.file`, newest first, until they decide
/// (`promotion::held::history_complete`) or [`MAX_CHANGES`].
fn changes_of(
    repo: &Repo,
    head: Oid,
    reader: &crate::writer::HistoryReader,
    trailer: Trailer<'_>,
    to_path: &str,
    ask: &HistoryAsk,
) -> Result<Vec<GitChange>, GitError> {
    let value_of = |text: &str| holds::tag_in(&ask.file, text, to_path, &ask.name);
    let mut changes: Vec<GitChange> = Vec::new();
    let mut at = Some(head);
    while let Some(commit) = at
        && changes.len() < MAX_CHANGES
    {
        let change = reader.last_change(repo, commit, &ask.file, &value_of, trailer)?;
        // The value before this change: the history of the change's first parent.
        at = Oid::from_str(&change.commit)
            .ok()
            .and_then(|id| repo.first_parent(id));
        changes.push(change);
        if holds::history_complete(&changes, &ask.promoted) {
            break;
        }
    }
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use std::{path::Path, process::Command};

    use super::*;
    use crate::git::Author;
    use crate::git::{GitAuth, RepoCache};
    use crate::writer::HistoryReader;

    const PRD: &str = "prd/.argocd-source-my-api-prd.yaml";

    /// The git CLI, isolated from any user configuration, committing as `who`.
    fn git(cwd: &Path, who: (&str, &str), args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(cwd)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", who.0)
            .env("GIT_AUTHOR_EMAIL", who.1)
            .env("GIT_COMMITTER_NAME", who.0)
            .env("GIT_COMMITTER_EMAIL", who.1)
            .output()
            .expect("git CLI runs");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn commit(work: &Path, who: (&str, &str), tag: &str, message: &str) -> String {
        let file = work.join(PRD);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(
            &file,
            format!("kustomize:\n  images:\n  - r.io/prd/my-api:{tag}\n"),
        )
        .unwrap();
        git(work, who, &["add", "-A"]);
        git(work, who, &["commit", "--quiet", "-m", message]);
        git(work, who, &["rev-parse", "HEAD"])
    }

    #[test]
    fn the_history_follows_a_revert_back_to_the_policys_commit() {
        let person = ("Jane Doe", "jane@example.com");
        let imagewatch = ("imagewatch", "imagewatch@example.com");
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(&work, person, &["init", "--quiet", "--initial-branch=main"]);
        commit(&work, person, "v1.3.9", "prd: my-api v1.3.9");
        let promoted = commit(
            &work,
            imagewatch,
            "v1.4.0",
            "Promote my-api:v1.4.0 to prd\n\nImagewatch-Policy: team/prd\n",
        );
        let revert = commit(&work, person, "v1.3.9", "Revert my-api: v1.4.0 is broken");

        let cache = RepoCache::new(tmp.path().join("cache"));
        let url = format!("file://{}", work.display());
        let repo = cache.open_or_clone(&url, &GitAuth::Anonymous).unwrap();
        let head = repo.fetch_many(&["main"], &GitAuth::Anonymous).unwrap()[0].unwrap();
        let reader = HistoryReader::new(Author {
            name: imagewatch.0.into(),
            email: imagewatch.1.into(),
        });
        let ask = HistoryAsk {
            name: "my-api".into(),
            file: PRD.into(),
            promoted: "v1.4.0".into(),
        };
        let changes = changes_of(
            &repo,
            head,
            &reader,
            Trailer::policy("team/prd"),
            "prd",
            &ask,
        )
        .unwrap();
        let seen: Vec<(&str, bool, &str)> = changes
            .iter()
            .map(|c| (c.commit.as_str(), c.ours, c.value.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                (revert.as_str(), false, "v1.3.9"),
                (promoted.as_str(), true, "v1.4.0")
            ]
        );
        assert_eq!(changes[0].author, "Jane Doe <jane@example.com>");

        // Another policy's trailer is not this policy's commit; the walk still stops at the
        // promoted tag.
        let other = changes_of(
            &repo,
            head,
            &reader,
            Trailer::policy("team/other"),
            "prd",
            &ask,
        )
        .unwrap();
        assert_eq!(other.len(), 2);
        assert!(!other[1].ours);

        // A tag that never reached the target: the walk stops at the policy's own commit.
        let never = HistoryAsk {
            promoted: "v9".into(),
            ..ask
        };
        let changes = changes_of(
            &repo,
            head,
            &reader,
            Trailer::policy("team/prd"),
            "prd",
            &never,
        )
        .unwrap();
        assert_eq!(changes.len(), 2);
    }
}
