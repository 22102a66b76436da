//! Scan step for Amazon ECR: tags, digests and push times through the ECR API.
//!
//! ECR images are addressed as `<account>.dkr.ecr.<region>.amazonaws.com/<repository>`
//! ([`is_ecr_host`]). Instead of the distribution API (which needs a `docker login` token and
//! knows nothing about push times), [`EcrTagSource`] calls `DescribeImages`, which returns
//! every tag with its manifest digest and `imagePushedAt` in pages of up to 1000 images —
//! what [`Order::Newest`](imagewatch_engine::policy::Order::Newest) needs.
//!
//! # Credentials
//!
//! AWS credentials come from the default chain, loaded once for the process with
//! [`load_aws_config`]: environment variables, IRSA (web identity token file), EKS Pod
//! Identity, the shared profile files, then instance metadata. The watch's pull secret is
//! not used for ECR. One `SdkConfig` is shared by every regional client (and by the SQS
//! consumer), so its identity cache fetches credentials once per expiry for the whole
//! process, however many watches and regions there are.
//!
//! The configuration is loaded on first use ([`LazyAwsConfig`]): a process with no ECR
//! watch, no ECR policy gate and no SQS queue never loads it, so it never asks the EC2
//! instance metadata service anything. The region comes from the ECR host (or the queue URL)
//! before instance metadata is consulted.
//!
//! Endpoint overrides (tests, VPC endpoints, emulators): [`EcrOptions::endpoint_url`], or
//! the SDK's standard `AWS_ENDPOINT_URL_ECR` / `AWS_ENDPOINT_URL` environment variables,
//! which [`load_aws_config`] honours.
//!
//! # Registry API credentials
//!
//! Signatures (cosign's `sha256-<digest>.sig` tags and bundle referrers) are not in
//! `DescribeImages`: they are read through the registry API of the same host, with the
//! Basic credentials `GetAuthorizationToken` issues to the same AWS identity
//! ([`EcrTagSource::registry_credentials`]; what `docker login` to ECR does). Tokens are kept
//! until shortly before they expire.
//!
//! # Pattern watches
//!
//! One rule for many applications (`team/*/api` → `services/$1/overlays/stg`):
//! [`match_pattern`] matches a repository name against a pattern whose path segments may be
//! `*` and returns the captures, [`expand_captures`] fills `$1..$n` into a target path,
//! [`pattern_prefix`] is the literal part to list with [`EcrTagSource::list_repositories`]
//! (all in [`super::repository_pattern`], re-exported here).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_ecr::Client;
use aws_sdk_ecr::config::http::HttpResponse;
use aws_sdk_ecr::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_ecr::operation::describe_images::DescribeImagesError;
use aws_sdk_ecr::types::{
    DescribeImagesFilter, ImageDetail, ImageIdentifier, ImageStatus, TagStatus,
};
use futures::future::BoxFuture;

use super::auth::Credentials;
use super::error::RegistryError;
use super::error::truncate;
use super::reference::{RepositoryRef, is_ecr_host, is_valid_digest, is_valid_tag};
pub use super::repository_pattern::{
    capture_references, expand_captures, match_pattern, pattern_prefix, validate_pattern,
};
use super::source::TagSource;
use imagewatch_engine::policy::TagInfo;

/// `DescribeImages` / `DescribeRepositories` page size (the API maximum).
const PAGE_SIZE: i32 = 1000;

/// Upper bound for one HTTP attempt; a stuck connection must not hold a reconcile forever.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// Upper bound for one operation including the SDK's retries. Listing pages is one
/// operation per page.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(90);

/// Error codes AWS services use for throttling (as classified by the SDK's retry logic).
const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
];

/// Error codes AWS services use for refused or invalid credentials.
const ACCESS_CODES: &[&str] = &[
    "AccessDenied",
    "AccessDeniedException",
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "InvalidClientTokenId",
    "MissingAuthenticationToken",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidAccessKeyId",
    "AuthFailure",
    "UnauthorizedOperation",
];

/// Settings of [`EcrTagSource`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EcrOptions {
    /// Send every ECR request to this URL instead of the regional AWS endpoint (an emulator
    /// such as moto, or a VPC endpoint). `None` keeps what the shared config says, which
    /// includes `AWS_ENDPOINT_URL_ECR` / `AWS_ENDPOINT_URL`.
    pub endpoint_url: Option<String>,
}

/// The HTTPS client of every AWS call (ECR, SQS, and the STS / SSO calls of the credential
/// chain): hyper 1 with rustls on ring, the TLS stack kube and reqwest use, trusting the
/// system roots. The SDK's own default client (rustls on aws-lc) is not compiled in.
pub fn aws_http_client() -> aws_sdk_ecr::config::SharedHttpClient {
    use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// Loads the AWS configuration from the default chain (environment, IRSA web identity,
/// EKS Pod Identity, profile, instance metadata). Call it once per process and share the
/// result between [`EcrTagSource`] and the SQS consumer of the event sources,
/// so both use one credential cache.
///
/// The region: `AWS_REGION` / `AWS_DEFAULT_REGION`, the profile files, then `region_hint`
/// (the region named by an ECR host or a queue URL). Only without a hint does the default
/// chain go on to ask instance metadata.
pub async fn load_aws_config(region_hint: Option<&str>) -> SdkConfig {
    use aws_config::meta::region::RegionProviderChain;
    let loader = aws_config::defaults(BehaviorVersion::latest()).http_client(aws_http_client());
    let loader = match region_hint {
        Some(hint) => loader.region(
            RegionProviderChain::first_try(
                aws_config::environment::EnvironmentVariableRegionProvider::new(),
            )
            .or_else(aws_config::profile::region::ProfileFileRegionProvider::new())
            .or_else(aws_config::Region::new(hint.to_string())),
        ),
        None => loader,
    };
    loader.load().await
}

/// The process's AWS configuration, loaded by the first caller that needs AWS (an ECR watch,
/// an ECR policy gate, the SQS consumer) and then shared. Cheap to clone.
#[derive(Clone, Default)]
pub struct LazyAwsConfig {
    cell: std::sync::Arc<tokio::sync::OnceCell<SdkConfig>>,
}

impl std::fmt::Debug for LazyAwsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyAwsConfig")
            .field("loaded", &self.is_loaded())
            .finish()
    }
}

impl LazyAwsConfig {
    /// Nothing loaded yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// An already loaded configuration (tests, explicit endpoints).
    pub fn loaded(config: SdkConfig) -> Self {
        let cell = tokio::sync::OnceCell::new();
        let _ = cell.set(config);
        Self {
            cell: std::sync::Arc::new(cell),
        }
    }

    /// Whether some caller has loaded the configuration.
    pub fn is_loaded(&self) -> bool {
        self.cell.initialized()
    }

    /// The configuration, loaded now if nobody needed it before; `region_hint` is the
    /// region of what the caller is about to reach (see [`load_aws_config`]).
    pub async fn get(&self, region_hint: Option<&str>) -> SdkConfig {
        self.cell
            .get_or_init(|| async {
                tracing::debug!(
                    region_hint,
                    "loading the AWS configuration (first ECR or SQS use)"
                );
                load_aws_config(region_hint).await
            })
            .await
            .clone()
    }
}

/// [`TagSource`] for Amazon ECR private registries; see the module documentation.
///
/// Cheap to share behind an `Arc`: regional clients are created on first use and kept.
pub struct EcrTagSource {
    aws: LazyAwsConfig,
    options: EcrOptions,
    /// One client per (region, FIPS) pair; they share `sdk_config`'s credential cache.
    clients: Mutex<HashMap<(String, bool), Client>>,
    /// HTTP attempts sent to the ECR API, by endpoint host and outcome.
    requests: RequestCounts,
    /// Registry API credentials by registry host, with the time to fetch new ones.
    tokens: Mutex<HashMap<String, (Credentials, std::time::Instant)>>,
}

/// HTTP requests by (host, outcome), shared with the clients' interceptors.
type RequestCounts = std::sync::Arc<Mutex<HashMap<(String, &'static str), u64>>>;

/// Counts every HTTP attempt of an ECR client (the SDK's own retries included), by the
/// endpoint host it went to and the outcome of its response.
#[derive(Debug)]
struct CountAttempts {
    host: String,
    counts: RequestCounts,
}

impl aws_sdk_ecr::config::Intercept for CountAttempts {
    fn name(&self) -> &'static str {
        "imagewatch-count-attempts"
    }

    fn read_after_attempt(
        &self,
        context: &aws_sdk_ecr::config::interceptors::FinalizerInterceptorContextRef<'_>,
        _components: &aws_sdk_ecr::config::RuntimeComponents,
        _cfg: &mut aws_sdk_ecr::config::ConfigBag,
    ) -> Result<(), aws_sdk_ecr::error::BoxError> {
        let status = context.response().map(|r| r.status().as_u16());
        let outcome = super::distribution::http_outcome(status);
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *counts.entry((self.host.clone(), outcome)).or_default() += 1;
        Ok(())
    }
}

impl std::fmt::Debug for EcrTagSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EcrTagSource")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Where an ECR repository lives, parsed from its registry host.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EcrRegistry {
    host: String,
    account: String,
    region: String,
    fips: bool,
}

impl EcrRegistry {
    fn parse(host: &str) -> Result<Self, RegistryError> {
        let (account, region) = is_ecr_host(host).ok_or_else(|| {
            RegistryError::InvalidReference(format!(
                "{host:?} is not an Amazon ECR registry host (<account>.dkr.ecr.<region>.amazonaws.com)"
            ))
        })?;
        Ok(EcrRegistry {
            host: host.to_ascii_lowercase(),
            fips: host.to_ascii_lowercase().contains(".dkr.ecr-fips."),
            account,
            region,
        })
    }
}

impl EcrTagSource {
    /// A tag source using `sdk_config` (usually from [`load_aws_config`]) for credentials and
    /// settings; the region of each request is taken from the registry host.
    pub fn new(sdk_config: SdkConfig, options: EcrOptions) -> Self {
        Self::lazy(LazyAwsConfig::loaded(sdk_config), options)
    }

    /// A tag source that loads `aws` (shared with the SQS consumer) on its first request.
    pub fn lazy(aws: LazyAwsConfig, options: EcrOptions) -> Self {
        EcrTagSource {
            aws,
            options,
            clients: Mutex::new(HashMap::new()),
            requests: RequestCounts::default(),
            tokens: Mutex::new(HashMap::new()),
        }
    }

    /// HTTP requests sent to the ECR API so far, by endpoint host (`api.ecr.REGION.amazonaws.com`
    /// or the endpoint override) and outcome (cumulative, for the metrics exporter).
    pub fn http_requests(&self) -> Vec<((String, &'static str), u64)> {
        let counts = self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        counts.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// [`EcrTagSource::lazy`] with the default credential chain, loaded on first use.
    pub fn from_env(options: EcrOptions) -> Self {
        Self::lazy(LazyAwsConfig::new(), options)
    }

    /// Whether the AWS configuration has been loaded (by this source or the SQS consumer).
    pub fn aws_loaded(&self) -> bool {
        self.aws.is_loaded()
    }

    /// The ECR client for `registry`'s region, created on first use.
    async fn client(&self, registry: &EcrRegistry) -> Client {
        let sdk_config = self.aws.get(Some(&registry.region)).await;
        let key = (registry.region.clone(), registry.fips);
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        clients
            .entry(key)
            .or_insert_with(|| {
                let mut builder = aws_sdk_ecr::config::Builder::from(&sdk_config)
                    .region(aws_sdk_ecr::config::Region::new(registry.region.clone()))
                    .timeout_config(
                        aws_sdk_ecr::config::timeout::TimeoutConfig::builder()
                            .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                            .operation_timeout(OPERATION_TIMEOUT)
                            .build(),
                    );
                if registry.fips {
                    builder = builder.use_fips(true);
                }
                let host = match &self.options.endpoint_url {
                    Some(url) => url
                        .split("://")
                        .nth(1)
                        .unwrap_or(url)
                        .split('/')
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                    None if registry.fips => format!("ecr-fips.{}.amazonaws.com", registry.region),
                    None => format!("api.ecr.{}.amazonaws.com", registry.region),
                };
                builder = builder.interceptor(CountAttempts {
                    host,
                    counts: self.requests.clone(),
                });
                if let Some(url) = &self.options.endpoint_url {
                    builder = builder.endpoint_url(url);
                }
                tracing::debug!(region = %registry.region, fips = registry.fips, "created ECR client");
                Client::from_conf(builder.build())
            })
            .clone()
    }

    /// Every tag of `repo` with its digest and push time (one [`TagInfo`] per tag, so an
    /// image with several tags appears several times). Archived images are left out: they
    /// cannot be pulled until restored.
    pub async fn list_tags(&self, repo: &RepositoryRef) -> Result<Vec<TagInfo>, RegistryError> {
        let registry = EcrRegistry::parse(&repo.registry)?;
        let client = self.client(&registry).await;
        let mut pages = client
            .describe_images()
            .registry_id(&registry.account)
            .repository_name(&repo.path)
            .filter(
                DescribeImagesFilter::builder()
                    .tag_status(TagStatus::Tagged)
                    .build(),
            )
            .into_paginator()
            .page_size(PAGE_SIZE)
            .send();
        let mut tags = Vec::new();
        let mut dropped = 0usize;
        let mut page_count = 0usize;
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| map_sdk_error(e, &registry, Some(&repo.path)))?;
            page_count += 1;
            for image in page.image_details() {
                dropped += push_tags(image, &mut tags);
            }
        }
        if dropped > 0 {
            tracing::warn!(%repo, dropped, "ECR listed tags that are not valid tag names; ignored them");
        }
        tracing::debug!(%repo, pages = page_count, tags = tags.len(), "listed ECR tags");
        Ok(tags)
    }

    /// Manifest digest of `reference` (a tag, or a digest to confirm) in `repo`;
    /// `Ok(None)` when ECR has no such image.
    pub async fn image_digest(
        &self,
        repo: &RepositoryRef,
        reference: &str,
    ) -> Result<Option<String>, RegistryError> {
        let id = if reference.contains(':') {
            if !is_valid_digest(reference) {
                return Err(invalid_reference(reference));
            }
            ImageIdentifier::builder().image_digest(reference).build()
        } else {
            if !is_valid_tag(reference) {
                return Err(invalid_reference(reference));
            }
            ImageIdentifier::builder().image_tag(reference).build()
        };
        let registry = EcrRegistry::parse(&repo.registry)?;
        let output = self
            .client(&registry)
            .await
            .describe_images()
            .registry_id(&registry.account)
            .repository_name(&repo.path)
            .image_ids(id)
            .send()
            .await;
        let output = match output {
            Ok(output) => output,
            Err(err)
                if matches!(
                    err.as_service_error(),
                    Some(DescribeImagesError::ImageNotFoundException(_))
                ) =>
            {
                return Ok(None);
            }
            Err(err) => return Err(map_sdk_error(err, &registry, Some(&repo.path))),
        };
        Ok(output
            .image_details()
            .iter()
            .filter(|image| is_pullable(image))
            .find_map(|image| image.image_digest())
            .map(str::to_string))
    }

    /// Basic credentials for the registry API of `registry_host` (`AWS` and the token
    /// `GetAuthorizationToken` returns for the registry's account), for what the ECR API does
    /// not serve: signature artifacts. Cached until [`TOKEN_RENEW_BEFORE`] before they expire.
    pub async fn registry_credentials(
        &self,
        registry_host: &str,
    ) -> Result<Credentials, RegistryError> {
        let registry = EcrRegistry::parse(registry_host)?;
        let now = std::time::Instant::now();
        {
            let tokens = self
                .tokens
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((creds, renew_at)) = tokens.get(&registry.host)
                && now < *renew_at
            {
                return Ok(creds.clone());
            }
        }
        #[allow(deprecated)] // registryIds is deprecated but still selects the account's token
        let output = self
            .client(&registry)
            .await
            .get_authorization_token()
            .registry_ids(&registry.account)
            .send()
            .await
            .map_err(|e| map_sdk_error(e, &registry, None))?;
        let data = output.authorization_data().first().ok_or_else(|| {
            RegistryError::Protocol(format!(
                "{}: GetAuthorizationToken returned no authorization data",
                registry.host
            ))
        })?;
        let (creds, lifetime) = decode_authorization(
            data.authorization_token().unwrap_or_default(),
            data.expires_at().map(|t| t.secs()),
            jiff::Timestamp::now().as_second(),
        )
        .map_err(|why| RegistryError::Protocol(format!("{}: {why}", registry.host)))?;
        if let Some(lifetime) = lifetime {
            self.tokens
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(registry.host.clone(), (creds.clone(), now + lifetime));
        }
        Ok(creds)
    }

    /// Names of the repositories in `registry_host` that start with `prefix` (all of them
    /// when `prefix` is empty), sorted. For pattern watches: list with
    /// [`pattern_prefix`], then keep the names [`match_pattern`] accepts.
    pub async fn list_repositories(
        &self,
        registry_host: &str,
        prefix: &str,
    ) -> Result<Vec<String>, RegistryError> {
        let registry = EcrRegistry::parse(registry_host)?;
        let client = self.client(&registry).await;
        let mut pages = client
            .describe_repositories()
            .registry_id(&registry.account)
            .into_paginator()
            .page_size(PAGE_SIZE)
            .send();
        let mut names = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| map_sdk_error(e, &registry, None))?;
            names.extend(
                page.repositories()
                    .iter()
                    .filter_map(|r| r.repository_name())
                    .filter(|name| name.starts_with(prefix))
                    .map(str::to_string),
            );
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// The repositories of `registry_host` matching `pattern`, each with its captures
    /// (see [`match_pattern`]), sorted by name.
    pub async fn matching_repositories(
        &self,
        registry_host: &str,
        pattern: &str,
    ) -> Result<Vec<(String, Vec<String>)>, RegistryError> {
        validate_pattern(pattern).map_err(RegistryError::InvalidReference)?;
        let names = self
            .list_repositories(registry_host, pattern_prefix(pattern))
            .await?;
        Ok(names
            .into_iter()
            .filter_map(|name| match_pattern(pattern, &name).map(|captures| (name, captures)))
            .collect())
    }
}

impl TagSource for EcrTagSource {
    /// `creds` are ignored: ECR is accessed with the process's AWS identity.
    fn list<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        _creds: &'a Credentials,
    ) -> BoxFuture<'a, Result<Vec<TagInfo>, RegistryError>> {
        Box::pin(self.list_tags(repo))
    }

    fn digest<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        reference: &'a str,
        _creds: &'a Credentials,
    ) -> BoxFuture<'a, Result<Option<String>, RegistryError>> {
        Box::pin(self.image_digest(repo, reference))
    }
}

/// How long before its expiry a registry token is replaced.
pub const TOKEN_RENEW_BEFORE: Duration = Duration::from_secs(15 * 60);

/// The credentials in an ECR authorization token (base64 of `user:password`) and how long to
/// keep them: until [`TOKEN_RENEW_BEFORE`] before `expires_at` (seconds since the epoch),
/// `None` when that is already past or unknown (pure).
fn decode_authorization(
    token: &str,
    expires_at: Option<i64>,
    now: i64,
) -> Result<(Credentials, Option<Duration>), String> {
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .map_err(|_| "GetAuthorizationToken returned a token that is not base64".to_string())?;
    let text = String::from_utf8(decoded)
        .map_err(|_| "GetAuthorizationToken returned a token that is not text".to_string())?;
    let (user, password) = text
        .split_once(':')
        .filter(|(user, password)| !user.is_empty() && !password.is_empty())
        .ok_or_else(|| {
            "GetAuthorizationToken returned a token without user:password".to_string()
        })?;
    let lifetime = expires_at
        .and_then(|at| u64::try_from(at - now).ok())
        .map(Duration::from_secs)
        .and_then(|left| left.checked_sub(TOKEN_RENEW_BEFORE))
        .filter(|keep| !keep.is_zero());
    Ok((Credentials::basic(user, password), lifetime))
}

fn invalid_reference(reference: &str) -> RegistryError {
    RegistryError::InvalidReference(format!(
        "{reference:?} is neither a valid tag nor a valid digest"
    ))
}

/// Archived (or still restoring) images are listed by ECR but cannot be pulled.
fn is_pullable(image: &ImageDetail) -> bool {
    matches!(image.image_status(), None | Some(ImageStatus::Active))
}

/// Appends one [`TagInfo`] per valid tag of `image`; returns how many tags were invalid.
fn push_tags(image: &ImageDetail, out: &mut Vec<TagInfo>) -> usize {
    if !is_pullable(image) {
        return 0;
    }
    let digest = image
        .image_digest()
        .filter(|d| is_valid_digest(d))
        .map(str::to_string);
    let pushed_at = image.image_pushed_at().and_then(|t| {
        jiff::Timestamp::new(t.secs(), i32::try_from(t.subsec_nanos()).unwrap_or(0)).ok()
    });
    let mut dropped = 0;
    for tag in image.image_tags() {
        if !is_valid_tag(tag) {
            dropped += 1;
            continue;
        }
        out.push(TagInfo {
            tag: tag.clone(),
            digest: digest.clone(),
            pushed_at,
        });
    }
    dropped
}

/// Turns an SDK error into a [`RegistryError`], keeping AWS's code and message.
fn map_sdk_error<E>(
    err: SdkError<E, HttpResponse>,
    registry: &EcrRegistry,
    repository: Option<&str>,
) -> RegistryError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let host = registry.host.clone();
    match &err {
        SdkError::ServiceError(ctx) => {
            let status = ctx.raw().status().as_u16();
            let code = ctx.err().code().unwrap_or("");
            let text = ctx.err().message().unwrap_or("");
            let message = truncate(&match (code.is_empty(), text.is_empty()) {
                (false, false) => format!("{code}: {text}"),
                (false, true) => code.to_string(),
                (true, false) => text.to_string(),
                (true, true) => format!("HTTP {status} without an error message"),
            });
            if code == "RepositoryNotFoundException"
                && let Some(repository) = repository
            {
                RegistryError::NotFound {
                    registry: host,
                    repository: repository.to_string(),
                    message,
                }
            } else if status == 429 || THROTTLING_CODES.contains(&code) {
                RegistryError::RateLimited {
                    registry: host,
                    retry_after: None,
                    message,
                }
            } else if status == 401 || status == 403 || ACCESS_CODES.contains(&code) {
                RegistryError::Unauthorized {
                    registry: host,
                    message,
                }
            } else if code == "InvalidParameterException" {
                RegistryError::InvalidReference(format!("{host}: {message}"))
            } else {
                RegistryError::Server {
                    registry: host,
                    status,
                    message,
                }
            }
        }
        SdkError::TimeoutError(_) => RegistryError::Transport(format!(
            "ECR in {} timed out: {}",
            registry.region,
            DisplayErrorContext(&err)
        )),
        SdkError::DispatchFailure(failure) => {
            let text = DisplayErrorContext(&err).to_string();
            // Credential resolution happens while dispatching; a provider that cannot produce
            // credentials is a configuration problem, not a network one (unless it timed out).
            if failure.is_other()
                && text.contains("credentials")
                && !failure.is_timeout()
                && !text.contains("timed out")
            {
                RegistryError::InvalidCredentials(format!(
                    "cannot load AWS credentials for ECR in {}: {}",
                    registry.region,
                    truncate(&text)
                ))
            } else {
                RegistryError::Transport(format!("ECR in {}: {}", registry.region, truncate(&text)))
            }
        }
        SdkError::ResponseError(_) => RegistryError::Protocol(format!(
            "unreadable ECR response from {}: {}",
            registry.region,
            truncate(&DisplayErrorContext(&err).to_string())
        )),
        _ => RegistryError::Protocol(format!(
            "cannot send the ECR request to {}: {}",
            registry.region,
            truncate(&DisplayErrorContext(&err).to_string())
        )),
    }
}

#[cfg(test)]
#[path = "ecr_tests.rs"]
mod moto_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_parsing() {
        let r = EcrRegistry::parse("123456789012.dkr.ecr.eu-west-1.amazonaws.com").unwrap();
        assert_eq!(
            (r.account.as_str(), r.region.as_str(), r.fips),
            ("123456789012", "eu-west-1", false)
        );
        let r = EcrRegistry::parse("123456789012.dkr.ecr-fips.us-east-1.amazonaws.com").unwrap();
        assert!(r.fips);
        let err = EcrRegistry::parse("ghcr.io").unwrap_err();
        assert_eq!(err.category(), "invalid_reference");
    }
}
