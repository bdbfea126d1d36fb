"""No wait on an LXD operation is unbounded, and the freezes a snapshot leaves behind are undone and said.

The answers are LXD's own: ``GET /1.0/operations/ID/wait?timeout=N`` answers the running operation when N runs out
(LXD 5.0.2's operationWaitGet, and Incus), or, from LXD 5.0.3 on, an error whose text is the context's
"context deadline exceeded" (canonical/lxd lxd/operations.go operationWaitGet: ``op.Wait(ctx)`` then
``response.SmartError(err)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labwright.errors import LxdError, OperationTimeout
from labwright.hostnames import parse_host_name
from labwright.lxd.client import Endpoint, LxdClient
from labwright.snapshots import lxd as lxd_snapshots
from labwright.snapshots.lxd import LxdSnapshots

RUNNING = {"status_code": 103, "status": "Running", "description": "Snapshotting instance"}


class Scripted(LxdClient):
    """An LxdClient whose requests are answered from a script; the clock moves by the wait asked for (and 0.2 s per
    status read). The instance's status is ``status()`` of the test's model of LXD."""

    def __init__(self, waits: list[Any], status: Any = "Running"):
        super().__init__(Endpoint(socket_path="/nonexistent/unix.socket"))
        self.waits = list(waits)
        self.status = status if callable(status) else (lambda: status)
        self.asked: list[tuple[str, str, Any]] = []
        self.now = 1000.0
        self.unfrozen = False

    def request(self, method, path, json_body=None, params=None, wait=True):  # type: ignore[override]
        self.asked.append((method, path, params if params is not None else json_body))
        if path.endswith("/wait"):
            self.now += params["timeout"]
            answer = self.waits.pop(0) if self.waits else RUNNING
            if isinstance(answer, Exception):
                raise answer
            return answer
        if method == "POST" and path.endswith("/snapshots"):
            return {"id": "op1"}
        if path == "/1.0/operations":
            return {"running": []}
        if method == "PUT" and path.endswith("/state"):
            if self.status() != "Frozen":
                raise LxdError("The container is already running")  # LXD's Unfreeze checks IsFrozen
            self.unfrozen = True
            return None
        if method == "GET" and path.startswith("/1.0/instances/"):
            self.now += 0.2
            return {"name": "g1", "status": "Running" if self.unfrozen else self.status()}
        raise AssertionError(f"unexpected {method} {path}")


@pytest.fixture
def clock(monkeypatch):
    holder: dict[str, Scripted] = {}
    monkeypatch.setattr("labwright.lxd.client.time.monotonic", lambda: holder["client"].now)
    monkeypatch.setattr("labwright.snapshots.lxd.time.monotonic", lambda: holder["client"].now)
    return holder


def test_the_lxd_5_0_3_deadline_error_is_a_running_operation_not_a_failure(clock):
    client = clock["client"] = Scripted([LxdError("GET /1.0/operations/op1/wait: context deadline exceeded", 500),
                                         {"status_code": 200, "status": "Success"}])
    assert client.wait_operation("/1.0/operations/op1", timeout=300, every=10)["status_code"] == 200


def test_any_other_error_of_a_wait_goes_up():
    client = Scripted([LxdError("GET /1.0/operations/op1/wait: not authorized", 403)])
    with pytest.raises(LxdError, match="not authorized"):
        client.wait_operation("/1.0/operations/op1", timeout=30)


@given(limit=st.integers(min_value=1, max_value=7200), every=st.integers(min_value=1, max_value=120))
def test_every_wait_ends_by_its_deadline_naming_what_it_waited_for(limit, every):
    client = Scripted([])
    import labwright.lxd.client as module

    real = module.time.monotonic
    module.time.monotonic = lambda: client.now  # type: ignore[assignment]
    try:
        start = client.now
        with pytest.raises(OperationTimeout) as caught:
            client.wait_operation("/1.0/operations/op1", timeout=limit, every=every, what="@lxd/g1: snapshot s1")
    finally:
        module.time.monotonic = real  # type: ignore[assignment]
    assert client.now - start < limit + 1  # never more than a second past the deadline
    message = str(caught.value)
    assert message.startswith(f"@lxd/g1: snapshot s1 did not finish within {limit} s") and "\n" not in message
    assert all(p["timeout"] >= 1 for _, path, p in client.asked)  # never a busy loop of zero waits


def test_the_default_deadline_bounds_a_wait_given_none(clock):
    client = clock["client"] = Scripted([])
    client.operation_timeout = 90
    with pytest.raises(OperationTimeout, match="LXD operation Snapshotting instance did not finish within 90 s"):
        client.wait_operation("/1.0/operations/op1")


def freezer(tmp_path: Path, name: str = "g1") -> Path:
    path = tmp_path / f"sys/fs/cgroup/freezer/lxc.payload.{name}/freezer.state"
    path.parent.mkdir(parents=True)
    path.write_text("FREEZING\n")
    return path


def backend(client: Scripted, tmp_path: Path, timeout: float = 60) -> LxdSnapshots:
    return LxdSnapshots(parse_host_name("@lxd/g1"), client, snapshot_timeout=timeout,  # type: ignore[arg-type]
                        freezer_root=str(tmp_path))


def stuck_until_frozen_is_written(state: Path):
    """LXD as it was seen: Freezing while liblxc polls a freezer that a task caught mid-fork keeps FREEZING, Frozen
    once FROZEN is written to it again (and the first second of any freeze is Freezing too)."""
    started: list[bool] = []

    def status() -> str:
        if not started:
            started.append(True)
            return "Running"
        return "Frozen" if state.read_text().strip() == "FROZEN" else "Freezing"

    return status


def test_a_freeze_that_hangs_is_asked_again_then_thawed_through_lxd_at_the_deadline(clock, tmp_path):
    state = freezer(tmp_path)
    client = clock["client"] = Scripted([], status=stuck_until_frozen_is_written(state))
    snaps = backend(client, tmp_path, timeout=60)
    with pytest.raises(OperationTimeout) as caught:
        snaps.create("labwright-x-20261127T000000Z", "")
    assert state.read_text() == "FROZEN"  # never THAWED under liblxc's poll: LXD's operation would never end
    assert any("stayed Freezing" in note and "asked again" in note for note in snaps.notes)
    assert ("PUT", "/1.0/instances/g1/state", {"action": "unfreeze", "force": False, "timeout": 30}) in client.asked
    message = str(caught.value)
    assert "did not finish within 60 s" in message and "was Frozen by snapshot" in message and "thawed it" in message
    assert "\n" not in message


def test_a_freeze_left_hanging_at_the_deadline_is_completed_then_thawed(clock, tmp_path):
    state = freezer(tmp_path)
    client = clock["client"] = Scripted([], status=stuck_until_frozen_is_written(state))
    snaps = backend(client, tmp_path, timeout=5)  # the deadline comes before FREEZING_STUCK
    with pytest.raises(OperationTimeout, match="was Freezing by snapshot .*: thawed it"):
        snaps.create("labwright-x-20261127T000000Z", "")
    assert state.read_text() == "FROZEN" and client.unfrozen


def test_a_freeze_that_cannot_be_reached_is_never_thawed_half_way(clock, tmp_path):
    client = clock["client"] = Scripted([], status="Freezing")  # no freezer file: a remote daemon's guest
    with pytest.raises(OperationTimeout, match="cannot be completed from here: on its host write FROZEN"):
        backend(client, tmp_path, timeout=5).create("labwright-x-20261127T000000Z", "")
    assert not client.unfrozen


def test_a_frozen_guest_at_the_deadline_is_unfrozen_through_the_api(clock, tmp_path):
    seen: list[str] = []

    def status() -> str:
        seen.append("x")
        return "Running" if len(seen) == 1 else "Frozen"

    client = clock["client"] = Scripted([], status=status)
    with pytest.raises(OperationTimeout, match="was Frozen by snapshot .* thawed it"):
        backend(client, tmp_path, timeout=5).create("labwright-x-20261127T000000Z", "")
    assert client.unfrozen


def test_a_remote_guest_left_freezing_gets_the_command_for_its_host(clock, tmp_path):
    freezer(tmp_path)  # the path exists here, but the daemon is remote: its guest's cgroup is elsewhere
    client = clock["client"] = Scripted([], status="Freezing")
    client.endpoint = Endpoint(url="https://127.0.0.1:8443")
    snaps = backend(client, tmp_path)
    note = snaps.thaw_left_frozen()
    assert "cannot be completed from here" in note and "freezer.state" in note and "\n" not in note


def test_a_guest_frozen_by_a_running_operation_is_left_to_it(clock, tmp_path):
    client = clock["client"] = Scripted([], status="Frozen")
    client.request = lambda method, path, json_body=None, params=None, wait=True: (  # type: ignore[method-assign]
        {"running": [{"resources": {"instances": ["/1.0/instances/g1"]}}]} if path == "/1.0/operations"
        else {"name": "g1", "status": "Frozen"})
    assert backend(client, tmp_path).thaw_left_frozen() == ""


def test_defaults_are_bounded():
    assert 0 < lxd_snapshots.SNAPSHOT_TIMEOUT <= 3600 and 0 < LxdClient.operation_timeout <= 7200
    assert 0 < lxd_snapshots.FREEZING_STUCK < lxd_snapshots.SNAPSHOT_TIMEOUT


@pytest.mark.parametrize("status, running_ops, needles", [
    ("Running", [], []),
    ("Stopped", [], []),
    ("Frozen", [], ["Frozen with no LXD operation on it", "`lxc start g1` thaws it"]),
    ("Freezing", [{"description": "Snapshotting instance", "resources": {"instances": ["/1.0/instances/g1"]}}],
     ["Freezing by LXD's running Snapshotting instance", "until it ends"]),
    ("Frozen", [{"description": "Snapshotting instance", "resources": {"instances": ["/1.0/instances/other"]}}],
     ["Frozen with no LXD operation on it"]),
])
def test_freeze_note_says_what_holds_a_guest_and_how_to_thaw_it(status, running_ops, needles):
    client = Scripted([])
    client.request = lambda method, path, json_body=None, params=None, wait=True: (  # type: ignore[method-assign]
        {"running": running_ops} if path == "/1.0/operations" else None)
    note = lxd_snapshots.freeze_note(client, "g1", status)
    assert (note == "") == (not needles)
    assert all(n in note for n in needles) and "\n" not in note


# A daemon's nonsense in an operation's answer (the parser fuzz at 77a5710): a status_code that is no number, and
# metadata that is no object, were a ValueError/TypeError/AttributeError out of wait_operation; each is an LxdError
# naming the operation now. Generated: whatever the metadata holds, the wait ends in its answer or an LxdError.
@pytest.mark.parametrize("meta", [{"status_code": "x"}, {"status_code": [1]}, {"status_code": float("inf")},
                                  {"status_code": True}, ["a"], "text", 7])
def test_an_operation_answer_that_is_no_operation_is_an_lxd_error(meta):
    client = Scripted([meta])
    with pytest.raises(LxdError, match="operation /1.0/operations/op1"):
        client.wait_operation("/1.0/operations/op1", timeout=5)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=12), c, max_size=3),
                    max_leaves=8)
       | st.fixed_dictionaries({"status_code": st.integers(-10, 600) | st.floats() | st.text(max_size=3)}))
def test_any_operation_metadata_ends_in_its_answer_or_an_lxd_error(meta):
    client = Scripted([meta, {"status_code": 200}])
    try:
        answer = client.wait_operation("/1.0/operations/op1", timeout=5)
    except (LxdError, OperationTimeout):
        return
    assert isinstance(answer, dict) and answer.get("status_code") == 200


@pytest.mark.parametrize("doc", [{"type": "async"}, {"type": "async", "operation": 5},
                                 {"type": "async", "operation": "elsewhere"}])
def test_an_async_answer_without_its_operation_is_an_lxd_error(doc):
    from labwright.lxd.client import _operation_path

    with pytest.raises(LxdError, match="async operation without its path"):
        _operation_path(doc, "POST /1.0/instances", "LXD")
    assert _operation_path({"operation": "/1.0/operations/1a2b"}, "POST /1.0/instances", "LXD") == \
        "/1.0/operations/1a2b"
