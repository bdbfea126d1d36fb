"""`labwright gpu check`: how long one check of a GPU guest takes, on the local lab.

    sudo .venv/bin/python benchmarks/gpu_check.py             # 10 checks
    sudo .venv/bin/python benchmarks/gpu_check.py --runs 30

The guest is a lab container with the fake NVIDIA nodes passed through (tests/support/fake_nvidia), a matching
userspace and the real llama-server (the cached CPU build) under its systemd with -ngl 99, so every run does the full
work: the guest's nodes, libraries and nvidia-smi, the engine's process, open files and journal since its start.
Reported: the library call (check_guest: LXD lookup + two execs + rules) and the CLI command in-process (argument
parsing, table output). On this lab every run reports the engine's CPU fallback, as it should.
Guests are named lwbgpu-<hex> and removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _support  # noqa: F401  (tests/support on sys.path)

from labwright.cli import main as cli_main
from labwright.cli import register
from labwright.gpu.guest import check_guest
from labwright.guests.lxd import LxdBackend
from labwright.testing.lab_fixture import ensure_test_lab
from support.fake_nvidia import DRIVER_VERSION, fake_root_in_dev, make_fake_nvidia_host, remove_fake_root
from support.gpu_guest import install_userspace, spec, start_llama_server
from support.gpu_host import TreeGpuHost
from support.host_cli import on_tree


def summary(label: str, values: list[float]) -> str:
    return (f"{label:<34} median {statistics.median(values) * 1000:7.1f} ms   min {min(values) * 1000:7.1f} ms   "
            f"max {max(values) * 1000:7.1f} ms   (n={len(values)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    lab = ensure_test_lab()
    root = fake_root_in_dev("lwbench-nv")
    name = f"lwbgpu-{secrets.token_hex(3)}"
    try:
        make_fake_nvidia_host(root)
        started = time.monotonic()
        LxdBackend(lab.client, gpu_host=TreeGpuHost(root)).apply(spec(name, gpu="nvidia"))
        install_userspace(lab.client, name, DRIVER_VERSION)
        with tempfile.TemporaryDirectory() as tmp:
            start_llama_server(lab.client, name, Path(tmp))
        print(f"guest {name} with GPU nodes, userspace and llama-server ready in {time.monotonic() - started:.1f} s",
              file=sys.stderr)
        library, command = [], []
        for _ in range(args.runs):
            t0 = time.monotonic()
            report = check_guest(name, gpu_host=TreeGpuHost(root))
            library.append(time.monotonic() - t0)
            assert not report.ok and "no usable GPU" in report.checks[-1].cause, report.to_dict()
        register(["gpu"])
        for _ in range(args.runs):
            t0 = time.monotonic()
            with on_tree(root), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                code = cli_main(["gpu", "check", name])
            command.append(time.monotonic() - t0)
            assert code == 1, code
        print(summary("check_guest (library)", library))
        print(summary("labwright gpu check (in-process)", command))
    finally:
        lab.remove(name)
        remove_fake_root(root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
