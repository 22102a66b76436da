//! From a commit to a running Pod, through Argo CD.
//!
//! After the write step of an ImageWatch commits, its reconcile hands the tracker what it
//! wrote ([`Committed`]). The tracker finds the Argo CD Applications that deploy the changed
//! file (their Git source holds it, or a Helm source names it as a `$ref` values file) among
//! those that serve the watch's namespace, and asks each to refresh: the annotation
//! `argocd.argoproj.io/refresh: normal` makes Argo CD compare with Git at once instead of
//! after its repo-server's revision cache expires (3 minutes by default). It then follows the
//! Applications through one watch on Applications of Argo CD's namespace until each has
//! synced a revision containing the commit and is Healthy, and wakes the ImageWatch so its
//! status step writes `Deployed` ([`DeployTracker::deployment`]), with an Event and
//! `imagewatch_push_to_running_seconds`.
//!
//! Argo CD is never needed: without the Application API (or the RBAC to watch it, or with
//! `--argocd-refresh=false`) nothing is tracked and no `Deployed` condition appears. Which
//! Applications an object may touch follows the same rule as a watch's Git location taken
//! from Argo CD: only Applications living in its namespace or deploying to it.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use futures::StreamExt as _;
use imagewatch_crd::ImageWatch;
use imagewatch_engine::argocd::{AppState, Application, Deployment, app_state};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams},
    core::DeserializeGuard,
    runtime::{
        WatchStreamExt as _,
        events::{Event, EventType, Recorder},
        reflector::ObjectRef,
        watcher,
    },
};

use crate::git::{GitAuth, RepoCache};
use crate::telemetry::Metrics;

/// The annotation that asks Argo CD to refresh an Application (it removes it once done).
pub const REFRESH_ANNOTATION: &str = "argocd.argoproj.io/refresh";

/// How long a commit is followed before `Deployed` turns `NotDeployed`, by default.
pub const DEFAULT_DEPLOY_TIMEOUT: Duration = Duration::from_secs(600);

/// How often waiting deployments are checked for their time limit.
const TICK: Duration = Duration::from_secs(5);

/// A commit the write step made, to follow to the running Applications.
#[derive(Clone)]
pub struct Committed {
    /// The ImageWatch.
    pub watch: ObjectRef<DeserializeGuard<ImageWatch>>,
    /// Its object reference, for Events.
    pub object: ObjectReference,
    /// Repository URL, branch and credentials of the commit.
    pub url: String,
    pub branch: String,
    pub auth: GitAuth,
    /// The commit.
    pub commit: String,
    /// The files it changed for this watch (one; a pattern watch's members, several).
    pub files: Vec<String>,
    /// When the registry push that led to it was seen, if an event started it.
    pub pushed_at: Option<Instant>,
}

/// One commit being followed.
struct Tracking {
    committed: Committed,
    committed_at: Instant,
    /// The Applications deploying the file, with the index of the source whose revision
    /// holds it.
    applications: Vec<(String, usize)>,
    state: Deployment,
}

impl Tracking {
    fn is_final(&self) -> bool {
        !matches!(self.state, Deployment::Waiting { .. })
    }
}

/// A followed commit to check: its watch, the commit, its Applications as last seen (with the
/// source holding the file) and when it was made.
type Candidate = (
    ObjectRef<DeserializeGuard<ImageWatch>>,
    Committed,
    Vec<(Application, usize)>,
    Instant,
);

/// What the tracker is configured with.
#[derive(Clone, Debug)]
pub struct DeployOptions {
    /// `--argocd-refresh`: refresh and follow Applications at all.
    pub enabled: bool,
    /// Namespace of Argo CD's Applications.
    pub argocd_namespace: String,
    /// How long a commit is followed.
    pub timeout: Duration,
}

/// Follows commits to running Applications; see the module docs.
pub struct DeployTracker {
    options: DeployOptions,
    /// The Applications of Argo CD's namespace as last seen (None until the first list).
    applications: Mutex<Option<HashMap<String, Application>>>,
    /// The commit followed per watch (its latest).
    tracking: Mutex<HashMap<ObjectRef<DeserializeGuard<ImageWatch>>, Tracking>>,
}

fn application_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"),
        "applications",
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl DeployTracker {
    /// A tracker; it follows nothing until [`run`] has listed the Applications.
    pub fn new(options: DeployOptions) -> Self {
        Self {
            options,
            applications: Mutex::new(None),
            tracking: Mutex::new(HashMap::new()),
        }
    }

    /// A tracker that never follows anything (`--argocd-refresh=false`, tests).
    pub fn disabled() -> Self {
        Self::new(DeployOptions {
            enabled: false,
            argocd_namespace: "argocd".into(),
            timeout: DEFAULT_DEPLOY_TIMEOUT,
        })
    }

    /// What is known of the deployment of the watch's last commit; a final answer is handed
    /// out once (the status keeps it).
    pub fn deployment(
        &self,
        watch: &ObjectRef<DeserializeGuard<ImageWatch>>,
    ) -> Option<Deployment> {
        let mut tracking = lock(&self.tracking);
        let state = tracking
            .get(watch)
            .map(|t| (t.state.clone(), t.is_final()))?;
        if state.1 {
            tracking.remove(watch);
        }
        Some(state.0)
    }

    /// Starts following `committed`; the Applications deploying its file are asked to
    /// refresh. Returns at once (the refresh requests run on their own).
    pub fn committed(
        self: &Arc<Self>,
        client: &Client,
        metrics: &Arc<Metrics>,
        committed: Committed,
    ) {
        if !self.options.enabled {
            return;
        }
        let namespace = committed.watch.namespace.clone().unwrap_or_default();
        let applications: Vec<(Application, usize)> = {
            let known = lock(&self.applications);
            let Some(known) = known.as_ref() else {
                // No Application API (or not listed yet): Argo CD is not followed.
                return;
            };
            let mut found: Vec<(Application, usize)> = known
                .values()
                .filter(|app| app.serves_namespace(&namespace))
                .filter_map(|app| {
                    let source = committed.files.iter().find_map(|file| {
                        app.source_deploying(&committed.url, &committed.branch, file)
                    })?;
                    // A chart source's values file: its revision is the ref source's.
                    let holder = if app.sources[source].is_git(&committed.url, &committed.branch) {
                        source
                    } else {
                        app.ref_source_of(&committed.url, &committed.branch)
                            .unwrap_or(source)
                    };
                    Some((app.clone(), holder))
                })
                .collect();
            found.sort_by_key(|(app, _)| app.key());
            found
        };
        let state = if applications.is_empty() {
            metrics
                .deployments
                .get_or_create(&crate::telemetry::DeploymentLabels {
                    outcome: "no_application".into(),
                })
                .inc();
            Deployment::NoApplication {
                commit: committed.commit.clone(),
                file: committed.files.join(", "),
            }
        } else {
            Deployment::Waiting {
                commit: committed.commit.clone(),
                waiting: applications
                    .iter()
                    .map(|(app, _)| format!("{}: refresh requested", app.key()))
                    .collect(),
            }
        };
        for (app, _) in &applications {
            tokio::spawn(refresh(
                client.clone(),
                metrics.clone(),
                app.namespace.clone(),
                app.name.clone(),
            ));
        }
        lock(&self.tracking).insert(
            committed.watch.clone(),
            Tracking {
                committed,
                committed_at: Instant::now(),
                applications: applications
                    .iter()
                    .map(|(app, source)| (app.key(), *source))
                    .collect(),
                state,
            },
        );
    }

    /// Re-evaluates every followed commit that waits on `app_key` (or all, when None):
    /// returns the watches whose deployment reached a final state.
    async fn evaluate(
        &self,
        app_key: Option<&str>,
        clones: &Arc<RepoCache>,
    ) -> Vec<(Committed, Deployment, Duration)> {
        // Snapshot what to check (no lock held across git reads).
        let candidates: Vec<Candidate> = {
            let tracking = lock(&self.tracking);
            let known = lock(&self.applications);
            let Some(known) = known.as_ref() else {
                return Vec::new();
            };
            tracking
                .iter()
                .filter(|(_, t)| !t.is_final())
                .filter(|(_, t)| app_key.is_none_or(|k| t.applications.iter().any(|(a, _)| a == k)))
                .map(|(key, t)| {
                    let apps = t
                        .applications
                        .iter()
                        .filter_map(|(k, source)| known.get(k).map(|a| (a.clone(), *source)))
                        .collect();
                    (key.clone(), t.committed.clone(), apps, t.committed_at)
                })
                .collect()
        };
        let mut done = Vec::new();
        for (key, committed, apps, committed_at) in candidates {
            let mut waiting = Vec::new();
            for (app, source) in &apps {
                let contains = match app.revision_of(*source) {
                    None => None,
                    Some(revision) if revision == committed.commit => Some(true),
                    Some(revision) => contains(clones, &committed, revision.to_owned()).await,
                };
                if let AppState::Waiting(shows) = app_state(app, *source, contains) {
                    waiting.push(format!("{}: {shows}", app.key()));
                }
            }
            let elapsed = committed_at.elapsed();
            let state = if waiting.is_empty() && !apps.is_empty() {
                Deployment::Running {
                    commit: committed.commit.clone(),
                    applications: apps.iter().map(|(a, _)| a.key()).collect(),
                    commit_to_running: elapsed.as_secs_f64(),
                    push_to_running: committed.pushed_at.map(|p| p.elapsed().as_secs_f64()),
                }
            } else if elapsed >= self.options.timeout {
                Deployment::TimedOut {
                    commit: committed.commit.clone(),
                    after_seconds: elapsed.as_secs(),
                    waiting,
                }
            } else {
                Deployment::Waiting {
                    commit: committed.commit.clone(),
                    waiting,
                }
            };
            let mut tracking = lock(&self.tracking);
            // A newer commit of the same watch replaced this one meanwhile: leave it.
            let Some(t) = tracking
                .get_mut(&key)
                .filter(|t| t.committed.commit == committed.commit)
            else {
                continue;
            };
            t.state = state.clone();
            if t.is_final() {
                done.push((committed, state, elapsed));
            }
        }
        done
    }
}

/// Whether `revision` (synced by an Application) contains the commit, read in the writer's
/// clone of the repository (fetched once when the revision is not there yet).
async fn contains(
    clones: &Arc<RepoCache>,
    committed: &Committed,
    revision: String,
) -> Option<bool> {
    let clones = clones.clone();
    let (url, branch, auth, commit) = (
        committed.url.clone(),
        committed.branch.clone(),
        committed.auth.clone(),
        committed.commit.clone(),
    );
    tokio::task::spawn_blocking(move || {
        let repo = clones.open_or_clone(&url, &auth).ok()?;
        match repo.contains(&revision, &commit) {
            Ok(Some(answer)) => Some(answer),
            Ok(None) => {
                repo.fetch(&branch, &auth).ok()?;
                repo.contains(&revision, &commit).ok().flatten()
            }
            Err(_) => None,
        }
    })
    .await
    .ok()
    .flatten()
}

/// Asks Argo CD to refresh one Application.
async fn refresh(client: Client, metrics: Arc<Metrics>, namespace: String, name: String) {
    let api: Api<DynamicObject> = Api::namespaced_with(client, &namespace, &application_resource());
    let patch = serde_json::json!({"metadata": {"annotations": {REFRESH_ANNOTATION: "normal"}}});
    let outcome = match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => "requested",
        Err(kube::Error::Api(e)) if e.code == 403 => {
            tracing::warn!(application = %format!("{namespace}/{name}"), "not allowed to ask the Argo CD Application to refresh (RBAC: patch on applications)");
            "forbidden"
        }
        Err(e) => {
            tracing::warn!(application = %format!("{namespace}/{name}"), error = %e, "cannot ask the Argo CD Application to refresh");
            "failed"
        }
    };
    metrics
        .argocd_refreshes
        .get_or_create(&crate::telemetry::RefreshLabels {
            outcome: outcome.into(),
        })
        .inc();
}

/// Follows the Applications of Argo CD's namespace and the commits handed to `tracker`, until
/// `shutdown`: a deployment that reaches a final state is recorded (Event, metrics) and its
/// watch woken so its status says so.
pub async fn run(
    tracker: Arc<DeployTracker>,
    client: Client,
    clones: Arc<RepoCache>,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    wake: tokio::sync::mpsc::Sender<ObjectRef<DeserializeGuard<ImageWatch>>>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    if !tracker.options.enabled {
        return;
    }
    let api: Api<DynamicObject> = Api::namespaced_with(
        client,
        &tracker.options.argocd_namespace,
        &application_resource(),
    );
    let namespace = tracker.options.argocd_namespace.clone();
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut listing: HashMap<String, Application> = HashMap::new();
    let mut tick = tokio::time::interval(TICK);
    let mut warned = false;
    loop {
        let changed: Option<String> = tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => None,
            event = events.next() => match event {
                None => return,
                Some(Err(e)) => {
                    if !warned {
                        tracing::info!(error = %e, "Argo CD Applications cannot be watched; commits are not followed to running Pods");
                        warned = true;
                    }
                    continue;
                }
                Some(Ok(watcher::Event::Init)) => { listing.clear(); continue; }
                Some(Ok(watcher::Event::InitApply(obj))) => {
                    let app = Application::parse(&namespace, &obj.name_any(), &obj.data);
                    listing.insert(app.key(), app);
                    continue;
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    *lock(&tracker.applications) = Some(std::mem::take(&mut listing));
                    warned = false;
                    None
                }
                Some(Ok(watcher::Event::Apply(obj))) => {
                    let app = Application::parse(&namespace, &obj.name_any(), &obj.data);
                    let key = app.key();
                    lock(&tracker.applications).get_or_insert_with(HashMap::new).insert(key.clone(), app);
                    Some(key)
                }
                Some(Ok(watcher::Event::Delete(obj))) => {
                    let key = format!("{namespace}/{}", obj.name_any());
                    if let Some(apps) = lock(&tracker.applications).as_mut() {
                        apps.remove(&key);
                    }
                    Some(key)
                }
            },
        };
        for (committed, state, _) in tracker.evaluate(changed.as_deref(), &clones).await {
            record(&recorder, &metrics, &committed, &state).await;
            let _ = wake.try_send(committed.watch.clone());
        }
    }
}

/// The Event and metrics of a deployment that reached a final state.
async fn record(recorder: &Recorder, metrics: &Metrics, committed: &Committed, state: &Deployment) {
    let condition = imagewatch_engine::argocd::deployed_condition(
        state,
        None,
        &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
    );
    let (type_, outcome) = match state {
        Deployment::Running {
            push_to_running, ..
        } => {
            if let Some(seconds) = push_to_running {
                metrics.push_to_running_seconds.observe(*seconds);
            }
            (EventType::Normal, "deployed")
        }
        Deployment::TimedOut { .. } => (EventType::Warning, "timed_out"),
        _ => return,
    };
    metrics
        .deployments
        .get_or_create(&crate::telemetry::DeploymentLabels {
            outcome: outcome.into(),
        })
        .inc();
    let event = Event {
        type_,
        reason: condition.reason.clone(),
        note: Some(condition.message.clone()),
        action: "Deploy".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &committed.object).await {
        tracing::warn!(error = %e, "cannot publish Event");
    }
}
