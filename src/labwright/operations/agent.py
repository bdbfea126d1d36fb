"""Run a subcommand of labwright's agent from a pyinfra operation: ``yield from agent_command("health", ...)``.

When the host does not hold this labwright's agent yet (fact ``AgentInstalled``: root's 0644 file with its sha256
in root's 0755 ``/usr/local/lib/labwright``), the agent is uploaded there first, made root's and its sha256 checked
on the host; then the command runs it. Not an operation itself: the operations that run code on a host call it.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand

from labwright import paths
from labwright.agent import zipapp
from labwright.facts.agent import AgentInstalled
from labwright.hosts.agent import command, installed_check
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
        yield f"chown root:root {quote(path)} && chmod 644 {quote(path)} && {verify_command()}"
    yield StringCommand(command(path, subcommand, *args))


def verify_command() -> str:
    """After the upload: the agent is root's 0644 file with its sha256 in root's 0755 directory, or the operation
    fails with one line (a transfer that came out different is never run)."""
    path, sha = zipapp.remote_path(), zipapp.sha256()
    return (f"{{ {installed_check(path, sha)}; }} || {{ echo 'labwright: {path} is not the agent labwright sent "
            f"(sha256 {sha}, root:root 0644): the upload failed; run the deploy again' >&2; exit 1; }}")
