"""The Proxmox VE role labwright needs, and a missing privilege said in one line.

``LabwrightDeploy`` holds the privileges of every API call labwright makes (guests, containers and VMs, their
snapshots, the host upgrade's listing and snapshots), each derived from the permission check PVE runs for it:

- the endpoint's own ``permissions`` (pve-docs' API schema; pve-container 6.1.10 = 94f558522ef6 src/PVE/API2/LXC.pm,
  qemu-server 9.2.6 = e6352be67f70 src/PVE/API2/Qemu.pm) and
- what the handler checks per option: pve-container src/PVE/LXC.pm ``check_ct_modify_config_perm`` 1655-1756,
  qemu-server Qemu.pm ``check_vm_modify_config_perm`` 995-1055 (option tables 789-862) and ``check_hostpci_perm``
  918-936, the bridges' pve-guest-common (4a8f6cb) src/PVE/GuestHelpers.pm ``check_vnet_access`` 397-421.

Left out on purpose, because a check that takes any one of several privileges is met by one the role has:
``Datastore.Audit`` (storage lists and content take Datastore.Audit or Datastore.AllocateSpace), ``VM.Snapshot.
Rollback`` (a rollback takes VM.Snapshot or VM.Snapshot.Rollback), ``Sys.Audit`` (labwright reads ``/nodes``,
``/nodes/NODE/version``, ``/cluster/resources``, which every user may). What no role can give an API token: device
passthrough (``devN``), bind mounts, feature flags but nesting and a VM's PCI device by address are root@pam's
alone (LXC.pm 1658, 1686-1687; Qemu.pm 918-936); labwright writes those through the node's config file over SSH
(``proxmox_root_via: ssh``) or as root@pam.
"""

from __future__ import annotations

import re

ROLE = "LabwrightDeploy"

#: privilege -> what needs it (the API call and the check).
PRIVILEGES: dict[str, str] = {
    "VM.Allocate": "create a CT/VM (LXC.pm create_vm 295-301, Qemu.pm 1309-1321), destroy one (DELETE .../{vmid}), "
                   "set the nesting feature (LXC.pm 1734)",
    "VM.Audit": "read a guest's config, status, pending changes and snapshots (GET .../config, status/current, "
                "pending, snapshot)",
    "VM.Config.CPU": "cores (LXC.pm 1663-1664, Qemu.pm 1009)",
    "VM.Config.Memory": "memory, swap (LXC.pm 1680-1681, Qemu.pm 1011)",
    "VM.Config.Disk": "rootfs and volume mount points (LXC.pm 1665-1666), a VM's boot order (Qemu.pm 1023)",
    "VM.Config.Network": "netN, hostname, nameserver (LXC.pm 1682-1689, Qemu.pm 1025)",
    "VM.Config.Options": "onboot, tags, ostype, description and the other general options (LXC.pm 1743-1744, "
                         "Qemu.pm 1015)",
    "VM.Config.HWType": "a VM's machine (q35), its PCI device by mapping (Qemu.pm 1013, check_hostpci_perm 928)",
    "VM.PowerMgmt": "start and stop a guest, start after create (POST .../status/start|stop, Qemu.pm 1306-1307)",
    "VM.Snapshot": "take, delete and roll back a snapshot (POST/DELETE .../snapshot, .../rollback)",
    "Datastore.AllocateSpace": "the rootfs/disk volume (LXC.pm 1672-1676, Qemu.pm check_storage_access 189), the "
                               "template (check_volume_access), the storage listing (GET .../storage/S/content)",
    "SDN.Use": "the bridge of every netN (GuestHelpers.pm check_vnet_access 419: /sdn/zones/localnetwork/BRIDGE)",
    "Mapping.Use": "a VM's GPU passed by a PCI resource mapping (Qemu.pm check_hostpci_perm 927: /mapping/pci/ID)",
}

#: PVE's 403 text (pve-common src/PVE/Exception.pm ``raise_perm_exc``): "Permission check failed (PATH, PRIV)" or,
#: for a check of any of several, "(PATH, PRIV|PRIV)".
_DENIED = re.compile(r"Permission check failed \((?P<path>/[^,()]*), (?P<privs>[A-Za-z.|]+)\)")


def pveum_commands(user: str = "labwright@pve", token: str = "deploy") -> list[str]:
    """The commands that make the role, a user and its token, and give them the role on ``/`` (run as root on a
    node). ``--privsep 0``: the token has its user's privileges, which are exactly the role's."""
    return [
        f'pveum role add {ROLE} -privs "{",".join(PRIVILEGES)}"',
        f"pveum user add {user}",
        f"pveum acl modify / -user {user} -role {ROLE}",
        f"pveum user token add {user} {token} --privsep 0",
    ]


def denied(message: str) -> tuple[str, str] | None:
    """(path, privilege) from a 403's text, or None when it names none."""
    found = _DENIED.search(message)
    return (found.group("path"), found.group("privs")) if found else None


def missing_privilege_line(what: str, path: str, privileges: str) -> str:
    """One line naming the privilege the credentials lack, where, and the fix."""
    some = " or ".join(privileges.split("|"))
    ours = [p for p in privileges.split("|") if p in PRIVILEGES]
    role = (f"the {ROLE} role has it: pveum acl modify {path} -token 'USER@REALM!TOKEN' -role {ROLE}" if ours else
            f"{some} is not in the {ROLE} role: labwright needs root@pam here, or proxmox_root_via: ssh")
    return f"{what} failed: the Proxmox credentials lack {some} on {path} (403); {role} (docs/security.md)"
