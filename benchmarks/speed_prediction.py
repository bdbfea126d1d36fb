"""Benchmark: how well `labwright kv fit` predicts decode speed, and how fast it answers (target: under 100 ms).

1. Every speed the field notes measured (tests/support/speed_measurements.py: notes 000-004), predicted by the same
   code `kv fit` runs (labwright.tuning.fit_model), its error printed per row, then the median and worst |error| of
   the rows the prediction is held to (``decode`` and ``prefill``; ``at_least``/``at_most`` rows are bounds).
2. For real on this machine: a random-weight f16 GGUF large enough to be bandwidth-bound (~1.5 GiB; made once with
   labwright.llamacpp.tiny_model's writer, cached), served by the pinned CPU llama-server (labwright.llamacpp.build's
   cached build), decode measured from its own ``timings.predicted_per_second``, against `kv fit --cpu` with the RAM
   bandwidth `kv bandwidth` measured just before. The machine is shared: the bandwidth and the decode are measured
   back to back, three times each, medians.
3. `kv fit`'s own time: the whole computation in-process (median of 50), and `labwright kv fit --json` as a command
   (median of 5 wall times; Python start-up included, which benchmarks/cli_startup.py tracks on its own).

    .venv/bin/python benchmarks/speed_prediction.py [--no-local] [--learn] [--json]

``--learn`` prints the efficiencies the rows imply (the medians data/speed.toml records, with their derivation).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import _support  # noqa: F401  (tests/support importable as `support`)

from labwright.tuning.fit_model import FitRequest, fit_model
from support.speed_measurements import OUTLIERS, ROWS, error, learn

REPO = Path(__file__).resolve().parents[1]
TARGET_MS = 100.0
#: The local models, both large enough to be bandwidth-bound: f16 (2 bytes a weight), 16 layers of 2048 x 5632,
#: ~1.5 GiB; and Q8_0 (8.5 bits), 28 such layers, ~1.4 GiB. The f16 run gives the efficiency of a measured RAM read
#: (data/speed.toml [efficiency.llamacpp.cpu_measured]); the Q8_0 run, another weight type and kernel, checks it.
LOCAL_MODELS = {
    "f16": {"embedding": 2048, "layers": 16, "heads": 16, "kv_heads": 16, "feed_forward": 5632},
    "q8_0": {"embedding": 2048, "layers": 28, "heads": 16, "kv_heads": 16, "feed_forward": 5632, "weights": "q8_0"},
}


def field_notes() -> tuple[list[dict], dict[str, float]]:
    lines = []
    held = []
    for row in ROWS:
        predicted = row.predicted()
        err = error(predicted, row.measured) if predicted else math.nan
        ok = True
        if row.kind == "at_least":
            ok = predicted is not None and predicted >= row.measured / 1.45
        elif row.kind == "at_most":
            ok = predicted is not None and row.measured <= predicted * 1.05
        else:
            held.append(abs(math.log(predicted / row.measured)) if predicted else math.inf)
        lines.append({"row": row.id, "kind": row.kind, "measured": row.measured,
                      "predicted": None if predicted is None else round(predicted, 2),
                      "error_pct": None if math.isnan(err) else round(100 * err, 1), "bound_holds": ok})
    judged = [line for line in lines if line["kind"] in ("decode", "prefill")]
    factor = [math.exp(v) - 1 for v in held]
    worst = max(judged, key=lambda line: abs(math.log(1 + line["error_pct"] / 100)))
    usual = [line for line in judged if line["row"] not in OUTLIERS]
    worst_usual = max(usual, key=lambda line: abs(math.log(1 + line["error_pct"] / 100)))
    return lines, {"rows": len(held), "median_error_pct": round(100 * statistics.median(factor), 1),
                   "worst_error_pct": round(100 * max(factor), 1), "worst_row": worst["row"],
                   "outliers": len(judged) - len(usual), "worst_without_outliers_pct": worst_usual["error_pct"],
                   "worst_without_outliers_row": worst_usual["row"]}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _post(url: str, body: dict, timeout: float = 600) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def local_run(kind: str = "f16", tokens: int = 32, repeats: int = 5) -> dict:
    """One llama.cpp thread and one RAM reader: on a shared 2-core machine (load average 12 while measured) a
    2-thread llama.cpp decode spends its time in its spin barriers (0.3-0.5 tok/s, against 3-7 with one thread), so
    the run is one core against one core's bandwidth. Bandwidth and decode are measured in turns, ``repeats`` times
    each. `kv bandwidth` counts the reader's CPU time (other processes take turns on the cores, not on the memory
    bus); the decode is compared both per CPU second of llama-server (the same footing) and as llama.cpp's own
    wall-clock timings (best and median), which the machine's load lowers."""
    from labwright.llamacpp.build import build_llama_server
    from labwright.llamacpp.tiny_model import TinyModel, write_tiny_gguf
    from labwright.paths import cache_path
    from labwright.tuning.bandwidth import measure_ram

    server = build_llama_server()
    folder = cache_path("bench", "speed-prediction", kind)
    model = folder / f"random-{kind}.gguf"
    if not model.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_tiny_gguf(folder / f"random-{kind}.gguf.new", TinyModel(**LOCAL_MODELS[kind])).rename(model)
    port = _free_port()
    proc = subprocess.Popen([str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-ngl", "0",
                             "-t", "1", "-c", "1024", "-np", "1", "--no-warmup"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("llama-server did not become healthy")
            time.sleep(0.5)
        _post(f"http://127.0.0.1:{port}/completion", {"prompt": "warm", "n_predict": 4})  # pages the weights in
        bandwidths, decodes, on_cpu = [], [], []
        for _ in range(repeats):
            bandwidths.append(measure_ram(512, 1, 5).gbs)
            before = _cpu_seconds(proc.pid)
            done = _post(f"http://127.0.0.1:{port}/completion",
                         {"prompt": "hello", "n_predict": tokens, "temperature": 0, "cache_prompt": False})
            spent = _cpu_seconds(proc.pid) - before
            decodes.append(float(done["timings"]["predicted_per_second"]))
            # the prompt's one pass over the weights counted as one more token's read
            on_cpu.append((int(done["timings"]["predicted_n"]) + 1) / spent)
    finally:
        proc.terminate()
        proc.wait(30)

    ram = statistics.median(bandwidths)
    result = fit_model(FitRequest(vram=None, model_dir=folder, cpu=True, ram_bandwidth=ram, engine="llamacpp",
                                  ram_measured=True))
    assert result.speed is not None and result.speed.parts
    predicted = result.speed.decode_tok_s or 0.0
    read = sum(p.bytes for p in result.speed.parts)
    pairs = {"on_cpu": statistics.median(on_cpu), "wall_best": max(decodes), "wall_median": statistics.median(decodes)}
    return {"kind": kind, "model_bytes": model.stat().st_size, "read_per_token": round(read), "threads": 1,
            "ram_read_gbs": [round(b, 2) for b in bandwidths],
            "decode_tok_s": [round(d, 2) for d in decodes], "decode_on_cpu_tok_s": [round(d, 2) for d in on_cpu],
            "implied_efficiency": round(statistics.median(on_cpu) * read / (ram * 1e9), 3),
            "predicted": round(predicted, 2),
            **{name: {"measured": round(value, 2), "error_pct": round(100 * error(predicted, value), 1)}
               for name, value in pairs.items()}}


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (/proc/PID/stat fields 14 and 15, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fit_timing(runs: int = 50) -> dict:
    request = FitRequest(vram=None, weights=int(17.4e9), gpu="RTX 4090", params_b=27, engine="llamacpp",
                         config=REPO / "tests" / "unit" / "tuning" / "configs" / "qwen3-30b-a3b.json",
                         context=32768, prompt_tokens=16384)
    if not request.config or not Path(request.config).exists():
        request = FitRequest(vram=None, weights=int(17.4e9), gpu="RTX 4090", params_b=27, engine="llamacpp")
    fit_model(request)
    inside = []
    for _ in range(runs):
        began = time.perf_counter()
        fit_model(request)
        inside.append((time.perf_counter() - began) * 1000)
    # The command: its wall and CPU time beside `labwright kv --help`'s (Python and typer start-up, the same in both),
    # interleaved so that the shared machine's load hits both alike; the difference is kv fit's own work.
    fit_cmd = [sys.executable, "-m", "labwright", "kv", "fit", "--weights-gb", "16.2", "--gpu", "RTX 4090",
               "--params-b", "27", "--json"]
    help_cmd = [sys.executable, "-m", "labwright", "kv", "--help"]
    walls: dict[str, list[float]] = {"fit": [], "help": []}
    cpus: dict[str, list[float]] = {"fit": [], "help": []}
    for _ in range(7):
        for name, cmd in (("help", help_cmd), ("fit", fit_cmd)):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            began = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            walls[name].append((time.perf_counter() - began) * 1000)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus[name].append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
    return {"in_process_ms": round(statistics.median(inside), 2),
            "command_wall_ms": round(statistics.median(walls["fit"]), 1),
            "command_cpu_ms": round(statistics.median(cpus["fit"]), 1),
            "kv_help_cpu_ms": round(statistics.median(cpus["help"]), 1),
            "beyond_start_up_cpu_ms": round(statistics.median(cpus["fit"]) - statistics.median(cpus["help"]), 1),
            "target_ms": TARGET_MS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-local", action="store_true", help="skip the real llama-server run")
    parser.add_argument("--learn", action="store_true", help="print the efficiencies the rows imply")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.learn:
        print(json.dumps(learn(), indent=2))
        return 0
    lines, summary = field_notes()
    report = {"field_notes": summary, "rows": lines, "bounds_hold": all(line["bound_holds"] for line in lines)}
    if not args.no_local:
        report["local_cpu"] = [local_run(kind) for kind in LOCAL_MODELS]
    report["kv_fit_time"] = fit_timing()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for line in lines:
        pred = "-" if line["predicted"] is None else f"{line['predicted']:.2f}"
        err = "" if line["error_pct"] is None else f"{line['error_pct']:+.1f}%"
        flag = "" if line["bound_holds"] else "  BOUND BROKEN"
        print(f"{line['row']:58s} {line['kind']:8s} {line['measured']:9.2f} {pred:>9s} {err:>8s}{flag}")
    print(f"field notes: {summary['rows']} rows, median |error| {summary['median_error_pct']}%, worst "
          f"{summary['worst_error_pct']}% ({summary['worst_row']}); without the {summary['outliers']} outliers "
          f"(OUTLIERS, each with its reason): worst {summary['worst_without_outliers_pct']:+}% "
          f"({summary['worst_without_outliers_row']}); bounds hold: {report['bounds_hold']}")
    for local in report.get("local_cpu", []):
        print(f"local CPU llama-server ({local['model_bytes'] / 2**30:.2f} GiB {local['kind']}, {local['threads']} "
              f"thread): RAM read {local['ram_read_gbs']} GB/s, decode {local['decode_tok_s']} tok/s; implied "
              f"efficiency (per CPU second, of the measured read) {local['implied_efficiency']}")
        share = statistics.median(local["decode_tok_s"]) / statistics.median(local["decode_on_cpu_tok_s"])
        print(f"  decode per CPU second of llama-server {local['decode_on_cpu_tok_s']} tok/s (it had the core "
              f"{100 * share:.0f}% of the time: the machine's other processes)")
        for which in ("on_cpu", "wall_best", "wall_median"):
            pair = local[which]
            print(f"  predicted {local['predicted']} vs {which} {pair['measured']} tok/s ({pair['error_pct']:+.1f}%)")
    timing = report["kv_fit_time"]
    print(f"kv fit: {timing['in_process_ms']} ms in-process; as a command {timing['command_cpu_ms']} ms CPU "
          f"({timing['command_wall_ms']} ms wall), {timing['beyond_start_up_cpu_ms']} ms CPU beyond `kv --help`'s "
          f"start-up (target {TARGET_MS:g} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
