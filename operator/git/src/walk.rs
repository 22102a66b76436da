//! Reading a branch's history: the commits that changed a path, whether one commit descends
//! from another, the first parent of a commit. What a promotion asks of Git besides files.

use git2::Oid;

use crate::error::{GitError, Result};
use crate::repo::Repo;

/// How far back [`Repo::changes_of`] walks.
const WALK_LIMIT: usize = 1000;

impl Repo {
    /// The commits (first-parent history, newest first, at most `max` of them within 1000
    /// commits) that changed `path`, each with its commit time. The first is the last change
    /// of what `path` holds at `head`; when none is found within 1000 commits, the oldest
    /// commit walked stands for it. Empty when `path` does not exist at `head`.
    pub fn changes_of(
        &self,
        head: Oid,
        path: &str,
        max: usize,
    ) -> Result<Vec<(Oid, jiff::Timestamp)>> {
        let walk = |e: git2::Error| GitError::git("walk the history", e);
        let entry_at = |c: &git2::Commit<'_>| -> Option<Oid> {
            c.tree()
                .ok()?
                .get_path(std::path::Path::new(path))
                .ok()
                .map(|e| e.id())
        };
        let time = |c: &git2::Commit<'_>| jiff::Timestamp::from_second(c.time().seconds()).ok();
        let mut found = Vec::new();
        let mut commit = self.raw().find_commit(head).map_err(walk)?;
        let mut entry = entry_at(&commit);
        for _ in 0..WALK_LIMIT {
            if entry.is_none() || found.len() >= max {
                break;
            }
            let parent = commit.parent(0).ok();
            let parent_entry = parent.as_ref().and_then(entry_at);
            if parent_entry != entry
                && let Some(at) = time(&commit)
            {
                found.push((commit.id(), at));
            }
            let Some(parent) = parent else {
                break;
            };
            commit = parent;
            entry = parent_entry;
        }
        if found.is_empty()
            && entry.is_some()
            && let Some(at) = time(&commit)
        {
            found.push((commit.id(), at));
        }
        Ok(found)
    }

    /// Whether the clone holds `commit`.
    pub fn has_commit(&self, commit: Oid) -> bool {
        self.raw().find_commit(commit).is_ok()
    }

    /// Whether `commit` descends from `ancestor` (a commit does not descend from itself).
    pub fn descends_from(&self, commit: Oid, ancestor: Oid) -> Result<bool> {
        self.raw()
            .graph_descendant_of(commit, ancestor)
            .map_err(|e| GitError::git("compare commits", e))
    }

    /// The first parent of `commit`, if the clone holds it and it has one.
    pub fn first_parent(&self, commit: Oid) -> Option<Oid> {
        self.raw().find_commit(commit).ok()?.parent_id(0).ok()
    }
}

#[cfg(test)]
mod tests {
    use crate::{GitAuth, RepoCache};

    /// A repository whose `dir/f` is written by each of `contents` in turn (one commit each,
    /// `None`: a commit elsewhere), at times 100, 200, … s, on `main`; its URL.
    fn history_repo(dir: &std::path::Path, contents: &[Option<&str>]) -> String {
        let work = dir.join("work");
        let repo = git2::Repository::init(&work).unwrap();
        let mut parent: Option<git2::Oid> = None;
        for (i, content) in contents.iter().enumerate() {
            let path = match content {
                Some(_) => "dir/f",
                None => "other",
            };
            let file = work.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, content.unwrap_or(&format!("{i}"))).unwrap();
            let mut index = repo.index().unwrap();
            index.add_path(std::path::Path::new(path)).unwrap();
            index.write().unwrap();
            let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
            let sig = git2::Signature::new(
                "ci",
                "ci@example.invalid",
                &git2::Time::new(100 * (i as i64 + 1), 0),
            )
            .unwrap();
            let parents: Vec<git2::Commit<'_>> = parent
                .iter()
                .map(|p| repo.find_commit(*p).unwrap())
                .collect();
            let refs: Vec<&git2::Commit<'_>> = parents.iter().collect();
            parent = Some(
                repo.commit(Some("refs/heads/main"), &sig, &sig, "c", &tree, &refs)
                    .unwrap(),
            );
        }
        format!("file://{}", work.display())
    }

    #[test]
    fn changes_of_a_path_are_the_commits_that_changed_it_newest_first() {
        let tmp = tempfile::tempdir().unwrap();
        let url = history_repo(tmp.path(), &[Some("a"), None, Some("b"), None, Some("c")]);
        let cache = RepoCache::new(tmp.path().join("cache"));
        let repo = cache.open_or_clone(&url, &GitAuth::Anonymous).unwrap();
        let head = repo.fetch("main", &GitAuth::Anonymous).unwrap();
        let seconds = |found: Vec<(git2::Oid, jiff::Timestamp)>| {
            found
                .iter()
                .map(|(_, at)| at.as_second())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            seconds(repo.changes_of(head, "dir", 64).unwrap()),
            [500, 300, 100]
        );
        assert_eq!(
            seconds(repo.changes_of(head, "dir", 2).unwrap()),
            [500, 300]
        );
        assert!(repo.changes_of(head, "missing", 64).unwrap().is_empty());

        // Ancestry: the head descends from its first commit, not the other way round.
        let all = repo.changes_of(head, "dir", 64).unwrap();
        let (newest, oldest) = (all[0].0, all[2].0);
        assert!(repo.has_commit(oldest));
        assert!(repo.descends_from(newest, oldest).unwrap());
        assert!(!repo.descends_from(oldest, newest).unwrap());
        assert_eq!(repo.first_parent(oldest), None);
        assert!(repo.first_parent(newest).is_some());
    }
}
