#!/bin/bash
# The REAL vLLM on a GPU machine, started with exactly the command line labwright renders (deploys/vllm.py):
# `model plan` on a tiny random Llama (16-bit safetensors -> vLLM), `matrix resolve --stack vllm` for this GPU and
# driver, then `vllm serve` with VLLM_API_KEY: /health and /metrics without the key, /v1/models 401 without and 200
# with it, a streamed chat completion, and the same with --cpu-offload-gb 1 (kv fit's split offload).
# Usage: scripts/gpu-check/vllm.sh   (vllm==0.33.0 importable: `pip install vllm==0.33.0`, which brings torch 2.14.0;
#        transformers + tokenizers for the tiny model; run from the repo root)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD/src"
step() { echo; echo "### $*"; }
VLLM=$(command -v vllm) || { echo "vllm is not installed: pip install vllm==0.33.0"; exit 1; }
CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1)
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
VRAM_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
step "vllm $(python3 -c 'import vllm; print(vllm.__version__)'), torch $(python3 -c 'import torch; print(torch.__version__)'); GPU cap $CAP, driver $DRIVER, ${VRAM_MIB} MiB"
python3 -m labwright matrix resolve --stack vllm --driver "$DRIVER" --compute-cap "$CAP" | tail -4
step "tiny model and labwright model plan (engine auto)"
python3 "$HERE/tiny_model.py" /tmp/hf-tiny-vllm "$PWD/docs" > /dev/null || exit 1
python3 -m labwright model plan /tmp/hf-tiny-vllm --vram-gb "${VRAM_MIB}MiB"
KEY=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
serve() {  # $1: cpu_offload_gb
  local cmd
  cmd=$(python3 - "$1" <<'PY'
import shlex, sys
from labwright.vllm.deploy_data import settings_from
s = settings_from({"vllm_model": "/tmp/hf-tiny-vllm", "vllm_max_model_len": 2048,
                   "vllm_gpu_memory_utilization": 0.3, "vllm_cpu_offload_gb": sys.argv[1]})
print(shlex.join(s.command()))
PY
)
  cmd=${cmd/#\/opt\/vllm\/venv\/bin\/vllm/$VLLM}  # the deploy's venv path -> this machine's vllm
  step "start: $cmd"
  VLLM_API_KEY=$KEY VLLM_NO_USAGE_STATS=1 setsid bash -c "$cmd" > /tmp/vllm.log 2>&1 &
  PID=$!
  for _ in $(seq 1 600); do grep -q "Application startup complete\|Traceback" /tmp/vllm.log && break; sleep 1; done
  grep -n "startup complete\|Error\|offload" /tmp/vllm.log | head -5
  curl -s -o /dev/null -w "/health without the key: HTTP %{http_code}\n" http://127.0.0.1:8000/health
  curl -s -o /dev/null -w "/v1/models without the key: HTTP %{http_code}\n" http://127.0.0.1:8000/v1/models
  curl -s -H "Authorization: Bearer $KEY" http://127.0.0.1:8000/v1/models | head -c 300; echo
  curl -sN -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' http://127.0.0.1:8000/v1/chat/completions \
    -d '{"model": "hf-tiny-vllm", "stream": true, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}' \
    | grep -c '^data: ' | sed 's/^/streamed events: /'
  curl -s http://127.0.0.1:8000/metrics | grep -E '^vllm:(generation_tokens_total|num_requests_running)' | head -3
  kill -- -"$PID" 2>/dev/null; wait "$PID" 2>/dev/null
}
serve 0
serve 1
