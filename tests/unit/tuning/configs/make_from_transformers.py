"""Write tf-*.json: config.json files as the `transformers` package itself serializes each family's config class.

Run with a Python that has transformers installed (PyPI; no model download, no torch needed):

    python -m venv /tmp/tfv && /tmp/tfv/bin/pip install transformers==5.23.0
    /tmp/tfv/bin/python tests/unit/tuning/configs/make_from_transformers.py

Two kinds of file, both recorded in SOURCES with the transformers version written into each file
("transformers_version") and the class's own file:

* defaults: ``Class().to_json_string()``, the class defaults. transformers' @auto_docstring(checkpoint=...) on the
  class names the checkpoint they are meant to resemble; CHECKPOINT below says, per family, where the defaults do and
  do not match that checkpoint (checked against a verbatim file of the same checkpoint in this directory where there
  is one; otherwise only the class's own docstring/defaults are known here, and SOURCES says so).
* resaved: ``Class.from_dict(verbatim).to_json_string()``: a verbatim config.json of this directory loaded and saved
  again by transformers (what `save_pretrained` writes with this version), e.g. Nemotron-H's legacy
  hybrid_override_pattern becomes layers_block_type with transformers 5's layer names.

The planner must read both forms to the same per-layer cache (tests/unit/tuning/test_kv_layers.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import transformers

HERE = Path(__file__).resolve().parent

# file -> (config class, checkpoint named by the class's @auto_docstring, how the defaults compare with it)
DEFAULTS = {
    "tf-qwen3-next.json": ("Qwen3NextConfig", "Qwen/Qwen3-Next-80B-A3B-Instruct",
                           "layers/heads/head_dim/linear-attention sizes match qwen3-next-80b-a3b.json here; "
                           "max_position_embeddings 32768 (the checkpoint says 262144)"),
    "tf-glm4-moe.json": ("Glm4MoeConfig", "zai-org/GLM-4.5",
                         "the defaults are GLM-4.5-Air-shaped (46 layers, hidden 4096, 128 experts), not GLM-4.5 "
                         "(92 layers, hidden 5120, 160 experts); not checked against either checkpoint's file"),
    "tf-lfm2.json": ("Lfm2Config", "LiquidAI/LFM2-1.2B",
                     "NOT the checkpoint: 32 layers and full_attn_idxs None -> every layer full attention "
                     "(LFM2-1.2B has 16 layers, 6 of them attention); tests only that the serialized form is read"),
    "tf-lfm2-moe.json": ("Lfm2MoeConfig", "LiquidAI/LFM2-8B-A1B",
                         "layer_types as the class derives them; not checked against the checkpoint's file"),
    "tf-granitemoehybrid.json": ("GraniteMoeHybridConfig", "ibm-granite/granite-speech-3.2-8b",
                                 "NOT a Granite 4 checkpoint: every layer a Mamba2 layer, named 'linear_attention' "
                                 "in transformers 5 (layer_types); tests that this spelling is read as Mamba"),
    "tf-falcon-h1.json": ("FalconH1Config", "tiiuae/Falcon-H1-1.5B-Deep-Instruct",
                          "NOT that checkpoint's sizes (32 layers, hidden 4096); the parallel attention + Mamba2 "
                          "structure and the mamba_* keys are the family's"),
    "tf-jamba.json": ("JambaConfig", "ai21labs/Jamba-v0.1",
                      "32 layers, 32/8 heads, attn_layer_period 8 offset 4, Mamba d_state 16 d_conv 4 expand 2, 16 "
                      "experts: Jamba-v0.1's published shape; not checked against its file (not reachable)"),
    "tf-gemma3n.json": ("Gemma3nConfig", "google/gemma-3n-E4B",
                        "text_config: 35 layers, 8/2 heads x 256, window 512, 4 sliding : 1 full, 15 KV-shared "
                        "layers: E4B's published shape; not checked against its file (not reachable)"),
    "tf-phi3.json": ("Phi3Config", "microsoft/Phi-3-mini-4k-instruct",
                     "Phi-3-mini-4k-shaped (32 layers, 32/32 heads, hidden 3072); there is no Phi-4 14B default"),
    "tf-mistral3.json": ("Mistral3Config", "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
                         "text_config: 40 layers, 32/8 heads x 128, hidden 5120, 131072 positions: Mistral Small "
                         "3.1's published shape; not checked against its file (not reachable)"),
    "tf-exaone4.json": ("Exaone4Config", "LGAI-EXAONE/EXAONE-4.0-32B",
                        "NOT the 32B's sizes (32 layers, 32/32 heads); layer_types as the class derives them from "
                        "sliding_window_pattern 4 (3 sliding : 1 full, last layer full)"),
    "tf-mimo-v2-flash.json": ("MiMoV2FlashConfig", "XiaomiMiMo/MiMo-V2-Flash",
                              "compared with aic-mimo-v2-flash.json (verbatim) by the test: same per-layer cache"),
}

# file -> (config class, verbatim file in this directory it is resaved from)
RESAVED = {
    "tf-nemotron-3-nano-resaved.json": ("NemotronHConfig", "aic-nemotron-3-nano-30b-a3b.json"),
    "tf-nemotron-h-56b-resaved.json": ("NemotronHConfig", "aic-nemotron-h-56b-base-8k.json"),
    "tf-mimo-v2-flash-resaved.json": ("MiMoV2FlashConfig", "aic-mimo-v2-flash.json"),
    "tf-qwen3.5-27b-resaved.json": ("Qwen3_5Config", "aic-qwen3.5-27b.json"),
}


def _json(config: object) -> str:
    text = config.to_json_string(use_diff=False)  # type: ignore[attr-defined]
    return json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


def main() -> int:
    print(f"transformers {transformers.__version__}")
    for name, (cls, checkpoint, verdict) in DEFAULTS.items():
        (HERE / name).write_text(_json(getattr(transformers, cls)()))
        print(f"{name} | transformers {transformers.__version__} | {cls}() defaults | docstring checkpoint "
              f"{checkpoint} | {verdict}")
    for name, (cls, source) in RESAVED.items():
        doc = json.loads((HERE / source).read_text())
        (HERE / name).write_text(_json(getattr(transformers, cls).from_dict(doc)))
        print(f"{name} | transformers {transformers.__version__} | {cls}.from_dict({source}) saved again")
    return 0


if __name__ == "__main__":
    sys.exit(main())
