"""Write a tiny random-weight llama-architecture GGUF that the real llama-server loads and serves.

Tests need a model llama.cpp really runs (no download, no GPU): ~9 MB, written in well under a second.

    labwright model tiny /tmp/tiny.gguf [--context-length 524288] [--seed 0]

Shape choices (measured on the development machine):
- head size 64 (E=256, 4 heads): a quantized KV cache needs the head size divisible by its block size (32); E=64
  with 4 heads fails to load with a q8_0/q4_0 cache.
- the trained context defaults far above any ``--ctx-size`` a test or the context probe asks for, so llama.cpp never
  caps or warns about the requested context.
- the output is biased to printable ASCII, so every sampled token decodes to valid UTF-8, no end-of-generation token
  is ever chosen and a completion is exactly ``max_tokens`` long: a test can assert that.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# The letters merged pairwise into the vocabulary: the loader refuses a gpt2 tokenizer without merges.
MERGE_LETTERS = "etaoinshrdlcu"
CONTROL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3


@dataclass(frozen=True)
class TinyModel:
    embedding: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 4
    feed_forward: int = 512
    context_length: int = 1 << 19
    seed: int = 0
    #: the layers' weight type: "f16", or "q8_0" (quantized by gguf-py, as llama.cpp's Q8_0: blocks of 32 int8 and an
    #: f16 scale); the norms, embeddings and output stay f32
    weights: str = "f16"

    @property
    def head_size(self) -> int:
        return self.embedding // self.heads


def gpt2_byte_chars() -> list[str]:
    """GPT-2's byte-to-unicode table: byte b is spelled as chars[b] in the vocabulary."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars: dict[int, int] = {b: b for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + extra
            extra += 1
    return [chr(chars[b]) for b in range(256)]


def vocabulary() -> tuple[list[str], list[int], list[str], list[bool]]:
    """Tokens, token types, merges, and which tokens decode to printable ASCII."""
    byte_chars = gpt2_byte_chars()
    tokens = list(byte_chars)
    printable = [0x20 <= b <= 0x7E for b in range(256)]
    merges = []
    for first in MERGE_LETTERS:
        for second in MERGE_LETTERS:
            merges.append(f"{first} {second}")
            tokens.append(first + second)
            printable.append(True)
    types = [TOKEN_NORMAL] * len(tokens)
    for control in CONTROL_TOKENS:
        tokens.append(control)
        types.append(TOKEN_CONTROL)
        printable.append(False)
    return tokens, types, merges, printable


def write_tiny_gguf(path: Path | str, model: TinyModel = TinyModel()) -> Path:
    # Imported here: only test and bench code needs gguf and numpy (dev dependencies), not labwright itself.
    import gguf
    import numpy as np

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens, types, merges, printable = vocabulary()
    vocab, embed, ff = len(tokens), model.embedding, model.feed_forward
    q_size, kv_size = model.heads * model.head_size, model.kv_heads * model.head_size
    rng = np.random.default_rng(model.seed)

    def random(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def weight(name: str, *shape: int) -> None:
        values = random(*shape)
        if model.weights == "q8_0":
            writer.add_tensor(name, gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q8_0),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(name, values.astype(np.float16))

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(model.context_length)
    writer.add_embedding_length(embed)
    writer.add_block_count(model.layers)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(model.heads)
    writer.add_head_count_kv(model.kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(model.head_size)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)

    # The bias: every token carries a large constant in dimension 0, which survives the small random layers and the
    # final RMS norm; the output row of every non-printable token (bytes outside 0x20-0x7e, control tokens, EOS)
    # weighs that dimension strongly negative, so those tokens are never sampled.
    token_embd = random(vocab, embed)
    token_embd[:, 0] = 10.0
    output = random(vocab, embed)
    output[~np.array(printable), 0] = -5.0
    writer.add_tensor("token_embd.weight", token_embd)
    writer.add_tensor("output_norm.weight", np.ones(embed, dtype=np.float32))
    writer.add_tensor("output.weight", output)
    for layer in range(model.layers):
        prefix = f"blk.{layer}"
        writer.add_tensor(f"{prefix}.attn_norm.weight", np.ones(embed, dtype=np.float32))
        weight(f"{prefix}.attn_q.weight", q_size, embed)
        weight(f"{prefix}.attn_k.weight", kv_size, embed)
        weight(f"{prefix}.attn_v.weight", kv_size, embed)
        weight(f"{prefix}.attn_output.weight", embed, q_size)
        writer.add_tensor(f"{prefix}.ffn_norm.weight", np.ones(embed, dtype=np.float32))
        weight(f"{prefix}.ffn_gate.weight", ff, embed)
        weight(f"{prefix}.ffn_up.weight", ff, embed)
        weight(f"{prefix}.ffn_down.weight", embed, ff)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m labwright.llamacpp.tiny_model``: ``labwright model tiny`` under its old name, with one deprecation
    line on stderr (kept for one release)."""
    from labwright.cli import main as cli_main
    from labwright.cli.vocab import deprecated

    deprecated("python -m labwright.llamacpp.tiny_model", "labwright model tiny")
    return cli_main(["model", "tiny", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
