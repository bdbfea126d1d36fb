"""The rules of `labwright gpu check` on recorded guest outputs, and its guest command run by a real shell."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading

from labwright.gpu.check import (
    EngineState,
    GuestGpu,
    decode_check,
    decode_command,
    decode_settings,
    engine_check,
    engine_key_file,
    engine_url,
    fallback_reason,
    guest_command,
    nodes_check,
    parse_engine,
    parse_guest,
    requested_gpu_layers,
    userspace_check,
    visible_check,
)
from labwright.gpu.devices import DeviceNode
from labwright.gpu.nvidia.smi import parse_gpu_query
from support.fake_nvidia import nvidia_smi_double, nvidia_smi_query_lines

#: The cached CPU build (labwright.llamacpp.build: llama.cpp 0c1e570) started with -ngl 99 on the tiny GGUF, as it
#: logged it (2026-11-24; the first lines, then the load at -lv 4).
CPU_BUILD_NGL_99 = """\
warning: no usable GPU found, --gpu-layers option will be ignored
warning: one possible reason is that llama.cpp was compiled without GPU support
warning: consult docs/build.md for compilation instructions
0.00.006.605 I cmn  common_param: common_params_print_info: build 1 (0c1e570) with GNU 12.2.0 for Linux x86_64
0.00.006.607 I cmn  common_param: device_info:
0.00.006.612 I cmn  common_param:   - CPU     : AMD EPYC (24105 MiB, 24105 MiB free)
0.00.014.290 I load_tensors:   CPU_Mapped model buffer size =     5.84 MiB
0.00.302.307 I srv  llama_server: listening on http://127.0.0.1:18931
"""
#: A CUDA build's load as llama.cpp's src/llama-model.cpp load_tensors logs it (format strings "%s: offloaded %d/%d
#: layers to GPU" and "%s: %12s model buffer size = %8.2f MiB").
CUDA_LOAD = """\
load_tensors: offloading 32 repeating layers to GPU
load_tensors: offloading output layer to GPU
load_tensors: offloaded 33/33 layers to GPU
load_tensors:        CUDA0 model buffer size =  4403.49 MiB
load_tensors:   CPU_Mapped model buffer size =   281.81 MiB
"""

HOST_NODES = [DeviceNode(p, p, major, minor) for p, major, minor in
              (("/dev/nvidia0", 195, 0), ("/dev/nvidiactl", 195, 255), ("/dev/nvidia-uvm", 509, 0))]
GUEST_OUT = """@@labwright-gpu-nodes
/dev/nvidia0 c3 0
/dev/nvidiactl c3 ff
/dev/nvidia-uvm 1fd 0
@@labwright-gpu-libs
libcuda.so.550.54.14
libnvidia-ml.so.550.54.14
@@labwright-gpu-smi
""" + nvidia_smi_query_lines("550.54.14")


def test_guest_output_parsed():
    guest = parse_guest(GUEST_OUT)
    assert guest.nodes == {"/dev/nvidia0": (195, 0), "/dev/nvidiactl": (195, 255), "/dev/nvidia-uvm": (509, 0)}
    assert guest.libraries == {"libcuda.so": "550.54.14", "libnvidia-ml.so": "550.54.14"}
    assert [g.compute_cap for g in guest.gpus] == ["8.6"]
    checks = [visible_check(guest), userspace_check("550.54.14", guest), nodes_check(HOST_NODES, guest)]
    assert all(c.ok for c in checks), checks
    assert "compute capability 8.6" in checks[0].detail


def test_guest_without_smi_and_without_nodes():
    guest = parse_guest("@@labwright-gpu-nodes\n@@labwright-gpu-libs\n@@labwright-gpu-smi\n@@labwright-gpu-no-smi\n")
    assert guest.smi_output is None and guest.nodes == {}
    check = visible_check(guest)
    assert not check.ok and "no /dev/nvidiaN" in check.detail and "guest apply" in check.fix


def test_smi_that_cannot_reach_the_driver_fails_visibility():
    guest = GuestGpu({"/dev/nvidia0": (195, 0)}, {}, "Failed to initialize NVML: Driver/library version mismatch", [])
    check = visible_check(guest)
    assert not check.ok and "nvidia-smi lists no GPU" in check.detail


def test_userspace_must_match_exactly():
    near = GuestGpu(libraries={"libcuda.so": "570.148.06", "libnvidia-ml.so": "570.148.06"})
    check = userspace_check("570.148.08", near)
    assert not check.ok and "570.148.08" in check.detail and "570.148.06" in check.detail
    assert "--no-kernel-module" in check.fix
    missing = userspace_check("570.148.08", GuestGpu())
    assert not missing.ok and "no NVIDIA userspace libraries" in missing.detail
    no_driver = userspace_check(None, GuestGpu(libraries={"libcuda.so": "550.54.14"}))
    assert not no_driver.ok and "no NVIDIA kernel module" in no_driver.detail


def test_smi_reporting_another_version_is_a_mismatch():
    guest = GuestGpu(libraries={"libcuda.so": "550.54.14"}, smi_output="x",
                     gpus=parse_gpu_query(nvidia_smi_query_lines("550.54.15")))
    check = userspace_check("550.54.14", guest)
    assert not check.ok and "550.54.15" in check.detail


def test_majors_changed_by_a_driver_update_are_named():
    guest = parse_guest(GUEST_OUT.replace("/dev/nvidia-uvm 1fd 0", "/dev/nvidia-uvm ed 0").replace(
        "/dev/nvidiactl c3 ff\n", ""))
    check = nodes_check(HOST_NODES, guest)
    assert not check.ok
    assert "/dev/nvidia-uvm is 237:0, host 509:0" in check.detail and "/dev/nvidiactl missing (host 195:255)" in \
        check.detail


def test_cpu_build_with_gpu_layers_requested_is_a_failed_engine_check():
    engine = EngineState("llama-server", 4242, [], CPU_BUILD_NGL_99, ["/usr/local/bin/llama-server", "-ngl", "99"])
    check = engine_check(engine)
    assert not check.ok
    assert check.detail == "pid 4242 holds no /dev/nvidiaN open (-ngl 99 requested): it runs on the CPU"
    assert check.cause.startswith("llama.cpp found no usable GPU and ignored --gpu-layers")


def test_gpu_process_with_all_layers_offloaded_passes():
    engine = EngineState("llama-server", 7, ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"], CUDA_LOAD,
                         ["llama-server", "--n-gpu-layers=99"])
    check = engine_check(engine)
    assert check.ok and "offloaded 33/33 layers to GPU" in check.detail and "partial" not in check.detail


def test_silent_fallback_without_a_log_line_still_fails():
    check = engine_check(EngineState("tabbyapi", 9, [], "INFO: Started server process\n", []))
    assert not check.ok and check.cause == "no reason logged (the engine fell back silently)"


def test_gpu_open_but_no_kernel_image_fails_naming_the_architecture():
    log = "RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
    check = engine_check(EngineState("tabbyapi", 9, ["/dev/nvidia0"], log, []))
    assert not check.ok and "compute capability" in check.cause


def test_not_running_and_zero_layers():
    assert "no running main process" in engine_check(EngineState("llama-server", 0)).detail
    zero = engine_check(EngineState("llama-server", 5, ["/dev/nvidia0"], "", ["llama-server", "-ngl", "0"]))
    assert not zero.ok and "-ngl 0" in zero.detail


def test_fallback_reasons():
    assert fallback_reason("ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected\n") == (
        "llama.cpp could not initialize CUDA: no CUDA-capable device is detected")
    assert fallback_reason("load_tensors: offloaded 0/33 layers to GPU\n") == "llama.cpp offloaded 0/33 layers to GPU"
    assert fallback_reason(CUDA_LOAD) is None
    assert requested_gpu_layers(["x", "--gpu-layers", "auto"]) == "auto" and requested_gpu_layers(["x"]) is None


def test_engine_output_parsed():
    out = ("@@labwright-gpu-pid\n123\n@@labwright-gpu-fds\n/dev/nvidia0\n/dev/nvidiactl\n@@labwright-gpu-cmdline\n"
           "llama-server\n-ngl\n99\n@@labwright-gpu-log\n" + CUDA_LOAD)
    engine = parse_engine("llama-server", out)
    assert engine.pid == 123 and engine.open_nodes == ["/dev/nvidia0", "/dev/nvidiactl"]
    assert engine.cmdline == ["llama-server", "-ngl", "99"] and "offloaded 33/33" in engine.log


def test_guest_command_runs_in_a_real_shell():
    """The collection command is valid sh and reads this machine (no GPU here: no nodes, no libraries)."""
    out = subprocess.run(["/bin/sh", "-c", guest_command()], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"}).stdout
    guest = parse_guest(out)
    assert "@@labwright-gpu-nodes" in out and "@@labwright-gpu-smi" in out
    assert guest.nodes == {} and guest.libraries == {} and guest.smi_output is None


def test_decode_rule():
    url = "http://127.0.0.1:8001/v1"
    slow = decode_check('{"seconds": 5.0, "tokens": 32}\n', 20.0, url)
    assert not slow.ok and slow.detail == "32 tokens in 5.00 s = 6.4 tok/s (CPU bound 20 tok/s)"
    assert "runs on the CPU" in slow.cause
    fast = decode_check('{"seconds": 0.32, "tokens": 32}\n', 20.0, url)
    assert fast.ok and "100.0 tok/s" in fast.detail
    refused = decode_check('{"error": "URLError: <urlopen error [Errno 111] Connection refused>"}', 20.0, url)
    assert not refused.ok and "Connection refused" in refused.detail and "--decode-url" in refused.fix
    assert not decode_check("sh: 1: python3: not found\n", 20.0, url).ok
    assert not decode_check('{"seconds": 1.0, "tokens": null}', 20.0, url).ok


def test_engine_url_from_the_command_line_or_the_default_port():
    assert engine_url(EngineState("llama-server", 1, cmdline=["llama-server", "--port", "8090"])) == \
        "http://127.0.0.1:8090/v1"
    assert engine_url(EngineState("tabbyapi", 1, cmdline=["python", "main.py"])) == "http://127.0.0.1:5000/v1"
    assert decode_settings().floor == 20.0


class _Completions(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str, dict]] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append((self.path, self.headers.get("Authorization", ""), body))
        answer = json.dumps({"choices": [{"text": "one"}], "usage": {"completion_tokens": body["max_tokens"]}})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(answer.encode())

    def log_message(self, *args):
        pass


def test_decode_script_posts_a_completion_with_the_key_from_a_tokens_file(tmp_path):
    """The script the guest runs, run here by a real python3 against a loopback HTTP endpoint."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _Completions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        keys = tmp_path / "api_tokens.yml"
        keys.write_text("admin_key: adm\napi_key: k3y\n")
        url = f"http://127.0.0.1:{server.server_port}/v1"
        out = subprocess.run(["/bin/sh", "-c", decode_command(url, str(keys))], capture_output=True, text=True,
                             check=True, timeout=60).stdout
        check = decode_check(out, 0.5, url)
        assert check.ok and check.detail.startswith("32 tokens in"), check
        path, auth, body = _Completions.seen[-1]
        assert path == "/v1/completions" and auth == "Bearer k3y"
        assert body["max_tokens"] == 32 and body["stream"] is False and body["temperature"] == 0
    finally:
        server.shutdown()


def test_gpu_check_passes_on_a_470_driver_whose_nvidia_smi_has_no_compute_cap(tmp_path):
    """The 470 branch's nvidia-smi refuses the whole query for compute_cap (tests/conformance/nvidia-smi): the GPU
    works, so the check must pass; the capability comes from the GPU's name, and the detail says why."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(nvidia_smi_double("470.256.02"))
    smi.chmod(0o755)
    out = subprocess.run(["/bin/sh", "-c", guest_command()], capture_output=True, text=True, check=True,
                         env={"PATH": f"{tmp_path}:/usr/bin:/bin"}).stdout
    guest = parse_guest(out)
    guest.nodes = {"/dev/nvidia0": (195, 0)}  # no GPU node on this machine: the one the guest would have
    guest.libraries = {"libcuda.so": "470.256.02", "libnvidia-ml.so": "470.256.02"}
    visible = visible_check(guest)
    assert visible.ok, visible
    assert visible.detail == ("/dev/nvidia0; nvidia-smi: NVIDIA GeForce RTX 3090 (compute capability 8.6 from the "
                              "GPU's name) (this nvidia-smi has no compute_cap field: asked again without it)")
    assert userspace_check("470.256.02", guest).ok


def test_an_unreachable_driver_is_still_reported_with_nvidia_smis_own_words():
    guest = parse_guest("@@labwright-gpu-nodes\n/dev/nvidia0 c3 0\n@@labwright-gpu-libs\n@@labwright-gpu-smi\n"
                        "@@labwright-smi-fields index,name,uuid,compute_cap,driver_version,memory.total\n"
                        "@@labwright-smi-exit 18\nFailed to initialize NVML: Driver/library version mismatch\n")
    check = visible_check(guest)
    assert not check.ok and check.cause == "the driver cannot be reached from the guest"
    assert check.detail == ("/dev/nvidia0 present, but nvidia-smi lists no GPU: Failed to initialize NVML: "
                            "Driver/library version mismatch")


def test_the_key_file_is_the_one_the_engine_was_started_with():
    """gpu check --decode asks the engine as deployed: llama-server behind --api-key-file (deploys/llamacpp.py),
    tabbyAPI with its api_tokens.yml; an engine without a key is asked without one."""
    assert engine_key_file(EngineState("llama-server", 1, cmdline=["llama-server", "--api-key-file",
                                                                   "/etc/llama-server/api-key"])) == \
        "/etc/llama-server/api-key"
    assert engine_key_file(EngineState("llama-server", 1, cmdline=["llama-server", "--api-key-file=/k"])) == "/k"
    assert engine_key_file(EngineState("llama-server", 1, cmdline=["llama-server", "--port", "8001"])) == ""
    assert engine_key_file(EngineState("tabbyapi.service", 1, cmdline=["python", "main.py"])) == \
        "/opt/tabbyapi/api_tokens.yml"


def test_the_decode_script_reads_a_key_after_a_comment_and_says_a_missing_file_in_one_line(tmp_path):
    import subprocess
    import sys

    from labwright.gpu.check import DECODE_SCRIPT

    key = tmp_path / "api-key"
    key.write_text("# made by labwright\nlw-secret\n")
    missing = tmp_path / "none"
    out = subprocess.run([sys.executable, "-c", DECODE_SCRIPT, "http://127.0.0.1:9/v1", str(missing), "4", "hi",
                          "2"], capture_output=True, text=True, timeout=30)
    assert json.loads(out.stdout) == {"error": f"cannot read the API key file {missing}: No such file or directory"}
    # port 9 (discard) refuses: the request is made, so the key file was read without a traceback
    out = subprocess.run([sys.executable, "-c", DECODE_SCRIPT, "http://127.0.0.1:9/v1", str(key), "4", "hi", "2"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "error" in json.loads(out.stdout) and "Traceback" not in out.stderr
