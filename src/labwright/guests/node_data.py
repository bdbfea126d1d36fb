"""A Proxmox VE node's connection data, typed once (issue 33): ``proxmox_api_url`` (an https URL, port 1-65535),
``proxmox_ca_file``, ``proxmox_verify_tls`` (true or false, never the string "false"), ``proxmox_root_via`` (api or
ssh).

Two surfaces read it:
- the inventory (the node host's data, or a guest host's own): :func:`node_settings` checks the ``proxmox_*`` keys
  there (other keys belong to other readers); a ``proxmox_*`` key it does not know (``proxmox_api_ur``) is refused
  naming the closest known key instead of silently falling back to https://NODE:8006;
- ``--data KEY=VALUE`` of ``labwright guest snapshot|snapshots|restore``: :func:`parse_node_items` refuses any key
  that is neither a node key nor one the SSH connector reads (the node's run lock goes over SSH), naming the closest.

pydantic is imported inside the functions (``labwright --help`` does not pay for it).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from labwright.errors import BadInput

#: The keys a node's connection data may hold, with their defaults.
NODE_KEYS: dict[str, Any] = {
    "proxmox_api_url": "",  # default: https://NODE:8006 (NODE: ssh_hostname or the node's name)
    "proxmox_ca_file": "",
    "proxmox_verify_tls": True,
    "proxmox_root_via": "api",
}
_URL_EXAMPLE = "https://pve1.lan:8006"
_EXAMPLE = f"proxmox_api_url={_URL_EXAMPLE}"


def _model() -> Any:
    from typing import Annotated

    from pydantic import BeforeValidator

    from labwright.schema.fields import StrictBool, line, one_of, or_empty, url
    from labwright.schema.model import Schema

    def https_url(value: Any) -> str:
        try:
            return url(value, schemes=("https",))
        except ValueError as error:  # the example a Proxmox API URL follows
            raise ValueError(str(error).replace("e.g. http://127.0.0.1:8080/v1", f"e.g. {_URL_EXAMPLE}")) from None

    class NodeData(Schema):
        proxmox_api_url: Annotated[str, BeforeValidator(or_empty(https_url))] = ""
        proxmox_ca_file: Annotated[str, BeforeValidator(or_empty(line))] = ""
        proxmox_verify_tls: StrictBool = True
        proxmox_root_via: Annotated[str, BeforeValidator(one_of("api", "ssh"))] = "api"

    return NodeData


def node_settings(data: Mapping[str, Any], source: str = "host data") -> dict[str, Any]:
    """The ``proxmox_*`` keys of ``data`` checked and typed (defaults filled in); BadInput, one line naming the key as
    ``SOURCE: KEY: ...``. Keys without the ``proxmox_`` prefix are left to their own readers."""
    from labwright.schema.model import parse

    given = {key: value for key, value in data.items() if str(key).startswith("proxmox_")}
    model = _model()

    def refuse(message: str) -> BadInput:
        return BadInput(f"{source}: {message}")

    return parse(model, given, error=refuse, noun="Proxmox node key").model_dump()


def _closest(key: str, known: Sequence[str]) -> str:
    near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f"did you mean {near[0]}?" if near else f"known keys: {', '.join(sorted(known))}"


def parse_node_items(items: Sequence[str] | None, ssh_keys: Sequence[str] = ()) -> dict[str, Any]:
    """``--data KEY=VALUE`` items as a node's host data: the node keys typed (``true``/``false`` written bare are
    booleans, as pyinfra's --data reads them), ``ssh_keys`` (what the SSH connector reads) kept as text for
    :func:`labwright.hosts.host_data.connector_data`; any other key, a repeated key or a bad value: BadInput naming
    ``--data ITEM`` before anything is contacted."""
    data: dict[str, Any] = {}
    raw: dict[str, str] = {}
    known = [*NODE_KEYS, *ssh_keys]
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise BadInput(f"--data {item!r}: expected KEY=VALUE, e.g. {_EXAMPLE}")
        if key not in known:
            raise BadInput(f"--data {item!r}: unknown key {key} ({_closest(key, known)}); fix or remove it (nothing "
                           "was contacted)")
        if key in raw:
            raise BadInput(f"--data {item!r}: {key} is given twice; give it once")
        raw[key] = item
        data[key] = value
        if key == "proxmox_verify_tls":
            data[key] = {"true": True, "false": False}.get(value.strip().lower())
            if data[key] is None:
                raise BadInput(f"--data {item!r}: {key} is true or false, e.g. {key}=false")
    try:
        node_settings(data, "--data")
    except BadInput as error:
        bad = next((k for k in raw if str(error).startswith(f"--data: {k}:")), None)
        if bad is None:
            raise
        raise BadInput(f"--data {raw[bad]!r}: {str(error).removeprefix(f'--data: {bad}: ')}") from None
    return data
