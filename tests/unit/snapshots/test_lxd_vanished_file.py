"""A btrfs snapshot of a running LXD guest refused because a file vanished while LXD walked the tree is asked for
again (LxdSnapshots.create); any other refusal, or the same one every time, goes up as it was."""

from __future__ import annotations

import pytest

from labwright.errors import LxdError
from labwright.hostnames import parse_host_name
from labwright.snapshots.lxd import VANISHED_FILE_TRIES, LxdSnapshots

# as LXD 5.0.2 worded it on the lab's btrfs pool (a real run of test_host_upgrade_node.py, the guest's dhclient)
VANISHED = ("operation Snapshotting instance: Create instance snapshot: lstat /var/lib/lxd/storage-pools/lwtest/"
            "containers/lwhu-ea57ce/rootfs/etc/resolv.conf.dhclient-new.106: no such file or directory")


class Client:
    """LXD as LxdSnapshots.create meets it: the POST starts an operation; the operation's wait says how it ended."""

    def __init__(self, failures: list[str]):
        self.failures = failures
        self.posts: list[dict] = []

    def instance(self, name):
        return {"name": name, "status": "Running"}

    def request(self, method, path, body=None, params=None, wait=True):
        if (method, path) == ("GET", "/1.0/operations"):
            return {"running": []}
        assert (method, path, wait) == ("POST", "/1.0/instances/g1/snapshots", False), (method, path, wait)
        self.posts.append(body)
        return {"id": f"op{len(self.posts)}"}

    def wait_operation(self, operation, **options):
        assert operation == f"/1.0/operations/op{len(self.posts)}" and options["timeout"] > 0
        if self.failures:
            raise LxdError(self.failures.pop(0))
        return {"status_code": 200}


def backend(client: Client) -> LxdSnapshots:
    return LxdSnapshots(parse_host_name("@lxd/g1"), client)  # type: ignore[arg-type]


def test_a_file_that_vanished_during_the_walk_is_asked_again():
    client = Client([VANISHED])
    backend(client).create("labwright-x", "x")
    assert client.posts == [{"name": "labwright-x", "stateful": False}] * 2


def test_the_same_refusal_every_time_goes_up_after_the_last_try():
    client = Client([VANISHED] * VANISHED_FILE_TRIES)
    with pytest.raises(LxdError, match="no such file or directory"):
        backend(client).create("labwright-x", "x")
    assert len(client.posts) == VANISHED_FILE_TRIES


@pytest.mark.parametrize("refusal", [
    "operation Snapshotting instance: Failed creating instance snapshot record: Snapshot already exists",
    "operation Snapshotting instance: Create instance snapshot: no space left on device",
    "POST /1.0/instances/g1/snapshots: Instance not found",
])
def test_any_other_refusal_is_not_asked_again(refusal):
    client = Client([refusal])
    with pytest.raises(LxdError, match=refusal.split(": ")[-1]):
        backend(client).create("labwright-x", "x")
    assert len(client.posts) == 1
