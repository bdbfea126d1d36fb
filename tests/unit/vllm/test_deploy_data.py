"""deploys/vllm.py's data: the command line (vLLM 0.33.0's flags, labwright.vllm.deploy_data cites their lines), the
unit, and one line for each bad value; ``engine: auto``'s offload reaching the command line."""

from __future__ import annotations

import pytest

from labwright.errors import BadInput
from labwright.vllm.deploy_data import downloaded_model, settings_from

MODEL = {"vllm_model": "/srv/models/Qwen3-8B-AWQ"}


def test_defaults_serve_on_loopback_with_the_key_in_the_environment_only():
    s = settings_from(MODEL)
    assert s.command() == ["/opt/vllm/venv/bin/vllm", "serve", "/srv/models/Qwen3-8B-AWQ", "--served-model-name",
                           "Qwen3-8B-AWQ", "--host", "127.0.0.1", "--port", "8000", "--gpu-memory-utilization", "0.9",
                           "--kv-cache-dtype", "auto"]
    unit = s.render_unit()
    assert "EnvironmentFile=/etc/vllm/api-key.env" in unit and "--api-key" not in unit
    assert "ExecStart=/opt/vllm/venv/bin/vllm serve /srv/models/Qwen3-8B-AWQ" in unit


def test_engine_autos_offload_reaches_the_command_line():
    s = settings_from(MODEL)
    assert s.command(5, "experts")[-4:] == ["--cpu-offload-gb", "5", "--cpu-offload-params", "experts"]
    assert s.command(3, "")[-2:] == ["--cpu-offload-gb", "3"]
    given = settings_from({**MODEL, "vllm_cpu_offload_gb": 2, "vllm_cpu_offload_params": ""})
    assert given.command(5, "experts")[-2:] == ["--cpu-offload-gb", "2"]  # the data wins over the plan
    off = settings_from({**MODEL, "vllm_cpu_offload_gb": 0})
    assert "--cpu-offload-gb" not in off.command(5, "experts")


def test_every_flag_and_a_percent_in_a_name_survive_systemds_parsing():
    s = settings_from({**MODEL, "vllm_served_model_name": "odd 100% $HOME", "vllm_max_model_len": 8192,
                       "vllm_enforce_eager": True, "vllm_tensor_parallel_size": 2,
                       "vllm_extra_args": ["--max-num-seqs", "4"]})
    words = s.command()
    assert words[4] == "odd 100% $HOME"
    assert {"--max-model-len", "8192", "--enforce-eager", "--tensor-parallel-size", "2", "--max-num-seqs"} <= set(words)
    assert "--served-model-name 'odd 100%% $$HOME'" in s.render_unit()


@pytest.mark.parametrize(("data", "needle"), [
    ({}, "vllm_model: is required"),
    ({**MODEL, "vllm_host": "0.0.0.0"}, "vllm_host: 0.0.0.0 would put /health and /metrics on the network"),
    ({**MODEL, "vllm_port": 70000}, "vllm_port"),
    ({**MODEL, "vllm_gpu_memory_utilization": 1.5}, "vllm_gpu_memory_utilization"),
    ({**MODEL, "vllm_kv_cache_dtype": "q4_0"}, "vllm_kv_cache_dtype"),
    ({**MODEL, "vllm_cpu_offload_gb": "lots"}, "vllm_cpu_offload_gb: 'lots' is neither auto nor a number"),
    ({**MODEL, "vllm_cpu_offload_gb": 0, "vllm_cpu_offload_params": "experts"}, "offloads nothing"),
    ({**MODEL, "vllm_extra_args": ["--api-key", "k"]}, "--api-key is set by the deploy's own keys"),
    ({**MODEL, "vllm_extra_args": "--port 1"}, "vllm_extra_args: must be a list"),
    ({**MODEL, "vllm_porrt": 8001}, "vllm_porrt: unknown data key for this deploy (did you mean vllm_port?)"),
    ({**MODEL, "tabbyapi_port": 8000}, "tabbyapi_port and vllm_port are both port 8000 on this host"),
    ({**MODEL, "llamacpp_port": 9000, "vllm_port": 9000}, "llamacpp_port and vllm_port are both port 9000"),
    ({**MODEL, "vllm_venv": "/usr"}, "vllm_venv"),
])
def test_bad_data_is_one_line_naming_the_key(data, needle):
    with pytest.raises(BadInput) as info:
        settings_from(data)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_exposing_on_purpose_is_allowed():
    assert settings_from({**MODEL, "vllm_host": "0.0.0.0", "vllm_expose": True}).local_url == "http://127.0.0.1:8000"


def test_a_hub_model_points_vllm_at_its_download():
    data, planned = downloaded_model({"model_repo": "Qwen/Qwen3-8B-AWQ"})
    assert planned is not None and data["vllm_model"] == "/srv/models/Qwen3-8B-AWQ"
    with pytest.raises(BadInput, match="vllm_model: '/elsewhere' and model_repo Qwen/Qwen3-8B-AWQ both name"):
        downloaded_model({"model_repo": "Qwen/Qwen3-8B-AWQ", "vllm_model": "/elsewhere"})
    with pytest.raises(BadInput, match="model_file"):
        downloaded_model({"model_repo": "Qwen/Qwen3-8B-GGUF", "model_file": "q.gguf"})
