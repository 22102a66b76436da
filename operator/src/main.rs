//! The `imagewatch` binary: the controller (`run`), CRD output (`crds`), the offline edit
//! engine (`set-image`), the importer of other tools' configuration (`import`) and the
//! explanations for people (`explain`, `test`). Named `kubectl-imagewatch`, it is the
//! kubectl plugin `kubectl imagewatch`.

use std::process::ExitCode;

use clap::Parser;
use imagewatch::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // One TLS crypto provider for every client in the process (kube, registry, AWS).
    let _ = rustls::crypto::ring::default_provider().install_default();
    match cli.command {
        Command::Crds(args) => imagewatch::cli::crds(&args),
        Command::SetImage(args) => imagewatch::cli::set_image(&args),
        Command::Import(args) => imagewatch::cli::import(&args),
        Command::Explain(args) => imagewatch::explain::explain(&args),
        Command::Test(args) => imagewatch::explain::test(&args),
        Command::Run(args) => {
            let config = args.into_config();
            imagewatch::telemetry::init_logging(config.telemetry.log_format);
            // SAFETY: called once, before the runtime (and so any git work) starts.
            let timeouts = unsafe {
                imagewatch::git::set_network_timeouts(
                    std::time::Duration::from_secs(15),
                    std::time::Duration::from_secs(120),
                )
            };
            if let Err(e) = timeouts {
                tracing::warn!(error = %e, "cannot set git network timeouts");
            }
            // SAFETY: as above.
            if let Err(e) = unsafe { imagewatch::git::set_object_cache() } {
                tracing::warn!(error = %e, "cannot set the git object cache");
            }
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(imagewatch::app::run(config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "imagewatch stopped");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
