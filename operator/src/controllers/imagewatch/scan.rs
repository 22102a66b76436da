//! The scan step: the tags of a watch's repository, from the repository index (one scan per
//! repository and credentials, shared by every watch that reads it), with when each tag
//! appeared under `Newest`; the digests of tags, looked up once per scan, which confirm a
//! tag exists before it is written; the signature verdicts of `spec.verify` and the
//! platforms of `spec.tags.platforms` on them.
//! Reads the registry (or ECR) through the index; hands on [`Prepared`] to the choice.

use std::sync::Arc;

use imagewatch_crd::{DigestMode, ImageWatch};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::dereference::{DereferenceContext, Rules, VerifyKeys, rules};
use super::members::PatternImage;
use super::validate::validate_rules;
use crate::controllers::Context;
use crate::controllers::ReconcileError;
use crate::error::{CatalogError, NoTag, SpecError};
use crate::policy;
use crate::registry::ecr::EcrTagSource;
use crate::registry::{Credentials, RegistryClient, RegistryError, RepositoryRef, TagSource};
use crate::scan::{
    appearances::Appearances,
    index::{RepositoryIndex, Scan, ScanKey},
};
use crate::signature::fetch::VerdictCache;
use crate::telemetry::Metrics;

/// What the scan step reads: the registry (or ECR) through the shared repository index,
/// when each tag appeared, the cache of signature verdicts, and the metrics signature
/// checks are counted in.
#[derive(Clone, Copy)]
pub(super) struct ScanContext<'a> {
    pub(super) registry: &'a RegistryClient,
    pub(super) ecr: &'a EcrTagSource,
    pub(super) index: &'a RepositoryIndex,
    pub(super) appearances: &'a Appearances,
    pub(super) signatures: &'a VerdictCache,
    pub(super) metrics: &'a Metrics,
}

impl<'a> ScanContext<'a> {
    /// The scan step's view of the shared services.
    pub(super) fn of(ctx: &'a Context) -> Self {
        ScanContext {
            registry: &ctx.registry,
            ecr: &ctx.ecr,
            index: &ctx.index,
            appearances: &ctx.appearances,
            signatures: &ctx.signatures,
            metrics: &ctx.metrics,
        }
    }
}

/// A watch validated, dereferenced and scanned (steps 1–3a) for one repository: everything
/// needed to choose and check a tag.
pub(super) struct Prepared<'w> {
    pub(super) watch: &'w ImageWatch,
    pub(super) rules: Arc<Rules>,
    pub(super) repo: RepositoryRef,
    /// The image written: `spec.image`, or one member of a pattern.
    pub(super) image: String,
    /// Where it is written: `spec.target`, or its expansion for one member of a pattern.
    pub(super) target: imagewatch_crd::Target,
    pub(super) scan: Arc<Scan>,
    pub(super) scan_key: ScanKey,
}

/// Steps 1–3a for one watch: validate its spec, read its registry credentials and get the
/// repository's shared scan.
pub(super) async fn prepare<'w>(
    watch: &'w ImageWatch,
    dereference: &DereferenceContext<'_>,
    ctx: &ScanContext<'_>,
) -> Result<Prepared<'w>, ReconcileError> {
    let spec = &watch.spec;
    let validated = validate_rules(watch)?;
    let repo = RepositoryRef::parse(&spec.image)
        .map_err(|e| ReconcileError::InvalidSpec(SpecError::invalid("spec.image", e)))?;
    let rules = Arc::new(rules(watch, dereference, &repo.registry, validated).await?);
    scan_repository(
        watch,
        ctx,
        rules,
        repo,
        spec.image.clone(),
        spec.target.clone(),
    )
    .await
}

/// Step 3a: the repository's shared scan.
pub(super) async fn scan_repository<'w>(
    watch: &'w ImageWatch,
    ctx: &ScanContext<'_>,
    rules: Arc<Rules>,
    repo: RepositoryRef,
    image: String,
    target: imagewatch_crd::Target,
) -> Result<Prepared<'w>, ReconcileError> {
    let scan_key = ScanKey {
        registry: repo.registry.clone(),
        repository: repo.path.clone(),
        credentials: rules.credential_key.clone(),
        // Registries other than ECR do not list push times; Newest needs them looked up.
        with_times: rules.order == policy::Order::Newest && !rules.use_ecr,
    };
    let creds = &rules.creds;
    let newest = rules.order == policy::Order::Newest;
    if newest {
        restore_appearance(watch, ctx, &scan_key);
    }
    let scan = ctx
        .index
        .tags(&scan_key, rules.interval, || async {
            let listed = if rules.use_ecr {
                ctx.ecr.list(&repo, creds).await
            } else if scan_key.with_times {
                ctx.registry
                    .list_tags_with_times(&repo, creds, None)
                    .await
                    .map(|timed| timed.tags)
            } else {
                ctx.registry
                    .list_tags(&repo, creds)
                    .await
                    .map(|tags| tags.into_iter().map(policy::TagInfo::new).collect())
            };
            // Newest orders by when each tag appeared, not by its image's time.
            if newest {
                listed.map(|tags| {
                    ctx.appearances
                        .observe(&scan_key, tags, jiff::Timestamp::now())
                })
            } else {
                listed
            }
        })
        .await
        .map_err(ReconcileError::from)?;
    Ok(Prepared {
        watch,
        rules,
        repo,
        image,
        target,
        scan,
        scan_key,
    })
}

/// Gives the ledger the appearance time of the watch's `status.latest` tag, which a restart
/// would otherwise lose; when that changes the ledger, the repository's scan is made again.
fn restore_appearance(watch: &ImageWatch, ctx: &ScanContext<'_>, key: &ScanKey) {
    let Some(latest) = watch.status.as_ref().and_then(|s| s.latest.as_ref()) else {
        return;
    };
    let Some(Time(at)) = latest.appeared_at.clone() else {
        return;
    };
    if ctx.appearances.restore(key, &latest.tag, at) {
        ctx.index.invalidate(&key.registry, &key.repository);
    }
}

/// A failed repository listing: "this registry does not list repositories to us" is a
/// condition of its own; anything else is a registry error, retried.
pub(super) fn catalog_error(
    error: RegistryError,
    pattern: &PatternImage,
    ecr: bool,
) -> ReconcileError {
    let unlisted = matches!(
        &error,
        RegistryError::NotFound { .. }
            | RegistryError::Unauthorized { .. }
            | RegistryError::Server {
                status: 405 | 501,
                ..
            }
    );
    match (unlisted, ecr) {
        (true, true) => ReconcileError::CatalogUnavailable(CatalogError::Ecr {
            registry: pattern.registry.clone(),
            pattern: pattern.pattern.clone(),
            error: Box::new(error),
        }),
        (true, false) => ReconcileError::CatalogUnavailable(CatalogError::Catalog {
            registry: pattern.registry.clone(),
            pattern: pattern.pattern.clone(),
            error: Box::new(error),
        }),
        (false, _) => ReconcileError::Registry(error),
    }
}

/// Counts a signature check in `imagewatch_signature_checks_total`.
pub(crate) fn count_signature_check(metrics: &Metrics, kind: &str, outcome: &str) {
    metrics
        .signature_checks
        .get_or_create(&crate::telemetry::SignatureLabels {
            kind: kind.to_string(),
            outcome: outcome.to_string(),
        })
        .inc();
}

impl Prepared<'_> {
    /// The digest of `tag`, once per scan; `None` when its manifest does not exist.
    pub(super) async fn digest(
        &self,
        ctx: &ScanContext<'_>,
        tag: &str,
    ) -> Result<Option<String>, ReconcileError> {
        let (repo, creds) = (&self.repo, &self.rules.creds);
        Ok(self
            .scan
            .digest(tag, || async {
                if self.rules.use_ecr {
                    ctx.ecr.digest(repo, tag, creds).await
                } else {
                    ctx.registry.manifest_digest(repo, tag, creds).await
                }
            })
            .await?)
    }

    /// The digest to write for the watch's own choice `tag`, if one is needed. Writing
    /// `image:tag` needs none: the scan's listing of `tag` already proves it exists, so no
    /// manifest request is made. A pinned or followed digest, and a tag the listing does not
    /// hold, go to the registry ([`Self::confirmed_digest`]).
    pub(super) async fn digest_to_write(
        &self,
        ctx: &ScanContext<'_>,
        tag: &str,
    ) -> Result<Option<String>, ReconcileError> {
        let mode = self.watch.spec.digest.unwrap_or_default();
        if mode == DigestMode::Tag
            && let Some(listed) = self.scan.tags.iter().find(|t| t.tag == tag)
        {
            // The digest the listing carried (ECR), if any, costs nothing.
            return Ok(listed.digest.clone());
        }
        self.confirmed_digest(ctx, tag).await.map(Some)
    }

    /// Confirms `tag` exists (never write a tag on a listing's word alone) and returns its
    /// digest.
    pub(super) async fn confirmed_digest(
        &self,
        ctx: &ScanContext<'_>,
        tag: &str,
    ) -> Result<String, ReconcileError> {
        let spec = &self.watch.spec;
        match self.digest(ctx, tag).await? {
            Some(d) => Ok(d),
            None if spec.pin.as_deref() == Some(tag) => Err(ReconcileError::PinnedTagNotFound {
                tag: tag.to_string(),
                image: self.image.clone(),
            }),
            None => Err(ReconcileError::NoMatchingTags(
                NoTag::ListedWithoutManifest {
                    image: self.image.clone(),
                    tag: tag.to_string(),
                },
            )),
        }
    }

    /// `spec.tags.platforms`: `tag` refused when the image of its `digest` lacks a wanted
    /// platform (`None` when it provides them all, or none are wanted). One manifest request
    /// per new digest (and one config blob for a single image), remembered by digest.
    pub(super) async fn platform_refusal(
        &self,
        ctx: &ScanContext<'_>,
        tag: &str,
        digest: &str,
    ) -> Result<Option<crate::signature::Refused>, ReconcileError> {
        let wanted = &self.rules.platforms;
        if wanted.is_empty() {
            return Ok(None);
        }
        let creds = self.registry_api_credentials(ctx).await?;
        let Some(provided) = ctx
            .registry
            .image_platforms(&self.repo, digest, &creds)
            .await?
        else {
            return Err(ReconcileError::NoMatchingTags(
                NoTag::DigestWithoutManifest {
                    image: self.image.clone(),
                    tag: tag.to_string(),
                    digest: digest.to_string(),
                },
            ));
        };
        let missing = imagewatch_engine::platforms::missing(wanted, &provided);
        Ok((!missing.is_empty()).then(|| crate::signature::Refused {
            tag: tag.to_string(),
            digest: digest.to_string(),
            why: crate::signature::Refusal::PlatformMissing {
                missing,
                provided: provided.to_vec(),
            },
        }))
    }

    /// The signature verdict on `digest`, counted in `imagewatch_signature_checks_total`.
    pub(super) async fn verdict(
        &self,
        ctx: &ScanContext<'_>,
        keys: &VerifyKeys,
        digest: &str,
    ) -> Result<crate::signature::Verdict, ReconcileError> {
        let creds = self.registry_api_credentials(ctx).await?;
        let result = crate::signature::fetch::check(
            ctx.registry,
            ctx.signatures,
            &keys.cache_key,
            &self.repo,
            digest,
            &creds,
            &keys.keys,
        )
        .await;
        count_signature_check(
            ctx.metrics,
            "ImageWatch",
            result.as_ref().map_or("error", |v| v.outcome()),
        );
        Ok(result?)
    }

    /// The credentials signatures and manifests are read with: the watch's own, or for ECR
    /// reached through the operator's AWS identity, the registry token that identity is
    /// issued (signatures and manifest bodies are not in the ECR API; the same identity reads
    /// them through the registry API).
    async fn registry_api_credentials(
        &self,
        ctx: &ScanContext<'_>,
    ) -> Result<Credentials, ReconcileError> {
        if !self.rules.use_ecr {
            return Ok(self.rules.creds.clone());
        }
        let creds = ctx.ecr.registry_credentials(&self.repo.registry).await;
        Ok(creds?)
    }
}
