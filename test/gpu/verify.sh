#!/usr/bin/env bash
# Runs on a host with an NVIDIA GPU (and nvcc): sglprov against the real NVML, the SM120
# recipe refused on a non-SM120 host, and a small CUDA build through the build step for
# the architecture NVML reports. Usage: test/gpu/verify.sh BIN_DIR OUT_FILE
# (BIN_DIR holds sglprov and gpu.test, built with cgo).
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=$1; OUT=$2
run() { echo "\$ $*"; "$@"; echo "[exit $?]"; echo; }
{
  echo "# $(date -u +%FT%TZ) on $(hostname)"
  run nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version --format=csv
  run "$BIN/sglprov" detect
  run "$BIN/sglprov" detect --json
  run "$BIN/sglprov" plan -f recipes/qwen3.5-397b-a17b-nvfp4-sm120.yaml --state-dir /tmp/v/st1
  run "$BIN/sglprov" apply -f recipes/qwen3.5-397b-a17b-nvfp4-sm120.yaml --state-dir /tmp/v/st1
  run "$BIN/sglprov" plan -f test/gpu/hopper-fp8.yaml --state-dir /tmp/v/st2 --root /tmp/v/root
  export PATH=$PATH:/usr/local/cuda/bin
  run "$BIN/sglprov" apply -f testdata/build/cuda-cc/recipe.yaml --state-dir /tmp/v/st3 --log-format logfmt
  run testdata/build/cuda-cc/build/cc
  run cuobjdump --list-elf testdata/build/cuda-cc/build/cc
  run "$BIN/sglprov" apply -f testdata/build/cuda-cc/recipe.yaml --state-dir /tmp/v/st3
  run "$BIN/gpu.test" -test.run 'Real|NVML' -test.v
} >"$OUT" 2>&1
