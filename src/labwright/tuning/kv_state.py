"""The fixed per-sequence state of recurrent layers (linear attention, Mamba/SSM, short conv), from config.json.

It does not grow with the context, so it is reported beside the KV cache, never added into bytes per token. Sizes
follow llama.cpp's recurrent memory (src/llama-memory-recurrent.cpp: one conv state "r" and one recurrent state "s"
per layer and sequence, f32, sized by hparams.n_embd_r() / n_embd_s() in src/llama-hparams.cpp):
  Mamba2   r = (d_conv - 1) x (d_inner + 2 x n_groups x d_state)     s = d_state x d_inner
  Mamba1   as Mamba2 with n_groups = 0 (Jamba)
  GDN      r = (d_conv - 1) x (2 x k_heads x k_dim + v_heads x v_dim) s = k_dim x v_dim x v_heads
  conv     r = (L_cache - 1) x hidden_size (LFM2)                      s = 0
"""

from __future__ import annotations

from typing import Any

from labwright.tuning.kv_layout import Layer

F32 = 4
MAMBA1 = ("jamba", "mamba", "falcon_mamba")


def _int(section: dict[str, Any], *keys: str) -> int:
    for key in keys:
        value = section.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _layer_state(section: dict[str, Any], name: str) -> int | None:
    if name in ("linear_attention", "linear", "gated_deltanet", "deltanet", "gdn"):
        conv = _int(section, "linear_conv_kernel_dim")
        k_heads, k_dim = _int(section, "linear_num_key_heads"), _int(section, "linear_key_head_dim")
        v_heads, v_dim = _int(section, "linear_num_value_heads"), _int(section, "linear_value_head_dim")
        if not all((conv, k_heads, k_dim, v_heads, v_dim)):
            # transformers 5 names Mamba2 mixers "linear_attention" too (NemotronHConfig layers_block_type,
            # GraniteMoeHybridConfig layer_types: remap_legacy_layer_types): without GatedDeltaNet keys it is Mamba.
            return _layer_state(section, "mamba")
        return ((conv - 1) * (2 * k_heads * k_dim + v_heads * v_dim) + k_dim * v_dim * v_heads) * F32
    if name in ("mamba", "mamba2", "ssm", "hybrid"):
        conv = _int(section, "conv_kernel", "mamba_d_conv", "mamba_conv_kernel")
        state = _int(section, "ssm_state_size", "mamba_d_state", "mamba_state_dim")
        # Mamba1 (Jamba, Falcon-Mamba) has no B/C groups: llama.cpp reads ssm.group_count as 0 there, so r is
        # (d_conv - 1) x d_inner; Mamba2 configs name n_groups (1 when a Mamba2 config leaves it out).
        mamba1 = section.get("model_type") in MAMBA1
        groups = 0 if mamba1 else _int(section, "n_groups", "mamba_n_groups", "mamba_num_groups") or 1
        inner = (_int(section, "mamba_num_heads") * _int(section, "mamba_head_dim", "mamba_d_head")
                 or _int(section, "mamba_d_ssm")
                 or _int(section, "mamba_expand", "expand") * _int(section, "hidden_size"))
        if not all((conv, state, inner)):
            return None
        return ((conv - 1) * (inner + 2 * groups * state) + state * inner) * F32
    if name in ("conv", "short_conv"):
        cache, hidden = _int(section, "conv_L_cache"), _int(section, "hidden_size")
        return (cache - 1) * hidden * F32 if cache and hidden else None
    return None


def state_bytes(section: dict[str, Any], layers: list[Layer]) -> int | None:
    """Bytes of recurrent state one sequence holds; None when a recurrent layer's size cannot be read."""
    total = 0
    for layer in layers:
        if layer.kind != "state":
            continue
        size = _layer_state(section, layer.name)
        if size is None:
            return None
        total += size
    if section.get("model_type") in ("falcon_h1",):   # a Mamba2 mixer beside attention in every layer
        size = _layer_state(section, "mamba")
        total += (size or 0) * len(layers)
    return total


def gguf_state_bytes(metadata: dict[str, Any], arch: str, recurrent_layers: int) -> int | None:
    """Bytes of recurrent state one sequence holds, from a GGUF's metadata, the way llama.cpp sizes it.

    llama.cpp (ggml-org/llama.cpp 01b77b57 src/llama-hparams.cpp, llama_hparams::n_embd_r / n_embd_s) per recurrent
    layer, f32 (the default r/s type), one row each per sequence (src/llama-memory-recurrent.cpp 0054ee8 constructor:
    ggml_new_tensor_2d(type_r, n_embd_r(), mem_size x (1 + n_rs_seq)), n_rs_seq 0 unless rollback snapshots are on):
      RWKV   (%s.wkv.head_size)     r = token_shift_count (default 2) x n_embd     s = n_embd x wkv.head_size
      LFM2   (%s.shortconv.l_cache) r = n_embd x (l_cache - 1)                     s = ssm.state_size x ssm.inner_size
      Mamba / GatedDeltaNet          r = (ssm.conv_kernel - 1) x (ssm.inner_size + 2 x ssm.group_count x
                                         ssm.state_size)                            s = ssm.state_size x ssm.inner_size
    None when a recurrent layer's keys are missing from the file.
    """
    if recurrent_layers == 0:
        return 0

    def key(name: str) -> int:
        value = metadata.get(f"{arch}.{name}")
        if isinstance(value, list):     # per-layer arrays are not used for these keys by llama.cpp
            value = max(value) if value else 0
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0

    embd = key("embedding_length")
    conv, inner, state, groups = key("ssm.conv_kernel"), key("ssm.inner_size"), key("ssm.state_size"), key(
        "ssm.group_count")
    if key("wkv.head_size"):
        shift = key("token_shift_count") or 2
        if not embd:
            return None
        r, s = shift * embd, embd * key("wkv.head_size")
    elif key("shortconv.l_cache"):
        if not embd:
            return None
        r, s = embd * (key("shortconv.l_cache") - 1), state * inner
    else:
        if not (conv and inner and state):
            return None
        r, s = (conv - 1) * (inner + 2 * groups * state), state * inner
    return recurrent_layers * (r + s) * F32
