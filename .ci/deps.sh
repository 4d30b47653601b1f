#!/usr/bin/env bash
# Installs the Debian packages the tests, the demo and the end-to-end test need, and builds
# the OCI registry the fleet cache's tests prefer.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# The fleet cache's tests run a real OCI registry (test/ociregistry): distribution 3 at the
# release tools/registry/go.mod pins, built with this Go into bin/registry (Go's build cache
# makes a second run a no-op). Debian's docker-registry below is the fallback where that is
# missing; its Go 1.19 build hashes what a push sends several times slower.
echo "deps: building the OCI registry (distribution 3) into bin/registry: about 30 s the first time, through the Go module proxy; instant once built"
reg_start=$(date +%s)
(cd "$root/tools/registry" && GOTOOLCHAIN=local go build -o "$root/bin/registry" github.com/distribution/distribution/v3/cmd/registry) ||
  { echo "building distribution 3 from tools/registry failed (it needs the Go module proxy)" >&2; exit 1; }
echo "deps: bin/registry built in $(( $(date +%s) - reg_start ))s"
need=()
command -v git >/dev/null || need+=(git)
command -v cmake >/dev/null || need+=(cmake)
command -v make >/dev/null || need+=(make)
command -v curl >/dev/null || need+=(curl ca-certificates)
command -v gcc >/dev/null || need+=(gcc)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v systemd-nspawn >/dev/null || need+=(systemd-container)
command -v nsenter >/dev/null || need+=(util-linux)
# The completion and man page tests load the scripts into each shell and render the page.
command -v zsh >/dev/null || need+=(zsh)
command -v fish >/dev/null || need+=(fish)
command -v groff >/dev/null || need+=(groff-base)
# The textfile and alert-rule tests check sglprov's metrics with Prometheus's promtool.
command -v promtool >/dev/null || need+=(prometheus)
# Debian's registry (distribution 2.8), the fallback, and the second registry
# test/ociregistry's tests check.
command -v docker-registry >/dev/null || need+=(docker-registry)
# The two-node test makes network namespaces and a veth pair with iproute2's ip.
command -v ip >/dev/null || need+=(iproute2)
# The Python lock's tests run real pip, in venvs, against a local package index.
python3 -c 'import pip, venv, ensurepip' >/dev/null 2>&1 || need+=(python3 python3-pip python3-venv)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "note: ${need[*]} missing and not root: the tests that need them skip themselves" >&2
    exit 0
  fi
  export DEBIAN_FRONTEND=noninteractive
  # A first boot's cloud-init or unattended-upgrades may hold the dpkg lock: wait for it,
  # saying who holds it (.ci/apt-wait), as sglprov's packages step does.
  echo "deps: installing ${need[*]}"
  "$root/.ci/apt-wait" apt-get update -qq
  "$root/.ci/apt-wait" apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
