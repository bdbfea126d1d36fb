"""The node's facts for the host upgrade: read through the node's Host (this machine's ``LocalHost``; tests give a
double over a fake tree, tests/support/host_tree.py) and from the local LXD daemon.

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
- GPU guests: LXD instances passing this host's ``/dev/nvidia*`` nodes (``unix-char`` sources in the host's ``/dev``
  as this machine sees it: labwright.hosts.local.local_path) or a ``gpu`` device (LXD passes its own ``/dev``'s
  nodes: the host's when its ``/dev`` is this machine's); their userspace version through exec, their storage's
  snapshot support.
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
from labwright.hosts import Host
from labwright.hosts.local import LocalHost, local_path
from labwright.hostupgrade.plan import GuestFacts, NodeFacts, kernel_key
from labwright.lxd.client import LxdClient
from labwright.shell import join
from labwright.snapshots.lxd import LxdSnapshots

REPOSITORY = "/var/cache/labwright/nvidia"
_INSTALLER = re.compile(r"(?a)^NVIDIA-Linux-x86_64-(\d+\.\d+(?:\.\d+)?)\.run$")
MODULE_FILE = re.compile(r"^nvidia\.ko(\.xz|\.zst|\.gz)?$")  # nvidia.ko, compressed or not (dkms set_module_suffix)


def installer_name(version: str) -> str:
    return f"NVIDIA-Linux-x86_64-{version}.run"


def repository_versions(repo: Path) -> tuple[str, ...]:
    try:
        names = [p.name for p in repo.iterdir() if p.is_file()]
    except OSError:
        return ()
    return tuple(sorted(m.group(1) for n in names if (m := _INSTALLER.match(n))))


def running_kernel(host: Host) -> str:
    try:
        return host.read_text("/proc/sys/kernel/osrelease").strip()
    except OSError:
        return ""


def _subdirs(host: Host, path: str) -> list[str]:
    """The directories in ``path`` (a link to one too), by name; none when it cannot be listed."""
    try:
        names = host.listdir(path)
    except OSError:
        return []
    return [n for n in names if (info := host.stat(f"{path}/{n}")) is not None and info.is_dir]


def installed_kernels(host: Host) -> list[str]:
    return sorted(_subdirs(host, "/lib/modules"), key=kernel_key)


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
    """A finished DKMS build of the nvidia module: ``/var/lib/dkms/nvidia/VERSION/KERNEL/ARCH/module/FILE`` (the
    module's path on the host)."""

    version: str
    kernel: str
    arch: str
    module: str


def dkms_tree_builds(host: Host, version: str | None = None, kernel: str | None = None) -> list[DkmsBuild]:
    """Every finished build in DKMS's tree (``version``/``kernel``: only those): a ``KERNEL/ARCH/module/nvidia.ko*``
    file below a version directory, ARCH never a build directory DKMS has not renamed yet (``.tmp_ARCH_XXXXXX``,
    3.1.7's ``tmp_ARCH_XXXXXX``; see _UNFINISHED_ARCH). The one reader of that tree: the plan's facts and the
    driver step's check both go through it."""
    found = []
    tree = "/var/lib/dkms/nvidia"
    for version_name in _subdirs(host, tree):
        link = host.stat(f"{tree}/{version_name}", follow_symlinks=False)
        if version_name.startswith(".") or version not in (None, version_name) or (link and link.is_symlink):
            continue
        for kernel_name in _subdirs(host, f"{tree}/{version_name}"):
            if not _KERNEL_DIR.match(kernel_name) or kernel not in (None, kernel_name):
                continue
            for arch in _subdirs(host, f"{tree}/{version_name}/{kernel_name}"):
                if _UNFINISHED_ARCH.match(arch):
                    continue
                module_dir = f"{tree}/{version_name}/{kernel_name}/{arch}/module"
                try:
                    files = host.listdir(module_dir)
                except OSError:
                    continue
                found += [DkmsBuild(version_name, kernel_name, arch, f"{module_dir}/{f}") for f in files
                          if MODULE_FILE.match(f) and _is_file(host, f"{module_dir}/{f}")]
    return found


def _is_file(host: Host, path: str) -> bool:
    info = host.stat(path)
    return info is not None and info.is_file


def packaged_modules(host: Host, kernel: str) -> list[str]:
    """A packaged (or installed) module of ``kernel``: ``/lib/modules/KERNEL/updates/dkms/nvidia.ko*``, by name."""
    directory = f"/lib/modules/{kernel}/updates/dkms"
    try:
        names = host.listdir(directory)
    except OSError:
        return []
    return [f"{directory}/{n}" for n in names if MODULE_FILE.match(n)]


def dkms_builds(host: Host, loaded: str | None) -> dict[str, tuple[str, ...]]:
    """kernel -> nvidia versions with a finished build for it (``dkms_tree_builds``)."""
    builds: dict[str, set[str]] = {}
    for build in dkms_tree_builds(host):
        builds.setdefault(build.kernel, set()).add(build.version)
    for kernel in installed_kernels(host):
        if packaged_modules(host, kernel) and kernel not in builds and loaded:
            builds[kernel] = {loaded}
    return {k: tuple(sorted(v)) for k, v in builds.items()}


def node_guest_devices(instance: dict[str, Any], host: LocalHost) -> bool:
    """True when the instance passes ``host``'s NVIDIA nodes: a unix-char /dev/nvidia* whose source is in the host's
    /dev as the LXD daemon here sees it (labwright.hosts.local.local_path), or a ``gpu`` device (LXD passes the
    nodes of its own /dev: the host's when the host's /dev is this machine's)."""
    dev = local_path(host, "/dev")
    for device in (instance.get("devices") or {}).values():
        path = str(device.get("path") or "")
        if device.get("type") == "unix-char" and path.startswith("/dev/nvidia"):
            source = str(device.get("source") or path)
            if source.startswith(dev.rstrip("/") + "/"):
                return True
        if device.get("type") == "gpu" and dev == "/dev":
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


def gpu_guests(client: LxdClient, host: LocalHost) -> list[GuestFacts]:
    found = []
    for instance in client.instances():
        if not node_guest_devices(instance, host):
            continue
        name = str(instance["name"])
        running = instance.get("status") == "Running"
        userspace, services = guest_userspace(client, name) if running else (None, ())
        snaps = LxdSnapshots(LxdName("lxd", None, name), client=client)
        support = snaps.support()
        found.append(GuestFacts(name, running, userspace, support.supported, support.storage,
                                support.reason, services, snapshot_freezes=support.freezes_running))
    return sorted(found, key=lambda g: g.name)


def node_facts(node: str, host: LocalHost, client: LxdClient, repository: Path | None = None) -> NodeFacts:
    """``host``: the node, this machine (its LXD daemon is ``client``); ``repository``: the installers' directory
    here (default: ``REPOSITORY`` on the node)."""
    repo = repository or Path(local_path(host, REPOSITORY))
    loaded = GpuHost(host).driver_version()
    kernel = running_kernel(host)
    pending = [k for k in installed_kernels(host) if k != kernel and kernel_key(k) > kernel_key(kernel)]
    return NodeFacts(node, loaded, kernel, pending[-1] if pending else None, repository_versions(repo),
                     dkms_builds(host, loaded), tuple(gpu_guests(client, host)), str(repo), kernel_headers(host))


def kernel_headers(host: Host) -> tuple[str, ...]:
    """Installed kernels whose headers are there (``/lib/modules/K/build``, what DKMS builds against)."""
    return tuple(k for k in installed_kernels(host) if host.exists(f"/lib/modules/{k}/build"))
