"""pyinfra fact: which stack environment a managed venv path runs now (read from the symlink and the state file).

It is plain shell (readlink, test, cat), so it works before the labwright bundle was ever pushed and on any
connector. The stack switch operation compares it with the plan: same environment, no change.

**Example:**

.. code:: python

    from labwright.facts.python_stack import PythonStack
    now = host.get_fact(PythonStack, venv="/opt/tabbyapi/.venv")
    now["kind"], now["target"], now["current"] and now["current"]["stack"]
"""

from __future__ import annotations

from typing import Any

from pyinfra.api import FactBase

from labwright.shell import quote
from labwright.stacks.layout import STATE_SCHEMA, Layout
from labwright.stacks.plan import DEFAULT_ROOT
from labwright.textio import loads_json

_MARK = "@@labwright-stack-"


class PythonStack(FactBase[Any]):
    """``{"kind": absent|symlink|venv|other, "target": the symlink's target or None, "current": state entry or
    None, "previous": state entry or None}``.

    + venv: the managed path (``/opt/tabbyapi/.venv``)
    + root: the stacks root the state lives under (default ``/opt/labwright/stacks``)
    """

    def command(self, venv: str, root: str = DEFAULT_ROOT) -> str:
        path = quote(venv)
        state = quote(str(Layout(root, venv).state_file))
        return (
            f"echo {_MARK}kind; "
            f"if [ -L {path} ]; then echo symlink; elif [ -f {path}/pyvenv.cfg ]; then echo venv; "
            f"elif [ -e {path} ]; then echo other; else echo absent; fi; "
            f"echo {_MARK}target; readlink {path} 2>/dev/null || true; "
            f"echo {_MARK}state; cat {state} 2>/dev/null || true"
        )

    def process(self, output: list[str]) -> dict[str, Any]:
        sections: dict[str, list[str]] = {}
        current: str | None = None
        for line in output:
            if line.startswith(_MARK):
                current = line.removeprefix(_MARK).strip()
                sections[current] = []
            elif current is not None:
                sections[current].append(line)
        kind = (sections.get("kind") or ["absent"])[0].strip()
        target = "\n".join(sections.get("target", [])).strip() or None
        state: Any = None
        text = "\n".join(sections.get("state", [])).strip()
        if text:
            try:
                state = loads_json(text)
            except ValueError:
                state = None
        if not isinstance(state, dict) or state.get("schema") != STATE_SCHEMA:
            state = {}
        return {"kind": kind, "target": target, "current": state.get("current"), "previous": state.get("previous")}


class VenvPackageVersion:
    """Mixin for a fact (``class XVersion(VenvPackageVersion, FactBase)``): the version of ``package`` installed in
    a venv (None: no venv or not installed), read by ``importlib.metadata`` without importing the package (a big
    package's import takes seconds)."""

    package = ""

    def command(self, venv: str) -> str:
        python = quote(f"{venv.rstrip('/')}/bin/python")
        code = quote(f"import importlib.metadata as m; print(m.version({self.package!r}))")
        return f"{python} -c {code} 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        text = "".join(output).strip()
        return text or None
