"""deploys/llamacpp.py with ``llamacpp_build: vulkan`` for real: the REAL Vulkan llama-server (the pinned llama.cpp
built with -DGGML_VULKAN=ON in the lab's Debian 13 build box, labwright.llamacpp.vulkan) on a Debian 13 lab guest
with Mesa's lavapipe (mesa-vulkan-drivers: Vulkan on the CPU), serving the tiny GGUF.

What it costs: the Vulkan build is the marker ``vulkan_build``. Cold (no ~/.cache/labwright/llama/VERSION/
vulkan-trixie/manifest.json), the module fixture makes the build box and builds it: ~10 min on 2 idle cores, far more
on a loaded machine (docs/llamacpp.md has the measured times); cached, the fixture costs nothing. Deselect it with
``-m "not vulkan_build"``. The rest: one Debian 13 guest (the lab image data/lab-image-trixie.toml, built once with
debootstrap and imported), apt's libvulkan1 + mesa-vulkan-drivers there, three deploys.

Expected, on lavapipe (llama.cpp's ggml-vulkan.cpp, ggml_vk_instance_init, as vendored in llama-cpp-python 0.3.36):
with ``llamacpp_vulkan_device`` auto llama.cpp skips the CPU-type device, logs ``ggml_vulkan: No devices found.``
and serves on its CPU backend; with ``llamacpp_vulkan_device=0`` it uses ``Vulkan0: llvmpipe`` and offloads every
layer. ``gpu check``'s engine row (labwright.gpu.vulkan.vulkan_engine_check) fails both, as it must: the first says
the CPU backend, the second names llvmpipe, Mesa's CPU driver. A Debian 12 guest is refused in one line.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
import urllib.request
from pathlib import Path

import pytest

from labwright.gpu.check import engine_command, parse_engine
from labwright.gpu.vulkan import parse_vulkan_log, vulkan_engine_check
from labwright.lab import lab as lab_ops
from labwright.lab.lab import instance_address
from labwright.llamacpp import vulkan
from labwright.llamacpp.tiny_model import write_tiny_gguf
from labwright.testing.lab_fixture import OWNER_KEY, Lab, process_token
from labwright.testing.pyinfra_output import DeployRun, run_pyinfra

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.vulkan_build]

REPO = Path(__file__).resolve().parents[2]
MODEL = "/srv/models/tiny.gguf"
PORT = 8001
KEY_FILE = "/etc/llama-server/api-key"


def deploy(lab: Lab, name: str, *data: str) -> DeployRun:
    """A 4096-token context: lavapipe allocates the production 131072 (field note 004's) in ~1 min on 2 loaded cores
    and decodes it at ~3 tok/s (flash attention, q4_0 KV on the CPU through Vulkan), which tells nothing more. Health
    is waited for up to 10 min, not the default 2: lavapipe's warm-up run (llama-server's empty decode before it
    answers /health) took over 120 s on two cores shared with three other workers (a full run at 8677e66)."""
    return run_pyinfra(lab.host(name), "deploys/llamacpp.py", f"llamacpp_model={MODEL}", "llamacpp_build=vulkan",
                       "llamacpp_ctx_size=4096", "llamacpp_health_timeout=600", *data, cwd=REPO, timeout=1200)


def sh(lab: Lab, name: str, script: str) -> str:
    result = lab.client.exec(name, ["sh", "-c", script])
    assert result.exit_code == 0, f"{script!r} failed: {result.stderr.decode()}"
    return result.stdout.decode()


def decode_rate(address: str, key: str, tokens: int = 64) -> float:
    """llama-server's own decode rate (timings.predicted_per_second) for one completion of ``tokens``."""
    body = json.dumps({"messages": [{"role": "user", "content": "Say something."}], "max_tokens": tokens,
                       "temperature": 0.8, "seed": 1}).encode()
    request = urllib.request.Request(f"http://{address}:{PORT}/v1/chat/completions", data=body, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=300) as response:
        answer = json.load(response)
    assert answer["usage"]["completion_tokens"] == tokens, answer
    return float(answer["timings"]["predicted_per_second"])


def engine(lab: Lab, name: str):
    return parse_engine("llama-server", sh(lab, name, engine_command("llama-server")))


@pytest.fixture(scope="module")
def vulkan_binary(lab: Lab) -> Path:
    """The cached Vulkan build; cold, built here in the lab's build box (see the module docstring for the cost)."""
    started = time.monotonic()
    binary = vulkan.build_vulkan_server(client=lab.client, profile=lab.spec.profile, tool=lab.client.endpoint.tool)
    print(f"\nVulkan llama-server ready in {time.monotonic() - started:.1f}s: {binary}")
    return binary


@pytest.fixture(scope="module")
def trixie_guest(lab: Lab, vulkan_binary: Path, tmp_path_factory: pytest.TempPathFactory):
    """A Debian 13 lab guest (no GPU: Mesa offers lavapipe only) with the tiny model."""
    alias = vulkan.ensure_trixie_image(lab.client)
    name = f"lwvk-{secrets.token_hex(3)}"
    spec = {"name": name, "type": "container", "source": {"type": "image", "alias": alias},
            "profiles": [lab.spec.profile],
            "config": {lab_ops.LAB_KEY: lab.spec.name, OWNER_KEY: process_token(os.getpid()), "limits.memory": "2GiB"}}
    lab.client.create_instance(spec)
    try:
        if not lab.start_new(name, last=False):  # LXD's shift walk failed once: made again from the image
            lab.client.create_instance(spec)
            lab.start_new(name)
        lab_ops.wait_ready(lab.client, name, timeout=180)
        model = write_tiny_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf")
        sh(lab, name, "mkdir -p /srv/models")
        with model.open("rb") as handle:
            lab.client.push_file(name, MODEL, handle, mode=0o644)
        yield name
    finally:
        lab.remove(name)


@pytest.fixture(scope="module")
def on_cpu_backend(lab: Lab, trixie_guest: str) -> dict:
    """The first deploy: device auto (llama.cpp's own choice), so lavapipe is skipped."""
    started = time.monotonic()
    run = deploy(lab, trixie_guest)
    assert run.rc == 0, run.output[-4000:]
    address = instance_address(lab.client, trixie_guest) or ""
    key = sh(lab, trixie_guest, f"cat {KEY_FILE}").strip()
    return {"run": run, "seconds": time.monotonic() - started, "address": address, "key": key,
            "rate": decode_rate(address, key), "engine": engine(lab, trixie_guest)}


def test_auto_skips_lavapipe_and_serves_on_the_cpu_backend(lab, trixie_guest, on_cpu_backend):
    unit = sh(lab, trixie_guest, "cat /etc/systemd/system/llama-server.service")
    assert "GGML_VK_VISIBLE_DEVICES" not in unit
    assert "mesa-vulkan-drivers" in sh(lab, trixie_guest, "dpkg-query -W -f '${Package}\\n' mesa-vulkan-drivers "
                                                          "libvulkan1")
    state = on_cpu_backend["engine"]
    log = parse_vulkan_log(state.log)
    assert log.vulkan and log.no_devices, state.log[-3000:]
    check = vulkan_engine_check(state)
    assert not check.ok and "CPU backend" in check.detail, check
    print(f"\nVulkan build, device auto (CPU backend): {on_cpu_backend['rate']:.0f} tok/s decode; first deploy "
          f"{on_cpu_backend['seconds']:.0f}s")


def test_lavapipe_chosen_on_purpose_serves_every_layer_through_vulkan(lab, trixie_guest, on_cpu_backend):
    run = deploy(lab, trixie_guest, "llamacpp_vulkan_device=0")
    assert run.rc == 0 and run.totals.changed >= 1, run.output[-4000:]
    unit = sh(lab, trixie_guest, "cat /etc/systemd/system/llama-server.service")
    assert 'Environment="GGML_VK_VISIBLE_DEVICES=0"' in unit
    rate = decode_rate(on_cpu_backend["address"], on_cpu_backend["key"], tokens=32)
    state = engine(lab, trixie_guest)
    log = parse_vulkan_log(state.log)
    assert any("llvmpipe" in used for used in log.using), state.log[-3000:]
    assert log.offloaded is not None and log.offloaded[0] == log.offloaded[1] > 0, state.log[-3000:]
    # gpu check's engine row: the Vulkan device is a CPU, so it fails naming llvmpipe (the expected result here)
    check = vulkan_engine_check(state)
    assert not check.ok and "llvmpipe is Mesa's CPU driver" in check.detail, check
    print(f"\nVulkan on lavapipe: {rate:.1f} tok/s decode ({log.offloaded[0]}/{log.offloaded[1]} layers); CPU "
          f"backend of the same binary: {on_cpu_backend['rate']:.0f} tok/s")
    again = deploy(lab, trixie_guest, "llamacpp_vulkan_device=0")
    assert again.rc == 0 and again.totals.changed == 0, again.output[-3000:]


def test_a_debian_12_guest_is_refused_in_one_line_before_anything_runs(lab, vulkan_binary):
    name = lab.fresh("lwvk12")
    try:
        run = run_pyinfra(lab.host(name), "deploys/llamacpp.py", "llamacpp_model=/srv/models/none.gguf",
                          "llamacpp_build=vulkan", cwd=REPO, timeout=600)
        assert run.rc != 0
        lines = [line for line in run.output.splitlines() if "llamacpp_build: vulkan: " in line]
        assert len(lines) == 1, run.output[-3000:]
        wanted = (r"needs glibc (2\.\d+) \(GLIBC_\1, read from its ELF\), @(lxd|incus)/lwvk12-\w+ has glibc 2\.36: it "
                  r"would not start there; make the guest Debian 13")
        assert re.search(wanted, lines[0]), lines[0]
        assert "Beginning operation run" not in run.output and "Traceback" not in run.output, run.output[-3000:]
        assert not sh(lab, name, "ls /etc/systemd/system/llama-server.service /usr/local/bin/llama-server "
                                 "2>/dev/null || true").strip()
    finally:
        lab.remove(name)
