#!/usr/bin/env bash
# Runs on a host with an NVIDIA GPU (and nvcc): sglprov against the real NVML, the SM120
# recipe refused on a non-SM120 host, the Hopper FP8 recipe planned from NVML's facts, a
# small CUDA build through the build step for the architecture NVML reports, and the
# miniature of sgl-kernel through the shipped recipe's sgl-kernel and sgl-kernel-install
# step shapes with the host's torch. Usage: test/gpu/verify.sh BIN_DIR OUT_FILE
# (BIN_DIR holds sglprov and gpu.test, built with cgo). BASE_PY names the Python that has
# torch, scikit-build-core, cmake and ninja (default /opt/torch/.venv/bin/python).
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=$1; OUT=$2
BASE_PY=${BASE_PY:-/opt/torch/.venv/bin/python}
run() { echo "\$ $*"; "$@"; echo "[exit $?]"; echo; }

# fingerprint STATE STEP PATH PYTHON: the build step's toolchain probes, run here as the
# step runs them, and whether their digests are the ones recorded in the state.
fingerprint() {
  "$BASE_PY" - "$@" <<'PY'
import hashlib, json, os, subprocess, sys
state, step, path, py = sys.argv[1:5]
parts = json.load(open(state))["steps"][step]["parts"]
env = dict(os.environ, PATH=path)
for name, argv in [("toolchain.python", [py, "--version"]),
                   ("toolchain.torch", [py, "-c", "import torch; print(torch.__version__, torch.version.cuda)"]),
                   ("toolchain.nvcc", ["nvcc", "--version"])]:
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    value = p.stdout.strip() or p.stderr.strip()
    digest = hashlib.sha256(value.encode()).hexdigest()[:24]
    shown = value.splitlines()[-2:] if name == "toolchain.nvcc" else value
    verdict = "matches the state" if parts.get(name) == digest else f"DIFFERS from the state ({parts.get(name)})"
    print(f"{name} = {shown!r}: digest {digest} {verdict}")
PY
}

{
  echo "# $(date -u +%FT%TZ) on $(hostname)"
  run nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version --format=csv
  run "$BIN/sglprov" detect
  run "$BIN/sglprov" detect --json
  run "$BIN/sglprov" plan -f recipes/qwen3.5-397b-a17b-nvfp4-sm120.yaml --state-dir /tmp/v/st1
  run "$BIN/sglprov" apply -f recipes/qwen3.5-397b-a17b-nvfp4-sm120.yaml --state-dir /tmp/v/st1
  run "$BIN/sglprov" plan -f recipes/qwen3-235b-a22b-fp8-sm90.yaml --state-dir /tmp/v/st2 --root /tmp/v/root
  export PATH=$PATH:/usr/local/cuda/bin
  run "$BIN/sglprov" apply -f testdata/build/cuda-cc/recipe.yaml --state-dir /tmp/v/st3 --log-format logfmt
  run testdata/build/cuda-cc/build/cc
  run cuobjdump --list-elf testdata/build/cuda-cc/build/cc
  run "$BIN/sglprov" apply -f testdata/build/cuda-cc/recipe.yaml --state-dir /tmp/v/st3

  # sgl-kernel in miniature: a venv that sees the host's torch, the wheel built for the
  # host's architecture only, installed from dist/, imported, its kernel run on the GPU.
  MINI=testdata/build/sgl-kernel-mini
  VENV=/tmp/sglprov-sgl-kernel-mini/.venv
  BASE_SITE=$("$BASE_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  BASE_BIN=$(dirname "$BASE_PY")
  SETS=(--set "base_python=$BASE_PY" --set "base_site=$BASE_SITE" --set "base_bin=$BASE_BIN")
  rm -rf "$(dirname "$VENV")" "$MINI/build" "$MINI/dist" /tmp/v/st4
  run "$BASE_PY" -c 'import torch, scikit_build_core, cmake, ninja; print("torch", torch.__version__, "CUDA", torch.version.cuda, "scikit-build-core", scikit_build_core.__version__)'
  run "$BASE_BIN/cmake" --version
  run "$BIN/sglprov" apply -f "$MINI/recipe.yaml" --state-dir /tmp/v/st4 --log-format logfmt "${SETS[@]}"
  run grep -h -e "sgl-kernel: " -e "legacy dependency" -e "Detected CUDA_VERSION" /tmp/v/st4/runs/*/sgl-kernel.log
  run grep -h -e "^SGL_KERNEL_HOST_GENCODES" -e "^SGL_KERNEL_ENABLE_" -e "^ENABLE_BELOW_SM90" "$MINI/build/CMakeCache.txt"
  run ls "$MINI/dist"
  run "$VENV/bin/python" -m pip show -f sgl-kernel-mini
  run "$VENV/bin/python" -m sgl_kernel_mini
  SO=$("$VENV/bin/python" -c 'import sgl_kernel_mini.mini_ops as m; print(m.__file__)')
  run cuobjdump --list-elf "$SO"
  run "$BIN/sglprov" apply -f "$MINI/recipe.yaml" --state-dir /tmp/v/st4 "${SETS[@]}"
  # Before: the same wheel without TORCH_CUDA_ARCH_LIST, as upstream builds it (every
  # -gencode target of its list, ENABLE_BELOW_SM90=OFF as the recipes had it).
  before() {
    env -u TORCH_CUDA_ARCH_LIST CMAKE_ARGS="-DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DENABLE_BELOW_SM90=OFF" \
      CUDACXX=/usr/local/cuda/bin/nvcc PATH="$VENV/bin:$BASE_BIN:/usr/local/cuda/bin:$PATH" \
      "$VENV/bin/python" -m pip wheel -v --no-build-isolation --no-deps --no-index \
      --wheel-dir /tmp/v/dist-all --config-settings=build-dir=/tmp/v/build-all "$MINI" 2>&1 | grep -e "sgl-kernel: " -e "Successfully built"
  }
  run before
  run cuobjdump --list-elf /tmp/v/build-all/mini_ops.cpython-*.so
  run fingerprint /tmp/v/st4/state.json sgl-kernel \
    "$VENV/bin:$BASE_BIN:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" "$VENV/bin/python"
  # CMake 4 and a dependency that asks for CMake 3.1: refused, then configured with the
  # policy floor the recipes pass.
  run "$BASE_BIN/cmake" -S "$MINI/third_party/legacy" -B /tmp/v/legacy-plain
  run "$BASE_BIN/cmake" -S "$MINI/third_party/legacy" -B /tmp/v/legacy-floor -DCMAKE_POLICY_VERSION_MINIMUM=3.5

  run "$BIN/gpu.test" -test.run 'Real|NVML' -test.v
} >"$OUT" 2>&1
