"""Field parsers for guest data: sizes, network, mounts, features, rootfs. Each refusal is one line that
names the field and shows an accepted form."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from labwright.errors import BadInput
from labwright.lab.spec import INSTANCE_NAME

#: Container features as Proxmox names them (`features: nesting=1,keyctl=1,...`); `mount` takes fs types.
FEATURES: tuple[str, ...] = ("nesting", "keyctl", "fuse", "mknod", "force_rw_sys", "mount")
#: Memory below this many MiB is almost surely GiB written as a bare number ("memory: 8").
MEMORY_FLOOR_MIB = 64
#: Above this (4 TiB) a number is almost surely bytes.
MEMORY_CEILING_MIB = 4 * 1024 * 1024

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.I)
_UNIT_MIB = {"k": 1 / 1024, "m": 1, "": 1, "g": 1024, "t": 1024 * 1024}
NAME_PATTERN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,61}[A-Za-z0-9])?$")
_BRIDGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")


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


# --- value parsers ---------------------------------------------------------------------------
def parse_mib(value: Any, what: str) -> int:
    """``8192``, ``"8192"``, ``"8G"``, ``"8GiB"``, ``"512M"`` -> MiB. Units are binary (``G`` = GiB), as in
    Proxmox and ``free -m``; anything else is refused with the accepted forms."""
    hint = f'{what}: {value!r} is not a size; write MiB as a number (8192) or with a unit ("8G", "8GiB", "512M")'
    if isinstance(value, bool):
        raise BadInput(hint)
    if isinstance(value, int):
        mib = value
    elif isinstance(value, float) and value.is_integer():
        mib = int(value)
    elif isinstance(value, str):
        match = _SIZE.match(value)
        if not match or (match.group(3) and not match.group(2)):  # "8b"/"8ib": a unit without its prefix
            raise BadInput(hint)
        amount = float(match.group(1)) * _UNIT_MIB[match.group(2).lower()]
        if not amount.is_integer():
            raise BadInput(f"{what}: {value!r} is not a whole number of MiB; round it (e.g. \"1536M\")")
        mib = int(amount)
    else:
        raise BadInput(hint)
    if mib < 0:
        raise BadInput(f"{what}: {value!r} is negative; sizes are 0 or more")
    return mib


def parse_memory(value: Any, what: str) -> int:
    mib = parse_mib(value, what)
    if mib < MEMORY_FLOOR_MIB:
        raise BadInput(f'{what}: {value!r} means {mib} MiB, too small for a guest; for GiB write "{mib}G"')
    if mib > MEMORY_CEILING_MIB:
        raise BadInput(f"{what}: {value!r} MiB is over 4 TiB (bytes?); write MiB (8192) or \"8G\"")
    return mib


def parse_gib(value: Any, what: str) -> int:
    """Disk sizes: a bare number is GiB (as Proxmox's ``local-lvm:64``); units accepted."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = f"{value}G"
    elif isinstance(value, str) and value.strip().replace(".", "", 1).isdigit():
        value = value.strip() + "G"
    mib = parse_mib(value, what)
    if mib == 0 or mib % 1024:
        raise BadInput(f"{what}: {value!r} is not a whole number of GiB above 0; write e.g. 64 or \"64G\"")
    return mib // 1024


_BOOL_WORDS = {"true": True, "yes": True, "1": True, "on": True, "false": False, "no": False, "0": False, "off": False}


def parse_bool(value: Any, what: str, words: bool = False) -> bool:
    """true or false (or 1/0). A string is refused (``"false"`` in quotes is not false: it was read as true once),
    except where the value comes from a string form that has no other way to write it (``words``: PVE's
    ``nesting=1,keyctl=1`` spelling)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    word = value.strip().lower() if isinstance(value, str) else None
    if word in _BOOL_WORDS:
        if words:
            return _BOOL_WORDS[word]
        raise BadInput(f"{what}: {value!r} is a string, not true or false; write "
                       f"{str(_BOOL_WORDS[word]).lower()} without quotes")
    raise BadInput(f"{what}: {value!r} is not true or false")


def parse_int(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise BadInput(f"{what}: {value!r} is not a whole number between {low} and {high}")
    try:
        number = int(value)
    except ValueError:
        raise BadInput(f"{what}: {value!r} is not a whole number between {low} and {high}") from None
    if not low <= number <= high:
        raise BadInput(f"{what}: {number} is outside {low}-{high}")
    return number


def parse_rootfs(value: Any, what: str) -> RootfsSpec:
    """``"local-lvm:64"``, ``"64"``/``64``/``"64G"`` or ``{"storage": ..., "size": ...}``."""
    if isinstance(value, Mapping):
        unknown = set(value) - {"storage", "size"}
        if unknown:
            raise BadInput(f"{what}: unknown key(s) {', '.join(sorted(unknown))}; use storage and size")
        storage, size = value.get("storage"), value.get("size")
    elif isinstance(value, str) and ":" in value:
        storage, size = value.split(":", 1)
    else:
        storage, size = None, value
    if storage is not None and not (isinstance(storage, str) and NAME_PATTERN.match(storage)):
        raise BadInput(f"{what}: storage {storage!r} is not a storage/pool name such as local-lvm")
    return RootfsSpec(storage=storage, size_gib=None if size is None else parse_gib(size, f"{what} size"))


def _dict_items(items: Any, what: str, example: str, keys: tuple[str, ...]) -> list[tuple[str, Mapping[str, Any]]]:
    """(``what[i]``, dict) for a list of dicts whose keys are all in ``keys``; refusals show ``example``."""
    if not isinstance(items, list | tuple):
        raise BadInput(f"{what}: {items!r} is not a list like [{example}]")
    checked = []
    for index, item in enumerate(items):
        where = f"{what}[{index}]"
        if not isinstance(item, Mapping):
            raise BadInput(f"{where}: {item!r} is not a dict like {example}")
        unknown = set(item) - set(keys)
        if unknown:
            raise BadInput(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; use {', '.join(keys)}")
        checked.append((where, item))
    return checked


_MAC = re.compile(r"^[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}$")


def _check_address(ip: str, gw: str | None, where: str) -> ipaddress.IPv4Interface | None:
    """``ip`` (dhcp, manual or ADDRESS/PREFIX) and ``gw`` checked as the kernel would take them: a host address of
    a unicast network, a gateway inside that network. None for dhcp/manual."""
    if ip in ("dhcp", "manual"):
        if gw is not None:
            raise BadInput(f"{where}: gw {gw!r} needs a static ip (ADDRESS/PREFIX); remove gw or set ip")
        return None
    try:
        if "/" not in ip:
            raise ValueError(ip)
        interface = ipaddress.IPv4Interface(ip)
    except ValueError:
        raise BadInput(f"{where}: ip {ip!r} must be dhcp, manual or an address with prefix (10.0.0.5/24)") from None
    address, network = interface.ip, interface.network
    if address.is_loopback or address.is_multicast or address.is_unspecified or address.is_reserved \
            or address.is_link_local:
        raise BadInput(f"{where}: ip {ip} is not a usable host address (loopback, link-local, multicast or "
                       "reserved); give the guest's address on its bridge, e.g. 10.0.0.5/24")
    if network.prefixlen < 31 and address in (network.network_address, network.broadcast_address):
        which = "network" if address == network.network_address else "broadcast"
        raise BadInput(f"{where}: ip {ip} is the network's {which} address; give a host address in it, e.g. "
                       f"{network.network_address + 5}/{network.prefixlen}")
    if gw is not None:
        try:
            gateway = ipaddress.IPv4Address(gw)
        except ValueError:
            raise BadInput(f"{where}: gw {gw!r} is not an IPv4 address") from None
        if gateway not in network or gateway == address:
            raise BadInput(f"{where}: gw {gw} is not another address in {network} (the guest's network); give the "
                           "router on that network")
    return interface


def parse_net(value: Any, what: str) -> tuple[NetSpec, ...]:
    """One interface as a dict, or a list of them."""
    items = [value] if isinstance(value, Mapping) else value
    nets: list[NetSpec] = []
    example = '{"bridge": "vmbr0", "ip": "dhcp"}'
    keys = ("name", "bridge", "ip", "gw", "hwaddr", "vlan", "tag", "mtu")
    for index, (where, item) in enumerate(_dict_items(items, what, example, keys)):
        name = str(item.get("name", f"eth{index}"))
        if not re.match(r"^[A-Za-z][A-Za-z0-9_.-]{0,14}$", name):
            raise BadInput(f"{where}: interface name {name!r} is not valid (e.g. eth0)")
        bridge = item.get("bridge")
        if not isinstance(bridge, str) or not _BRIDGE.match(bridge):
            raise BadInput(f"{where}: bridge {bridge!r} is missing or not a bridge name such as vmbr0")
        ip = str(item.get("ip", "dhcp"))
        gw = None if item.get("gw") is None else str(item["gw"]).strip()
        _check_address(ip, gw, where)
        hwaddr = None if item.get("hwaddr") is None else str(item["hwaddr"]).strip()
        if hwaddr is not None and not _MAC.match(hwaddr):
            raise BadInput(f"{where}: hwaddr {hwaddr!r} is not a MAC address such as 02:00:00:12:34:56")
        if hwaddr is not None and int(hwaddr[:2], 16) & 1:
            raise BadInput(f"{where}: hwaddr {hwaddr} is a multicast address (first byte odd); use a unicast one "
                           "such as 02:00:00:12:34:56")
        vlan = item.get("vlan", item.get("tag"))
        mtu = item.get("mtu")
        nets.append(NetSpec(
            name=name, bridge=bridge, ip=ip, gw=gw,
            hwaddr=hwaddr,
            vlan=None if vlan is None else parse_int(vlan, f"{where} vlan", 1, 4094),
            mtu=None if mtu is None else parse_int(mtu, f"{where} mtu", 576, 65535),
        ))
    if len({n.name for n in nets}) != len(nets):
        raise BadInput(f"{what}: two interfaces share a name; give each a distinct name")
    return tuple(nets)


def parse_mounts(value: Any, what: str) -> tuple[MountSpec, ...]:
    mounts: list[MountSpec] = []
    example = '{"host": "/tank/models", "guest": "/models"}'
    keys = ("host", "guest", "readonly", "required", "name", "shift")
    for where, item in _dict_items(value, what, example, keys):
        host, guest = item.get("host"), item.get("guest")
        for label, path in (("host", host), ("guest", guest)):
            if not isinstance(path, str) or not path.startswith("/") or "," in path or "\n" in path:
                raise BadInput(f"{where}: {label} path {path!r} must be an absolute path without commas")
        assert isinstance(host, str) and isinstance(guest, str)
        name = item.get("name")
        if name is not None and not INSTANCE_NAME.match(str(name)):
            raise BadInput(f"{where}: name {name!r} must be letters, digits and hyphens")
        mounts.append(MountSpec(
            host=host, guest=guest.rstrip("/") or "/",
            readonly=parse_bool(item.get("readonly", False), f"{where} readonly"),
            required=parse_bool(item.get("required", True), f"{where} required"),
            name=None if name is None else str(name), shift=parse_bool(item.get("shift", False), f"{where} shift"),
        ))
    guests = [m.guest for m in mounts]
    if len(set(guests)) != len(guests):
        raise BadInput(f"{what}: two mounts share a guest path; mount each path once")
    return tuple(mounts)


def parse_features(value: Any, what: str) -> tuple[tuple[str, bool | str], ...]:
    """``{"nesting": True}`` or ``["nesting", "keyctl"]`` or ``"nesting=1,keyctl=1"``."""
    from_text = isinstance(value, str)
    if isinstance(value, str):
        pairs: dict[str, Any] = {}
        for part in filter(None, value.split(",")):
            key, _, val = part.partition("=")
            pairs[key.strip()] = val.strip() if val else True
        value = pairs
    elif isinstance(value, list | tuple):
        value = dict.fromkeys(value, True)
    if not isinstance(value, Mapping):
        raise BadInput(f'{what}: {value!r} is not a dict like {{"nesting": True}}')
    features: dict[str, bool | str] = {}
    for key, val in value.items():
        if key not in FEATURES:
            raise BadInput(f"{what}: unknown feature {key!r}; known: {', '.join(FEATURES)}")
        if key == "mount":
            text = ";".join(val) if isinstance(val, list | tuple) else str(val)
            if not re.match(r"^[a-z0-9]+(;[a-z0-9]+)*$", text):
                raise BadInput(f"{what}: mount {val!r} must list filesystem types, e.g. \"nfs;cifs\"")
            features[key] = text
        else:
            features[key] = parse_bool(val, f"{what} {key}", words=from_text)
    return tuple(sorted(features.items()))


