//! The app developer's walkthrough in `samples/README.md` ("Your first watch") is run as
//! written, on the ground: its Git files are committed, its Secrets are created with the keys
//! its `kubectl create secret` commands name, its objects are applied, and the watch it
//! builds writes a new tag. Then the re-check annotation it documents makes the operator look
//! at once: a tag pushed without any notification is committed long before the watch's
//! interval, and an Event says the request was honoured.
//!
//! The walkthrough's placeholders are replaced by the ground's: `registry.example.com/team/
//! my-api` by an image of the ground's registry, the Git URL by a repository of its Git server,
//! the namespace `my-team` by the test's namespace.

use std::time::Duration;

use imagewatch_crd::ImageWatch;
use imagewatch_e2e::{
    ground::{random_suffix, repo_root},
    setup::{Scenario, create_secret},
    wait_until,
};
use k8s_openapi::api::events::v1::Event;
use kube::{Api, api::ListParams};

const TIMEOUT: Duration = Duration::from_secs(120);
const IMAGE: &str = "registry.example.com/team/my-api";
const GIT_URL: &str = "https://git.example.com/team/manifests.git";
const NAMESPACE: &str = "my-team";

/// A fenced code block: its language and its text.
struct Block {
    lang: String,
    text: String,
}

/// The fenced code blocks of the `## Your first watch` section.
fn walkthrough() -> anyhow::Result<Vec<Block>> {
    let readme = std::fs::read_to_string(repo_root().join("samples/README.md"))?;
    let start = readme
        .find("\n## Your first watch")
        .ok_or_else(|| anyhow::anyhow!("samples/README.md has no `## Your first watch`"))?;
    let rest = &readme[start + 1..];
    let section = &rest[..rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3)];
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    for line in section.lines() {
        match (&mut current, line.trim_start().strip_prefix("```")) {
            (None, Some(lang)) => {
                current = Some(Block {
                    lang: lang.trim().to_owned(),
                    text: String::new(),
                })
            }
            (Some(_), Some(_)) => blocks.extend(current.take()),
            (Some(block), None) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, None) => {}
        }
    }
    Ok(blocks)
}

/// The keys a `kubectl create secret generic NAME --from-literal=KEY=…` line gives `name`.
fn secret_keys(blocks: &[Block], name: &str) -> Vec<String> {
    let command = blocks
        .iter()
        .filter(|b| b.lang == "sh" || b.lang == "bash" || b.lang == "shell")
        .flat_map(|b| {
            // Continued lines (`\`) form one command.
            b.text
                .replace("\\\n", " ")
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .find(|l| l.contains("create secret generic") && l.contains(name))
        .unwrap_or_default();
    command
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--from-literal="))
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_owned()))
        .collect()
}

#[tokio::test]
async fn the_first_watch_walkthrough_runs_as_written() -> anyhow::Result<()> {
    let blocks = walkthrough()?;
    let s = Scenario::start("first-watch", &[]).await?;
    let registry = s.ground.registry()?;
    let git = s.ground.git()?;
    let image = format!("{}/e2e/first-watch-{}", registry.host, random_suffix());
    let repo = format!("first-watch-{}", random_suffix());
    let substitute = |text: &str, url: &str| {
        text.replace(IMAGE, &image)
            .replace(GIT_URL, url)
            .replace(NAMESPACE, &s.ns.name)
    };

    // The files the walkthrough says are in Git, committed.
    let seed = tempfile::tempdir()?;
    let mut files = Vec::new();
    for block in blocks.iter().filter(|b| b.lang == "yaml") {
        if let Some(path) = block
            .text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# in Git: "))
        {
            let file = seed.path().join(path.trim());
            std::fs::create_dir_all(file.parent().expect("a file in a directory"))?;
            std::fs::write(&file, substitute(&block.text, ""))?;
            files.push(path.trim().to_owned());
        }
    }
    anyhow::ensure!(
        !files.is_empty(),
        "the walkthrough shows no `# in Git:` file"
    );
    registry.push(
        &image.replacen(&format!("{}/", registry.host), "", 1),
        "1.0.0",
    )?;
    let url = git.new_repo(&repo, seed.path())?;

    // The Secrets, with the keys the walkthrough's commands give them.
    let keys = secret_keys(&blocks, "git-credentials");
    anyhow::ensure!(
        keys.len() == 2,
        "the walkthrough creates git-credentials with keys {keys:?}"
    );
    let values = [git.user.as_str(), git.token.as_str()];
    let data: Vec<(&str, &str)> = keys.iter().map(String::as_str).zip(values).collect();
    create_secret(&s.admin, &s.ns.name, "git-credentials", "Opaque", &data).await?;
    create_secret(
        &s.admin,
        &s.ns.name,
        "registry-credentials",
        "kubernetes.io/dockerconfigjson",
        &[(".dockerconfigjson", &registry.dockerconfigjson())],
    )
    .await?;

    // The objects, applied as the walkthrough applies them.
    let mut names = Vec::new();
    for block in blocks.iter().filter(|b| b.lang == "yaml") {
        if block.text.starts_with("# kubectl apply -f -") {
            let yaml = substitute(&block.text, &url);
            let object: serde_json::Value = serde_saphyr::from_str(&yaml)?;
            if object["kind"] == "ImageWatch" {
                names.push(
                    object["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                );
            }
            s.apply(&yaml)?;
        }
    }
    let [name] = names.as_slice() else {
        anyhow::bail!(
            "the walkthrough applies {} ImageWatches, not one",
            names.len()
        );
    };
    let watch = s.wait_ready(name, "True", "UpToDate").await?;
    // Only a re-check finds the next tag within the wait below.
    let interval = imagewatch::controllers::parse_duration(watch.spec.interval_or_default());
    anyhow::ensure!(
        interval.is_some_and(|i| i > TIMEOUT),
        "the walkthrough's interval {:?} is too short to show a re-check",
        watch.spec.interval
    );
    let tag = "1.1.0";
    registry.push(&image.replacen(&format!("{}/", registry.host), "", 1), tag)?;
    // Nothing notifies this operator of pushes: it sees 1.1.0 at its interval, or when asked.
    request_recheck(&s, name, "first")?;
    s.wait_applied(name, tag).await?;
    let held = git.show(&repo, "main", &files[0])?;
    assert!(held.contains(&format!("{image}:{tag}")), "{held}");

    // The re-check annotation: honoured once per value, said in an Event and the status.
    let watch = wait_handled(&s, name, "first").await?;
    assert_eq!(
        watch.status.and_then(|st| st.latest).map(|l| l.tag),
        Some(tag.to_owned())
    );
    let events: Api<Event> = Api::namespaced(s.admin.clone(), &s.ns.name);
    let honoured = wait_until("a RecheckRequested Event", TIMEOUT, || async {
        let list = events.list(&ListParams::default()).await?;
        Ok(list
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("RecheckRequested")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
            })
            .and_then(|e| e.note))
    })
    .await?;
    assert!(
        honoured.contains("imagewatch.dev/requestedAt=first"),
        "{honoured}"
    );
    let metrics = s.operator.metrics().await?;
    assert!(
        metrics.contains("imagewatch_recheck_requests_total{kind=\"ImageWatch\"}"),
        "{metrics}"
    );
    Ok(())
}

/// `kubectl annotate imagewatch NAME imagewatch.dev/requestedAt=VALUE --overwrite`, as the
/// walkthrough shows it.
fn request_recheck(s: &Scenario, name: &str, value: &str) -> anyhow::Result<()> {
    s.ground.kubectl(&[
        "annotate",
        "imagewatch",
        name,
        "-n",
        &s.ns.name,
        &format!("imagewatch.dev/requestedAt={value}"),
        "--overwrite",
    ])?;
    Ok(())
}

/// Waits until the watch's `status.lastHandledRequestedAt` is `value`.
async fn wait_handled(s: &Scenario, name: &str, value: &str) -> anyhow::Result<ImageWatch> {
    wait_until(&format!("{name} handled {value}"), TIMEOUT, || async {
        let w = s.watches.get(name).await?;
        let handled = w
            .status
            .as_ref()
            .and_then(|st| st.last_handled_requested_at.clone());
        Ok((handled.as_deref() == Some(value)).then_some(w))
    })
    .await
}

#[test]
fn the_walkthrough_names_its_secret_keys() -> anyhow::Result<()> {
    let blocks = walkthrough()?;
    let keys = secret_keys(&blocks, "git-credentials");
    assert_eq!(keys.len(), 2, "{keys:?}");
    Ok(())
}
