"""Probes needed to find the context ceiling at 256-token pages on the REAL llama-server: the planner-seeded search
side by side with a blind binary search over the same range (the seed's method), in one run.

    .venv/bin/python benchmarks/probe_ceiling.py [--cache-types f16,q8_0] [--lo 8192] [--hi 262144] [--keep]

Target (issue 6): the seeded search needs at most 5 restarts where the blind one needs 9 or more.
The server runs in a lab container with limits.memory=512MiB (support.probe_box), on a tiny GGUF; a
start above the ceiling is SIGKILLed by the OOM killer, exactly as the probe meets it on a real box.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import _support  # noqa: F401  (tests/support on sys.path)

from labwright.testing.lab_fixture import ensure_test_lab
from labwright.tuning.kv import read_layout
from labwright.tuning.probe import CeilingResult, Probe, cache_spec, llamacpp_target, probe_ceiling
from labwright.tuning.probe_guest import LxdGuest
from support.probe_box import llama_box

TARGET_SEEDED, TARGET_BLIND = 5, 9
PAGE = 256


def said(probe: Probe) -> str:
    """``candidate:outcome``, with the guest's anonymous memory the start was judged at (MiB), and its seconds."""
    memory = probe.guest_memory or {}
    anon = f"@{memory['anon_bytes'] / 2**20:.1f}" if memory.get("anon_bytes") is not None else ""
    return f"{probe.candidate}:{probe.outcome}{anon}:{probe.seconds:.0f}s"


def run(guest: LxdGuest, cache: str, lo: int, hi: int, config: Path, blind: bool) -> tuple[CeilingResult, float]:
    target = llamacpp_target(guest, "llama-server", cache_spec("llamacpp", cache))
    started = time.monotonic()
    result = probe_ceiling(guest, target, lo, hi, PAGE, layout=read_layout(config), blind=blind)
    return result, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-types", default="f16,q8_0")
    parser.add_argument("--lo", type=int, default=8192)
    parser.add_argument("--hi", type=int, default=262144)
    parser.add_argument("--keep", action="store_true", help="keep the container (its name is printed)")
    args = parser.parse_args()
    lab = ensure_test_lab()
    rows = []
    with tempfile.TemporaryDirectory(prefix="lw-probe-bench-") as tmp:
        name = ""
        try:
            began = time.monotonic()
            name, config = llama_box(lab, Path(tmp), prefix="lwbprobe")
            print(f"container {name} (limits.memory=512MiB, real llama-server) ready in "
                  f"{time.monotonic() - began:.0f}s", file=sys.stderr)
            guest = LxdGuest(name, lab.client)
            for cache in args.cache_types.split(","):
                seeded, seeded_s = run(guest, cache, args.lo, args.hi, config, blind=False)
                blind, blind_s = run(guest, cache, args.lo, args.hi, config, blind=True)
                rows.append((cache, seeded, seeded_s, blind, blind_s))
                for label, result in (("seeded", seeded), ("blind", blind)):
                    print(f"  {cache} {label}: " + ", ".join(map(said, result.probes)), file=sys.stderr)
        finally:
            if name and not args.keep:
                lab.remove(name)
    print(f"context ceiling of the real llama-server under 512 MiB, {args.lo:,}..{args.hi:,}, {PAGE}-token pages")
    print(f"{'cache':8}{'planner':>10}{'seeded':>10}{'probes':>8}{'time':>8}   {'blind':>10}{'probes':>8}{'time':>8}"
          f"{'ratio':>8}")
    ok = True
    for cache, seeded, seeded_s, blind, blind_s in rows:
        ratio = len(blind.probes) / len(seeded.probes)
        print(f"{cache:8}{seeded.predicted or 0:>10,}{seeded.ceiling or 0:>10,}{len(seeded.probes):>8}"
              f"{seeded_s:>7.0f}s   {blind.ceiling or 0:>10,}{len(blind.probes):>8}{blind_s:>7.0f}s{ratio:>7.1f}x")
        ok = ok and len(seeded.probes) <= TARGET_SEEDED and len(blind.probes) >= TARGET_BLIND
        if seeded.ceiling != blind.ceiling:
            print(f"  note: the two ceilings differ by {abs((seeded.ceiling or 0) - (blind.ceiling or 0)):,} tokens:"
                  " at the very edge the same start sometimes fits and sometimes is killed (page cache left)")
    print(f"target: seeded <= {TARGET_SEEDED} probes, blind >= {TARGET_BLIND} -> {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
