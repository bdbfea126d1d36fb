"""`labwright bench` against the REAL llama-server deployed in a lab container under a 512 MiB memory limit.

The container is the context-ceiling probe's testbed (support.probe_box.llama_box: deploys/llamacpp.py
with the seed's flags, the tiny GGUF, ``limits.memory=512MiB``); the benchmark reaches it over the lab bridge, as a
user benchmarks a server on another host: the numbers are the server's, and memory is not sampled (not local).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest

from labwright.lab.lab import instance_address
from labwright.testing.lab_fixture import Lab
from support.probe_box import llama_box

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

PORT = 8001  # deploys/llamacpp.py's default (the seed's port)


def test_bench_a_server_in_a_memory_limited_lab_container(lab: Lab, cli_env, tmp_path):
    name, _ = llama_box(lab, tmp_path, prefix="lwbench")
    try:
        address = instance_address(lab.client, name)
        assert address, f"{name} has no address"
        url = f"http://{address}:{PORT}/v1"
        # llama-server answers only with the key deploys/llamacpp.py made on the guest (docs/security.md)
        key = lab.client.exec(name, ["cat", "/etc/llama-server/api-key"]).stdout.decode().strip()
        request = urllib.request.Request(f"{url}/models", headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            served = json.load(response)["data"][0]["id"]
        proc = subprocess.run(["labwright", "bench", "llm", "--url", url, "--contexts", "256,1024", "--decode", "32",
                               "--trials", "2", "--label", "lxd-512MiB", "--json", "--api-key-env", "LW_ENGINE_KEY"],
                              capture_output=True, text=True, env={**cli_env, "LW_ENGINE_KEY": key}, timeout=300)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert (doc["model"], doc["label"], doc["url"]) == (served, "lxd-512MiB", url)
        assert doc["server_pid"] is None and doc["tokenizer"] == "server"
        for result in doc["results"]:
            assert result["peak_rss_bytes"] is None and result["peak_gpu_bytes"] is None  # not on this machine
            for trial in result["trials"]:
                timings = trial["timings"]
                assert abs(trial["prompt_tokens"] - result["context"]) <= max(2, result["context"] // 200) + 1
                assert trial["decode_tokens"] == timings["predicted_n"] == trial["chunks"] == 32
                assert trial["ttft_s"] * 1000 >= timings["prompt_ms"] and trial["decode_tps"] > 0
    finally:
        lab.remove(name)
