"""`gpu check` for an AMD/Intel guest: vulkaninfo --summary read for real on this machine's lavapipe (Mesa's CPU
Vulkan driver, scripts/apt/gpu.list) and from the recorded/derived outputs of radv and anv
(tests/support/data/vulkaninfo, PROVENANCE.md), the guest command run by a real shell, and llama.cpp's Vulkan log
lines derived from its source (llama.cpp as vendored in llama-cpp-python 0.3.36, the version labwright pins: the
format strings and line numbers are in labwright.gpu.vulkan's docstring)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from labwright.gpu.check import EngineState, fallback_reason, parse_engine
from labwright.gpu.devices import DeviceNode
from labwright.gpu.dri import DriFacts, DrmDevice
from labwright.gpu.vulkan import (
    DriGuest,
    dri_checks,
    dri_guest_command,
    parse_dri_guest,
    parse_summary,
    parse_vulkan_log,
    passed_vendor,
    vulkan_device_check,
    vulkan_engine_check,
)

DATA = Path(__file__).resolve().parents[2] / "support" / "data" / "vulkaninfo"

#: llama-server of a Vulkan build where the only device is lavapipe and GGML_VK_VISIBLE_DEVICES is unset:
#: ggml_vk_instance_init skips the CPU-type device and logs "No devices found." (INFO), then the --gpu-layers
#: handler (common/arg.cpp 2799-2802) warns on stderr, and the model loads on the CPU backend.
LAVAPIPE_SKIPPED = """\
ggml_vulkan: No devices found.
warning: no usable GPU found, --gpu-layers option will be ignored
warning: one possible reason is that llama.cpp was compiled without GPU support
warning: consult docs/build.md for compilation instructions
load_tensors:   CPU_Mapped model buffer size =     5.84 MiB
"""
#: The same with GGML_VK_VISIBLE_DEVICES=0: lavapipe chosen (ggml_vk_print_gpu_info's line and CPU warning, then
#: src/llama.cpp 306's "using device" and src/llama-model.cpp 1924's offload line).
LLVMPIPE_CHOSEN = """\
ggml_vulkan: Found 1 Vulkan devices:
ggml_vulkan: 0 = llvmpipe (LLVM 15.0.6, 256 bits) (llvmpipe) | uma: 0 | fp16: 1 | bf16: 0 | fp4: 0 | warp size: 8 \
| shared memory: 32768 | int dot: 0 | matrix cores: none
ggml_vulkan: Warning: Device type is CPU. This is probably not the device you want.
llama_model_load_from_file_impl: using device Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)) (unknown id) - 24105 MiB free
load_tensors: offloaded 5/5 layers to GPU
load_tensors:      Vulkan0 model buffer size =     5.84 MiB
"""
#: radv on the 5800U's Vega 8 (field note 002's machine), every layer offloaded.
RADV_ALL = """\
ggml_vulkan: Found 1 Vulkan devices:
ggml_vulkan: 0 = AMD Radeon Graphics (RADV RENOIR) (radv) | uma: 1 | fp16: 1 | bf16: 0 | fp4: 0 | warp size: 64 \
| shared memory: 65536 | int dot: 1 | matrix cores: none
llama_model_load_from_file_impl: using device Vulkan0 (AMD Radeon Graphics (RADV RENOIR)) (0000:03:00.0) - 30720 MiB \
free
load_tensors: offloaded 49/49 layers to GPU
"""


def engine(log: str, nodes: tuple[str, ...] = ("/dev/dri/renderD128",), cmdline: tuple[str, ...] = ()) -> EngineState:
    return EngineState("llama-server", 4242, list(nodes), log, list(cmdline))


def test_recorded_and_derived_summaries_parse():
    lavapipe = parse_summary((DATA / "lavapipe-debian12.txt").read_text())
    assert [(d.index, d.name, d.driver, d.is_cpu) for d in lavapipe] == [
        (0, "llvmpipe (LLVM 15.0.6, 256 bits)", "llvmpipe", True)]
    radv = parse_summary((DATA / "radv-renoir-mesa22.txt").read_text())
    assert [(d.name, d.driver, d.kind, d.is_cpu) for d in radv] == [
        ("AMD Radeon Graphics (RADV RENOIR)", "radv", "integrated gpu", False),
        ("llvmpipe (LLVM 15.0.6, 256 bits)", "llvmpipe", "cpu", True)]
    anv = parse_summary((DATA / "anv-adl-s-mesa22.txt").read_text())
    assert anv[0].name == "Intel(R) UHD Graphics 770 (ADL-S GT1)" and anv[0].fields["vendorID"] == "0x8086"


def test_vulkan_device_check_fails_on_lavapipe_alone_and_passes_on_radv_and_anv():
    only_cpu = vulkan_device_check(DriGuest(summary=(DATA / "lavapipe-debian12.txt").read_text()))
    assert not only_cpu.ok and "only a CPU device: GPU0 llvmpipe" in only_cpu.detail
    assert "lavapipe" in only_cpu.cause and "mesa-vulkan-drivers" in only_cpu.fix
    assert "gpu: amd or intel" in only_cpu.fix
    radv = vulkan_device_check(DriGuest(summary=(DATA / "radv-renoir-mesa22.txt").read_text()))
    assert radv.ok and radv.detail.startswith("GPU0 AMD Radeon Graphics (RADV RENOIR) (radv, integrated gpu)")
    assert vulkan_device_check(DriGuest(summary=(DATA / "anv-adl-s-mesa22.txt").read_text())).ok
    missing = vulkan_device_check(DriGuest(summary=None))
    assert not missing.ok and missing.fix == "apt-get install mesa-vulkan-drivers vulkan-tools in the guest"


@pytest.mark.skipif(shutil.which("vulkaninfo") is None,
                    reason="vulkaninfo not installed: scripts/setup installs it (scripts/apt/gpu.list)")
def test_the_guest_command_run_here_finds_lavapipe_and_fails_as_a_cpu():
    """The real thing: this machine has no GPU, only Mesa's lavapipe; the command runs in sh as in a guest."""
    out = subprocess.run(["sh", "-c", dri_guest_command()], capture_output=True, text=True, timeout=60).stdout
    guest = parse_dri_guest(out)
    assert [d.driver for d in guest.devices] == ["llvmpipe"] and guest.devices[0].is_cpu
    check = vulkan_device_check(guest)
    assert not check.ok and "llvmpipe" in check.detail


def test_engine_log_lavapipe_skipped_falls_back_to_the_cpu_backend():
    check = vulkan_engine_check(engine(LAVAPIPE_SKIPPED, nodes=()))
    assert not check.ok and "ggml_vulkan: No devices found." in check.detail and "CPU backend" in check.detail
    assert "skips CPU-type devices (lavapipe)" in check.cause and "render group" in check.fix
    # the NVIDIA path's fallback reasons know the Vulkan lines too (a Vulkan build on an NVIDIA guest)
    assert "Vulkan backend found no GPU" in (fallback_reason(LAVAPIPE_SKIPPED) or "")


def test_engine_log_llvmpipe_chosen_is_a_cpu_device():
    log = parse_vulkan_log(LLVMPIPE_CHOSEN)
    assert log.using == ("Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits)",) and log.cpu_device and log.offloaded == (5, 5)
    check = vulkan_engine_check(engine(LLVMPIPE_CHOSEN, nodes=()))
    assert not check.ok and "uses Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits)" in check.detail
    assert "unset GGML_VK_VISIBLE_DEVICES" in check.fix


def test_engine_on_radv_passes_and_layers_left_on_the_cpu_fail():
    ok = vulkan_engine_check(engine(RADV_ALL))
    assert ok.ok and ok.detail == ("pid 4242 has /dev/dri/renderD128 open; using Vulkan0: AMD Radeon Graphics "
                                   "(RADV RENOIR); offloaded 49/49 layers to GPU")
    partial = vulkan_engine_check(engine(RADV_ALL.replace("49/49", "20/49")))
    assert not partial.ok and "offloaded 20/49" in partial.detail and "n_gpu_layers 99" in partial.fix
    no_node = vulkan_engine_check(engine(RADV_ALL, nodes=()))
    assert not no_node.ok and "holds no /dev/dri/renderD* open" in no_node.detail
    zero = vulkan_engine_check(engine(RADV_ALL, cmdline=("llama-server", "-ngl", "0")))
    assert not zero.ok and "-ngl 0" in zero.detail


def test_dri_checks_compare_the_guests_nodes_with_the_hosts():
    host = [DeviceNode("/dev/dri/card0", "/dev/dri/card0", 226, 0),
            DeviceNode("/dev/dri/renderD128", "/dev/dri/renderD128", 226, 128)]
    guest = DriGuest({"/dev/dri/card0": (226, 0), "/dev/dri/renderD128": (226, 129)},
                     (DATA / "radv-renoir-mesa22.txt").read_text())
    checks = dri_checks("amd", guest, host, engine(RADV_ALL))
    assert [(c.name, c.ok) for c in checks] == [
        ("GPU visible in the guest", True), ("device nodes and majors", False), ("Vulkan device", True),
        ("engine llama-server on the GPU (Vulkan)", True)]
    assert checks[1].detail == "/dev/dri/renderD128 is 226:129, host 226:128"
    assert not dri_checks("amd", DriGuest(), host, None)[0].ok


def test_passed_vendor_from_an_instances_devices():
    facts = DriFacts((DrmDevice("renderD129", 0x8086, "0000:00:02.0"),))
    assert passed_vendor({"devices": {"gpu": {"type": "gpu", "vendorid": "1002"}}}, facts) == "amd"
    assert passed_vendor({"devices": {"r": {"type": "unix-char", "path": "/dev/dri/renderD129"}}}, facts) == "intel"
    assert passed_vendor({"devices": {"gpu": {"type": "gpu", "vendorid": "10de"}}}, facts) is None
    assert passed_vendor({"devices": {"n": {"type": "unix-char", "path": "/dev/nvidia0"}}}, facts) is None


def test_a_service_user_outside_the_render_group_is_named_as_the_cause():
    """Mesa cannot open a 0660 render node for a user outside its group: llama.cpp then sees only lavapipe and skips
    it. The check names the group (from /proc/PID/status, read by the engine command) instead of a generic cause."""
    out = ("@@labwright-gpu-pid\n4242\n@@labwright-gpu-fds\n@@labwright-gpu-cmdline\nllama-server\n-ngl\n99\n"
           "@@labwright-gpu-ids\nUid:\t998\t998\t998\t998\nGroups:\t44 998 \n@@labwright-gpu-log\n" + LAVAPIPE_SKIPPED)
    state = parse_engine("llama-server", out)
    assert (state.uid, state.groups) == (998, (44, 998))
    check = vulkan_engine_check(state, {104})
    assert not check.ok and check.cause.startswith("its user (uid 998) is not in the render nodes' group (gid 104)")
    assert "put the service user in group 104" in check.fix
    # in the group, or root: the log's own cause stays
    assert "skips CPU-type devices" in vulkan_engine_check(parse_engine("llama-server", out.replace(
        "44 998", "44 104 998")), {104}).cause
    guest = parse_dri_guest("@@labwright-vk-nodes\n/dev/dri/card0 e2 0 44\n/dev/dri/renderD128 e2 80 104\n"
                            "@@labwright-vk-vulkan\n@@labwright-vk-no-vulkaninfo\n")
    assert guest.render_gids == {104} and guest.summary is None and guest.nodes["/dev/dri/renderD128"] == (226, 128)
