"""Mixture-of-experts from config.json: is it one, and what share of its weights are routed experts.

The share decides MoE expert offload: attention, shared experts, embeddings and the KV stay on the GPU, routed experts
go to RAM (llama.cpp --n-cpu-moe). It is estimated by parameter count, so it assumes the experts are quantized like
the rest; GGUF quants often give experts fewer bits, which only makes the GPU part smaller than estimated.
"""

from __future__ import annotations

from typing import Any

from labwright.tuning.data import fit_data, kv_data


def _int(section: dict[str, Any], *keys: str, default: int = 0) -> int:
    for key in keys:
        value = section.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def expert_count(section: dict[str, Any]) -> int:
    return _int(section, *kv_data()["config"]["expert_counts"])


def is_moe(section: dict[str, Any]) -> bool:
    return expert_count(section) > 1


def _moe_layers(section: dict[str, Any], layers: int) -> int:
    dense_first = _int(section, "first_k_dense_replace")
    step = _int(section, "decoder_sparse_step", default=1)
    only_mlp = set(section.get("mlp_only_layers") or [])
    return sum(1 for i in range(dense_first, layers) if i not in only_mlp and (i + 1) % step == 0)


def expert_fraction(section: dict[str, Any]) -> float | None:
    """Routed-expert parameters / all parameters, or None when config.json lacks what the estimate needs."""
    experts = expert_count(section)
    hidden = _int(section, "hidden_size")
    layers = _int(section, "num_hidden_layers")
    expert_width = _int(section, "moe_intermediate_size", "intermediate_size")
    if experts < 2 or not (hidden and layers and expert_width):
        return None
    heads = _int(section, "num_attention_heads", default=1)
    kv_heads = _int(section, "num_key_value_heads", default=heads)
    head_dim = _int(section, "head_dim", default=hidden // heads)
    moe_layers = _moe_layers(section, layers)
    dense_width = _int(section, "intermediate_size", default=expert_width)
    shared_width = _int(section, "shared_expert_intermediate_size") or (
        _int(section, "n_shared_experts") * expert_width)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    embeddings = _int(section, "vocab_size") * hidden * (1 if section.get("tie_word_embeddings") else 2)
    routed = moe_layers * experts * 3 * hidden * expert_width
    dense = (embeddings + layers * attention + (layers - moe_layers) * 3 * hidden * dense_width
             + moe_layers * (3 * hidden * shared_width + hidden * experts))
    return routed / (routed + dense)


def default_expert_fraction() -> float:
    return float(fit_data()["moe"]["expert_fraction_default"])
