"""Every file labwright reads back, typed once: what a state file, a record or a cached answer holds, checked before
any of it is used (issue 33 item 1).

A file that does not have its shape is one line: the file, the key path of the first thing wrong in it, and the fix
the file's owner gives (``check``). Nothing is used from it, so nothing is half done from a file half right.

    check(RegistryState, {"sources": {"u": {"wheels": "9"}}}, path, "the registry state of `matrix refresh`",
          "remove it (the next refresh fetches everything again)")
    -> BadInput("…/registry-state.json: not the registry state of `matrix refresh` labwright can read
                 (sources.u.wheels: '9': input should be a valid integer); remove it (…)")

The files labwright writes itself are strict (the types JSON gives, no coercion, unknown keys refused: a file from
another version or edited by hand is named, not guessed at); a file another program writes (the ``lxc``/``incus``
client's config.yml) is checked where labwright reads it and its other keys are left to their owner.

This module imports pydantic: import it inside the function that reads the file (issue 33: ``labwright --help``
does not pay for it).
"""

from __future__ import annotations

import difflib
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from labwright.errors import BadInput
from labwright.schema.model import key_name, one_line

M = TypeVar("M", bound=BaseModel)


class Record(BaseModel):
    """A file labwright writes and reads back: the JSON types exactly (strict), unknown keys refused, NaN and
    infinities refused (JSON's ``1e400`` reads as inf)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, populate_by_name=True,
                              hide_input_in_errors=False)


class Foreign(BaseModel):
    """A file another program writes: the keys labwright reads are typed, the others are its owner's."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False, populate_by_name=True,
                              hide_input_in_errors=False)


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("is not a finite number")
    return value


Seconds = Annotated[float, Field(ge=0), AfterValidator(_finite)]
Count = Annotated[int, Field(ge=0)]


# -- the host upgrade's state (labwright.hostupgrade.state, /var/lib/labwright/host-upgrade.json) -----------------
class StepRecord(Record):
    action: str
    target: str
    detail: str


class PlanRecord(Record):
    node: str
    from_version: str | None = Field(alias="from")
    to: str
    boot_kernel: str
    steps: list[StepRecord] = []
    notes: list[str] = []


class NoPlan(Record):
    """``{}``: the state of a run refused before it had a plan (labwright.hostupgrade.pve/run save it so, with the
    refusal as its outcome); the next run reads it and starts anew."""


class DoneRecord(Record):
    action: str
    target: str
    ok: bool
    detail: str
    seconds: Seconds


class GuestRecord(Record):
    """A Proxmox container as ``PveGpuGuest`` (labwright.hostupgrade.pve) was before the upgrade."""

    node: str
    vmid: Count
    hostname: str
    running: bool
    dev_paths: list[str] = []
    raw_majors: list[Count] = []
    raw_mounts: list[str] = []
    snapshots: bool = True
    storage: str = ""
    no_snapshot_reason: str = ""


class OutcomeRecord(Foreign):
    """``Outcome.to_dict()`` (labwright.hostupgrade.run): the plan's keys, then what was done; the state's summary
    reads ``message``."""

    ok: bool = False
    message: str = ""
    done: list[DoneRecord] = []
    snapshots: dict[str, str] = {}
    restored: list[str] = []
    left: list[str] = []


class HostUpgradeState(Record):
    """``Saved`` (labwright.hostupgrade.state) as ``save`` writes it."""

    node: str
    kind: Literal["lxd", "pve"]
    plan: PlanRecord | NoPlan
    next_step: Count
    repository: str
    phase: Literal["rebooting", "done", "failed"] = "rebooting"
    done: list[DoneRecord] = []
    snapshots: dict[str, str] = {}
    services: dict[str, list[str]] = {}
    previous_driver: str | None = None
    lock_wait: Seconds = 300.0
    inventory: str | None = None
    guests: list[GuestRecord] = []
    extra: dict[str, Any] = {}
    started: str = ""
    outcome: OutcomeRecord | None = None
    api: Literal["pvesh", "https"] = "https"
    resume_failed: str = ""


# -- the registry state of `matrix refresh` (labwright.matrix.registry, registry-state.json) ----------------------
class SourceRecord(Record):
    """What a refresh knows of one source (a PyPI JSON URL, an index page, a release feed)."""

    name: str = ""
    etag: str = ""
    last_modified: str = ""
    sha256: str = ""
    pre: bool = False
    checked: str = ""
    ok: str = ""
    changed: str = ""
    error: str = ""
    error_at: str = ""
    newest: str = ""
    wheels: Count = 0
    sdists: Count = 0
    incomplete: str = ""
    missing: bool = False


class BuiltAgainst(Record):
    """What a release's metadata said it was built against (or why it could not be read, on which day)."""

    version: str = ""
    cuda: str = ""
    torch: str = ""
    from_: str = Field("", alias="from")
    unreadable: str = ""
    why: str = ""


class RegistryState(Record):
    sources: dict[str, SourceRecord]
    built_against: dict[str, BuiltAgainst] = {}


# -- the lxc/incus client's config.yml (labwright.lxd.remotes): the client's file, read where labwright reads it ---
class ClientRemote(Foreign):
    addr: str = ""
    project: str | None = None


class ClientConfig(Foreign):
    default_remote: str | None = Field(None, alias="default-remote")
    remotes: dict[str, ClientRemote] | None = None


# -- the wheels matrix's TOML files (labwright.matrix.load; LABWRIGHT_MATRIX_DIR points at a copy) ----------------
Scalar = str | int | float | bool


class WheelsFile(Foreign):
    """A listing (``<family>.toml``, ``<family>_pypi.toml``): its rows' fields are checked by
    ``matrix.load.wheels_from_rows`` (which names an unknown or missing field), their types here."""

    kind: str = ""
    listing: str = ""
    source: str = ""
    refreshed: str = ""
    count: Count = 0
    wheels: list[dict[str, Scalar]] = []


class EngineNeed(Record):
    component: str
    when: str
    reason: str


class ComponentBody(Record):
    display: str = ""
    packages: list[str]
    pure_python: bool = False
    requires_torch: str = ""
    pins_build_torch_since: str = ""
    cxx11_abi_since: str = ""
    fallback: str = ""


class EngineBody(Record):
    components: list[str]
    required: list[str] = []
    requires_python: str = ""
    engine_component: str = ""
    needs: list[EngineNeed] = []
    note: str = ""


class ComponentsFile(Record):
    components: dict[str, ComponentBody] = {}
    engines: dict[str, EngineBody] = {}


class Dispute(Record):
    component: str
    seed: str
    reason: str


class StackBody(Record):
    description: str = ""
    torch: str
    cuda: str
    python: str
    engine: str = "tabbyapi"
    pins: list[str] = []
    only: list[str] = []
    source: str = ""
    seed: dict[str, Scalar] = {}
    disputed: list[Dispute] = []
    upstream_urls: list[str] = []


class StacksFile(Record):
    stacks: dict[str, StackBody] = {}


class CudaMajor(Record):
    compat_driver: str
    releases: dict[str, Scalar] = {}


class CudaFile(Record):
    majors: dict[str, CudaMajor] = {}


#: The matrix directory's files by name; any other ``*.toml`` there is a listing (``WheelsFile``).
MATRIX_FILES: dict[str, type[BaseModel]] = {"components.toml": ComponentsFile, "stacks.toml": StacksFile,
                                            "cuda.toml": CudaFile}


# -- the lab's image recipe (labwright.lab.image: the packaged lab-image.toml, or `lab up --recipe FILE`) --------
class ImageBody(Record):
    name: str
    suite: str
    variant: str = "minbase"
    architecture: str = "x86_64"
    include: list[str]
    files: dict[str, str] = {}


class ImageRecipeFile(Record):
    image: ImageBody


# -- a BIOS backup's manifest (labwright.bios.manifest, IMAGE.json beside each image) -----------------------------
class BiosChip(Foreign):
    vendor: str
    name: str
    size: Count
    bus: str


class BiosManifest(Foreign):
    """What `bios backup` reads back of a manifest and shows; its other keys (descriptor, regions) are a record."""

    schema_: str = Field(alias="schema")
    chip: BiosChip
    size: Count
    sha256: str
    image: str
    flashrom_version: str
    warnings: list[str] = []


# -- a saved `labwright bench llm --json` (labwright.bench.report: bench compare/report read them) -----------------
Number = Annotated[float, AfterValidator(_finite)]


class BenchSummary(Foreign):
    """``stats.Summary.to_json()`` (a context's cold run, the median of its cached trials) or one trial."""

    ttft_s: Number | None = None
    total_s: Number | None = None
    prompt_tokens: Number | None = None
    decode_tokens: Number | None = None
    prefill_tps: Number | None = None
    decode_tps: Number | None = None
    server_prefill_tps: Number | None = None
    server_decode_tps: Number | None = None


class BenchContext(Foreign):
    context: int
    cold: BenchSummary | None = None
    warm: BenchSummary | None = None
    error: str | None = None
    spread: dict[str, Number | None] | None = None
    peak_rss_bytes: Number | None = None
    peak_gpu_bytes: Number | None = None
    trials: list[BenchSummary] | None = None


class BenchResult(Foreign):
    """What bench compare/report read of a result; its other keys (url, model, started, ...) are shown as given."""

    schema_: str = Field(alias="schema")
    label: str | None = None
    results: list[BenchContext]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field's values are checked as: itself, or the model inside ``list[...]``, ``dict[str, ...]``,
    ``... | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((found for arg in get_args(annotation) if (found := _model_in(arg)) is not None), None)


def problem(error: ValidationError, model: type[BaseModel]) -> str:
    """The first error of ``error`` as ``KEY.PATH: what is wrong``, the key path as the file spells it."""
    first = error.errors(include_url=False)[0]
    loc = list(first.get("loc", ()))
    # the alias of a top-level field (``from``, ``default-remote``); deeper aliases are already in loc
    key = key_name(loc, "", model) if loc else "the top level"
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        owner: type[BaseModel] | None = model
        for part in loc[:-1]:  # the model the unknown key sits in, for "did you mean"; a dict key or an index of
            fields = owner.model_fields if owner is not None else {}  # a list keeps the model of its items
            field = next((f for n, f in fields.items() if part in (n, f.alias)), None)
            if field is not None:
                owner = _model_in(field.annotation)
        known = sorted(f.alias or n for n, f in owner.model_fields.items()) if owner is not None else []
        near = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        return f"{key}: an unknown key" + (f" (did you mean {near[0]}?)" if near else "")
    if kind == "missing":
        return f"{key}: missing"
    message = re.sub(r" or instance of \w+$", "", str(first.get("msg", "is not valid")).removeprefix("Value error, "))
    shown = repr(first.get("input"))
    shown = shown if len(shown) <= 60 else f"{shown[:57]}..."
    return f"{key}: {shown}: {message[:1].lower()}{message[1:]}"


def check(model: type[M], data: Any, path: Path | str, what: str, fix: str) -> M:
    """``data`` (what ``path`` held, parsed) as ``model``, or BadInput in one line: ``PATH: not WHAT labwright can
    read (KEY.PATH: what is wrong); FIX``."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise BadInput(one_line(f"{path}: not {what} labwright can read ({problem(error, model)}); {fix}")) from None
    except RecursionError:
        raise BadInput(one_line(f"{path}: not {what} labwright can read (nested too deeply); {fix}")) from None
