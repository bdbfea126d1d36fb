"""The fit check: every verdict, the seed's probed ceiling, model directories, MoE shares, the overhead data."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from labwright.errors import BadInput
from labwright.tuning import kv_modes
from labwright.tuning.data import fit_data
from labwright.tuning.fit import check_fit, default_overhead, format_info
from labwright.tuning.fit_model import FitRequest, fit_model
from labwright.tuning.model_dir import read_model_dir
from labwright.tuning.moe import expert_fraction, is_moe
from labwright.tuning.units import GIB

CONFIGS = Path(__file__).resolve().parent / "configs"


def gb(value: float) -> int:
    return int(value * GIB)


def config(name: str) -> dict:
    return json.loads((CONFIGS / name).read_text())


def sparse(path: Path, size: int) -> Path:
    """A weights file of ``size`` bytes that takes no disk space: a header whose one tensor's data fills the rest
    (GGUF v3, or safetensors), as a whole download has; the data itself is a hole."""
    if path.suffix == ".gguf":
        name = b"weights"
        head = b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + struct.pack("<Q", len(name)) + name
        head += struct.pack("<I", 1)  # one dimension
        start = -(-(len(head) + 8 + 4 + 8) // 32) * 32  # the data begins at the 32-byte aligned offset
        head += struct.pack("<QIQ", (size - start) // 4, 0, 0)  # F32 elements, type 0 (F32), offset 0
    elif path.suffix == ".safetensors":
        end = size - 8 - 256  # a header padded to 256 bytes, as safetensors pads with spaces
        header = json.dumps({"weights": {"dtype": "U8", "shape": [end], "data_offsets": [0, end]}}).encode()
        head = struct.pack("<Q", 256) + header.ljust(256)
    else:
        head = b""
    with path.open("wb") as fh:
        fh.write(head)
        fh.truncate(size)
    return path


# --- verdicts ----------------------------------------------------------------------------------------------------

def test_fits_in_vram():
    result = check_fit(gb(5.5), gb(8), kv=gb(1), overhead=gb(1), fmt="gguf")
    assert (result.verdict, result.text) == ("fits", "fits in VRAM")
    assert result.headroom == gb(0.5) and result.gpu_weights == gb(5.5)
    assert result.how == ("GGUF runs on llama.cpp, Ollama",)


def test_moe_expert_offload_is_acceptable():
    result = check_fit(gb(18), gb(8), kv=gb(1), overhead=gb(1), ram=gb(64), moe=True, expert_fraction=0.95,
                       fmt="gguf")
    assert (result.verdict, result.text) == ("moe_offload", "MoE expert offload (acceptable)")
    assert result.gpu_weights == gb(6) and result.cpu_weights == gb(12)
    assert any("--n-cpu-moe" in line for line in result.how)


def test_dense_model_over_vram_is_a_split_with_the_warning():
    result = check_fit(gb(9), gb(8), kv=gb(1), overhead=gb(1), ram=gb(32), fmt="gguf")
    assert (result.verdict, result.text) == ("split", "split GPU/CPU (warn: PCIe-bound, worst case)")
    assert (result.gpu_weights, result.cpu_weights) == (gb(6), gb(3))
    assert any("PCIe-bound" in line and "worst case" in line for line in result.warnings)
    assert any("-ngl N" in line for line in result.how)


def test_moe_whose_dense_part_does_not_fit_falls_back_to_a_split():
    result = check_fit(gb(18), gb(8), kv=gb(4), overhead=gb(1), ram=gb(64), moe=True, expert_fraction=0.5,
                       fmt="gguf")
    assert result.verdict == "split"


def test_no_room_on_the_gpu_runs_fully_on_cpu():
    result = check_fit(gb(9), gb(2), kv=gb(1), overhead=gb(1), ram=gb(32), fmt="gguf")
    assert (result.verdict, result.text) == ("cpu", "run fully on CPU")
    assert result.gpu_weights == 0 and result.cpu_weights == gb(9)
    assert check_fit(gb(9), 0, ram=gb(32), fmt="gguf").verdict == "cpu"


def test_too_big_for_vram_and_ram_does_not_fit():
    result = check_fit(gb(70), gb(24), kv=gb(2), overhead=gb(1), ram=gb(32), fmt="gguf")
    assert (result.verdict, result.text) == ("no_fit", "does not fit")
    assert any("more than VRAM 24.00 GiB + RAM 32.00 GiB" in line for line in result.warnings)


def test_exl3_has_no_cpu_fallback():
    result = check_fit(gb(9), gb(8), kv=gb(1), overhead=gb(1), ram=gb(64), fmt="exl3")
    assert result.verdict == "no_fit"
    assert any("exllamav3 runs on CUDA GPUs only" in line for line in result.warnings)


def test_awq_moe_on_vllm_offloads_its_experts():
    """vLLM 0.33.0 offloads by parameter name (vllm/engine/arg_utils.py 1470-1473, --cpu-offload-params; vllm/config/
    offload.py 34-44: "experts" matches mlp.experts.*): field note 000's MoE expert offload, not a dense split."""
    result = check_fit(gb(18), gb(8), kv=gb(1), overhead=gb(1), ram=gb(64), moe=True, expert_fraction=0.95,
                       fmt="awq")
    assert result.verdict == "moe_offload"
    assert any("--cpu-offload-params experts" in line for line in result.how)


def test_a_dense_awq_model_over_vram_splits_over_pcie_on_vllm():
    result = check_fit(gb(10), gb(8), kv=gb(1), overhead=gb(1), ram=gb(64), fmt="awq")
    assert result.verdict == "split"
    assert any("--cpu-offload-gb" in line for line in result.how)


def test_unknown_ram_is_assumed_but_said():
    result = check_fit(gb(9), gb(8), kv=gb(1), overhead=gb(1), fmt="gguf")
    assert result.verdict == "split" and "RAM not checked: pass --ram-gb" in result.warnings


def test_no_format_gives_memory_verdicts_only():
    result = check_fit(gb(9), gb(8), kv=gb(1), overhead=gb(1))
    assert result.verdict == "split" and result.how == () and result.format.label == "unknown"


def test_negative_sizes_are_refused():
    with pytest.raises(BadInput, match="--weights-gb"):
        check_fit(-1, gb(8))


@pytest.mark.parametrize("verdict", ["fits", "moe_offload", "split", "cpu", "no_fit"])
def test_every_verdict_text_is_data(verdict):
    assert fit_data()["verdicts"][verdict]["text"]


# --- overheads and formats as data -------------------------------------------------------------------------------

def test_default_overheads_come_from_the_seeds():
    tabby, source = default_overhead(format_info("exl3"), gb(8))
    assert tabby == int(1.265 * GIB) and "field note 001" in source
    llama, source = default_overhead(format_info("gguf"), gb(24))
    assert llama == int(2.55 * GIB) and "field note 004" in source
    vllm, _ = default_overhead(format_info("awq"), gb(24))
    assert vllm == int(1.0 * GIB + 0.10 * gb(24))


@pytest.mark.parametrize(("fmt", "engines"), [
    ("gguf", ["llama.cpp", "Ollama"]), ("exl3", ["tabbyAPI (exllamav3)"]), ("awq", ["vLLM"]), ("gptq", ["vLLM"]),
    ("fp8", ["vLLM"])])
def test_which_engine_speaks_the_format(fmt, engines):
    assert format_info(fmt).engine_labels() == engines


# --- the seed: the probed ceiling --------------------------------------------------------------------------------

def seed_request(**kwargs) -> FitRequest:
    base = {"vram": gb(8), "weights": gb(4.5), "config": CONFIGS / "qwen3.5-9b.json",
            "spec": kv_modes.tabby_mode("8,4"), "weight_format": "exl3"}
    return FitRequest(**(base | kwargs))


def test_seed_ceiling_is_reproduced():
    """Seed 001: 4.5 GB model, 8 GB card, 8,4: 195,072 tokens (762 pages) loaded, 195,584 (764 pages) failed."""
    assert fit_model(seed_request()).max_context == 195_072
    assert fit_model(seed_request(context=195_072)).verdict == "fits"
    assert fit_model(seed_request(context=195_584)).verdict == "no_fit"
    assert fit_model(seed_request(context=131_072)).kv == 131_072 * 12_288


def test_format_default_cache_is_used_without_a_mode():
    result = fit_model(seed_request(spec=None, context=8192))
    assert result.cache_mode == "FP16" and result.kv == 8192 * 32_768


def test_kv_not_counted_without_a_context():
    result = fit_model(FitRequest(vram=gb(8), weights=gb(5.5)))
    assert result.kv == 0 and "not counted" in result.kv_source and result.verdict == "fits"


def test_fit_request_errors():
    with pytest.raises(BadInput, match="no weights size"):
        fit_model(FitRequest(vram=gb(8)))
    with pytest.raises(BadInput, match="--context needs the model's config.json"):
        fit_model(FitRequest(vram=gb(8), weights=gb(4), context=4096))
    with pytest.raises(BadInput, match="--kv-gb and --context both given"):
        fit_model(seed_request(context=4096, kv_size=gb(1)))
    with pytest.raises(BadInput, match="--format 'ggml' is unknown"):
        fit_model(FitRequest(vram=gb(8), weights=gb(4), weight_format="ggml"))


def test_moe_is_detected_from_config(tmp_path):
    (tmp_path / "config.json").write_text((CONFIGS / "qwen3-30b-a3b.json").read_text())
    sparse(tmp_path / "Qwen3-30B-A3B-Q4_K_M.gguf", gb(17.3))
    result = fit_model(FitRequest(vram=gb(12), ram=gb(64), model_dir=tmp_path, context=32_768))
    assert result.moe and result.verdict == "moe_offload" and result.format.key == "gguf"
    assert result.cache_mode == "f16" and result.kv == 48 * 4 * 128 * 4 * 32_768


# --- MoE shares --------------------------------------------------------------------------------------------------

def test_expert_fraction_of_qwen3_30b_a3b():
    section = config("qwen3-30b-a3b.json")
    assert is_moe(section)
    assert 0.94 < (expert_fraction(section) or 0) < 0.96   # 29.0B of 30.5B parameters are routed experts


def test_expert_fraction_of_deepseek_v3_counts_dense_first_layers():
    assert 0.96 < (expert_fraction(config("deepseek-v3.json")) or 0) < 0.99


def test_dense_model_is_not_moe():
    section = config("llama-3-8b.json")
    assert not is_moe(section) and expert_fraction(section) is None


# --- model directories -------------------------------------------------------------------------------------------

def test_gguf_shards_are_summed_and_projectors_left_out(tmp_path):
    sparse(tmp_path / "model-00001-of-00002.gguf", gb(10))
    sparse(tmp_path / "model-00002-of-00002.gguf", gb(5))
    sparse(tmp_path / "mmproj-F16.gguf", gb(0.8))
    folder = read_model_dir(tmp_path)
    assert (folder.format, folder.weights_bytes, folder.config) == ("gguf", gb(15), None)
    assert any("mmproj-F16.gguf" in note for note in folder.notes)


def test_two_gguf_models_in_one_dir_are_refused(tmp_path):
    sparse(tmp_path / "m-Q4_K_M.gguf", gb(4))
    sparse(tmp_path / "m-Q5_K_M.gguf", gb(5))
    with pytest.raises(BadInput, match="holds 2 GGUF models"):
        read_model_dir(tmp_path)


def test_safetensors_index_is_followed(tmp_path):
    (tmp_path / "config.json").write_text((CONFIGS / "llama-3-8b.json").read_text())
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": names[0], "b": names[1]}}))
    sparse(tmp_path / names[0], gb(5))
    sparse(tmp_path / names[1], gb(3))
    sparse(tmp_path / "consolidated.safetensors", gb(8))   # Mistral's duplicate: not counted
    folder = read_model_dir(tmp_path)
    assert (folder.weights_bytes, folder.format) == (gb(8), "safetensors")
    (tmp_path / names[1]).unlink()
    with pytest.raises(BadInput, match="which is missing"):
        read_model_dir(tmp_path)


def test_consolidated_only_is_counted(tmp_path):
    sparse(tmp_path / "consolidated.safetensors", gb(8))
    assert read_model_dir(tmp_path).weights_bytes == gb(8)


@pytest.mark.parametrize(("quant", "fmt"), [
    ({"quant_method": "exl3", "version": "0.0.37", "bits": 4.0, "head_bits": 6}, "exl3"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "awq"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "gptq"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8"),
    ({"quant_method": "compressed-tensors"}, "compressed-tensors"),
    ({"quant_method": "mxfp4"}, "mxfp4")])
def test_format_from_quantization_config(tmp_path, quant, fmt):
    doc = config("llama-3-8b.json") | {"quantization_config": quant}
    (tmp_path / "config.json").write_text(json.dumps(doc))
    sparse(tmp_path / "model.safetensors", gb(5))
    folder = read_model_dir(tmp_path)
    assert folder.format == fmt and "quant_method" in folder.format_reason


def test_unknown_quant_method_gets_no_engine():
    info = format_info("mxfp4")
    assert info.engines == () and "no engine data" in info.note


def test_exl3_from_the_sidecar_exllamav3_writes(tmp_path):
    (tmp_path / "config.json").write_text((CONFIGS / "llama-3-8b.json").read_text())
    (tmp_path / "quantization_config.json").write_text(json.dumps({"quant_method": "exl3", "tensor_storage": {}}))
    sparse(tmp_path / "model.safetensors", gb(5))
    assert read_model_dir(tmp_path).format == "exl3"


def test_lfs_pointer_and_empty_dir(tmp_path):
    (tmp_path / "model.safetensors").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 9\n")
    with pytest.raises(BadInput, match="Git LFS pointer"):
        read_model_dir(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(BadInput, match="no \\*.safetensors or \\*.gguf weights"):
        read_model_dir(tmp_path)
    with pytest.raises(BadInput, match="not a directory"):
        read_model_dir(tmp_path / "missing")


def test_model_dir_with_a_broken_config(tmp_path):
    (tmp_path / "config.json").write_text("[]")
    sparse(tmp_path / "model.safetensors", gb(1))
    with pytest.raises(BadInput, match="top level is a JSON list"):
        read_model_dir(tmp_path)


CONFIG = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 8}


def _safetensors(path: Path, header: dict) -> None:
    body = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body + b"\0" * 64)


@pytest.mark.parametrize("files, said", [
    ({"model.safetensors.index.json": {"weight_map": {"a": 5}}}, "weight_map names 5"),
    ({"model.safetensors.index.json": {"weight_map": {"a": "../../../../etc/passwd"}}}, "not a file name beside it"),
    ({"model.safetensors.index.json": {"weight_map": {}}}, "weight_map is empty"),
    ({"model.safetensors": {"w": {"dtype": "F16", "shape": [1], "data_offsets": [0, -100]}}}, "not a byte range"),
    ({"model.safetensors": {"w": {"dtype": "F16", "shape": [1], "data_offsets": [True, 2]}}}, "not a byte range"),
    ({"config.json": {**CONFIG, "quantization_config": "awq"},
      "model.safetensors": {"w": {"dtype": "F16", "shape": [32], "data_offsets": [0, 64]}}},
     "quantization_config is a JSON str"),
])
def test_a_model_dirs_index_and_headers_are_shape_checked(tmp_path, files, said):
    """CLI sweep at 2b91fd1: an index naming a path out of the directory counted /etc/passwd as weights; an int name
    was a TypeError; a negative offset planned 0 bytes of weights; a string quantization_config was ignored."""
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    for name, doc in files.items():
        if name.endswith(".safetensors"):
            _safetensors(tmp_path / name, doc)
        else:
            (tmp_path / name).write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=said) as refused:
        read_model_dir(tmp_path)
    assert "\n" not in str(refused.value)
