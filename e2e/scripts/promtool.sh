#!/usr/bin/env bash
# The real promtool for the alert-rule tests, built from the Prometheus Go module at a pinned
# version (its module has no replace lines, so `go install` builds it as released).
#
#   promtool.sh build    build $CACHE/bin/promtool unless the pin and Go are unchanged
#   promtool.sh path     print the binary's path (building it first when needed)
set -euo pipefail
COMPONENT=promtool
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

VERSION=v0.316.0
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
  stamp=$({ echo "promtool $VERSION"; "$go" env GOVERSION GOOS GOARCH; } | sha256sum | cut -d' ' -f1)
  if [[ -x $BIN/promtool && -f $BIN/.promtool-stamp && $(<"$BIN/.promtool-stamp") == "$stamp" ]]; then
    return 0
  fi
  mkdir -p "$BIN"
  log "building promtool $VERSION (first build takes about 10 CPU-minutes and 3 GB of memory)"
  local t0=$SECONDS tmp
  tmp=$(mktemp -d "$BIN/.promtool-build.XXXXXX")
  (
    export GOTOOLCHAIN=local GOFLAGS= GOBIN="$tmp"
    cd "$tmp"
    "$go" install -trimpath -ldflags "-s -w" "github.com/prometheus/prometheus/cmd/promtool@$VERSION"
  ) >&2 || { rm -rf "$tmp"; die "go install of promtool $VERSION failed"; }
  mv -f "$tmp/promtool" "$BIN/promtool"
  rm -rf "$tmp"
  echo "$stamp" >"$BIN/.promtool-stamp"
  log "built in $((SECONDS - t0))s"
}

case ${1:-} in
build) cmd_build ;;
path) cmd_build; echo "$BIN/promtool" ;;
*) echo "usage: $0 build|path" >&2; exit 2 ;;
esac
