"""Build one environment in its own directory: a venv from the right base Python, then the plan's exact wheels.

The installer is uv when the target has it (fast), else pip: the pip carried by the labwright bundle when
running from one (a minimal Debian has no pip and no python3-venv), else the pip beside this interpreter.
Either way the plan's wheels are installed offline (every file is already local and hash-checked, see fetch),
``--no-deps`` (nothing ABI-coupled may be resolved behind the matrix's back) and in hash-checking mode, so the
files cannot change between the check and the install. A second pass then installs what those wheels require
beyond each other (torch's sympy/filelock/nvidia-* wheels, exllamav3's tokenizers), with every plan package
pinned by a constraints file so the resolver cannot replace one: from the wheelhouse's directory alone
(``--no-index``) when the plan is a local wheelhouse, else from the directories and the package index.
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
from pathlib import Path

from labwright import ui
from labwright.errors import BadInput, OperationFailed
from labwright.stacks.fetch import LocalWheel, NoSpace
from labwright.stacks.layout import BUILDING, MANIFEST, now, write_atomic
from labwright.stacks.plan import SwitchPlan

INSTALLERS = ("auto", "uv", "pip")
UV_PLACES = ("/root/.local/bin/uv", "/usr/local/bin/uv")  # where uv's installer puts it (the seed's was the first)
NO_SPACE = ("No space left on device", "[Errno 28]", "os error 28")


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
    install_dependencies(prefix, name, wheels, env_dir, log)
    manifest = {
        "id": env_dir.name, "stack": plan.stack, "venv": plan.venv, "python": plan.python, "installer": name,
        "built_at": now(),
        "wheels": [{"package": w.wheel.package, "version": w.wheel.version, "filename": w.wheel.filename,
                    "source": w.wheel.source, "sha256": w.sha256, "checked": w.checked} for w in wheels],
        "absent": [list(a) for a in plan.absent],
    }
    write_atomic(env_dir / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(env_dir / "wheels", ignore_errors=True)  # downloaded copies: installed now, GBs for torch
    (env_dir / BUILDING).unlink(missing_ok=True)
    return manifest


def install_dependencies(prefix: list[str], name: str, wheels: list[LocalWheel], env_dir: Path,
                         log: Callable[[str], None]) -> None:
    """Pass two: the plan's own requirements that are not in the plan, the plan's packages pinned exactly.
    Already-satisfied requirements cost no download (stand-in stacks with no dependencies install nothing)."""
    pins = [f"{w.wheel.package}=={w.wheel.version}" for w in wheels]
    constraints = env_dir / "constraints.txt"
    constraints.write_text("".join(f"{pin}\n" for pin in pins))
    offline = not any(w.wheel.is_url for w in wheels)
    links = [f"--find-links={d}" for d in sorted({str(w.path.parent) for w in wheels})]
    log(f"install their dependencies with {name}" + (" from the wheelhouse only" if offline else ""))
    _run([*prefix, *(["--no-index"] if offline else []), *links, "-c", str(constraints), *pins],
         f"install the dependencies of the stack's wheels with {name}", env_dir)


def _run(argv: list[str], what: str, env_dir: Path, total: int | None = None) -> None:
    """Run an installer as a progress step; its failure is one line naming ``what``, the directory and the line
    of its output that says why (NoSpace when the disk filled up)."""

    def failed(code: int, tail: list[str]) -> None:
        output = "\n".join(tail)
        if any(marker in output for marker in NO_SPACE):
            raise NoSpace(f"{what}: no space left on device")
        lines = [line.strip() for line in tail if line.strip()]
        interesting = [line for line in lines if "error" in line.lower()] or lines
        raise OperationFailed(f"{what} failed in {env_dir} (exit {code}): "
                              f"{interesting[-1] if interesting else 'no output'}")

    ui.run_with_progress(argv, what, parse=ui.InstallProgress(total), keep=400, timeout=3600, failed=failed,
                         env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
