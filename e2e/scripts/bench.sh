#!/usr/bin/env bash
# `just bench`: benchmarks on the test ground, printed as markdown tables.
#
# Builds the release operator, starts the test ground, and runs the benchmark driver
# (e2e/benches/bench/) against it: imagewatch beside Argo CD Image Updater v1.3.0 (built from
# its source archive by peer-build.sh, cached; IMAGEWATCH_BENCH_IU names another binary), both
# deployed by the ground's Argo CD onto its node, push →
# commit latency for 1, 27 and 1,000 pushes, the API server's CPU per ImageWatch status write
# (the floor under a first sync), then 50,000 ImageWatches over 5,000 repositories for one
# 5-minute cycle and an operator restart over them. Sizes and scenarios: see the variables in
# e2e/benches/bench/main.rs, e.g.
#   IMAGEWATCH_BENCH=pushes IMAGEWATCH_BENCH_PUSHES=1,27 just bench
#   IMAGEWATCH_BENCH=watches IMAGEWATCH_BENCH_WATCHES=1000 IMAGEWATCH_BENCH_REPOS=100 \
#     IMAGEWATCH_BENCH_INTERVAL=1m just bench
# Then the git write-back benchmark (operator/benches/git_batch.rs) and the set-image one
# (operator/benches/set_image.rs: editing a 3.5 MB file costs at most 2x finding the target).
set -euo pipefail
COMPONENT=bench
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export PATH="$HOME/.cargo/bin:/usr/local/go/bin:$PATH"
# The operator never asks the EC2 instance metadata address (nothing leaves loopback).
export AWS_EC2_METADATA_DISABLED=true

"$SCRIPTS_DIR/deps.sh"
"$SCRIPTS_DIR/helm.sh" build
"$SCRIPTS_DIR/gitea.sh" build
cd "$REPO"
cargo build --release -p imagewatch
cargo build --release -p imagewatch-e2e --example bench
# A ground that was already running (someone's tests use it) is left running.
was_up=0
if [[ -s $STATE/kubeconfig ]] && KUBECONFIG=$STATE/kubeconfig kubectl get --raw /readyz >/dev/null 2>&1; then
  was_up=1
fi
eval "$("$SCRIPTS_DIR/testground.sh" up)"
((was_up)) || trap '"$SCRIPTS_DIR/testground.sh" down >/dev/null || true' EXIT
# The operator logs at its production level: debug logging would be measured as well.
RUST_LOG=${RUST_LOG:-info} IMAGEWATCH_BIN="${CARGO_TARGET_DIR:-$REPO/target}/release/imagewatch" \
  "${CARGO_TARGET_DIR:-$REPO/target}/release/examples/bench"
echo
# Git write-back: 100 edits in one batch on a large repository vs a shallow clone per change.
cargo bench -p imagewatch --bench git_batch
echo
# set-image on a 3.5 MB multi-document file: planning an edit vs finding the target (≤ 2×).
cargo bench -p imagewatch --bench set_image
