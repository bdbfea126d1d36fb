"""The suite on several worker processes (pytest-xdist, ``--dist loadgroup``), safely (issue 29, item 3).

Three rules, applied at collection and around each test:

1. **A lab module stays in one worker.** Every test under ``tests/integration`` without an ``xdist_group`` of its own
   gets its module's path as group, so the module's own order holds (a quorum-loss test last, a privileged desktop
   last) and its module-scoped fixtures (a deployed guest, a built wheelhouse) are built once, not once per worker.
   Unit tests carry no group: xdist hands them out one at a time to whichever worker is free.
2. **The longest work first.** Work units are ordered by their duration in ``tests/durations.json`` (measured, written
   by ``benchmarks/suite_time.py --record``), longest first, so no long lab module starts last and leaves one
   worker running alone at the end; a module not in the file counts as ``UNKNOWN_GROUP_S``.
3. **Shared resources declared, serialised where shared.** Every test that uses the real lab (the ``lab`` fixture)
   holds the lab daemon lock *shared* for its whole run, set-up and tear-down included (module fixtures are made in
   the first test's set-up and removed in the last one's tear-down); a test marked ``lab_exclusive`` (it restarts
   the LXD daemon) holds it *exclusively*, so no other lab test runs meanwhile. ``lab_resource("name")`` serialises
   the tests that name the same resource (a fixed port, a daemon-wide setting) across workers, and leaves the rest
   parallel. A waiting exclusive holder closes a gate first, so shared holders cannot starve it.

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


def group_of(item: pytest.Item) -> str | None:
    for mark in item.iter_markers("xdist_group"):
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    return None


def assign_groups_and_order(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Rules 1 and 2 (only when xdist distributes: a plain run keeps pytest's order)."""
    if getattr(config.option, "dist", "no") == "no":
        return
    for item in items:
        if group_of(item) is None and item.nodeid.startswith(INTEGRATION):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    known = load_durations()
    unit_of = {item.nodeid: group_of(item) or item.nodeid for item in items}
    cost: dict[str, float] = {}
    measured: set[str] = set()
    for item in items:
        unit = unit_of[item.nodeid]
        if item.nodeid in known:
            measured.add(unit)
        cost[unit] = cost.get(unit, 0.0) + known.get(item.nodeid, UNKNOWN_TEST_S)
    for unit in cost:
        if unit not in measured and unit not in unit_of:  # a group (not a test id) never measured
            cost[unit] = max(cost[unit], UNKNOWN_GROUP_S)
    first_seen: dict[str, int] = {}
    for i, item in enumerate(items):
        first_seen.setdefault(unit_of[item.nodeid], i)
    # stable within a unit, longest unit first; xdist keeps this order (loadscopereorder is turned off)
    items.sort(key=lambda it: (-cost[unit_of[it.nodeid]], first_seen[unit_of[it.nodeid]]))
    config.option.loadscopereorder = False


def resources(item: pytest.Item) -> list[tuple[str, bool]]:
    """(lock, exclusive) pairs for one test, in one global order (no two workers wait on each other crosswise)."""
    wanted: dict[str, bool] = {}
    uses_lab = "lab" in getattr(item, "fixturenames", ())
    if item.get_closest_marker("lab_exclusive") is not None:
        wanted["lab-daemon"] = True
    elif uses_lab:
        wanted["lab-daemon"] = False
    for mark in item.iter_markers("lab_resource"):
        for name in mark.args:
            wanted[f"res-{name}"] = True
    return sorted(wanted.items())


@contextlib.contextmanager
def holding(item: pytest.Item) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for name, exclusive in resources(item):
            stack.enter_context(flocked(name, exclusive))
        yield
