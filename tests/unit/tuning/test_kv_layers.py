"""The per-layer cache model over a corpus of real config.json files, every family's layer pattern, and GGUF headers.

Every expected value is the formula written out: layers x KV heads x (K + V head size) x bytes per element, with the
layer counts of each kind spelled in the test. Real files: tests/unit/tuning/configs (SOURCES says where each is
from). Where neither a verbatim config.json nor transformers' class defaults give a published checkpoint's layer
pattern (LFM2-1.2B's attention indices, a Granite 4.0-H pattern, a 44-layer Falcon-H1), the test writes a dict with
only the keys the transformers config class reads, named as such. Config files written by transformers itself
(class defaults and verbatim files saved again: Qwen3-Next, Gemma 3n, Jamba, Mistral Small 3, Phi-3, EXAONE 4,
MiMo-V2, Nemotron-H, Granite/Falcon-H1/LFM2 defaults) and recurrent state from GGUF metadata: test_kv_upstream.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labwright.errors import BadInput
from labwright.tuning import kv, kv_gguf, kv_modes
from labwright.tuning.kv_config import layout_from_dict
from support.gguf_files import write_gguf as support_write_gguf

CONFIGS = Path(__file__).resolve().parent / "configs"
F16 = kv_modes.ggml_type("f16")
VLLM = kv_modes.ggml_type("auto", "vllm")
TABBY = kv_modes.tabby_mode("FP16")


def f16_bytes(layers: int, kv_heads: int, k_dim: int, v_dim: int | None = None) -> int:
    """layers x KV heads x (K + V) head size x 2 bytes."""
    return layers * kv_heads * (k_dim + (k_dim if v_dim is None else v_dim)) * 2


# --- the real corpus: (file, layers, full, sliding, KV heads, head size, llama.cpp f16 bytes/token) ---------------
CORPUS = [
    ("mlc-llama-2-7b.json", 32, 32, 0, 32, 128, f16_bytes(32, 32, 128)),
    ("mlc-llama-2-70b.json", 80, 80, 0, 8, 128, f16_bytes(80, 8, 128)),
    ("mlc-codellama-34b.json", 48, 48, 0, 8, 128, f16_bytes(48, 8, 128)),
    ("mlc-tinyllama-1.1b-chat-v1.0.json", 22, 22, 0, 4, 64, f16_bytes(22, 4, 64)),
    ("mlc-llama-3.1-8b.json", 32, 32, 0, 8, 128, f16_bytes(32, 8, 128)),
    ("mlc-llama-3.1-70b.json", 80, 80, 0, 8, 128, f16_bytes(80, 8, 128)),
    ("mlc-llama-3.2-1b.json", 16, 16, 0, 8, 64, f16_bytes(16, 8, 64)),
    ("mlc-llama-3.2-3b.json", 28, 28, 0, 8, 128, f16_bytes(28, 8, 128)),
    ("mlc-mistral-7b-instruct-v0.2.json", 32, 32, 0, 8, 128, f16_bytes(32, 8, 128)),
    ("mlc-mistral-7b-v0.3.json", 32, 32, 0, 8, 128, f16_bytes(32, 8, 128)),
    ("mlc-ministral-3-3b-2512.json", 26, 26, 0, 8, 128, f16_bytes(26, 8, 128)),
    ("mlc-mixtral-8x7b-v0.1.json", 32, 32, 0, 8, 128, f16_bytes(32, 8, 128)),
    # Phi-3.5 / Phi-4-mini: sliding_window 262,144 >= max_position_embeddings 131,072: full attention
    ("mlc-phi-3.5-mini-instruct.json", 32, 32, 0, 32, 96, f16_bytes(32, 32, 96)),
    ("mlc-phi-4-mini-instruct.json", 32, 32, 0, 8, 128, f16_bytes(32, 8, 128)),
    ("mlc-qwen1.5-1.8b-chat.json", 24, 24, 0, 16, 128, f16_bytes(24, 16, 128)),
    ("mlc-qwen1.5-moe-a2.7b.json", 24, 24, 0, 16, 128, f16_bytes(24, 16, 128)),
    ("mlc-qwen2-0.5b.json", 24, 24, 0, 2, 64, f16_bytes(24, 2, 64)),
    ("mlc-qwen2-1.5b.json", 28, 28, 0, 2, 128, f16_bytes(28, 2, 128)),
    ("mlc-qwen2-7b.json", 28, 28, 0, 4, 128, f16_bytes(28, 4, 128)),
    ("mlc-qwen2.5-3b.json", 36, 36, 0, 2, 128, f16_bytes(36, 2, 128)),
    ("mlc-qwen3-0.6b.json", 28, 28, 0, 8, 128, f16_bytes(28, 8, 128)),
    ("mlc-qwen3-1.7b.json", 28, 28, 0, 8, 128, f16_bytes(28, 8, 128)),
    ("mlc-gemma-2b.json", 18, 18, 0, 1, 256, f16_bytes(18, 1, 256)),
    # Gemma 2: every 2nd layer global (transformers Gemma2Config), sliding ones capped by llama.cpp: only full grow
    ("mlc-gemma-2-2b.json", 26, 13, 13, 4, 256, f16_bytes(13, 4, 256)),
    ("mlc-gemma-2-9b.json", 42, 21, 21, 8, 256, f16_bytes(21, 8, 256)),
    ("mlc-gemma-2-27b.json", 46, 23, 23, 16, 128, f16_bytes(23, 16, 128)),
    ("mlc-gemma-3-1b-it.json", 26, 4, 22, 1, 256, f16_bytes(4, 1, 256)),        # every 6th of 26 global
    ("mlc-internlm2.5-7b.json", 32, 32, 0, 8, 128, f16_bytes(32, 8, 128)),
    # StarCoder2: sliding_window 4,096 on every layer; llama.cpp does not cap starcoder2: full context
    ("mlc-starcoder2-7b.json", 32, 0, 32, 4, 128, f16_bytes(32, 4, 128)),
    ("mlc-smollm2-360m.json", 32, 32, 0, 5, 64, f16_bytes(32, 5, 64)),
    ("mlc-aya-23-8b.json", 32, 32, 0, 8, 128, f16_bytes(32, 8, 128)),
    ("mlc-olmo-2-32b.json", 64, 64, 0, 8, 128, f16_bytes(64, 8, 128)),
    ("mlc-minicpm-2b.json", 40, 40, 0, 36, 64, f16_bytes(40, 36, 64)),
    ("mlc-stablelm-2-zephyr-1.6b.json", 24, 24, 0, 32, 64, f16_bytes(24, 32, 64)),
    ("llama-3-8b.json", 32, 32, 0, 8, 128, f16_bytes(32, 8, 128)),
    ("qwen2.5-7b.json", 28, 28, 0, 4, 128, f16_bytes(28, 4, 128)),
    ("qwen3-30b-a3b.json", 48, 48, 0, 4, 128, f16_bytes(48, 4, 128)),
    ("qwen3.5-9b.json", 32, 8, 0, 4, 256, f16_bytes(8, 4, 256)),                 # 24 GatedDeltaNet layers
    ("qwen3-next-80b-a3b.json", 48, 12, 0, 2, 256, f16_bytes(12, 2, 256)),       # full_attention_interval 4
    ("gemma-3-4b.json", 34, 5, 29, 4, 256, f16_bytes(5, 4, 256)),
    ("gemma-3-270m.json", 18, 3, 15, 1, 256, f16_bytes(3, 1, 256)),
    ("gpt-oss-20b.json", 24, 12, 12, 8, 64, f16_bytes(12, 8, 64)),
    ("mistral-7b-v0.1.json", 32, 0, 32, 8, 128, f16_bytes(32, 8, 128)),
]


def test_the_corpus_has_at_least_30_real_files_each_with_a_source():
    sources = (CONFIGS / "SOURCES").read_text()
    files = sorted(p.name for p in CONFIGS.glob("*.json"))
    assert all(name in sources for name in files)
    assert sum(1 for name in files if name.startswith("mlc-")) >= 30


@pytest.mark.parametrize(("name", "layers", "full", "sliding", "kv_heads", "head_dim", "expected"), CORPUS)
def test_real_config(name, layers, full, sliding, kv_heads, head_dim, expected):
    layout = kv.read_layout(CONFIGS / name)
    assert (layout.total_layers, layout.full_layers, layout.sliding_layers) == (layers, full, sliding)
    widest = max(layer.k_dim for layer in layout.attention_layers)
    assert (layout.attention_layers[0].kv_heads, widest) == (kv_heads, head_dim)
    assert kv.bytes_per_token(layout, F16) == expected
    # tabbyAPI keeps every attention layer at the whole context
    assert kv.bytes_per_token(layout, TABBY) == f16_bytes(full + sliding, kv_heads, head_dim)


def test_mla_lite():
    layout = kv.read_layout(CONFIGS / "mlc-deepseek-v2-lite.json")    # 27 layers, kv_lora_rank 512 + rope 64
    assert (layout.count("mla"), layout.kv_layers) == (27, 27)
    assert kv.bytes_per_token(layout, F16) == 27 * (512 + 64) * 2     # 31,104
    assert kv.bytes_per_token(layout, VLLM) == 27 * 576 * 2


# --- the newest families from their real config.json (aic-*: vendored by ai-dynamo/aiconfigurator, see SOURCES) ---

def real(name: str) -> dict:
    return json.loads((CONFIGS / name).read_text())


GEMMA4 = real("aic-gemma-4-26b-a4b.json")                 # google/gemma-4-26B-A4B


def test_gemma4_global_layers_have_their_own_heads_and_size():
    layout = layout_from_dict(GEMMA4)
    # 30 layers, every 6th global: 5 full (num_global_key_value_heads 2 x global_head_dim 512), 25 sliding (8 x 256)
    assert (layout.total_layers, layout.full_layers, layout.sliding_layers, layout.window) == (30, 5, 25, 1024)
    full = f16_bytes(5, 2, 512)                       # 5 x 2 x (512 + 512) x 2 = 20,480
    sliding_each = f16_bytes(1, 8, 256)               # one sliding layer: 8 x (256 + 256) x 2 = 8,192
    assert kv.bytes_per_token(layout, F16) == full == 20_480
    # tabbyAPI: all 30 at the whole context; the old uniform model said 30 x 8,192 = 245,760 (12x llama.cpp's)
    assert kv.bytes_per_token(layout, TABBY) == full + 25 * sliding_each == 225_280
    # llama.cpp at 32,768: sliding layers hold PAD256(min(32768, 1024 + 512)) = 1,536 cells
    assert kv.kv_bytes(layout, F16, 32_768) == full * 32_768 + 25 * sliding_each * 1536


def test_gemma4_31b_dense_and_num_kv_shared_layers_zero():
    # nvidia/Gemma-4-31B-IT-NVFP4: 60 layers, 10 full 4 x 512, 50 sliding 16 x 256; num_kv_shared_layers 0 = none
    layout = kv.read_layout(CONFIGS / "aic-gemma-4-31b-it-nvfp4.json")
    assert (layout.full_layers, layout.sliding_layers, layout.count("none")) == (10, 50, 0)
    assert kv.bytes_per_token(layout, F16) == f16_bytes(10, 4, 512) == 81_920
    assert kv.bytes_per_token(layout, TABBY) == f16_bytes(10, 4, 512) + f16_bytes(50, 16, 256)


def test_gemma4_global_heads_apply_only_with_k_eq_v():
    # transformers Gemma4TextConfig: num_global_key_value_heads overrides the full layers' KV heads only while
    # attention_k_eq_v is true (absent counts as true); with false they keep num_key_value_heads (8 here)
    text = GEMMA4["text_config"] | {"attention_k_eq_v": False}
    layout = layout_from_dict(GEMMA4 | {"text_config": text})
    assert kv.bytes_per_token(layout, F16) == f16_bytes(5, 8, 512)
    text = {k: v for k, v in GEMMA4["text_config"].items() if k != "attention_k_eq_v"}
    assert kv.bytes_per_token(layout_from_dict(GEMMA4 | {"text_config": text}), F16) == f16_bytes(5, 2, 512)


# Gemma 3n's KV-shared layers: test_kv_upstream.py (tf-gemma3n.json, transformers' Gemma3nConfig).


NEMOTRON_3_NANO = real("aic-nemotron-3-nano-30b-a3b.json")   # nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16


def test_nemotron_h_only_star_layers_attend():
    layout = layout_from_dict(NEMOTRON_3_NANO)
    assert (layout.full_layers, layout.count("state"), layout.count("none")) == (6, 23, 23)
    assert kv.bytes_per_token(layout, F16) == f16_bytes(6, 2, 128) == 6_144
    # Mamba2 state per sequence: 23 x ((4-1) x (4096 + 2x8x128) + 128 x 4096) x 4 bytes
    assert layout.state_bytes == 23 * ((4 - 1) * (64 * 64 + 2 * 8 * 128) + 128 * 64 * 64) * 4
    # the uniform model counted all 52 layers: 8.7x too much
    assert f16_bytes(52, 2, 128) / kv.bytes_per_token(layout, F16) > 8


@pytest.mark.parametrize(("name", "layers", "attention", "mamba", "other", "kv_heads", "mamba_inner", "state"), [
    # Nemotron 3 Super: 88 layers, 8 '*', 40 'M' (128 heads x 64), 40 'E'; ssm_state_size 128, n_groups 8
    ("aic-nemotron-3-super-120b-a12b-fp8.json", 88, 8, 40, 40, 2, 128 * 64, 128),
    # Nemotron-H 56B: 118 layers, 10 '*', 54 'M' (256 heads x 64), 54 '-'; ssm_state_size 256
    ("aic-nemotron-h-56b-base-8k.json", 118, 10, 54, 54, 8, 256 * 64, 256),
    # Nemotron 3 Ultra: no num_hidden_layers, 108 entries in layers_block_type (transformers derives the count)
    ("aic-nemotron-3-ultra-550b-a55b.json", 108, 12, 48, 48, 2, 256 * 64, 128),
])
def test_nemotron_h_real_configs(name, layers, attention, mamba, other, kv_heads, mamba_inner, state):
    layout = kv.read_layout(CONFIGS / name)
    assert (layout.total_layers, layout.full_layers, layout.count("state"), layout.count("none")) == (
        layers, attention, mamba, other)
    assert kv.bytes_per_token(layout, F16) == f16_bytes(attention, kv_heads, 128)
    assert layout.state_bytes == mamba * ((4 - 1) * (mamba_inner + 2 * 8 * state) + state * mamba_inner) * 4


def test_nemotron_pattern_length_must_match_the_layer_count():
    with pytest.raises(BadInput, match="hybrid_override_pattern has 51 entries but num_hidden_layers is 52"):
        layout_from_dict(NEMOTRON_3_NANO | {"hybrid_override_pattern": NEMOTRON_3_NANO["hybrid_override_pattern"][1:]})
    with pytest.raises(BadInput, match="'X'"):
        layout_from_dict(NEMOTRON_3_NANO | {"hybrid_override_pattern": "X" * 52})


LLAMA4_SCOUT = real("aic-llama-4-scout-17b-16e-instruct.json")   # meta-llama/Llama-4-Scout-17B-16E-Instruct


def test_llama4_chunked_attention():
    layout = layout_from_dict(LLAMA4_SCOUT)
    assert (layout.full_layers, layout.chunked_layers, layout.chunk) == (12, 36, 8192)
    assert kv.bytes_per_token(layout, F16) == f16_bytes(12, 8, 128) == 49_152
    # llama.cpp: a chunked layer holds PAD256(min(ctx, 8192 + 512)) = 8,704 cells (the iSWA cache)
    assert kv.kv_bytes(layout, F16, 131_072) == f16_bytes(12, 8, 128) * 131_072 + f16_bytes(36, 8, 128) * 8704
    # vLLM ChunkedLocalAttentionSpec: cdiv(min(8192 + 2048, ctx), 16) blocks = 10,240 cells
    assert kv.kv_bytes(layout, VLLM, 131_072) == f16_bytes(12, 8, 128) * 131_072 + f16_bytes(36, 8, 128) * 10_240
    # this copy has no no_rope_layers; the published list ([1, 1, 1, 0] x 12) and an empty list (transformers
    # Llama4TextConfig: `no_rope_layers if no_rope_layers else` the interval-4 default) give the same layers
    for flags in ([1, 1, 1, 0] * 12, []):
        text = LLAMA4_SCOUT["text_config"] | {"no_rope_layers": flags}
        assert layout_from_dict(LLAMA4_SCOUT | {"text_config": text}).layers == layout.layers
    maverick = kv.read_layout(CONFIGS / "aic-llama-4-maverick-17b-128e-instruct.json")
    assert maverick.layers == layout.layers                    # same attention; only the MoE interleave differs


MIMO_V2_FLASH = real("aic-mimo-v2-flash.json")                  # XiaomiMiMo/MiMo-V2-Flash


def test_mimo_v2_full_layers_count_and_swa_has_its_own_heads():
    layout = layout_from_dict(MIMO_V2_FLASH)
    # hybrid_layer_pattern: 0 at layers 0, 5, 11, 17, 23, 29, 35, 41, 47 = 9 full, 39 sliding (window 128)
    assert [i for i, layer in enumerate(layout.layers) if layer.kind == "full"] == [0, 5, 11, 17, 23, 29, 35, 41, 47]
    assert (layout.full_layers, layout.sliding_layers, layout.window) == (9, 39, 128)
    full = 9 * 4 * (192 + 128) * 2                     # K 192 and V 128 apart: 23,040
    assert kv.bytes_per_token(layout, F16) == kv.bytes_per_token(layout, VLLM) == full
    plan = kv.plan(layout, VLLM, budget=8 * 1024**3)
    assert plan.bytes_per_token > 0 and plan.tokens is not None              # never "0 B, any context fits"
    assert kv.bytes_per_token(layout, TABBY) == full + 39 * 8 * (192 + 128) * 2


def test_mixed_k_and_v_types_apply_to_k_and_v_sizes_apart():
    layout = layout_from_dict(MIMO_V2_FLASH)
    mixed = kv_modes.ggml_type("q8_0,q4_0")
    assert kv.bytes_per_token(layout, mixed) == 9 * 4 * (192 * 34 // 32 + 128 * 18 // 32)


@pytest.mark.parametrize(("name", "layers", "full", "linear", "kv_heads"), [
    ("aic-qwen3.5-27b.json", 64, 16, 48, 4),          # Qwen/Qwen3.5-27B: every 4th of 64 full
    ("aic-qwen3.5-35b-a3b.json", 40, 10, 30, 2),      # Qwen/Qwen3.5-35B-A3B: every 4th of 40 full
])
def test_qwen35_real_configs(name, layers, full, linear, kv_heads):
    layout = kv.read_layout(CONFIGS / name)
    assert (layout.total_layers, layout.full_layers, dict(layout.no_cache_kinds)) == (
        layers, full, {"linear_attention": linear})
    assert kv.bytes_per_token(layout, F16) == f16_bytes(full, kv_heads, 256)


@pytest.mark.parametrize(("name", "layers"), [("aic-gpt-oss-20b.json", 24), ("aic-gpt-oss-120b.json", 36)])
def test_gpt_oss_real_configs(name, layers):
    layout = kv.read_layout(CONFIGS / name)          # layer_types alternate sliding (128) and full, 8 KV heads x 64
    assert (layout.full_layers, layout.sliding_layers, layout.window) == (layers // 2, layers // 2, 128)
    assert kv.bytes_per_token(layout, F16) == f16_bytes(layers // 2, 8, 64)
    assert kv.bytes_per_token(layout, TABBY) == f16_bytes(layers, 8, 64)


def test_deepseek_v3_real_config_is_mla():
    layout = kv.read_layout(CONFIGS / "aic-deepseek-v3.json")   # 61 layers, kv_lora_rank 512 + qk_rope_head_dim 64
    assert (layout.count("mla"), layout.kv_layers) == (61, 61)
    assert kv.bytes_per_token(layout, F16) == 61 * (512 + 64) * 2 == 70_272


# --- verbatim files other repositories keep (see SOURCES: how each was judged whole) ----------------------------

def test_lfm2_350m_real_config_early_index_form():
    layout = kv.read_layout(CONFIGS / "lfm2-350m.json")       # LiquidAI/LFM2-350M, downloaded with the model
    # 16 layers; full_attn_idxs [2, 5, 8, 10, 12, 14]: 6 attention (8 KV heads x 1024 / 16 = 64), 10 short conv
    assert [i for i, layer in enumerate(layout.layers) if layer.kind == "full"] == [2, 5, 8, 10, 12, 14]
    assert (layout.total_layers, layout.full_layers, layout.count("state")) == (16, 6, 10)
    assert kv.bytes_per_token(layout, F16) == kv.bytes_per_token(layout, TABBY) == f16_bytes(6, 8, 64) == 12_288
    # conv state per sequence: 10 layers x (conv_L_cache 3 - 1) x hidden 1024 x 4 bytes (f32)
    assert layout.state_bytes == 10 * (3 - 1) * 1024 * 4 == 81_920
    # the uniform model counted all 16 layers: 2.7x too much
    assert f16_bytes(16, 8, 64) / kv.bytes_per_token(layout, F16) > 2.6


def test_qwen3_next_80b_instruct_real_config():
    layout = kv.read_layout(CONFIGS / "qwen3-next-80b-a3b-instruct.json")   # Qwen/Qwen3-Next-80B-A3B-Instruct
    # 48 layers, full_attention_interval 4: full at 3, 7, ..., 47 (12), 36 GatedDeltaNet; 2 KV heads x 256
    assert [i for i, layer in enumerate(layout.layers) if layer.kind == "full"] == list(range(3, 48, 4))
    assert (layout.total_layers, layout.full_layers, dict(layout.no_cache_kinds)) == (48, 12, {"linear_attention": 36})
    assert kv.bytes_per_token(layout, F16) == f16_bytes(12, 2, 256) == 24_576
    # GatedDeltaNet state: 36 x ((conv 4 - 1) x (2 x 16 key heads x 128 + 32 value heads x 128) + 128 x 128 x 32) x 4
    assert layout.state_bytes == 36 * ((4 - 1) * (2 * 16 * 128 + 32 * 128) + 128 * 128 * 32) * 4 == 79_036_416
    # the first commit's fixture holds 19 of these 39 keys (no linear_* sizes): same layers, state not sized
    fixture = kv.read_layout(CONFIGS / "qwen3-next-80b-a3b.json")
    assert fixture.layers == layout.layers and fixture.state_bytes is None


def test_mistral_small_3_text_stack_real_config():
    layout = kv.read_layout(CONFIGS / "mistral-small-3-flux2-dev-text-encoder.json")   # FLUX.2-dev's text encoder
    # text_config: 40 layers, sliding_window null (no sliding layers), 8 KV heads x head_dim 128
    assert (layout.total_layers, layout.full_layers, layout.sliding_layers) == (40, 40, 0)
    assert kv.bytes_per_token(layout, F16) == kv.bytes_per_token(layout, VLLM) == f16_bytes(40, 8, 128) == 163_840
    # the same layers as transformers' Mistral3Config() defaults (checkpoint Mistral-Small-3.1-24B-Instruct-2503)
    assert layout.layers == kv.read_layout(CONFIGS / "tf-mistral3.json").layers


def test_phi4_14b_stack_under_a_remote_code_type_is_full_attention_and_says_so():
    layout = kv.read_layout(CONFIGS / "phi-4-reasoning-vision-15b.json")   # microsoft/Phi-4-reasoning-vision-15B
    # model_type phi4-siglip (remote code): 40 layers planned as full attention, 10 KV heads x 5120 / 40 = 128
    assert (layout.total_layers, layout.full_layers, layout.sliding_layers) == (40, 40, 0)
    assert kv.bytes_per_token(layout, F16) == f16_bytes(40, 10, 128) == 204_800
    assert any("'phi4-siglip' is not one labwright knows" in note for note in layout.notes)
    plan = kv.plan(layout, F16, budget=8 * 1024**3).to_json()
    assert plan["bytes_per_token"] == 204_800 and any("phi4-siglip" in note for note in plan["notes"])


# --- families still written from their config classes' keys (no verbatim config.json found) ---------------------

def test_lfm2_conv_layers_and_early_index_form():
    types = ["conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv", "conv", "full_attention",
             "conv", "full_attention", "conv", "full_attention", "conv", "full_attention", "conv"]
    doc = {"model_type": "lfm2", "num_hidden_layers": 16, "hidden_size": 2048, "num_attention_heads": 32,
           "num_key_value_heads": 8, "conv_L_cache": 3, "layer_types": types}
    layout = layout_from_dict(doc)
    assert (layout.full_layers, layout.count("state")) == (6, 10)
    assert kv.bytes_per_token(layout, F16) == f16_bytes(6, 8, 64)             # head_dim = 2048 / 32
    assert layout.state_bytes == 10 * (3 - 1) * 2048 * 4
    early = {k: v for k, v in doc.items() if k != "layer_types"} | {"full_attn_idxs": [2, 5, 8, 10, 12, 14]}
    assert layout_from_dict(early).layers == layout.layers


def test_granite_4_hybrid_attention_layers():
    # Granite 4.0-H-style: 40 layers, attention at 5, 15, 25, 35 (transformers' defaults are all-Mamba, see
    # test_kv_upstream.py); Jamba's attn_layer_period from JambaConfig's defaults: test_kv_upstream.py
    granite = {"model_type": "granitemoehybrid", "num_hidden_layers": 40, "hidden_size": 4096,
               "num_attention_heads": 32, "num_key_value_heads": 8,
               "layer_types": ["attention" if i in (5, 15, 25, 35) else "mamba" for i in range(40)]}
    assert kv.bytes_per_token(layout_from_dict(granite), F16) == f16_bytes(4, 8, 128)


def test_falcon_h1_attends_in_every_layer_beside_its_mamba():
    doc = {"model_type": "falcon_h1", "num_hidden_layers": 44, "hidden_size": 3072, "num_attention_heads": 12,
           "num_key_value_heads": 2, "head_dim": 128, "mamba_d_ssm": 3072, "mamba_d_state": 256,
           "mamba_n_groups": 1, "mamba_d_conv": 4}
    layout = layout_from_dict(doc)
    assert layout.full_layers == 44
    assert kv.bytes_per_token(layout, F16) == f16_bytes(44, 2, 128)
    assert layout.state_bytes == 44 * ((4 - 1) * (3072 + 2 * 256) + 256 * 3072) * 4


# --- never silently wrong --------------------------------------------------------------------------------------

def test_an_unread_layer_structure_is_refused_naming_the_key():
    doc = {"model_type": "newthing", "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 64,
           "attention_layer_indices": [0, 2]}
    with pytest.raises(BadInput, match="attention_layer_indices: a per-layer structure labwright does not read"):
        layout_from_dict(doc)


def test_an_unknown_model_type_is_planned_as_full_attention_and_says_so():
    layout = layout_from_dict({"model_type": "brandnew", "num_hidden_layers": 4, "num_key_value_heads": 2,
                               "head_dim": 64})
    assert layout.full_layers == 4
    assert any("'brandnew' is not one labwright knows" in note for note in layout.notes)


def test_a_safetensors_index_is_refused(tmp_path):
    path = tmp_path / "model.safetensors.index.json"
    path.write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": {"a": "model.safetensors"}}))
    with pytest.raises(BadInput, match="safetensors index"):
        kv.read_layout(path)


# --- GGUF headers mirroring real models' metadata ----------------------------------------------------------------

def write_gguf(path: Path, arch: str, meta: dict, vocab: int = 1000, tensor_bytes: int = 64) -> Path:
    return support_write_gguf(path, arch, meta, vocab, tensor_bytes)


# llama.cpp writes these keys for Qwen3.5-27B (qwen35): 64 blocks, every 4th full attention, 4 KV heads x 256.
QWEN35_27B = {"block_count": 64, "context_length": 262144, "embedding_length": 5120, "attention.head_count": 24,
              "attention.head_count_kv": 4, "attention.key_length": 256, "attention.value_length": 256,
              "full_attention_interval": 4}


def test_gguf_qwen35_matches_seed_004(tmp_path):
    layout = kv.read_layout(write_gguf(tmp_path / "Qwen3.5-27B-Q4_K_M.gguf", "qwen35", QWEN35_27B))
    assert (layout.origin, layout.full_layers, layout.count("state")) == ("gguf", 16, 48)
    # seed 004: "Only 16 of 64 layers need a KV cache"; q4_0 at 128K: 16 x 4 x 512 x 18/32 x 131,072 = 2.25 GiB
    q4 = kv_modes.ggml_type("q4_0")
    assert kv.kv_bytes(layout, q4, 131_072) == 16 * 4 * 512 * 18 // 32 * 131_072


def test_gguf_gemma3_swa_pattern_from_llama_cpp_code(tmp_path):
    meta = {"block_count": 34, "context_length": 131072, "embedding_length": 2560, "attention.head_count": 8,
            "attention.head_count_kv": 4, "attention.key_length": 256, "attention.value_length": 256,
            "attention.sliding_window": 1024}
    layout = kv.read_layout(write_gguf(tmp_path / "gemma-3-4b.gguf", "gemma3", meta))
    assert (layout.full_layers, layout.sliding_layers) == (5, 29)              # set_swa_pattern(6)
    assert kv.bytes_per_token(layout, F16) == f16_bytes(5, 4, 256)


def test_gguf_per_layer_kv_heads_zero_means_no_kv(tmp_path):
    pattern = NEMOTRON_3_NANO["hybrid_override_pattern"]
    meta = {"block_count": 52, "embedding_length": 2688, "attention.head_count": 32,
            "attention.head_count_kv": [2 if c == "*" else 0 for c in pattern], "attention.key_length": 128,
            "attention.value_length": 128, "feed_forward_length": [1856 if c == "E" else 0 for c in pattern]}
    layout = kv.read_layout(write_gguf(tmp_path / "nemotron.gguf", "nemotron_h_moe", meta))
    # 6 attention, 23 Mamba (no KV, no FFN), 23 MoE (no KV, feed_forward_length > 0: no state either)
    assert (layout.full_layers, layout.count("state"), layout.count("none")) == (6, 23, 23)
    assert kv.bytes_per_token(layout, F16) == f16_bytes(6, 2, 128)


def test_gguf_gemma4_style_bool_pattern_and_swa_sizes(tmp_path):
    flags = ([True] * 5 + [False]) * 5                 # gemma-4-26B-A4B: 30 blocks, every 6th global
    meta = {"block_count": 30, "embedding_length": 2816, "attention.head_count": 16,
            "attention.head_count_kv": [8 if f else 2 for f in flags], "attention.key_length": 512,
            "attention.value_length": 512, "attention.key_length_swa": 256, "attention.value_length_swa": 256,
            "attention.sliding_window": 1024, "attention.sliding_window_pattern": flags}
    layout = kv.read_layout(write_gguf(tmp_path / "gemma4.gguf", "gemma4", meta))
    assert layout.layers == layout_from_dict(GEMMA4).layers


def test_gguf_llama4_chunked_and_mla(tmp_path):
    meta = {"block_count": 48, "embedding_length": 5120, "attention.head_count": 40, "attention.head_count_kv": 8,
            "attention.key_length": 128, "attention.value_length": 128}
    layout = kv.read_layout(write_gguf(tmp_path / "scout.gguf", "llama4", meta))
    assert layout.layers == layout_from_dict(LLAMA4_SCOUT).layers
    meta = {"block_count": 61, "embedding_length": 7168, "attention.head_count": 128, "attention.head_count_kv": 1,
            "attention.kv_lora_rank": 512, "rope.dimension_count": 64, "attention.key_length": 576,
            "attention.value_length": 512}
    layout = kv.read_layout(write_gguf(tmp_path / "deepseek.gguf", "deepseek2", meta))
    assert kv.bytes_per_token(layout, F16) == 61 * 576 * 2


def test_gguf_truncated_and_not_gguf(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", "qwen35", QWEN35_27B, tensor_bytes=4096)
    whole = path.read_bytes()
    (tmp_path / "short-data.gguf").write_bytes(whole[:-1000])
    (tmp_path / "short-header.gguf").write_bytes(whole[:200])
    (tmp_path / "text.gguf").write_text("<html>not found</html>")
    with pytest.raises(BadInput, match="truncated: its tensor table needs"):
        kv.read_layout(tmp_path / "short-data.gguf")
    with pytest.raises(BadInput, match="truncated: the header runs past the end"):
        kv.read_layout(tmp_path / "short-header.gguf")
    with pytest.raises(BadInput, match="not a GGUF file"):
        kv.read_layout(tmp_path / "text.gguf")


def test_gguf_header_only_on_a_huge_sparse_file(tmp_path):
    path = write_gguf(tmp_path / "big.gguf", "qwen35", QWEN35_27B, vocab=150_000)
    metadata, tensors = kv_gguf.read_metadata(path)
    assert tensors == 1 and metadata["qwen35.block_count"] == 64
    assert metadata["tokenizer.ggml.tokens"] is None          # skipped, never decoded
