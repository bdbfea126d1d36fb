"""`gpu: amd` / `gpu: intel` / `gpu: auto` on the PVE simulator (real proxmoxer, verified HTTPS on 127.0.0.1): the
node's side is a host tree with real DRM nodes (mknod major 226: support.fake_dri) whose ``etc/pve`` is the
simulator's pmxcfs; the created CT's devN entries carry the guest's gids (card video 44, render and kfd the render
group's) as community-scripts write them, the started CT's nodes are made with them (pve-container's
create_passthrough_device_node, simulated), and bad input is one line with nothing created."""

from __future__ import annotations

import os

import pytest

from labwright.errors import BadInput
from labwright.guests.base import backend_for
from labwright.guests.model import spec_from_data
from support.fake_dri import AMD_APU, INTEL_IGPU, drop_nodes, make_fake_dri_host
from support.gpu_host import TreePveNode
from support.pve_simulator import PveSimulator, SimNode, host_devices

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the fake DRM host tree needs mknod (root)")


@pytest.fixture
def host(tmp_path):
    return make_fake_dri_host(tmp_path / "pve1", (AMD_APU, INTEL_IGPU))


@pytest.fixture
def sim(host, monkeypatch):
    with PveSimulator(nodes=[SimNode("pve1", "8.2.4", devices=host_devices(host))], task_seconds=0.01) as simulator:
        (host / "etc").mkdir(exist_ok=True)
        (host / "etc" / "pve").symlink_to(simulator.pmxcfs)
        monkeypatch.delenv("PROXMOX_TOKEN_ID", raising=False)
        monkeypatch.setenv("PROXMOX_USER", "root@pam")
        monkeypatch.setenv("PROXMOX_PASSWORD", simulator.root_password)
        yield simulator


def guest(sim, **fields):
    data = {"backend": "proxmox", "node": "pve1", "vmid": 201, "hostname": "llm1", "template": sim.template,
            "memory": "4G", "net": {"name": "eth0", "bridge": "vmbr0"}, **fields}
    return spec_from_data("@pct/pve1/201", data, source="lab.py",
                          node_data={"proxmox_api_url": f"https://{sim.host}", "proxmox_ca_file": str(sim.ca_file)})


def test_auto_on_an_amd_node_creates_dev_entries_with_the_guests_gids(sim, host):
    node = TreePveNode(host)
    spec = guest(sim, gpu="auto")
    pve = backend_for(spec, pve_node=node, poll_interval=0.01)
    plan = pve.plan(spec)
    assert [line for line in plan.config_lines if line.startswith("dev")] == [
        "dev0: /dev/dri/card0,gid=44,mode=0660", "dev1: /dev/dri/renderD128,gid=104,mode=0660",
        "dev2: /dev/kfd,gid=104,mode=0660"]
    assert ("AMD GPU by devN entries: /dev/dri/card0 gid 44, /dev/dri/renderD128 gid 104, /dev/kfd gid 104 "
            "(video 44; render 104, the guest's render group)") in plan.notes
    pve.apply(spec)
    made = sim.cluster.passthrough[201]
    assert {p: (oct(n.mode), n.gid) for p, n in made.items()} == {
        "/dev/dri/card0": ("0o660", 44), "/dev/dri/renderD128": ("0o660", 104), "/dev/kfd": ("0o660", 104)}
    assert sim.is_running(201) and sim.config("pve1", 201).lxc == []
    # a running CT's render gid is read with pct exec on the node, as community-scripts' fix_gpu_gids does
    writes = len(sim.writes)
    assert pve.plan(spec).action == "none" and len(sim.writes) == writes
    assert ("pct", "exec", "201", "--", "getent", "group", "render") in node.ran


def test_intel_before_pve_8_1_gets_the_classic_lines(sim, host, tmp_path):
    spec = guest(sim, gpu="intel", gpu_mode="classic")
    plan = backend_for(spec, pve_node=TreePveNode(host), poll_interval=0.01).plan(spec)
    assert [line for line in plan.config_lines if line.startswith("lxc.")] == [
        "lxc.cgroup2.devices.allow: c 226:* rwm",
        "lxc.mount.entry: /dev/dri/card1 dev/dri/card1 none bind,optional,create=file",
        "lxc.mount.entry: /dev/dri/renderD129 dev/dri/renderD129 none bind,optional,create=file"]


def test_a_vendor_the_node_lacks_and_a_missing_render_node_are_one_line_and_create_nothing(sim, host, tmp_path):
    amd_only = make_fake_dri_host(tmp_path / "amd-only", (AMD_APU,))
    (amd_only / "etc").mkdir()
    (amd_only / "etc" / "pve").symlink_to(sim.pmxcfs)
    spec = guest(sim, gpu="intel")
    with pytest.raises(BadInput) as info:
        backend_for(spec, pve_node=TreePveNode(amd_only), poll_interval=0.01).apply(spec)
    said = str(info.value)
    assert said.startswith("lab.py: guest llm1: gpu: intel, but node pve1 has no Intel GPU") and "\n" not in said
    assert "set gpu: amd (or auto)" in said
    drop_nodes(host)
    amd = guest(sim, gpu="amd")
    with pytest.raises(BadInput) as info:
        backend_for(amd, pve_node=TreePveNode(host), poll_interval=0.01).apply(amd)
    assert "gpu: amd, but /dev/dri/card0 of the AMD GPU at 0000:03:00.0 is missing on node pve1" in str(info.value)
    assert sim.writes == [] and 201 not in sim.cluster.passthrough
