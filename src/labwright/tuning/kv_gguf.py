"""A GGUF file's cache layout from its metadata: the header only, never the tensor data.

The header is the key/value metadata and the tensor table at the start of the file (GGUF v2/v3, little-endian: magic
"GGUF", version, tensor count, KV count, then the KVs, then one name/shape/type/offset entry per tensor). It is read
through a memory map, so a 40 GB file costs what its header costs; string arrays (the vocabulary) are skipped, not
decoded. The tensor table is read to check that the file really holds the data it announces (a truncated download
is refused, naming how short it is).

Layers are built the way llama.cpp builds them (src/llama-model.cpp load_hparams, names from src/llama-arch.cpp):
``%s.block_count``; ``%s.attention.head_count_kv`` (one number, or one per layer: 0 = a layer without KV, as in
Nemotron-H, Jamba, LFM2, Granite 4); ``%s.attention.key_length`` / ``value_length`` (default n_embd / n_head), and
``key_length_swa`` / ``value_length_swa`` for sliding layers; ``%s.attention.sliding_window`` with
``%s.attention.sliding_window_pattern`` (a per-layer bool array, or a period) or the pattern llama.cpp sets in code
(data/kv-cache.toml [gguf.swa_pattern]); ``%s.attention.recurrent_layers`` or ``%s.full_attention_interval``
(Qwen3-Next/3.5: interval 4 when the file has neither, as llama.cpp assumes); ``%s.attention.kv_lora_rank`` +
``%s.rope.dimension_count`` (MLA); ``%s.attention.shared_kv_layers`` (Gemma 3n: the last layers reuse KV).
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

from labwright.errors import BadInput
from labwright.tuning.data import kv_data
from labwright.tuning.kv_layout import KvLayout, Layer
from labwright.tuning.kv_limits import MAX_LAYERS, MAX_VALUE, count
from labwright.tuning.kv_state import gguf_state_bytes

MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_FIX = "download the file again (or pass its config.json)"

# ggml type -> (elements per block, bytes per block), for the size of each tensor in the table. gguf's own table.
try:
    from gguf import GGML_QUANT_SIZES as _QUANT_SIZES

    _BLOCKS: dict[int, tuple[int, int]] = {int(key): value for key, value in _QUANT_SIZES.items()}
except ImportError:  # pragma: no cover - gguf ships with labwright's dependencies
    _BLOCKS = {}


class _Truncated(Exception):
    pass


class _Header:
    """Sequential little-endian reads over a memory map, refusing to run past its end."""

    def __init__(self, view: memoryview):
        self.view = view
        self.pos = 0

    def take(self, size: int) -> int:
        start = self.pos
        if start + size > len(self.view):
            raise _Truncated
        self.pos += size
        return start

    def scalar(self, code: int) -> Any:
        fmt = _SCALARS[code]
        return struct.unpack_from(fmt, self.view, self.take(struct.calcsize(fmt)))[0]

    def u32(self) -> int:
        return int(self.scalar(4))

    def u64(self) -> int:
        return int(self.scalar(10))

    def string(self) -> str:
        size = self.u64()
        start = self.take(size)
        return bytes(self.view[start:start + size]).decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        view, pos, end = self.view, self.pos, len(self.view)
        unpack = struct.Struct("<Q").unpack_from
        for _ in range(count):
            if pos + 8 > end:
                raise _Truncated
            pos += 8 + unpack(view, pos)[0]
        if pos > end:
            raise _Truncated
        self.pos = pos

    def value(self, code: int, keep: bool) -> Any:
        if code in _SCALARS:
            return self.scalar(code)
        if code == _STRING:
            return self.string()
        if code == _ARRAY:
            item, count = self.u32(), self.u64()
            if item == _STRING:
                if keep:
                    return [self.string() for _ in range(count)]
                self.skip_strings(count)
                return None
            if item not in _SCALARS:
                raise ValueError(f"an array of value type {item}")
            size = struct.calcsize(_SCALARS[item])
            start = self.take(size * count)
            if not keep:
                return None
            return list(struct.unpack_from(f"<{count}{_SCALARS[item][1]}", self.view, start))
        raise ValueError(f"value type {code}")


def is_gguf(path: str | Path) -> bool:
    """A .gguf name, or a regular file that starts with the GGUF magic (a pipe is not sniffed: that would block
    on one nobody writes to, and eat the first bytes of one somebody does)."""
    path = Path(path)
    if path.suffix.lower() == ".gguf":
        return True
    try:
        if not path.is_file():
            return False
        with path.open("rb") as handle:
            return handle.read(4) == MAGIC
    except OSError:
        return False


def read_metadata(path: str | Path) -> tuple[dict[str, Any], int]:
    """(metadata without the tokenizer's string arrays, tensor count); one-line errors for anything not a whole GGUF."""
    return _read(Path(path), None)


def read_tensors(path: str | Path) -> tuple[dict[str, Any], list[tuple[str, int, int]]]:
    """(metadata, one (name, elements, bytes) per tensor of the tensor table): what a token reads (labwright.tuning.
    speed counts routed experts at the share the router picks)."""
    tensors: list[tuple[str, int, int]] = []
    metadata, _ = _read(Path(path), tensors)
    return metadata, tensors


def _read(path: Path, collect: list[tuple[str, int, int]] | None) -> tuple[dict[str, Any], int]:
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise BadInput(f"GGUF {path}: cannot read it ({exc.strerror or exc}); {_FIX}") from exc
    with handle:
        size = path.stat().st_size
        if size < 4:
            raise BadInput(f"GGUF {path}: {size} bytes, not a GGUF file; {_FIX}")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                return _parse(path, view, size, collect)
            except _Truncated:
                raise BadInput(f"GGUF {path}: truncated: the header runs past the end of the file ({size:,} bytes); "
                               f"{_FIX}") from None
            except (ValueError, struct.error) as exc:
                raise BadInput(f"GGUF {path}: unreadable header ({exc}); {_FIX}") from None
            finally:
                view.release()


def _parse(path: Path, view: memoryview, size: int,
           collect: list[tuple[str, int, int]] | None = None) -> tuple[dict[str, Any], int]:
    head = bytes(view[:4])
    if head != MAGIC:
        raise BadInput(f"GGUF {path}: not a GGUF file (it starts with {head!r}, not b'GGUF'); pass a .gguf model "
                       "file or a config.json")
    reader = _Header(view)
    reader.take(4)
    version = reader.u32()
    if version not in (2, 3):
        order = "big-endian or unknown" if version > 0xFFFF else "unsupported"
        raise BadInput(f"GGUF {path}: version {version} ({order}); labwright reads GGUF v2 and v3, little-endian")
    tensors, count = reader.u64(), reader.u64()
    metadata: dict[str, Any] = {}
    for _ in range(count):
        key = reader.string()
        code = reader.u32()
        metadata[key] = reader.value(code, keep=not key.startswith("tokenizer."))
    end_of_data = _tensor_table(reader, tensors, _alignment(metadata.get("general.alignment", 32), path), collect)
    if end_of_data > size:
        raise BadInput(f"GGUF {path}: truncated: its tensor table needs {end_of_data:,} bytes but the file has "
                       f"{size:,} ({end_of_data - size:,} missing); {_FIX}")
    return metadata, tensors


def _alignment(value: Any, path: Path) -> int:
    """``general.alignment``: a power of two (ggml/src/gguf.cpp refuses the file otherwise: "alignment %zu is not a
    power of 2"); 32 when the key is absent."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1 << 31 or value & (value - 1):
        raise BadInput(f"GGUF {path}: general.alignment {value!r} is not a power of two (llama.cpp refuses this file "
                       f"too); {_FIX}")
    return value


def _tensor_table(reader: _Header, tensors: int, alignment: int,
                  collect: list[tuple[str, int, int]] | None = None) -> int:
    """The byte offset where the last tensor ends, from the tensor table (names, shapes, types, offsets); each
    tensor's (name, elements, bytes) appended to ``collect`` when given."""
    end = 0
    for _ in range(tensors):
        if collect is None:
            reader.skip_strings(1)
        else:
            name = reader.string()
        dims = reader.u32()
        if dims > 8:
            raise ValueError(f"a tensor with {dims} dimensions")
        elements = 1
        for _ in range(dims):
            elements *= reader.u64()
        kind, offset = reader.u32(), reader.u64()
        block, block_bytes = _BLOCKS.get(kind, (1, 0))
        end = max(end, offset + elements // block * block_bytes)
        if collect is not None:
            collect.append((name, elements, elements // block * block_bytes))
    start = -(-reader.pos // alignment) * alignment
    return start + end if tensors else reader.pos


def _per_layer(value: Any, layers: int, key: str, path: Path) -> list[int]:
    if isinstance(value, list):
        if len(value) != layers:
            raise BadInput(f"GGUF {path}: {key} has {len(value)} entries but block_count is {layers}: the two "
                           "contradict each other")
        return [int(v) for v in value]
    return [int(value)] * layers


#: The ``{arch}.*`` keys the planner reads (here and in labwright.tuning.kv_state): each is a number, a bool or an
#: array of them, checked once by ``_checked`` before anything is built from it.
READ_KEYS = frozenset({
    "block_count", "context_length", "embedding_length", "feed_forward_length", "full_attention_interval",
    "nextn_predict_layers", "rope.dimension_count", "token_shift_count",
    "attention.head_count", "attention.head_count_kv", "attention.key_length", "attention.key_length_swa",
    "attention.value_length", "attention.value_length_swa", "attention.kv_lora_rank", "attention.recurrent_layers",
    "attention.shared_kv_layers", "attention.sliding_window", "attention.sliding_window_pattern",
    "ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.group_count", "wkv.head_size", "shortconv.l_cache"})


#: Of those, the ones llama.cpp reads per layer (an array is one entry per layer) or as the max of an array (the
#: recurrent state's sizes, labwright.tuning.kv_state); every other one is a single number.
ARRAY_KEYS = frozenset({"attention.head_count", "attention.head_count_kv", "feed_forward_length",
                        "attention.recurrent_layers", "attention.sliding_window_pattern", "ssm.conv_kernel",
                        "ssm.inner_size", "ssm.state_size", "ssm.group_count", "wkv.head_size", "shortconv.l_cache",
                        "token_shift_count"})


def _checked(metadata: dict[str, Any], arch: str, path: Path) -> dict[str, Any]:
    """``metadata`` with every key the planner reads checked where it enters: a whole number in range (labwright.
    tuning.kv_limits), a bool, or an array of them no longer than a model can be deep; anything else is one line
    naming the key."""
    checked = dict(metadata)
    for suffix in READ_KEYS:
        key = f"{arch}.{suffix}"
        value = metadata.get(key)
        if value is None:
            checked.pop(key, None)     # not in the file, as far as the planner is concerned
            continue
        if isinstance(value, bool):
            continue
        try:
            if isinstance(value, list) and suffix not in ARRAY_KEYS:
                raise ValueError(f"{key} is an array, not one number")
            if isinstance(value, list):
                if len(value) > MAX_LAYERS:
                    raise ValueError(f"{key} has {len(value):,} entries, more than any model has layers "
                                     f"(at most {MAX_LAYERS:,})")
                checked[key] = [v if isinstance(v, bool) else count(v, f"{key}[{i}]") for i, v in enumerate(value)]
            else:
                checked[key] = count(value, key, maximum=MAX_LAYERS if suffix == "block_count" else MAX_VALUE)
        except ValueError as exc:
            raise BadInput(f"GGUF {path}: {exc}; {_FIX}") from None
    return checked


def layout_from_metadata(metadata: dict[str, Any], path: str | Path = "model.gguf") -> KvLayout:
    """The per-layer cache of a GGUF model from its metadata, as llama.cpp reads it."""
    path = Path(path)
    arch = metadata.get("general.architecture") or ""
    if not isinstance(arch, str):
        raise BadInput(f"GGUF {path}: general.architecture is a {type(arch).__name__} ({arch!r}), not a string; "
                       f"{_FIX}")
    if not arch:
        raise BadInput(f"GGUF {path}: no general.architecture in its metadata; {_FIX}")
    if not arch.isprintable() or len(arch) > 64:
        raise BadInput(f"GGUF {path}: general.architecture {arch[:64]!r} is not an architecture name; {_FIX}")
    metadata = _checked(metadata, arch, path)

    def get(name: str, default: Any = None) -> Any:
        return metadata.get(f"{arch}.{name}", default)

    if get("block_count") is None:
        raise BadInput(f"GGUF {path}: no {arch}.block_count in its metadata; {_FIX}")
    if isinstance(get("block_count"), (bool, list)) or not get("block_count"):
        raise BadInput(f"GGUF {path}: {arch}.block_count is {get('block_count')!r}, not a layer count; {_FIX}")
    layers = get("block_count")
    data = kv_data()["gguf"]
    notes: list[str] = []
    if arch in data["recurrent"]:
        built = [Layer("state", name=data["recurrent"][arch]) for _ in range(layers)]
        return KvLayout(str(path), arch, tuple(built), _context(get), tuple(notes),
                        state_bytes=_state(metadata, arch, layers, notes), origin="gguf")
    heads = _per_layer(get("attention.head_count", 0), layers, f"{arch}.attention.head_count", path)
    kv_heads = _per_layer(get("attention.head_count_kv", heads), layers, f"{arch}.attention.head_count_kv", path)
    embd = int(get("embedding_length", 0))
    default_dim = embd // max(heads) if embd and max(heads) else 0
    k_dim = int(get("attention.key_length", default_dim))
    v_dim = int(get("attention.value_length", k_dim))
    k_swa = int(get("attention.key_length_swa", k_dim))
    v_swa = int(get("attention.value_length_swa", v_dim))
    sliding = _sliding_flags(get, arch, layers, data, path, notes)
    window = _window(get, arch, layers, data)
    chunk = data["chunked"].get(arch)
    if chunk and get("attention.sliding_window") is not None and window == 0:
        chunk = None   # llama.cpp: a Llama 4 GGUF with sliding_window = 0 has no chunked layers
    recurrent_at = _recurrent_flags(get, arch, layers, data, path)
    lora = int(get("attention.kv_lora_rank", 0))
    state_name = data["hybrid"].get(arch, "recurrent")
    # Nemotron-H: a layer is recurrent only when both head_count_kv and feed_forward_length are 0 there; the MLP/MoE
    # layers have neither KV nor state (llama.cpp 0034230 src/llama-model.cpp load_hparams LLM_ARCH_NEMOTRON_H).
    ffn = (_per_layer(get("feed_forward_length", 0), layers, f"{arch}.feed_forward_length", path)
           if arch in data["layers"]["recurrent_needs_no_ffn"] else [0] * layers)
    built = []
    for index in range(layers):
        if recurrent_at[index]:
            built.append(Layer("state", name=state_name))
        elif kv_heads[index] == 0 and ffn[index]:
            built.append(Layer("none", name="mlp"))
        elif kv_heads[index] == 0:
            built.append(Layer("state" if arch in data["hybrid"] else "none", name=state_name))
        elif lora:
            built.append(Layer("mla", 1, lora + int(get("rope.dimension_count", 0)), 0))
        elif chunk and index % chunk["period"] < chunk["period"] - 1:
            built.append(Layer("chunked", kv_heads[index], k_dim, v_dim, int(chunk["chunk"])))
        elif sliding[index] and window:
            built.append(Layer("sliding", kv_heads[index], k_swa, v_swa, window))
        else:
            built.append(Layer("full", kv_heads[index], k_dim, v_dim))
    if any(layer.attends and not layer.k_dim for layer in built):
        raise BadInput(f"GGUF {path}: no {arch}.attention.key_length and no embedding_length/head_count to derive "
                       f"it from; {_FIX}")
    shared = int(get("attention.shared_kv_layers", 0))
    if 0 < shared < layers:
        built = built[:-shared] + [Layer("none", name="shared_kv") for _ in range(shared)]
        notes.append(f"the last {shared} layers reuse earlier layers' KV ({arch}.attention.shared_kv_layers)")
    # NextN/MTP blocks at the end (GLM-4.5/4.6, Qwen3.5/3-Next, ...): llama.cpp keeps no KV cache for them.
    # load_hparams sets n_layer_kv_from_start = n_layer - nextn_predict_layers (src/llama-model.cpp LLM_ARCH_GLM4_MOE,
    # "GLM-4.5-Air (46 layers + 1 NextN layer)"; src/models/qwen35.cpp the same) and llama_hparams::has_kv(il) is
    # false from there on (src/llama-hparams.cpp), so the KV cache skips those layers.
    nextn = int(get("nextn_predict_layers", 0))
    if 0 < nextn < layers and not 0 < shared < layers:
        built = built[:-nextn] + [Layer("none", name="nextn") for _ in range(nextn)]
        notes.append(f"the last {nextn} layer(s) are NextN/MTP blocks ({arch}.nextn_predict_layers): llama.cpp keeps "
                     "no KV cache for them")
    # Layers without KV heads are planned as neither KV nor state only where the architecture says so (a hybrid's
    # recurrent layers, Nemotron-H's MLP blocks); anywhere else the file is broken or the architecture is one
    # labwright does not know as recurrent, and planning "0 bytes per token, any context fits" would be dangerous.
    headless = sum(1 for layer in built if layer.kind == "none" and layer.name == state_name)
    if not any(layer.attends or layer.kind == "state" for layer in built):
        raise BadInput(f"GGUF {path}: none of its {layers} layers has attention heads ({arch}.attention.head_count_kv "
                       f"is 0 or missing) and {arch} is not a recurrent architecture labwright knows; plan it from "
                       "its config.json instead, or " + _FIX)
    if headless and arch not in data["hybrid"]:
        notes.append(f"{headless} of {layers} layers have {arch}.attention.head_count_kv 0 and {arch} is not a hybrid "
                     "architecture labwright knows: planned with neither KV nor state for them (if they are "
                     "recurrent, their fixed state is not counted)")
    state: int | None = 0
    if arch in data["hybrid"]:
        # Falcon-H1 runs a Mamba2 mixer beside attention in every layer: all of them are recurrent too
        # (llama.cpp 0034230 src/llama-model.cpp LLM_ARCH_FALCON_H1: recurrent_layer_arr filled with true).
        parallel = arch in data["layers"]["parallel_hybrid"]
        recurrent = layers if parallel else sum(1 for layer in built if layer.kind == "state")
        state = _state(metadata, arch, recurrent, notes)
    return KvLayout(str(path), arch, tuple(built), _context(get), tuple(notes), state_bytes=state, origin="gguf")


def _recurrent_flags(get: Any, arch: str, layers: int, data: dict[str, Any], path: Path) -> list[bool]:
    """Layers llama.cpp marks recurrent from the file alone (Qwen3-Next / Qwen3.5: src/models/qwen3next.cpp).

    ``%s.attention.recurrent_layers`` (one flag per layer) wins; else every ``full_attention_interval``-th layer
    attends (4 when the file does not say, for the architectures in [gguf.layers] interval_default) and the others
    are recurrent, except the trailing ``%s.nextn_predict_layers`` MTP blocks. Other architectures: none here (their
    recurrent layers are the ones with head_count_kv 0).
    """
    flags = get("attention.recurrent_layers")
    if isinstance(flags, list):
        return _layer_flags(flags, layers, f"{arch}.attention.recurrent_layers", path)
    interval = int(get("full_attention_interval", data["layers"]["interval_default"].get(arch, 0)))
    if interval <= 0:
        return [False] * layers
    trunk = layers - int(get("nextn_predict_layers", 0))
    return [index < trunk and (index + 1) % interval != 0 for index in range(layers)]


def _layer_flags(flags: list[Any], layers: int, key: str, path: Path) -> list[bool]:
    """A per-layer flag array of the GGUF, refused when its length is not block_count."""
    if len(flags) != layers:
        raise BadInput(f"GGUF {path}: {key} has {len(flags)} entries but block_count is {layers}: the two "
                       "contradict each other")
    return [bool(flag) for flag in flags]


def _state(metadata: dict[str, Any], arch: str, recurrent: int, notes: list[str]) -> int | None:
    size = gguf_state_bytes(metadata, arch, recurrent)
    if size is None:
        notes.append(f"recurrent state per sequence not sized: the file lacks {arch}.ssm.* (or shortconv/wkv) keys")
    return size


def _context(get: Any) -> int | None:
    value = get("context_length")
    return int(value) if value else None


def _sliding_flags(get: Any, arch: str, layers: int, data: dict[str, Any], path: Path,
                   notes: list[str]) -> list[bool]:
    pattern = get("attention.sliding_window_pattern")
    if isinstance(pattern, list):
        return _layer_flags(pattern, layers, f"{arch}.attention.sliding_window_pattern", path)
    coded = _coded_pattern(get, arch, layers, data)
    period = int(pattern) if pattern else int(coded.get("period", 0))
    if period:
        # llama_hparams::set_swa_pattern(n_pattern, dense_first) (ggml-org/llama.cpp 01b77b57 src/llama-hparams.cpp
        # lines 8-18): dense_first puts the full layer first in each period (SmallThinker), else last.
        if coded.get("dense_first") and not pattern:
            return [index % period != 0 for index in range(layers)]
        return [index % period < period - 1 for index in range(layers)]
    if get("attention.sliding_window") and arch not in data["swa"]["uniform"]:
        # llama.cpp sets swa_type per architecture (load_hparams); for any other a window in the file is ignored
        # (Phi-3 says so in a warning) and every layer keeps the whole context.
        notes.append(f"{arch}.attention.sliding_window is set, but llama.cpp does not cap {arch}'s layers at a "
                     "window: every layer planned at the whole context")
        return [False] * layers
    return [bool(get("attention.sliding_window"))] * layers


def _coded_pattern(get: Any, arch: str, layers: int, data: dict[str, Any]) -> dict[str, Any]:
    """The SWA pattern llama.cpp sets in code for arch: {} when none (or when its layer-count condition fails)."""
    entry = data["swa_pattern"].get(arch)
    if entry is None:
        return {}
    if isinstance(entry, int):
        return {"period": entry}
    if "layers" in entry and layers != int(entry["layers"]):
        return {}                      # EXAONE 4: only the 64-layer 32B has SWA in llama.cpp
    if entry.get("needs_window") and not get("attention.sliding_window"):
        return {}                      # SmallThinker: SWA only when the file has a sliding_window > 0
    return dict(entry)


def _window(get: Any, arch: str, layers: int, data: dict[str, Any]) -> int:
    """The window llama.cpp uses: the file's, or the one it sets in code (forced for SmallThinker)."""
    coded = _coded_pattern(get, arch, layers, data)
    if coded.get("force_window"):
        return int(coded["force_window"])
    return int(get("attention.sliding_window", coded.get("window", 0)) or 0)


def read_gguf_layout(path: str | Path) -> KvLayout:
    metadata, _ = read_metadata(path)
    return layout_from_metadata(metadata, path)
