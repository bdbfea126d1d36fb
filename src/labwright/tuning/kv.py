"""KV-cache maths from config.json: bytes per token, tokens that fit in a budget, KV size at a context.

Pure logic, no host access. Field note 001's worked example (docs/field-notes.md): Qwen3.5-9B keeps KV in
8 of its 32 layers, 4 KV heads x 256 head_dim, so bytes/token = 8 x 4 x 256 x 2 (K+V) x bits/8 = 16,384 / 12,288 /
8,192 at 8,8 / 8,4 / 4,4, and a 2.4 GiB budget holds 157,184 / 209,664 / 314,368 tokens in whole 256-token pages
(the note: ~155,000 / ~207,000 / ~310,000; its last two are the first scaled by 4/3 and 2).

A sliding-window layer holds min(context, window) tokens where the engine caps it (llama.cpp and Ollama add one
micro-batch and pad to 256); exllamav3 gives every attention layer the whole context (see data/kv-cache.toml).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from labwright.errors import BadInput
from labwright.tuning.kv_config import layout_from_dict, load_json, read_layout
from labwright.tuning.kv_layout import KvLayout, Layer
from labwright.tuning.kv_modes import CacheSpec, SlidingRule, common, resolve

__all__ = ["CacheSpec", "KvLayout", "KvPlan", "Layer", "common", "kv_bytes", "layout_from_dict", "load_json", "plan",
           "read_layout", "resolve", "tokens_in_budget"]

DEFAULT_PAGE = 256


def layer_token_bytes(layer: Layer, spec: CacheSpec) -> Fraction:
    """Bytes one token costs in one layer: K and V per KV head, each at its own element size (MLA: one latent)."""
    if not layer.attends:
        return Fraction(0)
    return layer.k_elements * spec.k_bytes + layer.v_elements * spec.v_bytes


def _rule(layout: KvLayout, spec: CacheSpec, kind: str) -> SlidingRule:
    return spec.rule(kind).for_model(layout.model_type, from_gguf=layout.origin == "gguf")


def layer_cells(layout: KvLayout, spec: CacheSpec, layer: Layer, tokens: int) -> int:
    """Cache cells the engine allocates for one layer at ``tokens`` of context."""
    if not layer.attends:
        return 0
    if layer.kind in ("sliding", "chunked") and layer.window:
        return _rule(layout, spec, layer.kind).cells(tokens, layer.window, layout.model_type)
    return tokens


def _grows(layout: KvLayout, spec: CacheSpec, layer: Layer) -> bool:
    if layer.kind in ("sliding", "chunked"):
        return _rule(layout, spec, layer.kind).kind != "window"
    return layer.kind in ("full", "mla")


def growing_layers(layout: KvLayout, spec: CacheSpec) -> int:
    """Layers whose cache grows with every token: full attention, and sliding/chunked ones the engine does not cap."""
    return sum(1 for layer in layout.layers if _grows(layout, spec, layer))


def bytes_per_token(layout: KvLayout, spec: CacheSpec) -> int:
    """What each further token costs once past any sliding window or chunk (field note 001's 'bytes/token').

    Never 0 for a model with attention: when every attention layer is capped (Mistral v0.1 on vLLM), it is what a
    token costs below the cap, and the plan says the cache stops growing there.
    """
    growing = sum((layer_token_bytes(layer, spec) for layer in layout.layers if _grows(layout, spec, layer)),
                  Fraction(0))
    if growing == 0:
        growing = sum((layer_token_bytes(layer, spec) for layer in layout.layers), Fraction(0))
    return math.ceil(growing)


def all_capped(layout: KvLayout, spec: CacheSpec) -> bool:
    """True when no attention layer grows past its window: the KV stops growing."""
    return layout.kv_layers > 0 and growing_layers(layout, spec) == 0


def kv_bytes(layout: KvLayout, spec: CacheSpec, tokens: int) -> int:
    """The whole KV cache for ``tokens`` cache cells, layer by layer."""
    total = sum((layer_token_bytes(layer, spec) * layer_cells(layout, spec, layer, tokens) for layer in layout.layers),
                Fraction(0))
    return math.ceil(total)


def tokens_in_budget(layout: KvLayout, spec: CacheSpec, budget: int, page: int = DEFAULT_PAGE) -> int | None:
    """The most tokens, in whole pages, whose KV fits in ``budget`` bytes; None when it never stops fitting.

    When no layer grows past its window (every layer sliding and capped), the model's max_position_embeddings is the
    limit; without one the answer is None (unbounded).
    """
    check_page(page)
    if not all_capped(layout, spec):
        if layout.kv_layers == 0:
            return None
        high = budget // bytes_per_token(layout, spec) // page + 1
    elif layout.max_context:
        high = layout.max_context // page
        if kv_bytes(layout, spec, high * page) <= budget:
            return high * page
    else:
        spans = [layer.window or 0 for layer in layout.attention_layers]
        rules = [_rule(layout, spec, layer.kind) for layer in layout.attention_layers]
        reach = max(rule.span(span, layout.model_type) + rule.extra + rule.pad + rule.plus
                    for span, rule in zip(spans, rules, strict=True))
        saturated = -(-reach // page) + 1
        if kv_bytes(layout, spec, saturated * page) <= budget:
            return None
        high = saturated
    low = 0  # kv_bytes(0) == 0 always fits
    while low < high:
        middle = (low + high + 1) // 2
        if kv_bytes(layout, spec, middle * page) <= budget:
            low = middle
        else:
            high = middle - 1
    return low * page


def round_up(tokens: int, page: int) -> int:
    return -(-tokens // page) * page


# Past every model's context window (the longest, Llama 4 Scout, is 10M tokens): a larger number is a typo.
MAX_CONTEXT = 16 * 1024 * 1024


def check_page(page: int) -> None:
    """``--page`` in range (every command that takes it, before any file is read)."""
    if not 1 <= page <= MAX_CONTEXT:
        raise BadInput(f"--page {page}: give the cache's allocation unit in tokens, 1 to {MAX_CONTEXT:,} "
                       "(tabbyAPI: 256)")


def check_context(context: int) -> None:
    if not 1 <= context <= MAX_CONTEXT:
        raise BadInput(f"--context {context:,}: give a number of tokens, 1 to {MAX_CONTEXT:,} (longer than any "
                       "model's context window)")


@dataclass(frozen=True)
class KvPlan:
    """One cache setting's answer for one model: per-token cost, tokens in a budget, KV at a context."""

    layout: KvLayout
    spec: CacheSpec
    page: int
    bytes_per_token: int
    context: int | None = None
    cache_tokens: int | None = None
    kv_bytes: int | None = None
    budget: int | None = None
    tokens: int | None = None
    notes: tuple[str, ...] = ()

    def policy(self, kind: str) -> str:
        """How this engine sizes the model's sliding (or chunked) layers, in words."""
        rule = self.spec.rule(kind).for_model(self.layout.model_type, from_gguf=self.layout.origin == "gguf")
        if not self.layout.count(kind):
            return "none"
        if rule.kind == "full":
            return f"full context ({rule.source})" if rule.source else "full context"
        extra = f" + {rule.extra}" if rule.extra else ""
        pad = f", padded to {rule.pad}" if rule.pad > 1 else ""
        plus = f", + {rule.plus}" if rule.plus else ""
        span = "window" if kind == "sliding" else "chunk"
        return f"min(context, {span}{extra}){pad}{plus}"

    @property
    def sliding_policy(self) -> str:
        return self.policy("sliding")

    def to_json(self) -> dict[str, Any]:
        layout, spec = self.layout, self.spec
        return {
            "kv_layers": layout.kv_layers,
            "bytes_per_token": self.bytes_per_token,
            "tokens": self.tokens,
            "kv_bytes": self.kv_bytes,
            "config": layout.source,
            "model_type": layout.model_type,
            "engine": spec.engine.key,
            "cache_mode": spec.name,
            "convention": spec.convention,
            "k_bytes_per_element": str(spec.k_bytes),
            "v_bytes_per_element": str(spec.v_bytes),
            "layers": layout.total_layers,
            "full_attention_layers": layout.full_layers,
            "sliding_window_layers": layout.sliding_layers,
            "sliding_window": layout.window,
            "sliding_policy": self.sliding_policy,
            "chunked_layers": layout.chunked_layers,
            "attention_chunk": layout.chunk,
            "chunked_policy": self.policy("chunked"),
            "stops_growing": all_capped(layout, spec),
            "state_bytes_per_sequence": layout.state_bytes,
            "layer_groups": layout.groups(),
            "source_kind": layout.origin,
            "kv_heads": layout.kv_heads,
            "head_dim": layout.head_dim,
            "attention": layout.attention,
            "page": self.page,
            "budget_bytes": self.budget,
            "pages": None if self.tokens is None else self.tokens // self.page,
            "context": self.context,
            "cache_tokens": self.cache_tokens,
            "max_position_embeddings": layout.max_context,
            "notes": list(self.notes),
        }


def rule_notes(layout: KvLayout, spec: CacheSpec) -> list[str]:
    """'assumes' lines for the engine rules this model's layers are sized by (unchecked or conditional rules)."""
    notes = []
    for kind in ("sliding", "chunked"):
        note = _rule(layout, spec, kind).note(kind, spec.engine.label) if layout.count(kind) else None
        if note:
            notes.append(note)
    if layout.count("mla") and spec.engine.mla_assumes:
        notes.append(f"{spec.engine.label} MLA layers: {spec.engine.mla_assumes}")
    return notes


def plan(layout: KvLayout, spec: CacheSpec, context: int | None = None, budget: int | None = None,
         page: int = DEFAULT_PAGE) -> KvPlan:
    """The planner's answer for one cache setting; ``context`` is rounded up to whole pages, as engines allocate."""
    check_page(page)
    if context is not None:
        check_context(context)
    notes = list(layout.notes)
    notes += rule_notes(layout, spec)
    if all_capped(layout, spec):
        notes.append(f"every attention layer is capped at its window on {spec.engine.label}: bytes/token is the cost "
                     "below the window, the KV stops growing past it")
    if layout.count("state"):
        state = (f"{layout.state_bytes:,} B" if layout.state_bytes is not None else "size not read")
        notes.append(f"{layout.count('state')} recurrent layers keep a fixed state per sequence ({state}), "
                     "not counted in the KV")
    cache_tokens = size = tokens = None
    if context is not None:
        cache_tokens = round_up(context, page)
        size = kv_bytes(layout, spec, cache_tokens)
        if layout.max_context and context > layout.max_context:
            notes.append(f"context {context:,} is past the model's max_position_embeddings {layout.max_context:,}")
    if budget is not None:
        tokens = tokens_in_budget(layout, spec, budget, page)
        if tokens is None and layout.kv_layers == 0:
            notes.append("no layer attends: there is no KV cache to grow, any context fits")
        elif tokens is None:
            notes.append("every attention layer is capped at its window: the KV stops growing there, and the "
                         "model sets no max_position_embeddings, so any context fits")
        elif layout.max_context and tokens > layout.max_context:
            notes.append(f"the budget holds more than the model's max_position_embeddings ({layout.max_context:,})")
    return KvPlan(layout, spec, page, bytes_per_token(layout, spec), context, cache_tokens, size, budget, tokens,
                  tuple(notes))


def plan_file(config: str | Path, spec: CacheSpec, **kwargs: Any) -> KvPlan:
    return plan(read_layout(config), spec, **kwargs)
