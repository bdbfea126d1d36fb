"""What `lab up` asks LXD for: an explicit bridge subnet, our own pool and profile, marked as ours."""

from __future__ import annotations

import json

import pytest

from labwright.errors import OperationFailed
from labwright.lab.lab import _differs, check_disk, render_preseed, wanted_objects
from labwright.lab.spec import spec_from_group


@pytest.fixture
def spec():
    return spec_from_group(["@lxd/a"], {"lab_name": "t", "lab_subnet": "10.99.3.1/24", "lab_bridge": "tbr0"})


def test_preseed_has_explicit_subnet_and_markers(spec):
    doc = json.loads(render_preseed(wanted_objects(spec)))
    (network,) = doc["networks"]
    assert network["config"]["ipv4.address"] == "10.99.3.1/24"
    assert network["config"]["ipv6.address"] == "none"
    assert network["description"] == "labwright lab t"
    (profile,) = doc["profiles"]
    assert profile["devices"]["eth0"]["network"] == "tbr0"
    assert profile["devices"]["root"]["pool"] == doc["storage_pools"][0]["name"]


def test_differs_compares_as_lxd_returns_strings(spec):
    wanted = wanted_objects(spec)["profiles"]
    current = json.loads(json.dumps(wanted))
    current["config"]["limits.cpu"] = "2"
    current["devices"]["root"] = {"type": "disk", "pool": "labwright", "path": "/"}  # other key order
    current["used_by"] = ["/1.0/instances/a"]
    assert not _differs(current, wanted)
    current["config"]["limits.memory"] = "4GiB"
    assert _differs(current, wanted)


def test_check_disk_refuses_a_full_filesystem(tmp_path):
    with pytest.raises(OperationFailed, match="no disk space"):
        check_disk(str(tmp_path), need=10**18)
    check_disk(str(tmp_path), need=1)
