//! Argo CD Image Updater: `argocd-image-updater.argoproj.io/*` annotations on Applications
//! (v0.x) and `ImageUpdater` resources (v1.x), both read into one [`ImageConfig`] per image.
//!
//! ```yaml
//! metadata:
//!   annotations:
//!     argocd-image-updater.argoproj.io/image-list: web=ghcr.io/acme/web:~1.4
//!     argocd-image-updater.argoproj.io/web.update-strategy: semver
//!     argocd-image-updater.argoproj.io/web.ignore-tags: latest, dev-*
//!     argocd-image-updater.argoproj.io/write-back-method: git
//!     argocd-image-updater.argoproj.io/write-back-target: kustomization
//!     argocd-image-updater.argoproj.io/git-branch: main
//! ```
//!
//! The target is what the write-back writes: `.argocd-source-<app>.yaml` (the default, and
//! what `write-back-method: argocd` amounts to once it lives in Git), the kustomization
//! (`write-back-target: kustomization[:path]`) or a Helm values file
//! (`helmvalues[:path]`, key from `helm.image-tag` / `helm.image-spec`).

use imagewatch_crd::{
    ArgocdSourceTarget, DigestMode, GitSource, HelmTarget, KustomizeTarget, SecretRef, TagOrder,
    Target,
};
use serde_json::Value;

use super::draft::{
    WatchDraft, annotation, describe, name_of, namespace_of, object_name, rules, split_image,
};
use super::model::{Imported, Inputs, Options, Severity, SourceObject};

const PREFIX: &str = "argocd-image-updater.argoproj.io/";

/// One image as Argo CD Image Updater is told to update it, wherever that was said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageConfig {
    /// The alias (`web` of `web=ghcr.io/acme/web`), or the image when none was given.
    pub alias: String,
    /// Image repository.
    pub image: String,
    /// Version constraint (or, for `digest`, the tag).
    pub constraint: Option<String>,
    /// `semver`, `latest`/`newest-build`, `name`/`alphabetical`, `digest`.
    pub strategy: Option<String>,
    /// `regexp:<re>` or `any`.
    pub allow_tags: Option<String>,
    /// Globs of tags never chosen.
    pub ignore_tags: Vec<String>,
    /// `pullsecret:<ns>/<name>`, `secret:<ns>/<name>#<field>`, `env:…`, `ext:…`.
    pub pull_secret: Option<String>,
    /// `force-update: true`.
    pub force_update: bool,
    /// `platforms`: the platforms a tag's image must provide (`linux/amd64`, `linux/arm/v7`).
    pub platforms: Vec<String>,
    /// Helm key of the image name.
    pub helm_name: Option<String>,
    /// Helm key of the tag.
    pub helm_tag: Option<String>,
    /// Helm key of the full image.
    pub helm_spec: Option<String>,
    /// The kustomize image name.
    pub kustomize_name: Option<String>,
    /// `argocd`, `git`, `git:secret:<ns>/<name>`, `git:repocreds`.
    pub write_back_method: Option<String>,
    /// `kustomization[:path]`, `helmvalues[:path]`.
    pub write_back_target: Option<String>,
    /// `branch` or `base:target`.
    pub git_branch: Option<String>,
    /// Repository URL other than the Application's.
    pub git_repository: Option<String>,
}

/// `alias=image:constraint` entries of an `image-list` annotation.
fn image_list(list: &str) -> Vec<(Option<String>, String, Option<String>)> {
    list.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (alias, reference) = match entry.split_once('=') {
                Some((alias, rest)) if !alias.contains(['/', ':']) => {
                    (Some(alias.trim().to_owned()), rest.trim())
                }
                _ => (None, entry),
            };
            // The constraint follows the last ':' after the last '/'; a registry port does not.
            let slash = reference.rfind('/').map_or(0, |i| i + 1);
            match reference[slash..].rfind(':') {
                Some(colon) => {
                    let colon = slash + colon;
                    (
                        alias,
                        reference[..colon].to_owned(),
                        Some(reference[colon + 1..].to_owned()),
                    )
                }
                None => (alias, reference.to_owned(), None),
            }
        })
        .collect()
}

/// The image configurations of an Application's annotations.
#[must_use]
pub fn from_annotations(app: &Value) -> Vec<ImageConfig> {
    let Some(list) = annotation(app, &format!("{PREFIX}image-list")) else {
        return Vec::new();
    };
    let get = |key: &str| annotation(app, &format!("{PREFIX}{key}")).map(str::to_owned);
    image_list(list)
        .into_iter()
        .map(|(alias, image, constraint)| {
            // Per-image options need an alias; application-wide ones apply to every image.
            let option = |key: &str| {
                alias
                    .as_ref()
                    .and_then(|alias| get(&format!("{alias}.{key}")))
                    .or_else(|| get(key))
            };
            ImageConfig {
                alias: alias.clone().unwrap_or_else(|| image.clone()),
                constraint,
                strategy: option("update-strategy"),
                allow_tags: option("allow-tags"),
                ignore_tags: option("ignore-tags")
                    .map(|list| comma_list(&list))
                    .unwrap_or_default(),
                pull_secret: option("pull-secret"),
                force_update: option("force-update").is_some_and(|v| v == "true"),
                platforms: option("platforms")
                    .map(|list| comma_list(&list))
                    .unwrap_or_default(),
                helm_name: option("helm.image-name"),
                helm_tag: option("helm.image-tag"),
                helm_spec: option("helm.image-spec"),
                kustomize_name: option("kustomize.image-name"),
                write_back_method: get("write-back-method"),
                write_back_target: get("write-back-target"),
                git_branch: get("git-branch"),
                git_repository: get("git-repository"),
                image,
            }
        })
        .collect()
}

/// Settings of an `ImageUpdater` level (spec, application ref, image), later ones winning.
fn merge_settings(config: &mut ImageConfig, settings: Option<&Value>) {
    let Some(settings) = settings else { return };
    let text = |key: &str| settings.get(key).and_then(Value::as_str).map(str::to_owned);
    if let Some(strategy) = text("updateStrategy") {
        config.strategy = Some(strategy);
    }
    if let Some(allow) = text("allowTags") {
        config.allow_tags = Some(allow);
    }
    if let Some(ignore) = settings.get("ignoreTags").and_then(Value::as_array) {
        config.ignore_tags = ignore
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
    }
    if let Some(secret) = text("pullSecret") {
        config.pull_secret = Some(secret);
    }
    if let Some(force) = settings.get("forceUpdate").and_then(Value::as_bool) {
        config.force_update = force;
    }
    match settings.get("platforms") {
        Some(Value::Array(list)) => {
            config.platforms = list
                .iter()
                .filter_map(Value::as_str)
                .map(|p| p.trim().to_owned())
                .filter(|p| !p.is_empty())
                .collect();
        }
        Some(Value::String(list)) => config.platforms = comma_list(list),
        _ => {}
    }
}

/// A comma-separated annotation value, trimmed, empty entries left out.
fn comma_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

fn merge_write_back(config: &mut ImageConfig, write_back: Option<&Value>) {
    let Some(write_back) = write_back else { return };
    let text = |pointer: &str| write_back.pointer(pointer).and_then(Value::as_str);
    if let Some(method) = text("/method") {
        config.write_back_method = Some(method.to_owned());
    }
    if let Some(target) = text("/gitConfig/writeBackTarget") {
        config.write_back_target = Some(target.to_owned());
    }
    if let Some(branch) = text("/gitConfig/branch") {
        config.git_branch = Some(branch.to_owned());
    }
    if let Some(repository) = text("/gitConfig/repository") {
        config.git_repository = Some(repository.to_owned());
    }
}

/// A glob with `*` and `?` only (an `ImageUpdater` `namePattern`), matched on a whole name.
fn name_matches(pattern: &str, name: &str) -> bool {
    let regex = pattern
        .split('*')
        .map(|part| {
            part.split('?')
                .map(regex::escape)
                .collect::<Vec<_>>()
                .join(".")
        })
        .collect::<Vec<_>>()
        .join(".*");
    regex::Regex::new(&format!("^{regex}$")).is_ok_and(|re| re.is_match(name))
}

fn labels_match(selector: Option<&Value>, app: &Value) -> Result<bool, String> {
    let Some(selector) = selector else {
        return Ok(true);
    };
    if selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_some_and(|e| !e.is_empty())
    {
        return Err("labelSelectors.matchExpressions are not evaluated by the import".into());
    }
    let labels = app.pointer("/metadata/labels");
    Ok(selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v)))
}

pub(super) fn translate(inputs: &Inputs, options: &Options, out: &mut Imported) {
    let applications: Vec<&SourceObject> = inputs
        .objects
        .iter()
        .filter(|o| {
            o.value.get("kind").and_then(Value::as_str) == Some("Application")
                && o.value
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .is_some_and(|v| v.starts_with("argoproj.io/"))
        })
        .collect();
    for app in &applications {
        for config in from_annotations(&app.value) {
            translate_image(app, &config, options, out);
        }
    }
    for updater in inputs.objects.iter().filter(|o| {
        o.value.get("kind").and_then(Value::as_str) == Some("ImageUpdater")
            && o.value
                .get("apiVersion")
                .and_then(Value::as_str)
                .is_some_and(|v| v.starts_with("argocd-image-updater.argoproj.io/"))
    }) {
        translate_updater(updater, &applications, options, out);
    }
}

fn translate_updater(
    updater: &SourceObject,
    applications: &[&SourceObject],
    options: &Options,
    out: &mut Imported,
) {
    let source = describe(updater);
    let spec = updater.value.get("spec").unwrap_or(&Value::Null);
    let namespace = namespace_of(&updater.value);
    let refs = spec.get("applicationRefs").and_then(Value::as_array);
    for (index, app_ref) in refs.into_iter().flatten().enumerate() {
        let at = format!("{source} applicationRefs[{index}]");
        let pattern = app_ref
            .get("namePattern")
            .and_then(Value::as_str)
            .unwrap_or("*");
        let mut matched = Vec::new();
        for app in applications {
            // Applications in the ImageUpdater's namespace (any, when it has none written).
            if namespace.is_some() && namespace_of(&app.value) != namespace {
                continue;
            }
            if !name_matches(pattern, name_of(&app.value)) {
                continue;
            }
            match labels_match(app_ref.get("labelSelectors"), &app.value) {
                Ok(true) => matched.push(*app),
                Ok(false) => {}
                Err(reason) => {
                    out.note(&at, Severity::NotTranslated, reason);
                    return;
                }
            }
        }
        if matched.is_empty() {
            out.note(
                &at,
                Severity::NotTranslated,
                format!("no imported Application matches namePattern {pattern:?}"),
            );
            continue;
        }
        if app_ref.get("useAnnotations").and_then(Value::as_bool) == Some(true) {
            // The annotations of those Applications were translated with the others.
            continue;
        }
        for app in matched {
            let images = app_ref.get("images").and_then(Value::as_array);
            for image in images.into_iter().flatten() {
                let Some(name) = image.get("imageName").and_then(Value::as_str) else {
                    out.note(&at, Severity::NotTranslated, "an image without imageName");
                    continue;
                };
                let Some((alias, repository, constraint)) =
                    image_list(name).into_iter().next().map(|(_, r, c)| {
                        let alias = image
                            .get("alias")
                            .and_then(Value::as_str)
                            .map_or_else(|| r.clone(), str::to_owned);
                        (alias, r, c)
                    })
                else {
                    continue;
                };
                let mut config = ImageConfig {
                    alias,
                    image: repository,
                    constraint,
                    ..ImageConfig::default()
                };
                merge_write_back(&mut config, spec.get("writeBackConfig"));
                merge_write_back(&mut config, app_ref.get("writeBackConfig"));
                merge_settings(&mut config, spec.get("commonUpdateSettings"));
                merge_settings(&mut config, app_ref.get("commonUpdateSettings"));
                merge_settings(&mut config, image.get("commonUpdateSettings"));
                let targets = image.get("manifestTargets");
                let text = |pointer: &str| {
                    targets
                        .and_then(|t| t.pointer(pointer))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                };
                config.helm_name = text("/helm/name");
                config.helm_tag = text("/helm/tag");
                config.helm_spec = text("/helm/spec");
                config.kustomize_name = text("/kustomize/name");
                if targets.and_then(|t| t.get("plugin")).is_some() {
                    out.note(
                        &at,
                        Severity::NotTranslated,
                        format!("image {}: plugin targets (environment variables) have no imagewatch target", config.alias),
                    );
                    continue;
                }
                translate_image(app, &config, options, out);
            }
        }
    }
}

/// `base` + `relative` inside the repository (`/x` is from the root), without `.`/`..`.
fn join(base: &str, relative: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    let full = match relative.strip_prefix('/') {
        Some(rooted) => rooted.to_owned(),
        None => format!("{base}/{relative}"),
    };
    for part in full.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    Some(parts.join("/"))
}

fn translate_image(
    app: &SourceObject,
    config: &ImageConfig,
    options: &Options,
    out: &mut Imported,
) {
    let value = &app.value;
    let app_name = name_of(value);
    let at = format!("{} image {}", describe(app), config.alias);
    let source = value
        .pointer("/spec/source")
        .or_else(|| value.pointer("/spec/sources/0"))
        .unwrap_or(&Value::Null);
    if value
        .pointer("/spec/sources")
        .and_then(Value::as_array)
        .is_some_and(|s| s.len() > 1)
    {
        out.note(
            &at,
            Severity::Differs,
            "a multi-source Application: the watch uses its first source; check the path",
        );
    }
    let source_text = |key: &str| source.get(key).and_then(Value::as_str);
    let app_path = source_text("path")
        .unwrap_or("")
        .trim_matches('/')
        .to_owned();

    let Some((repository, _)) = split_image(&config.image) else {
        out.note(
            &at,
            Severity::NotTranslated,
            format!("{:?} is not an image reference", config.image),
        );
        return;
    };

    // Tag rules.
    let strategy = config.strategy.as_deref().unwrap_or("semver");
    let allow = match config.allow_tags.as_deref().map(str::trim) {
        None | Some("any") => None,
        Some(allow) => match allow.strip_prefix("regexp:") {
            Some(regex) => Some(format!("regex:{regex}")),
            None => {
                out.note(
                    &at,
                    Severity::NotTranslated,
                    format!("allow-tags {allow:?} is neither regexp:<re> nor any"),
                );
                return;
            }
        },
    };
    let constraint = config.constraint.clone().filter(|c| !c.is_empty());
    let mut pin = None;
    let mut digest = None;
    let (pattern, order) = match strategy {
        "semver" => match (allow, constraint) {
            (None, constraint) => (
                Some(format!("semver:{}", constraint.as_deref().unwrap_or("*"))),
                TagOrder::Semver,
            ),
            (Some(regex), None) => {
                out.note(
                    &at,
                    Severity::Differs,
                    "semver with allow-tags and no constraint: prereleases the regex matches \
                     compete, where Argo CD Image Updater admits releases only",
                );
                (Some(regex), TagOrder::Semver)
            }
            (Some(regex), Some(constraint)) => {
                out.note(
                    &at,
                    Severity::NotTranslated,
                    format!(
                        "allow-tags {:?} together with the constraint {constraint:?}: a watch \
                         has one pattern, a regex or a range; keep one (semver:{constraint} or \
                         {regex}) if the other excludes nothing you publish",
                        config.allow_tags.as_deref().unwrap_or_default()
                    ),
                );
                return;
            }
        },
        "latest" | "newest-build" => {
            out.note(
                &at,
                Severity::Differs,
                "newest-build ordered by the image's build (creation) time; the watch uses the \
                 registry's push time (order: Newest)",
            );
            (allow, TagOrder::Newest)
        }
        "name" | "alphabetical" => (allow, TagOrder::Alphabetical),
        "digest" => {
            let Some(tag) = constraint else {
                out.note(
                    &at,
                    Severity::NotTranslated,
                    "the digest strategy needs the tag to follow (image:tag)",
                );
                return;
            };
            pin = Some(tag);
            digest = Some(DigestMode::Follow);
            (allow, TagOrder::Semver)
        }
        other => {
            out.note(
                &at,
                Severity::NotTranslated,
                format!("unknown update-strategy {other:?}"),
            );
            return;
        }
    };
    let mut tag_rules = rules(pattern, config.ignore_tags.clone(), order);
    let mut platforms = Vec::new();
    for platform in &config.platforms {
        match imagewatch_engine::platforms::Platform::parse(platform) {
            Ok(parsed) => platforms.push(parsed.to_string()),
            Err(error) => out.note(
                &at,
                Severity::NotTranslated,
                format!("platforms: {error}; left out of tags.platforms"),
            ),
        }
    }
    tag_rules.platforms = (!platforms.is_empty()).then_some(platforms);
    if let Err(error) = crate::policy::TagPolicy::from_rules(&tag_rules) {
        out.note(&at, Severity::NotTranslated, error.to_string());
        return;
    }
    if config.force_update {
        out.note(
            &at,
            Severity::Differs,
            "force-update has no counterpart: imagewatch writes Git whether or not the \
             Application runs the image",
        );
    }

    // Target.
    let method = config.write_back_method.as_deref().unwrap_or("argocd");
    let kustomize_name = config
        .kustomize_name
        .clone()
        .unwrap_or_else(|| repository.clone());
    let written_to = if method == "argocd" {
        None
    } else {
        config.write_back_target.as_deref()
    };
    let target = match written_to {
        None => {
            if method == "argocd" {
                out.note(
                    &at,
                    Severity::Differs,
                    "write-back-method argocd changed the Application's parameters without Git; \
                     the watch writes the same override to .argocd-source-<app>.yaml in Git, \
                     which Argo CD merges the same way (remove the old override from the \
                     Application)",
                );
            }
            let helm = config.helm_tag.is_some()
                || config.helm_spec.is_some()
                || source.get("helm").is_some();
            if helm
                && config.helm_spec.is_none()
                && config
                    .helm_tag
                    .as_deref()
                    .is_some_and(|key| key != "image.tag" && !key.ends_with(".tag"))
            {
                out.note(
                    &at,
                    Severity::NotTranslated,
                    format!(
                        "Helm parameter {:?}: .argocd-source targets update image.tag or \
                         <image>.tag parameters; use write-back-target helmvalues",
                        config.helm_tag.as_deref().unwrap_or("")
                    ),
                );
                return;
            }
            let image = if helm {
                config
                    .helm_tag
                    .as_deref()
                    .and_then(|key| key.strip_suffix(".tag"))
                    .map(str::to_owned)
            } else {
                Some(kustomize_name)
            };
            Target {
                workload: None,
                kustomize: None,
                helm: None,
                argocd_source: Some(ArgocdSourceTarget {
                    path: app_path.clone(),
                    application: app_name.to_owned(),
                    image,
                }),
            }
        }
        Some(target) if target == "kustomization" || target.starts_with("kustomization:") => {
            let Some(path) = join(
                &app_path,
                target.strip_prefix("kustomization:").unwrap_or("."),
            ) else {
                out.note(
                    &at,
                    Severity::NotTranslated,
                    format!("{target:?} leaves the repository"),
                );
                return;
            };
            Target {
                workload: None,
                kustomize: Some(KustomizeTarget {
                    path,
                    image: Some(kustomize_name),
                }),
                helm: None,
                argocd_source: None,
            }
        }
        Some(target) if target == "helmvalues" || target.starts_with("helmvalues:") => {
            let file = target.strip_prefix("helmvalues:").unwrap_or("values.yaml");
            let Some(file) = join(&app_path, file) else {
                out.note(
                    &at,
                    Severity::NotTranslated,
                    format!("{target:?} leaves the repository"),
                );
                return;
            };
            let key = config
                .helm_spec
                .clone()
                .or_else(|| config.helm_tag.clone())
                .unwrap_or_else(|| "image.tag".to_owned());
            Target {
                workload: None,
                kustomize: None,
                helm: Some(HelmTarget { file, tag: key }),
                argocd_source: None,
            }
        }
        Some(other) => {
            out.note(
                &at,
                Severity::NotTranslated,
                format!("write-back-target {other:?} is not kustomization or helmvalues"),
            );
            return;
        }
    };

    // Where: the tenant namespace the Application deploys to.
    let namespace = value
        .pointer("/spec/destination/namespace")
        .and_then(Value::as_str)
        .or_else(|| namespace_of(value))
        .map(str::to_owned);
    let mut draft = WatchDraft::new(object_name(&[app_name, &config.alias]), repository, target);
    draft.namespace.clone_from(&namespace);
    draft.rules = tag_rules;
    draft.pin = pin;
    draft.digest = digest;

    // Git.
    let url = config
        .git_repository
        .clone()
        .or_else(|| source_text("repoURL").map(str::to_owned));
    let (branch, push_branch) = match config.git_branch.as_deref() {
        Some(branch) => match branch.split_once(':') {
            Some((base, push)) if push.contains("{{") => {
                out.note(
                    &at,
                    Severity::Differs,
                    format!(
                        "git-branch {branch:?}: a templated push branch has no counterpart; the \
                         watch pushes to imagewatch/{{name}}"
                    ),
                );
                (Some(base.to_owned()), Some("imagewatch/{name}".to_owned()))
            }
            Some((base, push)) => (Some(base.to_owned()), Some(push.to_owned())),
            None => (Some(branch.to_owned()), None),
        },
        None => (
            source_text("targetRevision")
                .filter(|r| !r.is_empty() && *r != "HEAD")
                .map(str::to_owned),
            None,
        ),
    };
    let secret_ref = match method.strip_prefix("git:secret:") {
        Some(reference) => {
            let (secret_namespace, name) = reference.split_once('/').unwrap_or(("", reference));
            if Some(secret_namespace) != namespace.as_deref() && !secret_namespace.is_empty() {
                out.note(
                    &at,
                    Severity::Differs,
                    format!(
                        "the Git Secret is in namespace {secret_namespace}; a watch reads Secrets \
                         of its own namespace only: copy {name} there"
                    ),
                );
            }
            Some(SecretRef {
                name: name.to_owned(),
            })
        }
        None => {
            if method != "argocd" || url.is_some() {
                out.note(
                    &at,
                    Severity::Differs,
                    "Argo CD Image Updater pushed with Argo CD's repository credentials; give \
                     spec.git a secretRef (token or SSH key) in the watch's namespace",
                );
            }
            None
        }
    };
    draft.git = url.map(|url| GitSource {
        url,
        branch,
        secret_ref,
        push_branch,
        pull_request: None,
    });

    // Registry credentials.
    if let Some(secret) = &config.pull_secret {
        match secret.strip_prefix("pullsecret:") {
            Some(reference) => {
                let (secret_namespace, name) = reference.split_once('/').unwrap_or(("", reference));
                if !secret_namespace.is_empty() && Some(secret_namespace) != namespace.as_deref() {
                    out.note(
                        &at,
                        Severity::Differs,
                        format!(
                            "the pull Secret is in namespace {secret_namespace}; copy {name} to \
                             the watch's namespace"
                        ),
                    );
                }
                draft.secret = Some(name.to_owned());
            }
            None => out.note(
                &at,
                Severity::Differs,
                format!(
                    "pull-secret {secret:?}: only pullsecret:<namespace>/<name> (a \
                     dockerconfigjson Secret) carries over; add credentials by hand"
                ),
            ),
        }
    }
    out.watches.push(draft.build(options));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_lists_split_alias_image_and_constraint() {
        assert_eq!(
            image_list("web=ghcr.io/acme/web:~1.4, localhost:5000/api, nginx:1.x"),
            vec![
                (
                    Some("web".into()),
                    "ghcr.io/acme/web".into(),
                    Some("~1.4".into())
                ),
                (None, "localhost:5000/api".into(), None),
                (None, "nginx".into(), Some("1.x".into())),
            ]
        );
    }

    #[test]
    fn paths_join_inside_the_repository() {
        assert_eq!(
            join("apps/web", "./values.yaml").as_deref(),
            Some("apps/web/values.yaml")
        );
        assert_eq!(
            join("apps/web", "../shared").as_deref(),
            Some("apps/shared")
        );
        assert_eq!(join("apps/web", "/env/prd").as_deref(), Some("env/prd"));
        assert_eq!(join("apps", "../../x"), None);
        assert!(name_matches("web-*", "web-prd"));
        assert!(!name_matches("web-*", "api-prd"));
    }
}
