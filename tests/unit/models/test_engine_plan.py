"""``engine: auto`` / ``labwright model plan``: the format picks the engine (field note 000's table), kv fit's verdict
says where the model lives; a format no engine here speaks, or a model that fits nowhere, is one line.

Model files are real headers with sparse data (support.model_files): read_model_dir checks them as it does a download.
Hub repos are read by the REAL huggingface_hub client from the stand-in hub (support.hf_endpoint).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labwright.errors import BadInput
from labwright.models.engine_plan import Memory, plan_hub, plan_local
from labwright.models.spec import parse_spec
from labwright.tuning.units import GIB
from support.cli_result import runner
from support.hf_endpoint import StandinHub, StandinRepo
from support.model_files import quantized_config, sparse_weights

CONFIGS = Path(__file__).resolve().parents[1] / "tuning" / "configs"


def gb(value: float) -> int:
    return int(value * GIB)


def model_dir(tmp_path: Path, name: str, method: str | None, size_gb: float, base: str = "llama-3-8b.json") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(quantized_config(json.loads((CONFIGS / base).read_text()),
                                                                     method)))
    sparse_weights(folder / "model.safetensors", gb(size_gb))
    return folder


@pytest.fixture
def labwright(capsys):
    return runner(capsys)


# --- the table: format -> engine ------------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "engine"), [("awq", "vllm"), ("gptq", "vllm"), ("fp8", "vllm"),
                                                 (None, "vllm"), ("exl3", "tabbyapi")])
def test_a_directory_that_fits_goes_to_its_formats_engine(tmp_path, method, engine):
    plan = plan_local(model_dir(tmp_path, "m", method, 5), Memory(vram=gb(12), ram=gb(32)))
    assert plan.engine == engine and plan.fit.verdict == "fits" and plan.cpu_offload_gb == 0
    assert "\n" not in plan.line and "field note 000" in plan.line and "fits in VRAM" in plan.line
    assert plan.deploy == f"deploys/{engine}.py"


def test_a_gguf_file_goes_to_llamacpp_and_runs_on_the_cpu_without_a_gpu(tmp_path):
    gguf = sparse_weights(tmp_path / "m-Q4_K_M.gguf", gb(5))
    assert plan_local(gguf, Memory(vram=gb(8))).engine == "llamacpp"
    cpu = plan_local(gguf, Memory(vram=0, ram=gb(32)))
    assert cpu.engine == "llamacpp" and cpu.fit.verdict == "cpu" and "-ngl 0" in cpu.line


def test_a_moe_awq_model_over_vram_is_vllm_with_its_experts_offloaded(tmp_path):
    folder = model_dir(tmp_path, "moe", "awq", 17, base="qwen3-30b-a3b.json")
    plan = plan_local(folder, Memory(vram=gb(12), ram=gb(64)))
    assert (plan.engine, plan.fit.verdict, plan.offload_params) == ("vllm", "moe_offload", "experts")
    assert plan.cpu_offload_gb == -(-plan.fit.cpu_weights // GIB) > 0
    assert f"--cpu-offload-gb {plan.cpu_offload_gb} --cpu-offload-params experts" in plan.line


def test_a_dense_awq_model_over_vram_is_a_vllm_split_with_its_offload(tmp_path):
    plan = plan_local(model_dir(tmp_path, "dense", "awq", 10), Memory(vram=gb(8), ram=gb(64)))
    assert (plan.engine, plan.fit.verdict, plan.offload_params) == ("vllm", "split", "")
    assert plan.cpu_offload_gb >= 3 and any("PCIe-bound" in w for w in plan.fit.warnings)


# --- bad input: one line each ---------------------------------------------------------------------------------

def test_exl2_is_a_format_no_engine_here_speaks(tmp_path):
    with pytest.raises(BadInput) as info:
        plan_local(model_dir(tmp_path, "m", "exl2", 5), Memory(vram=gb(24)))
    assert "EXL2" in str(info.value) and "no engine labwright deploys speaks" in str(info.value)
    assert "\n" not in str(info.value)


def test_an_unknown_quant_method_is_refused_by_name(tmp_path):
    with pytest.raises(BadInput, match="'bitsandbytes'.*no engine labwright deploys speaks"):
        plan_local(model_dir(tmp_path, "m", "bitsandbytes", 5), Memory(vram=gb(24)))


@pytest.mark.parametrize(("method", "memory", "why"), [
    ("exl3", Memory(vram=gb(8), ram=gb(64)), "exllamav3 runs on CUDA GPUs only"),
    ("awq", Memory(vram=0, ram=gb(64)), "no CPU-only mode"),
    ("awq", Memory(vram=gb(24), unified=True), "needs"),
])
def test_nothing_fits_is_one_line(tmp_path, method, memory, why):
    with pytest.raises(BadInput) as info:
        plan_local(model_dir(tmp_path, "big", method, 30), memory)
    text = str(info.value)
    assert "fits nowhere" in text and why in text and "\n" not in text and "nothing was deployed" in text


def test_unified_memory_has_no_split(tmp_path):
    gguf = sparse_weights(tmp_path / "m.gguf", gb(20))
    plan = plan_local(gguf, Memory(vram=gb(96), unified=True))
    assert plan.fit.verdict == "fits" and "unified memory" in plan.line


# --- a Hub repo: the listing and config.json, no weights ------------------------------------------------------

@pytest.fixture
def hub(tmp_path):
    awq = quantized_config(json.loads((CONFIGS / "llama-3-8b.json").read_text()), "awq")
    exl2 = quantized_config(json.loads((CONFIGS / "llama-3-8b.json").read_text()), "exl2")
    with StandinHub() as standin:
        standin.add(StandinRepo("lab/tiny-AWQ", {"config.json": json.dumps(awq).encode(),
                                                  "model.safetensors": b"\0" * 40_000}))
        standin.add(StandinRepo("lab/tiny-exl2", {"config.json": json.dumps(exl2).encode(),
                                                   "model.safetensors": b"\0" * 40_000}))
        standin.add(StandinRepo("lab/tiny-GGUF", {"tiny-Q8_0.gguf": b"\0" * 30_000, "README.md": b"x\n"}))
        yield standin


def test_a_hub_repo_is_planned_from_its_listing_and_config(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    plan = plan_hub(parse_spec({"repo": "lab/tiny-AWQ"}), hub.endpoint, Memory(vram=gb(8)))
    assert plan.engine == "vllm" and plan.fit.weights == 40_000 and "quant_method = 'awq'" in plan.line
    assert not any(seen.path.endswith(".safetensors") for seen in hub.file_gets()), "weights were downloaded"
    gguf = plan_hub(parse_spec({"repo": "lab/tiny-GGUF", "file": "tiny-Q8_0.gguf"}), hub.endpoint, Memory(vram=gb(8)))
    assert gguf.engine == "llamacpp"
    with pytest.raises(BadInput, match="name the one to serve with model_file"):
        plan_hub(parse_spec({"repo": "lab/tiny-GGUF"}), hub.endpoint, Memory(vram=gb(8)))
    with pytest.raises(BadInput, match="EXL2.*no engine labwright deploys speaks"):
        plan_hub(parse_spec({"repo": "lab/tiny-exl2"}), hub.endpoint, Memory(vram=gb(8)))


# --- the CLI ----------------------------------------------------------------------------------------------------

def test_model_plan_prints_the_choice_and_json(labwright, tmp_path):
    folder = model_dir(tmp_path, "m", "awq", 5)
    text = labwright("model", "plan", str(folder), "--vram-gb", "8")
    assert text.returncode == 0 and text.stdout.startswith("engine auto: vLLM for ")
    assert "deploys/vllm.py" in text.stdout
    out = labwright("model", "plan", str(folder), "--vram-gb", "8", "--json")
    doc = json.loads(out.stdout)
    assert (doc["engine"], doc["deploy"], doc["fit"]["verdict"], doc["cpu_offload_gb"]) == ("vllm", "deploys/vllm.py",
                                                                                            "fits", 0)


@pytest.mark.parametrize(("args", "needle"), [
    ((), "--vram-gb: give the largest GPU's memory"),
    (("--vram-gb", "banana"), "--vram-gb"),
    (("--unified",), "--unified: give the shared pool's size"),
    (("--vram-gb", "8", "--file", "x.gguf"), "are for a Hub repo"),
])
def test_model_plan_bad_input_is_one_line_exit_2(labwright, tmp_path, args, needle):
    folder = model_dir(tmp_path, "m", "awq", 5)
    result = labwright("model", "plan", str(folder), *args)
    assert result.returncode == 2 and needle in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_model_plan_refusals_exit_2(labwright, tmp_path):
    exl2 = labwright("model", "plan", str(model_dir(tmp_path, "e", "exl2", 5)), "--vram-gb", "24")
    big = labwright("model", "plan", str(model_dir(tmp_path, "b", "exl3", 30)), "--vram-gb", "8")
    for result, needle in ((exl2, "no engine labwright deploys speaks"), (big, "fits nowhere")):
        assert result.returncode == 2 and needle in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


# --- engine: auto in a host's data (labwright.deploys.engine_host) ----------------------------------------------

def _engine_host_on_local(data: dict, engine: str) -> bool:
    from pyinfra.api import Config, Inventory, State
    from pyinfra.context import ctx_host, ctx_state

    from labwright.deploys import _PLANS, engine_host

    _PLANS.clear()
    inventory = Inventory((["@local"], data))
    state = State(inventory, Config())
    with ctx_state.use(state), ctx_host.use(inventory.get_host("@local")):
        return engine_host(engine)


def test_engine_auto_picks_the_deploy_of_the_models_format(hub, tmp_path, monkeypatch):
    """This machine has no NVIDIA GPU (NvidiaGpus is empty): a GGUF runs on llama.cpp on the CPU."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    data = {"engine": "auto", "model_repo": "lab/tiny-GGUF", "model_file": "tiny-Q8_0.gguf",
            "model_endpoint": hub.endpoint}
    assert _engine_host_on_local(data, "llamacpp") is True
    assert _engine_host_on_local(data, "vllm") is False
    assert _engine_host_on_local(data, "tabbyapi") is False


def test_engine_auto_where_nothing_fits_stops_the_host_with_one_line(hub, tmp_path, monkeypatch):
    from pyinfra.api.exceptions import DeployError

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    data = {"engine": "auto", "model_repo": "lab/tiny-AWQ", "model_endpoint": hub.endpoint}
    with pytest.raises(DeployError) as info:
        _engine_host_on_local(data, "vllm")
    assert "fits nowhere on no GPU" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(DeployError, match="engine: auto needs the model"):
        _engine_host_on_local({"engine": "auto"}, "vllm")


def test_engine_auto_through_the_shim_is_one_line_before_any_operation(hub, tmp_path):
    """pyinfra @local deploys/vllm.py with engine=auto and an AWQ repo, on this machine without a GPU: refused while
    pyinfra prepares, one line, no operation run."""
    import subprocess
    import sys

    from labwright.testing.pyinfra_output import tool_env

    repo = Path(__file__).resolve().parents[3]
    env = {**tool_env(), "HF_HOME": str(tmp_path / "hf")}
    env.pop("HF_TOKEN", None)
    proc = subprocess.run([str(Path(sys.executable).parent / "pyinfra"), "-y", "@local", "deploys/vllm.py", "--data",
                           "engine=auto", "--data", "model_repo=lab/tiny-AWQ", "--data",
                           f"model_endpoint={hub.endpoint}"], capture_output=True, text=True, env=env, cwd=repo,
                          timeout=120)
    output = proc.stdout + proc.stderr
    lines = [line for line in output.splitlines() if "engine auto:" in line]
    assert len(lines) == 1 and "fits nowhere on no GPU" in lines[0], output
    assert "Traceback" not in output and "Beginning operation run" not in output


@pytest.mark.parametrize("declared", [["llamacpp"], "llama.cpp", "", 5, {"engine": "vllm"}, "ollama"])
def test_an_engine_of_the_wrong_type_or_unknown_stops_the_host(declared):
    """Sweep at 2b91fd1: engine: ["llamacpp"] skipped the host with exit 0, a deploy reported done that never ran."""
    from pyinfra.api.exceptions import DeployError

    with pytest.raises(DeployError, match=r"^engine: .* is not one of llamacpp, tabbyapi, vllm, auto"):
        _engine_host_on_local({"engine": declared}, "llamacpp")


def test_a_known_engine_for_another_deploy_is_skipped():
    assert _engine_host_on_local({"engine": "tabbyapi"}, "llamacpp") is False
    assert _engine_host_on_local({"engine": "llamacpp"}, "llamacpp") is True
