#!/bin/bash
# The REAL tabbyAPI on a GPU machine: exllamav3 (JIT-built, ~5 min on 16 cores for one arch), a tiny random Llama
# converted to EXL3 (~4 min), labwright's rendered config.yml and n-gram drafting, keys, /v1/models, a completion.
# Usage: scripts/gpu-check/tabbyapi.sh TABBYAPI_CHECKOUT   (a tabbyAPI tree at the pinned ref; it is modified)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
TABBY=$(cd "${1:?usage: tabbyapi.sh TABBYAPI_CHECKOUT}" && pwd)
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD/src"
step() { echo; echo "### $*"; }
step "exllamav3 JIT build (background) and the tiny model"
(cd /tmp && TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" MAX_JOBS="${MAX_JOBS:-16}" python3 -c \
  "import time; t = time.time(); import exllamav3.ext; print('exllamav3 ext ready in', round(time.time() - t, 1), 's')" \
  > /tmp/exlbuild.log 2>&1; echo "rc=$?" >> /tmp/exlbuild.log) &
python3 "$HERE/tiny_model.py" /tmp/hf-tiny "$TABBY" || exit 1
wait; tail -3 /tmp/exlbuild.log
step convert to EXL3
(cd /tmp && python3 -m exllamav3.conversion.convert_model -i /tmp/hf-tiny -o /tmp/models/tiny-exl3 -w /tmp/exl-work \
  -b 4 -cr 16 -cc 256 2>&1 | tail -5) && test -f /tmp/models/tiny-exl3/config.json || exit 1
cd "$TABBY"
step "config.yml rendered by labwright (cache_size 2000 -> 2048), n-gram drafting, keys"
python3 - <<'PY'
import secrets
from labwright.tabbyapi.deploy_data import settings_from
s = settings_from({"tabbyapi_model_dir": "/tmp/models", "tabbyapi_model_name": "tiny-exl3", "tabbyapi_max_seq_len": 2048,
                   "tabbyapi_cache_size": 2000, "tabbyapi_host": "127.0.0.1", "tabbyapi_port": 5000,
                   "tabbyapi_sysmem_recurrent_cache": 0, "tabbyapi_chunk_size": 512})
print(s.cache_note)
open("config.yml", "w").write(s.render_config())
open("api_tokens.yml", "w").write(f"api_key: {secrets.token_hex(32)}\nadmin_key: {secrets.token_hex(32)}\n")
PY
python3 -m labwright tabbyapi ngram --source . --min 3 --json; echo " rc=$?"
python3 -m labwright tabbyapi ngram --source . --min 3 --json; echo " rc=$? (second run: already)"
KEY=$(awk '/^api_key:/{print $2}' api_tokens.yml)
step start tabbyAPI
setsid python3 main.py > /tmp/tabby.log 2>&1 &
PID=$!
for _ in $(seq 1 150); do grep -q "Application startup complete\|Traceback" /tmp/tabby.log && break; sleep 1; done
grep -n "n-gram\|startup complete\|Error" /tmp/tabby.log
curl -s -H "x-api-key: $KEY" http://127.0.0.1:5000/v1/models; echo
curl -s -o /dev/null -w "without the key: HTTP %{http_code}\n" http://127.0.0.1:5000/v1/models
P="The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox"
curl -s -H "x-api-key: $KEY" -H 'Content-Type: application/json' http://127.0.0.1:5000/v1/completions \
  -d "{\"model\": \"tiny-exl3\", \"prompt\": \"$P\", \"max_tokens\": 64, \"temperature\": 0}" | head -c 400; echo
sleep 1; grep -A3 "Metrics" /tmp/tabby.log | tr -s '\n ' ' '; echo
kill -- -"$PID" 2>/dev/null
