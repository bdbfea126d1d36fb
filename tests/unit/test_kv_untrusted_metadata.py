"""A model's metadata is untrusted input: any value of any type under any key the planner reads, in a config.json or
in a GGUF header, is planned or refused in one line (BadInput, exit 2): never another exception, never a hang.

The CLI bad-input sweep at 2b91fd1 met the class four ways (num_hidden_layers 10**30: a hang; GGUF block_count 2**40:
MemoryError; block_count NaN and head_count_kv ["a", "b"]: ValueError); these properties generate the values and
the key combinations instead, from the keys the readers actually look up.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from labwright.errors import BadInput
from labwright.tuning import kv_config, kv_gguf, kv_state
from labwright.tuning.data import kv_data
from labwright.tuning.kv_limits import MAX_LAYERS

SOURCES = [Path(kv_config.__file__), Path(kv_state.__file__)]


def _config_keys() -> list[str]:
    """Every key the config.json reader looks up, read from its source and its data file (a key added later is
    generated too)."""
    text = "\n".join(p.read_text() for p in SOURCES)
    keys = set(re.findall(r'(?:integer|raw|has|sequence|_int)\((?:section, )?"([a-z_]+)"', text))
    keys |= set(re.findall(r'"([a-z_]+)"', text)) & set(re.findall(r"[a-z_]+", str(kv_data())))
    keys |= set(kv_data()["config"]["layers"]) | {"model_type", "text_config", "layer_types"}
    return sorted(k for k in keys if len(k) > 2)


def _gguf_keys() -> list[str]:
    text = Path(kv_gguf.__file__).read_text() + Path(kv_state.__file__).read_text()
    return sorted(set(re.findall(r'(?:get|key)\("([a-z_.]+)"', text)) - {"general.architecture"})


CONFIG_KEYS, GGUF_KEYS = _config_keys(), _gguf_keys()

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2, max_value=8),
                    st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=6), st.sampled_from(["full_attention", "sliding_attention", "mamba", "*", "M"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=6),
                                                       st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                      max_leaves=10)


def _plan_or_refuse(build) -> None:
    try:
        layout = build()
    except BadInput as exc:
        assert "\n" not in str(exc) and str(exc), repr(exc)
        return
    assert 0 < len(layout.layers) <= MAX_LAYERS
    for layer in layout.layers:
        for width in (layer.kv_heads, layer.k_dim, layer.v_dim, layer.window or 0):
            assert isinstance(width, int) and not isinstance(width, bool) and width >= 0, layer
    assert layout.state_bytes is None or (isinstance(layout.state_bytes, int) and layout.state_bytes >= 0)


@given(st.dictionaries(st.sampled_from(CONFIG_KEYS), values, max_size=12),
       st.fixed_dictionaries({"num_hidden_layers": st.one_of(st.integers(1, 6), values),
                              "num_attention_heads": st.one_of(st.integers(1, 8), values),
                              "num_key_value_heads": st.one_of(st.integers(1, 8), values),
                              "head_dim": st.one_of(st.integers(1, 128), values)}),
       st.booleans())
def test_any_config_json_values_are_planned_or_refused_in_one_line(extra, base, nested):
    doc = {**base, **extra}
    if nested:
        doc = {"model_type": "gemma3", "text_config": doc}
    _plan_or_refuse(lambda: kv_config.layout_from_dict(doc, "config.json"))


@given(st.sampled_from(["llama", "gemma3", "qwen3next", "nemotron_h", "mamba", "deepseek2", "llama4", "rwkv7",
                        "lfm2", "gpt-oss", "granitehybrid", "jamba"]),
       st.dictionaries(st.sampled_from(GGUF_KEYS), values, max_size=12),
       st.fixed_dictionaries({"block_count": st.one_of(st.integers(1, 6), values),
                              "attention.head_count": st.one_of(st.integers(1, 8), values),
                              "attention.head_count_kv": st.one_of(st.integers(0, 8), values),
                              "embedding_length": st.one_of(st.integers(1, 512), values)}),
       st.one_of(st.just("arch"), values))
def test_any_gguf_metadata_values_are_planned_or_refused_in_one_line(arch, extra, base, architecture):
    metadata = {f"{arch}.{key}": value for key, value in {**base, **extra}.items()}
    metadata["general.architecture"] = arch if architecture == "arch" else architecture
    _plan_or_refuse(lambda: kv_gguf.layout_from_metadata(metadata, "model.gguf"))


def test_the_sweeps_cases_are_refused_naming_the_key():
    for value, said in ((10**30, "num_hidden_layers"), (MAX_LAYERS + 1, "num_hidden_layers"), (math.nan, "not")):
        doc = {"num_hidden_layers": value, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8}
        try:
            kv_config.layout_from_dict(doc)
        except BadInput as exc:
            assert said in str(exc), exc
        else:
            raise AssertionError(f"num_hidden_layers {value!r} was planned")
    base = {"general.architecture": "llama", "llama.attention.head_count": 32, "llama.embedding_length": 4096}
    for block_count, head_count_kv in ((2**40, None), (math.nan, None), (-4, None), (2, ["a", "b"]), (2, [1.5, 2])):
        metadata = {**base, "llama.block_count": block_count}
        if head_count_kv is not None:
            metadata["llama.attention.head_count_kv"] = head_count_kv
        try:
            kv_gguf.layout_from_metadata(metadata)
        except BadInput as exc:
            assert ("block_count" if head_count_kv is None else "head_count_kv") in str(exc), exc
        else:
            raise AssertionError(f"{metadata} was planned")
    try:
        kv_gguf.layout_from_metadata({**base, "general.architecture": 5, "5.block_count": 2})
    except BadInput as exc:
        assert "general.architecture" in str(exc) and "not a string" in str(exc), exc
