"""`labwright gpu check` for an AMD or Intel GPU: the DRM nodes in the guest, the Vulkan device Mesa offers
(``vulkaninfo --summary``) and the one the engine really uses (llama.cpp's Vulkan backend log), with the silent
fallbacks caught: a Vulkan device that is ``llvmpipe`` (Mesa's lavapipe, a CPU) or layers left on the CPU.

Sources of the lines read here:

- ``vulkaninfo --summary`` (vulkan-tools 1.3.239 vulkaninfo/vulkaninfo.cpp, the summary printer): a ``Devices:``
  section of ``GPU<N>:`` blocks of ``key = value`` lines (deviceType ``PHYSICAL_DEVICE_TYPE_CPU`` for lavapipe,
  ``..._INTEGRATED_GPU``/``..._DISCRETE_GPU`` for radv and anv; recorded and derived outputs in
  tests/support/data/vulkaninfo, with their provenance).
- llama.cpp's Vulkan backend, as vendored in llama-cpp-python 0.3.36 (the version labwright.llamacpp.build pins):
  ggml/src/ggml-vulkan/ggml-vulkan.cpp ``ggml_vk_instance_init`` 5260-5402: without ``GGML_VK_VISIBLE_DEVICES`` it
  takes the GPUs and skips CPU-type devices (lavapipe), then logs ``ggml_vulkan: No devices found.`` (INFO) when none
  is left; with it, the devices named, then ``ggml_vulkan: Found %zu Vulkan devices:`` (DEBUG);
  ``ggml_vk_print_gpu_info`` 5157-5163: ``ggml_vulkan: %zu = %s (%s) | uma: %d | ...`` and ``ggml_vulkan: Warning:
  Device type is CPU. This is probably not the device you want.`` (DEBUG); common/arg.cpp 2799-2800, the
  ``--gpu-layers`` handler: ``warning: no usable GPU found, --gpu-layers option will be ignored`` (stderr, always);
  src/llama.cpp 306: ``%s: using device %s (%s) (%s) - %zu MiB free`` (INFO, ``Vulkan0`` and its description);
  src/llama-model.cpp 1924: ``%s: offloaded %d/%d layers to GPU``.

Collecting is one shell command in the guest (``dri_guest_command``); the rules are pure, unit-tested on those
outputs and, for real, on this machine's lavapipe.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from labwright.desktop.checks import Check
from labwright.gpu.check import (
    OFFLOADED,
    DecodeRequest,
    EngineState,
    GuestGpu,
    decode_check,
    decode_command,
    decode_settings,
    engine_command,
    engine_key_file,
    engine_url,
    nodes_check,
    parse_engine,
    requested_gpu_layers,
    sections,
)
from labwright.gpu.devices import DeviceNode, stat_numbers
from labwright.gpu.dri import DRI_VENDORS, KFD, VENDOR_NAMES, DriFacts, vendor_of_id
from labwright.hosts import Host

_MARK = "@@labwright-vk-"
RENDER_NODE = re.compile(r"(?a)^/dev/dri/renderD\d+$")
CPU_TYPE = "PHYSICAL_DEVICE_TYPE_CPU"
#: What the guest needs for Vulkan on an AMD/Intel GPU (Debian/Ubuntu package names).
PACKAGES = "mesa-vulkan-drivers vulkan-tools"


@dataclass(frozen=True)
class VulkanDevice:
    """One ``GPU<N>:`` block of ``vulkaninfo --summary``."""

    index: int
    fields: dict[str, str]

    @property
    def name(self) -> str:
        return self.fields.get("deviceName", "?")

    @property
    def driver(self) -> str:
        return self.fields.get("driverName", "?")

    @property
    def kind(self) -> str:
        return self.fields.get("deviceType", "?").removeprefix("PHYSICAL_DEVICE_TYPE_").lower().replace("_", " ")

    @property
    def is_cpu(self) -> bool:
        """lavapipe (llvmpipe) or any other CPU implementation: Vulkan that runs on the CPU."""
        return self.fields.get("deviceType") == CPU_TYPE or self.driver == "llvmpipe" or "llvmpipe" in self.name

    def describe(self) -> str:
        return f"GPU{self.index} {self.name} ({self.driver}, {self.kind})"


def parse_summary(text: str) -> list[VulkanDevice]:
    """The devices of ``vulkaninfo --summary`` (an empty list when it printed none)."""
    devices: list[VulkanDevice] = []
    _, found, rest = text.partition("\nDevices:")
    if not found:
        return devices
    current: dict[str, str] | None = None
    for line in rest.splitlines():
        header = re.match(r"(?a)^GPU(\d{1,6}):\s*$", line)
        if header:
            current = {}
            devices.append(VulkanDevice(int(header.group(1)), current))
        elif current is not None and "=" in line and line[:1].isspace():
            key, _, value = line.partition("=")
            current[key.strip()] = value.strip()
    return devices


@dataclass
class DriGuest:
    """What the guest shows: its DRM/kfd nodes, and vulkaninfo's summary (None: vulkaninfo not installed)."""

    nodes: dict[str, tuple[int, int]] = field(default_factory=dict)
    summary: str | None = None
    gids: dict[str, int] = field(default_factory=dict)  # each node's group in the guest

    @property
    def render_gids(self) -> set[int]:
        return {gid for path, gid in self.gids.items() if RENDER_NODE.match(path)}

    @property
    def devices(self) -> list[VulkanDevice]:
        return parse_summary(self.summary or "")


def dri_guest_command() -> str:
    """Nodes (``[ -c ]``: LXD bind-mounts each over a plain file) and ``vulkaninfo --summary`` (stderr dropped: with
    no display it says so on every line, which is no error)."""
    return (
        f"echo {_MARK}nodes; for f in /dev/dri/* {KFD}; do [ -c \"$f\" ] && stat -c '%n %t %T %g' \"$f\"; done; "
        f"echo {_MARK}vulkan; if command -v vulkaninfo >/dev/null 2>&1; then vulkaninfo --summary 2>/dev/null; "
        f"echo \"exit $?\"; else echo {_MARK}no-vulkaninfo; fi; true"
    )


def parse_dri_guest(output: str) -> DriGuest:
    parts = sections(output.splitlines(), _MARK)
    nodes, gids = {}, {}
    for line in parts.get("nodes", []):
        fields = line.split()
        numbers = stat_numbers(fields[1:], "xx")
        if numbers is None or not fields[0].startswith("/dev/"):
            continue
        nodes[fields[0]] = (numbers[0], numbers[1])
        gid = stat_numbers(fields[3:], "d")
        if gid is not None:
            gids[fields[0]] = gid[0]
    summary = None if "no-vulkaninfo" in parts else "\n".join(parts.get("vulkan", []))
    return DriGuest(nodes, summary, gids)


# --- the rules (pure) ---------------------------------------------------------------------------------------------
def dri_visible_check(vendor: str, guest: DriGuest) -> Check:
    name = "GPU visible in the guest"
    render = sorted(p for p in guest.nodes if RENDER_NODE.match(p))
    if not render:
        return Check(name, False, "no /dev/dri/renderD* character node in the guest",
                     f"the {VENDOR_NAMES.get(vendor, vendor)} GPU's nodes are not passed through (or the host lost "
                     "them at a reboot)", "labwright guest apply INVENTORY (re-reads /sys/class/drm and /dev/dri), "
                     "then restart the guest")
    extra = [p for p in sorted(guest.nodes) if p not in render]
    return Check(name, True, ", ".join(render + extra))


def vulkan_device_check(guest: DriGuest) -> Check:
    """vulkaninfo lists a GPU (not only lavapipe): Mesa's radv (AMD) or anv (Intel) opened the render node."""
    name = "Vulkan device"
    if guest.summary is None:
        return Check(name, False, "vulkaninfo is not installed in the guest", "no way to see what Vulkan offers",
                     f"apt-get install {PACKAGES} in the guest")
    devices = guest.devices
    if not devices:
        said = " ".join(guest.summary.split())[-200:]
        return Check(name, False, f"vulkaninfo lists no device: {said}",
                     "no Vulkan driver in the guest (Mesa's ICDs missing)", f"apt-get install {PACKAGES} in the guest")
    gpus = [d for d in devices if not d.is_cpu]
    listed = "; ".join(d.describe() for d in devices)
    if not gpus:
        return Check(name, False, f"only a CPU device: {listed}",
                     "Vulkan runs on the CPU (lavapipe): Mesa found no GPU it drives behind the render node (not "
                     "passed, not readable by this user, or radv/anv missing)",
                     "check `ls -l /dev/dri` in the guest (renderD*, group render), install mesa-vulkan-drivers, and "
                     "pass the GPU with gpu: amd or intel (labwright guest apply)")
    return Check(name, True, listed)


_USING = re.compile(r"(?a)using device (Vulkan\d+) \((?P<desc>.*)\) \((?P<id>[^()]*)\) - \d+ MiB free")
_GGML_DEVICE = re.compile(r"(?a)ggml_vulkan: (\d{1,6}) = (?P<name>.+) \((?P<driver>[^()]*)\) \| uma:")
_NO_DEVICES = "ggml_vulkan: No devices found."
_NO_GPU = "no usable GPU found, --gpu-layers option will be ignored"
_CPU_WARNING = "ggml_vulkan: Warning: Device type is CPU"


@dataclass(frozen=True)
class VulkanLog:
    """What llama.cpp's Vulkan backend logged since the service's last start."""

    using: tuple[str, ...] = ()  # "Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits)"
    cpu_device: bool = False  # a device it uses is a CPU (llvmpipe / the CPU-type warning)
    no_devices: bool = False  # ggml_vulkan: No devices found. (every device skipped)
    no_gpu: bool = False  # --gpu-layers ignored
    offloaded: tuple[int, int] | None = None
    vulkan: bool = False  # the log is a Vulkan build's at all


def parse_vulkan_log(log: str) -> VulkanLog:
    using = [f"{m.group(1)}: {m.group('desc')}" for m in _USING.finditer(log)]
    listed = [m.group("name") + " (" + m.group("driver") + ")" for m in _GGML_DEVICE.finditer(log)]
    cpu = _CPU_WARNING in log or any("llvmpipe" in u for u in using + listed)
    offloaded = OFFLOADED.findall(log)
    last = (int(offloaded[-1][0]), int(offloaded[-1][1])) if offloaded else None
    vulkan = bool(using or listed) or _NO_DEVICES in log or "ggml_vulkan:" in log
    return VulkanLog(tuple(using or listed), cpu, _NO_DEVICES in log, _NO_GPU in log, last, vulkan)


def vulkan_engine_check(engine: EngineState, render_gids: set[int] | None = None) -> Check:
    """The engine's process on the GPU through Vulkan: a render node open, no CPU device, every layer offloaded.
    ``render_gids``: the render nodes' groups in the guest; a process without root and outside them cannot open
    the node (Mesa then offers only lavapipe), which a failure names as its cause."""
    check = _vulkan_engine_check(engine)
    locked_out = (not check.ok and engine.pid and render_gids and engine.uid not in (None, 0)
                  and not render_gids & set(engine.groups))
    if not locked_out:
        return check
    gid = min(render_gids or {0})
    return Check(check.name, False, check.detail,
                 f"its user (uid {engine.uid}) is not in the render nodes' group (gid {gid}): it cannot open "
                 "/dev/dri/renderD*, so Vulkan offers it no GPU",
                 f"put the service user in group {gid} (labwright's llama.cpp deploy does: render), then restart "
                 "the service")


def _vulkan_engine_check(engine: EngineState) -> Check:
    name = f"engine {engine.service} on the GPU (Vulkan)"
    if engine.pid == 0:
        return Check(name, False, f"{engine.service} has no running main process", "the service is not running",
                     f"systemctl start {engine.service}; journalctl -u {engine.service} for why it stopped")
    log = parse_vulkan_log(engine.log)
    render = [n for n in engine.open_nodes if RENDER_NODE.match(n)]
    ngl = requested_gpu_layers(engine.cmdline)
    every_layer = "set llamacpp n_gpu_layers 99 (every layer) and a model that fits the GPU's memory (labwright kv fit)"
    if ngl is not None and ngl.strip() == "0":
        return Check(name, False, f"pid {engine.pid} runs with -ngl 0: no layer on the GPU", "GPU layers set to 0",
                     every_layer)
    if log.no_devices or log.no_gpu:
        said = _NO_DEVICES if log.no_devices else f"warning: {_NO_GPU}"
        return Check(name, False, f"pid {engine.pid} logged `{said}`: it runs on its CPU backend",
                     "llama.cpp's Vulkan backend skips CPU-type devices (lavapipe) and found no GPU (or it is not a "
                     "Vulkan build)", "pass the GPU's render node (gpu: amd or intel, labwright guest apply), put the "
                     "service user in the render group, install mesa-vulkan-drivers; then restart the service")
    if log.cpu_device:
        return Check(name, False, f"pid {engine.pid} uses {', '.join(log.using) or 'a CPU-type Vulkan device'}: "
                     "llvmpipe is Mesa's CPU driver", "the Vulkan device is a CPU (GGML_VK_VISIBLE_DEVICES picks "
                     "lavapipe, or no GPU is visible)", "unset GGML_VK_VISIBLE_DEVICES (or give the GPU's index from "
                     "vulkaninfo --summary), pass the GPU's render node, then restart the service")
    if log.offloaded is not None and log.offloaded[0] < log.offloaded[1]:
        return Check(name, False, f"pid {engine.pid} offloaded {log.offloaded[0]}/{log.offloaded[1]} layers to GPU: "
                     "the rest run on the CPU", "layers left on the CPU (-ngl below the model's layers, or the GPU's "
                     "memory too small)", every_layer)
    if not render:
        return Check(name, False, f"pid {engine.pid} holds no /dev/dri/renderD* open: it does not drive the GPU",
                     "no Vulkan GPU device in use (a CPU or non-Vulkan build, or the device is not visible)",
                     "use a Vulkan build of the engine, pass the render node, restart the service")
    detail = f"pid {engine.pid} has {', '.join(render)} open"
    if log.using:
        detail += f"; using {', '.join(log.using)}"
    if log.offloaded is not None:
        detail += f"; offloaded {log.offloaded[0]}/{log.offloaded[1]} layers to GPU"
    return Check(name, True, detail)


def dri_checks(vendor: str, guest: DriGuest, host_nodes: Iterable[DeviceNode],
               engine: EngineState | None) -> list[Check]:
    """Every check of an AMD/Intel guest: visible, nodes == the host's, the Vulkan device, the engine on it."""
    checks = [dri_visible_check(vendor, guest), nodes_check(host_nodes, GuestGpu(nodes=dict(guest.nodes))),
              vulkan_device_check(guest)]
    if engine is not None:
        checks.append(vulkan_engine_check(engine, guest.render_gids))
    return checks


def run_dri_checks(host: Host, vendor: str, host_nodes: list[DeviceNode], service: str | None,
                   decode: DecodeRequest | None = None) -> list[Check]:
    """Collect in the guest ``host`` (one command, two more for the engine) and apply the rules."""
    guest = parse_dri_guest(host.run(dri_guest_command()).stdout)
    engine = parse_engine(service, host.run(engine_command(service)).stdout) if service is not None else None
    checks = dri_checks(vendor, guest, host_nodes, engine)
    if engine is not None and decode is not None:
        url = decode.url or engine_url(engine)
        output = host.run(decode_command(url, decode.key_file or engine_key_file(engine))).stdout
        checks.append(decode_check(output, decode.floor if decode.floor is not None else decode_settings().floor, url))
    return checks


def passed_vendor(instance: Mapping[str, Any], facts: DriFacts) -> str | None:
    """The AMD/Intel vendor an LXD instance's devices pass (a ``gpu`` device's vendorid, or unix-char /dev/dri nodes
    told apart by the host's /sys/class/drm), or None (an NVIDIA guest, or none)."""
    by_path = {d.path: d.vendor for d in facts.devices}
    for device in (instance.get("expanded_devices") or instance.get("devices") or {}).values():
        if device.get("type") == "gpu" and device.get("vendorid"):
            try:
                vendor = vendor_of_id(int(str(device["vendorid"]), 16))
            except ValueError:
                continue
            if vendor in DRI_VENDORS:
                return vendor
        path = str(device.get("path") or device.get("source") or "")
        if device.get("type") == "unix-char" and path.startswith("/dev/dri/"):
            return by_path.get(path) or next((v for v in facts.vendors() if v in DRI_VENDORS), "amd")
    return None


def host_nodes_of(vendor: str, facts: DriFacts) -> list[DeviceNode]:
    """The host's nodes of ``vendor`` as the guest should see them (paths in the guest, majors and minors)."""
    nodes = [d.node for d in facts.of(vendor) if d.node is not None]
    if vendor == "amd" and facts.kfd is not None:
        nodes.append(facts.kfd)
    return nodes
