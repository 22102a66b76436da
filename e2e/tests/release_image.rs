//! The release image assembled without Docker (`e2e/scripts/image.sh`, `just image`) and
//! operator/Dockerfile (kept for CI elsewhere) describe the same image: user, entrypoint,
//! command, binary path, writable directories, CA bundle and the binary's shared libraries.

use std::{collections::BTreeMap, path::Path, process::Command};

use anyhow::{Context as _, ensure};
use imagewatch_e2e::ground::repo_root;
use serde_json::Value;

/// What the Dockerfile's runtime stage sets.
struct DockerfileImage {
    user: String,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    binary: String,
    owned_dirs: Vec<String>,
}

fn dockerfile_image() -> anyhow::Result<DockerfileImage> {
    let text = std::fs::read_to_string(repo_root().join("operator/Dockerfile"))?;
    // Continuation lines joined, comments dropped.
    let joined = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\\\n", " ");
    let runtime = joined
        .rsplit_once("\nFROM ")
        .map(|(_, r)| r)
        .context("no runtime stage")?;
    let instruction = |name: &str| -> Option<String> {
        runtime
            .lines()
            .filter_map(|l| l.trim().strip_prefix(&format!("{name} ")))
            .next_back()
            .map(|s| s.trim().to_string())
    };
    let json_list = |name: &str| -> anyhow::Result<Vec<String>> {
        let raw = instruction(name).with_context(|| format!("no {name}"))?;
        serde_json::from_str(&raw).with_context(|| format!("{name} is not exec form"))
    };
    let copy = instruction("COPY").context("no COPY in the runtime stage")?;
    let binary = copy
        .split_whitespace()
        .last()
        .context("COPY without destination")?
        .to_string();
    let owned_dirs = runtime
        .split("install -d")
        .skip(1)
        .filter_map(|rest| {
            let words: Vec<&str> = rest.split_whitespace().collect();
            (words.len() >= 5 && words[0] == "-o" && words[1] == "65532")
                .then(|| words[4].to_string())
        })
        .collect();
    Ok(DockerfileImage {
        user: instruction("USER").context("no USER")?,
        entrypoint: json_list("ENTRYPOINT")?,
        cmd: json_list("CMD")?,
        binary,
        owned_dirs,
    })
}

fn blob(layout: &Path, digest: &str) -> std::path::PathBuf {
    layout
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"))
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    Ok(serde_json::from_slice(&std::fs::read(path)?)?)
}

#[test]
fn the_image_without_docker_matches_the_dockerfile() -> anyhow::Result<()> {
    let docker = dockerfile_image()?;
    let out_dir = tempfile::tempdir()?;
    let layout = out_dir.path().join("oci");
    let release_binary = imagewatch_e2e::node::release_binary()?;
    let build = Command::new(repo_root().join("e2e/scripts/image.sh"))
        .arg("build")
        .arg(&layout)
        .env("IMAGEWATCH_RELEASE_BINARY", &release_binary)
        .output()?;
    ensure!(
        build.status.success(),
        "image.sh build: {}",
        String::from_utf8_lossy(&build.stderr)
    );

    let index = read_json(&layout.join("index.json"))?;
    let manifest = read_json(&blob(
        &layout,
        index["manifests"][0]["digest"]
            .as_str()
            .context("no manifest")?,
    ))?;
    let config = read_json(&blob(
        &layout,
        manifest["config"]["digest"].as_str().context("no config")?,
    ))?;
    let c = &config["config"];
    assert_eq!(c["User"].as_str(), Some(docker.user.as_str()), "user");
    assert_eq!(
        c["Entrypoint"],
        serde_json::json!(docker.entrypoint),
        "entrypoint"
    );
    assert_eq!(c["Cmd"], serde_json::json!(docker.cmd), "cmd");
    assert_eq!(docker.entrypoint, vec![docker.binary.clone()]);
    let layers = manifest["layers"].as_array().context("no layers")?;
    assert_eq!(layers.len(), 1);

    // path → (mode string, uid) from the one layer.
    let listing = Command::new("tar")
        .args(["--numeric-owner", "-tvzf"])
        .arg(blob(
            &layout,
            layers[0]["digest"].as_str().unwrap_or_default(),
        ))
        .output()?;
    ensure!(listing.status.success(), "tar -t failed");
    let entries: BTreeMap<String, (String, String)> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let owner = f.get(1)?.split('/').next()?.to_string();
            let path = format!("/{}", f.get(5)?.trim_end_matches('/'));
            Some((path, (f[0].to_string(), owner)))
        })
        .collect();
    let binary = entries
        .get(&docker.binary)
        .with_context(|| format!("no {} in the image", docker.binary))?;
    assert!(binary.0.starts_with("-rwx"), "{binary:?}");
    assert_eq!(
        binary.1, "0",
        "the binary belongs to root (read-only for 65532)"
    );
    let uid = docker
        .user
        .split(':')
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(
        !docker.owned_dirs.is_empty(),
        "the Dockerfile creates a cache dir"
    );
    for dir in docker.owned_dirs.iter().chain(["/tmp".to_string()].iter()) {
        let entry = entries
            .get(dir)
            .with_context(|| format!("no {dir} in the image"))?;
        assert!(entry.0.starts_with('d'), "{dir}: {entry:?}");
        if dir != "/tmp" {
            assert_eq!(entry.1, uid, "{dir} belongs to the image user");
        }
    }
    assert!(
        entries.contains_key("/etc/ssl/certs/ca-certificates.crt"),
        "CA bundle (ca-certificates in the Dockerfile)"
    );

    // Every shared library the binary loads is in the image at the path it is loaded from.
    let ldd = Command::new("ldd").arg(&release_binary).output()?;
    let libs: Vec<String> = String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(str::to_string)
        .collect();
    assert!(libs.iter().any(|l| l.contains("libc.so")), "{libs:?}");
    for lib in libs {
        assert!(entries.contains_key(&lib), "{lib} missing from the image");
    }
    Ok(())
}

/// The crash-point test hook is compiled only into test builds (cargo feature `test-hooks`,
/// enabled by this crate): the release binary cannot be told to abort itself.
#[test]
fn the_release_binary_has_no_test_hooks() -> anyhow::Result<()> {
    let hooks: [&[u8]; 2] = [
        b"IMAGEWATCH_TEST_CRASH_POINT",
        b"IMAGEWATCH_TEST_CRASH_AFTER_PULL_REQUEST",
    ];
    let contains = |path: &Path| -> anyhow::Result<bool> {
        let bytes = std::fs::read(path).with_context(|| path.display().to_string())?;
        let has = |hook: &[u8]| bytes.windows(hook.len()).any(|w| w == hook);
        let found: Vec<bool> = hooks.iter().map(|h| has(h)).collect();
        anyhow::ensure!(
            found.iter().all(|f| *f == found[0]),
            "{} has some test hooks but not all: {found:?}",
            path.display()
        );
        Ok(found[0])
    };
    let test_build = imagewatch_e2e::operator::binary();
    ensure!(
        contains(&test_build)?,
        "the test build {} should have the hook",
        test_build.display()
    );
    let release = imagewatch_e2e::node::release_binary()?;
    ensure!(
        !contains(&release)?,
        "the release binary {} has the test hook",
        release.display()
    );
    Ok(())
}
