"""Always serving on LXD's ``dir`` pool: a stack switch never freezes the guest for a snapshot copy, a copy that is
required says its cost first, and no freeze outlives its snapshot.

On ``dir`` a snapshot of a running container is a full copy (rsync) with the container frozen for all of it
(canonical/lxd lxd/storage/drivers/driver_dir.go ``RunningCopyFreeze: true``): measured 27-86 s without answers
with a 900 MB stack. The test lab's own pool is btrfs, so these tests put their guest on a ``dir`` pool beside it
(``Lab.extra_pool``), as most users without ZFS or btrfs have it. /health is polled from the host every 10 ms
through the whole switch; any window over 0.5 s without an answer fails.
"""

from __future__ import annotations

import pytest

from labwright import snapshots
from labwright.errors import OperationTimeout
from labwright.guests.lxd import LxdBackend
from labwright.guests.model import spec_from_data
from labwright.hostnames import parse_host_name
from labwright.lab import lab as lab_ops
from labwright.snapshots.lxd import LxdSnapshots
from labwright.testing.lab_fixture import TEMPLATE, Lab
from labwright.testing.pyinfra_output import pyinfra_totals
from labwright.testing.waiting import wait_for
from support.health_poll import Poller
from support.stack_service import StandinService
from support.stacks import StandinStacks, build_standin_stacks

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

MAX_GAP = 0.5


@pytest.fixture(scope="module")
def stacks(tmp_path_factory) -> StandinStacks:
    return build_standin_stacks(tmp_path_factory.mktemp("standin"))


@pytest.fixture(scope="module")
def dir_guest(lab: Lab) -> str:
    pool = lab.extra_pool("dir")
    name = lab.fresh("lwdir", pool=pool)
    yield name
    wait_for(f"LXD operations on {name} to end", lambda: not LxdSnapshots(
        parse_host_name(f"@lxd/{name}"), lab.client)._operations_on(), timeout=300, every=0.5)  # type: ignore[arg-type]
    lab.remove(name)


@pytest.fixture(scope="module")
def service(lab: Lab, dir_guest: str, stacks: StandinStacks) -> StandinService:
    assert lab.client.instance(dir_guest)["expanded_devices"]["root"]["pool"] == f"{lab.spec.pool}-dir"
    service = StandinService(lab.client, dir_guest, stacks)
    service.push_wheelhouse()
    service.install("standin-2.9")
    return service


def snapshot_names(lab: Lab, name: str) -> list[str]:
    return [str(s["name"]) for s in lab.client.request("GET", f"/1.0/instances/{name}/snapshots",
                                                       params={"recursion": 1}) or []]


def test_a_switch_on_a_dir_pool_never_stops_answering_and_says_why_there_is_no_snapshot(lab, service):
    with Poller(service.health_url) as poller:
        poller.wait_healthy(30)
        run = service.deploy(stack="standin-2.10")
        poller.wait_healthy(30)
    assert run.rc == 0, run.output[-3000:]
    assert pyinfra_totals(run.output).changed == 1
    assert service.health()[1]["torch"] == "2.10.0"
    gaps = poller.outages()
    assert max((seconds for _, seconds in gaps), default=0.0) <= MAX_GAP, (gaps, run.output[-2000:])
    assert len(poller.samples) > 100  # it really polled through the switch
    line = next(line for line in run.output.splitlines() if "no snapshot before stack-switch" in line)
    assert f"pool {lab.spec.pool}-dir (dir)" in line and "frozen" in line and "venv beside the new one" in line
    assert "snapshot_required: true" in line
    assert not [n for n in snapshot_names(lab, service.name) if n.startswith("labwright-")]


def test_snapshot_required_takes_the_copy_saying_its_size_and_downtime_first(lab, service):
    run = service.deploy(stack="standin-2.9", snapshot_required="true")
    assert run.rc == 0, run.output[-3000:]
    lines = run.output.splitlines()
    said = next(i for i, line in enumerate(lines) if "with the guest frozen" in line)
    taken = next(i for i, line in enumerate(lines) if "taken before stack-switch in" in line)
    assert said < taken, run.output[-3000:]
    assert " MB " in lines[said] or " GB " in lines[said]  # the size of the copy, measured in the guest
    assert [n for n in snapshot_names(lab, service.name) if n.startswith("labwright-stack-switch-")]
    assert service.health()[1]["torch"] == "2.9.0"


def test_a_guest_left_frozen_is_thawed_before_the_next_snapshot_and_said(lab, service):
    lab.client.set_state(service.name, "freeze")
    assert lab.client.instance(service.name)["status"] == "Frozen"
    # `lab status` and `guest show` say it, and how to thaw it
    row = next(r for r in lab_ops.status(lab.spec, lab.client) if r.name == service.name)
    assert row.state.startswith("Frozen") and "with no LXD operation on it" in row.note
    assert f"`lxc start {service.name}` thaws it" in row.note
    spec = spec_from_data(f"@lxd/{service.name}", {"backend": "lxd", "clone": TEMPLATE, "profiles": ["lwtest"]})
    shown = LxdBackend(lab.client).show(spec)
    assert shown["status"] == "Frozen" and any("Frozen with no LXD operation" in w for w in shown["warnings"])
    result = snapshots.take(f"@lxd/{service.name}", "left-frozen")
    assert lab.client.instance(service.name)["status"] == "Running"
    assert any("was Frozen with no LXD operation on it" in w and "thawed it" in w for w in result.warnings), \
        result.warnings
    assert service.health()[0] == 200


def test_a_snapshot_past_its_deadline_thaws_the_guest_and_names_what_it_waited_for(lab, service):
    backend = LxdSnapshots(parse_host_name(f"@lxd/{service.name}"), lab.client,  # type: ignore[arg-type]
                           snapshot_timeout=1)
    with pytest.raises(OperationTimeout) as caught:
        backend.create("labwright-deadline-20261127T000000Z", "")
    message = str(caught.value)
    assert f"@lxd/{service.name}: snapshot labwright-deadline-20261127T000000Z did not finish within 1 s" in message
    assert "thawed it" in message and "\n" not in message
    # LXD goes on copying, but the guest answers again at once.
    assert lab.client.instance(service.name)["status"] == "Running"
    assert service.wait_healthy(5)
