"""`gpu: amd` / `gpu: intel` in a guest declaration, both backends' pure rules: LXD's gpu device by vendor id or one
unix-char device per DRM node, Proxmox's devN entries (and the classic lines before PVE 8.1), each node with the
guest's gid (card nodes video 44, render nodes and /dev/kfd the render group's), over a host tree with real nodes."""

from __future__ import annotations

import os

import pytest

from labwright.errors import BadInput
from labwright.gpu.dri import read_dri
from labwright.guests import lxd_render, proxmox_render
from labwright.guests.model import spec_from_data
from support.fake_dri import AMD_APU, INTEL_IGPU, make_fake_dri_host
from support.host_tree import TreeHost

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"


def lxd_spec(**data):
    return spec_from_data("@lxd/llm1", {"backend": "lxd", **data}, source="inv.py")


def pve_spec(**data):
    return spec_from_data("@pct/pve1/201", {"backend": "proxmox", "node": "pve1", "vmid": 201, "template": TEMPLATE,
                                            **data}, source="lab.py")


def test_gpu_kinds_parse():
    assert lxd_spec(gpu="amd").wants_dri and not lxd_spec(gpu="amd").wants_gpu
    assert lxd_spec(gpu="intel").wants_dri and lxd_spec(gpu="auto").gpu == "auto"
    with pytest.raises(BadInput, match="gpu: 'arc' must be one of nvidia, amd, intel, auto, none"):
        lxd_spec(gpu="arc")


@needs_root
def test_lxd_unix_char_nodes_with_their_gids(tmp_path):
    make_fake_dri_host(tmp_path, (AMD_APU, INTEL_IGPU))
    s = lxd_spec(gpu="amd")
    wiring = lxd_render.resolve_dri(s, read_dri(TreeHost(tmp_path)), 0, render_gid=993)
    desired = lxd_render.render(s, wiring, None)
    assert desired.devices["card0"] == {"type": "unix-char", "source": str(tmp_path / "dev/dri/card0"),
                                        "path": "/dev/dri/card0", "major": "226", "minor": "0", "gid": "44",
                                        "mode": "0660"}
    assert desired.devices["renderD128"]["gid"] == "993" and desired.devices["renderD128"]["minor"] == "128"
    assert desired.devices["kfd"]["gid"] == "993" and desired.devices["kfd"]["mode"] == "0660"
    assert "renderD129" not in desired.devices  # the Intel iGPU beside it is not passed
    assert desired.notes[0] == ("AMD GPU by unix-char nodes: /dev/dri/card0 gid 44, /dev/dri/renderD128 gid 993, "
                                "/dev/kfd gid 993 (video 44; render 993, the guest's render group)")


@needs_root
def test_lxd_gpu_device_by_vendor_where_the_daemon_sees_the_card(tmp_path):
    make_fake_dri_host(tmp_path, (INTEL_IGPU,))
    s = lxd_spec(gpu="intel")
    desired = lxd_render.render(s, lxd_render.resolve_dri(s, read_dri(TreeHost(tmp_path)), 1), None)
    assert desired.devices == {"gpu": {"type": "gpu", "gputype": "physical", "vendorid": "8086", "gid": "104",
                                       "mode": "0660"}}
    assert desired.notes[0].startswith("Intel GPU by the gpu device (vendorid 8086): /dev/dri/card1 gid 104")
    # AMD's /dev/kfd is not a DRM node: LXD's gpu device does not pass it, a unix-char device does
    make_fake_dri_host(tmp_path, (AMD_APU, INTEL_IGPU))
    amd = lxd_spec(gpu="amd")
    devices = lxd_render.render(amd, lxd_render.resolve_dri(amd, read_dri(TreeHost(tmp_path)), 1), None).devices
    assert devices["gpu"]["vendorid"] == "1002" and devices["kfd"]["path"] == "/dev/kfd" and len(devices) == 2


def test_lxd_remote_and_cdi_refusals():
    with pytest.raises(BadInput, match="LXD remote None reports no AMD GPU"):
        lxd_render.resolve_dri(lxd_spec(gpu="amd"), None, 0)
    assert lxd_render.resolve_dri(lxd_spec(gpu="amd"), None, 1).mode == "gpu"
    with pytest.raises(BadInput, match="gpu_mode cdi is NVIDIA's container toolkit"):
        lxd_render.resolve_dri(lxd_spec(gpu="amd", gpu_mode="cdi"), None, 1)


@needs_root
def test_pve_dev_entries_as_community_scripts_write_them(tmp_path):
    make_fake_dri_host(tmp_path, (AMD_APU, INTEL_IGPU))
    s = pve_spec(gpu="amd")
    wiring = proxmox_render.resolve_dri(s, (8, 2), read_dri(TreeHost(tmp_path)), "node pve1", render_gid=104)
    out = proxmox_render.diff(s, None, proxmox_render.render(s, wiring, "local-lvm"))
    assert [line for line in out.config_lines() if line.startswith("dev")] == [
        "dev0: /dev/dri/card0,gid=44,mode=0660", "dev1: /dev/dri/renderD128,gid=104,mode=0660",
        "dev2: /dev/kfd,gid=104,mode=0660"]
    # the guest's render gid read later (a running CT): only the render entries change, in place
    current = {"hostname": "ct201", "tags": "labwright", "unprivileged": 1, **out.put}
    later = proxmox_render.resolve_dri(s, (8, 2), read_dri(TreeHost(tmp_path)), "node pve1", render_gid=993)
    again = proxmox_render.diff(s, current, proxmox_render.render(s, later, "local-lvm"))
    assert again.put == {"dev1": "/dev/dri/renderD128,gid=993,mode=0660", "dev2": "/dev/kfd,gid=993,mode=0660"}


@needs_root
def test_pve_classic_lines_before_8_1_and_an_nvidia_guests_own_dri_entries(tmp_path):
    make_fake_dri_host(tmp_path, (INTEL_IGPU,))
    s = pve_spec(gpu="intel")
    wiring = proxmox_render.resolve_dri(s, (7, 4), read_dri(TreeHost(tmp_path)), "node pve1")
    assert wiring.lxc == (("lxc.cgroup2.devices.allow", "c 226:* rwm"),
                          ("lxc.mount.entry", "/dev/dri/card1 dev/dri/card1 none bind,optional,create=file"),
                          ("lxc.mount.entry", "/dev/dri/renderD129 dev/dri/renderD129 none bind,optional,create=file"))
    with pytest.raises(BadInput, match="gpu_mode dev needs Proxmox VE 8.1"):
        proxmox_render.resolve_dri(pve_spec(gpu="intel", gpu_mode="dev"), (7, 4), read_dri(TreeHost(tmp_path)),
                                   "node pve1")
    # an NVIDIA guest leaves hand-written /dev/dri entries alone (they are not labwright's there)
    nvidia = proxmox_render.render(pve_spec(), proxmox_render.Wiring(), "local-lvm")
    current = {"hostname": "ct201", "tags": "labwright", "unprivileged": 1, "dev0": "/dev/dri/renderD129,gid=104"}
    assert proxmox_render.diff(pve_spec(), current, nvidia).delete == []


@needs_root
def test_auto_resolves_per_host_before_any_wiring(tmp_path):
    """`gpu: auto` is made the host's vendor first, so an NVIDIA host gets the NVIDIA wiring (boot unit, preflight)
    and an AMD one the DRM nodes; the spec as declared is left as it was."""
    from labwright.guests.lxd import LxdBackend
    from labwright.lxd.client import LxdClient
    from support.fake_nvidia import make_fake_nvidia_host
    from support.gpu_host import TreeGpuHost

    nvidia, amd = make_fake_nvidia_host(tmp_path / "nv"), make_fake_dri_host(tmp_path / "amd", (AMD_APU,))
    declared = lxd_spec(gpu="auto")
    client = LxdClient()  # not contacted: a local backend resolves from the host tree
    assert LxdBackend(client, gpu_host=TreeGpuHost(nvidia)).resolved(declared).wants_gpu
    assert LxdBackend(client, gpu_host=TreeGpuHost(amd)).resolved(declared).gpu == "amd"
    assert declared.gpu == "auto"
    with pytest.raises(BadInput, match="gpu: auto, but the host tree .* has no GPU"):
        LxdBackend(client, gpu_host=TreeGpuHost(tmp_path / "bare")).resolved(declared)
