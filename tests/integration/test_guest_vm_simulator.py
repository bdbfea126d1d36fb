"""`kind: vm` guests (Proxmox qemu VMs with PCI passthrough) against the PVE simulator: real proxmoxer over
verified HTTPS on 127.0.0.1, every request checked against PVE's API schema, and the ``labwright guest`` CLI
as a user runs it. Nothing is mocked between the backend and the simulator; every test asserts on what the
simulator stored (the VM's pmxcfs config file, its volumes, running VMs) or recorded (``sim.writes``).

The node's PCI devices are ``support.pve_qemu.gpu_host_pci()``: an RTX 4090 and its audio function alone in
IOMMU group 12, or (``shared_with``) sharing it with a USB controller, as on boards without ACS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from labwright.errors import BadInput, OperationFailed, SafetyCheckFailed
from labwright.guests.base import backend_for
from labwright.guests.model import Change, spec_from_data
from support.gpu_host import TreePveNode
from support.pve_qemu import gpu_host_pci
from support.pve_simulator import PveSimulator, SimNode

TOKEN_ID, TOKEN_SECRET = "root@pam!labwright", "0b6f4c1e-2d3a-4e5f-8a9b-c0d1e2f3a4b5"
USB = {"id": "0000:00:14.0", "class": "0x0c0330", "vendor": "0x8086", "device": "0x7ae0",
       "vendor_name": "Intel Corporation", "device_name": "USB 3.2 xHCI Controller"}


@pytest.fixture
def sim(tmp_path):
    nodes = [SimNode("pve1", "8.2.4", pci=gpu_host_pci()), SimNode("pve2", "8.2.4", pci=gpu_host_pci([USB])),
             SimNode("pve3", "8.2.4", pci=gpu_host_pci(iommu=False))]
    with PveSimulator(nodes=nodes, tokens={TOKEN_ID: TOKEN_SECRET}, task_seconds=0.01) as simulator:
        (tmp_path / "node" / "etc").mkdir(parents=True)
        (tmp_path / "node" / "etc" / "pve").symlink_to(simulator.pmxcfs)  # /etc/pve on the node is pmxcfs
        yield simulator


@pytest.fixture
def as_root(monkeypatch, sim):
    monkeypatch.delenv("PROXMOX_TOKEN_ID", raising=False)
    monkeypatch.setenv("PROXMOX_USER", "root@pam")
    monkeypatch.setenv("PROXMOX_PASSWORD", sim.root_password)


@pytest.fixture
def as_token(monkeypatch):
    monkeypatch.delenv("PROXMOX_USER", raising=False)
    monkeypatch.setenv("PROXMOX_TOKEN_ID", TOKEN_ID)
    monkeypatch.setenv("PROXMOX_TOKEN_SECRET", TOKEN_SECRET)


def node_data(sim, **extra):
    return {"proxmox_api_url": f"https://{sim.host}", "proxmox_ca_file": str(sim.ca_file), **extra}


def guest(sim, node="pve1", vmid=120, name="win1", extra_node_data=None, **fields):
    data = {"backend": "proxmox", "kind": "vm", "node": node, "vmid": vmid, "memory": "16G", "cores": 8,
            "disk": "local-lvm:64", "net": {"bridge": "vmbr0"}, "ostype": "win11",
            "hostpci": {"host": "0000:01:00", "x-vga": True}, **fields}
    data = {k: v for k, v in data.items() if v is not None}
    return spec_from_data(name, data, source="lab.py", node_data=node_data(sim, **(extra_node_data or {})))


def backend(spec, tmp_path):
    return backend_for(spec, pve_node=TreePveNode(tmp_path / "node", label=f"node {spec.node}"), poll_interval=0.01)


def test_vm_created_with_gpu_passthrough_and_a_second_apply_changes_nothing(sim, tmp_path, as_root):
    spec = guest(sim)
    pve = backend(spec, tmp_path)
    plan = pve.plan(spec)
    assert plan.action == "create" and sim.writes == []  # plan only reads
    assert "hostpci0: 0000:01:00,pcie=1,x-vga=1" in plan.config_lines
    assert plan.config_lines[:2] == ["scsi0: local-lvm:64,discard=on,iothread=1,ssd=1",
                                     "efidisk0: local-lvm:1,efitype=4m,pre-enrolled-keys=0"]
    assert "IOMMU group 12 on pve1: 0000:01:00.0, 0000:01:00.1 (passed whole)" in plan.notes
    pve.apply(spec)
    config = sim.vm_config("pve1", 120).options
    assert config["hostpci0"] == "0000:01:00,pcie=1,x-vga=1"
    assert (config["bios"], config["machine"], config["ostype"]) == ("ovmf", "pc-q35-10.0+pve1", "win11")
    assert (config["cores"], config["memory"], config["tags"], config["name"]) == ("8", "16384", "labwright", "win1")
    assert config["scsi0"] == "local-lvm:vm-120-disk-1,discard=on,iothread=1,size=64G,ssd=1"
    assert config["efidisk0"].startswith("local-lvm:vm-120-disk-0,efitype=4m,pre-enrolled-keys=0,size=")
    assert config["net0"].startswith("virtio=BC:24:11:") and config["net0"].endswith(",bridge=vmbr0")
    assert sim.is_running(120)
    assert [w.path for w in sim.writes] == ["/nodes/pve1/qemu", "/nodes/pve1/qemu/120/status/start"]

    writes = len(sim.writes)
    assert pve.plan(spec).action == "none" and pve.apply(spec) == []
    assert len(sim.writes) == writes  # idempotent: no write at all


def test_plan_shows_the_diff_and_apply_makes_it_pending_on_a_running_vm(sim, tmp_path, as_root):
    pve = backend(guest(sim), tmp_path)
    pve.apply(guest(sim))
    mac = sim.vm_config("pve1", 120).options["net0"].split(",")[0].split("=")[1]
    changed = guest(sim, cores=4, hostpci=[{"host": "0000:01:00", "x-vga": True}, {"host": "0000:03:00.0"}],
                    net={"bridge": "vmbr0", "vlan": 30})
    plan = pve.plan(changed)
    assert plan.action == "update" and [c.describe() for c in plan.changes] == [
        "~ config cores: 8 -> 4", f"~ config net0: virtio={mac},bridge=vmbr0 -> virtio={mac},bridge=vmbr0,tag=30",
        "+ config hostpci1: 0000:03:00.0,pcie=1"]
    assert any("take(s) effect when VM 120 is stopped and started again" in n for n in plan.notes)
    pve.apply(changed)
    pending = {row["key"]: row for row in sim.api.qemu.pending("pve1", 120)}
    assert pending["cores"]["value"] == "8" and pending["cores"]["pending"] == "4"  # PVE keeps hardware pending
    assert pending["hostpci1"]["pending"] == "0000:03:00.0,pcie=1"
    assert pve.plan(changed).action == "none"  # GET config shows pending values: nothing left to send

    dropped = guest(sim, cores=4, net={"bridge": "vmbr0", "vlan": 30})
    assert [c.describe() for c in pve.plan(dropped).changes] == ["- config hostpci1: 0000:03:00.0,pcie=1"]


def test_a_device_sharing_its_iommu_group_is_refused_and_nothing_is_created(sim, tmp_path, as_root):
    spec = guest(sim, node="pve2")
    with pytest.raises(BadInput) as info:
        backend(spec, tmp_path).apply(spec)
    message = str(info.value)
    assert "hostpci[0] 0000:01:00.0 is in IOMMU group 12 with 0000:00:14.0 (USB 3.2 xHCI Controller)" in message
    assert "Pass the whole group" in message and "\n" not in message
    assert sim.writes == [] and not sim.vm_conf_path("pve2", 120).exists()
    whole = guest(sim, node="pve2", hostpci=[{"host": "0000:01:00", "x-vga": True}, {"host": "0000:00:14.0"}])
    backend(whole, tmp_path).apply(whole)
    assert sim.vm_config("pve2", 120).options["hostpci1"] == "0000:00:14.0,pcie=1" and sim.is_running(120)


@pytest.mark.parametrize("node, fields, needle", [
    ("pve3", {}, "reports no IOMMU group (iommugroup -1: the IOMMU is off)"),
    ("pve1", {"hostpci": {"host": "0000:0a:00"}}, "0000:0a:00: node pve1 has no such PCI device"),
    ("pve1", {"disk": "local:64"}, "storage 'local' on pve1 does not exist or holds no VM disks"),
    ("pve9", {}, "node 'pve9' is not in the Proxmox cluster"),
])
def test_bad_input_is_one_line_and_nothing_is_sent(sim, tmp_path, as_root, node, fields, needle):
    spec = guest(sim, node=node, **fields)
    with pytest.raises(BadInput) as info:
        backend(spec, tmp_path).apply(spec)
    assert needle in str(info.value) and "\n" not in str(info.value)
    assert sim.writes == []


def test_a_vmid_taken_by_a_container_is_refused(sim, tmp_path, as_root):
    sim.cluster.conf_path("pve1", 120).write_text("hostname: ct120\nmemory: 512\n")
    with pytest.raises(BadInput, match="vmid 120 is already a container on node pve1; pick a free vmid"):
        backend(guest(sim), tmp_path).plan(guest(sim))


def test_a_token_may_pass_a_mapping_but_not_an_address(sim, tmp_path, as_token):
    spec = guest(sim)
    with pytest.raises(BadInput) as info:
        backend(spec, tmp_path).apply(spec)
    message = str(info.value)
    assert "hostpci0 (a PCI device by address) can only be set by root@pam" in message
    assert "root@pam!labwright is an API token" in message and '{"mapping": "ID"}' in message
    assert 'proxmox_root_via: "ssh"' in message and sim.writes == []

    sim.cluster.pci_mappings["rtx4090"] = {"pve1": "0000:01:00"}
    mapped = guest(sim, hostpci={"mapping": "rtx4090", "x-vga": True})
    backend(mapped, tmp_path).apply(mapped)
    assert sim.vm_config("pve1", 120).options["hostpci0"] == "mapping=rtx4090,pcie=1,x-vga=1"
    assert sim.is_running(120) and all(w.user == TOKEN_ID for w in sim.writes)
    detached = guest(sim, hostpci=None, bios="ovmf", machine="q35")  # a mapped device may be detached by the token
    backend(detached, tmp_path).apply(detached)
    assert sim.vm_config("pve1", 120).pending_delete == ["hostpci0"]  # running: PVE detaches it at the next start


def test_a_token_with_root_via_ssh_writes_the_device_line_into_the_config_file(sim, tmp_path, as_token):
    spec = guest(sim, extra_node_data={"proxmox_root_via": "ssh"})
    pve = backend(spec, tmp_path)
    plan = pve.plan(spec)
    assert any(n.startswith("written over SSH into /etc/pve/nodes/pve1/qemu-server/120.conf: hostpci0")
               for n in plan.notes)
    pve.apply(spec)
    create = next(w for w in sim.writes if w.path == "/nodes/pve1/qemu")
    assert "hostpci0" not in create.params  # PVE would refuse it to the token
    assert sim.vm_config("pve1", 120).options["hostpci0"] == "0000:01:00,pcie=1,x-vga=1" and sim.is_running(120)
    assert pve.plan(spec).action == "none"


def test_a_failed_start_removes_the_half_made_vm(sim, tmp_path, as_root):
    backend(guest(sim), tmp_path).apply(guest(sim))
    second = guest(sim, vmid=121, name="win2")
    with pytest.raises(OperationFailed) as info:
        backend(second, tmp_path).apply(second)
    assert "PCI device '0000:01:00.0' already in use by VMID '120'" in str(info.value)
    assert not sim.vm_conf_path("pve1", 121).exists()
    assert not any("vm-121-" in volume for volume in sim.cluster.storages["local-lvm"].volumes)


def test_destroy_stops_and_removes_only_a_labwright_vm(sim, tmp_path, as_root):
    spec = guest(sim)
    pve = backend(spec, tmp_path)
    pve.apply(spec)
    assert pve.destroy(spec) == [Change("vm", "VM 120", None)]
    assert not sim.vm_conf_path("pve1", 120).exists() and not sim.is_running(120)
    assert not any("vm-120-" in volume for volume in sim.cluster.storages["local-lvm"].volumes)
    assert pve.destroy(spec) == []
    sim.vm_conf_path("pve1", 122).write_text("name: hand-made\nmemory: 1024\n")
    foreign = guest(sim, vmid=122, name="hand-made")
    with pytest.raises(SafetyCheckFailed, match="VM 122 on pve1 was not made by labwright"):
        pve.destroy(foreign)
    assert sim.vm_conf_path("pve1", 122).exists()


# --- the CLI -------------------------------------------------------------------------------------------------
def lw(env, *args):
    return subprocess.run([sys.executable, "-m", "labwright", "guest", *args], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture
def cli(sim, tmp_path):
    env = {**os.environ, "PROXMOX_USER": "root@pam", "PROXMOX_PASSWORD": sim.root_password}
    env.pop("PROXMOX_TOKEN_ID", None)

    def inventory(node="pve1", **fields):
        data = {"backend": "proxmox", "kind": "vm", "node": node, "vmid": 130, "memory": "8G", "cores": 4,
                "disk": "local-lvm:32", "net": {"bridge": "vmbr0"}, "ostype": "l26",
                "hostpci": {"host": "0000:01:00"}, **fields}
        path = tmp_path / "lab.py"
        path.write_text(textwrap.dedent(f"""
            nodes = [("{node}", {node_data(sim)!r})]
            vms = [("llmvm", {{"guest": {data!r}}})]
            """))
        return str(path)

    return env, inventory


def test_cli_plan_apply_show_destroy_a_vm(sim, cli):
    env, inventory = cli
    inv = inventory()
    planned = lw(env, "plan", "-i", inv)
    assert planned.returncode == 0, planned.stderr
    assert "guest llmvm (proxmox VM pve1/130): create" in planned.stdout
    assert "config lines for /etc/pve/qemu-server/130.conf:" in planned.stdout
    assert "hostpci0: 0000:01:00,pcie=1" in planned.stdout and sim.writes == []

    applied = lw(env, "apply", "-i", inv)
    assert applied.returncode == 0, applied.stderr
    assert "1 guest(s) changed, 0 unchanged" in applied.stdout
    assert sim.vm_config("pve1", 130).options["machine"] == "q35" and sim.is_running(130)
    writes = len(sim.writes)
    again = lw(env, "apply", "-i", inv)
    assert again.returncode == 0 and "0 guest(s) changed, 1 unchanged" in again.stdout
    assert len(sim.writes) == writes

    table = lw(env, "show", "-i", inv)
    assert table.returncode == 0 and "llmvm" in table.stdout and "running" in table.stdout, table.stderr
    shown = lw(env, "show", "-i", inv, "--json")
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)[0]
    assert (info["kind"], info["status"], info["in_sync"], info["config"]["hostpci0"]) == (
        "vm", "running", True, "0000:01:00,pcie=1")

    dry = lw(env, "destroy", "-i", inv)
    assert dry.returncode == 0 and "dry run: nothing destroyed" in dry.stdout + dry.stderr
    assert sim.vm_conf_path("pve1", 130).exists()
    gone = lw(env, "destroy", "-i", inv, "--yes")
    assert gone.returncode == 0, gone.stderr
    assert not sim.vm_conf_path("pve1", 130).exists()


def test_cli_refuses_a_shared_iommu_group_in_one_line_exit_2(sim, cli):
    env, inventory = cli
    result = lw(env, "apply", "-i", inventory(node="pve2"))
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "IOMMU group 12 with 0000:00:14.0" in errors[0], result.stderr
    assert "Traceback" not in result.stderr and sim.writes == []
