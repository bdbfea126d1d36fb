"""Model files for the engine-choice tests: real headers whose data is a hole (sparse), so a 30 GiB model costs no
disk, and config.json documents with a quantization_config as the quantizers write them."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any


def sparse_weights(path: Path, size: int) -> Path:
    """A weights file of ``size`` bytes taking no disk space: a GGUF v3 or safetensors header whose one tensor's data
    fills the rest (what a whole download has; labwright.tuning.model_dir checks exactly that)."""
    if path.suffix == ".gguf":
        name = b"weights"
        head = b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + struct.pack("<Q", len(name)) + name
        head += struct.pack("<I", 1)
        start = -(-(len(head) + 8 + 4 + 8) // 32) * 32  # the data begins at the 32-byte aligned offset
        head += struct.pack("<QIQ", (size - start) // 4, 0, 0)  # F32 elements, type 0, offset 0
    else:
        end = size - 8 - 256
        header = json.dumps({"weights": {"dtype": "U8", "shape": [end], "data_offsets": [0, end]}}).encode()
        head = struct.pack("<Q", 256) + header.ljust(256)
    with path.open("wb") as fh:
        fh.write(head)
        fh.truncate(size)
    return path


def quantized_config(config: dict[str, Any], method: str | None) -> dict[str, Any]:
    """``config`` with ``quantization_config.quant_method = method`` (None: an unquantized 16-bit model)."""
    out = dict(config)
    out.pop("quantization_config", None)
    if method is not None:
        out["quantization_config"] = {"quant_method": method, "bits": 4}
    return out
