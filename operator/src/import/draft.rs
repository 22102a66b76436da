//! What every converter shares: the watch drafts they build, and reading names,
//! annotations and images out of the source objects.

use imagewatch_crd::{
    GitSource, ImageWatch, ImageWatchSpec, RegistryCredentials, SecretRef, TagOrder, TagPick,
    TagRules, Target,
};
use serde_json::Value;

use super::model::{Options, SourceObject};
use crate::manifests::ImageRef;

/// `Deployment my-ns/web (apps/web/deploy.yaml)`.
pub(super) fn describe(object: &SourceObject) -> String {
    let value = &object.value;
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("?");
    let name = name_of(value);
    let namespaced = match namespace_of(value) {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    };
    match &object.file {
        Some(file) => format!("{kind} {namespaced} ({file})"),
        None => format!("{kind} {namespaced}"),
    }
}

pub(super) fn name_of(value: &Value) -> &str {
    value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub(super) fn namespace_of(value: &Value) -> Option<&str> {
    value.pointer("/metadata/namespace").and_then(Value::as_str)
}

pub(super) fn annotations(value: &Value) -> impl Iterator<Item = (&str, &str)> {
    value
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
}

pub(super) fn annotation<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// Directory of a file, relative; `""` for a file at the top.
pub(super) fn dir_of(file: &str) -> String {
    match file.rfind('/') {
        Some(slash) => file[..slash].to_owned(),
        None => String::new(),
    }
}

/// A Kubernetes object name from parts: lower case, `[a-z0-9-]`, at most 63 characters (so it
/// also fits a label value), never empty.
pub(super) fn object_name(parts: &[&str]) -> String {
    let mut name = String::new();
    for part in parts.iter().filter(|p| !p.is_empty()) {
        if !name.is_empty() {
            name.push('-');
        }
        for c in part.chars() {
            let c = c.to_ascii_lowercase();
            name.push(if c.is_ascii_alphanumeric() { c } else { '-' });
        }
    }
    let mut name: String = name
        .split('-')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    name.truncate(63);
    let name = name.trim_end_matches('-').to_owned();
    if name.is_empty() {
        "imported".to_owned()
    } else {
        name
    }
}

/// Repository and tag of an image reference as a manifest writes it.
pub(super) fn split_image(image: &str) -> Option<(String, Option<String>)> {
    let parsed = ImageRef::parse(image).ok()?;
    Some((parsed.repository(), parsed.tag().map(str::to_owned)))
}

/// The parts of a watch every translator fills in.
pub(super) struct WatchDraft {
    pub(super) name: String,
    pub(super) namespace: Option<String>,
    pub(super) image: String,
    pub(super) rules: TagRules,
    pub(super) target: Target,
    pub(super) pin: Option<String>,
    pub(super) secret: Option<String>,
    pub(super) git: Option<GitSource>,
    pub(super) interval: Option<String>,
    pub(super) digest: Option<imagewatch_crd::DigestMode>,
}

impl WatchDraft {
    pub(super) fn new(name: String, image: String, target: Target) -> Self {
        WatchDraft {
            name,
            namespace: None,
            image,
            rules: TagRules::default(),
            target,
            pin: None,
            secret: None,
            git: None,
            interval: None,
            digest: None,
        }
    }

    pub(super) fn build(self, options: &Options) -> ImageWatch {
        let mut watch = ImageWatch::new(
            &self.name,
            ImageWatchSpec {
                image: self.image,
                tags: (self.rules != TagRules::default()).then_some(self.rules),
                digest: self.digest,
                pin: self.pin,
                suspend: None,
                interval: self.interval,
                credentials: self.secret.map(|name| RegistryCredentials {
                    provider: None,
                    secret_ref: Some(SecretRef { name }),
                }),
                git: self.git.or_else(|| options.git.clone()),
                target: self.target,
                group: None,
                edit_shared_anchor: None,
                on_git_change: None,
                windows: None,
                notify: None,
                verify: None,
            },
        );
        watch.metadata.namespace = options.namespace.clone().or(self.namespace);
        watch
    }
}

/// Tag rules from the parts a translator found.
pub(super) fn rules(pattern: Option<String>, exclude: Vec<String>, order: TagOrder) -> TagRules {
    TagRules {
        pattern,
        exclude: (!exclude.is_empty()).then_some(exclude),
        order: (order != TagOrder::Semver).then_some(order),
        pick: None,
        extract: None,
        platforms: None,
    }
}

/// Sets `pick: Lowest`.
pub(super) fn lowest(mut rules: TagRules) -> TagRules {
    rules.pick = Some(TagPick::Lowest);
    rules
}

/// A glob of the kind Flux v1 and Keel write (only `*` is special) as an imagewatch pattern:
/// the same glob when it has no other special character, else an anchored regex.
pub(super) fn star_glob(glob: &str) -> String {
    if !glob.contains(['?', '[', ']', '\\']) {
        return glob.to_owned();
    }
    let parts: Vec<String> = glob.split('*').map(regex::escape).collect();
    format!("regex:^{}$", parts.join(".*"))
}

/// A regex exclusion (Flux `exclusionList`) as an exclude glob, when it is one of the simple
/// shapes that have an exact glob: optional `^`, literal text and `.*`, optional `$`.
pub(super) fn regex_as_glob(regex: &str) -> Option<String> {
    let (anchored_start, body) = match regex.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, regex),
    };
    let (anchored_end, body) = match body.strip_suffix('$') {
        Some(rest) if !rest.ends_with('\\') => (true, rest),
        _ => (false, body),
    };
    let mut glob = String::new();
    if !anchored_start {
        glob.push('*');
    }
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '.' if chars.peek() == Some(&'*') => {
                chars.next();
                glob.push('*');
            }
            '\\' => match chars.next() {
                Some(escaped @ ('.' | '-' | '_' | '+')) => glob.push(escaped),
                _ => return None,
            },
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => glob.push(c),
            _ => return None,
        }
    }
    if !anchored_end {
        glob.push('*');
    }
    while glob.contains("**") {
        glob = glob.replace("**", "*");
    }
    Some(glob)
}
