"""The guest declaration's value checks (sizes, booleans, features, interfaces, mounts) and records: each check
takes what the inventory wrote and returns the typed value or raises ValueError with one line that names the value
and shows an accepted form; labwright.guests.schema builds the declaration's one schema from them (the key is added
there)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from labwright.errors import BadInput
from labwright.textio import ascii_digits

#: Container features as Proxmox names them (`features: nesting=1,keyctl=1,...`); `mount` takes fs types.
FEATURES: tuple[str, ...] = ("nesting", "keyctl", "fuse", "mknod", "force_rw_sys", "mount")
#: Memory below this many MiB is almost surely GiB written as a bare number ("memory: 8").
MEMORY_FLOOR_MIB = 64
#: Above this (4 TiB) a number is almost surely bytes.
MEMORY_CEILING_MIB = 4 * 1024 * 1024

_SIZE = re.compile(r"(?a)^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.I)
_UNIT_MIB = {"k": 1 / 1024, "m": 1, "": 1, "g": 1024, "t": 1024 * 1024}
NAME_PATTERN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,61}[A-Za-z0-9])?$")
_BRIDGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")
#: A DNS host name (RFC 1123 labels): a container's ``hostname``, a VM's name.
HOSTNAME = re.compile(r"^(?=.{1,253}$)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*$")


# --- records -------------------------------------------------------------------------------
@dataclass(frozen=True)
class NetSpec:
    """One network interface: ``ip`` is ``dhcp``, ``manual`` or an address with its prefix."""

    name: str = "eth0"
    bridge: str = ""
    ip: str = "dhcp"
    gw: str | None = None
    hwaddr: str | None = None
    vlan: int | None = None
    mtu: int | None = None


@dataclass(frozen=True)
class MountSpec:
    """A host directory bind-mounted into the guest. ``required=False``: a missing source does not stop a start."""

    host: str
    guest: str
    readonly: bool = False
    required: bool = True
    name: str | None = None
    shift: bool = False


@dataclass(frozen=True)
class RootfsSpec:
    """The root disk: ``storage`` (PVE storage or LXD pool; None = the backend's default) and size in GiB."""

    storage: str | None
    size_gib: int | None


# --- value checks (labwright.schema.checks style: ValueError with one line that names the value and the fix;
# the key is added by labwright.guests.schema's one error line) ----------------------------------------------------
def mib(value: Any) -> int:
    """``8192``, ``"8192"``, ``"8G"``, ``"8GiB"``, ``"512M"`` -> MiB. Units are binary (``G`` = GiB), as in
    Proxmox and ``free -m``; anything else is refused with the accepted forms."""
    hint = f'{value!r} is not a size; write MiB as a number (8192) or with a unit ("8G", "8GiB", "512M")'
    if isinstance(value, bool):
        raise ValueError(hint)
    if isinstance(value, int):
        amount = float(value)
    elif isinstance(value, float) and value.is_integer():
        amount = value
    elif isinstance(value, str):
        match = _SIZE.match(value)
        if not match or (match.group(3) and not match.group(2)):  # "8b"/"8ib": a unit without its prefix
            raise ValueError(hint)
        amount = float(match.group(1)) * _UNIT_MIB[match.group(2).lower()]
        if not amount.is_integer():
            raise ValueError(f"{value!r} is not a whole number of MiB; round it (e.g. \"1536M\")")
    else:
        raise ValueError(hint)
    if amount < 0:
        raise ValueError(f"{value!r} is negative; sizes are 0 or more")
    return int(amount)


def memory_mib(value: Any) -> int:
    """A guest's memory in MiB (:func:`mib`), from 64 MiB (a bare ``8`` is GiB written as MiB) to 4 TiB (bytes?)."""
    found = mib(value)
    if found < MEMORY_FLOOR_MIB:
        raise ValueError(f'{value!r} means {found} MiB, too small for a guest; for GiB write "{found}G"')
    if found > MEMORY_CEILING_MIB:
        raise ValueError(f"{value!r} MiB is over 4 TiB (bytes?); write MiB (8192) or \"8G\"")
    return found


def gib(value: Any) -> int:
    """Disk sizes: a bare number is GiB (as Proxmox's ``local-lvm:64``); units accepted."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = f"{value}G"
    elif isinstance(value, str) and ascii_digits(value.strip().replace(".", "", 1)):
        value = value.strip() + "G"
    found = mib(value)
    if found == 0 or found % 1024:
        raise ValueError(f"{value!r} is not a whole number of GiB above 0; write e.g. 64 or \"64G\"")
    return found // 1024


_BOOL_WORDS = {"true": True, "yes": True, "1": True, "on": True, "false": False, "no": False, "0": False, "off": False}


def guest_bool(value: Any) -> bool:
    """true or false (or 1/0), :func:`labwright.schema.checks.strict_bool`: a string is refused (``"false"`` in
    quotes is not false: it was read as true once), saying what to write."""
    from labwright.schema.checks import strict_bool

    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return bool(value)
    word = value.strip().lower() if isinstance(value, str) else None
    if word in _BOOL_WORDS:
        raise ValueError(f"{value!r} is a string, not true or false; write {str(_BOOL_WORDS[word]).lower()} without "
                         "quotes")
    try:
        return strict_bool(value)
    except ValueError:
        raise ValueError(f"{value!r} is not true or false") from None


def word_bool(value: Any) -> bool:
    """A boolean written in one of Proxmox's property strings (``nesting=1,keyctl=1``, ``pcie=1``): the words
    true/false, yes/no, on/off, 1/0 too (that spelling has no other way to write one)."""
    word = value.strip().lower() if isinstance(value, str) else None
    return _BOOL_WORDS[word] if word in _BOOL_WORDS else guest_bool(value)


def features(value: Any) -> tuple[tuple[str, bool | str], ...]:
    """``{"nesting": True}`` or ``["nesting", "keyctl"]`` or ``"nesting=1,keyctl=1"``."""
    from_text = isinstance(value, str)
    if isinstance(value, str):
        pairs: dict[str, Any] = {}
        for part in filter(None, value.split(",")):
            key, _, val = part.partition("=")
            pairs[key.strip()] = val.strip() if val else True
        value = pairs
    elif isinstance(value, list | tuple):
        if not all(isinstance(item, str) for item in value):
            raise ValueError(f'{value!r} is not a list of feature names like ["nesting", "keyctl"]')
        value = dict.fromkeys(value, True)
    if not isinstance(value, Mapping):
        raise ValueError(f'{value!r} is not a dict like {{"nesting": True}}')
    found: dict[str, bool | str] = {}
    for key, val in value.items():
        if key not in FEATURES:
            raise ValueError(f"unknown feature {key!r}; known: {', '.join(FEATURES)}")
        if key == "mount":
            text = ";".join(map(str, val)) if isinstance(val, list | tuple) else str(val)
            if not re.match(r"^[a-z0-9]+(;[a-z0-9]+)*$", text):
                raise ValueError(f"mount {val!r} must list filesystem types, e.g. \"nfs;cifs\"")
            found[key] = text
        else:
            try:
                found[key] = (word_bool if from_text else guest_bool)(val)
            except ValueError as error:
                raise ValueError(f"{key}: {error}") from None
    return tuple(sorted(found.items()))


_MAC = re.compile(r"^[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}$")


def mac_address(value: Any) -> str:
    """A unicast MAC address such as 02:00:00:12:34:56."""
    text = str(value).strip() if isinstance(value, str) else ""
    if not _MAC.match(text):
        raise ValueError(f"{value!r} is not a MAC address such as 02:00:00:12:34:56")
    if int(text[:2], 16) & 1:
        raise ValueError(f"{text} is a multicast address (first byte odd); use a unicast one such as 02:00:00:12:34:56")
    return text


def check_address(ip: str, gw: str | None) -> None:
    """``ip`` (dhcp, manual or ADDRESS/PREFIX) and ``gw`` checked as the kernel would take them: a host address of
    a unicast network, a gateway inside that network."""
    if ip in ("dhcp", "manual"):
        if gw is not None:
            raise ValueError(f"gw {gw!r} needs a static ip (ADDRESS/PREFIX); remove gw or set ip")
        return
    try:
        if "/" not in ip:
            raise ValueError(ip)
        interface = ipaddress.IPv4Interface(ip)
    except ValueError:
        raise ValueError(f"ip {ip!r} must be dhcp, manual or an address with prefix (10.0.0.5/24)") from None
    address, network = interface.ip, interface.network
    if address.is_loopback or address.is_multicast or address.is_unspecified or address.is_reserved \
            or address.is_link_local:
        raise ValueError(f"ip {ip} is not a usable host address (loopback, link-local, multicast or reserved); give "
                         "the guest's address on its bridge, e.g. 10.0.0.5/24")
    if network.prefixlen < 31 and address in (network.network_address, network.broadcast_address):
        which = "network" if address == network.network_address else "broadcast"
        raise ValueError(f"ip {ip} is the network's {which} address; give a host address in it, e.g. "
                         f"{network.network_address + 5}/{network.prefixlen}")
    if gw is not None:
        try:
            gateway = ipaddress.IPv4Address(gw)
        except ValueError:
            raise ValueError(f"gw {gw!r} is not an IPv4 address") from None
        if gateway not in network or gateway == address:
            raise ValueError(f"gw {gw} is not another address in {network} (the guest's network); give the router "
                             "on that network")


def mount_path(value: Any) -> str:
    """A bind mount's host or guest path: absolute, no comma (Proxmox's ``mpN`` separator), no control character;
    a trailing slash dropped."""
    if not isinstance(value, str) or not value.startswith("/") or "," in value or re.search(r"[\x00-\x1f\x7f]", value):
        raise ValueError(f"{value!r} must be an absolute path without commas")
    return value.rstrip("/") or "/"


def interface_name(value: Any) -> str:
    text = str(value) if isinstance(value, str | int) and not isinstance(value, bool) else ""
    if not re.match(r"^[A-Za-z][A-Za-z0-9_.-]{0,14}$", text):
        raise ValueError(f"interface name {value!r} is not valid (e.g. eth0)")
    return text


def bridge_name(value: Any) -> str:
    if not isinstance(value, str) or not _BRIDGE.match(value):
        raise ValueError(f"{value!r} is missing or not a bridge name such as vmbr0")
    return value


def pool_name(value: Any) -> str:
    """A Proxmox storage or LXD pool name (``local-lvm``)."""
    if not (isinstance(value, str) and NAME_PATTERN.match(value)):
        raise ValueError(f"storage {value!r} is not a storage/pool name such as local-lvm")
    return value


# --- the same checks as BadInput naming ``what`` (callers outside the guest schema) ------------------------------
def _named(check: Any, value: Any, what: str) -> Any:
    try:
        return check(value)
    except ValueError as error:
        raise BadInput(f"{what}: {error}") from None


def parse_mib(value: Any, what: str) -> int:
    return int(_named(mib, value, what))


def parse_memory(value: Any, what: str) -> int:
    return int(_named(memory_mib, value, what))


def parse_gib(value: Any, what: str) -> int:
    return int(_named(gib, value, what))
