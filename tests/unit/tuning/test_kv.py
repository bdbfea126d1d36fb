"""The KV planner: the seed's table exactly, plain/hybrid/sliding/MLA configs, cache modes, pages, bad configs."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from labwright.errors import BadInput
from labwright.tuning import kv, kv_modes
from labwright.tuning.data import kv_data
from labwright.tuning.units import GIB, parse_size

CONFIGS = Path(__file__).resolve().parent / "configs"
SEED = CONFIGS / "qwen3.5-9b.json"

# field note 001, docs/field-notes.md: bytes/token and "tokens in 2.4 GB KV budget" for Qwen3.5-9B.
SEED_TABLE = {"8,8": (16_384, 155_000), "8,4": (12_288, 207_000), "4,4": (8_192, 310_000)}


def tabby(mode: str, **kwargs) -> kv_modes.CacheSpec:
    return kv_modes.tabby_mode(mode, **kwargs)


def ggml(name: str, engine: str | None = None, **kwargs) -> kv_modes.CacheSpec:
    return kv_modes.ggml_type(name, engine, **kwargs)


def write(tmp_path: Path, doc: object, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


# --- the seed ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("config", ["qwen3.5-9b.json", "qwen3.5-9b-seed-spelling.json"])
def test_seed_layout_is_8_full_layers_of_32(config):
    layout = kv.read_layout(CONFIGS / config)
    assert (layout.total_layers, layout.full_layers, layout.sliding_layers) == (32, 8, 0)
    assert (layout.kv_heads, layout.head_dim, layout.kv_layers) == (4, 256, 8)


@pytest.mark.parametrize("mode", SEED_TABLE)
def test_seed_bytes_per_token_exactly(mode):
    expected, _ = SEED_TABLE[mode]
    assert kv.bytes_per_token(kv.read_layout(SEED), tabby(mode)) == expected


@pytest.mark.parametrize("mode", SEED_TABLE)
def test_seed_tokens_in_2_4_gb_are_the_binary_reading(mode):
    bpt, seed_tokens = SEED_TABLE[mode]
    tokens = kv.plan(kv.read_layout(SEED), tabby(mode), budget=parse_size("2.4GB", "--budget")).tokens
    assert tokens == (int(2.4 * GIB) // bpt) // 256 * 256          # 157,184 / 209,664 / 314,368
    assert abs(tokens - seed_tokens) / seed_tokens < 0.02               # the seed's "~" figures
    si_tokens = (2_400_000_000 // bpt) // 256 * 256                     # 146,432 at 8,8: not the seed's 155,000
    assert abs(si_tokens - seed_tokens) / seed_tokens > 0.05


def test_seed_values_in_full():
    layout = kv.read_layout(SEED)
    budget = parse_size("2.4GiB", "--budget")
    assert [kv.plan(layout, tabby(m), budget=budget).tokens for m in SEED_TABLE] == [157_184, 209_664, 314_368]


def test_interval_only_hybrid_counts_every_fourth_layer():
    layout = kv.read_layout(CONFIGS / "qwen3-next-80b-a3b.json")
    assert (layout.full_layers, layout.kv_layers, dict(layout.no_cache_kinds)) == (12, 12, {"linear_attention": 36})
    assert kv.bytes_per_token(layout, tabby("8,8")) == 12 * 2 * 256 * 2


def test_layer_kinds_without_cache_are_reported():
    layout = kv.read_layout(CONFIGS / "qwen3.5-9b-seed-spelling.json")
    assert dict(layout.no_cache_kinds) == {"linear": 24}
    assert layout.describe().startswith("8 of 32 layers keep a KV cache")


# --- plain transformers -----------------------------------------------------------------------------------------

def test_llama_3_8b_at_f16_is_131072_bytes_per_token():
    layout = kv.read_layout(CONFIGS / "llama-3-8b.json")
    assert (layout.kv_layers, layout.kv_heads, layout.head_dim) == (32, 8, 128)  # head_dim = 4096 / 32
    assert kv.bytes_per_token(layout, ggml("f16")) == 131_072
    assert kv.bytes_per_token(layout, tabby("FP16")) == 131_072
    assert kv.plan(layout, ggml("f16"), context=8192).kv_bytes == GIB


@pytest.mark.parametrize(("cache_type", "expected"), [
    ("q8_0", 32 * 8 * 128 * 2 * 34 // 32), ("q4_0", 32 * 8 * 128 * 2 * 18 // 32), ("q5_1", 32 * 8 * 128 * 2 * 24 // 32),
    ("iq4_nl", 36_864), ("bf16", 131_072), ("f32", 262_144), ("q8_0,q4_0", 32 * 8 * 128 * (34 + 18) // 32)])
def test_llama_cpp_block_sizes(cache_type, expected):
    assert kv.bytes_per_token(kv.read_layout(CONFIGS / "llama-3-8b.json"), ggml(cache_type)) == expected


def test_use_sliding_window_false_means_no_sliding_layers():
    layout = kv.read_layout(CONFIGS / "qwen2.5-7b.json")
    assert (layout.full_layers, layout.sliding_layers, layout.window) == (28, 0, None)
    assert kv.bytes_per_token(layout, ggml("f16")) == 28 * 4 * 128 * 4


def test_qwen2_max_window_layers_when_sliding_is_on(tmp_path):
    doc = json.loads((CONFIGS / "qwen2.5-7b.json").read_text()) | {"use_sliding_window": True, "max_window_layers": 20,
                                                                      "sliding_window": 4096}
    layout = kv.read_layout(write(tmp_path, doc))
    assert (layout.full_layers, layout.sliding_layers, layout.window) == (20, 8, 4096)


def test_mla_caches_one_latent_and_one_rope_key():
    layout = kv.read_layout(CONFIGS / "deepseek-v3.json")
    # one (kv_lora_rank 512 + qk_rope_head_dim 64)-wide vector per token, no K/V pair (vLLM MLAAttentionSpec)
    assert (layout.attention, layout.k_elements, layout.v_elements) == ("mla", 576, 0)
    assert kv.bytes_per_token(layout, ggml("f16")) == 61 * 576 * 2  # 70,272: DeepSeek-V3's known figure
    assert kv.bytes_per_token(layout, ggml("q8_0,q4_0")) == 61 * 576 * 34 // 32  # the latent takes the K type


def test_missing_kv_heads_means_multi_head_attention(tmp_path):
    layout = kv.read_layout(write(tmp_path, {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256}))
    assert (layout.kv_heads, layout.head_dim) == (4, 64)
    assert any("multi-head attention" in note for note in layout.notes)


# --- sliding windows ---------------------------------------------------------------------------------------------

def test_gemma_3_takes_head_counts_and_pattern_from_the_defaults():
    layout = kv.read_layout(CONFIGS / "gemma-3-4b.json")
    assert layout.model_type == "gemma3_text"
    assert (layout.kv_heads, layout.head_dim) == (4, 256)                       # Gemma3TextConfig defaults
    assert (layout.full_layers, layout.sliding_layers, layout.window) == (5, 29, 1024)  # every 6th of 34 global
    assert layout.max_context == 131_072
    assert any("num_key_value_heads = 4" in note for note in layout.notes)


def test_gemma_3_on_llama_cpp_caps_sliding_layers_at_window_plus_ubatch():
    layout, f16 = kv.read_layout(CONFIGS / "gemma-3-4b.json"), ggml("f16")
    per_layer = 4 * 256 * 2 * 2
    assert kv.bytes_per_token(layout, f16) == 5 * per_layer
    # sliding layers hold PAD256(min(32768, 1024 + 512)) = 1536 cells
    assert kv.kv_bytes(layout, f16, 32_768) == per_layer * (5 * 32_768 + 29 * 1536)
    # below the window every layer grows
    assert kv.kv_bytes(layout, f16, 1024) == per_layer * 34 * 1024


def test_gemma_3_on_tabbyapi_keeps_the_whole_context_in_every_layer():
    layout = kv.read_layout(CONFIGS / "gemma-3-4b.json")
    assert kv.bytes_per_token(layout, tabby("FP16")) == 34 * 4096
    assert kv.bytes_per_token(layout, ggml("f16", swa_full=True)) == 34 * 4096


def vllm_sliding_cells(tokens: int, window: int, batched: int = 2048, block: int = 16) -> int:
    """vLLM SlidingWindowSpec.max_memory_usage_bytes, in cells: (cdiv(min(window-1+batched, len), block) + 1) blocks."""
    return (-(-min(window - 1 + batched, tokens) // block) + 1) * block


def test_sliding_layer_is_bounded_by_min_of_context_and_window():
    layout = kv.read_layout(CONFIGS / "gemma-3-270m.json")   # layer_types: 3 full, 15 sliding, window 512
    assert (layout.full_layers, layout.sliding_layers, layout.window) == (3, 15, 512)
    auto = ggml("auto", "vllm")
    per_layer = 1 * 256 * 2 * 2
    for tokens in (100, 512, 513, 4096, 65_536):
        assert kv.kv_bytes(layout, auto, tokens) == per_layer * (3 * tokens + 15 * vllm_sliding_cells(tokens, 512))
    assert vllm_sliding_cells(65_536, 512) == 2576                # 511 + 2048 = 2559 -> 160 blocks + 1


def test_every_layer_sliding_stops_growing_at_the_window():
    layout = kv.read_layout(CONFIGS / "mistral-7b-v0.1.json")
    assert (layout.full_layers, layout.sliding_layers, layout.window) == (0, 32, 4096)
    auto = ggml("auto", "vllm")
    # never 0 bytes/token for a model with attention: the cost below the window, and the plan says it stops growing
    assert kv.bytes_per_token(layout, auto) == 32 * 8 * 128 * 2 * 2
    assert kv.all_capped(layout, auto)
    capped = 32 * 4096 * vllm_sliding_cells(32_768, 4096)          # 6,143 -> 385 blocks -> 6,160 cells
    assert kv.kv_bytes(layout, auto, 8192) == kv.kv_bytes(layout, auto, 32_768) == capped
    plan = kv.plan(layout, auto, budget=GIB)
    assert plan.tokens == 32_768 and any("stops growing" in note for note in plan.notes)
    assert kv.plan(layout, auto, budget=GIB // 4).tokens == 1792   # 32 x 4096 B x (n + 16) <= 256 MiB, whole pages
    # llama.cpp implements SWA per architecture; Mistral v0.1 is not one of them: full context, the cautious answer
    assert kv.bytes_per_token(layout, ggml("f16")) == 131_072


def test_gpt_oss_alternating_layers():
    layout = kv.read_layout(CONFIGS / "gpt-oss-20b.json")
    assert (layout.full_layers, layout.sliding_layers, layout.window) == (12, 12, 128)
    assert kv.bytes_per_token(layout, ggml("f16")) == 12 * 8 * 64 * 4


def test_unbounded_without_max_position_embeddings(tmp_path):
    doc = {"num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 64, "sliding_window": 256}
    plan = kv.plan(kv.read_layout(write(tmp_path, doc)), ggml("auto", "vllm"), budget=GIB)
    assert plan.tokens is None and any("any context fits" in note for note in plan.notes)


# --- pages -------------------------------------------------------------------------------------------------------

def test_budget_is_rounded_down_to_whole_pages():
    layout, mode = kv.read_layout(SEED), tabby("8,4")
    one_page = 256 * 12_288
    assert kv.tokens_in_budget(layout, mode, one_page) == 256
    assert kv.tokens_in_budget(layout, mode, one_page - 1) == 0
    assert kv.tokens_in_budget(layout, mode, 3 * one_page + one_page // 2) == 768
    assert kv.tokens_in_budget(layout, mode, 3 * one_page + one_page // 2, page=1) == 3 * 256 + 128
    assert kv.tokens_in_budget(layout, mode, 10 * one_page, page=1000) == 2000


def test_context_is_rounded_up_to_whole_pages():
    plan = kv.plan(kv.read_layout(SEED), tabby("8,4"), context=1000)
    assert (plan.context, plan.cache_tokens, plan.kv_bytes) == (1000, 1024, 1024 * 12_288)
    assert kv.plan(kv.read_layout(SEED), tabby("8,4"), context=1000, page=1).kv_bytes == 1000 * 12_288


def test_bad_page_and_context():
    with pytest.raises(BadInput, match="--page 0"):
        kv.plan(kv.read_layout(SEED), tabby("8,4"), budget=GIB, page=0)
    with pytest.raises(BadInput, match="--context 0"):
        kv.plan(kv.read_layout(SEED), tabby("8,4"), context=0)


def test_past_max_position_embeddings_is_noted():
    plan = kv.plan(kv.read_layout(SEED), tabby("4,4"), budget=parse_size("2.4GiB", "--budget"), context=300_000)
    assert any("max_position_embeddings" in note for note in plan.notes)


# --- cache modes -------------------------------------------------------------------------------------------------

def test_tabbyapi_modes_as_tabbyapi_accepts_them():
    assert tabby("Q8").k_bytes == tabby("8,8").k_bytes == 1
    assert tabby(" 8 , 4 ").name == "8,4"
    assert (tabby("fp16").k_bytes, tabby("Q6").v_bytes) == (2, Fraction(6, 8))
    for bad in ("9,4", "1,1", "16,16", "q8_0", "8", "8,4,4", ""):
        with pytest.raises(BadInput, match="not one tabbyAPI takes"):
            tabby(bad)


def test_count_scales_adds_exllamav3s_fp16_scale_per_32():
    layout = kv.read_layout(SEED)
    assert kv.bytes_per_token(layout, tabby("8,8", count_scales=True)) == 17_408
    assert kv.bytes_per_token(layout, tabby("8,4", count_scales=True)) == 13_312
    assert kv.bytes_per_token(layout, tabby("FP16", count_scales=True)) == 32_768


def test_engine_conventions_are_data():
    engines = kv_data()["engines"]
    assert engines["llamacpp"]["types"] == {"f32": [4, 1], "f16": [2, 1], "bf16": [2, 1], "q8_0": [34, 32],
                                            "q4_0": [18, 32], "q4_1": [20, 32], "q5_0": [22, 32], "q5_1": [24, 32],
                                            "iq4_nl": [18, 32]}
    assert "field note 001" in engines["tabbyapi"]["convention"] and engines["tabbyapi"]["scale_bytes"] == 2
    assert engines["tabbyapi"]["named"] == {"FP16": [16, 16], "Q8": [8, 8], "Q6": [6, 6], "Q4": [4, 4]}


def test_cache_type_engines():
    assert ggml("fp8").engine.key == "vllm"
    assert ggml("q8_0").engine.key == "llamacpp"
    assert ggml("Q8_0", "ollama").name == "q8_0"
    with pytest.raises(BadInput, match="Ollama takes one type"):
        ggml("q8_0,q4_0", "ollama")
    with pytest.raises(BadInput, match="not one Ollama supports"):
        ggml("q5_0", "ollama")
    with pytest.raises(BadInput, match="not one llama.cpp supports"):
        ggml("q3_k")
    with pytest.raises(BadInput, match="tabbyAPI takes --cache-mode"):
        ggml("q8_0", "tabbyapi")


def test_resolve_refuses_mixed_options():
    with pytest.raises(BadInput, match="both given"):
        kv_modes.resolve("8,4", "q8_0")
    with pytest.raises(BadInput, match="--cache-mode is tabbyAPI's setting"):
        kv_modes.resolve("8,4", None, "llamacpp")
    with pytest.raises(BadInput, match="engine 'exllama' is unknown"):
        kv_modes.resolve(None, "q8_0", "exllama")
    assert kv_modes.resolve(None, None) is None


def test_default_table_is_the_seed_modes_then_llama_cpp():
    assert [(s.engine.key, s.name) for s in kv_modes.common()] == [
        ("tabbyapi", "FP16"), ("tabbyapi", "8,8"), ("tabbyapi", "8,4"), ("tabbyapi", "4,4"),
        ("llamacpp", "f16"), ("llamacpp", "q8_0"), ("llamacpp", "q4_0")]


# --- malformed configs: one line naming the file and the key -----------------------------------------------------

@pytest.mark.parametrize(("doc", "message"), [
    ({"num_hidden_layers": 32, "hidden_size": 4096}, "missing num_key_value_heads and num_attention_heads"),
    ({"text_config": {"num_hidden_layers": 32, "hidden_size": 4096}}, "num_attention_heads (in text_config)"),
    ({"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128}, "missing num_hidden_layers"),
    ({"num_hidden_layers": 32, "num_key_value_heads": 8}, "missing hidden_size"),
    ({"num_hidden_layers": 32, "num_key_value_heads": "8", "head_dim": 128}, "num_key_value_heads is '8'"),
    ({"num_hidden_layers": 0, "num_key_value_heads": 8, "head_dim": 128}, "num_hidden_layers is 0"),
    ({"num_hidden_layers": 2, "num_key_value_heads": 8, "head_dim": 128, "layer_types": ["full_attention"]},
     "layer_types has 1 entries but num_hidden_layers is 2"),
    ({"num_hidden_layers": 1, "num_key_value_heads": 8, "head_dim": 128, "layer_types": ["hyper_attention"]},
     "layer_types[0] = 'hyper_attention' is not a known layer type"),
    ({"num_hidden_layers": 1, "num_key_value_heads": 8, "head_dim": 128, "layer_types": ["sliding_attention"]},
     "layers are sliding but there is no sliding_window"),
    ({"num_hidden_layers": 1, "num_key_value_heads": 8, "head_dim": 128, "layer_types": "full"}, "not a list"),
    ({"num_hidden_layers": 61, "kv_lora_rank": 512}, "missing qk_rope_head_dim"),
])
def test_malformed_config_names_file_and_key(tmp_path, doc, message):
    path = write(tmp_path, doc)
    with pytest.raises(BadInput) as caught:
        kv.read_layout(path)
    text = str(caught.value)
    assert message in text and str(path) in text and "\n" not in text


@pytest.mark.parametrize(("text", "message"), [
    ('{"num_hidden_layers": 4', "not valid JSON"), ("[1, 2]", "top level is a JSON list"),
    ('"config"', "top level is a JSON str"), ("", "not valid JSON")])
def test_unreadable_config(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(BadInput, match=message) as caught:
        kv.read_layout(path)
    assert str(path) in str(caught.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(BadInput, match="no such file or directory"):
        kv.read_layout(tmp_path / "nope.json")
    (tmp_path / "config.json").write_text((CONFIGS / "llama-3-8b.json").read_text())
    assert kv.read_layout(tmp_path).kv_layers == 32   # a model directory works too
