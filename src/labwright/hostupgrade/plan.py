"""The host upgrade runbook's plan: pure, from the node's facts to the ordered steps (or a one-line refusal).

Facts come from ``labwright.gpu.nvidia.upgrade_facts``; nothing here reads a file or asks a daemon.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from labwright.errors import BadInput, SafetyCheckFailed
from labwright.hostupgrade.installer_options import BY_NAME, MODULE_LOADED, UNLOAD, knows, refusal
from labwright.textio import ascii_digits

_VERSION = re.compile(r"(?a)^\d+\.\d+(?:\.\d+)?$")


@dataclass(frozen=True)
class GuestFacts:
    """One GPU guest on the node: ``userspace`` the version of its libcuda/libnvidia-ml (None: none found,
    "mixed:..." for libraries of different versions), ``snapshots`` whether its storage can snapshot (and why not),
    ``services`` the engine units it has."""

    name: str
    running: bool
    userspace: str | None
    snapshots: bool
    storage: str = ""
    no_snapshot_reason: str = ""
    services: tuple[str, ...] = ()
    #: Its snapshot is a full copy taken with the running guest frozen (LXD's dir pool): said in the plan.
    snapshot_freezes: bool = False


@dataclass(frozen=True)
class NodeFacts:
    node: str
    driver: str | None  # the loaded module's version (/proc/driver/nvidia/version)
    running_kernel: str
    new_kernel: str | None  # the newest installed kernel other than the running one (None: no pending kernel)
    available: tuple[str, ...]  # driver versions in the repository
    builds: dict[str, tuple[str, ...]] = field(default_factory=dict)  # kernel -> driver versions DKMS built for it
    guests: tuple[GuestFacts, ...] = ()
    repository: str = ""
    #: Kernels with headers (/lib/modules/K/build): the installer's --dkms run builds the new driver for them.
    headers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    #: list | kernel | pin-kernel | snapshot | host-driver | boot-unit | reboot | majors | userspace | restart | check
    action: str
    target: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Plan:
    node: str
    from_version: str | None
    to_version: str
    boot_kernel: str
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "from": self.from_version, "to": self.to_version, "boot_kernel": self.boot_kernel,
                "steps": [s.to_dict() for s in self.steps], "notes": list(self.notes)}


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def kernel_key(kernel: str) -> tuple[tuple[int, str], ...]:
    """Sort key for kernel release strings (6.8.12-4-pve < 6.8.12-10-pve < 6.11.0-2-pve): numbers as numbers."""
    return tuple((int(p), "") if ascii_digits(p) else (-1, p) for p in re.split(r"[.-]", kernel))


def headers_package(kernel: str) -> str:
    """The package with a kernel's headers: Proxmox VE's (proxmox-headers-K, pve-headers-K before PVE 8.1) or
    Debian/Ubuntu's."""
    return f"proxmox-headers-{kernel}" if kernel.endswith("-pve") else f"linux-headers-{kernel}"


def choose_target(facts: NodeFacts, wanted: str | None) -> str:
    """``wanted`` checked against the repository, or its newest version; BadInput naming what is there."""
    there = ", ".join(sorted(facts.available, key=version_key)) or "none"
    if wanted is not None:
        if not _VERSION.match(wanted):
            raise BadInput(f"--to {wanted!r}: not a driver version; give one like 550.54.15 (in the repository: "
                           f"{there})")
        if wanted not in facts.available:
            raise BadInput(f"--to {wanted}: no such driver version in the repository {facts.repository} (there: "
                           f"{there}); give one of those or add NVIDIA-Linux-x86_64-{wanted}.run to it")
        return wanted
    if not facts.available:
        raise BadInput(f"no driver in the repository {facts.repository}; add NVIDIA-Linux-x86_64-VERSION.run to it "
                       "and give --to VERSION")
    return max(facts.available, key=version_key)


def mismatched(facts: NodeFacts) -> list[GuestFacts]:
    """GPU guests whose userspace is not the loaded module's version exactly (before any upgrade)."""
    return [g for g in facts.guests if g.userspace != facts.driver]


def make_plan(facts: NodeFacts, wanted: str | None = None, pin_kernel: bool = False,
              fix_mismatched: bool = False) -> Plan:
    """The ordered steps, or a one-line refusal: BadInput for a version not in the repository, one whose installer
    cannot do the host install (no ``--dkms``, or a module loaded and no ``--allow-installation-with-running-driver``:
    labwright.hostupgrade.installer_options), a node with no GPU guest, a guest whose storage cannot snapshot, a
    running guest whose userspace already differs from the loaded module (unless ``fix_mismatched``: the upgrade
    then installs the new one in it as in every guest);
    SafetyCheckFailed for a new kernel without a driver build (unless ``pin_kernel``: the running kernel is pinned
    and booted again)."""
    target = choose_target(facts, wanted)
    refused = refusal(target, facts.driver)
    if refused:
        # The installer would stop at an option it does not know, or at the loaded module: refused before anything.
        dkms = knows(target, "--dkms")
        raise BadInput(f"host upgrade to {target}: {refused}; nothing was changed. Give --to a driver of "
                       f"{BY_NAME[MODULE_LOADED if dkms else '--dkms'].since} or later (add its .run to "
                       f"{facts.repository}), or install {target} by hand with the GPU guests stopped and the modules "
                       f"unloaded ({UNLOAD}; sh NVIDIA-Linux-x86_64-{target}.run --silent{' --dkms' if dkms else ''}) "
                       "and reboot")
    if not facts.guests:
        raise BadInput(f"node {facts.node}: no GPU guest on it (no container passes this host's /dev/nvidia* "
                       "nodes); nothing to carry through an upgrade: upgrade the driver directly")
    # A known version other than the module's; none read (no libraries, or pct could not be asked) is said below.
    wrong = [g for g in mismatched(facts) if g.running and g.userspace is not None]
    if wrong and not fix_mismatched:
        # Already broken before the upgrade: its engine may be on the CPU now, and a gpu check after the upgrade
        # would be the first to say so. The operator decides: fix it first, or let the upgrade install the new one.
        g = wrong[0]
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        raise BadInput(f"guest {g.name}{more} runs userspace {g.userspace} but the host module is "
                       f"{facts.driver}: mismatched before the upgrade; nothing was changed. Fix it first (`labwright "
                       f"gpu check {g.name}` names the fix) or pass --fix-mismatched to install {target} in it with "
                       "the upgrade")
    cannot = [g for g in facts.guests if not g.snapshots]
    if cannot:
        g = cannot[0]
        raise BadInput(f"guest {g.name}: its storage cannot take snapshots ({g.no_snapshot_reason}); the upgrade "
                       "snapshots every GPU guest first: move it to storage that can, or stop passing it the GPU")
    boot = facts.running_kernel
    steps = [Step("list", ", ".join(g.name for g in facts.guests),
                  f"{len(facts.guests)} GPU guest(s): " + "; ".join(
                      f"{g.name} ({'running' if g.running else 'stopped'}, userspace {g.userspace or 'none'})"
                      for g in facts.guests))]
    notes = [f"guest {g.name} runs userspace {g.userspace} but the host module is {facts.driver}: mismatched now; "
             f"the upgrade installs {target} in it (--fix-mismatched)" for g in wrong]
    notes += [f"guest {g.name}: no userspace read (no libcuda/libnvidia-ml found, or the node's pct not reachable); "
              f"the upgrade installs {target} in it" for g in facts.guests if g.running and g.userspace is None]
    notes += [f"guest {g.name} is stopped: its userspace is not known; the upgrade starts it and installs {target} "
              "in it" for g in facts.guests if not g.running]
    if facts.driver is not None and not knows(facts.driver, MODULE_LOADED):
        notes.append(f"nvidia {facts.driver}'s installer has no {MODULE_LOADED} (added in "
                     f"{BY_NAME[MODULE_LOADED].since}) and refuses to install while a module is loaded: should the "
                     f"upgrade fail after the host-driver step, the guests are restored but on a real node "
                     f"{facts.driver} goes back on the host by hand (stop the GPU guests, {UNLOAD}, sh "
                     f"NVIDIA-Linux-x86_64-{facts.driver}.run --silent --dkms, reboot)")
    if facts.new_kernel is not None:
        built = target in facts.builds.get(facts.new_kernel, ())
        if built:
            boot = facts.new_kernel
            steps.append(Step("kernel", facts.new_kernel, f"kernel {facts.new_kernel} has a DKMS build of nvidia "
                              f"{target}: boots into it"))
        elif facts.new_kernel in facts.headers:
            boot = facts.new_kernel
            steps.append(Step("kernel", facts.new_kernel, f"kernel {facts.new_kernel} has its headers: the driver "
                              f"install builds nvidia {target} for it through DKMS (and fails before the reboot when "
                              "the build does); boots into it"))
        elif pin_kernel:
            steps.append(Step("pin-kernel", facts.running_kernel, f"kernel {facts.new_kernel} has no nvidia {target} "
                              f"build: pin {facts.running_kernel} (proxmox-boot-tool kernel pin) and boot it again"))
        else:
            have = ", ".join(facts.builds.get(facts.new_kernel, ())) or "none"
            raise SafetyCheckFailed(f"node {facts.node}: the new kernel {facts.new_kernel} has no nvidia {target} "
                                    f"module build (DKMS builds for it: {have}) and no headers to build one; nothing "
                                    f"was changed. Install its headers (apt install "
                                    f"{headers_package(facts.new_kernel)}) or pass --pin-kernel to keep "
                                    f"{facts.running_kernel}")
    for g in facts.guests:
        cost = (": a full copy with the guest frozen until it ends, its services do not answer meanwhile (the "
                "upgrade restarts them anyway)") if g.snapshot_freezes and g.running else ""
        steps.append(Step("snapshot", g.name, f"snapshot {g.name} on {g.storage} (labwright-host-upgrade-<time>)"
                          + cost))
    steps.append(Step("host-driver", facts.node, f"install nvidia {target} on the host "
                      f"(NVIDIA-Linux-x86_64-{target}.run --dkms; was {facts.driver or 'none'})"))
    steps.append(Step("boot-unit", facts.node, "install labwright-nvidia-uvm.service: every node the guests pass "
                      "exists at boot, before the guests start"))
    steps.append(Step("reboot", facts.node, f"reboot into {boot} with nvidia {target} loaded"))
    for g in facts.guests:
        steps.append(Step("majors", g.name, f"re-read the device majors from /proc/devices into {g.name}'s config"))
    for g in facts.guests:
        steps.append(Step("userspace", g.name, f"install userspace {target} in {g.name} "
                          f"(NVIDIA-Linux-x86_64-{target}.run --no-kernel-module; was {g.userspace or 'none'})"))
    for g in facts.guests:
        services = ", ".join(g.services) or "no engine service"
        steps.append(Step("restart", g.name, f"restart {g.name} and {services}"))
    for g in facts.guests:
        steps.append(Step("check", g.name, f"labwright gpu check {g.name}; on any failure every snapshot above is "
                          "restored"))
    return Plan(facts.node, facts.driver, target, boot, steps, notes)
