"""What a switch builds: the wheel list of one named stack for one managed venv path (pure data, stdlib only).

The plan is made on the controller from the matrix (see ``from_matrix``) and read on the target, so it travels
as JSON. Its ``env_id`` names the environment directory: the stack name for people, a digest of everything
that decides the environment's content for idempotency (the same plan twice is the same directory).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any

from labwright.errors import BadInput

SCHEMA = "labwright.stack-plan/1"
DEFAULT_ROOT = "/opt/labwright/stacks"
SHA256 = re.compile(r"^[0-9a-f]{64}$")
SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class PlannedWheel:
    package: str
    version: str
    filename: str
    # Where the file comes from: an http(s)/file URL, or an absolute path on the target (a local wheelhouse).
    source: str
    sha256: str = ""  # from the matrix, recorded from the index or the release; a plan without it is refused

    @property
    def is_url(self) -> bool:
        return "://" in self.source


@dataclass(frozen=True)
class SwitchPlan:
    stack: str
    venv: str  # the managed path services run through (a symlink once labwright manages it)
    python: str  # "3.12": the interpreter version the wheels are tagged for
    wheels: tuple[PlannedWheel, ...]
    root: str = DEFAULT_ROOT
    absent: tuple[tuple[str, str], ...] = field(default=())  # (name, why): shown by --dry and show, not built

    @property
    def digest(self) -> str:
        # The managed path is part of it: two services on the same stack get separate directories, so the GC
        # of one never deletes the environment the other runs from.
        wheels = [[w.package, w.version, w.filename, w.sha256 or w.source] for w in self.wheels]
        text = json.dumps({"venv": self.venv, "python": self.python, "wheels": wheels}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def env_id(self) -> str:
        return f"{safe_name(self.stack)}-{self.digest}"

    @property
    def env_dir(self) -> str:
        return str(PurePosixPath(self.root) / self.env_id)

    @property
    def env_venv(self) -> str:
        return str(PurePosixPath(self.root) / self.env_id / "venv")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["absent"] = [list(a) for a in self.absent]
        return {"schema": SCHEMA, **data, "env_id": self.env_id}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


def safe_name(name: str) -> str:
    """A stack name as a directory name: `tabbyapi-cu13` stays, anything outside [A-Za-z0-9._-] becomes `_`."""
    return SAFE.sub("_", name).strip("._") or "stack"


def check_venv_path(venv: str) -> str:
    """An absolute, normalised path (a relative one would depend on where the helper happens to run)."""
    path = PurePosixPath(venv)
    if not venv or not path.is_absolute() or ".." in path.parts:
        raise BadInput(f"--venv {venv!r} must be an absolute path without '..', such as /opt/tabbyapi/.venv")
    if str(path) == "/":
        raise BadInput("--venv / is not a virtualenv path: pass the venv the service runs from")
    return str(path)


def check_root(root: str) -> str:
    path = PurePosixPath(root)
    if not path.is_absolute() or ".." in path.parts or str(path) == "/":
        raise BadInput(f"--root {root!r} must be an absolute directory path such as {DEFAULT_ROOT}")
    return str(path)


def plan_from_json(data: Any, where: str = "plan") -> SwitchPlan:
    """Read a plan written by ``SwitchPlan.dumps``; every field is checked, since the target trusts nothing else."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BadInput(f"{where}: not a {SCHEMA} document; make it with `labwright stack switch` or the operation")
    try:
        wheels = tuple(PlannedWheel(**{k: str(v) for k, v in w.items()}) for w in data["wheels"])
        plan = SwitchPlan(stack=str(data["stack"]), venv=check_venv_path(str(data["venv"])),
                          python=str(data["python"]), wheels=wheels, root=check_root(str(data["root"])),
                          absent=tuple((str(a[0]), str(a[1])) for a in data.get("absent", [])))
    except (KeyError, TypeError, IndexError) as exc:
        raise BadInput(f"{where}: malformed plan ({exc!r}); regenerate it") from exc
    for wheel in plan.wheels:
        if not SHA256.match(wheel.sha256):
            raise BadInput(f"{where}: {wheel.filename}: sha256 {wheel.sha256!r} is not 64 hex digits (every wheel "
                           "needs the one the matrix records); regenerate the plan after `labwright matrix refresh`")
        if not wheel.filename.endswith(".whl") or "/" in wheel.filename:
            raise BadInput(f"{where}: {wheel.filename!r} is not a wheel file name")
    if not plan.wheels:
        raise BadInput(f"{where}: stack {plan.stack} has no wheels to install")
    return plan
