"""Read a Hugging Face config.json into a per-layer cache model (labwright.tuning.kv_layout).

Which kind each layer is, in the order transformers (and the engines) decide it, from the language model's section
(``text_config`` when the config nests one):
  layer_types (Gemma 2/3/4, gpt-oss, Qwen3-Next/3.5, LFM2, Granite 4, ...), hybrid_override_pattern (Nemotron-H:
  '*' attention, 'M' Mamba, '-' MLP, 'E' MoE), layers_block_type, hybrid_layer_pattern (MiMo-V2: 1 = sliding),
  attn_layer_period/offset (Jamba), full_attn_idxs (early LFM2), no_rope_layers + attention_chunk_size (Llama 4:
  0 = global NoPE layer, 1 = chunked), full_attention_interval (Qwen3-Next/3.5), sliding_window_pattern (Gemma),
  use_sliding_window + max_window_layers (Qwen2), a bare sliding_window (Mistral v0.1: every layer), else all full.
Widths per layer kind: num_key_value_heads / head_dim, with the global layers' own num_global_key_value_heads /
global_head_dim (Gemma 4), the sliding layers' swa_* keys (MiMo-V2), v_head_dim apart from head_dim, MLA's
kv_lora_rank + qk_rope_head_dim, and num_kv_shared_layers (Gemma 3n/4: the last N layers reuse earlier KV).
Keys that describe a layer structure labwright does not read are refused by name; an unknown model_type with no
such key is planned as full attention on every layer, with a note saying so.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from labwright.errors import BadInput
from labwright.textio import parse_json, read_text
from labwright.tuning.data import kv_data
from labwright.tuning.kv_layout import KvLayout, Layer
from labwright.tuning.kv_limits import MAX_LAYERS, MAX_VALUE, count, short

__all__ = ["KvLayout", "Layer", "layout_from_dict", "load_json", "read_layout"]

_FIX = "pass the model's Hugging Face config.json"
_MAX_CONFIG_BYTES = 16 * 1024 * 1024  # the largest config.json (with a vision tower and a chat template) is ~100 KB


class _Config:
    """Key lookup: the language model's section, then the top level, then the model type's transformers defaults."""

    def __init__(self, path: Path, top: dict[str, Any]):
        self.path = path
        self.top = top
        data = kv_data()
        self.where = ""
        self.section = top
        for key in data["config"]["nested"]:
            if top.get(key) is not None and not isinstance(top[key], dict):
                raise self.fail(f"{key} is a JSON {type(top[key]).__name__}, not an object; {_FIX}")
            if isinstance(top.get(key), dict):
                self.section, self.where = top[key], f" (in {key})"
                break
        model_type = self.section.get("model_type") or top.get("model_type") or ""
        if not isinstance(model_type, str) or not model_type.isprintable() or len(model_type) > 64:
            raise self.fail(f"model_type is {short(model_type)} ({type(model_type).__name__}), not a model type "
                            f"name; {_FIX}")
        self.model_type = model_type
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

    def fail(self, text: str) -> BadInput:
        return BadInput(f"config {self.path}: {text}")

    def integer(self, key: str, required: bool = True, fix: str = _FIX, maximum: int = MAX_VALUE) -> int:
        value = self.raw(key)
        if value is None:
            if required:
                raise self.fail(f"missing {key}{self.where}; {fix}")
            return 0
        if value == 0 and not required and not isinstance(value, bool):
            return 0    # an optional count or size written as 0 (Gemma 4's num_kv_shared_layers: 0): not set
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail(f"{key} is {short(value)}{self.where}, not a positive integer; {_FIX}")
        try:
            return count(value, key, maximum=maximum)   # the bound every metadata number has (kv_limits)
        except ValueError as exc:
            raise self.fail(f"{exc}{self.where}; {_FIX}") from None

    def first_integer(self, keys: list[str], maximum: int = MAX_VALUE) -> int:
        for key in keys:
            if self.has(key):
                return self.integer(key, maximum=maximum)
        raise self.fail(f"missing {keys[0]}{self.where}; {_FIX}")

    def sequence(self, key: str, layers: int, chars: bool = False) -> list[Any]:
        value = self.raw(key)
        if chars and isinstance(value, str):
            value = list(value)
        if not isinstance(value, list):
            raise self.fail(f"{key} is a {type(value).__name__}, not a list; {_FIX}")
        if len(value) != layers:
            raise self.fail(f"{key} has {len(value)} entries but num_hidden_layers is {layers}{self.where}: the "
                            "two contradict each other; " + _FIX)
        # one layer's entry is a name, a number or a flag (transformers writes nothing else here)
        odd = next((v for v in value if not isinstance(v, (str, int)) or (isinstance(v, str) and len(v) > 64)), None)
        if odd is not None:
            raise self.fail(f"{key} holds {short(odd)} ({type(odd).__name__}), not a layer's kind{self.where}; "
                            + _FIX)
        return value


def load_json(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """The config.json at ``path`` (a file, or a model directory holding one) as a dict; one-line errors."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    # Missing, a directory, a device, binary or not UTF-8, too large: one line naming the file (labwright.textio).
    text = read_text(path, "the model's Hugging Face config.json (or a .gguf file)", max_bytes=_MAX_CONFIG_BYTES)
    doc = parse_json(text, f"config {path}", f"the model's Hugging Face config.json; {_FIX}")
    if not isinstance(doc, dict):
        raise BadInput(f"config {path}: the top level is a JSON {type(doc).__name__}, not an object; {_FIX}")
    if "weight_map" in doc:
        raise BadInput(f"config {path}: this is a safetensors index (weight_map), not config.json; pass the "
                       "config.json beside it")
    return path, doc


def read_layout(path: str | Path) -> KvLayout:
    """The cache layout of the model at ``path``: a config.json, a model directory, or a GGUF file."""
    from labwright.tuning import kv_gguf

    if kv_gguf.is_gguf(path):
        return kv_gguf.read_gguf_layout(path)
    file, top = load_json(path)
    return layout_from_dict(top, file)


def layout_from_dict(top: dict[str, Any], path: str | Path = "config.json") -> KvLayout:
    cfg = _Config(Path(path), top)
    layers = _layer_count(cfg)
    _refuse_unread_structure(cfg)
    kinds = _layer_kinds(cfg, layers)
    built = _widths(cfg, kinds)
    built = _shared_kv(cfg, built)
    max_context = cfg.integer("max_position_embeddings", required=False) or None
    from labwright.tuning.kv_state import state_bytes

    return KvLayout(source=str(path), model_type=cfg.model_type, layers=tuple(built), max_context=max_context,
                    notes=tuple(dict.fromkeys(cfg.notes)), state_bytes=state_bytes(cfg.section, built),
                    section=cfg.section)


def _layer_count(cfg: _Config) -> int:
    keys = kv_data()["config"]["layers"]
    if not any(cfg.has(key) for key in keys) and isinstance(cfg.raw("layers_block_type"), list):
        # transformers NemotronHConfig (v5): num_hidden_layers is deprecated, the count is len(layers_block_type);
        # Nemotron 3 Ultra's config.json has no num_hidden_layers at all.
        layers = len(cfg.raw("layers_block_type"))
        if not 0 < layers <= MAX_LAYERS:
            raise cfg.fail(f"layers_block_type has {layers:,} entries, not a layer count (1 to {MAX_LAYERS:,}); {_FIX}")
        cfg.notes.append(f"no num_hidden_layers: {layers} layers, the length of layers_block_type (as transformers)")
        return layers
    return cfg.first_integer(keys, maximum=MAX_LAYERS)


# --- which kind each layer is ------------------------------------------------------------------------------------

def _refuse_unread_structure(cfg: _Config) -> None:
    """Keys that describe which layers attend, that labwright does not read: refuse them by name."""
    rules = kv_data()["structure"]
    pattern = re.compile(rules["key_pattern"])
    known = set(rules["read"]) | set(rules["ignored"])
    unread = sorted(key for key in cfg.section if pattern.search(key) and key not in known
                    and cfg.section[key] not in (None, [], ""))
    if unread:
        raise cfg.fail(f"{', '.join(unread)}{cfg.where}: a per-layer structure labwright does not read, so it "
                       "cannot say which layers keep a KV cache; planning it as full attention could be far off")
    types = kv_data()["model_types"]
    if cfg.model_type and cfg.model_type not in types["known"]:
        cfg.notes.append(f"model_type {cfg.model_type!r} is not one labwright knows: every layer planned as full "
                         "attention unless config.json says otherwise (an over-estimate for a hybrid or sliding model)")


def _by_name(cfg: _Config, key: str, values: list[Any]) -> list[Layer]:
    names = kv_data()["layer_types"]
    layers = []
    for index, value in enumerate(values):
        text = str(value).lower()
        kind = next((k for k, members in names.items() if text in members), None)
        if kind is None:
            known = "; ".join(f"{k}: {', '.join(members)}" for k, members in names.items())
            raise cfg.fail(f"{key}[{index}] = {value!r} is not a known layer type ({known})")
        layers.append(Layer(kind, name=text if kind in ("state", "none") else ""))
    return layers


def _layer_kinds(cfg: _Config, layers: int) -> list[Layer]:
    window = cfg.integer("sliding_window", required=False) or cfg.integer("sliding_window_size", required=False)
    if cfg.raw("use_sliding_window") is False:
        window = 0
    chunk = cfg.integer("attention_chunk_size", required=False)
    max_context = cfg.integer("max_position_embeddings", required=False)
    wide = bool(window and max_context and window >= max_context)
    if wide:
        cfg.notes.append(f"sliding_window {window:,} >= max_position_embeddings {max_context:,}: every layer sees the "
                         "whole context, planned as full attention")
        window = 0
    mod = cfg.raw("full_attn_mod")
    if mod not in (None, 1):
        raise cfg.fail(f"full_attn_mod = {mod!r}{cfg.where}: labwright reads only 1 (every layer full attention)")
    found = _from_lists(cfg, layers, chunk)
    if found is None:
        found = _from_periods(cfg, layers, window)
    if wide:
        found = [Layer("full") if layer.kind == "sliding" else layer for layer in found]
    if any(layer.kind == "sliding" for layer in found):
        if not window:
            raise cfg.fail(f"layers are sliding but there is no sliding_window{cfg.where}; add the window size to "
                           "config.json")
        found = [Layer("sliding", window=window) if layer.kind == "sliding" else layer for layer in found]
    if any(layer.kind == "chunked" for layer in found):
        if not chunk:
            raise cfg.fail(f"layers are chunked but there is no attention_chunk_size{cfg.where}")
        found = [Layer("chunked", window=chunk) if layer.kind == "chunked" else layer for layer in found]
    return found


def _from_lists(cfg: _Config, layers: int, chunk: int) -> list[Layer] | None:
    """Explicit per-layer lists and strings."""
    if cfg.raw("layer_types") is not None:
        return _by_name(cfg, "layer_types", cfg.sequence("layer_types", layers))
    if cfg.raw("layers_block_type") is not None:
        return _by_name(cfg, "layers_block_type", cfg.sequence("layers_block_type", layers))
    if cfg.raw("hybrid_override_pattern") is not None:
        symbols = kv_data()["hybrid_override_pattern"]
        pattern = cfg.sequence("hybrid_override_pattern", layers, chars=True)
        bad = sorted({c for c in pattern if c not in symbols})
        if bad:
            raise cfg.fail(f"hybrid_override_pattern has {', '.join(map(repr, bad))}, not one of "
                           f"{', '.join(f'{k!r} ({v})' for k, v in symbols.items())}")
        return [Layer("full") if symbols[c] == "attention" else Layer(
            "state" if symbols[c] == "mamba" else "none", name=symbols[c]) for c in pattern]
    if cfg.raw("hybrid_layer_pattern") is not None:
        # MiMo-V2 (transformers MiMoV2FlashConfig): 1 = sliding-window attention, 0 = full attention.
        pattern = cfg.sequence("hybrid_layer_pattern", layers)
        if any(value not in (0, 1) for value in pattern):
            raise cfg.fail("hybrid_layer_pattern holds values other than 0 (full) and 1 (sliding)")
        return [Layer("sliding" if value else "full") for value in pattern]
    if cfg.raw("full_attn_idxs") is not None:
        indices = cfg.raw("full_attn_idxs")
        if not isinstance(indices, list) or any(not isinstance(i, int) or not 0 <= i < layers for i in indices):
            raise cfg.fail(f"full_attn_idxs must list layer indices below num_hidden_layers {layers}")
        return [Layer("full") if i in indices else Layer("state", name="conv") for i in range(layers)]
    if chunk and cfg.raw("no_rope_layers") not in (None, []):
        # Llama 4 (transformers Llama4TextConfig): 1 = RoPE layer with chunked local attention, 0 = global NoPE layer.
        # An empty list means the default, every no_rope_layer_interval-th layer global (_from_periods).
        flags = cfg.sequence("no_rope_layers", layers)
        return [Layer("chunked" if flag else "full") for flag in flags]
    return None


def _from_periods(cfg: _Config, layers: int, window: int) -> list[Layer]:
    """Layer kinds given by a period, or uniform."""
    if chunk_interval := (cfg.integer("attention_chunk_size", required=False)
                          and cfg.integer("no_rope_layer_interval", required=False)):
        return [Layer("chunked") if (i + 1) % chunk_interval else Layer("full") for i in range(layers)]
    if cfg.has("attn_layer_period"):
        # Jamba: layer i is attention when i % period == offset, Mamba otherwise.
        period, offset = cfg.integer("attn_layer_period"), cfg.raw("attn_layer_offset")
        offset = 0 if offset is None else offset
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < period:
            raise cfg.fail(f"attn_layer_offset is {short(offset)}{cfg.where}, not a whole number from 0 to "
                           f"{period - 1} (attn_layer_period {period}: else no layer is attention); {_FIX}")
        return [Layer("full") if i % period == offset else Layer("state", name="mamba") for i in range(layers)]
    if cfg.has("full_attention_interval"):
        interval = cfg.integer("full_attention_interval")
        return [Layer("full") if (i + 1) % interval == 0 else Layer("state", name="linear_attention")
                for i in range(layers)]
    if cfg.model_type in kv_data()["model_types"]["parallel_hybrid"]:
        # Falcon-H1: attention and Mamba side by side in every layer; the KV is every layer's.
        return [Layer("full") for _ in range(layers)]
    if not window:
        return [Layer("full") for _ in range(layers)]
    key = "sliding_window_pattern" if cfg.has("sliding_window_pattern") else "_sliding_window_pattern"
    text = cfg.raw(key)
    if isinstance(text, str) and text and set(text.upper()) <= {"L", "G"}:
        # EXAONE 4's string form (transformers 5.23.0 configuration_exaone4.py docstring, lines 32-39): "LLLG" = L
        # local (sliding), G global, repeating from layer 0; the final layer is always global.
        pattern_text = text.upper()
        return [Layer("full") if pattern_text[i % len(pattern_text)] == "G" or i == layers - 1 else Layer("sliding")
                for i in range(layers)]
    if cfg.has(key):
        pattern = cfg.integer(key)
        return [Layer("full") if (i + 1) % pattern == 0 else Layer("sliding") for i in range(layers)]
    if cfg.raw("use_sliding_window") is True and cfg.has("max_window_layers"):
        # transformers' Qwen2 family: layers from index max_window_layers on use the window.
        first = cfg.integer("max_window_layers")
        return [Layer("sliding") if i >= first else Layer("full") for i in range(layers)]
    cfg.notes.append(f"sliding_window {window} with no layer pattern: every layer is sliding (as Mistral v0.1)")
    return [Layer("sliding") for _ in range(layers)]


# --- how wide each layer is --------------------------------------------------------------------------------------

def _widths(cfg: _Config, kinds: list[Layer]) -> list[Layer]:
    if not any(layer.attends for layer in kinds):
        return kinds
    if cfg.has("kv_lora_rank"):
        # DeepSeek multi-head latent attention: one latent and one shared rope key per token per layer, the way
        # vLLM's MLAAttentionSpec (head_size = kv_lora_rank + qk_rope_head_dim, one "head", no K/V pair) and
        # exllamav3's cache/mla.py store it: (512 + 64) x 2 bytes per layer at 16 bits for DeepSeek-V3.
        latent, rope = cfg.integer("kv_lora_rank"), cfg.integer("qk_rope_head_dim")
        return [Layer("mla", 1, latent + rope, 0) if layer.kind == "full" else layer for layer in kinds]
    if not cfg.has("num_key_value_heads") and not cfg.has("num_attention_heads"):
        raise cfg.fail(f"missing num_key_value_heads and num_attention_heads{cfg.where}; {_FIX}")
    if cfg.has("num_key_value_heads"):
        kv_heads = cfg.integer("num_key_value_heads")
    else:
        kv_heads = cfg.integer("num_attention_heads")
        cfg.notes.append("no num_key_value_heads: taken as num_attention_heads (multi-head attention, as transformers)")
    _check_heads(cfg, "num_key_value_heads", kv_heads)
    if cfg.has("head_dim"):
        head_dim = cfg.integer("head_dim")
    else:
        fix = "add head_dim (or hidden_size and num_attention_heads) to config.json"
        hidden, heads = cfg.integer("hidden_size", fix=fix), cfg.integer("num_attention_heads", fix=fix)
        if hidden % heads:
            # transformers computes head_dim = hidden_size // num_attention_heads and its attention reshapes fail
            # when that leaves a remainder: no such model runs.
            raise cfg.fail(f"hidden_size {hidden} is not divisible by num_attention_heads {heads}{cfg.where}: no "
                           f"head size fits; {_FIX} (or add its head_dim)")
        head_dim = hidden // heads
    v_dim = cfg.integer("v_head_dim", required=False) or head_dim
    # Global (full-attention) layers with their own heads and sizes: Gemma 4 num_global_key_value_heads /
    # global_head_dim; MiMo-V2 gives the sliding layers their own swa_* keys instead.
    # transformers Gemma4TextConfig applies num_global_key_value_heads to the full layers only while
    # attention_k_eq_v is true (a config without the key counts as true); with false they keep num_key_value_heads.
    global_heads = cfg.integer("num_global_key_value_heads", required=False)
    if cfg.raw("attention_k_eq_v") is False:
        global_heads = 0
    full_heads = global_heads or kv_heads
    full_dim = cfg.integer("global_head_dim", required=False) or head_dim
    full_v = cfg.integer("global_head_dim", required=False) or v_dim
    swa_heads = cfg.integer("swa_num_key_value_heads", required=False) or kv_heads
    if cfg.model_type in ("mimo_v2", "mimo_v2_flash") and not cfg.has("swa_num_key_value_heads"):
        # transformers 5.23.0 MiMoV2FlashConfig has no swa_* keys: its attention gives the sliding layers twice the
        # KV heads (models/mimo_v2_flash/modeling_mimo_v2_flash.py line 341: `num_key_value_heads * 2 if is_swa`),
        # which is what the published config says with swa_num_key_value_heads 8 beside num_key_value_heads 4.
        swa_heads = 2 * kv_heads
        cfg.notes.append(f"no swa_num_key_value_heads: sliding layers keep 2 x {kv_heads} KV heads (transformers "
                         "MiMoV2Flash attention)")
    swa_dim = cfg.integer("swa_head_dim", required=False) or head_dim
    swa_v = cfg.integer("swa_v_head_dim", required=False) or (swa_dim if cfg.has("swa_head_dim") else v_dim)
    out = []
    for layer in kinds:
        if layer.kind == "full":
            out.append(Layer("full", full_heads, full_dim, full_v))
        elif layer.kind in ("sliding", "chunked"):
            out.append(Layer(layer.kind, swa_heads, swa_dim, swa_v, layer.window))
        else:
            out.append(layer)
    return out


def _check_heads(cfg: _Config, key: str, kv_heads: int) -> None:
    """Grouped-query attention shares each KV head among a whole number of query heads: more KV heads than heads,
    or a count that does not divide them, is no model transformers (or any engine) can build."""
    if not cfg.has("num_attention_heads"):
        return
    heads = cfg.raw("num_attention_heads")
    if not isinstance(heads, int) or isinstance(heads, bool) or heads <= 0:
        cfg.integer("num_attention_heads")  # its own one-line refusal
    if kv_heads > heads:
        raise cfg.fail(f"{key} {kv_heads} is more than num_attention_heads {heads}{cfg.where}: each KV head serves "
                       f"one or more query heads, so there are at most {heads}; {_FIX}")
    if heads % kv_heads:
        raise cfg.fail(f"num_attention_heads {heads} is not a multiple of {key} {kv_heads}{cfg.where}: query heads "
                       f"are shared evenly among KV heads; {_FIX}")


def _shared_kv(cfg: _Config, layers: list[Layer]) -> list[Layer]:
    """Gemma 3n/4: the last num_kv_shared_layers layers read the KV of an earlier layer of their kind, keep none."""
    shared = cfg.integer("num_kv_shared_layers", required=False)
    if not shared:
        return layers
    if shared >= len(layers):
        raise cfg.fail(f"num_kv_shared_layers {shared} is not below num_hidden_layers {len(layers)}")
    cfg.notes.append(f"the last {shared} layers reuse earlier layers' KV (num_kv_shared_layers): no cache of their own")
    return layers[:-shared] + [Layer("none", name="shared_kv") for _ in layers[-shared:]]
