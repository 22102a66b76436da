//! Gate facts of a PromotionPolicy reconcile (I/O, after the candidate is decided): whether
//! each promoted image exists in the target registry (`gates.imageExists`) and whether its
//! signature verifies (`gates.signature`), both asked only of registries the allow-list lets
//! the policy's namespace read. The pure `promotion::evaluate` judges these facts with the
//! ones read before (soak, Application, approval).

use std::collections::HashMap;

use imagewatch_crd::{PromotionPolicy, promotion::APPROVE_ANNOTATION};
use kube::{Client, ResourceExt};

use super::super::shared::Shared;
use crate::cluster::secrets;
use crate::controllers::SecretReader;
use crate::controllers::parse_duration;
use crate::error::PromotionError;
use crate::{
    promotion::{
        Candidate, GateFacts,
        gates::{
            ApplicationFacts, ApprovalFacts, Containment, ImageCheck, ImageFact, SignatureCheck,
            SignatureFact, SoakFacts,
        },
    },
    registry::{Credentials, RegistryError, RepositoryRef, TagSource, is_ecr_host},
};

/// What reading the gate facts takes: the allow-list (with the client, and the metrics its
/// answers and signature checks are counted in), the target registry's Secret, the registry
/// and ECR clients, and the cache of signature verdicts.
#[derive(Clone, Copy)]
pub(in super::super) struct GateContext<'a> {
    pub(in super::super) allowance: &'a crate::cluster::allowance::Allowance,
    pub(in super::super) client: &'a Client,
    pub(in super::super) metrics: &'a crate::telemetry::Metrics,
    pub(in super::super) secrets: SecretReader<'a>,
    pub(in super::super) registry: &'a crate::registry::RegistryClient,
    pub(in super::super) ecr: &'a crate::registry::ecr::EcrTagSource,
    pub(in super::super) signatures: &'a crate::signature::fetch::VerdictCache,
}

impl<'a> GateContext<'a> {
    /// The gate step's view of what the policy reconciles share.
    pub(in super::super) fn of(shared: &'a Shared) -> Self {
        let ctx = &shared.ctx;
        GateContext {
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

/// The registries the image gates read (every promoted repository, after `imageRewrite`)
/// and, for ECR without `to.registrySecretRef`, the operator's AWS identity: allowed to the
/// policy's namespace by the allow-list, or `NotAllowed` before anything is read.
async fn check_gate_registries_allowed(
    policy: &PromotionPolicy,
    candidate: &Candidate,
    ctx: &GateContext<'_>,
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
async fn check_images(
    policy: &PromotionPolicy,
    candidate: &Candidate,
    ctx: &GateContext<'_>,
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
async fn check_signatures(
    policy: &PromotionPolicy,
    candidate: &Candidate,
    verify: &imagewatch_crd::Verify,
    ctx: &GateContext<'_>,
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
                ctx.metrics.count_signature_check(
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

/// Every gate fact of `candidate`, read once it is known: the images in the target registry
/// and their signatures (from the registries), and what was read before — the soak of the
/// source's applied times, the Application's health and whether its revision contains the
/// source commits (`containment`), the approval annotation.
pub(in super::super) async fn gate_facts(
    policy: &PromotionPolicy,
    candidate: &Candidate,
    gates: &imagewatch_crd::promotion::Gates,
    (source, application, containment): (
        &crate::promotion::SourceState,
        Option<ApplicationFacts>,
        Option<Containment>,
    ),
    ctx: &GateContext<'_>,
) -> Result<GateFacts, PromotionError> {
    let mut facts = GateFacts {
        pinned: candidate.pinned,
        ..Default::default()
    };
    if gates.image_exists.unwrap_or(false) || gates.signature.is_some() {
        check_gate_registries_allowed(policy, candidate, ctx).await?;
    }
    if gates.image_exists.unwrap_or(false) {
        facts.image_exists = Some(check_images(policy, candidate, ctx).await?);
    }
    if let Some(verify) = &gates.signature {
        facts.signature = Some(check_signatures(policy, candidate, verify, ctx).await?);
    }
    if let Some(soak) = gates.soak.as_deref() {
        facts.soak = Some(SoakFacts {
            required: parse_duration(soak).unwrap_or_default(),
            applied: source.applied.clone(),
        });
    }
    if let Some(mut app) = application {
        app.containment = containment
            .unwrap_or_else(|| Containment::Unknown("the Application reports no revision".into()));
        if source.commits.is_empty() && app.containment == Containment::Contains {
            app.containment = Containment::Unknown("the source watches recorded no commit".into());
        }
        facts.application = Some(app);
    }
    if gates.approval.unwrap_or(false) {
        facts.approval = Some(ApprovalFacts {
            annotation: policy.annotations().get(APPROVE_ANNOTATION).cloned(),
            id: candidate.id(),
            summary: candidate.summary(),
            namespace: policy.namespace().unwrap_or_default(),
            name: policy.name_any(),
        });
    }
    Ok(facts)
}
