"""What a switch builds: the wheel list of one named stack for one managed venv path (pure data, stdlib only).

The plan is made on the controller from the matrix (see ``from_matrix``) and read on the target, so it travels
as JSON. Its ``env_id`` names the environment directory: the stack name for people, a digest of everything
that decides the environment's content for idempotency (the same plan twice is the same directory).

It also carries the hashed lock of what the wheels require beyond each other (``dependency_lock``, made on the
controller by labwright.stacks.dependency_lock from the sha256 the index publishes, pip requirement lines with
``--hash=sha256:``), so the target installs those with ``--require-hashes --no-deps`` and resolves nothing.
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
# One line of a hashed lock: name[extras]==version and at least one --hash=sha256:HEX (labwright.locks writes them).
LOCK_LINE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?==[A-Za-z0-9.+!_-]+"
                       r"( --hash=sha256:[0-9a-f]{64})+$")
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

    @property
    def is_remote(self) -> bool:
        """Downloaded from a publisher (http/https), not read from a directory on the target (a wheelhouse path or
        a file:// URL)."""
        return self.source.startswith(("http://", "https://"))


@dataclass(frozen=True)
class SwitchPlan:
    stack: str
    venv: str  # the managed path services run through (a symlink once labwright manages it)
    python: str  # "3.12": the interpreter version the wheels are tagged for
    wheels: tuple[PlannedWheel, ...]
    root: str = DEFAULT_ROOT
    absent: tuple[tuple[str, str], ...] = field(default=())  # (name, why): shown by --dry and show, not built
    # The hashed lock of what the wheels require beyond each other (lines ``name==version --hash=sha256:...``; ""
    # when none was made: a wheelhouse plan reads the wheelhouse's own), and the index its files come from.
    dependency_lock: str = ""
    dependency_index: str = ""
    # Asked for by name (stack_unpinned_dependencies / --unpinned-dependencies): without a lock, the dependencies
    # are resolved on the target from the index WITHOUT hashes, as before locks existed; said loudly.
    unpinned_dependencies: bool = False

    @property
    def digest(self) -> str:
        # The managed path is part of it: two services on the same stack get separate directories, so the GC
        # of one never deletes the environment the other runs from.
        wheels = [[w.package, w.version, w.filename, w.sha256 or w.source] for w in self.wheels]
        content: dict[str, Any] = {"venv": self.venv, "python": self.python, "wheels": wheels}
        # Only when there is one: a plan without dependencies keeps the id it always had.
        if self.lock_lines:
            content["dependencies"] = hashlib.sha256("\n".join(self.lock_lines).encode()).hexdigest()
        if self.unpinned_dependencies:
            content["unpinned"] = True
        text = json.dumps(content, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def lock_lines(self) -> list[str]:
        """The requirement lines of ``dependency_lock`` (comments and blank lines left out)."""
        return lock_lines(self.dependency_lock)

    @property
    def local(self) -> bool:
        """Every wheel lies on the target (a wheelhouse or file:// URLs): nothing of it has a publisher."""
        return not any(w.is_remote for w in self.wheels)

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
        for key in ("dependency_lock", "dependency_index", "unpinned_dependencies"):
            if not data[key]:  # written only when set: a plan without them reads as it always did
                del data[key]
        return {"schema": SCHEMA, **data, "env_id": self.env_id}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


def lock_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def check_lock_text(text: str, where: str) -> list[str]:
    """The requirement lines of a hashed lock; BadInput naming ``where`` and the line unless every line pins an
    exact version with at least one sha256 (a pip option such as --index-url or -r is no requirement line)."""
    lines = lock_lines(text)
    for number, line in enumerate(lines, 1):
        if not LOCK_LINE.match(" ".join(line.split())):
            raise BadInput(f"{where}: line {number} ({line.split(' ', 1)[0]!r}) is not `name==version "
                           "--hash=sha256:HEX`: make the lock again (python -m "
                           "labwright.stacks.dependency_lock, or labwright wheelhouse requirements for a wheelhouse)")
    return lines


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
                          absent=tuple((str(a[0]), str(a[1])) for a in data.get("absent", [])),
                          dependency_lock=str(data.get("dependency_lock") or ""),
                          dependency_index=str(data.get("dependency_index") or ""),
                          unpinned_dependencies=data.get("unpinned_dependencies") is True)
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
    check_lock_text(plan.dependency_lock, f"{where}: dependency_lock")
    if plan.lock_lines and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", plan.dependency_index):
        raise BadInput(f"{where}: dependency_index {plan.dependency_index!r} is not the http(s) index the lock was "
                       "made from; regenerate the plan")
    return plan
