#!/bin/bash
# Every GPU check in one call, for a lent GPU machine with no network (one call, 15 device minutes in all):
#   .whl/      labwright's dependencies the machine's image lacks (pyinfra, paramiko, pyelftools, gguf, ...; py3.12)
#   .gpucarry/llama_cpp_python-0.3.36.tar.gz  the llama.cpp source, trimmed to fit the transfer (llamacpp-cuda.sh)
# The CUDA llama-server build starts first, in the background; the ABI checks (abi.sh) run beside it; then the
# build's run on the GPU (llamacpp-cuda.sh) and `gpu check`'s rules on this machine (gpu_check_host.py).
# Logs go to $OUT (the device tool brings that folder back). Run from the repo root.
set -u
OUT=${OUT:-/tmp/lw-gpu-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH="/tmp/site:$PWD/src" PYTHONUNBUFFERED=1
nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
export CUDA_ROOT=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
START=$(date +%s)
JOBS=$(nproc); [ -n "${SKIP_ABI:-}" ] || JOBS=$((JOBS - 2))  # two cores left to abi.sh's extension builds
echo "CUDA_ROOT=$CUDA_ROOT nproc=$(nproc) jobs=$JOBS"
LLAMA_SDIST=.gpucarry/llama_cpp_python-0.3.36.tar.gz timeout "${BUILD_LIMIT:-420}" \
  bash scripts/gpu-check/llamacpp-cuda.sh "$JOBS" > "$OUT/llamacpp-cuda.log" 2>&1 &
BUILD=$!
if [ -z "${SKIP_ABI:-}" ]; then  # SKIP_ABI=1: the build alone, on every core (abi.sh recorded already)
  bash scripts/gpu-check/abi.sh > "$OUT/abi.log" 2>&1
  echo "abi.sh done at +$(( $(date +%s) - START )) s"
fi
wait "$BUILD"; echo "llamacpp-cuda.sh rc=$? at +$(( $(date +%s) - START )) s"
if [ -s /tmp/lw-llama-cuda-bin ]; then
  python3 scripts/gpu-check/gpu_check_host.py "$(cat /tmp/lw-llama-cuda-bin)" /tmp/lw-tiny.gguf > "$OUT/gpu-check.json" \
    2> "$OUT/gpu-check.err"
  echo "gpu_check_host.py rc=$? at +$(( $(date +%s) - START )) s"
fi
tail -n 40 "$OUT/llamacpp-cuda.log"
