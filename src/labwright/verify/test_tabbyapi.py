"""testinfra checks of what deploys/tabbyapi.py promises, on a deployed host.

    labwright verify tabbyapi --hosts=@lxd/llm1
    LABWRIGHT_TABBYAPI_PORT=5001 LABWRIGHT_TABBYAPI_MODEL_NAME=Qwen3-8B-exl3 LABWRIGHT_TABBYAPI_CACHE_SIZE=65536 \
        labwright verify tabbyapi --hosts=@ssh/root@ADDR

Expected values: templates/tabbyapi/defaults.toml (the file the deploy reads), each overridden by an environment
variable ``LABWRIGHT_TABBYAPI_<KEY>`` (JSON values are parsed: ``LABWRIGHT_TABBYAPI_EXTRA='{"logging": {}}'``), the
same keys as the deploy's ``tabbyapi_<key>`` data. ``cache_size`` is expected rounded up to a multiple of 256, as the
deploy writes it. The HTTP checks run on the host itself (python3, with the host's own API key), so the key never
leaves it and a loopback-only port works too. The driver check runs where the host has an NVIDIA driver
(``LABWRIGHT_TABBYAPI_NVIDIA_ROOT`` reads a fake tree instead of ``/``); without one it is skipped, saying so.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from typing import Any

import pytest

from labwright import paths
from labwright.gpu.check import engine_on_gpu
from labwright.hosts.testinfra import TestinfraHost
from labwright.shell import quote
from labwright.textio import ascii_digits, loads_json, yaml_load

DEFAULTS_FILE = paths.templates_dir("tabbyapi") / "defaults.toml"
BUNDLE = "/opt/labwright/lib/labwright-stack.pyz"
MODEL_PY = "backends/exllamav3/model.py"
HTTP_GET = (
    "import sys, urllib.request\n"
    "key = ''\n"
    "for line in open(sys.argv[2]):\n"
    "    name, _, value = line.partition(':')\n"
    "    key = value.strip() if name.strip() == 'api_key' else key\n"
    "request = urllib.request.Request(sys.argv[1], headers={'Authorization': 'Bearer ' + key})\n"
    "with urllib.request.urlopen(request, timeout=10) as r:\n"
    "    sys.stdout.write(str(r.status) + '\\n' + r.read().decode())\n"
)


def expected() -> dict[str, Any]:
    values: dict[str, Any] = {}
    for section in tomllib.loads(DEFAULTS_FILE.read_text()).values():
        values.update(section)
    for key in list(values):
        raw = os.environ.get(f"LABWRIGHT_TABBYAPI_{key.upper()}")
        if raw is not None:
            try:
                values[key] = loads_json(raw)
            except json.JSONDecodeError:
                values[key] = raw
    values["cache_size"] = -(-int(values["cache_size"]) // 256) * 256
    return values


@pytest.fixture(scope="module")
def want() -> dict[str, Any]:
    return expected()


@pytest.fixture(scope="module")
def config(host, want) -> dict[str, Any]:
    path = f"{want['dir']}/config.yml"
    if not host.file(path).exists:
        pytest.fail(f"{path} does not exist", pytrace=False)
    return yaml_load(host.file(path).content_string) or {}


@pytest.fixture(scope="module")
def main_pid(host, want) -> int:
    pid = host.run(f"systemctl show -p MainPID --value {quote(want['service'])}.service")
    if pid.rc != 0 or not ascii_digits(pid.stdout.strip()) or int(pid.stdout) == 0:
        pytest.fail(f"{want['service']}.service has no running main process", pytrace=False)
    return int(pid.stdout)


def http_get(host, want, path: str) -> tuple[int, Any]:
    address = "127.0.0.1" if want["host"] in ("0.0.0.0", "::") else want["host"]
    url = f"http://{address}:{want['port']}{path}"
    tokens = f"{want['dir']}/api_tokens.yml"
    result = host.run(f"python3 -c {quote(HTTP_GET)} {quote(url)} {quote(tokens)}")
    assert result.rc == 0, f"GET {url} failed on the host: {result.stderr.strip()[-500:]}"
    status, _, body = result.stdout.partition("\n")
    return int(status), loads_json(body)


def test_unit_enabled_and_active(host, want):
    unit = host.service(f"{want['service']}.service")
    assert unit.is_enabled, "unit is not enabled: it would not come back after a reboot"
    assert unit.is_running


def test_unit_restarts_on_failure(host, want):
    restart = host.run(f"systemctl show -p Restart --value {quote(want['service'])}.service")
    assert restart.stdout.strip() == want["restart"], restart.stdout


def test_runs_as_the_service_user_from_the_venv(host, want, main_pid):
    assert host.run(f"ps -o user= -p {main_pid}").stdout.strip() == want["user"]
    exe = host.run(f"tr '\\0' ' ' < /proc/{main_pid}/cmdline").stdout.split()
    assert exe[:2] == [f"{want['venv']}/bin/python", f"{want['dir']}/main.py"], exe


def test_port_listening(host, want):
    address = "0.0.0.0" if want["host"] in ("0.0.0.0", "::") else want["host"]
    assert host.socket(f"tcp://{address}:{want['port']}").is_listening


def test_health_and_models_answer(host, want):
    status, _ = http_get(host, want, "/health")
    assert status == 200
    status, models = http_get(host, want, "/v1/models")
    assert status == 200 and want["model_name"] in [m.get("id") for m in models.get("data", [])], models


def test_config_values(config, want):
    assert config["network"]["host"] == want["host"] and config["network"]["port"] == int(want["port"])
    assert config["network"].get("disable_auth") is False
    model = config["model"]
    for key in ("model_dir", "model_name", "max_seq_len", "cache_size", "chunk_size", "max_batch_size"):
        assert str(model[key]) == str(want[key]), (key, model[key], want[key])
    assert model["cache_size"] % 256 == 0
    assert str(model["cache_mode"]).replace(" ", "") == str(want["cache_mode"]).replace(" ", "")
    assert config["memory"]["sysmem_recurrent_cache"] == int(want["sysmem_recurrent_cache"])
    for section, values in (want.get("extra") or {}).items():
        assert config.get(section) == values, section


def test_api_keys_stay_on_the_host(host, want, config):
    tokens = host.file(f"{want['dir']}/api_tokens.yml")
    assert tokens.exists and tokens.user == "root" and tokens.group == want["user"]
    assert tokens.mode & 0o007 == 0, f"api_tokens.yml is world-accessible (mode {tokens.mode:o})"
    keys = yaml_load(tokens.content_string)
    for name in ("api_key", "admin_key"):
        assert re.fullmatch(r"[0-9a-f]{32,}", str(keys.get(name, ""))), f"{name} missing or not a random hex key"
    assert keys["api_key"] not in json.dumps(config) and keys["api_key"] != keys["admin_key"]


def test_ngram_drafting_state(host, want, config):
    n = int(want["ngram_match_min"])
    model_py = host.file(f"{want['dir']}/{MODEL_PY}").content_string
    draft = config.get("draft_model") or {}
    if n == 0:
        assert draft.get("draft_mode") != "ngram" and not re.search(r"(?a)ngram_match_min=\d+,", model_py)
    elif "ngram_match_min=self.ngram_match_min" in model_py:
        # config era: the source untouched, the config carries it
        assert draft.get("draft_mode") == "ngram" and draft.get("ngram_match_min") == n, draft
    else:
        # patch era: exactly one patched argument, inside the generator call
        assert model_py.count("ngram_match_min=") == 1 and f"ngram_match_min={n}," in model_py
        assert re.search(r"num_draft_tokens=self\.draft_num_tokens,\n\s+ngram_match_min=", model_py)


def test_stack_verifies_clean(host, want):
    """The ABI verifier (`labwright stack show`, from the bundle the deploy left on the host) finds nothing broken."""
    result = host.run(f"python3 {BUNDLE} show --venv {quote(want['venv'])} --root {quote(want['root'])} "
                      "--json")
    assert result.rc == 0, result.stderr[-2000:]
    current = loads_json(result.stdout)["environments"][0]
    assert current["role"] == "current" and current["ok"], current
    assert all(p["verdict"] in ("ok", "no-extension", "absent") for p in current["packages"]), current["packages"]


def test_driver_versions_equal(host, want):
    root = os.environ.get("LABWRIGHT_TABBYAPI_NVIDIA_ROOT", want["nvidia_root"]).rstrip("/")
    version_file = host.file(f"{root}/proc/driver/nvidia/version")
    if not version_file.exists:
        pytest.skip(f"no NVIDIA driver on this host ({root or ''}/proc/driver/nvidia/version): nothing to match")
    found = re.search(r"(?a)Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", version_file.content_string)
    assert found, version_file.content_string
    libs = host.run(f"ls -1 {root}/usr/lib/x86_64-linux-gnu {root}/usr/lib64 {root}/usr/lib 2>/dev/null | "
                    "grep -E '^lib(cuda|nvidia-ml)[.]so[.][0-9]+[.][0-9]+' || true").stdout.split()
    assert libs, "no NVIDIA userspace libraries (libcuda/libnvidia-ml) on the host"
    versions = {lib.split(".so.", 1)[1] for lib in libs}
    assert versions == {found.group(1)}, f"host module {found.group(1)}, userspace {sorted(versions)}"


def test_engine_runs_on_the_gpu(host, want):
    """On a host with an NVIDIA GPU node, tabbyAPI really loaded on CUDA: its process holds /dev/nvidiaN open and its
    log names no CPU fallback or CUDA failure (labwright.gpu.check; `labwright gpu check GUEST` runs the same)."""
    check = engine_on_gpu(TestinfraHost(host), str(want["service"]))
    if check is None:
        pytest.skip("no /dev/nvidiaN GPU node on this host: a CPU host, GPU use not checked")
    assert check.ok, f"{check.detail}; cause: {check.cause}; fix: {check.fix}"
