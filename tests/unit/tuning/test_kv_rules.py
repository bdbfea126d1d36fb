"""Engine rules checked against upstream source (data/kv-cache.toml cites file, lines and commit for each)."""

from __future__ import annotations

from labwright.tuning import kv_modes
from labwright.tuning.kv import layout_from_dict, plan
from labwright.tuning.kv_gguf import layout_from_metadata
from labwright.tuning.kv_layout import Layer
from labwright.tuning.kv_state import state_bytes


def test_ollama_gpt_oss_keeps_4096_cells_whatever_the_window():
    # ollama f63eea3 model/models/gptoss/model.go:239 NewSWAMemCache(window, 4096); kvcache/causal.go Init:
    # cells = roundUp(swaMemorySize + maxBatch, CachePadding) = roundUp(4096 + 512, 256)
    rule = kv_modes.ggml_type("f16", "ollama").sliding
    assert rule.cells(32768, 128, "gpt_oss") == -(-(4096 + 512) // 256) * 256 == 4608
    # a model without the memory override: window 1024 + num_batch 512 = 1536 (a multiple of 256)
    assert rule.cells(32768, 1024, "gemma3") == 1024 + 512
    # swaMemorySize >= capacity: the whole context, padded: 3000 -> 3072
    assert rule.cells(3000, 128, "gpt_oss") == -(-3000 // 256) * 256 == 3072


def test_ollama_llama4_chunked_layers_hold_the_whole_context():
    # causal.go: NewChunkedAttentionCache leaves swaMemorySize at MaxInt32 -> maxSequences x capacity cells
    spec = kv_modes.ggml_type("f16", "ollama")
    assert spec.chunked.cells(65536, 8192) == 65536
    assert "Go engine" in spec.chunked.assumes


def test_jamba_mamba1_state_has_no_groups():
    # llama.cpp n_embd_r() = (d_conv - 1) x (d_inner + 2 x n_group x d_state) with n_group = 0 for Mamba1;
    # n_embd_s() = d_state x d_inner; f32. d_inner = expand 2 x hidden 4096 = 8192, d_conv 4, d_state 16.
    section = {"model_type": "jamba", "mamba_d_conv": 4, "mamba_d_state": 16, "mamba_expand": 2, "hidden_size": 4096}
    per_layer = ((4 - 1) * 8192 + 16 * 8192) * 4
    assert state_bytes(section, [Layer("state", name="mamba")] * 3) == 3 * per_layer


def test_mamba2_state_keeps_groups():
    # Nemotron-H style: d_inner = 64 heads x 64 = 4096, n_groups 8, d_state 128, d_conv 4
    section = {"model_type": "nemotron_h", "conv_kernel": 4, "ssm_state_size": 128, "n_groups": 8,
               "mamba_num_heads": 64, "mamba_head_dim": 64}
    assert state_bytes(section, [Layer("state", name="mamba")]) == ((4 - 1) * (4096 + 2 * 8 * 128) + 128 * 4096) * 4


def test_gguf_window_on_an_architecture_llama_cpp_does_not_cap_is_full():
    # llama.cpp LLM_ARCH_PHI3: "Phi SWA is currently disabled" -> swa_type NONE; every layer keeps the context
    meta = {"general.architecture": "phi3", "phi3.block_count": 32, "phi3.attention.head_count": 32,
            "phi3.attention.head_count_kv": 32, "phi3.embedding_length": 3072, "phi3.attention.sliding_window": 2047}
    layout = layout_from_metadata(meta)
    assert layout.count("full") == 32 and layout.count("sliding") == 0
    assert any("does not cap" in note for note in layout.notes)


def test_gguf_gemma3n_coded_pattern_is_five():
    # llama.cpp LLM_ARCH_GEMMA3N: set_swa_pattern(5): layer il sliding when il % 5 < 4 -> 4 of every 5
    meta = {"general.architecture": "gemma3n", "gemma3n.block_count": 10, "gemma3n.attention.head_count": 8,
            "gemma3n.attention.head_count_kv": 2, "gemma3n.attention.key_length": 256,
            "gemma3n.attention.sliding_window": 512}
    layout = layout_from_metadata(meta)
    assert [layer.kind for layer in layout.layers] == (["sliding"] * 4 + ["full"]) * 2


def test_vllm_window_note_names_the_batched_tokens_it_assumes():
    config = {"model_type": "gemma3_text", "num_hidden_layers": 6, "sliding_window": 512, "max_position_embeddings":
              32768, "num_key_value_heads": 1, "head_dim": 256, "num_attention_heads": 4}
    result = plan(layout_from_dict(config), kv_modes.ggml_type("auto", "vllm"), context=8192)
    assert any("max_num_batched_tokens = 2048" in note for note in result.notes)
    # 5 sliding layers: (cdiv(min(512 - 1 + 2048, 8192), 16) + 1) x 16 = 2576 cells; 1 full layer: 8192 cells
    per_token = 1 * 256 * 2 * 2
    assert result.kv_bytes == 5 * ((-(-(512 - 1 + 2048) // 16) + 1) * 16) * per_token + 8192 * per_token


def test_llama_cpp_mla_note_says_which_builds_keep_one_latent():
    config = {"model_type": "deepseek_v3", "num_hidden_layers": 2, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
              "num_attention_heads": 8, "num_key_value_heads": 8, "hidden_size": 1024, "max_position_embeddings": 4096}
    result = plan(layout_from_dict(config), kv_modes.ggml_type("f16", "llamacpp"), context=1024)
    assert result.bytes_per_token == 2 * (512 + 64) * 2
    assert any("07bede6" in note for note in result.notes)
