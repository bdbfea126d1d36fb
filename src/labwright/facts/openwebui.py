"""pyinfra facts for deploys/openwebui.py: the open-webui version in its venv, and whether the OpenAI keys file on
the guest holds the keys it should (the keys themselves never leave the guest)."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase


class OpenwebuiVersion(FactBase):
    """``importlib.metadata`` reads the version without importing open_webui (an import takes many seconds)."""

    def command(self, venv: str) -> str:
        python = shlex.quote(f"{venv.rstrip('/')}/bin/python")
        code = shlex.quote("import importlib.metadata as m; print(m.version('open-webui'))")
        return f"{python} -c {code} 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        text = "".join(output).strip()
        return text or None


class OpenwebuiKeysCurrent(FactBase):
    """True when the keys file already holds what labwright.openwebui.config.openai_env_script(check=True) would
    write; the script prints only ``current`` or ``stale``, never a key."""

    def command(self, script: str) -> str:
        return f"sh -c {shlex.quote(script)}"

    def process(self, output: list[str]) -> bool:
        return "".join(output).strip() == "current"
