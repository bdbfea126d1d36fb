"""Where does a model live: weights + KV + a measured overhead against VRAM (and RAM), in field note 000's terms.

Verdicts, best first (field note 000, docs/field-notes.md): fits in VRAM; MoE expert offload (acceptable: routed
experts in RAM, attention and KV on the GPU); split GPU/CPU (warn: PCIe-bound, the worst case); run fully on CPU;
does not fit. A verdict is only given when an engine that speaks the model's format can do it (data/fit.toml): an
EXL3 model that does not fit in VRAM has no fallback, as exllamav3 runs on the GPU only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from labwright.errors import BadInput
from labwright.tuning.data import fit_data
from labwright.tuning.kv import KvLayout, tokens_in_budget
from labwright.tuning.kv_modes import CacheSpec
from labwright.tuning.moe import default_expert_fraction
from labwright.tuning.speed import Speed
from labwright.tuning.units import GIB, gib

ORDER = ("fits", "moe_offload", "split", "cpu", "no_fit")


@dataclass(frozen=True)
class FormatInfo:
    key: str | None
    label: str
    engines: tuple[str, ...]
    cache_engine: str
    cache_default: str
    overhead_key: str
    note: str = ""

    def engine_labels(self) -> list[str]:
        known = fit_data()["engines"]
        return [known[key]["label"] for key in self.engines]


def formats() -> list[str]:
    return list(fit_data()["formats"])


def format_info(key: str | None) -> FormatInfo:
    """What the data says about a weight format; None (not given) and unknown quant methods get no engines."""
    table = fit_data()["formats"]
    if key is None:
        return FormatInfo(None, "unknown", (), "llamacpp", "f16", "default")
    if key not in table:
        return FormatInfo(key, key, (), "llamacpp", "f16", "default",
                          f"labwright has no engine data for the format {key!r}")
    raw = table[key]
    return FormatInfo(key, raw["label"], tuple(raw["engines"]), raw["cache_engine"], raw["cache_default"],
                      raw["overhead"], raw.get("note", ""))


def default_overhead(info: FormatInfo, vram: int) -> tuple[int, str]:
    """(bytes, where the number comes from) for the format's engine."""
    raw = fit_data()["overhead"][info.overhead_key]
    value = raw["gib"] * GIB + raw.get("vram_fraction", 0.0) * vram
    return int(value), f"data/fit.toml [overhead.{info.overhead_key}]: {raw['source']}"


@dataclass(frozen=True)
class FitResult:
    verdict: str
    text: str
    weights: int
    kv: int
    overhead: int
    vram: int
    ram: int | None
    gpu_weights: int
    cpu_weights: int
    format: FormatInfo
    overhead_source: str
    moe: bool = False
    expert_bytes: int = 0
    how: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    max_context: int | None = None
    max_context_checked: bool = False
    kv_source: str = ""
    cache_mode: str | None = None
    format_reason: str = ""
    weight_files: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    speed: Speed | None = None

    @property
    def need(self) -> int:
        return self.weights + self.kv + self.overhead

    @property
    def headroom(self) -> int:
        return self.vram - self.need

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict, "verdict_text": self.text, "fits_in_vram": self.verdict == "fits",
            "weights_bytes": self.weights, "kv_bytes": self.kv, "overhead_bytes": self.overhead,
            "need_bytes": self.need, "vram_bytes": self.vram, "ram_bytes": self.ram, "headroom_bytes": self.headroom,
            "gpu_weights_bytes": self.gpu_weights, "cpu_weights_bytes": self.cpu_weights, "moe": self.moe,
            "expert_bytes": self.expert_bytes, "format": self.format.key, "engines": self.format.engine_labels(),
            "how": list(self.how), "warnings": list(self.warnings), "max_context": self.max_context,
            "overhead_source": self.overhead_source, "kv_source": self.kv_source, "cache_mode": self.cache_mode,
            "format_reason": self.format_reason, "weight_files": list(self.weight_files), "notes": list(self.notes),
            "decode_tok_s": self.speed.to_json()["decode_tok_s"] if self.speed else None,
            "ttft_s": self.speed.to_json()["ttft_s"] if self.speed else None,
            "speed": self.speed.to_json() if self.speed else None,
        }


def _capable(info: FormatInfo, verdict: str) -> tuple[bool, list[str]]:
    """Can an engine of this format do ``verdict``; and how (one line per engine that can)."""
    need = fit_data()["verdicts"][verdict].get("needs")
    engines = fit_data()["engines"]
    if not need or info.key is None or not info.engines:
        return (not need or info.key is None), []
    how = [f"{engines[key]['label']}: {engines[key][need]}" for key in info.engines if engines[key][need]]
    return bool(how), how


def _placements(weights: int, vram: int, kv: int, overhead: int, ram: int | None, moe: bool,
                experts: int) -> list[tuple[str, int]]:
    """Memory-feasible verdicts after 'fits', best first, each with the weight bytes left on the GPU."""
    room = vram - kv - overhead
    spill = weights - room
    options = []
    if moe and weights - experts <= room and (ram is None or spill <= ram):
        options.append(("moe_offload", room))
    if room > 0 and (ram is None or spill <= ram):
        options.append(("split", room))
    if ram is None or weights + kv + overhead <= ram:
        options.append(("cpu", 0))
    return options


def check_fit(weights: int, vram: int, kv: int = 0, overhead: int | None = None, ram: int | None = None,
              moe: bool = False, expert_fraction: float | None = None, fmt: str | None = None) -> FitResult:
    """The verdict for ``weights`` + ``kv`` + overhead against ``vram`` bytes (and ``ram`` when known)."""
    for name, value in (("--weights-gb", weights), ("--vram-gb", vram), ("--kv-gb", kv)):
        if value < 0:
            raise BadInput(f"{name}: give a size of zero or more")
    info = format_info(fmt)
    source = "given with --overhead-gb"
    if overhead is None:
        overhead, source = default_overhead(info, vram)
    fraction = expert_fraction if expert_fraction is not None else default_expert_fraction()
    experts = int(weights * fraction) if moe else 0
    verdicts = fit_data()["verdicts"]
    speaks = (f"{info.label} runs on {', '.join(info.engine_labels())}",) if info.engines else ()
    base = FitResult("fits", verdicts["fits"]["text"], weights, kv, overhead, vram, ram, weights, 0, info, source,
                     moe, experts, how=speaks)
    warnings = [info.note] if info.note else []
    if base.need <= vram:
        return replace(base, warnings=tuple(warnings))
    refused: list[str] = []
    for verdict, on_gpu in _placements(weights, vram, kv, overhead, ram, moe, experts):
        able, how = _capable(info, verdict)
        if not able:
            refused.append(verdict)
            continue
        warnings += _warnings(verdict, base, on_gpu, fraction, expert_fraction is not None)
        return replace(base, verdict=verdict, text=verdicts[verdict]["text"], gpu_weights=max(on_gpu, 0),
                       cpu_weights=weights - max(on_gpu, 0), how=tuple(how), warnings=tuple(warnings))
    engines = fit_data()["engines"]
    if refused:
        reasons = [f"{engines[key]['label']}: {engines[key].get('cannot', 'no CPU offload')}" for key in info.engines]
        could = " / ".join(verdicts[v]["text"] for v in refused)
        warnings.append(f"{info.label} could {could}, but " + "; ".join(reasons))
    else:
        total = f"VRAM {gib(vram)}" + (f" + RAM {gib(ram)}" if ram is not None else "")
        warnings.append(f"needs {gib(base.need)}: more than {total}")
    warnings.append(f"to fit in VRAM, free {gib(base.need - vram)}: a smaller quant, a smaller cache type or a "
                    "shorter context")
    return replace(base, verdict="no_fit", text=verdicts["no_fit"]["text"], gpu_weights=0, cpu_weights=0,
                   warnings=tuple(warnings))


def _warnings(verdict: str, base: FitResult, on_gpu: int, fraction: float, from_config: bool) -> list[str]:
    lines = []
    over = gib(base.need - base.vram)
    if verdict == "moe_offload":
        origin = "from config.json" if from_config else "a default: pass --model-dir or --config to estimate it"
        lines.append(f"{gib(base.weights - on_gpu)} of routed experts in RAM (expert share {fraction:.2f}, {origin}); "
                     "attention and KV stay on the GPU")
    elif verdict == "split":
        lines.append(f"PCIe-bound: {gib(base.weights - on_gpu)} of weights on the CPU side, crossed on every token "
                     f"(field note 000: the worst case); over VRAM by {over}: a smaller quant, cache type or context "
                     "fits")
    elif verdict == "cpu":
        lines.append(f"no room on the GPU for weights after KV and overhead (over VRAM by {over})")
    if base.ram is None:
        lines.append("RAM not checked: pass --ram-gb")
    return lines


def max_context_in_vram(layout: KvLayout, spec: CacheSpec, weights: int, vram: int, overhead: int,
                        page: int) -> int | None:
    """The longest context (whole pages) whose KV fits beside all the weights in VRAM; 0 when none does."""
    budget = vram - weights - overhead
    if budget <= 0:
        return 0
    return tokens_in_budget(layout, spec, budget, page)
