#!/usr/bin/env bash
# The real cosign CLI for the signature tests, built from its pinned Go module.
#
#   cosign.sh build    build $CACHE/bin/cosign unless the pin is unchanged
#   cosign.sh path     print the binary's path (building it first when needed)
#
# The tests run it offline and key-based only (no Fulcio, no Rekor, no TUF fetch).
set -euo pipefail
COMPONENT=cosign
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODULE=github.com/sigstore/cosign/v3/cmd/cosign
VERSION=v3.1.3
BIN="$CACHE/bin"

go_bin() {
  local go
  go=$(command -v go || true)
  [[ -z $go && -x /usr/local/go/bin/go ]] && go=/usr/local/go/bin/go
  [[ -n $go ]] || die "Go not found; install Go >= 1.24 (see e2e/scripts/deps.sh)"
  echo "$go"
}

cmd_build() {
  local go stamp tmp
  go=$(go_bin)
  stamp=$({ "$go" env GOVERSION GOOS GOARCH; echo "$MODULE@$VERSION"; } | sha256sum | cut -d' ' -f1)
  if [[ -x $BIN/cosign && -f $BIN/.cosign-stamp && $(<"$BIN/.cosign-stamp") == "$stamp" ]]; then
    return 0
  fi
  mkdir -p "$BIN"
  tmp=$(mktemp -d "$CACHE/cosign-build.XXXXXX")
  log "building cosign $VERSION (first build takes several minutes)"
  local t0=$SECONDS
  (
    export GOTOOLCHAIN=local GOBIN="$tmp" GOFLAGS=-trimpath
    export GOPROXY=${GOPROXY:?set GOPROXY=<your Go module proxy>}
    nice -n 10 "$go" install -ldflags "-s -w" "$MODULE@$VERSION"
  ) >&2 || { rm -rf "$tmp"; die "go install of cosign failed"; }
  mv -f "$tmp/cosign" "$BIN/cosign"
  rm -rf "$tmp"
  echo "$stamp" >"$BIN/.cosign-stamp"
  log "built in $((SECONDS - t0))s"
}

case ${1:-} in
build) cmd_build ;;
path) cmd_build; echo "$BIN/cosign" ;;
*) echo "usage: $0 build|path" >&2; exit 2 ;;
esac
