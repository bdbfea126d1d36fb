"""Stack switch end to end in real lab containers: the pyinfra operation (deploys/stack.py over @lxd) builds
stand-in stacks from a local wheelhouse pushed into the container, the ABI verifier runs there before the swap,
and a systemd service that imports the stand-in torch extension decides health.

The service's /health is watched from the host the whole time a refused switch runs: "untouched" means it
never stopped answering from the same process, and the symlink did not move.
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import pyinfra_totals
from support.stack_service import Installed, StandinService, installed_copies
from support.stacks import StandinStacks, build_standin_stacks, write_matrix
from support.tabbyapi_lab import bridge_address, lab_subnet

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

STACKS = "/opt/labwright/stacks"


@pytest.fixture(scope="module")
def stacks(tmp_path_factory) -> StandinStacks:
    return build_standin_stacks(tmp_path_factory.mktemp("standin"))


@pytest.fixture(scope="module")
def installed(lab: Lab, stacks) -> Iterator[Installed]:
    """The wheelhouse pushed and standin-2.9 installed once; each test gets a copy (support.stack_service)."""
    with installed_copies(lab, stacks, "lwssbase") as copies:
        yield copies


@pytest.fixture
def service(lab: Lab, installed: Installed) -> Iterator[StandinService]:
    service = installed.service("lwss")
    try:
        yield service
    finally:
        lab.remove(service.name)


def deploy_2_10(service: StandinService) -> None:
    """The good switch the rollback and no-space tests start from: deploys/stack.py adopts the plain venv and
    switches it to standin-2.10 (what test_good_switch_adopts_the_plain_venv_... checks step by step)."""
    run = service.deploy(stack="standin-2.10")
    assert run.rc == 0, run.output[-3000:]


@pytest.fixture(scope="module")
def switched(installed: Installed) -> Iterator[Installed]:
    """The installed container after ``deploy_2_10``, made once: each test that starts there gets a copy."""
    with installed.then("lwss210base", deploy_2_10) as copies:
        yield copies


@pytest.fixture
def on_2_10(lab: Lab, switched: Installed) -> Iterator[StandinService]:
    """A copy of the installed container as ``deploy_2_10`` left it (on standin-2.10, the plain venv kept as
    "original"), its unit started on 2.10."""
    service = switched.service("lwss")
    try:
        yield service
    finally:
        lab.remove(service.name)


class Watch:
    """Polls /health from the host while a block runs; records every answer."""

    def __init__(self, service: StandinService):
        self.service = service
        self.seen: list[tuple[int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            status, body = self.service.health(timeout=2)
            self.seen.append((status, str(body.get("torch"))))
            self._stop.wait(0.02)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def one_error_line(output: str, needle: str) -> str:
    lines = [line for line in output.splitlines() if "error" in line.lower()]
    hits = [line for line in lines if needle in line]
    assert hits, f"no error line with {needle!r} in:\n{output[-3000:]}"
    return hits[0]


def test_good_switch_adopts_the_plain_venv_and_a_second_run_changes_nothing(service):
    assert service.health() == (200, {"torch": "2.9.0", "prefix": service.venv})
    assert service.readlink() == "NOT-A-LINK"
    pid = service.main_pid()

    first = service.deploy(stack="standin-2.10")
    assert first.rc == 0, first.output[-3000:]
    assert pyinfra_totals(first.output).changed == 1
    assert service.health() == (200, {"torch": "2.10.0", "prefix": service.venv})
    target = service.readlink()
    assert target.startswith(f"{STACKS}/standin-2.10-") and target.endswith("/venv")
    assert service.main_pid() != pid  # restarted onto the new stack
    state = service.state()
    assert state["current"]["stack"] == "standin-2.10" and state["previous"]["stack"] == "original"
    assert service.sh(f"test -f {state['previous']['path']}/pyvenv.cfg", check=False).rc == 0  # kept to roll back

    pid = service.main_pid()
    second = service.deploy(stack="standin-2.10")
    assert second.rc == 0, second.output[-3000:]
    totals = pyinfra_totals(second.output)
    assert totals.changed == 0 and totals.error == 0  # the switch and the guest lock's take/release: No change
    assert service.readlink() == target and service.main_pid() == pid  # not even a restart
    assert service.state() == state


def test_a_broken_stack_is_refused_before_the_swap_and_the_service_never_blinks(service):
    pid = service.main_pid()
    with Watch(service) as watch:
        run = service.deploy(stack="standin-2.10-mislabelled")
    assert run.rc != 0
    line = one_error_line(run.output, "refused before the swap")
    assert "standin_attn._C" in line and "torch symbol(s) missing" in line and "untouched" in line
    assert len(watch.seen) > 10 and set(watch.seen) == {(200, "2.9.0")}
    assert service.readlink() == "NOT-A-LINK"  # not even adopted: nothing was swapped
    assert service.main_pid() == pid
    assert "mislabelled" not in service.sh(f"ls {STACKS}").output  # the half-built environment is gone


def test_a_failed_health_check_after_the_swap_rolls_back_by_itself(on_2_10):
    service = on_2_10
    good = service.readlink()
    run = service.deploy(stack="standin-2.11", health_timeout=3)  # torch 2.11 without the extension: /health 503
    assert run.rc != 0
    line = one_error_line(run.output, "failed its health check")
    assert "HTTP 503" in line and "rolled back by itself to stack standin-2.10" in line and "healthy again" in line
    assert service.health()[0] == 200 and service.health()[1]["torch"] == "2.10.0"
    assert service.readlink() == good
    state = service.state()
    assert state["current"]["stack"] == "standin-2.10" and state["previous"]["stack"] == "original"
    assert "standin-2.11" not in service.sh(f"ls {STACKS}").output


def test_a_rollback_onto_a_stack_broken_too_says_what_is_down_and_how_to_restore_it(on_2_10):
    # The previous stack loses its extension behind labwright's back; the new one fails its health check; the
    # automatic rollback restarts onto the previous one, which fails too: the error must say so, loudly, with the
    # symlink's target and the exact commands, never "healthy again".
    service = on_2_10
    good = service.readlink()
    service.sh(f"rm -rf {good}/lib/python3*/site-packages/standin_attn")
    run = service.deploy(stack="standin-2.11", health_timeout=3)
    assert run.rc != 0
    line = one_error_line(run.output, "is DOWN there too")
    unit = f"{service.unit}.service"
    assert "rolled back by itself to stack standin-2.10" in line and "healthy again" not in line, line
    assert f"{unit} is DOWN there too" in line and f"-> {good};" in line, line
    assert f"see `journalctl -u {unit} -n 50`, then restore it with `systemctl reset-failed {unit}; " \
           f"systemctl restart {unit}`" in line, line
    assert service.readlink() == good  # left on the previous stack, as said
    assert service.health()[0] != 200


def test_rollback_restores_the_previous_stack_and_show_tells_the_verifiers_truth(on_2_10):
    service = on_2_10
    new = service.readlink()

    back = service.deploy(stack_rollback="true")
    assert back.rc == 0, back.output[-3000:]
    assert service.health()[1]["torch"] == "2.9.0"
    assert service.readlink().startswith(f"{STACKS}/original-")
    assert service.state()["previous"]["path"] == new

    again = service.bundle("rollback", "--venv", service.venv, "--service", service.unit, "--health",
                           service.local_health_url)
    assert again.rc == 0, again.output
    assert service.readlink() == new and service.health()[1]["torch"] == "2.10.0"

    show = service.bundle("show", "--venv", service.venv)
    assert show.rc == 0, show.output
    current, previous = show.output.split("\nprevious: ")
    assert "current: stack standin-2.10" in current and "[ok]" in current
    assert "standin-attn  1.0.0+torch2.10" in current and "standin_attn._C: ok" in current
    assert previous.startswith("stack original") and "standin_attn._C: ok" in previous

    # A module broken behind labwright's back (the seed's in-place upgrade): show says so, find_spec would not.
    service.sh(f"{service.venv}/bin/python /opt/labwright/lib/labwright-stack.pyz pip install -q --no-deps "
               f"--force-reinstall --no-index /srv/wheelhouse/standin_attn-1.0.0+torch2.9-*.whl")
    broken = service.bundle("show", "--venv", service.venv)
    assert broken.rc == 1
    assert "BROKEN" in broken.output and "torch symbol(s) missing" in broken.output


@dataclass
class UrlMatrix:
    matrix_dir: Path
    base_url: str


@pytest.fixture
def url_matrix(service, stacks, tmp_path) -> Iterator[UrlMatrix]:
    """A matrix whose URLs point at an HTTP server over the wheelhouse on this host's lab bridge address: the
    container downloads the wheels from it, and this host reads them too (pip reads their requirements to make the
    stack's dependency lock, labwright.stacks.dependency_lock)."""
    handler = functools.partial(_Quiet, directory=str(stacks.wheelhouse))
    server = http.server.ThreadingHTTPServer((bridge_address(lab_subnet()), 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    served = StandinStacks(wheelhouse=stacks.wheelhouse, matrix_dir=tmp_path / "wheels_matrix",
                           sha256=stacks.sha256)
    base = f"http://{bridge_address(lab_subnet())}:{server.server_address[1]}"
    write_matrix(served, base)
    try:
        yield UrlMatrix(served.matrix_dir, base)
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def test_downloads_by_url_and_a_url_that_404s(service, url_matrix):
    gone = service.deploy(stack="standin-404", wheelhouse=None, matrix_dir=url_matrix.matrix_dir)
    assert gone.rc != 0
    line = one_error_line(gone.output, "answered HTTP 404")
    assert "standin_attn-1.0.3%2Btorch2.9" in line
    assert service.readlink() == "NOT-A-LINK" and service.health()[1]["torch"] == "2.9.0"

    fetched = service.deploy(stack="standin-2.10", wheelhouse=None, matrix_dir=url_matrix.matrix_dir)
    assert fetched.rc == 0, fetched.output[-3000:]
    assert service.health()[1]["torch"] == "2.10.0"
    manifest = service.sh(f"cat {service.readlink()}/../stack.json").output
    assert f"{url_matrix.base_url}/torch-2.10.0" in manifest and '"checked": true' in manifest
    # The stand-in wheels require nothing beyond each other: no second pass, no lock, nothing resolved there.
    assert '"pinned": true' in manifest and '"count": 0' in manifest
    kept = service.sh(f"ls {service.readlink()}/..").output.split()
    assert kept == ["requirements.txt", "stack.json", "venv"]


def test_bad_input_is_one_line_and_leaves_the_running_stack_alone(service):
    pid = service.main_pid()
    cases = {
        "stack 'nope' is unknown": {"stack": "nope"},
        "--torch '2.x' is not a torch version": {"stack": "standin-2.9", "torch": "2.x"},
        "venv: '/etc' is a system directory": {"stack": "standin-2.10", "venv": "/etc"},
        "the matrix says": {"stack": "standin-badsha"},
        "--venv /opt/nothere/.venv does not exist": {"stack": "standin-2.10", "venv": "/opt/nothere/.venv"},
        "not found; the wheelhouse /srv/none does not exist": {"stack": "standin-2.10", "wheelhouse": "/srv/none"},
    }
    for needle, data in cases.items():
        run = service.deploy(**data)
        assert run.rc != 0, needle
        one_error_line(run.output, needle)
    assert service.readlink() == "NOT-A-LINK" and service.main_pid() == pid
    assert service.health() == (200, {"torch": "2.9.0", "prefix": service.venv})
    leftovers = service.sh(f"ls -A {STACKS} 2>/dev/null || true").output.split()
    assert [name for name in leftovers if name not in (".lock", "plans", "state")] == []


def test_no_space_mid_build_removes_the_half_built_environment(on_2_10):
    service = on_2_10
    current = service.readlink()
    # 1 MiB tmpfs with ~120 KiB left: the venv gets created, the wheels do not fit.
    service.sh("mkdir -p /mnt/small && mount -t tmpfs -o size=1m tmpfs /mnt/small && "
               "dd if=/dev/zero of=/mnt/small/filler bs=1k count=900 2>/dev/null")
    try:
        run = service.deploy(stack="standin-2.9", stacks_root="/mnt/small/stacks")
        assert run.rc != 0
        line = one_error_line(run.output, "no space left on device under /mnt/small/stacks")
        assert "half-built environment was removed" in line
        assert service.sh("ls -A /mnt/small/stacks").output.split() == [".lock", "plans"]
        assert service.readlink() == current and service.health()[1]["torch"] == "2.10.0"
    finally:
        service.sh("umount /mnt/small", check=False)
