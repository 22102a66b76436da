#!/usr/bin/env bash
# The whole e2e test ground on 127.0.0.1: Kubernetes API (etcd +
# kube-apiserver, kube-controller-manager, kube-scheduler), OCI registry, moto
# (ECR/SQS/EventBridge), a git server (HTTP + SSH), one node (containerd +
# kubelet; node.sh) and Argo CD (argocd.sh). IMAGEWATCH_E2E_NODE=0: no node, no
# controllers; IMAGEWATCH_E2E_ARGOCD=0: no Argo CD.
#
#   testground.sh up     install missing packages, build the control plane if
#                        needed, start every part (idempotent), write
#                        $STATE/env and print it (shell `export` lines)
#   testground.sh down   stop every part; fails if any process is left
#   testground.sh env    print the exports of the running parts
#
# Use:  eval "$(e2e/scripts/testground.sh up)"   or   source "$STATE/env"
# If a part fails to start, its name and log tail are printed, everything is
# stopped again and the exit code is non-zero.
set -euo pipefail
COMPONENT=testground
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PARTS=(controlplane registry moto gitserver)
# The node comes after the registry: its containerd pulls from it.
[[ ${IMAGEWATCH_E2E_NODE:-1} == 1 ]] && PARTS+=(node)
# Argo CD (argocd.sh) after the git server, whose CA and host keys it trusts.
# IMAGEWATCH_E2E_ARGOCD=0: no Argo CD.
[[ ${IMAGEWATCH_E2E_ARGOCD:-1} == 1 ]] && PARTS+=(argocd)
# A cluster of your own: with IMAGEWATCH_E2E_KUBECONFIG set, the local control plane is not
# started and the tests use that kubeconfig (and its Argo CD, if it has one).
if [[ -n ${IMAGEWATCH_E2E_KUBECONFIG:-} ]]; then
  PARTS=(registry moto gitserver)
fi
export IMAGEWATCH_E2E_NODE=${IMAGEWATCH_E2E_NODE:-1}
ENV_FILE="$STATE/env"

all_env() {
  local p
  for p in "${PARTS[@]}"; do
    "$SCRIPTS_DIR/$p.sh" env
  done
  echo "export IMAGEWATCH_E2E_STATE=$STATE"
  if [[ -n ${IMAGEWATCH_E2E_KUBECONFIG:-} ]]; then
    echo "export KUBECONFIG=$(realpath "$IMAGEWATCH_E2E_KUBECONFIG")"
  fi
}

cmd_down() {
  local p rc=0
  # Reverse order: dependants first.
  for ((i = ${#PARTS[@]} - 1; i >= 0; i--)); do
    p=${PARTS[i]}
    "$SCRIPTS_DIR/$p.sh" down || { log "$p: down failed"; rc=1; }
  done
  rm -f "$ENV_FILE"
  return $rc
}

cmd_up() {
  "$SCRIPTS_DIR/deps.sh"
  local p t0
  for p in "${PARTS[@]}"; do
    t0=$SECONDS
    # Each part sees the exports of the parts started before it.
    local exports
    exports=$("$SCRIPTS_DIR/$p.sh" up) || exports=FAILED
    if [[ $exports != FAILED ]]; then
      eval "$(grep '^export ' <<<"$exports")"
    fi
    if [[ $exports == FAILED ]]; then
      log "ERROR: $p failed to start (see above); stopping the test ground"
      cmd_down >/dev/null 2>&1 || true
      exit 1
    fi
    log "$p up ($((SECONDS - t0))s)"
  done
  local tmp
  tmp=$(mktemp "$STATE/env.XXXXXX")
  {
    echo "# imagewatch e2e test ground; source this file"
    all_env
  } >"$tmp"
  mv -f "$tmp" "$ENV_FILE"
  log "environment written to $ENV_FILE"
  cat "$ENV_FILE"
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
env) all_env ;;
*) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac
