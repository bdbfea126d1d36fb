"""labwright.hostupgrade.pve's pure parts: which container configs pass the GPU and how, the raw allow lines
rewritten to new majors (snapshot sections untouched), and the PVE plan's steps and refusals."""

from __future__ import annotations

import dataclasses

import pytest

from labwright.errors import BadInput
from labwright.hostupgrade.plan import GuestFacts, NodeFacts
from labwright.hostupgrade.pve import PveGpuGuest, gpu_wiring, make_pve_plan, rewrite_allow_majors
from support.host_tree import TreeHost

MAJORS = {"nvidia-frontend": 195, "nvidia-uvm": 509, "nvidia-caps": 511}
RAW = [["lxc.cgroup2.devices.allow", "c 195:* rwm"], ["lxc.cgroup2.devices.allow", "c 509:* rwm"],
       ["lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"],
       ["lxc.mount.entry", "/dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file"]]


def test_dev_entries_and_raw_lines_are_told_apart():
    config = {"dev0": "/dev/nvidia0,gid=44,mode=0666", "dev1": "path=/dev/nvidia-uvm,mode=0666",
              "dev10": "/dev/dri/card0", "dev2": "/dev/nvidiactl", "hostname": "llm1"}
    assert gpu_wiring(config, set(MAJORS.values())) == (("/dev/nvidia0", "/dev/nvidia-uvm", "/dev/nvidiactl"), (),
                                                        ())
    dev_paths, majors, mounts = gpu_wiring({"lxc": RAW}, set(MAJORS.values()))
    assert (dev_paths, majors, mounts) == ((), (195, 509), ("/dev/nvidia0", "/dev/nvidia-uvm"))


def test_a_major_left_from_an_earlier_boot_counts_only_beside_nvidia_mounts():
    stale = [["lxc.cgroup2.devices.allow", "c 508:* rwm"], ["lxc.cgroup2.devices.allow", "c 10:200 rwm"]]
    assert gpu_wiring({"lxc": [*stale, RAW[2]]}, set(MAJORS.values()))[1] == (508,)
    # Without NVIDIA bind mounts, a tun device's allow line or a dynamic major is someone else's.
    assert gpu_wiring({"lxc": stale}, set(MAJORS.values())) == ((), (), ())


CONF = """arch: amd64
hostname: llm1
parent: before
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 509:* rwm
lxc.cgroup2.devices.allow = c 511:* rwm
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file

[before]
arch: amd64
lxc.cgroup2.devices.allow: c 509:* rwm
snaptime: 1790000000
"""


def test_rewrite_moves_only_the_main_sections_changed_majors():
    text, changes = rewrite_allow_majors(CONF, {509: 237})
    assert changes == ["c 509:* -> c 237:*"]
    main, _, snapshot = text.partition("[before]")
    assert "lxc.cgroup2.devices.allow: c 237:* rwm" in main and "c 509" not in main
    assert "lxc.cgroup2.devices.allow = c 511:* rwm" in main and "c 195:* rwm" in main
    assert "lxc.cgroup2.devices.allow: c 509:* rwm" in snapshot  # the rollback's lines stay as they were
    assert rewrite_allow_majors(CONF, {}) == (CONF, [])


def pve_guest(vmid: int, **fields) -> PveGpuGuest:
    return PveGpuGuest("pve1", vmid, f"ct{vmid}", True, **fields)


def node(guests: list[PveGpuGuest]) -> NodeFacts:
    return NodeFacts("pve1", "550.54.14", "6.8.12-4-pve", None, ("550.54.15",), {},
                     tuple(GuestFacts(g.label, g.running, "550.54.14", g.snapshots, g.storage, g.no_snapshot_reason)
                           for g in guests), "/var/cache/labwright/nvidia")


def test_the_plan_says_which_guest_needs_a_rewrite_and_installs_the_userspace_through_pct():
    guests = [pve_guest(201, dev_paths=("/dev/nvidia0", "/dev/nvidia-uvm"), storage="local-lvm (lvmthin)"),
              pve_guest(202, raw_majors=(195, 509, 508), raw_mounts=("/dev/nvidia-uvm",), storage="tank (zfspool)")]
    plan = make_pve_plan(node(guests), guests, majors=MAJORS)
    actions = [(s.action, s.target) for s in plan.steps]
    assert actions == [("list", "@pct/pve1/201, @pct/pve1/202"), ("snapshot", "@pct/pve1/201"),
                       ("snapshot", "@pct/pve1/202"), ("host-driver", "pve1"), ("boot-unit", "pve1"),
                       ("reboot", "pve1"), ("majors", "@pct/pve1/201"), ("majors", "@pct/pve1/202"),
                       ("userspace", "@pct/pve1/201"), ("userspace", "@pct/pve1/202"),
                       ("restart", "@pct/pve1/201"), ("restart", "@pct/pve1/202"), ("check", "@pct/pve1/201"),
                       ("check", "@pct/pve1/202")]
    assert "POST /nodes/pve1/lxc/202/snapshot) on tank (zfspool)" in plan.steps[2].detail
    assert plan.steps[6].detail.startswith("devN entries: no rewrite")
    assert "195 (nvidia-frontend), 509 (nvidia-uvm), 508 (stale: not an NVIDIA major now)" in plan.steps[7].detail
    assert plan.steps[8].detail == ("NVIDIA-Linux-x86_64-550.54.15.run copied in with pct push 201 (sha256 checked) "
                                    "and run with pct exec 201 -- ... --no-kernel-module")
    assert "gpu check through pct exec (userspace == 550.54.15" in plan.steps[12].detail
    assert plan.notes == [("guest @pct/pve1/202: its raw allow line for major 508 is stale already (no NVIDIA "
                             "device has that major now); fix it by hand")]


def test_refusals_before_anything_changes():
    with pytest.raises(BadInput, match=r"^node pve1: no GPU container on it \(no container config passes"):
        make_pve_plan(node([]), [])
    cannot = pve_guest(203, dev_paths=("/dev/nvidia0",), snapshots=False, storage="storage local (dir)",
                       no_snapshot_reason="rootfs is on storage local of type dir, which cannot snapshot")
    with pytest.raises(BadInput, match=r"^guest @pct/pve1/203: its storage cannot take snapshots \(rootfs is on"):
        make_pve_plan(node([cannot]), [cannot])


def test_the_containers_go_through_the_state_file_unchanged(tmp_path):
    """A Proxmox upgrade resumed at boot reads its containers back from the state file (as they were before the
    upgrade: which ran, how each is wired) and the majors its raw lines were written for."""
    from labwright.hostupgrade import state
    from labwright.hostupgrade.pve import guests_from_saved

    guests = [pve_guest(201, dev_paths=("/dev/nvidia0", "/dev/nvidia-uvm")),
              dataclasses.replace(pve_guest(202, raw_majors=(195, 509), raw_mounts=("/dev/nvidia0",)), running=False)]
    plan = {"node": "pve1", "from": "570.133.07", "to": "580.82.07", "boot_kernel": "6.8.12-9-pve", "steps": [],
            "notes": []}  # Plan.to_dict(): the state file is refused without one (labwright.schema.files)
    saved = state.Saved("pve1", "pve", plan, 0, "/var/cache/labwright/nvidia", inventory="/etc/lab.py",
                        guests=[dataclasses.asdict(g) for g in guests], extra={"majors_before": {"nvidia-uvm": 509}})
    state.save(TreeHost(tmp_path), saved)
    back = state.load(TreeHost(tmp_path))
    assert back is not None and guests_from_saved(back) == guests
    assert back.extra == {"majors_before": {"nvidia-uvm": 509}} and back.inventory == "/etc/lab.py"
