"""labwright.gpu.dri: AMD and Intel GPUs told apart by /sys/class/drm, their nodes read below a root with real mknod
nodes (major 226, as the kernel names them), the same facts read by the one-command script (run for real in a
mount namespace whose /sys and /dev are the fake tree), and the refusals of `gpu:` in one line."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace

import pytest

from labwright.errors import BadInput
from labwright.gpu.dri import (
    DRI_FACTS_SCRIPT,
    RENDER_GID,
    DriFacts,
    node_gid,
    parse_dri_facts,
    read_dri,
    resolve_vendor,
    vendor_nodes,
)
from support.fake_dri import AMD_APU, INTEL_IGPU, drop_nodes, make_fake_dri_host
from support.host_tree import TreeHost

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod and mount namespaces need root")


@needs_root
def test_read_dri_finds_each_gpu_its_vendor_slot_and_nodes(tmp_path):
    make_fake_dri_host(tmp_path, (AMD_APU, INTEL_IGPU))
    facts = read_dri(TreeHost(tmp_path))
    assert [(d.name, d.vendor, d.pci) for d in facts.devices] == [
        ("card0", "amd", "0000:03:00.0"), ("card1", "intel", "0000:00:02.0"),
        ("renderD128", "amd", "0000:03:00.0"), ("renderD129", "intel", "0000:00:02.0")]
    render = facts.devices[2].node
    assert render is not None and (render.path, render.major, render.minor, render.mode) == (
        "/dev/dri/renderD128", 226, 128, 0o666)
    assert facts.kfd is not None and facts.kfd.path == "/dev/kfd" and facts.kfd.major == 235
    assert facts.vendors() == ["amd", "intel"] and not facts.nvidia_driver


@needs_root
def test_the_one_command_script_reads_the_same_facts(tmp_path):
    """DRI_FACTS_SCRIPT as a Proxmox node runs it over SSH, here with the tree mounted over /sys and /dev."""
    make_fake_dri_host(tmp_path, (AMD_APU, INTEL_IGPU))
    shell = f"mount --bind {tmp_path}/sys /sys && mount --bind {tmp_path}/dev /dev && sh -c \"$0\""
    out = subprocess.run(["unshare", "-m", "sh", "-c", shell, DRI_FACTS_SCRIPT], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    # the same tree read from here: node sources are below the tree, the script's are not
    local = read_dri(TreeHost(tmp_path))
    on_node = replace(local, devices=tuple(replace(d, node=replace(d.node, source=d.node.path))
                                           for d in local.devices if d.node is not None),
                      kfd=replace(local.kfd, source="/dev/kfd") if local.kfd else None)
    assert parse_dri_facts(out) == on_node and len(on_node.devices) == 4


@needs_root
def test_auto_takes_the_vendor_the_host_has_nvidia_first(tmp_path):
    make_fake_dri_host(tmp_path, (INTEL_IGPU,))
    assert resolve_vendor("auto", read_dri(TreeHost(tmp_path)), "inv.py: guest a", "this host") == "intel"
    make_fake_dri_host(tmp_path, (AMD_APU, INTEL_IGPU))
    assert resolve_vendor("auto", read_dri(TreeHost(tmp_path)), "w", "h") == "amd"
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text("NVRM version: 550.54.14\n")
    assert resolve_vendor("auto", read_dri(TreeHost(tmp_path)), "w", "h") == "nvidia"


@needs_root
def test_a_vendor_the_host_lacks_is_one_line_naming_gpu_and_the_fix(tmp_path):
    make_fake_dri_host(tmp_path, (INTEL_IGPU,))
    with pytest.raises(BadInput) as info:
        resolve_vendor("amd", read_dri(TreeHost(tmp_path)), "inv.py: guest llm1", "this host")
    said = str(info.value)
    assert said.startswith("inv.py: guest llm1: gpu: amd, but this host has no AMD GPU (no card or render node "
                           "with vendor 0x1002/0x1022 in /sys/class/drm; it has: Intel 0x8086 at 0000:00:02.0")
    assert "set gpu: intel (or auto)" in said and "\n" not in said
    with pytest.raises(BadInput, match=r"gpu: auto, but h has no GPU .*set gpu: none"):
        resolve_vendor("auto", DriFacts(), "w", "h")


@needs_root
def test_a_render_node_missing_after_a_reboot_is_refused_in_one_line(tmp_path):
    make_fake_dri_host(tmp_path, (AMD_APU,))
    drop_nodes(tmp_path)
    with pytest.raises(BadInput) as info:
        vendor_nodes("amd", read_dri(TreeHost(tmp_path)), "inv.py: guest llm1", "this host")
    said = str(info.value)
    assert said.startswith("inv.py: guest llm1: gpu: amd, but /dev/dri/card0 of the AMD GPU at 0000:03:00.0 is "
                           "missing on this host")
    assert "udevadm trigger --subsystem-match=drm" in said and "nothing was created" in said and "\n" not in said


@needs_root
def test_vendor_nodes_and_their_gids(tmp_path):
    make_fake_dri_host(tmp_path, (AMD_APU, INTEL_IGPU))
    facts = read_dri(TreeHost(tmp_path))
    assert [n.path for n in vendor_nodes("amd", facts, "w", "h")] == ["/dev/dri/card0", "/dev/dri/renderD128",
                                                                      "/dev/kfd"]
    assert [n.path for n in vendor_nodes("intel", facts, "w", "h")] == ["/dev/dri/card1", "/dev/dri/renderD129"]
    assert node_gid("/dev/dri/card0", 993) == 44 and node_gid("/dev/dri/renderD128", 993) == 993
    assert node_gid("/dev/kfd", RENDER_GID) == 104


def test_parse_dri_facts_of_a_node_without_nodes_or_vendor():
    out = "card0 0x1002 0000:03:00.0\nrenderD128 - -\ncard0-DP-1 0x1002 x\n@@kfd\n@@nvidia\n"
    facts = parse_dri_facts(out)
    assert [(d.name, d.vendor, d.pci, d.node) for d in facts.devices] == [
        ("card0", "amd", "0000:03:00.0", None), ("renderD128", None, "", None)]
    assert facts.kfd is None and facts.nvidia_driver


def test_render_groups_the_service_user_joins():
    from labwright.operations.vulkan import render_groups

    # a minimal image (no udev): no render group, made with the nodes' gid
    assert render_groups({"render_nodes": {"/dev/dri/renderD128": 104}, "groups": {44: "video"}}) == (
        ["video", "render"], ("render", 104))
    # Ubuntu's own render group (993) owning the nodes: joined, nothing made
    assert render_groups({"render_nodes": {"/dev/dri/renderD128": 993}, "groups": {44: "video", 993: "render"}}) == (
        ["video", "render"], None)
    # the image's render group has another gid than the nodes: a group of the nodes' own
    assert render_groups({"render_nodes": {"/dev/dri/renderD128": 104}, "groups": {44: "video", 993: "render"}}) == (
        ["video", "render104"], ("render104", 104))
