//! What one status write costs the ground's API server: the floor under the first sync.
//!
//! A first sync writes one status per ImageWatch, so the API server's CPU per status write
//! times the number of watches is work no operator can avoid. This scenario measures it
//! without the operator: N ImageWatches (the steady-state scenario's shape) get their status
//! written with the operator's identity, 32 writes in flight, and the API server's and etcd's
//! CPU (from `/proc`) is divided by N. Variants: the operator's write (a JSON patch of the
//! whole status), a merge patch of it, a JSON patch of a one-field status (does the status's
//! size matter?) and, for comparison, a merge patch of a ConfigMap (a built-in object; the
//! operator's identity may not write ConfigMaps, so the admin's).

use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use imagewatch_e2e::ground::client_from_kubeconfig;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use crate::common::{CREATE_CONCURRENCY, Setup, clock_ticks, cpu_ticks, ground_pid, watch_object};

/// Writes in flight, as the operator's 32 work slots.
const IN_FLIGHT: usize = 32;

/// One way of writing, measured over N objects.
#[derive(Debug, Clone)]
pub struct WriteCost {
    /// What was written.
    pub what: &'static str,
    /// API-server CPU per write, milliseconds.
    pub apiserver_ms: f64,
    /// etcd CPU per write, milliseconds.
    pub etcd_ms: f64,
    /// Wall time of the N writes.
    pub elapsed: Duration,
}

/// The measured variants, in order: the first is the operator's own write.
pub struct WriteCosts {
    pub writes: usize,
    pub costs: Vec<WriteCost>,
}

impl WriteCosts {
    /// The operator's own write (a JSON patch of the whole status).
    pub fn operator_write(&self) -> Option<&WriteCost> {
        self.costs.first()
    }
}

#[derive(Clone, Copy)]
enum Variant {
    JsonPatchStatus,
    MergePatchStatus,
    JsonPatchOneField,
    ConfigMap,
}

impl Variant {
    const ALL: [Variant; 4] = [
        Variant::JsonPatchStatus,
        Variant::MergePatchStatus,
        Variant::JsonPatchOneField,
        Variant::ConfigMap,
    ];

    fn what(self) -> &'static str {
        match self {
            Variant::JsonPatchStatus => "ImageWatch status, JSON patch (the operator's write)",
            Variant::MergePatchStatus => "ImageWatch status, merge patch",
            Variant::JsonPatchOneField => "ImageWatch status of one field, JSON patch",
            Variant::ConfigMap => {
                "ConfigMap, merge patch (a built-in object, admin identity, for comparison)"
            }
        }
    }
}

/// A status as the operator writes it for an up-to-date watch; `round` changes its values
/// (the API server skips a write that changes nothing).
fn status(name: &str, round: usize) -> Value {
    let at = jiff::Timestamp::now().to_string();
    json!({
        "observedGeneration": 1,
        "latest": {"tag": format!("v1.0.{round}")},
        "applied": {
            "tag": format!("v1.0.{round}"),
            "commit": format!("{:040x}", round),
            "at": at,
        },
        "conditions": [{
            "type": "Ready",
            "status": "True",
            "reason": "UpToDate",
            "message": format!("apps/{name}/deployment.yaml holds v1.0.{round}"),
            "lastTransitionTime": at,
            "observedGeneration": 1,
        }],
    })
}

pub async fn run(writes: usize) -> anyhow::Result<WriteCosts> {
    let setup = Setup::new("apicost").await?;
    let ns = setup.ns.name.clone();
    let operator = client_from_kubeconfig(setup.operator_kubeconfig()).await?;
    let apiserver = ground_pid(&setup, "kube-apiserver");
    let etcd = ground_pid(&setup, "etcd");
    anyhow::ensure!(
        apiserver.is_some() && etcd.is_some(),
        "the ground's kube-apiserver and etcd processes are needed (a cluster of your own \
         cannot be measured from /proc)"
    );
    let names: Vec<String> = (0..writes).map(|i| format!("w-{i}")).collect();
    let objects = names
        .iter()
        .map(|name| {
            watch_object(
                name,
                "registry.invalid/app",
                "v*",
                "1h",
                "https://git.invalid/manifests.git",
                "regcred",
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    setup.create_watches(objects).await?;
    let maps: Api<ConfigMap> = Api::namespaced(setup.admin.clone(), &ns);
    futures::stream::iter(&names)
        .map(|name| {
            let maps = maps.clone();
            async move {
                let map: ConfigMap =
                    serde_json::from_value(json!({"metadata": {"name": name}, "data": {}}))?;
                maps.create(&PostParams::default(), &map).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;

    let ticks = clock_ticks() as f64;
    let mut costs = Vec::new();
    for (round, variant) in Variant::ALL.into_iter().enumerate() {
        let (api_before, etcd_before) = (cpu_ticks(apiserver), cpu_ticks(etcd));
        let started = Instant::now();
        let client = match variant {
            Variant::ConfigMap => &setup.admin,
            _ => &operator,
        };
        write_all(client, &ns, &names, variant, round + 2).await?;
        let elapsed = started.elapsed();
        let spent = |before: Option<u64>, pid| {
            cpu_ticks(pid)
                .zip(before)
                .map_or(f64::NAN, |(now, then)| now.saturating_sub(then) as f64)
                * 1000.0
                / ticks
                / writes as f64
        };
        costs.push(WriteCost {
            what: variant.what(),
            apiserver_ms: spent(api_before, apiserver),
            etcd_ms: spent(etcd_before, etcd),
            elapsed,
        });
    }
    setup.delete_watches().await;
    Ok(WriteCosts { writes, costs })
}

async fn write_all(
    client: &Client,
    ns: &str,
    names: &[String],
    variant: Variant,
    round: usize,
) -> anyhow::Result<()> {
    let params = PatchParams {
        field_manager: Some(imagewatch_crd::FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    let watches: Api<imagewatch_crd::ImageWatch> = Api::namespaced(client.clone(), ns);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(names)
        .map(|name| {
            let (watches, maps, params) = (&watches, &maps, &params);
            async move {
                match variant {
                    Variant::JsonPatchStatus | Variant::JsonPatchOneField => {
                        let value = match variant {
                            Variant::JsonPatchOneField => json!({"observedGeneration": round}),
                            _ => status(name, round),
                        };
                        let patch: Patch<()> = Patch::Json(serde_json::from_value(
                            json!([{"op": "add", "path": "/status", "value": value}]),
                        )?);
                        watches.patch_status(name, params, &patch).await?;
                    }
                    Variant::MergePatchStatus => {
                        let patch = Patch::Merge(json!({"status": status(name, round)}));
                        watches.patch_status(name, params, &patch).await?;
                    }
                    Variant::ConfigMap => {
                        let patch = Patch::Merge(json!({"data": {"tag": format!("v1.0.{round}")}}));
                        maps.patch(name, params, &patch).await?;
                    }
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}
