#!/usr/bin/env bash
# make demo: the whole flow of the SM120 recipe on this machine, no GPU and no network.
# An 8 x RTX PRO 6000 host (GPU fixture), SGLang's stand-in tree from a local git
# repository, a patch series, a small real build, a download from a local fake hub, the
# server run by the exec manager (a fake SGLang whose answers are "!!!!" with the first
# profile's flags), the gate rejecting that profile and passing the second; then a second
# apply that redoes nothing but start the server and gate it. Last, the gate under load: a
# profile right on every sequential question and wrong with 64 at once is rejected.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local

SGLPROV=${SGLPROV:-$PWD/bin/sglprov}
[ -x "$SGLPROV" ] || { echo "build sglprov first: make build" >&2; exit 1; }
ROOT=$(mktemp -d "${TMPDIR:-/tmp}/sglprov-demo.XXXXXX")
HUB_PID=""
cleanup() {
  [ -n "$HUB_PID" ] && kill "$HUB_PID" 2>/dev/null || true
  if [ -z "${KEEP:-}" ]; then rm -rf "$ROOT"; else echo "demo files kept in $ROOT"; fi
}
trap cleanup EXIT
if [ -t 1 ]; then
  say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
  say() { printf '\n== %s\n' "$*"; }
fi

say "building the fakes (SGLang server, Hugging Face hub) into $ROOT/bin"
go build -o "$ROOT/bin/fake-sglang" ./test/fakesglang/cmd/fake-sglang
go build -o "$ROOT/bin/fake-hub" ./test/fakehub/cmd/fake-hub

say "a local git repository stands in for github.com/sgl-project/sglang"
cp -r demo/upstream "$ROOT/upstream"
git -C "$ROOT/upstream" init -q
git -C "$ROOT/upstream" add -A
GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z" \
  git -C "$ROOT/upstream" -c user.name=demo -c user.email=demo@sglprov.invalid commit -qm "stand-in tree"
COMMIT=$(git -C "$ROOT/upstream" rev-parse HEAD)
echo "commit $COMMIT"

say "a fake hub serves a generated model (real safetensors shards with an index)"
"$ROOT/bin/fake-hub" --generate "$ROOT/hub-model" --shards 4 --shard-bytes $((4 << 20))
"$ROOT/bin/fake-hub" --dir "$ROOT/hub-model" --repo nvidia/Qwen3.5-397B-A17B-NVFP4 \
  --port-file "$ROOT/hub.url" 2>"$ROOT/hub.log" &
HUB_PID=$!
for _ in $(seq 100); do [ -s "$ROOT/hub.url" ] && break; sleep 0.1; done
export HF_ENDPOINT=$(cat "$ROOT/hub.url")
echo "hub at $HF_ENDPOINT"

export SGLPROV_GPU_FIXTURE=$PWD/testdata/gpu/rtx-pro-6000-x8.json
PORT=$(( 20000 + RANDOM % 20000 ))
ARGS=(-f recipes/demo.yaml --state-dir "$ROOT/state"
  --set "sglang_url=git::file://$ROOT/upstream" --set "sglang_commit=$COMMIT"
  --set "src=$ROOT/opt/sglang" --set "python=$ROOT/bin/fake-sglang"
  --set "models=$ROOT/models" --set "port=$PORT")

say "sglprov detect (the GPU fixture: 8 x RTX PRO 6000 Blackwell)"
"$SGLPROV" detect

# Preflight: a host that falls short is refused before any step runs, every problem at
# once with its fix (exit 4): an H200 host (GPU fixture) whose nvcc is CUDA 12.4's. The runs
# that follow have the stand-in for the CUDA 13.0 toolkit the SM120 recipe requires (the
# real nvcc --version output of 13.0) first on the PATH.
say "preflight: an H200 host with CUDA 12.4's nvcc is refused before any step (exit 4)"
mkdir -p "$ROOT/cuda-12.4/bin" "$ROOT/cuda-13.0/bin"
printf '#!/bin/sh\necho "nvcc: NVIDIA (R) Cuda compiler driver"\necho "Cuda compilation tools, release 12.4, V12.4.131"\n' >"$ROOT/cuda-12.4/bin/nvcc"
cp pkg/hostcmd/testdata/nvcc-13.0.88.txt "$ROOT/cuda-13.0/nvcc-version.txt"
printf '#!/bin/sh\nexec cat "%s"\n' "$ROOT/cuda-13.0/nvcc-version.txt" >"$ROOT/cuda-13.0/bin/nvcc"
chmod 755 "$ROOT/cuda-12.4/bin/nvcc" "$ROOT/cuda-13.0/bin/nvcc"
code=0
PATH="$ROOT/cuda-12.4/bin:$PATH" SGLPROV_GPU_FIXTURE=$PWD/testdata/gpu/h200-x1.json \
  "$SGLPROV" plan "${ARGS[@]}" || code=$?
echo "sglprov plan exited $code"
[ "$code" = 4 ] || { echo "demo: the preflight refusal should exit 4" >&2; exit 1; }
export PATH="$ROOT/cuda-13.0/bin:$PATH"

# Host fitness is part of the preflight: the right GPUs, but GPU 3's PCIe link trained at
# x8 (the fixture's health facts, as NVML reports them), and the recipe refuses a degraded link.
say "host fitness: an 8 x RTX PRO 6000 host whose GPU 3 runs its PCIe link at x8 is refused (exit 4)"
code=0
SGLPROV_GPU_FIXTURE=$PWD/testdata/gpu/rtx-pro-6000-x8-link-x8.json "$SGLPROV" plan "${ARGS[@]}" || code=$?
echo "sglprov plan exited $code"
[ "$code" = 4 ] || { echo "demo: the host-fitness refusal should exit 4" >&2; exit 1; }

say "sglprov plan"
"$SGLPROV" plan "${ARGS[@]}"

say "sglprov apply (first run)"
"$SGLPROV" apply "${ARGS[@]}"

say "the gate's verdicts, per profile"
sed -n '/^profile /,/^smoke: /p' "$ROOT"/state/runs/*/smoke.log | sed 's/^/  /'

say "sglprov apply (second run: nothing changed; the server, which the exec manager stopped with the first run, is started and gated again)"
"$SGLPROV" apply "${ARGS[@]}"

say "sglprov status"
"$SGLPROV" status --state-dir "$ROOT/state"

say "the gate under load: a profile right on every sequential question, garbage with 64 at once"
# recipes/demo-load.yaml: with the CUTLASS FP4 GEMM the fake answers each request alone right
# and garbage once more than 32 are in flight (flashinfer#2708); the load case rejects it.
LOAD_ARGS=(-f recipes/demo-load.yaml --state-dir "$ROOT/load-state"
  --set "python=$ROOT/bin/fake-sglang" --set "models=$ROOT/models" --set "port=$((PORT + 1))")
"$SGLPROV" apply "${LOAD_ARGS[@]}"
sed -n '/^profile /,/^smoke: /p' "$ROOT"/load-state/runs/*/smoke.log | sed 's/^/  /'

say "sglprov daemon: a short watch of the demo node (one canary, the metrics once, a clean stop)"
# The daemon applies first (nothing to redo but start the server with the winning profile
# and gate it), then runs one canary case every 2 s and serves its metrics. The exec
# manager's server lives as long as the daemon; SIGTERM stops both.
MPORT=$(( PORT + 2 ))
"$SGLPROV" daemon "${ARGS[@]}" --interval 2s --metrics-addr "127.0.0.1:$MPORT" \
  --textfile "$ROOT/sglprov.prom" >"$ROOT/daemon.out" 2>"$ROOT/daemon.log" &
DAEMON_PID=$!
trap 'kill "$DAEMON_PID" 2>/dev/null || true; cleanup' EXIT
for _ in $(seq 600); do
  grep -Eq '^sglprov_canary_runs_total(\{[^}]*\})? [1-9]' "$ROOT/sglprov.prom" 2>/dev/null && break
  kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$ROOT/daemon.log" >&2; exit 1; }
  sleep 0.1
done
echo "curl http://127.0.0.1:$MPORT/healthz: $(curl -fsS "http://127.0.0.1:$MPORT/healthz")"
curl -fsS "http://127.0.0.1:$MPORT/metrics" |
  grep -E '^sglprov_(apply_success|gate_pass|canary_runs_total|canary_failures_total|node_health)' | sed 's/^/  /'
kill -TERM "$DAEMON_PID"
rc=0; wait "$DAEMON_PID" || rc=$?
grep -E 'apply done|canary|stopping' "$ROOT/daemon.log" | sed 's/^/  /' || true
echo "daemon stopped on SIGTERM, exit $rc"
[ "$rc" = 0 ]

# --- fleet cache ---------------------------------------------------------------------------
# A fleet of two nodes and a local OCI registry (distribution 3 from make deps, or Debian's
# docker-registry). Node A starts from nothing (a fresh state, no kernel build, no weights),
# with the hub throttled to 2 MiB/s a connection as the real hub throttles, makes everything
# and pushes it (push: true). Node B
# starts from nothing too, with the hub stopped, and takes the kernel build and every weight
# file from the registry.
say "a fleet: node A builds, downloads and publishes to a local OCI registry; node B takes it all from there"
go build -o "$ROOT/bin/oci-registry" ./test/ociregistry/cmd/oci-registry
if ! REG_WHICH=$("$ROOT/bin/oci-registry" --which 2>/dev/null); then
  echo "no OCI registry is installed (make deps, or apt-get install docker-registry): skipped"
else
  "$ROOT/bin/oci-registry" --dir "$ROOT/registry" --port-file "$ROOT/registry.addr" 2>"$ROOT/registry.log" &
  REG_PID=$!
  trap 'kill "$REG_PID" 2>/dev/null || true; cleanup' EXIT
  for _ in $(seq 200); do [ -s "$ROOT/registry.addr" ] && break; sleep 0.1; done
  REG=$(cat "$ROOT/registry.addr")
  echo "registry (${REG_WHICH##*(} at $REG"
  kill "$HUB_PID" 2>/dev/null || true; wait "$HUB_PID" 2>/dev/null || true
  rm -f "$ROOT/hub.url"
  "$ROOT/bin/fake-hub" --dir "$ROOT/hub-model" --repo nvidia/Qwen3.5-397B-A17B-NVFP4 --rate $((2 << 20)) \
    --port-file "$ROOT/hub.url" 2>>"$ROOT/hub.log" &
  HUB_PID=$!
  for _ in $(seq 100); do [ -s "$ROOT/hub.url" ] && break; sleep 0.1; done
  export HF_ENDPOINT=$(cat "$ROOT/hub.url")
  # The weights pinned to the commit the first run resolved: node B needs no hub at all.
  MODEL_COMMIT=$(grep -o '"commit": *"[0-9a-f]\{40\}"' "$ROOT/state/state.json" | head -1 | grep -o '[0-9a-f]\{40\}')
  # node STATE: the demo's arguments with another state dir, and the cache.
  node() {
    local a out=()
    for a in "${ARGS[@]}"; do [ "$a" = "$ROOT/state" ] && a=$1; out+=("$a"); done
    NODE=("${out[@]}" --set "cache_oci=$REG/demo/sglprov" --set "model_revision=$MODEL_COMMIT")
  }
  # step_ms STATE STEP: the step's duration in ms in the state dir's newest report.
  step_ms() {
    awk -v s="$2" '/"name": /{n=$2; gsub(/[",]/, "", n)} /"duration_ns": /{if (n == s) {d=$2; gsub(/,/, "", d); printf "%d", d / 1e6; exit}}' \
      "$(ls -d "$1"/runs/*/ | tail -1)report.json"
  }
  fresh() { rm -rf "$ROOT/models" "$ROOT/opt/sglang/sgl-kernel/dist"; }

  say "node A: nothing on disk, the hub throttled; sglprov apply with push: true"
  fresh; node "$ROOT/state-a"
  "$SGLPROV" apply "${NODE[@]}" --set cache_push=true

  say "node B: nothing on disk, the hub stopped; sglprov plan, then apply (pull only)"
  kill "$HUB_PID"; wait "$HUB_PID" 2>/dev/null || true; HUB_PID=""
  fresh; node "$ROOT/state-b"
  "$SGLPROV" plan "${NODE[@]}"
  "$SGLPROV" apply "${NODE[@]}"

  say "time saved on node B"
  ka=$(step_ms "$ROOT/state-a" sgl-kernel); wa=$(step_ms "$ROOT/state-a" weights)
  kb=$(step_ms "$ROOT/state-b" sgl-kernel); wb=$(step_ms "$ROOT/state-b" weights)
  printf '  %-11s %16s %20s\n' step "node A (made)" "node B (from cache)"
  printf '  %-11s %13s ms %17s ms\n' sgl-kernel "$ka" "$kb" weights "$wa" "$wb"
  # The build and the download run at the same time: a node waits for the longer of the
  # two, so that is what the cache saves, not the sum.
  made=$(( ka > wa ? ka : wa )); taken=$(( kb > wb ? kb : wb ))
  echo "  saved: $(( made - taken )) ms here, the longer of the two steps (they run at the same time): $made ms made, $taken ms from the cache"
  echo "  (a toy kernel, 16 MiB of weights from a hub at 2 MiB/s a connection);"
  echo "  on the SM120 recipe: the sgl-kernel build (an hour or more) and 223 GB from the hub, on every node but one"
fi
