"""PVE property strings (``0000:01:00,pcie=1,x-vga=1``, ``/srv,mp=/data,ro=1``) read the way PVE reads them, so
that labwright compares what a value means, not how it is spelled. Every comparison of a PVE config value that is
a property string (qemu ``hostpciN``/``netN``/``memory``, container ``mpN``/``devN``/``netN``/``features``) goes
through this one parser.

What PVE treats as the same value (pve-common 9.2.1, commit f665029eac78, ``src/PVE/JSONSchema.pm``):

- ``parse_boolean`` (1061-1066): for a key of type boolean, ``1``/``on``/``yes``/``true`` are 1 and
  ``0``/``off``/``no``/``false`` are 0, any case; ``parse_property_string`` (1068-1149) applies it to every boolean
  key (1116-1118) and to a boolean default key (1126-1128). The API stores the string as it was given (qemu-server
  9.2.6 ``src/PVE/API2/Qemu.pm`` 2473-2478 for ``hostpciN``; pve-container 6.1.10 ``src/PVE/LXC/Config.pm``
  ``update_pct_config`` 1385), so ``pcie=on`` stays ``pcie=on`` in the config and means ``pcie=1``.
- Key order does not matter: the string becomes a hash (1095-1139).
- A key left out has the schema's ``default`` (qemu-server ``src/PVE/QemuServer/PCI.pm`` 29-135: ``rombar`` 1,
  ``pcie``/``x-vga``/``legacy-igd`` 0, ``driver`` vfio). Only a default the format declares is applied: a boolean
  without one can mean something else when absent (a container mount's ``acl`` unset keeps the filesystem's own
  default, ``acl=0`` turns ACLs off: pve-container ``src/PVE/LXC.pm`` 2178-2183, 2202-2205, 2232-2233; ``ro``
  unset is made 1 when a template is backed up, ``ro=0`` is not: ``src/PVE/VZDump/LXC.pm`` 171-172).
- An ``integer`` is checked with ``is_integer`` (1170-1174) and used as a number, so ``044`` is ``44``; a missing
  qemu ``memory`` is its ``current`` default, 512 (qemu-server ``src/PVE/QemuServer/Memory.pm`` 68-78, 86-94).
- ``keyAlias``: qemu's ``virtio=MAC`` is ``model=virtio,macaddr=MAC`` (1102-1113; qemu-server
  ``src/PVE/QemuServer/Network.pm`` 66).
- A ``hostpci`` address without a domain is in domain ``0000``: ``parse_hostpci`` (PCI.pm 458-470) looks each id
  up with ``lspci``, whose filter takes an optional ``0000:`` before it (pve-common ``src/PVE/SysFSTools.pm``
  75-92; ``normalize_pci_id`` 38-42).

A value this parser cannot type (a boolean spelled ``maybe``) is kept as written, so it differs from anything
valid: PVE would refuse it, and labwright then rewrites it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Prop:
    """One key of a format: its type (``string``, ``boolean``, ``integer``, ``number``), the schema default, and a
    function that writes a string value the one way PVE would read it (e.g. PCI ids with their domain)."""

    type: str = "string"
    default: str | None = None
    normalize: Callable[[str], str] | None = None


@dataclass(frozen=True)
class PropFormat:
    """A PVE property-string format: its keys, the default key (written bare), ``keyAlias`` keys."""

    name: str
    keys: Mapping[str, Prop]
    default_key: str | None = None
    #: ``virtio`` -> (``model``, ``macaddr``): ``virtio=MAC`` means model=virtio, macaddr=MAC.
    key_aliases: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def parse_boolean(text: str) -> str | None:
    """``parse_boolean`` (JSONSchema.pm 1061-1066): "1"/"0", or None for anything else."""
    if re.fullmatch(r"1|on|yes|true", text, re.I):
        return "1"
    if re.fullmatch(r"0|off|no|false", text, re.I):
        return "0"
    return None


def _typed(prop: Prop | None, value: str) -> str:
    if prop is None:
        return value
    if prop.type == "boolean":
        value = parse_boolean(value) or value
    elif prop.type == "integer" and re.fullmatch(r"(?a)[+-]?\d{1,20}", value):  # longer: kept as written
        value = str(int(value))
    elif prop.type == "number" and re.fullmatch(r"(?a)[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", value):
        number = float(value)
        value = str(int(number)) if number.is_integer() else repr(number)
    return prop.normalize(value) if prop.normalize else value


def parse(value: Any, fmt: PropFormat | None = None, default_key: str | None = None) -> dict[str, str]:
    """A property string as a dict of strings, typed by ``fmt`` (booleans "1"/"0", integers without leading zeros,
    aliases resolved); without a format only split (the bare value under ``default_key``). Keys the format does not
    know are kept as written. Lenient: never raises (a config PVE wrote is read, not validated)."""
    bare = fmt.default_key if fmt is not None else default_key
    keys: Mapping[str, Prop] = fmt.keys if fmt is not None else {}
    aliases = fmt.key_aliases if fmt is not None else {}
    result: dict[str, str] = {}
    for part in str("" if value is None else value).split(","):
        if not part.strip():
            continue
        key, sep, text = part.partition("=")
        if not sep:
            key, text = bare or "", part
        elif key in aliases:
            alias_key, key = aliases[key]
            result[alias_key] = part.partition("=")[0]
        result[key] = _typed(keys.get(key), text)
    return result


def canonical(value: Any, fmt: PropFormat) -> dict[str, str]:
    """``parse`` without the keys whose value is the schema default: equal dicts, equal meaning."""
    parsed = parse(value, fmt)
    for key, prop in fmt.keys.items():
        if prop.default is not None and parsed.get(key) == _typed(prop, prop.default):
            del parsed[key]
    return parsed


def same(have: Any, want: Any, fmt: PropFormat) -> bool:
    """Whether two property strings mean the same to PVE (booleans, key order, defaults)."""
    return canonical(have, fmt) == canonical(want, fmt)


def covers(have: Any, want: Any, fmt: PropFormat) -> bool:
    """Whether ``have`` means what ``want`` says for every key ``want`` sets (a key PVE adds itself, such as a
    generated MAC, is not a difference); a key missing on either side counts as its schema default."""
    parsed_have, parsed_want = parse(have, fmt), parse(want, fmt)
    for key, wanted in parsed_want.items():
        prop = fmt.keys.get(key)
        default = _typed(prop, prop.default) if prop and prop.default is not None else None
        if parsed_have.get(key, default) != wanted:
            return False
    return True


# --- the formats labwright compares -----------------------------------------------------------------------
_BOOL, _INT, _NUM = Prop("boolean"), Prop("integer"), Prop("number")
_OFF, _ON = Prop("boolean", "0"), Prop("boolean", "1")


def normalize_pci_id(text: str) -> str:
    """``01:00.0`` -> ``0000:01:00.0`` (``PVE::SysFSTools::normalize_pci_id``), lower case."""
    text = text.strip().lower()
    return text if re.match(r"^[a-f0-9]{4,}:[a-f0-9]{2}:", text) else f"0000:{text}"


def _pci_ids(text: str) -> str:
    return ";".join(normalize_pci_id(a) for a in text.split(";"))


#: ``pve-qm-hostpci``: qemu-server 9.2.6 (e6352be67f70) src/PVE/QemuServer/PCI.pm 29-135.
HOSTPCI = PropFormat("pve-qm-hostpci", {
    "host": Prop(normalize=_pci_ids), "mapping": Prop(), "rombar": _ON, "romfile": Prop(), "pcie": _OFF,
    "x-vga": _OFF, "legacy-igd": _OFF, "mdev": Prop(), "vendor-id": Prop(), "device-id": Prop(),
    "sub-vendor-id": Prop(), "sub-device-id": Prop(), "driver": Prop(default="vfio"),
}, default_key="host")

#: The NIC models a qemu ``netN`` takes as ``MODEL=MAC`` (Network.pm ``$nic_model_list``).
NIC_MODELS = ("e1000", "e1000-82540em", "e1000-82544gc", "e1000-82545em", "e1000e", "i82551", "i82557b",
              "i82559er", "ne2k_isa", "ne2k_pci", "pcnet", "rtl8139", "virtio", "vmxnet3")
#: qemu ``netN``: qemu-server 9.2.6 src/PVE/QemuServer/Network.pm ``$net_fmt`` 48-129.
QEMU_NET = PropFormat("qemu-net", {
    "model": Prop(), "macaddr": Prop(), "bridge": Prop(), "queues": _INT, "rate": _NUM,
    "tag": _INT, "trunks": Prop(), "firewall": _BOOL, "link_down": _BOOL, "mtu": _INT, "host-tunnel": _BOOL,
}, default_key="model", key_aliases={m: ("model", "macaddr") for m in NIC_MODELS})
#: qemu ``memory``: qemu-server 9.2.6 src/PVE/QemuServer/Memory.pm 29-90 (``current``, default 512).
QEMU_MEMORY = PropFormat("qemu-memory", {"current": Prop("integer", "512")}, default_key="current")

_ROOTFS_KEYS = {"volume": Prop(), "size": Prop(), "acl": _BOOL, "mountoptions": Prop(), "idmap": Prop(),
                "ro": _BOOL, "quota": _BOOL, "replicate": _ON, "shared": _OFF}
#: container ``mpN``: pve-container 6.1.10 (94f558522ef6) src/PVE/LXC/Config.pm ``$rootfs_desc`` 345-423 and
#: ``$mp_desc`` 1001-1028.
LXC_MP = PropFormat("pve-ct-mountpoint", {**_ROOTFS_KEYS, "backup": _BOOL, "mp": Prop(), "keepattrs": _OFF},
                    default_key="volume")
#: container ``devN``: Config.pm ``$dev_desc`` 1080-1115.
LXC_DEV = PropFormat("lxc-dev", {"path": Prop(), "mode": Prop(), "uid": _INT, "gid": _INT, "deny-write": _OFF},
                     default_key="path")
#: container ``netN``: Config.pm ``$netconf_desc`` 852-957.
LXC_NET = PropFormat("pve-lxc-network", {
    "type": Prop(), "name": Prop(), "bridge": Prop(), "hwaddr": Prop(), "mtu": _INT,
    "ip": Prop(), "gw": Prop(), "ip6": Prop(), "gw6": Prop(), "firewall": _BOOL, "tag": _INT, "trunks": Prop(),
    "rate": _NUM, "link_down": _BOOL, "host-managed": _BOOL,
})
#: container ``features``: Config.pm ``$features_desc`` 453-510.
LXC_FEATURES = PropFormat("lxc-features", {"mount": Prop(), "nesting": _OFF, "keyctl": _OFF, "fuse": _OFF,
                                           "mknod": _OFF, "force_rw_sys": _OFF})
