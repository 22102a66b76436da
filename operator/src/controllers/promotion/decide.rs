//! Decide step of a PromotionPolicy reconcile: from the source and the target's inventory to
//! the candidate (through the pure `crate::promotion` module), and the facts of the gates that
//! need I/O (images in the target registry, signatures) before `promotion::evaluate` judges
//! them.

#[cfg(test)]
use super::fixtures::policy;
use super::shared::Shared;
use crate::error::PromotionError;
use std::collections::{BTreeMap, HashMap};

use imagewatch_crd::{ImageWatch, PromotionPolicy};
use kube::{Client, ResourceExt};

use crate::cluster::secrets;
use crate::controllers::SecretReader;
use crate::{
    promotion::{
        self, Candidate, CandidateError, CandidateInput, Inventory, SourceState,
        gates::{ImageCheck, ImageFact, SignatureCheck, SignatureFact},
    },
    registry::{Credentials, RegistryError, RepositoryRef, TagSource, is_ecr_host},
};

/// What the decide step's gates read: the allow-list (with the client, and the metrics its
/// answers and signature checks are counted in), the target registry's Secret, the registry
/// and ECR clients, and the cache of signature verdicts.
#[derive(Clone, Copy)]
pub(super) struct DecideContext<'a> {
    pub(super) allowance: &'a crate::cluster::allowance::Allowance,
    pub(super) client: &'a Client,
    pub(super) metrics: &'a crate::telemetry::Metrics,
    pub(super) secrets: SecretReader<'a>,
    pub(super) registry: &'a crate::registry::RegistryClient,
    pub(super) ecr: &'a crate::registry::ecr::EcrTagSource,
    pub(super) signatures: &'a crate::signature::fetch::VerdictCache,
}

impl<'a> DecideContext<'a> {
    /// The decide step's view of what the policy reconciles share.
    pub(super) fn of(shared: &'a Shared) -> Self {
        let ctx = &shared.ctx;
        DecideContext {
            allowance: &ctx.allowance,
            client: &ctx.client,
            metrics: &ctx.metrics,
            secrets: SecretReader::of(ctx),
            registry: &ctx.registry,
            ecr: &ctx.ecr,
            signatures: &ctx.signatures,
        }
    }
}

/// The candidate inputs that are plain data (for the pure builder, also inside a retry loop).
#[derive(Clone)]
pub(super) struct Decision {
    pub(super) source: SourceState,
    pub(super) rewrite: Vec<imagewatch_crd::promotion::ImageRewrite>,
    pub(super) align: Option<imagewatch_crd::promotion::AlignTags>,
    pub(super) pin: Option<BTreeMap<String, String>>,
    pub(super) to_path: String,
    /// Images not proposed again (`spec.onGitChange`, found by the holds step in `held.rs`).
    pub(super) held: Vec<imagewatch_crd::HeldImage>,
}

impl Decision {
    /// The candidate on `target`, its held images not proposed (also when a rejected push
    /// makes the writer plan again on a newer head).
    pub(super) fn candidate(&self, target: &Inventory) -> Result<Candidate, CandidateError> {
        promotion::build_candidate(CandidateInput {
            sources: &self.source.images,
            rewrite: &self.rewrite,
            align: self.align.as_ref(),
            pin: self.pin.as_ref().filter(|p| !p.is_empty()),
            target,
            target_path: &self.to_path,
        })
        .map(|c| c.with_holds(self.held.clone()))
    }
}

/// The source watches that have applied no tag yet and report no failure (no status yet,
/// or `Ready` not `False`), as a message; `None` when there are none. Pure.
pub(super) fn first_tag_pending(watches: &[ImageWatch]) -> Option<String> {
    let pending: Vec<String> = watches
        .iter()
        .filter(|w| {
            let status = w.status.as_ref();
            let failing = status
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "False");
            status.and_then(|s| s.applied.as_ref()).is_none() && !failing
        })
        .map(|w| w.name_any())
        .collect();
    (!pending.is_empty()).then(|| {
        format!(
            "waiting for ImageWatch {} to apply a first tag",
            pending.join(", ")
        )
    })
}

pub(super) fn candidate_error(e: CandidateError) -> PromotionError {
    match e {
        CandidateError::NothingInTarget { .. } => PromotionError::TargetNotFound(e.to_string()),
        CandidateError::EmptySource | CandidateError::LeaderMissing(..) => {
            PromotionError::SourceNotReady(e.to_string())
        }
        _ => PromotionError::InvalidSpec(e.to_string()),
    }
}

/// The registries the image gates read (every promoted repository, after `imageRewrite`)
/// and, for ECR without `to.registrySecretRef`, the operator's AWS identity: allowed to the
/// policy's namespace by the allow-list, or `NotAllowed` before anything is read.
pub(super) async fn check_gate_registries_allowed(
    policy: &PromotionPolicy,
    candidate: &Candidate,
    ctx: &DecideContext<'_>,
) -> Result<(), PromotionError> {
    let namespace = policy.namespace().unwrap_or_default();
    let secret = policy.spec.to.registry_secret_ref.as_ref();
    let images: Vec<&str> = candidate
        .changes()
        .map(|image| image.repository.as_str())
        .collect();
    let aws = secret.is_none()
        && images
            .iter()
            .any(|image| is_ecr_host(image.split('/').next().unwrap_or_default()).is_some());
    let ask = crate::cluster::allow::Ask {
        namespace: &namespace,
        git: None,
        images,
        aws,
    };
    ctx.allowance
        .check(ctx.client, ctx.metrics, "PromotionPolicy", ask, None)
        .await?;
    Ok(())
}

/// `imageExists`: a manifest HEAD for every changed reference, with the target registry's
/// credentials (`to.registrySecretRef`, or ECR through the operator's AWS identity).
pub(super) async fn check_images(
    policy: &PromotionPolicy,
    candidate: &Candidate,
    ctx: &DecideContext<'_>,
) -> Result<Vec<ImageFact>, PromotionError> {
    let namespace = policy.namespace().unwrap_or_default();
    let mut creds_by_host: HashMap<String, Credentials> = HashMap::new();
    let mut facts = Vec::new();
    for image in candidate.changes() {
        let reference = format!("{}:{}", image.repository, image.tag);
        let repo = match RepositoryRef::parse(&image.repository) {
            Ok(r) => r,
            Err(e) => {
                facts.push(ImageFact {
                    reference,
                    expected_digest: image.digest.clone(),
                    check: ImageCheck::Error(e.to_string()),
                });
                continue;
            }
        };
        let secret = policy.spec.to.registry_secret_ref.as_ref();
        let use_ecr = is_ecr_host(&repo.registry).is_some() && secret.is_none();
        let creds = match (secret, creds_by_host.get(&repo.registry)) {
            (_, Some(c)) => c.clone(),
            (Some(secret), None) => {
                let c = secrets::registry_credentials(
                    &ctx.secrets,
                    &namespace,
                    &secret.name,
                    &repo.registry,
                )
                .await?;
                creds_by_host.insert(repo.registry.clone(), c.clone());
                c
            }
            (None, None) => Credentials::Anonymous,
        };
        let result = if use_ecr {
            ctx.ecr.digest(&repo, &image.tag, &creds).await
        } else {
            ctx.registry
                .manifest_digest(&repo, &image.tag, &creds)
                .await
        };
        let check = match result {
            Ok(Some(digest)) => ImageCheck::Exists(Some(digest)),
            Ok(None) | Err(RegistryError::NotFound { .. }) => ImageCheck::Missing,
            Err(e) => ImageCheck::Error(e.to_string()),
        };
        facts.push(ImageFact {
            reference,
            expected_digest: image.digest.clone(),
            check,
        });
    }
    Ok(facts)
}

/// `signature`: every changed reference's image, in its target registry, must carry a cosign
/// signature by a key of `verify` (see `crate::signature`).
pub(super) async fn check_signatures(
    policy: &PromotionPolicy,
    candidate: &Candidate,
    verify: &imagewatch_crd::Verify,
    ctx: &DecideContext<'_>,
) -> Result<Vec<SignatureFact>, PromotionError> {
    let namespace = policy.namespace().unwrap_or_default();
    let keys = crate::controllers::imagewatch::signature_keys(
        &ctx.secrets,
        &namespace,
        &verify.cosign,
        "spec.gates.signature",
    )
    .await?;
    let secret = policy.spec.to.registry_secret_ref.as_ref();
    let cache_key = format!(
        "{}|{}",
        crate::signature::keys_fingerprint(&keys),
        secret.map_or_else(
            || "anonymous".to_string(),
            |s| format!("secret:{namespace}/{}", s.name)
        )
    );
    let mut creds_by_host: HashMap<String, Credentials> = HashMap::new();
    let mut facts = Vec::new();
    for image in candidate.changes() {
        let reference = format!("{}:{}", image.repository, image.tag);
        let repo = match RepositoryRef::parse(&image.repository) {
            Ok(r) => r,
            Err(e) => {
                facts.push(SignatureFact {
                    reference,
                    check: SignatureCheck::Error(e.to_string()),
                });
                continue;
            }
        };
        // ECR without a pull Secret: the operator's AWS identity, as for the image gate; its
        // signatures are read through the registry API with that identity's registry token.
        let use_ecr = is_ecr_host(&repo.registry).is_some() && secret.is_none();
        let creds = match (secret, creds_by_host.get(&repo.registry)) {
            (_, Some(c)) => c.clone(),
            (Some(secret), None) => {
                let c = secrets::registry_credentials(
                    &ctx.secrets,
                    &namespace,
                    &secret.name,
                    &repo.registry,
                )
                .await?;
                creds_by_host.insert(repo.registry.clone(), c.clone());
                c
            }
            (None, None) if use_ecr => match ctx.ecr.registry_credentials(&repo.registry).await {
                Ok(c) => {
                    creds_by_host.insert(repo.registry.clone(), c.clone());
                    c
                }
                Err(e) => {
                    facts.push(SignatureFact {
                        reference,
                        check: SignatureCheck::Error(e.to_string()),
                    });
                    continue;
                }
            },
            (None, None) => Credentials::Anonymous,
        };
        let digest = match &image.digest {
            Some(d) => Ok(Some(d.clone())),
            None if use_ecr => ctx.ecr.digest(&repo, &image.tag, &creds).await,
            None => {
                ctx.registry
                    .manifest_digest(&repo, &image.tag, &creds)
                    .await
            }
        };
        let check = match digest {
            Ok(None) => SignatureCheck::Error("not in the registry".into()),
            Err(e) => SignatureCheck::Error(e.to_string()),
            Ok(Some(digest)) => {
                let verdict = crate::signature::fetch::check(
                    ctx.registry,
                    ctx.signatures,
                    &cache_key,
                    &repo,
                    &digest,
                    &creds,
                    &keys,
                )
                .await;
                crate::controllers::imagewatch::count_signature_check(
                    ctx.metrics,
                    "PromotionPolicy",
                    verdict.as_ref().map_or("error", |v| v.outcome()),
                );
                match verdict {
                    Ok(crate::signature::Verdict::Verified { .. }) => SignatureCheck::Verified,
                    Ok(crate::signature::Verdict::Missing) => SignatureCheck::Missing,
                    Ok(crate::signature::Verdict::Invalid(why)) => SignatureCheck::Invalid(why),
                    Err(e) => SignatureCheck::Error(e.to_string()),
                }
            }
        };
        facts.push(SignatureFact { reference, check });
    }
    Ok(facts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::promotion::event_for;
    use kube::runtime::events::EventType;
    use serde_json::json;

    fn source_watch(name: &str, status: serde_json::Value) -> ImageWatch {
        serde_json::from_value(json!({
            "apiVersion": "imagewatch.dev/v1alpha1", "kind": "ImageWatch",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"image": "r/my-api", "git": {"url": "https://g/x.git"},
                     "target": {"helm": {"file": "v.yaml", "tag": "image.tag"}}},
            "status": status,
        }))
        .unwrap()
    }

    /// A policy created together with its watches: they have not applied a tag yet, which
    /// is a wait, not a failure: no Warning Event.
    #[test]
    fn a_source_watch_without_a_first_tag_yet_is_a_wait_not_a_warning() {
        let applied = json!({"applied": {"tag": "v1", "image": "r/my-api:v1"}});
        let failing = json!({"conditions": [{"type": "Ready", "status": "False",
            "reason": "RegistryError", "message": "x", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        let healthy = [
            source_watch("api", applied.clone()),
            source_watch("worker", serde_json::Value::Null),
        ];
        assert_eq!(
            first_tag_pending(&healthy).as_deref(),
            Some("waiting for ImageWatch worker to apply a first tag")
        );
        assert_eq!(first_tag_pending(&[source_watch("api", applied)]), None);
        // A failing watch is a source that is not ready: reported as before.
        assert_eq!(first_tag_pending(&[source_watch("api", failing)]), None);

        let p = policy(json!({}));
        let waiting = Err(PromotionError::SourceWaiting("waiting".into()));
        let event = event_for(&p, &waiting).expect("an Event");
        assert_eq!(event.type_, EventType::Normal);
        assert_eq!(event.reason, "SourceNotReady");
        let not_ready = Err(PromotionError::SourceNotReady("broken".into()));
        assert_eq!(event_for(&p, &not_ready).unwrap().type_, EventType::Warning);
    }
}
