"""Set keys of config.yml's ``draft_model`` block by editing lines, then prove the edit with PyYAML.

Why lines and not ``yaml.safe_dump``: tabbyAPI's config.yml is config_sample.yml copied and edited by hand, mostly
comments; PyYAML drops every comment and reorders nothing back (ruamel, which round-trips comments, is not a
dependency). A line edit touches only the lines it sets; the PyYAML check afterwards refuses any edit whose parsed
result differs from the intended one, so an odd layout fails loudly instead of being corrupted.
"""

from __future__ import annotations

from typing import Any

import yaml

from labwright.textio import YamlExpansionError, yaml_load

BLOCK = "draft_model"
BOM = "\ufeff"


class ConfigShapeError(ValueError):
    """config.yml cannot be edited line by line safely (flow style, broken YAML, an edit that did not hold)."""


class _UniqueKeys(yaml.SafeLoader):
    """SafeLoader that refuses a key twice in one mapping, as tabbyAPI's loader does.

    tabbyAPI reads config.yml with ruamel.yaml ``YAML(typ=["rt", "safe"])`` (common/tabby_config.py, theroyallab/
    tabbyAPI e632af4), which raises DuplicateKeyError; PyYAML would silently keep the last one, so an edit that
    added a second ``draft_model:`` looked fine here and stopped the service there.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: SafeLoader refuses it below with its own message
            if first is not None:
                raise ConfigShapeError(f"has the key `{key}` twice in one mapping (lines {first + 1} and "
                                       f"{key_node.start_mark.line + 1}); tabbyAPI refuses a duplicate key: keep one")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def load(text: str) -> dict[str, Any]:
    try:
        data = yaml_load(text, _UniqueKeys) if text.strip(BOM + " \t\r\n") else {}
    except YamlExpansionError as exc:
        raise ConfigShapeError(f"{exc}; fix the YAML") from None
    except RecursionError:
        raise ConfigShapeError("is nested too deeply; fix the YAML") from None
    except yaml.YAMLError as exc:
        raise ConfigShapeError(f"is not valid YAML ({str(exc).splitlines()[0]}); fix the YAML") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigShapeError("is not a YAML mapping at the top level (tabbyAPI's config.yml is one: model:, "
                               "network:, draft_model: ...); give tabbyAPI's config.yml")
    return data


def draft_section(text: str) -> dict[str, Any]:
    section = load(text).get(BLOCK) or {}
    if not isinstance(section, dict):
        raise ConfigShapeError(f"has `{BLOCK}:` that is not a mapping")
    return section


def max_seq_len(text: str) -> int | None:
    """``model.max_seq_len`` when config.yml sets it to a whole number (None: the model's own default)."""
    model = load(text).get("model")
    value = model.get("max_seq_len") if isinstance(model, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _render(value: Any) -> str:
    # safe_dump quotes what needs quoting (a mode named "yes", say) and leaves plain words plain.
    return str(yaml.safe_dump(value, default_flow_style=True)).removesuffix("\n...\n").strip()


def _top_level_node(body: str, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    """The (key, value) nodes of a top-level ``key`` however it is written: plain, quoted, ``? key``, after a BOM."""
    try:
        root = yaml.compose(body, Loader=_UniqueKeys)
    except yaml.YAMLError as exc:
        raise ConfigShapeError(f"is not valid YAML ({str(exc).splitlines()[0]}); fix the YAML") from exc
    if root is None:
        return None
    if not isinstance(root, yaml.MappingNode):
        raise ConfigShapeError("is not a YAML mapping at the top level (tabbyAPI's config.yml is one: model:, "
                               "network:, draft_model: ...); give tabbyAPI's config.yml")
    if root.flow_style:
        raise ConfigShapeError("is a flow-style mapping ({...}); write it as a block mapping")
    found = [(k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == key]
    return found[0] if found else None


def _line_end(body: str, index: int) -> int:
    """The index just past the end of the line holding ``index`` (its newline included)."""
    at = body.find("\n", index)
    return len(body) if at < 0 else at + 1


def set_draft_keys(text: str, values: dict[str, Any]) -> str:
    """``text`` with ``draft_model.<key>: value`` for each item; other lines, comments included, untouched.

    The block and its keys are found by YAML position (compose), so ``"draft_model":``, ``? draft_model`` or a file
    that starts with a UTF-8 byte order mark (kept as it was) are edited in place, never appended a second time.
    """
    bom = BOM if text.startswith(BOM) else ""
    body = text[len(bom):]
    load(body)  # duplicate keys or broken YAML: refuse before touching anything
    newline = "\r\n" if "\r\n" in body else "\n"
    found = _top_level_node(body, BLOCK)
    if found is None:
        tail = "" if not body or body.endswith("\n") else newline
        block = f"{BLOCK}:{newline}" + "".join(f"  {key}: {_render(value)}{newline}" for key, value in values.items())
        return _checked(text, bom + body + tail + block, values)
    key_node, block_node = found
    if isinstance(block_node, yaml.MappingNode) and block_node.flow_style:
        raise ConfigShapeError(f"has `{BLOCK}:` in flow style; write it as a block mapping")
    if isinstance(block_node, yaml.ScalarNode) and block_node.value in ("", "~", "null", "Null", "NULL"):
        if block_node.end_mark.index > block_node.start_mark.index:
            raise ConfigShapeError(f"has `{BLOCK}: {block_node.value}`; write `{BLOCK}:` with nothing after it, or "
                                   "set the keys by hand")
        at = _line_end(body, key_node.start_mark.index)
        prefix = body[:at] if body[:at].endswith("\n") else body[:at] + newline
        block = "".join(f"  {key}: {_render(value)}{newline}" for key, value in values.items())
        return _checked(text, bom + prefix + block + body[at:], values)
    if not isinstance(block_node, yaml.MappingNode):
        raise ConfigShapeError(f"has `{BLOCK}:` that is not a mapping")
    children = {k.value: (k, v) for k, v in block_node.value if isinstance(k, yaml.ScalarNode)}
    first_key = block_node.value[0][0]
    line_start = body.rfind("\n", 0, first_key.start_mark.index) + 1
    indent = body[line_start:first_key.start_mark.index]
    if indent.strip(" \t"):
        raise ConfigShapeError(f"has `{BLOCK}:` entries that do not start their own lines; set "
                               + ", ".join(f"{BLOCK}.{key}: {value}" for key, value in values.items()) + " by hand")
    # Edits from the end of the file backwards, so earlier indices stay valid.
    edits: list[tuple[int, int, str]] = []
    missing = []
    for key, value in values.items():
        if key not in children:
            missing.append(f"{indent}{key}: {_render(value)}{newline}")
            continue
        child_key, child_value = children[key]
        if not isinstance(child_value, yaml.ScalarNode) or child_value.start_mark.line != child_key.start_mark.line \
                or child_value.end_mark.line != child_key.start_mark.line:
            raise ConfigShapeError(f"has `{BLOCK}.{key}` spread over lines; set {BLOCK}.{key}: {_render(value)} by "
                                   "hand")
        start, end = child_value.start_mark.index, child_value.end_mark.index
        edits.append((start, end, _render(value) if start < end else " " + _render(value)))
    if missing:
        last_value = block_node.value[-1][1]
        end = last_value.end_mark.index
        at = _line_end(body, end - 1 if last_value.end_mark.column == 0 and end > 0 else end)
        edits.append((at, at, ("" if body[:at].endswith("\n") else newline) + "".join(missing)))
    after = body
    for start, end, replacement in sorted(edits, reverse=True):
        after = after[:start] + replacement + after[end:]
    return _checked(text, bom + after, values)


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
