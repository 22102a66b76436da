//! Validate step, tenancy: the admin's allow-list says which Git repositories (and paths in
//! them), which registries, and whether the operator's own cloud identity (`provider: aws`)
//! the objects of a namespace may use. An object outside its allowance is `Ready=False`
//! `NotAllowed` naming the rule, and nothing is read from or written to Git or the registry.
//!
//! The list is operator configuration (the chart's `allowList` values → a ConfigMap in the
//! operator's namespace, re-read when it changes; `--allow-list-configmap`). Without one,
//! everything is allowed. With one, a namespace no rule matches may use nothing.
//!
//! ```yaml
//! gitFrom: Rules            # Rules (default) | ArgocdProject
//! rules:
//!   - name: team-a
//!     namespaces: [team-a]                          # names, and/or
//!     namespaceSelector: {matchLabels: {tenant: a}} # labels ({} matches every namespace)
//!     git:
//!       - urlPrefix: https://git.example.com/team-a/
//!         paths: [apps/team-a]                      # omitted: any path
//!     registries: [registry.example.com/team-a]     # repository prefixes; "*": any
//!     aws: false                                    # provider aws / ECR through the operator
//! ```
//!
//! `gitFrom: ArgocdProject` takes the Git allowance from the Argo CD AppProject of the
//! Application that manages the object instead (its `sourceRepos`, with `*` globs and `!`
//! exclusions); registries and `aws` still come from the rules.
//!
//! Everything here is pure: [`AllowList::decide`] and [`project_allows`] are tested on
//! fixtures; reading the ConfigMap, Namespaces and AppProjects happens in the reconciles.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::Denial;

/// Where Git allowances come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum GitFrom {
    /// The `git` entries of the rules.
    #[default]
    Rules,
    /// The AppProject of the Argo CD Application managing the object.
    ArgocdProject,
}

/// The parsed allow-list.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AllowList {
    /// Where Git allowances come from.
    #[serde(default)]
    pub git_from: GitFrom,
    /// The rules; a namespace gets the union of every rule matching it.
    #[serde(default)]
    pub rules: Vec<AllowRule>,
}

/// One rule: which namespaces, and what they may use.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AllowRule {
    /// Named in messages and metrics.
    pub name: String,
    /// Namespaces by name.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Namespaces by label (`{}` matches every namespace).
    #[serde(default)]
    pub namespace_selector: Option<NamespaceSelector>,
    /// Git repositories (URL prefixes) and paths in them.
    #[serde(default)]
    pub git: Vec<GitAllowance>,
    /// Image repository prefixes (`host`, `host/team-a`, …; `*`: any).
    #[serde(default)]
    pub registries: Vec<String>,
    /// Whether `provider: aws` (the operator's own AWS identity) may be used.
    #[serde(default)]
    pub aws: bool,
}

/// A label selector over Namespaces (`matchLabels` only).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceSelector {
    /// Labels a namespace must all carry.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// Git repositories under one URL prefix, and the paths in them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitAllowance {
    /// The repository URL must start with this.
    pub url_prefix: String,
    /// Directories (or files) of the repository that may be written; empty: any.
    #[serde(default)]
    pub paths: Vec<String>,
}

/// What an object asks to use.
#[derive(Debug, Clone, Default)]
pub struct Ask<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// The Git repository and the paths written in it (checked only with `gitFrom: Rules`).
    pub git: Option<(&'a str, Vec<&'a str>)>,
    /// Image repositories read (`host/path`; a pattern's part before its first `*`).
    pub images: Vec<&'a str>,
    /// Whether it reads through the operator's AWS identity.
    pub aws: bool,
}

/// Which check refused (the `check` label of `imagewatch_not_allowed_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// No rule matches the namespace.
    Namespace,
    /// The Git URL.
    GitUrl,
    /// A path in the repository.
    Path,
    /// An image repository.
    Registry,
    /// The operator's AWS identity.
    Aws,
    /// The Argo CD AppProject's `sourceRepos`.
    Project,
}

impl Check {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Check::Namespace => "namespace",
            Check::GitUrl => "git_url",
            Check::Path => "path",
            Check::Registry => "registry",
            Check::Aws => "aws",
            Check::Project => "argocd_project",
        }
    }
}

/// A refusal: which check, and why (naming the rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The check that refused.
    pub check: Check,
    /// What to tell the object's owner.
    pub denial: Denial,
}

impl AllowList {
    /// Parses the ConfigMap's `allow.yaml` (pure).
    pub fn parse(text: &str) -> Result<Self, String> {
        let list: AllowList = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
        for rule in &list.rules {
            if rule.name.trim().is_empty() {
                return Err("every rule needs a name".into());
            }
        }
        Ok(list)
    }

    /// The rules matching `namespace` (pure).
    fn matching<'s>(
        &'s self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Vec<&'s AllowRule> {
        self.rules
            .iter()
            .filter(|r| {
                r.namespaces.iter().any(|n| n == namespace)
                    || r.namespace_selector.as_ref().is_some_and(|s| {
                        s.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
                    })
            })
            .collect()
    }

    /// Whether `ask` is within the allowance of its namespace, whose labels are `labels`
    /// (pure).
    pub fn decide(&self, ask: &Ask<'_>, labels: &BTreeMap<String, String>) -> Result<(), Refusal> {
        let rules = self.matching(ask.namespace, labels);
        let ns = ask.namespace;
        if rules.is_empty() {
            return Err(Refusal {
                check: Check::Namespace,
                denial: Denial::NoRule {
                    namespace: ns.to_string(),
                },
            });
        }
        let names: Vec<String> = rules.iter().map(|r| r.name.clone()).collect();
        let by = |what: String, check: Check| Refusal {
            check,
            denial: Denial::NotGranted {
                what,
                namespace: ns.to_string(),
                rules: names.clone(),
            },
        };
        if ask.aws && !rules.iter().any(|r| r.aws) {
            return Err(by(
                "reading through the operator's AWS identity (provider aws)".into(),
                Check::Aws,
            ));
        }
        for image in &ask.images {
            let allowed = rules.iter().any(|r| {
                r.registries
                    .iter()
                    .any(|p| p == "*" || under_prefix(image, p))
            });
            if !allowed {
                return Err(by(format!("image {image}"), Check::Registry));
            }
        }
        if self.git_from == GitFrom::Rules
            && let Some((url, paths)) = &ask.git
        {
            let grants: Vec<&GitAllowance> = rules
                .iter()
                .flat_map(|r| &r.git)
                .filter(|g| !g.url_prefix.is_empty() && url.starts_with(g.url_prefix.as_str()))
                .collect();
            if grants.is_empty() {
                return Err(by(format!("Git repository {url}"), Check::GitUrl));
            }
            for path in paths {
                let allowed = grants
                    .iter()
                    .any(|g| g.paths.is_empty() || g.paths.iter().any(|p| under_prefix(path, p)));
                if !allowed {
                    return Err(by(format!("path {path:?} of {url}"), Check::Path));
                }
            }
        }
        Ok(())
    }
}

/// Whether `value` is `prefix` or lies under it, segment-wise (`apps/a` covers `apps/a` and
/// `apps/a/x`, not `apps/ab`); `..` segments are never covered (pure).
pub fn under_prefix(value: &str, prefix: &str) -> bool {
    let value = value.trim_start_matches('/');
    let prefix = prefix.trim_start_matches('/').trim_end_matches('/');
    if value.split('/').any(|s| s == "..") {
        return false;
    }
    prefix.is_empty()
        || value == prefix
        || value
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Whether an Argo CD AppProject (its JSON) allows the repository `url` through its
/// `spec.sourceRepos`: some pattern matches and no `!` pattern does (pure).
pub fn project_allows(project: &serde_json::Value, url: &str) -> bool {
    let patterns: Vec<&str> = project
        .pointer("/spec/sourceRepos")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .collect();
    let denied = patterns
        .iter()
        .filter_map(|p| p.strip_prefix('!'))
        .any(|p| glob(p, url));
    !denied
        && patterns
            .iter()
            .filter(|p| !p.starts_with('!'))
            .any(|p| glob(p, url))
}

/// Whether an AppProject's `destinations` admit an Application's `spec.destination`: an entry
/// whose `namespace` glob matches and whose `server` (or `name`) glob matches; entries
/// starting with `!` deny.
pub fn project_allows_destination(
    project: &serde_json::Value,
    destination: &serde_json::Value,
) -> bool {
    let field = |v: &serde_json::Value, key: &str| {
        v.get(key)
            .and_then(|x| x.as_str())
            .unwrap_or("")
            .to_string()
    };
    let (server, name, namespace) = (
        field(destination, "server"),
        field(destination, "name"),
        field(destination, "namespace"),
    );
    let entries: Vec<&serde_json::Value> = project
        .pointer("/spec/destinations")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .collect();
    let matches = |entry: &serde_json::Value, negated: bool| {
        let strip = |text: String| match text.strip_prefix('!') {
            Some(rest) if negated => Some(rest.to_string()),
            None if !negated => Some(text),
            _ => None,
        };
        let (Some(ns), e_server, e_name) = (
            strip(field(entry, "namespace")),
            field(entry, "server"),
            field(entry, "name"),
        ) else {
            return false;
        };
        let e_server = e_server.trim_start_matches('!').to_string();
        let e_name = e_name.trim_start_matches('!').to_string();
        glob(&ns, &namespace)
            && ((!e_server.is_empty() && glob(&e_server, &server))
                || (!e_name.is_empty() && glob(&e_name, &name)))
    };
    !entries.iter().any(|e| matches(e, true)) && entries.iter().any(|e| matches(e, false))
}

/// Whether an Application deploys from `url` at a path that `path` overlaps (one holds the
/// other, by whole segments): writing under `path` changes what it deploys.
pub fn application_deploys_path(app: &serde_json::Value, url: &str, path: &str) -> bool {
    let normal = |u: &str| {
        u.trim_end_matches('/')
            .trim_end_matches(".git")
            .to_ascii_lowercase()
    };
    let segments = |p: &str| -> Vec<String> {
        p.split('/')
            .filter(|s| !s.is_empty() && *s != ".")
            .map(str::to_string)
            .collect()
    };
    let target = segments(path);
    let spec = app.get("spec");
    let sources = spec.and_then(|s| s.get("source")).into_iter().chain(
        spec.and_then(|s| s.get("sources"))
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten(),
    );
    sources.into_iter().any(|source| {
        let repo = source.get("repoURL").and_then(|v| v.as_str()).unwrap_or("");
        let app_path = segments(source.get("path").and_then(|v| v.as_str()).unwrap_or(""));
        let n = app_path.len().min(target.len());
        normal(repo) == normal(url) && app_path[..n] == target[..n]
    })
}

/// `*` matches any run of characters (including `/`, as in Argo CD's sourceRepos), `?` one.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_path_is_allowed_where_the_project_may_deploy_its_applications() {
        let project = serde_json::json!({"spec": {"destinations": [
            {"server": "https://kubernetes.default.svc", "namespace": "team-a-*"},
            {"name": "in-cluster", "namespace": "team-a"},
            {"server": "*", "namespace": "!team-a-secret"},
        ]}});
        let dest = |server: &str, name: &str, ns: &str| serde_json::json!({"server": server, "name": name, "namespace": ns});
        let k8s = "https://kubernetes.default.svc";
        assert!(project_allows_destination(
            &project,
            &dest(k8s, "", "team-a-prd")
        ));
        assert!(project_allows_destination(
            &project,
            &dest("", "in-cluster", "team-a")
        ));
        assert!(!project_allows_destination(
            &project,
            &dest(k8s, "", "team-b")
        ));
        assert!(!project_allows_destination(
            &project,
            &dest(k8s, "", "team-a-secret")
        ));
        assert!(!project_allows_destination(
            &serde_json::json!({"spec": {}}),
            &dest(k8s, "", "team-a")
        ));

        let app = serde_json::json!({"spec": {"source": {
            "repoURL": "https://git.example.com/org/manifests.git", "path": "overlays/production"
        }}});
        let url = "https://git.example.com/org/manifests";
        assert!(application_deploys_path(&app, url, "overlays/production"));
        assert!(application_deploys_path(
            &app,
            url,
            "overlays/production/extra"
        ));
        assert!(application_deploys_path(&app, url, "overlays"));
        assert!(!application_deploys_path(&app, url, "overlays/prod"));
        assert!(!application_deploys_path(
            &app,
            "https://git.example.com/org/other",
            "overlays"
        ));
        let multi = serde_json::json!({"spec": {"sources": [
            {"repoURL": "https://charts.example.com", "chart": "x"},
            {"repoURL": url, "path": "apps/b"},
        ]}});
        assert!(application_deploys_path(&multi, url, "apps/b"));
        assert!(!application_deploys_path(&multi, url, "apps/a"));
    }

    const LIST: &str = r#"
rules:
  - name: team-a
    namespaces: [team-a]
    git:
      - urlPrefix: https://git.example.com/team-a/
        paths: [apps/a]
    registries: [registry.example.com/team-a]
  - name: platform
    namespaceSelector: {matchLabels: {tier: platform}}
    git:
      - urlPrefix: https://git.example.com/
    registries: ["*"]
    aws: true
"#;

    fn ask(ns: &str) -> Ask<'_> {
        Ask {
            namespace: ns,
            git: Some((
                "https://git.example.com/team-a/manifests.git",
                vec!["apps/a/overlays/stg"],
            )),
            images: vec!["registry.example.com/team-a/api"],
            aws: false,
        }
    }

    #[test]
    fn a_namespace_gets_what_its_rules_allow_and_nothing_else() {
        let list = AllowList::parse(LIST).unwrap();
        let none = BTreeMap::new();
        assert_eq!(list.decide(&ask("team-a"), &none), Ok(()));

        let mut other_repo = ask("team-a");
        other_repo.git = Some((
            "https://git.example.com/team-b/manifests.git",
            vec!["apps/a"],
        ));
        let refused = list.decide(&other_repo, &none).unwrap_err();
        assert_eq!(refused.check, Check::GitUrl);
        assert!(
            refused.denial.to_string().contains("\"team-a\""),
            "{}",
            refused.denial
        );
        assert!(
            refused.denial.to_string().contains("team-b/manifests.git"),
            "{}",
            refused.denial
        );

        let mut other_path = ask("team-a");
        other_path.git = Some(("https://git.example.com/team-a/m.git", vec!["apps/ab"]));
        assert_eq!(
            list.decide(&other_path, &none).unwrap_err().check,
            Check::Path
        );
        other_path.git = Some(("https://git.example.com/team-a/m.git", vec!["apps/a/../b"]));
        assert_eq!(
            list.decide(&other_path, &none).unwrap_err().check,
            Check::Path
        );

        let mut other_image = ask("team-a");
        other_image.images = vec!["registry.example.com/team-b/api"];
        assert_eq!(
            list.decide(&other_image, &none).unwrap_err().check,
            Check::Registry
        );

        let mut aws = ask("team-a");
        aws.aws = true;
        assert_eq!(list.decide(&aws, &none).unwrap_err().check, Check::Aws);

        let refused = list.decide(&ask("team-b"), &none).unwrap_err();
        assert_eq!(refused.check, Check::Namespace);
        assert!(
            refused.denial.to_string().contains("team-b"),
            "{}",
            refused.denial
        );
    }

    #[test]
    fn label_selectors_match_namespaces_and_rules_add_up() {
        let list = AllowList::parse(LIST).unwrap();
        let labels: BTreeMap<String, String> = [("tier".into(), "platform".into())].into();
        let mut a = ask("infra");
        a.aws = true;
        a.images = vec!["123456789012.dkr.ecr.us-east-1.amazonaws.com/x"];
        a.git = Some(("https://git.example.com/infra/m.git", vec!["anything"]));
        assert_eq!(list.decide(&a, &labels), Ok(()));
        assert_eq!(
            list.decide(&a, &BTreeMap::new()).unwrap_err().check,
            Check::Namespace
        );
        let everyone = AllowList::parse(
            "rules: [{name: all, namespaceSelector: {}, registries: ['*'], git: [{urlPrefix: 'https://'}]}]",
        )
        .unwrap();
        assert_eq!(everyone.decide(&ask("anyone"), &BTreeMap::new()), Ok(()));
    }

    #[test]
    fn the_argocd_project_mode_leaves_git_to_the_project() {
        let list = AllowList::parse(&format!("gitFrom: ArgocdProject\n{LIST}")).unwrap();
        let none = BTreeMap::new();
        let mut a = ask("team-a");
        a.git = Some(("https://elsewhere.example.com/x.git", vec!["y"]));
        assert_eq!(list.decide(&a, &none), Ok(()));
        let project = serde_json::json!({"spec": {"sourceRepos": [
            "https://git.example.com/team-a/*", "!https://git.example.com/team-a/secret*"
        ]}});
        assert!(project_allows(
            &project,
            "https://git.example.com/team-a/m.git"
        ));
        assert!(!project_allows(
            &project,
            "https://git.example.com/team-b/m.git"
        ));
        assert!(!project_allows(
            &project,
            "https://git.example.com/team-a/secret.git"
        ));
        assert!(project_allows(
            &serde_json::json!({"spec": {"sourceRepos": ["*"]}}),
            "x"
        ));
        assert!(!project_allows(&serde_json::json!({"spec": {}}), "x"));
    }

    #[test]
    fn bad_lists_are_refused() {
        assert!(AllowList::parse("rules: [{name: ''}]").is_err());
        assert!(AllowList::parse("rules: [{name: a, registry: [x]}]").is_err());
        assert!(AllowList::parse("gitFrom: Nope").is_err());
        assert_eq!(AllowList::parse("{}").unwrap(), AllowList::default());
    }

    #[test]
    fn prefixes_are_segment_wise() {
        assert!(under_prefix("apps/a/x", "apps/a/"));
        assert!(under_prefix("apps/a", "apps/a"));
        assert!(!under_prefix("apps/ab", "apps/a"));
        assert!(under_prefix(
            "registry.example.com/team-a/api",
            "registry.example.com"
        ));
        assert!(!under_prefix(
            "registry.example.com.evil/x",
            "registry.example.com"
        ));
        assert!(under_prefix("x", ""));
    }
}
