"""KV-cache maths from config.json: bytes per token, tokens that fit in a budget, KV size at a context.

Pure logic, no host access. The seed's worked example (shared/seeds/001): Qwen3.5-9B keeps KV in 8 of its 32 layers,
4 KV heads x 256 head_dim, so bytes/token = 8 x 4 x 256 x 2 (K+V) x bits/8 = 16,384 / 12,288 / 8,192 at 8,8 / 8,4 /
4,4, and a 2.4 GiB budget holds 157,184 / 209,664 / 314,368 tokens in whole 256-token pages (the seed: ~155,000 /
~207,000 / ~310,000; its last two are the first scaled by 4/3 and 2).

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
from labwright.tuning.kv_config import KvLayout, layout_from_dict, load_json, read_layout
from labwright.tuning.kv_modes import CacheSpec, common, resolve

__all__ = ["CacheSpec", "KvLayout", "KvPlan", "common", "kv_bytes", "layout_from_dict", "load_json", "plan",
           "read_layout", "resolve", "tokens_in_budget"]

DEFAULT_PAGE = 256


def layer_token_bytes(layout: KvLayout, spec: CacheSpec) -> Fraction:
    """Bytes one token costs in one KV layer (K and V)."""
    return layout.k_elements * spec.k_bytes + layout.v_elements * spec.v_bytes


def growing_layers(layout: KvLayout, spec: CacheSpec) -> int:
    """Layers whose cache grows with every token: full attention, and sliding ones the engine does not cap."""
    capped = spec.sliding.for_model(layout.model_type).kind == "window"
    return layout.full_layers + (0 if capped else layout.sliding_layers)


def bytes_per_token(layout: KvLayout, spec: CacheSpec) -> int:
    """What each further token costs once past any sliding window (the seed's 'bytes/token')."""
    return math.ceil(layer_token_bytes(layout, spec) * growing_layers(layout, spec))


def kv_bytes(layout: KvLayout, spec: CacheSpec, tokens: int) -> int:
    """The whole KV cache for ``tokens`` cache cells."""
    cells = layout.full_layers * tokens
    if layout.sliding_layers and layout.window:
        cells += layout.sliding_layers * spec.sliding.for_model(layout.model_type).cells(tokens, layout.window)
    return math.ceil(layer_token_bytes(layout, spec) * cells)


def tokens_in_budget(layout: KvLayout, spec: CacheSpec, budget: int, page: int = DEFAULT_PAGE) -> int | None:
    """The most tokens, in whole pages, whose KV fits in ``budget`` bytes; None when it never stops fitting.

    When no layer grows past its window (every layer sliding and capped), the model's max_position_embeddings is the
    limit; without one the answer is None (unbounded).
    """
    _check_page(page)
    if bytes_per_token(layout, spec) > 0:
        high = budget // bytes_per_token(layout, spec) // page + 1
    elif layout.max_context:
        high = layout.max_context // page
        if kv_bytes(layout, spec, high * page) <= budget:
            return high * page
    else:
        rule = spec.sliding.for_model(layout.model_type)
        saturated = -(-((layout.window or 0) + rule.extra + rule.pad) // page) + 1
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


def _check_page(page: int) -> None:
    if page < 1:
        raise BadInput(f"--page {page}: give the cache's allocation unit in tokens, 1 or more (tabbyAPI: 256)")


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

    @property
    def sliding_policy(self) -> str:
        rule = self.spec.sliding.for_model(self.layout.model_type)
        if not self.layout.sliding_layers:
            return "none"
        if rule.kind == "full":
            return f"full context ({rule.source})" if rule.source else "full context"
        extra = f" + {rule.extra}" if rule.extra else ""
        pad = f", padded to {rule.pad}" if rule.pad > 1 else ""
        return f"min(context, window{extra}){pad}"

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


def plan(layout: KvLayout, spec: CacheSpec, context: int | None = None, budget: int | None = None,
         page: int = DEFAULT_PAGE) -> KvPlan:
    """The planner's answer for one cache setting; ``context`` is rounded up to whole pages, as engines allocate."""
    _check_page(page)
    if context is not None and context < 1:
        raise BadInput(f"--context {context}: give a number of tokens, 1 or more")
    notes = list(layout.notes)
    cache_tokens = size = tokens = None
    if context is not None:
        cache_tokens = round_up(context, page)
        size = kv_bytes(layout, spec, cache_tokens)
        if layout.max_context and context > layout.max_context:
            notes.append(f"context {context:,} is past the model's max_position_embeddings {layout.max_context:,}")
    if budget is not None:
        tokens = tokens_in_budget(layout, spec, budget, page)
        if tokens is None:
            notes.append("every layer is sliding and capped: the KV stops growing at the window, any context fits")
        elif layout.max_context and tokens > layout.max_context:
            notes.append(f"the budget holds more than the model's max_position_embeddings ({layout.max_context:,})")
    return KvPlan(layout, spec, page, bytes_per_token(layout, spec), context, cache_tokens, size, budget, tokens,
                  tuple(notes))


def plan_file(config: str | Path, spec: CacheSpec, **kwargs: Any) -> KvPlan:
    return plan(read_layout(config), spec, **kwargs)
