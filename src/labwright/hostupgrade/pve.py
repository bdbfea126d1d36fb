"""The host upgrade on a Proxmox VE node: the node's GPU containers read through the API, snapshotted with ``pct
snapshot`` (``POST /nodes/{node}/lxc/{vmid}/snapshot``, labwright.snapshots), their raw device majors rewritten
after the reboot, restarted, and restored from the snapshots on a failure.

How a container gets the GPU, and what a reboot does to it (pve-container 6.1.10, commit 94f558522ef6):

- ``devN: /dev/nvidia0,gid=44,mode=0666`` (PVE >= 8.1; the ``dev`` format in src/PVE/LXC/Config.pm: ``path``,
  ``mode``, ``uid``, ``gid``, ``deny-write``). PVE resolves the node's device at every start: ``update_lxc_config``
  in src/PVE/LXC.pm stats each ``devN`` path (``PVE::LXC::Tools::get_device_mode_and_rdev``) and writes
  ``lxc.cgroup2.devices.allow = c MAJOR:MINOR rw`` with the major it has now, and src/lxc-pve-autodev-hook makes
  the node inside the container from the same list. A new nvidia-uvm major needs no rewrite: only a restart.
- raw lines (before 8.1, and what most guides still paste): ``lxc.cgroup2.devices.allow: c 195:* rwm``,
  ``c 509:* rwm`` (nvidia-uvm's dynamic major) and ``lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none
  bind,optional,create=file``. PVE passes them to LXC verbatim (``lxc`` key of the config, not in the API schema),
  so an allow line names the major of the boot it was written in: after a reboot that moves nvidia-uvm's major the
  container sees /dev/nvidia-uvm but may not open it. Those lines are rewritten to the host's new majors in the
  node's config file (``/etc/pve/nodes/NODE/lxc/VMID.conf``, as labwright.guests.proxmox writes raw lines).

Inside the containers the runbook works as a person on the node would, with ``pct`` (it runs on the node: ``host
upgrade NODE`` refuses another host): the installer is copied in with ``pct push`` (checked by its sha256 read back
with ``pct exec``, since pct exits 0 when its copy failed) and run with ``pct exec VMID -- ... --no-kernel-module``,
and ``gpu check``'s collection commands run through ``pct exec`` (labwright.gpu.check: GPU visible, userspace ==
host module exactly, the CT's NVIDIA nodes with the host's majors). A stopped container is started for that
and stopped again. When the after-check fails, every snapshot is rolled back (the containers' files, their
userspace with them, and configs) and the host driver goes back to the version before (the node host's
rollback_driver; its module is loaded at the next boot).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from proxmoxer import ProxmoxAPI

from labwright.connectors.pct_commands import pct_exec_command, pct_push_command
from labwright.errors import BadInput, OperationFailed
from labwright.gpu.check import Check, run_checks
from labwright.gpu.guest import AUTO, engine_service
from labwright.gpu.nvidia.driver import NVIDIA_MAJOR, userspace_listing, userspace_versions
from labwright.gpu.nvidia.host import GpuHost
from labwright.gpu.nvidia.upgrade_facts import (
    dkms_builds,
    installed_kernels,
    installer_name,
    kernel_headers,
    repository_versions,
    running_kernel,
)
from labwright.guests.proxmox_api import call
from labwright.guests.proxmox_render import props
from labwright.hostnames import PctName
from labwright.hosts import Host
from labwright.hosts.local import LocalHost
from labwright.hosts.pct import PctHost
from labwright.hostupgrade.installer import guest_installer_said
from labwright.hostupgrade.plan import GuestFacts, NodeFacts, Plan, Step, kernel_key, make_plan
from labwright.hostupgrade.run import Done, NodeHost, Outcome, Refused, Upgrade
from labwright.hostupgrade.state import HTTPS, PVESH, Saved
from labwright.hostupgrade.trust import verify_installer
from labwright.shell import quote
from labwright.snapshots.model import SnapshotBackend
from labwright.snapshots.proxmox import PveSnapshots

ALLOW = "lxc.cgroup2.devices.allow"
MOUNT = "lxc.mount.entry"
_DEV_KEY = re.compile(r"(?a)^dev\d+$")
_ALLOW_VALUE = re.compile(r"(?a)^c (\d+):(\S+) (\S+)$")
#: An allow line in the config file: ``lxc.cgroup2.devices.allow: c 509:* rwm`` (``=`` also parses, as in LXC).
_ALLOW_LINE = re.compile(r"(?a)^(lxc\.cgroup2\.devices\.allow\s*[:=]\s*c )(\d+)(:\S+ \S+\s*)$")


@dataclass(frozen=True)
class PveGpuGuest:
    """A container on the node that is passed the NVIDIA devices: by ``devN`` entries (``dev_paths``), by raw
    lines (``raw_majors`` of its allow lines, ``raw_mounts`` its bind-mounted /dev/nvidia* nodes), or both."""

    node: str
    vmid: int
    hostname: str
    running: bool
    dev_paths: tuple[str, ...] = ()
    raw_majors: tuple[int, ...] = ()
    raw_mounts: tuple[str, ...] = ()
    snapshots: bool = True
    storage: str = ""
    no_snapshot_reason: str = ""

    @property
    def label(self) -> str:
        return PctName(self.node, self.vmid).host

    def wiring(self) -> str:
        parts = []
        if self.dev_paths:
            parts.append(f"devN: {len(self.dev_paths)} node(s)")
        if self.raw_majors or self.raw_mounts:
            majors = ", ".join(str(m) for m in self.raw_majors) or "none"
            parts.append(f"raw lines: allow majors {majors}, {len(self.raw_mounts)} bind mount(s)")
        return "; ".join(parts)


def gpu_wiring(config: Mapping[str, Any], nvidia_majors: set[int]) -> tuple[tuple[str, ...], tuple[int, ...],
                                                                          tuple[str, ...]]:
    """(devN /dev/nvidia* paths, majors of the raw allow lines that are NVIDIA's, raw /dev/nvidia* bind mounts) of
    a container config as ``GET .../config`` returns it (raw lines as ``lxc: [[key, value], ...]``). An allow line
    is NVIDIA's when its major is 195 or one of the node's nvidia* majors now, or when the container also
    bind-mounts NVIDIA nodes and the major is a dynamic one (a uvm or caps major left from an earlier boot)."""
    dev_paths = tuple(path for key, value in sorted(config.items(), key=lambda kv: _index(kv[0]))
                      if _DEV_KEY.match(key) and (path := props(value, "path").get("path", "")).startswith(
                          "/dev/nvidia"))
    raw = [(str(pair[0]), str(pair[1])) for pair in (config.get("lxc") or []) if len(pair) == 2]
    mounts = tuple(v.split()[0] for k, v in raw if k == MOUNT and v.split() and v.split()[0].startswith("/dev/nvidia"))
    majors: list[int] = []
    for key, value in raw:
        match = _ALLOW_VALUE.match(value.strip()) if key == ALLOW else None
        if match is None:
            continue
        major = int(match.group(1))
        if major == NVIDIA_MAJOR or major in nvidia_majors or (mounts and _dynamic(major)):
            majors.append(major)
    return dev_paths, tuple(dict.fromkeys(majors)), mounts


def _dynamic(major: int) -> bool:
    """Linux's dynamically allocated character majors (Documentation/admin-guide/devices.txt: 234-254 and
    384-511), where nvidia-uvm and nvidia-caps get theirs."""
    return 234 <= major <= 254 or 384 <= major <= 511


def _index(key: str) -> tuple[int, str]:
    digits = re.sub(r"\D", "", key)
    return (int(digits) if digits else -1), key


def rewrite_allow_majors(text: str, mapping: Mapping[int, int]) -> tuple[str, list[str]]:
    """The config file with every raw allow line of the main section whose major is in ``mapping`` pointed at
    the new major; snapshot sections (``[name]``) and pending changes are left as they were (a rollback puts the
    old lines back). Returns the text and ``old -> new`` for each line changed."""
    lines = text.split("\n")
    end = next((i for i, line in enumerate(lines) if line.startswith("[")), len(lines))
    changes = []
    for i in range(end):
        match = _ALLOW_LINE.match(lines[i])
        if match and int(match.group(2)) in mapping:
            new = mapping[int(match.group(2))]
            lines[i] = f"{match.group(1)}{new}{match.group(3)}"
            changes.append(f"c {match.group(2)}:* -> c {new}:*")
    return "\n".join(lines), changes


def nvidia_majors(host: GpuHost) -> dict[str, int]:
    return {name: major for name, major in host.majors().items() if name.startswith("nvidia")}


def pve_gpu_guests(api: ProxmoxAPI, node: str, majors: set[int],
                   support: Callable[[PctName], SnapshotBackend] | None = None) -> list[PveGpuGuest]:
    """The node's containers whose config passes NVIDIA devices, with their storage's snapshot support."""
    found = []
    items = call(f"node {node}: listing containers", lambda: api.nodes(node).lxc.get())
    for item in sorted(items, key=lambda i: int(i.get("vmid", 0))):
        vmid = int(item["vmid"])
        ct = api.nodes(node).lxc(vmid)
        config = call(f"@pct/{node}/{vmid}: reading config", ct.config.get)
        dev_paths, raw_majors, raw_mounts = gpu_wiring(config, majors)
        if not (dev_paths or raw_majors or raw_mounts):
            continue
        name = PctName(node, vmid)
        backend = support(name) if support is not None else PveSnapshots(name, api=api)
        can = backend.support()
        found.append(PveGpuGuest(node, vmid, str(config.get("hostname") or f"CT{vmid}"),
                                 str(item.get("status")) == "running", dev_paths, raw_majors, raw_mounts,
                                 can.supported, can.storage, can.reason))
    return found


def ct_userspace(node: Host, vmid: int) -> str | None:
    """The version of a running CT's libcuda/libnvidia-ml (``mixed:A,B`` when they differ), read with ``pct exec``;
    None when it has none, or ``pct`` cannot be asked (not on a node)."""
    result = PctHost(node, vmid).run(f"{userspace_listing()}; true")
    if not result.ok:
        return None
    versions = sorted(set(userspace_versions(result.stdout.splitlines()).values()))
    if not versions:
        return None
    return versions[0] if len(versions) == 1 else "mixed:" + ",".join(versions)


def pve_node_facts(node: str, files: Host, api: ProxmoxAPI, repository: Path,
                   node_host: Host | None = None) -> tuple[NodeFacts, list[PveGpuGuest]]:
    """``files``: the node's (this machine's: ``host upgrade`` runs on the node itself)."""
    host = GpuHost(files)
    loaded = host.driver_version()
    kernel = running_kernel(files)
    pending = [k for k in installed_kernels(files) if k != kernel and kernel_key(k) > kernel_key(kernel)]
    guests = pve_gpu_guests(api, node, set(nvidia_majors(host).values()))
    on_node = node_host or LocalHost(label=f"node {node}")
    facts = NodeFacts(node, loaded, kernel, pending[-1] if pending else None, repository_versions(repository),
                      dkms_builds(files, loaded),
                      tuple(GuestFacts(g.label, g.running, ct_userspace(on_node, g.vmid) if g.running else None,
                                       g.snapshots, g.storage, g.no_snapshot_reason)
                            for g in guests), str(repository), kernel_headers(files))
    return facts, guests


def make_pve_plan(facts: NodeFacts, guests: list[PveGpuGuest], wanted: str | None = None,
                  pin_kernel: bool = False, majors: Mapping[str, int] | None = None,
                  fix_mismatched: bool = False) -> Plan:
    """The LXD plan's order and refusals (labwright.hostupgrade.plan), with each step said for a PVE container:
    which guests have devN entries (no rewrite) and which raw allow lines (rewritten after the reboot)."""
    if not guests:
        raise BadInput(f"node {facts.node}: no GPU container on it (no container config passes /dev/nvidia*: devN "
                       f"entries or {ALLOW} c {NVIDIA_MAJOR}:* lines); nothing to carry through an upgrade: upgrade "
                       "the driver directly")
    plan = make_plan(facts, wanted, pin_kernel, fix_mismatched)
    by_label = {g.label: g for g in guests}
    names = {major: name for name, major in (majors or {}).items()}
    steps: list[Step] = []
    for step in plan.steps:
        guest = by_label.get(step.target)
        if step.action == "list":
            steps.append(replace(step, detail=f"{len(guests)} GPU container(s): " + "; ".join(
                f"{g.label} {g.hostname} ({'running' if g.running else 'stopped'}; {g.wiring()})" for g in guests)))
        elif step.action == "snapshot" and guest is not None:
            steps.append(replace(step, detail=f"pct snapshot {guest.vmid} labwright-host-upgrade-<time> through the "
                                              f"API (POST /nodes/{guest.node}/lxc/{guest.vmid}/snapshot) on "
                                              f"{guest.storage}"))
        elif step.action == "majors" and guest is not None:
            said = []
            if guest.dev_paths:
                said.append("devN entries: no rewrite (PVE reads each devN node's major when the container starts)")
            if guest.raw_majors:
                stale = "stale: not an NVIDIA major now"
                majors_said = ", ".join(f"{m} ({names.get(m, 'nvidia' if m == NVIDIA_MAJOR else stale)})"
                                        for m in guest.raw_majors)
                said.append(f"raw {ALLOW} majors {majors_said}: every one whose device gets a new major at the "
                            f"reboot is rewritten to it in /etc/pve/nodes/{guest.node}/lxc/{guest.vmid}.conf")
            steps.append(replace(step, detail="; ".join(said) or "no device major in its config"))
        elif step.action == "userspace" and guest is not None:
            steps.append(replace(step, detail=(
                f"NVIDIA-Linux-x86_64-{plan.to_version}.run copied in with pct push {guest.vmid} (sha256 checked) and "
                f"run with pct exec {guest.vmid} -- ... --no-kernel-module" + (
                    "" if guest.running else "; stopped: started for it, stopped again"))))
        elif step.action == "restart" and guest is not None:
            steps.append(replace(step, detail=(f"pct stop/start {guest.vmid} through the API: it starts with the new "
                                               "majors" if guest.running else
                                               "stopped: left stopped; its config carries the new majors")))
        elif step.action == "check" and guest is not None:
            steps.append(replace(step, detail=("running again" if guest.running else "still stopped (checked while "
                                 "started for the userspace)") + ", gpu check through pct exec (userspace == "
                                 f"{plan.to_version}, its NVIDIA nodes with the host's majors) and its config passes "
                                 "the host's majors as they are after the reboot; on any failure every snapshot above "
                                 "is restored and the host driver goes back"))
        else:
            steps.append(step)
    notes = list(plan.notes)
    notes += [f"guest {g.label}: its raw allow line for major {m} is stale already (no NVIDIA device has that major "
              "now); fix it by hand" for g in guests for m in g.raw_majors
              if m != NVIDIA_MAJOR and majors is not None and m not in majors.values()]
    return Plan(plan.node, plan.from_version, plan.to_version, plan.boot_kernel, steps, notes)


class PveUpgrade(Upgrade):
    """The plan carried out on a Proxmox VE node: host steps through the node host as on LXD, the guests
    through the PVE API and the node's config files (``/etc/pve``) through its Host."""

    checked_as = "pass gpu check through pct exec, with the host's device majors"
    rolls_back_driver = True

    def lock_guests(self, locks: contextlib.ExitStack) -> None:
        """Hold every running GPU container's run lock (labwright.guestlock, its /run/lock in the CT) for the whole
        upgrade, through ``pct exec`` on the node, as on LXD: a deploy or stack switch in it (pyinfra's @pct
        connector takes the same file) finishes first, or the upgrade is refused naming it before anything is done.
        A stopped container runs nothing to wait for; the restarts end the locks with the CTs' /run."""
        from labwright.guestlock import GuestBusy, held

        for label in self.plan_guests():
            g = self._guest(label)
            if not g.running:
                continue
            try:
                locks.enter_context(held(PctHost(self.node, g.vmid, label), "labwright host upgrade",
                                         wait=self.lock_wait, say=lambda line: print(line, file=sys.stderr)))
            except GuestBusy as exc:
                raise Refused(str(exc)) from exc
            except OperationFailed as exc:  # no python3 there: no labwright run can hold it either
                print(f"labwright: note: guest {label}: upgraded without its run lock ({exc})", file=sys.stderr)

    def __init__(self, plan: Plan, files: LocalHost, repository: Path, api: ProxmoxAPI, guests: list[PveGpuGuest],
                 progress: Callable[[Done], None] | None = None, poll_interval: float = 0.5,
                 node: Host | None = None, *, host: NodeHost):
        super().__init__(plan, files, repository, None, progress, host=host)
        self.api = api
        self.guests = {g.label: g for g in guests}
        self.poll_interval = poll_interval
        #: Where ``pct`` runs: this machine, the node (``host upgrade NODE`` runs on the node itself).
        self.node = node or LocalHost(label=f"node {plan.node}")
        self.majors_before = nvidia_majors(self.gpu_host)  # before anything: what the raw lines were written for
        #: gpu check of a CT that was stopped, taken while it was started for its userspace.
        self.checked_while_started: dict[str, list[Check]] = {}

    def _guest(self, label: str) -> PveGpuGuest:
        return self.guests[label]

    def run(self, services: dict[str, tuple[str, ...]]) -> Outcome:
        """Refuse before anything changes when ``pct`` cannot be run here (the userspace and the checks need it)."""
        found = self.node.run("command -v pct")
        if not found.ok:
            raise BadInput(f"node {self.plan.node}: no `pct` on this host; the upgrade installs the userspace into "
                           "the containers with pct push/exec: run `labwright host upgrade` on the Proxmox VE node "
                           "itself")
        return super().run(services)

    def _backend(self, guest: str) -> SnapshotBackend:
        g = self._guest(guest)
        return PveSnapshots(PctName(g.node, g.vmid), api=self.api, poll_interval=self.poll_interval)

    def _conf(self, g: PveGpuGuest) -> str:
        return f"/etc/pve/nodes/{g.node}/lxc/{g.vmid}.conf"

    def _after_restore(self, guest: str) -> str:
        g = self._guest(guest)
        backend = self._backend(guest)
        if g.running and not backend.running():
            try:
                backend.start()
            except OperationFailed as exc:
                return f"; it was running before the upgrade but did not start again: {exc}"
            return "; started again"
        return ""

    def passed_paths(self) -> list[str]:
        return [p for g in self.guests.values() for p in (*g.dev_paths, *g.raw_mounts)]

    def majors(self, guest: str) -> str:
        g = self._guest(guest)
        after = nvidia_majors(self.gpu_host)
        mapping = {major: after[name] for name, major in self.majors_before.items()
                   if name in after and after[name] != major}
        said = "devN entries: PVE reads the new majors at start" if g.dev_paths else ""
        if not g.raw_majors:
            return said or "no device major in its config"
        text = self.gpu_host.read_file(self._conf(g))
        new, changes = rewrite_allow_majors(text, mapping)
        if changes:
            self.gpu_host.write_file(self._conf(g), new)
        raw = (f"{ALLOW} {', '.join(changes)} in {self._conf(g)}" if changes else
               f"raw {ALLOW} majors {', '.join(map(str, g.raw_majors))} are the host's already")
        return "; ".join(p for p in (said, raw) if p) + f" (nvidia-uvm major {after.get('nvidia-uvm')})"

    def _pct(self, guest: str, command: str, what: str) -> str:
        result = self.node.run(command)
        if not result.ok:
            raise OperationFailed(f"guest {guest}: {what} failed (exit {result.rc}): {result.last_line()}")
        return result.stdout

    def userspace(self, guest: str) -> str:
        """The repository's installer into the CT (pct push, its sha256 read back), run with --no-kernel-module."""
        g = self._guest(guest)
        name = installer_name(self.plan.to_version)
        installer = self.repository / name
        digest = verify_installer(installer, self.plan.to_version)  # the recorded sha256 (trust.py), before the copy
        backend = self._backend(guest)
        started_here = not backend.running()
        if started_here:  # pct exec needs it running; it starts with the new majors
            backend.start()
        try:
            # a fresh directory of its own (mktemp -d, 0700), not a /tmp name a user of the container could predict
            made = self._pct(guest, pct_exec_command(g.vmid, "mktemp -d /tmp/labwright-installer.XXXXXXXXXX"),
                             "mktemp -d").strip()
            if not made.startswith("/tmp/labwright-installer.") or any(c.isspace() for c in made):
                raise OperationFailed(f"guest {guest}: mktemp -d answered {made[:60]!r}; the installer was not copied")
            inside = f"{made}/{name}"
            self._pct(guest, pct_push_command(g.vmid, str(installer), inside, perms=0o755), f"pct push {name}")
            seen = self._pct(guest, pct_exec_command(g.vmid, f"sha256sum {quote(inside)}"), "reading it back")
            if seen.split()[:1] != [digest]:
                raise OperationFailed(f"guest {guest}: pct push of {name} left another file in the container "
                                      f"(sha256 {(seen.split() or ['none'])[0][:12]}..., expected {digest[:12]}...); "
                                      "pct exits 0 when its copy failed: check the container's free space")
            run = (f"sh {quote(inside)} --no-kernel-module --silent; rc=$?; rm -rf {quote(made)}; "
                   "exit $rc")
            result = self.node.run(pct_exec_command(g.vmid, run))
            if not result.ok:
                said = guest_installer_said(f"{result.stderr}\n{result.stdout}")
                raise OperationFailed(f"guest {guest}: {name} --no-kernel-module failed (exit {result.rc}): {said}")
            if started_here:
                self.checked_while_started[guest] = self._gpu_checks(g)
        finally:
            if started_here:
                backend.stop()
        return (f"{name} --no-kernel-module (pct push {g.vmid}, pct exec {g.vmid})"
                + ("; started for it and stopped again" if started_here else ""))

    def _gpu_checks(self, g: PveGpuGuest) -> list[Check]:
        """gpu check through pct exec; the host nodes compared are the ones the CT is passed."""
        ct = PctHost(self.node, g.vmid)
        passed = {*g.dev_paths, *g.raw_mounts}
        nodes = [n for n in self.gpu_host.device_nodes() if n.path in passed]
        return run_checks(ct, self.gpu_host.driver_version(), nodes, engine_service(ct, AUTO))

    def restart(self, guest: str, services: tuple[str, ...]) -> str:
        g = self._guest(guest)
        if not g.running:
            return "stopped before the upgrade: left stopped (its config carries the new majors)"
        backend = self._backend(guest)
        if backend.running():
            backend.stop()
        backend.start()
        return "stopped and started through the API"

    def check(self, guest: str) -> tuple[bool, str]:
        g = self._guest(guest)
        problems = []
        if g.running and not self._backend(guest).running():
            problems.append("not running after the restart")
        config = call(f"{guest}: reading config", lambda: self.api.nodes(g.node).lxc(g.vmid).config.get())
        after = nvidia_majors(self.gpu_host)
        _, raw_majors, _ = gpu_wiring(config, set(after.values()))
        stale = [m for m in raw_majors if m != NVIDIA_MAJOR and m not in after.values()]
        if stale:
            problems.append(f"raw {ALLOW} major(s) {', '.join(map(str, stale))} are no NVIDIA device's on the host")
        missing = [p for p in g.dev_paths if not self.gpu_host.host.exists(p)]
        if missing:
            problems.append(f"devN node(s) missing on the host: {', '.join(missing)}")
        checks = self._gpu_checks(g) if g.running else self.checked_while_started.get(guest, [])
        problems += [f"{c.name}: {c.detail}" for c in checks if not c.ok]
        if problems:
            return False, "; ".join(problems)
        passed = f"gpu check: {len(checks)} checks passed" + ("" if g.running else " while it was started")
        return True, ("running, " if g.running else "stopped again, ") + f"{passed}; device majors are the host's"

def pve_saved(upgrade: PveUpgrade, inventory: Path, api: str = HTTPS) -> Saved:
    """What a resumed Proxmox upgrade needs besides the plan: how it reaches the API again (``api``: PVESH, the
    node's own pvesh as root, or HTTPS with the inventory and the carried credentials), the guests as they were
    before (running or not), and the nvidia majors the raw allow lines were written for."""
    return Saved(upgrade.plan.node, "pve", {}, 0, str(upgrade.repository), inventory=str(inventory),
                 guests=[asdict(g) for g in upgrade.guests.values()], extra={"majors_before": upgrade.majors_before},
                 api=api)


#: Seconds one pvesh call may take: a task's worker runs in pvesh's foreground (a snapshot, a start or a stop).
PVESH_TIMEOUT = 900.0


def node_api_mode() -> str:
    """PVESH when the resumed run can reach the node's API as root without any secret: it runs on the node itself
    as root, with ``pvesh`` and the cluster file system (/etc/pve/local); else HTTPS."""
    if os.geteuid() == 0 and shutil.which("pvesh") and Path("/etc/pve/local").is_dir():
        return PVESH
    return HTTPS


def pvesh_api(timeout: float = PVESH_TIMEOUT) -> ProxmoxAPI:
    """The node's API through its own ``pvesh``, with proxmoxer's local backend: the same ProxmoxAPI interface
    (``api.nodes(n).lxc(v).snapshot.post(...)``), each call ``pvesh get|create|set|delete PATH -k v --output-format
    json``. pvesh needs no login: pve-manager's PVE/CLI/pvesh.pm (4d3822cc751e) sets up the CLI environment as
    root@pam (``setup_environment``: ``PVE::RPCEnvironment->setup_default_cli_env()``) and calls the API handler
    in-process (``call_api_method``: ``$handler->handle($info, $param)``); a task's worker runs in the foreground
    for the CLI (pve-common RESTEnvironment.pm ``fork_worker``: ``$sync`` when the type is 'cli'), its log lines
    ahead of the JSON, which proxmoxer's serializer skips. So no API secret is written for the boot unit."""
    return ProxmoxAPI(backend="local", service="PVE", timeout=timeout)


def guests_from_saved(saved: Saved) -> list[PveGpuGuest]:
    """The containers as ``pve_saved`` kept them (JSON gives lists where the dataclass has tuples)."""
    tuples = ("dev_paths", "raw_majors", "raw_mounts")
    fields: list[dict[str, Any]] = [{k: tuple(v) if k in tuples else v for k, v in g.items()} for g in saved.guests]
    return [PveGpuGuest(**f) for f in fields]
