"""Vendor-neutral GPU device nodes: what a node is, the mode and group it gets inside a guest, and which vendors
labwright knows (a small registry, so a second vendor is a new module, not a new branch in every caller).

A vendor is a module under ``labwright.gpu`` (``labwright.gpu.nvidia``) that registers a :class:`Vendor`: its name
(the guest data's ``gpu:`` value) and which device paths are its GPU. Adding AMD or Intel (``/dev/dri``, ``/dev/kfd``)
is a new ``labwright/gpu/amd.py`` registering itself and one line in ``_VENDOR_MODULES``; callers that ask "does this
guest get a GPU" (``passed_gpu_devices``) or "which group opens the nodes" (``GPU_GROUP``) need no change.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from labwright.textio import ascii_digits

#: The group the GPU nodes get inside a guest: ``video``, gid 44 on Debian and Ubuntu (base-passwd's fixed
#: entry; community-scripts and PVE's own examples pass GPU nodes with gid=44 too). The engine deploys put their
#: service user in it, so the nodes can be 0660 (``guest_mode``) instead of the driver's default 0666 (any user,
#: any process of the guest, could open the GPU, read its memory through UVM and load it).
GPU_GROUP = "video"
GPU_GID = 44
#: The most a node gets inside a guest: owner and group only, never others.
GUEST_MODE_MASK = 0o660


#: A number as `stat -c` prints it for a device node, by the letter `stat_numbers` takes: %t/%T the major and minor in
#: hex (the kernel's majors are 12 bits, minors 20), %a the mode in octal, %g the group id in decimal.
_STAT_NUMBER = {"x": (re.compile(r"[0-9a-f]{1,8}"), 16), "o": (re.compile(r"[0-7]{1,6}"), 8),
                "d": (re.compile(r"[0-9]{1,10}"), 10)}


def stat_numbers(fields: list[str], kinds: str) -> tuple[int, ...] | None:
    """The numbers of a `stat -c` line for a device node, each read as ``kinds`` says (``x`` hex, ``o`` octal, ``d``
    decimal: ``"xxd"`` for '%t %T %g'); None when a field is missing or not such a number (a `stat: cannot statx`
    line, a node gone between the listing and the stat, junk). The one reader of the four GPU node listings."""
    if len(fields) < len(kinds):
        return None
    numbers = []
    for text, kind in zip(fields, kinds, strict=False):
        pattern, base = _STAT_NUMBER[kind]
        if not pattern.fullmatch(text):
            return None
        numbers.append(int(text, base))
    return tuple(numbers)


@dataclass(frozen=True)
class DeviceNode:
    """A character device node: ``path`` as the guest sees it, ``source`` on the host."""

    path: str
    source: str
    major: int
    minor: int
    mode: int = 0o666  # the host node's permission bits (nvidia-caps nodes are 0400/0444, not 0666)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def guest_mode(self) -> int:
        """The mode the node gets inside a guest (``guest_mode``)."""
        return guest_mode(self.mode)


def guest_mode(host_mode: int) -> int:
    """A node's mode inside a guest: the host's bits without others' (0666 -> 0660, a capability node's 0444 ->
    0440, 0400 stays 0400): only root and the ``GPU_GROUP`` members (the engines' service users) open it."""
    return host_mode & GUEST_MODE_MASK


def parse_proc_devices(text: str) -> dict[str, int]:
    """Character-device majors by name from ``/proc/devices`` (the block section is skipped)."""
    majors: dict[str, int] = {}
    section = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith("devices:"):
            section = stripped.split()[0].lower()
            continue
        parts = stripped.split(None, 1)
        if section == "character" and len(parts) == 2 and ascii_digits(parts[0]):
            majors.setdefault(parts[1], int(parts[0]))
    return majors


# --- vendors ---------------------------------------------------------------------------------------------------
class Vendor(Protocol):
    """What labwright needs to know of a GPU vendor to tell its devices apart from the rest."""

    #: the guest data's ``gpu:`` value ("nvidia")
    name: str

    def owns_path(self, path: str) -> bool:
        """A device path (``/dev/nvidia0``, ``/dev/nvidia-caps/nvidia-cap1``) that belongs to this vendor's GPUs."""
        ...

    def is_gpu_node(self, path: str) -> bool:
        """A node that is one GPU itself (``/dev/nvidiaN``), not a control or helper node."""
        ...


#: The modules that register a vendor when imported (``register``). A new vendor is one more line.
_VENDOR_MODULES = ("labwright.gpu.nvidia", "labwright.gpu.dri")
_VENDORS: dict[str, Vendor] = {}


def register(vendor: Vendor) -> Vendor:
    """Make ``vendor`` known under its name (called by the vendor's module at import)."""
    _VENDORS[vendor.name] = vendor
    return vendor


def vendors() -> dict[str, Vendor]:
    """Every known vendor by name (importing ``_VENDOR_MODULES`` first)."""
    for module in _VENDOR_MODULES:
        importlib.import_module(module)
    return dict(_VENDORS)


def vendor_of_path(path: str) -> Vendor | None:
    """The vendor whose GPU ``path`` is a node of, or None."""
    return next((v for v in vendors().values() if v.owns_path(path)), None)


def passed_gpu_devices(instance: Mapping[str, Any]) -> list[str]:
    """The LXD instance's devices that give it a GPU: ``type: gpu``, or ``unix-char`` nodes of a known vendor
    (``/dev/nvidia*``)."""
    found = []
    for name, device in sorted((instance.get("expanded_devices") or instance.get("devices") or {}).items()):
        kind = device.get("type")
        where = str(device.get("path") or device.get("source") or "")
        if kind == "gpu" or (kind == "unix-char" and vendor_of_path(where) is not None):
            found.append(name)
    return found
