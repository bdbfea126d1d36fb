"""``check_ct_modify_config_perm`` (pve-container ``LXC.pm``): who may set which container option.

The rule that matters most for GPU guests: the function returns early only for the literal user
``root@pam``. Everyone else, an API token of root (``root@pam!ci``) included, is refused device
passthrough (``devN``), non-volume mount points and feature flags other than ``nesting``.

Provenance: pve-container 6.1.10 (94f558522ef6), src/PVE/LXC.pm ``check_ct_modify_config_perm`` (1655-1756):
root@pam returns early (1658); devN is root-only (1686-1687); features on a privileged CT (1691-1692), on an
unprivileged one all but nesting (1731-1732). The 403 text is pve-common 9.2.1 src/PVE/Exception.pm
``raise_perm_exc`` (53-68): "Permission check failed (WHAT)".

Bridges: a ``netN`` names a bridge, and anyone but root@pam needs SDN.Use on it, for a container
(pve-container LXC.pm ``check_ct_modify_config_perm`` 1682-1685 -> ``check_bridge_access`` 1758-1767) and a VM
(qemu-server 9.2.6 API2/Qemu.pm ``create_vm`` 1364 -> ``PVE::QemuServer::check_bridge_access``), both ending in
pve-guest-common (4a8f6cb) src/PVE/GuestHelpers.pm ``check_vnet_access`` 397-421: ``/sdn/zones/localnetwork/BRIDGE``
(a plain Linux bridge is in the ``localnetwork`` zone), or ``.../BRIDGE/TAG`` for a VLAN tag.

VMs: ``check_vm_modify_config_perm`` (qemu-server 9.2.6 src/PVE/API2/Qemu.pm 995-1055, the option tables 789-862):
which VM.Config.* privilege each option needs; drives, hostpci, serial, usb, unused are checked elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from support.pve_config import NEW_DISK_RE, classify_mountpoint
from support.pve_schema import PveApiError, indexed_schema, parse_property_string
from support.pve_state import PveCluster

ROOT = "root@pam"  # the only principal check_ct_modify_config_perm waves through; a token is never it


def perm_error(what: str) -> PveApiError:
    return PveApiError(403, f"Permission check failed ({what})")


def fmt(props: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return (indexed_schema(props, key) or {}).get("format") or {}


def parse_mountpoint(props: Mapping[str, Any], key: str, value: str) -> dict[str, str]:
    data = parse_property_string(fmt(props, key), value)
    data["type"] = classify_mountpoint(data.get("volume", ""))
    return data


def check_modify_perm(cluster: PveCluster, user: str, vmid: int, old: Mapping[str, str] | None,
                      new: Mapping[str, str], delete: list[str], unprivileged: bool,
                      props: Mapping[str, Any]) -> None:
    """``check_ct_modify_config_perm``: everything passes for the literal user root@pam and nobody else."""
    if user == ROOT:
        return
    vm = f"/vms/{vmid}"

    def check(opt: str, deleting: bool) -> None:
        if opt in ("cores", "cpuunits", "cpulimit"):
            cluster.check_perm(user, vm, ["VM.Config.CPU"])
        elif opt == "rootfs" or re.match(r"^mp\d+$", opt):
            cluster.check_perm(user, vm, ["VM.Config.Disk"])
            if deleting:
                return
            data = parse_mountpoint(props, opt, new[opt])
            if data["type"] != "volume":
                raise perm_error(f"mount point type {data['type']} is only allowed for root@pam")
            fresh = NEW_DISK_RE.match(data["volume"])
            if fresh:
                cluster.check_perm(user, f"/storage/{fresh.group(1)}", ["Datastore.AllocateSpace"])
        elif opt in ("memory", "swap"):
            cluster.check_perm(user, vm, ["VM.Config.Memory"])
        elif re.match(r"^net\d+$", opt) or opt in ("nameserver", "searchdomain", "hostname"):
            cluster.check_perm(user, vm, ["VM.Config.Network"])
            if re.match(r"^net\d+$", opt):  # LXC.pm 1684-1685: the old bridge and the new one
                for raw in ((old or {}).get(opt), None if deleting else new.get(opt)):
                    if raw:
                        check_bridge_access(cluster, user, parse_property_string(fmt(props, opt), raw))
        elif re.match(r"^dev\d+$", opt):
            raise perm_error("configuring device passthrough is only allowed for root@pam")
        elif opt == "features":
            if not unprivileged:
                raise perm_error("changing feature flags for privileged container is only allowed for root@pam")
            before = parse_property_string(fmt(props, opt), old[opt]) if old and old.get(opt) else None
            after = {} if deleting else parse_property_string(fmt(props, opt), new[opt])
            if deleting:
                touched = set(before or {})
            elif before is not None:
                touched = {k for k in set(before) | set(after) if before.get(k, "") != after.get(k, "")}
            else:
                touched = set(after)
            if touched - {"nesting"}:
                raise perm_error("changing feature flags (except nesting) is only allowed for root@pam")
            if touched:
                cluster.check_perm(user, vm, ["VM.Allocate"])
        elif opt == "hookscript":
            raise perm_error("changing the hookscript is only allowed for root@pam")
        else:
            cluster.check_perm(user, vm, ["VM.Config.Options"])

    for opt in new:
        check(opt, False)
    for opt in delete:
        check(opt, True)


def check_bridge_access(cluster: PveCluster, user: str, net: Mapping[str, str]) -> None:
    """GuestHelpers.pm ``check_vnet_access`` 397-421 for a bridge in the ``localnetwork`` zone (no SDN vnets)."""
    if user == ROOT or not net.get("bridge"):
        return
    zone = f"/sdn/zones/localnetwork/{net['bridge']}"
    tag, trunks = net.get("tag"), net.get("trunks")
    if tag:
        cluster.check_perm(user, f"{zone}/{tag}", ["SDN.Use"])
    for one in [t for t in re.split(r"[;,]", trunks or "") if t]:
        cluster.check_perm(user, f"{zone}/{one}", ["SDN.Use"])
    if not (tag or trunks):
        cluster.check_perm(user, zone, ["SDN.Use"])


#: qemu-server API2/Qemu.pm 789-862: the option tables of ``check_vm_modify_config_perm``.
QM_OPTIONS = {
    "VM.Config.CPU": {"cores", "cpu", "runningcpu", "cpulimit", "cpuunits", "numa", "smp", "sockets", "vcpus"},
    "VM.Config.Memory": {"memory", "balloon", "shares", "allow-ksm"},
    "VM.Config.HWType": {"acpi", "hotplug", "kvm", "machine", "runningmachine", "scsihw", "smbios1", "tablet", "vga",
                         "watchdog", "audio0", "rng0"},
    "VM.Config.Options": {"agent", "autostart", "bios", "description", "keyboard", "localtime", "migrate_downtime",
                          "migrate_speed", "name", "onboot", "ostype", "protection", "reboot", "startdate", "startup",
                          "tdf", "template"},
    "VM.PowerMgmt": {"freeze"},
    "VM.Config.Disk": {"boot", "bootdisk", "vmstatestorage"},
}
QM_DRIVE = re.compile(r"^(ide\d+|sata\d+|scsi\d+|virtio\d+|efidisk0|tpmstate0)$")


def check_vm_modify_config_perm(cluster: PveCluster, user: str, vmid: int, keys: list[str]) -> None:
    """Qemu.pm 995-1055: root@pam passes; drives, cdrom, unused/serial/usb/hostpci/virtiofs and tags are checked
    elsewhere (1002-1006); every other option needs its table's privilege on /vms/VMID, or is root's alone."""
    if user == ROOT:
        return
    vm = f"/vms/{vmid}"
    for opt in keys:
        if QM_DRIVE.match(opt) or opt == "cdrom" or opt == "tags" or re.match(
                r"^(?:unused|serial|usb|hostpci|virtiofs)\d+$", opt):
            continue
        privilege = next((priv for priv, opts in QM_OPTIONS.items() if opt in opts), None)
        if privilege is None and re.match(r"^numa\d+$", opt):
            privilege = "VM.Config.CPU"
        if privilege is None and (re.match(r"^net\d+$", opt) or opt == "running-nets-host-mtu"):
            privilege = "VM.Config.Network"
        if privilege is None and (opt in ("cicustom", "cipassword", "citype", "ciuser", "ciupgrade", "nameserver",
                                          "searchdomain", "sshkeys") or re.match(r"^ipconfig\d+$", opt)):
            cluster.check_perm(user, vm, ["VM.Config.Cloudinit", "VM.Config.Network"], any_of=True)
            continue
        if privilege is None and opt == "vmstate":
            cluster.check_perm(user, vm, ["VM.Config.Disk", "VM.PowerMgmt"])
            continue
        if privilege is None:
            raise PveApiError(500, f"only root can set '{opt}' config")
        cluster.check_perm(user, vm, [privilege])
        if opt == "startup":
            cluster.check_perm(user, "/", ["Sys.Modify"])
