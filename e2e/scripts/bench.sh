#!/usr/bin/env bash
# `just bench`: benchmarks on the test ground, printed as markdown tables.
#
# Builds the release operator, starts the test ground, and runs the benchmark drivers in
# e2e/benches/ against it. Sizes can be set with IMAGEWATCH_BENCH_PUSHES (default 1,27).
set -euo pipefail
COMPONENT=bench
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export PATH="$HOME/.cargo/bin:/usr/local/go/bin:$PATH"

"$SCRIPTS_DIR/deps.sh"
"$SCRIPTS_DIR/helm.sh" build
cd "$REPO"
cargo build --release -p imagewatch
eval "$("$SCRIPTS_DIR/testground.sh" up)"
trap '"$SCRIPTS_DIR/testground.sh" down >/dev/null || true' EXIT
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, $(uname -m)"
IMAGEWATCH_BIN="$REPO/target/release/imagewatch" cargo run -q -p imagewatch-e2e --example push_to_commit
# Git write-back: 100 edits in one batch on a large repository vs a shallow clone per change.
cargo bench -p imagewatch --bench git_batch
