#!/usr/bin/env bash
# Builds the peer of the side-by-side benchmark, Argo CD Image Updater v1.3.0, from its source
# archive in ../shared/vendor (nothing of its code is kept in this repository):
#
#   peer-build.sh [build]   build into $CACHE/argocd-image-updater-v1.3.0 (skipped while the
#                           archives, this recipe and Go are unchanged); prints the export lines
#                           IMAGEWATCH_BENCH_IU (the binary) and IMAGEWATCH_BENCH_IU_SRC (the
#                           part of its source the bench reads at run time: config/crd/bases/)
#   peer-build.sh env       print the export lines of a finished build
#
# The archives: $IMAGEWATCH_IU_ARCHIVE (argocd-image-updater-v1.3.0-src.tar.xz, tag v1.3.0,
# commit 098b544f) and $IMAGEWATCH_ARGOCD_ARCHIVE (argo-cd-v3.5.1-src.tar.xz), by default in
# the shared/vendor folder beside the repository; each must match its line in the SHA256SUMS
# beside it.
#
# The v1.3.0 module pins github.com/argoproj/argo-cd/gitops-engine at a pseudo-version the Go
# module proxy refuses; that one `replace` is pointed at the gitops-engine/ of the Argo CD
# v3.5.1 tree (the same commit the pseudo-version names). Every other module comes from the
# proxy (GOPROXY as lib.sh takes it: without the direct fallback). The version is set as its
# Makefile sets it.
set -euo pipefail
COMPONENT=peer-build
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

VERSION=v1.3.0
COMMIT=098b544f1c7d6d1368e89c3f8d92415ede353916
IU_ARCHIVE_NAME=argocd-image-updater-$VERSION-src.tar.xz
ARGOCD_ARCHIVE_NAME=argo-cd-v3.5.1-src.tar.xz
# Bump when the build below changes in a way that needs a rebuild.
BUILD_RECIPE=1
HOME_DIR="$CACHE/argocd-image-updater-$VERSION"




print_env() {
  echo "export IMAGEWATCH_BENCH_IU=$HOME_DIR/bin/argocd-image-updater"
  echo "export IMAGEWATCH_BENCH_IU_SRC=$HOME_DIR/src"
}

# build_in DIR GO: unpack, point the one `replace` at gitops-engine/, build.
build_in() {
  local tmp=$1 go=$2
  mkdir -p "$tmp/iu" "$tmp/argo-cd"
  tar -xJf "$iu_archive" -C "$tmp/iu"
  tar -xJf "$argocd_archive" -C "$tmp/argo-cd" gitops-engine
  [[ -f $tmp/iu/go.mod && -d $tmp/iu/cmd && -d $tmp/iu/config/crd/bases ]] \
    || die "$iu_archive is not an argocd-image-updater source tree"
  [[ -f $tmp/argo-cd/gitops-engine/go.mod ]] || die "$argocd_archive has no gitops-engine/go.mod"
  local version
  version=$(<"$tmp/iu/VERSION")
  [[ v$version == "$VERSION" ]] || die "$iu_archive: VERSION says $version, not ${VERSION#v}"
  (
    cd "$tmp/iu"
    export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0 GOPROXY
    [[ -n $GOPROXY ]] || die "no Go module proxy: set GOPROXY=<your Go module proxy>"
    "$go" mod edit -replace "github.com/argoproj/argo-cd/gitops-engine=$tmp/argo-cd/gitops-engine"
    local pkg=github.com/argoproj-labs/argocd-image-updater/pkg/version
    nice -n 10 "$go" build -trimpath -ldflags "-s -w -X $pkg.version=$version \
-X $pkg.gitCommit=$COMMIT -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
      -o "$tmp/argocd-image-updater" ./cmd
  ) >&2
}

cmd_build() {
  local go iu_sum argocd_sum stamp
  go=$(go_bin)
  iu_archive=$(vendor_archive "$IU_ARCHIVE_NAME" "${IMAGEWATCH_IU_ARCHIVE:-}")
  argocd_archive=$(vendor_archive "$ARGOCD_ARCHIVE_NAME" "${IMAGEWATCH_ARGOCD_ARCHIVE:-}")
  iu_sum=$(verify_archive "$iu_archive" "$IU_ARCHIVE_NAME")
  argocd_sum=$(verify_archive "$argocd_archive" "$ARGOCD_ARCHIVE_NAME")
  stamp=$({ echo "recipe=$BUILD_RECIPE $iu_sum $argocd_sum"; declare -f build_in; "$go" env GOVERSION GOOS GOARCH; } |
    sha256sum | cut -d' ' -f1)
  if [[ -x $HOME_DIR/bin/argocd-image-updater && -d $HOME_DIR/src/config/crd/bases &&
    -f $HOME_DIR/.stamp && $(<"$HOME_DIR/.stamp") == "$stamp" ]]; then
    print_env
    return 0
  fi
  log "building Argo CD Image Updater $VERSION from $iu_archive (gitops-engine from $argocd_archive)"
  local t0=$SECONDS tmp
  tmp=$(mktemp -d "$CACHE/.iu-build.XXXXXX")
  BUILD_TMP=$tmp
  # The module cache leaves read-only files behind; the unpacked trees go on any exit.
  trap 'chmod -R u+w "$BUILD_TMP" 2>/dev/null; rm -rf "$BUILD_TMP"' EXIT
  build_in "$tmp" "$go"
  rm -rf "$HOME_DIR"
  mkdir -p "$HOME_DIR/bin" "$HOME_DIR/src/config/crd"
  mv "$tmp/argocd-image-updater" "$HOME_DIR/bin/"
  cp -r "$tmp/iu/config/crd/bases" "$HOME_DIR/src/config/crd/"
  cp "$tmp/iu/VERSION" "$HOME_DIR/src/"
  echo "$stamp" >"$HOME_DIR/.stamp"
  log "built in $((SECONDS - t0))s"
  print_env
}

cmd_env() {
  [[ -x $HOME_DIR/bin/argocd-image-updater ]] || die "not built (run peer-build.sh build)"
  print_env
}

case ${1:-build} in
build) cmd_build ;;
env) cmd_env ;;
*) echo "usage: $0 [build|env]" >&2; exit 2 ;;
esac
