#!/usr/bin/env bash
# The real promtool for the alert-rule tests: Debian's, taken from the `prometheus` package
# (bookworm: 2.42.0). The package is downloaded and unpacked, not installed, so no Prometheus
# service is set up or started; only /usr/bin/promtool is kept. A download and unpack take
# seconds, where building promtool from its Go module took about 10 CPU-minutes.
#
#   promtool.sh build    unpack $CACHE/bin/promtool unless it is there from the same package
#   promtool.sh path     print the binary's path (unpacking it first when needed)
set -euo pipefail
COMPONENT=promtool
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PACKAGE=prometheus
BIN="$CACHE/bin"

cmd_build() {
  local stamp="debian package $PACKAGE: usr/bin/promtool"
  if [[ -x $BIN/promtool && -f $BIN/.promtool-stamp && $(<"$BIN/.promtool-stamp") == "$stamp" ]]; then
    return 0
  fi
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
    die "apt-get and dpkg-deb not found: promtool comes from Debian's $PACKAGE package"
  mkdir -p "$BIN"
  log "unpacking promtool from Debian's $PACKAGE package (not installed: no service is set up)"
  local t0=$SECONDS tmp deb
  tmp=$(mktemp -d "$BIN/.promtool-unpack.XXXXXX")
  if ! (cd "$tmp" && apt-get download "$PACKAGE" >&2 2>/dev/null); then
    apt-get update -qq >&2 || true
    (cd "$tmp" && apt-get download "$PACKAGE" >&2) || { rm -rf "$tmp"; die "apt-get download $PACKAGE failed"; }
  fi
  deb=("$tmp/${PACKAGE}"_*.deb)
  [[ -f ${deb[0]} ]] || { rm -rf "$tmp"; die "apt-get download $PACKAGE left no ${PACKAGE}_*.deb"; }
  dpkg-deb -x "${deb[0]}" "$tmp/root" || { rm -rf "$tmp"; die "dpkg-deb -x ${deb[0]} failed"; }
  [[ -x $tmp/root/usr/bin/promtool ]] || { rm -rf "$tmp"; die "${deb[0]} has no usr/bin/promtool"; }
  "$tmp/root/usr/bin/promtool" --version >/dev/null 2>&1 || { rm -rf "$tmp"; die "the unpacked promtool does not run"; }
  mv -f "$tmp/root/usr/bin/promtool" "$BIN/promtool"
  log "promtool $(dpkg-deb -f "${deb[0]}" Version) unpacked in $((SECONDS - t0))s"
  rm -rf "$tmp"
  echo "$stamp" >"$BIN/.promtool-stamp"
}

case ${1:-} in
build) cmd_build ;;
path) cmd_build; echo "$BIN/promtool" ;;
*) echo "usage: $0 build|path" >&2; exit 2 ;;
esac
