"""Every systemd unit an engine or service deploy writes is hardened (issue 31, item 5): rendered with its real
template and the deploy's defaults, scored by the real ``systemd-analyze security --offline`` (under 5 of 10), and
still given what the engine needs (its writable directory, the GPU's device groups, its network families).

docs/security.md "Hardened units" says why each directive is there and what an unprivileged LXC container does
with it (measured by tests/integration/test_unit_hardening_lab.py).
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from labwright.deploys import kokoro, litellm, openwebui
from labwright.llamacpp import deploy_data as llamacpp_data
from labwright.tabbyapi import deploy_data as tabbyapi_data
from labwright.vllm import deploy_data as vllm_data

ANALYZE = shutil.which("systemd-analyze")
pytestmark = pytest.mark.skipif(ANALYZE is None, reason="needs systemd-analyze (the systemd package)")

#: Under 5 of systemd-analyze's 0-10 scale; --threshold= takes the same scale times ten (4.9 -> 49).
THRESHOLD = 49
#: The NVIDIA character-device groups of /proc/devices as the lent H200 showed them (driver 580, 2026-11-28: nvidia
#: and nvidiactl both major 195, nvidia-uvm, nvidia-nvswitch, nvidia-nvlink, nvidia-caps, nvidia-caps-imex-channels),
#: and the older drivers' name for major 195 (nvidia-frontend).
NVIDIA_GROUPS = ("nvidia", "nvidiactl", "nvidia-uvm", "nvidia-nvswitch", "nvidia-nvlink", "nvidia-caps",
                 "nvidia-caps-imex-channels", "nvidia-frontend")
OTHER_GROUPS = ("mem", "tty", "input", "rtc", "hidraw", "kvm", "sg", "bsg")


def tabbyapi() -> tuple[str, str]:
    s = tabbyapi_data.settings_from({})
    return f"{s.service}.service", s.render_unit()


def vllm() -> tuple[str, str]:
    s = vllm_data.settings_from({"vllm_model": "/srv/models/Qwen3-8B-AWQ"})
    return f"{s.service}.service", s.render_unit(3, "experts")


def llama_server(binary: Path) -> tuple[str, str]:
    s = llamacpp_data.settings_from({"llamacpp_binary_src": str(binary), "llamacpp_model": "/srv/models/q.gguf"})
    return f"{s.service}.service", s.render_unit()


def kokoro_unit(device: str) -> tuple[str, str]:
    d = kokoro.DEFAULTS["service"]
    service = d["service"]
    return f"{service}.service", kokoro.JINJA.get_template("kokoro.service.j2").render(
        user=d["user"], home=f"/var/lib/{service}", dir=d["dir"], venv=d["venv"], host=d["host"], port=d["port"],
        env=kokoro.DEFAULTS["device"][device]["env"], device=device, use=d["use"])


def litellm_unit() -> tuple[str, str]:
    d = litellm.DEFAULTS["service"]
    service = d["service"]
    return f"{service}.service", litellm.JINJA.get_template("litellm.service.j2").render(
        user=d["user"], home=f"/var/lib/{service}", config_dir=d["config_dir"], venv=d["venv"], host=d["host"],
        port=d["port"])


def openwebui_unit() -> tuple[str, str]:
    d = openwebui.DEFAULTS["service"]
    return f"{d['service']}.service", openwebui.JINJA.get_template("open-webui.service.j2").render(
        user=d["user"], data_dir=d["data_dir"], config_dir=d["config_dir"], venv=d["venv"], host=d["host"],
        port=d["port"])


def pipelines_unit() -> tuple[str, str]:
    d = openwebui.DEFAULTS["service"]
    return f"{d['service']}-pipelines.service", openwebui.JINJA.get_template("pipelines.service.j2").render(
        user=d["user"], directory=d["pipelines_dir"], data_dir=d["data_dir"], config_dir=d["config_dir"],
        port=d["pipelines_port"], ref=d["pipelines_ref"])


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    path = tmp_path / "llama-server"
    path.write_bytes(b"\x7fELF not really")
    return path


#: (renderer, the directory the service must be able to write, whether it runs on a GPU)
UNITS: dict[str, tuple[Callable[..., tuple[str, str]], str, bool]] = {
    "tabbyapi": (tabbyapi, "/var/lib/tabbyapi", True),
    "vllm": (vllm, "/var/lib/vllm", True),
    "llama-server": (llama_server, "/var/lib/llama-server", True),
    "kokoro-gpu": (lambda: kokoro_unit("gpu"), "/var/lib/kokoro", True),
    "kokoro-cpu": (lambda: kokoro_unit("cpu"), "/var/lib/kokoro", False),
    "litellm": (litellm_unit, "/var/lib/litellm", False),
    "open-webui": (openwebui_unit, "/var/lib/open-webui", False),
    "open-webui-pipelines": (pipelines_unit, "/var/lib/open-webui", False),
}


def render(key: str, binary: Path) -> tuple[str, str]:
    renderer = UNITS[key][0]
    return renderer(binary) if renderer is llama_server else renderer()


def service_settings(text: str) -> dict[str, list[str]]:
    """Every [Service] assignment, in order (systemd's lists: DeviceAllow= and friends may repeat)."""
    settings: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            name, _, value = line.partition("=")
            settings.setdefault(name, []).append(value)
    return settings


def analyze(path: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    proc = subprocess.run([ANALYZE, "security", "--offline=true", f"--threshold={THRESHOLD}", "--no-pager",
                           str(path)], capture_output=True, text=True, timeout=60)
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d)", proc.stdout)
    assert match, f"no score from systemd-analyze:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return float(match.group(1)), proc


@pytest.mark.parametrize("key", list(UNITS))
def test_the_analyzer_scores_the_rendered_unit_under_5(key, binary, tmp_path):
    name, text = render(key, binary)
    path = tmp_path / name
    path.write_text(text)
    score, proc = analyze(path)
    assert score < 5.0 and proc.returncode == 0, f"{name}: exposure {score}\n{proc.stdout[-3000:]}{proc.stderr}"
    # The unit is valid as systemd reads it: a bad setting would be a fatal error before any score.
    assert "bad unit file setting" not in proc.stderr and "Unknown key" not in proc.stderr, proc.stderr


def test_the_analyzer_refuses_the_units_as_they_were(tmp_path):
    """The threshold bites: the unit labwright wrote before issue 31 (ProtectSystem=full, no filters) fails it."""
    path = tmp_path / "old.service"
    path.write_text("[Service]\nType=simple\nUser=nobody\nExecStart=/bin/true\nNoNewPrivileges=true\n"
                    "PrivateTmp=true\nProtectSystem=full\nProtectHome=read-only\n")
    score, proc = analyze(path)
    assert score > 8 and proc.returncode != 0


@pytest.mark.parametrize("key", list(UNITS))
def test_the_engine_keeps_what_it_needs(key, binary):
    name, text = render(key, binary)
    s = service_settings(text)
    writable, gpu = UNITS[key][1], UNITS[key][2]
    # The whole file system read-only but the service's own directory (systemd expands %N to the unit's name).
    assert s["ProtectSystem"] == ["strict"]
    paths = [p.lstrip("-").replace("%N", name.removesuffix(".service")) for v in s.get("ReadWritePaths", [])
             for p in v.split()]
    assert paths == [writable], f"{name}: ReadWritePaths {s.get('ReadWritePaths')}"
    # Listening and calling engines: IPv4, IPv6 and local sockets stay; raw and packet sockets do not.
    families = s["RestrictAddressFamilies"][0].split()
    assert {"AF_INET", "AF_INET6", "AF_UNIX"} <= set(families) and "AF_PACKET" not in families
    # No capabilities at all (every port is above 1024) and no way to gain them.
    assert s["CapabilityBoundingSet"] == [""] and s["NoNewPrivileges"] == ["true"]
    assert s["SystemCallFilter"] == ["@system-service"] and s["SystemCallErrorNumber"] == ["EPERM"]
    # Torch, CUDA and libffi generate code at run time: a W^X filter would kill them (pytorch/pytorch#143651).
    assert "MemoryDenyWriteExecute" not in s
    if gpu:
        # /dev is the real one, device access is by group: every NVIDIA group (/dev/nvidia0, nvidiactl, -uvm,
        # -caps) and DRM, nothing else beyond systemd's pseudo devices.
        assert s.get("PrivateDevices", ["false"]) == ["false"] and s["DevicePolicy"] == ["closed"]
        allowed = [v.split() for v in s["DeviceAllow"]]
        assert all(access == "rw" for _, access in allowed)
        patterns = [spec.removeprefix("char-") for spec, _ in allowed]
        for group in (*NVIDIA_GROUPS, "drm"):
            assert any(fnmatch.fnmatch(group, p) for p in patterns), f"{name}: {group} not allowed"
        for group in OTHER_GROUPS:
            assert not any(fnmatch.fnmatch(group, p) for p in patterns), f"{name}: {group} allowed"
    else:
        assert s["PrivateDevices"] == ["true"] and "DeviceAllow" not in s


def test_every_unit_template_is_covered():
    """A new unit template gets a renderer here, so the analyzer sees it too."""
    templates = {p.name for p in Path(kokoro.TEMPLATES).parent.glob("*/*.service.j2")}
    covered = {"tabbyapi.service.j2", "llama-server.service.j2", "kokoro.service.j2", "litellm.service.j2",
               "open-webui.service.j2", "pipelines.service.j2", "vllm.service.j2"}
    assert templates == covered
