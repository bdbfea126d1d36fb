"""The per-layer shape of a model's cache: for every layer its kind, KV heads, K and V head sizes, window or chunk.

Kinds (what one layer keeps per sequence):
  full     every token of the context (K and V per KV head)
  sliding  the last ``window`` tokens (how much the engine allocates is the engine's rule, data/kv-cache.toml)
  chunked  the tokens of the current ``window``-sized chunk (Llama 4's local attention)
  mla      one compressed latent + one shared rope key per token (DeepSeek multi-head latent attention)
  state    a fixed-size recurrent state, whatever the context (linear attention, Mamba/SSM, short conv)
  none     nothing (a layer that reuses another layer's KV, or an MLP-only block)

Built from a Hugging Face config.json (kv_config) or from GGUF metadata (kv_gguf); sized by labwright.tuning.kv.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

ATTENTION_KINDS = ("full", "sliding", "chunked", "mla")
KINDS = (*ATTENTION_KINDS, "state", "none")


@dataclass(frozen=True)
class Layer:
    """One layer's cache. ``k_dim``/``v_dim`` are per KV head; for MLA ``k_dim`` is latent + rope and ``v_dim`` 0."""

    kind: str
    kv_heads: int = 0
    k_dim: int = 0
    v_dim: int = 0
    window: int | None = None
    name: str = ""

    @property
    def attends(self) -> bool:
        return self.kind in ATTENTION_KINDS

    @property
    def k_elements(self) -> int:
        return self.kv_heads * self.k_dim

    @property
    def v_elements(self) -> int:
        return self.kv_heads * self.v_dim

    def label(self) -> str:
        if self.kind == "mla":
            return f"MLA latent {self.k_dim}"
        if not self.attends:
            return self.name or self.kind
        dims = f"{self.k_dim}" if self.k_dim == self.v_dim else f"K {self.k_dim} / V {self.v_dim}"
        span = f", {'window' if self.kind == 'sliding' else 'chunk'} {self.window}" if self.window else ""
        return f"{self.kind} {self.kv_heads} KV heads x {dims}{span}"


@dataclass(frozen=True)
class KvLayout:
    """A model's cache, layer by layer, with where it was read from and what was assumed on the way."""

    source: str
    model_type: str
    layers: tuple[Layer, ...]
    max_context: int | None = None
    notes: tuple[str, ...] = ()
    state_bytes: int | None = None
    section: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    origin: str = "config.json"

    # --- summaries kept for the table, JSON and callers written against the first (uniform) model -----------------
    @property
    def total_layers(self) -> int:
        return len(self.layers)

    def count(self, *kinds: str) -> int:
        return sum(1 for layer in self.layers if layer.kind in kinds)

    @property
    def full_layers(self) -> int:
        return self.count("full", "mla")

    @property
    def sliding_layers(self) -> int:
        return self.count("sliding")

    @property
    def chunked_layers(self) -> int:
        return self.count("chunked")

    @property
    def kv_layers(self) -> int:
        return self.count(*ATTENTION_KINDS)

    @property
    def attention_layers(self) -> tuple[Layer, ...]:
        return tuple(layer for layer in self.layers if layer.attends)

    @property
    def window(self) -> int | None:
        windows = {layer.window for layer in self.layers if layer.kind == "sliding"}
        return max(windows) if windows else None  # type: ignore[type-var]

    @property
    def chunk(self) -> int | None:
        chunks = {layer.window for layer in self.layers if layer.kind == "chunked"}
        return max(chunks) if chunks else None  # type: ignore[type-var]

    @property
    def attention(self) -> str:
        return "mla" if self.count("mla") else "gqa"

    def _first(self) -> Layer:
        full = [layer for layer in self.layers if layer.kind in ("full", "mla")]
        return (full or list(self.attention_layers) or [Layer("none")])[0]

    @property
    def kv_heads(self) -> int:
        return self._first().kv_heads

    @property
    def head_dim(self) -> int:
        return self._first().k_dim

    @property
    def k_elements(self) -> int:
        return self._first().k_elements

    @property
    def v_elements(self) -> int:
        return self._first().v_elements

    @property
    def no_cache_kinds(self) -> tuple[tuple[str, int], ...]:
        counts = Counter(layer.name or layer.kind for layer in self.layers if not layer.attends)
        return tuple(sorted(counts.items()))

    def groups(self) -> list[dict[str, Any]]:
        """Layers of the same shape, in first-seen order: the per-layer model in a few lines."""
        counts: Counter[Layer] = Counter(self.layers)
        order = list(dict.fromkeys(self.layers))
        return [{"kind": layer.kind, "count": counts[layer], "kv_heads": layer.kv_heads, "k_head_dim": layer.k_dim,
                 "v_head_dim": layer.v_dim, "window": layer.window, "name": layer.name or layer.kind}
                for layer in order]

    def describe(self) -> str:
        """'8 of 32 layers keep a KV cache (8 full 4 KV heads x 256; 24 linear_attention: fixed state)'."""
        parts = []
        for group in self.groups():
            layer = Layer(group["kind"], group["kv_heads"], group["k_head_dim"], group["v_head_dim"], group["window"],
                          group["name"])
            suffix = ": fixed state" if layer.kind == "state" else ": no cache" if layer.kind == "none" else ""
            parts.append(f"{group['count']} {layer.label()}{suffix}")
        return f"{self.kv_layers} of {self.total_layers} layers keep a KV cache ({'; '.join(parts)})"
