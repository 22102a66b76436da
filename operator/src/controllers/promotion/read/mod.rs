//! Read step of a PromotionPolicy reconcile: the policy (validation of what the schema cannot
//! check), the source stage (the selected ImageWatches, or `from.path`), the Git location and
//! credentials of the target, the current state in Git (the target branch, the source branch
//! and the pull request branch, read through the git writer's clones) and the Argo CD
//! Application of the `application` gate.

pub(super) mod gates;

#[cfg(test)]
use super::fixtures::policy;
use super::shared::Shared;
use crate::error::{
    InternalError, MissingPath, PromotionError, SourceError, SpecError, TargetError,
};
use std::sync::Arc;

use imagewatch_crd::{ImageWatch, PromotionPolicy, promotion::PromotionMode};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams},
    core::Selector,
};

use crate::cluster::secrets;
use crate::controllers::SecretReader;
use crate::controllers::parse_duration;
use crate::{
    git::{GitAuth, GitError, Oid, Repo, RepoCache},
    promotion::gates::{ApplicationFacts, Containment, application_state},
};

/// What the read step reads: ImageWatches and Argo CD Applications (with the client, in Argo
/// CD's namespace), the allow-list and the metrics its answers are counted in, the target's
/// Git Secret, and the git writer's clones (and its history reader, for the holds step).
#[derive(Clone, Copy)]
pub(super) struct ReadContext<'a> {
    pub(super) client: &'a Client,
    pub(super) argocd_namespace: &'a str,
    pub(super) allowance: &'a crate::cluster::allowance::Allowance,
    pub(super) metrics: &'a crate::telemetry::Metrics,
    pub(super) secrets: SecretReader<'a>,
    pub(super) clones: &'a Arc<RepoCache>,
    /// The git writer, for the history of the target's places (`held.rs`).
    pub(super) writer: &'a crate::writer::GitWriter,
}

impl<'a> ReadContext<'a> {
    /// The read step's view of what the policy reconciles share.
    pub(super) fn of(shared: &'a Shared) -> Self {
        ReadContext {
            client: &shared.ctx.client,
            argocd_namespace: &shared.ctx.argocd_namespace,
            allowance: &shared.ctx.allowance,
            metrics: &shared.ctx.metrics,
            secrets: SecretReader::of(&shared.ctx),
            clones: &shared.cache,
            writer: &shared.ctx.writer,
        }
    }
}

/// Step 1 (pure): checks what the API server's schema cannot.
pub fn validate(spec: &imagewatch_crd::PromotionPolicySpec) -> Result<(), SpecError> {
    if spec
        .to
        .git
        .as_ref()
        .is_some_and(|g| g.pull_request.is_some())
    {
        return Err(SpecError::rule(
            "spec.to.git.pullRequest",
            "spec.to.git.pullRequest is for ImageWatches; a PromotionPolicy sets spec.pullRequest",
        ));
    }
    if parse_duration(spec.interval_or_default()).is_none() {
        return Err(SpecError::not_a_duration(
            "spec.interval",
            spec.interval_or_default(),
        ));
    }
    match (&spec.from.watch_selector, &spec.from.path) {
        (Some(_), Some(_)) | (None, None) => {
            return Err(SpecError::rule(
                "spec.from",
                "exactly one of spec.from.watchSelector and spec.from.path must be set",
            ));
        }
        _ => {}
    }
    let path_ok = |p: &str| !p.starts_with('/') && !p.split('/').any(|s| s == "..");
    if spec.to.path.trim_matches('/').is_empty() || !path_ok(&spec.to.path) {
        return Err(SpecError::NotADirectory {
            field: "spec.to.path",
            path: spec.to.path.clone(),
        });
    }
    if let Some(p) = &spec.from.path
        && (!path_ok(p) || p.trim_matches('/').is_empty())
    {
        return Err(SpecError::NotADirectory {
            field: "spec.from.path",
            path: p.clone(),
        });
    }
    if spec.from.path.is_some() && spec.to.git.is_none() {
        return Err(SpecError::Required {
            field: "spec.to.git",
            when: Some("with spec.from.path"),
        });
    }
    if let Some(soak) = spec.gates.as_ref().and_then(|g| g.soak.as_deref())
        && parse_duration(soak).is_none()
    {
        return Err(SpecError::not_a_duration("spec.gates.soak", soak));
    }
    if spec
        .gates
        .as_ref()
        .is_some_and(|g| g.soak_since == Some(imagewatch_crd::promotion::SoakSince::FirstApplied))
        && spec.from.path.is_none()
    {
        return Err(SpecError::rule(
            "spec.gates.soakSince",
            "spec.gates.soakSince FirstApplied reads the Git history of spec.from.path; a \
             watchSelector source has none (use soakSince Running, or from.path)",
        ));
    }
    if spec.mode() == PromotionMode::PullRequest && spec.pull_request.is_none() {
        return Err(SpecError::Required {
            field: "spec.pullRequest",
            when: Some("in mode PullRequest (the default)"),
        });
    }
    for rule in spec.to.image_rewrite.iter().flatten() {
        if rule.from.is_empty() {
            return Err(SpecError::invalid(
                "spec.to.imageRewrite",
                "from must not be empty",
            ));
        }
    }
    for (name, tag) in spec.pin.iter().flatten() {
        crate::manifests::image_ref::validate_tag(tag)
            .map_err(|e| SpecError::invalid(format!("spec.pin {name}"), e))?;
    }
    if let Some(align) = &spec.align_tags
        && align.leader.is_empty()
    {
        return Err(SpecError::rule(
            "spec.alignTags.leader",
            "spec.alignTags.leader must not be empty",
        ));
    }
    Ok(())
}

/// Where the promotion reads and writes.
pub(super) struct Location {
    pub(super) url: String,
    pub(super) auth: GitAuth,
    /// `to.branch`.
    pub(super) base: String,
    /// Branch the source lives on (source watches' branch, or `from.branch`).
    pub(super) source_branch: String,
}

pub(super) fn source_label(spec: &imagewatch_crd::PromotionPolicySpec) -> String {
    match (&spec.from.watch_selector, &spec.from.path) {
        (Some(selector), _) => {
            let mut parts: Vec<String> = selector
                .match_labels
                .iter()
                .flatten()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            for e in selector.match_expressions.iter().flatten() {
                parts.push(format!(
                    "{} {} ({})",
                    e.key,
                    e.operator,
                    e.values.clone().unwrap_or_default().join(",")
                ));
            }
            format!("ImageWatches {}", parts.join(","))
        }
        (None, Some(path)) => path.trim_matches('/').to_string(),
        (None, None) => String::new(),
    }
}

pub(super) async fn list_source_watches(
    policy: &PromotionPolicy,
    client: &Client,
) -> Result<Vec<ImageWatch>, PromotionError> {
    let Some(selector) = &policy.spec.from.watch_selector else {
        return Ok(Vec::new());
    };
    let selector = Selector::try_from(selector.clone()).map_err(|e| {
        PromotionError::InvalidSpec(SpecError::invalid("spec.from.watchSelector", e))
    })?;
    let api: Api<ImageWatch> =
        Api::namespaced(client.clone(), &policy.namespace().unwrap_or_default());
    Ok(api
        .list(&ListParams::default().labels_from(&selector))
        .await?
        .items)
}

/// The target repository: its URL, the name of its Git Secret, and its branch.
pub(super) async fn target_repository(
    policy: &PromotionPolicy,
    watches: &[ImageWatch],
    ctx: &ReadContext<'_>,
) -> Result<(String, Option<String>, String), PromotionError> {
    let namespace = policy.namespace().unwrap_or_default();
    let spec = &policy.spec;
    let client = ctx.client;
    Ok(match (&spec.to.git, watches.first()) {
        (Some(git), _) => (
            git.url.clone(),
            git.secret_ref.as_ref().map(|s| s.name.clone()),
            git.branch().to_string(),
        ),
        (None, Some(watch)) => match &watch.spec.git {
            Some(git) => (
                git.url.clone(),
                git.secret_ref.as_ref().map(|s| s.name.clone()),
                git.branch().to_string(),
            ),
            None => {
                let (source, secret) = crate::cluster::argocd::resolve(
                    client,
                    ctx.argocd_namespace,
                    &namespace,
                    watch.annotations(),
                    watch.labels(),
                    imagewatch_engine::watch_target::target_path(&watch.spec.target),
                )
                .await?;
                (source.repo_url, secret, source.branch)
            }
        },
        (None, None) => {
            return Err(PromotionError::InvalidSpec(SpecError::NoTargetRepository));
        }
    })
}

pub(super) async fn resolve_location(
    policy: &PromotionPolicy,
    watches: &[ImageWatch],
    ctx: &ReadContext<'_>,
) -> Result<Location, PromotionError> {
    let namespace = policy.namespace().unwrap_or_default();
    let spec = &policy.spec;
    let (url, secret, repo_branch) = target_repository(policy, watches, ctx).await?;
    crate::git::check_tenant_url(&url)
        .map_err(|e| PromotionError::InvalidSpec(SpecError::rule("spec.to.git.url", e)))?;
    let ask = crate::cluster::allow::Ask {
        namespace: &namespace,
        git: Some((url.as_str(), vec![spec.to.path.as_str()])),
        images: Vec::new(),
        aws: false,
    };
    let project = crate::cluster::allowance::ProjectOf {
        argocd_namespace: ctx.argocd_namespace,
        namespace: &namespace,
        annotations: policy.annotations(),
        labels: policy.labels(),
    };
    ctx.allowance
        .check(
            ctx.client,
            ctx.metrics,
            "PromotionPolicy",
            ask,
            Some(project),
        )
        .await?;
    let project = crate::cluster::allowance::ProjectOf {
        argocd_namespace: ctx.argocd_namespace,
        namespace: &namespace,
        annotations: policy.annotations(),
        labels: policy.labels(),
    };
    ctx.allowance
        .check_target(ctx.client, ctx.metrics, project, &url, &spec.to.path)
        .await?;
    let auth = match secret {
        Some(name) => secrets::git_credentials(&ctx.secrets, &namespace, &name).await?,
        None => GitAuth::Anonymous,
    };
    let watch_branch = watches
        .first()
        .and_then(|w| w.spec.git.as_ref())
        .map(|g| g.branch().to_string());
    Ok(Location {
        url,
        auth,
        base: spec
            .to
            .branch
            .clone()
            .unwrap_or_else(|| repo_branch.clone()),
        source_branch: spec
            .from
            .branch
            .clone()
            .or(watch_branch)
            .unwrap_or(repo_branch),
    })
}

/// Files as `(repository-relative path, text)`.
pub(super) type Files = Vec<(String, String)>;

/// A commit id and its time.
pub(super) type Change = (String, jiff::Timestamp);

/// What the blocking Git read found.
pub(super) struct GitRead {
    pub(super) base_head: Oid,
    pub(super) pr_tip: Option<Oid>,
    pub(super) target_files: Vec<(String, String)>,
    /// `from.path`: files, and the last commit that changed the directory (id, time).
    pub(super) source: Option<(Files, Option<Change>)>,
    /// `gates.soakSince: FirstApplied`: the changes of `from.path`, newest first (commit,
    /// time, files after it).
    pub(super) source_history: Vec<(String, jiff::Timestamp, Files)>,
    pub(super) containment: Option<Containment>,
}

pub(super) fn utf8_files(files: Vec<(String, Vec<u8>)>) -> Vec<(String, String)> {
    files
        .into_iter()
        .filter_map(|(n, b)| String::from_utf8(b).ok().map(|t| (n, t)))
        .collect()
}

/// How many changes of `from.path` `gates.soakSince: FirstApplied` reads back (each one a
/// state the source held), within the first 1000 commits of the source branch.
pub(super) const SOURCE_HISTORY_CHANGES: usize = 64;

/// Whether `revision` is, or descends from, every commit of `commits`.
pub(super) fn containment(repo: &Repo, revision: &str, commits: &[String]) -> Containment {
    let Ok(rev) = Oid::from_str(revision) else {
        return Containment::Unknown(format!("revision {revision:?} is not a commit id"));
    };
    if !repo.has_commit(rev) {
        return Containment::Unknown(format!(
            "revision {} is not in the fetched history of the source branch",
            revision.get(..12).unwrap_or(revision)
        ));
    }
    for commit in commits {
        let Ok(c) = Oid::from_str(commit) else {
            return Containment::Unknown(format!("source commit {commit:?} is not a commit id"));
        };
        if c == rev {
            continue;
        }
        match repo.descends_from(rev, c) {
            Ok(true) => {}
            Ok(false) => return Containment::Lacks(commit.clone()),
            Err(e) => return Containment::Unknown(format!("cannot compare with {commit}: {e}")),
        }
    }
    Containment::Contains
}

pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, PromotionError> + Send + 'static,
) -> Result<T, PromotionError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|error| PromotionError::Internal(InternalError::Task { what: "git", error }))?
}

/// Reads what the decision needs from Git.
#[allow(clippy::too_many_arguments)]
pub(super) async fn read_git(
    ctx: &ReadContext<'_>,
    location: &Location,
    to_path: String,
    from_path: Option<String>,
    pr_branch: Option<String>,
    revision: Option<String>,
    watch_commits: Vec<String>,
    source_history: bool,
) -> Result<GitRead, PromotionError> {
    let cache = ctx.clones.clone();
    let url = location.url.clone();
    let auth = location.auth.clone();
    let base = location.base.clone();
    let source_branch = location.source_branch.clone();
    blocking(move || {
        let repo = cache.open_or_clone(&url, &auth)?;
        let mut branches: Vec<&str> = vec![base.as_str()];
        if source_branch != base {
            branches.push(source_branch.as_str());
        }
        if let Some(b) = pr_branch.as_deref() {
            branches.push(b);
        }
        let heads = repo.fetch_many(&branches, &auth)?;
        let base_head = heads[0].ok_or_else(|| GitError::BranchNotFound {
            url: url.clone(),
            branch: base.clone(),
        })?;
        let source_head = if source_branch != base {
            heads[1].ok_or_else(|| GitError::BranchNotFound {
                url: url.clone(),
                branch: source_branch.clone(),
            })?
        } else {
            base_head
        };
        let pr_tip = if pr_branch.is_some() {
            heads.last().copied().flatten()
        } else {
            None
        };
        let target_files = match repo.read_files_under(base_head, &to_path) {
            Ok(files) => utf8_files(files),
            Err(GitError::PathNotFound { .. }) => {
                return Err(PromotionError::TargetNotFound(TargetError::PathNotFound(
                    MissingPath {
                        field: "spec.to.path",
                        path: to_path,
                        branch: base,
                    },
                )));
            }
            Err(e) => return Err(e.into()),
        };
        let mut commits = watch_commits;
        let mut history = Vec::new();
        let source = match &from_path {
            Some(path) => {
                let files = match repo.read_files_under(source_head, path) {
                    Ok(files) => utf8_files(files),
                    Err(GitError::PathNotFound { .. }) => {
                        return Err(PromotionError::SourceNotReady(SourceError::PathNotFound(
                            MissingPath {
                                field: "spec.from.path",
                                path: path.clone(),
                                branch: source_branch,
                            },
                        )));
                    }
                    Err(e) => return Err(e.into()),
                };
                // One walk of the path's history: its last change, and with
                // gates.soakSince FirstApplied the changes before it.
                let trimmed = path.trim_matches('/');
                let max = if source_history {
                    SOURCE_HISTORY_CHANGES
                } else {
                    1
                };
                let walked = repo.changes_of(source_head, trimmed, max)?;
                let changed = walked.first().map(|(c, at)| (c.to_string(), *at));
                commits.extend(changed.as_ref().map(|(c, _)| c.clone()));
                if source_history {
                    for (i, (commit, at)) in walked.iter().enumerate() {
                        // The last change holds what the head holds: read once.
                        let files = if i == 0 {
                            files.clone()
                        } else {
                            utf8_files(repo.read_files_under(*commit, trimmed)?)
                        };
                        history.push((commit.to_string(), *at, files));
                    }
                }
                Some((files, changed))
            }
            None => None,
        };
        let containment = revision.map(|rev| containment(&repo, &rev, &commits));
        Ok(GitRead {
            base_head,
            pr_tip,
            target_files,
            source,
            source_history: history,
            containment,
        })
    })
    .await
}

/// The Argo CD Application a `gates.application` names, as far as the policy in
/// `policy_namespace` may see it: one that neither lives in nor deploys to that namespace is
/// reported like a missing one, so a tenant learns nothing of other tenants' Applications
/// (their sync state, health or revision).
pub(super) async fn read_application(
    client: &Client,
    namespace: &str,
    name: &str,
    policy_namespace: &str,
) -> Result<ApplicationFacts, PromotionError> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"),
        "applications",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let label = format!("{namespace}/{name}");
    let app = match api.get_opt(name).await {
        Ok(app) => app,
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => return Err(e.into()),
    };
    let app = app
        .filter(|app| crate::cluster::argocd::deploys_to(namespace, &app.data, policy_namespace));
    Ok(match app {
        Some(app) => {
            let (sync, health, revision) = application_state(&app.data);
            ApplicationFacts {
                name: label,
                found: true,
                sync,
                health,
                revision,
                containment: Containment::Unknown(String::new()),
            }
        }
        None => ApplicationFacts {
            name: label,
            found: false,
            sync: None,
            health: None,
            revision: None,
            containment: Containment::Unknown(String::new()),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn validation_catches_what_the_schema_cannot() {
        assert!(validate(&policy(json!({})).spec).is_ok());
        let bad = policy(json!({"gates": {"soak": "soon"}}));
        assert!(
            validate(&bad.spec)
                .unwrap_err()
                .to_string()
                .contains("soak")
        );
        let bad = policy(json!({"pin": {"my-api": "-bad"}}));
        assert!(
            validate(&bad.spec)
                .unwrap_err()
                .to_string()
                .contains("spec.pin")
        );
        let mut bad = policy(json!({}));
        bad.spec.pull_request = None;
        assert!(
            validate(&bad.spec)
                .unwrap_err()
                .to_string()
                .contains("pullRequest")
        );
        let bad = policy(json!({"from": {"path": "overlays/stg"}}));
        assert!(
            validate(&bad.spec)
                .unwrap_err()
                .to_string()
                .contains("to.git")
        );
        // The policy fixture selects watches: no path whose history could be read.
        let bad = policy(json!({"gates": {"soak": "1m", "soakSince": "FirstApplied"}}));
        assert!(
            validate(&bad.spec)
                .unwrap_err()
                .to_string()
                .contains("soakSince")
        );
        let ok = policy(json!({"gates": {"soak": "1m", "soakSince": "Running"}}));
        assert!(validate(&ok.spec).is_ok());
    }
}
