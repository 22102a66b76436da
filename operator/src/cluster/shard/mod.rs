//! High availability: replicas split the work by Git repository, one `coordination.k8s.io`
//! Lease per shard.
//!
//! A watch (or promotion policy) belongs to the shard of its Git repository
//! (`shard_of(repo_key(url))`), so every write to one repository goes through the replica that
//! holds that shard's Lease: one writer per repository at a time. Each replica also renews a
//! member Lease; a replica takes at most its fair share of shards (`ceil(shards / members)`),
//! releases what exceeds it (after the reconciles running in that shard have finished), and
//! takes over shards whose holder stopped renewing for a whole lease duration.
//!
//! Expiry is judged by local observation (a holder's lease record unchanged for the lease
//! duration), never by comparing clocks, and a replica stops starting work in a shard once its
//! own last successful renew is older than the renew deadline (two thirds of the duration): the
//! old holder has stopped before anyone else may take the shard.
//!
//! Registry events reach whichever replica the Service or SQS delivered them to; that replica
//! forwards them to its peers (their address is on their member Lease) so the owner of the
//! shard rescans the repository; that endpoint is in `peer`, this file holds the Leases.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::{api::coordination::v1::Lease, apimachinery::pkg::apis::meta::v1::MicroTime};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, ObjectMeta, PostParams},
};
use tokio::sync::{OwnedRwLockReadGuard, RwLock, mpsc};
use tokio_util::sync::CancellationToken;

use crate::telemetry::{Metrics, ShardLabels, ShardTransitionLabels};

mod peer;

pub use peer::{PEER_EVENTS_PATH, PeerEvent, PeerEvents, peer_router};

/// Label on every Lease of one installation (value: the lease prefix).
pub const LEASE_SET_LABEL: &str = "imagewatch.dev/lease-set";
/// Label telling shard Leases from member Leases.
pub const LEASE_ROLE_LABEL: &str = "imagewatch.dev/lease-role";
/// Annotation on a member Lease: the URL its replica accepts forwarded events on.
pub const PEER_URL_ANNOTATION: &str = "imagewatch.dev/peer-url";

/// The Git repository a URL names, spelled one way: `host[:port]/path` in lower case, without
/// scheme, user, `.git` or slashes at the ends. `https://github.com/Org/Repo.git`,
/// `ssh://git@github.com/org/repo` and `git@github.com:org/repo.git` are one repository.
pub fn repo_key(url: &str) -> String {
    let url = url.trim();
    let (host, path) = if let Some((_, rest)) = url.split_once("://") {
        let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
        rest.split_once('/').unwrap_or((rest, ""))
    } else if let Some((left, path)) = url.split_once(':') {
        // scp-like `user@host:path`
        (left.rsplit_once('@').map_or(left, |(_, h)| h), path)
    } else {
        ("", url)
    };
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    format!("{}/{}", host, path.trim_matches('/')).to_ascii_lowercase()
}

/// The shard of a key (FNV-1a, stable across processes and versions).
pub fn shard_of(key: &str, shards: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % u64::from(shards.max(1))) as u32
}

/// The most shards one replica should hold when `members` replicas are alive.
pub fn fair_share(shards: u32, members: usize) -> u32 {
    let members = u32::try_from(members.max(1)).unwrap_or(u32::MAX);
    shards.div_ceil(members)
}

/// What one replica sees of one shard's Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardState {
    /// No Lease yet.
    Absent,
    /// A Lease without a holder (released).
    Free,
    /// Held by this replica.
    Mine,
    /// Held by another replica that renews it.
    Other,
    /// Held by another replica that stopped renewing (unchanged for a lease duration).
    Expired,
}

/// One round's decisions.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RoundPlan {
    /// Shards to renew.
    pub renew: Vec<u32>,
    /// Shards to give up (more than the fair share).
    pub release: Vec<u32>,
    /// Shards to take (absent, free or expired), in order of preference.
    pub acquire: Vec<u32>,
}

/// Decides a round: renew what is mine, release above the fair share, acquire up to it.
/// `offset` spreads replicas over different shards when they start together. Pure.
pub fn plan_round(states: &[ShardState], members: usize, offset: u32) -> RoundPlan {
    let n = u32::try_from(states.len()).unwrap_or(u32::MAX);
    let fair = fair_share(n, members) as usize;
    let mine: Vec<u32> = (0..n)
        .filter(|i| states[*i as usize] == ShardState::Mine)
        .collect();
    let mut plan = RoundPlan::default();
    if mine.len() > fair {
        // Keep the first `fair` (by preference order from the offset), release the rest.
        let mut ordered = mine.clone();
        ordered.sort_by_key(|i| (i + n - offset % n.max(1)) % n.max(1));
        plan.renew = ordered[..fair].to_vec();
        plan.release = ordered[fair..].to_vec();
        plan.renew.sort_unstable();
        plan.release.sort_unstable();
        return plan;
    }
    plan.renew = mine.clone();
    let wanted = fair - mine.len();
    plan.acquire = (0..n)
        .map(|k| (k + offset) % n.max(1))
        .filter(|i| {
            matches!(
                states[*i as usize],
                ShardState::Absent | ShardState::Free | ShardState::Expired
            )
        })
        .take(wanted)
        .collect();
    plan
}

/// Settings of the shard manager.
#[derive(Debug, Clone)]
pub struct ShardOptions {
    /// Number of shards (≥ 1).
    pub shards: u32,
    /// Lease duration: a silent holder's shards are taken over after this long.
    pub lease_duration: Duration,
    /// Namespace of the Leases (the operator's own).
    pub namespace: String,
    /// This replica's identity (the Pod name).
    pub identity: String,
    /// Prefix of the Lease names (the release's full name).
    pub prefix: String,
    /// URL peers forward registry events to (`http://<pod ip>:<metrics port>`); None: this
    /// replica receives no forwarded events.
    pub peer_url: Option<String>,
}

impl ShardOptions {
    /// Time between rounds.
    pub fn renew_interval(&self) -> Duration {
        (self.lease_duration / 5).max(Duration::from_millis(200))
    }

    /// How long after a successful renew this replica still starts work in a shard.
    pub fn renew_deadline(&self) -> Duration {
        self.lease_duration * 2 / 3
    }

    fn shard_lease(&self, i: u32) -> String {
        format!("{}-shard-{i}", self.prefix)
    }

    fn member_lease(&self) -> String {
        format!("{}-member-{}", self.prefix, dns_label(&self.identity))
    }
}

/// `s` as a DNS-1123 label fragment.
fn dns_label(s: &str) -> String {
    let mut out: String = s
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    out.truncate(200);
    out.trim_matches('-').to_string()
}

/// A reconcile's hold on its shard: while any guard lives, the shard is not released.
pub type ShardGuard = OwnedRwLockReadGuard<()>;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Observed {
    holder: String,
    renew: Option<String>,
    since: Instant,
}

/// Holds and renews this replica's shards.
pub struct ShardManager {
    opts: ShardOptions,
    api: Api<Lease>,
    client: Client,
    held: std::sync::Mutex<BTreeMap<u32, Instant>>,
    locks: Vec<Arc<RwLock<()>>>,
    peers: std::sync::Mutex<Vec<String>>,
    acquired: mpsc::UnboundedSender<u32>,
    metrics: Arc<Metrics>,
    peer_token: std::sync::Mutex<Option<String>>,
    http: reqwest::Client,
    /// Forwards in flight to the peers, at most [`MAX_FORWARDS_IN_FLIGHT`].
    forwards: Arc<tokio::sync::Semaphore>,
}

/// Forwarded events in flight to the peers at any moment. Beyond it, an event is not
/// forwarded (counted `dropped`): its peer rescans at the polling interval, as for any
/// forward that fails. A burst of events to an unreachable peer (5 s timeout each) then holds
/// a bounded number of tasks and requests.
pub const MAX_FORWARDS_IN_FLIGHT: usize = 256;

impl std::fmt::Debug for ShardManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardManager")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl ShardManager {
    /// A manager; `acquired` receives each shard this replica takes.
    pub fn new(
        client: Client,
        opts: ShardOptions,
        metrics: Arc<Metrics>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<u32>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let shards = opts.shards.max(1);
        let manager = Arc::new(Self {
            api: Api::namespaced(client.clone(), &opts.namespace),
            client,
            locks: (0..shards).map(|_| Arc::new(RwLock::new(()))).collect(),
            opts: ShardOptions { shards, ..opts },
            held: std::sync::Mutex::default(),
            peers: std::sync::Mutex::default(),
            acquired: tx,
            metrics,
            peer_token: std::sync::Mutex::default(),
            forwards: Arc::new(tokio::sync::Semaphore::new(MAX_FORWARDS_IN_FLIGHT)),
            http: crate::http::client("peer", Duration::from_secs(5)).unwrap_or_default(),
        });
        (manager, rx)
    }

    /// The options.
    pub fn options(&self) -> &ShardOptions {
        &self.opts
    }

    /// The shard of a Git repository URL (or any other key).
    pub fn shard_for(&self, key: &str) -> u32 {
        shard_of(&repo_key(key), self.opts.shards)
    }

    /// Whether this replica may work in `shard` now.
    pub fn holds(&self, shard: u32) -> bool {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.get(&shard)
            .is_some_and(|until| Instant::now() < *until)
    }

    /// A hold on the shard of `key` when this replica owns it; None: another replica's work.
    pub fn enter(&self, key: &str) -> Option<ShardGuard> {
        let shard = self.shard_for(key);
        if !self.holds(shard) {
            return None;
        }
        self.locks[shard as usize].clone().try_read_owned().ok()
    }

    /// Holds, renews, releases and takes shards until `shutdown`; then releases every shard.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut observed: HashMap<String, Observed> = HashMap::new();
        let offset = shard_of(&self.opts.identity, self.opts.shards);
        loop {
            if let Err(e) = self.round(&mut observed, offset).await {
                tracing::warn!(error = %e, "shard lease round failed");
            }
            self.expire_local();
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(self.opts.renew_interval()) => {}
            }
        }
        self.release_all().await;
    }

    fn expire_local(&self) {
        let now = Instant::now();
        let lost: Vec<u32> = {
            let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            let lost = held
                .iter()
                .filter(|(_, until)| **until <= now)
                .map(|(i, _)| *i)
                .collect::<Vec<_>>();
            for i in &lost {
                held.remove(i);
            }
            lost
        };
        for shard in lost {
            tracing::warn!(
                shard,
                "shard lease not renewed within the deadline; stopped working in it"
            );
            self.transition(shard, "lost");
        }
        self.export();
    }

    fn export(&self) {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner()).clone();
        self.metrics.shards_held.set(held.len() as i64);
        for i in 0..self.opts.shards {
            self.metrics
                .shard_owned
                .get_or_create(&ShardLabels {
                    shard: i.to_string(),
                })
                .set(i64::from(held.contains_key(&i)));
        }
    }

    fn transition(&self, shard: u32, what: &str) {
        self.metrics
            .shard_transitions
            .get_or_create(&ShardTransitionLabels {
                transition: what.to_string(),
            })
            .inc();
        tracing::info!(shard, transition = what, identity = %self.opts.identity, "shard {what}");
    }

    fn lease_meta(&self, name: &str, role: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(self.opts.namespace.clone()),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/managed-by".into(), "imagewatch".into()),
                (LEASE_SET_LABEL.into(), self.opts.prefix.clone()),
                (LEASE_ROLE_LABEL.into(), role.into()),
            ])),
            ..Default::default()
        }
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.opts.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    async fn renew_member(&self, current: Option<&Lease>) -> Result<(), kube::Error> {
        let name = self.opts.member_lease();
        let now = MicroTime(jiff::Timestamp::now());
        let mut lease = current.cloned().unwrap_or_else(|| Lease {
            metadata: self.lease_meta(&name, "member"),
            spec: None,
        });
        let mut annotations = lease.metadata.annotations.take().unwrap_or_default();
        match &self.opts.peer_url {
            Some(url) => {
                annotations.insert(PEER_URL_ANNOTATION.into(), url.clone());
            }
            None => {
                annotations.remove(PEER_URL_ANNOTATION);
            }
        }
        lease.metadata.annotations = Some(annotations);
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some(self.opts.identity.clone());
        spec.lease_duration_seconds = Some(self.duration_secs());
        spec.renew_time = Some(now.clone());
        if spec.acquire_time.is_none() {
            spec.acquire_time = Some(now);
        }
        if current.is_some() {
            self.api
                .replace(&name, &PostParams::default(), &lease)
                .await?;
        } else {
            match self.api.create(&PostParams::default(), &lease).await {
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                other => {
                    other?;
                }
            }
        }
        Ok(())
    }

    async fn round(
        &self,
        observed: &mut HashMap<String, Observed>,
        offset: u32,
    ) -> Result<(), kube::Error> {
        let started = Instant::now();
        let list = self
            .api
            .list(&ListParams::default().labels(&format!("{LEASE_SET_LABEL}={}", self.opts.prefix)))
            .await?;
        let leases: HashMap<String, Lease> = list
            .items
            .into_iter()
            .filter_map(|l| l.metadata.name.clone().map(|n| (n, l)))
            .collect();
        self.renew_member(leases.get(&self.opts.member_lease()))
            .await?;

        // What changed since the last round restarts that lease's silence clock.
        for (name, lease) in &leases {
            let spec = lease.spec.clone().unwrap_or_default();
            let now = Observed {
                holder: spec.holder_identity.unwrap_or_default(),
                renew: spec.renew_time.map(|t| t.0.to_string()),
                since: started,
            };
            match observed.get(name) {
                Some(o) if o.holder == now.holder && o.renew == now.renew => {}
                _ => {
                    observed.insert(name.clone(), now);
                }
            }
        }
        observed.retain(|name, _| leases.contains_key(name));
        let silent_for = |name: &str| {
            observed.get(name).map_or(Duration::ZERO, |o| {
                started.saturating_duration_since(o.since)
            })
        };
        let duration_of = |lease: &Lease| {
            lease
                .spec
                .as_ref()
                .and_then(|s| s.lease_duration_seconds)
                .map_or(self.opts.lease_duration, |s| {
                    Duration::from_secs(u64::try_from(s.max(1)).unwrap_or(1))
                })
        };

        // Live members and their peer URLs.
        let mut members = 0usize;
        let mut peers = Vec::new();
        let mut stale_members = Vec::new();
        for (name, lease) in &leases {
            if lease
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LEASE_ROLE_LABEL))
                != Some(&"member".to_string())
            {
                continue;
            }
            let holder = lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.clone())
                .unwrap_or_default();
            if holder == self.opts.identity {
                members += 1;
                continue;
            }
            let silent = silent_for(name);
            if silent < duration_of(lease) {
                members += 1;
                if let Some(url) = lease
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(PEER_URL_ANNOTATION))
                {
                    peers.push(url.clone());
                }
            } else if silent > duration_of(lease) * 10 {
                stale_members.push(name.clone());
            }
        }
        if !leases.contains_key(&self.opts.member_lease()) {
            members += 1;
        }
        peers.sort();
        *self.peers.lock().unwrap_or_else(|p| p.into_inner()) = peers;
        for name in stale_members {
            // A replica gone for good (e.g. a Pod of an old ReplicaSet).
            let _ = self.api.delete(&name, &DeleteParams::default()).await;
        }

        // Shards.
        let states: Vec<ShardState> = (0..self.opts.shards)
            .map(|i| {
                let name = self.opts.shard_lease(i);
                match leases.get(&name) {
                    None => ShardState::Absent,
                    Some(lease) => {
                        let holder = lease
                            .spec
                            .as_ref()
                            .and_then(|s| s.holder_identity.clone())
                            .unwrap_or_default();
                        if holder.is_empty() {
                            ShardState::Free
                        } else if holder == self.opts.identity {
                            if self.held_locally(i) {
                                ShardState::Mine
                            } else {
                                // Ours on the server but expired locally (a renew failed for
                                // longer than the deadline): take it back like a free one.
                                ShardState::Expired
                            }
                        } else if silent_for(&name) >= duration_of(lease) {
                            ShardState::Expired
                        } else {
                            ShardState::Other
                        }
                    }
                }
            })
            .collect();
        let plan = plan_round(&states, members, offset);

        for i in plan.renew {
            let name = self.opts.shard_lease(i);
            let Some(mut lease) = leases.get(&name).cloned() else {
                continue;
            };
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
            spec.lease_duration_seconds = Some(self.duration_secs());
            match self
                .api
                .replace(&name, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => self.mark_held(i, started),
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                    self.drop_held(i);
                    self.transition(i, "lost");
                }
                Err(e) => tracing::warn!(shard = i, error = %e, "cannot renew a shard lease"),
            }
        }
        for i in plan.release {
            self.release(i, leases.get(&self.opts.shard_lease(i)).cloned())
                .await;
        }
        for i in plan.acquire {
            let name = self.opts.shard_lease(i);
            let now = MicroTime(jiff::Timestamp::now());
            let result = match leases.get(&name).cloned() {
                None => {
                    let lease = Lease {
                        metadata: self.lease_meta(&name, "shard"),
                        spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                            holder_identity: Some(self.opts.identity.clone()),
                            lease_duration_seconds: Some(self.duration_secs()),
                            acquire_time: Some(now.clone()),
                            renew_time: Some(now),
                            lease_transitions: Some(0),
                            ..Default::default()
                        }),
                    };
                    self.api.create(&PostParams::default(), &lease).await
                }
                Some(mut lease) => {
                    let spec = lease.spec.get_or_insert_with(Default::default);
                    spec.holder_identity = Some(self.opts.identity.clone());
                    spec.lease_duration_seconds = Some(self.duration_secs());
                    spec.acquire_time = Some(now.clone());
                    spec.renew_time = Some(now);
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                    self.api
                        .replace(&name, &PostParams::default(), &lease)
                        .await
                }
            };
            match result {
                Ok(_) => {
                    let fresh = !self.held_locally(i);
                    self.mark_held(i, started);
                    if fresh {
                        self.transition(i, "acquired");
                        let _ = self.acquired.send(i);
                    }
                }
                // Someone else was faster.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => tracing::warn!(shard = i, error = %e, "cannot take a shard lease"),
            }
        }
        self.export();
        Ok(())
    }

    fn held_locally(&self, shard: u32) -> bool {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&shard)
    }

    fn mark_held(&self, shard: u32, renewed_at: Instant) {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(shard, renewed_at + self.opts.renew_deadline());
    }

    fn drop_held(&self, shard: u32) {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&shard);
    }

    /// Stops starting work in `shard`, waits for the work in it to end, then clears the
    /// Lease's holder so another replica takes it at once.
    async fn release(&self, shard: u32, lease: Option<Lease>) {
        self.drop_held(shard);
        let _exclusive = self.locks[shard as usize].clone().write_owned().await;
        let name = self.opts.shard_lease(shard);
        let lease = match lease {
            Some(l) => Some(l),
            None => self.api.get_opt(&name).await.ok().flatten(),
        };
        // No work runs in the shard any more: only now may someone else start.
        self.transition(shard, "released");
        self.export();
        if let Some(mut lease) = lease
            && lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref())
                == Some(self.opts.identity.as_str())
        {
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.holder_identity = None;
            spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
            // A conflict means the lease changed hands already: nothing to release.
            let _ = self
                .api
                .replace(&name, &PostParams::default(), &lease)
                .await;
        }
    }

    /// Releases every shard and the member Lease (clean shutdown: successors start at once).
    pub async fn release_all(&self) {
        let held: Vec<u32> = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .collect();
        for shard in held {
            self.release(shard, None).await;
        }
        let _ = self
            .api
            .delete(&self.opts.member_lease(), &DeleteParams::default())
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ShardState::*;

    #[test]
    fn one_repository_has_one_key_however_it_is_spelled() {
        let key = "github.com/org/repo";
        for url in [
            "https://github.com/Org/Repo.git",
            "https://token@github.com/org/repo/",
            "ssh://git@github.com/org/repo.git",
            "git@github.com:org/repo.git",
            "http://github.com/org/repo",
        ] {
            assert_eq!(repo_key(url), key, "{url}");
        }
        assert_eq!(
            repo_key("https://git.example:8443/a/b.git"),
            "git.example:8443/a/b"
        );
        assert_ne!(repo_key("https://github.com/org/other"), key);
    }

    #[test]
    fn shards_are_stable_and_spread() {
        assert_eq!(shard_of("github.com/org/repo", 1), 0);
        let a = shard_of("github.com/org/repo", 12);
        assert_eq!(a, shard_of("github.com/org/repo", 12));
        let mut seen = std::collections::HashSet::new();
        for i in 0..200 {
            seen.insert(shard_of(&format!("github.com/org/repo-{i}"), 12));
        }
        assert_eq!(seen.len(), 12, "200 repositories cover all 12 shards");
    }

    #[test]
    fn fair_share_rounds_up() {
        assert_eq!(fair_share(12, 3), 4);
        assert_eq!(fair_share(12, 5), 3);
        assert_eq!(fair_share(6, 0), 6);
        assert_eq!(fair_share(2, 3), 1);
    }

    #[test]
    fn a_lone_replica_takes_every_shard() {
        let plan = plan_round(&[Absent, Free, Expired, Other], 1, 0);
        assert_eq!(plan.acquire, vec![0, 1, 2]);
        assert!(plan.release.is_empty());
    }

    #[test]
    fn a_replica_releases_above_its_fair_share() {
        let plan = plan_round(&[Mine, Mine, Mine, Mine, Mine, Mine], 3, 0);
        assert_eq!(plan.renew, vec![0, 1]);
        assert_eq!(plan.release, vec![2, 3, 4, 5]);
        assert!(plan.acquire.is_empty());
        // The offset decides which ones it keeps.
        let plan = plan_round(&[Mine, Mine, Mine, Mine, Mine, Mine], 3, 4);
        assert_eq!(plan.renew, vec![4, 5]);
    }

    #[test]
    fn a_replica_takes_up_to_its_fair_share_from_its_offset() {
        let states = [Other, Other, Free, Absent, Expired, Mine];
        let plan = plan_round(&states, 2, 4);
        assert_eq!(plan.renew, vec![5]);
        assert_eq!(plan.acquire, vec![4, 2]);
        // Shards held by live replicas are never taken.
        let plan = plan_round(&[Other, Other, Other], 1, 0);
        assert!(plan.acquire.is_empty());
    }

    #[test]
    fn member_names_are_dns_labels() {
        assert_eq!(dns_label("Pod_Name.1"), "pod-name-1");
    }
}
