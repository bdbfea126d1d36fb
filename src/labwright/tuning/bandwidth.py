"""Memory bandwidth of this machine, read or measured, never assumed (`labwright kv bandwidth`).

- A discrete NVIDIA GPU: nvidia-smi's maximum memory clock and memory bus width (``--query-gpu=clocks.max.memory,
  memory.bus_width``): GDDR and HBM move two transfers per memory clock, so the peak is ``clock (MHz) x 2 x bus width
  (bits) / 8`` (an RTX 4090: 10,501 MHz x 2 x 384 / 8 = 1,008 GB/s, its specification). A driver whose nvidia-smi
  refuses either field (an unknown field fails the whole query; labwright.gpu.nvidia.smi asks again without it) falls
  back to the GPU table by name (data/gpu-memory.toml).
- System RAM (a CPU, or an APU whose GPU reads the same RAM): measured. Decoding streams the weights from memory once
  per token, so what is measured is a read: a buffer larger than any cache, filled (so every page is real memory, not
  the kernel's shared zero page), then scanned by one process per CPU with ``mmap.find`` for a byte it does not hold
  (CPython's single-byte search is glibc ``memchr``, which reads at the memory's pace); the best of a few rounds
  (STREAM's convention: the best time is the least disturbed), bytes / the slowest reader's CPU time: on a machine
  whose cores other processes share, the wall time counts their turns too (measured on a 2-core machine at load 12:
  16-18 GB/s by CPU time in every run, 8-17 by wall time). The load still lowers the read by CPU time, less: other
  processes share the memory bus and a core's line-fill buffers (one reader on that machine, 2026-11-28: 26.6-30.5
  GB/s at load 6-12, 15.6-27.6 at load 16-25); benchmarks/speed_prediction.py pairs its decodes with reads beside
  them and holds them to the best. Python only: no numpy.
"""

from __future__ import annotations

import mmap
import os
import re
import shutil
import struct
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from labwright.errors import BadInput

MIB = 1024**2
DEFAULT_SIZE_MIB = 512
MAX_SIZE_MIB = 64 * 1024
MAX_ROUNDS = 100
SMI_FIELDS = ("index", "name", "memory.total", "clocks.max.memory", "memory.bus_width")


@dataclass(frozen=True)
class GpuBandwidth:
    index: int
    name: str
    gbs: float | None
    memory_mib: int | None
    how: str

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "bandwidth_gbs": self.gbs, "memory_mib": self.memory_mib,
                "how": self.how}


def _number(text: str | None) -> float | None:
    """A field of nvidia-smi's nounits CSV as a number above 0: ASCII digits, at most 12 before the point (no clock,
    bus width or MiB comes near), else None ('[N/A]', junk, a run of digits no card has)."""
    match = re.fullmatch(r"(?a)\s*(\d{1,12}(?:\.\d{1,6})?)\s*", text or "")
    value = float(match.group(1)) if match else None
    return value if value else None


def gpus_from_smi(text: str) -> tuple[list[GpuBandwidth], tuple[str, ...]]:
    """nvidia-smi's rows (``query_command(SMI_FIELDS, nounits=True)``'s output) as bandwidths, and the fields the
    driver refused; a GPU without a clock or bus width is looked up by name in data/gpu-memory.toml."""
    from labwright.gpu.nvidia.smi import parse_query
    from labwright.tuning.speed import MAX_BANDWIDTH_GBS, find_gpu

    query = parse_query(text, SMI_FIELDS)
    found = []
    for row in query.rows:
        name = row.get("name") or "?"
        clock, width = _number(row.get("clocks.max.memory")), _number(row.get("memory.bus_width"))
        memory = _number(row.get("memory.total"))
        gbs: float | None
        computed = clock * 2 * width / 8 / 1000 if clock and width else None
        if computed is not None and computed > MAX_BANDWIDTH_GBS:  # no memory reads faster: a field is nonsense
            clock = width = None
        if clock and width and computed is not None:
            gbs = round(computed, 1)
            how = f"nvidia-smi: max memory clock {clock:g} MHz x 2 x {width:g}-bit bus / 8"
        else:
            table = find_gpu(name, option="")
            gbs = float(table["bandwidth_gbs"]) if table else None
            missing = ", ".join(f for f, v in (("clocks.max.memory", clock), ("memory.bus_width", width)) if not v)
            if computed is not None and computed > MAX_BANDWIDTH_GBS:
                missing = f"plausible clock and bus width ({computed:,.0f} GB/s from them)"
            how = (f"data/gpu-memory.toml ({table['source']}): nvidia-smi gave no {missing}" if table else
                   f"unknown: nvidia-smi gave no {missing} and {name!r} is not in data/gpu-memory.toml; pass "
                   "--bandwidth-gbs from the card's specification")
        found.append(GpuBandwidth(int(row.get("index") or 0), name, gbs, int(memory) if memory else None, how))
    return found, query.rejected


def read_gpus(smi: str = "nvidia-smi", timeout: int = 20) -> tuple[list[GpuBandwidth], tuple[str, ...], str]:
    """(GPUs, refused fields, a line saying why none) for this machine's nvidia-smi; none where it is missing."""
    from labwright.gpu.nvidia.smi import query_command

    if shutil.which(smi) is None:
        return [], (), f"{smi} not found: no NVIDIA GPU to read"
    proc = subprocess.run(["sh", "-c", query_command(SMI_FIELDS, smi=smi, timeout=timeout, nounits=True)],
                          capture_output=True, text=True, timeout=timeout * 4)
    gpus, rejected = gpus_from_smi(proc.stdout)
    why = "" if gpus else f"{smi} listed no GPU: {(proc.stdout + proc.stderr).strip().splitlines()[-1:] or ['-']}"
    return gpus, rejected, why


@dataclass(frozen=True)
class RamBandwidth:
    gbs: float
    bytes: int
    processes: int
    rounds: int
    seconds: float
    method: str
    wall_gbs: float = 0.0  # bytes / wall time: lower than gbs on a machine whose cores other processes share

    def to_json(self) -> dict[str, Any]:
        return {"read_gbs": round(self.gbs, 2), "wall_gbs": round(self.wall_gbs, 2), "bytes": self.bytes,
                "processes": self.processes, "rounds": self.rounds, "best_round_s": round(self.seconds, 4),
                "method": self.method}


def check_measure(size_mib: int, processes: int | None, rounds: int) -> None:
    if not 16 <= size_mib <= MAX_SIZE_MIB:
        raise BadInput(f"--size-mib {size_mib}: give 16 to {MAX_SIZE_MIB} MiB (default {DEFAULT_SIZE_MIB}; larger "
                       "than the CPU's caches, smaller than free RAM)")
    if processes is not None and not 1 <= processes <= 1024:
        raise BadInput(f"--processes {processes}: give 1 to 1024 (default: one per CPU)")
    if not 1 <= rounds <= MAX_ROUNDS:
        raise BadInput(f"--rounds {rounds}: give 1 to {MAX_ROUNDS} (default 5)")


def measure_ram(size_mib: int = DEFAULT_SIZE_MIB, processes: int | None = None, rounds: int = 5) -> RamBandwidth:
    """Read bandwidth of system RAM in GB/s: ``processes`` forked readers (default one per usable CPU) each scan
    its slice of one shared buffer, ``rounds`` times; the fastest round, all readers together."""
    check_measure(size_mib, processes, rounds)
    workers = processes or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    size = size_mib * MIB
    buffer = mmap.mmap(-1, size)  # anonymous and shared: the children read the same pages
    chunk = bytes(range(1, 256)) * (4 * MIB // 255)  # no zero byte: the scan looks for 0 and never finds it
    for offset in range(0, size, len(chunk)):
        buffer[offset:offset + min(len(chunk), size - offset)] = chunk[:min(len(chunk), size - offset)]
    try:
        timed = _rounds(buffer, size, workers, rounds)
    finally:
        buffer.close()
    cpu = min(c for _, c in timed)
    wall = min(w for w, _ in timed)
    return RamBandwidth(size / cpu / 1e9, size, workers, rounds, cpu,
                        f"{workers} processes scan a {size_mib} MiB shared buffer with memchr (mmap.find), best of "
                        f"{rounds} rounds: bytes read / the slowest reader's CPU time (a busy machine's other "
                        "processes' turns on the cores are not counted; their share of the memory bus is)",
                        size / wall / 1e9)


#: What a reader writes to the parent: a letter, then the CPU seconds of its last scan (a little-endian double).
RECORD = 9


def _read_all(fd: int, count: int) -> bytes:
    got = b""
    while len(got) < count:
        data = os.read(fd, count - len(got))
        if not data:
            raise BadInput("the RAM read measurement lost a process; run it again with --processes 1")
        got += data
    return got


def _rounds(buffer: mmap.mmap, size: int, workers: int, rounds: int) -> list[tuple[float, float]]:
    """(wall seconds, the slowest reader's CPU seconds) of each round: ``workers`` forked processes, each scanning
    its slice once per round, started together (each reader has its own start pipe: one byte, one scan). Each first
    scans its slice untimed: a forked child maps the shared pages on first touch (a page fault per 4 KiB)."""
    step = -(-size // workers)
    done_r, done_w = os.pipe()
    starts = [os.pipe() for _ in range(workers)]
    pids = []
    for i in range(workers):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child (coverage does not follow a fork)
            code = 0
            try:
                os.close(done_r)
                low, high = i * step, min(size, (i + 1) * step)
                buffer.find(b"\x00", low, high)
                os.write(done_w, b"r" + struct.pack("<d", 0.0))
                for _ in range(rounds):
                    os.read(starts[i][0], 1)
                    began = time.process_time()
                    if buffer.find(b"\x00", low, high) != -1:
                        code = 3
                    os.write(done_w, b"d" + struct.pack("<d", time.process_time() - began))
            except BaseException:
                code = 4
            os._exit(code)
        pids.append(pid)
    os.close(done_w)
    for start_r, _ in starts:
        os.close(start_r)
    times = []
    try:
        _read_all(done_r, workers * RECORD)
        for _ in range(rounds):
            began = time.perf_counter()
            for _, start_w in starts:
                os.write(start_w, b"g")
            records = _read_all(done_r, workers * RECORD)
            wall = time.perf_counter() - began
            times.append((wall, max(struct.unpack_from("<d", records, i * RECORD + 1)[0] for i in range(workers))))
    finally:
        for _, start_w in starts:
            os.close(start_w)
        os.close(done_r)
        failed = 0
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            failed += os.waitstatus_to_exitcode(status) != 0
    if failed:
        raise BadInput(f"the RAM read measurement failed in {failed} of {workers} processes; run it again with "
                       "--processes 1")
    return times
