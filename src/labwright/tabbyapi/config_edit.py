"""Set keys of config.yml's ``draft_model`` block by editing lines, then prove the edit with PyYAML.

Why lines and not ``yaml.safe_dump``: tabbyAPI's config.yml is config_sample.yml copied and edited by hand, mostly
comments; PyYAML drops every comment and reorders nothing back (ruamel, which round-trips comments, is not a
dependency). A line edit touches only the lines it sets; the PyYAML check afterwards refuses any edit whose parsed
result differs from the intended one, so an odd layout fails loudly instead of being corrupted.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

BLOCK = "draft_model"
_HEADER = re.compile(rf"^{BLOCK}:[ \t]*(#.*)?$")
_TOP_LEVEL = re.compile(r"^[^\s#]")


class ConfigShapeError(ValueError):
    """config.yml cannot be edited line by line safely (flow style, broken YAML, an edit that did not hold)."""


def load(text: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise ConfigShapeError(f"is not valid YAML ({str(exc).splitlines()[0]})") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigShapeError("is not a YAML mapping at the top level")
    return data


def draft_section(text: str) -> dict[str, Any]:
    section = load(text).get(BLOCK) or {}
    if not isinstance(section, dict):
        raise ConfigShapeError(f"has `{BLOCK}:` that is not a mapping")
    return section


def _render(value: Any) -> str:
    # safe_dump quotes what needs quoting (a mode named "yes", say) and leaves plain words plain.
    return str(yaml.safe_dump(value, default_flow_style=True)).removesuffix("\n...\n").strip()


def set_draft_keys(text: str, values: dict[str, Any]) -> str:
    """``text`` with ``draft_model.<key>: value`` for each item; other lines, comments included, untouched."""
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    header = next((i for i, line in enumerate(lines) if _HEADER.match(line.rstrip("\r\n"))), None)
    if header is None:
        if any(line.startswith(f"{BLOCK}:") for line in lines):
            raise ConfigShapeError(f"has `{BLOCK}:` in flow style; write it as a block mapping")
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += newline
        lines += [f"{BLOCK}:{newline}"] + [f"  {key}: {_render(value)}{newline}" for key, value in values.items()]
        return _checked(text, "".join(lines), values)
    # The block ends at its last entry: comments after it introduce whatever top-level key follows.
    last_entry = header
    for index in range(header + 1, len(lines)):
        if _TOP_LEVEL.match(lines[index]):
            break
        if lines[index].strip() and not lines[index].lstrip().startswith("#"):
            last_entry = index
    indent = _child_indent(lines[header + 1:last_entry + 1])
    for key, value in values.items():
        pattern = re.compile(rf"^{re.escape(indent)}{re.escape(key)}:(?P<value>[^#\r\n]*?)(?P<rest>[ \t]*(#.*)?)$")
        for index in range(header + 1, last_entry + 1):
            body = lines[index].rstrip("\r\n")
            match = pattern.match(body)
            if match:
                ending = lines[index][len(body):]
                lines[index] = f"{indent}{key}: {_render(value)}{match.group('rest')}{ending}"
                break
        else:
            last_entry += 1
            lines.insert(last_entry, f"{indent}{key}: {_render(value)}{newline}")
            if not lines[last_entry - 1].endswith("\n"):
                lines[last_entry - 1] += newline
    return _checked(text, "".join(lines), values)


def _child_indent(block: list[str]) -> str:
    for line in block:
        if line.strip() and not line.lstrip().startswith("#"):
            return line[:len(line) - len(line.lstrip(" \t"))]
    return "  "


def _checked(before: str, after: str, values: dict[str, Any]) -> str:
    """Refuse an edit that changed anything but the wanted keys, or did not set them."""
    expected = load(before)
    section = expected.get(BLOCK)
    if section is not None and not isinstance(section, dict):
        raise ConfigShapeError(f"has `{BLOCK}:` that is not a mapping")
    expected[BLOCK] = {**(section or {}), **values}
    try:
        got = load(after)
    except ConfigShapeError as exc:
        raise ConfigShapeError(f"could not be edited line by line: the result {exc}") from exc
    if got != expected:
        raise ConfigShapeError(f"could not be edited line by line (unusual layout of `{BLOCK}:`); set "
                               + ", ".join(f"{BLOCK}.{key}: {value}" for key, value in values.items()) + " by hand")
    return after
