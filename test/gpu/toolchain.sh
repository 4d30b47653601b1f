#!/bin/bash
# On the H200: detect with nvcc beside the driver's CUDA; a build step whose python has
# torch for CUDA 13 while a fake CUDA 12.4 nvcc is first on the PATH is refused fast.
set -u
D=${1:?usage: test/gpu/toolchain.sh BIN_DIR (the folder holding sglprov)}
OUT=${OUT:-$(mktemp -d)}
B=$D/sglprov
W=$(mktemp -d)
echo "## host"; nvidia-smi -L; uname -r
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc 2>/dev/null | head -1)
echo "nvcc on PATH: $(command -v nvcc || echo none); using $NVCC"
export PATH=$(dirname "$NVCC"):$PATH
echo "## nvcc --version"; nvcc --version | tee "$OUT/nvcc-version.txt"
echo "## sglprov detect"; "$B" detect; echo "exit $?"
"$B" detect --json > "$OUT/detect.json"
PY=/opt/torch/.venv/bin/python
echo "## torch"; "$PY" -c 'import torch; print(torch.__version__, torch.version.cuda)'
mkdir -p "$W/fake" "$W/src"
printf '#!/bin/sh\necho "nvcc: NVIDIA (R) Cuda compiler driver"\necho "Cuda compilation tools, release 12.4, V12.4.131"\n' > "$W/fake/nvcc"
chmod 755 "$W/fake/nvcc"
cat > "$W/r.yaml" <<YAML
apiVersion: sglprov/v1
name: toolchain-check
requires:
  gpu: {min_count: 1}
steps:
  - name: kernel
    build:
      dir: $W/src
      python: $PY
      argv: [sh, -c, "echo compiled > built.txt"]
      outputs: [built.txt]
YAML
cat "$W/r.yaml"
echo "## apply with a fake CUDA 12.4 nvcc first on the PATH"
for i in 1 2; do
  s=$(date +%s%N)
  PATH=$W/fake:$PATH "$B" apply -f "$W/r.yaml" --state-dir "$W/st$i"
  code=$?
  e=$(date +%s%N)
  echo "run $i: exit $code in $(( (e - s) / 1000000 )) ms; built.txt: $(ls $W/src/built.txt 2>/dev/null || echo absent)"
done
echo "## apply with the real nvcc (control)"
s=$(date +%s%N)
"$B" apply -f "$W/r.yaml" --state-dir "$W/st3"
code=$?
e=$(date +%s%N)
echo "control: exit $code in $(( (e - s) / 1000000 )) ms; built.txt: $(cat $W/src/built.txt 2>/dev/null || echo absent)"
