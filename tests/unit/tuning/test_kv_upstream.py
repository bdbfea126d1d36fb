"""The planner over config.json files written by `transformers` itself, and recurrent state from GGUF metadata.

tf-*.json (tests/unit/tuning/configs, made by make_from_transformers.py from the transformers 5.23.0 wheel on PyPI,
see SOURCES) are either a config class's defaults or a verbatim config.json loaded and saved again. Expected values
are the formula written out with the layer counts; recurrent state per sequence is llama.cpp's n_embd_r() + n_embd_s()
per recurrent layer, f32 (src/llama-hparams.cpp), the same whether read from config.json or from a GGUF header.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labwright.errors import BadInput
from labwright.tuning import kv, kv_modes
from labwright.tuning.kv_config import layout_from_dict
from support.cli_child import run_cli
from support.gguf_files import write_gguf

CONFIGS = Path(__file__).resolve().parent / "configs"
F16 = kv_modes.ggml_type("f16")
TABBY = kv_modes.tabby_mode("FP16")
F32 = 4


def f16_bytes(layers: int, kv_heads: int, k_dim: int, v_dim: int | None = None) -> int:
    return layers * kv_heads * (k_dim + (k_dim if v_dim is None else v_dim)) * 2


def load(name: str) -> dict:
    return json.loads((CONFIGS / name).read_text())


def shape(layout: kv.KvLayout) -> list[tuple]:
    """Each layer's kind and width, without the name a config spells its recurrent layers with."""
    return [(layer.kind, layer.kv_heads, layer.k_dim, layer.v_dim) for layer in layout.layers]


def mamba2(layers: int, conv: int, inner: int, groups: int, state: int) -> int:
    """llama.cpp: r = (d_conv - 1) x (d_inner + 2 n_group d_state), s = d_state x d_inner, f32, per layer."""
    return layers * ((conv - 1) * (inner + 2 * groups * state) + state * inner) * F32


def test_every_tf_file_is_recorded_with_its_transformers_version():
    sources = (CONFIGS / "SOURCES").read_text()
    for path in sorted(CONFIGS.glob("tf-*.json")):
        assert path.name in sources
        assert json.loads(path.read_text())["transformers_version"] == "5.23.0"


# --- class defaults -------------------------------------------------------------------------------------------------

def test_qwen3_next_defaults():
    layout = kv.read_layout(CONFIGS / "tf-qwen3-next.json")
    # 48 layers, layer_types: every 4th full attention (12), 36 GatedDeltaNet; 2 KV heads x 256
    assert (layout.total_layers, layout.full_layers, layout.count("state")) == (48, 12, 36)
    assert kv.bytes_per_token(layout, F16) == f16_bytes(12, 2, 256) == 24_576
    # GDN state: (conv 4 - 1) x (2 x 16 key heads x 128 + 32 value heads x 128) + 128 x 128 x 32, f32, 36 layers
    assert layout.state_bytes == 36 * ((4 - 1) * (2 * 16 * 128 + 32 * 128) + 128 * 128 * 32) * F32
    # the same shape as the (unsourced) fixture from the planner's first commit
    assert shape(layout) == shape(kv.read_layout(CONFIGS / "qwen3-next-80b-a3b.json"))


def test_gemma3n_defaults_kv_shared_layers():
    layout = kv.read_layout(CONFIGS / "tf-gemma3n.json")      # text_config of Gemma3nConfig()
    # 35 layers, the last 15 reuse KV; of the first 20 every 5th is full: 4 full + 16 sliding (window 512), 2 x 256
    assert (layout.total_layers, layout.full_layers, layout.sliding_layers, layout.count("none")) == (35, 4, 16, 15)
    assert layout.window == 512
    assert kv.bytes_per_token(layout, F16) == f16_bytes(4, 2, 256) == 8_192
    assert kv.bytes_per_token(layout, TABBY) == f16_bytes(20, 2, 256)
    # llama.cpp at 32,768: sliding layers hold PAD256(min(32768, 512 + 512)) = 1,024 cells
    assert kv.kv_bytes(layout, F16, 32_768) == f16_bytes(4, 2, 256) * 32_768 + f16_bytes(16, 2, 256) * 1024


def test_jamba_defaults_period_and_mamba1_state():
    layout = kv.read_layout(CONFIGS / "tf-jamba.json")
    # attn_layer_period 8, offset 4: attention at 4, 12, 20, 28; 28 Mamba layers
    assert [i for i, layer in enumerate(layout.layers) if layer.attends] == [4, 12, 20, 28]
    assert kv.bytes_per_token(layout, F16) == f16_bytes(4, 8, 128)
    # Mamba1: no B/C groups (n_group 0): r = 3 x 8192, s = 16 x 8192 (d_inner = expand 2 x hidden 4096)
    assert layout.state_bytes == mamba2(28, 4, 2 * 4096, 0, 16)


def test_mistral_small_3_and_phi3_defaults():
    mistral = kv.read_layout(CONFIGS / "tf-mistral3.json")    # text_config: 40 layers, 8 KV heads x 128
    assert (mistral.total_layers, mistral.full_layers) == (40, 40)
    assert kv.bytes_per_token(mistral, F16) == f16_bytes(40, 8, 128) == 163_840
    phi3 = kv.read_layout(CONFIGS / "tf-phi3.json")           # 32 layers, 32 KV heads x (3072 / 32 = 96)
    assert kv.bytes_per_token(phi3, F16) == f16_bytes(32, 32, 96) == 393_216


def test_exaone4_pattern_is_three_sliding_then_full():
    doc = load("tf-exaone4.json")
    # the defaults: window 4096 over max_position_embeddings 2048, so every layer sees the whole context
    layout = layout_from_dict(doc)
    assert layout.full_layers == 32 and any("4,096 >= max_position_embeddings" in note for note in layout.notes)
    # with a longer context the class's layer_types apply: sliding unless (i + 1) % 4 == 0
    layout = layout_from_dict(doc | {"max_position_embeddings": 131_072})
    assert [i for i, layer in enumerate(layout.layers) if layer.kind == "full"] == list(range(3, 32, 4))
    assert (layout.full_layers, layout.sliding_layers, layout.window) == (8, 24, 4096)
    assert kv.bytes_per_token(layout, F16) == f16_bytes(8, 32, 128)       # exaone4 is capped by llama.cpp


def test_exaone4_string_pattern_as_its_docstring_describes():
    # Exaone4Config docstring: sliding_window_pattern "LLLG" is the same as 4; the final layer is always global
    doc = {k: v for k, v in load("tf-exaone4.json").items() if k != "layer_types"}
    doc |= {"max_position_embeddings": 131_072, "sliding_window_pattern": "LLLG"}
    assert layout_from_dict(doc).layers == layout_from_dict(doc | {"sliding_window_pattern": 4}).layers
    # a period that does not divide the layer count still ends on a global layer (31 layers, "LLG")
    odd = layout_from_dict(doc | {"num_hidden_layers": 31, "sliding_window_pattern": "LLG"})
    assert [i for i, layer in enumerate(odd.layers) if layer.kind == "full"] == [*range(2, 31, 3), 30]


def test_mimo_v2_flash_defaults_match_the_verbatim_config():
    verbatim = kv.read_layout(CONFIGS / "aic-mimo-v2-flash.json")
    for name in ("tf-mimo-v2-flash.json", "tf-mimo-v2-flash-resaved.json"):
        layout = kv.read_layout(CONFIGS / name)
        # transformers keeps no swa_* keys: its attention doubles the KV heads of sliding layers (4 -> 8), and its
        # window is sliding_window_size + 1 = 129
        assert shape(layout) == shape(verbatim), name
        assert (layout.window, verbatim.window) == (129, 128)
        assert kv.bytes_per_token(layout, F16) == 9 * 4 * (192 + 128) * 2 == 23_040
        # llama.cpp caps a sliding layer at PAD256(min(ctx, window + 512)): 768 cells for 128 and 129 alike
        assert kv.kv_bytes(layout, F16, 65_536) == kv.kv_bytes(verbatim, F16, 65_536)


def test_hybrid_defaults_spelled_the_transformers_5_way():
    granite = kv.read_layout(CONFIGS / "tf-granitemoehybrid.json")
    # 32 layers, all "linear_attention" = Mamba2 in transformers 5 (no GatedDeltaNet keys): no KV, state sized as Mamba2
    assert (granite.count("state"), granite.kv_layers) == (32, 0)
    assert granite.state_bytes == mamba2(32, 4, 2 * 4096, 1, 256)
    falcon = kv.read_layout(CONFIGS / "tf-falcon-h1.json")
    # attention in all 32 layers (8 KV heads x 4096 / 32) and a Mamba2 mixer beside it (d_ssm 1024, d_state 256)
    assert falcon.full_layers == 32 and kv.bytes_per_token(falcon, F16) == f16_bytes(32, 8, 128)
    assert falcon.state_bytes == mamba2(32, 4, 1024, 1, 256)
    lfm2 = kv.read_layout(CONFIGS / "tf-lfm2.json")
    # full_attn_idxs None: Lfm2Config makes every one of its 32 layers attention (8 KV heads x 2560 / 32 = 80)
    assert (lfm2.full_layers, lfm2.count("state")) == (32, 0)
    assert kv.bytes_per_token(lfm2, F16) == f16_bytes(32, 8, 80)


def test_glm4_moe_defaults_have_no_head_size_and_are_refused():
    with pytest.raises(BadInput, match="hidden_size 4096 is not divisible by num_attention_heads 96.*head_dim"):
        kv.read_layout(CONFIGS / "tf-glm4-moe.json")
    # with the head_dim the GLM-4.5(-Air) configs carry: 46 layers x 8 KV heads x 128
    layout = layout_from_dict(load("tf-glm4-moe.json") | {"head_dim": 128})
    assert kv.bytes_per_token(layout, F16) == f16_bytes(46, 8, 128)


# --- saved again by transformers 5: the same cache as the verbatim file ----------------------------------------------

@pytest.mark.parametrize(("resaved", "verbatim"), [
    ("tf-nemotron-3-nano-resaved.json", "aic-nemotron-3-nano-30b-a3b.json"),
    ("tf-nemotron-h-56b-resaved.json", "aic-nemotron-h-56b-base-8k.json"),
    ("tf-qwen3.5-27b-resaved.json", "aic-qwen3.5-27b.json"),
])
def test_resaved_configs_plan_like_the_originals(resaved, verbatim):
    again, original = kv.read_layout(CONFIGS / resaved), kv.read_layout(CONFIGS / verbatim)
    assert shape(again) == shape(original)
    assert again.state_bytes == original.state_bytes is not None
    assert kv.bytes_per_token(again, F16) == kv.bytes_per_token(original, F16)


def test_nemotron_resaved_state_is_mamba2_not_gated_deltanet():
    layout = kv.read_layout(CONFIGS / "tf-nemotron-3-nano-resaved.json")
    # 52 layers in layers_block_type: 6 full_attention, 23 linear_attention (= Mamba2: 64 heads x 64, d_state 128,
    # n_groups 8, conv 4), 23 moe
    assert (layout.full_layers, layout.count("state"), layout.count("none")) == (6, 23, 23)
    assert layout.state_bytes == mamba2(23, 4, 64 * 64, 8, 128)


# --- GGUF: recurrent state from the ssm.* / shortconv / wkv keys ------------------------------------------------------

def test_gguf_qwen35_state_matches_its_config_json(tmp_path):
    cfg = load("aic-qwen3.5-27b.json")["text_config"]
    # llama.cpp convert_hf_to_gguf (Qwen3Next/3.5): conv_kernel = linear_conv_kernel_dim, state_size =
    # linear_key_head_dim, group_count = linear_num_key_heads, inner_size = value heads x value head size
    meta = {"block_count": 64, "context_length": 262144, "embedding_length": 5120, "attention.head_count": 24,
            "attention.head_count_kv": 4, "attention.key_length": 256, "attention.value_length": 256,
            "full_attention_interval": 4, "ssm.conv_kernel": cfg["linear_conv_kernel_dim"],
            "ssm.state_size": cfg["linear_key_head_dim"], "ssm.group_count": cfg["linear_num_key_heads"],
            "ssm.inner_size": cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"],
            "ssm.time_step_rank": cfg["linear_num_value_heads"]}
    layout = kv.read_layout(write_gguf(tmp_path / "Qwen3.5-27B.gguf", "qwen35", meta))
    # 48 GatedDeltaNet layers: (4 - 1) x (48 x 128 + 2 x 16 x 128) + 128 x 48 x 128, f32
    assert layout.state_bytes == mamba2(48, 4, 48 * 128, 16, 128) == 156_893_184
    assert layout.state_bytes == kv.read_layout(CONFIGS / "aic-qwen3.5-27b.json").state_bytes
    assert kv.plan(layout, F16).to_json()["state_bytes_per_sequence"] == 156_893_184


def qwen3_next_meta(cfg: dict) -> dict:
    """The keys llama.cpp's convert_hf_to_gguf writes for Qwen3-Next, from its config.json (as for Qwen3.5 above)."""
    return {"block_count": cfg["num_hidden_layers"], "context_length": cfg["max_position_embeddings"],
            "embedding_length": cfg["hidden_size"], "attention.head_count": cfg["num_attention_heads"],
            "attention.head_count_kv": cfg["num_key_value_heads"], "attention.key_length": cfg["head_dim"],
            "attention.value_length": cfg["head_dim"], "ssm.conv_kernel": cfg["linear_conv_kernel_dim"],
            "ssm.state_size": cfg["linear_key_head_dim"], "ssm.group_count": cfg["linear_num_key_heads"],
            "ssm.inner_size": cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"],
            "ssm.time_step_rank": cfg["linear_num_value_heads"]}


def test_gguf_qwen3_next_without_an_interval_key_is_every_fourth_layer_as_llama_cpp_assumes(tmp_path):
    # llama.cpp 02ebd8f src/models/qwen3next.cpp: full_attn_interval = 4 unless the file says otherwise; before
    # that default, a GGUF without the key was planned as 48 full-attention layers (4x the KV) with no state
    cfg = load("qwen3-next-80b-a3b-instruct.json")
    meta = qwen3_next_meta(cfg)
    layout = kv.read_layout(write_gguf(tmp_path / "Qwen3-Next-80B-A3B.gguf", "qwen3next", meta))
    config = kv.read_layout(CONFIGS / "qwen3-next-80b-a3b-instruct.json")
    # 12 full (layers 3, 7, ..., 47) x 2 KV heads x 256; 36 GatedDeltaNet layers with the config's state
    assert [i for i, layer in enumerate(layout.layers) if layer.attends] == list(range(3, 48, 4))
    assert kv.bytes_per_token(layout, F16) == f16_bytes(12, 2, 256) == kv.bytes_per_token(config, F16)
    assert layout.state_bytes == mamba2(36, 4, 32 * 128, 16, 128) == config.state_bytes == 79_036_416
    # the key, when present, is read (an interval of 2: 24 full, 24 recurrent)
    two = kv.read_layout(write_gguf(tmp_path / "two.gguf", "qwen3next", meta | {"full_attention_interval": 2}))
    assert (two.full_layers, two.count("state")) == (24, 24)


def test_gguf_qwen35_recurrent_layers_flags_and_mtp_block(tmp_path):
    cfg = load("aic-qwen3.5-27b.json")["text_config"]
    meta = qwen3_next_meta(cfg | {"num_hidden_layers": 64})
    # %s.attention.recurrent_layers (one flag per layer) wins over the interval: here the last 8 layers attend
    flags = [i < 56 for i in range(64)]
    layout = kv.read_layout(write_gguf(tmp_path / "flags.gguf", "qwen35", meta | {"attention.recurrent_layers": flags}))
    assert [i for i, layer in enumerate(layout.layers) if layer.attends] == list(range(56, 64))
    assert layout.state_bytes == mamba2(56, 4, 48 * 128, 16, 128)
    # a trailing NextN/MTP block (block_count 65, nextn_predict_layers 1) is never recurrent and, as llama.cpp's
    # n_layer_kv_from_start = n_layer - nextn_predict_layers makes has_kv(64) false, keeps no KV: 16 layers attend
    mtp = kv.read_layout(write_gguf(tmp_path / "mtp.gguf", "qwen35", meta | {"block_count": 65,
                                                                            "nextn_predict_layers": 1}))
    assert [i for i, layer in enumerate(mtp.layers) if layer.attends] == list(range(3, 64, 4))
    assert mtp.layers[64].kind == "none" and any("NextN/MTP" in note for note in mtp.notes)
    assert kv.bytes_per_token(mtp, F16) == kv.bytes_per_token(
        kv.read_layout(write_gguf(tmp_path / "no-mtp.gguf", "qwen35", meta)), F16)
    assert mtp.state_bytes == mamba2(48, 4, 48 * 128, 16, 128) == 156_893_184
    with pytest.raises(BadInput, match="attention.recurrent_layers has 63 entries but block_count is 64"):
        kv.read_layout(write_gguf(tmp_path / "bad.gguf", "qwen35", meta | {"attention.recurrent_layers": flags[1:]}))


def test_gguf_mimo_v2_sliding_layers_are_capped_as_llama_cpp_caps_them(tmp_path):
    cfg = load("aic-mimo-v2-flash.json")
    pattern = cfg["hybrid_layer_pattern"]           # 1 = sliding window attention, 0 = full
    # llama.cpp 0e703ad src/models/mimo2.cpp load_arch_hparams: swa_type STANDARD, n_swa from
    # %s.attention.sliding_window, swa_layers from %s.attention.sliding_window_pattern (array), heads per layer
    meta = {"block_count": 48, "embedding_length": cfg["hidden_size"],
            "attention.head_count": [cfg["swa_num_attention_heads"] if p else cfg["num_attention_heads"]
                                     for p in pattern],
            "attention.head_count_kv": [cfg["swa_num_key_value_heads"] if p else cfg["num_key_value_heads"]
                                        for p in pattern],
            "attention.key_length": cfg["head_dim"], "attention.value_length": cfg["v_head_dim"],
            "attention.sliding_window": cfg["sliding_window_size"],
            "attention.sliding_window_pattern": [bool(p) for p in pattern]}
    layout = kv.read_layout(write_gguf(tmp_path / "MiMo-V2-Flash.gguf", "mimo2", meta))
    config = kv.read_layout(CONFIGS / "aic-mimo-v2-flash.json")
    # 9 full (4 KV heads), 39 sliding (8 KV heads, window 128); K 192 and V 128 apart
    assert (layout.full_layers, layout.sliding_layers, layout.window) == (9, 39, 128)
    assert kv.bytes_per_token(layout, F16) == 9 * 4 * (192 + 128) * 2 == kv.bytes_per_token(config, F16)
    # at 32,768 tokens a sliding layer holds PAD256(min(32768, 128 + 512)) = 768 cells (the iSWA cache)
    assert kv.kv_bytes(layout, F16, 32_768) == 9 * 4 * 320 * 2 * 32_768 + 39 * 8 * 320 * 2 * 768
    assert kv.kv_bytes(layout, F16, 32_768) == kv.kv_bytes(config, F16, 32_768)


def test_gguf_lfm2_350m_matches_its_config_json(tmp_path):
    cfg = load("lfm2-350m.json")
    # llama.cpp convert_hf_to_gguf (LFM2): head_count_kv per layer, 0 for the short-conv layers; shortconv.l_cache
    meta = {"block_count": cfg["num_hidden_layers"], "embedding_length": cfg["hidden_size"],
            "attention.head_count": cfg["num_attention_heads"],
            "attention.head_count_kv": [cfg["num_key_value_heads"] if i in cfg["full_attn_idxs"] else 0
                                        for i in range(cfg["num_hidden_layers"])],
            "shortconv.l_cache": cfg["conv_L_cache"]}
    layout = kv.read_layout(write_gguf(tmp_path / "LFM2-350M.gguf", "lfm2", meta))
    config = kv.read_layout(CONFIGS / "lfm2-350m.json")
    assert shape(layout) == shape(config)
    # 6 attention layers x 8 KV heads x 64; 10 conv layers x hidden 1024 x (3 - 1) x 4 bytes
    assert kv.bytes_per_token(layout, F16) == f16_bytes(6, 8, 64) == kv.bytes_per_token(config, F16)
    assert layout.state_bytes == 10 * 1024 * (3 - 1) * F32 == config.state_bytes


def test_gguf_nemotron_h_mlp_layers_hold_no_state(tmp_path):
    pattern = load("aic-nemotron-3-nano-30b-a3b.json")["hybrid_override_pattern"]
    # llama.cpp: recurrent iff head_count_kv and feed_forward_length are both 0 in that layer
    meta = {"block_count": 52, "embedding_length": 2688, "attention.head_count": 32,
            "attention.head_count_kv": [2 if c == "*" else 0 for c in pattern],
            "feed_forward_length": [1856 if c == "E" else 0 for c in pattern],
            "attention.key_length": 128, "attention.value_length": 128, "ssm.conv_kernel": 4,
            "ssm.state_size": 128, "ssm.group_count": 8, "ssm.inner_size": 64 * 64, "ssm.time_step_rank": 64}
    layout = kv.read_layout(write_gguf(tmp_path / "nemotron.gguf", "nemotron_h_moe", meta))
    assert (layout.full_layers, layout.count("state"), layout.count("none")) == (6, 23, 23)
    assert layout.state_bytes == mamba2(23, 4, 64 * 64, 8, 128)
    assert layout.state_bytes == kv.read_layout(CONFIGS / "aic-nemotron-3-nano-30b-a3b.json").state_bytes


def test_gguf_falcon_h1_every_layer_is_recurrent_and_attends(tmp_path):
    meta = {"block_count": 32, "embedding_length": 4096, "attention.head_count": 32, "attention.head_count_kv": 8,
            "attention.key_length": 128, "attention.value_length": 128, "ssm.conv_kernel": 4, "ssm.state_size": 256,
            "ssm.group_count": 1, "ssm.inner_size": 1024, "ssm.time_step_rank": 128}
    layout = kv.read_layout(write_gguf(tmp_path / "falcon-h1.gguf", "falcon-h1", meta))
    assert layout.full_layers == 32 and kv.bytes_per_token(layout, F16) == f16_bytes(32, 8, 128)
    assert layout.state_bytes == mamba2(32, 4, 1024, 1, 256)
    assert layout.state_bytes == kv.read_layout(CONFIGS / "tf-falcon-h1.json").state_bytes


def test_gguf_lfm2_shortconv_state(tmp_path):
    # LFM2-1.2B: 16 blocks, attention (8 KV heads) at 2, 5, 8, 10, 12, 14; the rest short conv with L_cache 3
    attention = (2, 5, 8, 10, 12, 14)
    meta = {"block_count": 16, "embedding_length": 2048, "attention.head_count": 32,
            "attention.head_count_kv": [8 if i in attention else 0 for i in range(16)], "shortconv.l_cache": 3}
    layout = kv.read_layout(write_gguf(tmp_path / "lfm2.gguf", "lfm2", meta))
    assert (layout.full_layers, layout.count("state")) == (6, 10)
    assert kv.bytes_per_token(layout, F16) == f16_bytes(6, 8, 64)
    # r = n_embd x (l_cache - 1), s = 0 (no ssm keys): 10 x 2048 x 2 x 4 bytes
    assert layout.state_bytes == 10 * 2048 * (3 - 1) * F32


def test_gguf_pure_recurrent_mamba2_and_rwkv7(tmp_path):
    meta = {"block_count": 64, "embedding_length": 2560, "ssm.conv_kernel": 4, "ssm.state_size": 128,
            "ssm.group_count": 1, "ssm.inner_size": 5120, "ssm.time_step_rank": 80}
    mamba = kv.read_layout(write_gguf(tmp_path / "mamba2.gguf", "mamba2", meta))
    assert (mamba.kv_layers, mamba.state_bytes) == (0, mamba2(64, 4, 5120, 1, 128))
    # RWKV: r = token_shift_count (2 when absent) x n_embd, s = n_embd x wkv.head_size
    meta = {"block_count": 24, "embedding_length": 2048, "wkv.head_size": 64}
    rwkv = kv.read_layout(write_gguf(tmp_path / "rwkv7.gguf", "rwkv7", meta))
    assert rwkv.state_bytes == 24 * (2 * 2048 + 2048 * 64) * F32


def test_gguf_hybrid_without_ssm_keys_says_state_not_sized(tmp_path):
    meta = {"block_count": 8, "embedding_length": 1024, "attention.head_count": 8,
            "attention.head_count_kv": [0, 0, 0, 2, 0, 0, 0, 2], "attention.key_length": 128}
    layout = kv.read_layout(write_gguf(tmp_path / "jamba.gguf", "jamba", meta))
    assert layout.state_bytes is None
    assert any("jamba.ssm.*" in note for note in layout.notes)
    assert kv.bytes_per_token(layout, F16) == f16_bytes(2, 2, 128)


# --- GGUF: SWA patterns llama.cpp sets in code (exaone4, smallthinker) -----------------------------------------------

def test_gguf_exaone4_32b_swa_only_at_64_layers(tmp_path):
    base = {"embedding_length": 5120, "attention.head_count": 40, "attention.head_count_kv": 8,
            "attention.key_length": 128, "attention.value_length": 128}
    # 64 layers (32B): set_swa_pattern(4) -> full at 3, 7, ..., 63; window 4096 when the file names none
    layout = kv.read_layout(write_gguf(tmp_path / "exaone4-32b.gguf", "exaone4", base | {"block_count": 64}))
    assert [i for i, layer in enumerate(layout.layers) if layer.kind == "full"] == list(range(3, 64, 4))
    assert (layout.full_layers, layout.sliding_layers, layout.window) == (16, 48, 4096)
    assert kv.bytes_per_token(layout, F16) == f16_bytes(16, 8, 128)
    # same as transformers' Exaone4Config layer_types for 64 layers
    doc = load("tf-exaone4.json") | {"num_hidden_layers": 64, "max_position_embeddings": 131_072,
                                      "layer_types": None}
    assert [layer.kind for layer in layout.layers] == [
        "sliding" if (i + 1) % 4 else "full" for i in range(64)]
    assert layout_from_dict(doc).full_layers == 16
    # 30 layers (1.2B): llama.cpp sets no SWA, even with a window in the file
    small = kv.read_layout(write_gguf(tmp_path / "exaone4-1.2b.gguf", "exaone4",
                                      base | {"block_count": 30, "attention.sliding_window": 4096}))
    assert (small.full_layers, small.sliding_layers) == (30, 0)


def test_gguf_smallthinker_dense_first_and_forced_window(tmp_path):
    base = {"block_count": 32, "embedding_length": 1536, "attention.head_count": 12, "attention.head_count_kv": 2,
            "attention.key_length": 128, "attention.value_length": 128}
    # a window in the file switches SWA on; llama.cpp then forces n_swa = 4096 and puts the full layer first
    layout = kv.read_layout(write_gguf(tmp_path / "st.gguf", "smallthinker", base | {"attention.sliding_window": 2048}))
    assert [i for i, layer in enumerate(layout.layers) if layer.kind == "full"] == list(range(0, 32, 4))
    assert (layout.full_layers, layout.sliding_layers, layout.window) == (8, 24, 4096)
    # no window: no SWA at all
    plain = kv.read_layout(write_gguf(tmp_path / "st-plain.gguf", "smallthinker", base))
    assert (plain.full_layers, plain.sliding_layers) == (32, 0)


def test_kv_plan_cli_on_a_hybrid_gguf_prints_the_state_from_metadata(tmp_path, cli_env):
    meta = {"block_count": 64, "context_length": 262144, "embedding_length": 5120, "attention.head_count": 24,
            "attention.head_count_kv": 4, "attention.key_length": 256, "attention.value_length": 256,
            "full_attention_interval": 4, "ssm.conv_kernel": 4, "ssm.state_size": 128, "ssm.group_count": 16,
            "ssm.inner_size": 6144, "ssm.time_step_rank": 48}
    path = write_gguf(tmp_path / "Qwen3.5-27B-Q4_K_M.gguf", "qwen35", meta)
    args = ["kv", "plan", "--config", str(path), "--cache-type", "q8_0", "--context", "32768"]
    done = run_cli([*args, "--json"], env=cli_env)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["state_bytes_per_sequence"] == mamba2(48, 4, 6144, 16, 128) == 156_893_184
    assert plan["bytes_per_token"] == 16 * 4 * 2 * 256 * 34 // 32       # 16 full layers, q8_0 K and V
    table = run_cli(args, env=cli_env)
    assert "48 recurrent layers keep a fixed state per sequence (156,893,184 B)" in " ".join(table.stdout.split())


def test_gguf_glm4moe_nextn_layer_keeps_no_kv_cache(tmp_path):
    # GLM-4.5-Air as llama.cpp loads it: block_count 47 = 46 layers + 1 NextN layer (src/llama-model.cpp
    # LLM_ARCH_GLM4_MOE: "case 47: GLM-4.5-Air (46 layers + 1 NextN layer)", n_layer_kv_from_start = 47 - 1).
    # Heads as GLM-4.5-Air's config gives them: 96 query heads, 8 KV heads, head_dim 128.
    meta = {"block_count": 47, "embedding_length": 4096, "attention.head_count": 96, "attention.head_count_kv": 8,
            "attention.key_length": 128, "attention.value_length": 128, "nextn_predict_layers": 1}
    layout = kv.read_layout(write_gguf(tmp_path / "GLM-4.5-Air.gguf", "glm4moe", meta))
    assert layout.full_layers == 46 and layout.layers[46].kind == "none"
    assert kv.bytes_per_token(layout, F16) == 46 * 8 * (128 + 128) * 2 == 188_416
    # without the key every block keeps KV (47 x 8 x 256 x 2)
    plain = kv.read_layout(write_gguf(tmp_path / "plain.gguf", "glm4moe", {k: v for k, v in meta.items()
                                                                           if k != "nextn_predict_layers"}))
    assert kv.bytes_per_token(plain, F16) == 47 * 8 * 256 * 2
