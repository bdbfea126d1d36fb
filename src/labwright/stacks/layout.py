"""Where environments live on the target, the state file per managed path, the symlink swap, and GC (stdlib only).

The swap is ``symlink(new, tmp)`` + ``rename(tmp, venv)``: rename(2) replaces the old link in one step, so a
process starting at any moment sees either the old environment or the new one, never a missing path.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labwright.atomic import write_text_atomic
from labwright.errors import BadInput, OperationFailed
from labwright.stacks.plan import SAFE
from labwright.textio import loads_json

STATE_SCHEMA = "labwright.stack-state/1"
MANIFEST = "stack.json"
BUILDING = ".building"  # present while an environment is incomplete; GC removes such leftovers


@dataclass
class Entry:
    """One environment a managed path pointed at."""

    id: str
    path: str  # the venv directory (what the symlink points to)
    stack: str
    at: str = ""  # when it became current (UTC, ISO 8601)
    managed: bool = True  # False: not under the root (a symlink target we found): never deleted by GC
    # True from the swap until the restarted service passed its health check: a run killed in between leaves it
    # set, and the next switch/rollback restarts and checks (and rolls back) instead of saying "nothing to do".
    pending: bool = False


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _key(key: Any) -> str:
    """A key as a key path shows it: a plain name as it is, anything else (a line break, a space) quoted, so that
    the refusal stays one line."""
    text = str(key)
    return text if text.replace("_", "").replace("-", "").isalnum() and text.isascii() else _show(text)


def _typed(raw: dict[str, Any], where: str, kinds: dict[str, type], required: tuple[str, ...] = (),
           closed: bool = True) -> str:
    """What is wrong with the object ``raw`` at key path ``where`` (empty: nothing): a ``required`` key missing, a
    key not of its type in ``kinds``, a key not in ``kinds`` when ``closed``. (Stdlib only: this runs on the target,
    where labwright.schema's pydantic is not installed.)"""
    prefix = f"{where}." if where else ""
    for key in required:
        if key not in raw:
            return f"{prefix}{key}: missing"
    for key, value in raw.items():
        kind = kinds.get(key)
        if kind is None:
            if closed:
                return f"{prefix}{_key(key)}: an unknown key"
        elif not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            return f"{prefix}{_key(key)}: {_show(value)} is not a {'string' if kind is str else kind.__name__}"
    return ""


_ENTRY_KEYS = {"id": str, "path": str, "stack": str, "at": str, "managed": bool, "pending": bool}


def state_problem(data: dict[str, Any]) -> str:
    """What is wrong with a state file's object (empty: nothing), as ``KEY.PATH: what``."""
    wrong = _typed(data, "", {"schema": str, "venv": str, "current": object, "previous": object, "history": list})
    if wrong:
        return wrong
    entries = [(key, data.get(key)) for key in ("current", "previous")]
    entries += [(f"history[{n}]", raw) for n, raw in enumerate(data.get("history", []))]
    for where, raw in entries:
        if raw is None and not where.startswith("history"):
            continue
        if not isinstance(raw, dict):
            return f"{where}: {_show(raw)} is not an object"
        # open: a key another labwright version adds is left out, as it always was
        wrong = _typed(raw, where, _ENTRY_KEYS, ("id", "path", "stack"), closed=False)
        if wrong:
            return wrong
    return ""


def manifest_problem(data: dict[str, Any]) -> str:
    """What is wrong with a stack.json object where labwright reads it (empty: nothing); its other keys (the
    dependencies, the installer) are a record for people."""
    wrong = _typed(data, "", {"id": str, "stack": str, "venv": str, "wheels": list, "absent": list}, closed=False)
    if wrong:
        return wrong
    for n, wheel in enumerate(data.get("wheels", [])):
        if not isinstance(wheel, dict):
            return f"wheels[{n}]: {_show(wheel)} is not an object"
        wrong = _typed(wheel, f"wheels[{n}]", {"package": str}, ("package",), closed=False)
        if wrong:
            return wrong
    for n, item in enumerate(data.get("absent", [])):
        if not (isinstance(item, list) and len(item) == 2 and all(isinstance(part, str) for part in item)):
            return f"absent[{n}]: {_show(item)} is not a [package, why] pair"
    return ""


@dataclass
class State:
    venv: str
    current: Entry | None = None
    previous: Entry | None = None
    history: list[Entry] = field(default_factory=list)  # most recent first, current included

    def to_json(self) -> dict[str, Any]:
        return {"schema": STATE_SCHEMA, "venv": self.venv,
                "current": asdict(self.current) if self.current else None,
                "previous": asdict(self.previous) if self.previous else None,
                "history": [asdict(e) for e in self.history]}

    def became_current(self, entry: Entry, previous: Entry | None) -> None:
        entry.at = now()
        self.current, self.previous = entry, previous
        # previous goes right after it even when history never saw it (an adopted venv, a symlink we found).
        first = [entry, previous] if previous is not None else [entry]
        self.history = [*first, *[e for e in self.history if e.path not in {f.path for f in first}]]


@dataclass
class VenvPath:
    """What the managed path is now. kind: absent | managed (symlink into the root) | linked (symlink to a venv
    elsewhere) | directory (a real venv, adopted on the first swap)."""

    path: Path
    kind: str
    target: str | None = None  # the venv directory it resolves to (None when absent or dangling)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def is_venv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file() and (path / "bin").is_dir()


class Layout:
    """The root directory and one managed path's state in it."""

    def __init__(self, root: str | Path, venv: str | Path):
        self.root = Path(root)
        self.venv = Path(venv)

    # -- paths -------------------------------------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.root / "state" / f"{state_slug(str(self.venv))}.json"

    def env_dir(self, env_id: str) -> Path:
        return self.root / env_id

    def manifest(self, venv_dir: str | Path) -> dict[str, Any] | None:
        """The stack.json beside an environment's venv (None for a venv labwright did not build); one line naming
        the file when it is labwright's (an object) of the wrong shape."""
        path = Path(venv_dir).parent / MANIFEST
        try:
            data = loads_json(path.read_text())
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(data, dict):
            return None
        wrong = manifest_problem(data)
        if wrong:
            raise OperationFailed(f"{path}: not a stack manifest labwright can read ({wrong}); restore it or remove "
                                  f"{path.parent} (`labwright stack switch` builds the stack again)")
        return data

    def under_root(self, path: str | Path) -> bool:
        root = os.path.realpath(self.root)
        return os.path.realpath(path).startswith(root + os.sep)

    # -- the managed path --------------------------------------------------------------------------------------
    def inspect(self) -> VenvPath:
        path = self.venv
        if path.is_symlink():
            target = os.readlink(path)
            resolved = Path(os.path.normpath(path.parent / target))
            if not resolved.exists():
                # A dangling link into the root is ours (its environment was removed by hand): switch may repair it.
                if self.under_root(resolved):
                    return VenvPath(path, "managed", None)
                raise BadInput(f"--venv {path}: a symlink to {target}, which does not exist; point it at a venv "
                               "or remove it")
            if self.under_root(resolved) and self.manifest(resolved) is not None:
                return VenvPath(path, "managed", str(resolved))
            if is_venv(resolved):
                return VenvPath(path, "linked", str(resolved))
            raise BadInput(f"--venv {path}: a symlink to {target}, which is not a virtualenv (no pyvenv.cfg); "
                           "pass the venv the service runs from")
        if not path.exists():
            return VenvPath(path, "absent")
        if path.is_dir() and is_venv(path):
            return VenvPath(path, "directory", str(path))
        raise BadInput(f"--venv {path}: not a virtualenv (no pyvenv.cfg and bin/) and not a labwright-managed "
                       "symlink; pass the venv the service runs from, such as /opt/tabbyapi/.venv")

    # -- state -------------------------------------------------------------------------------------------------
    def read_state(self) -> State:
        """The state file of the managed path, its shape checked (one line naming the file and the key otherwise:
        nothing is used or written back from a file half right)."""
        try:
            data = loads_json(self.state_file.read_text())
        except FileNotFoundError:
            return State(venv=str(self.venv))
        except NotADirectoryError:
            # junk where the root should be: the stack root (--root / stack_root) names a file
            raise BadInput(f"stack root {self.root}: {_first_file(self.state_file)} is a file, not a directory; "
                           "give a directory as the stack root (--root), or move the file away") from None
        except ValueError as exc:   # not UTF-8, not JSON (labwright.textio.loads_json: every parse failure)
            raise BadInput(f"{self.state_file}: unreadable ({str(exc)[:120]}); fix or remove it (the environments "
                           "stay; `stack show` lists them)") from None
        except OSError as exc:
            raise OperationFailed(f"{self.state_file}: unreadable ({exc.strerror or exc}); fix its permissions") \
                from exc
        # junk in the state file is bad input (exit 2), as for every file labwright reads back
        if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
            raise BadInput(f"{self.state_file}: not a {STATE_SCHEMA} file; move it away")
        wrong = state_problem(data)
        if wrong:
            raise BadInput(f"{self.state_file}: not a {STATE_SCHEMA} file labwright can read ({wrong}); "
                           "fix or remove it (the environments stay; `stack show` lists them)")

        def entry(raw: Any) -> Entry | None:
            return Entry(**{k: v for k, v in raw.items() if k in _ENTRY_KEYS}) if raw is not None else None

        history = [e for e in (entry(raw) for raw in data.get("history", [])) if e is not None]
        return State(venv=str(data.get("venv", self.venv)), current=entry(data.get("current")),
                     previous=entry(data.get("previous")), history=history)

    def write_state(self, state: State) -> None:
        write_atomic(self.state_file, json.dumps(state.to_json(), indent=2) + "\n")

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One switch/rollback at a time per root: two would race on the symlink, the state and GC. The kernel
        drops a flock when its holder dies (SIGKILL included), so a killed run leaves no stale lock. A root this
        call created is removed again when the run fails with nothing in it (a refused first switch leaves no
        trace)."""
        created = _missing_ancestors(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.root / ".lock", "w") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise OperationFailed(f"another stack switch or rollback is running under {self.root} (see "
                                          f"`fuser {self.root / '.lock'}`); wait for it to finish") from None
                yield
        except BaseException:
            if created:
                _remove_if_empty(self.root, created)
            raise

    # -- swap --------------------------------------------------------------------------------------------------
    def point_to(self, venv_dir: str | Path) -> None:
        """Make the managed path a symlink to ``venv_dir``, atomically (see the module docstring)."""
        self.venv.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.venv.with_name(f".{self.venv.name}.labwright-{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.symlink(str(venv_dir), tmp)
        os.replace(tmp, self.venv)

    def adopt(self) -> Entry:
        """Move a real venv directory at the managed path into the root, so the path can become a symlink.

        The venv keeps working after the move: its bin/python is a link to the base interpreter and its scripts'
        shebangs name the managed path, which the symlink keeps valid. Between the rename and the swap that
        follows it (microseconds) the path does not exist; this happens once, on the first switch.
        """
        env_id = f"original-{hashlib.sha256(f'{self.venv}{time.time_ns()}'.encode()).hexdigest()[:12]}"
        env_dir = self.env_dir(env_id)
        env_dir.mkdir(parents=True)
        manifest = {"id": env_id, "stack": "original", "venv": str(self.venv), "wheels": [],
                    "adopted_from": str(self.venv), "built_at": now()}
        write_atomic(env_dir / MANIFEST, json.dumps(manifest, indent=2) + "\n")
        os.rename(self.venv, env_dir / "venv")
        return Entry(id=env_id, path=str(env_dir / "venv"), stack="original", at=now())

    def same_filesystem(self) -> bool:
        """Whether a venv directory at the managed path can be renamed into the root (rename cannot cross
        filesystems, and copying a live venv is neither atomic nor cheap). A root not made yet will be on its
        nearest existing ancestor's filesystem."""
        root = self.root
        while not root.exists() and root != root.parent:
            root = root.parent
        return os.stat(root).st_dev == os.stat(self.venv).st_dev

    # -- garbage collection ------------------------------------------------------------------------------------
    def environments(self) -> list[Path]:
        """Environment directories under the root that belong to this managed path."""
        found = []
        for child in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            if not child.is_dir() or child.name in ("state",) or child.name.startswith("."):
                continue
            manifest = self.manifest(child / "venv")
            if manifest is not None and manifest.get("venv") == str(self.venv):
                found.append(child)
            elif manifest is None and _read(child / BUILDING) == str(self.venv):
                found.append(child)  # half-built (the build writes the managed path into the marker first)
        return found

    def collect(self, state: State, keep: int) -> list[str]:
        """Delete this path's environments beyond the ``keep`` most recent (current first); return their paths.

        Half-built leftovers (``.building``) go too: the lock says no build is running.
        """
        kept = {os.path.realpath(Path(e.path).parent) for e in state.history[:keep] if e.managed}
        for entry in (state.current, state.previous if keep >= 2 else None):
            if entry is not None:
                kept.add(os.path.realpath(Path(entry.path).parent))
        removed = []
        for leftover in self.root.glob(".deleting-*"):  # a deletion that was interrupted
            shutil.rmtree(leftover, ignore_errors=True)
        for env_dir in self.environments():
            if os.path.realpath(env_dir) in kept and not (env_dir / BUILDING).exists():
                continue
            remove_tree(env_dir)
            removed.append(str(env_dir))
        state.history = [e for e in state.history if os.path.realpath(Path(e.path).parent) in kept or not e.managed]
        if state.previous is not None and state.previous.managed and not Path(state.previous.path).exists():
            state.previous = None
        return removed


def state_slug(venv: str) -> str:
    """/opt/tabbyapi/.venv -> opt_tabbyapi_.venv-1a2b3c4d: readable, and unique per path."""
    readable = SAFE.sub("_", venv.strip("/"))[-60:] or "root"
    return f"{readable}-{hashlib.sha256(venv.encode()).hexdigest()[:8]}"


def write_atomic(path: Path, text: str) -> None:
    """labwright.atomic's write (temp + fsync + rename + directory fsync): a crash or a kill leaves the old content or
    the new, never half; the replaced content stays as NAME.prev (the state before the last switch, by hand)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text, keep_previous=True)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, ValueError):  # ValueError: not UTF-8, not a marker labwright wrote
        return None


def _missing_ancestors(path: Path) -> list[Path]:
    """``path`` and its parents that do not exist yet, deepest first (what mkdir(parents=True) will create)."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def _remove_if_empty(root: Path, created: list[Path]) -> None:
    """Undo mkdir(parents=True) of ``created`` when nothing but the lock file and empty directories are left."""
    for name in ("plans", "state"):
        with contextlib.suppress(OSError):
            (root / name).rmdir()
    with contextlib.suppress(OSError):
        if [p.name for p in root.iterdir()] == [".lock"]:
            (root / ".lock").unlink()
    for directory in created:
        try:
            directory.rmdir()
        except OSError:
            return


def remove_tree(path: Path) -> None:
    # Rename first, then delete: a partly deleted directory must never look like a usable environment.
    doomed = path.with_name(f".deleting-{path.name}-{os.getpid()}")
    try:
        os.rename(path, doomed)
    except OSError:
        doomed = path
    shutil.rmtree(doomed, ignore_errors=True)


def _first_file(path: Path) -> Path:
    """The first component of ``path`` that exists and is not a directory (what a NotADirectoryError tripped on)."""
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            return parent
    return path
