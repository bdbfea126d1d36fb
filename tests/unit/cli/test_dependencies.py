"""Dependencies that match the code (issue 19 item 5): every distribution pyproject.toml declares is imported by
labwright's source, and every third-party module the source imports is declared (or comes with one that is).
pylxd was declared and never imported (labwright's own client in labwright/lxd/ does what it needs): it is gone."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "src" / "labwright"
#: Declared for a reason the import graph does not show.
DECLARED_NOT_IMPORTED = {
    "typing-extensions": "imported only below Python 3.11 (connectors' @override on older Pythons)",
}


def _names(texts: list[str]) -> set[str]:
    return {Requirement(text).name.lower().replace("_", "-") for text in texts}


def _declared() -> set[str]:
    return _names(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])


def _extras() -> set[str]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return {name for texts in extras.values() for name in _names(texts)}


def _imported_top_levels() -> set[str]:
    found: set[str] = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"labwright", "__future__"}


def test_pylxd_is_not_declared():
    assert "pylxd" not in _declared()


def test_every_declared_distribution_is_imported():
    dists = packages_distributions()
    imported_dists = {d.lower().replace("_", "-") for module in _imported_top_levels() for d in dists.get(module, [])}
    unused = _declared() - imported_dists - set(DECLARED_NOT_IMPORTED)
    assert not unused, f"declared in pyproject.toml and never imported by src/labwright: {sorted(unused)}"


def test_every_imported_module_is_declared():
    dists = packages_distributions()
    declared = _declared() | _extras()  # an extra's modules are imported only where they are used
    undeclared = {}
    for module in sorted(_imported_top_levels()):
        owners = {d.lower().replace("_", "-") for d in dists.get(module, [])}
        if not owners & declared:
            undeclared[module] = sorted(owners) or ["not installed"]
    # pip: stacks/remote.py runs in a guest's new venv and uses that venv's own pip, never this one's
    missing = {m: o for m, o in undeclared.items() if m != "pip"}
    assert not missing, f"imported by src/labwright and not declared in pyproject.toml: {missing}"
