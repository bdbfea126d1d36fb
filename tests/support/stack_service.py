"""A stand-in engine service in a lab container, for stack-switch tests and the downtime benchmark.

``StandinService.install`` pushes the stand-in wheelhouse (see support.stacks) and the labwright bundle
into the container, creates a plain venv with one stand-in stack (using the bundle's pip: the image has no pip),
and starts a systemd unit whose /health answers 200 only while the stand-in torch extension imports. It is
reachable from the host at the container's address, so downtime is measured from outside.
"""

from __future__ import annotations

import http.client
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from labwright.lab import lab as lab_ops
from labwright.lab.lab import instance_address
from labwright.lxd.client import LxdClient
from labwright.stacks.bundle import REMOTE_PATH, build_bundle
from labwright.testing.lab_fixture import OWNER_KEY, Lab, process_token
from support.stacks import SERVER, SERVICE_PORT, UNIT, StandinStacks

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WHEELHOUSE = "/srv/wheelhouse"
INITIAL = {"standin-2.9": ("torch==2.9.0", "standin_attn==1.0.0+torch2.9"),
           "standin-2.10": ("torch==2.10.0", "standin_attn==1.0.0+torch2.10")}


@dataclass
class Run:
    rc: int
    output: str
    seconds: float


class StandinService:
    def __init__(self, client: LxdClient, name: str, stacks: StandinStacks, venv: str = "/opt/app/.venv",
                 unit: str = "standin", port: int = SERVICE_PORT):
        self.client = client
        self.name = name
        self.stacks = stacks
        self.venv = venv
        self.unit = unit
        self.port = port
        self.address = instance_address(client, name)

    # -- container access -------------------------------------------------------------------------------------
    def sh(self, script: str, check: bool = True) -> Run:
        start = time.monotonic()
        result = self.client.exec(self.name, ["sh", "-c", script])
        out = (result.stdout + result.stderr).decode(errors="replace")
        if check and result.exit_code != 0:
            raise AssertionError(f"in {self.name}: {script}\n-> exit {result.exit_code}\n{out}")
        return Run(result.exit_code, out, time.monotonic() - start)

    def push(self, local: Path, remote: str, mode: int = 0o644) -> None:
        self.sh(f"mkdir -p {shlex.quote(os.path.dirname(remote))}")
        with open(local, "rb") as fh:
            self.client.push_file(self.name, remote, fh, mode=mode)

    def push_text(self, text: str, remote: str) -> None:
        self.sh(f"mkdir -p {shlex.quote(os.path.dirname(remote))}")
        self.client.push_file(self.name, remote, text.encode(), mode=0o644)

    # -- setup ------------------------------------------------------------------------------------------------
    def push_wheelhouse(self, only: tuple[str, ...] = ()) -> None:
        for wheel in sorted(self.stacks.wheelhouse.glob("*.whl")):
            if not only or wheel.name.startswith(only):
                self.push(wheel, f"{WHEELHOUSE}/{wheel.name}")

    def install(self, stack: str = "standin-2.9", server: str = "/opt/app/server.py") -> None:
        """A plain venv (not yet labwright-managed) with ``stack``, and the unit running from it."""
        self.push(build_bundle(), REMOTE_PATH)
        requirements = " ".join(shlex.quote(r) for r in INITIAL[stack])
        self.sh(f"python3 -m venv --without-pip {self.venv} && {self.venv}/bin/python {REMOTE_PATH} pip install "
                f"-q --no-index --find-links {WHEELHOUSE} {requirements}")
        self.push_text(SERVER, server)
        self.push_text(UNIT.format(venv=self.venv, server=server, port=self.port),
                       f"/etc/systemd/system/{self.unit}.service")
        self.sh(f"systemctl daemon-reload && systemctl start {self.unit}")
        if not self.wait_healthy(10):
            raise AssertionError(f"{self.unit} did not come up: {self.sh(f'journalctl -u {self.unit} -n 20', False)}")

    # -- observation ------------------------------------------------------------------------------------------
    @property
    def health_url(self) -> str:
        return f"http://{self.address}:{self.port}/health"

    @property
    def local_health_url(self) -> str:
        """The URL as the switch inside the container checks it."""
        return f"http://127.0.0.1:{self.port}/health"

    def health(self, timeout: float = 1.0) -> tuple[int, dict]:
        """(HTTP status or 0 when nothing answers, the JSON body)."""
        try:
            with urllib.request.urlopen(self.health_url, timeout=timeout) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException):
            return 0, {}  # HTTPException: a reply cut off by a restart (IncompleteRead) is no answer

    def wait_healthy(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.health()[0] == 200:
                return True
            time.sleep(0.05)
        return False

    def readlink(self) -> str:
        return self.sh(f"readlink {self.venv} || echo NOT-A-LINK").output.strip()

    def main_pid(self) -> str:
        return self.sh(f"systemctl show -p MainPID --value {self.unit}").output.strip()

    def bundle(self, *args: str, check: bool = False) -> Run:
        return self.sh(f"python3 {REMOTE_PATH} {shlex.join(args)}", check=check)

    def state(self) -> dict:
        out = self.sh("cat /opt/labwright/stacks/state/*.json").output
        return json.loads(out)

    # -- the pyinfra side -------------------------------------------------------------------------------------
    def deploy(self, matrix_dir: Path | None = None, **data: object) -> Run:
        """``pyinfra -y @lxd/NAME deploys/stack.py`` with this service's venv/unit/health and ``data`` (a None
        value drops that key); the matrix is the stand-in one unless ``matrix_dir`` says otherwise."""
        values: dict[str, object] = {"venv": self.venv, "service": self.unit, "health": self.local_health_url,
                                     "health_timeout": 10, "wheelhouse": WHEELHOUSE}
        values.update(data)
        command = [str(BIN / "pyinfra"), "-y", "--json", f"@lxd/{self.name}", "deploys/stack.py"]
        for key, value in values.items():
            if value is not None:
                command += ["--data", f"{key}={value}"]
        env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "COLUMNS": "200",
               "LABWRIGHT_MATRIX_DIR": str(matrix_dir or self.stacks.matrix_dir)}
        start = time.monotonic()
        proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        return Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)


@contextmanager
def installed_copies(lab: Lab, stacks: StandinStacks, prefix: str) -> Iterator[Installed]:
    """A container made as a ``service`` fixture makes each test's (the wheelhouse pushed, ``install("standin-2.9")``),
    then stopped: each test takes a copy of it (``Installed.service()``: a btrfs snapshot and a boot, its unit started)
    instead of pushing the wheelhouse and building the venv again. Removed at the end."""
    name = lab.fresh(prefix)
    try:
        base = StandinService(lab.client, name, stacks)
        base.push_wheelhouse()
        base.install("standin-2.9")  # a plain venv, as a tabbyAPI install leaves it
        lab.stop(name)
        yield Installed(lab, name, stacks)
    finally:
        lab.remove(name)


@dataclass
class Installed:
    lab: Lab
    source: str
    stacks: StandinStacks

    def service(self, prefix: str) -> StandinService:
        """A running copy of the installed container, its unit started and healthy; the caller removes it
        (``lab.remove``)."""
        name = f"{prefix}-{os.urandom(3).hex()}"
        self.lab.copy_instance({
            "name": name, "type": "container", "source": {"type": "copy", "source": self.source},
            "profiles": [self.lab.spec.profile],
            "config": {lab_ops.LAB_KEY: self.lab.spec.name, OWNER_KEY: process_token(os.getpid())}})
        try:
            self.lab.client.set_state(name, "start")
            lab_ops.wait_ready(self.lab.client, name)
            service = StandinService(self.lab.client, name, self.stacks)
            service.sh(f"systemctl start {service.unit}")
            if not service.wait_healthy(10):
                raise AssertionError(f"{service.unit} did not come up in {name}: "
                                     f"{service.sh(f'journalctl -u {service.unit} -n 20', False).output}")
        except BaseException:
            self.lab.remove(name)
            raise
        return service

    @contextmanager
    def then(self, prefix: str, step: Callable[[StandinService], None]) -> Iterator[Installed]:
        """A running copy of this container (``service``) with ``step`` run in it, e.g. a switch to another stack,
        then stopped: the copies of the result (``Installed.service()``) start where every test that began with that
        step stood after it, without running it again per test. Removed at the end."""
        service = self.service(prefix)
        try:
            step(service)
            self.lab.stop(service.name)
            yield Installed(self.lab, service.name, self.stacks)
        finally:
            self.lab.remove(service.name)
