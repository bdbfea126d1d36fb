"""testinfra checks of what deploys/openwebui.py promises, on a deployed Open WebUI host.

    labwright verify openwebui --hosts=@lxd/webui
    LABWRIGHT_OPENWEBUI_MODELS=tiny labwright verify openwebui --hosts=@ssh/root@ADDR

Expected values come from the environment, else templates/openwebui/defaults.toml: LABWRIGHT_OPENWEBUI_SERVICE,
LABWRIGHT_OPENWEBUI_PORT, LABWRIGHT_OPENWEBUI_CONFIG_DIR, LABWRIGHT_OPENWEBUI_USER, and LABWRIGHT_OPENWEBUI_MODELS
(comma separated model ids the admin must see; empty: any one). The HTTP checks run on the host itself (python3);
the admin's password is read there as root and never printed.
"""

from __future__ import annotations

import json
import os
import tomllib

import pytest

from labwright import paths
from labwright.default_keys import find_default_keys
from labwright.openwebui.config import OFFLINE_SETTINGS, SIGNIN_CHECK
from labwright.shell import quote
from labwright.textio import loads_json
from labwright.verify.service_checks import assert_root_only, assert_runs_as, assert_unit_enabled_and_running

DEFAULTS = tomllib.loads((paths.templates_dir("openwebui") / "defaults.toml").read_text())["service"]


def setting(name: str) -> str:
    return os.environ.get(f"LABWRIGHT_OPENWEBUI_{name.upper()}") or str(DEFAULTS[name])


SERVICE, USER, CONFIG_DIR, PORT = setting("service"), setting("user"), setting("config_dir"), int(setting("port"))
MODELS = [m for m in os.environ.get("LABWRIGHT_OPENWEBUI_MODELS", "").split(",") if m]
URL = f"http://127.0.0.1:{PORT}"
KEY_FILES = ("secret.env", "admin.env", "openai.env")

POST = """
import json, sys, urllib.error, urllib.request
request = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=30) as r:
        print(r.status)
except urllib.error.HTTPError as error:
    print(error.code)
"""


def run_python(host, script: str, *args: str):
    with host.sudo():
        return host.run(" ".join(["python3", "-c", quote(script), *(quote(a) for a in args)]))


def test_unit_enabled_and_active(host):
    assert_unit_enabled_and_running(host, SERVICE)


def test_runs_as_the_service_user(host):
    assert_runs_as(host, SERVICE, USER)


@pytest.mark.parametrize("name", KEY_FILES)
def test_key_files_are_root_only(host, name):
    assert_root_only(host, f"{CONFIG_DIR}/{name}")


def test_no_public_default_key(host):
    found = []
    with host.sudo():
        for name in (*KEY_FILES, "pipelines.env", "settings.env"):
            text = host.run(f"cat {CONFIG_DIR}/{name} 2>/dev/null").stdout
            found += [f"{name}: {variable} is {why}" for variable, why in find_default_keys(text)]
    assert not found, "; ".join(found)


def test_settings_keep_it_offline_and_hold_no_key(host):
    text = host.file(f"{CONFIG_DIR}/settings.env").content_string
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    wrong = {name: values.get(name) for name, value in OFFLINE_SETTINGS.items() if values.get(name) != value}
    assert not wrong, f"settings.env differs from the offline settings: {wrong}"
    assert not any("KEY" in name or "PASSWORD" in name for name in values), sorted(values)


def test_port_listening(host):
    assert host.socket(f"tcp://0.0.0.0:{PORT}").is_listening or host.socket(f"tcp://127.0.0.1:{PORT}").is_listening


GET = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=30).status)"


def test_health_ok(host):
    result = host.run(f"python3 -c {quote(GET)} {URL}/health")
    assert result.rc == 0 and result.stdout.strip() == "200", result.stderr[-500:]


def test_admin_signs_in_and_sees_the_models(host):
    result = run_python(host, SIGNIN_CHECK, URL, CONFIG_DIR)
    assert result.rc == 0, result.stderr.strip()[-500:]
    models = loads_json(result.stdout.strip().splitlines()[-1])["models"]
    missing = sorted(set(MODELS) - set(models))
    assert models and not missing, f"the admin sees {models}; missing {missing}"


def test_signup_is_closed(host):
    body = json.dumps({"name": "x", "email": "intruder@example.invalid", "password": "Intruder-pw-123"})
    result = run_python(host, POST, f"{URL}/api/v1/auths/signup", body)
    assert result.rc == 0 and result.stdout.strip() == "403", f"sign-up answered {result.stdout.strip()}"
