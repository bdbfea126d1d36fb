"""The fit check for a model as the user describes it: a model directory or sizes, a config.json, a context.

Ties the pieces together so the CLI only parses: weights from --weights-gb or the model directory's files, the format
from the files or --format, the KV from --kv-gb or config.json + context + cache setting (the format's engine default
when none is given), MoE and its expert share from config.json, and the longest context that fits in VRAM.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from labwright.errors import BadInput
from labwright.tuning import kv, kv_modes
from labwright.tuning.fit import FitResult, check_fit, format_info, formats, max_context_in_vram
from labwright.tuning.model_dir import read_model_dir
from labwright.tuning.moe import expert_fraction, is_moe
from labwright.tuning.speed import (
    Active,
    Hardware,
    check_threads,
    config_active,
    find_gpu,
    gguf_active,
    given_active,
    predict,
)
from labwright.tuning.units import GIB, group


@dataclass(frozen=True)
class FitRequest:
    vram: int | None
    weights: int | None = None
    model_dir: Path | None = None
    config: Path | None = None
    context: int | None = None
    kv_size: int | None = None
    spec: kv_modes.CacheSpec | None = None
    overhead: int | None = None
    ram: int | None = None
    moe: bool = False
    weight_format: str | None = None
    page: int = kv.DEFAULT_PAGE
    count_scales: bool = False
    swa_full: bool = False
    # decode speed (labwright.tuning.speed): bandwidths in GB/s, parameters in billions
    bandwidth: float | None = None
    ram_bandwidth: float | None = None
    unified: bool = False
    cpu: bool = False
    params_b: float | None = None
    active_params_b: float | None = None
    gpu: str | None = None
    engine: str | None = None
    prompt_tokens: int | None = None  # for the time to first token; default: the context
    ram_measured: bool = False
    cpu_threads: int | None = None  # threads computing the CPU's layers (llama.cpp --threads); None: not modelled


def _kv(request: FitRequest, layout: kv.KvLayout | None, spec: kv_modes.CacheSpec | None) -> tuple[int, str]:
    if request.kv_size is not None:
        if request.context is not None:
            raise BadInput("--kv-gb and --context both given: pass the KV size or the context to compute it from")
        return request.kv_size, "given with --kv-gb"
    if request.context is None:
        return 0, "not counted: pass --context N (with a config.json) or --kv-gb"
    if layout is None or spec is None:
        raise BadInput("--context needs the model's config.json: pass --config or a --model-dir that holds one")
    kv.check_context(request.context)
    tokens = kv.round_up(request.context, request.page)
    return kv.kv_bytes(layout, spec, tokens), f"{group(tokens)} tokens at {spec.engine.label} {spec.name}"


def fit_model(request: FitRequest) -> FitResult:
    if request.weight_format is not None and request.weight_format not in formats():
        raise BadInput(f"--format {request.weight_format!r} is unknown: use one of {', '.join(formats())}")
    folder = read_model_dir(request.model_dir) if request.model_dir is not None else None
    if request.weights is not None:
        weights = request.weights
    elif folder is not None:
        weights = folder.weights_bytes
    else:
        raise BadInput("no weights size: pass --weights-gb N or --model-dir DIR")
    fmt = request.weight_format or (folder.format if folder else None)
    info = format_info(fmt)
    config_path = request.config or (folder.config if folder else None)
    if config_path is None and folder is not None and folder.format == "gguf":
        config_path = folder.path / folder.weight_files[0]   # a GGUF carries its own metadata (header only)
    hw, vram = _hardware(request)
    request = replace(request, vram=vram)
    layout = kv.read_layout(config_path) if config_path is not None else None
    spec = request.spec
    if spec is None and layout is not None:
        spec = kv_modes.named(info.cache_default, info.cache_engine, request.count_scales, request.swa_full)
    kv_size, kv_source = _kv(request, layout, spec)
    section = layout.section if layout else {}
    result = check_fit(weights, vram, kv_size, overhead=request.overhead, ram=request.ram,
                       moe=request.moe or is_moe(section), expert_fraction=expert_fraction(section), fmt=fmt)
    if layout is not None and spec is not None:
        ceiling = max_context_in_vram(layout, spec, weights, vram, result.overhead, request.page)
        result = replace(result, max_context=ceiling, max_context_checked=True)
    notes = list(folder.notes if folder else ())
    if layout is not None and (request.context is not None or result.max_context_checked):
        # the KV figure rests on these: say so beside the verdict
        notes += [f"KV assumes: {note}" for note in layout.notes]
        if spec is not None:
            from labwright.tuning.kv import rule_notes

            notes += [f"KV assumes: {note}" for note in rule_notes(layout, spec)]
        if layout.count("state"):
            notes.append(f"KV assumes: {layout.count('state')} recurrent layers' fixed state is not counted")
    engine = request.engine or (spec.engine.key if spec is not None and request.spec is not None else None) or (
        info.engines[0] if info.engines else "llamacpp")
    active = _active(request, config_path, section)
    speed = predict(weights=weights, active_fraction=active.fraction, kv=result.kv, verdict=result.verdict,
                    gpu_weights=result.gpu_weights, expert_bytes=result.expert_bytes,
                    experts_active=active.experts_share,
                    engine=engine, hw=hw, active_params=active.active_params,
                    prompt_tokens=request.prompt_tokens or request.context,
                    active_source=active.source, notes=_speed_notes(request, result, active, engine, info.engines))
    return replace(result, speed=speed, kv_source=kv_source, cache_mode=spec.name if spec else None,
                   format_reason=folder.format_reason if folder and not request.weight_format else "",
                   weight_files=folder.weight_files if folder else (), notes=tuple(notes))


def _hardware(request: FitRequest) -> tuple[Hardware, int]:
    """The memories' bandwidths and the VRAM the fit checks against, from the options and the GPU table; the
    contradictions refused in one line each."""
    if request.ram_measured and request.ram_bandwidth is None and not (request.cpu and request.bandwidth):
        raise BadInput("--ram-measured says --ram-bandwidth-gbs was measured, but none is given: pass "
                       "--ram-bandwidth-gbs with what `labwright kv bandwidth` printed")
    if request.cpu_threads is not None:
        check_threads(request.cpu_threads)
    if request.unified and request.cpu:
        raise BadInput("--unified and --cpu contradict each other: --unified is a GPU reading shared system RAM (an "
                       "APU), --cpu runs every layer on the CPU; give one of them")
    row = find_gpu(request.gpu) if request.gpu else {}
    unified = request.unified or row.get("kind") == "apu"
    if request.cpu and row:
        raise BadInput(f"--cpu with --gpu {request.gpu}: --cpu puts every weight in system RAM, no GPU is used; drop "
                       "--gpu, or drop --cpu to run on the GPU")
    table_gbs = float(row["bandwidth_gbs"]) if row else None
    if request.cpu:
        if request.bandwidth is not None and request.ram_bandwidth is not None and \
                request.bandwidth != request.ram_bandwidth:
            raise BadInput(f"--cpu with --bandwidth-gbs {request.bandwidth:g} and --ram-bandwidth-gbs "
                           f"{request.ram_bandwidth:g}: with --cpu both are the RAM's; give one of them")
        ram_gbs = request.ram_bandwidth if request.ram_bandwidth is not None else request.bandwidth
        return Hardware(None, ram_gbs, cpu=True, ram_measured=request.ram_measured,
                        cpu_threads=request.cpu_threads), request.vram or 0
    if unified:
        gbs = request.bandwidth if request.bandwidth is not None else (
            request.ram_bandwidth if request.ram_bandwidth is not None else table_gbs)
        ram_gbs = request.ram_bandwidth if request.ram_bandwidth is not None else gbs
        vram = request.vram or request.ram
        if vram is None:
            raise BadInput("--unified: give the memory the GPU may use with --vram-gb (or the RAM with --ram-gb): on "
                           "an APU the GPU's memory is system RAM")
        return Hardware(gbs, ram_gbs, unified=True, ram_measured=request.ram_measured,
                        cpu_threads=request.cpu_threads), vram
    vram = request.vram or (int(float(row["memory_gib"]) * GIB) if row.get("memory_gib") else None)
    if vram is None:
        raise BadInput("no GPU memory: pass --vram-gb N (or --gpu NAME, or --cpu to run on the CPU)")
    gbs = request.bandwidth if request.bandwidth is not None else table_gbs
    tflops = row.get("fp16_tflops") if row and request.bandwidth in (None, table_gbs) else None
    return Hardware(gbs, request.ram_bandwidth, fp16_tflops=tflops, ram_measured=request.ram_measured,
                    cpu_threads=request.cpu_threads), vram


def _active(request: FitRequest, config_path: Path | None, section: dict) -> Active:
    known = config_active(section) or Active()
    if config_path is not None:
        from labwright.tuning.kv_gguf import is_gguf  # imports gguf (numpy): only when a file is given

        if is_gguf(config_path):
            known = gguf_active(config_path)
    return given_active(request.params_b, request.active_params_b, known)


def _speed_notes(request: FitRequest, result: FitResult, active: Active, engine: str,
                 engines: tuple[str, ...]) -> tuple[str, ...]:
    notes = []
    if result.moe and active.experts_share is None and request.active_params_b is None:
        notes.append("MoE without experts per token: every weight counted as read (a slower bound); pass "
                     "--params-b and --active-params-b")
    if engines and engine not in engines:
        notes.append(f"speed for {engine}, which does not load this format")
    return tuple(notes)
