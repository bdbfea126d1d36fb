"""The real Proxmox VE API schema (pve-docs ``apidata.js``) and a port of PVE's parameter checks.

The simulator validates every request against this schema instead of a hand-written list, so what
it accepts is what a PVE node accepts. The checks follow pve-common ``PVE::JSONSchema``
(``check_object``/``check_prop``/``parse_property_string``) in order and wording, because clients
and tests match on PVE's messages.

The schema file is AGPL-licensed and is not part of labwright: it is read at run time from
``$LABWRIGHT_PVE_APIDATA`` or from ``shared/reference/pve-apidata.json`` beside the checkout.
Either pve-docs' ``api-viewer/apidata.js`` or the plain JSON array works.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from labwright.errors import BadInput
from support.pve_formats import FormatError, check_named_format, format_size, parse_size

ENV_VAR = "LABWRIGHT_PVE_APIDATA"
_REPO = Path(__file__).resolve().parents[2]
DEFAULT_LOCATIONS = (
    _REPO.parent / "shared" / "reference" / "pve-apidata.json",
    Path.cwd().parent / "shared" / "reference" / "pve-apidata.json",
)
#: How many of each ``NAME[n]`` property PVE defines (pve-container ``PVE/LXC/Config.pm``).
INDEXED_MAX = {"net": 32, "mp": 256, "unused": 256, "dev": 256}

Errors = dict[str, str]


class PveApiError(Exception):
    """An API answer other than 200: PVE's status, message (the HTTP reason) and per-parameter ``errors``."""

    def __init__(self, status: int, message: str, errors: Errors | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors


def param_error(errors: Errors) -> PveApiError:
    """``raise_param_exc``: HTTP 400 "Parameter verification failed." with the per-parameter reasons."""
    return PveApiError(400, "Parameter verification failed.", errors)


def schema_path() -> Path:
    """Where the schema is read from; a missing file is one line naming both ways to provide it."""
    override = os.environ.get(ENV_VAR)
    candidates = [Path(override)] if override else list(DEFAULT_LOCATIONS)
    for path in candidates:
        if path.is_file():
            return path
    raise BadInput(f"PVE API schema not found (looked at {', '.join(map(str, candidates))}); set {ENV_VAR} to "
                   "pve-apidata.json or to pve-docs' api-viewer/apidata.js")


def _load_tree(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if not text.lstrip().startswith("["):  # apidata.js: `const apiSchema = [ ... ];` plus trailing code
        start, end = text.index("["), text.rindex("]")
        text = text[start : end + 1]
    tree = json.loads(text)
    if not isinstance(tree, list):
        raise BadInput(f"{path}: expected the PVE API schema (a JSON array of path nodes)")
    return tree


def perl_regex(pattern: str) -> re.Pattern[str]:
    """A PVE schema pattern as Python anchors it (``m/^$pattern$/``); Perl's ``(?^:`` groups become ``(?:``."""
    return re.compile("^(?:" + pattern.replace("(?^:", "(?:").replace("(?^i:", "(?i:") + ")$")


@dataclass
class Endpoint:
    """One API path with its methods' schema (``info`` of the apidata node)."""

    path: str
    methods: dict[str, dict[str, Any]]
    regex: re.Pattern[str] = field(repr=False)
    names: tuple[str, ...] = ()  # the {templates} in order; names like {pci-id-or-mapping} are not group names
    literal_segments: int = 0

    def properties(self, method: str) -> dict[str, Any]:
        return self.methods[method].get("parameters", {}).get("properties", {})


class ApiSchema:
    """Index of the schema tree: path templates to endpoints, and validation of a request's parameters."""

    def __init__(self, tree: list[dict[str, Any]]):
        self.endpoints: dict[str, Endpoint] = {}
        stack = list(tree)
        while stack:
            node = stack.pop()
            stack.extend(node.get("children") or [])
            path = node["path"]
            segments = path.strip("/").split("/")
            regex = "^/" + "/".join("([^/]+)" if s.startswith("{") else re.escape(s) for s in segments) + "$"
            names = tuple(s[1:-1] for s in segments if s.startswith("{"))
            literal = len(segments) - len(names)
            self.endpoints[path] = Endpoint(path, dict(node.get("info") or {}), re.compile(regex), names, literal)
        # Literal segments win over templates (/cluster/status before /cluster/{x}), as PVE's router does.
        self._ordered = sorted(self.endpoints.values(), key=lambda e: -e.literal_segments)

    @classmethod
    def load(cls, path: str | Path | None = None) -> ApiSchema:
        return _load_cached(str(Path(path) if path else schema_path()))

    def match(self, path: str) -> tuple[Endpoint, dict[str, str]] | None:
        """The endpoint for a concrete path (``/nodes/pve1/lxc/101``) and its URI parameters."""
        for endpoint in self._ordered:
            found = endpoint.regex.match(path)
            if found:
                return endpoint, dict(zip(endpoint.names, found.groups(), strict=True))
        return None


@lru_cache(maxsize=4)
def _load_cached(path: str) -> ApiSchema:
    return ApiSchema(_load_tree(Path(path)))


# --- PVE::JSONSchema, the parts requests go through ------------------------------------------------
def _add_error(errors: Errors, path: str, message: str) -> None:
    path = path or "_root"
    errors[path] = f"{errors[path]}\\n{message}" if path in errors else message


def _is_number(value: str) -> bool:
    return bool(re.match(r"^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$", value))


def _check_type(path: str, kind: str | None, value: Any, errors: Errors) -> bool:
    if not kind or kind in ("any", "string"):
        return True
    if isinstance(value, bool):  # a JSON true/false from a JSON body: PVE accepts it for booleans only
        if kind == "boolean":
            return True
        _add_error(errors, path, f"type check ('{kind}') failed - got {value}")
        return False
    text = str(value)
    ok = {"boolean": text in ("0", "1"), "integer": bool(re.match(r"^[+-]?\d+$", text)),
          "number": _is_number(text)}.get(kind, True)
    if not ok:
        _add_error(errors, path, f"type check ('{kind}') failed - got '{text}'")
    return ok


def indexed_schema(properties: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """The schema for ``key``: itself, or ``NAME[n]``'s for ``NAME<i>`` with i in PVE's range (no leading zeros)."""
    if key in properties:
        return properties[key]
    match = re.match(r"^([a-z]+)(0|[1-9]\d*)$", key)
    if match and f"{match.group(1)}[n]" in properties and int(match.group(2)) < INDEXED_MAX.get(match.group(1), 256):
        return properties[f"{match.group(1)}[n]"]
    return None


def check_prop(value: Any, schema: Mapping[str, Any], path: str, errors: Errors) -> None:
    """One parameter against its schema (``check_prop``): type, format, pattern, lengths, range, enum."""
    if value is None:
        if not schema.get("optional"):
            _add_error(errors, path, "property is missing and it is not optional")
        return
    if not _check_type(path, schema.get("type"), value, errors) or isinstance(value, bool):
        return
    text = str(value)
    fmt = schema.get("format")
    if fmt:
        try:
            if isinstance(fmt, Mapping):
                parse_property_string(fmt, text, path)
            else:
                check_named_format(fmt, text)
        except FormatError as exc:
            _add_error(errors, path, f"invalid format - {exc}")
            return
    if "pattern" in schema and not perl_regex(schema["pattern"]).match(text):
        _add_error(errors, path, "value does not match the regex pattern")
        return
    if "maxLength" in schema and len(text) > schema["maxLength"]:
        _add_error(errors, path, f"value may only be {schema['maxLength']} characters long")
        return
    if "minLength" in schema and len(text) < schema["minLength"]:
        _add_error(errors, path, f"value must be at least {schema['minLength']} characters long")
        return
    if _is_number(text):
        if "maximum" in schema and float(text) > schema["maximum"]:
            _add_error(errors, path, f"value must have a maximum value of {schema['maximum']}")
            return
        if "minimum" in schema and float(text) < schema["minimum"]:
            _add_error(errors, path, f"value must have a minimum value of {schema['minimum']}")
            return
    if "enum" in schema and text not in [str(e) for e in schema["enum"]]:
        _add_error(errors, path, f"value '{text}' does not have a value in the enumeration '"
                                 + ", ".join(str(e) for e in schema["enum"]) + "'")


def check_object(path: str, properties: Mapping[str, Any], value: Mapping[str, Any], errors: Errors) -> None:
    """A parameter set against ``properties`` with no additional properties allowed (``check_object``)."""
    for key, schema in properties.items():
        if not key.endswith("[n]"):
            check_prop(value.get(key), schema, f"{path}.{key}" if path else key, errors)
    for key, item in value.items():
        full = f"{path}.{key}" if path else key
        schema = indexed_schema(properties, key)
        if schema is None:
            _add_error(errors, full, "property is not defined in schema and the schema does not allow "
                                     "additional properties")
            continue
        if key not in properties:
            check_prop(item, schema, full, errors)
        requires = schema.get("requires")
        if isinstance(requires, str) and value.get(requires) is None:
            _add_error(errors, f"{path}.{requires}" if path else requires, f"missing property required by '{full}'")


def parse_boolean(text: str) -> str | None:
    if re.match(r"^(1|on|yes|true)$", text, re.I):
        return "1"
    if re.match(r"^(0|off|no|false)$", text, re.I):
        return "0"
    return None


def parse_property_string(fmt: Mapping[str, Any], data: str, path: str = "") -> dict[str, str]:
    """``key=value,...`` by its format (``parse_property_string``): default key, booleans as 1/0, then
    ``check_object``. Raises ``FormatError`` with PVE's text (``format error`` plus one line per key)."""
    result: dict[str, str] = {}
    default_key = next((k for k, s in fmt.items() if s.get("default_key")), None)
    for part in data.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if sep and key and value:
            if key in result:
                raise FormatError(f"duplicate key in comma-separated list property: {key}\n")
            if key not in fmt:
                raise FormatError(f"invalid key in comma-separated list property: {key}\n")
            if fmt[key].get("type") == "boolean":
                value = parse_boolean(value) or value
            result[key] = value
        elif not sep:
            if default_key is None:
                raise FormatError("value without key, but schema does not define a default key\n")
            if default_key in result:
                raise FormatError(f"duplicate key in comma-separated list property: {default_key}\n")
            if fmt[default_key].get("type") == "boolean":
                part = parse_boolean(part) or part
            result[default_key] = part
        else:
            raise FormatError("missing key in comma-separated list property\n")
    errors: Errors = {}
    check_object(path, fmt, result, errors)
    if errors:
        raise FormatError("format error\n" + "".join(f"{k}: {v}\n" for k, v in errors.items()))
    return result


def print_property_string(data: Mapping[str, Any], fmt: Mapping[str, Any], skip: tuple[str, ...] = ()) -> str:
    """PVE's ``print_property_string``: default key bare and first, then required keys, then the rest sorted."""
    default_key = next((k for k, s in fmt.items() if s.get("default_key")), None)
    order = [default_key] if default_key else []
    order += sorted(k for k in data if k in fmt and not fmt[k].get("optional"))
    order += sorted(data)
    parts, done = [], set(skip)
    for key in order:
        if key in done or data.get(key) is None:
            continue
        done.add(key)
        if key not in fmt:
            raise ValueError(f"invalid key '{key}'")
        value = str(data[key])
        if fmt.get(key, {}).get("format") == "disk-size":
            value = format_size(parse_size(value) or 0)
        parts.append(value if key == default_key else f"{key}={value}")
    return ",".join(parts)


def validate(properties: Mapping[str, Any], params: Mapping[str, Any]) -> Errors:
    """Every error PVE reports for ``params`` against a method's ``properties`` (empty when valid)."""
    errors: Errors = {}
    check_object("", properties, params, errors)
    return errors
