"""A tiny random Llama (2 layers) with a BPE tokenizer trained here, saved as a Hugging Face model dir."""
import glob
import json
import os
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
corpus = [Path(p).read_text() for p in glob.glob(os.path.join(sys.argv[2], "**/*.md"), recursive=True)]
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=1024, special_tokens=["<s>", "</s>", "<unk>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(corpus, trainer)
tok.save(os.path.join(out, "tokenizer.json"))
print("tokenizer vocab", tok.get_vocab_size())
Path(out, "tokenizer_config.json").write_text(json.dumps({
    "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
    "tokenizer_class": "PreTrainedTokenizerFast",
    "chat_template": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"}))
cfg = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=768, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=128, max_position_embeddings=4096, bos_token_id=0, eos_token_id=1,
                  tie_word_embeddings=False, rms_norm_eps=1e-5, rope_theta=10000.0)
torch.manual_seed(0)
model = LlamaForCausalLM(cfg).to(torch.bfloat16)
model.save_pretrained(out, safe_serialization=True)
print("saved", sorted(os.listdir(out)))
