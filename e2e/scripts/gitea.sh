#!/usr/bin/env bash
# A real Gitea forge for the pull-request tests, built from its pinned Go module (SQLite).
#
#   gitea.sh build    build $CACHE/gitea-<version>/gitea unless the pin and Go are unchanged
#   gitea.sh path     print the binary's path (building it first when needed)
#   gitea.sh home     print the directory with its options/ and templates/ (STATIC_ROOT_PATH)
#
# Its go.mod has replace lines, so `go install module@version` refuses it: the module source is
# downloaded from the proxy and built in place. A build without the `bindata` tag reads its
# options/ and templates/ from disk, so those stay next to the binary. The tests start it
# themselves (e2e/src/gitea.rs): loopback, SQLite, INSTALL_LOCK, OFFLINE_MODE, no update checker.
set -euo pipefail
COMPONENT=gitea
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODULE=code.gitea.io/gitea
VERSION=v1.27.3
HOME_DIR="$CACHE/gitea-$VERSION"

go_bin() {
  local go
  go=$(command -v go || true)
  [[ -z $go && -x /usr/local/go/bin/go ]] && go=/usr/local/go/bin/go
  [[ -n $go ]] || die "Go not found; install Go >= 1.25 (see e2e/scripts/deps.sh)"
  echo "$go"
}

cmd_build() {
  local go stamp tmp src
  go=$(go_bin)
  # The version is set as Gitea's Makefile sets it (main.Version): API clients such as the
  # Gitea SDK (Argo CD's pull-request generator) refuse a server reporting "development".
  local ldflags="-s -w -X main.Version=${VERSION#v} -X code.gitea.io/gitea/modules/setting.AppVer=${VERSION#v}"
  stamp=$({ echo "$MODULE@$VERSION sqlite sqlite_unlock_notify $ldflags"; "$go" env GOVERSION GOOS GOARCH; } |
    sha256sum | cut -d' ' -f1)
  if [[ -x $HOME_DIR/gitea && -f $HOME_DIR/.stamp && $(<"$HOME_DIR/.stamp") == "$stamp" ]]; then
    return 0
  fi
  command -v cc >/dev/null || die "a C compiler is needed (SQLite is built with cgo)"
  log "building gitea $VERSION (first build takes about 8 CPU-minutes and 1.5 GB of memory)"
  local t0=$SECONDS
  tmp=$(mktemp -d "$CACHE/.gitea-build.XXXXXX")
  src=$(cd "$tmp" && GOTOOLCHAIN=local GOFLAGS= "$go" mod download -json "$MODULE@$VERSION" |
    "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])') ||
    { rm -rf "$tmp"; die "downloading $MODULE@$VERSION from $GOPROXY failed"; }
  # The module cache is read-only: build in a writable copy.
  cp -r "$src" "$tmp/src"
  chmod -R u+w "$tmp/src"
  (
    export GOTOOLCHAIN=local GOFLAGS= CGO_ENABLED=1
    cd "$tmp/src"
    nice -n 10 "$go" build -trimpath -tags 'sqlite sqlite_unlock_notify' \
      -ldflags "$ldflags" -o "$tmp/gitea" .
  ) >&2 || { rm -rf "$tmp"; die "go build of gitea $VERSION failed"; }
  rm -rf "$HOME_DIR"
  mkdir -p "$HOME_DIR"
  mv "$tmp/gitea" "$HOME_DIR/gitea"
  mv "$tmp/src/options" "$tmp/src/templates" "$HOME_DIR/"
  [[ -d $tmp/src/public ]] && mv "$tmp/src/public" "$HOME_DIR/"
  rm -rf "$tmp"
  echo "$stamp" >"$HOME_DIR/.stamp"
  log "built in $((SECONDS - t0))s"
}

case ${1:-} in
build) cmd_build ;;
path) cmd_build; echo "$HOME_DIR/gitea" ;;
home) cmd_build; echo "$HOME_DIR" ;;
*) echo "usage: $0 build|path|home" >&2; exit 2 ;;
esac
