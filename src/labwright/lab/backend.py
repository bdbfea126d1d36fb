"""Which daemon a lab lives on (``lab_backend``), and the checks that keep LXD and Incus apart on one host.

The rule, in order (never "whichever binary happens to be found first"):

1. ``lab_backend = 'incus'`` or ``'lxd'``: that daemon; it must be installed (``scripts/setup`` installs both), or the
   run stops before anything is made.
2. Hosts written ``@incus/NAME``: Incus (the connector that deploys into them talks to Incus).
3. Hosts written ``@lxd/NAME`` (the default inventory): LXD where it is installed, else an installed Incus (the
   ``@lxd`` connector falls back to the Incus socket then), else the one this distribution packages: LXD on Debian 12,
   Incus where LXD is gone from the archive (Debian 13, whose release notes move users to Incus) or only a snap
   (Ubuntu 24.04).
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from pathlib import Path
from typing import Any

from labwright.errors import BadInput, OperationFailed
from labwright.lab.daemon import BACKENDS, INCUS, LXD, Backend
from labwright.lab.spec import LabSpec


def packaged_backend(apt_cache: str = "apt-cache") -> Backend:
    """The daemon this distribution packages as a deb: LXD when ``apt-cache show lxd`` finds one that is not the snap
    wrapper (Debian 12), Incus otherwise (Debian 13, Ubuntu 24.04), as scripts/setup decides."""
    try:
        proc = subprocess.run([apt_cache, "show", "lxd"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return INCUS
    info = proc.stdout if proc.returncode == 0 else ""
    if not info.strip() or any(line.startswith("Depends:") and "snapd" in line for line in info.splitlines()):
        return INCUS
    return LXD


def choose_backend(spec: LabSpec) -> tuple[Backend, str]:
    """The lab's daemon and why (one phrase for the report), or BadInput naming ``lab_backend`` and the fix."""
    if spec.backend in BACKENDS:
        backend = BACKENDS[spec.backend]
        if not backend.installed():
            other = LXD if backend is INCUS else INCUS
            instead = f", or set lab_backend = '{other.name}' (installed here)" if other.installed() else ""
            raise BadInput(f"{spec.source}: lab_backend {backend.name}: {backend.title} is not installed here (no "
                           f"{backend.client_tool} and {Path(backend.daemon_paths[0]).name}); install it with "
                           f"scripts/setup or `sudo apt-get install {backend.package}`{instead}")
        return backend, f"lab_backend = '{backend.name}'"
    if spec.host_prefix == "incus":
        if not INCUS.installed() and LXD.installed():
            raise BadInput(f"{spec.source}: the lab's hosts are written @incus/NAME but Incus is not installed here "
                           f"(LXD is); install it with scripts/setup or `sudo apt-get install {INCUS.package}`, or "
                           "write them @lxd/NAME")
        return INCUS, "its hosts are @incus/NAME"
    if LXD.installed():
        return LXD, "LXD is installed" + (" (Incus too: set lab_backend = 'incus' for that one)"
                                          if INCUS.installed() else "")
    if INCUS.installed():
        return INCUS, "Incus is installed, LXD is not"
    backend = packaged_backend()
    return backend, f"neither is installed; this distribution packages {backend.title}"


def check_apart(spec: LabSpec, backend: Backend, sys_net: str = "/sys/class/net") -> None:
    """Both daemons on one host each need their own bridge and subnet: refuse a lab whose ``lab_bridge`` or
    ``lab_subnet`` the other daemon already has (its networks read from its API when it answers), before anything is
    made here. A subnet the other daemon's bridge routes is found by ``check_subnet_free`` too (a host route), but
    a bridge of the same name is not: its routes are on the very device this lab would make. Called while this
    daemon does not manage ``lab_bridge`` yet."""
    other = INCUS if backend is LXD else LXD
    networks = _networks_of(other)
    wanted = spec.subnet.network
    free = "lab_bridge = 'lwibr0' and lab_subnet = '10.99.64.1/24'" if backend is INCUS else \
        "lab_bridge = 'lwbr1' and lab_subnet = '10.99.65.1/24'"
    for network in networks:
        addr = str((network.get("config") or {}).get("ipv4.address") or "")
        if network.get("name") == spec.bridge and network.get("managed"):
            raise BadInput(f"{spec.source}: lab_bridge {spec.bridge} is already {other.title}'s bridge "
                           f"({addr or 'no IPv4'}); {backend.title} and {other.title} each need their own: set "
                           f"another lab_bridge and lab_subnet for this {backend.title} lab, e.g. {free}")
        if network.get("managed") and addr and addr not in ("none", "auto"):
            try:
                theirs = ipaddress.IPv4Interface(addr).network
            except ValueError:
                continue
            if theirs.overlaps(wanted):
                raise BadInput(f"{spec.source}: lab_subnet {wanted} overlaps {other.title}'s bridge "
                               f"{network.get('name')} ({addr}); give this {backend.title} lab a free subnet, "
                               f"e.g. {free}")
    if os.path.exists(os.path.join(sys_net, spec.bridge)):
        raise BadInput(f"{spec.source}: lab_bridge {spec.bridge} is already an interface on this host that "
                       f"{backend.title} did not make (another daemon's bridge?); set another lab_bridge and "
                       f"lab_subnet, e.g. {free}")


def _networks_of(backend: Backend) -> list[dict[str, Any]]:
    """The networks of ``backend``'s daemon when it runs here and answers; none otherwise (it cannot claim a bridge
    then; the kernel's own interfaces are checked by ``check_subnet_free``)."""
    if not backend.installed() and not _default_socket_exists(backend):
        return []
    try:
        client = backend.client(timeout=5)
    except (OperationFailed, BadInput):
        return []
    try:
        return list(client.request("GET", "/1.0/networks", params={"recursion": 1}) or [])
    except (OperationFailed, BadInput):  # LxdError included: the daemon refused
        return []
    finally:
        client.close()


def _default_socket_exists(backend: Backend) -> bool:
    from labwright.lxd.client import SOCKET_CANDIDATES

    return any(os.path.exists(p) for p in SOCKET_CANDIDATES[backend.name])
