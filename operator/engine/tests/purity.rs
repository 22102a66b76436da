//! The engine stays pure: no crate that does I/O or runs an async runtime is in its dependency
//! tree, not even transitively. The tree is read with the same cargo that builds this test
//! (`cargo tree -p imagewatch-engine -e normal`, every target platform); when cargo cannot run
//! or prints no tree, the test fails.

use std::path::Path;
use std::process::Command;

/// Crates the engine must not depend on: each name, and the crates of its family
/// (`tokio-util`, `kube-core`, `hyper-util`, …); every `aws-*` crate.
/// `tempfile` too: the engine writes no files.
const FORBIDDEN: [&str; 8] = [
    "tokio", "kube", "git2", "reqwest", "hyper", "axum", "aws", "tempfile",
];

/// The forbidden crate a `cargo tree --prefix none` line names, if any.
fn forbidden(line: &str) -> Option<&'static str> {
    let name = line.split_whitespace().next()?;
    FORBIDDEN.iter().copied().find(|crate_name| {
        name.strip_prefix(crate_name)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
            || name == format!("lib{crate_name}-sys")
    })
}

#[test]
fn the_line_check_names_forbidden_crates_and_only_those() {
    for line in [
        "tokio v1.47.1",
        "tokio-util v0.7.16",
        "kube-core v5.0.0",
        "git2 v0.21.0",
        "libgit2-sys v0.18.2+1.9.1",
        "reqwest v0.13.1",
        "hyper-util v0.1.17 (*)",
        "axum v0.8.6",
        "aws-config v1.8.10",
        "aws-smithy-runtime v1.9.4",
    ] {
        assert!(forbidden(line).is_some(), "{line} is not caught");
    }
    for line in [
        "serde v1.0.228",
        "k8s-openapi v0.29.0",
        "imagewatch-engine v0.1.0 (/src/operator/engine)",
        "hyperloglog v1.0.0",
        "awsm v0.1.0",
        "",
    ] {
        assert_eq!(forbidden(line), None, "{line} is caught");
    }
}

#[test]
fn the_engine_depends_on_no_runtime_kube_git_http_or_aws_crate() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let output = Command::new(env!("CARGO"))
        .args(["tree", "-p", "imagewatch-engine", "-e", "normal"])
        .args(["--target", "all", "--prefix", "none", "--manifest-path"])
        .arg(&manifest)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", env!("CARGO")));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "cargo tree failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let crates: Vec<&str> = stdout.lines().collect();
    assert!(
        crates.iter().any(|l| l.starts_with("imagewatch-engine "))
            && crates.iter().any(|l| l.starts_with("imagewatch-crd ")),
        "cargo tree printed no tree of imagewatch-engine:\n{stdout}"
    );
    let found: Vec<&str> = crates
        .into_iter()
        .filter(|l| forbidden(l).is_some())
        .collect();
    assert!(
        found.is_empty(),
        "imagewatch-engine must stay pure, but depends on: {found:?}\n(see `cargo tree -p \
         imagewatch-engine -e normal -i <crate>` for the path)"
    );
}

/// The engine's non-test code names no file-system API: reading and writing files (the
/// `set-image` walk and its atomic writes) is the binary's.
#[test]
fn the_engine_does_no_file_system_io() {
    fn visit(dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if path.is_dir() {
                visit(&path, found);
            } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                // Test modules sit at the end of a file.
                let code = text.split("#[cfg(test)]").next().unwrap_or_default();
                for needle in [
                    "std::fs",
                    "fs::read",
                    "fs::write",
                    "File::open",
                    "File::create",
                    "read_dir",
                ] {
                    if code.contains(needle) {
                        found.push(format!("{}: {needle}", path.display()));
                    }
                }
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    visit(&src, &mut found);
    assert!(
        found.is_empty(),
        "file-system I/O in the engine: {found:#?}"
    );
}
