"""labwright.hostupgrade.plan: the ordered steps from a node's facts, and each refusal as one line."""

from __future__ import annotations

import pytest

from labwright.errors import BadInput, SafetyCheckFailed
from labwright.hostupgrade.plan import GuestFacts, NodeFacts, kernel_key, make_plan

OLD, NEW = "550.54.14", "550.54.15"


def guest(name: str, userspace: str | None = OLD, snapshots: bool = True, services=("llama-server",)) -> GuestFacts:
    return GuestFacts(name, True, userspace, snapshots, "pool default (dir)", "" if snapshots else
                      "LXD storage driver 'cephfs' of pool shared cannot snapshot instances", tuple(services))


def facts(**changes) -> NodeFacts:
    base = dict(node="pve1", driver=OLD, running_kernel="6.8.12-4-pve", new_kernel="6.8.12-9-pve",
                available=(OLD, NEW), builds={"6.8.12-4-pve": (OLD,), "6.8.12-9-pve": (OLD, NEW)},
                guests=(guest("llm1"), guest("llm2", services=())), repository="/var/cache/labwright/nvidia")
    return NodeFacts(**{**base, **changes})


def test_the_whole_sequence_in_order():
    plan = make_plan(facts())
    actions = [(s.action, s.target) for s in plan.steps]
    assert actions == [
        ("list", "llm1, llm2"), ("kernel", "6.8.12-9-pve"), ("snapshot", "llm1"), ("snapshot", "llm2"),
        ("host-driver", "pve1"), ("boot-unit", "pve1"), ("reboot", "pve1"), ("majors", "llm1"), ("majors", "llm2"),
        ("userspace", "llm1"), ("userspace", "llm2"), ("restart", "llm1"), ("restart", "llm2"), ("check", "llm1"),
        ("check", "llm2")]
    assert plan.to_version == NEW and plan.from_version == OLD and plan.boot_kernel == "6.8.12-9-pve"
    assert "NVIDIA-Linux-x86_64-550.54.15.run --no-kernel-module; was 550.54.14" in plan.steps[9].detail
    assert plan.steps[11].detail == "restart llm1 and llama-server"
    assert plan.notes == []


def test_newest_in_the_repository_is_the_default_and_to_picks_one():
    assert make_plan(facts(available=("550.54.15", "550.120", "550.54.14"),
                           builds={"6.8.12-9-pve": ("550.120",)})).to_version == "550.120"
    assert make_plan(facts(), OLD).to_version == OLD


@pytest.mark.parametrize(("wanted", "said"), [
    ("550.54.99", "--to 550.54.99: no such driver version in the repository /var/cache/labwright/nvidia (there: "
                  "550.54.14, 550.54.15); give one of those or add NVIDIA-Linux-x86_64-550.54.99.run to it"),
    ("latest", "--to 'latest': not a driver version; give one like 550.54.15 (in the repository: 550.54.14, "
               "550.54.15)"),
])
def test_a_version_not_in_the_repository_is_one_line(wanted, said):
    with pytest.raises(BadInput) as info:
        make_plan(facts(), wanted)
    assert str(info.value) == said


def test_new_kernel_without_a_build_is_refused_or_pinned():
    no_build = facts(builds={"6.8.12-4-pve": (OLD,), "6.8.12-9-pve": (OLD,)})
    with pytest.raises(SafetyCheckFailed) as info:
        make_plan(no_build)
    message = str(info.value)
    assert message.startswith("node pve1: the new kernel 6.8.12-9-pve has no nvidia 550.54.15 module build "
                              "(DKMS builds for it: 550.54.14) and no headers to build one; nothing was changed.")
    assert "apt install proxmox-headers-6.8.12-9-pve" in message
    assert "--pin-kernel" in message and "\n" not in message
    plan = make_plan(no_build, pin_kernel=True)
    assert plan.boot_kernel == "6.8.12-4-pve"
    assert [s.action for s in plan.steps[:3]] == ["list", "pin-kernel", "snapshot"]
    assert "proxmox-boot-tool kernel pin" in plan.steps[1].detail


def test_new_kernel_with_headers_is_built_by_the_install_and_booted():
    """A real node: the new driver is not built for the new kernel before it is installed; its headers are what
    lets the installer's DKMS run build it, so the plan boots it and the host-driver step builds for it."""
    with_headers = facts(builds={"6.8.12-4-pve": (OLD,), "6.8.12-9-pve": (OLD,)}, headers=("6.8.12-9-pve",))
    plan = make_plan(with_headers)
    assert plan.boot_kernel == "6.8.12-9-pve"
    kernel = next(s for s in plan.steps if s.action == "kernel")
    assert kernel.target == "6.8.12-9-pve" and "builds nvidia 550.54.15 for it through DKMS" in kernel.detail
    headers_of_running_only = facts(builds={"6.8.12-4-pve": (OLD,)}, headers=("6.8.12-4-pve",))
    with pytest.raises(SafetyCheckFailed):
        make_plan(headers_of_running_only)


def test_no_pending_kernel_boots_the_running_one():
    plan = make_plan(facts(new_kernel=None))
    assert plan.boot_kernel == "6.8.12-4-pve" and "kernel" not in [s.action for s in plan.steps]


def test_storage_without_snapshots_is_said_up_front():
    with pytest.raises(BadInput) as info:
        make_plan(facts(guests=(guest("llm1"), guest("llm2", snapshots=False))))
    assert str(info.value).startswith("guest llm2: its storage cannot take snapshots (LXD storage driver 'cephfs'")


def test_a_mismatched_guest_is_refused_in_one_line_unless_asked_to_fix_it():
    node = facts(guests=(guest("llm1"), guest("llm2", userspace="550.40.07")))
    with pytest.raises(BadInput) as refused:
        make_plan(node)
    assert str(refused.value) == (
        "guest llm2 runs userspace 550.40.07 but the host module is 550.54.14: mismatched before the upgrade; nothing "
        "was changed. Fix it first (`labwright gpu check llm2` names the fix) or pass --fix-mismatched to install "
        "550.54.15 in it with the upgrade")
    plan = make_plan(node, fix_mismatched=True)
    assert plan.notes == ["guest llm2 runs userspace 550.40.07 but the host module is 550.54.14: mismatched now; the "
                          "upgrade installs 550.54.15 in it (--fix-mismatched)"]
    assert ("userspace", "llm2") in [(s.action, s.target) for s in plan.steps]


def test_a_node_without_gpu_guests_is_refused():
    with pytest.raises(BadInput, match="node pve1: no GPU guest on it"):
        make_plan(facts(guests=()))


def test_kernel_order_is_numeric():
    kernels = ["6.8.12-10-pve", "6.8.12-4-pve", "6.11.0-2-pve", "6.8.4-2-pve"]
    assert sorted(kernels, key=kernel_key) == ["6.8.4-2-pve", "6.8.12-4-pve", "6.8.12-10-pve", "6.11.0-2-pve"]


def test_a_stopped_guest_is_said_and_carried_through():
    stopped = GuestFacts("llm3", False, None, True, "pool default (dir)")
    plan = make_plan(facts(guests=(guest("llm1"), stopped)))
    assert plan.notes == ["guest llm3 is stopped: its userspace is not known; the upgrade starts it and installs "
                          "550.54.15 in it"]
    assert ("userspace", "llm3") in [(s.action, s.target) for s in plan.steps]


def test_a_snapshot_that_freezes_a_running_guest_for_a_copy_says_so_in_the_plan():
    copying = GuestFacts("llm1", True, OLD, True, "pool default (dir)", "", ("llama-server",), snapshot_freezes=True)
    stopped = GuestFacts("llm2", False, None, True, "pool default (dir)", "", (), snapshot_freezes=True)
    cow = GuestFacts("llm3", True, OLD, True, "pool fast (btrfs)", "", ("llama-server",))
    plan = make_plan(facts(guests=(copying, stopped, cow)))
    detail = {s.target: s.detail for s in plan.steps if s.action == "snapshot"}
    assert "a full copy with the guest frozen until it ends" in detail["llm1"]
    assert "frozen" not in detail["llm2"] and "frozen" not in detail["llm3"]
