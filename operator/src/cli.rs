//! Command-line interface: `imagewatch run`, `imagewatch crds`, `imagewatch set-image`.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::manifests::{self, ImageChange, WorkloadTarget};

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
    Run(RunArgs),
    /// Print the CustomResourceDefinitions (ImageWatch, PromotionPolicy) as YAML.
    Crds(CrdsArgs),
    /// Set a workload container's image in YAML files on disk (offline; for CI and humans).
    ///
    /// Example: imagewatch set-image --path apps/my-api/overlays/stg --workload Deployment/my-api
    /// --container my-api --tag v1.2.4
    SetImage(SetImageArgs),
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
    /// Only watch objects in this namespace (default: all namespaces).
    #[arg(long, env = "IMAGEWATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Log format.
    #[arg(long, env = "IMAGEWATCH_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Retries of a rejected (non-fast-forward) push before giving up for this round.
    #[arg(long, env = "IMAGEWATCH_PUSH_ATTEMPTS", default_value_t = 5)]
    pub push_attempts: u32,
    /// Tags kept per repository scan (the newest ones).
    #[arg(long, env = "IMAGEWATCH_MAX_TAGS", default_value_t = 1000)]
    pub max_tags: usize,
    /// Timeout of one registry request, e.g. 30s.
    #[arg(long, env = "IMAGEWATCH_REGISTRY_TIMEOUT", default_value = "30s", value_parser = parse_duration_arg)]
    pub registry_timeout: Duration,
}

#[derive(Args, Debug)]
pub struct CrdsArgs {
    /// Write one file per CRD into this directory instead of printing them.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct SetImageArgs {
    /// Directory searched recursively for YAML files.
    #[arg(long)]
    pub path: PathBuf,
    /// The workload, as KIND/NAME (e.g. Deployment/my-api).
    #[arg(long)]
    pub workload: String,
    /// Container (or initContainer) name.
    #[arg(long)]
    pub container: String,
    /// Workload namespace, when two documents share kind and name.
    #[arg(long)]
    pub namespace: Option<String>,
    /// New tag: replaces the tag and drops a digest that belonged to the old tag.
    #[arg(long, conflicts_with = "image", required_unless_present = "image")]
    pub tag: Option<String>,
    /// New image reference, written exactly as given.
    #[arg(long)]
    pub image: Option<String>,
}

/// Parses durations such as `30s`, `5m`, `1h30m`, `250ms`.
pub fn parse_duration_arg(text: &str) -> Result<Duration, String> {
    crate::controller::parse_duration(text)
        .ok_or_else(|| format!("invalid duration {text:?} (use e.g. 30s, 5m, 1h)"))
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

/// `imagewatch set-image`.
pub fn set_image(args: &SetImageArgs) -> ExitCode {
    let Some((kind, name)) = args.workload.split_once('/') else {
        eprintln!(
            "error: --workload must be KIND/NAME, e.g. Deployment/my-api (got {:?})",
            args.workload
        );
        return ExitCode::from(2);
    };
    let target = WorkloadTarget {
        kind: kind.to_string(),
        name: name.to_string(),
        container: args.container.clone(),
        namespace: args.namespace.clone(),
    };
    let change = match (&args.tag, &args.image) {
        (Some(tag), _) => ImageChange::Tag(tag.clone()),
        (None, Some(image)) => ImageChange::Image(image.clone()),
        (None, None) => {
            eprintln!("error: one of --tag or --image is required");
            return ExitCode::from(2);
        }
    };
    match manifests::set_image(&args.path, &target, &change) {
        Ok(outcome) => {
            for warning in &outcome.warnings {
                eprintln!("warning: {warning}");
            }
            println!("{outcome}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
