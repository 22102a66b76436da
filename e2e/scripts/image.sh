#!/usr/bin/env bash
# The release OCI image of the operator, assembled without a container engine: the same
# contents, user and entrypoint as operator/Dockerfile (a test holds the two together).
#
#   image.sh build [OUT_DIR]   cargo build --release, then write an OCI layout (tag
#                              $IMAGEWATCH_IMAGE_TAG, default dev-<commit>) to OUT_DIR
#                              (default $STATE/image/oci); prints the layout path
#   image.sh push              build, push to the ground's registry; the last stdout line
#                              is the pushed reference (host:port/imagewatch:tag)
#   image.sh tag NEW_TAG       copy the pushed image to another tag (upgrade tests); prints
#                              the new reference
#
# One layer: /imagewatch (target/release/imagewatch), the shared libraries `ldd` lists (at
# their paths), /etc/ssl/certs/ca-certificates.crt, a /tmp and /var/cache/imagewatch owned by
# 65532. Config: User 65532:65532, Entrypoint ["/imagewatch"], Cmd ["run"]. No passwd file is
# needed (numeric user), and nothing is written outside /tmp and the cache, so it runs with a
# read-only root filesystem.
set -euo pipefail
COMPONENT=image
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR="$STATE/image"
REPOSITORY=imagewatch
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
BINARY="$TARGET/release/imagewatch"
# A binary built already (tests run under `cargo test`, which holds the target dir's lock):
# used as is, without `cargo build`.
PREBUILT=${IMAGEWATCH_RELEASE_BINARY:-}
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

default_tag() {
  local commit dirty=""
  commit=$(git -C "$REPO" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  git -C "$REPO" diff --quiet HEAD 2>/dev/null || dirty=-dirty
  echo "dev-$commit$dirty"
}
TAG=${IMAGEWATCH_IMAGE_TAG:-$(default_tag)}

cmd_build() {
  local out=${1:-$DIR/oci}
  if [[ -n $PREBUILT ]]; then
    [[ -x $PREBUILT ]] || die "IMAGEWATCH_RELEASE_BINARY=$PREBUILT is not an executable"
    BINARY=$PREBUILT
  else
    log "cargo build --release -p imagewatch"
    (cd "$REPO" && cargo build -q --release --locked -p imagewatch) >&2 || die "release build failed"
  fi
  [[ -x $BINARY ]] || die "no $BINARY after the build"
  [[ -s $CA_BUNDLE ]] || die "no CA bundle at $CA_BUNDLE (package ca-certificates)"
  local rootfs="$DIR/rootfs"
  rm -rf "$rootfs" "$out"
  mkdir -p "$rootfs/tmp" "$rootfs/var/cache/imagewatch" "$rootfs/etc/ssl/certs"
  chmod 1777 "$rootfs/tmp"
  install -m 0755 "$BINARY" "$rootfs/imagewatch"
  install -m 0644 "$CA_BUNDLE" "$rootfs/etc/ssl/certs/ca-certificates.crt"
  # The binary's shared libraries (and the loader) at the paths it resolves them from.
  local lib
  for lib in $(ldd "$BINARY" | grep -oE '/[^ ]+' | sort -u); do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done
  "$PYTHON" "$SCRIPTS_DIR/rootfs_image.py" "$out" "$TAG" "$rootfs" \
    --user 65532:65532 --entrypoint /imagewatch --cmd run \
    --owned /tmp --owned /var/cache/imagewatch >/dev/null || die "cannot assemble the OCI layout"
  log "OCI layout $out:$TAG"
  echo "$out"
}

registry_env() {
  [[ -s $STATE/registry/port ]] || die "the ground's registry is not up (just testground-up)"
  HOST=127.0.0.1:$(<"$STATE/registry/port")
  CREDS="$(<"$STATE/registry/user"):$(<"$STATE/registry/password")"
}

cmd_push() {
  registry_env
  local out
  out=$(cmd_build)
  skopeo copy -q --dest-tls-verify=false --dest-creds "$CREDS" \
    "oci:$out:$TAG" "docker://$HOST/$REPOSITORY:$TAG" >&2 || die "skopeo copy to $HOST failed"
  echo "$HOST/$REPOSITORY:$TAG" >"$DIR/reference"
  log "pushed $HOST/$REPOSITORY:$TAG"
  echo "$HOST/$REPOSITORY:$TAG"
}

cmd_tag() {
  local new=$1
  registry_env
  [[ -s $DIR/reference ]] || die "nothing pushed yet (image.sh push)"
  skopeo copy -q --src-tls-verify=false --dest-tls-verify=false --src-creds "$CREDS" \
    --dest-creds "$CREDS" "docker://$(<"$DIR/reference")" "docker://$HOST/$REPOSITORY:$new" >&2 ||
    die "skopeo copy to tag $new failed"
  echo "$HOST/$REPOSITORY:$new"
}

case ${1:-} in
build) cmd_build "${2:-}" ;;
push) cmd_push ;;
tag) cmd_tag "${2:?usage: image.sh tag NEW_TAG}" ;;
*) echo "usage: $0 build [OUT_DIR]|push|tag NEW_TAG" >&2; exit 2 ;;
esac
