"""Several models on one guest: llama-server's router mode, as pure logic (the model list, each model's fit, the
preset file, the command line, the unit).

``llamacpp_models`` names the GGUF files (on the guest) one llama-server serves; the server starts with none loaded,
loads a model the first time a request names it (its ``"model"`` field) and unloads the least recently used one when
more than ``--models-max`` would run at once. Router mode is in the llama.cpp labwright builds (the one vendored in
llama-cpp-python 0.3.36): tools/server/README.md "Using multiple models" (``--models-preset``, ``--models-max``,
``--models-autoload``; a preset section per model, ``model = /path``), tools/server/server-models.cpp (each model
is a child llama-server on 127.0.0.1 at a free port, spawned from /proc/self/exe with the router's own arguments
minus host, port, API key and alias; LRU unload at ``models_max``).

Each model is fit-checked as ``labwright kv fit`` checks one (labwright.tuning.fit_model: the file's size as its
weights, the KV of ``llamacpp_ctx_size`` at ``llamacpp_cache_type_k/v`` read from the GGUF's own header, the
engine's overhead) against the guest's largest GPU and its RAM before anything is installed; ``--models-max`` is how
many of them fit at once (the largest ones counted, since any of them may be the ones loaded). Every refusal is one
line naming ``llamacpp_models``.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pyinfra.api.exceptions import DeployError

from labwright.errors import LabwrightError
from labwright.tuning.fit import FitResult
from labwright.tuning.units import GIB, gib

KEY = "llamacpp_models"
#: What a router section (the id requests name) may be: INI-safe, URL-safe, no spaces.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
#: How much of a GGUF's start the guest sends for the fit: the metadata and tensor table (a 256K-token vocabulary is
#: ~6 MB of it); the rest of the file stays there.
HEAD_BYTES = 16 * 1024 * 1024
#: The keys that name the one model of a single-model server: with a list, one of them would be ignored.
SINGLE_MODEL_KEYS = ("llamacpp_model", "llamacpp_alias", "model_repo", "model")


def fail(message: str) -> DeployError:
    return DeployError(f"{KEY}: {message} (nothing was changed)")


@dataclass(frozen=True)
class RouterModel:
    """One model of the list: the id requests name (its preset section) and its GGUF on the guest."""

    name: str
    path: str


def _entry(item: Any, index: int) -> RouterModel:
    if isinstance(item, Mapping):
        unknown = sorted(set(map(str, item)) - {"path", "name"})
        if unknown:
            raise fail(f"entry {index + 1} has {', '.join(unknown)}: an entry is a GGUF path on the guest, or a table "
                       "{ path = \"/srv/models/a.gguf\", name = \"a\" }")
        path, name = item.get("path"), item.get("name")
    else:
        path, name = item, None
    if not isinstance(path, str) or not path.strip():
        raise fail(f"entry {index + 1} ({item!r}) names no GGUF: give its absolute path on the guest, e.g. "
                   "/srv/models/a.gguf")
    path = path.strip()
    if not PurePosixPath(path).is_absolute() or re.search(r"[\s;|&<>$`'\"\\]", path):
        raise fail(f"{path!r} must be an absolute path on the guest without spaces, quotes or shell characters")
    if name is None:
        name = PurePosixPath(path).name
        name = name[:-5] if name.lower().endswith(".gguf") else name
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise fail(f"{name!r} ({path}) is not a model name requests can carry: letters, digits, . _ : - (at most 64); "
                   "give one with { path = ..., name = ... }")
    return RouterModel(name, path)


def models_of(data: Mapping[str, Any]) -> list[RouterModel] | None:
    """``llamacpp_models`` read and checked (None when the host has none: one model, as before). A list, or one
    string of paths separated by commas (``--data llamacpp_models=/srv/models/a.gguf,/srv/models/b.gguf``)."""
    if KEY not in data:
        if data.get("llamacpp_fit_overhead_gb") is not None:
            raise DeployError("llamacpp_fit_overhead_gb: only the fit of llamacpp_models reads it (one model is not "
                              "fit-checked by the deploy: `labwright kv fit --overhead-gb`); drop it (nothing was "
                              "changed)")
        return None
    value = data[KEY]
    if isinstance(value, str):
        value = [word.strip() for word in value.split(",") if word.strip()]
    if isinstance(value, Mapping) or not isinstance(value, Sequence):
        raise fail(f"{value!r} is not a list of GGUF paths on the guest")
    if not value:
        raise fail("the list is empty: name at least one GGUF on the guest, e.g. "
                   "llamacpp_models=/srv/models/a.gguf,/srv/models/b.gguf; or drop the key to serve llamacpp_model")
    given = [key for key in SINGLE_MODEL_KEYS if data.get(key) not in (None, "")]
    if given:
        raise fail(f"{given[0]} names one model as well: the router serves the list only; drop {given[0]} (put its "
                   "file in the list)")
    models = [_entry(item, index) for index, item in enumerate(value)]
    seen: dict[str, RouterModel] = {}
    for model in models:
        if model.name in seen:
            first = seen[model.name]
            same = " (the same file twice)" if first.path == model.path else ""
            raise fail(f"two models are named {model.name!r}: {first.path} and {model.path}{same}; give one another "
                       "name with { path = ..., name = ... }, or drop one")
        seen[model.name] = model
    return models


@dataclass(frozen=True)
class ModelFit:
    model: RouterModel
    fit: FitResult

    @property
    def line(self) -> str:
        f = self.fit
        kv = "" if f.kv else " (KV not counted: llamacpp_ctx_size 0)"
        return f"{self.model.name} ({self.model.path}): {f.text}: needs {gib(f.need)}{kv}"


def fit_one(model: RouterModel, size: int, head: bytes, memory: Any, context: int, cache: str,
            overhead: int | None = None) -> ModelFit:
    """``kv fit`` for one model: ``size`` is the file's size on the guest, ``head`` its first bytes (the header; the
    rest of the file is a hole of the right length here, so the header's own size check holds), ``memory`` a
    labwright.models.engine_plan.Memory, ``context`` llamacpp_ctx_size (0: not counted), ``cache`` "K,V" cache types,
    ``overhead`` bytes per model (None: data/fit.toml's measured llama.cpp overhead, as ``kv fit`` takes it).
    A model that fits nowhere is one line naming it and the fix."""
    from labwright.tuning.fit_model import FitRequest, fit_model
    from labwright.tuning.kv_modes import ggml_type

    with tempfile.TemporaryDirectory(prefix="lw-router-") as tmp:
        local = Path(tmp) / "model.gguf"
        local.write_bytes(head)
        try:
            os.truncate(local, size)
        except OSError:  # past this file system's largest file (ext4: 16 TiB): the header's check needs only what
            os.truncate(local, max(len(head), min(size, 1 << 40)))  # its tensor table names, and weights are `size`
        vram, ram = memory.vram, (0 if memory.unified else memory.ram)
        try:
            fit = fit_model(FitRequest(vram=vram, ram=ram, weights=size, config=local, context=context or None,
                                       spec=ggml_type(cache, "llamacpp"), weight_format="gguf", overhead=overhead,
                                       cpu=not vram and not memory.unified))
        except LabwrightError as exc:
            text = str(exc).replace(str(local), model.path)
            raise fail(f"{model.name} ({model.path}): {text}") from None
    if fit.verdict == "no_fit":
        why = "; ".join(fit.warnings)
        why = why if why.startswith("needs ") else f"needs {gib(fit.need)}; {why}"
        raise fail(f"{model.name} ({model.path}) does not fit on {memory.describe()}: {why} "
                   f"(llamacpp_cache_type_k/v, llamacpp_ctx_size; {gib(fit.overhead)} of it is the engine's overhead: "
                   "llamacpp_fit_overhead_gb if yours is measured smaller), or drop it from the list")
    return ModelFit(model, fit)


def overhead_of(data: Mapping[str, Any]) -> int | None:
    """``llamacpp_fit_overhead_gb``: each model's memory beyond weights and KV (GiB, as ``kv fit --overhead-gb``);
    None (not given, or auto): data/fit.toml's, measured on a 27B model with CUDA; a small model on a CPU needs less."""
    value = data.get("llamacpp_fit_overhead_gb")
    if value is None or str(value).strip().lower() in ("", "auto"):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if isinstance(value, bool) or not 0 <= number <= 1024:
        raise DeployError(f"llamacpp_fit_overhead_gb: {value!r} is not auto or a size in GiB (0..1024), e.g. 0.5 "
                          "(nothing was changed)")
    return int(number * GIB)


def models_max(fits: Sequence[ModelFit], memory: Any) -> tuple[int, str]:
    """How many models may run at once, and the memory that says so: the most of the largest ones (by need) that
    fit together, in VRAM when every one fits there, else in VRAM and RAM together (RAM alone without a GPU)."""
    in_vram = bool(memory.vram) and all(f.fit.verdict == "fits" for f in fits)
    budget = memory.vram if in_vram or memory.unified else memory.vram + (memory.ram or 0)
    if not memory.unified and not in_vram and memory.ram is None:
        return len(fits), "RAM not known: every model"
    needs = sorted((f.fit.need for f in fits), reverse=True)
    count, total = 0, 0
    for need in needs:
        if total + need > budget:
            break
        count, total = count + 1, total + need
    where = "VRAM" if in_vram else ("unified memory" if memory.unified else
                                    ("RAM" if not memory.vram else "VRAM + RAM"))
    return max(count, 1), f"{where} {gib(budget)}"


def render_preset(models: Sequence[RouterModel]) -> str:
    """The ``--models-preset`` INI: one section per model (its id), ``model`` its path; nothing loaded at start."""
    lines = ["; Managed by labwright deploys/llamacpp.py (llamacpp_models); local edits are replaced on the next run.",
             "version = 1", ""]
    for model in models:
        lines += [f"[{model.name}]", f"model = {model.path}", "load-on-startup = false", ""]
    return "\n".join(lines)


def preset_path(service: str) -> str:
    return f"/etc/{service}/models.ini"


def router_command(binary: str, preset: str, count: int, flags: dict[str, Any], extra: list[str],
                   api_key_file: str = "") -> list[str]:
    """llama-server's argv in router mode: no ``--model``/``--alias``, the preset and ``--models-max``, the key file,
    then the flags every model instance inherits (labwright.llamacpp.deploy_data.command_line's form)."""
    from labwright.llamacpp.deploy_data import command_line

    single = command_line(binary, "", "", flags, extra, api_key_file)
    rest = single[3:]  # binary, --model, ""
    return [binary, "--models-preset", preset, "--models-max", str(count), *rest]


def render_unit(settings: Any, models: Sequence[RouterModel], count: int) -> str:
    """The unit of a labwright.llamacpp.deploy_data.LlamacppSettings, running the router instead of one model."""
    from labwright.llamacpp.deploy_data import JINJA, systemd_quote

    argv = router_command(settings.binary, preset_path(settings.service), count, settings.flags, settings.extra,
                          settings.key_file)
    return JINJA.get_template("llama-server.service.j2").render(
        model="router: " + ", ".join(m.name for m in models), user=settings.user,
        exec_start=" ".join(systemd_quote(word) for word in argv), restart=settings.restart,
        restart_sec=settings.restart_sec, environment=dict(settings.environment))

