"""Lab.copy_instance and Lab.start_new (labwright.testing.lab_fixture): a copy whose source walk LXD failed for a
moment is made again, once, after what the first try left is removed; a start whose rootfs shift failed removes the
container for the caller to make it again (never started twice); every other failure is raised as LXD said it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labwright.errors import LxdError
from labwright.testing.lab_fixture import COPY_WALK_FAILED, SHIFT_WALK_FAILED, Lab

SEEN = ("operation Creating instance: Create instance from copy: readdirent /var/lib/lxd/storage-pools/lwtest/"
        "containers/lwsf210base-78856c/rootfs/usr/share/doc: bad file descriptor")


class Daemon:
    """Answers create_instance with the given errors in turn (None: made), keeps what it made."""

    def __init__(self, *errors: str | None) -> None:
        self.errors, self.made, self.deleted = list(errors), set(), []
        self.start_errors: list[str] = []
        self.started: list[str] = []

    def create_instance(self, spec: dict[str, Any]) -> None:
        self.made.add(spec["name"])  # LXD records the instance before the copy fails
        error = self.errors.pop(0) if self.errors else None
        if error:
            raise LxdError(error)

    def instance_or_none(self, name: str) -> dict[str, Any] | None:
        return {"status": "Stopped"} if name in self.made else None

    def set_state(self, name: str, action: str) -> None:
        error = self.start_errors.pop(0) if self.start_errors else None
        if error:
            raise LxdError(error)
        self.started.append(name)

    def delete_instance(self, name: str) -> None:
        self.made.discard(name)
        self.deleted.append(name)


def lab(daemon: Daemon) -> Lab:
    # copy_instance reads no spec: the lab's own is not needed here
    return Lab(spec=None, client=daemon, public_key="", private_key_path="")  # type: ignore[arg-type]


SPEC = {"name": "lwsf-abc123", "type": "container", "source": {"type": "copy", "source": "lwsf210base-78856c"}}


def test_the_walk_that_failed_in_ci_is_copied_again_once():
    daemon = Daemon(SEEN, None)
    lab(daemon).copy_instance(dict(SPEC))
    assert daemon.deleted == ["lwsf-abc123"] and daemon.made == {"lwsf-abc123"}


def test_a_second_walk_failure_is_raised():
    daemon = Daemon(SEEN, SEEN)
    with pytest.raises(LxdError, match="bad file descriptor"):
        lab(daemon).copy_instance(dict(SPEC))


@given(text=st.sampled_from([
    "operation Creating instance: Failed creating instance record: Instance \"x\" already exists",
    "operation Creating instance: Create instance from copy: Failed to run: btrfs subvolume snapshot: exit status 1",
    "operation Creating instance: No storage pool found",
    "Create instance from copy: readdirent /x: permission denied",
]) | st.text(max_size=80).filter(lambda t: not COPY_WALK_FAILED.search(t)))
def test_any_other_failure_is_raised_as_it_is_and_nothing_is_removed(text):
    daemon = Daemon(text or "x")
    with pytest.raises(LxdError):
        lab(daemon).copy_instance(dict(SPEC))
    assert daemon.deleted == []


SHIFT = ("operation Starting instance: Failed to handle idmapped storage: Failed to change ownership of: /var/lib/lxd/"
         "storage-pools/lwtest/containers/lwvk-ae8902/rootfs/usr/lib/python3.13/encodings/__pycache__/"
         "shift_jis.cpython-313.pyc")


def test_a_failed_shift_removes_the_container_for_the_caller_to_make_again():
    daemon = Daemon()
    daemon.made.add("lwvk-ae8902")
    daemon.start_errors = [SHIFT]
    assert SHIFT_WALK_FAILED.search(SHIFT)
    assert lab(daemon).start_new("lwvk-ae8902", last=False) is False
    assert daemon.deleted == ["lwvk-ae8902"] and daemon.started == []
    daemon.made.add("lwvk-ae8902")  # made again by the caller
    assert lab(daemon).start_new("lwvk-ae8902") is True and daemon.started == ["lwvk-ae8902"]


def test_the_last_try_or_another_start_failure_is_raised_and_nothing_removed():
    for error, last in ((SHIFT, True), ("operation Starting instance: Failed to run: forkstart", False)):
        daemon = Daemon()
        daemon.made.add("lwt-1")
        daemon.start_errors = [error]
        with pytest.raises(LxdError):
            lab(daemon).start_new("lwt-1", last=last)
        assert daemon.deleted == []
