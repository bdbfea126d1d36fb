"""Every decode (and prefill) speed the field notes measured, as `labwright kv fit` inputs: the validation set of the
speed prediction (tests/unit/tuning/test_speed.py, benchmarks/speed_prediction.py).

Each row is one measured number with what the note says about the machine and the model. Where a note gives a file
size it is used (Ollama's sizes are decimal GB); otherwise the weights are the note's parameter count at the GGUF
quant's bits per weight, from llama.cpp's own table (tools/quantize/quantize.cpp QUANT_OPTIONS, the sizes of
Llama-3-8B, 8.03 B parameters: Q4_K_M 4.58 GiB = 4.90 bits, Q8_0 7.96 GiB = 8.52 bits). Field note 004 gives its
files (Q4_K_M 16,589 MiB, Q5_K_M 19,046 MiB: data/fit.toml [overhead.llamacpp]); field note 001 "a 4.5 GB model".

Kinds:
- ``decode``: a number the prediction is held to (within TOLERANCE) and that the efficiencies are learned from;
- ``at_least``: "20+ tok/s": the prediction must not be below it (beyond the tolerance);
- ``at_most``: a measurement of a configuration labwright would not choose and whose placement the note does not
  give per row (Ollama's own split of a model that fits, field note 004; tabbyAPI without flash-attn, field note
  001's "Stack C orig"): the prediction for the working configuration is an upper bound;
- ``prefill``: prompt tokens per second (the time to first token is prompt / rate).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from labwright.tuning.fit import FitResult
from labwright.tuning.fit_model import FitRequest, fit_model
from labwright.tuning.units import GIB

#: The prediction is held within this factor of every ``decode`` and ``prefill`` row: |ln(predicted / measured)| <=
#: ln(TOLERANCE). The field notes' numbers are single runs of their own (Ollama's averages over three prompts,
#: rounded); the spread of one engine on one machine across models is itself about this wide (field note 002's RTX
#: 4070 rows: 0.63-0.95 of the bandwidth).
TOLERANCE = 1.45
#: Rows known to sit further out, with why: held to their own factor.
OUTLIERS = {
    "002 apu qwen3.5-abliterated:35b-a3b Q4_K_M": (2.6, "Qwen3.5's hybrid (Gated DeltaNet) MoE at 4.65 tok/s: half "
                                                  "the speed its 3.5 B active parameters predict; the same note's "
                                                  "other MoE models sit at the median"),
    "002 apu qwen3.5-opus-distill Q8_0": (1.9, "the same Qwen3.5 hybrid MoE, Q8_0"),
    "002 apu qwen3.5-abliterated:35b-a3b Q8_0": (1.9, "the same Qwen3.5 hybrid MoE, Q8_0"),
    "002 4070 qwen2.5vl:3b-q8_0": (4.0, "field note 002: \"Slow despite small size - VRAM load overhead\": 15 tok/s "
                                        "for a 3 B model, a third of the 4 B Q8_0 model beside it"),
}

Q4_K_M, Q8_0 = 4.90, 8.52  # bits per weight (llama.cpp QUANT_OPTIONS, above)
GB = 1e9
#: field note 000/002: "DDR5 system RAM (~80-100 GB/s)" on the RTX 4070 laptop (Intel Ultra 7 165H, 64 GB).
LAPTOP_RAM_GBS = 90.0
#: The VRAM neither weights nor KV can use on that laptop's 8 GB card: field note 001's measurement there
#: (data/fit.toml [overhead.tabbyapi], 1.265 GiB); data/fit.toml's llama.cpp figure (2.55 GiB) is a 27 B model's
#: compute buffers on a 24 GB card and would push the note's 6-7 GB models out of VRAM, which the note saw fit.
LAPTOP_OVERHEAD = int(1.265 * GIB)
#: field note 001: the Qwen3.5-9B KV at cache_mode 8,4: 8 full-attention layers x 4 KV heads x 256 x (1 + 0.5) bytes.
QWEN35_9B_Q84 = 12_288
#: field note 004: Qwen3.5-27B at q4_0 K and V: 16 full-attention layers x 4 KV heads x 256 x 2 x 18/32 bytes.
QWEN35_27B_Q40 = 18_432


@dataclass(frozen=True)
class Row:
    id: str
    source: str
    measured: float
    kind: str = "decode"
    engine: str = "ollama"
    weights: float = 0.0  # bytes
    params_b: float | None = None
    active_params_b: float | None = None
    gpu: str | None = None
    unified: bool = False
    cpu: bool = False
    ram_bandwidth: float | None = None
    ram_gib: float | None = None
    kv_bytes: int = 0
    prompt_tokens: int | None = None
    weight_format: str = "gguf"
    overhead: int | None = None  # bytes; None: data/fit.toml's for the format
    note: str = ""

    def request(self) -> FitRequest:
        return FitRequest(
            vram=None, weights=int(self.weights), kv_size=self.kv_bytes, weight_format=self.weight_format,
            overhead=self.overhead,
            ram=int(self.ram_gib * GIB) if self.ram_gib else None, moe=self.active_params_b is not None,
            gpu=self.gpu, unified=self.unified, cpu=self.cpu, ram_bandwidth=self.ram_bandwidth,
            params_b=self.params_b, active_params_b=self.active_params_b, engine=self.engine,
            prompt_tokens=self.prompt_tokens)

    def fit(self) -> FitResult:
        return fit_model(self.request())

    def predicted(self) -> float | None:
        speed = self.fit().speed
        if speed is None:
            return None
        return speed.prefill_tok_s if self.kind == "prefill" else speed.decode_tok_s


def gguf(params_b: float, bits: float) -> float:
    return params_b * 1e9 * bits / 8


def _apu(id_: str, source: str, measured: float, params: float, active: float | None, bits: float) -> Row:
    """Field notes 002/003's mini PC: Ryzen 7 5800U, Vega 8 iGPU reading 64 GB DDR4-3200, Ollama's Vulkan backend."""
    return Row(id_, source, measured, weights=gguf(params, bits), params_b=params,
               active_params_b=active, gpu="Vega 8", unified=True, ram_gib=64)


def _rtx4070(id_: str, measured: float, weights: float, note: str = "") -> Row:
    """Field note 002's laptop: RTX 4070 Laptop GPU (8 GB), Ollama (CUDA), short prompts."""
    return Row(id_, "field note 002", measured, weights=weights, gpu="RTX 4070 Laptop GPU", ram_gib=64,
               ram_bandwidth=LAPTOP_RAM_GBS, overhead=LAPTOP_OVERHEAD, note=note)


ROWS: list[Row] = [
    # field note 002, Matt-Mini (the APU table and the Q4_K_M vs Q8_0 table); parameters as the note's table gives them
    _apu("002 apu qwen3:30b-a3b Q4_K_M", "field note 002", 12.0, 30, 3, Q4_K_M),
    _apu("002 apu qwen3-coder:30b-a3b Q4_K_M", "field note 002", 12.1, 30, 3, Q4_K_M),
    _apu("002 apu qwen3:8b Q4_K_M", "field note 002", 5.3, 8, None, Q4_K_M),
    _apu("002 apu qwen3.5-abliterated:35b-a3b Q4_K_M", "field note 002", 4.65, 35, 3.5, Q4_K_M),
    _apu("002 apu qwen3.5-opus-distill Q8_0", "field note 002", 3.83, 35, 3.5, Q8_0),
    _apu("002 apu mixtral:8x7b Q4_K_M", "field note 002", 3.5, 46.7, 12.9, Q4_K_M),
    _apu("002 apu deepseek-r1:14b Q4_K_M", "field note 002", 3.1, 14, None, Q4_K_M),
    _apu("002 apu qwen3-coder:30b-a3b Q8_0", "field note 002", 7.73, 30, 3, Q8_0),
    _apu("002 apu qwen3.5-abliterated:35b-a3b Q8_0", "field note 002", 3.83, 35, 3.5, Q8_0),
    # field note 003, the same machine
    _apu("003 apu lfm2:24b-a2b Q4_K_M", "field note 003", 17.8, 24, 2, Q4_K_M),
    _apu("003 apu qwen3:30b-a3b Q4_K_M", "field note 003", 12.0, 30, 3, Q4_K_M),
    _apu("003 apu deepseek-r1:14b Q4_K_M", "field note 003", 3.1, 14, None, Q4_K_M),
    # field note 002, the RTX 4070 laptop (sizes from the same note's model table where it gives one)
    _rtx4070("002 4070 qwen2.5-coder:1.5b", 163, gguf(1.5, Q4_K_M)),
    _rtx4070("002 4070 qwen2.5-coder:7b", 52, 4.7 * GB),
    _rtx4070("002 4070 qwen3.5:4b", 51, 3.4 * GB),
    _rtx4070("002 4070 deepseek-r1:7b", 39, gguf(7, Q4_K_M)),
    _rtx4070("002 4070 qwen3-vl:8b", 35, 6.1 * GB),
    _rtx4070("002 4070 llama3.1:latest", 36, gguf(8, Q4_K_M)),
    _rtx4070("002 4070 qwen3.5:latest", 24, 6.6 * GB),
    _rtx4070("002 4070 qwen3.5:27b (spills to RAM)", 3.0, 16_589 * 2**20,
             "the Q4_K_M file of field note 004; split with DDR5 at ~90 GB/s"),
    _rtx4070("002 4070 qwen3-vl:4b-instruct-q8_0", 45, gguf(4, Q8_0)),
    _rtx4070("002 4070 qwen3-vl:8b-instruct-q4_K_M", 35, gguf(8, Q4_K_M)),
    _rtx4070("002 4070 minicpm-v:8b-2.6-q4_K_M", 38, gguf(8, Q4_K_M)),
    _rtx4070("002 4070 qwen2.5vl:3b-q8_0", 15, gguf(3, Q8_0)),
    # field note 000's placement table (Intel Ultra 7 + RTX 4070 8 GB, DDR5)
    Row("000 vram Qwen3-8B Q4 (20+)", "field note 000", 20, "at_least", weights=gguf(8, Q4_K_M),
        gpu="RTX 4070 Laptop GPU", ram_gib=64, ram_bandwidth=LAPTOP_RAM_GBS, overhead=LAPTOP_OVERHEAD),
    Row("000 split Qwen3.5-27B Q4", "field note 000", 3.0, weights=16_589 * 2**20, gpu="RTX 4070 Laptop GPU",
        ram_gib=64, ram_bandwidth=LAPTOP_RAM_GBS, overhead=LAPTOP_OVERHEAD),
    Row("000 cpu Q8_0 9B (AVX_VNNI, ~4-5)", "field note 000", 4.5, engine="llamacpp", weights=gguf(9, Q8_0),
        cpu=True, ram_gib=64, ram_bandwidth=LAPTOP_RAM_GBS),
]

# field note 001: tabbyAPI (exllamav3) on the RTX 4070 Laptop, Qwen3.5-9B EXL3 4.0 bpw, cache 8,4; decode 512 tokens
# after a prompt of the context's length (the mean KV read while decoding: context + 256)
for _context, _a, _orig, _revised in ((512, 34, 33, 33), (4096, 33, 30, 32), (16_384, 28, 23, 28),
                                      (65_536, 16, 11, 16), (131_072, 11, 6, 11)):
    for _stack, _value, _kind in (("A", _a, "decode"), ("C revised", _revised, "decode"),
                                  ("C orig (no flash-attn)", _orig, "at_most")):
        ROWS.append(Row(f"001 tabbyapi stack {_stack} {_context}", "field note 001", _value, _kind, engine="tabbyapi",
                        weights=4.5 * GIB, gpu="RTX 4070 Laptop GPU", weight_format="exl3",
                        kv_bytes=(_context + 256) * QWEN35_9B_Q84))

# field note 004: Qwen3.5-27B on an RTX 4090, 50% of the context filled with the prompt, 200 tokens generated
_CONTEXTS = (2048, 8192, 32_768, 65_536, 131_072)
for _quant, _size, _decode, _prefill in (
        ("Q4_K_M", 16_589, (39.3, 37.7, 37.9, 36.4, 33.4), (1409, 2203, 2467, 2302, 2121)),
        ("Q5_K_M", 19_046, (34.2, 34.1, 33.1, 32.0, 29.9), (1589, 2245, 2400, 2296, 2085))):
    for _context, _d, _p in zip(_CONTEXTS, _decode, _prefill, strict=True):
        _prompt = _context // 2
        ROWS.append(Row(f"004 llama.cpp {_quant} {_context}", "field note 004", _d, engine="llamacpp",
                        weights=_size * 2**20, params_b=27, gpu="RTX 4090", kv_bytes=(_prompt + 100) * QWEN35_27B_Q40))
        ROWS.append(Row(f"004 llama.cpp {_quant} {_context} prefill", "field note 004", _p, "prefill",
                        engine="llamacpp", weights=_size * 2**20, params_b=27, gpu="RTX 4090", prompt_tokens=_prompt))
for _kv, _decode in (("q4_0", (35.8, 36.4, 8.5, 23.3, 15.5)), ("q8_0", (23.3, 23.3, 17.9, 12.1, 6.3))):
    for _context, _d in zip(_CONTEXTS, _decode, strict=True):
        _per_token = QWEN35_27B_Q40 if _kv == "q4_0" else 16 * 4 * 256 * 2 * 34 // 32
        ROWS.append(Row(f"004 ollama Q4_K_M {_kv} KV {_context}", "field note 004", _d, "at_most", engine="ollama",
                        weights=16_589 * 2**20, params_b=27, gpu="RTX 4090",
                        kv_bytes=(_context // 2 + 100) * _per_token,
                        note="Ollama's scheduler put part of the model on the CPU, differently per context"))


def error(predicted: float, measured: float) -> float:
    """Signed relative error: +0.10 = predicted 10% above the measurement."""
    return predicted / measured - 1


def learn() -> dict[str, dict[str, float]]:
    """Efficiencies implied by the ``decode``/``prefill`` rows, per (engine, memory): weights from rows whose KV is
    under 2% of the weights, KV from rows whose KV is over 5%; prefill by least squares of TTFT = fixed + prompt x
    2 x params / (TFLOPS x efficiency)."""
    weights: dict[tuple[str, str], list[float]] = defaultdict(list)
    kv_rows = []
    prefill: dict[str, list[tuple[int, float, float, float]]] = defaultdict(list)
    for row in ROWS:
        result = row.fit()
        speed = result.speed
        if speed is None or not speed.parts:
            continue
        if row.kind == "prefill":
            flops = 2 * (speed.to_json()["active_fraction"] * (row.params_b or 0) * 1e9)
            tflops = float(_gpu_tflops(row))
            prefill[row.engine].append((row.prompt_tokens or 0, row.prompt_tokens / row.measured, flops, tflops))
            continue
        memories = {p.memory for p in speed.parts}
        if row.kind != "decode" or len(memories) != 1:
            continue
        memory = {"ram": "cpu"}.get(next(iter(memories)), next(iter(memories)))
        w = sum(p.bytes for p in speed.parts if not p.what.startswith("KV"))
        k = sum(p.bytes for p in speed.parts if p.what.startswith("KV"))
        gbs = speed.parts[0].gbs * 1e9
        if k < 0.02 * w:
            weights[(row.engine, memory)].append(row.measured * w / gbs)
        elif k > 0.05 * w:
            kv_rows.append(((row.engine, memory), w, k, gbs, row.measured))
    out: dict[str, dict[str, float]] = {}
    for key, values in weights.items():
        out[f"{key[0]}.{key[1]}"] = {"weights": round(statistics.median(values), 3), "rows": len(values)}
    kv_values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for key, w, k, gbs, measured in kv_rows:
        eff_w = out[f"{key[0]}.{key[1]}"]["weights"]
        left = 1 / measured - w / (gbs * eff_w)
        if left > 0:
            kv_values[key].append(k / (gbs * left))
    for key, values in kv_values.items():
        out[f"{key[0]}.{key[1]}"].update(kv=round(statistics.median(values), 3), kv_rows=len(values))
    for engine, all_points in prefill.items():
        # attention's own FLOPs (growing with the prompt's square) are not counted: the fit uses prompts up to 16K
        # tokens, where they stay under a tenth of the total
        points = [p for p in all_points if p[0] <= 16_384]
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum(
            (x - mean_x) ** 2 for x in xs)
        fixed = mean_y - slope * mean_x
        flops, tflops = points[0][2], points[0][3]
        out[f"prefill.{engine}"] = {"efficiency": round(flops / (tflops * 1e12 * slope), 3),
                                    "fixed_s": round(fixed, 3), "rows": len(points)}
    return out


def _gpu_tflops(row: Row) -> float:
    from labwright.tuning.speed import find_gpu

    return float(find_gpu(row.gpu or "")["fp16_tflops"])
