"""`labwright gpu check`'s rules on a real GPU machine, with a real CUDA llama-server as the engine.

The lent GPU machine has no LXD and no systemd, so the machine is its own "guest": the same two collection commands
`gpu check` runs in a guest (labwright.gpu.check.guest_command, decode_command) run here through a local shell, the
host side is read by GpuHost() as `gpu check` reads it, and the engine's state (main pid, the /dev/nvidia* nodes it
holds open, its command line, its log) is read from /proc and the server's log file instead of systemd and journald.
Then the same binary is started with CUDA hidden (CUDA_VISIBLE_DEVICES=-1, the way a guest without its nodes or with
a broken userspace looks to ggml_cuda_init) and the engine check must fail with the reason from its log.

Usage: python3 scripts/gpu-check/gpu_check_host.py LLAMA_SERVER TINY_GGUF  (prints one JSON object; exit 1 when an
expectation fails)
"""

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from labwright.gpu.check import EngineState, decode_check, decode_command, engine_check, run_checks
from labwright.gpu.nvidia.host import GpuHost
from labwright.hosts.local import LocalHost
from labwright.testing.waiting import wait_for


def start(binary: str, model: str, port: int, log: Path, env: dict[str, str]) -> subprocess.Popen:
    # -lv 4: llama.cpp logs "load_tensors: offloaded N/N layers to GPU" at INFO, which the engine check reports
    argv = [binary, "--model", model, "--n-gpu-layers", "99", "-lv", "4", "--host", "127.0.0.1", "--port", str(port),
            "--ctx-size", "2048"]
    return subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, env={**os.environ, **env})


def wait_healthy(port: int, process: subprocess.Popen, timeout: float = 120.0) -> None:
    def healthy() -> bool:
        if process.poll() is not None:
            raise SystemExit(f"llama-server on port {port} exited {process.returncode} before /health answered")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    wait_for(f"llama-server's /health on port {port}", healthy, timeout=timeout, every=0.2)


def engine_state(process: subprocess.Popen, log: Path) -> EngineState:
    fd_dir = Path(f"/proc/{process.pid}/fd")
    nodes = sorted({os.readlink(fd) for fd in fd_dir.iterdir() if os.readlink(fd).startswith("/dev/nvidia")})
    cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode().split("\0")
    return EngineState("llama-server", process.pid, nodes, log.read_text(errors="replace"), [a for a in cmdline if a])


def main(binary: str, model: str) -> int:
    host = GpuHost()
    started = time.monotonic()
    checks = run_checks(LocalHost(), host.driver_version(), host.device_nodes(), None)
    collect_seconds = time.monotonic() - started
    result: dict = {"host_driver": host.driver_version(), "majors": host.majors(),
                    "machine_checks": [c.__dict__ for c in checks], "collect_seconds": round(collect_seconds, 3)}

    log = Path("/tmp/lw-gpu-engine.log")
    server = start(binary, model, 18011, log, {})
    try:
        wait_healthy(18011, server)
        on_gpu = engine_check(engine_state(server, log))
        output = LocalHost().run(decode_command("http://127.0.0.1:18011/v1")).stdout
        decode = decode_check(output, 20.0, "http://127.0.0.1:18011/v1")
    finally:
        server.terminate()
        server.wait()
    result["engine_on_gpu"] = on_gpu.__dict__
    result["decode"] = decode.__dict__

    log_cpu = Path("/tmp/lw-gpu-engine-cpu.log")
    server = start(binary, model, 18012, log_cpu, {"CUDA_VISIBLE_DEVICES": "-1"})
    try:
        wait_healthy(18012, server)
        fallback = engine_check(engine_state(server, log_cpu))
    finally:
        server.terminate()
        server.wait()
    result["engine_cuda_hidden"] = fallback.__dict__
    result["cuda_hidden_log_lines"] = [line for line in log_cpu.read_text(errors="replace").splitlines()
                                       if "CUDA" in line or "GPU" in line or "offloaded" in line][:8]
    expectations = {"engine on the GPU passes": on_gpu.ok, "decode check passes": decode.ok,
                    "CUDA hidden fails the engine check": not fallback.ok}
    result["expectations"] = expectations
    print(json.dumps(result, indent=1))
    return 0 if all(expectations.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
