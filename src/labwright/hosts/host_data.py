"""Host data for a pyinfra connector given on labwright's command line (``--data KEY=VALUE``): typed as the
connector reads it (its ``data_cls``), a key it does not read refused with what it reads, and a target's name
checked before pyinfra is asked to connect. Used by ``bios backup|restore`` (the target's data) and ``guest
restore`` (a Proxmox container's node over SSH, for its run lock).
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any

from labwright.errors import BadInput
from labwright.textio import loads_json

#: Connectors that reach their host over pyinfra's SSH connector and so read its ssh_* data too.
_OVER_SSH = ("ssh", "dockerssh", "podmanssh", "pct")
_KEY = re.compile(r"^[a-z][a-z0-9_]*$")


def check_hostname(target: str) -> str:
    """BadInput unless ``target`` is an IP address or a DNS name (labels of 1-63 characters, 253 in all;
    labwright.schema.checks.host_problem, the one parser of hosts): a longer one reached the resolver and failed
    there (idna UnicodeError, a traceback)."""
    from labwright.schema.checks import host_problem

    host = target.rsplit("@", 1)[-1]  # user@host, as ssh takes it
    # an ssh_config alias may hold underscores (Host my_box): taken as the letters a DNS label allows
    problem = host_problem(host.replace("_", "-"), brackets=True)
    if problem is None:
        return target
    shown = target if len(target) <= 60 else target[:57] + "..."
    if "valid IP address" in problem:  # '0', '999.1.1.1': no name ends in digits (RFC 1123), no IPv4 either
        raise BadInput(f"HOST {shown!r}: not a valid IP address (each IPv4 part is 0-255, e.g. 10.99.0.10) nor a "
                       "host name (its last label cannot be all digits); give the SSH host, or @local / @lxd/NAME")
    raise BadInput(f"HOST {shown!r}: not a host name or IP address (DNS labels of 1-63 letters, digits and "
                   "hyphens, 253 characters in all); give the SSH host, or @local / @lxd/NAME")


def connector_name(target: str) -> str:
    """The pyinfra connector a target names: ``@lxd/NAME`` -> lxd, ``@local`` -> local, a hostname -> ssh; BadInput
    for ``@NAME`` no installed connector answers to (pyinfra raised NoConnectorError, a traceback here)."""
    if not target.startswith("@"):
        check_hostname(target)
        return "ssh"
    name = target[1:].split("/", 1)[0]
    installed = sorted(e.name for e in entry_points(group="pyinfra.connectors"))
    if name not in installed:
        raise BadInput(f"HOST {target}: no pyinfra connector '@{name}'; use one of "
                       f"{', '.join('@' + n for n in installed)} or an SSH hostname")
    return name


def _data_types(name: str) -> dict[str, Any]:
    """The data keys a connector reads and their types, from its ``data_cls`` TypedDict (pyinfra 3's own check)."""
    found: dict[str, Any] = {}
    for connector in {name, "ssh"} if name in _OVER_SSH else {name}:
        point = next(e for e in entry_points(group="pyinfra.connectors") if e.name == connector)
        cls = point.load()
        found.update(typing.get_type_hints(getattr(cls, "data_cls", dict)))
        found.update({key: str for key in getattr(cls, "data_meta", {}) if key not in found})
    return found


def connector_keys(name: str) -> list[str]:
    """The host data keys the pyinfra connector ``name`` reads (``ssh``: ssh_hostname, ssh_user, ...)."""
    return sorted(_data_types(name))


def _typed(item: str, key: str, value: str, kind: Any) -> Any:
    """``value`` as ``kind`` (int, float, bool, str, dict, optional ...), or BadInput naming --data ITEM."""
    options = [k for k in typing.get_args(kind) if k is not type(None)] \
        if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union else [kind]
    base = typing.get_origin(options[0]) or options[0] if options else str
    if base is bool:
        words = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
        if value.lower() not in words:
            raise BadInput(f"--data {item!r}: {key} is true or false, e.g. {key}=false")
        return words[value.lower()]
    if base is int:
        if not re.fullmatch(r"[0-9]+", value):
            raise BadInput(f"--data {item!r}: {key} is a whole number, e.g. {key}={2222 if 'port' in key else 3}")
        number = int(value)
        if key.endswith("port") and not 1 <= number <= 65535:
            raise BadInput(f"--data {item!r}: {key} is a TCP port, 1 to 65535")
        return number
    if base is float:
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not seconds >= 0 or seconds == float("inf"):
            raise BadInput(f"--data {item!r}: {key} is a number of seconds >= 0, e.g. {key}=0.5")
        return seconds
    if base is dict:
        try:
            parsed = loads_json(value)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise BadInput(f"--data {item!r}: {key} is a JSON object, e.g. {key}='{{\"timeout\": 10}}'")
        return parsed
    if not value:
        raise BadInput(f"--data {item!r}: {key} is empty; give a value or leave the --data out")
    if re.search(r"[\x00-\x1f\x7f]", value):  # a line break would reach ssh_config or a password prompt
        raise BadInput(f"--data {key}=...: {key} holds a control character (a line break?); give it on one line")
    if key == "ssh_hostname":
        from labwright.schema.fields import host_problem

        problem = host_problem(value)
        if problem is not None:
            raise BadInput(f"--data {item!r}: {key} {problem}")
    return value


def parse_host_data(target: str, items: Sequence[str] | None) -> dict[str, Any]:
    """``--data KEY=VALUE`` items as the typed host data the target's connector reads.

    pyinfra checks connector data against the connector's ``data_cls`` only once it connects, and raised
    ConnectorDataTypeError (``ssh_port=2222`` is a str) as a traceback; a key it does not read (a typo) was
    silently ignored. Here both are one BadInput line before anything is contacted.
    """
    name = connector_name(target)
    known = _data_types(name)
    data: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not _KEY.match(key):
            raise BadInput(f"--data {item!r}: expected KEY=VALUE, e.g. ssh_user=root or ssh_port=2222")
        if key not in known:
            import difflib

            near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]}?)" if near else ""
            reads = f"reads {', '.join(sorted(known))}" if known else "reads no host data"
            raise BadInput(f"--data {item!r}: the {name} connector ({target}) has no {key}{hint}; it {reads}")
        if key in data:
            raise BadInput(f"--data {item!r}: {key} is given twice; give it once")
        data[key] = _typed(item, key, value, known[key])
    return data


def connector_data(target: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """Of host data given for more than the connector (``guest restore``'s ``--data`` also names the Proxmox API),
    the keys ``target``'s connector reads, typed as it reads them (BadInput naming a bad value)."""
    known = _data_types(connector_name(target))
    items = {key: str(value).lower() if isinstance(value, bool) else str(value)
             for key, value in data.items() if key in known}
    return parse_host_data(target, [f"{key}={value}" for key, value in items.items()])
