"""deploys/vllm.py for real: one fresh lab container over @lxd (module-scoped), with STAND-INS for what the lab lacks.

- vLLM -> support.vllm_standin: real wheels (``vllm`` whose ``_C`` is compiled against the stand-in torch, its METADATA
  pinning that torch exactly) in a wheelhouse on the guest and a matrix whose vllm rows take the pin from that
  METADATA; the REAL stack switch (build beside, ABI verify, swap) installs them, and the stand-in server accepts
  exactly the vLLM 0.33.0 flags labwright passes;
- model weights -> an empty model directory; the GPU -> none (``vllm_gpu=auto`` skips the driver check with a line).

Runtime: ~10 s of g++ for the wheels, one container copy, a first deploy of ~1 min on the 2-core lab machine; the
other tests are re-runs that stop before the swap or change nothing.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright.lab.lab import instance_address
from labwright.paths import verify_suite
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import DeployRun, tool_env
from support.vllm_standin import VllmStandin, build_vllm_standin

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WHEELHOUSE = "/srv/wheelhouse"
MODEL = "/srv/models/standin-vllm"
VENV = "/opt/vllm/venv"
KEY_FILE = "/etc/vllm/api-key"


class VllmGuest:
    def __init__(self, lab: Lab, name: str, standin: VllmStandin):
        self.client, self.name, self.standin = lab.client, name, standin
        self.address = instance_address(lab.client, name) or ""
        self.first: DeployRun | None = None

    def sh(self, script: str, check: bool = True) -> str:
        result = self.client.exec(self.name, ["sh", "-c", script])
        out = (result.stdout + result.stderr).decode(errors="replace")
        if check and result.exit_code != 0:
            raise AssertionError(f"in {self.name}: {script}\n-> exit {result.exit_code}\n{out}")
        return result.stdout.decode(errors="replace")

    def prepare(self) -> None:
        self.sh(f"mkdir -p {WHEELHOUSE} {MODEL}")
        for wheel in sorted(self.standin.wheelhouse.glob("*.whl")):
            with wheel.open("rb") as handle:
                self.client.push_file(self.name, f"{WHEELHOUSE}/{wheel.name}", handle, mode=0o644)

    def deploy(self, **overrides: object) -> DeployRun:
        values: dict[str, object] = {"stack": "vllm-standin", "vllm_model": MODEL, "vllm_wheelhouse": WHEELHOUSE,
                                     "vllm_health_timeout": 60, "vllm_max_model_len": 4096}
        values.update(overrides)
        cmd = [str(BIN / "pyinfra"), "-y", "--json", f"@lxd/{self.name}", "deploys/vllm.py"]
        for key, value in values.items():
            cmd += ["--data", f"{key}={json.dumps(value) if isinstance(value, dict | list) else value}"]
        env = {**tool_env(), "LABWRIGHT_MATRIX_DIR": str(self.standin.matrix_dir)}
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        return DeployRun(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)

    def http(self, path: str, key: bool = False, body: dict | None = None) -> tuple[int, str]:
        """(status, body) of a request made INSIDE the guest to the loopback port."""
        script = (
            "import json, sys, urllib.request, urllib.error\n"
            f"key = open({KEY_FILE!r}).read().strip() if {key!r} else None\n"
            f"body = {json.dumps(body)!r}\n"
            "req = urllib.request.Request('http://127.0.0.1:8000' + sys.argv[1], data=body.encode() if body != "
            "'null' else None, headers={'Content-Type': 'application/json', **({'Authorization': 'Bearer ' + key} "
            "if key else {})})\n"
            "try:\n    r = urllib.request.urlopen(req, timeout=10); print(r.status); print(r.read().decode())\n"
            "except urllib.error.HTTPError as e:\n    print(e.code); print(e.read().decode())\n")
        out = self.sh(f"python3 -c {shlex.quote(script)} {shlex.quote(path)}")
        status, _, text = out.partition("\n")
        return int(status), text

    def main_pid(self) -> str:
        return self.sh("systemctl show -p MainPID --value vllm.service").strip()


@pytest.fixture(scope="module")
def guest(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmGuest]:
    standin = build_vllm_standin(tmp_path_factory.mktemp("vllm-standin"))
    name = lab.fresh("lwvllm")
    try:
        g = VllmGuest(lab, name, standin)
        g.prepare()
        g.first = g.deploy()
        yield g
    finally:
        lab.remove(name)


def test_first_run_installs_the_stack_and_serves_behind_the_key(guest):
    first = guest.first
    assert first.rc == 0, first.output[-4000:]
    print(f"\nfirst deploy: {first.seconds:.1f}s, {first.totals.changed} changed")
    assert "GPU driver check skipped (vllm_gpu=auto)" in first.output
    assert guest.sh(f"readlink {VENV}").strip().startswith("/opt/labwright/stacks/vllm-standin-")
    assert guest.sh(f"stat -c '%U %G %a' {KEY_FILE}").split() == ["root", "vllm", "640"]
    assert guest.sh(f"stat -c '%U %G %a' {KEY_FILE}.env").split() == ["root", "root", "600"]
    key = guest.sh(f"cat {KEY_FILE}").strip()
    assert len(key) >= 32 and key not in guest.sh("systemctl cat vllm.service")
    assert key not in guest.sh(f"cat /proc/{guest.main_pid()}/cmdline | tr '\\0' ' '")
    # vLLM's key guards /v1 only: /health and /metrics answer without it, which is why the port is loopback-only
    assert guest.http("/v1/models")[0] == 401
    status, models = guest.http("/v1/models", key=True)
    assert status == 200 and json.loads(models)["data"][0]["id"] == "standin-vllm"
    assert guest.http("/health")[0] == 200
    status, metrics = guest.http("/metrics")
    assert status == 200 and 'vllm:num_requests_running{model_name="standin-vllm"}' in metrics
    status, stream = guest.http("/v1/chat/completions", key=True, body={
        "model": "standin-vllm", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and stream.rstrip().endswith("data: [DONE]")
    with socket.socket() as sock:  # from this machine: nothing listens on the guest's address
        sock.settimeout(5)
        assert sock.connect_ex((guest.address, 8000)) != 0


def test_the_verify_suite_passes(guest):
    """labwright verify vllm (src/labwright/verify/test_vllm.py) on the deployed guest."""
    proc = subprocess.run([sys.executable, "-m", "pytest", str(verify_suite("vllm")), f"--hosts=lxc://{guest.name}",
                           "-q", "-p", "no:cacheprovider"], cwd=REPO, env={**tool_env(),
                          "LABWRIGHT_VLLM_MODEL_NAME": "standin-vllm"}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]


def test_second_run_changes_nothing(guest):
    pid = guest.main_pid()
    again = guest.deploy()
    assert again.rc == 0 and again.totals.changed == 0, again.output[-3000:]
    print(f"\nno-change re-run: {again.seconds:.1f}s")
    assert guest.main_pid() == pid


@pytest.mark.parametrize(("data", "needle"), [
    ({"stack": "vllm-standin-broken"}, "stack vllm-standin-broken refused before the swap: vllm._C (vllm 0.33.1, "
                                       "built for torch 2.10.0) against torch 2.10.0"),
    ({"tabbyapi_port": 8000}, "tabbyapi_port and vllm_port are both port 8000 on this host"),
    ({"vllm_model": "/srv/models/none"}, "vllm_model: /srv/models/none does not exist on"),
], ids=["abi-broken-stack", "two-engines-one-port", "missing-model"])
def test_bad_input_is_one_line_and_the_service_is_left_as_it_was(guest, data, needle):
    pid, venv = guest.main_pid(), guest.sh(f"readlink {VENV}")
    run = guest.deploy(**data)
    assert run.rc != 0
    hits = [line for line in run.output.splitlines() if needle in line]
    assert hits, run.output[-3000:]
    assert guest.main_pid() == pid and guest.sh(f"readlink {VENV}") == venv
    assert guest.http("/health")[0] == 200
