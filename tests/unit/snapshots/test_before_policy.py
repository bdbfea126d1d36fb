"""labwright.snapshots.before: a snapshot before a risky step only where it is cheap.

Every combination of storage (cannot snapshot / copy-on-write / a copy that freezes the running guest), guest state
and ``required`` is generated; the rule: a freezing copy of a running guest is never taken unless required, and when
it is, its cost is said before it is taken; storage that cannot snapshot raises only when required.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labwright import snapshots
from labwright.snapshots import Before, SnapshotsUnsupported, before, copy_notice
from labwright.snapshots.model import Snapshot, SnapshotBackend, Support


class Backend(SnapshotBackend):
    def __init__(self, support: Support, running: bool, size: int | None = 2_100_000_000):
        self.label = "@lxd/g1"
        self._support, self._running, self._size = support, running, size
        self.events: list[str] = []
        self.snapshots: list[Snapshot] = []
        self.notes: list[str] = []

    def exists(self) -> bool:
        return True

    def running(self) -> bool:
        return self._running

    def support(self) -> Support:
        return self._support

    def copy_size(self) -> int | None:
        self.events.append("measure")
        return self._size

    def list(self) -> list[Snapshot]:
        return list(self.snapshots)

    def create(self, name: str, description: str) -> None:
        self.events.append("create")
        self.snapshots.append(Snapshot(name, datetime.now()))

    def delete(self, name: str) -> None:
        self.events.append("delete")

    def rollback(self, name: str) -> None: ...
    def stop(self) -> None: ...
    def start(self) -> None: ...

    def native_command(self, action: str, name: str) -> str:
        return f"lxc {action} g1 {name}"


SUPPORTS = {
    "none": Support(False, "pool p (cephfs)", "", "LXD storage driver 'cephfs' of pool p cannot snapshot instances"),
    "cow": Support(True, "pool p (btrfs)", "native (btrfs subvolume snapshot)"),
    "copy": Support(True, "pool p (dir)", "copy", freezes_running=True),
}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path / "cache"))


def run_before(backend: Backend, monkeypatch, **kw) -> tuple[Before, list[str]]:
    monkeypatch.setattr(snapshots, "backend_for", lambda *a, **k: backend)
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        backend.events.append("said")

    return before("@lxd/g1", "stack-switch", say=say, **kw), said


@given(storage=st.sampled_from(sorted(SUPPORTS)), running=st.booleans(), required=st.booleans(),
       instead=st.text(max_size=40))
def test_a_freezing_copy_is_never_taken_unless_required_and_its_cost_is_said_first(storage, running, required,
                                                                                     instead):
    import os
    import tempfile

    backend = Backend(SUPPORTS[storage], running)
    mp = pytest.MonkeyPatch()
    try:
        with tempfile.TemporaryDirectory() as cache:
            mp.setenv("LABWRIGHT_CACHE", cache)
            try:
                result, said = run_before(backend, mp, required=required, instead=instead)
            except SnapshotsUnsupported as exc:
                assert storage == "none" and required
                assert "pool p" in str(exc) and "cephfs" in str(exc) and "\n" not in str(exc)
                assert "create" not in backend.events
                return
            assert os.path.isdir(cache)
    finally:
        mp.undo()
    freezing = storage == "copy" and running
    taken = storage != "none" and (not freezing or required)
    assert ("create" in backend.events) == taken
    assert (result.name is not None) == taken
    if not taken:
        assert result.skipped and "\n" not in result.skipped
    if freezing and not required:
        assert "frozen" in result.skipped and "pool p (dir)" in result.skipped
        assert (" ".join(instead.split()) or "this step has no other way back") in result.skipped
        assert "snapshot_required: true" in result.skipped
    if freezing and required:
        assert backend.events.index("said") < backend.events.index("create")
        assert said == [result.said_first] and "2.10 GB" in said[0] and "frozen" in said[0]
    else:
        assert said == [] and "measure" not in backend.events


def test_the_second_copy_on_a_pool_foretells_its_downtime_from_the_first(monkeypatch):
    monkeypatch.setattr(snapshots, "take", lambda backend, step, keep: snapshots.TakeResult(
        "@lxd/g1", "labwright-x", "pool p (dir)", "copy", False, seconds=10.0))
    first = Backend(SUPPORTS["copy"], True, size=1_000_000_000)
    result, said = run_before(first, monkeypatch, required=True)
    assert "no copy on this pool measured yet" in said[0]
    second = Backend(SUPPORTS["copy"], True, size=2_000_000_000)
    _, said = run_before(second, monkeypatch, required=True)
    assert "about 20 s" in said[0] and "100 MB/s" in said[0]


@pytest.mark.parametrize("size, rate, needles", [
    (None, None, ["a full copy of its root filesystem", "no copy on this pool measured yet"]),
    (900_000_000, None, ["a full copy of 900 MB"]),
    (4_000_000_000, 50e6, ["a full copy of 4.00 GB", "about 80 s", "50 MB/s"]),
])
def test_copy_notice_names_size_and_downtime(size, rate, needles):
    line = copy_notice("@lxd/g1", SUPPORTS["copy"], size, rate)
    assert all(n in line for n in needles) and "\n" not in line and "@lxd/g1" in line


def test_a_broken_rates_cache_is_replaced_not_fatal(tmp_path, monkeypatch):
    (tmp_path / "cache").mkdir(exist_ok=True)
    (tmp_path / "cache" / snapshots.RATES_FILE).write_text("{not json")
    backend = Backend(SUPPORTS["copy"], True)
    result, said = run_before(backend, monkeypatch, required=True)
    assert result.name and "no copy on this pool measured yet" in said[0]


def test_not_a_container_has_nothing_to_snapshot():
    assert before("@local", "x").name is None


def test_snapshot_required_on_storage_that_cannot_snapshot_is_refused_naming_pool_and_driver(monkeypatch):
    """The stack switch yields required_check_command first (before its bundle and build): the refusal comes before
    the switch starts."""
    from pyinfra.api.exceptions import OperationError

    from labwright.snapshots.deploy import _refuse_unsupported, required_check_command

    backend = Backend(SUPPORTS["none"], True)
    monkeypatch.setattr(snapshots, "backend_for", lambda *a, **k: backend)

    class Host:
        name = "@lxd/g1"
        data = {"snapshot_required": True}

    commands = list(required_check_command(Host()))
    assert len(commands) == 1 and commands[0].function is _refuse_unsupported
    with pytest.raises(OperationError) as caught:
        commands[0].function(None, None, *commands[0].args)
    message = str(caught.value)
    assert message.startswith("snapshot_required: @lxd/g1: snapshots are not possible here")
    assert "pool p" in message and "'cephfs'" in message and "\n" not in message
    assert "create" not in backend.events
    Host.data = {"snapshot_required": False}
    assert list(required_check_command(Host())) == []
