"""The agent's ``health`` subcommand (what operations.http.wait_healthy runs on the host), run here from the built
zipapp against a local HTTP server (no lab).

``systemctl`` and ``journalctl`` are small fakes on PATH: systemctl records its arguments, journalctl prints a file
the test writes, so restart, startup line, fatal line and journal tail are checked without a systemd unit.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from labwright.agent import zipapp
from labwright.agent.service import HealthCheck as AgentCheck
from labwright.operations.http import check_json


@dataclass
class Server:
    url: str
    health: int = 200
    models: list[str] = field(default_factory=list)
    key: str = ""
    paths: list[str] = field(default_factory=list)
    auth: list[str] = field(default_factory=list)


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.paths.append(self.path)
            state.auth.append(self.headers.get("Authorization", ""))
            if state.key and self.headers.get("Authorization") != f"Bearer {state.key}":
                status, body = 401, b"{}"
            elif self.path in ("/health", "/health/liveliness"):
                status, body = state.health, b'{"status": "ok"}'
            elif self.path == "/v1/models":
                status, body = 200, json.dumps({"data": [{"id": m} for m in state.models]}).encode()
            else:
                status, body = 404, b""
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    # shutdown() waits for the loop's next poll: every 0.02 s, not the default 0.5 s
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield state
    httpd.shutdown()


@pytest.fixture
def fakes(tmp_path: Path) -> Path:
    """A bin directory with fake systemctl (appends its arguments to calls) and journalctl (prints journal)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "journal").write_text("")
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/calls\n')
    (bin_dir / "journalctl").write_text(f"#!/bin/sh\ncat {tmp_path}/journal\n")
    for tool in ("systemctl", "journalctl"):
        (bin_dir / tool).chmod(0o755)
    return tmp_path


def HealthCheck(timeout: float, health_path: str = "/health", interval: float = 0.5, **fields: Any) -> AgentCheck:
    """The check as wait_healthy builds it (its defaults: /health, a poll every 0.5 s)."""
    return AgentCheck(timeout_s=timeout, health_path=health_path, interval=interval, **fields)


def run(check: AgentCheck, fakes: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{fakes / 'bin'}:{os.environ['PATH']}"}
    agent = fakes / "agent.pyz"
    if not agent.exists():
        agent.write_bytes(zipapp.agent()[0])
    return subprocess.run(["python3", str(agent), "health", check_json(check)], capture_output=True, text=True,
                          env=env, timeout=30)


def test_healthy_without_models(server, fakes):
    result = run(HealthCheck(url=server.url, service="tts", timeout=5), fakes)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("tts healthy: /health 200")
    assert not (fakes / "calls").exists()  # no restart asked for


def test_any_model_listed_is_enough(server, fakes):
    server.models = ["qwen.gguf"]
    result = run(HealthCheck(url=server.url, service="llama", timeout=5, models=("/m/qwen.gguf", "qwen.gguf")), fakes)
    assert result.returncode == 0 and "/v1/models lists qwen.gguf" in result.stdout, result.stderr


def test_a_missing_model_fails_at_once_naming_the_first_wanted(server, fakes):
    server.models = ["other"]
    (fakes / "journal").write_text("loaded other\n")
    result = run(HealthCheck(url=server.url, service="llama", timeout=60, models=("alias", "x")), fakes)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == "labwright: llama /v1/models lists ['other'], not alias"
    assert "loaded other" in result.stderr  # the journal tail comes first


def test_all_models_with_a_key_from_an_env_file(server, fakes, tmp_path):
    server.models, server.key = ["a", "b"], "sk-secret"
    env_file = tmp_path / "master.env"
    env_file.write_text('OTHER=1\nLITELLM_MASTER_KEY="sk-secret"\n')
    check = HealthCheck(url=server.url, service="litellm", timeout=5, health_path="/health/liveliness",
                        models=("a", "b"), all_models=True, key_file=str(env_file), key_name="LITELLM_MASTER_KEY")
    assert run(check, fakes).returncode == 0
    server.models = ["a"]
    result = run(check, fakes)
    assert result.stderr.splitlines()[-1] == "labwright: litellm /v1/models lacks b (lists ['a'])"


def test_key_from_a_yaml_file(server, fakes, tmp_path):
    server.models, server.key = ["m"], "abc"
    tokens = tmp_path / "api_tokens.yml"
    tokens.write_text("api_key: abc\nadmin_key: zzz\n")
    check = HealthCheck(url=server.url, service="tabbyapi", timeout=5, models=("m",), key_file=str(tokens),
                        key_name="api_key")
    assert run(check, fakes).returncode == 0
    assert set(server.auth) == {"Bearer abc"}


def test_timeout_names_the_last_error_and_shows_the_journal(server, fakes):
    server.health = 503
    (fakes / "journal").write_text("error: invalid argument: --no-such-flag\n")
    result = run(HealthCheck(url=server.url, service="llama", timeout=1, interval=0.2), fakes)
    assert result.returncode == 1
    assert "invalid argument: --no-such-flag" in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("labwright: llama not healthy after 1s (HTTP Error 503") and "journal is above" in last


def test_restart_then_wait_for_the_startup_line(server, fakes):
    server.models = ["m"]
    (fakes / "journal").write_text("INFO: Application startup complete\n")
    check = HealthCheck(url=server.url, service="tabbyapi", timeout=5, models=("m",), models_wait=True, restart=True,
                        startup_line="Application startup complete")
    result = run(check, fakes)
    assert result.returncode == 0, result.stderr
    # reset-failed first: a start limit hit by earlier restarts must not refuse this one
    assert (fakes / "calls").read_text() == "reset-failed tabbyapi.service\nrestart tabbyapi.service\n"


def test_a_refused_restart_is_one_line_with_the_command_that_starts_it(server, fakes):
    (fakes / "bin" / "systemctl").write_text(
        f'#!/bin/sh\necho "$@" >> {fakes}/calls\n'
        'case "$1" in restart) echo "Job for tabbyapi.service failed." >&2; exit 1;; '
        'show) echo start-limit-hit;; esac\n')
    check = HealthCheck(url=server.url, service="tabbyapi", timeout=30, restart=True)
    result = run(check, fakes)
    assert result.returncode == 1 and server.paths == []
    last = result.stderr.strip().splitlines()[-1]
    assert last == ("labwright: tabbyapi.service did not restart (Result=start-limit-hit): see journalctl -u "
                    "tabbyapi.service; then systemctl reset-failed tabbyapi.service && systemctl start "
                    "tabbyapi.service")


def test_no_request_before_the_startup_line(server, fakes):
    check = HealthCheck(url=server.url, service="tabbyapi", timeout=1, interval=0.2, startup_line="started")
    result = run(check, fakes)
    assert result.returncode == 1 and server.paths == []
    assert "not healthy after 1s (no answer yet)" in result.stderr


def test_a_fatal_line_stops_the_unit_with_its_own_message(server, fakes):
    (fakes / "journal").write_text("ERROR: Insufficient VRAM in split for model and cache\n")
    check = HealthCheck(url=server.url, service="tabbyapi", timeout=30, restart=True, startup_line="started",
                        fatal_lines=(("Insufficient VRAM", "tabbyapi: out of VRAM at start: lower cache_size"),),
                        stop_on_fatal=True)
    result = run(check, fakes)
    assert result.returncode == 1
    assert result.stderr.strip() == "labwright: tabbyapi: out of VRAM at start: lower cache_size"
    assert (fakes / "calls").read_text() == ("reset-failed tabbyapi.service\nrestart tabbyapi.service\n"
                                             "stop tabbyapi.service\n")


def test_models_wait_retries_until_the_timeout(server, fakes):
    server.models = ["other"]
    result = run(HealthCheck(url=server.url, service="t", timeout=1, interval=0.2, models=("m",), models_wait=True),
                 fakes)
    assert result.returncode == 1
    assert "labwright: t not healthy after 1s (/v1/models lists ['other'], not m)" in result.stderr
    assert server.paths.count("/v1/models") >= 2
