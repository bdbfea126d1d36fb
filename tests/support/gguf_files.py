"""Real GGUF files for the KV planner's tests: ``gguf.GGUFWriter`` with ``{arch}.*`` metadata, a vocabulary and one
tensor, as llama.cpp's converters write them (the header is what the planner reads)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


def write_gguf(path: Path, arch: str, meta: dict, vocab: int = 100, tensor_bytes: int = 64) -> Path:
    """``meta``: key (without ``{arch}.``) -> an integer (uint32) or a list (an array of ints or bools)."""
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in meta.items():
        name = f"{arch}.{key}"
        if isinstance(value, list):
            writer.add_array(name, [v if isinstance(v, bool) else int(v) for v in value])
        else:
            writer.add_uint32(name, int(value))
    writer.add_token_list([f"t{i}" for i in range(vocab)])
    writer.add_tensor("token_embd.weight", np.zeros(tensor_bytes // 4, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
