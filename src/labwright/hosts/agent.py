"""Put labwright's agent on a host once, and run its subcommands there (:mod:`labwright.agent`).

``ensure(host)`` looks first: a root-owned ``/usr/local/lib/labwright/agent-<sha12>.pyz`` (0644, its directory
root's and 0755) whose sha256 is this labwright's agent is used as it is; otherwise the agent is written there,
owned by root, and its sha256 checked again on the host. Root runs it, so it must be code only root can change
(docs/security.md, "Root runs only root-owned code"). ``run(host, SUBCOMMAND, ...)`` is ``ensure`` then
``python3 AGENT SUBCOMMAND ...``. A host object that was given the agent once is not looked at again.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Sequence
from typing import Any

from labwright.agent import zipapp
from labwright.hosts import Host, Result
from labwright.shell import join, quote

# host object -> the agent path it was given or found holding (per process: a host is looked at once)
_GIVEN: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def installed_check(path: str, sha256: str) -> str:
    """Exit 0 when ``path`` is root's 0644 file with ``sha256`` in root's 0755 directory."""
    directory = path.rsplit("/", 1)[0]
    return (f"[ \"$(stat -c %U:%G:%a {quote(directory)} {quote(path)} 2>/dev/null | tr '\\n' ' ')\" = "
            f"'root:root:755 root:root:644 ' ] && "
            f"[ \"$(sha256sum {quote(path)} 2>/dev/null | cut -d' ' -f1)\" = {sha256} ]")


def ensure(host: Host) -> str:
    """The agent's path on ``host``, pushed there first unless it already holds it. Returns the path; raises
    OSError naming the host when it cannot be written or its sha256 on the host is not the agent's."""
    data, sha = zipapp.agent()
    path = zipapp.remote_path(sha)
    with contextlib.suppress(TypeError):  # a host that cannot be a weak key is looked at every time
        if _GIVEN.get(host) == path:
            return path
    if host.run(installed_check(path, sha)).ok:
        _remember(host, path)
        return path
    directory = quote(zipapp.REMOTE_DIR)
    made = host.run(f"mkdir -p {directory} && chown root:root {directory} && chmod 755 {directory}")
    if not made.ok:
        raise OSError(f"cannot make {zipapp.REMOTE_DIR} on {host.label}: {made.last_line()}")
    host.put(data, path, mode=0o644)
    owned = host.run(f"chown root:root {quote(path)} && chmod 644 {quote(path)}")
    if not owned.ok or not host.run(installed_check(path, sha)).ok:
        raise OSError(f"the labwright agent on {host.label} ({path}) is not root's 0644 file with sha256 {sha} "
                      f"after writing it: {owned.last_line() if not owned.ok else 'its sha256 differs'}")
    _remember(host, path)
    return path


def _remember(host: Host, path: str) -> None:
    with contextlib.suppress(TypeError):
        _GIVEN[host] = path


def command(path: str, subcommand: str, *args: str) -> str:
    """The shell line that runs ``subcommand`` of the agent at ``path``."""
    return join(["python3", path, subcommand, *args])


def run(host: Host, subcommand: str, *args: str, stdin: bytes | str | None = None,
        timeout: float | None = None) -> Result:
    """``python3 AGENT SUBCOMMAND ARGS`` on ``host``, the agent pushed first when it is not there."""
    return host.run(command(ensure(host), subcommand, *args), stdin=stdin, timeout=timeout)


def argv(host: Host, subcommand: str, *args: str) -> Sequence[str]:
    """The argv that runs ``subcommand`` (for a transport that takes an argv as it is, e.g. LXD's exec)."""
    return ["python3", ensure(host), subcommand, *args]
