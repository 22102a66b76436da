//! Faults of the real parts, end to end: the operator (the real binary, under the chart's RBAC)
//! works against the ground's registry and git server through a fault-injecting proxy
//! (`imagewatch_e2e::faultproxy`), or with its clone cache on a small filesystem of its own.
//!
//! - registry answering 503, then back: Ready=False with the registry's own message, retries
//!   back off, then exactly one commit of the new tag;
//! - registry answering 429 with Retry-After: requests wait for it, then one commit;
//! - registry not answering (timeouts): a clear condition, then one commit;
//! - git remote refusing connections, and a push cut off mid-way: GitError, then the commit
//!   lands exactly once;
//! - clone cache disk full: Ready=False CacheFull naming the directory, the process keeps
//!   running, then (space freed) one commit.
//!
//! The apiserver restart is in `faults_apiserver.rs` (its own binary: it affects every test of
//! a binary).

use std::time::{Duration, Instant};

use imagewatch_crd::conditions::reason;
use imagewatch_e2e::{
    disk::SmallDisk,
    faultproxy::{Fault, FaultProxy, Verdict},
    ground::{GitServer, Registry, random_suffix},
    setup::{Scenario, TIMEOUT, create_secret, ready, reconciles_with_outcome},
    wait_until,
};

const FILE: &str = "apps/app/deployment.yaml";

fn deployment(image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: {image} # followed by imagewatch\n"
    )
}

/// One watch in its own namespace, following `v*` tags of an image of its own, written to a
/// repository of its own.
struct Case {
    s: Scenario,
    registry: Registry,
    git: GitServer,
    /// Repository path in the registry.
    image_repo: String,
    /// The image as the watch names it (through a proxy, or not).
    image: String,
    /// Bare repository name on the git server.
    repo: String,
}

impl Case {
    /// Starts the operator with `flags`, seeds the registry with `v1.0.0` and a repository
    /// holding it, and applies the watch. `registry_host` is what the watch's image names (the
    /// ground's registry or a proxy in front of it); `git_base` the git server's base URL
    /// the watch uses (`None`: the ground's HTTPS URL).
    async fn start(
        prefix: &str,
        registry_host: &str,
        git_base: Option<&str>,
        flags: &[&str],
    ) -> anyhow::Result<Self> {
        let mut all = vec!["--insecure-registry", registry_host];
        all.extend_from_slice(flags);
        let s = Scenario::start(prefix, &all).await?;
        let registry = s.ground.registry()?;
        let git = s.ground.git()?;
        let image_repo = format!("e2e/{prefix}-{}", random_suffix());
        let image = format!("{registry_host}/{image_repo}");
        registry.push(&image_repo, "v1.0.0")?;
        let seed = tempfile::tempdir()?;
        std::fs::create_dir_all(seed.path().join("apps/app"))?;
        std::fs::write(
            seed.path().join(FILE),
            deployment(&format!("{image}:v1.0.0")),
        )?;
        let repo = format!("{prefix}-{}", s.ns.name);
        let https_url = git.new_repo(&repo, seed.path())?;
        let git_url = match git_base {
            Some(base) => format!("{base}/{repo}.git"),
            None => https_url,
        };
        // Registry credentials for the host the watch names.
        let mut creds = registry.clone();
        creds.host = registry_host.to_string();
        create_secret(
            &s.admin,
            &s.ns.name,
            "regcred-watch",
            "kubernetes.io/dockerconfigjson",
            &[(".dockerconfigjson", &creds.dockerconfigjson())],
        )
        .await?;
        s.apply(&format!(
            r#"apiVersion: imagewatch.dev/v1alpha1
kind: ImageWatch
metadata: {{name: app, namespace: {ns}}}
spec:
  image: {image}
  tags: {{pattern: "v*"}}
  interval: 10s
  credentials: {{secretRef: {{name: regcred-watch}}}}
  git: {{url: "{git_url}", branch: main, secretRef: {{name: git-creds}}}}
  target:
    workload: {{path: apps/app, kind: Deployment, name: app, container: app}}
"#,
            ns = s.ns.name
        ))?;
        Ok(Self {
            s,
            registry,
            git,
            image_repo,
            image,
            repo,
        })
    }

    fn commits(&self) -> anyhow::Result<usize> {
        self.git.commit_count(&self.repo, "main")
    }

    /// The Ready condition's message, once it is `False` with `reason`.
    async fn failing(&self, reason: &str) -> anyhow::Result<String> {
        let w = self.s.wait_ready("app", "False", reason).await?;
        let message = ready(&w).map(|r| r.2).unwrap_or_default();
        eprintln!("{}: Ready=False {reason}: {message}", self.s.ns.name);
        Ok(message)
    }

    /// After a fault ended: `tag` is committed, in exactly one commit on top of the
    /// `before` commits that changes only the tag; and a later reconcile adds nothing.
    async fn recovered(&self, before: usize, from: &str, tag: &str) -> anyhow::Result<()> {
        let w = self.s.wait_applied("app", tag).await?;
        assert_eq!(
            ready(&w).map(|r| r.1).as_deref(),
            Some(reason::UPDATED),
            "{:?}",
            ready(&w)
        );
        assert_eq!(self.commits()?, before + 1, "exactly one commit for {tag}");
        let head = self
            .git
            .git(&self.repo, &["rev-parse", "main"])?
            .trim()
            .to_string();
        assert_eq!(
            w.status
                .as_ref()
                .and_then(|s| s.applied.as_ref())
                .and_then(|a| a.commit.as_deref()),
            Some(head.as_str())
        );
        assert_eq!(
            self.git
                .git(&self.repo, &["diff", "--numstat", "main^", "main"])?
                .trim(),
            format!("1\t1\t{FILE}")
        );
        assert_eq!(
            self.git.show(&self.repo, "main", FILE)?,
            deployment(&format!("{}:{tag}", self.image)),
            "{from} -> {tag}, nothing else"
        );
        // One more successful reconcile after the commit: still one commit.
        let ok = reconciles_with_outcome(&self.s, "ok").await?;
        wait_until("another successful reconcile", TIMEOUT, || async {
            Ok((reconciles_with_outcome(&self.s, "ok").await? > ok).then_some(()))
        })
        .await?;
        assert_eq!(self.commits()?, before + 1, "no duplicate commit of {tag}");
        Ok(())
    }
}

/// Start times of bursts of requests (one reconcile's attempts with their in-call retries
/// come within ~1.5 s of each other): `(start, requests)`.
fn bursts(times: &[Instant]) -> Vec<(Instant, usize)> {
    let mut out: Vec<(Instant, usize)> = Vec::new();
    let mut last: Option<Instant> = None;
    for &t in times {
        match (out.last_mut(), last) {
            (Some(burst), Some(prev)) if t.duration_since(prev) < Duration::from_millis(1500) => {
                burst.1 += 1;
            }
            _ => out.push((t, 1)),
        }
        last = Some(t);
    }
    out
}

#[tokio::test]
async fn registry_unavailable_then_back() -> anyhow::Result<()> {
    let ground = imagewatch_e2e::Ground::get()?;
    let proxy = FaultProxy::start(&ground.registry()?.host)?;
    let mut case = Case::start("reg503", &proxy.addr(), None, &[]).await?;
    case.s.wait_ready("app", "True", reason::UP_TO_DATE).await?;
    assert_eq!(case.commits()?, 1);

    proxy.set(Fault::unavailable("maintenance window 42"))?;
    let fault_start = Instant::now();
    case.registry.push(&case.image_repo, "v1.1.0")?;
    let message = case.failing(reason::REGISTRY_ERROR).await?;
    assert!(
        message.contains("HTTP 503") && message.contains("UNAVAILABLE: maintenance window 42"),
        "the condition carries the registry's own message: {message}"
    );

    // Backoff: the failed reconciles come further and further apart, and each makes at most
    // its few in-call retries (no tight loop).
    let answered = || -> Vec<Instant> {
        proxy
            .seen()
            .iter()
            .filter(|s| s.at >= fault_start && s.verdict == Verdict::Answered(503))
            .map(|s| s.at)
            .collect()
    };
    wait_until("four bursts of 503s", TIMEOUT, || async {
        Ok((bursts(&answered()).len() >= 4).then_some(()))
    })
    .await?;
    let seen = bursts(&answered());
    let gaps: Vec<Duration> = seen
        .windows(2)
        .map(|w| w[1].0.duration_since(w[0].0))
        .collect();
    eprintln!(
        "503 bursts (requests each): {:?}, gaps: {gaps:?}",
        seen.iter().map(|b| b.1).collect::<Vec<_>>()
    );
    assert!(
        seen.iter().all(|b| b.1 <= 6),
        "at most two reconciles' in-call retries per burst: {seen:?}"
    );
    let last_gaps = &gaps[gaps.len() - 2..];
    assert!(
        last_gaps.iter().all(|g| *g >= Duration::from_secs(6)),
        "retries back off (2 s, 4 s, 8 s, … up to the interval): {gaps:?}"
    );
    assert_eq!(
        case.commits()?,
        1,
        "nothing written while the registry fails"
    );

    proxy.set(Fault::Pass)?;
    case.recovered(1, "v1.0.0", "v1.1.0").await?;
    assert!(case.s.operator.is_running());
    Ok(())
}

#[tokio::test]
async fn registry_rate_limit_honours_retry_after() -> anyhow::Result<()> {
    let ground = imagewatch_e2e::Ground::get()?;
    let proxy = FaultProxy::start(&ground.registry()?.host)?;
    let case = Case::start("reg429", &proxy.addr(), None, &[]).await?;
    case.s.wait_ready("app", "True", reason::UP_TO_DATE).await?;

    proxy.set(Fault::too_many_requests(7, "pull quota 42 exceeded"))?;
    let fault_start = Instant::now();
    case.registry.push(&case.image_repo, "v1.1.0")?;
    let message = case.failing(reason::REGISTRY_ERROR).await?;
    assert!(
        message.contains("rate limiting")
            && message.contains("retry after 7s")
            && message.contains("TOOMANYREQUESTS: pull quota 42 exceeded"),
        "{message}"
    );

    // Every request after a 429 waits the 7 s the registry asked for, whoever makes it.
    let answered = || -> Vec<Instant> {
        proxy
            .seen()
            .iter()
            .filter(|s| s.at >= fault_start && s.verdict == Verdict::Answered(429))
            .map(|s| s.at)
            .collect()
    };
    wait_until("four 429 answers", TIMEOUT, || async {
        Ok((answered().len() >= 4).then_some(()))
    })
    .await?;
    let times = answered();
    let gaps: Vec<Duration> = times
        .windows(2)
        .map(|w| w[1].duration_since(w[0]))
        .collect();
    eprintln!("gaps between 429s: {gaps:?}");
    assert!(
        gaps.iter().all(|g| *g >= Duration::from_millis(6900)),
        "Retry-After: 7 honoured: {gaps:?}"
    );
    assert_eq!(case.commits()?, 1);

    proxy.set(Fault::Pass)?;
    case.recovered(1, "v1.0.0", "v1.1.0").await?;
    Ok(())
}

#[tokio::test]
async fn registry_timeouts_then_back() -> anyhow::Result<()> {
    let ground = imagewatch_e2e::Ground::get()?;
    let proxy = FaultProxy::start(&ground.registry()?.host)?;
    let case = Case::start(
        "regstall",
        &proxy.addr(),
        None,
        &["--registry-timeout", "2s"],
    )
    .await?;
    case.s.wait_ready("app", "True", reason::UP_TO_DATE).await?;

    proxy.set(Fault::Stall)?;
    let fault_start = Instant::now();
    case.registry.push(&case.image_repo, "v1.1.0")?;
    let message = case.failing(reason::REGISTRY_ERROR).await?;
    assert!(
        message.contains("cannot reach registry") && message.contains("timed out"),
        "{message}"
    );
    // Each failed round makes its attempt and two in-call retries, no more (the round in
    // progress may have made some of its own).
    wait_until("three failed rounds", TIMEOUT, || async {
        Ok((reconciles_with_outcome(&case.s, "registry").await? >= 3).then_some(()))
    })
    .await?;
    let failed = reconciles_with_outcome(&case.s, "registry").await? as usize;
    let stalled = proxy.count_since(fault_start, Verdict::Stalled);
    eprintln!("{stalled} stalled requests, {failed} failed rounds");
    assert!(
        stalled <= 3 * (failed + 1),
        "{stalled} stalled requests for {failed} failed rounds"
    );
    assert_eq!(case.commits()?, 1);

    proxy.set(Fault::Pass)?;
    case.recovered(1, "v1.0.0", "v1.1.0").await?;
    Ok(())
}

#[tokio::test]
async fn git_remote_unreachable_then_back() -> anyhow::Result<()> {
    let ground = imagewatch_e2e::Ground::get()?;
    let git = ground.git()?;
    // The operator speaks HTTPS to the proxy (the ground's git certificate, trusted through
    // the ground's CA); the proxy forwards to the git server's plain endpoint on loopback.
    let (cert, key) = git.tls_identity();
    let proxy = FaultProxy::start_tls(git.http_url.trim_start_matches("http://"), &cert, &key)?;
    let base = format!("https://{}", proxy.addr());
    let mut case = Case::start(
        "gitdown",
        &ground.registry()?.host,
        Some(base.as_str()),
        &[],
    )
    .await?;
    case.s.wait_ready("app", "True", reason::UP_TO_DATE).await?;
    assert_eq!(case.commits()?, 1);

    // Nobody listens: the fetch fails.
    proxy.set(Fault::Refuse)?;
    let refused_at = Instant::now();
    case.registry.push(&case.image_repo, "v1.1.0")?;
    let message = case.failing(reason::GIT_ERROR).await?;
    assert!(
        message.contains(&proxy.addr()) && message.to_lowercase().contains("connect"),
        "{message}"
    );
    assert!(
        proxy.seen().iter().all(|s| s.at < refused_at),
        "no request got through a closed port"
    );
    assert_eq!(case.commits()?, 1);
    proxy.set(Fault::Pass)?;
    case.recovered(1, "v1.0.0", "v1.1.0").await?;

    // The fetch works but the push is cut off once its pack is on the way: the commit made
    // in the cache never reaches the remote; the next round must not add a second one.
    proxy.set_matching(Fault::Drop, "/git-receive-pack")?;
    let cut_at = Instant::now();
    case.registry.push(&case.image_repo, "v1.2.0")?;
    let message = case.failing(reason::GIT_ERROR).await?;
    assert!(message.contains("push"), "{message}");
    let seen: Vec<_> = proxy
        .seen()
        .into_iter()
        .filter(|s| s.at >= cut_at)
        .collect();
    assert!(
        seen.iter()
            .any(|s| s.verdict == Verdict::Dropped && s.method == "POST"),
        "a push was cut: {seen:?}"
    );
    assert!(
        seen.iter()
            .any(|s| s.verdict == Verdict::Passed && s.target.contains("git-upload-pack")),
        "fetches went through: {seen:?}"
    );
    assert_eq!(case.commits()?, 2);
    proxy.set(Fault::Pass)?;
    case.recovered(2, "v1.1.0", "v1.2.0").await?;
    assert!(case.s.operator.is_running());
    Ok(())
}

#[tokio::test]
async fn clone_cache_disk_full_then_freed() -> anyhow::Result<()> {
    let ground = imagewatch_e2e::Ground::get()?;
    let registry_host = ground.registry()?.host;
    let mut case = Case::start("diskfull", &registry_host, None, &[]).await?;
    // The small filesystem goes over the operator's cache directory (whatever the operator
    // may already have cloned below it is hidden)...
    let cache_dir = case.s.operator.cache_dir.clone();
    // The ground installs what mounting needs: a failure here is a broken ground, an error.
    let disk = SmallDisk::mount(&cache_dir, 2048)?;
    eprintln!(
        "clone cache on a 2 MiB {} at {}",
        disk.kind,
        cache_dir.display()
    );
    // ...and a restart on the same path makes the operator clone onto it.
    case.s.operator.restart()?;
    case.s.wait_ready("app", "True", reason::UP_TO_DATE).await?;
    assert!(
        std::fs::read_dir(cache_dir.join("git"))?.next().is_some(),
        "the clone lives on the small filesystem"
    );
    let pid = case.s.operator.pid();

    let filled = disk.fill()?;
    eprintln!("filled {filled} bytes");
    case.registry.push(&case.image_repo, "v1.1.0")?;
    let message = case.failing(reason::CACHE_FULL).await?;
    let cache_git = cache_dir.join("git").display().to_string();
    assert!(
        message.contains(&cache_git) && message.contains("No space left on device"),
        "names the cache directory and the cause: {message}"
    );
    // Retried, not crashed: a few more failed rounds, same process.
    let failed = reconciles_with_outcome(&case.s, "cache_full").await?;
    wait_until("another failed round", TIMEOUT, || async {
        Ok((reconciles_with_outcome(&case.s, "cache_full").await? > failed).then_some(()))
    })
    .await?;
    assert!(
        case.s.operator.is_running(),
        "{}",
        case.s.operator.log_tail(40)
    );
    assert_eq!(case.s.operator.pid(), pid, "no restart");
    assert_eq!(case.commits()?, 1);

    disk.free()?;
    case.recovered(1, "v1.0.0", "v1.1.0").await?;
    assert_eq!(case.s.operator.pid(), pid);
    // The operator keeps files open on the small filesystem: stop it before unmounting.
    case.s.operator.kill();
    drop(disk);
    Ok(())
}
