//! Shared fixtures of the git writer's component tests: a real bare repository reached
//! through a `file://` URL, seeded with Deployments, "other writers" as git CLI clones, and
//! a [`GitWriter`] over a private cache directory.

#![allow(dead_code)]

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
    time::Duration,
};

use imagewatch::{
    git::{Author, GitAuth},
    manifests::{ImageChange, TargetSpec, WorkloadTarget},
    telemetry::Metrics,
    writer::{GitWriter, WriteRequest, WriterOptions},
};
use tempfile::TempDir;

/// Run the git CLI isolated from any user or system configuration, as "Other Writer".
pub fn git(cwd: &Path, args: &[&str]) -> String {
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

pub fn write(path: &Path, contents: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, contents).unwrap();
}

/// A Deployment `name` whose container `app` runs `image`, with a comment to keep.
pub fn deployment(name: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: {image}   # kept\n"
    )
}

pub fn image(name: &str, tag: &str) -> String {
    format!("registry.example.com/{name}:{tag}")
}

/// The directory every fixture Deployment lives in.
pub const DIR: &str = "apps/many";

/// Names of the fixture's Deployments: `single-NN` each in its own file
/// (`apps/many/single-NN.yaml`), `bundled-NN` all in `apps/many/bundle.yaml`.
pub fn single(n: usize) -> String {
    format!("single-{n:02}")
}
pub fn bundled(n: usize) -> String {
    format!("bundled-{n:02}")
}

pub struct Fixture {
    pub tmp: TempDir,
    pub remote: PathBuf,
    pub url: String,
    pub seed: String,
}

impl Fixture {
    /// A bare remote whose `main` holds `singles` single-file Deployments and `bundled`
    /// Deployments in one multi-document file, all at tag 1.0.0.
    pub fn new(singles: usize, bundled_count: usize) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let remote = tmp.path().join("remote.git");
        git(
            tmp.path(),
            &[
                "init",
                "--quiet",
                "--bare",
                "--initial-branch=main",
                "remote.git",
            ],
        );
        let work = tmp.path().join("seed");
        git(
            tmp.path(),
            &["init", "--quiet", "--initial-branch=main", "seed"],
        );
        for n in 0..singles {
            let name = single(n);
            write(
                &work.join(format!("{DIR}/{name}.yaml")),
                &deployment(&name, &image(&name, "1.0.0")),
            );
        }
        if bundled_count > 0 {
            let docs: Vec<String> = (0..bundled_count)
                .map(|n| deployment(&bundled(n), &image(&bundled(n), "1.0.0")))
                .collect();
            write(
                &work.join(format!("{DIR}/bundle.yaml")),
                &docs.join("---\n"),
            );
        }
        write(&work.join("other/README.md"), "# not ours\n");
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "--quiet", "-m", "seed"]);
        git(
            &work,
            &["push", "--quiet", remote.to_str().unwrap(), "main:main"],
        );
        let seed = git(&work, &["rev-parse", "HEAD"]);
        let url = format!("file://{}", remote.display());
        Fixture {
            tmp,
            remote,
            url,
            seed,
        }
    }

    /// `git` in the bare remote.
    pub fn remote_git(&self, args: &[&str]) -> String {
        let mut all = vec!["--git-dir", self.remote.to_str().unwrap()];
        all.extend_from_slice(args);
        git(self.tmp.path(), &all)
    }

    pub fn head(&self, branch: &str) -> String {
        self.remote_git(&["rev-parse", &format!("refs/heads/{branch}")])
    }

    pub fn branch_exists(&self, branch: &str) -> bool {
        Command::new("git")
            .args(["--git-dir", self.remote.to_str().unwrap()])
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("refs/heads/{branch}"))
            .output()
            .unwrap()
            .status
            .success()
    }

    pub fn show(&self, rev: &str, path: &str) -> String {
        self.remote_git(&["show", &format!("{rev}:{path}")])
    }

    pub fn commit_count(&self, rev: &str) -> usize {
        self.remote_git(&["rev-list", "--count", rev])
            .parse()
            .unwrap()
    }

    /// Commit and push a change of `path` to `branch` from an independent CLI clone.
    pub fn other_writer_push(&self, branch: &str, path: &str, contents: &str) -> String {
        let name = format!("other-{}", std::process::id());
        let work = self.tmp.path().join(&name);
        if !work.exists() {
            git(
                self.tmp.path(),
                &["clone", "--quiet", self.remote.to_str().unwrap(), &name],
            );
        }
        git(&work, &["fetch", "--quiet", "origin"]);
        git(
            &work,
            &[
                "checkout",
                "--quiet",
                "-B",
                branch,
                &format!("origin/{branch}"),
            ],
        );
        write(&work.join(path), contents);
        git(&work, &["add", "-A"]);
        git(
            &work,
            &["commit", "--quiet", "-m", &format!("other: {path}")],
        );
        git(&work, &["push", "--quiet", "origin", branch]);
        git(&work, &["rev-parse", "HEAD"])
    }

    pub fn writer(&self, options: WriterOptions) -> GitWriter {
        GitWriter::with_options(
            &self.tmp.path().join("cache"),
            options,
            Arc::new(Metrics::new()),
        )
    }

    /// An intent setting Deployment `name` to `image(name, tag)`.
    pub fn request(&self, name: &str, tag: &str) -> WriteRequest {
        WriteRequest {
            url: self.url.clone(),
            branch: "main".into(),
            auth: GitAuth::Anonymous,
            target: TargetSpec::Workload {
                path: DIR.into(),
                target: WorkloadTarget {
                    kind: "Deployment".into(),
                    name: name.into(),
                    container: "app".into(),
                    namespace: None,
                },
            },
            change: ImageChange::Image(image(name, tag)),
            edit: Default::default(),
            watch: format!("team/{name}"),
            dry_run: false,
            push_branch: None,
            guard: None,
        }
    }
}

pub fn author() -> Author {
    Author {
        name: "imagewatch".into(),
        email: "imagewatch@example.com".into(),
    }
}

/// Options with a short window (tests submit everything at once); the batch stays open for
/// the whole window, so what a test submits together is one batch however slow the machine.
pub fn options(window: Duration) -> WriterOptions {
    let mut o = WriterOptions::new(author());
    o.batch_window = window;
    o.batch_quiet = window;
    o
}
