"""The stand-in vLLM (support.vllm_standin) is what deploys/vllm.py starts in the lab: here its wheels are built, the
stack switch installs them into a venv on this machine (ABI verifier included), and the EXACT command line
labwright.vllm.deploy_data renders is run against it: every flag accepted, one it does not know refused with exit 2,
the key guarding /v1 only, /metrics in Prometheus text, a streamed chat completion."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright.vllm.deploy_data import STARTUP_LINE, settings_from
from support.vllm_standin import VllmStandin, build_vllm_standin

pytestmark = pytest.mark.slow
KEY = "test-key-0123456789abcdef"


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> VllmStandin:
    return build_vllm_standin(tmp_path_factory.mktemp("vllm-standin"))


def switch(standin: VllmStandin, root: Path, stack: str, create: bool = False) -> subprocess.CompletedProcess[str]:
    cmd = [str(Path(sys.executable).parent / "labwright"), "stack", "switch", "--to", stack, "--venv",
           str(root / "venv"), "--root", str(root / "stacks"), "--wheelhouse", str(standin.wheelhouse)]
    env = {**os.environ, "LABWRIGHT_MATRIX_DIR": str(standin.matrix_dir)}
    return subprocess.run(cmd + (["--create"] if create else []), capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.fixture(scope="module")
def venv(standin: VllmStandin, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vllm-venv")
    result = switch(standin, root, "vllm-standin", create=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return root


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(venv: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    model = tmp_path / "Qwen3-8B-AWQ"
    model.mkdir()
    s = settings_from({"vllm_model": str(model), "vllm_venv": str(venv / "venv"), "vllm_port": free_port(),
                       "vllm_max_model_len": 4096, "vllm_enforce_eager": True})
    words = s.command(4, "experts")
    proc = subprocess.Popen(words, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "VLLM_API_KEY": KEY})
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if STARTUP_LINE in line:
            break
    else:
        pytest.fail(f"{shlex.join(words)} did not start:\n{''.join(lines)}")
    try:
        yield s.local_url, "".join(lines)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def get(url: str, key: str | None = None, body: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body else None,
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_the_rendered_command_line_is_accepted_and_its_flags_arrive(served):
    _, log = served
    args = json.loads(log.split("standin-vllm args: ", 1)[1].splitlines()[0])
    assert args["cpu_offload_gb"] == 4 and args["cpu_offload_params"] == ["experts"]
    assert args["served_model_name"] == ["Qwen3-8B-AWQ"] and args["max_model_len"] == 4096 and args["enforce_eager"]


def test_the_key_guards_v1_only_as_in_vllm(served):
    url, _ = served
    assert get(f"{url}/v1/models")[0] == 401 and get(f"{url}/v1/models", "wrong")[0] == 401
    status, body = get(f"{url}/v1/models", KEY)
    assert status == 200 and json.loads(body)["data"][0]["id"] == "Qwen3-8B-AWQ"
    assert get(f"{url}/health") == (200, b"")
    status, metrics = get(f"{url}/metrics")
    assert status == 200 and b'vllm:generation_tokens_total{model_name="Qwen3-8B-AWQ"}' in metrics


def test_a_chat_completion_streams(served):
    url, _ = served
    status, body = get(f"{url}/v1/chat/completions", KEY, {"model": "Qwen3-8B-AWQ", "stream": True, "max_tokens": 5,
                                                           "messages": [{"role": "user", "content": "hi"}]})
    events = [line[6:] for line in body.decode().splitlines() if line.startswith("data: ")]
    assert status == 200 and events[-1] == "[DONE]" and len(events) == 7
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert text == "stand-in vLLM"


def test_a_flag_vllm_does_not_have_is_refused(venv, tmp_path):
    result = subprocess.run([str(venv / "venv" / "bin" / "vllm"), "serve", str(tmp_path), "--no-such-flag"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "unrecognized arguments: --no-such-flag" in result.stderr


def test_the_abi_broken_vllm_is_refused_before_the_swap(standin, venv):
    before = os.readlink(venv / "venv")
    result = switch(standin, venv, "vllm-standin-broken")
    assert result.returncode == 1 and "refused before the swap" in result.stderr
    assert "vllm._C (vllm 0.33.1, built for torch 2.10.0) against torch 2.10.0" in result.stderr
    assert os.readlink(venv / "venv") == before


def test_a_torch_the_wheels_metadata_does_not_pin_is_refused_by_the_resolver(standin, venv):
    result = switch(standin, venv, "vllm-standin-other-torch")
    assert result.returncode != 0 and "vLLM: no wheel built for torch 2.10 (built for torch 2.9)" in result.stderr
