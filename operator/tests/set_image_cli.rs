//! `imagewatch set-image` as users run it: the built binary on a temporary directory.
//! Checks output, exit codes, and that nothing is written when the target is missing or
//! ambiguous.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn imagewatch(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_imagewatch"))
        .args(args)
        .output()
        .expect("run imagewatch")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn write(dir: &Path, rel: &str, contents: &str) -> PathBuf {
    let path = dir.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, contents).unwrap();
    path
}

/// Every file under `dir` with its bytes, sorted by path.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in fs::read_dir(d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes = fs::read(&path).unwrap();
                out.push((path, bytes));
            }
        }
    }
    out.sort();
    out
}

fn deployment(namespace: Option<&str>, image: &str) -> String {
    let ns = namespace.map_or(String::new(), |ns| format!("\n  namespace: {ns}"));
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web{ns} # frontend\nspec:\n  \
         template:\n    spec:\n      containers:\n        - name: app\n          image: {image} # pinned\n"
    )
}

#[test]
fn version_is_printed() {
    let out = imagewatch(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        stdout(&out).trim(),
        format!("imagewatch {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn workload_tag_then_rerun_is_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(
        tmp.path(),
        "apps/web/deploy.yaml",
        &deployment(None, "ghcr.io/acme/web:1.0"),
    );
    let dir = tmp.path().to_str().unwrap();
    let args = [
        "set-image",
        "--path",
        dir,
        "--workload",
        "Deployment/web",
        "--container",
        "app",
        "--tag",
        "1.1",
    ];
    let out = imagewatch(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "updated {}: ghcr.io/acme/web:1.0 -> ghcr.io/acme/web:1.1\n",
            path.display()
        )
    );
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        deployment(None, "ghcr.io/acme/web:1.1")
    );

    let out = imagewatch(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "unchanged: {} already uses ghcr.io/acme/web:1.1\n",
            path.display()
        )
    );
}

#[test]
fn missing_workload_fails_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "deploy.yaml", &deployment(None, "web:1"));
    let before = snapshot(tmp.path());
    let out = imagewatch(&[
        "set-image",
        "--path",
        tmp.path().to_str().unwrap(),
        "--workload",
        "Deployment/api",
        "--container",
        "app",
        "--tag",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("no Deployment named \"api\" was found"),
        "{}",
        stderr(&out)
    );
    assert_eq!(snapshot(tmp.path()), before);
}

#[test]
fn ambiguous_workload_names_both_and_namespace_resolves_it() {
    let tmp = tempfile::tempdir().unwrap();
    let staging = write(
        tmp.path(),
        "staging/deploy.yaml",
        &deployment(Some("staging"), "web:1"),
    );
    let prod = write(
        tmp.path(),
        "prod/deploy.yaml",
        &deployment(Some("prod"), "web:1"),
    );
    let before = snapshot(tmp.path());
    let dir = tmp.path().to_str().unwrap();
    let mut args = vec![
        "set-image",
        "--path",
        dir,
        "--workload",
        "deploy/web",
        "--container",
        "app",
        "--image",
        "web:2",
    ];
    let out = imagewatch(&args);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("is ambiguous"), "{err}");
    assert!(err.contains("staging/deploy.yaml (document 1)"), "{err}");
    assert!(err.contains("prod/deploy.yaml (document 1)"), "{err}");
    assert_eq!(snapshot(tmp.path()), before);

    args.extend(["--namespace", "prod"]);
    let out = imagewatch(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!("updated {}: web:1 -> web:2\n", prod.display())
    );
    assert_eq!(
        fs::read_to_string(&prod).unwrap(),
        deployment(Some("prod"), "web:2")
    );
    assert_eq!(
        fs::read_to_string(&staging).unwrap(),
        deployment(Some("staging"), "web:1")
    );
}

#[test]
fn target_forms_are_exclusive_and_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    for args in [
        // No target.
        vec!["set-image", "--tag", "1"],
        // Two targets.
        vec![
            "set-image",
            "--kustomize",
            dir,
            "--name",
            "web",
            "--setter",
            dir,
            "--marker",
            "a:b",
            "--tag",
            "1",
        ],
        // A companion option missing or of another form.
        vec!["set-image", "--kustomize", dir, "--tag", "1"],
        vec!["set-image", "--helm-values", dir, "--tag", "1"],
        vec![
            "set-image",
            "--argocd-source",
            dir,
            "--name",
            "web",
            "--tag",
            "1",
        ],
        vec![
            "set-image",
            "--path",
            dir,
            "--workload",
            "Deployment/web",
            "--container",
            "app",
            "--name",
            "web",
            "--tag",
            "1",
        ],
        // Neither --tag nor --image, or both.
        vec!["set-image", "--kustomize", dir, "--name", "web"],
        vec![
            "set-image",
            "--kustomize",
            dir,
            "--name",
            "web",
            "--tag",
            "1",
            "--image",
            "web:1",
        ],
    ] {
        let out = imagewatch(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).starts_with("error:"), "{}", stderr(&out));
    }
    assert!(snapshot(tmp.path()).is_empty());
}

#[test]
fn kustomize_target() {
    let tmp = tempfile::tempdir().unwrap();
    let text = "resources:\r\n- deploy.yaml\r\nimages:\r\n- name: web # app\r\n  newTag: v1\r\n";
    let path = write(tmp.path(), "overlay/kustomization.yaml", text);
    let dir = tmp.path().join("overlay");
    let args = [
        "set-image",
        "--kustomize",
        dir.to_str().unwrap(),
        "--name",
        "web",
        "--image",
        "ghcr.io/acme/web:v2",
    ];
    let out = imagewatch(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "updated {}: web:v1 -> ghcr.io/acme/web:v2\n",
            path.display()
        )
    );
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        "resources:\r\n- deploy.yaml\r\nimages:\r\n- name: web # app\r\n  newName: ghcr.io/acme/web\r\n  newTag: v2\r\n"
    );
    let out = imagewatch(&args);
    assert!(out.status.success());
    assert!(stdout(&out).starts_with("unchanged: "), "{}", stdout(&out));

    // No kustomization: an error, nothing written.
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let out = imagewatch(&[
        "set-image",
        "--kustomize",
        empty.to_str().unwrap(),
        "--name",
        "web",
        "--tag",
        "v3",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("a kustomization file"),
        "{}",
        stderr(&out)
    );
    assert!(fs::read_dir(&empty).unwrap().next().is_none());
}

#[test]
fn helm_values_target() {
    let tmp = tempfile::tempdir().unwrap();
    let text = "image:\n  repository: postgres # upstream\n  tag: 16.3 # major.minor\n";
    let path = write(tmp.path(), "chart/values.yaml", text);
    let file = path.to_str().unwrap();
    let out = imagewatch(&[
        "set-image",
        "--helm-values",
        file,
        "--key",
        "image.tag",
        "--tag",
        "16.10",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!("updated {}: 16.3 -> 16.10\n", path.display())
    );
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        text.replace("16.3", "\"16.10\"")
    );

    let out = imagewatch(&[
        "set-image",
        "--helm-values",
        file,
        "--key",
        "image.version",
        "--tag",
        "17",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("\"image.version\""), "{err}");
    assert!(err.contains(file), "{err}");
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        text.replace("16.3", "\"16.10\"")
    );
}

#[test]
fn argocd_source_target_creates_then_updates() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("apps/web");
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join(".argocd-source-web-prod.yaml");
    let run = |tag: &str| {
        imagewatch(&[
            "set-image",
            "--argocd-source",
            dir.to_str().unwrap(),
            "--application",
            "web-prod",
            "--name",
            "web",
            "--image",
            &format!("ghcr.io/acme/web:{tag}"),
        ])
    };
    let out = run("v1");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!("created {}: ghcr.io/acme/web:v1\n", file.display())
    );
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        "kustomize:\n  images:\n  - web=ghcr.io/acme/web:v1\n"
    );
    let out = run("v2");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "updated {}: ghcr.io/acme/web:v1 -> ghcr.io/acme/web:v2\n",
            file.display()
        )
    );
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        "kustomize:\n  images:\n  - web=ghcr.io/acme/web:v2\n"
    );
}

#[test]
fn setter_target_updates_every_marked_file() {
    let tmp = tempfile::tempdir().unwrap();
    let a_text = "spec:\n  image: ghcr.io/acme/web:v1 # {\"$imagewatch\": \"apps:web\"}\n";
    let b_text = "web:\n  tag: \"v1\" # {\"$imagewatch\": \"apps:web:tag\"}\n";
    let a = write(tmp.path(), "a/widget.yaml", a_text);
    let b = write(tmp.path(), "b/values.yaml", b_text);
    let dir = tmp.path().to_str().unwrap();
    let out = imagewatch(&[
        "set-image",
        "--setter",
        dir,
        "--marker",
        "apps:web",
        "--tag",
        "v2",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "updated {}: ghcr.io/acme/web:v1 -> ghcr.io/acme/web:v2\nupdated {}: v1 -> v2\n",
            a.display(),
            b.display()
        )
    );
    assert_eq!(fs::read_to_string(&a).unwrap(), a_text.replace("v1", "v2"));
    assert_eq!(fs::read_to_string(&b).unwrap(), b_text.replace("v1", "v2"));

    let before = snapshot(tmp.path());
    let out = imagewatch(&[
        "set-image",
        "--setter",
        dir,
        "--marker",
        "apps:api",
        "--tag",
        "v2",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("apps:api"), "{}", stderr(&out));
    assert_eq!(snapshot(tmp.path()), before);
}

#[test]
fn a_shared_anchor_is_refused_unless_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    \
                spec:\n      containers:\n      - name: app\n        image: &img nginx:1.0\n      \
                - name: worker\n        image: *img\n";
    let file = write(dir.path(), "deploy.yaml", text);
    let path = dir.path().display().to_string();
    let args = [
        "set-image",
        "--path",
        &path,
        "--workload",
        "Deployment/web",
        "--container",
        "app",
        "--tag",
        "1.1",
    ];
    let before = snapshot(dir.path());
    let out = imagewatch(&args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("*img at spec.template.spec.containers[1].image (name \"worker\")")
            && err.contains("--edit-shared-anchor"),
        "{err}"
    );
    assert_eq!(snapshot(dir.path()), before, "nothing is written");

    let mut asked = args.to_vec();
    asked.push("--edit-shared-anchor");
    let out = imagewatch(&asked);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        text.replace("&img nginx:1.0", "&img nginx:1.1")
    );
}

#[test]
fn a_shared_anchor_in_kustomize_images_is_refused_unless_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let text = "images:\n- name: a\n  newTag: &t v1\n- name: b\n  newTag: *t\n";
    let file = write(dir.path(), "kustomization.yaml", text);
    let path = dir.path().display().to_string();
    let args = [
        "set-image",
        "--kustomize",
        &path,
        "--name",
        "a",
        "--tag",
        "v2",
    ];
    let before = snapshot(dir.path());
    let out = imagewatch(&args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("images[1].newTag") && err.contains("--edit-shared-anchor"),
        "{err}"
    );
    assert_eq!(snapshot(dir.path()), before, "nothing is written");

    let mut asked = args.to_vec();
    asked.push("--edit-shared-anchor");
    let out = imagewatch(&asked);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        text.replace("&t v1", "&t v2")
    );
}
