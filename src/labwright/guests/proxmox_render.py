"""What a Proxmox VE container's config should hold for a ``GuestSpec``, and how it differs from what it
holds. Pure: no API or SSH calls, so every rule is unit-tested with plain dicts.

Ownership on a container labwright manages (tagged ``labwright``): the scalar options the spec sets,
``netN`` for the spec's interfaces, every bind mount ``mpN`` (volume mount points are left alone),
every ``devN`` naming an ``/dev/nvidia*`` node, and the raw ``lxc.*`` lines of the classic GPU
wiring. Values are compared parsed (``a=1,b=2`` equals ``b=2,a=1``), ignoring what PVE adds
itself (``type=veth``, a generated ``hwaddr``), so a second apply finds nothing to change. Comparisons go
through ``pve_props``: booleans in any spelling PVE takes (``ro=yes`` is ``ro=1``), key order and schema
defaults (``keyctl=0`` is no feature) do not count.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from labwright.errors import BadInput
from labwright.gpu.devices import GPU_GID, GUEST_MODE_MASK, guest_mode
from labwright.gpu.dri import DRM_MAJOR, RENDER_GID, VENDOR_NAMES, DriFacts, node_gid, vendor_nodes
from labwright.gpu.nvidia.host import UVM_PREFLIGHT, NodeGpu
from labwright.guests.model import Change, GuestSpec
from labwright.guests.pve_props import LXC_DEV, LXC_FEATURES, LXC_MP, LXC_NET, PropFormat, covers, parse, same

TAG = "labwright"
#: devN passthrough exists from PVE 8.1 on (pve-docs schema, 2023-11); older nodes get the classic lines.
DEV_SINCE = (8, 1)
#: The group the nodes get inside the guest: ``video`` on Debian/Ubuntu, as community-scripts set it; the engines'
#: service users are in it, so the nodes are 0660 (gpu.devices.guest_mode), never the driver's 0666.
DEV_GID = GPU_GID
#: A capability node's mode in the guest, from its mode on the host (NVIDIA's MIG user guide, "Device nodes"; the
#: lent H100 showed the same): the MIG config capability is root's alone (0400), the monitor one read-only (0444,
#: here 0440: no others' bits). The node facts carry no mode, so these are the host's as NVIDIA sets them.
CAPS_MODES = {"/dev/nvidia-caps/nvidia-cap1": guest_mode(0o400), "/dev/nvidia-caps/nvidia-cap2": guest_mode(0o444)}


def _dev_mode(path: str) -> int:
    """The ``mode=`` of a ``devN`` line: 0660 (devices.guest_mode of the driver's 0666), capability nodes read-only."""
    if "/nvidia-caps/" in path:
        return CAPS_MODES.get(path, guest_mode(0o444))
    return GUEST_MODE_MASK
NVIDIA_MAJOR = 195
ALLOW = "lxc.cgroup2.devices.allow"
MOUNT = "lxc.mount.entry"
#: Nodes the driver creates only when first used; the uvm preflight makes them before they are passed.
LAZY = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
NVIDIA_PREFIXES: tuple[str, ...] = ("/dev/nvidia",)
DRI_PREFIXES: tuple[str, ...] = ("/dev/nvidia", "/dev/dri/", "/dev/kfd")


# --- property strings ------------------------------------------------------------------------------
def props(value: Any, default_key: str | None = None) -> dict[str, str]:
    """``volume,mp=/x,ro=1`` -> dict, split only (to read a key such as the path); compare values with
    ``pve_props.same``/``covers`` and their format, which know each key's type and default."""
    return parse(value, default_key=default_key)


def pve_version(text: str) -> tuple[int, int]:
    """``8.2.4`` / ``7.4-3`` -> (8, 2)."""
    numbers = [int(n) for n in re.findall(r"(?a)\d+", text)[:2]] + [0, 0]
    return numbers[0], numbers[1]


# --- the GPU ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Wiring:
    """How the GPU reaches the guest: ``devN`` values, or raw lines, or nothing."""

    mode: str = "none"  # none | dev | classic
    devices: tuple[str, ...] = ()
    lxc: tuple[tuple[str, str], ...] = ()
    majors: frozenset[int] = frozenset({NVIDIA_MAJOR})  # allow lines for these majors are labwright's
    preflight: tuple[tuple[str, ...], ...] = ()
    notes: tuple[str, ...] = ()
    #: the node paths whose devN and mount lines are labwright's on this guest: NVIDIA's always; /dev/dri and
    #: /dev/kfd only on an AMD/Intel guest (an NVIDIA guest's hand-written /dev/dri entries stay the user's)
    prefixes: tuple[str, ...] = NVIDIA_PREFIXES


_CONTROL_ORDER = ("/dev/nvidiactl", "/dev/nvidia-modeset", *LAZY)


def _node_order(path: str) -> tuple[int, int, str]:
    """GPUs by number, then nvidiactl, modeset, uvm, uvm-tools, then anything else, then the caps."""
    match = re.fullmatch(r"(?a)/dev/nvidia(\d+)", path)
    if match:
        return 0, int(match.group(1)), path
    if path in _CONTROL_ORDER:
        return 1, _CONTROL_ORDER.index(path), path
    return (3 if "/nvidia-caps/" in path else 2), 0, path


def resolve_gpu(spec: GuestSpec, version: tuple[int, int], facts: NodeGpu | None, node_label: str) -> Wiring:
    """Pick devN (PVE >= 8.1) or classic lines, from the node's own device nodes and majors."""
    majors = frozenset({NVIDIA_MAJOR, *(facts.majors.values() if facts else ())})
    if not spec.wants_gpu:
        return Wiring(majors=majors)
    if facts is None or facts.driver is None:
        raise BadInput(f"{spec.where}: gpu: nvidia, but {node_label} has no NVIDIA driver "
                       "(/proc/driver/nvidia/version is missing); install the host driver or set gpu: none")
    mode = spec.gpu_mode if spec.gpu_mode != "auto" else ("dev" if version >= DEV_SINCE else "classic")
    if mode == "dev" and version < DEV_SINCE:
        raise BadInput(f"{spec.where}: gpu_mode dev needs Proxmox VE 8.1 or later ({spec.node} runs "
                       f"{version[0]}.{version[1]}); use gpu_mode classic or auto")
    paths = {n.path: n for n in facts.nodes}
    if not any(re.fullmatch(r"(?a)/dev/nvidia\d+", p) for p in paths):
        raise BadInput(f"{spec.where}: gpu: nvidia, but {node_label} has no /dev/nvidia0; load the driver "
                       "(nvidia-modprobe -c 0) or set gpu: none")
    ordered = sorted(set(paths) | set(LAZY), key=_node_order)
    preflight = (UVM_PREFLIGHT,) if facts.uvm_missing else ()
    notes = [f"/dev/nvidia-uvm is missing on {node_label}; apply runs `{' '.join(UVM_PREFLIGHT)}` there first"
             ] if preflight else []
    if mode == "dev":
        devices = tuple(f"{p},gid={DEV_GID},mode={_dev_mode(p):04o}" for p in ordered)
        return Wiring("dev", devices=devices, majors=majors, preflight=preflight, notes=tuple(notes))
    uvm = facts.majors.get("nvidia-uvm") or next((n.major for n in facts.nodes if n.path == LAZY[0]), None)
    caps = facts.majors.get("nvidia-caps") or next((n.major for n in facts.nodes if "/nvidia-caps/" in n.path), None)
    wanted = [NVIDIA_MAJOR] + [m for m in (uvm, caps) if m is not None and m != NVIDIA_MAJOR]
    if uvm is None:
        notes.append("the nvidia-uvm major is not in /proc/devices yet; apply reads it after the preflight")
    lines = [(ALLOW, f"c {m}:* rwm") for m in dict.fromkeys(wanted)]
    lines += [(MOUNT, f"{p} {p.lstrip('/')} none bind,optional,create=file") for p in ordered
              if "/nvidia-caps/" not in p or caps is not None]
    return Wiring("classic", lxc=tuple(lines), majors=majors | set(wanted), preflight=preflight, notes=tuple(notes))


def resolve_dri(spec: GuestSpec, version: tuple[int, int], facts: DriFacts, node_label: str,
                render_gid: int = RENDER_GID) -> Wiring:
    """An AMD/Intel GPU: a ``devN`` entry per card and render node of the vendor (and /dev/kfd for AMD) with the
    guest's gids, as community-scripts write them (misc/build.func, commit 8386465a, lines 4745-4766 ``devN:
    PATH,gid=44``, then fix_gpu_gids 5829-5864: render nodes and kfd the guest's render gid, card nodes video's);
    PVE < 8.1 the classic allow (DRM major 226, kfd's) and bind-mount lines. ``devN`` syntax: pve-container 6.1.10
    src/PVE/LXC/Config.pm ``$dev_desc`` lines 1080-1116 (path, mode ``0[0-7]{3}``, uid, gid, deny-write)."""
    nodes = vendor_nodes(spec.gpu, facts, spec.where, node_label)
    mode = spec.gpu_mode if spec.gpu_mode != "auto" else ("dev" if version >= DEV_SINCE else "classic")
    if mode == "dev" and version < DEV_SINCE:
        raise BadInput(f"{spec.where}: gpu_mode dev needs Proxmox VE 8.1 or later ({spec.node} runs "
                       f"{version[0]}.{version[1]}); use gpu_mode classic or auto")
    majors = frozenset({NVIDIA_MAJOR, DRM_MAJOR, *(n.major for n in nodes)})
    gids = ", ".join(f"{n.path} gid {node_gid(n.path, render_gid)}" for n in nodes)
    note = (f"{VENDOR_NAMES[spec.gpu]} GPU by {'devN entries' if mode == 'dev' else 'lxc.* lines'}: {gids} "
            f"(video {GPU_GID}; render {render_gid}, the guest's render group)")
    if mode == "dev":
        devices = tuple(f"{n.path},gid={node_gid(n.path, render_gid)},mode={guest_mode(n.mode):04o}" for n in nodes)
        return Wiring("dev", devices=devices, majors=majors, notes=(note,), prefixes=DRI_PREFIXES)
    lines = [(ALLOW, f"c {m}:* rwm") for m in dict.fromkeys(n.major for n in nodes)]
    lines += [(MOUNT, f"{n.path} {n.path.lstrip('/')} none bind,optional,create=file") for n in nodes]
    return Wiring("classic", lxc=tuple(lines), majors=majors, notes=(note,), prefixes=DRI_PREFIXES)


def is_bind_mount(value: Any) -> bool:
    """A host directory mounted into the guest (pve-container 6.1.10 src/PVE/LXC/Config.pm ``classify_mountpoint``
    1897-1904: a path, not under /dev/), whether its volume is written bare or as ``volume=``."""
    volume = parse(value, LXC_MP).get("volume", "")
    return volume.startswith("/") and not volume.startswith("/dev/")


def is_gpu_device(value: Any, prefixes: tuple[str, ...] = NVIDIA_PREFIXES) -> bool:
    return str(props(value, "path").get("path", "")).startswith(prefixes)


def _allow_major(key: str, value: str) -> int | None:
    match = re.fullmatch(r"(?a)c (\d+):\* rwm", value.strip())
    return int(match.group(1)) if key == ALLOW and match else None


def gpu_lines(pairs: list[tuple[str, str]], majors: frozenset[int],
              prefixes: tuple[str, ...] = NVIDIA_PREFIXES) -> set[int]:
    """Indices of the classic wiring's raw lines: nvidia bind mounts, allow lines for NVIDIA majors, and
    the allow lines labwright wrote right before its mounts. The last rule catches the line of a uvm
    major the host no longer uses (it changes with kernel and driver updates), so an apply replaces it."""
    ours = set()
    for index, (key, value) in enumerate(pairs):
        major = _allow_major(key, value)
        nvidia_mount = key == MOUNT and value.split(" ", 1)[0].startswith(prefixes)
        if nvidia_mount or (major is not None and major in majors):
            ours.add(index)
    first_mount = min((i for i in ours if pairs[i][0] == MOUNT), default=None)
    index = (first_mount or 0) - 1
    while first_mount is not None and index >= 0 and _allow_major(*pairs[index]) is not None:
        ours.add(index)
        index -= 1
    return ours


# --- desired and diff ---------------------------------------------------------------------------------
@dataclass
class Desired:
    options: dict[str, str]
    nets: list[str]
    mounts: list[str]
    wiring: Wiring
    rootfs: str
    notes: list[str] = field(default_factory=list)


def net_value(net: Any) -> str:
    parts = [f"name={net.name}", f"bridge={net.bridge}", f"ip={net.ip}"]
    parts += [f"{k}={v}" for k, v in (("gw", net.gw), ("hwaddr", net.hwaddr), ("tag", net.vlan), ("mtu", net.mtu))
              if v is not None]
    return ",".join(parts)


def render(spec: GuestSpec, wiring: Wiring, rootfs_storage: str) -> Desired:
    """The options labwright sets for ``spec``; ``rootfs_storage`` is used when the spec names none."""
    options: dict[str, str] = {}
    for key, value in (("hostname", spec.hostname), ("cores", spec.cores), ("memory", spec.memory),
                       ("swap", spec.swap), ("description", spec.description)):
        if value is not None:
            options[key] = str(value)
    if spec.onboot is not None:
        options["onboot"] = "1" if spec.onboot else "0"
    if spec.features:
        options["features"] = ",".join(f"{k}={(1 if v else 0) if isinstance(v, bool) else v}"
                                       for k, v in sorted(spec.features))
    notes = [f"mount {m.guest}: Proxmox has no optional bind mounts; a missing {m.host} stops the guest from starting"
             for m in spec.mounts if not m.required]
    mounts = [f"{m.host},mp={m.guest}" + (",ro=1" if m.readonly else "") for m in spec.mounts]
    size = spec.rootfs.size_gib if spec.rootfs and spec.rootfs.size_gib else 8
    storage = spec.rootfs.storage if spec.rootfs and spec.rootfs.storage else rootfs_storage
    return Desired(options, [net_value(n) for n in spec.net], mounts, wiring, f"{storage}:{size}",
                   notes + list(wiring.notes))


def root_only(key: str, value: str, privileged: bool = False) -> bool:
    """What ``check_ct_modify_config_perm`` (pve-container src/PVE/LXC.pm) lets only root@pam set: devN,
    non-volume mpN, features other than nesting, and on a privileged container any features at all."""
    if re.fullmatch(r"(?a)dev\d+", key):
        return True
    if re.fullmatch(r"(?a)mp\d+", key):
        return str(props(value, "volume").get("volume", "")).startswith("/")
    if key == "features":
        return privileged or bool(set(props(value)) - {"nesting"})
    return False


@dataclass
class Diff:
    changes: list[Change] = field(default_factory=list)
    put: dict[str, str] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)
    lxc: list[tuple[str, str]] | None = None  # the new managed raw lines, when they change

    def config_lines(self) -> list[str]:
        return [f"{k}: {v}" for k, v in self.put.items()] + [f"{k}: {v}" for k, v in self.lxc or []]

    def through_api(self, via_ssh: dict[str, str], via_ssh_delete: list[str]) -> tuple[dict[str, str], list[str]]:
        """The keys to set and delete through the API: all but the root-only ones written over SSH (CTs and VMs)."""
        return ({k: v for k, v in self.put.items() if k not in via_ssh},
                [k for k in self.delete if k not in via_ssh_delete])


def indexed(prefix: str, current: Mapping[str, Any], wanted: list[str], managed: Callable[[Any], bool],
            fmt: PropFormat, identity: str | Callable[[str], Any], out: Diff) -> None:
    """Match wanted values to existing ``prefixN`` keys by ``identity`` (a property such as the path, or a function
    of the value); keep indices stable. A matched value is rewritten only when it means something else to PVE
    (``fmt``: booleans, key order, defaults)."""
    existing = {int(k[len(prefix):]): str(v) for k, v in current.items() if re.fullmatch(rf"{prefix}[0-9]+", k)}
    ours = {i: v for i, v in existing.items() if managed(v)}
    key = identity if callable(identity) else (lambda v: parse(v, fmt).get(identity))
    by_id = {key(v): i for i, v in ours.items()}
    used, claimed = set(existing), set()
    for value in wanted:
        index = by_id.get(key(value))
        if index is not None and index not in claimed:
            claimed.add(index)
            if not same(ours[index], value, fmt):
                out.changes.append(Change(f"config {prefix}{index}", ours[index], value))
                out.put[f"{prefix}{index}"] = value
            continue
        index = next(i for i in range(256) if i not in used)
        used.add(index)
        claimed.add(index)
        out.changes.append(Change(f"config {prefix}{index}", None, value))
        out.put[f"{prefix}{index}"] = value
    for index in sorted(set(ours) - claimed):
        out.changes.append(Change(f"config {prefix}{index}", ours[index], None))
        out.delete.append(f"{prefix}{index}")


def tag(current: Mapping[str, Any], out: Diff) -> None:
    """Add the ``labwright`` tag to the guest's tags (PVE keeps them sorted, ``;``-separated) unless it is there."""
    tags = [t for t in re.split(r"[;,\s]+", str(current.get("tags") or "")) if t]
    if TAG not in tags:
        value = ";".join(sorted({*tags, TAG}))
        out.changes.append(Change("config tags", current.get("tags"), value))
        out.put["tags"] = value


def diff(spec: GuestSpec, current: Mapping[str, Any] | None, desired: Desired) -> Diff:
    """Changes from ``current`` (GET .../config; None: the container does not exist) to ``desired``."""
    out = Diff()
    current = current or {}
    creating = not current
    if not creating and int(current.get("unprivileged", 0)) != int(spec.unprivileged):
        raise BadInput(f"{spec.where}: CT {spec.vmid} is {'un' if current.get('unprivileged') else ''}privileged and "
                       "Proxmox cannot change that after creation; destroy and re-create it, or set unprivileged: "
                       f"{str(not spec.unprivileged).lower()}")
    for key, value in desired.options.items():
        have = current.get(key)
        if key == "features":
            unchanged = have is not None and same(have, value, LXC_FEATURES)
        elif key == "description":
            unchanged = have is not None and str(have).rstrip("\n") == value.rstrip("\n")
        else:
            unchanged = have is not None and str(have) == value
        if not unchanged:
            out.changes.append(Change(f"config {key}", have, value))
            out.put[key] = value
    tag(current, out)
    for index, value in enumerate(desired.nets):
        key, have = f"net{index}", parse(current.get(f"net{index}"), LXC_NET)
        if not covers(current.get(key), value, LXC_NET):
            if "hwaddr" not in parse(value, LXC_NET) and have.get("hwaddr"):
                value += f",hwaddr={have['hwaddr']}"  # keep the MAC: PVE would make up a new one
            out.changes.append(Change(f"config {key}", current.get(key), value))
            out.put[key] = value
    indexed("mp", current, desired.mounts, is_bind_mount, LXC_MP, "mp", out)
    prefixes = desired.wiring.prefixes
    indexed("dev", current, list(desired.wiring.devices), lambda v: is_gpu_device(v, prefixes), LXC_DEV, "path", out)
    pairs = [(str(p[0]), str(p[1])) for p in current.get("lxc") or []]
    have_lines = [pairs[i] for i in sorted(gpu_lines(pairs, desired.wiring.majors, prefixes))]
    if sorted(have_lines) != sorted(desired.wiring.lxc):
        out.lxc = list(desired.wiring.lxc)
        out.changes += [Change(k, v, None) for k, v in have_lines if (k, v) not in desired.wiring.lxc]
        out.changes += [Change(k, None, v) for k, v in desired.wiring.lxc if (k, v) not in have_lines]
    return out


# --- the node's config file -------------------------------------------------------------------------------
def _raw_pair(line: str) -> tuple[str, str] | tuple[()]:
    match = re.match(r"^(lxc\.[a-z0-9_\-.]+)(?::|\s*=)\s*(.*?)\s*$", line)
    return (match.group(1), match.group(2)) if match else ()


def edit_conf(text: str, put: Mapping[str, str], delete: Iterable[str], lxc: list[tuple[str, str]] | None,
              majors: frozenset[int], prefixes: tuple[str, ...] = NVIDIA_PREFIXES) -> str:
    """``/etc/pve/nodes/NODE/lxc/VMID.conf`` with ``put`` options set, ``delete`` removed and, when ``lxc``
    is given, labwright's raw lines replaced by it. Other lines, pending changes and snapshots stay as
    they are; only the main section (before the first ``[section]``) is touched."""
    lines = text.split("\n")
    end = next((i for i, line in enumerate(lines) if line.startswith("[")), len(lines))
    main, rest = lines[:end], lines[end:]
    raw = [(i, *_raw_pair(line)) for i, line in enumerate(main) if _raw_pair(line)]
    ours = {raw[j][0] for j in gpu_lines([(k, v) for _, k, v in raw], majors, prefixes)} if lxc is not None else set()
    drop = set(put) | set(delete)
    kept = [line for i, line in enumerate(main) if i not in ours and line.partition(":")[0] not in drop]
    while kept and not kept[-1].strip():
        kept.pop()
    kept += [f"{k}: {v}" for k, v in put.items()] + [f"{k}: {v}" for k, v in lxc or []]
    body = "\n".join(kept) + "\n"
    tail = "\n".join(rest).strip("\n")
    return body + ("\n" + tail + "\n" if tail else "")
