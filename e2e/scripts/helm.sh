#!/usr/bin/env bash
# The real helm CLI for the chart tests, built from the pinned Go module in e2e/helm.
#
#   helm.sh build    build $CACHE/bin/helm unless the pins are unchanged
#   helm.sh path     print the binary's path (building it first when needed)
set -euo pipefail
COMPONENT=helm
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODDIR="$REPO/e2e/helm"
BIN="$CACHE/bin"

go_bin() {
  local go
  go=$(command -v go || true)
  [[ -z $go && -x /usr/local/go/bin/go ]] && go=/usr/local/go/bin/go
  [[ -n $go ]] || die "Go not found; install Go >= 1.24 (see e2e/scripts/deps.sh)"
  echo "$go"
}

cmd_build() {
  local go stamp
  go=$(go_bin)
  stamp=$({ "$go" env GOVERSION GOOS GOARCH; cat "$MODDIR/go.mod" "$MODDIR/go.sum"; } | sha256sum | cut -d' ' -f1)
  if [[ -x $BIN/helm && -f $BIN/.helm-stamp && $(<"$BIN/.helm-stamp") == "$stamp" ]]; then
    return 0
  fi
  mkdir -p "$BIN"
  log "building helm from e2e/helm (first build takes a few minutes)"
  local t0=$SECONDS
  (
    cd "$MODDIR"
    export GOTOOLCHAIN=local GOFLAGS=-mod=readonly
    "$go" build -trimpath -ldflags "-s -w" -o "$BIN/helm.new.$$" helm.sh/helm/v3/cmd/helm
  ) >&2 || { rm -f "$BIN/helm.new.$$"; die "go build of helm failed"; }
  # A name of this build's own: two builds at once (two test runs) each move a whole file.
  mv -f "$BIN/helm.new.$$" "$BIN/helm"
  echo "$stamp" >"$BIN/.helm-stamp"
  log "built in $((SECONDS - t0))s"
}

case ${1:-} in
build) cmd_build ;;
path) cmd_build; echo "$BIN/helm" ;;
*) echo "usage: $0 build|path" >&2; exit 2 ;;
esac
