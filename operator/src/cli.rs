//! Command-line interface: `imagewatch run`, `imagewatch crds`, `imagewatch set-image`,
//! `imagewatch import`, `imagewatch explain`, `imagewatch test`.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};

use crate::{
    config::{
        AuthorConfig, Config, ControllersConfig, KubeConfig, PromotionConfig, RegistryConfig,
        ScanConfig, ShardConfig, SourcesConfig, SqsConfig, TelemetryConfig, WebhookConfig,
        WriterConfig,
    },
    manifests::{self, ImageChange, TargetSpec, WorkloadTarget},
};

/// Moves new container image tags into GitOps manifest repositories.
///
/// Run it in the cluster (`imagewatch run`, usually from the Helm chart), or use the same edit
/// engine from CI (`imagewatch set-image`).
#[derive(Parser, Debug)]
#[command(name = "imagewatch", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the controller: watch ImageWatch objects and commit new tags to Git.
    Run(Box<RunArgs>),
    /// Print the CustomResourceDefinitions (ImageWatch, PromotionPolicy) as YAML.
    Crds(CrdsArgs),
    /// Set an image in files on disk (offline; for CI and humans).
    ///
    /// Targets: a workload container (--path DIR --workload KIND/NAME --container C), a
    /// kustomization images entry (--kustomize DIR --name IMAGE), a Helm values key
    /// (--helm-values FILE --key image.tag), an Argo CD source file (--argocd-source DIR
    /// --application APP --name IMAGE) or setter markers (--setter DIR --marker NS:NAME).
    ///
    /// Example: imagewatch set-image --path apps/my-api/overlays/stg --workload Deployment/my-api
    /// --container my-api --tag v1.2.4
    SetImage(Box<SetImageArgs>),
    /// Print ImageWatch objects for configuration written for another tool, and report (on
    /// standard error) what could not be translated and why.
    ///
    /// Reads Flux v1 workload annotations, Flux ImageRepository + ImagePolicy objects and
    /// their setter markers, Argo CD Image Updater annotations and ImageUpdater objects, and
    /// Keel policies, from a directory of manifests and/or the cluster.
    ///
    /// Example: imagewatch import ./manifests > watches.yaml
    Import(ImportArgs),
    /// Say what an ImageWatch or PromotionPolicy did and why: the tags considered and the
    /// rule that refused each newer one, the tag chosen, what Git holds, what would be
    /// written next, the last error, the next check and the last changes.
    ///
    /// Reads the object with your kubeconfig and RBAC only. Installed as kubectl-imagewatch,
    /// this is `kubectl imagewatch explain`.
    ///
    /// Example: imagewatch explain shop/api --tag v1.4.3
    Explain(crate::explain::ExplainArgs),
    /// List an image's tags with your Docker credentials and print what a watch with these
    /// tag rules would choose, and why each tag ranked above it would not be.
    ///
    /// Example: imagewatch test --image ghcr.io/org/app --pattern 'v*' --exclude '*-rc*'
    Test(crate::explain::TestArgs),
}

/// Log output format.
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl From<LogFormat> for crate::config::LogFormat {
    fn from(format: LogFormat) -> Self {
        match format {
            LogFormat::Text => Self::Text,
            LogFormat::Json => Self::Json,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, env = "IMAGEWATCH_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Directory for the persistent bare clones of manifest repositories.
    #[arg(
        long,
        env = "IMAGEWATCH_CACHE_DIR",
        default_value = "/var/cache/imagewatch"
    )]
    pub cache_dir: PathBuf,
    /// Registry host[:port] reached over plain HTTP instead of HTTPS (repeatable).
    #[arg(
        long = "insecure-registry",
        env = "IMAGEWATCH_INSECURE_REGISTRIES",
        value_delimiter = ','
    )]
    pub insecure_registries: Vec<String>,
    /// Commit author name.
    #[arg(long, env = "IMAGEWATCH_GIT_AUTHOR_NAME", default_value = "imagewatch")]
    pub git_author_name: String,
    /// Commit author email.
    #[arg(
        long,
        env = "IMAGEWATCH_GIT_AUTHOR_EMAIL",
        default_value = "imagewatch@noreply.imagewatch.dev"
    )]
    pub git_author_email: String,
    /// Only watch objects in these namespaces, comma-separated (default: all namespaces).
    /// With a list, nothing is read at cluster scope (the chart's `watchNamespaces` grants a
    /// Role per namespace).
    #[arg(
        long = "namespace",
        env = "IMAGEWATCH_NAMESPACE",
        value_delimiter = ','
    )]
    pub namespaces: Vec<String>,
    /// ConfigMap (in the operator's namespace) whose `allow.yaml` says which Git
    /// repositories, paths, registries and cloud identity each namespace may use; re-read when
    /// it changes. Unset: everything is allowed. Set but missing or invalid: nothing is.
    #[arg(long, env = "IMAGEWATCH_ALLOW_LIST_CONFIGMAP")]
    pub allow_list_configmap: Option<String>,
    /// ConfigMap (in the operator's namespace) whose keys freeze writing: `cluster` for every
    /// object, `namespace.<name>` for one namespace; the value is the reason shown in status.
    /// Followed as it changes; unset: no freeze can be set.
    #[arg(long, env = "IMAGEWATCH_FREEZE_CONFIGMAP")]
    pub freeze_configmap: Option<String>,
    /// Log format.
    #[arg(long, env = "IMAGEWATCH_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Retries of a rejected (non-fast-forward) push before giving up for this round.
    #[arg(long, env = "IMAGEWATCH_PUSH_ATTEMPTS", default_value_t = 5)]
    pub push_attempts: u32,
    /// Intents for one repository and branch that arrive within this time after the first
    /// become one commit, e.g. 1s.
    #[arg(long, env = "IMAGEWATCH_BATCH_WINDOW", default_value = "1s", value_parser = parse_duration_arg)]
    pub batch_window: Duration,
    /// A batch is written early when no further edit arrived for this long.
    #[arg(long, env = "IMAGEWATCH_BATCH_QUIET", default_value = "20ms", value_parser = parse_duration_arg)]
    pub batch_quiet: Duration,
    /// A check that changes nothing may read the branch as fetched up to this long ago
    /// instead of fetching again; any edit is still planned and committed on a fresh fetch.
    /// 0s: fetch for every check.
    #[arg(long, env = "IMAGEWATCH_GIT_READ_REUSE", default_value = "30s", value_parser = parse_duration_arg)]
    pub git_read_reuse: Duration,
    /// Commit message template. Placeholders: {{subject}}, {{changes}}, {{count}},
    /// {{watches}}, {{files}}, {{branch}}; `\n` is a newline.
    #[arg(
        long,
        env = "IMAGEWATCH_COMMIT_TEMPLATE",
        default_value = crate::writer::DEFAULT_COMMIT_TEMPLATE,
        value_parser = check_commit_template
    )]
    pub commit_template: String,
    /// Sign commits with this key file, told apart by its content: an OpenSSH private key
    /// (SSH signatures, as git makes with `gpg.format = ssh`) or an ASCII-armored OpenPGP
    /// secret key (`-----BEGIN PGP PRIVATE KEY BLOCK-----`; OpenPGP signatures, as git makes
    /// with gpg). The key must not have a passphrase.
    #[arg(long, env = "IMAGEWATCH_SIGNING_KEY")]
    pub signing_key: Option<PathBuf>,
    /// Test hook: abort the process at this point of a git write (after-fetch, after-commit,
    /// before-push, mid-push, after-push). Only in builds with the `test-hooks` feature.
    #[cfg(feature = "test-hooks")]
    #[arg(long, env = "IMAGEWATCH_TEST_CRASH_POINT", hide = true, value_parser = parse_write_point)]
    pub test_crash_point: Option<crate::git::WritePoint>,
    /// After a PromotionPolicy is deleted, how long closing its pull request is retried before
    /// its finalizer is removed anyway (the pull request is then left open).
    #[arg(long, env = "IMAGEWATCH_PULL_REQUEST_CLOSE_TIMEOUT", hide = true, default_value = "5m", value_parser = parse_duration_arg)]
    pub pull_request_close_timeout: Duration,
    /// On SIGTERM, how long in-flight reconciles and Git batches may take to finish before
    /// they are abandoned (their Leases are then left to expire). Keep it below the Pod's
    /// terminationGracePeriodSeconds (the chart sets it 10 s below).
    #[arg(long, env = "IMAGEWATCH_SHUTDOWN_TIMEOUT", default_value = "50s", value_parser = parse_duration_arg)]
    pub shutdown_timeout: Duration,
    /// Address of the registry webhook receiver (`/hooks/*`); unset: no receiver.
    #[arg(long, env = "IMAGEWATCH_WEBHOOK_ADDR")]
    pub webhook_addr: Option<SocketAddr>,
    /// Secret (in the operator's namespace) with webhook tokens and signing secrets:
    /// distribution-token, dockerhub-token, ghcr-secret, harbor-token, quay-token,
    /// generic-secret. A provider without a key is disabled.
    #[arg(
        long,
        env = "IMAGEWATCH_WEBHOOK_SECRET",
        default_value = "imagewatch-webhooks"
    )]
    pub webhook_secret: String,
    /// Host name watches use for the CNCF distribution registry that sends notifications,
    /// when it differs from the Host header pushers use.
    #[arg(long, env = "IMAGEWATCH_DISTRIBUTION_HOST")]
    pub distribution_host: Option<String>,
    /// Largest webhook body accepted, in bytes.
    #[arg(long, env = "IMAGEWATCH_WEBHOOK_BODY_LIMIT", default_value_t = 1024 * 1024)]
    pub webhook_body_limit: usize,
    /// The operator's own namespace (webhook Secret, leases); from the Downward API.
    #[arg(long, env = "POD_NAMESPACE", default_value = "imagewatch-system")]
    pub pod_namespace: String,
    /// SQS queue receiving EventBridge "ECR Image Action" events (the pull-based path for
    /// clusters that cannot accept inbound webhooks); unset: no SQS consumer.
    #[arg(long, env = "IMAGEWATCH_SQS_QUEUE_URL")]
    pub sqs_queue_url: Option<String>,
    /// AWS account assumed for events that do not name one.
    #[arg(long, env = "IMAGEWATCH_SQS_DEFAULT_ACCOUNT")]
    pub sqs_default_account: Option<String>,
    /// Send ECR and SQS requests to this endpoint (VPC endpoints, emulators).
    #[arg(long, env = "IMAGEWATCH_AWS_ENDPOINT_URL")]
    pub aws_endpoint_url: Option<String>,
    /// Namespace of Argo CD's Applications (for watches without spec.git).
    #[arg(long, env = "IMAGEWATCH_ARGOCD_NAMESPACE", default_value = "argocd")]
    pub argocd_namespace: String,
    /// After a commit, ask the Argo CD Applications (of --argocd-namespace, serving the
    /// watch's namespace) that deploy the changed file to refresh, and follow them until they
    /// run it (condition Deployed). false: no Application is watched or patched.
    #[arg(long, env = "IMAGEWATCH_ARGOCD_REFRESH", default_value_t = true, action = clap::ArgAction::Set)]
    pub argocd_refresh: bool,
    /// How long a commit is followed before Deployed turns NotDeployed.
    #[arg(long, env = "IMAGEWATCH_ARGOCD_DEPLOY_TIMEOUT", default_value = "10m", value_parser = parse_duration_arg)]
    pub argocd_deploy_timeout: Duration,
    /// Per-registry settings (plain HTTP, extra CA, rate limits, metadata budget), JSON or
    /// YAML: `{"registries": {"host:port": {"insecure": true, "ratePerSecond": 5}}}`.
    #[arg(long, env = "IMAGEWATCH_REGISTRIES_CONFIG")]
    pub registries_config: Option<PathBuf>,
    /// Tags kept per repository scan (the newest ones).
    #[arg(long, env = "IMAGEWATCH_MAX_TAGS", default_value_t = 1000)]
    pub max_tags: usize,
    /// Reconciles doing registry and API work at once (per resource kind). Bounds memory and
    /// the load on the API server and registries when many watches wake together (start,
    /// shard takeover). An ImageWatch reconcile waiting for its commit to be pushed holds no
    /// slot: up to 8 times this many reconciles run at once, those beyond it waiting for a
    /// slot or for their push.
    #[arg(
        long,
        env = "IMAGEWATCH_MAX_CONCURRENT_RECONCILES",
        default_value_t = 32
    )]
    pub max_concurrent_reconciles: u16,
    /// Split the work over replicas in this many shards (by Git repository), each held by a
    /// coordination.k8s.io Lease in the operator's namespace. 0: no sharding (one replica
    /// does everything; run a single replica).
    #[arg(long, env = "IMAGEWATCH_SHARDS", default_value_t = 0)]
    pub shards: u32,
    /// Lease duration of a shard: a replica that stopped renewing loses its shards after this
    /// long, e.g. 15s.
    #[arg(long, env = "IMAGEWATCH_LEASE_DURATION", default_value = "15s", value_parser = parse_duration_arg)]
    pub lease_duration: Duration,
    /// Prefix of the Lease names (and of the peer token Secret), e.g. the release name.
    #[arg(long, env = "IMAGEWATCH_LEASE_PREFIX", default_value = "imagewatch")]
    pub lease_prefix: String,
    /// This replica's identity on the Leases; from the Downward API.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// URL other replicas forward registry events to (this replica's metrics server, e.g.
    /// http://10.0.0.5:8080); unset: events received by another replica are not forwarded here.
    #[arg(long, env = "IMAGEWATCH_PEER_URL")]
    pub peer_url: Option<String>,
    /// Timeout of one registry request, e.g. 30s.
    #[arg(long, env = "IMAGEWATCH_REGISTRY_TIMEOUT", default_value = "30s", value_parser = parse_duration_arg)]
    pub registry_timeout: Duration,
}

impl RunArgs {
    /// The namespaces to watch, without blanks or repeats (empty: all namespaces).
    pub fn watched_namespaces(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for ns in self.namespaces.iter().map(|n| n.trim()) {
            if !ns.is_empty() && !out.iter().any(|o| o == ns) {
                out.push(ns.to_string());
            }
        }
        out
    }

    /// The configuration these flags give. Every value was checked while parsing (durations,
    /// the commit template, the write point), so nothing is left to refuse here.
    pub fn into_config(self) -> Config {
        let namespaces = self.watched_namespaces();
        let author = AuthorConfig {
            name: self.git_author_name,
            email: self.git_author_email,
        };
        Config {
            kube: KubeConfig {
                namespaces: namespaces.clone(),
                pod_namespace: self.pod_namespace.clone(),
            },
            controllers: ControllersConfig {
                max_concurrent_reconciles: self.max_concurrent_reconciles,
                allow_list_configmap: self.allow_list_configmap,
                freeze_configmap: self.freeze_configmap,
                argocd_namespace: self.argocd_namespace,
                argocd_refresh: self.argocd_refresh,
                argocd_deploy_timeout: self.argocd_deploy_timeout,
            },
            sources: SourcesConfig {
                webhook: self.webhook_addr.map(|addr| WebhookConfig {
                    addr,
                    secret_namespace: self.pod_namespace.clone(),
                    secret_name: self.webhook_secret,
                    distribution_host: self.distribution_host,
                    body_limit: self.webhook_body_limit,
                }),
                sqs: self.sqs_queue_url.map(|queue_url| SqsConfig {
                    queue_url,
                    default_account: self.sqs_default_account,
                    endpoint_url: self.aws_endpoint_url.clone(),
                }),
            },
            registry: RegistryConfig {
                insecure_registries: self.insecure_registries,
                registries_config: self.registries_config,
                timeout: self.registry_timeout,
                ecr_endpoint_url: self.aws_endpoint_url,
            },
            scan: ScanConfig {
                max_tags: self.max_tags,
            },
            writer: WriterConfig {
                cache_dir: self.cache_dir.clone(),
                author: author.clone(),
                push_attempts: self.push_attempts,
                batch_window: self.batch_window,
                batch_quiet: self.batch_quiet,
                read_reuse: self.git_read_reuse,
                commit_template: self.commit_template,
                signing_key: self.signing_key,
                #[cfg(feature = "test-hooks")]
                crash_point: self.test_crash_point.map(|p| p.name().to_string()),
            },
            promotion: PromotionConfig {
                namespaces,
                concurrency: self.max_concurrent_reconciles,
                pull_request_close_timeout: self.pull_request_close_timeout,
            },
            shard: ShardConfig {
                shards: self.shards,
                lease_duration: self.lease_duration,
                lease_prefix: self.lease_prefix,
                namespace: self.pod_namespace,
                identity: self.identity,
                peer_url: self.peer_url,
            },
            telemetry: TelemetryConfig {
                metrics_addr: self.metrics_addr,
                log_format: self.log_format.into(),
            },
            shutdown_timeout: self.shutdown_timeout,
        }
    }
}

impl From<RunArgs> for Config {
    fn from(args: RunArgs) -> Self {
        args.into_config()
    }
}

#[derive(Args, Debug)]
pub struct CrdsArgs {
    /// Write one file per CRD into this directory instead of printing them.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
}

/// Exactly one target form is given: `--path` (workload), `--kustomize`, `--helm-values`,
/// `--argocd-source` or `--setter`, each with its own companion options.
#[derive(Args, Debug)]
#[command(group(
    ArgGroup::new("target")
        .required(true)
        .multiple(false)
        .args(["path", "kustomize", "helm_values", "argocd_source", "setter"])
))]
pub struct SetImageArgs {
    /// Workload target: directory searched recursively for YAML files (or one file).
    #[arg(long, requires_all = ["workload", "container"])]
    pub path: Option<PathBuf>,
    /// The workload, as KIND/NAME (e.g. Deployment/my-api). With --path.
    #[arg(long, requires = "path")]
    pub workload: Option<String>,
    /// Container (or initContainer) name. With --path.
    #[arg(long, requires = "path")]
    pub container: Option<String>,
    /// Workload namespace, when two documents share kind and name. With --path.
    #[arg(long, requires = "path")]
    pub namespace: Option<String>,
    /// Kustomize target: directory of the kustomization whose `images:` entry --name is set.
    #[arg(long, requires = "name")]
    pub kustomize: Option<PathBuf>,
    /// Helm target: values file whose --key is set.
    #[arg(long, requires = "key")]
    pub helm_values: Option<PathBuf>,
    /// Dotted key path in the values file, e.g. image.tag or sidecars[0].image.tag.
    #[arg(long, requires = "helm_values")]
    pub key: Option<String>,
    /// Argo CD target: the Application's source directory, holding
    /// .argocd-source-<APP>.yaml (created when missing).
    #[arg(long, requires_all = ["application", "name"])]
    pub argocd_source: Option<PathBuf>,
    /// Argo CD Application name. With --argocd-source.
    #[arg(long, requires = "argocd_source")]
    pub application: Option<String>,
    /// Image name as the kustomization knows it. With --kustomize or --argocd-source.
    #[arg(long, conflicts_with_all = ["path", "helm_values", "setter"])]
    pub name: Option<String>,
    /// Setter target: directory searched recursively for values marked
    /// `# {"$imagewatch": "<namespace>:<name>"}` (or `…:tag`, `…:name`).
    #[arg(long, requires = "marker")]
    pub setter: Option<PathBuf>,
    /// The marker, as NAMESPACE:NAME. With --setter.
    #[arg(long, requires = "setter")]
    pub marker: Option<String>,
    /// New tag: replaces the tag and drops a digest that belonged to the old tag.
    #[arg(long, conflicts_with = "image", required_unless_present = "image")]
    pub tag: Option<String>,
    /// New image reference, written exactly as given.
    #[arg(long)]
    pub image: Option<String>,
    /// Also edit a value that is a YAML anchor other places alias (`&img` ... `*img`),
    /// changing every one of them. Without it such an edit is refused, naming them.
    #[arg(long)]
    pub edit_shared_anchor: bool,
}

#[derive(Args, Debug)]
#[command(group(
    ArgGroup::new("from")
        .required(true)
        .multiple(true)
        .args(["dir", "from_cluster"])
))]
pub struct ImportArgs {
    /// Directory of manifests (a checkout of the GitOps repository), read recursively;
    /// target paths are relative to it.
    pub dir: Option<PathBuf>,
    /// Also read the same kinds from the cluster of the current kubeconfig (all namespaces).
    #[arg(long)]
    pub from_cluster: bool,
    /// Namespace of every generated watch (default: the namespace of its source).
    #[arg(long)]
    pub namespace: Option<String>,
    /// spec.git.url of watches whose source does not name a Git repository.
    #[arg(long)]
    pub git_url: Option<String>,
    /// spec.git.branch, with --git-url.
    #[arg(long, requires = "git_url")]
    pub git_branch: Option<String>,
    /// Rewrite, in the files under DIR, each Flux setter marker that a generated watch now
    /// writes into an imagewatch marker naming that watch (for `set-image --setter`).
    #[arg(long, requires = "dir")]
    pub rewrite_markers: bool,
}

/// Parses durations such as `30s`, `5m`, `1h30m`, `250ms`.
pub fn parse_duration_arg(text: &str) -> Result<Duration, String> {
    crate::controllers::parse_duration(text)
        .ok_or_else(|| format!("invalid duration {text:?} (use e.g. 30s, 5m, 1h)"))
}

/// Checks `--commit-template` (the writer parses it again from the configuration).
pub fn check_commit_template(text: &str) -> Result<String, String> {
    crate::writer::CommitTemplate::parse(text)
        .map(|_| text.to_string())
        .map_err(|e| e.to_string())
}

#[cfg(feature = "test-hooks")]
fn parse_write_point(text: &str) -> Result<crate::git::WritePoint, String> {
    crate::git::WritePoint::from_name(text).ok_or_else(|| {
        let names: Vec<&str> = crate::git::WritePoint::ALL
            .iter()
            .map(|p| p.name())
            .collect();
        format!("unknown write point {text:?} (one of {})", names.join(", "))
    })
}

/// `imagewatch crds`.
pub fn crds(args: &CrdsArgs) -> ExitCode {
    let crds = imagewatch_crd::crds();
    let mut docs = Vec::new();
    for crd in &crds {
        match imagewatch_crd::render_crd_yaml(crd) {
            Ok(text) => docs.push((imagewatch_crd::crd_file_name(crd), text)),
            Err(e) => {
                eprintln!("error: cannot render CRD: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    match &args.out_dir {
        Some(dir) => {
            for (name, text) in docs {
                let path = dir.join(&name);
                if let Err(e) = std::fs::write(&path, text) {
                    eprintln!("error: cannot write {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
                println!("wrote {}", path.display());
            }
        }
        None => {
            let all: Vec<String> = docs.into_iter().map(|(_, t)| t).collect();
            print!("{}", all.join("---\n"));
        }
    }
    ExitCode::SUCCESS
}

/// `imagewatch set-image`: exit 0 when the image was set or already current, 1 when the
/// target is missing or ambiguous or the files cannot be edited (nothing is written then),
/// 2 for malformed arguments.
pub fn set_image(args: &SetImageArgs) -> ExitCode {
    let change = match (&args.tag, &args.image) {
        (Some(tag), _) => ImageChange::Tag(tag.clone()),
        (None, Some(image)) => ImageChange::Image(image.clone()),
        (None, None) => {
            eprintln!("error: one of --tag or --image is required");
            return ExitCode::from(2);
        }
    };
    let options = manifests::EditOptions {
        edit_shared_anchor: args.edit_shared_anchor,
    };
    let result = match set_image_target(args) {
        Ok(SetImageTarget::Workload(path, target)) => {
            crate::setimage::set_image_with(&path, &target, &change, options)
                .map(|outcome| (outcome.warnings.clone(), outcome.to_string()))
        }
        Ok(SetImageTarget::Other(root, target)) => {
            crate::setimage::set_target_with(&root, &target, &change, options)
                .map(|outcome| (outcome.warnings.clone(), outcome.to_string()))
        }
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok((warnings, report)) => {
            for warning in &warnings {
                eprintln!("warning: {warning}");
            }
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The target of `set-image`, with the directory its paths are relative to.
enum SetImageTarget {
    Workload(PathBuf, WorkloadTarget),
    Other(PathBuf, TargetSpec),
}

fn set_image_target(args: &SetImageArgs) -> Result<SetImageTarget, String> {
    let required = |value: &Option<String>, flag: &str| {
        value
            .clone()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("{flag} must not be empty"))
    };
    if let Some(path) = &args.path {
        let workload = required(&args.workload, "--workload")?;
        let Some((kind, name)) = workload.split_once('/') else {
            return Err(format!(
                "--workload must be KIND/NAME, e.g. Deployment/my-api (got {workload:?})"
            ));
        };
        let target = WorkloadTarget {
            kind: kind.to_string(),
            name: name.to_string(),
            container: required(&args.container, "--container")?,
            namespace: args.namespace.clone(),
        };
        return Ok(SetImageTarget::Workload(path.clone(), target));
    }
    if let Some(dir) = &args.kustomize {
        let image = required(&args.name, "--name")?;
        return Ok(SetImageTarget::Other(
            dir.clone(),
            TargetSpec::Kustomize {
                path: String::new(),
                image,
            },
        ));
    }
    if let Some(file) = &args.helm_values {
        let name = file
            .file_name()
            .ok_or_else(|| format!("--helm-values must name a file (got {})", file.display()))?
            .to_string_lossy()
            .into_owned();
        let root = file.parent().map(PathBuf::from).unwrap_or_default();
        return Ok(SetImageTarget::Other(
            root,
            TargetSpec::Helm {
                file: name,
                key: required(&args.key, "--key")?,
            },
        ));
    }
    if let Some(dir) = &args.argocd_source {
        let application = required(&args.application, "--application")?;
        if application.contains(['/', '\\']) {
            return Err(format!(
                "--application must be an Application name (got {application:?})"
            ));
        }
        return Ok(SetImageTarget::Other(
            dir.clone(),
            TargetSpec::ArgocdSource {
                path: String::new(),
                application,
                image: required(&args.name, "--name")?,
            },
        ));
    }
    if let Some(dir) = &args.setter {
        return Ok(SetImageTarget::Other(
            dir.clone(),
            TargetSpec::Setter {
                path: String::new(),
                marker: required(&args.marker, "--marker")?,
            },
        ));
    }
    Err("give one of --path, --kustomize, --helm-values, --argocd-source or --setter".into())
}

/// `imagewatch import`: the watches on standard output, the report on standard error. Exit 0
/// when everything could be read (notes do not change it), 1 when a directory, the cluster or
/// a file to rewrite could not be read or written.
pub fn import(args: &ImportArgs) -> ExitCode {
    use crate::import;
    let mut inputs = import::Inputs::default();
    let mut read_notes = import::Imported::default();
    if let Some(dir) = &args.dir
        && let Err(e) = import::load::read_dir(dir, &mut inputs, &mut read_notes)
    {
        eprintln!("error: cannot read {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    if args.from_cluster {
        let listed = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
            .and_then(|runtime| {
                runtime.block_on(async {
                    let client = kube::Client::try_default()
                        .await
                        .map_err(|e| format!("no cluster: {e}"))?;
                    import::load::read_cluster(client, &mut inputs, &mut read_notes)
                        .await
                        .map_err(|e| e.to_string())
                })
            });
        if let Err(e) = listed {
            eprintln!("error: cannot list the cluster's objects: {e}");
            return ExitCode::FAILURE;
        }
    }
    let options = import::Options {
        namespace: args.namespace.clone(),
        git: args.git_url.clone().map(|url| imagewatch_crd::GitSource {
            url,
            branch: args.git_branch.clone(),
            secret_ref: None,
            push_branch: None,
            pull_request: None,
        }),
    };
    let mut imported = import::translate(&inputs, &options);
    imported.notes.extend(read_notes.notes);
    let yaml = match import::render(&imported.watches) {
        Ok(yaml) => yaml,
        Err(e) => {
            eprintln!("error: cannot render the watches: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{yaml}");
    eprint!("{}", import::render_report(&imported));
    if let (true, Some(dir)) = (args.rewrite_markers, &args.dir) {
        for (file, lines) in import::marker_rewrites(&inputs, &imported) {
            let path = dir.join(&file);
            let rewritten = std::fs::read_to_string(&path)
                .map(|text| import::rewrite_markers(&text, &lines))
                .and_then(|new| match new {
                    Some(new) => std::fs::write(&path, new).map(|()| true),
                    None => Ok(false),
                });
            match rewritten {
                Ok(true) => eprintln!("rewrote markers in {file}"),
                Ok(false) => {}
                Err(e) => {
                    eprintln!("error: cannot rewrite {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_config(flags: &[&str]) -> Config {
        let argv = ["imagewatch", "run"].iter().chain(flags);
        match Cli::try_parse_from(argv).expect("flags parse").command {
            Command::Run(args) => args.into_config(),
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn flags_become_each_subsystems_part_of_the_config() {
        let config = run_config(&[
            "--namespace=team-a, team-b,team-a,",
            "--pod-namespace=ops",
            "--cache-dir=/tmp/iw",
            "--git-author-name=bot",
            "--git-author-email=bot@example.com",
            "--push-attempts=3",
            "--max-concurrent-reconciles=0",
            "--webhook-addr=127.0.0.1:9000",
            "--webhook-secret=hooks",
            "--sqs-queue-url=https://sqs.us-east-1.amazonaws.com/1/q",
            "--aws-endpoint-url=http://127.0.0.1:5000",
            "--shards=4",
            "--batch-window=2s",
            "--commit-template={{subject}}",
            "--log-format=json",
        ]);
        assert_eq!(config.kube.namespaces, ["team-a", "team-b"]);
        assert_eq!(config.promotion.namespaces, config.kube.namespaces);
        assert_eq!(config.kube.pod_namespace, "ops");
        assert_eq!(config.shard.namespace, "ops");
        assert_eq!(config.shard.shards, 4);
        assert_eq!(config.writer.cache_dir, PathBuf::from("/tmp/iw"));
        assert_eq!(config.writer.author.name, "bot");
        assert_eq!(config.writer.push_attempts, 3);
        assert_eq!(config.writer.batch_window, Duration::from_secs(2));
        assert_eq!(config.writer.commit_template, "{{subject}}");
        assert_eq!(config.controllers.max_concurrent_reconciles, 0);
        let webhook = config.sources.webhook.expect("webhook configured");
        assert_eq!(webhook.addr, "127.0.0.1:9000".parse().expect("address"));
        assert_eq!(webhook.secret_namespace, "ops");
        assert_eq!(webhook.secret_name, "hooks");
        let sqs = config.sources.sqs.expect("SQS configured");
        assert_eq!(sqs.endpoint_url.as_deref(), Some("http://127.0.0.1:5000"));
        assert_eq!(config.registry.ecr_endpoint_url, sqs.endpoint_url);
        assert_eq!(config.telemetry.log_format, crate::config::LogFormat::Json);
    }

    #[test]
    fn a_bad_commit_template_is_refused_while_parsing() {
        let error = Cli::try_parse_from(["imagewatch", "run", "--commit-template={{nope}}"])
            .expect_err("unknown placeholder");
        assert!(
            error.to_string().contains("unknown placeholder {{nope}}"),
            "{error}"
        );
    }
}
