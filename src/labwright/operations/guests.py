"""pyinfra operations for guests: a declared container, and its NVIDIA userspace matched to the host driver.

``container`` talks to the LXD or Proxmox API from the machine running pyinfra, so it runs against
``@local`` (see deploys/guest.py); ``nvidia_userspace`` runs inside the guest (``@lxd/NAME``, ``@pct/...``).
"""

from __future__ import annotations

import re
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


#: How a sha256 is written (``installer_sha256``; a line of NVIDIA's ``.sha256sum``).
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def installer_script(url: str, version: str, sha256: str | None = None, sums_url: str | None = None) -> str:
    """The guest's shell command: fetch the installer into a fresh ``mktemp -d`` directory (0700, a name no user
    of the guest can predict), check its sha256 against ``sha256`` (pinned) or the line for it in ``sums_url``
    (NVIDIA's published ``.run.sha256sum``, sha256sum format), run it only when they match, and remove the
    directory however it ends (``trap ... EXIT``). A mismatch, or a sums file with no line for the installer,
    fails in one line on stderr naming the URL (and both hashes); the installer is not run."""
    name = f"NVIDIA-Linux-x86_64-{version}.run"
    not_run = "the installer was not run"
    if sha256 is not None:
        expected = [f"expected={quote(sha256)}", "where='pinned (installer_sha256)'"]
    else:
        sums_url = sums_url or f"{url}.sha256sum"
        expected = [
            f"sums=$(curl -fsSL {quote(sums_url)}) || "
            f"{{ echo {quote(f'{name}: cannot fetch its published sha256 from {sums_url}; {not_run}')} >&2; exit 1; }}",
            # mawk (Debian's awk) has no {64} intervals: the length is checked apart.
            'expected=$(printf \'%s\\n\' "$sums" | awk -v n="$n" '
            '\'($NF == n || $NF == "*" n || NF == 1) && length($1) == 64 && $1 ~ /^[0-9a-fA-F]+$/ '
            '{ print tolower($1); exit }\')',
            f"where={quote(f'published at {sums_url}')}",
            f'[ -n "$expected" ] || '
            f"{{ echo {quote(f'{sums_url}: no sha256 line for {name} in it; {not_run}')} >&2; exit 1; }}",
        ]
    return "; ".join([
        "set -e",
        f"n={quote(name)}",
        "d=$(mktemp -d /tmp/labwright-nvidia.XXXXXXXXXX)",
        "trap 'rm -rf \"$d\"' EXIT",
        'f="$d/$n"',
        f'curl -fsSL -o "$f" {quote(url)}',
        *expected,
        "actual=$(sha256sum < \"$f\" | cut -d' ' -f1)",
        '[ "$actual" = "$expected" ] || { echo "$n: sha256 $actual does not match $expected $where; it is not the '
        f'installer NVIDIA published: {not_run}" >&2; exit 1; }}',
        # --no-kernel-module: the module is the host's; the container gets only the userspace side.
        'sh "$f" --no-kernel-module --silent --no-questions --ui=none --no-nouveau-check --no-systemd',
    ])


@operation()
def nvidia_userspace(installer_url: str | None = None, root: str = "/", installer_sha256: str | None = None,
                     sums_url: str | None = None):
    """
    Install the NVIDIA userspace driver inside a container at EXACTLY the host kernel module's version.

    The version comes from ``/proc/driver/nvidia/version``, which inside a container is the host's, so a
    re-run after a host driver upgrade reinstalls the matching userspace; a match is a no-op. The installer is
    fetched into a fresh ``mktemp -d`` directory and run only when its sha256 is the one pinned
    (``installer_sha256``) or, by default, the one NVIDIA publishes beside it (``.run.sha256sum``).

    + installer_url: where to fetch ``NVIDIA-Linux-x86_64-<ver>.run`` (``{version}`` is filled in); default NVIDIA's
      archive
    + root: read the facts below this directory (tests point it at a fake tree)
    + installer_sha256: the installer's sha256, pinned (then no sums file is fetched)
    + sums_url: where its ``.sha256sum`` is (``{version}`` filled in); default the installer's URL + ``.sha256sum``

    **Example:**

    .. code:: python

        from labwright.operations import guests
        guests.nvidia_userspace(name="NVIDIA userspace = host driver")
    """
    if installer_sha256 is not None and not _SHA256.match(installer_sha256.strip().lower()):
        raise OperationError(f"installer_sha256: {installer_sha256!r} is not a sha256 (64 hex digits); give the "
                             "one NVIDIA publishes in NVIDIA-Linux-x86_64-VERSION.run.sha256sum")
    match = host.get_fact(NvidiaDriverMatch, root=root)
    if match["status"] == "match":
        host.noop(match["message"])
        return
    version = match["host_version"]
    if version is None:
        raise OperationError(f"{host.name}: {match['message']}")
    url = (installer_url or NVIDIA_RUN_URL).format(version=version)
    yield installer_script(url, version, installer_sha256.strip().lower() if installer_sha256 else None,
                           sums_url.format(version=version) if sums_url else None)
