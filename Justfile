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

# Write the generated files: the CRDs into the chart (from the Rust types in crd/) and the
# chart README's values table (from values.yaml and values.schema.json).
generate:
    cargo run -q -p imagewatch -- crds --out-dir charts/imagewatch/crds
    IMAGEWATCH_UPDATE_DOCS=1 cargo test -q -p imagewatch --test docs the_chart_readme_values_table >/dev/null

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

# Start the real control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler), one node (containerd + kubelet) and Argo CD (application-controller,
# repo-server, applicationset-controller, redis); prints `export KUBECONFIG=…` last.
# A part that fails is named, with its log tail. IMAGEWATCH_E2E_NODE=0: no node;
# IMAGEWATCH_E2E_ARGOCD=0: no Argo CD.
cluster-up:
    e2e/scripts/controlplane.sh up
    if [[ ${IMAGEWATCH_E2E_NODE:-1} == 1 ]]; then e2e/scripts/node.sh up >/dev/null; fi
    if [[ ${IMAGEWATCH_E2E_ARGOCD:-1} == 1 ]]; then eval "$(e2e/scripts/controlplane.sh env)"; e2e/scripts/argocd.sh up >/dev/null; fi
    e2e/scripts/controlplane.sh env

# Stop Argo CD, the node and the control plane: every process, the kubelet's mounts, the
# Pods' cgroups; the kernel settings the kubelet changed are restored.
cluster-down:
    e2e/scripts/argocd.sh down
    e2e/scripts/node.sh down
    e2e/scripts/controlplane.sh down

# Build the release binary, assemble the release OCI image without Docker, push it to the
# ground's registry (`just testground-up` first); prints the reference.
image:
    e2e/scripts/image.sh push

# A release: the release image pushed to REGISTRY/imagewatch:VERSION and the chart (version
# and appVersion VERSION, its default image that one) pushed to oci://REGISTRY/charts.
# Install it with `helm install imagewatch oci://REGISTRY/charts/imagewatch --version VERSION`.
# REGISTRY_USER / REGISTRY_PASSWORD log in when set; REGISTRY_INSECURE=1 allows plain HTTP.
release registry version:
    e2e/scripts/release.sh "{{registry}}" "{{version}}"

# `helm install --wait` of charts/imagewatch on the ground's node with the image of
# `just image`, using chart values only; prints `kubectl get pods`.
install *args:
    e2e/scripts/install.sh "$@"

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
