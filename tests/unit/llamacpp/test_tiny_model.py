"""The tiny GGUF: the shape llama.cpp needs (head size for a quantized KV cache, merges) and the printable bias."""

from __future__ import annotations

import gguf

from labwright.llamacpp.tiny_model import CONTROL_TOKENS, TinyModel, gpt2_byte_chars, vocabulary, write_tiny_gguf


def test_byte_table_is_a_bijection():
    chars = gpt2_byte_chars()
    assert len(set(chars)) == 256 and chars[ord("A")] == "A"


def test_merges_only_join_tokens_that_exist():
    tokens, types, merges, printable = vocabulary()
    known = set(tokens)
    assert len(tokens) == len(types) == len(printable)
    for merge in merges:
        first, second = merge.split(" ")
        assert {first, second, first + second} <= known
    assert [t for t, p in zip(tokens, printable, strict=True) if t in CONTROL_TOKENS and p] == []
    assert sum(printable) == 95 + len(merges)


def test_written_model_reads_back(tmp_path):
    model = TinyModel(context_length=65536, seed=3)
    path = write_tiny_gguf(tmp_path / "tiny.gguf", model)
    reader = gguf.GGUFReader(str(path))
    fields = reader.fields

    def scalar(name: str):
        field = fields[name]
        return field.parts[field.data[0]][0]

    assert bytes(fields["general.architecture"].parts[-1]).decode() == "llama"
    assert int(scalar("llama.context_length")) == 65536
    assert int(scalar("llama.embedding_length")) // int(scalar("llama.attention.head_count")) % 32 == 0
    names = {tensor.name for tensor in reader.tensors}
    assert {"token_embd.weight", "output.weight", "blk.3.ffn_down.weight"} <= names
    assert path.stat().st_size < 16 * 1024 * 1024


def test_q8_0_layers_are_quantized_as_llama_cpp_stores_them(tmp_path):
    """``weights="q8_0"``: the layers' matrices as GGML Q8_0 (34 bytes per 32 weights), the rest as before; the
    speed benchmark serves such a model with the real llama-server (benchmarks/speed_prediction.py)."""
    path = write_tiny_gguf(tmp_path / "q8.gguf", TinyModel(weights="q8_0"))
    reader = gguf.GGUFReader(str(path))
    types = {tensor.name: tensor.tensor_type for tensor in reader.tensors}
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.Q8_0
    assert types["blk.3.ffn_down.weight"] == gguf.GGMLQuantizationType.Q8_0
    assert types["token_embd.weight"] == gguf.GGMLQuantizationType.F32
    q = next(t for t in reader.tensors if t.name == "blk.0.ffn_up.weight")
    assert q.n_bytes == 512 * 256 // 32 * 34
