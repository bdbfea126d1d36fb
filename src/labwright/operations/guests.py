"""pyinfra operations for guests: a declared container, and its NVIDIA userspace matched to the host driver.

``container`` talks to the LXD or Proxmox API from the machine running pyinfra, so it runs against
``@local`` (see deploys/guest.py); ``nvidia_userspace`` runs inside the guest (``@lxd/NAME``, ``@pct/...``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyinfra import host, state
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.exceptions import OperationError

from labwright.errors import LabwrightError
from labwright.facts.nvidia import NvidiaDriverMatch
from labwright.guests.base import BackendPool
from labwright.guests.declared import spec_for_host
from labwright.guests.model import GuestSpec, spec_from_data
from labwright.shell import quote

#: NVIDIA's public archive of Linux driver installers, by exact version.
NVIDIA_RUN_URL = "https://download.nvidia.com/XFree86/Linux-x86_64/{version}/NVIDIA-Linux-x86_64-{version}.run"

# One backend per endpoint for the whole pyinfra run, as the CLI does.
_pool = BackendPool()


def _spec(guest: GuestSpec | Mapping[str, Any], guest_host: str | None) -> GuestSpec:
    if isinstance(guest, GuestSpec):
        return guest
    if guest_host == host.name and host.data.get("guest") == guest:
        # The connected host's own declaration: read with its node's data, as its connector created it.
        spec = spec_for_host(host, state.inventory)
        if spec is not None:
            return spec
    return spec_from_data(guest_host or str(guest.get("name", "")), guest, source="pyinfra deploy")


def _apply(spec: GuestSpec) -> None:
    _pool.get(spec).apply(spec)


def _destroy(spec: GuestSpec) -> None:
    _pool.get(spec).destroy(spec)


@operation()
def container(guest: GuestSpec | Mapping[str, Any], guest_host: str | None = None, present: bool = True):
    """
    Make a declared LXC guest (LXD/Incus or Proxmox VE) exist exactly as declared, or remove it.

    + guest: a ``GuestSpec``, or the ``guest`` dict of an inventory host (see docs/guests.md)
    + guest_host: the inventory host name the dict belongs to (``@lxd/NAME``, ``@pct/NODE/VMID``); names the guest
      when the dict has no ``name``
    + present: ``False`` destroys the guest (only one labwright made)

    **Example:**

    .. code:: python

        from labwright.operations import guests
        guests.container(
            name="llama1 container",
            guest={"backend": "lxd", "name": "llama1", "image": "debian/12", "cores": 6, "memory": "16G",
                   "gpu": "nvidia"},
        )
    """
    try:
        # pyinfra prints an OperationError as one line; our errors already are one line.
        spec = _spec(guest, guest_host)
        backend = _pool.get(spec)
        if not present:
            if not backend.exists(spec):
                host.noop(f"guest {spec.name} is absent")
                return
            yield FunctionCommand(_destroy, (spec,), {})
            return
        plan = backend.plan(spec)
    except LabwrightError as exc:
        raise OperationError(str(exc)) from exc
    if not plan.changes:
        host.noop(f"guest {spec.name} matches its declaration")
        return
    yield FunctionCommand(_apply, (spec,), {})


@operation()
def nvidia_userspace(installer_url: str | None = None, root: str = "/"):
    """
    Install the NVIDIA userspace driver inside a container at EXACTLY the host kernel module's version.

    The version comes from ``/proc/driver/nvidia/version``, which inside a container is the host's, so a
    re-run after a host driver upgrade reinstalls the matching userspace; a match is a no-op.

    + installer_url: where to fetch ``NVIDIA-Linux-x86_64-<ver>.run`` (``{version}`` is filled in); default NVIDIA's
      archive
    + root: read the facts below this directory (tests point it at a fake tree)

    **Example:**

    .. code:: python

        from labwright.operations import guests
        guests.nvidia_userspace(name="NVIDIA userspace = host driver")
    """
    match = host.get_fact(NvidiaDriverMatch, root=root)
    if match["status"] == "match":
        host.noop(match["message"])
        return
    version = match["host_version"]
    if version is None:
        raise OperationError(f"{host.name}: {match['message']}")
    url = (installer_url or NVIDIA_RUN_URL).format(version=version)
    run_file = f"/tmp/NVIDIA-Linux-x86_64-{version}.run"
    # --no-kernel-module: the module is the host's; the container gets only the userspace side.
    yield f"curl -fsSL -o {quote(run_file)} {quote(url)}"
    yield (f"sh {quote(run_file)} --no-kernel-module --silent --no-questions --ui=none "
           "--no-nouveau-check --no-systemd")
    yield f"rm -f {quote(run_file)}"
