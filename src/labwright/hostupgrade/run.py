"""Carry out a host upgrade plan: the host side through a ``NodeHost`` (the node's own tools: realhost.CommandHost),
the guests on the local LXD daemon (real containers: snapshots, device config, the userspace installer run inside
them, restarts, ``gpu check``)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from labwright import snapshots
from labwright.errors import LabwrightError, OperationFailed
from labwright.gpu.guest import AUTO, check_guest
from labwright.gpu.nvidia.boot_unit import BOOT_UNIT, boot_unit, install_boot_unit, installed_unit, unit_paths
from labwright.gpu.nvidia.host import GpuHost
from labwright.gpu.nvidia.upgrade_facts import installer_name
from labwright.hostnames import LxdName
from labwright.hosts import Result
from labwright.hosts.local import LocalHost
from labwright.hostupgrade import state
from labwright.hostupgrade.installer import guest_installer_said
from labwright.hostupgrade.plan import Plan, Step
from labwright.hostupgrade.state import REBOOTING, RESUME_UNIT, Saved
from labwright.hostupgrade.trust import verify_installer
from labwright.lxd.client import LxdClient
from labwright.snapshots.lxd import LxdSnapshots
from labwright.snapshots.model import SnapshotBackend

SNAPSHOT_STEP = "host-upgrade"
#: How long a restarted guest may take to answer exec with systemd up.
GUEST_READY_SECONDS = 120.0


class NodeHost(Protocol):
    """The host side of an upgrade: ``CommandHost`` on the node (realhost.py); tests give a double over a host
    tree."""

    installed: str | None  # the version install_driver installed (None: not yet, or rolled back)
    previous: str | None  # the loaded version before it
    reboots_for_real: bool  # the reboot ends this process (the state file and the resume unit carry the run on)

    def preflight(self, plan: Plan) -> None: ...

    def install_driver(self, version: str, kernel: str) -> str: ...

    def rollback_driver(self) -> str: ...

    def pin_kernel(self, kernel: str) -> str: ...

    def reboot(self, kernel: str) -> str: ...

    def enable_resume_unit(self, text: str) -> str: ...

    def remove_resume_unit(self) -> None: ...

    #: how messages name the node, and its own commands (the boot unit's systemctl): a ``labwright.hosts.Host``'s
    label: str

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = None) -> Result: ...


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
    rebooting: bool = False  # a real node: rebooting, the boot unit resumes the upgrade

    def to_dict(self) -> dict[str, Any]:
        return {**self.plan.to_dict(), "ok": self.ok, "done": [d.to_dict() for d in self.done],
                "snapshots": dict(self.snapshots), "restored": list(self.restored), "left": list(self.left),
                "message": self.message, "seconds": round(self.seconds, 3), "rebooting": self.rebooting}


class Upgrade:
    #: What the check step proved, for the final message.
    checked_as = "pass gpu check"
    #: Seconds to wait for another labwright run on a GPU guest before refusing (labwright.guestlock).
    lock_wait = 300.0
    #: A failure after the host driver changed puts the previous one back (Proxmox; always on a real node). The
    #: lab's LXD path leaves it and says how to go back.
    rolls_back_driver = False

    def __init__(self, plan: Plan, files: LocalHost, repository: Path, client: LxdClient | None,
                 progress: Callable[[Done], None] | None = None, *, host: NodeHost):
        self.plan = plan
        #: The node's files (this machine's; tests: a double over a host tree), its state file among them.
        self.files = files
        self.repository = repository
        self._client = client
        #: The host side: the node's own tools (realhost.CommandHost), or a test's double.
        self.host: NodeHost = host
        #: How the resume unit runs labwright after the reboot (default: state.resume_command, this interpreter's).
        self.resume_command: list[str] | None = None
        #: Where the run stands across a real reboot (state.py); set by the CLI for a real host.
        self.saved: Saved | None = None
        self.gpu_host = GpuHost(files, self.host)
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
            raise OperationFailed("host upgrade: no LXD or Incus daemon for these guests")
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
        """The repository's installer, checked against its recorded sha256 (the bytes checked are the bytes copied),
        into a fresh ``mktemp -d`` directory in the guest (no predictable /tmp name), run with --no-kernel-module,
        then removed."""
        name = installer_name(self.plan.to_version)
        installer = self.repository / name
        data = installer.read_bytes()
        verify_installer(installer, self.plan.to_version, data)
        if self.client.instance(guest).get("status") != "Running":  # a stopped guest: started with the new majors
            self.client.set_state(guest, "start")
            self._wait_systemd(guest)
        made = self.client.exec(guest, ["mktemp", "-d", "/tmp/labwright-installer.XXXXXXXXXX"])
        directory = made.stdout.decode(errors="replace").strip()
        if made.exit_code != 0 or not directory.startswith("/tmp/labwright-installer."):
            raise OperationFailed(f"guest {guest}: mktemp -d failed (exit {made.exit_code}); the installer was not "
                                  "copied in")
        inside = f"{directory}/{name}"
        self.client.push_file(guest, inside, data, mode=0o755)
        result = self.client.exec(guest, ["sh", "-c", 'sh "$1/$2" --no-kernel-module --silent; rc=$?; rm -rf "$1"; '
                                                      'exit $rc', "sh", directory, name])
        if result.exit_code != 0:
            output = result.stderr.decode(errors="replace") + "\n" + result.stdout.decode(errors="replace")
            raise OperationFailed(f"guest {guest}: {name} --no-kernel-module failed (exit {result.exit_code}): "
                                  f"{guest_installer_said(output)}")
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
        from labwright.hosts import agent
        from labwright.hosts.lxd import LxdHost

        running = self.client.instance(guest).get("status") == "Running"
        self.client.set_state(guest, "restart" if running else "start", force=True)
        state = self._wait_systemd(guest)
        for service in services:
            # the agent's restart (labwright.agent.service.restart_unit): a unit that crash-looped on the old driver
            # may sit at systemd's start limit, which refuses a plain restart
            result = agent.run(LxdHost(guest, self.client), "restart", f"{service}.service")
            if not result.ok:
                raise OperationFailed(f"guest {guest}: systemctl restart {service} failed (exit {result.rc}): "
                                      f"{result.last_line()}")
        return f"restarted (systemd {state})" + (f"; {', '.join(services)} restarted" if services else "")

    def check(self, guest: str) -> tuple[bool, str]:
        report = check_guest(guest, AUTO, gpu_host=self.gpu_host)
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
        out: Outcome | None = None
        try:
            with contextlib.ExitStack() as locks:
                out = self._run(services, locks)
        finally:
            if self.saved is not None and self.saved.phase == REBOOTING and (out is None or not out.rebooting):
                # the state was saved and then the reboot could not be asked for (or the run stopped on something
                # unforeseen): nothing must resume at a later boot, no credential stays
                self.finish(self.saved, out if out is not None else self._stopped("the run stopped before the reboot"))
        assert out is not None
        return out

    def resume(self, saved: Saved) -> Outcome:
        """Go on after the reboot from ``saved.next_step``: the steps done before it, the snapshots taken and the
        driver installed are taken from the state file; a failure from here restores the snapshots as before. The
        credentials and the resume unit are removed however it ends (``finally``): a run that stops on something
        unforeseen leaves the upgrade to be resumed by hand (``resume_failed``), not at every boot."""
        self.saved = saved
        out: Outcome | None = None
        try:
            self.outcome.done = [Done(**d) for d in saved.done]
            self.outcome.snapshots = dict(saved.snapshots)
            self.host.installed = self.plan.to_version
            self.host.previous = saved.previous_driver
            services = {k: tuple(v) for k, v in saved.services.items()}
            with contextlib.ExitStack() as locks:
                out = self._run(services, locks, start=saved.next_step, host_changed=True)
        except BaseException as exc:
            end_resume(self.files, self.host, saved, f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
            raise
        assert out is not None
        self.finish(saved, out)
        return out

    def _stopped(self, why: str) -> Outcome:
        out = self.outcome
        out.ok = False
        out.message = out.message or why
        return out

    def finish(self, saved: Saved, out: Outcome) -> None:
        """The outcome into the state file; the resume unit and the carried credentials removed (a unit that cannot
        be removed is said in ``left``: its ExecStopPost= lines remove it when it stops, and a later start finds
        the upgrade finished and stops)."""
        saved.phase = state.DONE if out.ok else state.FAILED
        saved.done = [d.to_dict() for d in out.done]
        saved.resume_failed = ""
        left = remove_credentials_and_unit(self.files, self.host)
        out.left += [f"host {self.plan.node}: {line}" for line in left]
        saved.outcome = out.to_dict()
        try:
            state.save(self.files, saved)
        except OSError as exc:
            raise OperationFailed(f"{state.STATE_PATH} not written ({exc.strerror or exc}); the upgrade "
                                  f"{'finished' if out.ok else 'FAILED'}: {out.message}") from exc

    def _step(self, step: Step, services: dict[str, tuple[str, ...]]) -> tuple[bool, str]:
        if step.action in ("list", "kernel"):
            return True, step.detail
        if step.action == "pin-kernel":
            return True, self.host.pin_kernel(step.target)
        if step.action == "snapshot":
            return True, self.snapshot(step.target)
        if step.action == "host-driver":
            return True, self.host.install_driver(self.plan.to_version, self.driver_kernel())
        if step.action == "boot-unit":
            return True, self.boot_unit()
        if step.action == "reboot":
            return True, self.host.reboot(self.plan.boot_kernel)
        if step.action == "majors":
            return True, self.majors(step.target)
        if step.action == "userspace":
            return True, self.userspace(step.target)
        if step.action == "restart":
            return True, self.restart(step.target, services.get(step.target, ()))
        if step.action == "check":
            return self.check(step.target)
        raise OperationFailed(f"host upgrade: unknown step {step.action!r} in the plan")

    def driver_kernel(self) -> str:
        """The kernel the driver is built for: the running one on the lab's tree (as the installer does without
        --kernel-name); on a real node the one it boots next, so the running module is left alone until then."""
        return self.plan.boot_kernel if self.host.reboots_for_real else self.running_kernel()

    def _run(self, services: dict[str, tuple[str, ...]], locks: contextlib.ExitStack, start: int = 0,
             host_changed: bool = False) -> Outcome:
        started = time.monotonic()
        out = self.outcome
        try:
            self.lock_guests(locks)
            for index, step in enumerate(self.plan.steps):
                if index < start:
                    continue
                t = time.monotonic()
                if step.action in ("pin-kernel", "host-driver"):
                    host_changed = True
                if step.action == "reboot" and self.host.reboots_for_real:
                    self.suspend(index + 1, services)
                ok, detail = self._step(step, services)
                self._record(step, t, detail, ok)
                if not ok:
                    raise OperationFailed(f"gpu check {step.target} failed after the upgrade: {detail}")
                if step.action == "reboot" and self.host.reboots_for_real:
                    out.ok, out.rebooting = True, True
                    out.message = (f"node {self.plan.node}: nvidia {self.plan.to_version} installed for "
                                   f"{self.plan.boot_kernel}, rebooting; {RESUME_UNIT} resumes the upgrade at boot "
                                   f"(follow it: journalctl -fu {RESUME_UNIT}; then `labwright host upgrade "
                                   f"{self.plan.node}` shows how it ended)")
                    out.seconds = time.monotonic() - started
                    return out
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

    def suspend(self, next_step: int, services: dict[str, tuple[str, ...]]) -> None:
        """Before a real reboot: the state file, the credentials for the boot unit, the resume unit enabled (checked
        by the link ``systemctl enable`` makes). Raises OperationFailed (the snapshots are restored) when any of it
        cannot be done: a reboot without them would leave the guests half upgraded."""
        saved = self.saved or state.Saved(self.plan.node, "lxd", {}, 0, str(self.repository))
        saved.plan = self.plan.to_dict()
        saved.next_step = next_step
        saved.phase = state.REBOOTING
        saved.done = [d.to_dict() for d in self.outcome.done]
        saved.snapshots = dict(self.outcome.snapshots)
        saved.services = {k: list(v) for k, v in services.items()}
        saved.previous_driver = self.host.previous if self.host.previous is not None else self.plan.from_version
        saved.lock_wait = self.lock_wait
        saved.started = saved.started or state.now()
        saved.repository = str(self.repository)
        self.saved = saved
        try:
            state.save(self.files, saved)
            state.write_env(self.files, state.carried_for(saved, os.environ))
        except OSError as exc:
            raise OperationFailed(f"writing {state.STATE_PATH} failed ({exc}); not rebooting") from exc
        command = self.resume_command or state.resume_command(self.plan.node)
        self.host.enable_resume_unit(state.resume_unit_text(self.plan.node, command))

    def running_kernel(self) -> str:
        try:
            return self.files.read_text("/proc/sys/kernel/osrelease").strip()
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
        if (self.rolls_back_driver or self.host.reboots_for_real) and self.host.installed is not None:
            self._rollback_driver()

    def _rollback_driver(self) -> None:
        """The previous driver back on the host (its files; its module loads at the next boot), so the restored
        guests' userspace matches it again after that boot."""
        out = self.outcome
        try:
            back = self.host.rollback_driver()
        except (OSError, LabwrightError) as exc:
            out.left.append(f"host {self.plan.node}: putting the previous driver back failed ({exc}); reinstall "
                            f"NVIDIA-Linux-x86_64-{self.plan.from_version}.run --dkms")
            return
        out.left = [line for line in out.left if not line.startswith(f"host {self.plan.node}: keeps nvidia")]
        out.left.append(f"host {self.plan.node}: {back}")
        out.message += f"; host driver back to {self.plan.from_version}"


def remove_credentials_and_unit(files: LocalHost, host: NodeHost) -> list[str]:
    """The carried credentials, then the resume unit, removed; what could not be is returned (said in ``left``)."""
    left = []
    try:
        state.remove_env(files)
    except OSError as exc:
        left.append(f"{state.ENV_PATH} not removed ({exc}); remove it by hand: it holds PROXMOX_* credentials")
    try:
        host.remove_resume_unit()
    except (OSError, LabwrightError) as exc:
        left.append(f"{RESUME_UNIT} not removed ({exc}); remove it by hand (systemctl disable {RESUME_UNIT})")
    return left


def end_resume(files: LocalHost, host: NodeHost, saved: Saved, why: str) -> list[str]:
    """A resume that stopped before its end (the inventory, the API, a step that raised what the run does not
    catch): the credentials and the unit removed, the state kept resumable by hand with why it stopped. Never
    raises: it runs on the way out of a failure."""
    left = remove_credentials_and_unit(files, host)
    saved.resume_failed = why + (f"; {'; '.join(left)}" if left else "")
    try:
        state.save(files, saved)
    except OSError as exc:
        left.append(f"{state.STATE_PATH} not updated ({exc})")
    return left


class Refused(OperationFailed):
    """A step before anything was upgraded could not be done."""
