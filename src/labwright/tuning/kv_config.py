"""Read a Hugging Face config.json into the shape of its KV cache: which layers keep one, and how wide it is.

Layers are counted the way transformers builds them: `layer_types` when given; else `full_attention_interval`
(hybrids such as Qwen3.5: every Nth layer is full attention, the rest linear/recurrent with no KV); else a sliding
window with `sliding_window_pattern` (Gemma: every Pth layer global), `max_window_layers` (Qwen2 with
use_sliding_window) or on every layer (Mistral v0.1); else every layer is full attention (a plain transformer).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labwright.errors import BadInput
from labwright.tuning.data import kv_data

_FIX = "pass the model's Hugging Face config.json"


@dataclass(frozen=True)
class KvLayout:
    """What one token costs in cache, per layer kind. Elements are per layer per token."""

    source: str
    model_type: str
    total_layers: int
    full_layers: int
    sliding_layers: int
    window: int | None
    kv_heads: int
    head_dim: int
    k_elements: int
    v_elements: int
    attention: str = "gqa"
    no_cache_kinds: tuple[tuple[str, int], ...] = ()
    max_context: int | None = None
    notes: tuple[str, ...] = ()
    section: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def kv_layers(self) -> int:
        return self.full_layers + self.sliding_layers

    def describe(self) -> str:
        """One line: '8 of 32 layers keep a KV cache (8 full attention; 24 linear_attention without), 4 KV heads x
        256 head_dim'."""
        parts = [f"{self.full_layers} full attention"]
        if self.sliding_layers:
            parts.append(f"{self.sliding_layers} sliding window {self.window}")
        parts += [f"{count} {kind} without" for kind, count in self.no_cache_kinds]
        width = (f"MLA latent {self.k_elements} + rope {self.v_elements}" if self.attention == "mla"
                 else f"{self.kv_heads} KV heads x {self.head_dim} head_dim")
        return f"{self.kv_layers} of {self.total_layers} layers keep a KV cache ({'; '.join(parts)}), {width}"


class _Config:
    """Key lookup: the language model's section, then the top level, then the model type's transformers defaults."""

    def __init__(self, path: Path, top: dict[str, Any]):
        self.path = path
        self.top = top
        data = kv_data()
        self.where = ""
        self.section = top
        for key in data["config"]["nested"]:
            if isinstance(top.get(key), dict):
                self.section, self.where = top[key], f" (in {key})"
                break
        self.model_type = str(self.section.get("model_type") or top.get("model_type") or "")
        defaults = data["model_defaults"]
        self.defaults: dict[str, Any] = defaults.get(self.model_type) or defaults.get(str(top.get("model_type"))) or {}
        self.notes: list[str] = []

    def raw(self, key: str) -> Any:
        for place in (self.section, self.top):
            if place.get(key) is not None:
                return place[key]
        if key in self.defaults:
            self.notes.append(f"{key} = {self.defaults[key]}: not in config.json, the {self.model_type} default")
            return self.defaults[key]
        return None

    def has(self, key: str) -> bool:
        return self.raw(key) is not None

    def integer(self, key: str, required: bool = True, fix: str = _FIX) -> int:
        value = self.raw(key)
        if value is None:
            if required:
                raise BadInput(f"config {self.path}: missing {key}{self.where}; {fix}")
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise BadInput(f"config {self.path}: {key} is {value!r}{self.where}, not a positive integer; {_FIX}")
        return value

    def first_integer(self, keys: list[str]) -> int:
        for key in keys:
            if self.has(key):
                return self.integer(key)
        raise BadInput(f"config {self.path}: missing {keys[0]}{self.where}; {_FIX}")


def load_json(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """The config.json at ``path`` (a file, or a model directory holding one) as a dict; one-line errors."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        text = path.read_text()
    except OSError as exc:
        raise BadInput(f"config {path}: cannot read it ({exc.strerror or exc}); {_FIX}") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"config {path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                       f"{_FIX}") from exc
    if not isinstance(doc, dict):
        raise BadInput(f"config {path}: the top level is a JSON {type(doc).__name__}, not an object; {_FIX}")
    return path, doc


def read_layout(path: str | Path) -> KvLayout:
    """The KV shape of the model whose config.json is at ``path``."""
    path, top = load_json(path)
    return layout_from_dict(top, path)


def layout_from_dict(top: dict[str, Any], path: str | Path = "config.json") -> KvLayout:
    cfg = _Config(Path(path), top)
    layers = cfg.first_integer(kv_data()["config"]["layers"])
    full, sliding, window, without = _layer_kinds(cfg, layers)
    attention, kv_heads, head_dim, k_elements, v_elements = _width(cfg)
    max_context = cfg.integer("max_position_embeddings", required=False) or None
    return KvLayout(
        source=str(path), model_type=cfg.model_type, total_layers=layers, full_layers=full, sliding_layers=sliding,
        window=window if sliding else None, kv_heads=kv_heads, head_dim=head_dim, k_elements=k_elements,
        v_elements=v_elements, attention=attention, no_cache_kinds=tuple(sorted(without.items())),
        max_context=max_context, notes=tuple(dict.fromkeys(cfg.notes)), section=cfg.section,
    )


def _width(cfg: _Config) -> tuple[str, int, int, int, int]:
    """(attention kind, KV heads, head_dim, K elements, V elements) per layer per token."""
    if cfg.has("kv_lora_rank"):
        # Multi-head latent attention (DeepSeek): one latent and one shared rope key per token, as exllamav3's
        # CacheLayer_MLA_fp16 and vLLM store it: (512 + 64) x 2 bytes per layer at 16 bits for DeepSeek-V3.
        latent, rope = cfg.integer("kv_lora_rank"), cfg.integer("qk_rope_head_dim")
        return "mla", 1, latent + rope, latent, rope
    if not cfg.has("num_key_value_heads") and not cfg.has("num_attention_heads"):
        raise BadInput(f"config {cfg.path}: missing num_key_value_heads and num_attention_heads{cfg.where}; {_FIX}")
    if cfg.has("num_key_value_heads"):
        kv_heads = cfg.integer("num_key_value_heads")
    else:
        kv_heads = cfg.integer("num_attention_heads")
        cfg.notes.append("no num_key_value_heads: taken as num_attention_heads (multi-head attention, as transformers)")
    if cfg.has("head_dim"):
        head_dim = cfg.integer("head_dim")
    else:
        fix = "add head_dim (or hidden_size and num_attention_heads) to config.json"
        hidden, heads = cfg.integer("hidden_size", fix=fix), cfg.integer("num_attention_heads", fix=fix)
        head_dim = hidden // heads
    return "gqa", kv_heads, head_dim, kv_heads * head_dim, kv_heads * head_dim


def _layer_kinds(cfg: _Config, layers: int) -> tuple[int, int, int | None, dict[str, int]]:
    """(full-attention layers, sliding-window layers, window, {kind: count} of layers without a KV cache)."""
    names = kv_data()["layer_types"]
    window = cfg.integer("sliding_window", required=False) or None
    if cfg.raw("use_sliding_window") is False:
        window = None
    layer_types = cfg.raw("layer_types")
    if layer_types is not None:
        return _from_layer_types(cfg, layer_types, layers, window, names)
    if cfg.has("full_attention_interval"):
        interval = cfg.integer("full_attention_interval")
        full = layers // interval
        return full, 0, None, {"linear_attention": layers - full} if layers > full else {}
    if window is None:
        return layers, 0, None, {}
    pattern = cfg.raw("sliding_window_pattern") or cfg.raw("_sliding_window_pattern")
    if pattern is not None:
        pattern = cfg.integer("sliding_window_pattern" if cfg.has("sliding_window_pattern")
                              else "_sliding_window_pattern")
        full = layers // pattern
        return full, layers - full, window, {}
    if cfg.raw("use_sliding_window") is True and cfg.has("max_window_layers"):
        # transformers' Qwen2 family: layers from index max_window_layers on use the window.
        sliding = max(0, layers - cfg.integer("max_window_layers"))
        return layers - sliding, sliding, window, {}
    cfg.notes.append(f"sliding_window {window} with no layer pattern: every layer is sliding (as Mistral v0.1)")
    return 0, layers, window, {}


def _from_layer_types(cfg: _Config, layer_types: Any, layers: int, window: int | None,
                      names: dict[str, list[str]]) -> tuple[int, int, int | None, dict[str, int]]:
    if not isinstance(layer_types, list):
        raise BadInput(f"config {cfg.path}: layer_types is a {type(layer_types).__name__}, not a list; {_FIX}")
    if len(layer_types) != layers:
        raise BadInput(f"config {cfg.path}: layer_types has {len(layer_types)} entries but num_hidden_layers is "
                       f"{layers}{cfg.where}; {_FIX}")
    kinds: Counter[str] = Counter()
    without: Counter[str] = Counter()
    for index, name in enumerate(layer_types):
        kind = next((k for k, members in names.items() if str(name).lower() in members), None)
        if kind is None:
            known = "; ".join(f"{k}: {', '.join(members)}" for k, members in names.items())
            raise BadInput(f"config {cfg.path}: layer_types[{index}] = {name!r} is not a known layer type ({known})")
        kinds[kind] += 1
        if kind == "none":
            without[str(name)] += 1
    if kinds["sliding"] and window is None:
        raise BadInput(f"config {cfg.path}: layer_types has sliding layers but no sliding_window{cfg.where}; "
                       "add the window size to config.json")
    return kinds["full"], kinds["sliding"], window, dict(without)
