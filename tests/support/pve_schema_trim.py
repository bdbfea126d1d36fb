"""Regenerate ``tests/support/data/pve-apidata.trimmed.json`` from pve-docs' full API schema.

Not needed at test time: the trimmed file is committed. Run it when PVE changes its API or the simulator
implements another endpoint::

    python tests/support/pve_schema_trim.py /path/to/pve-docs/api-viewer/apidata.js

What is kept (see ``data/PROVENANCE.md``):

- every path node of the tree (``path``, ``text``, ``leaf``, ``children``), so the simulator routes exactly as
  a real node does and an unknown path is still PVE's 501;
- every method a path has, so a real endpoint the simulator does not implement is told apart from a bogus one;
- the full method schema (parameters, permissions, returns) only for the methods the simulator implements
  (``PveApi.routes``) and ``POST /access/ticket`` (login), with free-text ``description``/``verbose_description``
  and ``typetext`` strings dropped: nothing validates against them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `support` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.pve_schema import ApiSchema, _load_tree

TRIMMED = Path(__file__).resolve().parent / "data" / "pve-apidata.trimmed.json"
#: Free text only: documentation for people, never read by a check.
TEXT_KEYS = ("description", "verbose_description", "typetext")
#: Handled outside PveApi.routes (PveSimulator._login).
EXTRA = {("POST", "/access/ticket")}


def implemented(tree: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(method, path template) of every endpoint the simulator answers, read from its route table."""
    from support.pve_api import PveApi
    from support.pve_state import PveCluster

    with tempfile.TemporaryDirectory() as pmxcfs:
        api = PveApi(ApiSchema(tree), PveCluster([], [], [], Path(pmxcfs)))
    return set(api.routes) | EXTRA


def _drop_text(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_text(v) for k, v in value.items() if not (k in TEXT_KEYS and isinstance(v, str))}
    if isinstance(value, list):
        return [_drop_text(v) for v in value]
    return value


def trim(tree: list[dict[str, Any]], keep: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """The tree with every path and method, and method schemas only for ``keep``."""

    def node(item: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {k: item[k] for k in ("path", "text", "leaf") if k in item}
        info = item.get("info") or {}
        if info:
            out["info"] = {m: (_drop_text(s) if (m, item["path"]) in keep else {"name": s.get("name")})
                           for m, s in sorted(info.items())}
        if item.get("children"):
            out["children"] = [node(child) for child in item["children"]]
        return out

    return [node(item) for item in tree]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="pve-docs' api-viewer/apidata.js or the plain JSON array")
    parser.add_argument("--out", type=Path, default=TRIMMED)
    args = parser.parse_args(argv)
    tree = _load_tree(args.source)
    keep = implemented(tree)
    endpoints = ApiSchema(tree).endpoints
    missing = sorted(f"{m} {p}" for m, p in keep if p not in endpoints or m not in endpoints[p].methods)
    if missing:
        print(f"the simulator implements endpoints this schema lacks: {', '.join(missing)}", file=sys.stderr)
        return 1
    args.out.write_text(json.dumps(trim(tree, keep), indent=1, sort_keys=True) + "\n",
                        encoding="utf-8")
    print(f"{args.out}: {len(keep)} methods kept in full, {args.out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
