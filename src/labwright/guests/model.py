"""The guest model: one ``GuestSpec`` per inventory host that carries ``guest`` data, for both backends.

Parsing is strict and says exactly which field of which host is wrong and how to write it, so a
typo never reaches a daemon. Backend-specific checks that need the host (does the template exist,
is the node known, is there an NVIDIA driver) happen in the backends' ``plan``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from labwright.errors import BadInput
from labwright.guests.fields import HOSTNAME, MountSpec, NetSpec, RootfsSpec
from labwright.guests.schema import BACKENDS, GPU_KINDS, KINDS, known_keys, parse_guest
from labwright.guests.vm import VM_KEYS, VmSpec, parse_vm
from labwright.hostnames import INSTANCE_NAME, VMID_MAX, VMID_MIN, LxdName, PctName, parse_host_name
from labwright.inventory import load_inventory

__all__ = ["BACKENDS", "GPU_KINDS", "GPU_MODES", "KINDS", "Change", "GuestSpec", "Plan", "known_keys", "load_guests",
           "select_guests", "spec_from_data"]

Backend = Literal["proxmox", "lxd"]
#: How the GPU reaches the container, in each backend's own terms ("auto" picks per host, see docs/guests.md).
GPU_MODES: dict[str, tuple[str, ...]] = {
    # LXD `gpu` device, one `unix-char` device per /dev/nvidia* node, or a `gpu` device by CDI id (guests/lxd_cdi.py)
    "lxd": ("auto", "gpu", "unix-char", "cdi"),
    "proxmox": ("auto", "dev", "classic"),  # PVE >= 8.1 `devN:` entries, or lxc.cgroup2/lxc.mount.entry lines
}
_PVE_TEMPLATE = re.compile(r"^[A-Za-z][A-Za-z0-9._-]*:vztmpl/[^/\s]+$")


@dataclass(frozen=True)
class GuestSpec:
    """One declared guest. Sizes are MiB (memory, swap) and GiB (rootfs), whatever the inventory wrote."""

    name: str
    backend: Backend
    node: str | None = None  # Proxmox node; for LXD the remote (None: the local daemon)
    vmid: int | None = None  # Proxmox only
    hostname: str | None = None
    template: str | None = None  # Proxmox `STORAGE:vztmpl/FILE`; LXD image alias or fingerprint
    clone: str | None = None  # LXD only: create by copying this instance (a golden container) instead
    cores: int | None = None
    memory: int | None = None
    swap: int | None = None
    rootfs: RootfsSpec | None = None
    net: tuple[NetSpec, ...] = ()
    unprivileged: bool = True
    features: tuple[tuple[str, bool | str], ...] = ()
    mounts: tuple[MountSpec, ...] = ()
    gpu: str = "none"
    gpu_mode: str = "auto"
    nvidia_runtime: bool | None = None  # LXD: None = on when the host has the NVIDIA container tools
    profiles: tuple[str, ...] | None = None  # LXD only; None = ("default",)
    start: bool = True  # apply leaves the guest running
    onboot: bool | None = None
    lxd_config: tuple[tuple[str, str], ...] = ()  # extra raw LXD config keys, managed like the rest
    description: str | None = None
    kind: str = "ct"  # "vm": a Proxmox qemu VM, its settings in ``vm``
    vm: VmSpec | None = None
    # Where it came from, for messages, and the inventory data backends need (API URL, SSH address...).
    host: str = ""
    source: str = "<data>"
    host_data: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    node_data: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def where(self) -> str:
        """``inventory.py: guest llm1`` — the prefix of every message about this guest."""
        return f"{self.source}: guest {self.name}"

    @property
    def feature_map(self) -> dict[str, bool | str]:
        return dict(self.features)

    @property
    def wants_gpu(self) -> bool:
        """The NVIDIA wiring (``/dev/nvidia*``, the driver, the boot unit); ``gpu: auto`` counts once a backend has
        resolved it to ``nvidia`` (``resolved_gpu``)."""
        return self.gpu == "nvidia"

    @property
    def wants_dri(self) -> bool:
        """An AMD or Intel GPU: its ``/dev/dri`` nodes (and AMD's ``/dev/kfd``), labwright.gpu.dri."""
        return self.gpu in ("amd", "intel")

    @property
    def is_vm(self) -> bool:
        return self.kind == "vm"

    @property
    def backend_key(self) -> tuple[str, str | None]:
        """Guests with the same key share one backend connection."""
        return self.backend, self.node


@dataclass(frozen=True)
class Change:
    """One difference between the host and the spec: ``what`` went from ``before`` to ``after``.

    ``before`` None means it did not exist; ``after`` None means it is removed.
    """

    what: str
    before: Any = None
    after: Any = None

    def describe(self) -> str:
        if self.before is None:
            return f"+ {self.what}: {_show(self.after)}"
        if self.after is None:
            return f"- {self.what}: {_show(self.before)}"
        return f"~ {self.what}: {_show(self.before)} -> {_show(self.after)}"

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "before": self.before, "after": self.after}


def _show(value: Any) -> str:
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in value.items())
    return str(value)


@dataclass
class Plan:
    """What ``apply`` would do to one guest. ``config_lines`` (Proxmox) are the exact lines it would write."""

    guest: str
    backend: str
    action: Literal["create", "update", "none"]
    changes: list[Change] = field(default_factory=list)
    config_lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Device nodes the guest passes that the host lacks right now (as after a reboot), and what that means.
    missing_nodes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "guest": self.guest, "backend": self.backend, "action": self.action,
            "changes": [c.to_dict() for c in self.changes], "config_lines": list(self.config_lines),
            "notes": list(self.notes), "missing_nodes": list(self.missing_nodes), "warnings": list(self.warnings),
        }


# --- the spec --------------------------------------------------------------------------------
def _name_from_host(host: str) -> tuple[str | None, str | None, int | None]:
    """(name, node, vmid) implied by a pyinfra host name: ``@lxd/REMOTE:NAME``, ``@pct/NODE/VMID``, ``NAME``
    (labwright.hostnames parses the connector names; a malformed one is refused there)."""
    parsed = parse_host_name(host)
    if isinstance(parsed, LxdName):
        return parsed.instance, parsed.remote, None
    if isinstance(parsed, PctName):
        return None, parsed.node, parsed.vmid
    if host.startswith("@"):
        return None, None, None
    return host, None, None


def _backend_from_host(host: str) -> Backend | None:
    """The backend a connector host name implies: ``@lxd/...`` (and ``@incus/...``) lxd, ``@pct/...`` proxmox."""
    try:
        parsed = parse_host_name(host)
    except BadInput:
        return None
    if isinstance(parsed, LxdName):
        return "lxd"
    if isinstance(parsed, PctName):
        return "proxmox"
    return None


def _article_daemon(host: str) -> str:
    """``an Incus`` for an ``@incus/`` host, else ``an LXD``: how messages name an lxd-backend guest's daemon."""
    return "an Incus" if host.startswith("@incus/") else "an LXD"


def spec_from_data(
    host: str,
    data: Mapping[str, Any],
    source: str = "<data>",
    host_data: Mapping[str, Any] | None = None,
    node_data: Mapping[str, Any] | None = None,
) -> GuestSpec:
    """Validate one host's ``guest`` dict into a ``GuestSpec``; every refusal is one line naming the field. Each
    value is typed by the declaration's one schema (labwright.guests.schema: unknown keys, types, ranges, booleans);
    what depends on other keys (the host name's backend, node and vmid, a backend's own settings) is checked here."""
    if not isinstance(data, Mapping):
        raise BadInput(f"{source}: host {host}: `guest` must be a dict, got {type(data).__name__}")
    try:
        host_name, host_node, host_vmid = _name_from_host(host)
    except BadInput as exc:
        raise BadInput(f"{source}: {exc}") from None
    from labwright.schema.model import one_line

    label = data.get("name") or data.get("hostname") or host_name or host
    where = one_line(f"{source}: guest {label}")
    typed = parse_guest(data, where)

    implied = _backend_from_host(host)
    backend: Backend | None = typed.backend or implied
    if backend is None:
        raise BadInput(f"{where}: no backend: add backend: 'lxd' or 'proxmox' to its guest data (a host named "
                       "@lxd/NAME or @pct/NODE/VMID implies it)")
    if implied is not None and backend != implied:
        raise BadInput(f"{where}: backend {backend!r} disagrees with the host name {host} "
                       f"({_article_daemon(host) if implied == 'lxd' else 'a Proxmox'} guest)")

    kind = typed.kind
    if kind == "vm" and backend != "proxmox":
        raise BadInput(f"{where}: kind: vm is a Proxmox VE qemu VM; set backend: proxmox (LXD and Incus guests are "
                       "containers)")
    if kind == "vm" and host_vmid is not None:
        raise BadInput(f"{where}: a VM is not reached through pct, so {host} cannot name it; name the host after the "
                       "VM (e.g. \"win1\") and give `node` and `vmid` in its guest data")
    if kind != "vm":
        vm_only = sorted(set(data) & (VM_KEYS - {"kind"}))
        if vm_only:
            raise BadInput(f"{where}: {vm_only[0]} is a VM setting; add kind: vm (a Proxmox qemu VM) or remove it")
    vm = parse_vm(data, typed, where) if kind == "vm" else None

    node = typed.node if "node" in data else host_node
    if host_node is not None and node != host_node:
        raise BadInput(f"{where}: node {node!r} disagrees with the host name {host} (node {host_node})")
    vmid: int | None = None
    if backend == "proxmox":
        if node is None:
            raise BadInput(f"{where}: a proxmox guest needs `node` (the PVE node name, e.g. pve1)")
        vmid = typed.vmid if typed.vmid is not None else host_vmid
        if vmid is None:
            raise BadInput(f"{where}: a proxmox guest needs `vmid` ({VMID_MIN}-{VMID_MAX})")
        if host_vmid is not None and vmid != host_vmid:
            raise BadInput(f"{where}: vmid {vmid} disagrees with the host name {host} (vmid {host_vmid})")
    elif typed.vmid is not None:
        raise BadInput(f"{where}: vmid is for proxmox guests; an lxd guest is named by `name`")
    if backend == "proxmox" and node_data:
        from labwright.guests.node_data import node_settings

        node_settings(node_data, f"{where}: node {node}")  # proxmox_api_url, proxmox_verify_tls, ...: typed

    # Proxmox's own default hostname is CT<vmid>; an unnamed proxmox guest gets the same, lower-cased.
    fallback = host_name if backend == "lxd" else (typed.hostname or host_name or f"{kind}{vmid}")
    name = str(typed.name or fallback or "")
    if not name:
        raise BadInput(f"{where}: give the guest a `name`")
    if backend == "lxd" and not INSTANCE_NAME.match(name):
        raise BadInput(f"{where}: {name!r} is not a valid {'Incus' if host.startswith('@incus/') else 'LXD'} "
                       "instance name; use 1-63 letters, digits and hyphens, starting with a letter")
    if kind == "vm" and not HOSTNAME.match(name):
        raise BadInput(f"{where}: {name!r} is not a valid VM name; Proxmox wants a DNS name (letters, digits, "
                       "hyphens, dots)")
    hostname = typed.hostname if "hostname" in data else (name if backend == "proxmox" and kind == "ct" else None)
    if hostname is not None and not HOSTNAME.match(hostname):
        raise BadInput(f"{where}: hostname {hostname!r} is not a valid host name (letters, digits, hyphens)")

    if typed.template is not None and typed.image is not None:
        raise BadInput(f"{where}: give `template` or `image`, not both")
    template = typed.template if typed.template is not None else typed.image
    if backend == "proxmox" and template is not None and not _PVE_TEMPLATE.match(template):
        raise BadInput(f"{where}: template {template!r} must be STORAGE:vztmpl/FILE, e.g. "
                       "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst")
    clone = typed.clone
    if clone is not None:
        if backend != "lxd":
            raise BadInput(f"{where}: clone is an LXD setting; use `template` for a proxmox guest")
        if template is not None:
            raise BadInput(f"{where}: give `image` or `clone`, not both")

    if typed.gpu_mode not in GPU_MODES[backend]:
        raise BadInput(f"{where}: gpu_mode {typed.gpu_mode!r} is not a {backend} mode; use "
                       f"{', '.join(GPU_MODES[backend])}")
    if typed.profiles is not None and backend != "lxd":
        raise BadInput(f"{where}: profiles are an LXD setting; remove them from this proxmox guest")
    if typed.lxd_config and backend != "lxd":
        raise BadInput(f"{where}: lxd_config is an LXD setting; remove it from this proxmox guest")
    nets = tuple(NetSpec(name=n.name or f"eth{index}", bridge=n.bridge, ip=n.ip, gw=n.gw, hwaddr=n.hwaddr,
                         vlan=n.vlan if n.vlan is not None else n.tag, mtu=n.mtu) for index, n in enumerate(typed.net))
    if len({n.name for n in nets}) != len(nets):
        raise BadInput(f"{where}: net: two interfaces share a name; give each a distinct name")
    mounts = tuple(MountSpec(host=m.host, guest=m.guest, readonly=m.readonly, required=m.required, name=m.name,
                             shift=m.shift) for m in typed.mounts)
    if len({m.guest for m in mounts}) != len(mounts):
        raise BadInput(f"{where}: mounts: two mounts share a guest path; mount each path once")

    return GuestSpec(
        name=name, backend=backend, node=node, vmid=vmid, hostname=hostname, template=template, clone=clone,
        cores=typed.cores, memory=typed.memory, swap=typed.swap,
        rootfs=None if typed.rootfs is None else RootfsSpec(typed.rootfs.storage, typed.rootfs.size),
        net=nets, unprivileged=typed.unprivileged, features=typed.features, mounts=mounts,
        gpu=typed.gpu, gpu_mode=typed.gpu_mode, nvidia_runtime=typed.nvidia_runtime, profiles=typed.profiles,
        start=typed.start, onboot=typed.onboot, lxd_config=typed.lxd_config, description=typed.description,
        kind=kind, vm=vm,
        host=host, source=source, host_data=dict(host_data or {}), node_data=dict(node_data or {}),
    )


# --- inventories -----------------------------------------------------------------------------
def load_guests(inventory_path: str | Path) -> list[GuestSpec]:
    """Every host of the inventory whose data has ``guest``, in inventory order, loaded as pyinfra loads it
    (``labwright.inventory``: group data, ``group_data/`` files), so ``labwright guest plan`` and ``deploys/guest.py``
    see what a pyinfra run of the same inventory sees. Two guests with one name, or two Proxmox guests with one
    vmid, are refused. A guest's node data is the data of the inventory host named like its node."""
    source = str(inventory_path)
    inventory = load_inventory(inventory_path)
    specs: list[GuestSpec] = []
    seen: dict[tuple[str, str | None, str], str] = {}
    seen_vmid: dict[int, str] = {}
    for inventory_host in inventory:
        host, data = inventory_host.name, inventory_host.data
        if "guest" not in data:
            continue
        guest = data["guest"]
        node = guest.get("node") if isinstance(guest, Mapping) else None
        node_host = inventory.host(str(node or _name_from_host(host)[1] or ""))
        spec = spec_from_data(host, guest, source=source, host_data={k: v for k, v in data.items() if k != "guest"},
                              node_data=dict(node_host.data) if node_host else {})
        # LXD names are per daemon; Proxmox hostnames and vmids are per cluster.
        key = (spec.backend, spec.node if spec.backend == "lxd" else None, spec.name)
        if key in seen:
            raise BadInput(f"{source}: guest name {spec.name!r} is declared twice (hosts {seen[key]} and {host}); "
                           "give each guest its own name")
        seen[key] = host
        if spec.vmid is not None:
            if spec.vmid in seen_vmid:
                raise BadInput(f"{source}: vmid {spec.vmid} is used twice (hosts {seen_vmid[spec.vmid]} and "
                               f"{host}); give each guest its own vmid")
            seen_vmid[spec.vmid] = host
        specs.append(spec)
    return specs


def select_guests(specs: list[GuestSpec], names: list[str] | None, source: str) -> list[GuestSpec]:
    """The guests named with ``--guest`` (all when none); an unknown name is refused with the known ones."""
    if not names:
        return specs
    known = {s.name for s in specs}
    missing = [n for n in names if n not in known]
    if missing:
        raise BadInput(f"{source}: no guest named {', '.join(missing)} (guests: {', '.join(sorted(known)) or 'none'})")
    return [s for s in specs if s.name in names]
