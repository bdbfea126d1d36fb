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
from labwright.tuning.units import group


@dataclass(frozen=True)
class FitRequest:
    vram: int
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
    layout = kv.read_layout(config_path) if config_path is not None else None
    spec = request.spec
    if spec is None and layout is not None:
        spec = kv_modes.named(info.cache_default, info.cache_engine, request.count_scales, request.swa_full)
    kv_size, kv_source = _kv(request, layout, spec)
    section = layout.section if layout else {}
    result = check_fit(weights, request.vram, kv_size, overhead=request.overhead, ram=request.ram,
                       moe=request.moe or is_moe(section), expert_fraction=expert_fraction(section), fmt=fmt)
    if layout is not None and spec is not None:
        ceiling = max_context_in_vram(layout, spec, weights, request.vram, result.overhead, request.page)
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
    return replace(result, kv_source=kv_source, cache_mode=spec.name if spec else None,
                   format_reason=folder.format_reason if folder and not request.weight_format else "",
                   weight_files=folder.weight_files if folder else (), notes=tuple(notes))
