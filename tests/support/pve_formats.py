"""PVE's named string formats (``format: "pve-vmid"`` in the API schema), as the simulator checks them.

The schema names a format but does not carry its code: PVE registers a Perl validator per name
(pve-common ``PVE/JSONSchema.pm``, pve-container ``PVE/LXC/Config.pm``, pve-storage). These are
re-implementations of the ones the LXC, task, storage and cluster endpoints use, with PVE's own
error text, because a simulator that accepts ``vmid=99`` or ``hwaddr=01:...`` would let a client
bug through that a real node refuses. ``NAME-list`` and ``NAME-opt`` variants are derived the way
``check_format`` derives them. A name not listed here is accepted (see docs/pve-simulator.md).

Provenance: pve-common 9.2.1 (f665029eac78), src/PVE/JSONSchema.pm: ``register_format`` (201-...),
``pve_verify_vmid`` (309-...), ``pve_verify_node_name`` (347-...), ``pve_verify_mac_addr`` (456-...), the IP and CIDR
validators (482-647), ``check_format`` with its ``-list``/``-opt`` variants (975-1020), ``parse_size`` (1022-1039),
``parse_property_string`` (1068-1174); ``split_list`` is src/PVE/Tools.pm 318-...; container formats from
pve-container 6.1.10 (94f558522ef6) src/PVE/LXC/Config.pm (``verify_lxc_mp_string`` 982-..., ``verify_lxc_dev_string``
1063-...). Storage formats (pve-storage) were not re-read for this block.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

from labwright.errors import LabwrightError


class FormatError(LabwrightError):
    """A value that a named format refuses; the text is PVE's (it ends in a newline, as PVE's ``die`` does)."""


_VMID = re.compile(r"^[1-9][0-9]{2,8}$")
_NODE = re.compile(r"^([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$")
_DNS_LABEL = r"([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)"
_DNS = re.compile(rf"^({_DNS_LABEL}\.)*{_DNS_LABEL}$")
_MAC = re.compile(r"^[a-f0-9][02468ace](?::[a-f0-9]{2}){5}$", re.I)
_ID = re.compile(r"^[a-z][a-z0-9\-_.]*[a-z0-9]$", re.I)
_CONFIGID = re.compile(r"^[a-z][a-z0-9_-]+$", re.I)
_TAG = re.compile(r"^[a-z0-9_][a-z0-9_\-+.]*$", re.I)
_VOLUME_ID = re.compile(r"^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$", re.I)
_POOLID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]+$")
_REALM = re.compile(r"^[A-Za-z][A-Za-z.\-_]+$")
_IFACE = re.compile(r"^[a-z][a-z0-9_]{1,20}([:.]\d+)?$", re.I)
_SIZE = re.compile(r"^(\d+(\.\d+)?)([KMGT](?:iB)?)?$")
_STARTUP_PART = re.compile(r"^(?:(?:order=)?\d+|up=\d+|down=\d+)$")
STORAGE_CONTENT = ("images", "rootdir", "vztmpl", "iso", "backup", "snippets", "import")
TASK_STATUS_TYPES = ("ok", "warning", "error", "unknown")
#: Privileges PVE knows (PVE::AccessControl); pve-priv-list values must be among them.
PRIVILEGES = frozenset({
    "Datastore.Allocate", "Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit",
    "Group.Allocate", "Mapping.Audit", "Mapping.Modify", "Mapping.Use", "Permissions.Modify", "Pool.Allocate",
    "Pool.Audit", "Realm.Allocate", "Realm.AllocateUser", "SDN.Allocate", "SDN.Audit", "SDN.Use", "Sys.AccessNetwork",
    "Sys.Audit", "Sys.Console", "Sys.Incoming", "Sys.Modify", "Sys.PowerMgmt", "Sys.Syslog", "User.Modify",
    "VM.Allocate", "VM.Audit", "VM.Backup", "VM.Clone", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Cloudinit",
    "VM.Config.Disk", "VM.Config.HWType", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options",
    "VM.Console", "VM.GuestAgent.Audit", "VM.GuestAgent.FileRead", "VM.GuestAgent.FileSystemMgmt",
    "VM.GuestAgent.FileWrite", "VM.GuestAgent.Unrestricted", "VM.Migrate", "VM.PowerMgmt", "VM.Replicate",
    "VM.Snapshot", "VM.Snapshot.Rollback",
})


def _fail(message: str) -> FormatError:
    return FormatError(message + "\n")


def parse_size(value: str) -> int | None:
    """Bytes of a PVE disk size (``8G``, ``512M``, ``1.5T``, ``4096``), or None (pve-common ``parse_size``)."""
    match = _SIZE.match(value)
    if not match:
        return None
    factor = {"K": 1, "M": 2, "G": 3, "T": 4}.get((match.group(3) or "")[:1], 0)
    return int(float(match.group(1)) * 1024**factor)


def format_size(size: int) -> str:
    """PVE's ``format_size``: the largest unit that divides evenly (8589934592 -> ``8G``)."""
    for unit in ("", "K", "M", "G"):
        if size % 1024:
            return f"{size}{unit}"
        size //= 1024
    return f"{size}T"


def split_list(text: str) -> list[str]:
    """PVE::Tools::split_list: NUL-separated when it contains NUL, else split on commas, semicolons, spaces."""
    if "\0" in text:
        return text.split("\0")
    return re.sub(r"[,;]", " ", text).split()


def _ip(value: str, version: int | None = None) -> bool:
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return False
    return version is None or address.version == version


def _cidr(value: str, version: int) -> bool:
    address, _, prefix = value.partition("/")
    if not prefix.isdigit() or not _ip(address, version):
        return False
    return 7 < int(prefix) <= (32 if version == 4 else 128)


def _check(predicate: Callable[[str], bool], message: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if not predicate(value):
            raise _fail(message.format(value=value))

    return check


def _storage_id(value: str) -> None:
    if len(value) < 2:
        raise _fail(f"storage ID '{value}' cannot be shorter than 2 characters")
    if not _ID.match(value):
        raise _fail(f"storage ID '{value}' contains illegal characters")


def _mp_string(value: str) -> None:
    if re.search(r"/\.\.?/", value) or re.search(r"/\.\.?$", value) or value.startswith("../"):
        raise _fail(f"{value} contains illegal character sequences")


def _dev_string(value: str) -> None:
    if re.search(r"/\.\.?(?:/|$)", value) or not value.startswith("/dev/"):
        raise _fail(f"{value} is not a valid device path")


def _startup(value: str) -> None:
    parts = [p for p in value.split(",") if p.strip()]
    if not parts or not all(_STARTUP_PART.match(p) for p in parts):
        raise _fail("unable to parse startup options")


def _ip_with_ll_iface(value: str) -> None:
    address, sep, iface = value.partition("%")
    if sep and address.startswith("fe80:") and _ip(address) and _IFACE.match(iface):
        return
    if not sep and _ip(value):
        return
    raise _fail("value does not look like a valid IP address")


def _timezone(value: str) -> None:
    # The real check reads the node's /usr/share/zoneinfo/zone.tab; an Area/City shape is what we can check here.
    if value in ("host", "UTC") or re.match(r"^[A-Z][A-Za-z_+-]+(/[A-Za-z0-9_+-]+){1,2}$", value):
        return
    raise _fail(f"invalid time zone '{value}'")


FORMATS: dict[str, Callable[[str], None]] = {
    "pve-vmid": _check(lambda v: bool(_VMID.match(v)), "value does not look like a valid VM ID"),
    "pve-node": _check(lambda v: bool(_NODE.match(v)), "value does not look like a valid node name"),
    "dns-name": _check(lambda v: bool(_DNS.match(v)), "value does not look like a valid DNS name"),
    "mac-addr": _check(lambda v: bool(_MAC.match(v)), "value does not look like a valid unicast MAC address"),
    "ipv4": _check(lambda v: _ip(v, 4), "value does not look like a valid IPv4 address"),
    "ipv6": _check(lambda v: _ip(v, 6), "value does not look like a valid IPv6 address"),
    "ip": _check(_ip, "value does not look like a valid IP address"),
    "pve-ipv4-config": _check(lambda v: v in ("dhcp", "manual") or _cidr(v, 4),
                              "value does not look like a valid ipv4 network configuration"),
    "pve-ipv6-config": _check(lambda v: v in ("auto", "dhcp", "manual") or _cidr(v, 6),
                              "value does not look like a valid ipv6 network configuration"),
    "disk-size": _check(lambda v: parse_size(v) is not None, "value does not look like a valid disk size: {value}"),
    "pve-storage-id": _storage_id,
    "pve-configid": _check(lambda v: bool(_CONFIGID.match(v)), "invalid configuration ID '{value}'"),
    "pve-tag": _check(lambda v: bool(_TAG.match(v)), "invalid characters in tag"),
    "pve-volume-id": _check(lambda v: bool(_VOLUME_ID.match(v)), "unable to parse volume ID '{value}'"),
    "pve-poolid": _check(lambda v: bool(_POOLID.match(v)), "invalid pool ID '{value}'"),
    "pve-realm": _check(lambda v: bool(_REALM.match(v)), "value '{value}' does not look like a valid realm"),
    "pve-priv": _check(lambda v: v in PRIVILEGES, "invalid privilege '{value}'"),
    "pve-storage-content": _check(lambda v: v in STORAGE_CONTENT, "invalid content type '{value}'"),
    "pve-task-status-type": _check(lambda v: v in TASK_STATUS_TYPES, "invalid status '{value}'"),
    "pve-lxc-mp-string": _mp_string,
    "pve-lxc-dev-string": _dev_string,
    "pve-startup-order": _startup,
    "lxc-ip-with-ll-iface": _ip_with_ll_iface,
    "pve-ct-timezone": _timezone,
}


def check_named_format(name: str, value: str) -> None:
    """Raise ``FormatError`` unless ``value`` satisfies the named format (``-list``/``-opt`` derived as PVE does)."""
    base, kind = name, "none"
    for suffix in ("-list", "-opt"):
        if name.endswith(suffix) and name[: -len(suffix)] in FORMATS:
            base, kind = name[: -len(suffix)], suffix[1:]
    check = FORMATS.get(base)
    if check is None:
        return
    if kind == "list":
        for item in split_list(value):
            check(item)
    elif kind == "opt":
        if value:
            check(value)
    else:
        check(value)


#: Formats PVE registers as a property-string hash rather than a validator, which the API schema names but does
#: not spell out (``format: "pve-qm-hostpci"``); checked like an inline format (``parse_property_string``).
#: ``pve-qm-hostpci``: qemu-server 9.2.6 (e6352be67f70) src/PVE/QemuServer/PCI.pm 28-140 (``$PCIRE`` line 28).
_PCIRE = r"(?:[a-f0-9]{4,}:)?[a-f0-9]{2}:[a-f0-9]{2}(?:\.[a-f0-9])?"
_HEX_ID = {"type": "string", "pattern": r"^0x[0-9a-fA-F]{4}$", "optional": 1}
PROPERTY_FORMATS: dict[str, dict[str, dict[str, object]]] = {
    "pve-qm-hostpci": {
        "host": {"default_key": 1, "optional": 1, "type": "string", "pattern": f"{_PCIRE}(;{_PCIRE})*"},
        "mapping": {"optional": 1, "type": "string", "format": "pve-configid"},
        "rombar": {"type": "boolean", "optional": 1, "default": 1},
        "romfile": {"type": "string", "pattern": "[^,;]+", "optional": 1},
        "pcie": {"type": "boolean", "optional": 1, "default": 0},
        "x-vga": {"type": "boolean", "optional": 1, "default": 0},
        "legacy-igd": {"type": "boolean", "optional": 1, "default": 0},
        "mdev": {"type": "string", "pattern": r"[^/\.:]+", "optional": 1},
        "vendor-id": _HEX_ID, "device-id": _HEX_ID, "sub-vendor-id": _HEX_ID, "sub-device-id": _HEX_ID,
        "driver": {"type": "string", "optional": 1, "default": "vfio", "enum": ["vfio", "keep"]},
    },
}
