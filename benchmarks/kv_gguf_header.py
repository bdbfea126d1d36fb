"""Benchmark: `kv plan` on a GGUF with a large tensor section reads the header only (target: under 50 ms).

Writes a GGUF header mirroring Qwen3.5-27B's (llama.cpp qwen35 keys, a 151,936-token vocabulary as string arrays,
one tensor table entry per real tensor) and extends the file sparsely to 40 GiB of tensor data, then times, in one run:
  header   labwright.tuning.kv_gguf.read_gguf_layout (metadata + tensor table, through a memory map)
  plan     the whole `kv plan` computation on that layout (layout + bytes/token + tokens in a 2.4 GiB budget)
  first MB reading the file's first MiB with plain read(), the floor any header reader pays
Prints each as median milliseconds over 20 runs and as a ratio to the 50 ms target.

    .venv/bin/python benchmarks/kv_gguf_header.py [--size-gib 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np

from labwright.tuning import kv, kv_gguf, kv_modes

TARGET_MS = 50.0


def write_header(path: Path, size_gib: float) -> None:
    arch = "qwen35"
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in {"block_count": 64, "context_length": 262144, "embedding_length": 5120,
                       "attention.head_count": 24, "attention.head_count_kv": 4, "attention.key_length": 256,
                       "attention.value_length": 256, "full_attention_interval": 4}.items():
        writer.add_uint32(f"{arch}.{key}", value)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"token-{i:06d}" for i in range(151_936)])
    writer.add_token_types([1] * 151_936)
    writer.add_token_merges([f"a{i} b{i}" for i in range(150_000)])
    for layer in range(64):   # ~13 tensors a layer, as a real 27B GGUF has ~850 entries
        for name in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                     "ffn_down", "ssm_a", "ssm_conv1d", "ssm_dt", "ssm_out"):
            writer.add_tensor(f"blk.{layer}.{name}.weight", np.zeros(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with path.open("r+b") as handle:
        handle.truncate(int(size_gib * 1024**3))   # sparse: the tensor section is holes


def median_ms(action, runs: int = 20) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=40.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "Qwen3.5-27B-sparse.gguf"
        write_header(path, args.size_gib)
        spec = kv_modes.ggml_type("q4_0")

        def header() -> None:
            kv_gguf.read_gguf_layout(path)

        def plan() -> None:
            kv.plan(kv.read_layout(path), spec, context=131_072, budget=int(2.4 * 1024**3))

        def first_mb() -> None:
            with path.open("rb") as handle:
                handle.read(1024 * 1024)

        rows = [("header", median_ms(header)), ("plan", median_ms(plan)), ("first MB", median_ms(first_mb))]
        size = os.stat(path).st_size
        print(f"file: {size / 1024**3:.1f} GiB apparent, {os.stat(path).st_blocks * 512 / 1024**2:.1f} MiB on disk")
        print(f"{'what':10} {'ms':>8} {'/ 50 ms target':>15}")
        for name, value in rows:
            print(f"{name:10} {value:8.2f} {value / TARGET_MS:15.2f}")
        layout = kv.read_layout(path)
        print(f"layout: {layout.describe()}")


if __name__ == "__main__":
    main()
