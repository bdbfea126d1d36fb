"""A downloaded model directory: the weights' size on disk and the format they are in.

Weights: the *.gguf files of ONE model (shards "-00001-of-00003.gguf" summed, mmproj vision projectors left out), or
the *.safetensors the index names (else all of them, less Mistral's duplicate consolidated.safetensors).
Format: GGUF from the files; else config.json quantization_config.quant_method (exl3, awq, gptq, fp8 ...) or the
quantization_config.json exllamav3 writes beside it; else unquantized safetensors.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labwright.errors import BadInput
from labwright.textio import loads_json
from labwright.tuning.data import fit_data
from labwright.tuning.kv_config import load_json
from labwright.tuning.kv_limits import short

_SHARD = re.compile(r"(?a)^(?P<stem>.+)-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)
_LFS = b"version https://git-lfs"


@dataclass(frozen=True)
class ModelDir:
    path: Path
    weights_bytes: int
    weight_files: tuple[str, ...]
    format: str
    format_reason: str
    config: Path | None
    notes: tuple[str, ...] = ()


def _size(path: Path) -> int:
    """The weight file's size, once its own header agrees the file is whole (a half-finished download or copy is
    refused by name: its size would make any model "fit")."""
    size = path.stat().st_size
    if size < 1024:
        with path.open("rb") as fh:
            if fh.read(len(_LFS)) == _LFS:
                raise BadInput(f"model dir {path.parent}: {path.name} is a Git LFS pointer, not the weights; "
                               "run `git lfs pull` in the model directory")
    if path.suffix.lower() == ".gguf":
        from labwright.tuning.kv_gguf import read_metadata

        _, tensors = read_metadata(path)  # truncated header or tensor data: one line naming the file
        if tensors == 0:
            raise BadInput(f"model dir {path.parent}: {path.name} holds no tensors (a header or vocabulary only), "
                           "not a model's weights; download the model's GGUF again")
    elif path.suffix.lower() == ".safetensors":
        needed = _safetensors_bytes(path, size)
        if size < needed:
            raise BadInput(f"model dir {path.parent}: {path.name} is truncated: its header says {needed:,} bytes, the "
                           f"file has {size:,}; finish the download")
    return size


_MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024  # the format's own limit (safetensors refuses larger headers)


def _safetensors_bytes(path: Path, size: int) -> int:
    """The bytes a .safetensors file must have: 8 + its JSON header + the end of its last tensor's data."""
    where = f"model dir {path.parent}: {path.name}"
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise BadInput(f"{where} is {size} bytes, too short for a safetensors file; download it again")
        length = int.from_bytes(head, "little")
        if length > min(_MAX_SAFETENSORS_HEADER, size - 8):
            raise BadInput(f"{where}: its header length ({length:,} bytes) runs past the file ({size:,} bytes): "
                           "truncated or not a safetensors file; download it again")
        try:
            header = loads_json(fh.read(length))
        except ValueError:
            raise BadInput(f"{where}: its header is not JSON: not a safetensors file, or damaged; download it "
                           "again") from None
    if not isinstance(header, dict):
        raise BadInput(f"{where}: its header is not a JSON object: not a safetensors file; download it again")
    ends = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        # the format's own rule (safetensors: 0 <= begin <= end; an end past the file is truncation, said below)
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise BadInput(f"{where}: tensor {str(name)[:60]!r} has data_offsets {str(offsets)[:40]}, not a byte "
                           "range: damaged or not a safetensors file; download it again")
        ends.append(offsets[1])
    if not ends:
        raise BadInput(f"{where} holds no tensors, not a model's weights; download it again")
    return 8 + length + max(ends)


def _gguf_files(directory: Path, notes: list[str]) -> list[Path]:
    files = sorted(p for p in directory.glob("*.gguf") if p.is_file())
    projectors = [p for p in files if p.name.lower().startswith("mmproj")]
    if projectors:
        notes.append(f"left out the vision projector {', '.join(p.name for p in projectors)} (add it if you load it)")
    models: dict[str, list[Path]] = defaultdict(list)
    for path in files:
        if path not in projectors:
            match = _SHARD.match(path.name)
            models[match.group("stem") if match else path.name].append(path)
    if len(models) > 1:
        raise BadInput(f"model dir {directory}: holds {len(models)} GGUF models ({', '.join(sorted(models))}); "
                       "pass --weights-gb, or a directory with one model")
    return next(iter(models.values()), [])


def _safetensors_files(directory: Path) -> list[Path]:
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            values = list(loads_json(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BadInput(f"model dir {directory}: {index.name} is unreadable ({exc}); download it again") from exc
        # each weight file is a plain file name beside the index (transformers writes them so): not a path out
        # of the model directory, not a number
        odd = next((v for v in values if not isinstance(v, str) or not v or "/" in v or "\\" in v
                    or v in (".", "..") or not v.isprintable()), None)
        if odd is not None or not values:
            said = f"names {short(odd)}, not a file name beside it" if values else "is empty"
            raise BadInput(f"model dir {directory}: {index.name}'s weight_map {said}; download the index again")
        names = sorted(set(values))
        missing = [name for name in names if not (directory / name).is_file()]
        if missing:
            raise BadInput(f"model dir {directory}: {index.name} names {missing[0]}, which is missing; "
                           "finish the download")
        return [directory / name for name in names]
    files = sorted(p for p in directory.glob("*.safetensors") if p.is_file())
    rest = [p for p in files if not p.name.startswith("consolidated")]
    return rest or files


def detect_format(directory: Path, config: dict[str, Any] | None, has_gguf: bool) -> tuple[str, str]:
    """(format key, why) for a model directory."""
    if has_gguf:
        return "gguf", "*.gguf files"
    methods = fit_data()["quant_methods"]
    quant = (config or {}).get("quantization_config")
    if quant is not None and not isinstance(quant, dict):
        raise BadInput(f"model dir {directory}: config.json's quantization_config is a JSON {type(quant).__name__}, "
                       "not an object; download config.json again")
    if isinstance(quant, dict) and quant.get("quant_method"):
        method = str(quant["quant_method"]).lower()
        return methods.get(method, method), f"config.json quantization_config.quant_method = {method!r}"
    sidecar = directory / "quantization_config.json"
    if sidecar.is_file():
        try:
            method = str(loads_json(sidecar.read_text()).get("quant_method", "")).lower()
        except (OSError, ValueError, AttributeError):
            method = ""
        if method:
            return methods.get(method, method), f"quantization_config.json quant_method = {method!r}"
    return "safetensors", "no quantization_config: 16-bit safetensors"


def read_model_dir(directory: str | Path) -> ModelDir:
    directory = Path(directory)
    if not directory.is_dir():
        raise BadInput(f"model dir {directory}: not a directory; pass the folder that holds config.json and weights")
    notes: list[str] = []
    files = _gguf_files(directory, notes)
    has_gguf = bool(files)
    if not files:
        files = _safetensors_files(directory)
    if not files:
        raise BadInput(f"model dir {directory}: no *.safetensors or *.gguf weights; download them or pass --weights-gb")
    config_path = directory / "config.json"
    config_doc = load_json(config_path)[1] if config_path.is_file() else None
    fmt, reason = detect_format(directory, config_doc, has_gguf)
    return ModelDir(directory, sum(_size(p) for p in files), tuple(p.name for p in files), fmt, reason,
                    config_path if config_doc is not None else None, tuple(notes))
