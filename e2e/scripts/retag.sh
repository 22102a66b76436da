#!/usr/bin/env bash
# Add a tag to an existing image in the test-ground registry (same digest).
#
#   retag.sh REPO:OLD NEW
#
# Copies docker://REGISTRY/REPO:OLD to docker://REGISTRY/REPO:NEW, preserving
# the manifest bytes, and prints the digest (sha256:...) on stdout.
set -euo pipefail
COMPONENT=retag
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

(($# == 2)) || die "usage: $0 REPO:OLD NEW"
src=$1
new=$2
[[ $src == *:* ]] || die "expected REPO:OLD, got '$src'"
repo=${src%:*}

if [[ -z ${IMAGEWATCH_REGISTRY:-} ]]; then
  eval "$("$SCRIPTS_DIR/registry.sh" env)"
fi
creds="$IMAGEWATCH_REGISTRY_USER:$IMAGEWATCH_REGISTRY_PASSWORD"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
skopeo --insecure-policy copy --quiet --preserve-digests \
  --src-creds "$creds" --src-tls-verify=false \
  --dest-creds "$creds" --dest-tls-verify=false \
  --digestfile "$work/digest" \
  "docker://$IMAGEWATCH_REGISTRY/$src" "docker://$IMAGEWATCH_REGISTRY/$repo:$new" >&2
cat "$work/digest"
echo
