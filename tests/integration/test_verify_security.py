"""`labwright verify security` (issue 31, item 7) against a real lab container: the shipped suite, run as users run
it, passes on a host set up as the deploys set it up and fails, naming what and how to fix it, for each way one
drifts: an engine answering the network without its key, a secret file other users can read, a unit loosened by a
drop-in.

The engine here is the real llama-server unit (rendered by the deploy's own renderer, tests/unit/deploys/
test_unit_hardening.py) with its ExecStart swapped for a small OpenAI-shaped server that checks the key file the
deploy's key file path holds (the real llama-server's 401 is tested in test_llamacpp_deploy.py): no build, no model.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright.paths import verify_suite
from labwright.shell import quote
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import tool_env
from labwright.testing.waiting import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "deploys"))
import test_unit_hardening as rendered  # the unit test's renderers: one list of units

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab]

REPO = Path(__file__).resolve().parents[2]
PORT = 18401
KEY = "/etc/llama-server/api-key"
OPEN_FLAG = "/etc/llama-server/open"  # present: the stand-in answers without the key (an engine deployed open)
ENGINE = r'''
import http.server, json, os, sys
port, key_file, open_flag = int(sys.argv[1]), sys.argv[2], sys.argv[3]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        key = open(key_file).read().strip()
        if not os.path.exists(open_flag) and self.headers.get("Authorization") != f"Bearer {key}":
            self.send_response(401)
            self.end_headers()
            return
        body = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()
'''
LOOSENED = "/etc/systemd/system/llama-server.service.d/50-loosened.conf"


def sh(lab: Lab, name: str, script: str) -> str:
    result = lab.client.exec(name, ["sh", "-c", script])
    assert result.exit_code == 0, f"{script!r} failed ({result.exit_code}): {result.stderr.decode()[-2000:]}"
    return result.stdout.decode()


@contextlib.contextmanager
def drifted(lab: Lab, name: str, change: str, undo: str) -> Iterator[None]:
    """The guest drifted by ``change`` for the block, put back by ``undo`` whatever happens (the module's guest)."""
    sh(lab, name, change)
    try:
        yield
    finally:
        sh(lab, name, undo)


def verify(name: str, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(Path(sys.executable).parent / "labwright"), "verify", "security", f"--hosts=lxc://{name}", "-q",
           "-rw"]
    return subprocess.run(cmd, cwd="/", env={**tool_env(), **env}, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def engine(lab: Lab, tmp_path_factory: pytest.TempPathFactory):
    """A lab container with the real llama-server unit serving the stand-in on :PORT behind its key file."""
    name = lab.fresh("lwsec")
    try:
        binary = tmp_path_factory.mktemp("bin") / "llama-server"
        binary.write_bytes(b"\x7fELF")
        unit_name, text = rendered.render("llama-server", binary)
        user = rendered.service_settings(text)["User"][0]
        kept = [line for line in text.splitlines() if not line.startswith(("ExecStart=", "WorkingDirectory="))]
        kept.insert(kept.index("[Service]") + 1,
                    f"ExecStart=/usr/bin/python3 /usr/local/lib/engine-standin.py {PORT} {KEY} {OPEN_FLAG}")
        sh(lab, name, "\n".join([
            f"id -u {user} >/dev/null 2>&1 || useradd --system --shell /usr/sbin/nologin --home-dir "
            f"/var/lib/{user} --create-home {user}",
            f"printf '%s' {quote(ENGINE)} > /usr/local/lib/engine-standin.py",
            f"install -d -m 0750 -o root -g {user} /etc/llama-server",
            f"(umask 077; head -c 24 /dev/urandom | base64 > {KEY}); chown root:{user} {KEY}; chmod 0640 {KEY}",
            f"printf '%s\\n' {quote(chr(10).join(kept))} > /etc/systemd/system/{unit_name}",
            "systemctl daemon-reload", f"systemctl start {unit_name}"]))

        def answers() -> bool:
            probe = (f"python3 -c 'import urllib.request, urllib.error\ntry:\n urllib.request.urlopen("
                     f"\"http://127.0.0.1:{PORT}/v1/models\", timeout=5)\nexcept urllib.error.HTTPError as e:\n "
                     "raise SystemExit(0 if e.code == 401 else 1)'")
            return lab.client.exec(name, ["sh", "-c", probe]).exit_code == 0

        wait_for(f"the engine stand-in on {name}:{PORT} to answer", answers, timeout=60)
        yield name, unit_name
    finally:
        lab.remove(name)


def test_a_host_as_the_deploys_leave_it_passes(engine):
    name, _ = engine
    result = verify(name)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "4 passed" in result.stdout, result.stdout[-2000:]  # ports, units, stack environments, secret files


def test_an_engine_open_to_the_network_fails_naming_its_port_unless_listed(lab, engine):
    name, _ = engine
    with drifted(lab, name, f"touch {OPEN_FLAG}", f"rm -f {OPEN_FLAG}"):
        result = verify(name)
        assert result.returncode == 1, result.stdout[-3000:]
        assert f"port {PORT} (python3, listening on 0.0.0.0)" in result.stdout, result.stdout[-3000:]
        assert "without a key to anyone on the network" in result.stdout
        listed = verify(name, LABWRIGHT_SECURITY_OPEN_PORTS=f"22,{PORT}")
        assert listed.returncode == 0, listed.stdout[-3000:]
        assert "OpenPort" in listed.stdout and f"port {PORT}" in listed.stdout, listed.stdout[-3000:]


def test_a_key_file_other_users_can_read_fails_naming_it(lab, engine):
    name, _ = engine
    with drifted(lab, name, f"chmod 0644 {KEY}", f"chmod 0640 {KEY}"):
        result = verify(name)
        assert result.returncode == 1, result.stdout[-3000:]
        assert f"{KEY} is 644 (root's): other users can read it" in result.stdout, result.stdout[-3000:]


def test_a_unit_loosened_by_a_drop_in_fails_with_its_score(lab, engine):
    name, unit_name = engine
    loosen = "\n".join(["[Service]", "ProtectSystem=no", "ProtectHome=no", "PrivateTmp=no", "PrivateDevices=no",
                        "CapabilityBoundingSet=~", "AmbientCapabilities=", "NoNewPrivileges=no", "SystemCallFilter=",
                        "RestrictAddressFamilies=", "ProtectKernelTunables=no", "ProtectKernelModules=no",
                        "ProtectControlGroups=no", "RestrictNamespaces=no", "ProtectProc=default", "User=root"])
    with drifted(lab, name, f"mkdir -p {Path(LOOSENED).parent} && printf '%s\\n' {quote(loosen)} > {LOOSENED} && "
                            "systemctl daemon-reload", f"rm -f {LOOSENED} && systemctl daemon-reload"):
        result = verify(name)
        assert result.returncode == 1, result.stdout[-3000:]
        assert f"{unit_name} " in result.stdout and "more exposed than 5.0" in result.stdout, result.stdout[-3000:]


@pytest.mark.parametrize(("variable", "value"), [("LABWRIGHT_SECURITY_OPEN_PORTS", "8001,http"),
                                                 ("LABWRIGHT_SECURITY_MAX_EXPOSURE", "high")])
def test_junk_in_its_variables_is_exit_2_naming_the_variable_before_any_host(variable, value):
    cmd = [str(Path(sys.executable).parent / "labwright"), "verify", "security", "--hosts=lxc://lw-no-such-guest",
           "-q"]
    result = subprocess.run(cmd, cwd="/", env={**tool_env(), variable: value}, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"{variable}: {value!r}" in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "lw-no-such-guest" not in result.stdout + result.stderr


def test_the_suite_is_listed_with_the_others():
    listing = subprocess.run([str(Path(sys.executable).parent / "labwright"), "verify"], cwd="/", env=tool_env(),
                             capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0
    assert str(verify_suite("security")) in listing.stdout
