# imagewatch tasks. `just --list` shows them all.

set shell := ["bash", "-euo", "pipefail", "-c"]
set positional-arguments

export PATH := env_var('HOME') + "/.cargo/bin:/usr/local/go/bin:" + env_var('PATH')

# List the recipes.
default:
    @just --list

# Build the workspace.
build:
    cargo build --workspace --all-targets

# Write the generated CRDs into the chart (from the Rust types in crd/).
generate:
    cargo run -q -p imagewatch -- crds --out-dir charts/imagewatch/crds

# Format check and clippy with warnings as errors.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

# Run every test: unit, component (real registry, git, moto) and end-to-end (real apiserver).
# Installs and starts everything it needs; stops it afterwards.
test:
    e2e/scripts/test.sh

# Only the pure unit tests (no test ground).
unit:
    cargo test --workspace --lib --bins

# Run the end-to-end tests against the running test ground (see `just testground-up`).
e2e *args:
    e2e/scripts/test.sh --e2e-only "$@"

# Start the real control plane (etcd + kube-apiserver); prints `export KUBECONFIG=…` last.
cluster-up:
    e2e/scripts/controlplane.sh up

# Stop the control plane.
cluster-down:
    e2e/scripts/controlplane.sh down

# Start the whole test ground (control plane, registry, moto, git server).
testground-up:
    e2e/scripts/testground.sh up

# Stop the whole test ground.
testground-down:
    e2e/scripts/testground.sh down

# The whole loop on the test ground: a pushed image becomes a commit and a Ready status.
demo:
    e2e/scripts/demo.sh

# Benchmarks on the test ground (push → commit latency, throughput, memory); markdown output.
bench:
    e2e/scripts/bench.sh
