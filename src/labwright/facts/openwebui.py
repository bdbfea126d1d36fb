"""pyinfra facts for deploys/openwebui.py: the open-webui version in its venv, and whether the OpenAI keys file on
the guest holds the keys it should (the keys themselves never leave the guest)."""

from __future__ import annotations

from pyinfra.api import FactBase

from labwright.facts.python_stack import VenvPackageVersion
from labwright.shell import quote


class OpenwebuiVersion(VenvPackageVersion, FactBase):
    """The open-webui version in its venv (an import of open_webui takes many seconds)."""

    package = "open-webui"


class OpenwebuiKeysCurrent(FactBase):
    """True when the keys file already holds what labwright.openwebui.config.openai_env_script(check=True) would
    write; the script prints only ``current`` or ``stale``, never a key."""

    def command(self, script: str) -> str:
        return f"sh -c {quote(script)}"

    def process(self, output: list[str]) -> bool:
        return "".join(output).strip() == "current"
