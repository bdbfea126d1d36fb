"""Run a subcommand of labwright's agent from a pyinfra operation: ``yield from agent_command("health", ...)``.

When the host does not hold this labwright's agent yet (fact ``AgentInstalled``: root's 0644 file with its sha256
in root's 0755 ``/usr/local/lib/labwright``), the agent is uploaded there first and made root's; then the command
runs it. Not an operation itself: the operations that run code on a host call it.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand

from labwright import paths
from labwright.agent import zipapp
from labwright.facts.agent import AgentInstalled
from labwright.hosts.agent import command
from labwright.shell import quote


def local_agent() -> str:
    """The agent as a local file (what the upload reads)."""
    return str(zipapp.local_file(paths.cache_path("agent")))


def agent_command(subcommand: str, *args: str) -> Iterator[StringCommand | FileUploadCommand | str]:
    """Push the agent unless the host holds it, then ``python3 AGENT SUBCOMMAND ARGS``."""
    path = zipapp.remote_path()
    if not host.get_fact(AgentInstalled):
        directory = quote(zipapp.REMOTE_DIR)
        yield f"mkdir -p {directory} && chown root:root {directory} && chmod 755 {directory}"
        yield FileUploadCommand(local_agent(), path, remote_temp_filename=host.get_temp_filename(path))
        yield f"chown root:root {quote(path)} && chmod 644 {quote(path)}"
    yield StringCommand(command(path, subcommand, *args))
