"""Stack switch under restarts, start limits and kills, in real lab containers with a real systemd unit.

The switch runs from the labwright bundle inside the container (as the pyinfra operation runs it), with a plan
made here from the stand-in matrix. The service's /health is watched from the host the whole time, with a
timestamp per answer, so "the previous stack serves" and "time until serving again" are what a client saw.

Fault injection uses the switch's own test hook: ``LABWRIGHT_FAULT_AT=<step>`` makes it SIGKILL itself on
reaching that step (stacks/switch.py, FAULT_STEPS), exactly as a kill -9 or the OOM killer would.
"""

from __future__ import annotations

import http.client
import json
import shlex
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from labwright.matrix.load import load_matrix
from labwright.stacks.bundle import REMOTE_PATH
from labwright.stacks.from_matrix import plan_for_stack
from labwright.stacks.switch import FAULT_ENV
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import pyinfra_totals
from support.stack_service import WHEELHOUSE, Installed, Run, StandinService, installed_copies
from support.stacks import StandinStacks, build_standin_stacks

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

STACKS = "/opt/labwright/stacks"
PLANS = "/root/plans"  # outside the root: the bundle deletes plan copies under ROOT/plans after a run
KILLED = (137, -9)  # SIGKILL as the shell or LXD reports it


@pytest.fixture(scope="module")
def stacks(tmp_path_factory) -> StandinStacks:
    return build_standin_stacks(tmp_path_factory.mktemp("standin-faults"))


@dataclass
class Answer:
    at: float  # time.monotonic() when the answer came
    status: int
    torch: str


@dataclass
class Watch:
    """Polls /health from the host in a thread; every answer is kept with its time."""

    service: StandinService
    seen: list[Answer] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                status, body = self.service.health(timeout=2)
            except (http.client.HTTPException, ValueError):  # a reply cut off by a restart: "not serving"
                status, body = 0, {}
            self.seen.append(Answer(time.monotonic(), status, str(body.get("torch"))))
            self._stop.wait(0.02)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def since(self, start: float) -> list[Answer]:
        return [a for a in self.seen if a.at >= start]

    def down_s(self, start: float) -> float:
        """Seconds without a 200 after ``start``: from the first failed answer to the next 200, summed."""
        total, down_at = 0.0, None
        for answer in self.since(start):
            if answer.status != 200 and down_at is None:
                down_at = answer.at
            elif answer.status == 200 and down_at is not None:
                total, down_at = total + answer.at - down_at, None
        assert down_at is None, f"/health still not 200 at the end of the watch (last: {self.seen[-1]})"
        return total


class Switcher:
    """Runs the bundle's switch/rollback in the container with this service's unit and health URL."""

    def __init__(self, service: StandinService, stacks: StandinStacks, monkeypatch: pytest.MonkeyPatch):
        self.service = service
        monkeypatch.setenv("LABWRIGHT_MATRIX_DIR", str(stacks.matrix_dir))
        self.matrix = load_matrix()
        self.pushed: set[str] = set()

    def plan(self, stack: str) -> str:
        path = f"{PLANS}/{stack}.json"
        if stack not in self.pushed:
            plan = plan_for_stack(stack, self.service.venv, root=STACKS, wheelhouse=WHEELHOUSE, matrix=self.matrix)
            self.service.push_text(plan.dumps(), path)
            self.pushed.add(stack)
        return path

    def _service_args(self, health_timeout: float) -> str:
        return shlex.join(["--service", self.service.unit, "--health", self.service.local_health_url,
                           "--health-timeout", f"{health_timeout:g}"])

    def switch(self, stack: str, fault: str | None = None, health_timeout: float = 20) -> Run:
        env = f"{FAULT_ENV}={fault} " if fault else ""
        return self.service.sh(f"{env}python3 {REMOTE_PATH} switch --plan {self.plan(stack)} "
                               f"{self._service_args(health_timeout)} 2>&1", check=False)

    def rollback(self, health_timeout: float = 20) -> Run:
        return self.service.sh(f"python3 {REMOTE_PATH} rollback --venv {self.service.venv} "
                               f"{self._service_args(health_timeout)} 2>&1", check=False)

    def state(self) -> dict:
        return self.service.state()

    def assert_consistent(self) -> None:
        """The link and the state agree, nothing is pending, and what the link points at is a finished build."""
        target = self.service.readlink()
        state = self.state()
        assert state["current"]["path"] == target, (target, state)
        assert not state["current"].get("pending"), state
        self.assert_finished(target)

    def assert_finished(self, venv_dir: str) -> None:
        env_dir = venv_dir.rsplit("/", 1)[0]
        out = self.service.sh(f"test -f {env_dir}/stack.json && test ! -e {env_dir}/.building && echo finished",
                              check=False).output
        assert "finished" in out, f"{venv_dir} is active but not a finished, recorded build"


@pytest.fixture(scope="module")
def installed(lab: Lab, stacks) -> Iterator[Installed]:
    """The wheelhouse pushed and standin-2.9 installed once; each test gets a copy (support.stack_service)."""
    with installed_copies(lab, stacks, "lwsfbase") as copies:
        yield copies


@pytest.fixture
def service(lab: Lab, installed: Installed) -> Iterator[StandinService]:
    service = installed.service("lwsf")
    try:
        yield service
    finally:
        lab.remove(service.name)


@pytest.fixture
def switcher(service, stacks, monkeypatch) -> Switcher:
    return Switcher(service, stacks, monkeypatch)


@pytest.fixture(scope="module")
def switched(installed: Installed, stacks: StandinStacks) -> Iterator[Installed]:
    """The installed container after the switch most tests start with (the bundle's ``switch`` to standin-2.10, as
    ``Switcher.switch`` runs it), made once: each such test gets a copy of it instead of switching again."""
    def to_2_10(service: StandinService) -> None:
        with pytest.MonkeyPatch.context() as monkeypatch:
            run = Switcher(service, stacks, monkeypatch).switch("standin-2.10")
        assert run.rc == 0, run.output

    with installed.then("lwsf210base", to_2_10) as copies:
        yield copies


@pytest.fixture
def on_2_10(lab: Lab, switched: Installed, stacks: StandinStacks,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Switcher]:
    """A switcher on a copy of ``switched``: standin-2.10 serving, the plain venv kept as "original" (``service`` and
    ``switcher`` together, for the tests that begin on 2.10)."""
    service = switched.service("lwsf")
    try:
        yield Switcher(service, stacks, monkeypatch)
    finally:
        lab.remove(service.name)


def serving(service: StandinService, torch: str) -> bool:
    return service.health(timeout=2) == (200, {"torch": torch, "prefix": service.venv})


def test_ten_switch_and_rollback_cycles_in_a_row_all_serve(on_2_10):
    switcher, service = on_2_10, on_2_10.service
    started = time.monotonic()
    with Watch(service) as watch:
        for cycle in range(10):
            back = switcher.rollback()
            assert back.rc == 0, f"cycle {cycle}: rollback: {back.output}"
            assert serving(service, "2.9.0"), f"cycle {cycle}: not serving torch 2.9.0 after the rollback"
            again = switcher.switch("standin-2.10")
            assert again.rc == 0, f"cycle {cycle}: switch: {again.output}"
            assert serving(service, "2.10.0"), f"cycle {cycle}: not serving torch 2.10.0 after the switch"
    elapsed = time.monotonic() - started
    switcher.assert_consistent()
    restarts = service.sh(f"systemctl show -p NRestarts -p Result --value {service.unit}").output.split()
    print(f"\n10 switch + rollback cycles (20 restarts) in {elapsed:.1f} s; downtime "
          f"{watch.down_s(started):.2f} s in all; unit {restarts}")


def test_a_tight_start_limit_set_by_someone_else_still_switches_and_rolls_back(service, switcher):
    service.push_text("[Unit]\nStartLimitIntervalSec=600\nStartLimitBurst=2\n",
                      f"/etc/systemd/system/{service.unit}.service.d/limit.conf")
    service.sh("systemctl daemon-reload")
    # The limit bites: two more plain restarts within the interval and systemd refuses the third start.
    service.sh(f"systemctl restart {service.unit}; systemctl restart {service.unit}", check=False)
    refused = service.sh(f"systemctl restart {service.unit}", check=False)
    assert refused.rc != 0 and "attempted too often" in refused.output, refused.output
    assert service.health()[0] == 0  # and the service is down

    # The helper's retry path: told not to reset first, its restart is refused, then reset-failed + retry.
    attempts = service.sh(f"python3 -c 'import sys; sys.path.insert(0, \"{REMOTE_PATH}\"); "
                          "from labwright.stacks import service; "
                          f"print(service.restart_unit(\"{service.unit}\", reset_first=False))'").output
    assert attempts.strip() == "2", attempts
    assert service.wait_healthy(30), "the unit restarted by the retry does not serve"
    # restart_owned: the one helper other parts use (restart safe against the limit, then wait on health).
    owned = service.sh(f"python3 -c 'import sys; sys.path.insert(0, \"{REMOTE_PATH}\"); "
                       "from labwright.stacks import service as s; "
                       f"r = s.restart_owned(\"{service.unit}\", s.HealthCheck(url=\"{service.local_health_url}\", "
                       "timeout_s=30)); print(r.healthy, r.attempts, r.seen)'").output
    assert owned.split()[:3] == ["True", "1", "HTTP"], owned

    for step in ("switch", "rollback", "switch", "rollback", "switch"):
        run = switcher.switch("standin-2.10") if step == "switch" else switcher.rollback()
        assert run.rc == 0, f"{step}: {run.output}"
    assert serving(service, "2.10.0")
    switcher.assert_consistent()


def test_a_failing_stack_rolls_back_under_a_tight_start_limit(on_2_10):
    """Switch, health failure, automatic rollback: three restarts within the limit's interval of two."""
    switcher, service = on_2_10, on_2_10.service
    service.push_text("[Unit]\nStartLimitIntervalSec=600\nStartLimitBurst=2\n",
                      f"/etc/systemd/system/{service.unit}.service.d/limit.conf")
    service.sh("systemctl daemon-reload")
    for _ in range(2):
        run = switcher.switch("standin-2.11", health_timeout=3)
        assert run.rc == 1, run.output
        assert "rolled back by itself to stack standin-2.10" in run.output and "healthy again" in run.output
        assert serving(service, "2.10.0")
    switcher.assert_consistent()


def _recovery(service: StandinService, switcher: Switcher, step: str, stack: str, expect_after: str,
              expect_rc: int = 0, health_timeout: float = 20) -> tuple[float, float]:
    """From standin-2.10 (``on_2_10``), kill a switch to ``stack`` at ``step``, check the state it leaves, re-run it;
    (downtime s, seconds from the kill until the re-run finished with ``expect_after`` serving)."""
    assert switcher.state()["current"]["stack"] == "standin-2.10" and serving(service, "2.10.0")
    before = service.readlink()
    with Watch(service) as watch:
        start = time.monotonic()
        killed = switcher.switch(stack, fault=step, health_timeout=health_timeout)
        killed_at = time.monotonic()
        assert killed.rc in KILLED, f"{step}: expected SIGKILL, got exit {killed.rc}: {killed.output}"
        assert f"{FAULT_ENV}={step}: killing myself" in killed.output
        link = service.readlink()
        switcher.assert_finished(link)  # no half-built environment is ever active
        if step in ("build", "verify"):
            assert link == before, f"{step}: the link moved before the swap"
            assert serving(service, "2.10.0"), f"{step}: the previous stack does not serve after the kill"
        elif step in ("swap", "restart"):
            # Swapped, not restarted: the running process still serves the previous stack.
            assert link != before and serving(service, "2.10.0"), f"{step}: {link}, {service.health()}"
        rerun = switcher.switch(stack, health_timeout=health_timeout)
        assert rerun.rc == expect_rc, f"re-run after a kill at {step}: {rerun.output}"
        assert "released a stale lock (pid" in rerun.output, rerun.output  # the killed run's guest lock
        assert serving(service, expect_after), f"after the re-run: {service.health()}"
        done = time.monotonic() - killed_at
    switcher.assert_consistent()
    leftovers = service.sh(f"ls -A {STACKS}").output.split()
    assert not [name for name in leftovers if name.startswith(".deleting")], leftovers
    building = service.sh(f"ls {STACKS}/*/.building 2>/dev/null || true").output.split()
    assert building == [], f"half-built environments left: {building}"
    down = watch.down_s(start)
    print(f"\nSIGKILL at {step}: down {down:.2f} s in all; serving {expect_after} {done:.2f} s after the kill "
          f"(the re-run included)")
    return down, done


@pytest.mark.parametrize("step", ["build", "verify"])
def test_sigkill_before_the_swap_leaves_the_previous_stack_serving(on_2_10, step):
    switcher, service = on_2_10, on_2_10.service
    down, _ = _recovery(service, switcher, step, "standin-2.9", "2.9.0")
    assert down < 30  # the only outage is the re-run's own restart


@pytest.mark.parametrize("step", ["swap", "restart", "health"])
def test_sigkill_after_the_swap_is_finished_by_the_next_run(on_2_10, step):
    switcher, service = on_2_10, on_2_10.service
    _recovery(service, switcher, step, "standin-2.9", "2.9.0")
    assert switcher.state()["current"]["stack"] == "standin-2.9"
    assert switcher.state()["previous"]["stack"] == "standin-2.10"


def test_sigkill_during_the_automatic_rollback_is_finished_by_the_next_run(on_2_10):
    switcher, service = on_2_10, on_2_10.service
    # standin-2.11 verifies but its /health answers 503: the switch rolls back, and is killed as it starts to.
    _recovery(service, switcher, "rollback", "standin-2.11", "2.10.0", expect_rc=1, health_timeout=3)
    state = switcher.state()
    assert state["current"]["stack"] == "standin-2.10"
    assert "standin-2.11" not in service.sh(f"ls {STACKS}").output


def test_a_killed_switch_then_rollback_returns_to_the_stack_that_served(on_2_10):
    """Killed after the swap, then `rollback` instead of a re-run: back on the stack that served before."""
    switcher, service = on_2_10, on_2_10.service
    killed = switcher.switch("standin-2.9", fault="swap")
    assert killed.rc in KILLED, killed.output
    back = switcher.rollback()
    assert back.rc == 0, back.output
    assert serving(service, "2.10.0")
    switcher.assert_consistent()
    assert switcher.state()["previous"]["stack"] == "standin-2.9"


def test_disk_full_mid_build_is_one_line_and_gives_the_space_back(on_2_10):
    switcher, service = on_2_10, on_2_10.service
    current = service.readlink()
    # A 1 MiB tmpfs with ~120 KiB left as the stacks root of the next switch: the venv gets created, the wheels
    # do not fit.
    service.sh("mkdir -p /mnt/small && mount -t tmpfs -o size=1m tmpfs /mnt/small && "
               "dd if=/dev/zero of=/mnt/small/filler bs=1k count=900 2>/dev/null && mkdir -p /mnt/small/stacks")
    try:
        free = "df --output=avail -B1 /mnt/small | tail -1"
        before = int(service.sh(free).output)
        plan = json.loads(service.sh(f"cat {switcher.plan('standin-2.9')}").output)
        plan["root"] = "/mnt/small/stacks"
        service.push_text(json.dumps(plan), f"{PLANS}/small.json")
        run = service.sh(f"python3 {REMOTE_PATH} switch --plan {PLANS}/small.json "
                         f"{switcher._service_args(20)}", check=False)
        assert run.rc == 1, run.output
        errors = [line for line in run.output.splitlines() if "error" in line]
        assert len(errors) == 1 and "no space left on device under /mnt/small/stacks" in errors[0], run.output
        assert "half-built environment was removed" in errors[0] and "Traceback" not in run.output
        assert int(service.sh(free).output) == before, "the half-built environment's space was not given back"
        assert service.sh("ls -A /mnt/small/stacks").output.split() == [".lock"]
        assert service.readlink() == current and serving(service, "2.10.0")
    finally:
        service.sh("umount /mnt/small", check=False)


def test_a_second_run_on_the_guest_refuses_naming_the_holder_then_runs_once_it_is_gone(service, switcher):
    # Another labwright run on this guest holds its lock (guestlock.hold_local) until the FIFO is written to.
    holder = (f"import sys, os; sys.path.insert(0, '{REMOTE_PATH}'); from labwright.guestlock import hold_local\n"
              "with hold_local('a test holder'):\n"
              "    print('held', os.getpid(), flush=True); open('/tmp/release').read()\n")
    service.push_text(holder, "/tmp/holder.py")
    service.sh("rm -f /tmp/release /tmp/holder.out && mkfifo /tmp/release && "
               "(setsid python3 /tmp/holder.py >/tmp/holder.out 2>&1 &)")
    deadline = time.monotonic() + 60
    while "held" not in (out := service.sh("cat /tmp/holder.out", check=False).output):
        assert time.monotonic() < deadline, f"the test holder never took the guest lock: {out}"
        time.sleep(0.1)
    pid = out.split()[1]
    refused = service.sh(f"python3 {REMOTE_PATH} switch --plan {switcher.plan('standin-2.10')} --lock-wait 1 "
                         f"{switcher._service_args(20)}", check=False)
    assert refused.rc == 1, refused.output
    errors = [line for line in refused.output.splitlines() if "error" in line]
    assert len(errors) == 1 and f"another labwright run holds this guest (pid {pid} on " in errors[0], refused.output
    assert "a test holder" in errors[0] and "Traceback" not in refused.output
    assert service.readlink() == "NOT-A-LINK" and serving(service, "2.9.0")  # nothing was touched

    service.sh("echo go > /tmp/release")
    deadline = time.monotonic() + 60
    while service.sh(f"kill -0 {pid}", check=False).rc == 0:
        assert time.monotonic() < deadline, f"the test holder (pid {pid}) did not exit after its release"
        time.sleep(0.1)
    run = switcher.switch("standin-2.10")
    assert run.rc == 0, run.output
    assert serving(service, "2.10.0")


def test_the_pyinfra_deploy_finishes_a_switch_killed_after_its_swap(on_2_10):
    """The operation does not report "No change" for an environment whose restart was never confirmed."""
    switcher, service = on_2_10, on_2_10.service
    pid = service.main_pid()
    killed = switcher.switch("standin-2.9", fault="restart")
    assert killed.rc in KILLED, killed.output
    assert switcher.state()["current"]["pending"] is True
    assert service.main_pid() == pid and serving(service, "2.10.0")  # swapped, still the old process
    run = service.deploy(stack="standin-2.9")
    assert run.rc == 0, run.output[-3000:]
    assert pyinfra_totals(run.output).changed == 1, run.output[-3000:]  # not "No change": it ran the switch
    assert serving(service, "2.9.0") and service.main_pid() != pid
    switcher.assert_consistent()
    again = service.deploy(stack="standin-2.9")  # and now it is done: no change
    assert again.rc == 0 and pyinfra_totals(again.output).changed == 0, again.output[-3000:]
