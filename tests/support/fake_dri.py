"""A fake AMD/Intel host layout for tests: ``/sys/class/drm`` as the kernel lays it out and real ``mknod`` DRM nodes
below a root, no GPU needed.

The kernel's layout (drivers/gpu/drm/drm_sysfs.c, drm_sysfs_device_add: the minor's device is a child of the PCI
device, named ``card%d`` / ``renderD%d``; /sys/class/drm links to it): ``/sys/class/drm/renderD128`` is a symlink to
``../../devices/pci0000:00/<slot>/drm/renderD128``, whose ``device`` links back to the PCI device, whose ``vendor``
file holds ``0x1002``. The nodes are character major 226 (include/uapi/drm/drm.h DRM_MAJOR), minors 0-63 for cardN
and 128-191 for renderDN (Documentation/admin-guide/devices.txt), mode 0660 for card (group video) and 0666 for
render nodes as Debian's udev makes them; /dev/kfd is amdgpu's ROCm node, a dynamic major (``kfd`` in /proc/devices).

LXD only passes ``unix-char`` sources that live under ``/dev``: integration tests put the root in a fresh directory
below ``/dev`` (support.fake_nvidia.fake_root_in_dev), never on top of the host's own nodes.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

DRM_MAJOR = 226
KFD_MAJOR = 235


@dataclass(frozen=True)
class FakeGpu:
    vendor_id: int  # 0x1002 AMD, 0x8086 Intel, 0x10de NVIDIA
    slot: str  # PCI address, 0000:03:00.0
    card: int  # cardN
    device_id: int = 0x1638  # Cezanne (Ryzen 7 5800U's Vega 8)

    @property
    def render(self) -> int:
        return 128 + self.card


AMD_APU = FakeGpu(0x1002, "0000:03:00.0", 0)
INTEL_IGPU = FakeGpu(0x8086, "0000:00:02.0", 1, 0x4680)  # Alder Lake-S GT1, UHD Graphics 770


def _mknod(path: Path, mode: int, major: int, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, mode | stat.S_IFCHR, os.makedev(major, minor))
    os.chmod(path, mode)


def make_fake_dri_host(root: str | Path, gpus: tuple[FakeGpu, ...] = (AMD_APU,), kfd: bool = True,
                       nodes: bool = True) -> Path:
    """Write ``root/sys`` for ``gpus`` and mknod ``root/dev/dri/{cardN,renderDN}`` (``nodes=False``: the sysfs
    entries only, as a boot that did not make the nodes leaves them) and, with an AMD GPU, ``root/dev/kfd``.
    A connector entry (``card0-HDMI-A-1``) is there too: not a GPU, it must be skipped. Needs root (mknod)."""
    root = Path(root)
    drm = root / "sys" / "class" / "drm"
    drm.mkdir(parents=True, exist_ok=True)
    (root / "dev").mkdir(parents=True, exist_ok=True)
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "devices").write_text(f"Character devices:\n  1 mem\n{DRM_MAJOR} drm\n{KFD_MAJOR} kfd\n\n"
                                           "Block devices:\n  7 loop\n")
    for gpu in gpus:
        pci = root / "sys" / "devices" / "pci0000:00" / gpu.slot
        pci.mkdir(parents=True, exist_ok=True)
        (pci / "vendor").write_text(f"0x{gpu.vendor_id:04x}\n")
        (pci / "device").write_text(f"0x{gpu.device_id:04x}\n")
        for name, minor, mode in ((f"card{gpu.card}", gpu.card, 0o660), (f"renderD{gpu.render}", gpu.render, 0o666)):
            entry = pci / "drm" / name
            entry.mkdir(parents=True, exist_ok=True)
            (entry / "dev").write_text(f"{DRM_MAJOR}:{minor}\n")
            if not (entry / "device").is_symlink():
                (entry / "device").symlink_to("../../../" + gpu.slot)
            link = drm / name
            if not link.is_symlink():
                link.symlink_to(f"../../devices/pci0000:00/{gpu.slot}/drm/{name}")
            if nodes and not (root / "dev" / "dri" / name).exists():
                _mknod(root / "dev" / "dri" / name, mode, DRM_MAJOR, minor)
        connector = pci / "drm" / f"card{gpu.card}" / f"card{gpu.card}-HDMI-A-1"
        connector.mkdir(exist_ok=True)
        if not (drm / connector.name).is_symlink():
            target = f"../../devices/pci0000:00/{gpu.slot}/drm/card{gpu.card}/{connector.name}"
            (drm / connector.name).symlink_to(target)
    if kfd and any(g.vendor_id == 0x1002 for g in gpus) and not (root / "dev" / "kfd").exists():
        _mknod(root / "dev" / "kfd", 0o666, KFD_MAJOR, 0)
    return root


def drop_nodes(root: str | Path) -> None:
    """What a reboot whose udev did not make the DRM nodes leaves: /sys/class/drm lists the GPU, /dev/dri is empty."""
    dri = Path(root) / "dev" / "dri"
    for path in dri.glob("*"):
        if path.is_char_device():
            path.unlink()
