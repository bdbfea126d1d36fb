"""The packaged tuning data (src/labwright/data/kv-cache.toml, fit.toml), read once."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from typing import Any

from labwright.errors import BadInput


@cache
def load(name: str) -> dict[str, Any]:
    """The parsed TOML file ``name`` from labwright/data."""
    try:
        return tomllib.loads(resources.files("labwright.data").joinpath(name).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"labwright data file {name}: {exc}; reinstall labwright or fix the file") from exc


def kv_data() -> dict[str, Any]:
    return load("kv-cache.toml")


def fit_data() -> dict[str, Any]:
    return load("fit.toml")
