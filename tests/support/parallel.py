"""The suite on several worker processes (pytest-xdist, ``--dist loadgroup``), safely (issue 29, item 3).

Four rules, applied at collection, in the controller's scheduler and around each test:

1. **A lab module stays in one worker.** Under ``--dist loadgroup`` the controller schedules with ``LabModules``
   (``pytest_xdist_make_scheduler``): a module under ``tests/integration`` is one unit of work, so the module's own
   order holds (a quorum-loss test last, a privileged desktop last) and its module-scoped fixtures (a deployed guest, a
   built wheelhouse) are built once, not once per worker. Unit tests are one unit each: xdist hands them out one at a
   time to whichever worker is free. (The grouping is read from the node id itself, not from xdist's own
   ``xdist_group`` marker: xdist 3.8 renames ``item._nodeid``, which pytest 9 no longer reads, so its groups silently
   do nothing there.)
2. **The longest work first.** Work units are ordered by their duration in ``tests/durations.json`` (measured, written
   by ``benchmarks/suite_time.py --record``), longest first, so no long lab module starts last and leaves one
   worker running alone at the end; a module not in the file counts as ``UNKNOWN_GROUP_S``.
3. **Shared resources declared, serialised where shared.** Every test that uses the real lab (the ``lab`` fixture)
   holds the lab daemon lock *shared* for its whole run, set-up and tear-down included (module fixtures are made in
   the first test's set-up and removed in the last one's tear-down); a test marked ``lab_exclusive`` (it restarts
   the LXD daemon) holds it *exclusively*, so no other lab test runs meanwhile. ``lab_resource("name")`` serialises
   the tests that name the same resource (a fixed port, a daemon-wide setting) across workers, and leaves the rest
   parallel. A waiting exclusive holder closes a gate first, so shared holders cannot starve it.
4. **From four workers on, one of them fills the idle CPU.** At most all workers but one hold lab modules at a time
   (``lab_cap``, in ``LabModules``): a worker asking for work while the others hold lab modules is sent a unit test
   instead, and with no unit test left, nothing until a lab module ends (four lab modules side by side were slower
   than three: docs/testing.md). Three lab modules side by side leave about a quarter of two cores idle (waiting on
   their containers); the unit tests run there, beside them, instead of last, three CPU-bound workers on two cores.
   A unit test runs ``FILLER_NICE`` nicer than a lab test (``prioritise``, root only), so it takes the CPU a lab
   test leaves rather than the CPU it needs.

The locks are ``flock(2)`` on files under /run/lock (tempdir where that is not writable), so they hold across the
worker processes and across two test runs on one machine, and the kernel drops them when a worker dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DURATIONS = ROOT / "tests" / "durations.json"
INTEGRATION = "tests/integration/"
#: A lab module not measured yet: about what a small one costs.
UNKNOWN_GROUP_S = 30.0
#: A unit test not measured yet.
UNKNOWN_TEST_S = 0.2
#: Rule 4 from this many workers on: one fewer of them may hold lab modules at a time.
FILLER_FROM = 4
#: How much nicer (lower CPU priority) a unit test runs than a lab test in such a run (root only: only root may
#: raise a priority again, for the lab test after it). 5: a lab process sharing a core with a unit test gets 75 % of
#: it (CFS weights 1024 : 335), and a unit test with three busy lab processes on two cores still ~20 % of a core, the
#: share the unit tests have been shown to pass with (load 15-20 on two cores); at 10 it would be ~7 %, too little
#: for a test that bounds its own wall time (a Ctrl-C answered within 2 s: test_refresh_interrupt.py).
FILLER_NICE = 5

MARKERS = (
    "lab_exclusive: restarts or stops the shared LXD daemon: runs while no other lab test runs (support/parallel.py)",
    "lab_resource(name, ...): serialised across xdist workers with every other test naming the same resource",
)


def lock_dir() -> Path:
    run_lock = Path("/run/lock")
    return run_lock if os.access(run_lock, os.W_OK) else Path(tempfile.gettempdir())


@contextlib.contextmanager
def flocked(name: str, exclusive: bool) -> Iterator[None]:
    """``name``'s lock held shared or exclusive; a gate lock taken around the acquire keeps an exclusive waiter
    from being starved by a stream of shared holders (each shared holder passes the gate only while no exclusive
    one is waiting at it)."""
    where = lock_dir()
    with open(where / f"labwright-test-{name}.gate", "a+") as gate, \
            open(where / f"labwright-test-{name}.lock", "a+") as handle:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load_durations(path: Path | None = None) -> dict[str, float]:
    try:
        data = json.loads((path or DURATIONS).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in (data.get("seconds") or {}).items()} if isinstance(data, dict) else {}


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its module under tests/integration, else the test itself."""
    path = nodeid.split("::", 1)[0]
    return path if path.startswith(INTEGRATION) else nodeid


def make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    """xdist's LoadScopeScheduling with ``unit_of`` as its scope (the controller sees node ids, not markers)."""
    from xdist.scheduler import LoadScopeScheduling

    class LabModules(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def __init__(self, config: pytest.Config, log=None) -> None:  # type: ignore[no-untyped-def]
            super().__init__(config, log)
            self.waiting: set = set()  # workers rule 4 sent nothing: asked again when a test ends anywhere
            self.lab_units: dict = {}  # worker -> the lab modules it was sent (not its thousands of unit tests)

        def _assign_work_unit(self, node) -> None:  # type: ignore[no-untyped-def]
            """Rule 4: while ``lab_cap`` other workers hold a lab module, a unit test goes first; with none left,
            nothing (the worker waits for a lab module to end, or for the end of the run)."""
            cap = lab_cap(len(self.assigned_work))
            if cap is not None:
                busy = sum(holds_lab({unit: work[unit] for unit in self.lab_units.get(other, ())})
                           for other, work in self.assigned_work.items() if other is not node)
                if busy >= cap:
                    filler = next((scope for scope in self.workqueue if not scope.startswith(INTEGRATION)), None)
                    if filler is None:
                        self.waiting.add(node)
                        return
                    self.workqueue.move_to_end(filler, last=False)
            self.waiting.discard(node)
            unit = next(iter(self.workqueue))
            super()._assign_work_unit(node)
            if unit.startswith(INTEGRATION):
                self.lab_units.setdefault(node, []).append(unit)

        def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:  # type: ignore[no-untyped-def]
            super().mark_test_complete(node, item_index, duration)
            for other in [n for n in self.waiting if n is not node and n in self.assigned_work]:
                self.waiting.discard(other)
                self._reschedule(other)  # its next unit, or (the queue empty) its shutdown

    return LabModules(config, log)


def lab_cap(workers: int) -> int | None:
    """How many workers may hold lab modules at once: all but one from ``FILLER_FROM`` workers on (that one takes the
    unit tests, which use the CPU a lab test leaves idle while it waits on its container), else no cap."""
    return workers - 1 if workers >= FILLER_FROM else None


def holds_lab(work: dict[str, dict[str, bool]]) -> bool:
    """A worker's assigned work (xdist: scope -> {node id: done}) has a lab module not finished yet."""
    return any(scope.startswith(INTEGRATION) and not all(tests.values()) for scope, tests in work.items())


def grouping(config: pytest.Config) -> bool:
    """True in a worker of ``--dist loadgroup`` (xdist sets the worker's ``dist`` to "no" and ``loadgroup`` to True:
    xdist/remote.py setup_config) and in a one-process run given ``--dist loadgroup``."""
    return bool(getattr(config.option, "loadgroup", False)) or getattr(config.option, "dist", "no") == "loadgroup"


def configure_controller(config: pytest.Config) -> None:
    """On xdist's controller (it schedules; the workers collect): keep the workers' order of the work units instead
    of sorting them by their number of tests (LoadScopeScheduling's ``loadscopereorder``)."""
    if getattr(config.option, "dist", "no") == "loadgroup":
        config.option.loadscopereorder = False


def unit_costs(nodeids: list[str], known: dict[str, float]) -> dict[str, float]:
    """Each unit of work's seconds by ``known`` (tests/durations.json), in the order the units first appear."""
    cost: dict[str, float] = {}
    measured: set[str] = set()
    for nodeid in nodeids:
        unit = unit_of(nodeid)
        if nodeid in known:
            measured.add(unit)
        cost[unit] = cost.get(unit, 0.0) + known.get(nodeid, UNKNOWN_TEST_S)
    for unit in cost:
        if unit not in measured and unit.startswith(INTEGRATION) and "::" not in unit:  # a lab module never measured
            cost[unit] = max(cost[unit], UNKNOWN_GROUP_S)
    return cost


def order(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Rule 2 (only under --dist loadgroup: a plain run keeps pytest's order): units longest first, each unit's own
    tests in their order."""
    if not grouping(config):
        return
    cost = unit_costs([item.nodeid for item in items], load_durations())
    first_seen: dict[str, int] = {}
    for i, item in enumerate(items):
        first_seen.setdefault(unit_of(item.nodeid), i)
    items.sort(key=lambda it: (-cost[unit_of(it.nodeid)], first_seen[unit_of(it.nodeid)]))


def resources(item: pytest.Item) -> list[tuple[str, bool]]:
    """(lock, exclusive) pairs for one test, in one global order (no two workers wait on each other crosswise)."""
    wanted: dict[str, bool] = {}
    # the Incus twins too (labwright.testing.lab_fixture): a lab_exclusive test may restart lxcfs, which both share
    uses_lab = bool({"lab", "incus_lab", "backend_lab"} & set(getattr(item, "fixturenames", ())))
    if item.get_closest_marker("lab_exclusive") is not None:
        wanted["lab-daemon"] = True
    elif uses_lab:
        wanted["lab-daemon"] = False
    for mark in item.iter_markers("lab_resource"):
        for name in mark.args:
            wanted[f"res-{name}"] = True
    return sorted(wanted.items())


_base_priority: list[int] = []  # this worker's own priority, read once


def prioritise(config: pytest.Config, nodeid: str) -> int | None:
    """Rule 4 in a worker: a unit test at ``FILLER_NICE`` below the worker's own priority, a lab test at it, so the
    unit tests take the CPU the lab tests leave idle rather than the CPU they need; the nice value set, None where
    the rule does not apply (fewer than ``FILLER_FROM`` workers, not grouped, not root)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not grouping(config) or lab_cap(int(workers) if workers.isdigit() else 0) is None or os.geteuid() != 0:
        return None
    if not _base_priority:
        _base_priority.append(os.getpriority(os.PRIO_PROCESS, 0))
    wanted = _base_priority[0] if nodeid.startswith(INTEGRATION) else min(_base_priority[0] + FILLER_NICE, 19)
    if os.getpriority(os.PRIO_PROCESS, 0) != wanted:
        os.setpriority(os.PRIO_PROCESS, 0, wanted)
    return wanted


@contextlib.contextmanager
def holding(item: pytest.Item) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for name, exclusive in resources(item):
            stack.enter_context(flocked(name, exclusive))
        yield


# --- the plugin (tests/conftest.py loads it: pytest_plugins) ---------------------------------------------------------
def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    configure_controller(config)


@pytest.hookimpl(trylast=True)  # after --quick (tests/conftest.py) has deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order(config, items)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: a run without xdist (-p no:xdist) has none
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    if getattr(config.option, "dist", "no") == "loadgroup":
        return make_scheduler(config, log)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    """Each test holds the shared resources it declares from set-up to tear-down, at its priority (rule 4)."""
    prioritise(item.config, item.nodeid)
    with holding(item):
        return (yield)
