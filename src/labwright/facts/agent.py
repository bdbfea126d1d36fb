"""pyinfra fact: whether the host holds this labwright's agent (:mod:`labwright.agent`), root's and unchanged.

    host.get_fact(AgentInstalled)  # True: /usr/local/lib/labwright/agent-<sha12>.pyz is root's 0644 file with
                                   # the agent's sha256, in root's 0755 directory
"""

from __future__ import annotations

from pyinfra.api import FactBase

from labwright.agent import zipapp
from labwright.hosts.agent import installed_check


class AgentInstalled(FactBase):
    """True when this labwright's agent is on the host as it must be; False otherwise (absent, changed, not root's)."""

    def command(self) -> str:
        _, sha = zipapp.agent()
        return f"if {installed_check(zipapp.remote_path(sha), sha)}; then echo yes; else echo no; fi"

    @staticmethod
    def default() -> bool:
        return False

    def process(self, output: list[str]) -> bool:
        return output[-1:] == ["yes"]
