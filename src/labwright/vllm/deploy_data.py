"""labwright.deploys.vllm's host data: defaults, checks (one line naming the key each), the command line and unit.

Pure: no pyinfra here, so the rules are unit-tested directly. Data keys are ``vllm_<key>`` (flat, as ``--data``
gives them) or ``<key>`` inside a ``vllm`` dict of inventory data; the flat one wins. The defaults and their meaning
are templates/vllm/defaults.toml.

The command line is ``vllm serve MODEL`` with these flags, each as vLLM 0.33.0 (PyPI sdist vllm-0.33.0.tar.gz, sha256
f4c33c25...; the v0.33.0 tag) defines it:

- ``model_tag`` (positional) and ``--host`` / ``--port``: vllm/entrypoints/common/cli_args.py 438-443 and 290-295
  (FrontendArgs; earlier releases kept this file at vllm/entrypoints/openai/cli_args.py);
- ``--served-model-name`` 1030-1032, ``--max-model-len`` 991, ``--enforce-eager`` 1000, ``--tensor-parallel-size``
  1208-1210, ``--gpu-memory-utilization`` 1388-1393, ``--kv-cache-dtype`` 1397 (its choices: vllm/config/cache.py
  44-67, CacheDType), ``--cpu-offload-gb`` / ``--cpu-offload-params`` 1470-1473: vllm/engine/arg_utils.py;
- the key: not ``--api-key`` (a command line every user of the host can read in /proc) but ``VLLM_API_KEY``
  (vllm/envs.py 829), which vllm/entrypoints/serve/middleware/register.py 32-36 takes when ``--api-key`` is absent.
  It guards only paths under ``/v1``, ``/v2``, ``/inference`` and ``/cohere``
  (vllm/entrypoints/serve/middleware/authenticate.py, GUARDED_PREFIX): ``/health`` and ``/metrics`` answer without it.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any

from jinja2 import Environment

from labwright import deploy_data, paths
from labwright.deploy_data import StackEngineSettings, stack_engine_values
from labwright.engine_keys import is_loopback
from labwright.errors import BadInput
from labwright.models.deploy_data import ModelSettings, engine_model
from labwright.schema import checks
from labwright.shell import join

if TYPE_CHECKING:
    from labwright.schema.model import Schema

TEMPLATES = paths.templates_dir("vllm")
#: vllm/config/cache.py 44-67 (CacheDType), the ones a labwright deploy offers (the rest are model-specific).
KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
GPU_MODES = ("auto", "check", "required", "off")
#: uvicorn's line once the server answers (vLLM serves through uvicorn).
STARTUP_LINE = "Application startup complete"
#: Flags labwright sets itself (or refuses: the key never goes on a command line).
OWN_FLAGS = ("--host", "--port", "--served-model-name", "--api-key", "--model", "--max-model-len",
             "--gpu-memory-utilization", "--kv-cache-dtype", "--cpu-offload-gb", "--cpu-offload-params",
             "--tensor-parallel-size", "-tp", "--enforce-eager", "--uds", "--ssl-keyfile", "--ssl-certfile")


def load_defaults() -> dict[str, dict[str, Any]]:
    return tomllib.loads((TEMPLATES / "defaults.toml").read_text())


def jinja() -> Environment:
    return deploy_data.jinja(TEMPLATES)


def fail(key: str, message: str) -> BadInput:
    return BadInput(f"vllm_{key}: {message}")


def gpu_mode(value: Any) -> str:
    gpu = str(value).strip().lower()
    if gpu not in GPU_MODES:
        raise ValueError(f"{gpu[:80]!r} is not one of {', '.join(GPU_MODES)}")
    return gpu


def utilization(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{str(value)[:80]!r} is not a number") from None
    if not 0 < number <= 1 or not math.isfinite(number):
        raise ValueError(f"{number:g}: give a fraction above 0, at most 1 (vLLM's gpu_memory_utilization)")
    return number


def offload_gb(value: Any) -> str:
    """``auto`` or GiB (a whole or decimal number >= 0), as text for the command line."""
    text = str(value).strip().lower()
    if text == "auto":
        return text
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"{text[:80]!r} is neither auto nor a number of GiB") from None
    if number < 0 or not math.isfinite(number):
        raise ValueError(f"{text!r}: give 0 or more GiB (or auto)")
    return f"{number:g}"


def offload_params(value: Any) -> str:
    """``auto``, "" or parameter name segments (vllm/config/offload.py 34-44: "experts" matches mlp.experts.*)."""
    if isinstance(value, str) and checks.control_character(value):  # split() would read \x0b as a separator
        raise ValueError(f"{value[:80]!r} holds a control character: give auto, or parameter name segments")
    items = value if isinstance(value, list) else str(value).replace(",", " ").split(" ")
    items = [item for item in items if item != ""] if not isinstance(value, list) else items
    if items == ["auto"]:
        return "auto"
    if not all(isinstance(i, str) and re.fullmatch(r"[A-Za-z0-9_.]+", i) for i in items):
        raise ValueError(f"{str(value)[:80]!r}: give auto, or parameter name segments such as experts")
    return " ".join(items)


def extra_args(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(a, str) and "\n" not in a and a for a in value):
        raise ValueError("must be a list of command-line words, e.g. [\"--max-num-seqs\", \"8\"]")
    for word in value:
        flag = word.split("=", 1)[0]
        if flag in OWN_FLAGS:
            raise ValueError(f"{flag} is set by the deploy's own keys (or, for --api-key, never on a command line); "
                             "use vllm_<key>")
    return list(value)


@cache
def data_schema() -> type[Schema]:
    """The ``vllm_*`` keys (``stack`` first, then defaults.toml's order), typed: vLLM's own here, the rest as every
    stack engine's (labwright.deploy_data.stack_engine_schema)."""
    from pydantic import BeforeValidator

    from labwright.schema.fields import Flag, KeyFile

    def typed(check: Callable[[Any], Any]) -> Any:
        return BeforeValidator(check)

    return deploy_data.stack_engine_schema("VllmData", ["stack", *deploy_data.defaults_keys(load_defaults())], {
        "gpu": Annotated[str, typed(gpu_mode)],
        "api_key_file": KeyFile,
        "expose": Flag,
        "model": Annotated[str, typed(checks.or_empty(checks.abs_path))],
        "served_model_name": Annotated[str, typed(checks.or_empty(checks.line))],
        "max_model_len": Annotated[int, typed(checks.whole(0))],
        "gpu_memory_utilization": Annotated[float, typed(utilization)],
        "kv_cache_dtype": Annotated[str, typed(checks.one_of(*KV_CACHE_DTYPES))],
        "cpu_offload_gb": Annotated[str, typed(offload_gb)],
        "cpu_offload_params": Annotated[str, typed(offload_params)],
        "tensor_parallel_size": Annotated[int, typed(checks.whole(1))],
        "enforce_eager": Flag,
        "extra_args": Annotated[list[str], typed(extra_args)],
    })


@dataclass(frozen=True)
class Settings(StackEngineSettings):
    """Everything deploys/vllm.py needs, checked: what every stack engine reads (StackEngineSettings) and vLLM's
    own."""

    api_key_file: str
    expose: bool
    model: str
    served_model_name: str
    max_model_len: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    cpu_offload_gb: str
    cpu_offload_params: str
    tensor_parallel_size: int
    enforce_eager: bool
    extra_args: list[str] = field(default_factory=list)

    @property
    def env_file(self) -> str:
        """VLLM_API_KEY=<the key>, made on the host from the key file (0600 root: systemd reads it, not the user)."""
        return f"{self.api_key_file}.env"

    def offload(self, planned_gb: int = 0, planned_params: str = "") -> tuple[str, str]:
        """(--cpu-offload-gb, --cpu-offload-params) values: ``auto`` takes engine auto's plan (kv fit's verdict)."""
        gb = str(planned_gb) if self.cpu_offload_gb == "auto" else self.cpu_offload_gb
        params = planned_params if self.cpu_offload_params == "auto" else self.cpu_offload_params
        return gb, (params if gb not in ("0", "") else "")

    def command(self, planned_gb: int = 0, planned_params: str = "") -> list[str]:
        """``vllm serve`` and its flags (the module docstring cites each)."""
        words = [f"{self.venv}/bin/vllm", "serve", self.model, "--served-model-name", self.served_model_name,
                 "--host", self.host, "--port", str(self.port),
                 "--gpu-memory-utilization", f"{self.gpu_memory_utilization:g}",
                 "--kv-cache-dtype", self.kv_cache_dtype]
        if self.max_model_len:
            words += ["--max-model-len", str(self.max_model_len)]
        if self.tensor_parallel_size > 1:
            words += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        if self.enforce_eager:
            words.append("--enforce-eager")
        gb, params = self.offload(planned_gb, planned_params)
        if gb not in ("0", ""):
            words += ["--cpu-offload-gb", gb]
            if params:
                words += ["--cpu-offload-params", *params.split()]
        return words + self.extra_args

    def render_unit(self, planned_gb: int = 0, planned_params: str = "") -> str:
        # systemd splits ExecStart like a shell and expands $ and %: every word quoted, % doubled
        exec_start = join(self.command(planned_gb, planned_params)).replace("%", "%%").replace("$", "$$")
        return jinja().get_template("vllm.service.j2").render(**asdict(self), env_file=self.env_file,
                                                               exec_start=exec_start)


def settings_from(data: Mapping[str, Any]) -> Settings:
    """Check host data (``vllm_<key>``, the ``vllm`` dict, ``stack``) against the defaults."""
    checked = stack_engine_values(data, "vllm", load_defaults(), data_schema(), nested_example='{"port": 8001}',
                                  conflicts=("port", "venv"))
    if not checked["model"]:
        raise fail("model", "is required: the model directory on the guest (e.g. /srv/models/Qwen3-8B-AWQ), or name "
                   "the model with deploys/model.py's keys (model_repo=...) to have it downloaded (nothing was "
                   "changed)")
    if not is_loopback(checked["host"]) and not checked["expose"]:
        raise fail("host", f"{checked['host']} would put /health and /metrics on the network without a key (vLLM's "
                   "--api-key / VLLM_API_KEY guards only /v1, /v2, /inference and /cohere); keep 127.0.0.1 behind "
                   "the gateway, or set vllm_expose=true to accept that (nothing was changed)")
    if checked["cpu_offload_params"] not in ("auto", "") and checked["cpu_offload_gb"] == "0":
        raise fail("cpu_offload_params", f"{checked['cpu_offload_params']!r} with vllm_cpu_offload_gb=0 offloads "
                   "nothing: give vllm_cpu_offload_gb N (GiB per GPU) or drop vllm_cpu_offload_params")
    name = checked["served_model_name"] or PurePosixPath(checked["model"]).name
    return Settings(
        **deploy_data.stack_engine_settings(checked), api_key_file=checked["api_key_file"], expose=checked["expose"],
        model=checked["model"], served_model_name=name, max_model_len=checked["max_model_len"],
        gpu_memory_utilization=checked["gpu_memory_utilization"], kv_cache_dtype=checked["kv_cache_dtype"],
        cpu_offload_gb=checked["cpu_offload_gb"], cpu_offload_params=checked["cpu_offload_params"],
        tensor_parallel_size=checked["tensor_parallel_size"], enforce_eager=checked["enforce_eager"],
        extra_args=checked["extra_args"],
    )


def downloaded_model(data: Mapping[str, Any]) -> tuple[dict[str, Any], ModelSettings | None]:
    """The host data with ``vllm_model`` pointing at the directory deploys/model.py's keys download (``model_repo``
    ..., or a ``model`` table), and that download's settings; the data as given and None when no model is named. A
    ``vllm_model`` naming another place as well is refused (one of the two would be ignored)."""
    planned = engine_model(data, "vLLM", gguf=False)
    if planned is None:
        return dict(data), None
    nested = data.get("vllm") if isinstance(data.get("vllm"), Mapping) else {}
    given = data.get("vllm_model", nested.get("model") if nested else None)
    if given not in (None, "") and str(given).strip().rstrip("/") != planned.path:
        raise BadInput(f"vllm_model: {given!r} and model_repo {planned.spec.repo} both name the model: drop vllm_model "
                       f"(the download lands in {planned.path}) or the model_* keys")
    return {**data, "vllm_model": planned.path}, planned
