"""Carry out a host upgrade plan: the host side on a ``SimulatedHost`` tree, the guests on the local LXD daemon
(real containers: snapshots, device config, the userspace installer run inside them, restarts, ``gpu check``)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labwright import snapshots
from labwright.errors import LabwrightError, OperationFailed
from labwright.gpu.guest import AUTO, check_guest
from labwright.guests.gpu import BOOT_UNIT, GpuHost, boot_unit, install_boot_unit, installed_unit, unit_paths
from labwright.hostnames import LxdName
from labwright.hostupgrade.facts import installer_name
from labwright.hostupgrade.plan import Plan, Step
from labwright.hostupgrade.simhost import SimulatedHost
from labwright.lxd.client import LxdClient
from labwright.snapshots.lxd import LxdSnapshots
from labwright.snapshots.model import SnapshotBackend

SNAPSHOT_STEP = "host-upgrade"
#: How long a restarted guest may take to answer exec with systemd up.
GUEST_READY_SECONDS = 120.0


@dataclass
class Done:
    action: str
    target: str
    ok: bool
    detail: str
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Outcome:
    plan: Plan
    ok: bool = False
    done: list[Done] = field(default_factory=list)
    snapshots: dict[str, str] = field(default_factory=dict)  # guest -> snapshot taken
    restored: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # what was left as it was (or not undone)
    message: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**self.plan.to_dict(), "ok": self.ok, "done": [d.to_dict() for d in self.done],
                "snapshots": dict(self.snapshots), "restored": list(self.restored), "left": list(self.left),
                "message": self.message, "seconds": round(self.seconds, 3)}


class Upgrade:
    #: What the check step proved, for the final message.
    checked_as = "pass gpu check"
    #: Seconds to wait for another labwright run on a GPU guest before refusing (labwright.guestlock).
    lock_wait = 300.0

    def __init__(self, plan: Plan, root: Path, repository: Path, client: LxdClient | None,
                 progress: Callable[[Done], None] | None = None):
        self.plan = plan
        self.root = root
        self.repository = repository
        self._client = client
        self.host = SimulatedHost(root)
        self.gpu_host = GpuHost(root)
        self.outcome = Outcome(plan)
        self.progress = progress

    def _record(self, step: Step, started: float, detail: str, ok: bool = True) -> None:
        done = Done(step.action, step.target, ok, detail, time.monotonic() - started)
        self.outcome.done.append(done)
        if self.progress is not None:
            self.progress(done)

    @property
    def client(self) -> LxdClient:
        """The LXD daemon the guests live on (the LXD path; the Proxmox path has none)."""
        if self._client is None:
            raise OperationFailed("host upgrade: no LXD daemon for these guests")
        return self._client

    def _backend(self, guest: str) -> SnapshotBackend:
        return LxdSnapshots(LxdName("lxd", None, guest), client=self.client)

    def _after_restore(self, guest: str) -> str:
        """What else a restored guest needs (the LXD restore leaves it as it was already)."""
        return ""

    # --- the steps ----------------------------------------------------------------------------------------------
    def snapshot(self, guest: str) -> str:
        try:
            taken = snapshots.take(self._backend(guest), SNAPSHOT_STEP)
        except LabwrightError as exc:
            raise Refused(f"guest {guest}: the snapshot could not be taken: {exc}") from exc
        self.outcome.snapshots[guest] = taken.name
        return f"{taken.name} ({taken.how}, {taken.seconds:.1f} s)"

    def passed_paths(self) -> list[str]:
        """The /dev/nvidia* paths the guests are passed (the boot unit makes each of them)."""
        return [str(d.get("path")) for g in self.plan_guests() for d in
                (self.client.instance(g).get("devices") or {}).values()
                if d.get("type") == "unix-char" and str(d.get("path", "")).startswith("/dev/nvidia")]

    def boot_unit(self) -> str:
        passed = self.passed_paths()
        current = installed_unit(self.gpu_host)
        unit = boot_unit([*unit_paths(current), *(n.path for n in self.gpu_host.device_nodes()), *passed])
        install_boot_unit(self.gpu_host, unit, f"host upgrade {self.plan.node}")
        return f"{BOOT_UNIT}: {unit.summary()}"

    def majors(self, guest: str) -> str:
        """Point the guest's /dev/nvidia* unix-char devices at the host's nodes as they are now (major, minor)."""
        nodes = {n.path: n for n in self.gpu_host.device_nodes()}
        majors = self.gpu_host.majors()
        instance = self.client.instance(guest)
        devices = dict(instance.get("devices") or {})
        changed = []
        for name, device in devices.items():
            path = str(device.get("path") or "")
            if device.get("type") != "unix-char" or not path.startswith("/dev/nvidia"):
                continue
            node = nodes.get(path)
            if node is None:
                continue
            new = {**device, "source": node.source, "major": str(node.major), "minor": str(node.minor)}
            if new != device:
                changed.append(f"{path} {device.get('major')}:{device.get('minor')} -> {node.major}:{node.minor}")
                devices[name] = new
        if changed:
            self.client.request("PATCH", f"/1.0/instances/{guest}", {"devices": devices})
        uvm = majors.get("nvidia-uvm")
        return ("; ".join(changed) if changed else "already the host's majors") + f" (nvidia-uvm major {uvm})"

    def userspace(self, guest: str) -> str:
        name = installer_name(self.plan.to_version)
        installer = self.repository / name
        inside = f"/tmp/labwright-{name}"
        if self.client.instance(guest).get("status") != "Running":  # a stopped guest: started with the new majors
            self.client.set_state(guest, "start")
            self._wait_systemd(guest)
        self.client.push_file(guest, inside, installer.read_bytes(), mode=0o755)
        result = self.client.exec(guest, ["sh", "-c", f"sh {inside} --no-kernel-module --silent; rc=$?; "
                                                      f"rm -f {inside}; exit $rc"])
        if result.exit_code != 0:
            raise OperationFailed(f"guest {guest}: {name} --no-kernel-module failed (exit {result.exit_code}): "
                                  f"{result.stderr.decode(errors='replace').strip()[-200:]}")
        return f"{name} --no-kernel-module"

    def _wait_systemd(self, guest: str) -> str:
        deadline = time.monotonic() + GUEST_READY_SECONDS
        state = ""
        while time.monotonic() < deadline:
            result = self.client.exec(guest, ["sh", "-c", "systemctl is-system-running 2>/dev/null; true"])
            state = result.stdout.decode(errors="replace").strip()
            if state in ("running", "degraded"):
                return state
            time.sleep(0.2)
        raise OperationFailed(f"guest {guest}: systemd did not finish starting in {GUEST_READY_SECONDS:.0f} s "
                              f"(state {state or 'unknown'})")

    def restart(self, guest: str, services: tuple[str, ...]) -> str:
        running = self.client.instance(guest).get("status") == "Running"
        self.client.set_state(guest, "restart" if running else "start", force=True)
        state = self._wait_systemd(guest)
        for service in services:
            # reset-failed first: a unit that crash-looped on the old driver may sit at systemd's start limit, which
            # refuses a plain restart ("start of the service was attempted too often")
            unit = f"{service}.service"
            result = self.client.exec(guest, ["sh", "-c", 'systemctl reset-failed "$1" 2>/dev/null; '
                                                          'exec systemctl restart "$1"', "sh", unit])
            if result.exit_code != 0:
                raise OperationFailed(f"guest {guest}: systemctl restart {service} failed (exit {result.exit_code})")
        return f"restarted (systemd {state})" + (f"; {', '.join(services)} restarted" if services else "")

    def check(self, guest: str) -> tuple[bool, str]:
        report = check_guest(guest, AUTO, self.root)
        failed = [c for c in report.checks if not c.ok]
        if failed:
            return False, "; ".join(f"{c.name}: {c.detail}" for c in failed)
        return True, f"{len(report.checks)} checks passed in {report.seconds:.2f} s"

    def plan_guests(self) -> list[str]:
        return [s.target for s in self.plan.steps if s.action == "snapshot"]

    def lock_guests(self, locks: contextlib.ExitStack) -> None:
        """Hold every running GPU guest's run lock (labwright.guestlock) for the whole upgrade: a deploy or stack
        switch in a guest finishes first (``lock_wait`` seconds), or the upgrade is refused naming it before
        anything is done. The restarts end the guests' locks with their /run; a stopped guest runs nothing."""
        from labwright.guestlock import GuestBusy, held
        from labwright.hosts.lxd import LxdHost

        for guest in self.plan_guests():
            if self.client.instance(guest).get("status") != "Running":
                continue
            try:
                locks.enter_context(held(LxdHost(guest, self.client), "labwright host upgrade", wait=self.lock_wait,
                                         say=lambda line: print(line, file=sys.stderr)))
            except GuestBusy as exc:
                raise Refused(str(exc)) from exc
            except LabwrightError as exc:  # no python3 there: no labwright run can hold it either
                print(f"labwright: note: guest {guest}: upgraded without its run lock ({exc})", file=sys.stderr)

    # --- the sequence -------------------------------------------------------------------------------------------
    def run(self, services: dict[str, tuple[str, ...]]) -> Outcome:
        with contextlib.ExitStack() as locks:
            return self._run(services, locks)

    def _run(self, services: dict[str, tuple[str, ...]], locks: contextlib.ExitStack) -> Outcome:
        started = time.monotonic()
        out = self.outcome
        host_changed = False
        try:
            self.lock_guests(locks)
            for step in self.plan.steps:
                t = time.monotonic()
                if step.action in ("list", "kernel"):
                    self._record(step, t, step.detail)
                elif step.action == "pin-kernel":
                    host_changed = True
                    self._record(step, t, self.host.pin_kernel(step.target))
                elif step.action == "snapshot":
                    self._record(step, t, self.snapshot(step.target))
                elif step.action == "host-driver":
                    host_changed = True
                    self._record(step, t, self.host.install_driver(self.plan.to_version,
                                                                   self.running_kernel()))
                elif step.action == "boot-unit":
                    self._record(step, t, self.boot_unit())
                elif step.action == "reboot":
                    self._record(step, t, self.host.reboot(self.plan.boot_kernel))
                elif step.action == "majors":
                    self._record(step, t, self.majors(step.target))
                elif step.action == "userspace":
                    self._record(step, t, self.userspace(step.target))
                elif step.action == "restart":
                    self._record(step, t, self.restart(step.target, services.get(step.target, ())))
                elif step.action == "check":
                    ok, detail = self.check(step.target)
                    self._record(step, t, detail, ok)
                    if not ok:
                        raise OperationFailed(f"gpu check {step.target} failed after the upgrade: {detail}")
            out.ok = True
            out.message = (f"node {self.plan.node}: nvidia {self.plan.from_version} -> {self.plan.to_version}, "
                           f"kernel {self.plan.boot_kernel}; {len(self.plan_guests())} GPU guest(s) "
                           f"{self.checked_as}")
        except Refused as exc:
            taken = ", ".join(out.snapshots.values()) or "none"
            out.message = f"{exc}; nothing was upgraded (snapshots taken: {taken})"
            out.left = [f"{g}: untouched" for g in self.plan_guests()]
        except LabwrightError as exc:
            self._restore(str(exc), host_changed)
        out.seconds = time.monotonic() - started
        return out

    def running_kernel(self) -> str:
        try:
            return (self.root / "proc/sys/kernel/osrelease").read_text().strip()
        except OSError:
            return self.plan.boot_kernel

    def _restore(self, why: str, host_changed: bool) -> None:
        out = self.outcome
        for guest, name in out.snapshots.items():
            backend = self._backend(guest)
            try:
                snapshots.restore(backend, name, force=True)
                out.restored.append(guest)
                out.left.append(f"{guest}: restored to {name} (its userspace and device config as before)"
                                + self._after_restore(guest))
            except LabwrightError as exc:
                out.left.append(f"{guest}: NOT restored ({exc}); restore it with "
                                f"`{backend.native_command('restore', name)}`")
        if host_changed:
            back = (f"reinstall NVIDIA-Linux-x86_64-{self.plan.from_version}.run --dkms and reboot to go back"
                    if self.plan.from_version else "remove the driver to go back")
            out.left.append(f"host {self.plan.node}: keeps nvidia {self.plan.to_version} (guest snapshots do not "
                            f"undo a host driver): {back}")
        out.message = f"{why}; restored {len(out.restored)}/{len(out.snapshots)} guest snapshot(s)"


class Refused(OperationFailed):
    """A step before anything was upgraded could not be done."""
