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


def cache_root() -> Path:
    """The one cache root (see the module docstring); not created here."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "labwright"


def cache_path(*parts: str) -> Path:
    """A path below the cache root, e.g. ``cache_path("images")``."""
    return cache_root().joinpath(*parts)


def data_root() -> Path:
    """The user's own labwright data directory (XDG data home)."""
    return Path(os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")) / "labwright"


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
