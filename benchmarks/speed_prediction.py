"""Benchmark: how well `labwright kv fit` predicts decode speed, and how fast it answers (target: under 100 ms).

1. Every speed the field notes measured (tests/support/speed_measurements.py: notes 000-004), predicted by the same
   code `kv fit` runs (labwright.tuning.fit_model), its error printed per row, then the median and worst |error| of
   the rows the prediction is held to (``decode`` and ``prefill``; ``at_least``/``at_most`` rows are bounds).
2. For real on this machine, side by side (local_runs): random-weight GGUFs large enough to be bandwidth-bound (f16
   ~1.5 GiB, Q8_0 ~1.4 GiB; made once with labwright.llamacpp.tiny_model's writer, cached), each served by the pinned
   CPU llama-server on one thread (labwright.llamacpp.build's cached build); trials alternate `kv bandwidth`'s
   one-reader read with one decode of each model, the decode counted in CPU nanoseconds (a long request minus a short
   one: the prompt and the HTTP round trip cancel). `kv fit --cpu --ram-measured` predicts from the run's best read
   and the context the decode used; its error is against the median decode. The machine is shared and loaded: the
   read is paired with the decodes because the load moves it (the decode per CPU second barely moves).
   Recorded 2026-11-28 (docs/kv.md), five runs at load 6-25, one thread: one-core read 15.6-30.5 GB/s, decode f16
   12.3-15.0 and Q8_0 7.7-11.2 tokens per CPU second; efficiency against the best read f16 0.77-0.97, Q8_0
   0.45-0.74 (data/speed.toml keeps the first three runs' medians, 0.827 and 0.639); the two held-out runs (load
   16-21): f16 -14.9% and -9.6%, Q8_0 -13.3% and +1.3%.
3. `kv fit`'s own time: the whole computation in-process (median of 50), and `labwright kv fit --json` as a command
   (median of 5 wall times; Python start-up included, which benchmarks/cli_startup.py tracks on its own).

    .venv/bin/python benchmarks/speed_prediction.py [--no-local | --local-only | --threads] [--trials N] [--learn]
        [--json]

``--threads``: `kv fit --cpu-threads` for real (threads_runs): the read by every CPU, as `kv bandwidth` prints it,
and llama-server decoding each model with 1 and then 2 threads, predicted with and without the threads' limit.

``--learn`` prints the efficiencies the rows imply (the medians data/speed.toml records, with their derivation).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import _support  # noqa: F401  (tests/support importable as `support`)

from labwright.tuning.fit_model import FitRequest, fit_model
from support.local_server import free_port, wait_healthy
from support.speed_measurements import OUTLIERS, ROWS, error, learn

REPO = Path(__file__).resolve().parents[1]
TARGET_MS = 100.0
#: The local models, both large enough to be bandwidth-bound: f16 (2 bytes a weight), 16 layers of 2048 x 5632,
#: ~1.5 GiB; and Q8_0 (8.5 bits), 28 such layers, ~1.4 GiB: the two weight kinds of data/speed.toml
#: [efficiency.llamacpp.cpu_measured] (`float` and `quantized`: one core's Q8_0 kernel dequantizes, more arithmetic per
#: byte read).
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


def _post(url: str, body: dict, timeout: float = 600) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def _start_server(kind: str, threads: int = 1) -> tuple[subprocess.Popen, int, Path]:
    """The pinned CPU llama-server on the cached random-weight model of ``kind`` decoding with ``threads``, healthy,
    its weights paged in."""
    from labwright.llamacpp.build import build_llama_server
    from labwright.llamacpp.tiny_model import TinyModel, write_tiny_gguf
    from labwright.paths import cache_path

    server = build_llama_server()
    folder = cache_path("bench", "speed-prediction", kind)
    model = folder / f"random-{kind}.gguf"
    if not model.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_tiny_gguf(folder / f"random-{kind}.gguf.new", TinyModel(**LOCAL_MODELS[kind])).rename(model)
    port = free_port()
    proc = subprocess.Popen([str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-ngl", "0",
                             "-t", str(threads), "-c", "1024", "-np", "1", "--no-warmup"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    if not wait_healthy(port, proc, 300, poll=0.5):
        proc.terminate()
        raise SystemExit("llama-server did not become healthy")
    _post(f"http://127.0.0.1:{port}/completion", {"prompt": "warm", "n_predict": 4})  # pages the weights in
    return proc, port, folder


def _decode_trial(proc: subprocess.Popen, port: int, short: int, long: int) -> dict:
    spent, walls, timings = {}, {}, {}
    for n in (short, long):
        before, began = _cpu_ns(proc.pid), time.perf_counter()
        done = _post(f"http://127.0.0.1:{port}/completion",
                     {"prompt": "hello", "n_predict": n, "temperature": 0, "cache_prompt": False})
        spent[n], walls[n] = _cpu_ns(proc.pid) - before, time.perf_counter() - began
        timings[n] = done["timings"]
        if int(done["timings"]["predicted_n"]) != n:
            raise SystemExit(f"llama-server decoded {done['timings']['predicted_n']} tokens, asked {n}")
    return {"decode_on_cpu": (long - short) / ((spent[long] - spent[short]) / 1e9),
            "decode_wall": float(timings[long]["predicted_per_second"]), "on_core": spent[long] / 1e9 / walls[long],
            "context": int(timings[long]["prompt_n"]) + long}


def local_runs(kinds: tuple[str, ...] = tuple(LOCAL_MODELS), short: int = 4, long: int = 36,
               repeats: int = 5) -> list[dict]:
    """Side by side: one llama-server per model, then ``repeats`` trials, each `kv bandwidth`'s one-reader read
    followed by one decode of each model in turn, so that every decode has a read measured under the same load
    beside it, and the models meet the same load. One llama.cpp thread against one reader: on a shared 2-core
    machine a 2-thread decode spends its time in llama.cpp's spin barriers (0.3-0.5 tok/s against 3-7 with one
    thread). Both are counted in CPU time (the machine's other processes take turns on the cores; they contend for
    the memory bus too, which is why the two are paired): the read as `kv bandwidth` counts it, the decode as the
    nanoseconds llama-server ran on a CPU (/proc/PID/task/*/schedstat) across a ``long``-token request minus a
    ``short``-token one with the same prompt, so that the prompt, the HTTP round trip and the request's set-up
    cancel: what is left is ``long - short`` decoded tokens. Each trial's implied efficiency is that rate x the
    bytes `kv fit` says a token reads (weights from the GGUF's tensor table, the KV at the context: llama.cpp reads
    its cache in cells of 256) / the read beside it; `kv fit`'s prediction from each trial's read is held against
    that trial's decode."""
    from labwright.tuning.bandwidth import measure_ram
    from labwright.tuning.speed import gguf_active

    servers: dict[str, tuple[subprocess.Popen, int, Path]] = {}
    trials: dict[str, list[dict]] = {kind: [] for kind in kinds}
    try:
        for kind in kinds:
            servers[kind] = _start_server(kind)
        for _ in range(repeats):
            for kind in kinds:
                ram = measure_ram(512, 1, 10)
                proc, port, _ = servers[kind]
                trials[kind].append({"read_gbs": ram.gbs, "load": os.getloadavg()[0],
                                     **_decode_trial(proc, port, short, long)})
    finally:
        for proc, _, _ in servers.values():
            proc.terminate()
        for proc, _, _ in servers.values():
            proc.wait(30)

    # The read the run holds the decodes to: the best of all its rounds (STREAM's convention, the least disturbed
    # read). One core's read by CPU time falls with the machine's load (16-30 GB/s on this 2-core machine: another
    # process on the core beside it shares the core's line-fill buffers and the memory bus), while one core's decode
    # per CPU second barely moves: the decode, partly bound by the core's arithmetic, does not follow the read.
    best = max(t["read_gbs"] for runs in trials.values() for t in runs)
    results = []
    for kind in kinds:
        runs, folder = trials[kind], servers[kind][2]
        model = folder / f"random-{kind}.gguf"
        result = fit_model(FitRequest(vram=None, model_dir=folder, cpu=True, ram_bandwidth=best, engine="llamacpp",
                                      ram_measured=True, context=max(t["context"] for t in runs)))
        speed = result.speed
        assert speed is not None and speed.parts and speed.decode_tok_s
        predicted = speed.decode_tok_s
        per_token = sum(p.bytes for p in speed.parts)
        rates = [t["decode_on_cpu"] for t in runs]
        measured = statistics.median(rates)
        params = gguf_active(model).active_params or 0.0
        results.append({
            "kind": kind, "model_bytes": model.stat().st_size, "read_per_token": round(per_token),
            "parts": {p.what: round(p.bytes) for p in speed.parts}, "threads": 1,
            "efficiency_used": speed.parts[0].efficiency, "best_read_gbs": round(best, 2),
            "ram_read_gbs": [round(t["read_gbs"], 2) for t in runs],
            "decode_on_cpu_tok_s": [round(rate, 2) for rate in rates],
            "decode_wall_tok_s": [round(t["decode_wall"], 2) for t in runs],
            "on_core": [round(t["on_core"], 2) for t in runs], "load": [round(t["load"], 1) for t in runs],
            "implied_efficiency": round(measured * per_token / (best * 1e9), 3),
            "implied_beside": [round(t["decode_on_cpu"] * per_token / (t["read_gbs"] * 1e9), 3) for t in runs],
            "weights_per_cpu_s_g": round(measured * params / 1e9, 2),
            "predicted": round(predicted, 2), "measured": round(measured, 2),
            "error_pct": round(100 * error(predicted, measured), 1),
            "trial_errors_pct": [round(100 * error(predicted, rate), 1) for rate in rates]})
    return results


def threads_runs(kinds: tuple[str, ...] = tuple(LOCAL_MODELS), threads: tuple[int, ...] = (1, 2),
                 repeats: int = 3) -> list[dict]:
    """`kv fit --cpu-threads` for real, as a user runs it: `kv bandwidth`'s read by every CPU (its default, the
    figure it prints for --ram-bandwidth-gbs ... --ram-measured), and llama-server decoding with each thread count
    in turn; the decode counted in wall time (tokens / time generating, llama.cpp's own timings), each trial beside a
    read. Predicted with and without --cpu-threads from the run's best read; errors against the median decode."""
    from labwright.tuning.bandwidth import measure_ram

    results = []
    for kind in kinds:
        for count in threads:
            proc, port, folder = _start_server(kind, count)
            trials = []
            try:
                for _ in range(repeats):
                    read = measure_ram(512, None, 5).gbs
                    trials.append({"read_gbs": read, "load": os.getloadavg()[0],
                                   **_decode_trial(proc, port, 4, 36)})
            finally:
                proc.terminate()
                proc.wait(30)
            best = max(t["read_gbs"] for t in trials)
            measured = statistics.median(t["decode_wall"] for t in trials)
            predicted = {}
            for name, value in (("without", None), ("with", count)):
                speed = fit_model(FitRequest(vram=None, model_dir=folder, cpu=True, ram_bandwidth=best,
                                             engine="llamacpp", ram_measured=True, cpu_threads=value,
                                             context=max(t["context"] for t in trials))).speed
                assert speed is not None and speed.decode_tok_s
                predicted[name] = (speed.decode_tok_s, speed.parts[0].bound)
            results.append({"kind": kind, "threads": count, "best_read_gbs": round(best, 2),
                            "decode_wall_tok_s": [round(t["decode_wall"], 2) for t in trials],
                            "load": [round(t["load"], 1) for t in trials], "measured": round(measured, 2),
                            "predicted_without": round(predicted["without"][0], 2),
                            "predicted_with": round(predicted["with"][0], 2), "bound_with": predicted["with"][1],
                            "error_without_pct": round(100 * error(predicted["without"][0], measured), 1),
                            "error_with_pct": round(100 * error(predicted["with"][0], measured), 1)})
    return results


def _cpu_ns(pid: int) -> int:
    """Nanoseconds every thread of a process has run on a CPU (/proc/PID/task/TID/schedstat's first field)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that ended between the listing and the read
            continue
    return total


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


def _local_lines(runs: list[dict]) -> list[str]:
    lines = []
    for local in runs:
        lines += [
            f"local CPU llama-server ({local['model_bytes'] / 2**30:.2f} GiB {local['kind']}, {local['threads']} "
            f"thread, {local['read_per_token'] / 1e9:.3f} GB read per token), {len(local['load'])} trials side by "
            f"side (load {min(local['load'])}-{max(local['load'])}; llama-server on its core "
            f"{100 * min(local['on_core']):.0f}-{100 * max(local['on_core']):.0f}% of the time)",
            f"  RAM read {local['ram_read_gbs']} GB/s; decode per CPU second {local['decode_on_cpu_tok_s']} tok/s "
            f"(wall {local['decode_wall_tok_s']}); {local['weights_per_cpu_s_g']} G weights per CPU second",
            f"  best read {local['best_read_gbs']} GB/s: implied efficiency {local['implied_efficiency']} (kv fit "
            f"uses {local['efficiency_used']}; of the read beside each trial: {local['implied_beside']})",
            f"  predicted {local['predicted']} vs measured {local['measured']} tok/s per CPU second "
            f"({local['error_pct']:+.1f}%; each trial {local['trial_errors_pct']}%)"]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-local", action="store_true", help="skip the real llama-server run")
    parser.add_argument("--local-only", action="store_true", help="only the real llama-server run")
    parser.add_argument("--trials", type=int, default=5, help="side-by-side trials of the local run (default 5)")
    parser.add_argument("--learn", action="store_true", help="print the efficiencies the rows imply")
    parser.add_argument("--threads", action="store_true", help="only kv fit --cpu-threads against llama-server "
                        "decoding with 1 and 2 threads, the read by every CPU")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.learn:
        print(json.dumps(learn(), indent=2))
        return 0
    if args.threads:
        runs = threads_runs(repeats=args.trials)
        if args.json:
            print(json.dumps(runs, indent=2))
            return 0
        for run in runs:
            print(f"{run['kind']} on {run['threads']} thread(s): read {run['best_read_gbs']} GB/s by every CPU; "
                  f"decode {run['measured']} tok/s (trials {run['decode_wall_tok_s']}, load {run['load']}); "
                  f"predicted {run['predicted_without']} without --cpu-threads ({run['error_without_pct']:+.1f}%), "
                  f"{run['predicted_with']} with ({run['error_with_pct']:+.1f}%, {run['bound_with']}-bound)")
        return 0
    if args.local_only:
        local = local_runs(repeats=args.trials)
        print(json.dumps(local, indent=2) if args.json else "\n".join(_local_lines(local)))
        return 0
    lines, summary = field_notes()
    report = {"field_notes": summary, "rows": lines, "bounds_hold": all(line["bound_holds"] for line in lines)}
    if not args.no_local:
        report["local_cpu"] = local_runs(repeats=args.trials)
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
    print("\n".join(_local_lines(report.get("local_cpu", []))))
    timing = report["kv_fit_time"]
    print(f"kv fit: {timing['in_process_ms']} ms in-process; as a command {timing['command_cpu_ms']} ms CPU "
          f"({timing['command_wall_ms']} ms wall), {timing['beyond_start_up_cpu_ms']} ms CPU beyond `kv --help`'s "
          f"start-up (target {TARGET_MS:g} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
