"""`labwright kv`: KV-cache and context planning from a model's config.json, and the fit check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from labwright.cli import vocab
from labwright.tuning import kv, kv_modes
from labwright.tuning.fit import FitResult
from labwright.tuning.fit_model import FitRequest, fit_model
from labwright.tuning.speed import Speed
from labwright.tuning.units import MIB, gib, group, parse_size
from labwright.ui import stdout, table

NAME = "kv"
HELP = "KV-cache and context planning from a model's config.json or GGUF file."

app = typer.Typer(no_args_is_help=True, help=HELP)

CacheModeOption = typer.Option(None, "--cache-mode", help="tabbyAPI cache_mode: FP16, Q4, Q6, Q8 or K,V bits (8,4).")
CacheTypeOption = typer.Option(
    None, "--cache-type", help="llama.cpp/Ollama/vLLM cache type: f16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, fp8 ... "
    "or K,V (q8_0,q4_0).")
EngineOption = typer.Option(None, "--engine", help="tabbyapi, llamacpp, ollama or vllm (default: from the cache mode).")
PageOption = typer.Option(kv.DEFAULT_PAGE, "--page", help="Cache allocation unit in tokens (tabbyAPI pages: 256).")
ScalesOption = typer.Option(False, "--count-scales",
                            help="Count exllamav3's fp16 scale per 32 K/V elements (field note 001's table does not).")
SwaFullOption = typer.Option(False, "--swa-full", help="Sliding-window layers keep the whole context (llama.cpp's "
                             "--swa-full).")
JsonOption = typer.Option(False, "--json", help="Print JSON instead of a table.")


def speed_option(option: str) -> Any:
    """A typer callback for a bandwidth (GB/s, above 0, at most 10 TB/s) or a parameter count (billions): the
    refusal one line naming ``option`` (labwright.cli.vocab's convention)."""
    from labwright.tuning import speed

    check = speed.check_params if option.endswith("params-b") else speed.check_bandwidth

    def callback(value: float | None) -> float | None:
        return None if value is None else check(value, option)

    return callback


def threads_option(value: int | None) -> int | None:
    """``--cpu-threads``: 1 to 1,024, refused in one line otherwise."""
    from labwright.tuning import speed

    return None if value is None else speed.check_threads(value)


def _specs(cache_mode: str | None, cache_type: str | None, engine: str | None, count_scales: bool,
           swa_full: bool) -> list[kv_modes.CacheSpec]:
    spec = kv_modes.resolve(cache_mode, cache_type, engine, count_scales, swa_full)
    return [spec] if spec else kv_modes.common(engine, count_scales, swa_full)


@app.command()
def plan(
    config: Path = typer.Option(..., "--config", "-c", help="The model's config.json, the directory holding it, or a "
                                ".gguf file (its header only is read)."),
    cache_mode: str | None = CacheModeOption,
    cache_type: str | None = CacheTypeOption,
    engine: str | None = EngineOption,
    context: int | None = typer.Option(None, "--context", help="KV size at this many tokens (whole pages)."),
    budget: str | None = typer.Option(None, "--budget", help="Tokens that fit in this much memory: 2.4GiB, 2.4GB "
                                      "(binary, = GiB), 2400MiB, or bytes."),
    page: int = PageOption,
    count_scales: bool = ScalesOption,
    swa_full: bool = SwaFullOption,
    as_json: bool = JsonOption,
) -> None:
    """Bytes per token, tokens that fit in a budget, KV size at a context; a table of common modes by default.

    Example: labwright kv plan --config config.json --cache-mode 8,4 --budget 2.4GiB --context 131072
    """
    layout = kv.read_layout(config)
    budget_bytes = parse_size(budget, "--budget", positive=True) if budget is not None else None
    specs = _specs(cache_mode, cache_type, engine, count_scales, swa_full)
    plans = [kv.plan(layout, spec, context=context, budget=budget_bytes, page=page) for spec in specs]
    if as_json:
        docs = [p.to_json() for p in plans]
        typer.echo(json.dumps(docs[0] if len(specs) == 1 and (cache_mode or cache_type) else docs, indent=2))
        return
    _print_plans(plans, budget)


def _print_plans(plans: list[kv.KvPlan], budget: str | None) -> None:
    layout = plans[0].layout
    columns = ["engine", "cache mode", "convention", "bytes/token"]
    if budget is not None:
        columns.append(f"tokens in {budget} ({plans[0].page}-token pages)")
    if plans[0].context is not None:
        columns.append(f"KV at {group(plans[0].cache_tokens or 0)} tokens")
    rows = []
    for p in plans:
        row = [p.spec.engine.label, p.spec.name, p.spec.convention, f"{group(p.bytes_per_token)} B"]
        if budget is not None:
            row.append("unbounded" if p.tokens is None else f"{group(p.tokens)} ({group(p.tokens // p.page)} pages)")
        if p.kv_bytes is not None:
            row.append(gib(p.kv_bytes))
        rows.append(row)
    stdout.print(table(escape(f"{layout.source}: {layout.describe()}"), columns, rows))
    for kind, count in (("sliding", layout.sliding_layers), ("chunked", layout.chunked_layers)):
        if count:
            for key, policy in {p.spec.engine.label: p.policy(kind) for p in plans}.items():
                stdout.print(escape(f"  {kind} layers on {key}: {policy}"))
    for note in dict.fromkeys(n for p in plans for n in p.notes):
        stdout.print(f"  [dim]note: {escape(note)}[/]")


@app.command()
def fit(
    weights_gb: str | None = typer.Option(None, "--weights-gb", help="Weights size; a bare number is GiB."),
    vram_gb: str | None = typer.Option(None, "--vram-gb", help="GPU memory; a bare number is GiB (an '8 GB' card: "
                                       "8). Default: --gpu's; with --unified, --ram-gb; with --cpu, none."),
    ram_gb: str | None = typer.Option(None, "--ram-gb", help="System RAM for offloaded weights; bare number GiB."),
    kv_gb: str | None = typer.Option(None, "--kv-gb", help="KV cache size, if you know it; bare number GiB."),
    model_dir: Path | None = typer.Option(None, "--model-dir", help="Model folder: sums *.gguf / *.safetensors, reads "
                                          "config.json, detects the format."),
    config: Path | None = typer.Option(None, "--config", "-c", help="config.json for the KV (default: the model "
                                       "dir's)."),
    context: int | None = typer.Option(None, "--context", help="Context to size the KV for (needs a config.json)."),
    cache_mode: str | None = CacheModeOption,
    cache_type: str | None = CacheTypeOption,
    engine: str | None = EngineOption,
    overhead_gb: str | None = typer.Option(None, "--overhead-gb", help="Measured overhead (default: data/fit.toml)."),
    moe: bool = typer.Option(False, "--moe", help="Mixture of experts (detected from config.json when given)."),
    weight_format: str | None = typer.Option(None, "--format", help="gguf, exl3, exl2, awq, gptq, fp8, "
                                             "compressed-tensors, safetensors (default: detected from --model-dir)."),
    page: int = PageOption,
    count_scales: bool = ScalesOption,
    swa_full: bool = SwaFullOption,
    bandwidth_gbs: float | None = typer.Option(None, "--bandwidth-gbs", callback=speed_option("--bandwidth-gbs"),
                                               help="GB/s of the memory holding the weights (VRAM; shared RAM with "
                                               "--unified; RAM with --cpu). Default: --gpu's."),
    unified: bool = typer.Option(False, "--unified", help="An APU or unified memory: VRAM is system RAM, nothing "
                                 "crosses PCIe."),
    cpu: bool = typer.Option(False, "--cpu", help="All weights in system RAM, computed on the CPU."),
    ram_bandwidth_gbs: float | None = typer.Option(None, "--ram-bandwidth-gbs",
                                                   callback=speed_option("--ram-bandwidth-gbs"),
                                                   help="GB/s of system RAM (the CPU side of a split or MoE offload; "
                                                   "measure it: labwright kv bandwidth)."),
    ram_measured: bool = typer.Option(False, "--ram-measured", help="--ram-bandwidth-gbs is `labwright kv "
                                      "bandwidth`'s measured read, not the RAM's specification (its own "
                                      "efficiency)."),
    params_b: float | None = typer.Option(None, "--params-b", callback=speed_option("--params-b"),
                                          help="Parameters in billions, when no GGUF says (e.g. 30.5)."),
    active_params_b: float | None = typer.Option(None, "--active-params-b", callback=speed_option("--active-params-b"),
                                                 help="Parameters read per token in billions (a MoE's active: 3.3)."),
    gpu: str | None = typer.Option(None, "--gpu", callback=vocab.line_option("--gpu"), help="The GPU by name (RTX "
                                   "4090, Vega 8): bandwidth and memory from labwright's table."),
    cpu_threads: int | None = typer.Option(None, "--cpu-threads", callback=threads_option,
                                           help="Threads decoding the CPU's layers (llama.cpp's --threads): a few "
                                           "cores can limit a CPU decode before the RAM does. Default: the read "
                                           "alone limits."),
    as_json: bool = JsonOption,
) -> None:
    """Weights + KV + overhead against VRAM: fits, MoE expert offload, split (PCIe-bound), CPU, or does not fit;
    and the decode speed of one request, from the bytes read per token and the bandwidth of where they live.

    Example: labwright kv fit --model-dir ~/models/Qwen3.5-9B-exl3 --vram-gb 8 --context 131072 --cache-mode 8,4
    --gpu "RTX 4070 Laptop GPU"
    """
    kv.check_page(page)

    def size(text: str | None, option: str, positive: bool = True) -> int | None:
        return parse_size(text, option, bare_unit="GiB", positive=positive) if text is not None else None

    # Weights, VRAM and RAM of 0 answer no question; a KV or overhead of 0 can be what was measured.
    request = FitRequest(
        vram=size(vram_gb, "--vram-gb"),
        weights=size(weights_gb, "--weights-gb"), model_dir=model_dir, config=config, context=context,
        kv_size=size(kv_gb, "--kv-gb", positive=False),
        spec=kv_modes.resolve(cache_mode, cache_type, engine, count_scales, swa_full),
        overhead=size(overhead_gb, "--overhead-gb", positive=False), ram=size(ram_gb, "--ram-gb"), moe=moe,
        weight_format=weight_format, page=page, count_scales=count_scales, swa_full=swa_full,
        bandwidth=bandwidth_gbs, ram_bandwidth=ram_bandwidth_gbs, unified=unified, cpu=cpu, params_b=params_b,
        active_params_b=active_params_b, gpu=gpu, engine=engine, ram_measured=ram_measured, cpu_threads=cpu_threads)
    result = fit_model(request)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    _print_fit(result)


def _print_fit(result: FitResult) -> None:
    reason = f" ({result.format_reason})" if result.format_reason else ""
    rows = [["weights", gib(result.weights), escape(f"{result.format.label}{reason}")],
            ["KV cache", gib(result.kv), escape(result.kv_source)],
            ["overhead", gib(result.overhead), escape(result.overhead_source.split(":")[0])],
            ["total", gib(result.need), ""],
            ["VRAM", gib(result.vram), f"headroom {group(result.headroom / MIB)} MiB"]]
    if result.ram is not None:
        rows.append(["RAM", gib(result.ram), ""])
    if result.moe:
        rows.append(["routed experts", gib(result.expert_bytes), "MoE"])
    stdout.print(table("where does it live", ["", "GiB", "from"], rows))
    colour = {"fits": "green", "moe_offload": "green", "split": "yellow", "cpu": "yellow"}.get(result.verdict, "red")
    stdout.print(f"[{colour}]verdict: {result.text}[/]")
    for line in result.how:
        stdout.print(f"  {escape(line)}")
    if result.max_context_checked:
        longest = ("any (the KV stops growing)" if result.max_context is None
                   else "none: weights and overhead alone fill it" if result.max_context == 0
                   else f"{group(result.max_context)} tokens")
        stdout.print(escape(f"  longest context with every weight in VRAM at {result.cache_mode}: {longest}"))
    for line in (*result.warnings, *result.notes):
        stdout.print(f"  [yellow]![/] {escape(line)}")
    if result.speed is not None:
        _print_speed(result.speed)


def _print_speed(speed: Speed) -> None:
    if speed.parts:
        rows = [[escape(p.what), gib(p.bytes), escape(p.memory), f"{p.gbs:g}", f"{p.efficiency:.2f}",
                 f"{p.seconds * 1000:.2f}"] for p in speed.parts]
        columns = ["", "GiB", "memory", "GB/s", "efficiency", "ms"]
        if any(p.arithmetic_s is not None for p in speed.parts):  # --cpu-threads: which bound each part meets
            columns.append("bound")
            for row, part in zip(rows, speed.parts, strict=True):
                row.append(part.bound)
        stdout.print(table(escape(f"read per token ({speed.engine}, {speed.placement})"), columns, rows))
    if speed.decode_tok_s is not None:
        stdout.print(f"[bold]decode: {speed.decode_tok_s:.1f} tok/s[/] for one request "
                     f"({escape(speed.active_source)})")
    if speed.ttft_s is not None and speed.prefill_tok_s is not None:
        stdout.print(f"time to first token: {speed.ttft_s:.2f} s for {group(speed.prompt_tokens or 0)} prompt tokens "
                     f"(prefill {group(speed.prefill_tok_s)} tok/s, compute-bound)")
    for line in speed.notes:
        stdout.print(f"  [yellow]![/] {escape(line)}")
    for source in speed.sources:  # the first clause: which note and machine (--json carries the whole derivation)
        stdout.print(f"  [dim]efficiency from {escape(source.split(':')[0])}[/]")


@app.command()
def bandwidth(
    size_mib: int = typer.Option(512, "--size-mib", help="RAM buffer to scan (MiB): larger than the CPU's caches."),
    processes: int | None = typer.Option(None, "--processes", help="Readers (default: one per usable CPU, as an "
                                         "engine's threads)."),
    rounds: int = typer.Option(5, "--rounds", help="Scans; the fastest counts."),
    ram: bool = typer.Option(True, "--ram/--no-ram", help="Measure system RAM (a CPU, or an APU's shared memory)."),
    as_json: bool = JsonOption,
) -> None:
    """This machine's memory bandwidth for `kv fit`: each NVIDIA GPU's from nvidia-smi (max memory clock x 2 x bus
    width), system RAM's measured (a read by every CPU, about a second). Run it on the host or in the guest.

    Example: labwright kv bandwidth --json
    """
    from labwright.tuning import bandwidth as bw

    bw.check_measure(size_mib, processes, rounds)
    gpus, rejected, why = bw.read_gpus()
    measured = bw.measure_ram(size_mib, processes, rounds) if ram else None
    flags = []
    if gpus and gpus[0].gbs:
        flags.append(f"--bandwidth-gbs {gpus[0].gbs:g}")
    if measured is not None:
        flags.append(f"--ram-bandwidth-gbs {measured.gbs:.1f} --ram-measured")
    if as_json:
        typer.echo(json.dumps({"gpus": [g.to_json() for g in gpus], "smi_refused": list(rejected),
                               "gpu_note": why, "ram": measured.to_json() if measured else None,
                               "kv_fit_options": " ".join(flags)}, indent=2))
        return
    for gpu in gpus:
        value = "unknown" if gpu.gbs is None else f"{gpu.gbs:g} GB/s"
        stdout.print(escape(f"GPU {gpu.index} {gpu.name}: {value} ({gpu.how})"))
    if why:
        stdout.print(escape(why))
    if measured is not None:
        stdout.print(escape(f"RAM: {measured.gbs:.1f} GB/s read ({measured.method})"))
    if flags:
        stdout.print(escape(f"for kv fit: {' '.join(flags)}"))
