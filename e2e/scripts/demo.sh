#!/usr/bin/env bash
# `just demo`: the whole loop on the local test ground.
#
# Starts the control plane, registry and git server; installs the chart's CRDs and RBAC;
# runs the operator under the chart's ServiceAccount; applies samples/canary-primary; pushes
# my-api:canary-v1.2.4 and shows the commit it became, the measured push -> commit latency,
# `kubectl get iw` and `kubectl describe iw` (with Events). With the ground's node and Argo CD
# (the default), an Argo CD Application deploys the overlay onto the node first, and the demo
# follows the commit to the new Pod: imagewatch asks Argo CD to refresh, Argo CD syncs, and
# the watch's `Deployed` condition says how long push -> running took. The registry notifies the
# operator's webhook listener, so the commit is event-driven; the watches still poll (every
# 5m here) as the fallback, and the demo says when the commit came from a poll instead.
# Set DEMO_KEEP=1 to leave everything running afterwards.
set -euo pipefail
COMPONENT=demo
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export PATH="$HOME/.cargo/bin:/usr/local/go/bin:$PATH"
# The operator never asks the EC2 instance metadata address (nothing leaves loopback).
export AWS_EC2_METADATA_DISABLED=true

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

"$SCRIPTS_DIR/deps.sh"
HELM=$("$SCRIPTS_DIR/helm.sh" path)
cd "$REPO"
say "building imagewatch"
cargo build -q -p imagewatch
# Registry notifications go to the operator's webhook listener (started below).
WEBHOOK_PORT=$(free_port)
WEBHOOK_TOKEN=$(openssl rand -hex 16)
export IMAGEWATCH_REGISTRY_NOTIFY_URL="http://127.0.0.1:$WEBHOOK_PORT/hooks/distribution"
export IMAGEWATCH_REGISTRY_NOTIFY_TOKEN="$WEBHOOK_TOKEN"
say "starting the test ground (kube-apiserver + etcd, registry notifying 127.0.0.1:$WEBHOOK_PORT, git server)"
eval "$("$SCRIPTS_DIR/testground.sh" up)"
DEMO="$STATE/demo"
rm -rf "$DEMO"
mkdir -p "$DEMO"
OP_PID=""
cleanup() {
  [[ -n $OP_PID ]] && kill "$OP_PID" 2>/dev/null && wait "$OP_PID" 2>/dev/null
  if [[ ${DEMO_KEEP:-0} != 1 ]]; then
    "$SCRIPTS_DIR/testground.sh" down >/dev/null || true
  else
    echo "left running; stop with: just testground-down"
  fi
}
trap cleanup EXIT

NS=my-api-$(date +%s)
say "installing the chart's CRDs and RBAC (namespace $NS)"
kubectl apply --server-side --force-conflicts -f charts/imagewatch/crds/ >/dev/null
kubectl wait --for=condition=Established --timeout=60s crd/imagewatches.imagewatch.dev >/dev/null
kubectl create namespace "$NS" >/dev/null
"$HELM" template imagewatch charts/imagewatch --namespace "$NS" \
  --show-only templates/serviceaccount.yaml --show-only templates/rbac.yaml |
  kubectl apply --server-side --force-conflicts -f - >/dev/null
TOKEN=$(kubectl create token imagewatch -n "$NS" --duration=1h)
SA_KUBECONFIG="$DEMO/kubeconfig"
SERVER=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
CA=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
cat >"$SA_KUBECONFIG" <<KC
apiVersion: v1
kind: Config
clusters: [{name: ground, cluster: {server: "$SERVER", certificate-authority-data: "$CA"}}]
users: [{name: imagewatch, user: {token: "$TOKEN"}}]
contexts: [{name: imagewatch, context: {cluster: ground, user: imagewatch, namespace: "$NS"}}]
current-context: imagewatch
KC

say "seeding the manifests repository from samples/canary-primary/manifests"
cp -r samples/canary-primary/manifests "$DEMO/seed"
sed -i "s#registry.example.com/my-api:#$IMAGEWATCH_REGISTRY/$NS/my-api:#g" "$DEMO"/seed/apps/my-api/overlays/stg/*.yaml
REPO_NAME=demo-$NS
"$SCRIPTS_DIR/new-repo.sh" "$REPO_NAME" "$DEMO/seed" >/dev/null
# HTTPS with the ground's own CA (the operator trusts it through SSL_CERT_FILE below).
GIT_URL="${IMAGEWATCH_GIT_HTTPS_URL}${REPO_NAME}.git"

# Argo CD deploys the overlay onto the node (the Pods then really run the pushed image).
ARGO=0
PUSH=()
if [[ -n ${IMAGEWATCH_ARGOCD_NAMESPACE:-} && -n ${IMAGEWATCH_NODE_NAME:-} ]]; then
  ARGO=1
  PUSH=(--runnable)
  # The ground's node: loopback network (so no container port: two Pods of the node's network
  # cannot both hold 8080), a taint, the registry's pull Secret. The init container of the
  # sample would wait forever in a program that never exits: left out.
  sed -i "s#^namespace: my-api#namespace: $NS#" "$DEMO/seed/apps/my-api/overlays/stg/kustomization.yaml"
  cat >>"$DEMO/seed/apps/my-api/overlays/stg/kustomization.yaml" <<'EOF'
patches:
  - target: {kind: Deployment}
    patch: |-
      - {op: add, path: /spec/template/spec/hostNetwork, value: true}
      - {op: add, path: /spec/template/spec/terminationGracePeriodSeconds, value: 1}
      - {op: add, path: /spec/template/spec/imagePullSecrets, value: [{name: regcred}]}
      - {op: add, path: /spec/template/spec/tolerations, value: [{key: imagewatch.dev/e2e-node, operator: Exists, effect: NoSchedule}]}
      - {op: remove, path: /spec/template/spec/containers/0/ports}
  - target: {kind: Deployment, name: my-api-primary}
    patch: |-
      - {op: remove, path: /spec/template/spec/initContainers}
      - {op: replace, path: /spec/replicas, value: 1}
EOF
  REPO_NAME=$REPO_NAME-argo
  "$SCRIPTS_DIR/new-repo.sh" "$REPO_NAME" "$DEMO/seed" >/dev/null
  GIT_URL="${IMAGEWATCH_GIT_HTTPS_URL}${REPO_NAME}.git"
else
  say "no node or no Argo CD on this ground: the demo stops at the commit"
fi

say "pushing my-api:canary-v1.2.3 and my-api:primary-v1.2.3 (what Git already runs)"
# A repository of its own, so a test ground that ran the demo before holds none of its tags.
IMAGE_REPO=$NS/my-api
"$SCRIPTS_DIR/push-image.sh" "${PUSH[@]}" "$IMAGE_REPO:canary-v1.2.3" >/dev/null
"$SCRIPTS_DIR/push-image.sh" "${PUSH[@]}" "$IMAGE_REPO:primary-v1.2.3" >/dev/null

kubectl -n "$NS" create secret docker-registry regcred --docker-server="$IMAGEWATCH_REGISTRY" \
  --docker-username="$IMAGEWATCH_REGISTRY_USER" --docker-password="$IMAGEWATCH_REGISTRY_PASSWORD" >/dev/null
kubectl -n "$NS" create secret generic git-creds --from-literal=username="$IMAGEWATCH_GIT_USER" \
  --from-literal=token="$IMAGEWATCH_GIT_TOKEN" >/dev/null
kubectl -n "$NS" create secret generic hooks --from-literal=distribution-token="$WEBHOOK_TOKEN" >/dev/null

if ((ARGO)); then
  APP=demo-$NS
  say "Argo CD deploys apps/my-api/overlays/stg into $NS (Application $IMAGEWATCH_ARGOCD_NAMESPACE/$APP)"
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: repo-$NS
  namespace: $IMAGEWATCH_ARGOCD_NAMESPACE
  labels: {argocd.argoproj.io/secret-type: repository}
stringData: {type: git, url: "$GIT_URL", username: "$IMAGEWATCH_GIT_USER", password: "$IMAGEWATCH_GIT_TOKEN"}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: $APP, namespace: $IMAGEWATCH_ARGOCD_NAMESPACE}
spec:
  project: default
  source: {repoURL: "$GIT_URL", targetRevision: main, path: apps/my-api/overlays/stg}
  destination: {server: "https://kubernetes.default.svc", namespace: $NS}
  syncPolicy: {automated: {prune: true}}
EOF
  kubectl -n "$IMAGEWATCH_ARGOCD_NAMESPACE" wait --for=jsonpath='{.status.health.status}'=Healthy \
    --timeout=180s "applications.argoproj.io/$APP" >/dev/null ||
    { kubectl -n "$IMAGEWATCH_ARGOCD_NAMESPACE" get "applications.argoproj.io/$APP" -o yaml | tail -30; die "Argo CD did not deploy the overlay"; }
  kubectl -n "$IMAGEWATCH_ARGOCD_NAMESPACE" get "applications.argoproj.io/$APP"
  kubectl -n "$NS" get pods -o wide
fi

say "starting the operator as ServiceAccount $NS/imagewatch (log: $DEMO/operator.log)"
KUBECONFIG="$SA_KUBECONFIG" SSL_CERT_FILE="$IMAGEWATCH_GIT_CA_BUNDLE" RUST_LOG=info \
  "${CARGO_TARGET_DIR:-target}/debug/imagewatch" run \
  --metrics-addr "127.0.0.1:$(free_port)" --cache-dir "$DEMO/cache" \
  --insecure-registry "$IMAGEWATCH_REGISTRY" --namespace "$NS" \
  --webhook-addr "127.0.0.1:$WEBHOOK_PORT" --webhook-secret hooks --pod-namespace "$NS" \
  >"$DEMO/operator.log" 2>&1 &
OP_PID=$!

say "applying samples/canary-primary/imagewatches.yaml"
sed -e "s#namespace: my-api#namespace: $NS#" \
  -e "s#registry.example.com/my-api#$IMAGEWATCH_REGISTRY/$IMAGE_REPO#" \
  -e "s#https://git.example.com/org/manifests.git#$GIT_URL#" \
  -e "s#interval: 1m#interval: 5m#" samples/canary-primary/imagewatches.yaml | kubectl apply -f -
kubectl -n "$NS" wait --for=condition=Ready --timeout=90s imagewatches/my-api-canary imagewatches/my-api-primary >/dev/null ||
  { tail -30 "$DEMO/operator.log"; kubectl -n "$NS" get imagewatches; die "the ImageWatches did not become Ready"; }
kubectl -n "$NS" get imagewatches

say "CI pushes my-api:canary-v1.2.4"
"$SCRIPTS_DIR/push-image.sh" "${PUSH[@]}" "$IMAGE_REPO:canary-v1.2.4"
# The registry notifies at the manifest push, the last step of push-image.sh: measure from
# the moment it returns (the commit may even be there already).
t0=$(date +%s%N)
kubectl -n "$NS" wait --for=jsonpath='{.status.applied.tag}'=canary-v1.2.4 --timeout=400s imagewatches/my-api-canary >/dev/null ||
  { tail -30 "$DEMO/operator.log"; die "the push did not become a commit"; }
t1=$(date +%s%N)
ms=$(((t1 - t0) / 1000000))
if grep -q 'registry event' "$DEMO/operator.log"; then
  how="event-driven: the registry's notification reached the webhook listener"
else
  how="no registry event arrived: the 5m poll (the fallback) made the commit"
fi
say "committed ${ms} ms after the push returned ($how):"
git --git-dir "$IMAGEWATCH_GIT_REPOS/$REPO_NAME.git" log -1 --stat -p main | cat
say "kubectl get iw"
kubectl -n "$NS" get iw
say "kubectl describe iw my-api-canary"
kubectl -n "$NS" describe iw my-api-canary
if ((ARGO)); then
  say "following the commit to the running Pod (imagewatch asked Argo CD to refresh; Argo CD synced)"
  kubectl -n "$NS" wait --for=condition=Deployed --timeout=180s imagewatches/my-api-canary >/dev/null ||
    { tail -30 "$DEMO/operator.log"; kubectl -n "$NS" get iw my-api-canary -o yaml | tail -30; die "the commit did not reach a running Pod"; }
  t2=$(date +%s%N)
  say "push -> commit ${ms} ms, push -> running $(((t2 - t0) / 1000000)) ms; the watch says:"
  kubectl -n "$NS" get iw my-api-canary -o jsonpath='{.status.conditions[?(@.type=="Deployed")].message}{"\n"}'
  kubectl -n "$NS" get pods -l track=canary -o custom-columns='POD:.metadata.name,IMAGE:.spec.containers[0].image,READY:.status.conditions[?(@.type=="Ready")].status'
  kubectl -n "$IMAGEWATCH_ARGOCD_NAMESPACE" delete "applications.argoproj.io/$APP" --wait=false >/dev/null
fi
