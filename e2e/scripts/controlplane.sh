#!/usr/bin/env bash
# Real Kubernetes API for the e2e tests: etcd + kube-apiserver built from the
# pinned Go module in e2e/controlplane, running as plain processes on 127.0.0.1.
#
#   controlplane.sh build   compile kube-apiserver and etcd into $CACHE/bin
#                           (skipped while go.mod/go.sum/go version are unchanged)
#   controlplane.sh up      start etcd + kube-apiserver, write $STATE/kubeconfig;
#                           last stdout line is `export KUBECONFIG=...`
#   controlplane.sh down    stop both and verify no process is left
#   controlplane.sh env     print the export line
#   controlplane.sh stop-apiserver     stop kube-apiserver only (etcd and its data stay)
#   controlplane.sh start-apiserver    start it again with the same flags, port and certs;
#                                      returns once /readyz answers ok
#   controlplane.sh restart-apiserver  both (fault tests: clients' watches must resume)
#
# With a node (IMAGEWATCH_E2E_NODE=1, the default; see node.sh) `up` also starts
# kube-controller-manager and kube-scheduler, and the ServiceAccount admission plugin is on:
# Deployments get Pods, namespaces finalize, garbage collection and the default
# ServiceAccounts (and their projected tokens) work as in any cluster.
#
# With IMAGEWATCH_E2E_NODE=0 there is no kube-controller-manager, scheduler or kubelet.
# Consequences the tests must then live with:
#   - Deployments/ReplicaSets never get pods; namespaces stuck in Terminating
#     never finalize (the namespace controller is not running), so use fresh
#     namespace names rather than deleting and re-creating one.
#   - No ServiceAccounts or SA token secrets are created automatically. `up`
#     creates the `default` ServiceAccount in namespace `default` so that
#     `kubectl create token default -n default` works (TokenRequest API is
#     served by the apiserver itself). Tests create other SAs they need.
#   - The ServiceAccount admission plugin is disabled (it would reject pods
#     whose SA does not exist yet).
#   - Garbage collection (ownerReferences cascade) does not happen.
# etcd data is wiped on every fresh `up`, so each up starts an empty cluster.
set -euo pipefail
COMPONENT=controlplane
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODDIR="$REPO/e2e/controlplane"
BIN="$CACHE/bin"
DIR="$STATE/controlplane"
PKI="$DIR/pki"
LOGS="$DIR/logs"
KUBECONFIG_FILE="$STATE/kubeconfig"
# Bump when the build command below changes in a way that needs a rebuild.
BUILD_RECIPE=1
WITH_NODE=${IMAGEWATCH_E2E_NODE:-1}
# IMAGEWATCH_E2E_PROFILING=1: kube-apiserver serves /debug/pprof (CPU profiles of a bench).
PROFILING=false
[[ ${IMAGEWATCH_E2E_PROFILING:-0} == 1 ]] && PROFILING=true

go_bin() {
  local go
  go=$(command -v go || true)
  [[ -z $go && -x /usr/local/go/bin/go ]] && go=/usr/local/go/bin/go
  [[ -n $go ]] || die "Go not found; install Go >= 1.24 (see e2e/scripts/deps.sh)"
  echo "$go"
}

build_stamp() {
  local go=$1
  {
    echo "recipe=$BUILD_RECIPE"
    "$go" env GOVERSION GOOS GOARCH
    cat "$MODDIR/go.mod" "$MODDIR/go.sum"
  } | sha256sum | cut -d' ' -f1
}

# go_build_bins NAME... : build k8s.io/kubernetes/cmd/NAME (and etcd for NAME=etcd) into
# $BIN from the pinned module, stamped with the Kubernetes version.
go_build_bins() {
  local go=$1
  shift
  local kver major minor ldflags name
  kver=$(cd "$MODDIR" && GOTOOLCHAIN=local "$go" list -m -f '{{.Version}}' k8s.io/kubernetes)
  major=$(sed -E 's/^v([0-9]+)\..*/\1/' <<<"$kver")
  minor=$(sed -E 's/^v[0-9]+\.([0-9]+)\..*/\1/' <<<"$kver")
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kver -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  (
    cd "$MODDIR"
    export GOTOOLCHAIN=local GOFLAGS=-mod=readonly GOPROXY=${GOPROXY:?set GOPROXY=<your Go module proxy>}
    GOPROXY=${GOPROXY%%,*}
    for name in "$@"; do
      if [[ $name == etcd ]]; then
        "$go" build -trimpath -ldflags "-s -w" -o "$BIN/etcd.new" go.etcd.io/etcd/server/v3
      else
        "$go" build -trimpath -ldflags "$ldflags" -o "$BIN/$name.new" "k8s.io/kubernetes/cmd/$name"
      fi
    done
  ) >&2 || die "go build of $* failed"
  for name in "$@"; do mv -f "$BIN/$name.new" "$BIN/$name"; done
}

cmd_build() {
  local go stamp
  go=$(go_bin)
  stamp=$(build_stamp "$go")
  if [[ -x $BIN/kube-apiserver && -x $BIN/etcd && -f $BIN/.stamp && $(<"$BIN/.stamp") == "$stamp" ]]; then
    return 0
  fi
  mkdir -p "$BIN"
  log "building kube-apiserver and etcd (first build takes a while)"
  local t0=$SECONDS
  go_build_bins "$go" kube-apiserver etcd
  echo "$stamp" >"$BIN/.stamp"
  log "built in $((SECONDS - t0))s into $BIN"
}

# The node's binaries (kubelet, kube-controller-manager, kube-scheduler): same pins, own stamp,
# so that a ground without a node never builds them.
cmd_build_node() {
  local go stamp
  go=$(go_bin)
  stamp=$(build_stamp "$go")
  if [[ -x $BIN/kubelet && -x $BIN/kube-controller-manager && -x $BIN/kube-scheduler &&
    -f $BIN/.node-stamp && $(<"$BIN/.node-stamp") == "$stamp" ]]; then
    return 0
  fi
  mkdir -p "$BIN"
  log "building kubelet, kube-controller-manager and kube-scheduler (about 3 CPU-minutes warm)"
  local t0=$SECONDS
  go_build_bins "$go" kubelet kube-controller-manager kube-scheduler
  echo "$stamp" >"$BIN/.node-stamp"
  log "built in $((SECONDS - t0))s into $BIN"
}

# --- PKI -------------------------------------------------------------------

gen_pki() {
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  if [[ ! -s $PKI/ca.crt ]]; then
    log "generating CA, serving cert, admin cert, service-account key"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -sha256 \
      -keyout "$PKI/ca.key" -out "$PKI/ca.crt" -subj "/CN=imagewatch-e2e-ca" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
    rm -f "$PKI/apiserver.crt" "$PKI/admin.crt"
  fi
  if [[ ! -s $PKI/apiserver.crt ]]; then
    cat >"$PKI/apiserver.ext" <<'EOF'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
    openssl req -newkey rsa:2048 -nodes -keyout "$PKI/apiserver.key" -out "$PKI/apiserver.csr" \
      -subj "/CN=kube-apiserver" 2>/dev/null
    openssl x509 -req -in "$PKI/apiserver.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
      -days 3650 -sha256 -extfile "$PKI/apiserver.ext" -out "$PKI/apiserver.crt" 2>/dev/null
  fi
  if [[ ! -s $PKI/admin.crt ]]; then
    cat >"$PKI/client.ext" <<'EOF'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
EOF
    openssl req -newkey rsa:2048 -nodes -keyout "$PKI/admin.key" -out "$PKI/admin.csr" \
      -subj "/O=system:masters/CN=admin" 2>/dev/null
    openssl x509 -req -in "$PKI/admin.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
      -days 3650 -sha256 -extfile "$PKI/client.ext" -out "$PKI/admin.crt" 2>/dev/null
  fi
  if [[ ! -s $PKI/sa.key ]]; then
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" 2>/dev/null
    openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
}

write_kubeconfig() {
  local port=$1 tmp
  tmp=$(mktemp "$STATE/kubeconfig.XXXXXX")
  cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: imagewatch-e2e
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/admin.crt")
    client-key-data: $(base64 -w0 <"$PKI/admin.key")
contexts:
- name: imagewatch-e2e
  context:
    cluster: imagewatch-e2e
    user: admin
    namespace: default
current-context: imagewatch-e2e
EOF
  chmod 600 "$tmp"
  mv -f "$tmp" "$KUBECONFIG_FILE"
}

# --- health ------------------------------------------------------------------

etcd_healthy() {
  local port
  port=$(<"$DIR/etcd-client.port")
  [[ $(curl -s --max-time 3 "http://127.0.0.1:$port/health") == *'"health":"true"'* ]]
}

apiserver_ready() {
  local port
  port=$(<"$DIR/apiserver.port")
  [[ $(curl -s --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$port/readyz") == ok ]]
}

healthy() {
  is_running etcd && is_running kube-apiserver && [[ -s $KUBECONFIG_FILE ]] &&
    etcd_healthy && apiserver_ready &&
    { ((!WITH_NODE)) || { is_running kube-controller-manager && is_running kube-scheduler; }; }
}

print_env() { echo "export KUBECONFIG=$KUBECONFIG_FILE"; }

# port_listening PORT: true when something accepts connections on 127.0.0.1:PORT.
port_listening() {
  "$PYTHON" - "$1" <<'EOF'
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
except OSError:
    sys.exit(1)
EOF
}

# --- commands ----------------------------------------------------------------

cmd_up() {
  if healthy; then
    print_env
    return 0
  fi
  # Partially up or stale: start clean.
  cmd_down >/dev/null 2>&1 || true
  cmd_build
  gen_pki
  mkdir -p "$LOGS"

  local ecp epp ap
  ecp=$(pick_port "$DIR/etcd-client.port")
  epp=$(pick_port "$DIR/etcd-peer.port")
  while [[ $epp == "$ecp" ]]; do epp=$(free_port); echo "$epp" >"$DIR/etcd-peer.port"; done
  ap=$(pick_port "$DIR/apiserver.port")
  while [[ $ap == "$ecp" || $ap == "$epp" ]]; do ap=$(free_port); echo "$ap" >"$DIR/apiserver.port"; done

  rm -rf "$DIR/etcd-data"
  mkdir -p "$DIR/etcd-data"
  chmod 700 "$DIR/etcd-data"
  log "starting etcd (client 127.0.0.1:$ecp, peer 127.0.0.1:$epp)"
  start_bg etcd "$LOGS/etcd.log" "$BIN/etcd" \
    --name=imagewatch-e2e \
    --data-dir="$DIR/etcd-data" \
    --listen-client-urls="http://127.0.0.1:$ecp" \
    --advertise-client-urls="http://127.0.0.1:$ecp" \
    --listen-peer-urls="http://127.0.0.1:$epp" \
    --initial-advertise-peer-urls="http://127.0.0.1:$epp" \
    --initial-cluster="imagewatch-e2e=http://127.0.0.1:$epp" \
    --initial-cluster-state=new \
    --unsafe-no-fsync \
    --log-level=warn
  wait_for etcd "$LOGS/etcd.log" 60 etcd_healthy

  ((WITH_NODE)) && cmd_build_node
  start_apiserver "$ecp" "$ap"
  write_kubeconfig "$ap"
  ((WITH_NODE)) && start_controllers

  # No controller-manager: create the default ServiceAccount ourselves
  # (201 created, 409 already there; retried while namespace `default` is
  # still being bootstrapped).
  local deadline=$((SECONDS + 60)) code
  while :; do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 \
      --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
      -X POST -H 'Content-Type: application/json' \
      -d '{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}}' \
      "https://127.0.0.1:$ap/api/v1/namespaces/default/serviceaccounts" || true)
    [[ $code == 201 || $code == 409 ]] && break
    ((SECONDS < deadline)) || fail_start kube-apiserver "$LOGS/kube-apiserver.log" "cannot create default ServiceAccount (HTTP $code)"
    sleep 0.2
  done
  log "ready"
  print_env
}

# start_apiserver ETCD_CLIENT_PORT PORT: start kube-apiserver and wait for /readyz.
start_apiserver() {
  local ecp=$1 ap=$2
  local issuer=https://kubernetes.default.svc.cluster.local
  local admission=(--disable-admission-plugins=ServiceAccount)
  ((WITH_NODE)) && admission=(--enable-admission-plugins=ServiceAccount)
  log "starting kube-apiserver (https://127.0.0.1:$ap)"
  start_bg kube-apiserver "$LOGS/kube-apiserver.log" "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ecp" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --secure-port="$ap" \
    --tls-cert-file="$PKI/apiserver.crt" \
    --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --authorization-mode=Node,RBAC \
    --service-account-issuer="$issuer" \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --api-audiences="$issuer" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --allow-privileged=true \
    "${admission[@]}" \
    --endpoint-reconciler-type=none \
    --cert-dir="$DIR/apiserver-certs" \
    --profiling="$PROFILING"
  wait_for kube-apiserver "$LOGS/kube-apiserver.log" 180 apiserver_ready
}

# kube-controller-manager and kube-scheduler, with the admin identity, on loopback.
start_controllers() {
  local kcm sched
  kcm=$(pick_port "$DIR/controller-manager.port")
  sched=$(pick_port "$DIR/scheduler.port")
  while [[ $sched == "$kcm" ]]; do sched=$(free_port); echo "$sched" >"$DIR/scheduler.port"; done
  log "starting kube-controller-manager and kube-scheduler"
  start_bg kube-controller-manager "$LOGS/kube-controller-manager.log" "$BIN/kube-controller-manager" \
    --kubeconfig="$KUBECONFIG_FILE" \
    --authentication-kubeconfig="$KUBECONFIG_FILE" \
    --authorization-kubeconfig="$KUBECONFIG_FILE" \
    --bind-address=127.0.0.1 \
    --secure-port="$kcm" \
    --cert-dir="$DIR/controller-manager-certs" \
    --leader-elect=false \
    --service-account-private-key-file="$PKI/sa.key" \
    --root-ca-file="$PKI/ca.crt" \
    --use-service-account-credentials=false \
    --controllers='*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller' \
    --profiling=false
  start_bg kube-scheduler "$LOGS/kube-scheduler.log" "$BIN/kube-scheduler" \
    --kubeconfig="$KUBECONFIG_FILE" \
    --authentication-kubeconfig="$KUBECONFIG_FILE" \
    --authorization-kubeconfig="$KUBECONFIG_FILE" \
    --bind-address=127.0.0.1 \
    --secure-port="$sched" \
    --cert-dir="$DIR/scheduler-certs" \
    --leader-elect=false \
    --profiling=false
  wait_for kube-controller-manager "$LOGS/kube-controller-manager.log" 60 component_healthy "$kcm"
  wait_for kube-scheduler "$LOGS/kube-scheduler.log" 60 component_healthy "$sched"
}

component_healthy() {
  [[ $(curl -sk --max-time 3 "https://127.0.0.1:$1/healthz") == ok ]]
}

cmd_down() {
  stop_bg kube-scheduler
  stop_bg kube-controller-manager
  stop_bg kube-apiserver
  stop_bg etcd
  local ok=0
  assert_gone kube-apiserver "--tls-cert-file=$PKI/apiserver.crt" || ok=1
  assert_gone etcd "--data-dir=$DIR/etcd-data" || ok=1
  assert_gone kube-controller-manager "--cert-dir=$DIR/controller-manager-certs" || ok=1
  assert_gone kube-scheduler "--cert-dir=$DIR/scheduler-certs" || ok=1
  return $ok
}

on_fail() { cmd_down; }

cmd_stop_apiserver() {
  [[ -s $DIR/apiserver.port ]] || die "not up (no $DIR/apiserver.port)"
  stop_bg kube-apiserver
  assert_gone kube-apiserver "--tls-cert-file=$PKI/apiserver.crt"
}

# Same flags, port and certificates as `up`, so kubeconfigs and tokens stay valid. A failed
# start must not take etcd (and every object) down with it: no on_fail here.
cmd_start_apiserver() {
  [[ -s $DIR/apiserver.port && -s $DIR/etcd-client.port ]] || die "not up (no port files in $DIR)"
  if ! is_running etcd || ! etcd_healthy; then
    die "etcd is not running; use \`up\`"
  fi
  if is_running kube-apiserver && apiserver_ready; then
    return 0
  fi
  on_fail() { :; }
  local ap t0=$SECONDS
  ap=$(<"$DIR/apiserver.port")
  # Nobody may listen on the port any more (connections of the old process may linger in
  # TIME_WAIT; kube-apiserver binds with SO_REUSEADDR, so those do not matter).
  local deadline=$((SECONDS + 30))
  while port_listening "$ap"; do
    ((SECONDS < deadline)) || die "port $ap is still in use"
    sleep 0.2
  done
  # The log of the previous run is kept next to the new one.
  [[ -s $LOGS/kube-apiserver.log ]] && mv -f "$LOGS/kube-apiserver.log" "$LOGS/kube-apiserver.previous.log"
  start_apiserver "$(<"$DIR/etcd-client.port")" "$ap"
  log "kube-apiserver ready again after $((SECONDS - t0))s"
}

cmd_env() {
  [[ -s $KUBECONFIG_FILE ]] || die "not up (no $KUBECONFIG_FILE)"
  print_env
}

case ${1:-} in
build) cmd_build ;;
build-node) cmd_build_node ;;
up) cmd_up ;;
down) cmd_down ;;
env) cmd_env ;;
stop-apiserver) cmd_stop_apiserver ;;
start-apiserver) cmd_start_apiserver ;;
restart-apiserver) cmd_stop_apiserver && cmd_start_apiserver ;;
*) echo "usage: $0 build|up|down|env|stop-apiserver|start-apiserver|restart-apiserver" >&2; exit 2 ;;
esac
