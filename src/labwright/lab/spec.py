"""The local lab as data: read from the ``lab`` group of a pyinfra inventory file.

The same file serves pyinfra (``pyinfra inventories/local.py deploys/base.py``) and
``labwright lab up``, loaded by the same rules (``labwright.inventory``: ``group_data/`` included), so the
containers deployed to are exactly the containers built.
"""

from __future__ import annotations

import ipaddress
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
}


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

    @property
    def marker(self) -> str:
        """The description labwright writes on every LXD object it makes for this lab."""
        return f"labwright lab {self.name}"


def validate_instance_name(name: str, where: str) -> str:
    if not INSTANCE_NAME.match(name):
        raise BadInput(
            f"{where}: {name!r} is not a valid container name; use 1-63 letters, digits and hyphens, "
            "starting with a letter"
        )
    return name


def spec_from_group(hosts: list[Any], group_data: Mapping[str, Any], source: str = "<data>") -> LabSpec:
    """The lab from its hosts (``"@lxd/NAME"`` or ``("@lxd/NAME", data)``) and its settings (``lab_*``)."""
    data = {**DEFAULTS, **group_data}
    try:
        subnet = ipaddress.IPv4Interface(str(data["lab_subnet"]))
    except ValueError as exc:
        raise BadInput(f"{source}: lab_subnet {data['lab_subnet']!r} is not an IPv4 address/prefix "
                       "such as 10.99.0.1/24") from exc
    if subnet.ip == subnet.network.network_address or subnet.network.prefixlen > 29:
        raise BadInput(f"{source}: lab_subnet {subnet} must be the bridge's own address in a /29 or "
                       "larger network, e.g. 10.99.0.1/24")
    containers = []
    seen: set[str] = set()
    for entry in hosts:
        host, host_data = (entry, {}) if isinstance(entry, str) else (entry[0], dict(entry[1]))
        if not isinstance(host, str) or not host.startswith("@lxd/"):
            raise BadInput(f"{source}: lab host {host!r} must be written @lxd/NAME")
        try:
            parsed = parse_host_name(host)
        except BadInput as exc:
            raise BadInput(f"{source}: {exc}") from None
        if not isinstance(parsed, LxdName) or parsed.remote is not None:
            raise BadInput(f"{source}: lab host {host!r} must be a container of this machine's LXD, written "
                           "@lxd/NAME (no REMOTE:)")
        name = parsed.instance
        if name in seen:
            raise BadInput(f"{source}: container {name!r} is declared twice in the lab group")
        seen.add(name)
        containers.append(LabContainer(name, host_data))
    for key in ("lab_bridge", "lab_pool", "lab_profile", "lab_name"):
        validate_instance_name(str(data[key]), f"{source}: {key}")
    return LabSpec(
        name=str(data["lab_name"]), subnet=subnet, bridge=str(data["lab_bridge"]), pool=str(data["lab_pool"]),
        profile=str(data["lab_profile"]), cpu=str(data["lab_cpu"]), memory=str(data["lab_memory"]),
        containers=tuple(containers), source=source,
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
