"""testinfra checks of what deploys/vllm.py promises, on a deployed vLLM host.

    labwright verify vllm --hosts=@lxd/llm1
    LABWRIGHT_VLLM_MODEL_NAME=Qwen3-8B-AWQ labwright verify vllm --hosts=@ssh/root@ADDR

Expected values come from the environment, else templates/vllm/defaults.toml: LABWRIGHT_VLLM_SERVICE,
LABWRIGHT_VLLM_USER, LABWRIGHT_VLLM_PORT, LABWRIGHT_VLLM_API_KEY_FILE, LABWRIGHT_VLLM_MODEL_NAME (the served name
/v1/models must list; default: any) and LABWRIGHT_VLLM_EXPOSE (true: listening beyond loopback on purpose, reported
as a warning instead of a failure). The HTTP checks run on the host itself (python3): the port is loopback-only.
"""

from __future__ import annotations

import os
import tomllib
import warnings

from labwright import paths
from labwright.shell import quote

DEFAULTS = tomllib.loads((paths.templates_dir("vllm") / "defaults.toml").read_text())


def setting(name: str, default: object) -> str:
    return os.environ.get(f"LABWRIGHT_VLLM_{name.upper()}") or str(default)


SERVICE = setting("service", DEFAULTS["service"]["service"])
USER = setting("user", DEFAULTS["service"]["user"])
PORT = int(setting("port", DEFAULTS["serve"]["port"]))
KEY_FILE = setting("api_key_file", DEFAULTS["service"]["api_key_file"])
MODEL_NAME = setting("model_name", "")
EXPOSE = setting("expose", "false").lower() in ("1", "true", "yes", "on")
URL = f"http://127.0.0.1:{PORT}"

GET = """
import json, sys, urllib.error, urllib.request
headers = {}
if len(sys.argv) > 2:
    headers["Authorization"] = "Bearer " + open(sys.argv[2]).readline().strip()
try:
    with urllib.request.urlopen(urllib.request.Request(sys.argv[1], headers=headers), timeout=10) as r:
        print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode())
"""


def get(host, path: str, key: bool = False) -> tuple[int, str]:
    result = host.run(f"python3 -c {quote(GET)} {quote(URL + path)}{' ' + quote(KEY_FILE) if key else ''}")
    assert result.rc == 0, f"GET {path} failed on the host: {result.stderr.strip()[-500:]}"
    status, _, body = result.stdout.partition("\n")
    return int(status), body


def test_unit_enabled_and_active(host):
    unit = host.service(f"{SERVICE}.service")
    assert unit.is_enabled, "unit is not enabled: it would not come back after a reboot"
    assert unit.is_running, f"{SERVICE}.service is not running: journalctl -u {SERVICE}"


def test_service_user_is_a_nologin_system_user(host):
    user = host.user(USER)
    assert user.exists and user.shell in ("/usr/sbin/nologin", "/sbin/nologin") and user.uid < 1000


def test_key_file_is_roots_and_readable_by_the_service_only(host):
    key = host.file(KEY_FILE)
    assert key.exists and key.user == "root" and key.group == USER and key.mode == 0o640
    env = host.file(f"{KEY_FILE}.env")
    assert env.exists and env.user == "root" and env.mode == 0o600, "the VLLM_API_KEY file systemd reads"


def test_the_key_is_not_on_the_command_line(host):
    pid = host.run(f"systemctl show -p MainPID --value {quote(SERVICE)}.service").stdout.strip()
    cmdline = host.run(f"tr '\\0' ' ' < /proc/{pid}/cmdline").stdout
    assert "--api-key" not in cmdline, "the key is on the command line: every user of the host can read it"


def test_v1_needs_the_key_and_lists_the_model(host):
    assert get(host, "/v1/models")[0] == 401, "/v1/models answers without the key"
    status, body = get(host, "/v1/models", key=True)
    assert status == 200, body[:300]
    if MODEL_NAME:
        assert f'"id": "{MODEL_NAME}"' in body or f'"id":"{MODEL_NAME}"' in body, body[:300]


def test_health_and_metrics_answer(host):
    assert get(host, "/health")[0] == 200
    status, metrics = get(host, "/metrics")
    assert status == 200 and "vllm:" in metrics


def test_listens_on_loopback_only(host):
    """vLLM's key guards /v1 only: /health and /metrics answer anyone who reaches the port."""
    listening = [s for s in host.socket.get_listening_sockets() if s.endswith(f":{PORT}")]
    assert listening, f"nothing listens on port {PORT}"
    beyond = [s for s in listening if not s.startswith(("tcp://127.", "tcp://[::1]", "tcp://::1"))]
    if beyond and EXPOSE:
        warnings.warn(f"vLLM listens beyond loopback on purpose (vllm_expose): {beyond}; /health and /metrics answer "
                      "without a key there", stacklevel=1)
    else:
        assert not beyond, f"vLLM listens beyond loopback: {beyond}; /health and /metrics answer without a key there"
