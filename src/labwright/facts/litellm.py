"""pyinfra fact for deploys/litellm.py: the litellm version installed in a venv (None: no venv or no litellm)."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase


class LitellmVersion(FactBase):
    """``importlib.metadata`` reads the version without importing litellm (an import takes seconds)."""

    def command(self, venv: str) -> str:
        python = shlex.quote(f"{venv.rstrip('/')}/bin/python")
        code = shlex.quote("import importlib.metadata as m; print(m.version('litellm'))")
        return f"{python} -c {code} 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        text = "".join(output).strip()
        return text or None
