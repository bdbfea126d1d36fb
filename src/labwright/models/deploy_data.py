"""The settings of deploys/model.py from host data, pure (no host): ``model_*`` keys, or one ``model`` table.

    pyinfra -y @lxd/llm1 deploys/model.py --data model_repo=Qwen/Qwen3-0.6B --data 'model_allow=["*.json"]'
    pyinfra -y @lxd/llm1 deploys/model.py --data model_repo=unsloth/Qwen3-0.6B-GGUF --data model_file=Q8_0.gguf

Every key is checked before anything runs; an unknown ``model_*`` key is refused (a typo never falls back to a default).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from labwright.errors import BadInput
from labwright.models.spec import KEYS as SPEC_KEYS
from labwright.models.spec import ModelSpec, check_dir, check_endpoint, parse_spec
from labwright.schema import checks
from labwright.shell import quote

# The pinned client: its source is what the stand-in hub (tests/support/hf_endpoint.py) was derived from.
HUB_REQUIREMENT = "huggingface_hub==2.4.0"
DEFAULTS: dict[str, Any] = {
    "dir": "/srv/models",             # MODELS_DIR: MODELS_DIR/NAME links to the verified snapshot; share it by a mount
    "cache_dir": "",                  # the huggingface_hub cache ("" = MODELS_DIR/hub)
    "venv": "/opt/labwright-models/venv",  # a venv with huggingface_hub, in the guest
    "endpoint": "https://huggingface.co",  # HF_ENDPOINT: the Hub or a mirror
    "hub_requirement": HUB_REQUIREMENT,
    "find_links": "",                 # a wheelhouse directory in the guest (pip --no-index --find-links), "" = PyPI
    "runtime_packages": ["python3-venv"],
    "download_timeout": 3600,         # seconds the download step may take
}
SETTING_KEYS = tuple(DEFAULTS)
RUNNER_NAME = "fetch.py"
PROBE_END = "LABWRIGHT_FETCH_PY_END"


def _fail(key: str, message: str) -> BadInput:
    return BadInput(f"model_{key}: {message}")


@dataclass(frozen=True)
class ModelSettings:
    spec: ModelSpec
    dir: str
    cache_dir: str
    venv: str
    endpoint: str
    hub_requirement: str
    find_links: str
    runtime_packages: tuple[str, ...]
    download_timeout: int

    @property
    def runner(self) -> str:
        return str(PurePosixPath(self.venv).parent / RUNNER_NAME)

    @property
    def path(self) -> str:
        """What an engine's config points at: MODELS_DIR/NAME (a directory), or MODELS_DIR/NAME/FILE for a GGUF."""
        base = f"{self.dir}/{self.spec.name}"
        return f"{base}/{self.spec.file}" if self.spec.file else base

    def runner_args(self) -> str:
        return (f"--spec {quote(json.dumps(self.spec.as_json(), sort_keys=True))} "
                f"--cache {self.cache_dir} --models {self.dir}")

    def check_command(self) -> str:
        """Stdlib only (the guest's python3), no network: exit 0 when the marker says complete."""
        return f"python3 {self.runner} --check {self.runner_args()}"

    def probe_command(self, runner_source: str) -> str:
        """The runner's ``--probe`` from its source on stdin (works before anything is installed): ``complete``,
        ``incomplete`` or ``refused LINE`` (the Hub says the repo, revision or file does not exist, or refuses it)."""
        return (f"python3 - --probe {self.runner_args()} --endpoint {quote(self.endpoint)} "
                f"<<'{PROBE_END}' || true\n{runner_source.rstrip()}\n{PROBE_END}\n")

    def download_command(self) -> str:
        return (f"HF_HUB_DISABLE_PROGRESS_BARS=1 {self.venv}/bin/python {self.runner} {self.runner_args()} "
                f"--endpoint {quote(self.endpoint)}")


def _list_of(key: str, value: Any) -> tuple[str, ...]:
    try:
        return tuple(checks.debian_packages(value))
    except ValueError as error:
        raise _fail(key, str(error)) from None


def settings(data: Mapping[str, Any]) -> ModelSettings:
    """ModelSettings from host data (``host.data.dict()`` or a test's dict). Raises BadInput naming the key."""
    prefixed = {str(k)[len("model_"):]: v for k, v in data.items() if str(k).startswith("model_")}
    unknown = sorted(k for k in prefixed if k not in SPEC_KEYS and k not in SETTING_KEYS)
    if unknown:
        raise BadInput(f"model_{unknown[0]}: not a key of deploys/model.py; the keys are "
                       f"{', '.join('model_' + k for k in (*SPEC_KEYS, *SETTING_KEYS))}")
    table = data.get("model")
    spec_data = {k: v for k, v in prefixed.items() if k in SPEC_KEYS}
    if table is not None:
        if spec_data:
            raise BadInput(f"model: give the model as one table or as model_* keys, not both (model_"
                           f"{sorted(spec_data)[0]} and model)")
        if not isinstance(table, Mapping):
            raise BadInput(f"model: {table!r} is not a table like {{\"repo\": \"Qwen/Qwen3-0.6B\"}}")
        spec_data = dict(table)
    spec = parse_spec(spec_data)

    def get(key: str) -> Any:
        value = prefixed.get(key)
        return DEFAULTS[key] if value is None else value

    models_dir = check_dir("dir", get("dir"))
    cache_dir = check_dir("cache_dir", get("cache_dir") or f"{models_dir}/hub")
    if cache_dir == f"{models_dir}/{spec.name}":
        raise _fail("name", f"{spec.name!r} is the cache directory's name: choose another model_name")
    venv = check_dir("venv", get("venv"))
    requirement = str(get("hub_requirement")).strip()
    # one release, as the key's name says: a range (huggingface_hub>=0) let pip pick any client, the runner's calls
    # untested against it (sweep at 2b91fd1)
    if not re.fullmatch(r"huggingface[_-]hub==[0-9]+(\.[0-9]+){1,3}((a|b|rc)[0-9]+)?(\.post[0-9]+)?", requirement):
        raise _fail("hub_requirement", f"{requirement[:80]!r} is not one pinned huggingface_hub release, e.g. "
                    f"{HUB_REQUIREMENT} (a range lets pip pick a client the download was never run with)")
    find_links = str(get("find_links") or "").strip()
    if find_links:
        find_links = check_dir("find_links", find_links)
    try:
        timeout = checks.whole(10, 7 * 24 * 3600)(get("download_timeout"))
    except ValueError as error:
        raise _fail("download_timeout", f"{error} (seconds)") from None
    return ModelSettings(spec=spec, dir=models_dir, cache_dir=cache_dir, venv=venv,
                         endpoint=check_endpoint(get("endpoint")), hub_requirement=requirement,
                         find_links=find_links, runtime_packages=_list_of("runtime_packages", get("runtime_packages")),
                         download_timeout=timeout)


def planned_model(data: Mapping[str, Any]) -> ModelSettings | None:
    """The model this host's data asks deploys/model.py to download (``model_repo`` or a ``model`` table), else None:
    what an engine deploy composed with deploy_model points its config at (``ModelSettings.path``)."""
    if data.get("model_repo") is None and data.get("model") is None:
        return None
    return settings(data)


def engine_model(data: Mapping[str, Any], engine: str, gguf: bool) -> ModelSettings | None:
    """The model an engine deploy downloads first when its host data names one with deploys/model.py's keys
    (``model_repo`` ... or a ``model`` table), else None. ``gguf``: the engine serves one GGUF file (llama.cpp) and
    needs ``model_file``; otherwise it loads a model directory (tabbyAPI) and ``model_file`` is refused."""
    planned = planned_model(data)
    if planned is None:
        if any(str(key).startswith("model_") for key in data):
            raise BadInput(f"model_repo: is required with the other model_* keys ({engine} downloads a model only when "
                           "model_repo names it), e.g. model_repo=Qwen/Qwen3-0.6B")
        return None
    if gguf and not planned.spec.file:
        raise _fail("file", f"{engine} serves one GGUF file: name it with model_file (model_repo {planned.spec.repo} "
                    "without it would download a whole directory)")
    if not gguf and planned.spec.file:
        raise _fail("file", f"{planned.spec.file!r}: {engine} loads a model directory (EXL2/EXL3 safetensors), not "
                    "one GGUF file: drop model_file and use model_allow patterns, or serve the GGUF with "
                    "deploys/llamacpp.py")
    return planned
