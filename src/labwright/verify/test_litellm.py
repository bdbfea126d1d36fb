"""testinfra checks of what deploys/litellm.py promises, on a deployed gateway.

    labwright verify litellm --hosts=@lxd/gateway
    LABWRIGHT_LITELLM_MODELS=tiny-a,tiny-b,fast labwright verify litellm --hosts=@ssh/root@ADDR

Expected values come from the environment, else templates/litellm/defaults.toml: LABWRIGHT_LITELLM_SERVICE,
LABWRIGHT_LITELLM_PORT, LABWRIGHT_LITELLM_CONFIG_DIR, LABWRIGHT_LITELLM_USER, and LABWRIGHT_LITELLM_MODELS (comma
separated ids /v1/models must list; empty: any). The HTTP checks run on the host itself (python3); the master key
is read there as root and never printed.
"""

from __future__ import annotations

import os
import tomllib

import pytest

from labwright import paths
from labwright.default_keys import find_default_keys
from labwright.shell import quote
from labwright.textio import loads_json
from labwright.verify.service_checks import assert_root_only, assert_runs_as, assert_unit_enabled_and_running

DEFAULTS = tomllib.loads((paths.templates_dir("litellm") / "defaults.toml")
                        .read_text())["service"]


def setting(name: str) -> str:
    return os.environ.get(f"LABWRIGHT_LITELLM_{name.upper()}") or str(DEFAULTS[name])


SERVICE, USER, CONFIG_DIR, PORT = setting("service"), setting("user"), setting("config_dir"), int(setting("port"))
MODELS = [m for m in os.environ.get("LABWRIGHT_LITELLM_MODELS", "").split(",") if m]
URL = f"http://127.0.0.1:{PORT}"

HTTP = """
import sys, urllib.error, urllib.request
url, env_file = sys.argv[1], sys.argv[2]
headers = {}
if env_file != "-":
    for line in open(env_file):
        if line.startswith("LITELLM_MASTER_KEY="):
            headers["Authorization"] = "Bearer " + line.split("=", 1)[1].strip().strip('"')
try:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
        sys.stdout.write(str(r.status) + "\\n" + r.read().decode())
except urllib.error.HTTPError as error:
    sys.stdout.write(str(error.code) + "\\n")
"""


def http_get(host, path: str, with_key: bool) -> tuple[int, str]:
    env_file = f"{CONFIG_DIR}/master.env" if with_key else "-"
    with host.sudo():
        result = host.run(f"python3 -c {quote(HTTP)} {quote(URL + path)} {quote(env_file)}")
    assert result.rc == 0, f"GET {path} failed on the host: {result.stderr.strip()[-500:]}"
    status, _, body = result.stdout.partition("\n")
    return int(status), body


def test_unit_enabled_and_active(host):
    assert_unit_enabled_and_running(host, SERVICE)


def test_runs_as_the_service_user(host):
    assert_runs_as(host, SERVICE, USER)


@pytest.mark.parametrize("name", ["master.env", "secrets.env"])
def test_key_files_are_root_only(host, name):
    assert_root_only(host, f"{CONFIG_DIR}/{name}")


def test_config_is_not_world_readable_and_holds_no_literal_key(host):
    config = host.file(f"{CONFIG_DIR}/config.yaml")
    assert config.mode & 0o007 == 0, oct(config.mode)
    with host.sudo():
        text = host.run(f"cat {CONFIG_DIR}/config.yaml").stdout
    keys = [line.split(":", 1)[1].strip().strip('"') for line in text.splitlines() if "api_key:" in line]
    assert keys and all(k == "none" or k.startswith("os.environ/") for k in keys), keys
    assert "master_key: os.environ/LITELLM_MASTER_KEY" in text


def test_no_public_default_key(host):
    found = []
    with host.sudo():
        for name in ("master.env", "secrets.env", "config.yaml"):
            text = host.run(f"cat {CONFIG_DIR}/{name} 2>/dev/null").stdout
            found += [f"{name}: {variable} is {why}" for variable, why in find_default_keys(text)]
    assert not found, "; ".join(found)


def test_port_listening(host):
    assert host.socket(f"tcp://0.0.0.0:{PORT}").is_listening or host.socket(f"tcp://127.0.0.1:{PORT}").is_listening


def test_liveliness_needs_no_key(host):
    status, _ = http_get(host, "/health/liveliness", with_key=False)
    assert status == 200


def test_models_need_the_master_key(host):
    status, _ = http_get(host, "/v1/models", with_key=False)
    assert status == 401


def test_models_listed_with_the_key(host):
    status, body = http_get(host, "/v1/models", with_key=True)
    assert status == 200, body[:500]
    ids = {str(m.get("id")) for m in loads_json(body).get("data", [])}
    assert ids, "the gateway serves no models"
    missing = sorted(set(MODELS) - ids)
    assert not missing, f"/v1/models lacks {missing}; lists {sorted(ids)}"
