"""Kokoro streaming fix on the Kokoro-FastAPI STAND-IN: time to first audio before vs after, side by side.

The seed measured ~1400 ms -> ~575 ms to first audio on the real Kokoro (ONNX, CPU) for its two-sentence phrase,
total time unchanged. Real weights cannot be had here: this serves support.kokoro_standin's tree (its
"inference" blocks the event loop per call like ONNX does) with uvicorn on 127.0.0.1, unpatched, then with only
the sentence split, then with the full patch (split + yield points), and measures each with labwright.bench.tts.

    .venv/bin/python benchmarks/kokoro_streaming.py [-n 5] [--text FILE]

Target (issue 9): streamed first audio after the patch at most half of before, total within 10%.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import _support  # noqa: F401  (tests/support on sys.path)

from labwright.bench.tts import Result, bench_tts
from labwright.kokoro.streaming import KOKORO_V1, SPLIT_SOURCE, plan_streaming, read_tree, write_change
from support.kokoro_standin import serve, write_standin_tree

PHRASE = "Hi Mediclinic.  Your EHR project sounds interesting and has the potential for a lot of impact."


def measure(root: Path, text: str, runs: int) -> dict[bool, Result]:
    with serve(root) as url:
        return {r.stream: r for r in bench_tts(url, text, ["pcm"], runs=runs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5, help="timed requests per variant and mode")
    parser.add_argument("--text", type=Path, help="text to speak (default: the seed's two-sentence phrase)")
    args = parser.parse_args()
    text = args.text.read_text().strip() if args.text else PHRASE
    with tempfile.TemporaryDirectory() as tmp:
        variants = {}
        root = write_standin_tree(Path(tmp) / "unpatched")
        variants["unpatched"] = measure(root, text, args.n)
        split_only = write_standin_tree(Path(tmp) / "split-only")
        path = split_only / KOKORO_V1
        path.write_text(path.read_text().replace("split_pattern=r'\\n+'", f"split_pattern={SPLIT_SOURCE}"))
        variants["split only"] = measure(split_only, text, args.n)
        write_change(plan_streaming(read_tree(root)))
        variants["patched"] = measure(root, text, args.n)
    print(f"Kokoro-FastAPI STAND-IN, {len(text)} chars, pcm, median of {args.n}")
    print(f"{'variant':<12} {'first audio ms':>15} {'total ms':>10} {'whole-body first ms':>20}")
    for name, result in variants.items():
        print(f"{name:<12} {result[True].first_ms:>15.1f} {result[True].total_ms:>10.1f} "
              f"{result[False].first_ms:>20.1f}")
    before, after = variants["unpatched"][True], variants["patched"][True]
    assert before.first_ms and after.first_ms and before.total_ms and after.total_ms
    ratio, total = after.first_ms / before.first_ms, after.total_ms / before.total_ms
    print(f"first audio after/before: {ratio:.2f} (target <= 0.50); total after/before: {total:.2f} "
          "(target 0.90..1.10)")
    return 0 if ratio <= 0.5 and 0.9 <= total <= 1.1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
