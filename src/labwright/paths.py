"""Where labwright keeps things: one cache root, one data root, and the package's own resources.

Templates, the wheels matrix and the testinfra suites are package data, read with importlib.resources the same way
from a wheel, a pipx/uv tool install or an editable checkout: ``labwright/data/``, ``labwright/verify/``, and the
checkout's top-level ``templates/`` and ``wheels_matrix/``, which the build maps in as the packages
``labwright.data.templates`` and ``labwright.data.matrix`` (setup.py). Only a source tree run without any install
(``PYTHONPATH=src``, as scripts/gpu-check does on a lent machine) has no such mapping: there the two folders beside
its ``src/`` are read.

- cache: ``$LABWRIGHT_CACHE``, else ``$XDG_CACHE_HOME/labwright``, else ``~/.cache/labwright`` (images, llama-server
  builds, wheelhouses, ABI verdicts, test environments).
- data: ``$XDG_DATA_HOME/labwright``, else ``~/.local/share/labwright`` (the lab key, a refreshed matrix).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

CACHE_ENV = "LABWRIGHT_CACHE"


def _root(variable: str, fallback: str) -> Path:
    """The directory ``$variable`` names, checked where it enters (every caller, a pyinfra deploy included, reads
    it here): a relative XDG path is ignored, as the XDG Base Directory spec says ("consider the path invalid and
    ignore it"); a control character, a relative LABWRIGHT_CACHE, or a path whose nearest existing part is a file or
    a kernel filesystem is one line naming the variable (sweep at 2b91fd1: XDG_CACHE_HOME=/proc/nope was a
    FileNotFoundError traceback in the llama.cpp deploy, XDG_CACHE_HOME=relative/cache resolved against the cwd)."""
    from labwright.errors import BadInput
    from labwright.schema.checks import control_character

    value = os.environ.get(variable) or ""
    if not value or (variable.startswith("XDG_") and not os.path.isabs(value)):
        return Path(os.path.expanduser(fallback))
    fix = f"set {variable} to a directory you can write, or unset it"
    if control_character(value):
        raise BadInput(f"{variable}={value[:60]!r} holds a control character; {fix}")
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        raise BadInput(f"{variable}={value!r} is not an absolute path; {fix}")
    if path.parts[1:2] in (("proc",), ("sys",), ("dev",)):
        raise BadInput(f"{variable}={value!r} is on a kernel filesystem; {fix}")
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("/"))
    if not existing.is_dir():
        raise BadInput(f"{variable}={value!r}: {existing} is {'a file' if existing.is_file() else 'not a directory'}"
                       f"; {fix}")
    return path


def cache_root() -> Path:
    """The one cache root (see the module docstring); not created here."""
    if os.environ.get(CACHE_ENV):
        return _root(CACHE_ENV, "~/.cache/labwright")
    return _root("XDG_CACHE_HOME", "~/.cache") / "labwright"


def cache_path(*parts: str) -> Path:
    """A path below the cache root, e.g. ``cache_path("images")``."""
    return cache_root().joinpath(*parts)


def data_root() -> Path:
    """The user's own labwright data directory (XDG data home)."""
    return _root("XDG_DATA_HOME", "~/.local/share") / "labwright"


def package_dir(package: str) -> Path:
    """A package of labwright's as a directory on disk (wheels are installed unpacked: pip, uv and pipx all do)."""
    return Path(str(resources.files(package)))


def data_dir() -> Path:
    """``labwright/data``: the packaged TOML tables (fit, gpu-arch, gpu-check, kv-cache, lab-image)."""
    return package_dir("labwright.data")


#: The data packages kept at the checkout's top level (setup.py maps them in): package -> folder in the checkout.
TOP_LEVEL_DATA = {"labwright.data.templates": "templates", "labwright.data.matrix": "wheels_matrix"}


def top_level_data_dir(package: str) -> Path:
    """One of ``TOP_LEVEL_DATA`` as a directory: the installed package, else the folder beside a bare ``src/``."""
    try:
        return package_dir(package)
    except ModuleNotFoundError:
        beside = Path(__file__).resolve().parents[2] / TOP_LEVEL_DATA[package]
        if (beside / "__init__.py").is_file():
            return beside
        raise


def templates_dir(tool: str) -> Path:
    """The Jinja2 templates and defaults.toml of one tool, e.g. ``templates_dir("tabbyapi")`` (``templates/tabbyapi``
    in a checkout)."""
    return top_level_data_dir("labwright.data.templates") / tool


def packaged_matrix_dir() -> Path:
    """The wheels matrix that ships with this version of labwright (``wheels_matrix/`` in a checkout)."""
    return top_level_data_dir("labwright.data.matrix")


VERIFY_SUITES = ("base", "desktop", "gateway", "kokoro", "litellm", "llamacpp", "monitoring", "openwebui", "security",
                 "tabbyapi", "vllm")


def verify_suite(name: str) -> Path:
    """The testinfra suite of one deploy, e.g. ``verify_suite("base")`` -> ``.../labwright/verify/test_base.py``."""
    if name not in VERIFY_SUITES:
        from labwright.errors import BadInput

        raise BadInput(f"{name!r} is not a verify suite: choose one of {', '.join(VERIFY_SUITES)}")
    return package_dir("labwright.verify") / f"test_{name}.py"
