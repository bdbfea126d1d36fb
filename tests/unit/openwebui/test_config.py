"""labwright.openwebui.config: connections from inventory data, the settings file, the on-guest keys script (run
here with the real sh), the admin sign-in check (run against a local HTTP server), and the deploy's pip source."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from labwright.deploys.common import pip_source
from labwright.litellm.config import ConfigError, EngineHost
from labwright.litellm.config import load_defaults as litellm_defaults
from labwright.openwebui.config import (
    OFFLINE_SETTINGS,
    SIGNIN_CHECK,
    Connection,
    choose_backend,
    load_defaults,
    openai_env_script,
    refuse_default_key,
    render_settings,
)

ENGINES = litellm_defaults()["engines"]
HOSTS = [EngineHost("@lxd/webui", {"llamacpp_model": "/srv/models/tiny.gguf"}, True),
         EngineHost("@lxd/gpu", {"tabbyapi_model_name": "qwen", "tabbyapi_port": 5001}),
         EngineHost("@lxd/old", {"ollama_models": ["llama3", "qwen2"]}),
         EngineHost("@lxd/desk", {"desktop": True})]


def address(host: EngineHost) -> str:
    return {"@lxd/gpu": "10.99.0.20", "@lxd/old": "10.99.0.30"}[host.name]


def test_defaults_pin_a_version_and_keep_pipelines_off() -> None:
    service = load_defaults()["service"]
    assert service["version"] == "0.12.4" and service["pipelines"] is False
    assert service["venv"] == "/opt/open-webui/.venv" and service["data_dir"] == "/var/lib/open-webui"


def test_engines_are_connections_of_their_own_when_no_gateway_runs_here() -> None:
    connections = choose_backend("auto", False, 4000, HOSTS, ENGINES, address)
    assert [(c.url, c.key, c.key_file, c.key_var) for c in connections] == [
        # the engine on the Open WebUI host itself: loopback, its key read from its own key file on the guest
        ("http://127.0.0.1:8001/v1", "", "/etc/llama-server/api-key", ""),
        # tabbyAPI on another guest: its api_key, read there by the deploy into this guest's root-only engines.env
        ("http://10.99.0.20:5001/v1", "", "/etc/open-webui/engines.env", "ENGINE_KEY_TABBYAPI_LXD_GPU"),
        ("http://10.99.0.30:11434/v1", "none", "", ""),    # Ollama has no key; two models, one server: one connection
    ]


def test_an_engine_open_on_purpose_gets_no_key() -> None:
    hosts = [EngineHost("@lxd/webui", {"llamacpp_model": "/srv/m.gguf", "llamacpp_open": True}, True)]
    [connection] = choose_backend("engines", False, 4000, hosts, ENGINES, address)
    assert (connection.key, connection.key_file) == ("none", "")


@pytest.mark.parametrize("backend", ["auto", "gateway"])
def test_the_gateway_on_this_host_is_the_one_connection(backend: str) -> None:
    [connection] = choose_backend(backend, True, 4001, HOSTS, ENGINES, address)
    assert connection.url == "http://127.0.0.1:4001/v1"
    assert (connection.key, connection.key_file, connection.key_var) == ("", "/etc/litellm/master.env",
                                                                         "LITELLM_MASTER_KEY")


def test_engines_forced_even_with_a_gateway_here() -> None:
    assert len(choose_backend("engines", True, 4000, HOSTS, ENGINES, address)) == 3


@pytest.mark.parametrize(("backend", "gateway", "hosts", "words"), [
    ("gateway", False, HOSTS, "openwebui_backend: gateway: no LiteLLM gateway on this host"),
    ("auto", False, [HOSTS[3]], "openwebui_backend: no engines in the inventory"),
    ("litellm", False, HOSTS, "openwebui_backend: 'litellm' is not one of auto, gateway, engines"),
])
def test_bad_backends_are_one_line(backend: str, gateway: bool, hosts: list[EngineHost], words: str) -> None:
    with pytest.raises(ConfigError) as error:
        choose_backend(backend, gateway, 4000, hosts, ENGINES, address)
    assert words in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("value", ["0p3n-w3bu!", " '0p3n-w3bu!' ", "t0p-s3cr3t", "sk-1234"])
def test_public_default_keys_are_refused(value: str) -> None:
    with pytest.raises(ConfigError) as error:
        refuse_default_key(value, "openwebui_pipelines_api_key")
    assert str(error.value).startswith("openwebui_pipelines_api_key: is ")
    assert "anyone can look up" in str(error.value)
    assert value.strip().strip("'") not in str(error.value)  # the key itself is never printed


def test_settings_hold_urls_and_offline_switches_but_no_key() -> None:
    connections = [Connection("http://127.0.0.1:4000/v1", "", "gw", "/etc/litellm/master.env", "LITELLM_MASTER_KEY"),
                   Connection("http://10.99.0.20:8001/v1", "none", "engine")]
    text = render_settings(connections, "/var/lib/open-webui", "admin@lab.test", "Lab Admin", "http://127.0.0.1:9099")
    lines = dict(line.split("=", 1) for line in text.splitlines() if not line.startswith("#"))
    assert lines["OPENAI_API_BASE_URLS"] == "http://127.0.0.1:4000/v1;http://10.99.0.20:8001/v1;http://127.0.0.1:9099"
    assert lines["DATA_DIR"] == "/var/lib/open-webui" and lines["WEBUI_ADMIN_EMAIL"] == "admin@lab.test"
    assert lines["WEBUI_ADMIN_NAME"] == "Lab Admin" and lines["STATIC_DIR"] == "/var/lib/open-webui/static"
    for name in ("OFFLINE_MODE", "HF_HUB_OFFLINE", "ENABLE_OLLAMA_API", "RAG_EMBEDDING_MODEL", "ENABLE_SIGNUP"):
        assert lines[name] == OFFLINE_SETTINGS[name]
    assert lines["ENABLE_OLLAMA_API"] == "false" and lines["RAG_EMBEDDING_MODEL"] == ""
    assert "KEY" not in "".join(k for k in lines if k.startswith("OPENAI_API_KEY"))


def sh(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)


def test_keys_script_reads_key_files_on_the_guest_writes_0600_and_reports_current(tmp_path: Path) -> None:
    master, pipelines, target = tmp_path / "master.env", tmp_path / "pipelines.env", tmp_path / "openai.env"
    master.write_text('LITELLM_MASTER_KEY="sk-abc_DEF-1"\n')
    pipelines.write_text("PIPELINES_API_KEY=p-xyz\n")
    connections = [Connection("http://127.0.0.1:4000/v1", "", "gw", str(master), "LITELLM_MASTER_KEY"),
                   Connection("http://10.99.0.20:8001/v1", "none", "engine")]
    check = openai_env_script(connections, str(target), str(pipelines), check=True)
    assert sh(check).stdout.strip() == "stale"
    write = sh(openai_env_script(connections, str(target), str(pipelines)))
    assert write.returncode == 0 and write.stdout == "", write.stderr
    assert target.read_text() == "OPENAI_API_KEYS=sk-abc_DEF-1;none;p-xyz\n"
    assert target.stat().st_mode & 0o777 == 0o600
    assert sh(check).stdout.strip() == "current"
    master.write_text("LITELLM_MASTER_KEY=sk-new\n")  # the gateway's key was rotated: the file is stale again
    assert sh(check).stdout.strip() == "stale"
    assert "sk-" not in check and "p-xyz" not in check  # the script holds no key, it reads them there


def test_keys_script_fails_naming_a_missing_key_file(tmp_path: Path) -> None:
    target = tmp_path / "openai.env"
    connection = Connection("http://127.0.0.1:4000/v1", "", "gw", str(tmp_path / "absent.env"), "LITELLM_MASTER_KEY")
    result = sh(openai_env_script([connection], str(target)))
    assert result.returncode == 1 and not target.exists()
    assert result.stderr.strip() == f"labwright: no LITELLM_MASTER_KEY in {tmp_path / 'absent.env'} (run the deploy " \
                                    "that makes it first)"


@pytest.mark.parametrize(("find_links", "extra", "args"), [
    ("/mnt/openwebui-wheels", "", "--no-index --find-links /mnt/openwebui-wheels"),
    ("http://10.99.0.1:8765/", "", "--no-index --find-links http://10.99.0.1:8765/ --trusted-host 10.99.0.1"),
    ("", "https://download.pytorch.org/whl/cpu", "--extra-index-url https://download.pytorch.org/whl/cpu"),
    ("", "", ""),
])
def test_pip_source(find_links: str, extra: str, args: str) -> None:
    # plain http only with its host named (pip_trusted_host): tests/unit/deploys/test_hashed_locks.py
    assert pip_source(find_links, extra, trusted_host="10.99.0.1") == args


class Webui:
    def __init__(self) -> None:
        self.password = "pw-" + os.urandom(6).hex()
        self.models: list[str] = ["tiny"]
        self.url = ""


@pytest.fixture
def webui() -> Iterator[Webui]:
    state = Webui()

    class Handler(BaseHTTPRequestHandler):
        def reply(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            form = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/api/v1/auths/signin" and form == {"email": "admin@lab.test", "password": state.password}:
                self.reply(200, {"token": "tok"})
            else:
                self.reply(400, {"detail": "The email or password provided is incorrect."})

        def do_GET(self) -> None:
            if self.path == "/api/models" and self.headers.get("Authorization") == "Bearer tok":
                self.reply(200, {"data": [{"id": m} for m in state.models]})
            else:
                self.reply(401, {})

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def signin(webui: Webui, config: Path, password: str) -> subprocess.CompletedProcess[str]:
    config.mkdir(exist_ok=True)
    (config / "settings.env").write_text("# managed\nWEBUI_ADMIN_EMAIL=admin@lab.test\nWEBUI_ADMIN_NAME=Admin\n")
    (config / "admin.env").write_text(f"WEBUI_ADMIN_PASSWORD={password}\n")
    return subprocess.run([sys.executable, "-c", SIGNIN_CHECK, webui.url, str(config)], capture_output=True,
                          text=True, timeout=60)


def test_signin_check_lists_the_models(webui: Webui, tmp_path: Path) -> None:
    result = signin(webui, tmp_path / "etc", webui.password)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"models": ["tiny"]}


def test_signin_check_fails_in_one_line_on_a_wrong_password_without_printing_it(webui: Webui, tmp_path: Path) -> None:
    result = signin(webui, tmp_path / "etc", "wrong-pw-123")
    assert result.returncode == 1
    assert result.stderr.strip() == f"labwright: Open WebUI answered 400 to the admin's sign-in or model list at " \
                                    f"{webui.url}"
    assert "wrong-pw-123" not in result.stderr + result.stdout


def test_signin_check_fails_when_no_model_is_listed(webui: Webui, tmp_path: Path) -> None:
    webui.models = []
    result = signin(webui, tmp_path / "etc", webui.password)
    assert result.returncode == 1 and "lists no models" in result.stderr
