"""The scoped Proxmox role (labwright.guests.pve_role.LabwrightDeploy) on the PVE simulator: an API token holding
exactly its privileges runs every API call labwright makes (a container made, changed, stopped and started, its
snapshots taken, pruned and rolled back, destroyed; a VM with its GPU by PCI mapping made and destroyed), and a token
missing any one of them is stopped at the first call that needs it, in one line naming that privilege.

The simulator checks what PVE checks: each endpoint's ``permissions`` from PVE's API schema, and the handlers'
per-option checks ported from pve-container (``check_ct_modify_config_perm``), qemu-server
(``check_vm_modify_config_perm``, ``check_hostpci_perm``) and pve-guest-common (``check_vnet_access``); see
tests/support/pve_perms.py. Nothing is mocked between labwright and the simulator.
"""

from __future__ import annotations

import pytest

from labwright import snapshots
from labwright.errors import LabwrightError
from labwright.guests.base import backend_for
from labwright.guests.model import spec_from_data
from labwright.guests.pve_role import PRIVILEGES, ROLE, pveum_commands
from support.gpu_host import TreePveNode
from support.pve_qemu import gpu_host_pci
from support.pve_simulator import PveSimulator, SimNode

TOKEN_ID, TOKEN_SECRET = "labwright@pve!deploy", "4d3c2b1a-0f9e-4d8c-b7a6-951840372615"
ROLE_PRIVILEGES = frozenset(PRIVILEGES)


@pytest.fixture
def sim(tmp_path):
    with PveSimulator(nodes=[SimNode("pve1", "8.2.4", pci=gpu_host_pci())], tokens={TOKEN_ID: TOKEN_SECRET},
                      privileges={TOKEN_ID: ROLE_PRIVILEGES}, task_seconds=0.01) as simulator:
        (tmp_path / "node" / "etc").mkdir(parents=True)
        (tmp_path / "node" / "etc" / "pve").symlink_to(simulator.pmxcfs)
        simulator.cluster.pci_mappings["rtx4090"] = {"pve1": "0000:01:00"}
        yield simulator


@pytest.fixture(autouse=True)
def as_token(monkeypatch):
    monkeypatch.delenv("PROXMOX_USER", raising=False)
    monkeypatch.delenv("PROXMOX_PASSWORD", raising=False)
    monkeypatch.setenv("PROXMOX_TOKEN_ID", TOKEN_ID)
    monkeypatch.setenv("PROXMOX_TOKEN_SECRET", TOKEN_SECRET)


def node_data(sim):
    return {"proxmox_api_url": f"https://{sim.host}", "proxmox_ca_file": str(sim.ca_file)}


def container(sim, **fields):
    data = {"backend": "proxmox", "node": "pve1", "vmid": 201, "hostname": "llm1", "template": sim.template,
            "memory": "4G", "cores": 4, "rootfs": "local-lvm:16", "net": {"name": "eth0", "bridge": "vmbr0"},
            "features": {"nesting": True}, "onboot": True, **fields}
    return spec_from_data("@pct/pve1/201", data, source="lab.py", node_data=node_data(sim))


def vm(sim):
    data = {"backend": "proxmox", "kind": "vm", "node": "pve1", "vmid": 120, "memory": "16G", "cores": 8,
            "disk": "local-lvm:64", "net": {"bridge": "vmbr0"}, "ostype": "l26",
            "hostpci": {"mapping": "rtx4090", "x-vga": True}}
    return spec_from_data("gpu-vm", data, source="lab.py", node_data=node_data(sim))


def every_call(sim, tmp_path) -> None:
    """The API calls labwright makes, in the order a lab's life makes them."""
    node = TreePveNode(tmp_path / "node", label="node pve1")
    ct = container(sim)
    pve = backend_for(ct, pve_node=node, poll_interval=0.01)
    assert pve.plan(ct).action == "create"
    pve.apply(ct)
    bigger = container(sim, memory="6G", cores=6)
    pve.apply(bigger)
    assert sim.config("pve1", 201).options["memory"] == "6144"
    first = snapshots.take("@pct/pve1/201", "role-check", keep=1, node_data=node_data(sim), poll_interval=0.01)
    second = snapshots.take("@pct/pve1/201", "role-check", keep=1, node_data=node_data(sim), poll_interval=0.01)
    assert second.pruned == [first.name]
    assert [s.name for s in snapshots.list_snapshots("@pct/pve1/201", node_data=node_data(sim))] == [second.name]
    snapshots.restore("@pct/pve1/201", force=True, node_data=node_data(sim), poll_interval=0.01)
    pve.stop(bigger)
    pve.start(bigger)
    pve.destroy(bigger)

    machine = vm(sim)
    vms = backend_for(machine, pve_node=node, poll_interval=0.01)
    vms.apply(machine)
    assert sim.vm_config("pve1", 120).options["hostpci0"].startswith("mapping=rtx4090")
    vms.destroy(machine)


def test_the_role_alone_runs_every_call_labwright_makes(sim, tmp_path):
    every_call(sim, tmp_path)
    assert sim.writes and all(w.user == TOKEN_ID for w in sim.writes)
    assert sim.cluster.locate(201) is None and sim.cluster.locate_guest(120) is None  # made and gone again


@pytest.mark.parametrize("privilege", sorted(PRIVILEGES))
def test_a_missing_privilege_is_one_line_naming_it(sim, tmp_path, privilege):
    """Each privilege of the role is needed (removing it stops the run), and the stop says which, where, and how to
    give it, in one line."""
    sim.cluster.principals[TOKEN_ID].privileges = ROLE_PRIVILEGES - {privilege}
    with pytest.raises(LabwrightError) as stopped:
        every_call(sim, tmp_path)
    message = str(stopped.value)
    assert "\n" not in message and privilege in message, message
    assert "the Proxmox credentials lack" in message and "(403)" in message, message
    assert f"-role {ROLE}" in message, message


def test_the_documented_commands_make_exactly_the_role():
    role = pveum_commands()[0]
    assert role.startswith(f"pveum role add {ROLE} -privs ")
    assert set(role.split('"')[1].split(",")) == ROLE_PRIVILEGES
    # what a check of any of several lets the role leave out
    assert not {"Datastore.Audit", "VM.Snapshot.Rollback", "Sys.Audit", "Sys.Modify"} & ROLE_PRIVILEGES
