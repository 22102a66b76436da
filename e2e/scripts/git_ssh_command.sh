#!/usr/bin/env bash
# Forced command for the test-ground sshd (set in its authorized_keys): lets
# the test key run only git-upload-pack / git-receive-pack / git-upload-archive
# on bare repos under REPOS_DIR, so clients use ssh://USER@127.0.0.1:PORT/NAME.git
#
#   git_ssh_command.sh REPOS_DIR     (the git command comes in $SSH_ORIGINAL_COMMAND)
set -euo pipefail
root=$1
cmd=${SSH_ORIGINAL_COMMAND:-}
if [[ ! $cmd =~ ^git[-\ ](upload-pack|receive-pack|upload-archive)\ +\'?/?([^\']*)\'?$ ]]; then
  echo "only git fetch/push is allowed here" >&2
  exit 1
fi
verb=${BASH_REMATCH[1]}
path=${BASH_REMATCH[2]}
# No escaping the repos dir.
if [[ -z $path || $path == *..* ]]; then
  echo "bad repository path" >&2
  exit 1
fi
[[ -d $root/$path ]] || { [[ -d $root/$path.git ]] && path=$path.git; }
exec git "$verb" "$root/$path"
