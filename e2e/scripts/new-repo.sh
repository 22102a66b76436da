#!/usr/bin/env bash
# Create a bare git repo served by the test-ground git server, with one initial
# commit on branch `main` made from SEED_DIR (or a README when omitted).
#
#   new-repo.sh [--force] NAME [SEED_DIR]
#
# NAME may contain slashes (org/config); `.git` is appended. --force replaces
# an existing repo. Prints the HTTP and SSH clone URLs.
set -euo pipefail
COMPONENT=new-repo
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

force=0
args=()
for a in "$@"; do
  case $a in
  --force) force=1 ;;
  *) args+=("$a") ;;
  esac
done
((${#args[@]} >= 1 && ${#args[@]} <= 2)) || die "usage: $0 [--force] NAME [SEED_DIR]"
name=${args[0]%.git}
seed=${args[1]:-}
[[ $name =~ ^[A-Za-z0-9._/-]+$ && $name != *..* && $name != /* ]] || die "bad repo name '$name'"
[[ -z $seed || -d $seed ]] || die "seed dir '$seed' not found"

ROOT="$STATE/git/repos"
bare="$ROOT/$name.git"
if [[ -e $bare ]]; then
  ((force)) || die "$bare already exists (use --force to replace)"
  rm -rf "$bare"
fi
mkdir -p "$(dirname "$bare")"
git init --quiet --bare --initial-branch=main "$bare"
git -C "$bare" config http.receivepack true
git -C "$bare" config receive.denyNonFastForwards false

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git init --quiet --initial-branch=main "$work/w"
if [[ -n $seed ]]; then
  tar -C "$seed" --exclude=./.git -cf - . | tar -C "$work/w" -xf -
else
  echo "# $name" >"$work/w/README.md"
fi
(
  cd "$work/w"
  git add -A
  git -c user.name="imagewatch e2e" -c user.email="e2e@imagewatch.invalid" \
    commit --quiet --allow-empty -m "initial commit"
  git push --quiet "$bare" main:main
)

if [[ -s $STATE/git/http.port ]]; then
  echo "http: http://127.0.0.1:$(<"$STATE/git/http.port")/$name.git"
fi
if [[ -s $STATE/git/ssh.port ]]; then
  echo "ssh:  ssh://$(id -un)@127.0.0.1:$(<"$STATE/git/ssh.port")/$name.git"
fi
