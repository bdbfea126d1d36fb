"""AMD and Intel GPUs: the DRM nodes (``/dev/dri/cardN``, ``/dev/dri/renderDN``) and, for AMD's ROCm, ``/dev/kfd``,
told apart by the PCI vendor id the kernel shows for each node in ``/sys/class/drm/<node>/device/vendor``.

- Vendor ids: 0x1002 AMD (ATI), 0x8086 Intel, 0x10de NVIDIA (whose compute nodes are ``/dev/nvidia*``:
  labwright.gpu.nvidia). community-scripts do the same mapping to pick the nodes of one vendor on a multi-GPU
  host (community-scripts/ProxmoxVE misc/build.func, commit 8386465a, lines 4590-4615: ``0x8086`` Intel,
  ``0x1002 | 0x1022`` AMD, ``0x10de`` NVIDIA; ``/dev/kfd`` added to AMD's list for ROCm), and so does labwright.
- The nodes' group in a guest (community-scripts' ``fix_gpu_gids``, the same file, lines 5829-5864): card nodes the
  guest's ``video`` gid (44 on Debian and Ubuntu: base-passwd's fixed entry), render nodes and ``/dev/kfd`` the
  guest's ``render`` gid (dynamic: read from the guest where it runs, else 104, the fallback community-scripts use,
  which Debian's Proxmox template has). Mode 0660, never others' bits (labwright.gpu.devices.guest_mode).
- DRM is character major 226 (Linux include/uapi/drm/drm.h ``DRM_MAJOR 226``; Documentation/admin-guide/devices.txt:
  minors 0-63 cardN, 128-191 renderDN).

``read_dri`` reads these facts through a ``labwright.hosts.Host`` (this machine; tests give a double over a tree with
real ``mknod`` nodes, tests/support/host_tree.py);
``DRI_FACTS_SCRIPT`` is the same reading as one shell command for a node reached over SSH, read back by
``parse_dri_facts``.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from labwright.errors import BadInput
from labwright.gpu.devices import GPU_GID, DeviceNode, register, stat_numbers
from labwright.hosts import Host
from labwright.hosts.local import LocalHost, local_path

#: PCI vendor ids by ``gpu:`` value (0x1022 is AMD's other id, which community-scripts map to AMD too).
VENDOR_IDS: dict[str, tuple[int, ...]] = {"nvidia": (0x10DE,), "amd": (0x1002, 0x1022), "intel": (0x8086,)}
VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel"}
#: The vendors whose GPUs reach a guest as DRM nodes (NVIDIA's are /dev/nvidia*).
DRI_VENDORS = ("amd", "intel")
#: ``gpu: auto`` takes the first vendor the host has, in this order: a discrete NVIDIA card before an iGPU beside it
#: (the engines' CUDA builds), AMD before Intel (an Intel iGPU beside an AMD card is the display, not the compute).
AUTO_ORDER = ("nvidia", "amd", "intel")
#: The kernel module that makes each vendor's nodes (for the fix lines).
DRIVERS = {"amd": "amdgpu", "intel": "i915 (or xe)", "nvidia": "nvidia"}
DRM_MAJOR = 226
KFD = "/dev/kfd"
RENDER_GROUP = "render"
#: The render gid when the guest's own cannot be read yet (it does not exist or does not run).
RENDER_GID = 104
_DRM_NAME = re.compile(r"(?a)^(card|renderD)(\d+)$")


def vendor_of_id(vendor_id: int | None) -> str | None:
    return next((name for name, ids in VENDOR_IDS.items() if vendor_id in ids), None)


@dataclass(frozen=True)
class DrmDevice:
    """One ``/sys/class/drm`` entry of a GPU: ``card0`` or ``renderD128``, its PCI vendor id and slot, and its node in
    ``/dev/dri`` on the host (None: the kernel lists the GPU but the node is missing, as after a reboot that did not
    make it)."""

    name: str
    vendor_id: int | None
    pci: str = ""
    node: DeviceNode | None = None

    @property
    def vendor(self) -> str | None:
        return vendor_of_id(self.vendor_id)

    @property
    def path(self) -> str:
        return f"/dev/dri/{self.name}"

    @property
    def is_render(self) -> bool:
        return self.name.startswith("renderD")


@dataclass(frozen=True)
class DriFacts:
    """A host's DRM devices, its ``/dev/kfd`` (None: no ROCm kernel driver loaded) and whether the NVIDIA driver is
    loaded (``/proc/driver/nvidia/version``: NVIDIA's compute nodes need no DRM entry)."""

    devices: tuple[DrmDevice, ...] = ()
    kfd: DeviceNode | None = None
    nvidia_driver: bool = False

    def of(self, vendor: str) -> list[DrmDevice]:
        return [d for d in self.devices if d.vendor == vendor]

    def vendors(self) -> list[str]:
        """The vendors this host has, in ``AUTO_ORDER``."""
        found = {d.vendor for d in self.devices} | ({"nvidia"} if self.nvidia_driver else set())
        return [v for v in AUTO_ORDER if v in found]

    def describe(self) -> str:
        """``AMD 0x1002 at 0000:03:00.0 (card0, renderD128)``, one entry per GPU, for messages."""
        by_gpu: dict[tuple[str, int | None], list[str]] = {}
        for device in self.devices:
            by_gpu.setdefault((device.pci, device.vendor_id), []).append(device.name)
        said = [f"{VENDOR_NAMES.get(vendor_of_id(vid) or '', 'vendor')} "
                f"{f'0x{vid:04x}' if vid is not None else '?'}{' at ' + pci if pci else ''} ({', '.join(names)})"
                for (pci, vid), names in by_gpu.items()]
        if self.nvidia_driver and "nvidia" not in {d.vendor for d in self.devices}:
            said.append("NVIDIA (driver loaded, /dev/nvidia*)")
        return "; ".join(said) or "none"


def _sort_key(name: str) -> tuple[int, int]:
    match = _DRM_NAME.match(name)
    return (0 if match and match.group(1) == "card" else 1, int(match.group(2)) if match else 0)


def _char_node(host: Host, path: str) -> DeviceNode | None:
    info = host.stat(path, follow_symlinks=False)
    if info is None or not info.is_char:
        return None
    return DeviceNode(path, local_path(host, path), info.major, info.minor, info.permissions)


def read_dri(host: Host | None = None) -> DriFacts:
    """The DRM facts of ``host`` (this machine when None): every ``/sys/class/drm/{cardN,renderDN}`` (connectors
    such as ``card0-HDMI-A-1`` are not GPUs) with ``device/vendor`` and the PCI slot its ``device`` link points at,
    each one's ``/dev/dri`` node, ``/dev/kfd``, and the NVIDIA driver's proc file."""
    host = host if host is not None else LocalHost(label="this host")
    drm = "/sys/class/drm"
    try:
        names = sorted((n for n in host.listdir(drm) if _DRM_NAME.match(n)), key=_sort_key)
    except OSError:
        names = []
    devices = []
    for name in names:
        entry = f"{drm}/{name}"
        try:
            vendor_id: int | None = int(host.read_text(f"{entry}/device/vendor").strip(), 16)
        except (OSError, ValueError):
            vendor_id = None
        pci = posixpath.basename(host.realpath(f"{entry}/device"))
        devices.append(DrmDevice(name, vendor_id, pci, _char_node(host, f"/dev/dri/{name}")))
    version = host.stat("/proc/driver/nvidia/version")
    return DriFacts(tuple(devices), _char_node(host, KFD), version is not None and version.is_file)


#: The same facts in one command (a Proxmox node over SSH): one line per DRM entry ``NAME VENDOR PCI [MAJ MIN MODE]``
#: (stat's %t/%T are hex, %a octal), then ``@@kfd`` and its node, then ``@@nvidia`` when the driver is loaded.
DRI_FACTS_SCRIPT = (
    "for d in /sys/class/drm/card* /sys/class/drm/renderD*; do n=${d##*/}; case $n in *-*|'card*'|'renderD*') "
    "continue;; esac; v=$(cat \"$d/device/vendor\" 2>/dev/null || echo -); "
    "p=$(basename \"$(readlink -f \"$d/device\")\" 2>/dev/null || echo -); "
    "s=$([ -c \"/dev/dri/$n\" ] && stat -c '%t %T %a' \"/dev/dri/$n\"); echo \"$n $v $p $s\"; done; "
    "echo @@kfd; [ -c /dev/kfd ] && stat -c '%t %T %a' /dev/kfd; "
    "[ -f /proc/driver/nvidia/version ] && echo @@nvidia; true"
)


def parse_dri_facts(output: str) -> DriFacts:
    """``DriFacts`` from ``DRI_FACTS_SCRIPT``'s output."""
    head, _, tail = output.partition("@@kfd")
    devices = []
    for line in head.splitlines():
        fields = line.split()
        if len(fields) < 3 or not _DRM_NAME.match(fields[0]):
            continue
        name, vendor, pci = fields[:3]
        try:
            vendor_id: int | None = int(vendor, 16)
        except ValueError:
            vendor_id = None
        node = None
        numbers = stat_numbers(fields[3:], "xxo")
        if numbers is not None:
            node = DeviceNode(f"/dev/dri/{name}", f"/dev/dri/{name}", *numbers)
        devices.append(DrmDevice(name, vendor_id, "" if pci == "-" else pci, node))
    kfd = None
    kfd_numbers = stat_numbers(tail.replace("@@nvidia", "").split(), "xxo")
    if kfd_numbers is not None:
        kfd = DeviceNode(KFD, KFD, *kfd_numbers)
    return DriFacts(tuple(sorted(devices, key=lambda d: _sort_key(d.name))), kfd, "@@nvidia" in tail)


# --- which vendor, which nodes, which gid -------------------------------------------------------------------------
def resolve_vendor(gpu: str, facts: DriFacts, where: str, label: str) -> str:
    """The concrete vendor of a ``gpu:`` value on a host: ``auto`` the first the host has (``AUTO_ORDER``), a named
    one only when the host has it. BadInput (one line, naming ``gpu`` and the fix) otherwise."""
    present = facts.vendors()
    if gpu == "auto":
        if not present:
            raise BadInput(f"{where}: gpu: auto, but {label} has no GPU (no card or render node in /sys/class/drm, "
                           "no NVIDIA driver); load the GPU's driver (amdgpu, i915, nvidia) or set gpu: none")
        return present[0]
    if gpu in DRI_VENDORS and gpu not in present:
        others = [v for v in present if v != gpu]
        instead = f"set gpu: {others[0]} (or auto)" if others else "set gpu: none"
        ids = "/".join(f"0x{i:04x}" for i in VENDOR_IDS[gpu])
        raise BadInput(f"{where}: gpu: {gpu}, but {label} has no {VENDOR_NAMES[gpu]} GPU (no card or render node "
                       f"with vendor {ids} in /sys/class/drm; it has: {facts.describe()}); {instead}, or load "
                       f"{DRIVERS[gpu]} on the host if the GPU is there")
    return gpu


def node_gid(path: str, render_gid: int) -> int:
    """The gid a node gets in the guest: render nodes and /dev/kfd the guest's ``render`` group, card nodes
    ``video`` (community-scripts' fix_gpu_gids)."""
    return render_gid if path.startswith("/dev/dri/renderD") or path == KFD else GPU_GID


def vendor_nodes(vendor: str, facts: DriFacts, where: str, label: str) -> tuple[DeviceNode, ...]:
    """The nodes a ``gpu: amd``/``gpu: intel`` guest gets: every card and render node of the vendor's GPUs, and
    /dev/kfd for AMD where the host has it. A node the kernel lists but ``/dev/dri`` lacks (not made after a reboot)
    or a GPU without a render node is refused in one line: the guest would start without its GPU."""
    devices = facts.of(vendor)
    missing = [d for d in devices if d.node is None]
    if missing:
        first = missing[0]
        raise BadInput(f"{where}: gpu: {vendor}, but {first.path} of the {VENDOR_NAMES[vendor]} GPU"
                       f"{' at ' + first.pci if first.pci else ''} is missing on {label} (/sys/class/drm lists "
                       f"{first.name}, /dev/dri has no such node: not made after a reboot?); run `udevadm trigger "
                       f"--subsystem-match=drm` there (or load {DRIVERS[vendor]}) and check `ls -l /dev/dri`, or set "
                       "gpu: none; nothing was created or changed")
    if not any(d.is_render for d in devices):
        raise BadInput(f"{where}: gpu: {vendor}, but the {VENDOR_NAMES[vendor]} GPU on {label} has no render node "
                       f"(/dev/dri/renderD*): Vulkan and ROCm need one; load {DRIVERS[vendor]} with its render nodes, "
                       "or set gpu: none")
    nodes = [d.node for d in devices if d.node is not None]
    if vendor == "amd" and facts.kfd is not None:
        nodes.append(facts.kfd)
    return tuple(nodes)


# --- the vendors, registered ---------------------------------------------------------------------------------------
class DriVendor:
    """AMD or Intel in the vendor registry: their nodes are /dev/dri (shared by every DRM vendor: the path alone does
    not tell which; ``/sys/class/drm`` does) and, for AMD, /dev/kfd."""

    def __init__(self, name: str):
        self.name = name

    def owns_path(self, path: str) -> bool:
        return path.startswith("/dev/dri/") or (self.name == "amd" and path == KFD)

    def is_gpu_node(self, path: str) -> bool:
        return path.startswith("/dev/dri/renderD")


AMD = register(DriVendor("amd"))
INTEL = register(DriVendor("intel"))
