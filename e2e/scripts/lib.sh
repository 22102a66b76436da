# shellcheck shell=bash
# Shared helpers for the e2e test-ground scripts (sourced, not executed).
#
# Layout:
#   $STATE  per-checkout runtime state: certs, data dirs, logs, pid files, ports
#           (${IMAGEWATCH_E2E_STATE:-<repo>/.cache/e2e}; .cache is gitignored)
#   $CACHE  per-user build cache: compiled binaries, python venvs
#           (${IMAGEWATCH_E2E_CACHE:-$HOME/.cache/imagewatch-e2e})
#
# Every service is started in its own session/process group (setsid) and its
# leader pid is recorded in $STATE/pids/<name>.pid, so `down` can stop exactly
# what `up` started (the whole group) and nothing else.
# Everything listens on 127.0.0.1 only.

SCRIPTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPTS_DIR/../.." && pwd)
STATE=$(realpath -m "${IMAGEWATCH_E2E_STATE:-$REPO/.cache/e2e}")
CACHE=$(realpath -m "${IMAGEWATCH_E2E_CACHE:-$HOME/.cache/imagewatch-e2e}")
PIDS="$STATE/pids"
PYTHON=${PYTHON:-python3}
# Go modules come from the module proxy alone: the default list ends in ",direct", which makes
# `go` try a module's source host when the proxy refuses it, and that is not on loopback.
# Without a proxy the Go builds stop with a message (set GOPROXY=<your Go module proxy>).
if [[ -z ${GOPROXY:-} ]]; then
  GOPROXY=$( (command -v go >/dev/null && go env GOPROXY) || true)
fi
GOPROXY=${GOPROXY%%,direct*}
GOPROXY=${GOPROXY%%|direct*}
[[ $GOPROXY == direct || $GOPROXY == off ]] && GOPROXY=
export GOPROXY
# No job control: background children must not become process-group leaders
# before setsid runs (otherwise setsid forks and $! would not be the service).
set +m
mkdir -p "$STATE" "$CACHE" "$PIDS"

# Log to stderr so stdout stays machine-readable (export lines).
log() { printf '[%s] %s\n' "${COMPONENT:-e2e}" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "${COMPONENT:-e2e}" "$*" >&2; exit 1; }

# Print a free TCP port on 127.0.0.1 (bind port 0, report, release).
free_port() {
  "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# port_is_free PORT: true when nothing listens on 127.0.0.1:PORT and it can be bound.
port_is_free() {
  "$PYTHON" - "$1" <<'EOF'
import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
finally:
    s.close()
EOF
}

# pick_port FILE: reuse the port saved in FILE if it is still free, else pick a
# new free one; saves and prints it. Keeps URLs stable across down/up cycles.
pick_port() {
  local file=$1 port=""
  [[ -s $file ]] && port=$(<"$file")
  if [[ -z $port ]] || ! port_is_free "$port"; then
    port=$(free_port)
  fi
  echo "$port" >"$file"
  echo "$port"
}

# pid_of NAME: print the recorded pid of a service if that process is alive.
pid_of() {
  local f="$PIDS/$1.pid" pid
  [[ -s $f ]] || return 1
  pid=$(<"$f")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

is_running() { pid_of "$1" >/dev/null; }

# start_bg NAME LOGFILE CMD...: start CMD detached in a new session, record pid.
start_bg() {
  local name=$1 logfile=$2
  shift 2
  mkdir -p "$(dirname "$logfile")"
  : >"$logfile"
  setsid "$@" </dev/null >>"$logfile" 2>&1 &
  echo $! >"$PIDS/$name.pid"
}

# stop_bg NAME: TERM the service's process group, wait up to 15s, then KILL.
stop_bg() {
  local name=$1 f="$PIDS/$1.pid" pid i
  [[ -s $f ]] || return 0
  pid=$(<"$f")
  if kill -0 "$pid" 2>/dev/null; then
    log "stopping $name (pid $pid)"
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name did not stop on TERM, sending KILL"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  # Reap leftovers of the group (e.g. CGI children) if any survived the leader.
  if pgrep -g "$pid" >/dev/null 2>&1; then
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

# assert_gone NAME PATTERN: fail if a process whose command line contains
# PATTERN still exists (verification only; nothing is killed by pattern).
assert_gone() {
  local name=$1 pattern=$2 i
  for ((i = 0; i < 50; i++)); do
    pgrep -f -- "$pattern" >/dev/null || return 0
    sleep 0.1
  done
  log "processes of $name still running:"
  pgrep -af -- "$pattern" >&2 || true
  return 1
}

# fail_start NAME LOGFILE [MSG]: report a part that failed to start, stop what
# this script already started (its `on_fail` function, if defined; logs are
# kept) and exit non-zero.
fail_start() {
  local name=$1 logfile=$2 msg=${3:-failed to start}
  printf '[%s] ERROR: %s %s; last lines of %s:\n' "${COMPONENT:-e2e}" "$name" "$msg" "$logfile" >&2
  tail -n 40 "$logfile" >&2 2>/dev/null || true
  if declare -F on_fail >/dev/null; then on_fail >/dev/null 2>&1 || true; fi
  exit 1
}

# wait_for NAME LOGFILE TIMEOUT_S CMD...: poll CMD every 0.2s until it succeeds.
# Fails early (with the log tail) when the service's process has exited.
wait_for() {
  local name=$1 logfile=$2 timeout=$3
  shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ! is_running "$name"; then
      fail_start "$name" "$logfile" "exited during startup"
    fi
    if ((SECONDS >= deadline)); then
      fail_start "$name" "$logfile" "not ready after ${timeout}s"
    fi
    sleep 0.2
  done
}

# http_status URL [CURL_ARGS...]: print the HTTP status code of a GET.
http_status() {
  local url=$1
  shift
  curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$@" "$url" || true
}

# go_bin: the Go toolchain's binary (PATH, else /usr/local/go).
go_bin() {
  local go
  go=$(command -v go || true)
  [[ -z $go && -x /usr/local/go/bin/go ]] && go=/usr/local/go/bin/go
  [[ -n $go ]] || die "Go not found; install Go >= 1.26 (see e2e/scripts/deps.sh)"
  echo "$go"
}

# vendor_archive NAME OVERRIDE: a source archive's path (OVERRIDE, or NAME in the shared/vendor
# folder beside the repository).
vendor_archive() {
  local name=$1 a=${2:-} d
  if [[ -z $a ]]; then
    for d in "$REPO/../shared/vendor" "$REPO/shared/vendor"; do
      [[ -f $d/$name ]] && { a=$d/$name; break; }
    done
  fi
  [[ -n $a && -f $a ]] || die "the source archive $name was not found \
(looked in ../shared/vendor beside the repository)"
  realpath "$a"
}

# verify_archive FILE NAME: the archive's SHA-256 must be the one its SHA256SUMS lists for NAME.
verify_archive() {
  local a=$1 name=$2 sums want got
  sums=$(dirname "$a")/SHA256SUMS
  [[ -f $sums ]] || die "$sums is missing: $a cannot be checked"
  want=$(awk -v f="$name" '$2 == f || $2 == "*"f {print $1}' "$sums")
  [[ -n $want ]] || die "$sums does not list $name"
  got=$(sha256sum "$a" | cut -d' ' -f1)
  [[ $got == "$want" ]] || die "$a: SHA-256 $got, SHA256SUMS says $want"
  echo "$got"
}
