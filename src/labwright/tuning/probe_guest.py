"""How the context-ceiling probe reaches a guest: one exec per step, labwright's agent doing the work inside.

The guest is an LXD/Incus instance, named ``NAME`` or ``REMOTE:NAME`` as ``lxc`` names it. Everything the probe
does there goes through the agent's ``probe`` subcommand (:mod:`labwright.agent.probe`; python3 + systemd on the
guest, nothing else), pushed once (:mod:`labwright.hosts.agent`) and run with a JSON argument per call. No pyinfra:
this is a library the CLI, tests and benchmarks call directly.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

from labwright.errors import BadInput, LxdError, LxdNotFound, OperationFailed
from labwright.hostnames import BadHostName, lxd_guest
from labwright.hosts import agent
from labwright.hosts.lxd import LxdHost
from labwright.lxd.client import LxdClient
from labwright.textio import loads_json


class Guest(Protocol):
    """What the probe needs from a guest: run the waiter, read a file."""

    name: str

    def waiter(self, request: dict[str, Any], timeout: float) -> dict[str, Any]: ...

    def read_file(self, path: str) -> bytes | None: ...


class LxdGuest:
    """A running LXD/Incus instance on the ``hosts`` seam (:class:`labwright.hosts.lxd.LxdHost`: the daemon's
    exec with recorded output, its file API)."""

    def __init__(self, target: str, client: LxdClient | None = None):
        self.name = target
        try:
            name = lxd_guest(target).instance
            self.host = LxdHost(target, client)
        except BadHostName:  # not an instance name LXD or Incus accepts, so there is no such instance
            incus = target.startswith("@incus/")
            raise BadInput(f"--guest {target}: no such {'Incus' if incus else 'LXD'} instance; list them with "
                           f"`{'incus' if incus else 'lxc'} list`") from None
        self.instance = name
        self.client = self.host.client
        #: the daemon and its client, as messages name them (Endpoint.title: the daemon actually reached)
        daemon, self.tool = self.client.endpoint.title, self.client.endpoint.tool
        self.agent: str | None = None
        try:
            info = self.client.instance(name)
        except LxdNotFound:
            raise BadInput(f"--guest {target}: no such {daemon} instance; list them with `{self.tool} list`") \
                from None
        except (LxdError, OSError) as exc:
            raise OperationFailed(f"--guest {target}: cannot reach the {daemon} daemon ({exc})") from exc
        if info.get("status") != "Running":
            raise BadInput(f"--guest {target}: the instance is {str(info.get('status')).lower()}; start it first "
                           f"(`{self.tool} start {name}`)")

    def waiter(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Run the waiter in the guest; when the OOM killer takes it, ask again for the same invocation.

        ``timeout`` is what the caller expects at most; the waiter enforces the startup timeout itself, and the exec
        is waited for as long as it runs (LXD's operation wait).
        """
        began = time.monotonic()
        # The argv as it is (no shell): the exit code is the waiter's own, 137 (or -1, 9) when the OOM killer took it.
        result = self.host.exec(self.agent_argv(request))
        documents = _documents(result.stdout)
        final = documents[-1] if documents else None
        if final is not None and ("outcome" in final or (result.exit_code == 0 and "started" not in final)):
            return final
        first = next((doc for doc in documents if "invocation" in doc and "outcome" not in doc), None)
        if request.get("mode") == "probe" and first is not None and result.exit_code in (137, -1, 9):
            again = {**request, "mode": "watch", "invocation": first["invocation"],
                     "spent": time.monotonic() - began}
            retry = self.host.exec(self.agent_argv(again))
            answers = _documents(retry.stdout)
            if retry.exit_code == 0 and answers and "outcome" in answers[-1]:
                answers[-1]["waiter_killed"] = True
                return answers[-1]
            result = retry
        raise OperationFailed(f"--guest {self.name}: the probe helper failed (exit {result.exit_code}): "
                              f"{result.stderr.decode(errors='replace').strip().splitlines()[-1:] or 'no output'}; "
                              "the guest needs python3 and systemd")

    def agent_argv(self, request: dict[str, Any]) -> list[str]:
        """``python3 AGENT probe REQUEST``, the agent pushed to the guest first (once per guest)."""
        if self.agent is None:
            try:
                self.agent = agent.ensure(self.host)
            except OSError as exc:
                raise OperationFailed(f"--guest {self.name}: cannot put labwright's agent there ({exc})") from exc
        return ["python3", self.agent, "probe", json.dumps(request)]

    def read_file(self, path: str) -> bytes | None:
        """``path``'s bytes, None when it does not exist."""
        try:
            return self.host.get(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if isinstance(exc.__cause__, LxdError):  # the daemon's refusal, as it was reported before the seam
                raise exc.__cause__ from None
            raise


def _documents(stdout: bytes) -> list[dict[str, Any]]:
    docs = []
    for line in stdout.decode(errors="replace").splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                docs.append(loads_json(line))
            except ValueError:
                continue
    return docs
