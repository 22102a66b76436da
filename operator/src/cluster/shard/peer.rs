//! Sharding, the peer endpoint: registry events received by one replica are forwarded to the
//! other live replicas (their URLs are on their member Leases) and accepted from them on
//! `POST /internal/v1/events`, authenticated with the installation's peer token (a Secret
//! created by the first replica that needs it).

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::{LEASE_SET_LABEL, ShardManager};
use crate::registry::RegistryEvent;

/// Path of the peer endpoint on the metrics server.
pub const PEER_EVENTS_PATH: &str = "/internal/v1/events";

impl ShardManager {
    /// The other live replicas' peer URLs.
    pub fn peers(&self) -> Vec<String> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The token peers authenticate forwarded events with.
    pub fn peer_token(&self) -> Option<String> {
        self.peer_token
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reads (or creates) the installation's peer token Secret.
    pub async fn load_peer_token(&self) -> Result<String, kube::Error> {
        let name = format!("{}-peer-token", self.opts.prefix);
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.opts.namespace);
        let read = |s: Secret| {
            s.data
                .and_then(|d| {
                    d.get("token")
                        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                })
                .filter(|t| !t.is_empty())
        };
        let token = match api.get_opt(&name).await? {
            Some(secret) => read(secret),
            None => None,
        };
        let token = match token {
            Some(t) => t,
            None => {
                let fresh = random_token();
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        labels: Some(BTreeMap::from([
                            ("app.kubernetes.io/managed-by".into(), "imagewatch".into()),
                            (LEASE_SET_LABEL.into(), self.opts.prefix.clone()),
                        ])),
                        ..Default::default()
                    },
                    data: Some(BTreeMap::from([(
                        "token".to_string(),
                        ByteString(fresh.clone().into_bytes()),
                    )])),
                    ..Default::default()
                };
                match api.create(&PostParams::default(), &secret).await {
                    Ok(_) => fresh,
                    // Another replica created it first: use theirs.
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        read(api.get(&name).await?).unwrap_or(fresh)
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        *self.peer_token.lock().unwrap_or_else(|p| p.into_inner()) = Some(token.clone());
        Ok(token)
    }

    /// Sends `event` to every other live replica (best effort: a replica that misses it
    /// rescans at its polling interval).
    pub fn forward(&self, event: &RegistryEvent) {
        let Some(token) = self.peer_token() else {
            return;
        };
        let body = PeerEvents {
            events: vec![PeerEvent::from(event)],
        };
        for peer in self.peers() {
            let Ok(permit) = self.forwards.clone().try_acquire_owned() else {
                self.metrics
                    .peer_forwards
                    .get_or_create(&crate::telemetry::OutcomeLabels {
                        outcome: "dropped".to_string(),
                    })
                    .inc();
                continue;
            };
            let http = self.http.clone();
            let token = token.clone();
            let body = body.clone();
            let metrics = self.metrics.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let url = format!("{}{PEER_EVENTS_PATH}", peer.trim_end_matches('/'));
                let outcome = match http.post(&url).bearer_auth(token).json(&body).send().await {
                    Ok(r) if r.status().is_success() => "ok",
                    Ok(r) => {
                        tracing::warn!(peer = %peer, status = %r.status(), "peer refused a forwarded event");
                        "refused"
                    }
                    Err(e) => {
                        tracing::warn!(peer = %peer, error = %e, "cannot forward an event to a peer");
                        "unreachable"
                    }
                };
                metrics
                    .peer_forwards
                    .get_or_create(&crate::telemetry::OutcomeLabels {
                        outcome: outcome.to_string(),
                    })
                    .inc();
            });
        }
    }
}

/// A forwarded registry event.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PeerEvent {
    /// Registry host.
    pub registry: String,
    /// Repository path.
    pub repository: String,
    /// Tag, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Digest, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The registry's timestamp of the event, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<jiff::Timestamp>,
}

impl From<&RegistryEvent> for PeerEvent {
    fn from(e: &RegistryEvent) -> Self {
        Self {
            registry: e.registry.clone(),
            repository: e.repository.clone(),
            tag: e.tag.clone(),
            digest: e.digest.clone(),
            at: e.at,
        }
    }
}

impl From<PeerEvent> for RegistryEvent {
    fn from(e: PeerEvent) -> Self {
        Self {
            registry: e.registry,
            repository: e.repository,
            tag: e.tag,
            digest: e.digest,
            source: "peer",
            at: e.at,
        }
    }
}

/// Body of `POST /internal/v1/events`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PeerEvents {
    /// The events.
    pub events: Vec<PeerEvent>,
}

/// The peer endpoint, merged into the metrics server: checks the bearer token in constant
/// time and queues the events as if received here.
pub fn peer_router(
    manager: Arc<ShardManager>,
    events: mpsc::Sender<RegistryEvent>,
) -> axum::Router {
    use axum::{
        body::Bytes,
        http::{HeaderMap, StatusCode},
        routing::post,
    };
    axum::Router::new().route(
        PEER_EVENTS_PATH,
        post(move |headers: HeaderMap, body: Bytes| {
            let manager = manager.clone();
            let events = events.clone();
            async move {
                let Some(expected) = manager.peer_token() else {
                    return StatusCode::SERVICE_UNAVAILABLE;
                };
                let given = headers
                    .get(axum::http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .unwrap_or_default();
                if !bool::from(subtle::ConstantTimeEq::ct_eq(
                    given.as_bytes(),
                    expected.as_bytes(),
                )) {
                    return StatusCode::UNAUTHORIZED;
                }
                if body.len() > 64 * 1024 {
                    return StatusCode::PAYLOAD_TOO_LARGE;
                }
                let Ok(parsed) = serde_json::from_slice::<PeerEvents>(&body) else {
                    return StatusCode::BAD_REQUEST;
                };
                for event in parsed.events {
                    if events.send(event.into()).await.is_err() {
                        return StatusCode::SERVICE_UNAVAILABLE;
                    }
                }
                StatusCode::ACCEPTED
            }
        }),
    )
}

fn random_token() -> String {
    use rand::RngCore as _;
    let mut bytes = [0u8; 32];
    // The operating system's generator (getrandom(2) on Linux).
    if rand::rngs::OsRng.try_fill_bytes(&mut bytes).is_err() {
        // No OS generator: derive from the clock and the process (still unguessable enough
        // for a namespace-scoped Secret only the operator reads).
        let seed = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
        let digest = <sha2::Sha256 as sha2::Digest>::digest(seed.as_bytes());
        bytes.copy_from_slice(&digest);
    }
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{MAX_FORWARDS_IN_FLIGHT, ShardOptions};
    use super::*;
    use crate::telemetry::Metrics;

    #[test]
    fn peer_tokens_are_32_random_bytes_in_hex() {
        let (a, b) = (random_token(), random_token());
        for t in [&a, &b] {
            assert_eq!(t.len(), 64, "{t}");
            assert!(t.bytes().all(|c| c.is_ascii_hexdigit()), "{t}");
        }
        assert_ne!(a, b);
    }

    #[test]
    fn peer_events_round_trip() {
        let event = RegistryEvent {
            registry: "r:5000".into(),
            repository: "team/api".into(),
            tag: Some("v1".into()),
            digest: None,
            source: "distribution",
            at: None,
        };
        let wire = serde_json::to_string(&PeerEvents {
            events: vec![PeerEvent::from(&event)],
        })
        .unwrap();
        let back: PeerEvents = serde_json::from_str(&wire).unwrap();
        let back: RegistryEvent = back.events[0].clone().into();
        assert_eq!(back.source, "peer");
        assert_eq!(back.repository, "team/api");
        assert_eq!(back.tag.as_deref(), Some("v1"));
    }

    #[tokio::test]
    async fn forwards_in_flight_are_bounded() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        // A peer that accepts connections and never answers: every forward stays in flight.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = format!("http://{}", silent.local_addr().unwrap());
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let metrics = Arc::new(Metrics::new());
        let opts = ShardOptions {
            shards: 2,
            lease_duration: Duration::from_secs(15),
            namespace: "imagewatch".into(),
            identity: "iw-0".into(),
            prefix: "iw".into(),
            peer_url: None,
        };
        let (manager, _acquired) = ShardManager::new(client, opts, metrics.clone());
        *manager.peer_token.lock().unwrap() = Some("token".into());
        *manager.peers.lock().unwrap() = vec![peer];
        let event = RegistryEvent {
            registry: "r:5000".into(),
            repository: "team/api".into(),
            tag: Some("v1".into()),
            digest: None,
            source: "distribution",
            at: None,
        };
        for _ in 0..MAX_FORWARDS_IN_FLIGHT + 44 {
            manager.forward(&event);
        }
        let dropped = metrics
            .peer_forwards
            .get_or_create(&crate::telemetry::OutcomeLabels {
                outcome: "dropped".into(),
            })
            .get();
        assert_eq!(dropped, 44);
        assert_eq!(manager.forwards.available_permits(), 0);
    }
}
