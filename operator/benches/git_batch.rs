//! Benchmark of the git writer on a large repository: one batch of many edits through the
//! writer's persistent clone, versus what per-change tools do (a fresh shallow clone, edit,
//! commit and push for every change). Prints a markdown table.
//!
//! Run: `cargo bench -p imagewatch --bench git_batch`. Sizes (environment):
//!
//! | variable                    | default | meaning |
//! |-----------------------------|---------|---------|
//! | `IMAGEWATCH_BENCH_FILES`    | 20000   | files in the repository (10 per application directory) |
//! | `IMAGEWATCH_BENCH_COMMITS`  | 2000    | commits of history |
//! | `IMAGEWATCH_BENCH_EDITS`    | 100     | edits in the batch |
//! | `IMAGEWATCH_BENCH_CLONES`   | 3       | shallow-clone changes actually timed (the rest is extrapolated) |
//!
//! The defaults run in about a minute on 2 cores. The large case is
//! `IMAGEWATCH_BENCH_FILES=100000 IMAGEWATCH_BENCH_COMMITS=10000 IMAGEWATCH_BENCH_CLONES=1`
//! (a few minutes, most of it one shallow clone of 100,000 files).
//!
//! The repository is generated with `git fast-import` (seconds, not minutes) in a temporary
//! directory and served over smart HTTP by the real `git http-backend` (the test ground's
//! `e2e/scripts/git_http.py`, on loopback), so packs are built by git as a hosting service
//! would build them. (A `file://` remote would make libgit2 build every pack itself, which
//! on a large history measures libgit2's pack builder instead of the writer.)

use std::{
    io::{BufWriter, Write},
    path::Path,
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::future::join_all;
use imagewatch::{
    git::{Author, GitAuth, RepoCache, WritePoint},
    manifests::{ImageChange, TargetSpec, WorkloadTarget},
    telemetry::Metrics,
    writer::{GitWriter, WriteRequest, WriterOptions},
};

const FILES_PER_APP: usize = 10;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn app(i: usize) -> String {
    format!("svc-{i:05}")
}

/// Directory of application `i`: 100 applications per team directory, so no tree is huge.
fn app_dir(i: usize) -> String {
    format!("apps/team-{:03}/{}", i / 100, app(i))
}

fn deployment(name: &str, tag: &str) -> String {
    format!(
        "# {name}: managed by imagewatch\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  labels: {{app: {name}}}\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n        - name: app\n          image: registry.example.com/{name}:{tag}\n          ports:\n            - containerPort: 8080\n"
    )
}

/// The files of application `i` (index 0 is the Deployment).
fn app_files(i: usize, revision: usize) -> Vec<(String, String)> {
    let name = app(i);
    let dir = app_dir(i);
    let mut files = vec![
        (format!("{dir}/deployment.yaml"), deployment(&name, "1.0.0")),
        (
            format!("{dir}/service.yaml"),
            format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  selector: {{app: {name}}}\n  ports: [{{port: 80, targetPort: 8080}}]\n"
            ),
        ),
        (
            format!("{dir}/kustomization.yaml"),
            "resources:\n  - deployment.yaml\n  - service.yaml\n  - configmap.yaml\n".to_string(),
        ),
        (format!("{dir}/configmap.yaml"), configmap(&name, revision)),
    ];
    for j in files.len()..FILES_PER_APP {
        files.push((
            format!("{dir}/extra-{j}.yaml"),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}-extra-{j}\ndata:\n  key: value-{j}\n"),
        ));
    }
    files
}

fn configmap(name: &str, revision: usize) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  revision: \"{revision}\"\n"
    )
}

fn git(cwd: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(cwd)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .env("GIT_COMMITTER_NAME", "Bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.com")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A bare repository with `apps` application directories (`files` files) and `commits`
/// commits, via `git fast-import`.
pub fn build_repository(dir: &Path, files: usize, commits: usize) -> std::io::Result<()> {
    let apps = files.div_ceil(FILES_PER_APP).max(1);
    git(
        dir.parent().unwrap_or(Path::new("/")),
        &[
            "init",
            "--quiet",
            "--bare",
            "--initial-branch=main",
            dir.to_str().unwrap_or_default(),
        ],
    );
    let mut child = Command::new("git")
        .args(["fast-import", "--quiet", "--done"])
        .current_dir(dir)
        .env("GIT_DIR", dir)
        .stdin(Stdio::piped())
        .spawn()?;
    {
        let mut w = BufWriter::with_capacity(1 << 20, child.stdin.take().expect("stdin"));
        let commit = |w: &mut BufWriter<_>,
                      n: usize,
                      message: &str,
                      edits: &[(String, String)]|
         -> std::io::Result<()> {
            writeln!(w, "commit refs/heads/main")?;
            writeln!(
                w,
                "committer Bench <bench@example.com> {} +0000",
                1_600_000_000 + n
            )?;
            writeln!(w, "data {}\n{message}", message.len())?;
            for (path, contents) in edits {
                writeln!(w, "M 100644 inline {path}")?;
                writeln!(w, "data {}\n{contents}", contents.len())?;
            }
            writeln!(w)
        };
        let mut all = Vec::with_capacity(apps * FILES_PER_APP);
        for i in 0..apps {
            all.extend(app_files(i, 0));
        }
        all.truncate(files.max(1));
        commit(&mut w, 0, "initial import", &all)?;
        drop(all);
        for n in 1..commits.max(1) {
            let i = (n * 7919) % apps;
            let name = app(i);
            commit(
                &mut w,
                n,
                &format!("config: {name} revision {n}"),
                &[(
                    format!("{}/configmap.yaml", app_dir(i)),
                    configmap(&name, n),
                )],
            )?;
        }
        writeln!(w, "done")?;
        w.flush()?;
    }
    let status = child.wait()?;
    if !status.success() {
        return Err(std::io::Error::other(format!("git fast-import: {status}")));
    }
    Ok(())
}

fn request(url: &str, auth: &GitAuth, i: usize, tag: &str, dry_run: bool) -> WriteRequest {
    let name = app(i);
    WriteRequest {
        url: url.to_string(),
        branch: "main".into(),
        auth: auth.clone(),
        target: TargetSpec::Workload {
            path: app_dir(i),
            target: WorkloadTarget {
                kind: "Deployment".into(),
                name: name.clone(),
                container: "app".into(),
                namespace: None,
            },
        },
        change: ImageChange::Image(format!("registry.example.com/{name}:{tag}")),
        edit: Default::default(),
        watch: format!("bench/{name}"),
        dry_run,
        push_branch: None,
        guard: None,
    }
}

/// One change the way per-change tools make it: shallow clone, edit, commit, push.
fn shallow_clone_change(url: &str, work: &Path, i: usize, tag: &str) {
    let name = app(i);
    let dir = work.join(format!("clone-{i}"));
    git(
        work,
        &[
            "clone",
            "--quiet",
            "--depth",
            "1",
            "--branch",
            "main",
            url,
            dir.to_str().unwrap_or_default(),
        ],
    );
    let file = dir.join(format!("{}/deployment.yaml", app_dir(i)));
    let text = std::fs::read_to_string(&file).expect("deployment exists");
    let prefix = format!("image: registry.example.com/{name}:");
    let text: String = text
        .lines()
        .map(|l| match l.find(&prefix) {
            Some(at) => format!("{}{prefix}{tag}\n", &l[..at]),
            None => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&file, text).expect("write");
    git(
        &dir,
        &["commit", "--quiet", "-am", &format!("{name} -> {tag}")],
    );
    git(&dir, &["push", "--quiet", "origin", "main"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `git http-backend` behind the test ground's small HTTP server; stopped on drop.
struct HttpServer {
    child: std::process::Child,
    port: u16,
    token: String,
}

impl HttpServer {
    fn start(root: &Path) -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../e2e/scripts/git_http.py");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let token = format!("bench-{}", std::process::id());
        let token_file = root.join("token");
        std::fs::write(&token_file, &token).expect("token file");
        let child = Command::new("python3")
            .arg(script)
            .args(["--port", &port.to_string(), "--user", "bench"])
            .arg("--root")
            .arg(root)
            .arg("--token-file")
            .arg(&token_file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs e2e/scripts/git_http.py");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "git HTTP server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        HttpServer { child, port, token }
    }

    fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }

    fn url_with_credentials(&self, name: &str) -> String {
        format!("http://bench:{}@127.0.0.1:{}/{name}", self.token, self.port)
    }

    fn auth(&self) -> GitAuth {
        GitAuth::Basic {
            username: "bench".into(),
            password: self.token.clone(),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn secs(d: Duration) -> String {
    if d.as_secs_f64() >= 1.0 {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a plain run works the same.
    let files = env_or("IMAGEWATCH_BENCH_FILES", 20_000);
    let commits = env_or("IMAGEWATCH_BENCH_COMMITS", 2_000);
    let apps = files.div_ceil(FILES_PER_APP).max(1);
    let edits = env_or("IMAGEWATCH_BENCH_EDITS", 100).clamp(1, apps);
    let clones = env_or("IMAGEWATCH_BENCH_CLONES", 3).clamp(1, edits);
    let tmp = tempfile::tempdir().expect("temp dir");
    let repos = tmp.path().join("repos");
    std::fs::create_dir_all(&repos).expect("repos dir");
    let remote = repos.join("remote.git");
    let mut rows: Vec<(String, String)> = Vec::new();

    let t = Instant::now();
    build_repository(&remote, files, commits).expect("build repository");
    git(&remote, &["config", "http.receivepack", "true"]);
    rows.push((
        format!("build repository with fast-import ({files} files, {commits} commits)"),
        secs(t.elapsed()),
    ));
    let server = HttpServer::start(&repos);
    let url = server.url("remote.git");
    let auth = server.auth();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let stride = apps / edits;
    let targets: Vec<usize> = (0..edits).map(|k| k * stride).collect();
    let marks: Arc<Mutex<Vec<(WritePoint, Instant)>>> = Arc::default();
    let mut options = WriterOptions::new(Author {
        name: "imagewatch".into(),
        email: "imagewatch@example.com".into(),
    });
    options.batch_window = Duration::from_millis(500);
    {
        let marks = marks.clone();
        options.hook = Some(Arc::new(move |p| {
            marks.lock().expect("marks").push((p, Instant::now()));
        }));
    }
    let cache = tmp.path().join("cache");
    let writer = GitWriter::with_options(&cache, options, Arc::new(Metrics::new()));

    // First contact: the writer's clone of the whole history (a dry run writes nothing).
    let t = Instant::now();
    runtime
        .block_on(writer.apply(request(&url, &auth, targets[0], "1.0.0", true)))
        .expect("first fetch");
    rows.push((
        "imagewatch: first fetch into the persistent cache (full history, once per process)".into(),
        secs(t.elapsed()),
    ));

    // A fetch when nothing changed (what every batch pays before planning).
    let t = Instant::now();
    {
        let repo = RepoCache::new(cache.join("git"))
            .open_or_clone(&url, &auth)
            .expect("open cache");
        repo.fetch("main", &auth).expect("fetch");
    }
    rows.push((
        "imagewatch: up-to-date fetch before a batch".into(),
        secs(t.elapsed()),
    ));

    marks.lock().expect("marks").clear();
    let t = Instant::now();
    let results = runtime.block_on(join_all(
        targets
            .iter()
            .map(|&i| writer.apply(request(&url, &auth, i, "2.0.0", false))),
    ));
    let total = t.elapsed();
    let commit_ids: std::collections::BTreeSet<_> = results
        .iter()
        .map(|r| {
            r.as_ref()
                .expect("write")
                .commit
                .clone()
                .expect("committed")
        })
        .collect();
    assert_eq!(commit_ids.len(), 1, "one commit for the batch");
    let marks = marks.lock().expect("marks").clone();
    let at = |p: WritePoint| marks.iter().find(|(q, _)| *q == p).map(|(_, t)| *t);
    let (fetched, committed, pushed) = (
        at(WritePoint::Fetched).expect("fetched"),
        at(WritePoint::Committed).expect("committed"),
        at(WritePoint::Pushed).expect("pushed"),
    );
    let batch = pushed - fetched;
    rows.push((
        format!("imagewatch: {edits} edits in one batch: plan + commit (excl. fetch)"),
        secs(committed - fetched),
    ));
    rows.push((
        format!(
            "imagewatch: {edits} edits in one batch: plan + commit + push (excl. fetch), 1 commit"
        ),
        format!("{} ({} per edit)", secs(batch), secs(batch / edits as u32)),
    ));
    rows.push((
        format!("imagewatch: {edits} concurrent `apply` calls, end to end (incl. batching wait and fetch)"),
        secs(total),
    ));

    // The per-change way.
    let work = tmp.path().join("clones");
    std::fs::create_dir_all(&work).expect("work dir");
    let t = Instant::now();
    for &i in targets.iter().skip(edits - clones).take(clones) {
        shallow_clone_change(
            &server.url_with_credentials("remote.git"),
            &work,
            i,
            "3.0.0",
        );
    }
    let per_change = t.elapsed() / clones as u32;
    let extrapolated = per_change * edits as u32;
    rows.push((
        format!(
            "shallow clone + edit + commit + push per change ({clones} timed{}), {edits} commits",
            if clones < edits {
                format!(", extrapolated to {edits}")
            } else {
                String::new()
            }
        ),
        format!("{} ({} per change)", secs(extrapolated), secs(per_change)),
    ));
    rows.push((
        "speed-up of the batch (plan + commit + push) over per-change clones".into(),
        format!(
            "{:.0}x",
            extrapolated.as_secs_f64() / batch.as_secs_f64().max(1e-9)
        ),
    ));

    println!();
    println!("| step | time |");
    println!("|---|---|");
    for (step, time) in rows {
        println!("| {step} | {time} |");
    }
}
