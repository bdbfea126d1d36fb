"""Trial statistics, prompt sizing, the local-server RSS sampler and the report formats."""

from __future__ import annotations

import csv
import io
import json
import os
import socket
import subprocess
import sys

import pytest

from labwright.bench import memory, prompt, report, stats
from labwright.bench.openai import Trial
from labwright.bench.runner import SCHEMA, ContextResult, parse_contexts
from labwright.errors import BadInput
from labwright.testing.waiting import wait_for


def trial(ttft, total, prompt_tokens=1000, decode=100, server=None):
    timings = {"prompt_per_second": server[0], "predicted_per_second": server[1]} if server else None
    return Trial(ttft, total, prompt_tokens, "usage", decode, "usage", decode, "length", None, timings)


def test_cold_trial_is_apart_and_warm_is_the_median_of_the_rest():
    trials = [trial(2.0, 4.0), trial(0.5, 1.5, server=(2100.0, 90.0)), trial(0.25, 1.25, server=(4000.0, 110.0)),
              trial(1.0, 3.0, server=(1000.0, 50.0))]
    cold, warm = stats.cold_and_warm(trials)
    assert cold is not None and warm is not None
    assert (cold.trials, cold.ttft_s, cold.prefill_tps, cold.decode_tps) == (1, 2.0, 500.0, 50.0)
    assert cold.server_prefill_tps is None
    assert (warm.trials, warm.ttft_s) == (3, 0.5)
    assert warm.prefill_tps == 2000.0  # median of 2000, 4000, 1000
    assert warm.decode_tps == 100.0  # median of 100/1.0, 100/1.0, 100/2.0
    assert (warm.server_prefill_tps, warm.server_decode_tps) == (2100.0, 90.0)


def test_a_single_trial_has_no_warm_median():
    cold, warm = stats.cold_and_warm([trial(1.0, 2.0)])
    assert cold is not None and cold.trials == 1 and warm is None
    assert stats.median([None, None]) is None and stats.median([3.0, None, 1.0]) == 2.0


def test_decode_rate_needs_time_after_the_first_token():
    assert trial(1.0, 1.0).decode_tps is None
    assert trial(1.0, 3.0, decode=0).decode_tps is None


def test_contexts_parse_and_bad_ones_are_named():
    assert parse_contexts("512, 4096,16k") == (512, 4096, 16384)
    with pytest.raises(BadInput, match=r"--contexts '512,4k5': '4k5' is not a whole number"):
        parse_contexts("512,4k5")
    with pytest.raises(BadInput, match="names no context"):
        parse_contexts(" , ")


def whitespace_tokens(text):
    return len(text.split())


def test_prompt_reaches_the_target_by_the_tokenizer():
    for target in (50, 700, 5000):
        built = prompt.build(target, seed=target, chars_per_token=1.0, count=whitespace_tokens)
        assert built.exact and abs(whitespace_tokens(built.text) - target) <= max(2, target // 200)
        assert built.tokens == whitespace_tokens(built.text)


def test_prompts_differ_between_seeds_from_the_first_words():
    a, b = (prompt.build(200, seed=s, chars_per_token=5.0, count=whitespace_tokens).text for s in (1, 2))
    assert a.split()[:3] != b.split()[:3]


def test_prompt_without_a_tokenizer_uses_the_ratio():
    built = prompt.build(1000, seed=3, chars_per_token=4.0, count=lambda _: None)
    assert not built.exact and 3900 <= len(built.text) <= 4100 and built.tokens == round(len(built.text) / 4.0)


def test_the_listening_process_is_found_by_its_port_and_sampled():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert memory.listening_pid(port) == os.getpid()
        with memory.RssSampler(os.getpid(), interval=0.01) as sampler:
            ballast = bytearray(64 * 1024 * 1024)  # touched: RSS grows by 64 MiB while sampled
            for i in range(0, len(ballast), 4096):
                ballast[i] = 1
        assert sampler.peak is not None and sampler.peak >= 64 * 1024 * 1024 and sampler.samples >= 2
        del ballast
    assert memory.listening_pid(port) is None
    assert memory.is_local("127.0.0.1") and memory.is_local("::1") and memory.is_local("localhost")
    assert not memory.is_local("10.0.0.5") and not memory.is_local("gpu-box")


def doc(label, rates):
    results = []
    for context, (prefill, decode) in rates.items():
        summary = {"trials": 2, "ttft_s": context / prefill, "total_s": 1.0, "prompt_tokens": context,
                   "decode_tokens": 64, "prefill_tps": prefill, "decode_tps": decode, "server_prefill_tps": None,
                   "server_decode_tps": None}
        results.append(ContextResult(context, []).to_json() | {"cold": summary, "warm": summary,
                                                                "peak_rss_bytes": 100 * 1024 * 1024})
    return {"schema": SCHEMA, "label": label, "results": results}


def test_csv_has_one_row_per_label_and_context():
    text = report.csv_text([doc("a", {512: (1000.0, 30.0), 4096: (900.0, 25.0)}), doc("b", {512: (2000.0, 60.0)})])
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(rows[0]) == report.CSV_COLUMNS
    assert [(r["label"], r["context"], r["prefill_tps"]) for r in rows] == [
        ("a", "512", "1000.0"), ("a", "4096", "900.0"), ("b", "512", "2000.0")]
    assert rows[0]["peak_rss_mib"] == "100.0" and rows[0]["cold_ttft_ms"] == "512.0"


def test_compare_table_shows_the_change_against_the_first(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(doc("stack-a", {512: (1000.0, 30.0)})))
    b.write_text(json.dumps(doc("stack-c", {512: (1100.0, 15.0)})))
    rendered = io.StringIO()
    from rich.console import Console
    Console(file=rendered, width=200).print(report.compare_table([report.load(a), report.load(b)]))
    line = next(row for row in rendered.getvalue().splitlines() if "512" in row)
    assert [cell.strip() for cell in line.strip("│ ").split("│")] == ["512", "1,000", "1,100", "+10%", "30", "15",
                                                                      "-50%"]


def test_loading_something_else_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"label": "x"}')
    with pytest.raises(BadInput, match=r"bad.json: not a labwright bench result"):
        report.load(bad)
    bad.write_text("{oops")
    with pytest.raises(BadInput, match=r"bad.json is not valid JSON"):
        report.load(bad)
    with pytest.raises(BadInput, match="missing.json: no such file or directory"):
        report.load(tmp_path / "missing.json")


def test_plot_writes_a_png_with_ink(tmp_path):
    import matplotlib.image

    out = report.plot([doc("a", {512: (1000.0, 30.0), 4096: (900.0, 25.0)}),
                       doc("b", {512: (2000.0, 60.0), 4096: (1500.0, 40.0)})], tmp_path / "p.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(out)
    assert pixels.shape[1] > 800
    colored = (abs(pixels[..., 0] - pixels[..., 2]) > 0.2).sum()  # the two lines, not only black axes on white
    assert colored > 500


def test_plot_without_matplotlib_is_one_line(tmp_path):
    args = ["bench", "compare", str(tmp_path / "x.json"), "--plot", str(tmp_path / "p.png")]
    code = f"import sys; sys.modules['matplotlib'] = None\nfrom labwright.cli import main\nsys.exit(main({args!r}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr == ("labwright: error: --plot needs matplotlib, which is not installed: "
                           "pip install 'labwright[plot]'\n")


def standin_nvidia_smi(directory, used):
    """A stand-in for NVIDIA's nvidia-smi (no GPU here): answers the memory query from a file the test rewrites."""
    (directory / "used").write_text(used)
    script = directory / "nvidia-smi"
    script.write_text(f'#!/bin/sh\ncase "$*" in *--query-gpu=memory.used*--format=csv,noheader,nounits*) '
                      f'cat {directory / "used"};; *) exit 9;; esac\n')
    script.chmod(0o755)
    return script


def test_gpu_memory_peak_from_a_standin_nvidia_smi(tmp_path):

    smi = standin_nvidia_smi(tmp_path, "1000\n2000\n")  # two GPUs, MiB
    assert memory.gpu_used_bytes(str(smi)) == 3000 * 2**20
    with memory.GpuSampler(str(smi), interval=0.02) as sampler:
        (tmp_path / "used").write_text("1500\n4000\n")
        wait_for("the sampler to read the 1500+4000 MiB peak", lambda: sampler.peak == 5500 * 2**20, timeout=30,
                 every=0.01)
        (tmp_path / "used").write_text("100\n100\n")
    assert sampler.peak == 5500 * 2**20
    (tmp_path / "used").write_text("not a number\n")
    assert memory.gpu_used_bytes(str(smi)) is None
    assert memory.gpu_used_bytes(str(tmp_path / "missing")) is None
