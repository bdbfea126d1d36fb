"""Cross-check: the planner's KV bytes against what the real llama-server logs for its KV buffer, on the tiny GGUF.

Uses the llama-server labwright.llamacpp.build caches in ~/.cache/labwright/llama/<version>/, building it first where
the machine has none (~6 min on 2 cores, once; the lab tests share it). Measured once by hand as well (llama-server
0.3.36 sdist, llama.cpp 0c1e570):
  -c 4096 f16            -> "llama_kv_cache: size = 16.00 MiB (4096 cells, 4 layers, 1/1 seqs),
                             K (f16): 8.00 MiB, V (f16): 8.00 MiB"
  -c 8192 q8_0/q4_0 -fa  -> "size = 13.00 MiB (8192 cells, 4 layers), K (q8_0): 8.50 MiB, V (q4_0): 4.50 MiB"
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from labwright.llamacpp.build import build_llama_server
from labwright.llamacpp.tiny_model import TinyModel, write_tiny_gguf
from labwright.tuning import kv, kv_modes

SIZE = re.compile(r"llama_kv_cache: size =\s+([\d.]+) MiB \(\s*(\d+) cells")


def _server() -> Path:
    """The pinned llama-server: the cached build, built once (~6 min on 2 cores) where the machine has none yet."""
    return build_llama_server()


def _logged_kv(server: Path, model: Path, *args: str) -> tuple[float, int]:
    proc = subprocess.Popen([str(server), "-m", str(model), "--host", "127.0.0.1", "--port", "0", "-np", "1",
                             "-lv", "4", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        assert proc.stdout is not None
        for line in proc.stdout:
            match = SIZE.search(line)
            if match:
                return float(match.group(1)), int(match.group(2))
            if time.monotonic() > deadline:
                break
        pytest.fail("llama-server logged no llama_kv_cache size line")
    finally:
        proc.kill()
        proc.wait()
    raise AssertionError("unreachable")


@pytest.mark.parametrize(("args", "cache_type", "context"), [
    pytest.param(("-c", "4096"), "f16", 4096, marks=pytest.mark.smoke),  # the real llama-server: --quick
    (("-c", "8192", "-ctk", "q8_0", "-ctv", "q4_0", "-fa", "on"), "q8_0,q4_0", 8192),
])
def test_planner_matches_llama_server_kv_buffer(tmp_path, args, cache_type, context):
    server = _server()
    model = write_tiny_gguf(tmp_path / "tiny.gguf", TinyModel(context_length=65536))
    mib, cells = _logged_kv(server, model, *args)
    layout = kv.read_layout(model)
    planned = kv.kv_bytes(layout, kv_modes.ggml_type(cache_type, "llamacpp"), cells)
    assert cells == context
    assert planned == round(mib * 1024**2)
