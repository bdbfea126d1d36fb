"""labwright.gpu.devices: the vendor-neutral side of GPU nodes and the vendor registry (a second vendor is a module
that registers itself, and the callers that ask "does this guest get a GPU" know it without a change)."""

from __future__ import annotations

import pytest

from labwright.gpu import devices
from labwright.gpu.devices import DeviceNode, guest_mode, passed_gpu_devices, vendor_of_path, vendors
from labwright.gpu.dri import AMD, INTEL
from labwright.gpu.nvidia import NVIDIA


def test_nvidia_is_registered_by_its_module():
    assert vendors()["nvidia"] is NVIDIA
    assert vendor_of_path("/dev/nvidia0") is NVIDIA and vendor_of_path("/dev/nvidia-caps/nvidia-cap1") is NVIDIA
    assert vendor_of_path("/dev/kvm") is None and vendor_of_path("/dev/accel/accel0") is None
    assert NVIDIA.is_gpu_node("/dev/nvidia12") and not NVIDIA.is_gpu_node("/dev/nvidiactl")


def test_amd_and_intel_are_registered_by_the_dri_module():
    """/dev/dri is every DRM vendor's (the path alone does not say which: /sys/class/drm does); /dev/kfd is AMD's."""
    assert vendors()["amd"] is AMD and vendors()["intel"] is INTEL
    assert AMD.owns_path("/dev/dri/renderD128") and INTEL.owns_path("/dev/dri/card0")
    assert AMD.owns_path("/dev/kfd") and not INTEL.owns_path("/dev/kfd")
    assert AMD.is_gpu_node("/dev/dri/renderD128") and not AMD.is_gpu_node("/dev/dri/card0")
    assert passed_gpu_devices({"devices": {"r": {"type": "unix-char", "source": "/dev/dri/renderD128"}}}) == ["r"]


def test_passed_gpu_devices_reads_gpu_devices_and_vendor_nodes():
    instance = {"expanded_devices": {
        "root": {"type": "disk", "path": "/"},
        "gpu0": {"type": "gpu"},
        "nvidia-uvm": {"type": "unix-char", "path": "/dev/nvidia-uvm", "source": "/dev/nvidia-uvm"},
        "kvm": {"type": "unix-char", "path": "/dev/kvm"},
        "accel": {"type": "unix-char", "source": "/dev/accel/accel0"},
    }}
    assert passed_gpu_devices(instance) == ["gpu0", "nvidia-uvm"]
    assert passed_gpu_devices({"devices": {"n0": {"type": "unix-char", "source": "/dev/nvidia0"}}}) == ["n0"]
    assert passed_gpu_devices({}) == []


class _Dri:
    """A further vendor as a new module would define it (an accelerator with its own nodes)."""

    name = "accel-test"

    def owns_path(self, path: str) -> bool:
        return path.startswith("/dev/accel/")

    def is_gpu_node(self, path: str) -> bool:
        return path.startswith("/dev/accel/accel")


def test_a_registered_vendor_is_known_to_the_callers(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(devices, "_VENDORS", dict(devices._VENDORS))
    dri = devices.register(_Dri())
    assert vendors()["accel-test"] is dri and vendor_of_path("/dev/accel/accel0") is dri
    instance = {"devices": {"accel": {"type": "unix-char", "source": "/dev/accel/accel0"}}}
    assert passed_gpu_devices(instance) == ["accel"]


def test_guest_mode_drops_others_bits():
    assert guest_mode(0o666) == 0o660 and guest_mode(0o444) == 0o440 and guest_mode(0o400) == 0o400
    node = DeviceNode("/dev/nvidia0", "/dev/nvidia0", 195, 0)
    assert node.name == "nvidia0" and node.guest_mode == 0o660
