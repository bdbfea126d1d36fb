"""What a Proxmox VE qemu VM's config should hold for a ``kind: vm`` guest, how it differs from what it holds,
and the IOMMU group rule for its PCI devices. Pure: no API calls, so every rule is unit-tested with plain dicts.

Ownership on a VM labwright manages (tagged ``labwright``): the options the spec sets, ``netN`` for the spec's
interfaces, every ``hostpciN`` (a device dropped from the inventory is detached), and on create the boot disk
``scsi0`` and, with OVMF, the ``efidisk0`` that keeps the UEFI variables. Disks are never shrunk or replaced:
a bigger ``disk`` is only reported. Values are compared parsed, ignoring what PVE adds itself (a generated MAC,
the ``size=`` of an allocated volume, a Windows guest's pinned ``machine`` version), and by what they mean to PVE
(``pve_props``): ``hostpci0: 02:00,pcie=on,x-vga=on`` as ``qm set`` stores it is ``0000:02:00,pcie=1,x-vga=1``, so
labwright plans no rewrite (which only root@pam could make) for another spelling of the same device.

Provenance (qemu-server 9.2.6, commit e6352be67f70): ``src/PVE/API2/Qemu.pm`` ``create_vm`` (1159-1627: disks
allocated from ``STORAGE:SIZE``, ``boot``/``smbios1``/``vmgenid`` generated, the machine pinned for Windows 1526-1530,
tags de-duplicated); ``src/PVE/QemuServer/Network.pm`` ``parse_net``/``add_random_macs`` (208-266: a MAC is made up
when none is given, printed ``virtio=MAC``); ``src/PVE/QemuServer/PCI.pm`` (the ``hostpci`` format 28-140).
The IOMMU rule: pve-common 9.2.1 ``src/PVE/SysFSTools.pm`` ``lspci`` (75-140: ``iommugroup`` -1 when the device has
no ``iommu_group`` link, i.e. the IOMMU is off) and ``pci_dev_group_bind_to_vfio`` (the whole group is bound to
vfio-pci at start), with pve-manager 9.2.11 ``PVE/API2/Hardware/PCI.pm`` (111-133: bridges, memory controllers and
processors, classes 05/06/0b, are left out of the listing by default; vfio-pci leaves bridges to the host).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from labwright.errors import BadInput
from labwright.guests.model import Change, GuestSpec
from labwright.guests.proxmox_render import Diff, indexed, tag
from labwright.guests.pve_props import HOSTPCI, QEMU_MEMORY, QEMU_NET, covers, normalize_pci_id, parse, same
from labwright.guests.vm import VmSpec

DEFAULT_DISK_GIB = 32
BOOT_DISK = "scsi0"
EFI_DISK = "efidisk0"
#: 4m is what Secure Boot and current OVMF want; keys not pre-enrolled, so a GPU driver's unsigned bits still load.
EFI_OPTIONS = "efitype=4m,pre-enrolled-keys=0"


@dataclass
class VmDesired:
    options: dict[str, str]
    nets: list[str]
    hostpci: list[str]
    disk: str  # STORAGE:SIZE for scsi0 on create
    efidisk: str | None  # STORAGE:1,efitype=4m,... on create (OVMF only)
    notes: list[str] = field(default_factory=list)


def vm_of(spec: GuestSpec) -> VmSpec:
    assert spec.vm is not None, "a kind: vm guest carries its VmSpec"
    return spec.vm


def render_vm(spec: GuestSpec, disk_storage: str) -> VmDesired:
    """The options labwright sets for a VM; ``disk_storage`` is used when the spec names none."""
    vm = vm_of(spec)
    options: dict[str, str] = {"name": spec.name, "ostype": vm.ostype, "bios": vm.bios,
                               "scsihw": "virtio-scsi-single"}
    if vm.machine:
        options["machine"] = vm.machine
    for key, value in (("cores", spec.cores), ("memory", spec.memory), ("description", spec.description)):
        if value is not None:
            options[key] = str(value)
    if spec.onboot is not None:
        options["onboot"] = "1" if spec.onboot else "0"
    nets = []
    for net in spec.net:
        if net.ip != "dhcp" or net.gw is not None:
            raise BadInput(f"{spec.where}: net {net.name}: a VM sets its own address (in its OS, or with cloud-init); "
                           "drop ip/gw from this kind: vm guest")
        parts = ["virtio" + (f"={net.hwaddr.upper()}" if net.hwaddr else ""), f"bridge={net.bridge}"]
        parts += [f"{k}={v}" for k, v in (("tag", net.vlan), ("mtu", net.mtu)) if v is not None]
        nets.append(",".join(parts))
    size = vm.disk.size_gib if vm.disk and vm.disk.size_gib else DEFAULT_DISK_GIB
    storage = vm.disk.storage if vm.disk and vm.disk.storage else disk_storage
    disk = f"{storage}:{size},discard=on,iothread=1,ssd=1"
    efidisk = f"{storage}:1,{EFI_OPTIONS}" if vm.bios == "ovmf" else None
    notes = []
    if any(d.x_vga for d in vm.hostpci):
        notes.append("x-vga: the passed GPU is the VM's primary display (the Proxmox console shows nothing once "
                     "its driver loads)")
    return VmDesired(options, nets, [d.value() for d in vm.hostpci], disk, efidisk, notes)


def net_props(value: Any) -> dict[str, str]:
    """A stored qemu ``netN`` parsed, the ``MODEL=MAC`` key alias resolved (pve-common JSONSchema.pm 1104-1113)."""
    return parse(value, QEMU_NET)


def _machine_same(have: Any, want: str) -> bool:
    """``q35`` is satisfied by the version PVE pins for Windows (``pc-q35-10.0+pve1``), ``pc`` by ``pc-i440fx-``."""
    text = str(have or "")
    if text == want:
        return True
    pinned = {"q35": r"pc-q35-[0-9]", "pc": r"pc-(?:i440fx-)?[0-9]"}.get(want)
    return bool(pinned and re.match(pinned, text))


def _hostpci_identity(value: Any) -> str:
    parsed = parse(value, HOSTPCI)  # host ids with their domain (SysFSTools lspci's filter)
    return parsed["host"] if parsed.get("host") else f"mapping={parsed.get('mapping')}"


def diff_vm(spec: GuestSpec, current: Mapping[str, Any] | None, desired: VmDesired) -> Diff:
    """Changes from ``current`` (GET .../qemu/VMID/config; None: no such VM) to ``desired``."""
    out = Diff()
    current = current or {}
    for key, value in desired.options.items():
        have = current.get(key)
        if key == "machine":
            unchanged = _machine_same(have, value)
        elif key == "description":
            unchanged = have is not None and str(have).rstrip("\n") == value.rstrip("\n")
        elif key == "memory":
            unchanged = same(have, value, QEMU_MEMORY)
        else:
            unchanged = have is not None and str(have) == value
        if not unchanged:
            out.changes.append(Change(f"config {key}", have, value))
            out.put[key] = value
    tag(current, out)
    for index, value in enumerate(desired.nets):
        key = f"net{index}"
        have, want = net_props(current.get(key)), net_props(value)
        if not covers(current.get(key), value, QEMU_NET):
            if not want.get("macaddr") and have.get("macaddr"):  # keep the MAC: PVE would make up a new one
                value = f"virtio={have['macaddr']}" + value.removeprefix("virtio")
            out.changes.append(Change(f"config {key}", current.get(key), value))
            out.put[key] = value
    indexed("hostpci", current, desired.hostpci, lambda _: True, HOSTPCI, _hostpci_identity, out)
    if current and desired.efidisk and not current.get(EFI_DISK):
        out.changes.append(Change(f"config {EFI_DISK}", None, desired.efidisk))
        out.put[EFI_DISK] = desired.efidisk
    return out


def disk_note(spec: GuestSpec, current: Mapping[str, Any]) -> str | None:
    """A bigger ``disk`` than the VM's boot disk is reported, never applied (resizing is the operator's call)."""
    vm = vm_of(spec)
    if not (vm.disk and vm.disk.size_gib) or not current.get(BOOT_DISK):
        return None
    size = parse(current[BOOT_DISK], default_key="file").get("size", "")
    match = re.fullmatch(r"(?a)(\d+)([KMGT]?)", size)
    if not match:
        return None
    gib = int(match.group(1)) / {"K": 1024**2, "M": 1024, "G": 1, "T": 1 / 1024, "": 1024**3}[match.group(2)]
    if gib < vm.disk.size_gib:
        return (f"{BOOT_DISK} is {size}, the inventory says {vm.disk.size_gib}G: grow it with `qm disk resize "
                f"{spec.vmid} {BOOT_DISK} {vm.disk.size_gib}G` (labwright never resizes disks)")
    return None


# --- the IOMMU group rule ---------------------------------------------------------------------------------
def _slot(pci_id: str) -> str:
    """``0000:01:00.1`` -> ``0000:01:00``: the functions of one device share it (a GPU and its audio function)."""
    return pci_id.rsplit(".", 1)[0]


def _matches(address: str, pci_id: str) -> bool:
    """PVE's ``lspci($id)`` filter: ``0000:01:00`` names every function of the slot, ``0000:01:00.0`` one."""
    wanted = normalize_pci_id(address)
    return pci_id == wanted or ("." not in wanted and _slot(pci_id) == wanted)


def _describe(device: Mapping[str, Any]) -> str:
    name = device.get("device_name") or f"{device.get('vendor')}:{device.get('device')}"
    return f"{device.get('id')} ({name})"


def check_iommu(spec: GuestSpec, devices: Sequence[Mapping[str, Any]], node: str) -> list[str]:
    """Refuse ``hostpci`` devices the node cannot pass on their own: not on the node, the IOMMU off (group -1),
    or an IOMMU group shared with devices the guest does not pass (other than the device's own functions).
    ``devices`` is ``GET /nodes/NODE/hardware/pci``. Returns notes (one per passed group)."""
    ids = [str(d.get("id", "")).lower() for d in devices]
    by_id = {str(d.get("id", "")).lower(): d for d in devices}
    hosts = [(index, entry) for index, entry in enumerate(vm_of(spec).hostpci) if entry.host]
    passed: set[str] = set()
    for index, entry in hosts:
        for address in entry.host:
            found = [i for i in ids if _matches(address, i)]
            if not found:
                listed = ", ".join(_describe(by_id[i]) for i in ids if by_id[i].get("class", "").startswith("0x03"))
                raise BadInput(f"{spec.where}: hostpci[{index}] {address}: node {node} has no such PCI device "
                               f"(its display devices: {listed or 'none'}); check `lspci -D` on {node} and fix `host`")
            passed.update(found)
    notes: list[str] = []
    for index, entry in hosts:
        for address in entry.host:
            for pci_id in (i for i in ids if _matches(address, i)):
                group = int(by_id[pci_id].get("iommugroup", -1))
                if group == -1:
                    raise BadInput(f"{spec.where}: hostpci[{index}] {pci_id}: node {node} reports no IOMMU group "
                                   "(iommugroup -1: the IOMMU is off), so the device cannot be passed through; "
                                   "enable VT-d/AMD-Vi in the firmware and intel_iommu=on (Intel) on the kernel "
                                   "command line, reboot, and check `dmesg | grep -e DMAR -e IOMMU`")
                members = [i for i in ids if int(by_id[i].get("iommugroup", -1)) == group]
                others = [i for i in members if i not in passed and _slot(i) != _slot(pci_id)]
                if others:
                    raise BadInput(
                        f"{spec.where}: hostpci[{index}] {pci_id} is in IOMMU group {group} with "
                        f"{', '.join(_describe(by_id[i]) for i in others)}, which this guest does not pass; the host "
                        "would lose them (vfio-pci takes the whole group). Pass the whole group (add them to "
                        "`hostpci`), or move the card to a slot with its own group (or ACS support in the "
                        "firmware); nothing was created or changed")
                note = f"IOMMU group {group} on {node}: {', '.join(members)} (passed whole)"
                if note not in notes:
                    notes.append(note)
    return notes

