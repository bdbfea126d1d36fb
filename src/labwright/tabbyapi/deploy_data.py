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
from pathlib import PurePosixPath
from typing import Any

import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from labwright import paths
from labwright.deploy_data import one_value_problem, unknown_key_error
from labwright.errors import BadInput
from labwright.models.deploy_data import ModelSettings, engine_model

TEMPLATES = paths.templates_dir("tabbyapi")
PAGE = 256  # exllamav3's KV cache page: cache_size is allocated in whole pages
LEGACY_CACHE_MODES = ("FP16", "Q4", "Q6", "Q8")
MANAGED_SECTIONS = ("network", "model", "draft_model", "memory")
NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
HEX_REF = re.compile(r"^[0-9a-f]{7,40}$")
REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
GPU_MODES = ("auto", "check", "required", "off")
RESTART_POLICIES = ("no", "on-success", "on-failure", "on-abnormal", "on-watchdog", "on-abort", "always")
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


def check_cache_mode(value: Any) -> str:
    """FP16, Q4/Q6/Q8 (legacy), or "K,V" with 2..8 bits each, as tabbyAPI's config takes it."""
    text = str(value).strip().replace(" ", "")
    if text.upper() in LEGACY_CACHE_MODES:
        return text.upper()
    fix = 'use "K,V" bits from 2 to 8 such as "8,4" (field note 001) or "4,4", or FP16/Q4/Q6/Q8'
    match = re.fullmatch(r"(\d+),(\d+)", text)
    if not match:
        raise fail("cache_mode", f"{str(value)!r} is not a cache mode: {fix}")
    bits = [int(b) for b in match.groups()]
    if not all(2 <= b <= 8 for b in bits):
        raise fail("cache_mode", f"{str(value)!r}: each of K and V takes 2 to 8 bits; {fix}")
    return f"{bits[0]},{bits[1]}"


def as_int(key: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool):
        raise fail(key, f"{value!r} is not a whole number")
    try:
        number = int(str(value).strip())
    except ValueError:
        raise fail(key, f"{value!r} is not a whole number") from None
    if number < low or (high is not None and number > high):
        raise fail(key, f"{number} is out of range ({low}..{'' if high is None else high})")
    return number


def as_path(key: str, value: Any) -> str:
    text = str(value).strip()
    if not PurePosixPath(text).is_absolute() or "\n" in text:
        raise fail(key, f"{value!r} must be an absolute path on the guest")
    return text.rstrip("/") or "/"


@dataclass(frozen=True)
class Settings:
    """Everything deploys/tabbyapi.py needs, checked."""

    git_url: str
    ref: str
    source: str
    venv: str
    stack: str
    wheelhouse: str
    torch: str
    stacks_root: str
    keep: int
    base_python: str
    installer: str
    service: str
    user: str
    packages: list[str]
    restart: str
    restart_sec: int
    health_timeout: int
    gpu: str
    nvidia_root: str
    host: str
    port: int
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
    def local_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"

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
    return {key for section in defaults.values() for key in section} - {"default"}


def settings_from(data: Mapping[str, Any]) -> Settings:
    """Check host data (``tabbyapi_<key>``, the ``tabbyapi`` dict, ``stack``) against the defaults."""
    defaults = load_defaults()
    nested = data.get("tabbyapi") or {}
    if not isinstance(nested, Mapping):
        raise BadInput("tabbyapi: must be a dict of settings, e.g. {\"model_name\": \"Qwen3-8B-exl3\"}")
    known = {key for section in defaults.values() for key in section} | {"git_url", "ref", "dir", "stack"}
    for key in nested:
        if key not in known:
            raise BadInput(f"tabbyapi: unknown key {key!r} (see templates/tabbyapi/defaults.toml)")
    error = unknown_key_error(data, "tabbyapi", flat_keys(defaults), "templates/tabbyapi/defaults.toml")
    if error is not None:
        raise error

    def get(section: str, key: str) -> Any:
        flat = data.get(f"tabbyapi_{key}")
        value = flat if flat is not None else nested.get(key)
        if value is None:
            return defaults[section][key]
        problem = one_value_problem(value, defaults[section][key])
        if problem is not None:
            raise fail(key, problem)
        return value

    src: Callable[[str], Any] = lambda key: get("source", key)  # noqa: E731
    stk: Callable[[str], Any] = lambda key: get("stack", key)  # noqa: E731
    svc: Callable[[str], Any] = lambda key: get("service", key)  # noqa: E731
    cfg: Callable[[str], Any] = lambda key: get("config", key)  # noqa: E731

    ref = str(src("ref")).strip()
    if not REF.match(ref) or ".." in ref:
        raise fail("ref", f"{ref!r} is not a git tag, branch or commit name")
    git_url = str(src("git_url")).strip()
    if not git_url or any(c in git_url for c in " \n'\""):
        raise fail("git_url", f"{git_url!r} is not a git URL")
    stack = str(data.get("stack") or nested.get("stack") or defaults["stack"]["default"]).strip()
    service, user = str(svc("service")), str(svc("user"))
    for key, value in (("service", service), ("user", user)):
        if not NAME.match(value) or value == "root":
            raise fail(key, f"{value!r} is not a valid name (lowercase letters, digits, _ and -; not root)")
    packages = svc("packages")
    if isinstance(packages, str):
        packages = [p for p in re.split(r"[,\s]+", packages) if p]
    if not isinstance(packages, list) or not all(isinstance(p, str) and re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", p)
                                                 for p in packages):
        raise fail("packages", f"{packages!r} is not a list of Debian package names")
    gpu = str(svc("gpu")).strip().lower()
    if gpu in TRUE:
        gpu = "required"
    elif gpu in FALSE:
        gpu = "off"
    if gpu not in GPU_MODES:
        raise fail("gpu", f"{gpu!r} is not one of {', '.join(GPU_MODES)}")
    host = str(cfg("host")).strip()
    if not re.fullmatch(r"[A-Za-z0-9.:-]+", host):
        raise fail("host", f"{host!r} is not an address to listen on")
    model_name = str(cfg("model_name")).strip()
    if not model_name or "/" in model_name or model_name in (".", "..") or len(model_name.encode()) > 255:
        raise fail("model_name", f"{model_name[:80]!r} must be the model's directory name under model_dir")
    max_seq_len = as_int("max_seq_len", cfg("max_seq_len"), -1)
    if max_seq_len == 0:
        raise fail("max_seq_len", "0 is not a context length (-1 takes the model's own)")
    requested = as_int("cache_size", cfg("cache_size"), 1)
    draft = str(cfg("draft_model_name") or "").strip()
    ngram = as_int("ngram_match_min", cfg("ngram_match_min"), 0)
    if draft and ngram:
        raise fail("draft_model_name", f"{draft!r} together with n-gram drafting (tabbyapi_ngram_match_min={ngram}): "
                   "exllamav3 asserts 'Cannot use both draft model and n-gram draft'; set tabbyapi_ngram_match_min=0 "
                   "or drop the draft model (nothing was changed)")
    extra = cfg("extra") or {}
    if not isinstance(extra, Mapping) or not all(isinstance(v, Mapping) for v in extra.values()):
        raise fail("extra", "must be a dict of config.yml sections, e.g. {\"logging\": {\"log_prompt\": false}}")
    clash = sorted(set(extra) & set(MANAGED_SECTIONS))
    if clash:
        raise fail("extra", f"section {clash[0]!r} is set by the deploy's own keys; use tabbyapi_<key> for it")
    restart = str(svc("restart")).strip()
    if restart not in RESTART_POLICIES:
        raise fail("restart", f"{restart!r} is not a systemd Restart= policy ({', '.join(RESTART_POLICIES)})")
    installer = str(stk("installer")).strip()
    if installer not in ("auto", "uv", "pip"):
        raise fail("installer", f"{installer!r} is not auto, uv or pip")
    return Settings(
        git_url=git_url, ref=ref, source=as_path("dir", src("dir")), venv=as_path("venv", src("venv")), stack=stack,
        wheelhouse=str(stk("wheelhouse") or ""), torch=str(stk("torch") or ""),
        stacks_root=as_path("root", stk("root")), keep=as_int("keep", stk("keep"), 1),
        base_python=str(stk("base_python") or ""), installer=installer,
        service=service, user=user, packages=list(packages), restart=restart,
        restart_sec=as_int("restart_sec", svc("restart_sec"), 0),
        health_timeout=as_int("health_timeout", svc("health_timeout"), 1), gpu=gpu,
        nvidia_root=as_path("nvidia_root", svc("nvidia_root")),
        host=host, port=as_int("port", cfg("port"), 1, 65535), model_dir=as_path("model_dir", cfg("model_dir")),
        model_name=model_name, max_seq_len=max_seq_len, cache_size=round_cache_size(requested),
        cache_size_requested=requested, cache_mode=check_cache_mode(cfg("cache_mode")),
        chunk_size=as_int("chunk_size", cfg("chunk_size"), 256),
        max_batch_size=as_int("max_batch_size", cfg("max_batch_size"), 1),
        sysmem_recurrent_cache=as_int("sysmem_recurrent_cache", cfg("sysmem_recurrent_cache"), 0),
        draft_model_name=draft, ngram_match_min=ngram, extra={str(k): dict(v) for k, v in extra.items()},
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
