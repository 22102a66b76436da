#!/usr/bin/env python3
"""Stamp the image TAG of an OCI layout with a build time, as a CI build does.

usage: oci_created.py LAYOUT TAG [RFC3339]

Sets the config's `created` (now, unless given), writes the new config and manifest
blobs and points index.json's TAG entry at the new manifest. Order-by-push-time tests
(`order: Newest`) need it: an image without `created` has no time to be ordered by.
"""
import datetime
import hashlib
import json
import os
import sys


def blob_path(root, digest):
    return os.path.join(root, "blobs", "sha256", digest.split(":", 1)[1])


def write_blob(root, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    with open(blob_path(root, digest), "wb") as f:
        f.write(data)
    return digest, len(data)


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    root, tag = sys.argv[1], sys.argv[2]
    created = sys.argv[3] if len(sys.argv) == 4 else datetime.datetime.now(
        datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with open(os.path.join(root, "index.json")) as f:
        index = json.load(f)
    entry = next((m for m in index["manifests"]
                  if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag), None)
    if entry is None:
        sys.exit(f"{root} has no image tagged {tag}")
    with open(blob_path(root, entry["digest"]), "rb") as f:
        manifest = json.load(f)
    with open(blob_path(root, manifest["config"]["digest"]), "rb") as f:
        config = json.load(f)
    config["created"] = created
    digest, size = write_blob(root, json.dumps(config, sort_keys=True).encode())
    manifest["config"].update(digest=digest, size=size)
    digest, size = write_blob(root, json.dumps(manifest, sort_keys=True).encode())
    entry.update(digest=digest, size=size)
    with open(os.path.join(root, "index.json"), "w") as f:
        json.dump(index, f)


if __name__ == "__main__":
    main()
