//! Smoke test of the test ground's control plane: CRDs, watch, server-side apply on status,
//! Leases, and RBAC denial — on the real kube-apiserver.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use imagewatch_crd::{ImageWatch, ImageWatchStatus, LatestImage};
use imagewatch_e2e::{Ground, TestNamespace, wait_until};
use k8s_openapi::{
    api::{
        coordination::v1::{Lease, LeaseSpec},
        core::v1::Secret,
    },
    apimachinery::pkg::apis::meta::v1::MicroTime,
};
use kube::{
    Api,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};

fn watch_object(ns: &str, name: &str) -> ImageWatch {
    let text = format!(
        r#"{{"apiVersion":"imagewatch.dev/v1alpha1","kind":"ImageWatch",
            "metadata":{{"name":"{name}","namespace":"{ns}"}},
            "spec":{{"image":"127.0.0.1:5000/app","git":{{"url":"https://example.com/m.git"}},
                     "target":{{"workload":{{"path":"apps","kind":"Deployment","name":"app","container":"app"}}}}}}}}"#
    );
    serde_json::from_str(&text).expect("valid object")
}

#[tokio::test]
async fn crd_watch_status_lease_and_rbac_on_the_real_apiserver() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground.install_crds()?;
    let ns = TestNamespace::create(ground, "smoke").await?;
    let client = ground.admin().await?;
    let api: Api<ImageWatch> = Api::namespaced(client.clone(), &ns.name);

    // Watch before creating, so the create is observed as an event.
    let mut stream = watcher(api.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    api.create(&PostParams::default(), &watch_object(&ns.name, "smoke"))
        .await?;
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(obj) = stream.try_next().await? {
            if obj.metadata.name.as_deref() == Some("smoke") {
                return anyhow::Ok(obj);
            }
        }
        anyhow::bail!("watch ended")
    })
    .await??;
    assert_eq!(seen.spec.image, "127.0.0.1:5000/app");

    // Server-side apply on /status with one field manager.
    let status = ImageWatchStatus {
        observed_generation: seen.metadata.generation,
        latest: Some(LatestImage {
            tag: "v1.0.0".into(),
            digest: Some("sha256:abc".into()),
            pushed_at: None,
            appeared_at: None,
            appeared_from: None,
        }),
        ..Default::default()
    };
    let patch = serde_json::json!({"apiVersion": "imagewatch.dev/v1alpha1", "kind": "ImageWatch", "status": status});
    api.patch_status(
        "smoke",
        &PatchParams::apply("imagewatch").force(),
        &Patch::Apply(&patch),
    )
    .await?;
    let back = api.get("smoke").await?;
    assert_eq!(
        back.status.and_then(|s| s.latest).map(|l| l.tag),
        Some("v1.0.0".to_string())
    );
    // The spec was not touched by the status write.
    assert_eq!(back.metadata.generation, seen.metadata.generation);

    // A Lease: create, then renew (update renewTime with optimistic concurrency).
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let now = || MicroTime(jiff::Timestamp::now());
    let created = leases
        .create(
            &PostParams::default(),
            &Lease {
                metadata: ObjectMeta {
                    name: Some("shard-0".into()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some("replica-a".into()),
                    lease_duration_seconds: Some(15),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    ..Default::default()
                }),
            },
        )
        .await?;
    let mut renewed = created.clone();
    let first_renew = created.spec.as_ref().and_then(|s| s.renew_time.clone());
    wait_until("a later timestamp", Duration::from_secs(5), || async {
        Ok((Some(now()) > first_renew).then_some(()))
    })
    .await?;
    if let Some(spec) = renewed.spec.as_mut() {
        spec.renew_time = Some(now());
    }
    let after = leases
        .replace("shard-0", &PostParams::default(), &renewed)
        .await?;
    assert!(after.spec.and_then(|s| s.renew_time) > first_renew);
    // A stale resourceVersion is refused: two holders cannot both renew.
    let stale = leases
        .replace("shard-0", &PostParams::default(), &created)
        .await;
    assert!(
        matches!(stale, Err(kube::Error::Api(ref s)) if s.code == 409),
        "{stale:?}"
    );

    // A ServiceAccount without any RoleBinding is denied.
    let (_, sa_client) = ns.service_account(ground, "nobody").await?;
    let denied = Api::<Secret>::namespaced(sa_client.clone(), &ns.name)
        .list(&Default::default())
        .await;
    assert!(
        matches!(denied, Err(kube::Error::Api(ref s)) if s.code == 403),
        "{denied:?}"
    );
    let denied = Api::<ImageWatch>::namespaced(sa_client, &ns.name)
        .get("smoke")
        .await;
    assert!(
        matches!(denied, Err(kube::Error::Api(ref s)) if s.code == 403),
        "{denied:?}"
    );
    Ok(())
}
