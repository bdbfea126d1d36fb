"""Lab.copy_instance (labwright.testing.lab_fixture): a copy whose source walk LXD failed for a moment is made again,
once, after what the first try left is removed; every other failure of a copy is raised as LXD said it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labwright.errors import LxdError
from labwright.testing.lab_fixture import COPY_WALK_FAILED, Lab

SEEN = ("operation Creating instance: Create instance from copy: readdirent /var/lib/lxd/storage-pools/lwtest/"
        "containers/lwsf210base-78856c/rootfs/usr/share/doc: bad file descriptor")


class Daemon:
    """Answers create_instance with the given errors in turn (None: made), keeps what it made."""

    def __init__(self, *errors: str | None) -> None:
        self.errors, self.made, self.deleted = list(errors), set(), []

    def create_instance(self, spec: dict[str, Any]) -> None:
        self.made.add(spec["name"])  # LXD records the instance before the copy fails
        error = self.errors.pop(0) if self.errors else None
        if error:
            raise LxdError(error)

    def instance_or_none(self, name: str) -> dict[str, Any] | None:
        return {"status": "Stopped"} if name in self.made else None

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
