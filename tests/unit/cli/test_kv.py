"""`labwright kv plan` and `labwright kv fit` as a user runs them: exit codes, one-line errors, JSON, tables."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

from support.cli_child import run_cli
from support.gguf_files import write_gguf

CONFIGS = Path(__file__).resolve().parents[1] / "tuning" / "configs"
SEED = str(CONFIGS / "qwen3.5-9b.json")


def run(cli_env, *args):
    return run_cli(["kv", *args], env=cli_env)


def ok_json(cli_env, *args):
    proc = run(cli_env, *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_plan_json_reproduces_the_seed(cli_env):
    for mode, bpt, tokens in (("8,8", 16_384, 157_184), ("8,4", 12_288, 209_664), ("4,4", 8_192, 314_368)):
        doc = ok_json(cli_env, "plan", "--config", SEED, "--cache-mode", mode, "--budget", "2.4GB",
                      "--context", "131072")
        assert {"kv_layers", "bytes_per_token", "tokens", "kv_bytes"} <= set(doc)
        assert (doc["kv_layers"], doc["bytes_per_token"], doc["tokens"]) == (8, bpt, tokens)
        assert doc["kv_bytes"] == 131_072 * bpt and doc["pages"] == tokens // 256


def test_plan_json_without_a_mode_lists_the_common_modes(cli_env):
    docs = ok_json(cli_env, "plan", "--config", SEED)
    assert [d["cache_mode"] for d in docs] == ["FP16", "8,8", "8,4", "4,4", "f16", "q8_0", "q4_0"]
    assert all(d["tokens"] is None and d["kv_bytes"] is None for d in docs)


def test_plan_table_is_the_seeds_table(cli_env):
    proc = run(cli_env, "plan", "--config", SEED, "--budget", "2.4GiB")
    assert proc.returncode == 0, proc.stderr
    for text in ("16,384 B", "12,288 B", "8,192 B", "157,184", "209,664", "314,368", "8 of 32 layers keep a KV cache"):
        assert text in proc.stdout


def test_plan_llama_cpp_type_and_page(cli_env):
    doc = ok_json(cli_env, "plan", "--config", str(CONFIGS / "llama-3-8b.json"), "--cache-type", "f16",
                  "--budget", "1000000", "--page", "1")
    assert (doc["bytes_per_token"], doc["tokens"], doc["engine"]) == (131_072, 7, "llamacpp")


def test_plan_sliding_window_table_names_the_policy(cli_env):
    proc = run(cli_env, "plan", "--config", str(CONFIGS / "gemma-3-4b.json"), "--context", "32768")
    assert proc.returncode == 0, proc.stderr
    assert "sliding layers on llama.cpp: min(context, window + 512), padded to 256" in proc.stdout
    assert "sliding layers on tabbyAPI (exllamav3): full context" in proc.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["plan", "--config", "/nonexistent/config.json"], "/nonexistent/config.json: no such file or directory"),
    (["plan", "--config", SEED, "--cache-mode", "9,4"], "cache mode '9,4' is not one tabbyAPI takes"),
    (["plan", "--config", SEED, "--cache-type", "q3_k"], "cache type 'q3_k' is not one llama.cpp supports"),
    (["plan", "--config", SEED, "--cache-type", "q8_0", "--cache-mode", "8,4"], "both given"),
    (["plan", "--config", SEED, "--budget", "lots"], "--budget 'lots' is not a size"),
    (["plan", "--config", SEED, "--page", "0", "--budget", "1GiB"], "--page 0"),
    (["fit", "--vram-gb", "8"], "no weights size"),
    (["fit", "--vram-gb", "eight", "--weights-gb", "4"], "--vram-gb 'eight' is not a size"),
    (["fit", "--vram-gb", "8", "--weights-gb", "4", "--context", "4096"], "--context needs the model's config.json"),
    (["fit", "--vram-gb", "8", "--weights-gb", "4", "--format", "ggml"], "--format 'ggml' is unknown"),
    (["fit", "--vram-gb", "8", "--model-dir", "/nonexistent"], "model dir /nonexistent: not a directory"),
])
def test_bad_input_is_one_line_and_exit_2(cli_env, args, message):
    proc = run(cli_env, *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("labwright: error: ")
    assert message in proc.stderr


@pytest.mark.parametrize(("doc", "key"), [
    ({"num_hidden_layers": 32, "hidden_size": 4096}, "num_attention_heads"),
    ({"text_config": {"num_attention_heads": 8, "head_dim": 64}}, "num_hidden_layers (in text_config)"),
])
def test_malformed_config_exit_2_names_file_and_key(cli_env, tmp_path, doc, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    proc = run(cli_env, "plan", "--config", str(path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert str(path) in proc.stderr and key in proc.stderr


def test_bad_json_exit_2(cli_env, tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"num_hidden_layers": 32,')
    proc = run(cli_env, "plan", "--config", str(path))
    assert proc.returncode == 2 and "not valid JSON" in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.parametrize(("args", "verdict"), [
    (["--weights-gb", "5.5", "--vram-gb", "8", "--format", "gguf", "--kv-gb", "0.5", "--overhead-gb", "1"], "fits"),
    (["--weights-gb", "5.5", "--vram-gb", "8", "--format", "gguf", "--kv-gb", "0.5"], "split"),  # 2.55 GiB overhead
    (["--weights-gb", "18", "--vram-gb", "8", "--format", "gguf", "--moe", "--ram-gb", "64"], "moe_offload"),
    (["--weights-gb", "9", "--vram-gb", "8", "--format", "gguf", "--ram-gb", "32"], "split"),
    (["--weights-gb", "9", "--vram-gb", "2", "--format", "gguf", "--ram-gb", "32"], "cpu"),
    (["--weights-gb", "70", "--vram-gb", "24", "--format", "gguf", "--ram-gb", "32"], "no_fit"),
    (["--weights-gb", "9", "--vram-gb", "8", "--format", "exl3", "--ram-gb", "64"], "no_fit"),
])
def test_fit_verdicts(cli_env, args, verdict):
    assert ok_json(cli_env, "fit", *args)["verdict"] == verdict


def test_fit_reproduces_the_seed_ceiling(cli_env):
    doc = ok_json(cli_env, "fit", "--weights-gb", "4.5", "--vram-gb", "8", "--config", SEED, "--cache-mode", "8,4",
                  "--context", "195072", "--format", "exl3")
    assert (doc["verdict"], doc["max_context"], doc["kv_bytes"]) == ("fits", 195_072, 195_072 * 12_288)


def _sparse_safetensors(path: Path, size: int) -> Path:
    """A whole .safetensors of ``size`` bytes (one tensor's data fills it) that takes no disk space."""
    end = size - 8 - 256
    header = json.dumps({"weights": {"dtype": "U8", "shape": [end], "data_offsets": [0, end]}}).encode()
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", 256) + header.ljust(256))
        fh.truncate(size)
    return path


def test_fit_table_from_a_model_dir(cli_env, tmp_path):
    doc = json.loads((CONFIGS / "qwen3.5-9b.json").read_text())
    doc["quantization_config"] = {"quant_method": "exl3", "bits": 4.0, "head_bits": 6}
    (tmp_path / "config.json").write_text(json.dumps(doc))
    _sparse_safetensors(tmp_path / "model.safetensors", int(4.5 * 1024**3))
    proc = run(cli_env, "fit", "--model-dir", str(tmp_path), "--vram-gb", "8", "--context", "131072",
               "--cache-mode", "8,4")
    assert proc.returncode == 0, proc.stderr
    for text in ("verdict: fits in VRAM", "EXL3 runs on tabbyAPI (exllamav3)", "quant_method = 'exl3'",
                 "longest context with every weight in VRAM at 8,4: 195,072 tokens", "[overhead.tabbyapi]"):
        assert text in proc.stdout


def test_fit_split_prints_the_warning(cli_env):
    proc = run(cli_env, "fit", "--weights-gb", "9", "--vram-gb", "8", "--format", "gguf")
    assert proc.returncode == 0
    assert "verdict: split GPU/CPU (warn: PCIe-bound, worst case)" in proc.stdout
    assert "RAM not checked" in proc.stdout


# --- GGUF files and bad input: one line, exit 2, no traceback ----------------------------------------------------

def _tiny_gguf(path: Path) -> Path:
    from labwright.llamacpp.tiny_model import TinyModel, write_tiny_gguf

    return write_tiny_gguf(path, TinyModel(context_length=8192))


def test_plan_reads_a_gguf_header(cli_env, tmp_path):
    gguf_path = _tiny_gguf(tmp_path / "tiny.gguf")
    doc = ok_json(cli_env, "plan", "--config", str(gguf_path), "--cache-type", "f16", "--context", "4096")
    # tiny model: 4 layers x 4 KV heads x (64 + 64) x 2 bytes
    assert (doc["source_kind"], doc["kv_layers"], doc["bytes_per_token"]) == ("gguf", 4, 4 * 4 * 128 * 2)
    assert doc["kv_bytes"] == 4096 * 4 * 4 * 128 * 2


def test_bad_files_are_one_line_exit_2(cli_env, tmp_path):
    whole = _tiny_gguf(tmp_path / "whole.gguf").read_bytes()
    (tmp_path / "truncated.gguf").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "html.gguf").write_text("<html>404</html>")
    (tmp_path / "contradict.json").write_text(json.dumps(
        {"model_type": "nemotron_h", "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 64,
         "hybrid_override_pattern": "M*M"}))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "a.safetensors"}}))
    cases = [("truncated.gguf", "truncated"), ("html.gguf", "not a GGUF file"),
             ("contradict.json", "hybrid_override_pattern has 3 entries but num_hidden_layers is 4"),
             ("model.safetensors.index.json", "safetensors index")]
    for name, message in cases:
        proc = run(cli_env, "plan", "--config", str(tmp_path / name))
        assert proc.returncode == 2, (name, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr and message in proc.stderr, name


def test_fit_from_a_gguf_only_model_dir_says_what_it_assumes(cli_env, tmp_path):
    _tiny_gguf(tmp_path / "tiny.gguf")
    doc = ok_json(cli_env, "fit", "--model-dir", str(tmp_path), "--vram-gb", "8", "--context", "4096")
    assert doc["kv_bytes"] == 4096 * 4 * 4 * 128 * 2 and doc["format"] == "gguf"


def test_fit_says_what_its_kv_figure_rests_on(cli_env):
    # Qwen3.5-9B: 24 of 32 layers are linear attention with a fixed state the fit does not count; a full-attention
    # Llama has no such assumption. The note stands beside the verdict in the table and in the JSON alike.
    args = ["fit", "--config", SEED, "--weights-gb", "6", "--vram-gb", "8", "--context", "32768"]
    assert "KV assumes: 24 recurrent layers' fixed state is not counted" in ok_json(cli_env, *args)["notes"]
    proc = run(cli_env, *args)
    assert proc.returncode == 0 and "KV assumes: 24 recurrent layers' fixed state is not counted" in proc.stdout
    llama = ok_json(cli_env, "fit", "--config", str(CONFIGS / "llama-3-8b.json"), "--weights-gb", "6",
                    "--vram-gb", "8", "--context", "32768")
    assert not [note for note in llama["notes"] if note.startswith("KV assumes")]


def _headless_gguf(path: Path, arch: str, kv_heads) -> Path:
    heads = {} if kv_heads is None else {"attention.head_count": 4, "attention.head_count_kv": kv_heads}
    return write_gguf(path, arch, {"block_count": 4, "embedding_length": 256, **heads})


def test_a_gguf_with_no_attention_and_no_known_state_is_refused_not_0_bytes(cli_env, tmp_path):
    # An architecture labwright does not know, with no KV heads anywhere: planning it would print 0 B/token and
    # "any context fits"; it is refused instead, naming the key and the way out.
    path = _headless_gguf(tmp_path / "newarch.gguf", "newarch", None)
    for args in (["plan", "--config", str(path), "--context", "4096"],
                 ["fit", "--config", str(path), "--weights-gb", "4", "--vram-gb", "8", "--context", "4096"]):
        line = one_line_exit_2(run(cli_env, *args), str(path), "newarch.attention.head_count_kv",
                               "not a recurrent architecture labwright knows", "config.json")
        assert "0 B" not in line and "any context" not in line


def test_a_gguf_whose_unknown_arch_has_headless_layers_says_their_state_is_not_counted(cli_env, tmp_path):
    path = _headless_gguf(tmp_path / "newhybrid.gguf", "newhybrid", [2, 0, 0, 2])
    doc = ok_json(cli_env, "plan", "--config", str(path), "--cache-type", "f16", "--context", "4096")
    assert (doc["kv_layers"], doc["bytes_per_token"]) == (2, 2 * 2 * 64 * 2 * 2)   # 2 layers x 2 heads x 64 x K+V x f16
    proc = run(cli_env, "plan", "--config", str(path), "--cache-type", "f16", "--context", "4096")
    assert proc.returncode == 0
    assert "2 of 4 layers have newhybrid.attention.head_count_kv 0" in " ".join(proc.stdout.split())


# --- issue 16's sweep: impossible models, meaningless sizes, files that are not what they claim ---------------------

def one_line_exit_2(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("labwright: error: ") and "Traceback" not in proc.stderr, lines
    assert all(word in lines[0] for word in words), (words, lines[0])
    assert proc.stdout == ""
    return lines[0]


LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
         "hidden_size": 512}


@pytest.mark.parametrize(("change", "words"), [
    ({"num_key_value_heads": 16}, ("num_key_value_heads 16 is more than num_attention_heads 8", "at most 8")),
    ({"num_key_value_heads": 3}, ("num_attention_heads 8 is not a multiple of num_key_value_heads 3",)),
    ({"hidden_size": 500}, ("hidden_size 500 is not divisible by num_attention_heads 8", "head_dim")),
    ({"hidden_size": 4}, ("hidden_size 4 is not divisible by num_attention_heads 8",)),
    ({"num_hidden_layers": 0}, ("num_hidden_layers is 0, not a positive integer",)),
    ({"num_hidden_layers": -3}, ("num_hidden_layers is -3, not a positive integer",)),
    ({"num_attention_heads": 0}, ("num_attention_heads is 0, not a positive integer",)),
])
def test_an_impossible_model_is_refused_naming_the_field(cli_env, tmp_path, change, words):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, **change}))
    for args in (["plan", "--config", str(path), "--context", "4096"],
                 ["fit", "--config", str(path), "--weights-gb", "4", "--vram-gb", "8", "--context", "4096"]):
        one_line_exit_2(run(cli_env, *args), str(path), *words)


@pytest.mark.parametrize(("args", "words"), [
    (["plan", "--config", SEED, "--budget", "0"], ("--budget '0': give a size above 0",)),
    (["plan", "--config", SEED, "--budget", "0GiB"], ("--budget '0GiB': give a size above 0",)),
    (["plan", "--config", SEED, "--budget", "-1GiB"], ("--budget '-1GiB' is not a size",)),
    (["plan", "--config", SEED, "--budget", "5000000T"], ("--budget '5000000T' is more than 1 PiB",)),
    (["plan", "--config", SEED, "--context", "0"], ("--context 0: give a number of tokens",)),
    (["fit", "--weights-gb", "0", "--vram-gb", "8"], ("--weights-gb '0': give a size above 0",)),
    (["fit", "--weights-gb", "4", "--vram-gb", "0"], ("--vram-gb '0': give a size above 0",)),
    (["fit", "--weights-gb", "4", "--vram-gb", "-8"], ("--vram-gb '-8' is not a size",)),
    (["fit", "--weights-gb", "4", "--vram-gb", "8", "--ram-gb", "0"], ("--ram-gb '0': give a size above 0",)),
    (["fit", "--weights-gb", "2000000", "--vram-gb", "8"], ("--weights-gb '2000000' is more than 1 PiB",)),
    (["fit", "--weights-gb", "4", "--vram-gb", "8", "--config", SEED, "--context", "-1"], ("--context -1",)),
])
def test_a_meaningless_size_or_count_is_refused(cli_env, args, words):
    one_line_exit_2(run(cli_env, *args), *words)


def test_kv_fit_accepts_a_measured_zero_kv_and_overhead(cli_env):
    doc = ok_json(cli_env, "fit", "--weights-gb", "4", "--vram-gb", "8", "--kv-gb", "0", "--overhead-gb", "0",
                  "--format", "gguf")
    assert doc["verdict"] == "fits"


def _gguf_claiming(path: Path, tensors: int, elements: int) -> Path:
    """A GGUF v3 header only: ``tensors`` F32 tensors of ``elements`` each, with no data after the header."""
    head = b"GGUF" + struct.pack("<IQQ", 3, tensors, 1)
    key, value = b"general.architecture", b"llama"
    head += struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(value)) + value
    for index in range(tensors):
        name = f"t{index}".encode()
        head += struct.pack("<Q", len(name)) + name + struct.pack("<IQIQ", 1, elements, 0, index * elements * 4)
    path.write_bytes(head)
    return path


def test_kv_fit_refuses_a_model_dir_whose_weights_are_not_whole(cli_env, tmp_path):
    """`kv fit` said "fits in VRAM" for a 1 KB GGUF: a file whose header does not match its size is named instead."""
    cases = []
    small = tmp_path / "small"
    small.mkdir()
    _gguf_claiming(small / "model.gguf", 2, 1024 * 1024)  # ~300 bytes that claim 8 MiB of tensors
    cases.append((small, ("model.gguf", "truncated", "missing")))
    empty = tmp_path / "empty"
    empty.mkdir()
    _gguf_claiming(empty / "model.gguf", 0, 0)
    cases.append((empty, ("model.gguf holds no tensors",)))
    cut = tmp_path / "cut"
    cut.mkdir()
    _sparse_safetensors(cut / "model.safetensors", 4 * 1024**2)
    with (cut / "model.safetensors").open("r+b") as fh:
        fh.truncate(1024)  # a download that stopped early
    (cut / "config.json").write_text(json.dumps(LLAMA))
    cases.append((cut, ("model.safetensors is truncated", "finish the download")))
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "model.safetensors").write_bytes(os.urandom(2048))
    cases.append((junk, ("model.safetensors",)))
    for folder, words in cases:
        one_line_exit_2(run(cli_env, "fit", "--model-dir", str(folder), "--vram-gb", "8"), *words)


@pytest.mark.parametrize(("name", "content", "words"), [
    ("config.json", bytes(range(256)) * 8, ("is a binary file, not text",)),
    ("config.json", b"\xef\xbb\xbf\xff\xfe", ("is not UTF-8 text",)),
    ("model.bin", b"\x89GGUF" + os.urandom(600), ("model.bin",)),
    ("model.gguf", b"GGUF" + os.urandom(600), ("model.gguf",)),
    ("model.gguf", b"<!DOCTYPE html><html>not found</html>", ("not a GGUF file",)),
])
def test_kv_plan_on_a_file_that_is_not_a_config_is_one_line(cli_env, tmp_path, name, content, words):
    path = tmp_path / name
    path.write_bytes(content)
    one_line_exit_2(run(cli_env, "plan", "--config", str(path)), str(path), *words)


def test_kv_plan_on_a_device_or_an_empty_directory_is_one_line(cli_env, tmp_path):
    one_line_exit_2(run(cli_env, "plan", "--config", "/dev/zero"), "/dev/zero is not a regular file")
    one_line_exit_2(run(cli_env, "plan", "--config", str(tmp_path)), f"{tmp_path}/config.json: no such file")


@pytest.mark.parametrize(("args", "words"), [
    (["plan", "--config", SEED, "--context", "1000000000000"], ("--context 1,000,000,000,000", "1 to 16,777,216")),
    (["plan", "--config", SEED, "--budget", "1GiB", "--page", "99999999999"], ("--page 99999999999",)),
    (["fit", "--weights-gb", "4", "--vram-gb", "8", "--config", SEED, "--context", "99999999999"],
     ("--context 99,999,999,999",)),
])
def test_a_context_or_page_past_any_model_is_refused(cli_env, args, words):
    one_line_exit_2(run(cli_env, *args), *words)
