"""The full CUDA build of llama-server, timed: a one-off, not a test (hours of compiling on 2 cores; the test suite
compile-tests a few ggml-cuda objects instead, tests/integration/test_llamacpp_cuda_build.py).

Runs labwright.llamacpp.build's CUDA path into a throwaway cache (``--cache``, default a temporary directory; the
toolkit's wheels are copied in from the real cache when it has them, so nothing is downloaded twice), with a deadline
(``--stop-at HH:MM`` UTC, or ``--max-minutes``): at the deadline the build's whole process group is stopped and the
record says how far ninja got (step N/M). The record (JSON on stdout, and appended to ``--record``): machine, load,
architectures, phase times, ninja's progress, the binary's size and SASS when it finished.

    .venv/bin/python benchmarks/llamacpp_cuda_build.py --arch 8.6 --jobs 2 --stop-at 15:05
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def deadline_from(stop_at: str | None, max_minutes: float | None) -> float:
    limits = []
    if max_minutes:
        limits.append(time.time() + max_minutes * 60)
    if stop_at:
        now = datetime.now(UTC)
        hour, minute = (int(x) for x in stop_at.split(":"))
        at = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        limits.append(at.timestamp())
    return min(limits) if limits else float("inf")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", action="append", required=True, help="compute capability (repeatable)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--cache", type=Path, default=None, help="LABWRIGHT_CACHE for the build (default: temporary)")
    parser.add_argument("--stop-at", default=None, help="UTC HH:MM at which the build is stopped whatever happens")
    parser.add_argument("--max-minutes", type=float, default=None)
    parser.add_argument("--record", type=Path, default=None, help="append the JSON record to this file")
    args = parser.parse_args()

    cache = args.cache or Path(tempfile.mkdtemp(prefix="lw-cuda-bench-"))
    real_wheels = Path(os.path.expanduser("~/.cache/labwright/cuda/pip-13.0"))
    if real_wheels.joinpath(".complete").exists() and not (cache / "cuda" / "pip-13.0").exists():
        (cache / "cuda").mkdir(parents=True, exist_ok=True)
        (cache / "cuda" / "pip-13.0").symlink_to(real_wheels)  # the toolkit is not what is measured
    sdist = Path(os.path.expanduser("~/.cache/labwright/llama/0.3.36/llama_cpp_python-0.3.36.tar.gz"))
    if sdist.exists():
        (cache / "llama" / "0.3.36").mkdir(parents=True, exist_ok=True)
        shutil.copy2(sdist, cache / "llama" / "0.3.36" / sdist.name)

    env = {**os.environ, "LABWRIGHT_CACHE": str(cache), "PYTHONPATH": str(REPO / "src"), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "labwright", "build", "llamacpp", "--jobs", str(args.jobs)]
    for cap in args.arch:
        argv += ["--arch", cap]
    deadline = deadline_from(args.stop_at, args.max_minutes)
    started = time.monotonic()
    load_before = os.getloadavg()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []

    def read() -> None:  # the build's progress lines, as they come
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stopped = False
    while proc.poll() is None:
        if time.time() >= deadline:
            os.killpg(proc.pid, signal.SIGTERM)  # the build's whole group: ninja and the compilers too
            stopped = True
            proc.wait(timeout=120)
            break
        time.sleep(2)
    reader.join(timeout=30)
    steps = [m.group(1) for line in lines for m in re.finditer(r"step (\d+/\d+)", line)]
    for log in (cache / "llama").glob("*/cuda*/build.log"):  # ninja's own lines, kept by the build
        steps += re.findall(r"\[(\d+/\d+)\]", log.read_text(errors="replace"))
    last_step = steps[-1] if steps else ""
    phases = {m.group(1): float(m.group(2)) for line in lines if (m := re.match(r"✓ (.+) \((\d+\.\d+)s\)", line))}
    took = time.monotonic() - started
    record: dict = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"), "archs": args.arch, "jobs": args.jobs,
        "cpus": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()], "seconds": round(took, 1),
        "finished": proc.returncode == 0 and not stopped, "stopped_at_deadline": stopped,
        "ninja_progress": last_step, "phases": phases, "tail": lines[-5:],
    }
    if record["finished"]:
        binary = Path(lines[-1].strip())
        manifest = json.loads((binary.parent.parent / "manifest.json").read_text())
        record.update(binary_mb=round(binary.stat().st_size / 1e6, 1), sass=manifest["sass"])
    text = json.dumps(record, indent=1)
    print(text)
    if args.record:
        with args.record.open("a") as out:
            out.write(text + "\n")
    if args.cache is None:
        shutil.rmtree(cache, ignore_errors=True)
    return 0 if record["finished"] else 1


if __name__ == "__main__":
    sys.exit(main())
