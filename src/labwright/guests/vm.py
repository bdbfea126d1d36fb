"""The VM half of a guest declaration (``kind: vm``): a Proxmox VE qemu guest with PCI passthrough.

Parsing only; every refusal is one line naming the field and an accepted form. The rules come from the
PVE side, so a typo never reaches the API (and the simulator validates what does against PVE's schema):

- ``hostpci`` is PVE's ``pve-qm-hostpci`` format (qemu-server 9.2.6, commit e6352be67f70,
  ``src/PVE/QemuServer/PCI.pm`` 28-140): ``host`` is ``[DOMAIN:]BUS:DEV[.FUNC]`` in hex (``$PCIRE`` line 28), several
  joined by ``;``; or ``mapping``, a cluster resource mapping id (``pve-configid``); never both (``parse_hostpci``
  442); ``pcie``, ``x-vga``, ``rombar`` booleans; at most 16 devices (``$MAX_HOSTPCI_DEVICES`` 26).
- ``pcie=1`` needs the q35 machine (``parse_hostpci_devices`` 510: "q35 machine model is not enabled").
- ``bios`` is ``seabios`` or ``ovmf``; ``ostype`` one of PVE's enum (pve-docs 9.1.3 schema, ``POST
  /nodes/{node}/qemu``); ``machine`` ``q35``, ``pc`` or a pinned ``pc-q35-X.Y[+pveN]``/``pc-i440fx-X.Y[+pveN]``
  (qemu-server ``src/PVE/QemuServer/Machine.pm``, the ``type`` pattern).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from labwright.errors import BadInput
from labwright.guests.fields import RootfsSpec
from labwright.guests.pve_props import normalize_pci_id

#: ``$MAX_HOSTPCI_DEVICES`` (qemu-server src/PVE/QemuServer/PCI.pm line 26).
MAX_HOSTPCI = 16
#: ``$PCIRE`` (PCI.pm line 28): optional domain, bus, device, optional function; hexadecimal, lower case.
PCI_ID = re.compile(r"^(?:[a-f0-9]{4,}:)?[a-f0-9]{2}:[a-f0-9]{2}(?:\.[a-f0-9])?$")
#: ``pve-configid`` (pve-common src/PVE/JSONSchema.pm): a mapping id.
MAPPING_ID = re.compile(r"^[a-z][a-z0-9_-]+$", re.I)
OSTYPES = ("other", "wxp", "w2k", "w2k3", "w2k8", "wvista", "win7", "win8", "win10", "win11", "l24", "l26", "solaris")
BIOSES = ("seabios", "ovmf")
MACHINE = re.compile(r"(?a)^(?:q35|pc|pc-q35-\d+(?:\.\d+)+(?:\+pve\d+)?|pc(?:-i440fx)?-\d+(?:\.\d+)+(?:\+pve\d+)?)$")
#: Keys only a VM takes, and the container keys a VM refuses (with what to write instead).
VM_KEYS = frozenset({"kind", "hostpci", "ostype", "bios", "machine", "disk"})
CONTAINER_ONLY = {
    "template": "a VM boots from `disk` (install the OS from an ISO, or import a disk image)",
    "image": "a VM boots from `disk`",
    "rootfs": 'write the disk as `disk` ("local-lvm:64")',
    "swap": "a VM has no swap setting; size its memory",
    "unprivileged": "a VM has no privilege setting",
    "features": "a VM has no container features",
    "mounts": "a VM has no bind mounts; share the directory over NFS/SMB or virtiofs",
    "gpu": "a VM gets its GPU as a PCI device: `hostpci`",
    "gpu_mode": "a VM gets its GPU as a PCI device: `hostpci`",
    "nvidia_runtime": "that is an LXD setting",
    "hostname": "a VM is named by `name` (its OS sets its own host name)",
}


@dataclass(frozen=True)
class HostPci:
    """One ``hostpciN`` entry: ``host`` addresses (as PVE takes them) or a ``mapping`` id, and the options."""

    host: tuple[str, ...] = ()
    mapping: str | None = None
    pcie: bool | None = None
    x_vga: bool | None = None
    rombar: bool | None = None

    @property
    def identity(self) -> str:
        """What names the device: its addresses, or ``mapping=ID``."""
        return ";".join(self.host) if self.host else f"mapping={self.mapping}"

    def value(self) -> str:
        """The property string PVE stores: the default key ``host`` bare and first, then the rest sorted."""
        parts = [";".join(self.host)] if self.host else []
        options = {"mapping": self.mapping, "pcie": self.pcie, "rombar": self.rombar, "x-vga": self.x_vga}
        for key in sorted(options):
            value = options[key]
            if value is not None:
                parts.append(f"{key}={int(value) if isinstance(value, bool) else value}")
        return ",".join(parts)


@dataclass(frozen=True)
class VmSpec:
    """The VM settings of a ``kind: vm`` guest; sizes already parsed (disk in GiB)."""

    ostype: str = "l26"
    bios: str = "seabios"
    machine: str | None = None
    disk: RootfsSpec | None = None
    hostpci: tuple[HostPci, ...] = ()

    @property
    def q35(self) -> bool:
        return bool(self.machine) and "q35" in str(self.machine)


def hostpci_devices(devices: Any, where: str) -> tuple[HostPci, ...]:
    """The typed ``hostpci`` tables (labwright.guests.schema) as HostPci; at most 16, each device passed once."""
    found = tuple(HostPci(tuple(d.host), d.mapping, d.pcie, d.x_vga if d.x_vga is not None else d.x_vga_, d.rombar)
                  for d in devices)
    if len(found) > MAX_HOSTPCI:
        raise BadInput(f"{where}: {len(found)} devices; Proxmox passes at most {MAX_HOSTPCI} (hostpci0-15)")
    seen: dict[str, int] = {}
    for index, device in enumerate(found):
        for key in (device.host and [normalize_pci_id(a) for a in device.host]) or [device.identity]:
            if key in seen:
                raise BadInput(f"{where}[{index}]: {key} is already passed by {where}[{seen[key]}]; pass each "
                               "device once")
            seen[key] = index
    return found


def parse_vm(data: Mapping[str, Any], typed: Any, where: str) -> VmSpec:
    """The VM settings of one ``guest`` dict (``data`` as written, ``typed`` by labwright.guests.schema; ``kind:
    vm`` already checked); refuses container-only keys."""
    wrong = sorted(k for k in data if k in CONTAINER_ONLY and not (k == "gpu" and data[k] in (None, False, "none")))
    if wrong:
        raise BadInput(f"{where}: {wrong[0]} is a container setting and this guest is kind: vm; "
                       f"{CONTAINER_ONLY[wrong[0]]}")
    hostpci = hostpci_devices(typed.hostpci, f"{where}: hostpci")
    ostype = typed.ostype or "l26"
    # OVMF and q35 are what GPU passthrough wants (UEFI GOP for the card's ROM, PCIe root ports for pcie=1).
    bios = typed.bios or ("ovmf" if hostpci else "seabios")
    machine = typed.machine if typed.machine is not None else ("q35" if hostpci else None)
    q35 = machine is not None and "q35" in machine
    if not q35:
        pcie = next((i for i, d in enumerate(hostpci) if d.pcie), None)
        if pcie is not None:
            raise BadInput(f"{where}: hostpci[{pcie}] pcie: true needs machine: q35 (Proxmox refuses it: q35 "
                           "machine model is not enabled); set machine: q35 or drop pcie")
    if q35:  # on q35 a passed device sits on a PCIe root port unless the inventory says otherwise
        hostpci = tuple(HostPci(d.host, d.mapping, True if d.pcie is None else d.pcie, d.x_vga, d.rombar)
                        for d in hostpci)
    disk = None if typed.disk is None else RootfsSpec(typed.disk.storage, typed.disk.size)
    return VmSpec(ostype=ostype, bios=bios, machine=machine, disk=disk, hostpci=hostpci)
