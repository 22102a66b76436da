#!/usr/bin/env python3
"""Write a tiny, valid single-layer OCI image layout for the e2e tests.

usage: oci_image.py OUT_DIR TAG CONTENT [--created RFC3339]

The layer is a gzip'd tar holding one file, /imagewatch-e2e.txt, whose text is
CONTENT (callers put the tag in it so every tag gets its own digest). Archive
metadata is fixed (mtime 0, uid 0), so the same CONTENT and --created always
produce the same manifest digest. The layout's index.json names the manifest
with org.opencontainers.image.ref.name=TAG, so `skopeo copy oci:OUT_DIR:TAG`
finds it.
"""
import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import tarfile


def write_blob(root, data):
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(root, "blobs", "sha256", digest)
    with open(path, "wb") as f:
        f.write(data)
    return "sha256:" + digest, len(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("tag")
    ap.add_argument("content")
    ap.add_argument("--created", default=None)
    a = ap.parse_args()
    created = a.created or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    os.makedirs(os.path.join(a.out, "blobs", "sha256"), exist_ok=True)

    payload = a.content.encode() + b"\n"
    tar_buf = io.BytesIO()
    with tarfile.open(fileobj=tar_buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        info = tarfile.TarInfo("imagewatch-e2e.txt")
        info.size = len(payload)
        info.mtime = 0
        info.mode = 0o644
        tf.addfile(info, io.BytesIO(payload))
    layer_tar = tar_buf.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_tar).hexdigest()
    layer_gz = gzip.compress(layer_tar, mtime=0)
    layer_digest, layer_size = write_blob(a.out, layer_gz)

    config = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": ["/bin/true"], "Labels": {"imagewatch.e2e/content": a.content}},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": "imagewatch e2e oci_image.py"}],
    }
    config_digest, config_size = write_blob(a.out, json.dumps(config, sort_keys=True).encode())

    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest,
                "size": layer_size,
            }
        ],
    }
    manifest_digest, manifest_size = write_blob(a.out, json.dumps(manifest, sort_keys=True).encode())

    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": manifest_size,
                "annotations": {"org.opencontainers.image.ref.name": a.tag},
            }
        ],
    }
    with open(os.path.join(a.out, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(a.out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    print(manifest_digest)


if __name__ == "__main__":
    main()
