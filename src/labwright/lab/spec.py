"""The local lab as data: read from the ``lab`` group of a pyinfra inventory file.

The same file serves pyinfra (``pyinfra inventories/local.py deploys/base.py``) and
``labwright lab up``, so the containers deployed to are exactly the containers built.
"""

from __future__ import annotations

import ast
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labwright.errors import BadInput

# LXD's own rule for instance names (shared with hostnames): 1-63 chars, letters/digits/hyphens,
# not starting with a digit or hyphen, not ending with a hyphen.
INSTANCE_NAME = re.compile(r"^(?!-)(?![0-9])[A-Za-z0-9-]{1,63}(?<!-)$")

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


def spec_from_group(hosts: list[Any], group_data: dict[str, Any], source: str = "<data>") -> LabSpec:
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
        name = validate_instance_name(host.removeprefix("@lxd/"), source)
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


def load_inventory_groups(path: str | Path) -> dict[str, Any]:
    """Execute a pyinfra inventory file the way pyinfra does and return its module-level names."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise BadInput(f"inventory {path}: cannot read it ({exc.strerror}); pass an existing file") from exc
    try:
        code = compile(ast.parse(text, filename=str(path)), str(path), "exec")
    except SyntaxError as exc:
        raise BadInput(f"inventory {path}: line {exc.lineno}: {exc.msg}; fix the Python syntax") from exc
    namespace: dict[str, Any] = {"__file__": str(path), "__name__": "inventory"}
    try:
        exec(code, namespace)
    except Exception as exc:  # an inventory is user code: any failure is bad input
        raise BadInput(f"inventory {path}: {type(exc).__name__}: {exc}; fix the file") from exc
    return {k: v for k, v in namespace.items() if not k.startswith("_")}


def load_lab_spec(path: str | Path) -> LabSpec:
    groups = load_inventory_groups(path)
    group = groups.get("lab")
    if group is None:
        raise BadInput(f"inventory {path}: no `lab` group; define lab = ([\"@lxd/NAME\", ...], {{...}})")
    if isinstance(group, tuple) and len(group) == 2 and isinstance(group[1], dict):
        hosts, group_data = group
    elif isinstance(group, list):
        hosts, group_data = group, {}
    else:
        raise BadInput(f"inventory {path}: `lab` must be a list of hosts or a (hosts, data) tuple")
    if not isinstance(hosts, list | tuple):
        raise BadInput(f"inventory {path}: the hosts of `lab` must be a list")
    return spec_from_group(list(hosts), dict(group_data), source=str(path))
