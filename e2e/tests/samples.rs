//! The samples in `samples/` are what people copy, so they are checked like code:
//!
//! - every ImageWatch and PromotionPolicy applies to the real apiserver and reads back with
//!   the same spec, labels and annotations (no server-side defaults, so Argo CD keeps them
//!   `Synced`), and a second apply changes nothing;
//! - every kustomization builds and its output passes a server-side dry run;
//! - every watch's target exists in the sample's manifests, refers to the watched image and
//!   holds a tag the watch's own rules accept, and writing a new tag there changes one line;
//! - the ECR sample's EventBridge rule and queue policy deliver a push (and only a push) to
//!   SQS in the AWS emulator, in a form the operator's SQS consumer understands;
//! - the chart values shipped with samples pass the chart's schema.
//!
//! The full flow of a watch (registry → commit → status) is covered by `core_loop`,
//! `triggers` and `argocd_source`; here only the sample files are under test.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, ensure};
use imagewatch_crd::{ImageWatch, TagOrder};
use imagewatch_e2e::{
    Ground, TestNamespace,
    ground::{random_suffix, repo_root},
    setup::copy_dir,
};
use serde_json::Value;

fn samples_dir() -> PathBuf {
    repo_root().join("samples")
}

/// Sample directories (each has a README).
fn sample_dirs() -> anyhow::Result<Vec<PathBuf>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(samples_dir())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    Ok(dirs)
}

/// The imagewatch.dev objects of one sample: the YAML files at its top level.
fn sample_objects(dir: &Path) -> anyhow::Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        for doc in docs {
            if doc["apiVersion"] == "imagewatch.dev/v1alpha1" {
                let name = format!(
                    "{}: {}/{}",
                    file.strip_prefix(samples_dir())?.display(),
                    doc["kind"].as_str().unwrap_or_default(),
                    doc["metadata"]["name"].as_str().unwrap_or_default()
                );
                out.push((name, doc));
            }
        }
    }
    Ok(out)
}

fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

#[test]
fn every_sample_has_a_readme_naming_its_field_report() -> anyhow::Result<()> {
    let dirs = sample_dirs()?;
    let names: Vec<String> = dirs
        .iter()
        .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    for expected in [
        "canary-primary",
        "ecr-pattern",
        "ecr-sqs",
        "helm-values",
        "kustomize-staging",
        "preview-per-pr",
        "promotion-pr",
    ] {
        assert!(names.iter().any(|n| n == expected), "no samples/{expected}");
    }
    for dir in dirs {
        let readme = std::fs::read_to_string(dir.join("README.md"))
            .with_context(|| format!("{}/README.md", dir.display()))?;
        assert!(
            readme.to_lowercase().contains("field report 00"),
            "{}/README.md does not say which field report it comes from",
            dir.display()
        );
        assert!(
            !sample_objects(&dir)?.is_empty(),
            "{} has no ImageWatch or PromotionPolicy",
            dir.display()
        );
    }
    Ok(())
}

#[tokio::test]
async fn sample_objects_apply_and_read_back_unchanged() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground.install_crds()?;
    for dir in sample_dirs()? {
        let ns = TestNamespace::create(ground, "sample").await?;
        for (what, mut object) in sample_objects(&dir)? {
            object["metadata"]["namespace"] = Value::String(ns.name.clone());
            let text = serde_json::to_string_pretty(&object)?;
            let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&text))?;
            ensure!(ok, "{what}: kubectl apply refused it:\n{out}");
            // Argo CD's sync is a kubectl apply too: the second one must be a no-op.
            let (ok, out) = ground.kubectl_try(&["apply", "-f", "-"], Some(&text))?;
            ensure!(ok && out.contains("unchanged"), "{what}: re-apply: {out}");

            // Fully qualified names, so no other group's resource of that name can match.
            let resource = match object["kind"].as_str() {
                Some("ImageWatch") => "imagewatches.imagewatch.dev",
                _ => "promotionpolicies.imagewatch.dev",
            };
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let back = ground.kubectl(&["get", resource, name, "-n", &ns.name, "-o", "json"])?;
            let back: Value = serde_json::from_str(&back)?;
            assert_eq!(back["spec"], object["spec"], "{what}: spec drifted");
            assert_eq!(
                string_map(&back["metadata"]["labels"]),
                string_map(&object["metadata"]["labels"]),
                "{what}: labels drifted"
            );
            // kubectl's own bookkeeping annotation is ignored by Argo CD's diff as well.
            let mut annotations = string_map(&back["metadata"]["annotations"]);
            annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
            assert_eq!(
                annotations,
                string_map(&object["metadata"]["annotations"]),
                "{what}: annotations drifted"
            );
            assert_eq!(back["metadata"]["generation"], 1, "{what}");
        }
    }
    Ok(())
}

/// Directories under `root` holding a kustomization.
fn kustomizations(root: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(root)? {
        let path = entry?.path();
        if path.is_dir() {
            kustomizations(&path, out)?;
        } else if path.file_name().is_some_and(|n| n == "kustomization.yaml")
            && let Some(parent) = path.parent()
        {
            out.push(parent.to_path_buf());
        }
    }
    Ok(())
}

#[tokio::test]
async fn sample_kustomizations_build_and_pass_a_server_side_dry_run() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    let ns = TestNamespace::create(ground, "samplek").await?;
    let mut dirs = Vec::new();
    kustomizations(&samples_dir(), &mut dirs)?;
    dirs.sort();
    ensure!(dirs.len() >= 8, "only {} kustomizations found", dirs.len());
    for dir in dirs {
        let what = dir.strip_prefix(samples_dir())?.display().to_string();
        let (ok, built) = ground.kubectl_try(&["kustomize", &dir.display().to_string()], None)?;
        ensure!(ok, "{what}: kubectl kustomize failed:\n{built}");
        // The samples' namespaces do not exist here; everything goes into the test's.
        let manifest: String = built
            .lines()
            .map(|l| match l.trim_start().strip_prefix("namespace: ") {
                Some(_) if l.starts_with("  namespace: ") => format!("  namespace: {}", ns.name),
                _ => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        let (ok, out) = ground.kubectl_try(
            &["apply", "--dry-run=server", "-n", &ns.name, "-f", "-"],
            Some(&manifest),
        )?;
        ensure!(ok, "{what}: server-side dry run failed:\n{out}\n{manifest}");
    }
    Ok(())
}

fn policy_order(order: Option<TagOrder>) -> imagewatch::policy::Order {
    use imagewatch::policy::Order;
    match order.unwrap_or_default() {
        TagOrder::Semver => Order::Semver,
        TagOrder::Newest => Order::Newest,
        TagOrder::Alphabetical => Order::Alphabetical,
        TagOrder::Numerical => Order::Numerical,
    }
}

/// Lines that differ between two versions of a file.
fn changed_lines(before: &str, after: &str) -> usize {
    let (a, b): (Vec<&str>, Vec<&str>) = (before.lines().collect(), after.lines().collect());
    if a.len() != b.len() {
        return usize::MAX;
    }
    a.iter().zip(&b).filter(|(x, y)| x != y).count()
}

fn read_tree(root: &Path, out: &mut BTreeMap<PathBuf, String>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(root)? {
        let path = entry?.path();
        if path.is_dir() {
            read_tree(&path, out)?;
        } else {
            out.insert(path.clone(), std::fs::read_to_string(&path)?);
        }
    }
    Ok(())
}

/// What a watch writes, as `(what, image, target)`: its own image and target, or for a
/// pattern image one entry per member the sample's manifests have a target for (the
/// directories matching the target's path, each `$n` segment standing for capture n).
fn watch_targets(
    what: &str,
    spec: &imagewatch_crd::ImageWatchSpec,
    manifests: &Path,
) -> anyhow::Result<Vec<(String, String, imagewatch_crd::Target)>> {
    use imagewatch::controllers::imagewatch::members;
    let Some(pattern) =
        members::parse_pattern_image(&spec.image).map_err(|e| anyhow::anyhow!("{what}: {e}"))?
    else {
        return Ok(vec![(
            what.to_string(),
            spec.image.clone(),
            spec.target.clone(),
        )]);
    };
    members::check_references(&spec.target, &spec.image, pattern.wildcards())
        .map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    let target = &spec.target;
    let template = [
        target.workload.as_ref().map(|w| w.path.as_str()),
        target.kustomize.as_ref().map(|k| k.path.as_str()),
        target.argocd_source.as_ref().map(|a| a.path.as_str()),
    ]
    .into_iter()
    .flatten()
    .next()
    .with_context(|| format!("{what}: no sample check for this pattern target kind yet"))?;
    // Walk the manifests along the template, collecting each `$n` segment's value.
    let mut found: Vec<(PathBuf, BTreeMap<usize, String>)> =
        vec![(manifests.to_path_buf(), BTreeMap::new())];
    for segment in template.split('/') {
        let capture = segment
            .strip_prefix('$')
            .and_then(|n| n.parse::<usize>().ok());
        let mut next = Vec::new();
        for (dir, captures) in found {
            match capture {
                None => {
                    if dir.join(segment).is_dir() {
                        next.push((dir.join(segment), captures));
                    }
                }
                Some(n) => {
                    for entry in std::fs::read_dir(&dir)?.filter_map(Result::ok) {
                        if entry.path().is_dir() {
                            let mut captures = captures.clone();
                            captures.insert(n, entry.file_name().to_string_lossy().into_owned());
                            next.push((entry.path(), captures));
                        }
                    }
                }
            }
        }
        found = next;
    }
    let mut out = Vec::new();
    for (_, captures) in found {
        let captures: Vec<String> = (1..=pattern.wildcards())
            .map(|n| captures.get(&n).cloned())
            .collect::<Option<_>>()
            .with_context(|| format!("{what}: the target path does not use every capture"))?;
        let mut parts = captures.iter();
        let repository: Vec<String> = pattern
            .pattern
            .split('/')
            .map(|s| match s {
                "*" => parts.next().cloned().unwrap_or_default(),
                literal => literal.to_string(),
            })
            .collect();
        let repository = repository.join("/");
        out.push((
            format!("{what} [{repository}]"),
            pattern.member_image(&repository),
            members::expand_target(target, &captures),
        ));
    }
    ensure!(
        !out.is_empty(),
        "{what}: no member has a target in the sample's manifests"
    );
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[test]
fn every_watch_target_exists_and_holds_a_tag_its_rules_accept() -> anyhow::Result<()> {
    let mut checked = 0;
    for dir in sample_dirs()? {
        let manifests = dir.join("manifests");
        for (what, object) in sample_objects(&dir)? {
            if object["kind"] != "ImageWatch" {
                continue;
            }
            ensure!(manifests.is_dir(), "{what}: the sample has no manifests/");
            let watch: ImageWatch = serde_json::from_value(object.clone())
                .with_context(|| format!("{what}: not an ImageWatch"))?;
            let spec = &watch.spec;
            for (what, image, target) in watch_targets(&what, spec, &manifests)? {
                let work = tempfile::tempdir()?;
                copy_dir(&manifests, work.path())?;
                let new_tag = "sample-check";
                let new_image = format!("{image}:{new_tag}");
                let mut args: Vec<String> = vec!["set-image".into()];
                if let Some(w) = &target.workload {
                    args.extend([
                        "--path".into(),
                        work.path().join(&w.path).display().to_string(),
                        "--workload".into(),
                        format!("{}/{}", w.kind, w.name),
                        "--container".into(),
                        w.container.clone(),
                    ]);
                } else if let Some(k) = &target.kustomize {
                    args.extend([
                        "--kustomize".into(),
                        work.path().join(&k.path).display().to_string(),
                        "--name".into(),
                        serde_json::to_value(k)?["image"]
                            .as_str()
                            .unwrap_or(&image)
                            .to_string(),
                    ]);
                } else if let Some(h) = &target.helm {
                    args.extend([
                        "--helm-values".into(),
                        work.path().join(&h.file).display().to_string(),
                        "--key".into(),
                        h.tag.clone(),
                    ]);
                } else {
                    anyhow::bail!("{what}: no sample check for this target kind yet");
                }
                // What the operator writes: the watched repository with the chosen tag.
                args.extend(["--image".into(), new_image.clone()]);
                let mut before = BTreeMap::new();
                read_tree(work.path(), &mut before)?;
                let out = Command::new(imagewatch_e2e::operator::binary())
                    .args(&args)
                    .output()
                    .context("imagewatch set-image (build with `cargo build -p imagewatch`)")?;
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                ensure!(
                    out.status.success(),
                    "{what}: target not found in the sample's manifests: {}{}",
                    stdout,
                    String::from_utf8_lossy(&out.stderr)
                );
                let mut after = BTreeMap::new();
                read_tree(work.path(), &mut after)?;
                let changed: Vec<(&PathBuf, usize)> = before
                    .iter()
                    .map(|(p, b)| (p, changed_lines(b, &after[p])))
                    .filter(|(_, n)| *n > 0)
                    .collect();
                assert!(
                    changed.len() == 1 && changed[0].1 == 1,
                    "{what}: writing a tag should change one line of one file, changed {changed:?}"
                );

                // `updated FILE: OLD -> NEW`: OLD is what the sample holds now.
                let old = stdout
                    .rsplit_once(" -> ")
                    .and_then(|(left, _)| left.rsplit_once(": "))
                    .map(|(_, old)| old.trim().to_string())
                    .with_context(|| format!("{what}: unexpected set-image output {stdout:?}"))?;
                let (repository, old_tag) = match old.rsplit_once(':') {
                    Some((repo, tag)) if !tag.contains('/') => (Some(repo.to_string()), tag),
                    _ => (None, old.as_str()),
                };
                if let Some(repository) = repository {
                    assert_eq!(repository, image, "{what}: the target holds another image");
                }
                let rules = spec.tags.clone().unwrap_or_default();
                let policy = imagewatch::policy::TagPolicy::new(
                    rules.pattern.as_deref().unwrap_or(""),
                    rules.exclude.as_deref().unwrap_or(&[]),
                    policy_order(rules.order),
                    rules.extract.as_deref(),
                )
                .map_err(|e| anyhow::anyhow!("{what}: invalid tag rules: {e}"))?;
                assert!(
                    policy.matches(old_tag),
                    "{what}: the sample's current tag {old_tag} does not match the watch's rules"
                );
                if rules.order != Some(TagOrder::Newest) {
                    let tags = [imagewatch::policy::TagInfo::new(old_tag)];
                    assert!(
                        policy.select(&tags).is_some(),
                        "{what}: {old_tag} cannot be ordered by {:?}",
                        rules.order
                    );
                }
                checked += 1;
            }
        }
    }
    ensure!(checked >= 10, "only {checked} watches checked");
    Ok(())
}

#[test]
fn the_promotion_sample_targets_the_rewritten_images() -> anyhow::Result<()> {
    let dir = samples_dir().join("promotion-pr");
    let objects = sample_objects(&dir)?;
    let policy = &objects
        .iter()
        .find(|(_, o)| o["kind"] == "PromotionPolicy")
        .context("no PromotionPolicy")?
        .1;
    let selector = string_map(&policy["spec"]["from"]["watchSelector"]["matchLabels"]);
    let selected: Vec<&Value> = objects
        .iter()
        .map(|(_, o)| o)
        .filter(|o| o["kind"] == "ImageWatch")
        .filter(|o| {
            let labels = string_map(&o["metadata"]["labels"]);
            selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        })
        .collect();
    assert_eq!(
        selected.len(),
        3,
        "the selector picks the three staging watches"
    );
    let rewrite = &policy["spec"]["to"]["imageRewrite"][0];
    let (from, to) = (
        rewrite["from"].as_str().unwrap_or_default(),
        rewrite["to"].as_str().unwrap_or_default(),
    );
    let production = std::fs::read_to_string(
        dir.join("manifests")
            .join(policy["spec"]["to"]["path"].as_str().unwrap_or_default())
            .join("kustomization.yaml"),
    )?;
    let mut names = Vec::new();
    for watch in selected {
        let image = watch["spec"]["image"].as_str().unwrap_or_default();
        let rewritten = image
            .strip_prefix(from)
            .map(|rest| format!("{to}{rest}"))
            .with_context(|| format!("{image} does not start with {from}"))?;
        assert!(
            production.contains(&format!("newName: {rewritten}\n")),
            "the production overlay does not hold {rewritten}"
        );
        names.push(image.rsplit('/').next().unwrap_or_default().to_string());
    }
    let leader = policy["spec"]["alignTags"]["leader"].as_str();
    assert!(names.iter().any(|n| Some(n.as_str()) == leader));
    for follower in policy["spec"]["alignTags"]["followers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        assert!(names.iter().any(|n| Some(n.as_str()) == follower.as_str()));
    }
    Ok(())
}

/// Creates a queue with the sample's policy and a rule with the sample's pattern targeting
/// it in moto, puts a push, a delete and a failed push, and prints the bodies delivered.
const ECR_SQS_CHECK: &str = r#"
import json, sys, boto3
endpoint, pattern_file, policy_file, suffix = sys.argv[1:5]
kw = dict(endpoint_url=endpoint, region_name="ap-northeast-1",
          aws_access_key_id="testing", aws_secret_access_key="testing")
sqs, events = boto3.client("sqs", **kw), boto3.client("events", **kw)
name = "imagewatch-ecr-push-" + suffix
url = sqs.create_queue(QueueName=name)["QueueUrl"]
arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
policy = open(policy_file).read()
policy = policy.replace("arn:aws:sqs:ap-northeast-1:123456789012:imagewatch-ecr-push", arn)
policy = policy.replace("rule/imagewatch-ecr-push", "rule/" + name)
json.loads(policy)
sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": policy})
events.put_rule(Name=name, EventPattern=open(pattern_file).read())
events.put_targets(Rule=name, Targets=[{"Id": "imagewatch", "Arn": arn}])
def event(action, result, tag):
    return {"Source": "aws.ecr", "DetailType": "ECR Image Action", "Detail": json.dumps({
        "action-type": action, "result": result, "repository-name": "hoge/team-a/api/server",
        "image-tag": tag, "image-digest": "sha256:" + "ab" * 32})}
events.put_events(Entries=[event("DELETE", "SUCCESS", "0ld0ld0"),
                           event("PUSH", "FAILURE", "badbad0"),
                           event("PUSH", "SUCCESS", "abc1234")])
bodies = []
for _ in range(5):
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    bodies += [m["Body"] for m in got.get("Messages", [])]
print(json.dumps(bodies))
"#;

#[test]
fn the_ecr_sample_routes_pushes_from_eventbridge_to_sqs() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    let dir = samples_dir().join("ecr-sqs");
    let pattern: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("eventbridge-rule.json"))?)?;
    assert_eq!(
        pattern,
        serde_json::json!({"source": ["aws.ecr"], "detail-type": ["ECR Image Action"],
                           "detail": {"action-type": ["PUSH"], "result": ["SUCCESS"]}})
    );
    let policy: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sqs-queue-policy.json"))?)?;
    assert_eq!(
        policy["Statement"][0]["Principal"]["Service"],
        "events.amazonaws.com"
    );
    assert_eq!(policy["Statement"][0]["Action"], "sqs:SendMessage");
    let iam: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("iam-policy.json"))?)?;
    let actions = iam["Statement"].to_string();
    for action in [
        "ecr:DescribeImages",
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
    ] {
        assert!(actions.contains(action), "iam-policy.json lacks {action}");
    }

    let out = ground.script(
        "moto.sh",
        &[
            "py",
            "-c",
            ECR_SQS_CHECK,
            ground.var("IMAGEWATCH_MOTO_URL")?,
            &dir.join("eventbridge-rule.json").display().to_string(),
            &dir.join("sqs-queue-policy.json").display().to_string(),
            &random_suffix(),
        ],
    )?;
    let bodies: Vec<String> = serde_json::from_str(out.trim().lines().last().unwrap_or("[]"))?;
    assert_eq!(
        bodies.len(),
        1,
        "only the successful push is delivered: {bodies:?}"
    );
    let event = imagewatch::sources::eventbridge::parse_message(&bodies[0], Some("123456789012"))
        .map_err(|e| anyhow::anyhow!("the operator cannot read the delivered event: {e}"))?
        .context("the operator ignores the delivered event")?;
    assert_eq!(event.tag.as_deref(), Some("abc1234"));

    // The sample's watch follows exactly the repository the event names.
    let watch = sample_objects(&dir)?
        .into_iter()
        .find(|(_, o)| o["kind"] == "ImageWatch")
        .context("no ImageWatch")?
        .1;
    assert_eq!(
        watch["spec"]["image"].as_str(),
        Some(format!("{}/{}", event.registry, event.repository).as_str())
    );
    assert_eq!(watch["spec"]["credentials"]["provider"], "aws");
    Ok(())
}

#[test]
fn sample_chart_values_pass_the_schema() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    let values = samples_dir().join("ecr-sqs/values.yaml");
    let out = Command::new(ground.helm()?)
        .args([
            "template",
            "imagewatch",
            &repo_root().join("charts/imagewatch").display().to_string(),
            "-n",
            "imagewatch-system",
            "-f",
            &values.display().to_string(),
        ])
        .output()?;
    let rendered = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "eks.amazonaws.com/role-arn: arn:aws:iam::123456789012:role/imagewatch",
        "name: IMAGEWATCH_SQS_QUEUE_URL",
        "https://sqs.ap-northeast-1.amazonaws.com/123456789012/imagewatch-ecr-push",
        "name: IMAGEWATCH_SQS_DEFAULT_ACCOUNT",
    ] {
        assert!(
            rendered.contains(expected),
            "rendered chart lacks {expected}"
        );
    }
    Ok(())
}

/// Every chart values file of every sample (`values.yaml`, `values-*.yaml`) renders with the
/// chart's schema, and the EKS recipe's ServiceAccount is the one its trust policies name
/// (`system:serviceaccount:imagewatch:imagewatch`: release `imagewatch` in namespace
/// `imagewatch`).
#[test]
fn every_sample_values_file_renders_and_names_the_trusted_service_account() -> anyhow::Result<()> {
    let mut files = Vec::new();
    for dir in sample_dirs()? {
        for entry in std::fs::read_dir(&dir)?.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "values.yaml" || (name.starts_with("values-") && name.ends_with(".yaml")) {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    ensure!(
        files
            .iter()
            .any(|f| f.to_string_lossy().contains("eks-ecr/values-irsa")),
        "no samples/eks-ecr/values-irsa.yaml among {files:?}"
    );
    for file in &files {
        let path = file.display().to_string();
        let rendered = imagewatch_e2e::chart::render("imagewatch", "imagewatch", &[&path])
            .with_context(|| path.clone())?;
        let docs = imagewatch_e2e::chart::documents(&rendered)?;
        if path.contains("eks-ecr/values-irsa") {
            let account = imagewatch_e2e::chart::kind(&docs, "ServiceAccount")
                .into_iter()
                .next()
                .cloned()
                .context("no ServiceAccount rendered")?;
            assert_eq!(account["metadata"]["name"], "imagewatch", "{path}");
            assert!(
                account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("arn:aws:iam::")),
                "{path}: no IRSA role annotation"
            );
        }
    }
    Ok(())
}
