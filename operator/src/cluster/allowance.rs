//! The I/O edge of the allow-list (`allow.rs` decides): the ConfigMap it is read from, kept
//! current by a watch; the labels of Namespaces (for selectors); the Argo CD AppProject of the
//! Application managing an object (`gitFrom: ArgocdProject`). Every refusal counts in
//! `imagewatch_not_allowed_total{kind, check}` and becomes `ReconcileError::NotAllowed`, which
//! the reconcile reports as `Ready=False NotAllowed` with a Warning Event.

use std::{
    collections::BTreeMap,
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind},
};

use crate::cluster::allow::{AllowList, Ask, Check, GitFrom};
use crate::error::{Denial, ReconcileError};
use crate::telemetry::{Metrics, NotAllowedLabels};
use crate::ttl_cache::TtlCache;

/// Key of the ConfigMap holding the list.
pub const CONFIGMAP_KEY: &str = "allow.yaml";

/// What is known of the allow-list.
#[derive(Debug, Clone)]
enum State {
    /// No allow-list configured: everything is allowed.
    Off,
    /// Configured but not read yet: nothing is allowed.
    Pending(Denial),
    /// Configured but deleted or unparsable: nothing is allowed.
    Unusable(Denial),
    /// The list in force.
    Loaded(Arc<AllowList>),
}

/// The allow-list in force and what its checks read.
pub struct Allowance {
    state: RwLock<State>,
    labels: TtlCache<String, BTreeMap<String, String>>,
}

impl Default for Allowance {
    fn default() -> Self {
        Self {
            state: RwLock::new(State::Off),
            labels: TtlCache::new(Duration::from_secs(15)),
        }
    }
}

impl Allowance {
    /// An allowance fed from ConfigMap `name`: nothing is allowed until it is read.
    pub fn expecting(name: &str) -> Self {
        Self {
            state: RwLock::new(State::Pending(unusable(name, "has not been read yet"))),
            ..Self::default()
        }
    }

    fn state(&self) -> State {
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set(&self, state: State) {
        *self
            .state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = state;
    }

    /// Whether the configured ConfigMap has not been looked at yet.
    pub fn is_pending(&self) -> bool {
        matches!(self.state(), State::Pending(_))
    }

    /// Applies the ConfigMap's content (None: deleted).
    pub fn load(&self, name: &str, configmap: Option<&ConfigMap>) {
        let state = match configmap {
            None => State::Unusable(unusable(name, "does not exist")),
            Some(cm) => match cm.data.as_ref().and_then(|d| d.get(CONFIGMAP_KEY)) {
                None => State::Unusable(unusable(name, format!("has no key {CONFIGMAP_KEY}"))),
                Some(text) => match AllowList::parse(text) {
                    Ok(list) => State::Loaded(Arc::new(list)),
                    Err(e) => State::Unusable(unusable(name, format!("is invalid: {e}"))),
                },
            },
        };
        match &state {
            State::Loaded(list) => {
                tracing::info!(
                    configmap = name,
                    rules = list.rules.len(),
                    "allow-list loaded"
                )
            }
            State::Unusable(why) => tracing::warn!(configmap = name, "{why}; nothing is allowed"),
            State::Off | State::Pending(_) => {}
        }
        self.set(state);
    }

    /// Whether `ask` (of a `kind` object) is allowed; counts and words a refusal. `git` of
    /// `ask` is checked against the list's rules, or, with `gitFrom: ArgocdProject`, against
    /// the AppProject of `project`'s Application (see [`ProjectOf`]).
    pub async fn check(
        &self,
        client: &Client,
        metrics: &Metrics,
        kind: &str,
        ask: Ask<'_>,
        project: Option<ProjectOf<'_>>,
    ) -> Result<(), ReconcileError> {
        let list = match self.state() {
            State::Off => return Ok(()),
            State::Unusable(why) | State::Pending(why) => {
                return Err(refuse(metrics, kind, Check::Namespace, why));
            }
            State::Loaded(list) => list,
        };
        let labels = if list.rules.iter().any(|r| r.namespace_selector.is_some()) {
            self.namespace_labels(client, ask.namespace).await?
        } else {
            BTreeMap::new()
        };
        if let Err(refusal) = list.decide(&ask, &labels) {
            return Err(refuse(metrics, kind, refusal.check, refusal.denial));
        }
        if list.git_from == GitFrom::ArgocdProject
            && let Some((url, _)) = &ask.git
        {
            let project = project.ok_or_else(|| {
                refuse(
                    metrics,
                    kind,
                    Check::Project,
                    Denial::project(
                        ask.namespace,
                        "the allow-list takes Git allowances from Argo CD AppProjects, and this object names no Argo CD Application",
                    ),
                )
            })?;
            check_project(client, &project, url).await.map_err(|m| {
                refuse(
                    metrics,
                    kind,
                    Check::Project,
                    Denial::project(ask.namespace, m),
                )
            })?;
        }
        Ok(())
    }

    /// With `gitFrom: ArgocdProject`: a PromotionPolicy's target (`url` at `path`) must be
    /// deployed only to destinations of the AppProject of the Application managing the
    /// policy (see [`check_destinations`]). Nothing to check otherwise.
    pub async fn check_target(
        &self,
        client: &Client,
        metrics: &Metrics,
        project: ProjectOf<'_>,
        url: &str,
        path: &str,
    ) -> Result<(), ReconcileError> {
        let State::Loaded(list) = self.state() else {
            return Ok(());
        };
        if list.git_from != GitFrom::ArgocdProject {
            return Ok(());
        }
        check_destinations(client, &project, url, path)
            .await
            .map_err(|m| {
                let denial = Denial::project(project.namespace, m);
                refuse(metrics, "PromotionPolicy", Check::Project, denial)
            })
    }

    async fn namespace_labels(
        &self,
        client: &Client,
        namespace: &str,
    ) -> Result<BTreeMap<String, String>, ReconcileError> {
        let now = Instant::now();
        if let Some(labels) = self.labels.get(&namespace.to_string(), now) {
            return Ok(labels);
        }
        let api: Api<Namespace> = Api::all(client.clone());
        let labels = api
            .get_opt(namespace)
            .await?
            .and_then(|n| n.metadata.labels)
            .unwrap_or_default();
        self.labels.put(namespace.to_string(), now, labels.clone());
        Ok(labels)
    }
}

/// The allow-list ConfigMap `name` cannot be used: `problem`.
fn unusable(name: &str, problem: impl Into<String>) -> Denial {
    Denial::ListUnusable {
        configmap: name.to_string(),
        problem: problem.into(),
    }
}

fn refuse(metrics: &Metrics, kind: &str, check: Check, denial: Denial) -> ReconcileError {
    metrics
        .not_allowed
        .get_or_create(&NotAllowedLabels {
            kind: kind.to_string(),
            check: check.label().to_string(),
        })
        .inc();
    ReconcileError::NotAllowed(denial)
}

/// Where to find the AppProject of the object's managing Application.
pub struct ProjectOf<'a> {
    /// Argo CD's namespace (AppProjects live there).
    pub argocd_namespace: &'a str,
    /// The object's namespace.
    pub namespace: &'a str,
    /// The object's annotations and labels (tracking annotation / instance label).
    pub annotations: &'a BTreeMap<String, String>,
    /// Labels.
    pub labels: &'a BTreeMap<String, String>,
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", kind),
        plural,
    )
}

/// The AppProject (name, object) of the Application that manages the object, and that
/// Application as `namespace/name`.
async fn managing_project(
    client: &Client,
    of: &ProjectOf<'_>,
) -> Result<(String, serde_json::Value, String), String> {
    let key = crate::cluster::argocd::managing_application(of.annotations, of.labels).ok_or_else(|| {
        "the allow-list takes Git allowances from Argo CD AppProjects, and no Argo CD Application manages this object (no tracking annotation or app.kubernetes.io/instance label)".to_string()
    })?;
    let app_ns = key
        .namespace
        .clone()
        .unwrap_or_else(|| of.argocd_namespace.to_string());
    let apps: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &app_ns,
        &resource("Application", "applications"),
    );
    let app = apps
        .get_opt(&key.name)
        .await
        .map_err(|e| format!("cannot read Argo CD Application {app_ns}/{}: {e}", key.name))?
        .filter(|app| crate::cluster::argocd::deploys_to(&app_ns, &app.data, of.namespace))
        .ok_or_else(|| {
            format!(
                "the Argo CD Application {app_ns}/{} does not exist or does not deploy to namespace {}, so no AppProject allows this object's Git repository",
                key.name, of.namespace
            )
        })?;
    let project_name = app
        .data
        .pointer("/spec/project")
        .and_then(|v| v.as_str())
        .filter(|p| !p.is_empty())
        .unwrap_or("default")
        .to_string();
    let projects: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        of.argocd_namespace,
        &resource("AppProject", "appprojects"),
    );
    let project = projects
        .get_opt(&project_name)
        .await
        .map_err(|e| format!("cannot read Argo CD AppProject {project_name}: {e}"))?
        .ok_or_else(|| {
            format!(
                "Argo CD AppProject {project_name} (of Application {app_ns}/{}) does not exist",
                key.name
            )
        })?;
    Ok((project_name, project.data, format!("{app_ns}/{}", key.name)))
}

/// The managing Application's AppProject must allow `url` in its `sourceRepos`.
async fn check_project(client: &Client, of: &ProjectOf<'_>, url: &str) -> Result<(), String> {
    let (project_name, project, app) = managing_project(client, of).await?;
    if crate::cluster::allow::project_allows(&project, url) {
        Ok(())
    } else {
        Err(format!(
            "Git repository {url} is not in the sourceRepos of Argo CD AppProject {project_name} (of Application {app})"
        ))
    }
}

/// Every Application in Argo CD's namespace deploying what `url` holds at `path` must deploy
/// to a destination of the managing Application's AppProject, and at least one must exist.
async fn check_destinations(
    client: &Client,
    of: &ProjectOf<'_>,
    url: &str,
    path: &str,
) -> Result<(), String> {
    let (project_name, project, app) = managing_project(client, of).await?;
    let apps: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        of.argocd_namespace,
        &resource("Application", "applications"),
    );
    let listed = apps
        .list(&kube::api::ListParams::default())
        .await
        .map_err(|e| {
            format!(
                "cannot list Argo CD Applications in {}: {e}",
                of.argocd_namespace
            )
        })?;
    let deploying: Vec<&DynamicObject> = listed
        .items
        .iter()
        .filter(|a| crate::cluster::allow::application_deploys_path(&a.data, url, path))
        .collect();
    if deploying.is_empty() {
        return Err(format!(
            "no Argo CD Application deploys {path} of {url}, so the destinations of AppProject {project_name} (of Application {app}) cannot admit it as a target"
        ));
    }
    for target in deploying {
        let destination = target
            .data
            .pointer("/spec/destination")
            .cloned()
            .unwrap_or_default();
        if !crate::cluster::allow::project_allows_destination(&project, &destination) {
            return Err(format!(
                "{path} of {url} is deployed by an Application whose destination is not in the destinations of Argo CD AppProject {project_name} (of Application {app})"
            ));
        }
    }
    Ok(())
}

/// Keeps `allowance` current with ConfigMap `name` in `namespace`; calls `changed` after each
/// change (to look at every object again). Runs until the watch stream ends.
pub async fn follow(
    client: Client,
    namespace: String,
    name: String,
    allowance: Arc<Allowance>,
    changed: impl Fn() + Send,
) {
    let key = name.clone();
    crate::cluster::follow_configmap(client, &namespace, &name, "allow-list", move |cm| {
        allowance.load(&key, cm);
        changed();
    })
    .await;
}
