#!/usr/bin/env bash
# Local AWS emulation for the e2e tests: moto_server (ECR, SQS, EventBridge)
# on 127.0.0.1, from a cached venv ($CACHE/moto-venv).
#
#   moto.sh up     create the venv if needed, start moto_server, wait until it
#                  answers; last stdout line is the env export
#   moto.sh down   stop it
#   moto.sh env    print `export IMAGEWATCH_MOTO_URL=http://127.0.0.1:PORT`
#
# Use any dummy credentials (e.g. AWS_ACCESS_KEY_ID=testing) and region
# us-east-1; the account id is 123456789012. moto_helpers.py (run it with
# `moto.sh py moto_helpers.py ...` or the venv's python) seeds ECR/SQS/events.
# State is in memory: a restart starts empty.
set -euo pipefail
COMPONENT=moto
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR="$STATE/moto"
VENV="$CACHE/moto-venv"
MOTO_SPEC='moto[server,ecr,sqs,events]==5.2.5'

print_env() { echo "export IMAGEWATCH_MOTO_URL=http://127.0.0.1:$(<"$DIR/port")"; }

answers() { [[ $(http_status "http://127.0.0.1:$(<"$DIR/port")/moto-api/") == 200 ]]; }

ensure_venv() {
  local pyver want
  pyver=$("$PYTHON" -c 'import sys; print(sys.version.split()[0])')
  want="$MOTO_SPEC boto3 $pyver"
  if [[ -x $VENV/bin/moto_server && -f $VENV/.stamp && $(<"$VENV/.stamp") == "$want" ]]; then
    return 0
  fi
  log "creating venv $VENV ($MOTO_SPEC)"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$MOTO_SPEC" boto3 >&2
  echo "$want" >"$VENV/.stamp"
}

cmd_up() {
  mkdir -p "$DIR"
  if is_running moto && [[ -s $DIR/port ]] && answers; then
    print_env
    return 0
  fi
  stop_bg moto
  ensure_venv
  local port
  port=$(pick_port "$DIR/port")
  log "starting moto_server on 127.0.0.1:$port"
  start_bg moto "$DIR/moto.log" "$VENV/bin/moto_server" -H 127.0.0.1 -p "$port"
  wait_for moto "$DIR/moto.log" 60 answers
  log "ready"
  print_env
}

cmd_down() {
  stop_bg moto
  [[ -s $DIR/port ]] || return 0
  assert_gone moto "moto_server -H 127.0.0.1 -p $(<"$DIR/port")\$"
}

on_fail() { cmd_down; }

cmd_env() {
  [[ -s $DIR/port ]] || die "not up"
  print_env
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
env) cmd_env ;;
# Run a python script (default: moto_helpers.py) with the venv's interpreter.
py)
  shift
  ensure_venv
  exec "$VENV/bin/python" "$@"
  ;;
helpers)
  shift
  ensure_venv
  exec "$VENV/bin/python" "$SCRIPTS_DIR/moto_helpers.py" "$@"
  ;;
*) echo "usage: $0 up|down|env|helpers ARGS...|py SCRIPT ARGS..." >&2; exit 2 ;;
esac
