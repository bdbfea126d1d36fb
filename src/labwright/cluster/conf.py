"""corosync.conf as corosync 3 reads it: nested ``name {`` ... ``}`` blocks and ``key: value`` lines.

Only what the cluster runbooks need is interpreted (totem, nodelist, quorum); every other block is
kept as parsed. A file corosync would refuse is refused here too, with one line naming the file,
the line and the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from labwright.errors import BadInput


class ConfError(BadInput):
    """corosync.conf does not parse: exit 2, one line."""


@dataclass(frozen=True)
class ConfNode:
    name: str
    nodeid: int
    ring0_addr: str
    votes: int = 1
    addresses: tuple[str, ...] = ()  # ring0_addr .. ring7_addr as listed (every knet link's address)


@dataclass
class CorosyncConf:
    source: str
    config_version: int
    cluster_name: str
    nodes: list[ConfNode]
    totem: dict[str, Any] = field(default_factory=dict)
    quorum: dict[str, Any] = field(default_factory=dict)

    def node(self, name: str) -> ConfNode | None:
        return next((n for n in self.nodes if n.name == name), None)

    def node_by_addr(self, addr: str) -> ConfNode | None:
        return next((n for n in self.nodes if n.ring0_addr == addr), None)

    def node_by_id(self, nodeid: int) -> ConfNode | None:
        return next((n for n in self.nodes if n.nodeid == nodeid), None)


Block = dict[str, Any]  # values: str, or list[Block] for sub-blocks (a block name may repeat: node { } node { })


def parse_blocks(text: str, source: str) -> Block:
    """The raw tree: ``{"totem": [{...}], "nodelist": [{"node": [{...}, ...]}]}``; scalars as strings."""
    root: Block = {}
    stack: list[tuple[Block, str, int]] = [(root, "", 0)]
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line == "}":
            if len(stack) == 1:
                raise ConfError(f"{source}: line {lineno}: '}}' closes no block; "
                                "remove it or add the block's opening line")
            stack.pop()
            continue
        if line.endswith("{"):
            name = line[:-1].strip()
            if not name or not all(c.isalnum() or c in "_-." for c in name):
                raise ConfError(f"{source}: line {lineno}: bad block name {name!r}; write `name {{` on its own line")
            child: Block = {}
            stack[-1][0].setdefault(name, []).append(child)
            stack.append((child, name, lineno))
            continue
        if "{" in line or "}" in line:
            raise ConfError(f"{source}: line {lineno}: a brace must end its line (corosync's parser); "
                            f"put {line!r} on separate lines")
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or not key or " " in key:
            raise ConfError(f"{source}: line {lineno}: expected `key: value`, got {line!r}; fix the line")
        stack[-1][0][key] = value.strip()
    if len(stack) > 1:
        _, name, lineno = stack[-1]
        raise ConfError(f"{source}: block {name!r} opened on line {lineno} is never closed; add its '}}'")
    return root


def _one(block: Block, name: str) -> Block:
    items = block.get(name)
    return items[0] if isinstance(items, list) and items else {}


_NUMBER = re.compile(r"[0-9]{1,20}|0x[0-9a-fA-F]{1,16}")


def _int(value: Any, what: str, source: str, minimum: int = 0, maximum: int = 2**64 - 1) -> int:
    """A number as corosync reads it (decimal or 0x hex, ASCII digits), from ``minimum`` to ``maximum``."""
    text = str(value) if isinstance(value, str | int) and not isinstance(value, bool) else ""
    number = int(text, 0) if _NUMBER.fullmatch(text) else None
    if number is None or not minimum <= number <= maximum:
        raise ConfError(f"{source}: {what} is {value!r}, not a whole number from {minimum} to {maximum}; fix the "
                        "file")
    return number


def _nodes(tree: Block, source: str) -> list[Block]:
    """The nodelist's ``node { }`` blocks; a ``node: value`` line where a block belongs is refused."""
    items = _one(tree, "nodelist").get("node", [])
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ConfError(f"{source}: nodelist's node is {items!r}, not a block; write each node as `node {{` with its "
                        "name, nodeid and ring0_addr inside")
    return items


def _text(raw: Block, key: str, what: str, source: str) -> str:
    value = raw.get(key, "")
    if not isinstance(value, str):
        raise ConfError(f"{source}: {what}'s {key} is a block, not a value; write `{key}: VALUE`")
    return value


def parse_conf(text: str, source: str = "corosync.conf") -> CorosyncConf:
    tree = parse_blocks(text, source)
    if "totem" not in tree:
        raise ConfError(f"{source}: no totem {{ }} block; this is not a corosync.conf")
    totem = _one(tree, "totem")
    nodes: list[ConfNode] = []
    for i, raw in enumerate(_nodes(tree, source)):
        where = f"nodelist node #{i + 1}"
        name = _text(raw, "name", where, source) or _text(raw, "ring0_addr", where, source)
        if not name:
            raise ConfError(f"{source}: {where} has neither name nor ring0_addr; add `name: NODE`")
        nodeid = _int(raw.get("nodeid", str(i + 1)), f"node {name} nodeid", source, 1, 2**32 - 1)
        addresses = tuple(_text(raw, f"ring{link}_addr", where, source) for link in range(8)
                          if raw.get(f"ring{link}_addr"))
        nodes.append(ConfNode(name, nodeid, _text(raw, "ring0_addr", where, source),
                              _int(raw.get("quorum_votes", "1"), f"node {name} quorum_votes", source, 0, 2**32 - 1),
                              addresses))
    names = [n.name for n in nodes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfError(f"{source}: node {dupes[0]} is listed twice in the nodelist; keep one entry")
    return CorosyncConf(
        source=source,
        config_version=_int(totem.get("config_version", "0"), "totem.config_version", source),
        cluster_name=str(totem.get("cluster_name", "")),
        nodes=nodes,
        totem={k: v for k, v in totem.items() if not isinstance(v, list)},
        quorum={k: v for k, v in _one(tree, "quorum").items() if not isinstance(v, list)},
    )


def render_conf(conf_text: str, config_version: int) -> str:
    """``conf_text`` with totem's config_version set to ``config_version`` (the rest kept byte for byte)."""
    out, depth, in_totem, done = [], 0, False, False
    for raw in conf_text.splitlines(keepends=True):
        line = raw.split("#", 1)[0].strip()
        if line.endswith("{"):
            depth += 1
            if depth == 1 and line[:-1].strip() == "totem":
                in_totem = True
        elif line == "}":
            if depth == 1 and in_totem and not done:
                out.append(f"  config_version: {config_version}\n")
                done = True
            depth -= 1
            in_totem = in_totem and depth >= 1
        elif in_totem and depth == 1 and line.partition(":")[0].strip() == "config_version":
            indent = raw[: len(raw) - len(raw.lstrip())]
            out.append(f"{indent}config_version: {config_version}\n")
            done = True
            continue
        out.append(raw)
    return "".join(out)
