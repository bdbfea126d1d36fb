#!/bin/bash
# The CUDA llama-server on a machine with an NVIDIA GPU: the build labwright chooses for this GPU (its compute
# capability from nvidia-smi, as the NvidiaGpus fact reads it), built with labwright.llamacpp.build, its SASS checked,
# then run on the GPU with a tiny model: every layer offloaded to CUDA0, /health ok, a completion of 16 tokens.
# CI only compile-tests this (tests/integration/test_llamacpp_cuda_build.py); this is the run.
#
# Needs network for NVIDIA's pip CUDA 13.0 wheels (526 MB) and the llama.cpp sdist (77 MB), or both already in
# ~/.cache/labwright (cuda/wheels/ or cuda/pip-13.0/, llama/0.3.36/); or an installed toolkit: CUDA_ROOT=/usr/local/cuda.
# Driver >= 580 (CUDA 13.0). Run from the repo root with labwright's dependencies importable (README.md here).
# Usage: [LLAMA_SDIST=llama_cpp_python-0.3.36.tar.gz] [CUDA_ROOT=/usr/local/cuda] scripts/gpu-check/llamacpp-cuda.sh [JOBS]
set -u
JOBS=${1:-$(nproc)}
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD/src"
step() { echo; echo "### $*"; }
step host; nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
step "the build labwright chooses for this host's GPUs"
python3 - <<'PY' | tee /tmp/lw-llamacpp-choice.txt
import subprocess
from labwright.gpu.nvidia.smi import SMI_QUERY, parse_gpu_query
from labwright.llamacpp.deploy_data import build_choice
gpus = [g.__dict__ for g in parse_gpu_query(subprocess.run(SMI_QUERY, shell=True, capture_output=True, text=True).stdout)]
choice = build_choice({}, gpus)
print("choice:", choice.kind, choice.describe(), "capabilities:", " ".join(choice.capabilities))
PY
CAPS=$(sed -n 's/.*capabilities: //p' /tmp/lw-llamacpp-choice.txt)
[ -n "$CAPS" ] || { echo "no CUDA choice for this GPU"; exit 1; }
ARGS=(); for c in $CAPS; do ARGS+=(--arch "$c"); done
[ -n "${CUDA_ROOT:-}" ] && ARGS+=(--cuda-root "$CUDA_ROOT")
step "build llama-server for ${ARGS[*]} ($JOBS jobs)"
START=$(date +%s)
if [ -n "${LLAMA_SDIST:-}" ]; then
  # A llama-cpp-python 0.3.36 sdist given by path (a lent machine without network gets a copy trimmed of models/,
  # docs/, tests/ and examples/ to fit its 64 MiB transfer): the same build_cuda_server, pinned to that file's sha256.
  BIN=$(python3 - "$LLAMA_SDIST" "$JOBS" "${CUDA_ROOT:-}" $CAPS <<'PY'
import shutil, sys
from pathlib import Path
from labwright.llamacpp import build, cuda
sdist, jobs, root, caps = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] or None, sys.argv[4:]
source = build.LlamaSource(build.PINNED.version, build.PINNED.filename, build.sha256_of(sdist))
build.cache_dir(source.version).mkdir(parents=True, exist_ok=True)
shutil.copy2(sdist, build.cache_dir(source.version) / source.filename)
print(build.build_cuda_server(cuda.toolchain(None, root), caps, source, jobs))
PY
  ) || exit 1
else
  BIN=$(python3 -m labwright build llamacpp --jobs "$JOBS" "${ARGS[@]}") || exit 1
fi
echo "built $BIN in $(( $(date +%s) - START )) s"
DIR=$(dirname "$(dirname "$BIN")")
python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print('sass:', m['sass'], 'archs:', m['architectures'])" \
  "$DIR/manifest.json"
ls -la "$BIN" "$DIR/lib/llama-server"; ldd "$BIN" | grep -E 'cuda|cublas'
step "run it on the GPU with a tiny model"
python3 -m labwright model tiny /tmp/lw-tiny.gguf >/dev/null
echo "$BIN" > /tmp/lw-llama-cuda-bin
"$BIN" --model /tmp/lw-tiny.gguf --n-gpu-layers 99 -lv 4 --port 18001 --host 127.0.0.1 --ctx-size 2048 \
  > /tmp/lw-llama-cuda.log 2>&1 &
PID=$!
for _ in $(seq 120); do curl -sf http://127.0.0.1:18001/health >/dev/null && break; sleep 1; done
curl -s http://127.0.0.1:18001/health; echo
curl -s http://127.0.0.1:18001/v1/completions -H 'Content-Type: application/json' \
  -d '{"prompt":"hello","max_tokens":16}' | python3 -c "import json,sys; r=json.load(sys.stdin); print('tokens:', r['usage']['completion_tokens'], repr(r['choices'][0]['text']))"
grep -E "CUDA0|offloaded|ggml_cuda_init|compute capability" /tmp/lw-llama-cuda.log | head -8
kill "$PID"; wait "$PID" 2>/dev/null
echo "expect: a CUDA choice for this GPU's capability, sass listing it, 'offloaded N/N layers to GPU', 16 tokens"
