"""labwright.deploys.tabbyapi's host data: defaults, checks (one line naming the key each), and the rendered files.

Pure: no pyinfra here, so the rules are unit-tested directly. Data keys are ``tabbyapi_<key>`` (flat, as
``--data`` gives them) or ``<key>`` inside a ``tabbyapi`` dict of inventory data; the flat one wins. The defaults
and their meaning are templates/tabbyapi/defaults.toml.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any

import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from labwright import deploy_data, paths
from labwright.deploy_data import StackEngineSettings, stack_engine_values
from labwright.errors import BadInput
from labwright.models.deploy_data import ModelSettings, engine_model
from labwright.schema import checks

if TYPE_CHECKING:
    from labwright.schema.model import Schema

TEMPLATES = paths.templates_dir("tabbyapi")
PAGE = 256  # exllamav3's KV cache page: cache_size is allocated in whole pages
LEGACY_CACHE_MODES = ("FP16", "Q4", "Q6", "Q8")
MANAGED_SECTIONS = ("network", "model", "draft_model", "memory")
HEX_REF = re.compile(r"^[0-9a-f]{7,40}$")
REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
GPU_MODES = ("auto", "check", "required", "off")
# tabbyAPI's own log lines (uvicorn's startup line; exllamav3's allocation failure, tabbyAPI's backends/exllamav3).
STARTUP_LINE = "Application startup complete"
OOM_LINE = "Insufficient VRAM in split for model and cache"


def load_defaults() -> dict[str, dict[str, Any]]:
    return tomllib.loads((TEMPLATES / "defaults.toml").read_text())


def jinja() -> Environment:
    return Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined, trim_blocks=True,
                       lstrip_blocks=True, keep_trailing_newline=True)


def fail(key: str, message: str) -> BadInput:
    return BadInput(f"tabbyapi_{key}: {message}")


def round_cache_size(value: int) -> int:
    """Up to the next multiple of the 256-token page (tabbyAPI refuses anything else)."""
    return -(-value // PAGE) * PAGE


def cache_mode(value: Any) -> str:
    """FP16, Q4/Q6/Q8 (legacy), or "K,V" with 2..8 bits each, as tabbyAPI's config takes it (ValueError: why not)."""
    text = str(value).strip().replace(" ", "")
    if text.upper() in LEGACY_CACHE_MODES:
        return text.upper()
    fix = 'use "K,V" bits from 2 to 8 such as "8,4" (field note 001) or "4,4", or FP16/Q4/Q6/Q8'
    match = re.fullmatch(r"(?a)(\d+),(\d+)", text)
    if not match:
        raise ValueError(f"{str(value)[:80]!r} is not a cache mode: {fix}")
    bits = [int(b) for b in match.groups()]
    if not all(2 <= b <= 8 for b in bits):
        raise ValueError(f"{str(value)!r}: each of K and V takes 2 to 8 bits; {fix}")
    return f"{bits[0]},{bits[1]}"


def check_cache_mode(value: Any) -> str:
    """:func:`cache_mode`, refused as ``tabbyapi_cache_mode: ...`` (BadInput)."""
    try:
        return cache_mode(value)
    except ValueError as error:
        raise fail("cache_mode", str(error)) from None


def git_ref(value: Any) -> str:
    ref = checks.line(value)
    if not REF.match(ref) or ".." in ref:
        raise ValueError(f"{ref!r} is not a git tag, branch or commit name")
    return ref


git_url = checks.git_url  # the one check of a git URL (schema.checks): no credentials, no fragment, no option


apt_packages = checks.debian_packages  # the one reading of a package list (schema.checks)


def gpu_mode(value: Any) -> str:
    gpu = checks.line(str(value)).lower()  # no control character (str.strip() would take \x0b away unseen)
    gpu = "required" if gpu in TRUE else "off" if gpu in FALSE else gpu
    if gpu not in GPU_MODES:
        raise ValueError(f"{gpu[:80]!r} is not one of {', '.join(GPU_MODES)}")
    return gpu


def model_name(value: Any) -> str:
    name = checks.line(value)
    if not name or "/" in name or name in (".", "..") or len(name.encode()) > 255:
        raise ValueError(f"{name[:80]!r} must be the model's directory name under model_dir")
    return name


def context_length(value: Any) -> int:
    number = checks.whole(-1)(value)
    if number == 0:
        raise ValueError("0 is not a context length (-1 takes the model's own)")
    return number


def extra_sections(value: Any) -> dict[str, dict[str, Any]]:
    extra = value or {}
    if not isinstance(extra, Mapping) or not all(isinstance(v, Mapping) for v in extra.values()):
        raise ValueError("must be a dict of config.yml sections, e.g. {\"logging\": {\"log_prompt\": false}}")
    clash = sorted(set(extra) & set(MANAGED_SECTIONS))
    if clash:
        raise ValueError(f"section {clash[0]!r} is set by the deploy's own keys; use tabbyapi_<key> for it")
    return {str(k): dict(v) for k, v in extra.items()}


@cache
def data_schema() -> type[Schema]:
    """The ``tabbyapi_*`` keys (and ``stack``, after ``venv``) in defaults.toml's order, typed: tabbyAPI's own here,
    the rest as every stack engine's (labwright.deploy_data.stack_engine_schema)."""
    from pydantic import BeforeValidator

    from labwright.schema.fields import ManagedDir

    def typed(check: Callable[[Any], Any]) -> Any:
        return BeforeValidator(check)

    keys = deploy_data.defaults_keys(load_defaults())
    keys.insert(keys.index("venv") + 1, "stack")
    return deploy_data.stack_engine_schema("TabbyApiData", keys, {
        "git_url": Annotated[str, typed(git_url)],
        "ref": Annotated[str, typed(git_ref)],
        "dir": ManagedDir,
        "packages": Annotated[list[str], typed(apt_packages)],
        "gpu": Annotated[str, typed(gpu_mode)],
        "model_dir": ManagedDir,
        "model_name": Annotated[str, typed(model_name)],
        "max_seq_len": Annotated[int, typed(context_length)],
        "cache_size": Annotated[int, typed(checks.whole(1))],
        "cache_mode": Annotated[str, typed(cache_mode)],
        "chunk_size": Annotated[int, typed(checks.whole(256))],
        "max_batch_size": Annotated[int, typed(checks.whole(1))],
        "sysmem_recurrent_cache": Annotated[int, typed(checks.whole(0))],
        "draft_model_name": Annotated[str, typed(checks.or_empty(checks.line))],
        "ngram_match_min": Annotated[int, typed(checks.whole(0))],
        "extra": Annotated[dict[str, dict[str, Any]], typed(extra_sections)],
    })


@dataclass(frozen=True)
class Settings(StackEngineSettings):
    """Everything deploys/tabbyapi.py needs, checked: what every stack engine reads (StackEngineSettings) and
    tabbyAPI's own."""

    git_url: str
    ref: str
    source: str
    packages: list[str]
    model_dir: str
    model_name: str
    max_seq_len: int
    cache_size: int
    cache_size_requested: int
    cache_mode: str
    chunk_size: int
    max_batch_size: int
    sysmem_recurrent_cache: int
    draft_model_name: str
    ngram_match_min: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def config_path(self) -> str:
        return f"{self.source}/config.yml"

    @property
    def tokens_path(self) -> str:
        return f"{self.source}/api_tokens.yml"

    @property
    def model_path(self) -> str:
        return f"{self.model_dir}/{self.model_name}"

    @property
    def cache_rounded(self) -> bool:
        return self.cache_size != self.cache_size_requested

    @property
    def cache_note(self) -> str:
        return (f"tabbyapi_cache_size: {self.cache_size_requested} is not a multiple of {PAGE}; rounded up to "
                f"{self.cache_size} (exllamav3 allocates the KV cache in {PAGE}-token pages)")

    @property
    def oom_message(self) -> str:
        """The one line for tabbyAPI's out-of-VRAM start, naming the data key to change."""
        return (f"{self.service}: out of VRAM at start: cache_size {self.cache_size} (cache_mode {self.cache_mode}) "
                f"does not fit beside the model ('{OOM_LINE}'); lower tabbyapi_cache_size (a multiple of {PAGE}) "
                "or use a smaller cache_mode such as 4,4, then re-run; the unit was stopped to end the restart loop")

    def render_config(self) -> str:
        values = asdict(self)
        values["extra"] = yaml.safe_dump(self.extra, default_flow_style=False, sort_keys=False) if self.extra else ""
        return jinja().get_template("config.yml.j2").render(**values)

    def render_unit(self) -> str:
        return jinja().get_template("tabbyapi.service.j2").render(**asdict(self))


def flat_keys(defaults: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """The ``tabbyapi_<key>`` names the deploy reads (the stack's name is ``stack``, not ``tabbyapi_default``)."""
    return set(deploy_data.defaults_keys(defaults))


def settings_from(data: Mapping[str, Any]) -> Settings:
    """Check host data (``tabbyapi_<key>``, the ``tabbyapi`` dict, ``stack``) against the defaults."""
    checked = stack_engine_values(data, "tabbyapi", load_defaults(), data_schema(),
                                  nested_example='{"model_name": "Qwen3-8B-exl3"}',
                                  nested_extra=("git_url", "ref", "dir"), conflicts=("port", "dir", "venv", "root"))
    draft, ngram = checked["draft_model_name"], checked["ngram_match_min"]
    if draft and ngram:
        raise fail("draft_model_name", f"{draft!r} together with n-gram drafting (tabbyapi_ngram_match_min={ngram}): "
                   "exllamav3 asserts 'Cannot use both draft model and n-gram draft'; set tabbyapi_ngram_match_min=0 "
                   "or drop the draft model (nothing was changed)")
    requested = checked["cache_size"]
    return Settings(
        **deploy_data.stack_engine_settings(checked), git_url=checked["git_url"], ref=checked["ref"],
        source=checked["dir"], packages=checked["packages"], model_dir=checked["model_dir"],
        model_name=checked["model_name"],
        max_seq_len=checked["max_seq_len"], cache_size=round_cache_size(requested), cache_size_requested=requested,
        cache_mode=checked["cache_mode"], chunk_size=checked["chunk_size"], max_batch_size=checked["max_batch_size"],
        sysmem_recurrent_cache=checked["sysmem_recurrent_cache"], draft_model_name=draft, ngram_match_min=ngram,
        extra=checked["extra"],
    )


def downloaded_model(data: Mapping[str, Any]) -> tuple[dict[str, Any], ModelSettings | None]:
    """The host data with ``tabbyapi_model_dir`` / ``tabbyapi_model_name`` pointing at the model directory that
    deploys/model.py's keys name (``model_repo`` ..., or a ``model`` table), and that download's settings; the data as
    given and None when no model is named. tabbyapi_model_dir / tabbyapi_model_name (flat or in the ``tabbyapi``
    dict) naming another place as well are refused (BadInput, one line): one of the two would be ignored."""
    planned = engine_model(data, "tabbyAPI", gguf=False)
    if planned is None:
        return dict(data), None
    nested = data.get("tabbyapi") if isinstance(data.get("tabbyapi"), Mapping) else {}
    wanted = {"model_dir": planned.dir, "model_name": planned.spec.name}
    for key, value in wanted.items():
        given = data.get(f"tabbyapi_{key}", nested.get(key) if nested else None)
        if given is not None and str(given).strip().rstrip("/") != value:
            raise BadInput(f"tabbyapi_{key}: {given!r} and model_repo {planned.spec.repo} both name the model: drop "
                           f"tabbyapi_{key} (the download lands in {planned.dir}/{planned.spec.name}) or the model_* "
                           "keys")
    return {**data, "tabbyapi_model_dir": planned.dir, "tabbyapi_model_name": planned.spec.name}, planned
