"""`labwright kv`: KV-cache and context planning from a model's config.json, and the fit check."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape

from labwright.tuning import kv, kv_modes
from labwright.tuning.fit import FitResult
from labwright.tuning.fit_model import FitRequest, fit_model
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
    vram_gb: str = typer.Option(..., "--vram-gb", help="GPU memory; a bare number is GiB (an '8 GB' card: 8)."),
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
    as_json: bool = JsonOption,
) -> None:
    """Weights + KV + overhead against VRAM: fits, MoE expert offload, split (PCIe-bound), CPU, or does not fit.

    Example: labwright kv fit --model-dir ~/models/Qwen3.5-9B-exl3 --vram-gb 8 --context 131072 --cache-mode 8,4
    """
    kv.check_page(page)

    def size(text: str | None, option: str, positive: bool = True) -> int | None:
        return parse_size(text, option, bare_unit="GiB", positive=positive) if text is not None else None

    # Weights, VRAM and RAM of 0 answer no question; a KV or overhead of 0 can be what was measured.
    request = FitRequest(
        vram=parse_size(vram_gb, "--vram-gb", bare_unit="GiB", positive=True),
        weights=size(weights_gb, "--weights-gb"), model_dir=model_dir, config=config, context=context,
        kv_size=size(kv_gb, "--kv-gb", positive=False),
        spec=kv_modes.resolve(cache_mode, cache_type, engine, count_scales, swa_full),
        overhead=size(overhead_gb, "--overhead-gb", positive=False), ram=size(ram_gb, "--ram-gb"), moe=moe,
        weight_format=weight_format, page=page, count_scales=count_scales, swa_full=swa_full)
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
