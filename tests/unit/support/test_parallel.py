"""tests/support/parallel.py: which tests share a worker, in what order xdist hands them out, and the locks that keep
a daemon-restarting test away from every other lab test."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest

from labwright.testing.waiting import wait_for
from support import parallel


class Item:
    """The part of a pytest item the rules read."""

    def __init__(self, nodeid: str, group: str | None = None, fixtures: tuple[str, ...] = (), marks=()):
        self.nodeid = nodeid
        self.fixturenames = fixtures
        self.marks = [pytest.mark.xdist_group(group).mark] if group else []
        self.marks += [m.mark for m in marks]

    def iter_markers(self, name):
        return (m for m in self.marks if m.name == name)

    def get_closest_marker(self, name):
        return next(self.iter_markers(name), None)

    def add_marker(self, mark):
        self.marks.append(mark.mark)


def config(dist: str = "loadgroup"):
    return SimpleNamespace(option=SimpleNamespace(dist=dist, loadscopereorder=True))


def test_lab_modules_stay_together_longest_first_and_unit_tests_fill_in(tmp_path, monkeypatch):
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"seconds": {
        "tests/integration/test_b.py::test_1": 100.0, "tests/integration/test_b.py::test_2": 50.0,
        "tests/integration/test_a.py::test_1": 20.0, "tests/unit/test_u.py::test_slow": 40.0}}))
    monkeypatch.setattr(parallel, "DURATIONS", durations)
    items = [Item("tests/unit/test_u.py::test_fast"), Item("tests/integration/test_a.py::test_1"),
             Item("tests/integration/test_b.py::test_1"), Item("tests/unit/test_u.py::test_slow"),
             Item("tests/integration/test_new.py::test_1"), Item("tests/integration/test_b.py::test_2"),
             Item("tests/integration/test_c.py::test_1", group="shared")]
    cfg = config()
    parallel.assign_groups_and_order(cfg, items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "tests/integration/test_b.py::test_1", "tests/integration/test_b.py::test_2",  # 150 s, its own order kept
        "tests/unit/test_u.py::test_slow",  # 40 s
        "tests/integration/test_new.py::test_1",  # never measured: UNKNOWN_GROUP_S (30 s)
        "tests/integration/test_c.py::test_1",  # a group of its own naming, never measured: 30 s too
        "tests/integration/test_a.py::test_1",  # 20 s
        "tests/unit/test_u.py::test_fast"]
    assert [parallel.group_of(i) for i in items] == [
        "tests/integration/test_b.py", "tests/integration/test_b.py", None, "tests/integration/test_new.py",
        "shared", "tests/integration/test_a.py", None]
    assert cfg.option.loadscopereorder is False  # xdist keeps this order instead of sorting by test count


def test_without_xdist_nothing_is_grouped_or_reordered():
    items = [Item("tests/unit/test_u.py::t"), Item("tests/integration/test_a.py::t")]
    parallel.assign_groups_and_order(config("no"), items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ["tests/unit/test_u.py::t", "tests/integration/test_a.py::t"]
    assert all(parallel.group_of(i) is None for i in items)


def test_what_each_test_holds():
    assert parallel.resources(Item("u::t")) == []  # type: ignore[arg-type]
    assert parallel.resources(Item("i::t", fixtures=("lab", "tmp_path"))) == [("lab-daemon", False)]  # type: ignore[arg-type]
    assert parallel.resources(Item("i::t", fixtures=("lab",), marks=[pytest.mark.lab_exclusive])) == [  # type: ignore[arg-type]
        ("lab-daemon", True)]
    assert parallel.resources(Item("i::t", marks=[pytest.mark.lab_resource("lxd-https", "port-18443")])) == [  # type: ignore[arg-type]
        ("res-lxd-https", True), ("res-port-18443", True)]


def test_an_exclusive_holder_waits_for_the_shared_ones_and_is_not_starved(tmp_path, monkeypatch):
    """Shared holder A runs; exclusive B waits for it; shared C, arriving while B waits, waits behind B (the gate),
    so a stream of shared holders cannot keep B out for ever."""
    monkeypatch.setattr(parallel, "lock_dir", lambda: tmp_path)
    order: list[str] = []
    a_in, a_out, b_waiting = threading.Event(), threading.Event(), threading.Event()

    def shared_a():
        with parallel.flocked("lab-daemon", exclusive=False):
            order.append("A in")
            a_in.set()
            assert a_out.wait(30)
            order.append("A out")

    def exclusive_b():
        b_waiting.set()
        with parallel.flocked("lab-daemon", exclusive=True):
            order.append("B in")
            time.sleep(0.2)  # a window in which C must not get in
            order.append("B out")

    def shared_c():
        with parallel.flocked("lab-daemon", exclusive=False):
            order.append("C in")

    threads = [threading.Thread(target=shared_a)]
    threads[0].start()
    assert a_in.wait(30)
    threads.append(threading.Thread(target=exclusive_b))
    threads[1].start()
    assert b_waiting.wait(30)
    gate = tmp_path / "labwright-test-lab-daemon.gate"
    wait_for("B to close the gate and wait on the lock", lambda: gate_is_held(gate), timeout=30, every=0.01)
    threads.append(threading.Thread(target=shared_c))
    threads[2].start()
    threads[2].join(0.3)
    assert order == ["A in"], order  # neither B (A holds it) nor C (B waits at the gate) got in
    a_out.set()
    for thread in threads:
        thread.join(30)
    assert order == ["A in", "A out", "B in", "B out", "C in"], order


def gate_is_held(gate) -> bool:
    import fcntl

    if not gate.exists():
        return False
    with open(gate, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False
