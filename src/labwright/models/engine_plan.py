"""``engine: auto``: the engine field note 000's table gives a model's format, checked against where the model can live.

Field note 000 (docs/field-notes.md#field-note-000), "The Format-to-Engine Matching Table": GGUF -> llama.cpp (or
Ollama, which labwright deploys as a drop-in beside llama.cpp), EXL3 -> tabbyAPI only, AWQ / GPTQ / FP8 / 16-bit
safetensors -> vLLM; EXL2 needs an exllamav2 tabbyAPI that labwright does not deploy. The format is read as
``labwright kv fit --model-dir`` reads it (labwright.tuning.model_dir); the fit is ``kv fit``'s verdict
(labwright.tuning.fit: in VRAM, MoE expert offload, a GPU/CPU split, CPU only, or nothing), given only when the
chosen engine can do it. On unified memory (one pool for GPU and CPU) there is no PCIe split: the model fits in the
pool or nowhere.

The model is what deploys/model.py takes (a Hub repo snapshot or one GGUF file of it), or, for ``labwright model
plan``, a local directory or GGUF file. A Hub repo is read without downloading its weights: the file listing (sizes)
and config.json, through the same huggingface_hub client and ``HF_ENDPOINT`` as the download.

Pure apart from reading the model: every refusal is a BadInput of one line.
"""

from __future__ import annotations

import fnmatch
import math
import tempfile
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from labwright.errors import BadInput
from labwright.textio import loads_json
from labwright.tuning.fit import FitResult, format_info, formats
from labwright.tuning.fit_model import FitRequest, fit_model
from labwright.tuning.units import GIB, gib

#: The engines labwright deploys, by fit.toml's engine key, with their deploy. Ollama is llama.cpp's drop-in.
DEPLOYS = {"llamacpp": "deploys/llamacpp.py", "tabbyapi": "deploys/tabbyapi.py", "vllm": "deploys/vllm.py"}
ENGINES = tuple(DEPLOYS)
#: What each engine is called in data (``engine: ...``) and in the line.
LABELS = {"llamacpp": "llama.cpp", "tabbyapi": "tabbyAPI", "vllm": "vLLM"}
TABLE = ("GGUF -> llama.cpp, EXL3 -> tabbyAPI, AWQ/GPTQ/FP8/compressed-tensors/16-bit safetensors -> vLLM "
         "(field note 000)")


@dataclass(frozen=True)
class Memory:
    """Where a model may live: the largest GPU's memory (0: no GPU), RAM (None: not known), one shared pool."""

    vram: int
    ram: int | None = None
    unified: bool = False

    def describe(self) -> str:
        if self.unified:
            return f"unified memory {gib(self.vram)}"
        ram = f", RAM {gib(self.ram)}" if self.ram is not None else ""
        return (f"VRAM {gib(self.vram)}" if self.vram else "no GPU") + ram


@dataclass(frozen=True)
class EnginePlan:
    engine: str
    model: str
    fit: FitResult
    memory: Memory
    cpu_offload_gb: int = 0
    offload_params: str = ""

    @property
    def deploy(self) -> str:
        return DEPLOYS[self.engine]

    @property
    def line(self) -> str:
        """The one line saying what was chosen and why."""
        f = self.fit
        where = f"{f.text}: needs {gib(f.need)} against {self.memory.describe()}"
        if f.kv == 0:
            where += " (KV not counted: give a context)"
        offload = ""
        if self.cpu_offload_gb:
            offload = f"; --cpu-offload-gb {self.cpu_offload_gb}" + (
                f" --cpu-offload-params {self.offload_params}" if self.offload_params else "")
        elif f.verdict in ("split", "cpu", "moe_offload") and f.how:
            offload = f"; {f.how[0]}"
        return (f"engine auto: {LABELS[self.engine]} for {self.model}: {f.format.label} weights "
                f"({f.format_reason or 'format given'}), which field note 000's table gives to "
                f"{LABELS[self.engine]}; {where}{offload}")

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "deploy": self.deploy, "model": self.model, "line": self.line,
                "cpu_offload_gb": self.cpu_offload_gb, "cpu_offload_params": self.offload_params,
                "memory": {"vram_bytes": self.memory.vram, "ram_bytes": self.memory.ram,
                           "unified": self.memory.unified},
                "fit": self.fit.to_json()}


def _refuse_format(model: str, fmt: str, reason: str) -> None:
    """One line when no engine labwright deploys speaks ``fmt``."""
    if fmt in formats() and format_info(fmt).engines:
        return
    info = format_info(fmt)
    why = f"; {info.note}" if info.note else ""
    raise BadInput(f"engine auto: {model} is {info.label} ({reason}), a format no engine labwright deploys speaks"
                   f"{why}: {TABLE}; get the model in one of those formats (nothing was deployed)")


def choose(fit: FitResult, model: str, memory: Memory) -> EnginePlan:
    """The engine for a fit verdict: the first engine of the format's row that labwright deploys; refused (one line)
    when the model fits nowhere."""
    _refuse_format(model, fit.format.key or "", fit.format_reason)
    engine = next((key for key in fit.format.engines if key in DEPLOYS), None)
    if engine is None:
        raise BadInput(f"engine auto: {model} is {fit.format.label}, which only {', '.join(fit.format.engine_labels())}"
                       f" speaks, and labwright deploys none of them: {TABLE} (nothing was deployed)")
    if fit.verdict == "no_fit":
        why = "; ".join(fit.warnings) or fit.text
        raise BadInput(f"engine auto: {model} fits nowhere on {memory.describe()}: {fit.format.label} on "
                       f"{LABELS[engine]} needs {gib(fit.need)}; {why} (nothing was deployed)")
    offload, params = 0, ""
    if engine == "vllm" and fit.verdict in ("split", "moe_offload"):
        # vLLM's --cpu-offload-gb is GiB per GPU (vllm/config/offload.py 23-32); whole GiB, rounded up
        offload = max(1, math.ceil(fit.cpu_weights / GIB))
        params = "experts" if fit.verdict == "moe_offload" else ""
    return EnginePlan(engine, model, fit, memory, offload, params)


def _fit(memory: Memory, **request: Any) -> FitResult:
    vram = memory.vram
    # unified: one pool; nothing crosses PCIe, so there is no split and no RAM beyond the pool
    ram = 0 if memory.unified else memory.ram
    if not vram and not memory.unified and "cpu" in {f.name for f in fields(FitRequest)}:
        request["cpu"] = True  # no GPU: kv fit's CPU-only reading (a VRAM of 0 is otherwise "not given")
    return fit_model(FitRequest(vram=vram, ram=ram, **request))


def plan_local(path: Path, memory: Memory, context: int | None = None) -> EnginePlan:
    """A model directory or one GGUF file on this machine."""
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise BadInput(f"engine auto: {path} is a file but not a GGUF; pass the model's directory (config.json "
                           "and weights) or its .gguf file")
        from labwright.tuning.model_dir import _size

        weights = _size(path)
        # the GGUF's own header is its config.json, read only when a context asks for the KV
        fit = _fit(memory, weights=weights, config=path if context else None, weight_format="gguf", context=context)
        fit = replace(fit, format_reason="a .gguf file", weight_files=(path.name,))
        return choose(fit, str(path), memory)
    if not path.is_dir():
        raise BadInput(f"engine auto: {path} does not exist; pass a model directory, a .gguf file or a Hub repo")
    from labwright.tuning.model_dir import read_model_dir

    folder = read_model_dir(path)
    _refuse_format(str(path), folder.format, folder.format_reason)
    return choose(_fit(memory, model_dir=path, context=context), str(path), memory)


def _kept(paths: list[str], allow: tuple[str, ...], ignore: tuple[str, ...]) -> list[str]:
    """The files of the repo the download takes (huggingface_hub's allow/ignore patterns, fnmatch as it does)."""
    return [p for p in paths if (not allow or any(fnmatch.fnmatch(p, a) for a in allow))
            and not any(fnmatch.fnmatch(p, i) for i in ignore)]


def plan_hub(spec: Any, endpoint: str, memory: Memory, context: int | None = None, token: str | None = None,
             ) -> EnginePlan:
    """A Hub repo as deploys/model.py names it (labwright.models.spec.ModelSpec): its listing and config.json only."""
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError

    from labwright.models import fetch

    label = f"{spec.repo}@{spec.revision}"
    # Asked first with the standard library, once and bounded: huggingface_hub retries a refused connection five
    # times with back-off (~25 s) and raises its HTTP client's own error type.
    try:
        asked = fetch.preflight({"repo": spec.repo, "revision": spec.revision, "file": spec.file}, endpoint,
                                timeout=15)
    except fetch.Refused as exc:
        raise BadInput(f"engine auto: {exc} (nothing was deployed)") from None
    if not asked:
        raise BadInput(f"engine auto: {label}: the Hub at {endpoint} could not be asked; check the network, or set "
                       "HF_ENDPOINT / --endpoint to a mirror you can reach (nothing was deployed)")
    unreadable: tuple[type[BaseException], ...] = (HfHubHTTPError, OSError, ValueError, *fetch._transport_errors())
    api = HfApi(endpoint=endpoint, token=token)
    try:
        files = {f.path: int(f.size or 0) for f in api.list_repo_tree(spec.repo, revision=spec.revision,
                                                                      recursive=True)
                 if getattr(f, "size", None) is not None and not hasattr(f, "tree_id")}
    except unreadable as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput(f"engine auto: {label} cannot be read from {endpoint}: {first} (nothing was deployed)") from None
    if spec.file:
        if spec.file not in files:
            raise BadInput(f"model_file: {spec.file!r} is not in {label} (nothing was deployed)")
        if not spec.file.lower().endswith(".gguf"):
            raise BadInput(f"engine auto: model_file {spec.file!r} of {label} is not a GGUF; drop model_file to "
                           "take the repo's directory (nothing was deployed)")
        if context:
            raise BadInput(f"engine auto: --context for {label}'s GGUF needs the file's own header: fetch it first "
                           "(`labwright model fetch`) and plan the local .gguf (nothing was deployed)")
        fit = _fit(memory, weights=files[spec.file], weight_format="gguf")
        return choose(replace(fit, format_reason="model_file is a .gguf", weight_files=(spec.file,)), label, memory)
    kept = _kept(sorted(files), spec.allow, spec.ignore)
    ggufs = [p for p in kept if p.lower().endswith(".gguf")]
    if ggufs:
        raise BadInput(f"model_file: {label} holds GGUF files ({', '.join(ggufs[:3])}): name the one to serve with "
                       "model_file (nothing was deployed)")
    weights = [p for p in kept if p.endswith(".safetensors") and not Path(p).name.startswith("consolidated")]
    if not weights:
        raise BadInput(f"engine auto: {label} has no .safetensors or .gguf weights among the files it would download"
                       " (model_allow / model_ignore); nothing was deployed")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = None
        for name in ("config.json", "quantization_config.json"):
            if name in files:
                try:
                    got = hf_hub_download(spec.repo, name, revision=spec.revision, endpoint=endpoint, token=token,
                                          local_dir=folder)
                except unreadable as exc:
                    raise BadInput(f"engine auto: {label}: {name} cannot be read: {fetch._one_line(exc)} (nothing was "
                                   "deployed)") from None
                config = Path(got) if name == "config.json" else config

        from labwright.tuning.model_dir import detect_format

        try:
            config_doc = loads_json(config.read_text()) if config else None
        except ValueError:
            raise BadInput(f"engine auto: {label}: config.json is not JSON (nothing was deployed)") from None
        fmt, reason = detect_format(folder, config_doc if isinstance(config_doc, dict) else None, False)
        _refuse_format(label, fmt, reason)
        fit = _fit(memory, weights=sum(files[p] for p in weights), config=config, weight_format=fmt,
                   context=context)
    return choose(replace(fit, format_reason=reason, weight_files=tuple(weights)), label, memory)



def memory_of(gpus: list[dict[str, Any]] | None, ram_mb: float | None, unified: bool) -> Memory:
    """A host's Memory from its facts: the largest GPU nvidia-smi reports (labwright.facts.nvidia.NvidiaGpus; a
    per-GPU figure, as vLLM's --cpu-offload-gb is), RAM from pyinfra's Memory fact (MB); ``unified``: the data's
    ``unified_memory`` (nvidia-smi reports no memory of its own there: the pool is the RAM)."""
    mib = max((int(g.get("memory_mib") or 0) for g in gpus or []), default=0)
    ram = int(ram_mb * 1024 * 1024) if ram_mb else None
    if unified:
        return Memory(vram=ram or mib * 1024 * 1024, unified=True)
    return Memory(vram=mib * 1024 * 1024, ram=ram)


def plan_for_data(data: dict[str, Any], memory: Memory) -> EnginePlan:
    """``engine: auto``: the plan for the model a host's data names with deploys/model.py's keys (``model_repo`` ...
    or a ``model`` table), read from its Hub (``model_endpoint``; HF_TOKEN from the environment)."""
    import os

    from labwright.models.deploy_data import planned_model

    planned = planned_model(data)
    if planned is None:
        raise BadInput("engine: auto needs the model, named with deploys/model.py's keys: model_repo (and model_file "
                       "for a GGUF), e.g. model_repo=Qwen/Qwen3-8B-AWQ (nothing was deployed)")
    return plan_hub(planned.spec, planned.endpoint, memory, token=os.environ.get("HF_TOKEN") or None)
