#!/usr/bin/env bash
# A release: the operator's release image and its chart, pushed to one OCI registry.
#
#   release.sh REGISTRY VERSION
#
#   1. cargo build --release, the OCI image assembled without a container engine (image.sh
#      build), pushed to REGISTRY/imagewatch:VERSION;
#   2. charts/imagewatch copied, its Chart.yaml `version` and `appVersion` set to VERSION and
#      its values.yaml `image.repository` to REGISTRY/imagewatch (so the packaged chart's
#      default image is the one just pushed), `helm package`d and `helm push`ed to
#      oci://REGISTRY/charts.
#
# REGISTRY is host[:port][/path], e.g. ghcr.io/imagewatch or 127.0.0.1:5000/releases.
# REGISTRY_USER and REGISTRY_PASSWORD log in when set (otherwise the credentials skopeo and
# helm already have are used). REGISTRY_INSECURE=1: plain HTTP (a local registry).
# The last stdout line is the chart reference: oci://REGISTRY/charts/imagewatch VERSION.
set -euo pipefail
COMPONENT=release
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REGISTRY=${1:?usage: release.sh REGISTRY VERSION}
VERSION=${2:?usage: release.sh REGISTRY VERSION}
REGISTRY=${REGISTRY%/}
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  die "VERSION must be a semantic version such as 1.2.3 (a chart version), not $VERSION"
command -v skopeo >/dev/null || die "skopeo not found (Debian package skopeo)"
HELM=$("$SCRIPTS_DIR/helm.sh" path)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

SKOPEO_DEST=()
HELM_FLAGS=()
LOGIN_FLAGS=()
if [[ ${REGISTRY_INSECURE:-0} == 1 ]]; then
  SKOPEO_DEST+=(--dest-tls-verify=false)
  HELM_FLAGS+=(--plain-http)
  LOGIN_FLAGS+=(--insecure)
fi
if [[ -n ${REGISTRY_USER:-} ]]; then
  SKOPEO_DEST+=(--dest-creds "$REGISTRY_USER:${REGISTRY_PASSWORD:-}")
  # helm keeps registry logins in its own config; this one lives only for this run.
  export HELM_REGISTRY_CONFIG="$WORK/helm-registry.json"
  printf '%s' "${REGISTRY_PASSWORD:-}" |
    "$HELM" registry login "${REGISTRY%%/*}" --username "$REGISTRY_USER" --password-stdin \
      "${LOGIN_FLAGS[@]}" >&2 || die "helm registry login ${REGISTRY%%/*} failed"
fi

# 1. The image.
IMAGE="$REGISTRY/imagewatch"
layout=$(IMAGEWATCH_IMAGE_TAG=$VERSION "$SCRIPTS_DIR/image.sh" build "$WORK/oci")
skopeo copy -q "${SKOPEO_DEST[@]}" "oci:$layout:$VERSION" "docker://$IMAGE:$VERSION" >&2 ||
  die "skopeo copy to $IMAGE:$VERSION failed"
log "pushed $IMAGE:$VERSION"

# 2. The chart, its default image the one above.
chart="$WORK/chart/imagewatch"
mkdir -p "$WORK/chart"
cp -r "$REPO/charts/imagewatch" "$chart"
"$PYTHON" - "$chart" "$VERSION" "$IMAGE" <<'PY'
import re, sys
chart, version, image = sys.argv[1:4]
path = f"{chart}/Chart.yaml"
text = open(path).read()
text, n1 = re.subn(r"(?m)^version:.*$", f"version: {version}", text)
text, n2 = re.subn(r"(?m)^appVersion:.*$", f'appVersion: "{version}"', text)
assert n1 == 1 and n2 == 1, "Chart.yaml needs one version and one appVersion line"
open(path, "w").write(text)
path = f"{chart}/values.yaml"
text = open(path).read()
# The `repository:` line of the top-level `image:` block (the first key indented under it).
text, n = re.subn(r"(?m)^(image:\n(?:[ \t]*#.*\n)*[ \t]+repository:)[^\n#]*", rf"\1 {image}", text, count=1)
assert n == 1, "values.yaml has no image.repository line under image:"
open(path, "w").write(text)
PY
"$HELM" lint "$chart" >&2 || die "helm lint of the release chart failed"
"$HELM" package "$chart" --destination "$WORK" >&2 || die "helm package failed"
"$HELM" push "$WORK/imagewatch-$VERSION.tgz" "oci://$REGISTRY/charts" "${HELM_FLAGS[@]}" >&2 ||
  die "helm push to oci://$REGISTRY/charts failed"
log "pushed oci://$REGISTRY/charts/imagewatch $VERSION (default image $IMAGE:$VERSION)"
echo "oci://$REGISTRY/charts/imagewatch $VERSION"
