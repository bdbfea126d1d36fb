"""The bench harness's own overhead: its client-side timings vs the REAL llama-server's own ``timings``, side by side.

One run of ``labwright bench`` (the library, in this process) against llama-server on 127.0.0.1 serving the tiny
GGUF (labwright.llamacpp.tiny_model; the binary from labwright.llamacpp.build, cached). For each context, over the
cached trials (medians):

- TTFT as the client sees it vs the server's ``prompt_ms``: the difference is what the harness adds to a prefill
  measurement (HTTP, the chat template and tokenizing the request, sampling the first token, our parsing);
- the client's decode window (total - TTFT) vs the server's ``predicted_ms``, and the tok/s both imply.

It also times the SSE parser alone on an in-memory stream, to show the client is never what limits a decode rate.

    .venv/bin/python benchmarks/bench_overhead.py [--contexts 256,1024,4096] [--decode 128] [--trials 5]

Target: at 1024+ tokens the harness's prefill and decode tok/s within 10% of the server's own (a loaded machine
widens it; the tiny model's tens of thousands of tok/s are a much harder case than a real model's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from labwright.bench.runner import BenchConfig, parse_contexts, run
from labwright.bench.sse import iter_events
from labwright.llamacpp.build import build_llama_server
from labwright.llamacpp.tiny_model import TinyModel, write_tiny_gguf

PORT = 18319


def start_server(binary: Path, model: Path, ctx: int, log: Path) -> subprocess.Popen:
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(PORT), "-c", str(ctx), "-np", "1",
           "--alias", "tiny"]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=5):
                return proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"llama-server did not start:\n{log.read_text()[-2000:]}")


def parser_rate(events: int = 100_000) -> float:
    chunk = json.dumps({"choices": [{"index": 0, "delta": {"content": "ab"}, "finish_reason": None}],
                        "id": "chatcmpl-x", "model": "tiny", "object": "chat.completion.chunk"})
    lines = [f"data: {chunk}\n".encode(), b"\n"] * events
    started = time.perf_counter()
    for event in iter_events(lines):
        event.json()
    return events / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", default="256,1024,4096")
    parser.add_argument("--decode", type=int, default=128)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    contexts = parse_contexts(args.contexts)

    print("… llama-server (cached build) and the tiny GGUF", file=sys.stderr)
    binary = build_llama_server()
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        model = write_tiny_gguf(Path(tmp) / "tiny.gguf", TinyModel(context_length=max(contexts) * 2))
        server = start_server(binary, model, max(contexts) + args.decode + 64, Path(tmp) / "server.log")
        try:
            result = run(BenchConfig(url=f"http://127.0.0.1:{PORT}/v1", model="tiny", contexts=contexts,
                                     decode=args.decode, trials=args.trials),
                         progress=lambda line: print(f"  {line}", file=sys.stderr))
        finally:
            server.terminate()
            server.wait(10)

    print(f"llama-server {binary.parent.name}, tiny GGUF, {args.decode} decode tokens, median of the "
          f"{args.trials - 1} cached trials (trial 1 = cold, left out)")
    header = (f"{'context':>8} {'TTFT ms':>9} {'server prompt ms':>17} {'harness +ms':>12} "
              f"{'prefill client/server':>22} {'decode window ms':>17} {'server predicted ms':>20} "
              f"{'decode client/server':>21}")
    print(header)
    ratios = []
    for context in result.results:
        warm = context.trials[1:] or context.trials
        ttft = statistics.median(t.ttft_s * 1000 for t in warm)
        prompt_ms = statistics.median(float((t.timings or {})["prompt_ms"]) for t in warm)
        window = statistics.median((t.total_s - t.ttft_s) * 1000 for t in warm)
        predicted_ms = statistics.median(float((t.timings or {})["predicted_ms"]) for t in warm)
        prefill = statistics.median(t.prefill_tps for t in warm)
        server_prefill = statistics.median((t.server_prefill_tps or 0.0) for t in warm)
        decode = statistics.median((t.decode_tps or 0.0) for t in warm)
        server_decode = statistics.median((t.server_decode_tps or 0.0) for t in warm)
        p_ratio, d_ratio = prefill / server_prefill, decode / server_decode
        if context.context >= 1024:
            ratios += [p_ratio, d_ratio]
        print(f"{context.context:>8} {ttft:>9.1f} {prompt_ms:>17.1f} {ttft - prompt_ms:>12.1f} "
              f"{f'{prefill:,.0f}/{server_prefill:,.0f} = {p_ratio:.2f}':>22} {window:>17.1f} {predicted_ms:>20.1f} "
              f"{f'{decode:,.0f}/{server_decode:,.0f} = {d_ratio:.2f}':>21}")
    rate = parser_rate()
    print(f"SSE parser alone: {rate:,.0f} events/s (one event per decoded token)")
    worst = max((abs(1 - r) for r in ratios), default=0.0)
    print(f"target: client tok/s within 10% of the server's at 1024+ tokens: {'met' if worst <= 0.10 else 'MISSED'} "
          f"(worst {worst:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
