"""The node's facts for the host upgrade: read below a root ("/" on a real host, a fake tree in tests) and from the
local LXD daemon.

- driver: ``/proc/driver/nvidia/version`` (``GpuHost``); running kernel: ``/proc/sys/kernel/osrelease``;
  installed kernels: the directories of ``/lib/modules``; the new kernel: the newest of those that is not running.
- DKMS builds: DKMS's own tree, ``/var/lib/dkms/nvidia/<version>/<kernel>/<arch>/module/nvidia.ko[.xz|.zst]``
  (what ``dkms status`` reads: ``nvidia/<version>, <kernel>, <arch>: built/installed``), plus a packaged module
  ``/lib/modules/<kernel>/updates/dkms/nvidia.ko*`` whose version is unknown without modinfo (counted as the loaded
  version only when DKMS lists nothing for that kernel).
- the repository: a directory of NVIDIA's ``NVIDIA-Linux-x86_64-<version>.run`` installers (``/var/cache/labwright/
  nvidia``), the one file that installs the module on the host (``--dkms``) and the exactly matching userspace in a
  guest (``--no-kernel-module``).
- GPU guests: LXD instances passing this host's ``/dev/nvidia*`` nodes (``unix-char`` sources below the root) or a
  ``gpu`` device (root "/" only); their userspace version through exec, their storage's snapshot support.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from labwright.gpu.guest import ENGINE_SERVICES
from labwright.guests.gpu import GpuHost, userspace_listing, userspace_versions
from labwright.hostnames import LxdName
from labwright.hostupgrade.plan import GuestFacts, NodeFacts, kernel_key
from labwright.lxd.client import LxdClient
from labwright.snapshots.lxd import LxdSnapshots

REPOSITORY = "/var/cache/labwright/nvidia"
_INSTALLER = re.compile(r"^NVIDIA-Linux-x86_64-(\d+\.\d+(?:\.\d+)?)\.run$")
MODULE_FILE = re.compile(r"^nvidia\.ko(\.xz|\.zst|\.gz)?$")  # nvidia.ko, compressed or not (dkms set_module_suffix)


def installer_name(version: str) -> str:
    return f"NVIDIA-Linux-x86_64-{version}.run"


def repository_versions(repo: Path) -> tuple[str, ...]:
    try:
        names = [p.name for p in repo.iterdir() if p.is_file()]
    except OSError:
        return ()
    return tuple(sorted(m.group(1) for n in names if (m := _INSTALLER.match(n))))


def running_kernel(root: Path) -> str:
    try:
        return (root / "proc/sys/kernel/osrelease").read_text().strip()
    except OSError:
        return ""


def installed_kernels(root: Path) -> list[str]:
    try:
        return sorted((p.name for p in (root / "lib/modules").iterdir() if p.is_dir()), key=kernel_key)
    except OSError:
        return []


def dkms_builds(root: Path, loaded: str | None) -> dict[str, tuple[str, ...]]:
    """kernel -> nvidia versions with a module built for it."""
    builds: dict[str, set[str]] = {}
    for module in (root / "var/lib/dkms/nvidia").glob("*/*/*/module/*"):
        if MODULE_FILE.match(module.name):
            version, kernel = module.parts[-5], module.parts[-4]
            builds.setdefault(kernel, set()).add(version)
    for kernel in installed_kernels(root):
        packaged = [p for p in (root / "lib/modules" / kernel / "updates/dkms").glob("nvidia.ko*") if
                    MODULE_FILE.match(p.name)]
        if packaged and kernel not in builds and loaded:
            builds[kernel] = {loaded}
    return {k: tuple(sorted(v)) for k, v in builds.items()}


def node_guest_devices(instance: dict[str, Any], root: Path) -> bool:
    """True when the instance passes this host's NVIDIA nodes: a unix-char /dev/nvidia* whose source is below
    ``root`` (under a test root only the guests wired to that tree), or, on a real host, a ``gpu`` device."""
    for device in (instance.get("devices") or {}).values():
        path = str(device.get("path") or "")
        if device.get("type") == "unix-char" and path.startswith("/dev/nvidia"):
            source = str(device.get("source") or path)
            if root == Path("/") or source.startswith(str(root).rstrip("/") + "/"):
                return True
        if device.get("type") == "gpu" and root == Path("/"):
            return True
    return False


def guest_userspace(client: LxdClient, name: str) -> tuple[str | None, tuple[str, ...]]:
    """(userspace version or None; "mixed:a,b" for libraries of different versions, engine services present)."""
    units = " ".join(f"{s}.service" for s in ENGINE_SERVICES)
    script = (f"{userspace_listing()}; echo @@units; "
              f"systemctl show -p LoadState --value {units} 2>/dev/null; true")
    result = client.exec(name, ["sh", "-c", script])
    libs, _, units_out = result.stdout.decode(errors="replace").partition("@@units")
    versions = set(userspace_versions(libs.splitlines()).values())
    states = units_out.split()
    services = tuple(s for s, state in zip(ENGINE_SERVICES, states, strict=False) if state == "loaded")
    if not versions:
        return None, services
    if len(versions) > 1:
        return "mixed:" + ",".join(sorted(versions)), services
    return versions.pop(), services


def gpu_guests(client: LxdClient, root: Path) -> list[GuestFacts]:
    found = []
    for instance in client.instances():
        if not node_guest_devices(instance, root):
            continue
        name = str(instance["name"])
        running = instance.get("status") == "Running"
        userspace, services = guest_userspace(client, name) if running else (None, ())
        snaps = LxdSnapshots(LxdName("lxd", None, name), client=client)
        support = snaps.support()
        found.append(GuestFacts(name, running, userspace, support.supported, support.storage,
                                support.reason, services))
    return sorted(found, key=lambda g: g.name)


def node_facts(node: str, root: Path, client: LxdClient, repository: Path | None = None) -> NodeFacts:
    host = GpuHost(root)
    repo = repository or (root / REPOSITORY.lstrip("/"))
    loaded = host.driver_version()
    kernel = running_kernel(root)
    pending = [k for k in installed_kernels(root) if k != kernel and kernel_key(k) > kernel_key(kernel)]
    return NodeFacts(node, loaded, kernel, pending[-1] if pending else None, repository_versions(repo),
                     dkms_builds(root, loaded), tuple(gpu_guests(client, root)), str(repo), kernel_headers(root))


def kernel_headers(root: Path) -> tuple[str, ...]:
    """Installed kernels whose headers are there (``/lib/modules/K/build``, what DKMS builds against)."""
    return tuple(k for k in installed_kernels(root) if (root / "lib/modules" / k / "build").exists())
