#!/usr/bin/env bash
# Installs the system packages the e2e test ground needs (Debian/apt), and
# checks that a Go toolchain >= 1.24 is available for building the control
# plane. Idempotent: prints nothing and changes nothing when all is present.
set -euo pipefail

PACKAGES=(docker-registry skopeo apache2-utils openssh-server openssh-client git openssl
  python3-venv libssl-dev pkg-config curl ca-certificates)
GO_MIN_MINOR=24

missing=()
for p in "${PACKAGES[@]}"; do
  if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) != "install ok installed" ]]; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "[deps] installing: ${missing[*]}" >&2
  SUDO=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || { echo "[deps] ERROR: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    SUDO=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  # Keep the packages' system services (docker-registry on :5000, sshd on :22)
  # from being started by the install: the test ground runs its own copies on
  # loopback. Only add a policy when the machine has none.
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
    "${SUDO[@]}" chmod 755 /usr/sbin/policy-rc.d
    trap '"${SUDO[@]}" rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  "${SUDO[@]}" apt-get update -qq >&2
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# Go: PATH first, then the usual tarball location.
GO=$(command -v go || true)
[[ -z $GO && -x /usr/local/go/bin/go ]] && GO=/usr/local/go/bin/go
if [[ -z $GO ]]; then
  echo "[deps] ERROR: Go not found. Install Go >= 1.${GO_MIN_MINOR} (e.g. into /usr/local/go) and put it on PATH;" >&2
  echo "[deps]        it is needed to build kube-apiserver and etcd for the test ground." >&2
  exit 1
fi
ver=$("$GO" env GOVERSION 2>/dev/null || true) # e.g. go1.24.3
if [[ ! $ver =~ ^go1\.([0-9]+) ]] || ((BASH_REMATCH[1] < GO_MIN_MINOR)); then
  echo "[deps] ERROR: $GO is ${ver:-unknown}; install Go >= 1.${GO_MIN_MINOR}." >&2
  exit 1
fi

# kubectl is not packaged here; the scripts do not need it, the tests may.
command -v kubectl >/dev/null || echo "[deps] note: kubectl not found on PATH (tests that shell out to it will fail)" >&2
exit 0
