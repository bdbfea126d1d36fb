"""The local lab as data: read from the ``lab`` group of a pyinfra inventory file.

The same file serves pyinfra (``pyinfra inventories/local.py deploys/base.py``) and
``labwright lab up``, loaded by the same rules (``labwright.inventory``: ``group_data/`` included), so the
containers deployed to are exactly the containers built.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labwright.errors import BadInput
from labwright.hostnames import INSTANCE_NAME, LxdName, parse_host_name
from labwright.inventory import load_inventory

__all__ = ["DEFAULTS", "INSTANCE_NAME", "LabContainer", "LabSpec", "load_lab_spec", "spec_from_group",
           "validate_instance_name"]

DEFAULTS: dict[str, Any] = {
    "lab_name": "local",
    "lab_subnet": "10.99.0.1/24",
    "lab_bridge": "lwbr0",
    "lab_pool": "labwright",
    "lab_profile": "labwright",
    "lab_cpu": "2",
    "lab_memory": "2GiB",
    "lab_pool_driver": "dir",
    "lab_pool_size": "20GiB",
    "lab_backend": "auto",
}

#: The daemons a lab can live on (``lab_backend``); ``auto`` (the default) is resolved at ``lab up`` by
#: labwright.lab.backend.choose_backend: the hosts' own prefix (``@incus/NAME``), else whichever is installed.
LAB_BACKENDS = ("incus", "lxd", "auto")

#: Storage drivers a lab pool may use. ``btrfs`` is a copy-on-write pool on a loop file LXD/Incus makes itself
#: (``disks/POOL.img`` under the daemon's directory, sized by ``lab_pool_size``): a copy or snapshot of a container
#: is a btrfs snapshot (about 0.3 s) instead of an rsync of its whole tree. ``auto`` takes btrfs where this kernel
#: and host can (labwright.lab.lab.cow_refusal) and ``dir`` otherwise, saying why.
POOL_DRIVERS = ("dir", "btrfs", "auto")


@dataclass(frozen=True)
class LabContainer:
    name: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LabSpec:
    name: str
    subnet: ipaddress.IPv4Interface
    bridge: str
    pool: str
    profile: str
    cpu: str
    memory: str
    containers: tuple[LabContainer, ...]
    source: str = "<data>"
    pool_driver: str = "dir"
    pool_size: str = "20GiB"
    #: ``lxd``, ``incus`` or ``auto`` (see LAB_BACKENDS).
    backend: str = "auto"
    #: The prefix its hosts are written with: ``lxd`` (``@lxd/NAME``) or ``incus`` (``@incus/NAME``); None: no hosts.
    host_prefix: str | None = None

    @property
    def marker(self) -> str:
        """The description labwright writes on every LXD object it makes for this lab."""
        return f"labwright lab {self.name}"


#: Linux interface names are at most 15 bytes (IFNAMSIZ 16 with the NUL); LXD refuses a longer bridge only when
#: it creates it, after the preseed has started.
IFNAME_MAX = 15
#: The ranges a lab bridge may use: RFC 1918 private networks (LXD NATs them out). Loopback, link-local,
#: multicast and public networks would shadow a real route or never work as a bridge.
PRIVATE_RANGES = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
#: LXD limits.cpu: a count (2) or a CPU set (0-3, 0,2,4-5) (lxd/instance/drivers/driver_lxc.go, limits.cpu).
_CPU = re.compile(r"(?a)^(?:[1-9]\d{0,3}|\d{1,4}(?:-\d{1,4})?(?:,\d{1,4}(?:-\d{1,4})?)*)$")
#: LXD limits.memory: bytes with an optional unit (kB..EB, KiB..EiB) or a percentage of the host's memory
#: (shared/units ParseByteSizeString, LXD documentation "limits.memory").
_MEMORY = re.compile(r"(?a)^(?:(\d+(?:\.\d+)?)(B|kB|MB|GB|TB|PB|EB|KiB|MiB|GiB|TiB|PiB|EiB)?|([1-9]\d?|100)%)$")
_MEMORY_BYTES = {"B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15, "EB": 10**18,
                 "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50, "EiB": 2**60, None: 1}


def validate_subnet(value: Any, source: str) -> ipaddress.IPv4Interface:
    """``lab_subnet``: the bridge's own address with its prefix, in a private range, /29 or larger."""
    try:
        subnet = ipaddress.IPv4Interface(str(value).strip())
    except ValueError:
        raise BadInput(f"{source}: lab_subnet {value!r} is not an IPv4 address/prefix such as 10.99.0.1/24") from None
    if subnet.ip == subnet.network.network_address or subnet.ip == subnet.network.broadcast_address \
            or subnet.network.prefixlen > 29:
        raise BadInput(f"{source}: lab_subnet {subnet} must be the bridge's own address in a /29 or "
                       "larger network, e.g. 10.99.0.1/24")
    if not any(subnet.network.subnet_of(allowed) for allowed in PRIVATE_RANGES):
        kind = ("a loopback" if subnet.ip.is_loopback else "a link-local" if subnet.ip.is_link_local
                else "a multicast" if subnet.ip.is_multicast else "a reserved" if subnet.ip.is_reserved
                else "not a private")
        raise BadInput(f"{source}: lab_subnet {subnet} is {kind} network; use a private (RFC 1918) range that "
                       "is free here, e.g. 10.99.0.1/24")
    return subnet


def validate_bridge(name: str, source: str) -> str:
    validate_instance_name(name, f"{source}: lab_bridge")
    if len(name.encode()) > IFNAME_MAX:
        raise BadInput(f"{source}: lab_bridge {name!r} is {len(name.encode())} characters; Linux interface names "
                       f"are at most {IFNAME_MAX}: use a shorter name such as lwbr0")
    return name


def validate_cpu(value: Any, source: str, key: str = "lab_cpu") -> str:
    """An LXD ``limits.cpu`` value: a count (2) or a CPU set (0-3, 0,2,4-5)."""
    text = str(value).strip()
    if isinstance(value, bool) or not _CPU.match(text) or text.strip("0") == "":  # a bare number is a count
        raise BadInput(f"{source}: {key} {value!r} is not a CPU count (2) or CPU set (0-3); write one of those")
    for part in text.split(","):
        low, _, high = part.partition("-")
        if high and int(low) > int(high):  # LXD refuses it only once the container is configured
            raise BadInput(f"{source}: {key} {value!r}: the range {part} runs backwards; write {high}-{low}")
    return text


def validate_memory(value: Any, source: str, key: str = "lab_memory") -> str:
    """An LXD ``limits.memory`` value: a size with an optional unit, or a percentage; at least 64MiB."""
    text = str(value).strip()
    match = _MEMORY.match(text)
    if isinstance(value, bool) or not match:
        raise BadInput(f"{source}: {key} {value!r} is not a size; write it as LXD and Incus do: 2GiB, 512MiB or 50%")
    if match.group(1) is not None and float(match.group(1)) * _MEMORY_BYTES[match.group(2)] < 64 * 2**20:
        raise BadInput(f"{source}: {key} {value!r} is under 64MiB, too little to boot a container; "
                       "give at least 256MiB (e.g. 2GiB)")
    return text


def validate_pool_driver(value: Any, source: str) -> str:
    if not isinstance(value, str) or value.strip() not in POOL_DRIVERS:
        raise BadInput(f"{source}: lab_pool_driver {value!r} is not one of {', '.join(POOL_DRIVERS)}; "
                       "write dir (plain directories), btrfs (copy-on-write on a loop file) or auto")
    return value.strip()


def validate_pool_size(value: Any, source: str) -> str:
    """``lab_pool_size``: the loop file of a btrfs pool, an LXD size of at least 2GiB (the image and a few
    containers; the file is sparse, so a large size costs nothing until used)."""
    text = str(value).strip()
    match = _MEMORY.match(text)
    if isinstance(value, bool) or not match or match.group(1) is None:
        raise BadInput(f"{source}: lab_pool_size {value!r} is not a size; write it as LXD and Incus do: 20GiB or 50GB")
    if float(match.group(1)) * _MEMORY_BYTES[match.group(2)] < 2 * 2**30:
        raise BadInput(f"{source}: lab_pool_size {value!r} is under 2GiB, too small for the image and a "
                       "container; give at least 5GiB (e.g. 20GiB)")
    return text


def validate_backend(value: Any, source: str) -> str:
    if not isinstance(value, str) or value.strip().lower() not in LAB_BACKENDS:
        raise BadInput(f"{source}: lab_backend {value!r} is not one of {', '.join(LAB_BACKENDS)}; write incus or lxd "
                       "(the daemon the lab lives on), or leave it out for the one installed here")
    return value.strip().lower()


def validate_instance_name(name: str, where: str) -> str:
    if not INSTANCE_NAME.match(name):
        raise BadInput(
            f"{where}: {name!r} is not a valid container name; use 1-63 letters, digits and hyphens, "
            "starting with a letter"
        )
    return name


def spec_from_group(hosts: list[Any], group_data: Mapping[str, Any], source: str = "<data>") -> LabSpec:
    """The lab from its hosts (``"@lxd/NAME"``, ``"@incus/NAME"`` or ``(HOST, data)``) and its settings (``lab_*``)."""
    unknown = sorted(str(key) for key in group_data if str(key).startswith("lab_") and key not in DEFAULTS)
    if unknown:  # a typo (lab_mem) silently fell back to the default
        import difflib

        near = difflib.get_close_matches(unknown[0], list(DEFAULTS), n=1, cutoff=0.6)
        hint = f"did you mean {near[0]}?" if near else f"the lab reads {', '.join(DEFAULTS)}"
        raise BadInput(f"{source}: unknown lab setting {unknown[0]} ({hint}); fix or remove it")
    data = {**DEFAULTS, **group_data}
    subnet = validate_subnet(data["lab_subnet"], source)
    backend = validate_backend(data["lab_backend"], source)
    containers = []
    seen: set[str] = set()
    prefixes: set[str] = set()
    for entry in hosts:
        host, host_data = (entry, {}) if isinstance(entry, str) else (entry[0], dict(entry[1]))
        if not isinstance(host, str) or not host.startswith(("@lxd/", "@incus/")):
            raise BadInput(f"{source}: lab host {host!r} must be written @lxd/NAME or @incus/NAME")
        try:
            parsed = parse_host_name(host)
        except BadInput as exc:
            raise BadInput(f"{source}: {exc}") from None
        if not isinstance(parsed, LxdName) or parsed.remote is not None:
            raise BadInput(f"{source}: lab host {host!r} must be a container of this machine's daemon, written "
                           f"@{host[1:].split('/')[0]}/NAME (no REMOTE:)")
        if backend != "auto" and parsed.flavour != backend:
            raise BadInput(f"{source}: lab host {host!r} is reached through {parsed.flavour} but lab_backend is "
                           f"{backend}; write it @{backend}/{parsed.instance}")
        prefixes.add(parsed.flavour)
        if len(prefixes) > 1:
            raise BadInput(f"{source}: lab host {host!r}: the lab's hosts mix @lxd/ and @incus/; one lab lives on "
                           "one daemon: write them all with one prefix (and set lab_backend)")
        # lab_* are the lab group's settings: one host's own value would be silently ignored (sweep at 2b91fd1:
        # lab_cpu=-4 on a host went unchecked and `lab up` went on to the daemon)
        for key in sorted(str(k) for k in host_data if str(k).startswith("lab_")):
            if key not in data or host_data[key] != data[key]:
                raise BadInput(f"{source}: {key} is given to the host {host}, but lab_* are settings of the whole lab: "
                               "move it to the lab group's data (lab = ([...], {...})) or remove it")
        name = parsed.instance
        if name in seen:
            raise BadInput(f"{source}: container {name!r} is declared twice in the lab group")
        seen.add(name)
        containers.append(LabContainer(name, host_data))
    for key in ("lab_bridge", "lab_pool", "lab_profile", "lab_name"):
        validate_instance_name(str(data[key]), f"{source}: {key}")
    validate_bridge(str(data["lab_bridge"]), source)
    return LabSpec(
        name=str(data["lab_name"]), subnet=subnet, bridge=str(data["lab_bridge"]), pool=str(data["lab_pool"]),
        profile=str(data["lab_profile"]), cpu=validate_cpu(data["lab_cpu"], source),
        memory=validate_memory(data["lab_memory"], source),
        containers=tuple(containers), source=source,
        pool_driver=validate_pool_driver(data["lab_pool_driver"], source),
        pool_size=validate_pool_size(data["lab_pool_size"], source),
        backend=backend, host_prefix=next(iter(prefixes), None),
    )


def load_lab_spec(path: str | Path) -> LabSpec:
    """The lab of the inventory's ``lab`` group, as pyinfra loads the file: its settings are the ``lab_*`` data of
    the group (inventory file, then ``group_data/lab.py``) over the ``all`` data (``group_data/all.py``); each
    container's data is its ``host.data``."""
    inventory = load_inventory(path)
    if not inventory.declares("lab"):
        raise BadInput(f"inventory {path}: no `lab` group; define lab = ([\"@lxd/NAME\", ...], {{...}})")
    settings = {**inventory.all_data, **inventory.group_data.get("lab", {})}
    hosts = [(host.name, dict(host.data)) for host in inventory.group("lab")]
    return spec_from_group(hosts, settings, source=str(path))
