#!/usr/bin/env bash
# `just test`: installs what is missing, checks formatting and lints, starts the test ground,
# runs every test (unit, component, end-to-end) and stops the ground again, also on failure.
#
#   test.sh              everything
#   test.sh --e2e-only   only the end-to-end crate, against the (started) ground
set -euo pipefail
COMPONENT=test
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export PATH="$HOME/.cargo/bin:/usr/local/go/bin:$PATH"
# The operator never asks the EC2 instance metadata address (nothing leaves loopback).
export AWS_EC2_METADATA_DISABLED=true

e2e_only=0
[[ ${1:-} == --e2e-only ]] && { e2e_only=1; shift; }

t0=$SECONDS
"$SCRIPTS_DIR/deps.sh"
"$SCRIPTS_DIR/helm.sh" build
"$SCRIPTS_DIR/promtool.sh" build
"$SCRIPTS_DIR/cosign.sh" build
"$SCRIPTS_DIR/gitea.sh" build
"$SCRIPTS_DIR/argocd.sh" build
cd "$REPO"
if ((!e2e_only)); then
  log "cargo fmt --check and clippy"
  cargo fmt --all -- --check
  cargo clippy --workspace --all-targets -- -D warnings
fi
cargo build --workspace --all-targets
# The release binary, once: the chart, release image and install tests use it.
cargo build --release --locked -p imagewatch
log "starting the test ground"
eval "$("$SCRIPTS_DIR/testground.sh" up)"
trap '"$SCRIPTS_DIR/testground.sh" down >/dev/null || true' EXIT
log "test ground up after $((SECONDS - t0))s"
if ((e2e_only)); then
  cargo test -p imagewatch-e2e "$@"
else
  cargo test --workspace --no-fail-fast "$@"
fi
log "all tests done in $((SECONDS - t0))s"
