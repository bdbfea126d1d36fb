"""What a host upgrade on a real node keeps across its reboot: a state file, and a boot unit that resumes it.

``host upgrade NODE --yes`` runs everything up to the reboot in the operator's shell: snapshots, the driver install
(``--dkms``), the boot unit for the device nodes. The reboot ends that process, so before asking for it the run
writes ``/var/lib/labwright/host-upgrade.json`` (atomically: temp file, fsync, rename) with the plan, the steps done,
the snapshots taken and how to reach the guests again, and enables ``labwright-host-upgrade.service``, a oneshot
ordered after the device-node unit and the guest managers. At boot it runs ``labwright host upgrade NODE --resume``:
the majors, the exactly matching userspace in each guest, the restarts and ``gpu check`` (or the snapshots restored),
then records the outcome in the same file, and disables and removes itself. ``host upgrade NODE`` (dry) reports an
upgrade waiting for its reboot or finished; ``journalctl -u labwright-host-upgrade`` shows the resumed run.

Credentials never outlive their step. Where the node can act as root itself (the run is root on a Proxmox VE node
with ``pvesh``) the resumed run reaches the API through ``pvesh`` (labwright.hostupgrade.pve.pvesh_api) and no API
secret is written at all. Otherwise the ``PROXMOX_*`` credentials the run was given are written to
``/var/lib/labwright/host-upgrade.env`` (mode 0600 under umask 077, root's, read by the unit's ``EnvironmentFile=``);
an LXD upgrade carries none. The env file and the unit are removed on every path of the resume: by the run itself (a
``finally`` around the whole resume, the inventory and the API included) and by the unit's ``ExecStopPost=`` lines,
which systemd runs however the service stopped (systemd.service(5), ExecStopPost=: after a clean exit, a failure
or a kill at its TimeoutStartSec= alike). A resume that stops before its end stays resumable by hand
(``resume_failed`` says why); nothing runs it at the next boot.

The unit runs labwright as root at boot, so ``--yes`` on a real node refuses (labwright.hostupgrade.trust) an
interpreter, labwright package, inventory or installer repository that anyone but root could write, and the unit
runs the interpreter isolated (``-I``: no current directory, PYTHON* variables or user site-packages on its path).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import shlex
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labwright.atomic import write_text_atomic
from labwright.errors import BadInput
from labwright.gpu.nvidia.boot_unit import BOOT_UNIT
from labwright.hosts.local import LocalHost
from labwright.hostupgrade.plan import Plan, Step
from labwright.shell import quote
from labwright.textio import loads_json

STATE_PATH = "/var/lib/labwright/host-upgrade.json"
ENV_PATH = "/var/lib/labwright/host-upgrade.env"
RESUME_UNIT = "labwright-host-upgrade.service"
RESUME_UNIT_PATH = f"/etc/systemd/system/{RESUME_UNIT}"
#: What ``systemctl enable`` makes for ``WantedBy=multi-user.target`` (systemd's install.c: a symlink in the
#: target's .wants directory next to the unit file); checked, not trusted from the exit code.
RESUME_WANTS_LINK = f"/etc/systemd/system/multi-user.target.wants/{RESUME_UNIT}"
#: The guest managers a resumed upgrade waits for (it restarts their guests), as the device-node unit orders itself
#: before them.
_AFTER = ("network-online.target", BOOT_UNIT, "pve-guests.service", "lxd.service", "snap.lxd.daemon.service",
          "incus.service")
#: The unit's ExecStopPost= lines: the credentials, then the unit itself (its wants link first, so the next boot does
#: not start it); ``-`` keeps a failed removal from marking the unit failed, ``rm -f`` needs no D-Bus.
CLEANUP = (f"-/bin/rm -f {ENV_PATH}", f"-/bin/rm -f {RESUME_WANTS_LINK} {RESUME_UNIT_PATH}")
#: Environment carried to the boot unit: the Proxmox API credentials and TLS settings the run was given.
CARRIED_ENV_PREFIXES = ("PROXMOX_", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")

REBOOTING, DONE, FAILED = "rebooting", "done", "failed"
#: How a resumed Proxmox upgrade reaches the API: ``pvesh`` on the node as root (no secret kept), or HTTPS with the
#: carried PROXMOX_* credentials.
PVESH, HTTPS = "pvesh", "https"


@dataclass
class Saved:
    """One upgrade across its reboot. ``next_step``: the index in ``plan.steps`` the resumed run starts at;
    ``phase``: rebooting (waiting for the boot unit), then done or failed with ``outcome`` (Outcome.to_dict())."""

    node: str
    kind: str  # "lxd" | "pve"
    plan: dict[str, Any]
    next_step: int
    repository: str
    phase: str = REBOOTING
    done: list[dict[str, Any]] = field(default_factory=list)
    snapshots: dict[str, str] = field(default_factory=dict)
    services: dict[str, list[str]] = field(default_factory=dict)
    previous_driver: str | None = None
    lock_wait: float = 300.0
    inventory: str | None = None  # Proxmox: the inventory the node's host data came from (absolute)
    guests: list[dict[str, Any]] = field(default_factory=list)  # Proxmox: PveGpuGuest fields, as before the upgrade
    extra: dict[str, Any] = field(default_factory=dict)  # Proxmox: majors_before (what raw lines were written for)
    started: str = ""
    outcome: dict[str, Any] | None = None
    api: str = HTTPS  # Proxmox: PVESH (the node's own pvesh as root, no secret written) or HTTPS (PROXMOX_* carried)
    resume_failed: str = ""  # why the last resume stopped before its end (it is resumed by hand from there)

    def plan_object(self) -> Plan:
        p = self.plan
        return Plan(str(p["node"]), p.get("from"), str(p["to"]), str(p["boot_kernel"]),
                    [Step(**s) for s in p.get("steps", [])], list(p.get("notes", [])))

    def summary(self) -> str:
        plan = self.plan
        what = f"nvidia {plan.get('from') or 'none'} -> {plan.get('to')}, kernel {plan.get('boot_kernel')}"
        if self.phase == REBOOTING and self.resume_failed:
            return (f"the upgrade started {self.started} ({what}) was not carried on after its reboot: its resume "
                    f"stopped ({self.resume_failed}); nothing resumes it at boot any more: fix that and run "
                    f"`labwright host upgrade {self.node} --resume` as root"
                    + (" with PROXMOX_* exported" if self.kind == "pve" and self.api == HTTPS else ""))
        if self.phase == REBOOTING:
            return (f"the upgrade started {self.started} ({what}) waits for its reboot: {RESUME_UNIT} resumes it at "
                    f"boot (`labwright host upgrade {self.node} --resume` by hand)")
        message = (self.outcome or {}).get("message", "")
        return f"the upgrade started {self.started} ({what}) {'finished' if self.phase == DONE else 'FAILED'}: " \
               f"{message}"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def state_file(node: LocalHost) -> Path:
    """The state file of the upgrade of ``node``, this machine (its files are this process's own to write)."""
    return node.local_path(STATE_PATH)


def save(node: LocalHost, saved: Saved) -> None:
    state_file(node).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(state_file(node), json.dumps(asdict(saved), indent=2) + "\n", mode=0o600)


def load(node: LocalHost) -> Saved | None:
    """The saved upgrade, or None when there is none; BadInput for a file labwright cannot read back."""
    path = state_file(node)
    fix = "look at it, restore guests by hand if needed, then remove it"
    try:
        data = loads_json(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:
        raise BadInput(f"{path}: not a host upgrade state labwright can read ({str(exc).splitlines()[0][:120]}); "
                       f"{fix}") from None
    from labwright.schema.files import HostUpgradeState, check  # pydantic: only where the file is read

    check(HostUpgradeState, data, path, "a host upgrade state", fix)
    return Saved(**data)


def carried_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(environ.items()) if k.startswith(CARRIED_ENV_PREFIXES)}


def write_env(node: LocalHost, environ: Mapping[str, str]) -> bool:
    """The credentials for the boot unit (0600); False when there are none to carry."""
    carried = carried_env(environ)
    if not carried:
        return False
    text = "".join(f"{k}={_env_quote(v)}\n" for k, v in carried.items())
    node.local_path(ENV_PATH).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(node.local_path(ENV_PATH), text, mode=0o600)
    return True


def carried_for(saved: Saved, environ: Mapping[str, str]) -> dict[str, str]:
    """What the boot unit needs of ``environ``: the Proxmox credentials of an upgrade that reaches the API over HTTPS;
    nothing for one through pvesh (the node acts as root itself) or an LXD upgrade."""
    return carried_env(environ) if saved.kind == "pve" and saved.api == HTTPS else {}


def remove_env(node: LocalHost) -> None:
    with contextlib.suppress(FileNotFoundError):
        node.local_path(ENV_PATH).unlink()


def leftovers(node: LocalHost) -> list[str]:
    """What of a resume must not outlive it and is still there: the env file, the unit, its wants link."""
    return [path for path in (ENV_PATH, RESUME_UNIT_PATH, RESUME_WANTS_LINK)
            if node.stat(path, follow_symlinks=False) is not None]


def _env_quote(value: str) -> str:
    """A value for systemd's EnvironmentFile= (systemd.exec(5): double quotes with backslash escapes)."""
    if "\n" in value:
        raise BadInput("a PROXMOX_* environment variable holds a newline; the boot unit cannot carry it: unset it "
                       "or give the credential on one line")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def resume_command(node: str, python: str | None = None) -> list[str]:
    """How the boot unit runs labwright: this interpreter (the venv or uv tool labwright is installed in, checked
    root-only by labwright.hostupgrade.trust) with ``-I -m labwright``, so no PATH is needed at boot and nothing but
    the interpreter's own site-packages is imported (``-I``: no current directory, PYTHON* variables or user site)."""
    return [python or sys.executable, "-I", "-m", "labwright", "host", "upgrade", node, "--resume"]


def resume_unit_text(node: str, command: list[str]) -> str:
    return "\n".join([
        f"# Managed by labwright (`labwright host upgrade {node} --yes`): resumes the upgrade after its reboot,",
        "# then disables and removes itself. State: " + STATE_PATH,
        "# labwright: runs as root (it upgrades the host's driver; docs/security.md \"Hardened units\")",
        "[Unit]",
        f"Description=labwright host upgrade {node}: resume after the reboot",
        f"After={' '.join(_AFTER)}",
        "Wants=network-online.target",
        f"ConditionPathExists={STATE_PATH}",
        "",
        "[Service]",
        "Type=oneshot",
        f"EnvironmentFile=-{ENV_PATH}",
        "TimeoutStartSec=3600",
        "UMask=0077",
        "ExecStart=" + " ".join(quote(a) for a in command),
        # run however the service stopped (exit, failure, a kill at TimeoutStartSec=): the credentials and the unit
        # never outlive the resume, even when labwright could not clean up itself
        *(f"ExecStopPost={line}" for line in CLEANUP),
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])


def unit_exec_start(text: str) -> list[str]:
    """The ExecStart argv of a resume unit's text (what systemd would run)."""
    for line in text.splitlines():
        if line.startswith("ExecStart="):
            return shlex.split(line.removeprefix("ExecStart="))
    raise BadInput(f"{RESUME_UNIT}: no ExecStart= line")
