"""Build one environment in its own directory: a venv from the right base Python, then the plan's exact wheels.

The installer is uv when the target has it (fast), else pip: the pip carried by the labwright bundle when
running from one (a minimal Debian has no pip and no python3-venv), else the pip beside this interpreter.
Either way the plan's wheels are installed offline (every file is already local and hash-checked, see fetch),
``--no-deps`` (nothing ABI-coupled may be resolved behind the matrix's back) and in hash-checking mode, so the
files cannot change between the check and the install. A second pass then installs what those wheels require
beyond each other (torch's sympy/filelock/nvidia-* wheels, exllamav3's tokenizers) from a hashed lock, with
``--require-hashes --no-deps -r LOCK``, so nothing is resolved here and every file is pinned by the sha256 its index
published: the plan's own lock (made on the controller, labwright.stacks.dependency_lock) from its index, or, for a
plan whose wheels lie here (a wheelhouse), the wheelhouse's ``requirements.lock`` from the wheelhouse alone
(``--no-index``). The plan's own packages are left out of either lock (installed already, by path and hash). Which
requirements the wheels have is read from their METADATA (files already hash-checked) before the venv is made: a
stack that needs some and has no lock is refused there (exit 2, nothing installed), unless the plan says the user
asked for unpinned dependencies by name: then they are resolved from the index (or the wheelhouse) without hashes,
the plan's packages pinned by a constraints file, and the output and the manifest say so.
Bytecode is compiled here, before the swap, so the restarted service does not pay for it during its downtime.

Each installer run is a progress step on stderr (labwright.ui.run_with_progress): which package of how many,
what is downloading (bytes of the total and the rate, from pip's ``--progress-bar raw``), and how long it took; on
a guest run by pyinfra these are plain lines every ``LABWRIGHT_PROGRESS_INTERVAL`` seconds, stdout keeps the
``labwright: ...`` step lines the caller reads.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import Parser
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from labwright import ui
from labwright.errors import BadInput, OperationFailed, SafetyCheckFailed
from labwright.stacks.fetch import LocalWheel, NoSpace
from labwright.stacks.layout import BUILDING, MANIFEST, now, write_atomic
from labwright.stacks.plan import SwitchPlan, check_lock_text

INSTALLERS = ("auto", "uv", "pip")
UV_PLACES = ("/root/.local/bin/uv", "/usr/local/bin/uv")  # where uv's installer puts it (field note 001's: the first)
NO_SPACE = ("No space left on device", "[Errno 28]", "os error 28")
DEPENDENCY_LOCK = "dependencies.lock"  # in the environment's directory: what the second pass installed
WHEELHOUSE_LOCK = "requirements.lock"  # a wheelhouse's own lock (labwright.locks.LOCK_NAME; locks is not bundled)
UNPINNED_KEY = "stack_unpinned_dependencies"


def python_version(python: str) -> str | None:
    try:
        proc = subprocess.run([python, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def base_python(plan: SwitchPlan, current_venv: str | None, explicit: str | None) -> str:
    """The interpreter to make the venv with: it must be the version the wheels are tagged for."""
    wanted = plan.python.rstrip("t")
    if explicit:
        found = python_version(explicit)
        if found is None:
            raise BadInput(f"--base-python {explicit}: not a working Python interpreter; pass one like "
                           f"/usr/bin/python{wanted}")
        if found != wanted:
            raise BadInput(f"--base-python {explicit} is Python {found}, stack {plan.stack} needs {wanted} (its "
                           f"wheels are tagged cp{wanted.replace('.', '')}); pass a python{wanted}")
        return explicit
    candidates = [f"python{wanted}"]
    home = _venv_home(current_venv) if current_venv else None
    if home:
        candidates.append(str(Path(home) / f"python{wanted}"))
    candidates.append("python3")
    seen = []
    for candidate in candidates:
        path = candidate if os.path.isabs(candidate) else shutil.which(candidate)
        if not path or not os.path.exists(path):
            continue
        found = python_version(path)
        if found == wanted:
            return path
        seen.append(f"{candidate} is {found}" if found else f"{candidate} does not run")
    raise BadInput(f"stack {plan.stack} needs Python {wanted} (its wheels are tagged cp{wanted.replace('.', '')}); "
                   f"no python{wanted} here ({'; '.join(seen) or 'no python3 at all'}): install it or pass "
                   "--base-python")


def _venv_home(venv: str) -> str | None:
    try:
        for line in (Path(venv) / "pyvenv.cfg").read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home":
                return value.strip()
    except (OSError, ValueError):  # ValueError: a pyvenv.cfg that is not UTF-8 text: no home to offer
        return None
    return None


def find_uv() -> str | None:
    found = shutil.which("uv")
    if found:
        return found
    return next((p for p in UV_PLACES if os.access(p, os.X_OK)), None)


def running_bundle() -> str | None:
    """The labwright zipapp this process runs from, when it carries pip (see bundle.py)."""
    # A module imported from a zip file has a zipimporter as its loader, which knows the archive's path.
    archive = getattr(globals().get("__loader__"), "archive", None)
    if not archive:
        return None
    try:
        with zipfile.ZipFile(archive) as zf:
            return archive if "pip/__init__.py" in zf.namelist() else None
    except (OSError, zipfile.BadZipFile):
        return None


def installer_command(new_python: str, choice: str = "auto") -> tuple[str, list[str]]:
    """(name, argv prefix up to and including `install`) for installing into the venv of ``new_python``."""
    if choice not in INSTALLERS:
        raise BadInput(f"--installer {choice!r}: use one of {', '.join(INSTALLERS)}")
    if choice in ("auto", "uv"):
        uv = find_uv()
        if uv:
            return "uv", [uv, "pip", "install", "--no-config", "--python", new_python, "--compile-bytecode"]
        if choice == "uv":
            raise BadInput("--installer uv: no uv on this host (PATH, /root/.local/bin); use --installer pip")
    # --isolated: a host pip.conf (extra indexes, constraints files) must not change what gets installed.
    bundle = running_bundle()
    if bundle:
        # -E -s: no PYTHONPATH or user site: only the bundle's pip and the new venv are visible to it.
        return "pip", [new_python, "-E", "-s", bundle, "pip", "--isolated", "--disable-pip-version-check", "install",
                       *ui.pip_progress_args()]
    if importlib.util.find_spec("pip") is not None:
        return "pip", [sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "--python",
                       new_python, "install", *ui.pip_progress_args()]
    raise OperationFailed("no installer here: neither uv nor pip; install uv, or run through the labwright bundle "
                          "(the pyinfra operation), which carries pip")


def build(plan: SwitchPlan, wheels: list[LocalWheel], env_dir: Path, python: str, installer: str,
          log: Callable[[str], None], midway: Callable[[], None] | None = None) -> dict:
    """Make ``env_dir/venv`` with exactly ``wheels`` and write its manifest; return the manifest. ``midway`` runs
    after the wheels are in and before the manifest (the fault-injection tests kill the build there)."""
    venv = env_dir / "venv"
    second = dependency_pass(plan, wheels, env_dir, python)  # refused here, before anything is installed
    _run([python, "-m", "venv", "--without-pip", str(venv)], "create the venv", env_dir)
    name, prefix = installer_command(str(venv / "bin" / "python"), installer)
    requirements = env_dir / "requirements.txt"
    # Paths with their hashes: pip/uv re-check each file in hash-checking mode as they read it.
    requirements.write_text("".join(f"{w.path} --hash=sha256:{w.sha256}\n" for w in wheels))
    log(f"install {len(wheels)} wheel(s) with {name} into {venv}")
    _run([*prefix, "--no-deps", "--no-index", "--require-hashes", "-r", str(requirements)],
         f"install {len(wheels)} wheel(s) with {name}", env_dir, total=len(wheels))
    if midway is not None:
        midway()
    second.install(prefix, name, env_dir, log)
    manifest = {
        "id": env_dir.name, "stack": plan.stack, "venv": plan.venv, "python": plan.python, "installer": name,
        "built_at": now(),
        "wheels": [{"package": w.wheel.package, "version": w.wheel.version, "filename": w.wheel.filename,
                    "source": w.wheel.source, "sha256": w.sha256, "checked": w.checked} for w in wheels],
        "absent": [list(a) for a in plan.absent],
        "dependencies": second.manifest(),
    }
    write_atomic(env_dir / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(env_dir / "wheels", ignore_errors=True)  # downloaded copies: installed now, GBs for torch
    (env_dir / BUILDING).unlink(missing_ok=True)
    return manifest


@dataclass
class DependencyPass:
    """The second pass, decided before the venv is made: ``args`` for the installer after ``install`` (empty: the
    wheels require nothing beyond each other), where the files come from, and whether they are pinned."""

    args: list[str] = field(default_factory=list)
    source: str = ""
    lock: Path | None = None
    count: int = 0
    pinned: bool = True
    needed: list[str] = field(default_factory=list)  # what the wheels require beyond each other, for the manifest

    def install(self, prefix: list[str], name: str, env_dir: Path, log: Callable[[str], None]) -> None:
        if not self.args:
            return
        if self.pinned:
            log(f"install their {self.count} dependencies with {name} from the hashed lock {self.lock} "
                f"(--require-hashes --no-deps, {self.source})")
        else:
            log(f"WARNING: {UNPINNED_KEY}: install their dependencies with {name} WITHOUT hashes, resolved from "
                f"{self.source}: not pinned (docs/security.md, Every download pinned)")
        _run([*prefix, *self.args], f"install the dependencies of the stack's wheels with {name}", env_dir)

    def manifest(self) -> dict:
        return {"pinned": self.pinned, "lock": self.lock.name if self.lock else None, "count": self.count,
                "source": self.source, "required": self.needed}


def wheel_requirements(wheels: list[LocalWheel], python: str) -> dict[str, str]:
    """{canonical name: "requirement (required by FILE)"} for what the wheels' METADATA requires beyond each other
    on the interpreter ``python`` (markers evaluated for it, no extras)."""
    environment: dict[str, str] = {key: str(value) for key, value in default_environment().items()}
    environment["extra"] = ""
    full = _python_full_version(python)
    if full:
        environment.update(python_full_version=full, python_version=".".join(full.split(".")[:2]))
    ours = {canonicalize_name(w.wheel.package) for w in wheels}
    found: dict[str, str] = {}
    for local in wheels:
        for text in _requires_dist(local.path):
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                raise BadInput(f"{local.wheel.filename}: Requires-Dist {text!r} is not a requirement; the wheel is "
                               "broken, rebuild it or take another") from None
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            name = canonicalize_name(requirement.name)
            if name not in ours:
                found.setdefault(name, f"{requirement} (required by {local.wheel.filename})")
    return found


def _requires_dist(path: Path) -> list[str]:
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if not names:
                return []
            text = archive.read(names[0]).decode("utf-8", errors="replace")
    except (OSError, zipfile.BadZipFile) as exc:
        raise BadInput(f"{path}: not a readable wheel ({exc}); take the file again") from None
    return list(Parser().parsestr(text, headersonly=True).get_all("Requires-Dist") or [])


def _python_full_version(python: str) -> str | None:
    try:
        proc = subprocess.run([python, "-I", "-c", "import platform; print(platform.python_version())"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def dependency_pass(plan: SwitchPlan, wheels: list[LocalWheel], env_dir: Path, python: str) -> DependencyPass:
    """How the second pass installs what the wheels require (see the module docstring); BadInput, one line naming the
    fix, when they require something and there is no hashed lock for it."""
    needed = wheel_requirements(wheels, python)
    ours = {canonicalize_name(w.wheel.package) for w in wheels}
    directories = sorted({str(w.path.parent) for w in wheels})
    if plan.lock_lines:
        lines, source = plan.lock_lines, plan.dependency_index
        where = "the plan's dependency lock"
        args = ["--index-url", plan.dependency_index]
    elif plan.local and any((Path(d) / WHEELHOUSE_LOCK).is_file() for d in directories):
        found = next(Path(d) / WHEELHOUSE_LOCK for d in directories if (Path(d) / WHEELHOUSE_LOCK).is_file())
        try:
            text = found.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(f"{found}: cannot read the wheelhouse's lock ({exc}); write it again with labwright "
                           "wheelhouse requirements or labwright wheelhouse stack") from None
        lines, source, where = check_lock_text(text, str(found)), f"the wheelhouse {found.parent}", str(found)
        args = ["--no-index", *(f"--find-links={d}" for d in directories)]
    elif not needed:
        return DependencyPass()  # nothing beyond each other: no second pass, nothing to pin
    elif plan.unpinned_dependencies:
        return _unpinned(wheels, env_dir, needed)
    else:
        first = next(iter(needed.values()))
        more = f" and {len(needed) - 1} more" if len(needed) > 1 else ""
        if plan.local:
            fix = (f"put a hashed {WHEELHOUSE_LOCK} in {directories[0]} (labwright wheelhouse stack "
                   f"--stack {plan.stack} --out {directories[0]}/{WHEELHOUSE_LOCK}, from the index's sha256s; its "
                   "files have no publisher, so hashing them here proves nothing)")
        else:
            fix = ("plan it where the hashed lock is made (labwright stack switch, deploys/stack.py, "
                   "deploys/tabbyapi.py)")
        raise BadInput(f"stack {plan.stack} needs {first}{more}, and there is no hashed lock for it: {fix}, or "
                       f"install them without hashes by name ({UNPINNED_KEY}=true); nothing was installed")
    keep = [line for line in lines if canonicalize_name(_lock_name(line)) not in ours]
    locked = {canonicalize_name(_lock_name(line)) for line in keep}
    missing = [text for name, text in needed.items() if name not in locked]
    if missing:
        raise SafetyCheckFailed(f"stack {plan.stack} needs {missing[0]}, which {where} does not list: make the lock "
                                "again for these wheels; nothing was installed")
    if not keep:
        return DependencyPass(needed=sorted(needed))
    lock = env_dir / DEPENDENCY_LOCK
    lock.write_text("".join(f"{line}\n" for line in keep))
    return DependencyPass(args=["--no-deps", "--require-hashes", *args, "-r", str(lock)], source=source, lock=lock,
                          count=len(keep), needed=sorted(needed))


def _lock_name(line: str) -> str:
    return line.split("==", 1)[0].split("[", 1)[0]


def _unpinned(wheels: list[LocalWheel], env_dir: Path, needed: dict[str, str]) -> DependencyPass:
    """Asked for by name: the plan's own requirements that are not in the plan, resolved with the plan's packages
    pinned exactly, WITHOUT hashes (as before locks existed): from the wheelhouse alone when the plan is one."""
    pins = [f"{w.wheel.package}=={w.wheel.version}" for w in wheels]
    constraints = env_dir / "constraints.txt"
    constraints.write_text("".join(f"{pin}\n" for pin in pins))
    offline = not any(w.wheel.is_remote for w in wheels)
    links = [f"--find-links={d}" for d in sorted({str(w.path.parent) for w in wheels})]
    return DependencyPass(args=[*(["--no-index"] if offline else []), *links, "-c", str(constraints), *pins],
                          source="the wheelhouse only" if offline else "the package index", pinned=False,
                          needed=sorted(needed))


def hash_mismatch(lines: list[str]) -> str:
    """The file and both sha256s from an installer's hash mismatch (pip: "THESE PACKAGES DO NOT MATCH THE HASHES",
    then "NAME==V from URL:", "Expected sha256 X", "Got Y"; uv: "Hash mismatch for `NAME==V`", "Expected:",
    "Computed:")."""
    at = next((line for line in lines if " from http" in line or " from file" in line or "Hash mismatch" in line), "")
    file = at.split(" from ", 1)[0].removeprefix("error: Hash mismatch for ").strip(" `:") or "a file"
    expected = next((line.split()[-1] for line in lines if line.startswith(("Expected sha256", "Expected:"))), "?")
    got = next((line.split()[-1] for line in lines if line.startswith(("Got", "Computed:"))), "?")
    got, expected = got.removeprefix("sha256:"), expected.removeprefix("sha256:")
    return f"{file}: its sha256 is {got}, not the {expected} in the lock"


def _run(argv: list[str], what: str, env_dir: Path, total: int | None = None) -> None:
    """Run an installer as a progress step; its failure is one line naming ``what``, the directory and the line
    of its output that says why (NoSpace when the disk filled up)."""

    def failed(code: int, tail: list[str]) -> None:
        output = "\n".join(tail)
        if any(marker in output for marker in NO_SPACE):
            raise NoSpace(f"{what}: no space left on device")
        lines = [line.strip() for line in tail if line.strip()]
        if "DO NOT MATCH THE HASHES" in output or "Hash mismatch" in output:  # pip's words, uv's
            raise SafetyCheckFailed(f"{what}: {hash_mismatch(lines)}: tampered with or replaced since the lock was "
                                    "made; nothing was switched")
        interesting = [line for line in lines if "error" in line.lower()] or lines
        raise OperationFailed(f"{what} failed in {env_dir} (exit {code}): "
                              f"{interesting[-1] if interesting else 'no output'}")

    ui.run_with_progress(argv, what, parse=ui.InstallProgress(total), keep=400, timeout=3600, failed=failed,
                         env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
