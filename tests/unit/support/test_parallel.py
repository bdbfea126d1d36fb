"""tests/support/parallel.py: which tests share a worker, in what order xdist hands them out, and the locks that keep
a daemon-restarting test away from every other lab test."""

from __future__ import annotations

import json
import os
import threading
import time
from types import SimpleNamespace

import pytest

from labwright.testing.waiting import wait_for
from support import parallel


class Item:
    """The part of a pytest item the rules read."""

    def __init__(self, nodeid: str, fixtures: tuple[str, ...] = (), marks=()):
        self.nodeid = nodeid
        self.fixturenames = fixtures
        self.marks = [m.mark for m in marks]

    def iter_markers(self, name):
        return (m for m in self.marks if m.name == name)

    def get_closest_marker(self, name):
        return next(self.iter_markers(name), None)


def config(dist: str = "loadgroup"):
    """A worker's config as xdist leaves it (xdist/remote.py setup_config: dist "no", loadgroup said apart)."""
    return SimpleNamespace(option=SimpleNamespace(dist="no", loadgroup=dist == "loadgroup", loadscopereorder=True))


def test_lab_modules_are_one_unit_longest_first_and_unit_tests_fill_in(tmp_path, monkeypatch):
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"seconds": {
        "tests/integration/test_b.py::test_1": 100.0, "tests/integration/test_b.py::test_2": 50.0,
        "tests/integration/test_a.py::test_1": 20.0, "tests/unit/test_u.py::test_slow": 40.0}}))
    monkeypatch.setattr(parallel, "DURATIONS", durations)
    items = [Item("tests/unit/test_u.py::test_fast"), Item("tests/integration/test_a.py::test_1"),
             Item("tests/integration/test_b.py::test_1"), Item("tests/unit/test_u.py::test_slow"),
             Item("tests/integration/test_new.py::test_1"), Item("tests/integration/test_b.py::test_2")]
    parallel.order(config(), items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "tests/integration/test_b.py::test_1", "tests/integration/test_b.py::test_2",  # 150 s, its own order kept
        "tests/unit/test_u.py::test_slow",  # 40 s
        "tests/integration/test_new.py::test_1",  # never measured: UNKNOWN_GROUP_S (30 s)
        "tests/integration/test_a.py::test_1",  # 20 s
        "tests/unit/test_u.py::test_fast"]
    assert [parallel.unit_of(i.nodeid) for i in items] == [
        "tests/integration/test_b.py", "tests/integration/test_b.py", "tests/unit/test_u.py::test_slow",
        "tests/integration/test_new.py", "tests/integration/test_a.py", "tests/unit/test_u.py::test_fast"]
    controller = SimpleNamespace(option=SimpleNamespace(dist="loadgroup", loadscopereorder=True))
    parallel.configure_controller(controller)  # type: ignore[arg-type]
    assert controller.option.loadscopereorder is False  # xdist keeps this order instead of sorting by test count


def test_without_loadgroup_nothing_is_reordered():
    items = [Item("tests/unit/test_u.py::t"), Item("tests/integration/test_a.py::t")]
    parallel.order(config("no"), items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ["tests/unit/test_u.py::t", "tests/integration/test_a.py::t"]


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


# A plugin for the collection below: every test collected, written down before any hook deselects one (tryfirst:
# ahead of tests/conftest.py's --quick filter), so one collection of the suite shows both what --quick runs and
# what a plain run would (collecting the suite twice cost ~23 s under load).
COLLECTED = """
import json, os, pytest

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    with open(os.environ["COLLECTED_LOG"], "w") as log:
        json.dump([item.nodeid for item in items], log)
"""


def test_quick_is_the_unit_tests_and_one_real_smoke_per_component(tmp_path):
    """scripts/test --quick: every unit test, and of the integration tests only those marked smoke, one per real
    component (docs/testing.md lists them)."""
    import subprocess
    import sys

    (tmp_path / "collected_probe.py").write_text(COLLECTED)
    log = tmp_path / "collected.json"
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, "-m", "pytest", "--quick", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-p", "collected_probe", "tests"], cwd=parallel.ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLLECTED_LOG": str(log), "PYTHONPATH": path})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    collected = json.loads(log.read_text())
    assert len(collected) > len(ids)  # the probe saw the suite before --quick deselected
    assert {i for i in ids if i.startswith("tests/unit/")} == {i for i in collected if i.startswith("tests/unit/")}
    modules = {i.split("::")[0].removeprefix("tests/integration/") for i in ids if i.startswith("tests/integration/")}
    assert modules == {"test_lxd_connector.py", "test_guest_lxd.py", "test_base_deploy.py", "test_stack_switch_cli.py",
                       "test_kv_llama_server.py", "test_cluster_corosync.py", "test_bios_backup.py",
                       "test_lab_backends.py"}, modules
    assert len([i for i in ids if i.startswith("tests/integration/")]) <= 10  # one (or one parametrised) each


PROBE = """
import os, time
from pathlib import Path

def record(name):
    with open(os.environ["PROBE_LOG"], "a") as log:
        log.write(f"{os.environ.get('PYTEST_XDIST_WORKER', '-')} {name} {time.monotonic()}\\n")
"""


def test_real_xdist_keeps_each_lab_module_in_one_worker_in_order_and_spreads_unit_tests(tmp_path):
    """The scheduler for real: pytest with two xdist workers on a small tree laid out like this one; every test of a
    lab module runs in one worker, in the module's order; the unit tests go to both workers."""
    import subprocess
    import sys

    (tmp_path / "tests" / "integration").mkdir(parents=True)
    (tmp_path / "tests" / "unit").mkdir()
    (tmp_path / "tests" / "probe.py").write_text(PROBE)
    (tmp_path / "tests" / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(parallel.ROOT / 'tests')!r})\npytest_plugins = ['support.parallel']\n")
    for module in ("test_a", "test_b", "test_c"):
        (tmp_path / "tests" / "integration" / f"{module}.py").write_text("from probe import record\n" + "".join(
            f"def test_{i}():\n    record('{module}.{i}')\n" for i in range(6)))
    (tmp_path / "tests" / "unit" / "test_u.py").write_text("import time\nfrom probe import record\n" + "".join(
        f"def test_{i}():\n    record('u.{i}')\n    time.sleep(0.05)\n" for i in range(30)))
    log = tmp_path / "probe.log"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q", "-p",
                           "no:cacheprovider", "--rootdir", str(tmp_path), "-c", "/dev/null", "tests"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PROBE_LOG": str(log), "PYTHONPATH": str(tmp_path / "tests")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line.split() for line in log.read_text().splitlines()]
    for module in ("test_a", "test_b", "test_c"):
        ran = [(worker, name) for worker, name, _ in rows if name.startswith(module)]
        assert len({worker for worker, _ in ran}) == 1, ran  # one worker
        assert [name for _, name in ran] == [f"{module}.{i}" for i in range(6)], ran  # in order
    assert {worker for worker, name, _ in rows if name.startswith("u.")} == {"gw0", "gw1"}



class Node:
    """The part of xdist's WorkerController its scheduler uses: the indexes of the tests it is sent to run."""

    def __init__(self, name: str):
        self.name = name
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indexes):
        self.sent.extend(indexes)

    def shutdown(self):
        self.shutting_down = True

    def __repr__(self):
        return self.name


def scheduler_with(workers: int, collection: list[str]):
    """parallel.make_scheduler's LabModules (xdist's LoadScopeScheduling) on ``workers`` nodes that collected
    ``collection``, its work handed out (LoadScopeScheduling.schedule)."""
    config = SimpleNamespace(option=SimpleNamespace(dist="loadgroup", loadscopereorder=False),
                             getvalue=lambda name: [f"{workers}*popen"] if name == "tx" else None)
    scheduler = parallel.make_scheduler(config, None)  # type: ignore[arg-type]
    nodes = [Node(f"gw{i}") for i in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
    for node in nodes:
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    return scheduler, nodes


def sent(node: Node, collection: list[str]) -> list[str]:
    return [collection[i] for i in node.sent]


LAB = [f"tests/integration/test_{m}.py::test_{i}" for m in "abcd" for i in range(3)]  # four modules, longest first
UNIT = [f"tests/unit/test_u.py::test_{i}" for i in range(6)]


def test_from_four_workers_one_fewer_holds_lab_modules():
    """Rule 4: three workers get the first three lab modules; the fourth gets unit tests (not module d) while those
    three hold theirs; d goes to the first lab worker whose module is nearly done. With no unit test to give, the
    fourth gets nothing while three hold lab modules, and is shut down (not left waiting) once nothing is left."""
    scheduler, (gw0, gw1, gw2, gw3) = scheduler_with(4, LAB + UNIT)
    assert [sent(n, LAB + UNIT) for n in (gw0, gw1, gw2)] == [LAB[0:3], LAB[3:6], LAB[6:9]]
    assert sent(gw3, LAB + UNIT) == UNIT[0:2]  # not test_d: a unit test, and a second one (xdist's start)
    scheduler.mark_test_complete(gw3, (LAB + UNIT).index(UNIT[0]))
    assert sent(gw3, LAB + UNIT) == UNIT[0:3]  # still unit tests: the other three hold their modules
    scheduler.mark_test_complete(gw0, 0)  # two of test_a's tests left: gw0 is sent the next unit, test_d
    assert sent(gw0, LAB + UNIT) == LAB[0:3] + LAB[9:12]
    for i in (1, 2, 3):  # gw3 runs out of unit tests: the last two go to it, nothing else is left
        scheduler.mark_test_complete(gw3, (LAB + UNIT).index(UNIT[i]))
    assert sent(gw3, LAB + UNIT) == UNIT and not scheduler.workqueue

    scheduler, (gw0, gw1, gw2, gw3) = scheduler_with(4, LAB)  # no unit tests
    assert [sent(n, LAB) for n in (gw0, gw1, gw2, gw3)] == [LAB[0:3], LAB[3:6], LAB[6:9], []]
    scheduler.mark_test_complete(gw1, 3)
    assert sent(gw1, LAB) == LAB[3:6] + LAB[9:12] and sent(gw3, LAB) == []  # gw1 still holds a module: d to it
    assert gw3.shutting_down and not scheduler.workqueue  # nothing left for it: it ends


def test_below_four_workers_the_next_unit_goes_to_whoever_asks():
    scheduler, (gw0, gw1, gw2) = scheduler_with(3, LAB + UNIT)
    assert [sent(n, LAB + UNIT) for n in (gw0, gw1, gw2)] == [LAB[0:3], LAB[3:6], LAB[6:9]]
    scheduler.mark_test_complete(gw2, 6)
    assert sent(gw2, LAB + UNIT) == LAB[6:12]  # test_d as before rule 4: three lab modules at once is no cap here


def test_a_unit_test_runs_nicer_than_a_lab_test_in_a_four_worker_run(monkeypatch):
    """Rule 4's priority, in a thread of its own (Linux keeps the nice value per thread): a unit test at
    FILLER_NICE above the worker's own value, a lab test back at it; fewer workers or no --dist loadgroup: left
    alone. Only root may lower a nice value again, so elsewhere it is always left alone."""
    monkeypatch.setattr(parallel, "_base_priority", [])
    seen: list[tuple[int | None, int]] = []

    def run(workers: str, dist: str, nodeids: list[str]) -> None:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
        for nodeid in nodeids:
            set_to = parallel.prioritise(config(dist), nodeid)  # type: ignore[arg-type]
            seen.append((set_to, os.getpriority(os.PRIO_PROCESS, 0)))

    def in_a_thread(*args) -> None:
        thread = threading.Thread(target=run, args=args)
        thread.start()
        thread.join(30)

    base = os.getpriority(os.PRIO_PROCESS, 0)
    in_a_thread("4", "loadgroup", ["tests/unit/test_u.py::t", "tests/integration/test_a.py::t", "tests/unit/x.py::t"])
    if os.geteuid() != 0:
        assert seen == [(None, base)] * 3
        return
    nicer = min(base + parallel.FILLER_NICE, 19)
    assert seen == [(nicer, nicer), (base, base), (nicer, nicer)]
    seen.clear()
    parallel._base_priority.clear()
    in_a_thread("3", "loadgroup", ["tests/unit/test_u.py::t"])
    in_a_thread("4", "no", ["tests/unit/test_u.py::t"])
    assert seen == [(None, base), (None, base)]
    assert os.getpriority(os.PRIO_PROCESS, 0) == base  # this thread's own value never moved
