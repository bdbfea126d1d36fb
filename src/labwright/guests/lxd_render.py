"""What an LXD instance should look like for a ``GuestSpec``, and how it differs from what it is. Pure:
no daemon calls, so every rule here is unit-tested with plain dicts.

Ownership: labwright manages a fixed set of config keys (``MANAGED_CONFIG``), the raw ``lxd_config``
keys the spec names, and the devices it made; it records the last two in ``user.labwright.*`` keys
so a key or device dropped from the spec is removed, while keys and devices someone else added
(and every ``volatile.*`` key) are left alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from labwright.errors import BadInput
from labwright.gpu.devices import GPU_GID, GUEST_MODE_MASK, DeviceNode
from labwright.gpu.dri import DRI_VENDORS, RENDER_GID, VENDOR_IDS, VENDOR_NAMES, DriFacts, node_gid, vendor_nodes
from labwright.gpu.nvidia.host import GpuHost
from labwright.guests.lxd_cdi import CDI_EXTENSION, CDI_SINCE, GENERATE, CdiOffer
from labwright.guests.model import Change, GuestSpec

MARKER_KEY = "user.labwright.guest"  # the guest's name: destroy refuses instances without it
DEVICES_KEY = "user.labwright.devices"  # comma list of device names labwright manages on this instance
CONFIG_KEYS_KEY = "user.labwright.config"  # comma list of lxd_config keys labwright manages
MANAGED_CONFIG = (
    "limits.cpu", "limits.memory", "limits.memory.swap", "security.nesting", "security.privileged",
    "security.syscalls.intercept.mknod", "security.syscalls.intercept.mount",
    "security.syscalls.intercept.mount.allowed", "nvidia.runtime", "boot.autostart",
)
#: Keys LXD reads only when the container starts: changing them on a running guest needs a restart.
RESTART_KEYS = ("security.nesting", "security.privileged", "nvidia.runtime", "limits.memory.swap")
#: NVIDIA's PCI vendor id: the `gpu` device then takes NVIDIA cards only.
NVIDIA_VENDOR = "10de"
#: These nodes appear only once the driver is used (see gpu.nvidia.host.UVM_PREFLIGHT); as optional devices LXD
#: hot-plugs them when they show up instead of refusing to start the container.
LAZY_NODES = ("nvidia-uvm", "nvidia-uvm-tools")
#: Proxmox features with no LXD switch because LXD containers have them already.
FEATURES_BUILT_IN = ("keyctl", "fuse")


@dataclass(frozen=True)
class GpuWiring:
    """How the GPU reaches one guest: ``gpu`` device, ``unix-char`` nodes, or nothing."""

    mode: str = "none"  # none, gpu, unix-char, cdi
    nodes: tuple[DeviceNode, ...] = ()
    cdi_ids: tuple[str, ...] = ()  # mode cdi: one gpu device per CDI id (nvidia.com/gpu=N)
    runtime: bool = False
    preflight: tuple[tuple[str, ...], ...] = ()
    notes: tuple[str, ...] = ()
    vendor: str = "nvidia"  # amd, intel: DRM nodes (labwright.gpu.dri), their gids below
    render_gid: int = RENDER_GID  # the guest's render group: render nodes and /dev/kfd

    def gid(self, path: str) -> int:
        """The gid of a node in the guest: video for NVIDIA's and card nodes, render for render nodes and kfd."""
        return GPU_GID if self.vendor not in DRI_VENDORS else node_gid(path, self.render_gid)


@dataclass
class Desired:
    config: dict[str, str]
    devices: dict[str, dict[str, str]]
    profiles: list[str] | None  # None: leave the instance's profiles alone
    notes: list[str] = field(default_factory=list)


def daemon_title(spec: GuestSpec) -> str:
    """How messages name the guest's daemon: ``Incus`` for an ``@incus/`` host, ``LXD`` otherwise."""
    return "Incus" if spec.host.startswith("@incus/") else "LXD"


def daemon_tool(spec: GuestSpec) -> str:
    """The command line client messages name for the guest's daemon: ``incus`` or ``lxc``."""
    return "incus" if spec.host.startswith("@incus/") else "lxc"


def resolve_gpu(spec: GuestSpec, host: GpuHost | None, lxd_nvidia_cards: int, cdi: CdiOffer | None = None) -> GpuWiring:
    """Pick the wiring. ``host`` is the local machine (None for a remote daemon, whose nodes we cannot
    read); ``lxd_nvidia_cards`` is how many NVIDIA cards the daemon itself reports (/1.0/resources); ``cdi`` what
    the daemon and the host offer for CDI (lxd_cdi; None: not asked, today's wiring)."""
    if not spec.wants_gpu:
        return GpuWiring()
    if cdi is not None:
        refusal = cdi.refusal()
        if spec.gpu_mode == "cdi" and refusal:
            raise BadInput(f"{spec.where}: gpu_mode cdi, but {refusal}; set gpu_mode auto (or gpu, unix-char), or "
                           f"upgrade to {CDI_SINCE}+ with the NVIDIA container toolkit's spec (`{GENERATE}`)")
        if spec.gpu_mode in ("cdi", "auto") and not refusal and cdi.spec is not None:
            ids = cdi.spec.ids()
            return GpuWiring("cdi", cdi_ids=ids, notes=(
                f"GPU by CDI ({', '.join('id=' + i for i in ids)}): {cdi.server.describe()} offers {CDI_EXTENSION} "
                f"and {cdi.spec.path} names the GPU(s)",))
        wiring = _resolve_classic(spec, host, lxd_nvidia_cards)
        why = refusal or f"gpu_mode {spec.gpu_mode}"
        return replace(wiring, notes=(f"GPU by {'the gpu device' if wiring.mode == 'gpu' else 'unix-char nodes'}, "
                                      f"not CDI: {why}", *wiring.notes))
    return _resolve_classic(spec, host, lxd_nvidia_cards)


def _resolve_classic(spec: GuestSpec, host: GpuHost | None, lxd_nvidia_cards: int) -> GpuWiring:
    """Today's wiring: LXD's ``gpu`` device by vendor, or one ``unix-char`` device per node."""
    if host is None:
        if not lxd_nvidia_cards:
            raise BadInput(f"{spec.where}: gpu: nvidia, but {daemon_title(spec)} remote {spec.node} reports no NVIDIA "
                           "GPU with the nvidia driver; install the host driver or set gpu: none")
        if spec.gpu_mode == "unix-char":
            raise BadInput(f"{spec.where}: gpu_mode unix-char reads device majors from the host, which only works "
                           "for the local daemon; use gpu_mode gpu for a remote")
        return GpuWiring("gpu", runtime=bool(spec.nvidia_runtime))
    if not host.has_driver():
        raise BadInput(host.missing_driver_message(spec.where))
    tools = host.has_container_tools()
    if spec.nvidia_runtime and not tools:
        raise BadInput(f"{spec.where}: nvidia_runtime: true, but the host has no nvidia-container-cli; install "
                       "nvidia-container-toolkit on the host or set nvidia_runtime: false")
    mode = spec.gpu_mode
    if mode == "auto":
        # LXD's own gpu device tracks the card's nodes itself; without a card LXD can see (odd setups, the
        # test bed's fake nodes) the nodes go in one by one with the majors the host reports.
        mode = "gpu" if lxd_nvidia_cards else "unix-char"
    if mode == "gpu":
        runtime = tools if spec.nvidia_runtime is None else spec.nvidia_runtime
        return GpuWiring("gpu", runtime=runtime, preflight=tuple(host.preflight_commands()))
    nodes = {n.name: n for n in host.device_nodes()}
    majors = host.majors()
    notes = []
    for minor, name in enumerate(LAZY_NODES):
        if name not in nodes and "nvidia-uvm" in majors:
            nodes[name] = DeviceNode(f"/dev/{name}", host.host_path(f"/dev/{name}"), majors["nvidia-uvm"], minor)
            notes.append(f"/dev/{name} is missing on the host; passed as optional (major {majors['nvidia-uvm']} "
                         "from /proc/devices), it appears when the host creates it")
    if not any(re.fullmatch(r"(?a)nvidia\d+", name) for name in nodes):
        raise BadInput(f"{spec.where}: gpu: nvidia, but the host has no /dev/nvidia0; load the driver "
                       "(nvidia-modprobe -c 0) or set gpu: none")
    return GpuWiring("unix-char", nodes=tuple(nodes.values()), preflight=tuple(host.preflight_commands()),
                     notes=tuple(notes))


def resolve_dri(spec: GuestSpec, facts: DriFacts | None, lxd_cards: int, render_gid: int = RENDER_GID,
                label: str = "this host") -> GpuWiring:
    """An AMD or Intel GPU: LXD's ``gpu`` device by vendor id where the daemon reports a card of that vendor
    (``lxd_cards``), else one ``unix-char`` device per node of ``facts`` (the local host's /sys/class/drm and
    /dev/dri; None for a remote daemon, whose nodes only LXD knows). AMD's /dev/kfd (ROCm) goes in as a unix-char
    device either way: LXD's gpu device passes the DRM nodes only (lxd/device/gpu_physical.go)."""
    vendor, name = spec.gpu, VENDOR_NAMES[spec.gpu]
    if spec.gpu_mode == "cdi":
        raise BadInput(f"{spec.where}: gpu_mode cdi is NVIDIA's container toolkit; for gpu: {vendor} use gpu_mode "
                       "auto, gpu or unix-char")
    if facts is None:
        if not lxd_cards:
            raise BadInput(f"{spec.where}: gpu: {vendor}, but {daemon_title(spec)} remote {spec.node} reports no "
                           f"{name} GPU; set "
                           "gpu: none, or name the vendor it has (gpu: auto needs the local daemon)")
        if spec.gpu_mode == "unix-char":
            raise BadInput(f"{spec.where}: gpu_mode unix-char reads device nodes from the host, which only works "
                           "for the local daemon; use gpu_mode gpu for a remote")
        return GpuWiring("gpu", vendor=vendor, render_gid=render_gid)
    nodes = vendor_nodes(vendor, facts, spec.where, label)
    mode = spec.gpu_mode if spec.gpu_mode != "auto" else ("gpu" if lxd_cards else "unix-char")
    wiring = GpuWiring(mode, vendor=vendor, render_gid=render_gid)
    kfd = tuple(n for n in nodes if n.path == "/dev/kfd")
    shown = nodes if mode == "unix-char" else kfd
    # the gpu device gives its card and render nodes one gid (render's); unix-char nodes each their own
    gids = ", ".join(f"{n.path} gid {render_gid if mode == 'gpu' else wiring.gid(n.path)}" for n in nodes)
    how = f"the gpu device (vendorid {_vendor_hex(vendor)})" if mode == "gpu" else "unix-char nodes"
    note = f"{name} GPU by {how}: {gids} (video {GPU_GID}; render {render_gid}, the guest's render group)"
    return replace(wiring, nodes=shown, notes=(note,))


def _vendor_hex(vendor: str) -> str:
    """LXD's ``vendorid``: the PCI id as four hex digits, no 0x (doc/reference/devices_gpu.md)."""
    return f"{VENDOR_IDS[vendor][0]:04x}"


def mount_device_name(mount_guest: str, name: str | None) -> str:
    if name:
        return name
    slug = re.sub(r"[^A-Za-z0-9]+", "-", mount_guest).strip("-") or "root"
    return f"mount-{slug}"[:63]


def render(spec: GuestSpec, gpu: GpuWiring, root_pool: str | None) -> Desired:
    """The instance's own config and devices for ``spec`` (profiles supply the rest)."""
    config: dict[str, str] = {MARKER_KEY: spec.name, "security.privileged": "false" if spec.unprivileged else "true"}
    notes: list[str] = []
    if spec.cores is not None:
        config["limits.cpu"] = str(spec.cores)
    if spec.memory is not None:
        config["limits.memory"] = f"{spec.memory}MiB"
    if spec.swap is not None:
        # LXD has no swap size, only on/off per container.
        config["limits.memory.swap"] = "false" if spec.swap == 0 else "true"
    if spec.onboot is not None:
        config["boot.autostart"] = "true" if spec.onboot else "false"
    for feature, value in spec.features:
        if feature == "nesting":
            config["security.nesting"] = "true" if value else "false"
        elif feature == "mknod":
            config["security.syscalls.intercept.mknod"] = "true" if value else "false"
        elif feature == "mount":
            config["security.syscalls.intercept.mount"] = "true"
            config["security.syscalls.intercept.mount.allowed"] = str(value).replace(";", ",")
        elif feature in FEATURES_BUILT_IN:
            notes.append(f"feature {feature}: {daemon_title(spec)} containers have it already; nothing to set")
        else:
            raise BadInput(f"{spec.where}: feature {feature} has no {daemon_title(spec)} equivalent; remove it for an "
                           f"{daemon_title(spec).lower()} guest")
    if gpu.runtime:
        config["nvidia.runtime"] = "true"
    extra = dict(spec.lxd_config)
    config.update(extra)
    if extra:
        config[CONFIG_KEYS_KEY] = ",".join(sorted(extra))

    devices: dict[str, dict[str, str]] = {}
    if spec.rootfs is not None:
        pool = spec.rootfs.storage or root_pool
        if not pool:
            raise BadInput(f"{spec.where}: rootfs needs a storage pool (none in the profiles); write "
                           "rootfs: \"POOL:SIZE\"")
        devices["root"] = {"type": "disk", "path": "/", "pool": pool}
        if spec.rootfs.size_gib:
            devices["root"]["size"] = f"{spec.rootfs.size_gib}GiB"
    for net in spec.net:
        nic = {"type": "nic", "nictype": "bridged", "parent": net.bridge, "name": net.name}
        if net.hwaddr:
            nic["hwaddr"] = net.hwaddr
        if net.mtu:
            nic["mtu"] = str(net.mtu)
        if net.vlan:
            nic["vlan"] = str(net.vlan)
        if net.ip not in ("dhcp", "manual"):
            # LXD hands the address out by DHCP on its managed bridges; the prefix and gateway are the bridge's.
            nic["ipv4.address"] = net.ip.split("/")[0]
            notes.append(f"{net.name}: {net.ip} is served by the bridge's DHCP as a fixed lease")
        devices[net.name] = nic
    for mount in spec.mounts:
        disk = {"type": "disk", "source": mount.host, "path": mount.guest}
        if mount.readonly:
            disk["readonly"] = "true"
        if not mount.required:
            disk["required"] = "false"
        if mount.shift:
            disk["shift"] = "true"
        devices[mount_device_name(mount.guest, mount.name)] = disk
    if gpu.mode == "gpu":
        # LXD's own defaults are gid 0, mode 0660 (doc/reference/devices_gpu.md): root only. The group is the
        # one the engines' service users are in (gpu.GPU_GROUP).
        # An AMD/Intel gpu device: one gid for its card and render nodes, the render group's (what Vulkan opens).
        dri = gpu.vendor in DRI_VENDORS
        devices["gpu"] = {"type": "gpu", "gputype": "physical",
                          "vendorid": _vendor_hex(gpu.vendor) if dri else NVIDIA_VENDOR,
                          "gid": str(gpu.render_gid if dri else GPU_GID), "mode": f"{GUEST_MODE_MASK:04o}"}
    for index, cdi_id in enumerate(gpu.cdi_ids):
        # LXD builds the container's nodes, mounts and hooks from the id itself (lxd/device/gpu_physical.go
        # startContainer: applyCDIDeviceToContainer); gid and mode apply to its nodes as to the vendor device's
        # (lxd/device/gpu_cdi.go: the device's uid/gid/mode take priority over the spec's).
        devices["gpu" if index == 0 else f"gpu{index}"] = {"type": "gpu", "gputype": "physical", "id": cdi_id,
                                                            "gid": str(GPU_GID), "mode": f"{GUEST_MODE_MASK:04o}"}
    for node in gpu.nodes:
        # never others' bits: 0660 (0440 for a read-only capability node), group video (gpu.devices.guest_mode)
        char = {"type": "unix-char", "source": node.source, "path": node.path, "major": str(node.major),
                "minor": str(node.minor), "gid": str(gpu.gid(node.path)), "mode": f"{node.guest_mode:04o}"}
        if node.name in LAZY_NODES:
            char["required"] = "false"
        devices[node.name] = char
    if devices:
        config[DEVICES_KEY] = ",".join(sorted(devices))
    notes.extend(gpu.notes)
    notes.extend(f"runs on the host first: {' '.join(cmd)}" for cmd in gpu.preflight)
    profiles = list(spec.profiles) if spec.profiles is not None else None
    return Desired(config, devices, profiles, notes)


def _listed(config: dict[str, Any], key: str) -> set[str]:
    return {item for item in str(config.get(key, "")).split(",") if item}


def _reconcile(label: str, have: dict[str, Any], want: dict[str, Any], names: set[str]) -> list[Change]:
    """Make ``have`` equal ``want`` on ``names`` (in place); one ``Change`` per name that differed."""
    changes = []
    for name in sorted(names):
        before, after = have.get(name) or None, want.get(name)
        if before != after:
            changes.append(Change(f"{label} {name}", before, after))
            if after is None:
                have.pop(name, None)
            else:
                have[name] = after
    return changes


def diff(spec: GuestSpec, current: dict[str, Any], desired: Desired) -> tuple[list[Change], dict[str, Any]]:
    """Changes from ``current`` (an instance as GET /1.0/instances/NAME returns it) to ``desired``, and the
    full PUT body that makes them. ``volatile.*`` and keys/devices labwright does not own are kept."""
    changes: list[Change] = []
    config = dict(current.get("config") or {})
    bookkeeping = {MARKER_KEY, DEVICES_KEY, CONFIG_KEYS_KEY}
    keys = set(MANAGED_CONFIG) | bookkeeping | set(desired.config) | _listed(config, CONFIG_KEYS_KEY)
    # LXD stores an empty value as no key at all.
    wanted_config = {k: v for k, v in desired.config.items() if v}
    changes += _reconcile("config", config, wanted_config, {k for k in keys if not k.startswith("volatile.")})
    devices = {name: dict(dev) for name, dev in (current.get("devices") or {}).items()}
    names = set(desired.devices) | _listed(current.get("config") or {}, DEVICES_KEY)
    changes += _reconcile("device", devices, desired.devices, names)
    profiles = list(current.get("profiles") or [])
    if desired.profiles is not None and desired.profiles != profiles:
        changes.append(Change("profiles", ",".join(profiles), ",".join(desired.profiles)))
        profiles = desired.profiles
    description = current.get("description") or ""
    if spec.description is not None and spec.description != description:
        changes.append(Change("description", description, spec.description))
        description = spec.description
    body = {
        "architecture": current.get("architecture"), "config": config, "devices": devices,
        "ephemeral": current.get("ephemeral", False), "profiles": profiles,
        "stateful": current.get("stateful", False), "description": description,
    }
    return changes, body


def restart_needed(changes: list[Change]) -> list[str]:
    return [c.what.removeprefix("config ") for c in changes if c.what.removeprefix("config ") in RESTART_KEYS]
