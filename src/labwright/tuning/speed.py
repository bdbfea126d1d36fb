"""Decode speed predicted from the hardware: the bytes read per token over the bandwidth of where they live.

Decoding one token of one request reads every active weight once and the whole KV cache once (batch 1: memory-bound,
field note 002: "fewer active params = less bandwidth per token = more TPS"). So the time per token is the sum, over
where each part lives, of ``bytes / (bandwidth x efficiency)``:

- VRAM (a discrete GPU), shared memory (``--unified``: an APU's GPU reads system RAM, nothing crosses PCIe), or system
  RAM (``--cpu``, and the CPU side of a split or of MoE expert offload: llama.cpp computes those layers on the CPU);
- PCIe, for an engine that streams offloaded weights to the GPU on every forward pass (vLLM ``--cpu-offload-gb``).

The efficiency (the share of the peak bandwidth an engine reaches) is per engine and memory, one for the weights and
one for the KV read, learned from published measurements (labwright/data/speed.toml names each). Active parameters
(a MoE reads only its routed experts) come from ``--params-b``/``--active-params-b``, the GGUF tensor table, or
config.json. The time to first token, where the GPU's FP16 throughput is known: ``2 x active params x prompt tokens``
FLOPs at the engine's prefill efficiency.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from labwright.errors import BadInput
from labwright.tuning.data import load

GB = 1e9
#: No memory anywhere reads faster (an H200: 4,800 GB/s); a larger number is a typo (a unit, a digit too many).
MAX_BANDWIDTH_GBS = 10_000.0
#: No model has more parameters than this many billion (the largest open MoE models: ~1,000 B).
MAX_PARAMS_B = 100_000.0


def speed_data() -> dict[str, Any]:
    return load("speed.toml")


def gpu_table() -> list[dict[str, Any]]:
    return list(load("gpu-memory.toml")["gpu"])


def check_bandwidth(value: float, option: str) -> float:
    """GB/s above 0 and at most 10 TB/s (an H200 reads 4.8 TB/s); nan and inf are refused too."""
    if not (isinstance(value, int | float) and 0 < value <= MAX_BANDWIDTH_GBS):
        raise BadInput(f"{option} {value:g}: give the memory bandwidth in GB/s, above 0 and at most 10,000 (10 TB/s); "
                       "e.g. 1008 for an RTX 4090, 51.2 for dual-channel DDR4-3200 (measure it: labwright kv "
                       "bandwidth)")
    return float(value)


#: More decode threads than any CPU a homelab runs has cores (a dual-socket EPYC: 384 threads); more is a typo.
MAX_CPU_THREADS = 1024


def check_threads(value: int, option: str = "--cpu-threads") -> int:
    """A whole count of decode threads, 1 to 1,024 (llama.cpp's ``--threads``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_CPU_THREADS:
        raise BadInput(f"{option} {value}: give the threads the engine decodes with on the CPU (llama.cpp's "
                       f"--threads), a whole number from 1 to {MAX_CPU_THREADS:,}; e.g. 8 for an 8-core CPU")
    return value


def check_params(value: float, option: str) -> float:
    if not (isinstance(value, int | float) and 0 < value <= MAX_PARAMS_B):
        raise BadInput(f"{option} {value:g}: give billions of parameters, above 0 and at most {MAX_PARAMS_B:,.0f} "
                       "(e.g. 30.5 for Qwen3-30B-A3B)")
    return float(value)


def _key(name: str) -> str:
    text = re.sub(r"\b(nvidia|geforce|amd|radeon|intel|graphics|tesla)\b", " ", name.lower())
    return re.sub(r"[^a-z0-9]+", "", text)


def find_gpu(name: str, option: str = "--gpu") -> dict[str, Any]:
    """The table row for ``name`` (as a user or nvidia-smi writes it: "RTX 4090", "NVIDIA GeForce RTX 4090")."""
    rows = gpu_table()
    wanted = _key(name)
    for row in rows:
        if _key(row["name"]) == wanted:
            return row
    if option:
        known = ", ".join(row["name"] for row in rows)
        raise BadInput(f"{option} {name!r}: not in labwright's GPU table (data/gpu-memory.toml); give one of {known}, "
                       "or pass --bandwidth-gbs and --vram-gb")
    return {}


@dataclass(frozen=True)
class Part:
    """One share of the bytes read per token: where it lives and how fast that memory gives it."""

    what: str
    bytes: float
    memory: str  # vram, unified, ram, pcie
    gbs: float
    efficiency: float
    source: str = ""
    #: seconds the CPU's arithmetic takes for this part (``--cpu-threads``), where that is known: the part takes the
    #: longer of its read and its arithmetic (a roofline)
    arithmetic_s: float | None = None

    @property
    def read_seconds(self) -> float:
        return self.bytes / (self.gbs * GB * self.efficiency) if self.bytes else 0.0

    @property
    def seconds(self) -> float:
        return max(self.read_seconds, self.arithmetic_s or 0.0)

    @property
    def bound(self) -> str:
        """What limits the part: ``memory`` (its read) or ``arithmetic`` (the CPU threads computing it)."""
        return "arithmetic" if (self.arithmetic_s or 0.0) > self.read_seconds else "memory"

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "bytes": round(self.bytes), "memory": self.memory, "bandwidth_gbs": self.gbs,
                "efficiency": self.efficiency, "ms_per_token": round(self.seconds * 1000, 3), "bound": self.bound,
                "arithmetic_ms_per_token": None if self.arithmetic_s is None else round(self.arithmetic_s * 1000, 3)}


@dataclass(frozen=True)
class Speed:
    decode_tok_s: float | None
    placement: str
    engine: str
    parts: tuple[Part, ...] = ()
    active_fraction: float = 1.0
    active_source: str = ""
    ttft_s: float | None = None
    prefill_tok_s: float | None = None
    prompt_tokens: int | None = None
    notes: tuple[str, ...] = ()
    sources: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {"decode_tok_s": None if self.decode_tok_s is None else round(self.decode_tok_s, 2),
                "placement": self.placement, "engine": self.engine, "active_fraction": round(self.active_fraction, 4),
                "active_source": self.active_source, "parts": [p.to_json() for p in self.parts],
                "ttft_s": None if self.ttft_s is None else round(self.ttft_s, 3),
                "prefill_tok_s": None if self.prefill_tok_s is None else round(self.prefill_tok_s, 1),
                "prompt_tokens": self.prompt_tokens, "notes": list(self.notes), "sources": list(self.sources)}


#: Bits per weight from which a model's weights count as unquantized (f16, bf16, f32) rather than quantized (Q8_0 is
#: 8.5, Q4_K_M 4.9): a CPU kernel that dequantizes does more arithmetic per byte (data/speed.toml).
FLOAT_BITS = 12.0


def weight_kind(bits_per_weight: float | None) -> str | None:
    """``"float"`` (f16, bf16, f32: 12 bits a weight or more), ``"quantized"`` (fewer), or None (not known)."""
    if bits_per_weight is None or not math.isfinite(bits_per_weight) or bits_per_weight <= 0:
        return None
    return "float" if bits_per_weight >= FLOAT_BITS else "quantized"


def efficiency(engine: str, memory: str, kind: str | None = None) -> tuple[float, float, str]:
    """(weights efficiency, KV efficiency, source) for ``engine`` reading ``memory`` (vram, unified, cpu, pcie);
    an engine without its own measurement there borrows the entry its ``fallback`` names. An entry measured per
    weight kind (``float``/``quantized`` beside ``weights``) gives that kind's figure for the weights when ``kind``
    is known; ``weights`` otherwise."""
    table = speed_data()["efficiency"]
    seen = []
    key = engine
    while key not in seen:
        seen.append(key)
        entry: Any = table.get(key, {}).get(memory)
        if isinstance(entry, dict):
            borrowed = "" if key == engine else f" (no {engine} measurement: {key}'s)"
            kv_value = entry["kv"] if "kv" in entry else entry["weights"]
            weights = entry[kind] if kind is not None and kind in entry else entry["weights"]
            return float(weights), float(kv_value), str(entry["source"]) + borrowed
        key = table.get(key, {}).get("fallback", "llamacpp")
    raise BadInput(f"labwright data file speed.toml has no efficiency for {engine} on {memory}; reinstall labwright")


@dataclass(frozen=True)
class Hardware:
    """Where the parts live and how fast each memory is (GB/s; None: not known)."""

    vram_gbs: float | None = None
    ram_gbs: float | None = None
    unified: bool = False
    cpu: bool = False
    fp16_tflops: float | None = None
    #: the RAM figure is `kv bandwidth`'s measured read, not a specification's peak: its own efficiency
    ram_measured: bool = False
    #: threads computing the CPU's parts (``--cpu-threads``; None: the arithmetic is not modelled, the read limits)
    cpu_threads: int | None = None


def core_rate(kind: str | None) -> tuple[float | None, str]:
    """Weights one CPU core decodes per second when its read does not limit it, for the weight ``kind`` (float or
    quantized: a dequantizing kernel does more arithmetic per weight read; None when the kind is not known), and the
    measurement's source (data/speed.toml [cpu_arithmetic])."""
    entry = speed_data()["cpu_arithmetic"]
    if kind is None:
        return None, str(entry["source"])
    return float(entry[kind]) * GB, str(entry["source"])


def predict(*, weights: float, active_fraction: float, kv: float, verdict: str, gpu_weights: float,
            expert_bytes: float, experts_active: float | None, engine: str, hw: Hardware,
            active_params: float | None = None, prompt_tokens: int | None = None, active_source: str = "",
            notes: tuple[str, ...] = (), bits_per_weight: float | None = None) -> Speed:
    """Tokens per second for one request given where the fit check put the weights (``verdict``); the weights' bits
    per weight (the active bytes x 8 / the active parameters, where known) choose an efficiency measured per weight
    kind."""
    notes_out = list(notes)
    active = weights * active_fraction
    if bits_per_weight is None and active_params:
        bits_per_weight = active * 8 / active_params
    if verdict == "no_fit":
        placement = "none"
    elif hw.cpu or verdict == "cpu":
        placement = "cpu"
    elif hw.unified:
        placement = "unified" if verdict == "fits" else "unified+cpu"
    else:
        placement = {"fits": "vram", "moe_offload": "vram+ram (MoE experts)", "split": "vram+cpu"}.get(verdict, "none")
    if placement == "none":
        return Speed(None, "none", engine, active_fraction=active_fraction, active_source=active_source,
                     notes=(*notes_out, "does not fit: no decode speed to predict"))
    gpu_memory, gpu_gbs = ("unified", hw.vram_gbs) if hw.unified else ("vram", hw.vram_gbs)
    offload_gbs = float(speed_data()["pcie"]["gbs"]) if engine == "vllm" else hw.ram_gbs
    offload_memory = "pcie" if engine == "vllm" else "ram"
    if placement == "cpu":
        pieces = [("weights", active, "ram"), ("KV cache", kv, "ram")]
    elif verdict == "fits":
        pieces = [("weights", active, gpu_memory), ("KV cache", kv, gpu_memory)]
    elif verdict == "moe_offload":
        # every non-expert weight is read (attention, shared experts, norms); of the routed experts, the share the
        # router picks (experts per token / experts), or what the active fraction leaves for them
        dense = weights - expert_bytes
        share = experts_active if experts_active is not None else (
            min(1.0, max(0.0, (active - dense) / expert_bytes)) if expert_bytes else 0.0)
        pieces = [("attention + shared weights", dense, gpu_memory),
                  ("active routed experts", expert_bytes * share, offload_memory), ("KV cache", kv, gpu_memory)]
    else:  # split: the GPU's layers and the CPU's (or PCIe's) layers, the KV with its layers
        on_gpu = gpu_weights / weights if weights else 0.0
        pieces = [("weights (GPU layers)", active * on_gpu, gpu_memory),
                  ("weights (CPU layers)" if offload_memory == "ram" else "offloaded weights over PCIe",
                   active * (1 - on_gpu) if offload_memory == "ram" else weights - gpu_weights, offload_memory),
                  ("KV cache (GPU layers)", kv * on_gpu, gpu_memory),
                  ("KV cache (CPU layers)", kv * (1 - on_gpu), "ram")]
        if engine == "vllm":  # vLLM computes every layer on the GPU: its KV stays there whole
            pieces[2:] = [("KV cache", kv, gpu_memory)]
    parts: list[Part] = []
    sources: dict[str, None] = {}
    missing: list[str] = []
    kind = weight_kind(bits_per_weight)
    rate, rate_source = core_rate(kind) if hw.cpu_threads else (None, "")
    for what, size, memory in pieces:
        if size <= 0:
            continue
        gbs = {"vram": gpu_gbs, "unified": gpu_gbs, "ram": hw.ram_gbs, "pcie": offload_gbs}[memory]
        if gbs is None:
            missing.append(memory)
            continue
        eff_memory = ("cpu_measured" if hw.ram_measured else "cpu") if memory == "ram" else memory
        w_eff, kv_eff, source = efficiency(engine, eff_memory, kind)
        eff = kv_eff if what.startswith("KV") else w_eff
        arithmetic = None
        if rate and hw.cpu_threads and memory == "ram" and not what.startswith("KV") and bits_per_weight:
            # the CPU computes these weights: each thread one core's rate (llama.cpp splits a layer's rows evenly)
            arithmetic = size * 8 / bits_per_weight / (hw.cpu_threads * rate)
            sources[rate_source] = None
        parts.append(Part(what, size, memory, gbs, eff, source, arithmetic))
        sources[source] = None
    if hw.cpu_threads:
        notes_out.extend(_threads_notes(hw.cpu_threads, parts, kind, rate))
    if missing:
        need = {"vram": "--bandwidth-gbs or --gpu NAME", "unified": "--bandwidth-gbs (or --gpu NAME)",
                "ram": "--ram-bandwidth-gbs (measure it: labwright kv bandwidth)", "pcie": "--ram-bandwidth-gbs"}
        asks = " and ".join(dict.fromkeys(need[m] for m in missing))
        return Speed(None, placement, engine, tuple(parts), active_fraction, active_source,
                     notes=(*notes_out, f"no decode speed: the bandwidth is not known; pass {asks}"),
                     sources=tuple(sources))
    seconds = sum(p.seconds for p in parts)
    decode = 1.0 / seconds if seconds > 0 else None
    ttft = prefill = None
    if prompt_tokens and placement in ("vram", "unified"):
        prefill_data = speed_data()["prefill"].get(engine)
        if hw.fp16_tflops and active_params and prefill_data:
            rate = float(hw.fp16_tflops) * 1e12 * float(prefill_data["efficiency"]) / (2 * active_params)
            ttft = float(prefill_data.get("fixed_s", 0.0)) + prompt_tokens / rate
            prefill = prompt_tokens / ttft
            sources[prefill_data["source"]] = None
        elif not prefill_data:
            notes_out.append(f"no time to first token: no published prefill measurement for {engine}")
        elif not hw.fp16_tflops:
            notes_out.append("no time to first token: the GPU's FP16 throughput is not known (--gpu NAME with a "
                             "TFLOPS figure in data/gpu-memory.toml)")
        else:
            notes_out.append("no time to first token: the parameter count is not known (--params-b, or a GGUF)")
    if decode is not None and not math.isfinite(decode):
        decode = None
    return Speed(decode, placement, engine, tuple(parts), active_fraction, active_source, ttft, prefill,
                 prompt_tokens, tuple(notes_out), tuple(sources))


def _threads_notes(threads: int, parts: list[Part], kind: str | None, rate: float | None) -> list[str]:
    """What ``--cpu-threads`` changed, in a line: nothing on the CPU, no parameter count, or which bound holds."""
    on_cpu = [p for p in parts if p.memory == "ram" and not p.what.startswith("KV")]
    if not on_cpu:
        return [f"--cpu-threads {threads}: no weight is computed on the CPU here, so the threads change nothing"]
    if rate is None:
        return [f"--cpu-threads {threads}: the CPU's arithmetic is not counted: the parameter count is not known "
                "(pass --params-b, or give a GGUF or config.json with --model-dir)"]
    bound = [p for p in on_cpu if p.bound == "arithmetic"]
    per_core = f"{rate / GB:g} G {kind} weights a second a core"
    if bound:
        return [f"the CPU's {threads} thread(s) limit its layers, not the read ({per_core}, measured on an AVX2 "
                "core: data/speed.toml); more threads, up to the physical cores, decode faster"]
    return [f"the CPU's {threads} thread(s) keep up with the read ({per_core}): the memory bandwidth limits"]


@dataclass(frozen=True)
class Active:
    """What share of the weights one token reads, and from where that is known."""

    fraction: float = 1.0
    source: str = "dense: every weight is read per token"
    params: float | None = None  # total parameters, when known
    active_params: float | None = None
    experts_share: float | None = None  # experts per token / routed experts (MoE), when known


#: config.json keys for the experts the router picks per token (transformers' names across MoE families).
EXPERTS_PER_TOKEN = ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "moe_top_k")


def gguf_active(path: Any) -> Active:
    """From a GGUF's tensor table: the routed-expert tensors (``*_exps``) count at ``expert_used_count /
    expert_count``, the input embedding at nothing (one row is read) unless it doubles as the output (no
    ``output.weight``), every other tensor whole."""
    from labwright.tuning.kv_gguf import read_tensors

    metadata, tensors = read_tensors(path)
    arch = str(metadata.get("general.architecture") or "")
    experts, used = metadata.get(f"{arch}.expert_count"), metadata.get(f"{arch}.expert_used_count")
    share = used / experts if isinstance(experts, int) and isinstance(used, int) and experts > 1 and used else None
    tied = not any(name == "output.weight" for name, _, _ in tensors)
    total_bytes = active_bytes = 0.0
    total_params = active_params = 0.0
    for name, elements, size in tensors:
        scale = 1.0
        if name == "token_embd.weight" and not tied:
            scale = 0.0
        elif share is not None and "_exps" in name:
            scale = share
        total_bytes += size
        total_params += elements
        active_bytes += size * scale
        active_params += elements * scale
    if not total_bytes:
        return Active()
    what = (f"GGUF tensor table: routed experts at {used}/{experts} per token, the input embedding not read"
            if share is not None else "GGUF tensor table: every tensor but the input embedding is read")
    return Active(active_bytes / total_bytes, what, total_params, active_params, share)


def config_active(section: dict[str, Any]) -> Active | None:
    """From config.json: 1 - routed share + routed share x experts per token / experts; None for a dense model or
    a MoE whose config.json lacks what the estimate needs."""
    from labwright.tuning.moe import expert_count, expert_fraction

    experts = expert_count(section)
    if experts < 2:
        return None
    routed = expert_fraction(section)
    used = next((section[k] for k in EXPERTS_PER_TOKEN if isinstance(section.get(k), int) and section[k] > 0), None)
    if routed is None or used is None:
        return None
    share = min(1.0, used / experts)
    return Active(1 - routed + routed * share, f"config.json: {used} of {experts} routed experts per token "
                  f"(routed share {routed:.2f} of the weights)", experts_share=share)


def given_active(params_b: float | None, active_b: float | None, known: Active) -> Active:
    """``--params-b``/``--active-params-b`` over what the files say; active above the total is refused."""
    total = params_b * 1e9 if params_b is not None else known.params
    if active_b is None:
        if params_b is None:
            return known
        return Active(known.fraction, known.source, params_b * 1e9, params_b * 1e9 * known.fraction,
                      known.experts_share)
    if total is None:
        raise BadInput("--active-params-b needs the total: pass --params-b too (or a GGUF / config.json that holds "
                       "the model)")
    if active_b * 1e9 > total * (1 + 1e-9):
        raise BadInput(f"--active-params-b {active_b:g} is above the total ({total / 1e9:g} B): the active parameters "
                       "are a part of the model; swap the two or fix one")
    return Active(active_b * 1e9 / total, f"--active-params-b {active_b:g} of {total / 1e9:g} B", total,
                  active_b * 1e9, None)
