#!/usr/bin/env python3
"""Assemble a one-layer OCI image layout from a root filesystem directory, without a
container engine.

usage: rootfs_image.py OUT_DIR TAG ROOTFS [--user UID:GID] [--entrypoint ARG]...
                       [--cmd ARG]... [--owned PATH]... [--env K=V]... [--workdir DIR]

Every entry of ROOTFS goes into the layer owned by 0:0, except the paths given with --owned
(and what lies below them), which belong to --user. Modes are kept; mtimes are 0, so the same
tree gives the same digest. `skopeo copy oci:OUT_DIR:TAG ...` then pushes or exports it.
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import tarfile


def write_blob(root, data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(root, "blobs", "sha256", digest), "wb") as f:
        f.write(data)
    return "sha256:" + digest, len(data)


def layer(rootfs, uid, gid, owned):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for top, dirs, files in os.walk(rootfs):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                path = os.path.join(top, name)
                rel = os.path.relpath(path, rootfs)
                info = tar.gettarinfo(path, arcname=rel)
                info.mtime = 0
                info.uname = info.gname = ""
                mine = any(rel == o or rel.startswith(o + "/") for o in owned)
                info.uid, info.gid = (uid, gid) if mine else (0, 0)
                if info.isreg():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    diff = raw.getvalue()
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0) as f:
        f.write(diff)
    return diff, gz.getvalue()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("tag")
    ap.add_argument("rootfs")
    ap.add_argument("--user", default="0:0")
    ap.add_argument("--entrypoint", action="append", default=[])
    ap.add_argument("--cmd", action="append", default=[])
    ap.add_argument("--owned", action="append", default=[])
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--workdir", default="/")
    a = ap.parse_args()
    uid, gid = (int(x) for x in a.user.split(":"))
    owned = [o.strip("/") for o in a.owned]

    os.makedirs(os.path.join(a.out, "blobs", "sha256"), exist_ok=True)
    diff, gz = layer(a.rootfs, uid, gid, owned)
    layer_digest, layer_size = write_blob(a.out, gz)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": a.user,
            "Entrypoint": a.entrypoint or None,
            "Cmd": a.cmd or None,
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"] + a.env,
            "WorkingDir": a.workdir,
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(diff).hexdigest()]},
        "history": [{"created_by": "e2e/scripts/rootfs_image.py"}],
    }
    config_digest, config_size = write_blob(a.out, json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": layer_digest, "size": layer_size}],
    }
    manifest_digest, manifest_size = write_blob(a.out, json.dumps(manifest, sort_keys=True).encode())
    with open(os.path.join(a.out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    with open(os.path.join(a.out, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest, "size": manifest_size,
            "annotations": {"org.opencontainers.image.ref.name": a.tag}}]}, f)
    print(manifest_digest)


if __name__ == "__main__":
    main()
