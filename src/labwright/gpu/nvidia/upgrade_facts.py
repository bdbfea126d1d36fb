"""The node's facts for the host upgrade: read below a root ("/" on a real host, a fake tree in tests) and from the
local LXD daemon.

- driver: ``/proc/driver/nvidia/version`` (``GpuHost``); running kernel: ``/proc/sys/kernel/osrelease``;
  installed kernels: the directories of ``/lib/modules``; the new kernel: the newest of those that is not running.
- DKMS builds: DKMS's own tree, ``/var/lib/dkms/nvidia/<version>/<kernel>/<arch>/module/nvidia.ko[.xz|.zst]``
  (what ``dkms status`` reads: ``nvidia/<version>, <kernel>, <arch>: built/installed``), finished builds only
  (``dkms_tree_builds``: a build in progress or one that failed is a ``<kernel>/.tmp_<arch>_XXXXXX`` directory, not
  a build), plus a packaged module
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labwright.gpu.guest import ENGINE_SERVICES
from labwright.gpu.nvidia.driver import userspace_listing, userspace_versions
from labwright.gpu.nvidia.host import GpuHost
from labwright.hostnames import LxdName
from labwright.hostupgrade.plan import GuestFacts, NodeFacts, kernel_key
from labwright.lxd.client import LxdClient
from labwright.shell import join
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


#: dkms.in do_build (dell/dkms v3.2.2-5 = 793fdab, L1476-1544; v3.1.8 = eb06953, L1450-1518) builds into
#: ``mktemp -d KERNEL/.tmp_ARCH_XXXXXX`` and renames that to ``KERNEL/ARCH`` only after checking every module of the
#: package is in its ``module/`` (L1532-1544: ``die 7 "Missing module ..."`` first, leaving the directory behind, as a
#: failed copy, a full disk or a killed build do; ``dkms remove`` deletes ``*/.tmp_*`` later, L2115). v3.1.7
#: (a38a4a1, L1447) named it ``tmp_ARCH_XXXXXX``, without the dot, which dkms's own ``*`` for the architecture then
#: caught (commit 38343aa, "prefix tempdir with '.' to avoid being caught by architecture wildcards"). Neither is a
#: build, whatever it holds.
_UNFINISHED_ARCH = re.compile(r"^\.|^tmp_.+_[A-Za-z0-9]{6}$")
#: Kernel directories as dkms status globs them (dkms.in module_status_built L2284: ``+([0-9]).*``), so neither
#: ``build/`` (the build tree), ``source`` nor a ``kernel-K-ARCH`` link is taken for a kernel.
_KERNEL_DIR = re.compile(r"^[0-9]+\.")


@dataclass(frozen=True)
class DkmsBuild:
    """A finished DKMS build of the nvidia module: ``/var/lib/dkms/nvidia/VERSION/KERNEL/ARCH/module/FILE``."""

    version: str
    kernel: str
    arch: str
    module: Path


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir())
    except OSError:
        return []


def dkms_tree_builds(root: Path, version: str | None = None, kernel: str | None = None) -> list[DkmsBuild]:
    """Every finished build in DKMS's tree (``version``/``kernel``: only those): a ``KERNEL/ARCH/module/nvidia.ko*``
    file below a version directory, ARCH never a build directory DKMS has not renamed yet (``.tmp_ARCH_XXXXXX``,
    3.1.7's ``tmp_ARCH_XXXXXX``; see _UNFINISHED_ARCH). The one reader of that tree: the plan's facts and the
    driver step's check both go through it."""
    found = []
    for version_dir in _subdirs(root / "var/lib/dkms/nvidia"):
        if version_dir.name.startswith(".") or version_dir.is_symlink() or version not in (None, version_dir.name):
            continue
        for kernel_dir in _subdirs(version_dir):
            if not _KERNEL_DIR.match(kernel_dir.name) or kernel not in (None, kernel_dir.name):
                continue
            for arch_dir in _subdirs(kernel_dir):
                if _UNFINISHED_ARCH.match(arch_dir.name):
                    continue
                try:
                    files = sorted((arch_dir / "module").iterdir())
                except OSError:
                    continue
                found += [DkmsBuild(version_dir.name, kernel_dir.name, arch_dir.name, f) for f in files
                          if MODULE_FILE.match(f.name) and f.is_file()]
    return found


def dkms_builds(root: Path, loaded: str | None) -> dict[str, tuple[str, ...]]:
    """kernel -> nvidia versions with a finished build for it (``dkms_tree_builds``)."""
    builds: dict[str, set[str]] = {}
    for build in dkms_tree_builds(root):
        builds.setdefault(build.kernel, set()).add(build.version)
    for kernel in installed_kernels(root):
        packaged = [p for p in (root / "lib/modules" / kernel / "updates/dkms").glob("nvidia.ko*") if
                    MODULE_FILE.match(p.name)]
        if packaged and kernel not in builds and loaded:
            builds[kernel] = {loaded}
    return {k: tuple(sorted(v)) for k, v in builds.items()}


def node_guest_devices(instance: dict[str, Any], root: Path) -> bool:
    """True when the instance passes this host's NVIDIA nodes: a unix-char /dev/nvidia* whose source is below
    ``root``, or a ``gpu`` device (LXD passes the nodes of its own /dev: counted for the root / only)."""
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
    units = join(f"{s}.service" for s in ENGINE_SERVICES)
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
                                support.reason, services, snapshot_freezes=support.freezes_running))
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
