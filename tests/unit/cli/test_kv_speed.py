"""`labwright kv fit`'s decode speed and `labwright kv bandwidth` as a user runs them: the JSON key decode_tok_s, the
placements (VRAM, --unified, --cpu, a split, MoE expert offload), the options' bad input (one line, exit 2), and the
bandwidth read from nvidia-smi (a stand-in with a real driver's behaviour: tests/support/speed_doubles.py) or
measured for RAM (for real)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.cli_child import run_cli
from support.speed_doubles import write_nvidia_smi

CONFIGS = Path(__file__).resolve().parents[1] / "tuning" / "configs"


def run(cli_env, *args, env=None):
    return run_cli(["kv", *args], env=env or cli_env)


def ok_json(cli_env, *args, env=None):
    proc = run(cli_env, *args, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def one_line_exit_2(proc, *words):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("labwright: error: ") and "Traceback" not in proc.stderr, lines
    assert all(word in lines[0] for word in words), (words, lines[0])
    assert proc.stdout == ""


def test_decode_speed_from_the_gpu_table(cli_env):
    # field note 004's Q4_K_M file on its RTX 4090: measured 39.3 tok/s at 2K (data/speed.toml learned from it)
    doc = ok_json(cli_env, "fit", "--weights-gb", "16.2", "--gpu", "RTX 4090", "--format", "gguf")
    assert doc["verdict"] == "fits" and doc["vram_bytes"] == 24 * 1024**3
    assert 35 < doc["decode_tok_s"] < 43
    assert doc["speed"]["placement"] == "vram"
    assert doc["speed"]["parts"][0]["bandwidth_gbs"] == 1008
    assert any("field note 004" in s for s in doc["speed"]["sources"])


def test_bandwidth_option_over_the_table_and_the_time_to_first_token(cli_env):
    slow = ok_json(cli_env, "fit", "--weights-gb", "16.2", "--vram-gb", "24", "--bandwidth-gbs", "504")
    fast = ok_json(cli_env, "fit", "--weights-gb", "16.2", "--vram-gb", "24", "--bandwidth-gbs", "1008")
    assert fast["decode_tok_s"] == pytest.approx(2 * slow["decode_tok_s"], rel=0.01)
    assert fast["ttft_s"] is None  # no FP16 throughput known without --gpu
    doc = ok_json(cli_env, "fit", "--weights-gb", "16.2", "--gpu", "RTX 4090", "--params-b", "27", "--format",
                  "gguf", "--kv-gb", "0")
    assert doc["ttft_s"] is None  # no prompt: no context given
    timed = ok_json(cli_env, "fit", "--model-dir", str(_gguf_dir(cli_env)), "--gpu", "RTX 4090", "--params-b",
                    "27", "--context", "4096")
    assert timed["ttft_s"] is not None and timed["speed"]["prompt_tokens"] == 4096


def _gguf_dir(cli_env) -> Path:
    from support.gguf_files import write_gguf

    folder = Path(cli_env["HOME"]) / "model"
    folder.mkdir(exist_ok=True)
    write_gguf(folder / "m.gguf", "llama", {"block_count": 4, "embedding_length": 256, "attention.head_count": 4,
                                            "attention.head_count_kv": 4, "context_length": 8192})
    return folder


def test_unified_memory_an_apu_reading_shared_ram(cli_env):
    # field note 002's qwen3:30b-a3b on the Vega 8 (12 tok/s): 30 B total, 3 B active, Q4_K_M
    doc = ok_json(cli_env, "fit", "--weights-gb", "17.1", "--format", "gguf", "--unified", "--ram-gb", "64",
                  "--bandwidth-gbs", "51.2", "--params-b", "30", "--active-params-b", "3")
    assert doc["verdict"] == "fits" and doc["speed"]["placement"] == "unified"
    assert 10 < doc["decode_tok_s"] < 15
    assert doc["speed"]["active_fraction"] == pytest.approx(0.1)
    by_name = ok_json(cli_env, "fit", "--weights-gb", "17.1", "--format", "gguf", "--gpu", "Vega 8", "--ram-gb",
                      "64", "--params-b", "30", "--active-params-b", "3")
    assert by_name["decode_tok_s"] == doc["decode_tok_s"]


def test_cpu_only_reads_ram(cli_env):
    # field note 000: "Fully CPU Q8_0 9B ~4-5 tok/s" on DDR5 (~90 GB/s)
    doc = ok_json(cli_env, "fit", "--weights-gb", "8.93", "--format", "gguf", "--cpu", "--ram-bandwidth-gbs", "90")
    assert doc["verdict"] == "cpu" and doc["speed"]["placement"] == "cpu"
    assert 4 <= doc["decode_tok_s"] <= 5
    no_bandwidth = ok_json(cli_env, "fit", "--weights-gb", "8.93", "--format", "gguf", "--cpu")
    assert no_bandwidth["decode_tok_s"] is None
    assert any("--ram-bandwidth-gbs" in n for n in no_bandwidth["speed"]["notes"])


def test_a_cpu_decode_on_few_threads_is_limited_by_their_arithmetic(cli_env):
    # the same 9B Q8_0 on 90 GB/s, computed by an LXC's 2 cores: the threads, not the RAM, set the pace
    args = ("fit", "--weights-gb", "8.93", "--format", "gguf", "--cpu", "--ram-bandwidth-gbs", "90", "--params-b", "9")
    alone = ok_json(cli_env, *args)
    two = ok_json(cli_env, *args, "--cpu-threads", "2")
    many = ok_json(cli_env, *args, "--cpu-threads", "16")
    assert two["decode_tok_s"] < alone["decode_tok_s"] == many["decode_tok_s"]
    assert [p["bound"] for p in two["speed"]["parts"] if p["what"] == "weights"] == ["arithmetic"]
    assert [p["bound"] for p in many["speed"]["parts"] if p["what"] == "weights"] == ["memory"]
    assert any("thread(s) limit" in n for n in two["speed"]["notes"])
    table = run(cli_env, *args, "--cpu-threads", "2")
    assert table.returncode == 0 and "bound" in table.stdout and "arithmetic" in table.stdout, table.stderr


def test_a_split_reads_the_cpu_layers_from_ram(cli_env):
    # field notes 000/002: Qwen3.5-27B Q4 on the 8 GB RTX 4070 laptop spills to DDR5: ~3 tok/s
    doc = ok_json(cli_env, "fit", "--weights-gb", "16.2", "--format", "gguf", "--gpu", "RTX 4070 Laptop GPU",
                  "--ram-gb", "64", "--ram-bandwidth-gbs", "90", "--overhead-gb", "1.265")
    assert doc["verdict"] == "split"
    assert {p["memory"] for p in doc["speed"]["parts"]} == {"vram", "ram"}
    assert 2.5 < doc["decode_tok_s"] < 4.5
    unknown_ram = ok_json(cli_env, "fit", "--weights-gb", "16.2", "--format", "gguf", "--gpu",
                          "RTX 4070 Laptop GPU", "--ram-gb", "64")
    assert unknown_ram["decode_tok_s"] is None


def test_moe_expert_offload_reads_only_the_routed_experts_the_router_picks(cli_env):
    config = str(CONFIGS / "qwen3-30b-a3b.json")
    doc = ok_json(cli_env, "fit", "--weights-gb", "17", "--format", "gguf", "--config", config, "--vram-gb", "8",
                  "--ram-gb", "64", "--bandwidth-gbs", "256", "--ram-bandwidth-gbs", "90")
    assert doc["verdict"] == "moe_offload"
    experts = [p for p in doc["speed"]["parts"] if p["what"] == "active routed experts"][0]
    assert experts["memory"] == "ram"
    assert experts["bytes"] == pytest.approx(doc["expert_bytes"] * 8 / 128, rel=0.001)  # 8 of 128 experts
    assert doc["decode_tok_s"] > 10


@pytest.mark.parametrize(("args", "words"), [
    (["--bandwidth-gbs", "0"], ("--bandwidth-gbs 0", "above 0")),
    (["--bandwidth-gbs", "20000"], ("--bandwidth-gbs 20000", "10 TB/s")),
    (["--bandwidth-gbs", "nan"], ("--bandwidth-gbs nan",)),
    (["--ram-bandwidth-gbs", "-5"], ("--ram-bandwidth-gbs -5",)),
    (["--ram-bandwidth-gbs", "inf"], ("--ram-bandwidth-gbs inf",)),
    (["--unified", "--cpu"], ("--unified and --cpu", "give one of them")),
    (["--params-b", "30", "--active-params-b", "35"], ("--active-params-b 35 is above the total (30 B)", "swap")),
    (["--active-params-b", "3"], ("--active-params-b needs the total", "--params-b")),
    (["--params-b", "0"], ("--params-b 0",)),
    (["--gpu", "RTX 9999"], ("--gpu 'RTX 9999'", "not in labwright's GPU table", "--bandwidth-gbs")),
    (["--cpu", "--gpu", "RTX 4090"], ("--cpu with --gpu RTX 4090",)),
    (["--cpu", "--bandwidth-gbs", "50", "--ram-bandwidth-gbs", "60"], ("give one of them",)),
    (["--cpu-threads", "0"], ("--cpu-threads 0", "from 1 to 1,024")),
    (["--cpu-threads", "-4"], ("--cpu-threads -4", "from 1 to 1,024")),
    (["--cpu-threads", "4096"], ("--cpu-threads 4096", "from 1 to 1,024")),
    (["--cpu-threads", "four"], ("--cpu-threads",)),
    (["--cpu-threads", "2.5"], ("--cpu-threads",)),
])
def test_bad_speed_input_is_one_line_naming_the_option_and_the_fix(cli_env, args, words):
    one_line_exit_2(run(cli_env, "fit", "--weights-gb", "8", "--vram-gb", "24", *args), *words)


def test_no_gpu_memory_at_all_is_one_line(cli_env):
    one_line_exit_2(run(cli_env, "fit", "--weights-gb", "8"), "--vram-gb", "--gpu", "--cpu")
    one_line_exit_2(run(cli_env, "fit", "--weights-gb", "8", "--unified"), "--unified", "--vram-gb", "--ram-gb")


def test_the_table_prints_the_speed_and_its_sources(cli_env):
    proc = run(cli_env, "fit", "--weights-gb", "16.2", "--gpu", "RTX 4090", "--format", "gguf")
    assert proc.returncode == 0, proc.stderr
    assert "decode:" in proc.stdout and "tok/s" in proc.stdout and "field note 004" in proc.stdout


def _path_with(cli_env, directory: Path) -> dict:
    env = dict(cli_env)
    env["PATH"] = f"{directory}{os.pathsep}{env.get('PATH', os.environ['PATH'])}"
    return env


def test_bandwidth_reads_nvidia_smi_clock_and_bus_width(cli_env, tmp_path):
    write_nvidia_smi(tmp_path / "nvidia-smi")
    doc = ok_json(cli_env, "bandwidth", "--no-ram", env=_path_with(cli_env, tmp_path))
    assert doc["gpus"][0]["bandwidth_gbs"] == 1008.1  # 10,501 MHz x 2 x 384 bits / 8
    assert doc["gpus"][0]["memory_mib"] == 24564
    assert doc["kv_fit_options"] == "--bandwidth-gbs 1008.1"
    assert doc["ram"] is None


def test_bandwidth_falls_back_to_the_table_when_the_driver_refuses_a_field(cli_env, tmp_path):
    write_nvidia_smi(tmp_path / "nvidia-smi", refuse=("memory.bus_width",))
    doc = ok_json(cli_env, "bandwidth", "--no-ram", env=_path_with(cli_env, tmp_path))
    assert doc["smi_refused"] == ["memory.bus_width"]
    assert doc["gpus"][0]["bandwidth_gbs"] == 1008
    assert "data/gpu-memory.toml" in doc["gpus"][0]["how"]


def test_bandwidth_measures_ram_for_real(cli_env, tmp_path):
    doc = ok_json(cli_env, "bandwidth", "--size-mib", "64", "--rounds", "2", "--processes", "1",
                  env=_path_with(cli_env, tmp_path))
    assert doc["ram"]["read_gbs"] > 0.5
    assert doc["ram"]["bytes"] == 64 * 1024**2 and doc["ram"]["processes"] == 1
    assert "memchr" in doc["ram"]["method"]
    assert "--ram-bandwidth-gbs" in doc["kv_fit_options"] and doc["kv_fit_options"].endswith("--ram-measured")
    assert doc["ram"]["wall_gbs"] > 0


def test_a_measured_ram_bandwidth_has_its_own_efficiency(cli_env):
    spec = ok_json(cli_env, "fit", "--weights-gb", "1.5", "--format", "gguf", "--cpu", "--ram-bandwidth-gbs", "20")
    measured = ok_json(cli_env, "fit", "--weights-gb", "1.5", "--format", "gguf", "--cpu", "--ram-bandwidth-gbs",
                       "20", "--ram-measured")
    assert measured["decode_tok_s"] > spec["decode_tok_s"]  # a measured read already leaves out what RAM cannot give
    assert any("kv bandwidth" in s for s in measured["speed"]["sources"])
    one_line_exit_2(run(cli_env, "fit", "--weights-gb", "1.5", "--cpu", "--ram-measured"), "--ram-measured",
                    "--ram-bandwidth-gbs")


@pytest.mark.parametrize(("args", "words"), [
    (["--size-mib", "0"], ("--size-mib 0",)),
    (["--size-mib", "1000000000000"], ("--size-mib",)),
    (["--processes", "0"], ("--processes 0",)),
    (["--rounds", "0"], ("--rounds 0",)),
])
def test_bandwidth_bad_input(cli_env, args, words):
    one_line_exit_2(run(cli_env, "bandwidth", *args), *words)
