"""deploys/kokoro.py's decisions as pure logic: CPU or GPU by field note 002's rule, and what to pip install."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

from labwright import paths
from labwright.schema.checks import control_character

TEMPLATES = paths.templates_dir("kokoro")


class DataError(ValueError):
    """Bad Kokoro data; the message starts with the data key."""


def load_defaults() -> dict[str, Any]:
    return tomllib.loads((TEMPLATES / "defaults.toml").read_text())


def choose_device(use: str, device: str, choice: Mapping[str, str]) -> str:
    """``device`` when set (cpu|gpu), else the [choice] table's device for ``use``."""
    if control_character(device) or control_character(use):  # str.strip() would take \x0b away unseen
        key, value = ("kokoro_device", device) if control_character(device) else ("kokoro_use", use)
        raise DataError(f"{key}: {value[:40]!r} holds a control character; give one word")
    device = device.strip(" ").lower()
    if device:
        if device not in ("cpu", "gpu"):
            raise DataError(f"kokoro_device: {device!r} is not cpu or gpu (or leave it empty to choose by kokoro_use)")
        return device
    use = use.strip(" ").lower().replace("-", "_")
    if use not in choice:
        raise DataError(f"kokoro_use: {use!r} is not one of {', '.join(choice)} (CPU for conversational use, GPU "
                        "for long-form reading, as field note 002 measured)")
    return str(choice[use])


def requirements(pyproject: str, extra: str, where: str) -> list[str]:
    """[project] dependencies plus the ``extra`` optional group of a Kokoro-FastAPI pyproject.toml."""
    try:
        project = tomllib.loads(pyproject).get("project", {})
    except tomllib.TOMLDecodeError as exc:
        raise DataError(f"kokoro_source: {where} is not valid TOML ({exc})") from None
    deps = project.get("dependencies")
    if not isinstance(deps, list):
        raise DataError(f"kokoro_source: {where} has no [project] dependencies: is this a Kokoro-FastAPI checkout?")
    groups = project.get("optional-dependencies", {})
    if extra not in groups:
        raise DataError(f"kokoro_source: {where} has no optional-dependencies group {extra!r} (has: "
                        f"{', '.join(groups) or 'none'}); set kokoro_device to one it has")
    found = [str(r) for r in [*deps, *groups[extra]]]
    bad = [r for r in found if r.strip().startswith("-") or "\n" in r]
    if bad:
        raise DataError(f"kokoro_source: {where} lists requirement {bad[0]!r}, which labwright will not pass to pip")
    return found
