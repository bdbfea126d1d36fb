"""KV-cache element sizes per engine, from data/kv-cache.toml: tabbyAPI cache_mode, llama.cpp/Ollama/vLLM types.

tabbyAPI's "k,v" modes follow field note 001's convention (bits/8 per element; exllamav3's fp16 scale per 32
elements only with ``count_scales``); ggml types use their real block sizes, scales included (q8_0 = 34 bytes per
32 elements).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from labwright.errors import BadInput
from labwright.tuning.data import kv_data

_KV_BITS = re.compile(r"(?a)^\s*(\d+)\s*,\s*(\d+)\s*$")


@dataclass(frozen=True)
class SlidingRule:
    """How an engine sizes a sliding-window (or chunked) layer: "full" (whole context) or "window": min(context,
    window + extra), rounded up to ``pad``, plus ``plus`` cells (vLLM's one extra block)."""

    kind: str
    extra: int = 0
    pad: int = 1
    source: str = ""
    model_types: tuple[str, ...] = ()
    plus: int = 0
    memory: tuple[tuple[str, int], ...] = ()   # per model type: cells kept below the batch, at least the window
    whole_below_memory: bool = False            # Ollama: the whole context once memory >= context
    checked: bool = True
    assumes: str = ""                           # the rule's condition, said in the plan's notes

    def for_model(self, model_type: str, from_gguf: bool = False) -> SlidingRule:
        """The rule as it applies to one model: engines that cap only some architectures keep the rest in full.
        A GGUF only carries a window when llama.cpp implements it for the architecture, so it is capped."""
        if self.kind == "window" and self.model_types and model_type not in self.model_types and not from_gguf:
            return SlidingRule("full", source=f"{model_type or 'this model type'} is not among the architectures "
                               f"the engine caps ({', '.join(self.model_types)})")
        return self

    def span(self, window: int, model_type: str = "") -> int:
        """Tokens the engine keeps per sequence before the batch: the window, or more (Ollama's gemma4/gpt-oss)."""
        return max([window] + [cells for name, cells in self.memory if name == model_type])

    def cells(self, context: int, window: int, model_type: str = "") -> int:
        """Cache cells one sliding layer holds at ``context`` tokens."""
        if self.kind == "full":
            return context
        span = self.span(window, model_type)
        if self.whole_below_memory and span >= context:
            cells = context                      # ollama kvcache/causal.go: swaMemorySize >= capacity -> capacity
        elif self.whole_below_memory:
            cells = span + self.extra            # ollama: swaMemorySize + maxBatch
        else:
            cells = min(context, span + self.extra)
        return -(-cells // self.pad) * self.pad + self.plus

    def note(self, kind: str, label: str) -> str | None:
        """The plan's 'assumes' line for this rule, when it rests on a condition or is not checked against source."""
        if not self.checked:
            return f"{label} {kind} layers: sized by an unchecked rule ({self.assumes or self.source})"
        if self.assumes:
            return f"{label} {kind} layers: {self.assumes}"
        return None


@dataclass(frozen=True)
class Engine:
    key: str
    label: str
    setting: str
    option: str
    convention: str
    convention_source: str
    sliding: SlidingRule
    chunked: SlidingRule
    common: tuple[str, ...]
    types: dict[str, Fraction]
    named: dict[str, tuple[int, int]]
    bits: tuple[int, int]
    scale: Fraction
    both_only: bool
    mla_assumes: str = ""


@dataclass(frozen=True)
class CacheSpec:
    """One cache setting of one engine: bytes per cached K element and per V element."""

    engine: Engine
    name: str
    k_bytes: Fraction
    v_bytes: Fraction
    convention: str
    sliding: SlidingRule
    chunked: SlidingRule

    def rule(self, kind: str) -> SlidingRule:
        return self.chunked if kind == "chunked" else self.sliding


def _rule(raw: dict[str, Any], prefix: str) -> SlidingRule:
    memory = tuple((str(name), int(cells)) for name, cells in raw.get(f"{prefix}_memory", {}).items())
    return SlidingRule(raw[prefix], int(raw.get(f"{prefix}_extra", 0)), int(raw.get(f"{prefix}_pad", 1)),
                       raw.get(f"{prefix}_source", ""), tuple(raw.get(f"{prefix}_model_types", ())),
                       int(raw.get(f"{prefix}_plus", 0)), memory,
                       bool(raw.get(f"{prefix}_whole_below_memory", False)),
                       bool(raw.get(f"{prefix}_checked", True)), str(raw.get(f"{prefix}_assumes", "")))


def _engine(key: str, raw: dict[str, Any]) -> Engine:
    sliding, chunked = _rule(raw, "sliding"), _rule(raw, "chunked")
    scale = Fraction(raw.get("scale_bytes", 0), raw.get("scale_block", 1))
    return Engine(
        key=key, label=raw["label"], setting=raw["setting"], option=raw["option"], convention=raw["convention"],
        convention_source=raw.get("convention_source", ""), sliding=sliding, chunked=chunked,
        common=tuple(raw["common"]),
        types={name: Fraction(size[0], size[1]) for name, size in raw.get("types", {}).items()},
        named={name.upper(): (bits[0], bits[1]) for name, bits in raw.get("named", {}).items()},
        bits=(int(raw.get("bits_min", 0)), int(raw.get("bits_max", 0))), scale=scale,
        both_only=bool(raw.get("both_only", False)), mla_assumes=str(raw.get("mla_assumes", "")),
    )


def engines() -> dict[str, Engine]:
    return {key: _engine(key, raw) for key, raw in kv_data()["engines"].items()}


def engine(key: str) -> Engine:
    known = engines()
    if key not in known:
        raise BadInput(f"engine {key!r} is unknown: use one of {', '.join(known)}")
    return known[key]


def tabby_mode(text: str, count_scales: bool = False, swa_full: bool = False) -> CacheSpec:
    """A tabbyAPI ``cache_mode``: FP16, Q4/Q6/Q8 or "K,V" bits (2..8 each), exactly as tabbyAPI accepts them."""
    eng = engine("tabbyapi")
    name = text.strip().upper()
    match = _KV_BITS.match(name)
    low, high = eng.bits
    if name in eng.named:
        k_bits, v_bits = eng.named[name]
    elif match and all(low <= int(bits) <= high for bits in match.groups()):
        k_bits, v_bits = int(match.group(1)), int(match.group(2))
        name = f"{k_bits},{v_bits}"
    else:
        raise BadInput(f"cache mode {text!r} is not one tabbyAPI takes ({eng.setting}): use FP16, "
                       f"{', '.join(n for n in eng.named if n != 'FP16')} or 'K,V' with {low}..{high} bits each "
                       f"(e.g. 8,4)")
    quantized = max(k_bits, v_bits) <= high
    extra = eng.scale if quantized and count_scales else Fraction(0)
    convention = ("bits/8 (field note 001)" if quantized and not extra else "bits/8 + fp16 scale per 32" if extra
                  else "16-bit")
    return CacheSpec(eng, name, Fraction(k_bits, 8) + extra, Fraction(v_bits, 8) + extra, convention,
                     *_windowed(eng, swa_full))


def ggml_type(text: str, engine_key: str | None = None, swa_full: bool = False) -> CacheSpec:
    """A cache type "T" or "K,V" (llama.cpp -ctk/-ctv, Ollama OLLAMA_KV_CACHE_TYPE, vLLM --kv-cache-dtype)."""
    names = [part.strip().lower() for part in text.split(",")]
    if engine_key == "tabbyapi":
        raise BadInput(f"cache type {text!r}: tabbyAPI takes --cache-mode (FP16, Q8, 8,4 ...), not --cache-type")
    order = [engine_key] if engine_key else list(kv_data()["lookup"]["cache_type_order"])
    eng = next((engine(key) for key in order if names[0] in engine(key).types), engine(order[0]))
    bad = [name for name in names if name not in eng.types]
    if len(names) > 2 or bad or not all(names):
        raise BadInput(f"cache type {text!r} is not one {eng.label} supports ({eng.setting}): use one of "
                       f"{', '.join(eng.types)}" + ("" if eng.both_only else ", or K,V such as q8_0,q4_0"))
    if len(set(names)) > 1 and eng.both_only:
        raise BadInput(f"cache type {text!r}: {eng.label} takes one type for K and V ({eng.setting}): "
                       f"use one of {', '.join(eng.types)}")
    k_name, v_name = names[0], names[-1]
    name = k_name if k_name == v_name else f"{k_name},{v_name}"
    return CacheSpec(eng, name, eng.types[k_name], eng.types[v_name], "ggml block" if eng.key != "vllm" else "dtype",
                     *_windowed(eng, swa_full))


def _windowed(eng: Engine, swa_full: bool) -> tuple[SlidingRule, SlidingRule]:
    """(sliding rule, chunked rule); llama.cpp's --swa-full sizes both at the whole context (llama-kv-cache-iswa)."""
    if swa_full:
        return SlidingRule("full", source="--swa-full"), SlidingRule("full", source="--swa-full")
    return eng.sliding, eng.chunked


def resolve(cache_mode: str | None, cache_type: str | None, engine_key: str | None = None,
            count_scales: bool = False, swa_full: bool = False) -> CacheSpec | None:
    """The one cache setting the options name, or None when they name none."""
    if cache_mode and cache_type:
        raise BadInput("--cache-mode (tabbyAPI) and --cache-type (llama.cpp/Ollama/vLLM) both given: pass one")
    if engine_key is not None:
        engine(engine_key)
    if cache_mode:
        if engine_key not in (None, "tabbyapi"):
            raise BadInput(f"--cache-mode is tabbyAPI's setting, not {engine(engine_key).label}'s: use --cache-type")
        return tabby_mode(cache_mode, count_scales, swa_full)
    if cache_type:
        return ggml_type(cache_type, engine_key, swa_full)
    return None


def named(name: str, engine_key: str, count_scales: bool = False, swa_full: bool = False) -> CacheSpec:
    """A cache setting by its engine's own name (the form a data table lists it in)."""
    if engine_key == "tabbyapi":
        return tabby_mode(name, count_scales, swa_full)
    return ggml_type(name, engine_key, swa_full)


def common(engine_key: str | None = None, count_scales: bool = False, swa_full: bool = False) -> list[CacheSpec]:
    """The table's rows when no cache setting is given: the common modes of one engine, or of the default engines."""
    keys = [engine_key] if engine_key else list(kv_data()["lookup"]["default_modes"])
    return [named(name, key, count_scales, swa_full) for key in keys for name in engine(key).common]
