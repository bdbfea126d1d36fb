"""deploys/tabbyapi.py against a real lab container with STAND-INS for what the lab lacks (used by tests, benchmark).

- tabbyAPI: the stand-in git repository (support.tabbyapi_standin) served over git's dumb HTTP from THIS
  machine's lab bridge address (the test lab's own network), so the guest really ``git fetch``-es a pinned ref;
- engine stacks: the stand-in torch/extension wheels and matrix (support.stacks), pushed into the guest
  as a wheelhouse; ``LABWRIGHT_MATRIX_DIR`` points the deploy at the stand-in matrix;
- the model: an empty directory (the stand-in loads no weights);
- the GPU: none; the driver facts read a fake tree (support.fake_nvidia) when a test asks for one.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shlex
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from labwright.lab.lab import instance_address
from labwright.lxd.client import LxdClient
from labwright.testing.pyinfra_output import DeployRun, tool_env
from support import apt_cache, guest_apt
from support.stacks import StandinStacks
from support.tabbyapi_standin import StandinRepo
from support.verify_run import run_verify

if TYPE_CHECKING:
    from labwright.testing.lab_fixture import Lab

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WHEELHOUSE = "/srv/wheelhouse"
MODEL_DIR = "/srv/models"
MODEL_NAME = "standin-model"
SOURCE = "/opt/tabbyapi"
VENV = "/opt/tabbyapi/.venv"
SERVICE = "tabbyapi"
PORT = 5000


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@dataclass
class RepoServer:
    """``python -m http.server`` over the stand-in's .git (git's dumb HTTP protocol), bound to one address."""

    repo: StandinRepo
    address: str
    port: int = 0
    _server: http.server.ThreadingHTTPServer | None = field(default=None, repr=False)

    def __enter__(self) -> RepoServer:
        handler = functools.partial(_Quiet, directory=str(self.repo.http_root))
        self._server = http.server.ThreadingHTTPServer((self.address, self.port), handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}/"


class TabbyGuest:
    """One lab container prepared for deploys/tabbyapi.py (wheelhouse, model dir) and ways to look at it."""

    def __init__(self, client: LxdClient, name: str, stacks: StandinStacks, git_url: str):
        self.client = client
        self.name = name
        self.stacks = stacks
        self.git_url = git_url
        self.address = instance_address(client, name) or ""
        self.before: subprocess.CompletedProcess[str] | None = None  # the verify suite before the first deploy
        self.first: DeployRun | None = None  # the first deploy, made by deployed_guest()

    def sh(self, script: str, check: bool = True) -> str:
        result = self.client.exec(self.name, ["sh", "-c", script])
        out = (result.stdout + result.stderr).decode(errors="replace")
        if check and result.exit_code != 0:
            raise AssertionError(f"in {self.name}: {script}\n-> exit {result.exit_code}\n{out}")
        return result.stdout.decode(errors="replace")

    def prepare(self, only: tuple[str, ...] = ()) -> None:
        """The stand-in wheelhouse (``only`` wheels whose names start so) and the model directory, as an operator
        would have them on the guest."""
        self.sh(f"mkdir -p {WHEELHOUSE} {MODEL_DIR}/{MODEL_NAME}")
        for wheel in sorted(self.stacks.wheelhouse.glob("*.whl")):
            if only and not wheel.name.startswith(only):
                continue
            with wheel.open("rb") as handle:
                self.client.push_file(self.name, f"{WHEELHOUSE}/{wheel.name}", handle, mode=0o644)

    def data(self, **overrides: object) -> list[str]:
        values: dict[str, object] = {"stack": "standin-2.9", "tabbyapi_git_url": self.git_url,
                                     "tabbyapi_ref": "seed-era", "tabbyapi_model_dir": MODEL_DIR,
                                     "tabbyapi_model_name": MODEL_NAME, "tabbyapi_cache_size": 4096,
                                     "tabbyapi_max_seq_len": 4096, "tabbyapi_wheelhouse": WHEELHOUSE,
                                     "tabbyapi_health_timeout": 30}
        values.update(overrides)
        return [f"{k}={json.dumps(v) if isinstance(v, dict | list) else v}" for k, v in values.items()
                if v is not None]

    def deploy(self, **overrides: object) -> DeployRun:
        cmd = [str(BIN / "pyinfra"), "-y", "--json", f"@lxd/{self.name}", "deploys/tabbyapi.py"]
        for item in self.data(**overrides):
            cmd += ["--data", item]
        env = {**tool_env(), "LABWRIGHT_MATRIX_DIR": str(self.stacks.matrix_dir)}
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        return DeployRun(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)

    # -- observation ----------------------------------------------------------------------------------------
    def main_pid(self) -> str:
        return self.sh(f"systemctl show -p MainPID --value {SERVICE}.service").strip()

    def cat(self, path: str) -> str:
        return self.sh(f"cat {shlex.quote(path)}")

    def readlink(self) -> str:
        return self.sh(f"readlink {VENV} || echo NOT-A-LINK").strip()

    def head(self) -> str:
        return self.sh(f"git -C {SOURCE} rev-parse HEAD").strip()

    def health(self, timeout: float = 1.0) -> int:
        """HTTP status of /health from this machine (0 when nothing answers)."""
        try:
            with urllib.request.urlopen(f"http://{self.address}:{PORT}/health", timeout=timeout) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except (urllib.error.URLError, OSError):
            return 0

    def verify(self, *options: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """The shipped testinfra suite, as a user's install runs it (support.verify_run); ``env`` adds variables."""
        return run_verify("tabbyapi", f"lxc://{self.name}", *options, env=env)


APT_PATHS = apt_cache.PATHS
APT_STAMP = apt_cache.STAMP
APT_CACHE_DAYS = apt_cache.MAX_AGE_DAYS
APT_CACHE = "tabbyapi-test"


def apt_cache_file() -> Path:
    """Where the guest's apt lists and downloaded .debs are kept between test runs (one per lab image recipe)."""
    return apt_cache.cache_file(APT_CACHE)


def restore_apt_cache(guest: TabbyGuest) -> bool:
    """Put apt lists and .debs from an earlier run into a fresh guest (and mark the lists fresh), so the deploy's
    real ``apt-get install`` works from them instead of the network. False when there is no recent cache."""
    return apt_cache.restore(guest.client, guest.name, APT_CACHE)


def save_apt_cache(guest: TabbyGuest) -> None:
    """Keep the guest's apt lists and the .debs the deploy downloaded, for the next run."""
    apt_cache.save(guest.client, guest.name, APT_CACHE)


def bridge_address(subnet: str) -> str:
    """The host's own address on the lab bridge (``10.99.9.1/24`` -> ``10.99.9.1``)."""
    return subnet.split("/")[0]


def lab_subnet() -> str:
    from labwright.testing.lab_fixture import TEST_LAB_DATA

    return os.environ.get("LABWRIGHT_TEST_SUBNET", str(TEST_LAB_DATA["lab_subnet"]))


@contextmanager
def deployed_guest(lab: Lab, stacks: StandinStacks, repo: StandinRepo, prefix: str, *,
                   before: Callable[[TabbyGuest], object] | None = None) -> Iterator[TabbyGuest]:
    """A fresh lab container with the stand-in tabbyAPI served from the lab bridge, prepared and deployed once
    (``guest.first``; ``before(guest)`` runs just ahead of that deploy). apt lists and .debs from an earlier run are
    put in first (the deploy's apt step then installs git from them); a first run downloads them and keeps them.
    The container is removed afterwards."""
    import pytest

    name = lab.fresh(prefix)
    try:
        with RepoServer(repo, bridge_address(lab_subnet())) as server:
            guest = TabbyGuest(lab.client, name, stacks, server.url)
            started = time.monotonic()
            guest.prepare()
            cached = restore_apt_cache(guest)
            if not cached and not guest_apt.mirror_reachable(lab.client, name):
                pytest.skip("the container cannot reach a Debian mirror for git")
            if before is not None:
                before(guest)
            guest.first = guest.deploy()
            if guest.first.rc == 0 and not cached:
                save_apt_cache(guest)
            print(f"\nguest ready in {time.monotonic() - started:.1f}s (first deploy {guest.first.seconds:.1f}s)")
            yield guest
    finally:
        lab.remove(name)
