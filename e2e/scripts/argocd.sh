#!/usr/bin/env bash
# A real Argo CD beside the test ground: application-controller, repo-server,
# applicationset-controller and redis, out of cluster, every listener on 127.0.0.1.
#
#   argocd.sh build   build Argo CD v3.5.1 from the source archive in ../shared/vendor (checked
#                     against its SHA-256) and kustomize into $CACHE/argocd-v3.5.1; fetch
#                     Debian's redis-server without installing it. Skipped while the archive,
#                     the patch below and Go are unchanged.
#   argocd.sh up      (KUBECONFIG of the ground set) install the CRDs, namespace argocd, the
#                     base config, the `default` AppProject and imagewatch's health checks
#                     (charts/imagewatch/argocd/argocd-cm-patch.yaml, exactly as shipped), then
#                     start the four processes; prints the export lines
#   argocd.sh down    stop every process it started and check none is left
#   argocd.sh env     print the export lines
#   argocd.sh cli ARGS...   run the `argocd` CLI of the build (e.g. `admin settings …`)
#
# One change is made to the source before building: the application-controller binds its
# metrics listener to 0.0.0.0 in code (controller/appcontroller.go); it is bound to 127.0.0.1.
# The build stops if that line is not found exactly once.
#
# The archive: $IMAGEWATCH_ARGOCD_ARCHIVE, or argo-cd-v3.5.1-src.tar.xz in the shared/vendor
# folder beside the repository (its SHA256SUMS lists it). The repo-server caches a branch's
# revision for 3 minutes: imagewatch's refresh annotation is what makes a commit deploy at
# once, and the ground keeps Argo CD's defaults so that the tests see that.
set -euo pipefail
COMPONENT=argocd
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

VERSION=v3.5.1
COMMIT=109ca7ca71139e514114499d294a492e7910a965
ARCHIVE_NAME=argo-cd-$VERSION-src.tar.xz
KUSTOMIZE_VERSION=v5.8.1
REDIS_PACKAGES=(redis-server redis-tools libjemalloc2 liblzf1)
# Bump when the build below changes in a way that needs a rebuild.
BUILD_RECIPE=1
HOME_DIR="$CACHE/argocd-$VERSION"
BIN="$HOME_DIR/bin"
REDIS_DIR="$CACHE/redis"
DIR="$STATE/argocd"
LOGS="$DIR/logs"
COMPONENTS=(redis repo-server application-controller applicationset-controller)




# The one change to the source: the controller's metrics listener on loopback.
patch_source() {
  local src=$1 file="$1/controller/appcontroller.go" n
  n=$(grep -c 'metricsAddr := fmt.Sprintf("0.0.0.0:%d", metricsPort)' "$file" || true)
  [[ $n == 1 ]] || die "$file: the metrics listen address line was found $n times, not once"
  sed -i 's|metricsAddr := fmt.Sprintf("0.0.0.0:%d", metricsPort)|metricsAddr := fmt.Sprintf("127.0.0.1:%d", metricsPort)|' "$file"
}

build_redis() {
  local stamp="${REDIS_PACKAGES[*]}"
  if [[ -x $REDIS_DIR/usr/bin/redis-server && -f $REDIS_DIR/.stamp && $(<"$REDIS_DIR/.stamp") == "$stamp" ]]; then
    return 0
  fi
  log "unpacking Debian's ${REDIS_PACKAGES[*]} (not installed: no service is started)"
  local tmp deb
  tmp=$(mktemp -d "$CACHE/.redis.XXXXXX")
  if ! (cd "$tmp" && apt-get download "${REDIS_PACKAGES[@]}" >&2 2>/dev/null); then
    apt-get update -qq >&2 || true
    (cd "$tmp" && apt-get download "${REDIS_PACKAGES[@]}" >&2) || { rm -rf "$tmp"; die "apt-get download ${REDIS_PACKAGES[*]} failed"; }
  fi
  mkdir -p "$tmp/root"
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
  rm -rf "$REDIS_DIR"
  mv "$tmp/root" "$REDIS_DIR"
  rm -rf "$tmp"
  echo "$stamp" >"$REDIS_DIR/.stamp"
}

cmd_build() {
  local go a sum stamp
  go=$(go_bin)
  a=$(vendor_archive "$ARCHIVE_NAME" "${IMAGEWATCH_ARGOCD_ARCHIVE:-}")
  sum=$(verify_archive "$a" "$ARCHIVE_NAME")
  stamp=$({ echo "recipe=$BUILD_RECIPE $sum kustomize=$KUSTOMIZE_VERSION"; declare -f patch_source; "$go" env GOVERSION GOOS GOARCH; } |
    sha256sum | cut -d' ' -f1)
  build_redis
  if [[ -x $BIN/argocd && -x $BIN/kustomize && -f $HOME_DIR/.stamp && $(<"$HOME_DIR/.stamp") == "$stamp" ]]; then
    return 0
  fi
  log "building Argo CD $VERSION from $a (first build takes about 7 CPU-minutes and 2 GB of memory)"
  local t0=$SECONDS tmp
  tmp=$(mktemp -d "$CACHE/.argocd-build.XXXXXX")
  tar -xJf "$a" -C "$tmp"
  patch_source "$tmp"
  (
    cd "$tmp"
    export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0 GOPROXY
    local pkg=github.com/argoproj/argo-cd/v3/common
    nice -n 10 "$go" build -trimpath -ldflags "-s -w -X $pkg.version=${VERSION#v} -X $pkg.gitCommit=$COMMIT \
-X $pkg.gitTag=$VERSION -X $pkg.gitTreeState=clean" -o "$tmp/argocd" ./cmd
    GOBIN="$tmp/kbin" GOFLAGS= nice -n 10 "$go" install "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"
  ) >&2 || { rm -rf "$tmp"; die "go build of Argo CD $VERSION failed"; }
  rm -rf "$HOME_DIR"
  mkdir -p "$BIN" "$HOME_DIR/manifests"
  mv "$tmp/argocd" "$BIN/argocd"
  mv "$tmp/kbin/kustomize" "$BIN/kustomize"
  # One binary; the name it is started under picks the component. The repo-server runs
  # `argocd` (git askpass) and the two wrappers from its PATH.
  local name
  for name in argocd-application-controller argocd-repo-server argocd-applicationset-controller \
    argocd-git-ask-pass; do
    ln -s argocd "$BIN/$name"
  done
  cp "$tmp/hack/git-verify-wrapper.sh" "$tmp/hack/gpg-wrapper.sh" "$BIN/"
  chmod +x "$BIN"/*.sh
  cp -r "$tmp/manifests/crds" "$tmp/manifests/base" "$HOME_DIR/manifests/"
  chmod -R u+w "$tmp" 2>/dev/null || true
  rm -rf "$tmp"
  echo "$stamp" >"$HOME_DIR/.stamp"
  log "built in $((SECONDS - t0))s"
}

print_env() {
  echo "export IMAGEWATCH_ARGOCD_NAMESPACE=argocd"
  echo "export IMAGEWATCH_ARGOCD_BIN=$BIN"
  echo "export IMAGEWATCH_ARGOCD_REPO_SERVER=127.0.0.1:$(<"$DIR/repo-server.port")"
}

# The environment of every Argo CD process: its own data dirs, out of cluster, no GPG.
argocd_env() {
  local name=$1
  mkdir -p "$DIR/$name/tmp" "$DIR/$name/home" "$DIR/tls" "$DIR/ssh" "$DIR/$name/gnupg"
  chmod 700 "$DIR/$name/gnupg"
  echo "HOME=$DIR/$name/home"
  echo "TMPDIR=$DIR/$name/tmp"
  echo "PATH=$BIN:$CACHE/bin:$PATH"
  echo "KUBECONFIG=$KUBECONFIG"
  echo "ARGOCD_FAKE_IN_CLUSTER=true"
  echo "ARGOCD_TLS_DATA_PATH=$DIR/tls"
  echo "ARGOCD_SSH_DATA_PATH=$DIR/ssh"
  echo "ARGOCD_GNUPGHOME=$DIR/$name/gnupg"
  echo "ARGOCD_GPG_ENABLED=false"
  echo "ARGOCD_ASK_PASS_SOCK=$DIR/$name/askpass.sock"
  echo "AWS_EC2_METADATA_DISABLED=true"
  echo "AWS_REGION=us-east-1"
}

start_component() {
  local name=$1
  shift
  local envs=()
  mapfile -t envs < <(argocd_env "$name")
  start_bg "argocd-$name" "$LOGS/$name.log" env -u ARGOCD_CONTROLLER_REPLICAS -u ARGOCD_BINARY_NAME \
    "${envs[@]}" "$@"
}

port_listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

redis_ready() {
  [[ $(LD_LIBRARY_PATH="$REDIS_DIR/usr/lib/x86_64-linux-gnu" "$REDIS_DIR/usr/bin/redis-cli" \
    -h 127.0.0.1 -p "$1" ping 2>/dev/null) == PONG ]]
}

healthy() {
  local c
  for c in "${COMPONENTS[@]}"; do is_running "argocd-$c" || return 1; done
  [[ -s $DIR/repo-server.port ]] && port_listening "$(<"$DIR/repo-server.port")"
}

# wait_established CRD: until the API server serves it (a fresh CRD has no conditions at first,
# which `kubectl wait` reports as an error).
wait_established() {
  local deadline=$((SECONDS + 60))
  until [[ $(kubectl get crd "$1" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null) == True ]]; do
    ((SECONDS < deadline)) || die "CRD $1 not Established after 60s"
    sleep 0.2
  done
}

# The cluster objects Argo CD needs (what its install manifests and argocd-server would make).
install_objects() {
  local m="$HOME_DIR/manifests"
  kubectl apply --server-side --force-conflicts -f "$m/crds/application-crd.yaml" \
    -f "$m/crds/applicationset-crd.yaml" -f "$m/crds/appproject-crd.yaml" >&2
  local crd
  for crd in applications applicationsets appprojects; do
    wait_established "$crd.argoproj.io"
  done
  kubectl create namespace argocd --dry-run=client -o yaml | kubectl apply -f - >&2
  kubectl apply -n argocd -k "$m/base/config" >&2
  kubectl -n argocd patch configmap argocd-cm --patch-file "$REPO/charts/imagewatch/argocd/argocd-cm-patch.yaml" >&2
  kubectl apply -f - >&2 <<'EOF'
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata: {name: default, namespace: argocd}
spec:
  sourceRepos: ["*"]
  destinations: [{server: "*", namespace: "*"}]
  clusterResourceWhitelist: [{group: "*", kind: "*"}]
EOF
}

# Trust the ground's git server over HTTPS and SSH (out of cluster nothing reads
# argocd-tls-certs-cm or argocd-ssh-known-hosts-cm: the files are read).
trust_git_server() {
  local ca=${IMAGEWATCH_GIT_CA_BUNDLE:-} kh=${IMAGEWATCH_GIT_KNOWN_HOSTS:-}
  [[ -n $ca && -f $ca ]] && cp "$ca" "$DIR/tls/127.0.0.1"
  [[ -n $kh && -f $kh ]] && cp "$kh" "$DIR/ssh/ssh_known_hosts"
  return 0
}

cmd_up() {
  [[ -n ${KUBECONFIG:-} && -f $KUBECONFIG ]] || die "KUBECONFIG of the ground is not set (start the control plane first)"
  mkdir -p "$DIR" "$LOGS"
  if healthy; then
    # The health checks exactly as the chart ships them, also on a ground started earlier.
    kubectl -n argocd patch configmap argocd-cm \
      --patch-file "$REPO/charts/imagewatch/argocd/argocd-cm-patch.yaml" >&2
    print_env
    return 0
  fi
  cmd_down >/dev/null 2>&1 || true
  cmd_build
  install_objects
  mkdir -p "$DIR/tls" "$DIR/ssh"
  trust_git_server

  local rp rs rm cm am ap aw
  rp=$(pick_port "$DIR/redis.port")
  rs=$(pick_port "$DIR/repo-server.port")
  rm=$(pick_port "$DIR/repo-server-metrics.port")
  cm=$(pick_port "$DIR/controller-metrics.port")
  am=$(pick_port "$DIR/appset-metrics.port")
  ap=$(pick_port "$DIR/appset-probe.port")
  aw=$(pick_port "$DIR/appset-webhook.port")
  local ports=("$rp" "$rs" "$rm" "$cm" "$am" "$ap" "$aw")
  [[ $(printf '%s\n' "${ports[@]}" | sort -u | wc -l) == "${#ports[@]}" ]] ||
    die "two Argo CD listeners were given the same port; run up again"

  log "starting redis (127.0.0.1:$rp)"
  start_bg argocd-redis "$LOGS/redis.log" env "LD_LIBRARY_PATH=$REDIS_DIR/usr/lib/x86_64-linux-gnu" \
    "$REDIS_DIR/usr/bin/redis-server" --bind 127.0.0.1 --port "$rp" --save '' --appendonly no \
    --protected-mode yes --dir "$DIR"
  wait_for argocd-redis "$LOGS/redis.log" 30 redis_ready "$rp"

  log "starting repo-server (127.0.0.1:$rs)"
  start_component repo-server "$BIN/argocd-repo-server" --address 127.0.0.1 --port "$rs" \
    --metrics-address 127.0.0.1 --metrics-port "$rm" --disable-tls --client-ca-path= \
    --redis "127.0.0.1:$rp" --loglevel info
  wait_for argocd-repo-server "$LOGS/repo-server.log" 60 port_listening "$rs"

  # --persist-resource-health (controller.resource.health.persist in argocd-cmd-params-cm)
  # keeps each resource's health message in the Application's status, where a test can read
  # what the UI shows from the controller's cache.
  log "starting application-controller (metrics 127.0.0.1:$cm)"
  start_component application-controller "$BIN/argocd-application-controller" \
    --namespace argocd --repo-server "127.0.0.1:$rs" --repo-server-plaintext \
    --redis "127.0.0.1:$rp" --metrics-port "$cm" --loglevel info \
    --status-processors 4 --operation-processors 2 --persist-resource-health
  log "starting applicationset-controller"
  start_component applicationset-controller "$BIN/argocd-applicationset-controller" \
    --namespace argocd --argocd-repo-server "127.0.0.1:$rs" --repo-server-plaintext \
    --metrics-addr "127.0.0.1:$am" --probe-addr "127.0.0.1:$ap" --webhook-addr "127.0.0.1:$aw" \
    --enable-leader-election=false --loglevel info
  wait_for argocd-application-controller "$LOGS/application-controller.log" 60 port_listening "$cm"
  wait_for argocd-applicationset-controller "$LOGS/applicationset-controller.log" 60 port_listening "$ap"
  log "ready"
  print_env
}

cmd_down() {
  local i
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    stop_bg "argocd-${COMPONENTS[i]}"
  done
  assert_gone argocd "$BIN/argocd-" && assert_gone argocd-redis "$REDIS_DIR/usr/bin/redis-server"
}

on_fail() { cmd_down; }

cmd_env() {
  [[ -s $DIR/repo-server.port ]] || die "not up"
  print_env
}

case ${1:-} in
build) cmd_build ;;
up) cmd_up ;;
down) cmd_down ;;
env) cmd_env ;;
cli) shift; cmd_build; exec env -u ARGOCD_BINARY_NAME "$BIN/argocd" "$@" ;;
*) echo "usage: $0 build|up|down|env|cli ARGS..." >&2; exit 2 ;;
esac
