//! Bare clone cache, fetch and reads for the git writer (read current state
//! from Git, commit and push edits).
//!
//! Each remote URL, per credential identity ([`GitAuth::fingerprint`]), gets one bare
//! repository under the cache root: a clone fetched with one tenant's credentials is never
//! opened for another's, so a watch that cannot read a repository never sees its content. Nothing
//! is ever checked out: files are read straight from tree and blob objects,
//! and edits are written as new objects (see `commit.rs`). Keeping the
//! clone between reconciles makes each fetch incremental.
//!
//! The cache hands out at most one [`Repo`] per directory at a time within
//! this process (a lease released on drop), because concurrent fetches or
//! clones into one directory would fight over lock files. Separate
//! processes must not share a cache root.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use git2::{
    AutotagOption, Direction, FetchOptions, ObjectType, Oid, ProxyOptions, Repository,
    RepositoryInitOptions, Tree,
};

use super::auth::{Connection, GitAuth};
use super::error::{GitError, Result};
use super::url::RemoteUrl;

/// Config key in each cached repository recording which URL it mirrors, so
/// a directory is never reused for a different remote.
const URL_CONFIG_KEY: &str = "imagewatch.url";

/// libgit2 cannot repack or gc, and every fetch adds a pack. Past this many
/// packs the clone is thrown away and fetched afresh, which is cheaper than
/// letting object lookups crawl through hundreds of pack indexes.
const MAX_PACKS: usize = 64;

/// Remote-tracking ref for `branch`.
pub fn tracking_ref(branch: &str) -> String {
    format!("refs/remotes/origin/{branch}")
}

/// Refuse names git would refuse, before they are spliced into refspecs.
pub fn validate_branch(branch: &str) -> Result<()> {
    let full = format!("refs/heads/{branch}");
    if branch.is_empty() || branch.starts_with('-') || !git2::Reference::is_valid_name(&full) {
        return Err(GitError::InvalidBranch {
            branch: branch.to_owned(),
        });
    }
    Ok(())
}

/// One exclusive-use flag per cache directory.
#[derive(Default)]
struct LeaseSlot {
    busy: Mutex<bool>,
    freed: Condvar,
}

/// Exclusive use of one cache directory; released on drop.
struct Lease {
    slot: Arc<LeaseSlot>,
}

impl Lease {
    fn acquire(slot: Arc<LeaseSlot>) -> Self {
        {
            // A poisoned lock only means another holder panicked; the flag
            // itself is still meaningful.
            let mut busy = slot.busy.lock().unwrap_or_else(PoisonError::into_inner);
            while *busy {
                busy = slot
                    .freed
                    .wait(busy)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            *busy = true;
        }
        Lease { slot }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut busy = self
            .slot
            .busy
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *busy = false;
        self.slot.freed.notify_one();
    }
}

/// Local bare clones, one per remote URL and credential identity, under a root directory.
///
/// Share one `RepoCache` (for example in an `Arc`) across all reconcilers
/// so that the per-directory lease actually serializes them.
pub struct RepoCache {
    root: PathBuf,
    slots: Mutex<HashMap<PathBuf, Arc<LeaseSlot>>>,
}

impl RepoCache {
    /// Use `root` as the cache directory; it is created on first use.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        RepoCache {
            root: root.into(),
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The cache root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Directory that holds (or will hold) the clone of `url` fetched with `auth`.
    pub fn dir_for(&self, url: &str, auth: &GitAuth) -> Result<PathBuf> {
        let remote = RemoteUrl::parse(url)?;
        Ok(self
            .root
            .join(remote.cache_dir_name(url, auth.fingerprint())))
    }

    /// Open the cached bare clone of `url`, creating it if needed.
    ///
    /// Blocks while another `Repo` for the same URL is alive in this
    /// process. A fresh clone only verifies that the remote is reachable
    /// with `auth` (a ref listing); objects arrive with the first
    /// [`Repo::fetch`], and only for the branches actually fetched, so a
    /// repository with many branches is never transferred whole.
    pub fn open_or_clone(&self, url: &str, auth: &GitAuth) -> Result<Repo> {
        self.open_or_create(url, auth)
            .map_err(|e| e.in_cache(&self.root))
    }

    fn open_or_create(&self, url: &str, auth: &GitAuth) -> Result<Repo> {
        let remote = RemoteUrl::parse(url)?;
        let dir = self
            .root
            .join(remote.cache_dir_name(url, auth.fingerprint()));
        let (slot, first_use) = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            let first_use = !slots.contains_key(&dir);
            (slots.entry(dir.clone()).or_default().clone(), first_use)
        };
        let lease = Lease::acquire(slot);
        std::fs::create_dir_all(&self.root).map_err(|e| GitError::io(&self.root, e))?;
        if first_use && dir.exists() {
            // Nothing in this process has touched the clone yet, so any lock
            // file in it was left by a process that was killed mid-update.
            remove_stale_locks(&dir);
        }

        if dir.exists() {
            match open_existing(&dir, url) {
                Ok(repo) => {
                    tracing::debug!(url, dir = %dir.display(), "reusing cached clone");
                    return Ok(Repo {
                        repo,
                        url: url.to_owned(),
                        remote,
                        dir,
                        _lease: lease,
                    });
                }
                Err(reason) => {
                    tracing::warn!(
                        url,
                        dir = %dir.display(),
                        reason,
                        "discarding cached clone"
                    );
                    std::fs::remove_dir_all(&dir).map_err(|e| GitError::io(&dir, e))?;
                }
            }
        }

        // Check reachability and credentials before creating anything, so
        // a misconfigured remote leaves no directory behind.
        ls_remote(url, &remote, auth)?;

        // Build the repository under a temporary name and rename it into
        // place: a crash half-way never leaves something that looks like a
        // valid clone.
        let tmp = tempfile::Builder::new()
            .prefix(".init-")
            .tempdir_in(&self.root)
            .map_err(|e| GitError::io(&self.root, e))?;
        {
            let mut opts = RepositoryInitOptions::new();
            opts.bare(true).no_reinit(true).mkdir(true);
            let repo = Repository::init_opts(tmp.path(), &opts)
                .map_err(|e| GitError::git("init cache repository", e))?;
            let mut config = repo
                .config()
                .map_err(|e| GitError::git("open cache config", e))?;
            config
                .set_str(URL_CONFIG_KEY, url)
                .map_err(|e| GitError::git("write cache config", e))?;
            // Recorded for people inspecting the cache with the git CLI;
            // fetch and push use the URL directly.
            config
                .set_str("remote.origin.url", url)
                .map_err(|e| GitError::git("write cache config", e))?;
        }
        std::fs::rename(tmp.path(), &dir).map_err(|e| GitError::io(&dir, e))?;
        let repo = open_existing(&dir, url).map_err(|reason| GitError::Io {
            path: dir.clone(),
            source: std::io::Error::other(reason),
        })?;
        tracing::info!(url, dir = %dir.display(), "created cached clone");
        Ok(Repo {
            repo,
            url: url.to_owned(),
            remote,
            dir,
            _lease: lease,
        })
    }
}

/// Delete `*.lock` files under the ref store and the repository's top
/// level. libgit2 refuses to update a ref (or packed-refs, or the config)
/// while its lock file exists, so a process killed between taking and
/// releasing such a lock would otherwise wedge every later write.
fn remove_stale_locks(dir: &Path) {
    let mut stack = vec![dir.join("refs")];
    let mut locks = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        locks.extend(
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "lock")),
        );
    }
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.filter_map(|e| e.ok()) {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                Ok(t) if t.is_file() && path.extension().is_some_and(|x| x == "lock") => {
                    locks.push(path);
                }
                _ => {}
            }
        }
    }
    for lock in locks {
        match std::fs::remove_file(&lock) {
            Ok(()) => tracing::warn!(path = %lock.display(), "removed stale git lock file"),
            Err(e) => {
                tracing::warn!(path = %lock.display(), error = %e, "cannot remove stale git lock file")
            }
        }
    }
}

/// Open a cache directory, checking it is a healthy clone of `url`.
fn open_existing(dir: &Path, url: &str) -> std::result::Result<Repository, String> {
    let repo = Repository::open_bare(dir).map_err(|e| format!("not a repository: {e}"))?;
    let recorded = repo
        .config()
        .and_then(|c| c.get_string(URL_CONFIG_KEY))
        .map_err(|e| format!("no recorded URL: {e}"))?;
    if recorded != url {
        return Err(format!("directory belongs to {recorded}"));
    }
    let packs = std::fs::read_dir(dir.join("objects").join("pack"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
                .count()
        })
        .unwrap_or(0);
    if packs > MAX_PACKS {
        return Err(format!("{packs} packs accumulated; recloning to compact"));
    }
    Ok(repo)
}

/// Connect, list the remote's refs and disconnect.
fn ls_remote(url: &str, remote: &RemoteUrl, auth: &GitAuth) -> Result<()> {
    // A detached remote needs no repository at all.
    let mut git_remote =
        git2::Remote::create_detached(url).map_err(|e| GitError::remote("connect", url, e))?;
    let conn = Connection::new(auth, url, remote);
    let mut proxy = ProxyOptions::new();
    proxy.auto();
    let connection = git_remote
        .connect_auth(Direction::Fetch, Some(conn.callbacks()), Some(proxy))
        .map_err(|e| conn.error("connect to", e))?;
    connection
        .list()
        .map_err(|e| conn.error("list refs of", e))?;
    Ok(())
}

/// A cached bare clone of one remote, leased for exclusive use.
pub struct Repo {
    pub repo: Repository,
    pub url: String,
    pub remote: RemoteUrl,
    dir: PathBuf,
    _lease: Lease,
}

impl std::fmt::Debug for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repo")
            .field("url", &self.url)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Repo {
    /// The remote URL this clone mirrors.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Directory of the bare clone.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The underlying libgit2 repository, for reads this module does not
    /// wrap.
    pub fn raw(&self) -> &Repository {
        &self.repo
    }

    /// Whether `revision` is `commit` or descends from it; None when `revision` is not in
    /// the clone (fetch, then ask again).
    pub fn contains(&self, revision: &str, commit: &str) -> Result<Option<bool>> {
        let rev = Oid::from_str(revision).map_err(|e| GitError::git("parse a revision", e))?;
        let commit = Oid::from_str(commit).map_err(|e| GitError::git("parse a commit id", e))?;
        if rev == commit {
            return Ok(Some(true));
        }
        if self.repo.find_commit(rev).is_err() || self.repo.find_commit(commit).is_err() {
            return Ok(None);
        }
        self.repo
            .graph_descendant_of(rev, commit)
            .map(Some)
            .map_err(|e| GitError::git("compare commits", e))
    }

    /// Last fetched head of `branch`, without network access.
    pub fn cached_head(&self, branch: &str) -> Result<Option<Oid>> {
        validate_branch(branch)?;
        match self.repo.refname_to_id(&tracking_ref(branch)) {
            Ok(oid) => Ok(Some(oid)),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(GitError::git("read remote-tracking ref", e)),
        }
    }

    /// Fetch `branch` from the remote into `refs/remotes/origin/<branch>`
    /// and return its head commit.
    ///
    /// Only that branch is transferred, and only objects not already in
    /// the cache. Tags are not fetched.
    pub fn fetch(&self, branch: &str, auth: &GitAuth) -> Result<Oid> {
        self.fetch_many(&[branch], auth)?
            .pop()
            .flatten()
            .ok_or_else(|| GitError::BranchNotFound {
                url: self.url.clone(),
                branch: branch.to_owned(),
            })
    }

    /// Fetch several branches over one connection; for each, its head, or
    /// `None` when the remote has no such branch (a stale tracking ref of a
    /// deleted branch is removed, so nobody reads it as current).
    pub fn fetch_many(&self, branches: &[&str], auth: &GitAuth) -> Result<Vec<Option<Oid>>> {
        self.fetch_branches(branches, auth)
            .map_err(|e| self.cache_error(e))
    }

    /// A failure of a write into this clone, with running out of space reported as
    /// [`GitError::CacheFull`] naming the cache directory.
    pub fn cache_error(&self, e: GitError) -> GitError {
        e.in_cache(self.dir.parent().unwrap_or(&self.dir))
    }

    fn fetch_branches(&self, branches: &[&str], auth: &GitAuth) -> Result<Vec<Option<Oid>>> {
        for branch in branches {
            validate_branch(branch)?;
        }
        // Forced: the tracking ref mirrors the remote even after a force
        // push upstream. Our own pushes to shared branches never force.
        let refspecs: Vec<String> = branches
            .iter()
            .map(|b| format!("+refs/heads/{b}:{}", tracking_ref(b)))
            .collect();
        let refspecs: Vec<&str> = refspecs.iter().map(String::as_str).collect();
        let mut remote = self
            .repo
            .remote_anonymous(&self.url)
            .map_err(|e| GitError::remote("fetch", &self.url, e))?;
        let conn = Connection::new(auth, &self.url, &self.remote);
        let mut proxy = ProxyOptions::new();
        proxy.auto();
        let mut opts = FetchOptions::new();
        opts.remote_callbacks(conn.callbacks())
            .proxy_options(proxy)
            .download_tags(AutotagOption::None)
            .update_fetchhead(false);
        remote
            .fetch(&refspecs, Some(&mut opts), None)
            .map_err(|e| conn.error("fetch", e))?;

        // A refspec naming a missing branch fetches nothing without error;
        // the advertisement (kept after disconnect) tells us the truth.
        let advertised: HashMap<String, Oid> = remote
            .list()
            .map_err(|e| GitError::remote("fetch", &self.url, e))?
            .iter()
            .map(|h| (h.name().to_owned(), h.oid()))
            .collect();
        let mut heads = Vec::with_capacity(branches.len());
        for branch in branches {
            let tracking = tracking_ref(branch);
            let Some(&advertised) = advertised.get(&format!("refs/heads/{branch}")) else {
                if let Ok(mut r) = self.repo.find_reference(&tracking) {
                    r.delete()
                        .map_err(|e| GitError::git("delete stale tracking ref", e))?;
                }
                heads.push(None);
                continue;
            };
            let head = self
                .repo
                .refname_to_id(&tracking)
                .map_err(|e| GitError::git("read remote-tracking ref", e))?;
            if head != advertised {
                return Err(GitError::Git {
                    op: "fetch",
                    message: format!(
                        "{tracking} is {head} after fetch, but the remote advertised {advertised}"
                    ),
                    source: git2::Error::from_str("tracking ref out of sync"),
                });
            }
            tracing::debug!(url = %self.url, branch, %head, "fetched");
            heads.push(Some(head));
        }
        Ok(heads)
    }

    /// Contents of every `*.yaml` / `*.yml` blob under directory
    /// `path_prefix` of `commit`, recursively, as `(repo-relative path,
    /// bytes)` sorted by path.
    ///
    /// Only the trees under the prefix are read, so the cost does not grow
    /// with the size of the rest of the repository. An empty prefix (or
    /// `.`/`/`) means the repository root. Symlinks and submodules are
    /// skipped. A prefix that does not exist or is not a directory is
    /// [`GitError::PathNotFound`].
    pub fn read_files_under(
        &self,
        commit: Oid,
        path_prefix: &str,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        let prefix = normalize_dir(path_prefix).ok_or_else(|| GitError::PathNotFound {
            commit,
            path: path_prefix.to_owned(),
        })?;
        let root = self.commit_tree(commit)?;
        let start = if prefix.is_empty() {
            root
        } else {
            let entry = root
                .get_path(Path::new(&prefix))
                .map_err(|_| GitError::PathNotFound {
                    commit,
                    path: prefix.clone(),
                })?;
            if entry.kind() != Some(ObjectType::Tree) {
                return Err(GitError::PathNotFound {
                    commit,
                    path: prefix,
                });
            }
            self.repo
                .find_tree(entry.id())
                .map_err(|e| GitError::git("read tree", e))?
        };

        let mut out = Vec::new();
        // Explicit stack instead of recursion: tree depth is attacker
        // controlled in a repository we do not own.
        let mut stack: Vec<(String, Tree<'_>)> = vec![(prefix, start)];
        while let Some((dir, tree)) = stack.pop() {
            for entry in tree.iter() {
                let Ok(name) = std::str::from_utf8(entry.name_bytes()) else {
                    // Non-UTF-8 names cannot be YAML manifests we manage.
                    continue;
                };
                let path = if dir.is_empty() {
                    name.to_owned()
                } else {
                    format!("{dir}/{name}")
                };
                match entry.kind() {
                    Some(ObjectType::Tree) => {
                        let sub = self
                            .repo
                            .find_tree(entry.id())
                            .map_err(|e| GitError::git("read tree", e))?;
                        stack.push((path, sub));
                    }
                    Some(ObjectType::Blob)
                        if is_regular_file(entry.filemode()) && has_yaml_extension(name) =>
                    {
                        let blob = self
                            .repo
                            .find_blob(entry.id())
                            .map_err(|e| GitError::git("read blob", e))?;
                        out.push((path, blob.content().to_vec()));
                    }
                    _ => {}
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Contents of the regular file at `path` in `commit`; `None` when
    /// there is no such file (missing, a directory, a symlink or a
    /// submodule).
    pub fn read_file(&self, commit: Oid, path: &str) -> Result<Option<Vec<u8>>> {
        let Some(path) = normalize_file(path) else {
            return Ok(None);
        };
        let tree = self.commit_tree(commit)?;
        let entry = match tree.get_path(Path::new(&path)) {
            Ok(entry) => entry,
            Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(GitError::git("look up path", e)),
        };
        if entry.kind() != Some(ObjectType::Blob) || !is_regular_file(entry.filemode()) {
            return Ok(None);
        }
        let blob = self
            .repo
            .find_blob(entry.id())
            .map_err(|e| GitError::git("read blob", e))?;
        Ok(Some(blob.content().to_vec()))
    }

    pub fn commit_tree(&self, commit: Oid) -> Result<Tree<'_>> {
        self.repo
            .find_commit(commit)
            .and_then(|c| c.tree())
            .map_err(|e| GitError::git("read commit", e))
    }
}

/// Regular (possibly executable) file modes; excludes symlinks (0o120000)
/// and submodule links (0o160000).
pub fn is_regular_file(mode: i32) -> bool {
    mode == 0o100644 || mode == 0o100755
}

fn has_yaml_extension(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.ends_with(".yaml") || lower.ends_with(".yml")
}

/// Normalize a directory prefix to `a/b` form ("" for the root). `None`
/// for paths that escape the repository.
fn normalize_dir(path: &str) -> Option<String> {
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// Like [`normalize_dir`], but a file path must name something.
fn normalize_file(path: &str) -> Option<String> {
    normalize_dir(path).filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_normalization() {
        assert_eq!(normalize_dir("").as_deref(), Some(""));
        assert_eq!(normalize_dir("/").as_deref(), Some(""));
        assert_eq!(normalize_dir("./apps//web/").as_deref(), Some("apps/web"));
        assert_eq!(normalize_dir("apps/../etc"), None);
        assert_eq!(normalize_file("."), None);
        assert!(has_yaml_extension("x.YML"));
        assert!(!has_yaml_extension("x.yaml.bak"));
    }

    #[test]
    fn branch_validation() {
        for ok in ["main", "release/1.2", "env-prod"] {
            assert!(validate_branch(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-x", "a..b", "a b", "x:y", "refs/../x", "x.lock", "a~1"] {
            assert!(validate_branch(bad).is_err(), "{bad}");
        }
    }
}
