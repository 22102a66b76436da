#!/usr/bin/env bash
# Builds the peer of the side-by-side benchmark, Argo CD Image Updater v1.3.0, from its public
# source tag (nothing of it is kept in this repository):
#
#   peer-build.sh IU_SRC ARGOCD_SRC
#
# IU_SRC     a checkout (or `git archive`) of github.com/argoproj-labs/argocd-image-updater at
#            tag v1.3.0 (commit 098b544f)
# ARGOCD_SRC a checkout of github.com/argoproj/argo-cd at tag v3.5.1 (commit 109ca7ca7113);
#            only its gitops-engine/ and manifests/crds/ are used
#
# The v1.3.0 module pins github.com/argoproj/argo-cd/gitops-engine at a pseudo-version the Go
# module proxy refuses; that one `replace` is pointed at ARGOCD_SRC/gitops-engine (the same
# commit the pseudo-version names). Everything else comes from the proxy
# (GOPROXY, without the direct fallback). Prints the binary's path,
# IU_SRC/argocd-image-updater; run the benchmark with IMAGEWATCH_BENCH_IU=<that path>
# IMAGEWATCH_BENCH_ARGOCD_SRC=ARGOCD_SRC.
set -euo pipefail
COMPONENT=peer-build
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $# -eq 2 ]] || die "usage: peer-build.sh IU_SRC ARGOCD_SRC"
iu=$(cd "$1" && pwd)
argocd=$(cd "$2" && pwd)
[[ -f $iu/go.mod && -d $iu/cmd && -d $iu/config/crd/bases ]] \
  || die "$iu is not an argocd-image-updater source tree"
[[ -f $argocd/gitops-engine/go.mod ]] || die "$argocd has no gitops-engine/go.mod"
[[ -f $argocd/manifests/crds/application-crd.yaml ]] \
  || die "$argocd has no manifests/crds/application-crd.yaml"
version=$(cat "$iu/VERSION")
[[ $version == 1.3.0 ]] || log "warning: $iu/VERSION says $version, the benchmark was set up for 1.3.0"

go=$(command -v go || echo /usr/local/go/bin/go)
cd "$iu"
"$go" mod edit -replace "github.com/argoproj/argo-cd/gitops-engine=$argocd/gitops-engine"
export GOPROXY=${GOPROXY:?set GOPROXY=<your Go module proxy>} GOFLAGS=${GOFLAGS:--mod=mod}
pkg=github.com/argoproj-labs/argocd-image-updater/pkg/version
log "building argocd-image-updater $version in $iu (GOPROXY=$GOPROXY)"
CGO_ENABLED=0 nice -n 5 "$go" build \
  -ldflags "-X $pkg.version=$version -X $pkg.gitCommit=${IU_COMMIT:-unknown}" \
  -o "$iu/argocd-image-updater" ./cmd
echo "$iu/argocd-image-updater"
