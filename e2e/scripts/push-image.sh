#!/usr/bin/env bash
# Push a tiny generated OCI image to the test-ground registry.
#
#   push-image.sh [--same-content | --runnable] REPO:TAG
#
# The image's only layer holds a file naming REPO:TAG, so each tag pushed gets
# a new digest (its config also carries the current time). With --same-content
# the content and timestamp are fixed, so repeated pushes yield one digest. With
# --runnable the image is the node's pause program (it runs until stopped, so a Pod of it
# becomes Ready), stamped with the time of the push like a CI build (a digest of its own).
# Prints the pushed manifest digest (sha256:...) on stdout.
# Registry coordinates come from IMAGEWATCH_REGISTRY{,_USER,_PASSWORD} or, when
# unset, from the running `registry.sh`.
set -euo pipefail
COMPONENT=push-image
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

same=0
runnable=0
args=()
for a in "$@"; do
  case $a in
  --same-content) same=1 ;;
  --runnable) runnable=1 ;;
  -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
  *) args+=("$a") ;;
  esac
done
((${#args[@]} == 1)) || die "usage: $0 [--same-content] REPO:TAG"
ref=${args[0]}
[[ $ref == *:* && $ref != *@* ]] || die "expected REPO:TAG, got '$ref'"
repo=${ref%:*}
tag=${ref##*:}

if [[ -z ${IMAGEWATCH_REGISTRY:-} ]]; then
  eval "$("$SCRIPTS_DIR/registry.sh" env)"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ((runnable)); then
  cp -r "$("$SCRIPTS_DIR/node.sh" pause-layout)" "$work/runnable"
  skopeo --insecure-policy copy --quiet "oci:$work/runnable:1" "oci:$work/layout:$tag" >&2
  # Built now, as CI would have (and so a digest of its own).
  "$PYTHON" "$SCRIPTS_DIR/oci_created.py" "$work/layout" "$tag"
elif ((same)); then
  "$PYTHON" "$SCRIPTS_DIR/oci_image.py" "$work/layout" "$tag" "imagewatch e2e image" \
    --created 2024-01-01T00:00:00Z >/dev/null
else
  "$PYTHON" "$SCRIPTS_DIR/oci_image.py" "$work/layout" "$tag" "imagewatch e2e image $repo:$tag" >/dev/null
fi

skopeo --insecure-policy copy --quiet \
  --dest-creds "$IMAGEWATCH_REGISTRY_USER:$IMAGEWATCH_REGISTRY_PASSWORD" \
  --dest-tls-verify=false \
  --digestfile "$work/digest" \
  "oci:$work/layout:$tag" "docker://$IMAGEWATCH_REGISTRY/$repo:$tag" >&2
cat "$work/digest"
echo
