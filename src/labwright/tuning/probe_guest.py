"""How the context-ceiling probe reaches a guest: one exec per step, the waiter script doing the work inside.

The guest is an LXD/Incus instance, named ``NAME`` or ``REMOTE:NAME`` as ``lxc`` names it. Everything the probe
does there goes through :mod:`labwright.tuning.probe_waiter` (python3 + systemd on the guest, nothing else), sent
as source with a JSON argument per call. No pyinfra: this is a library the CLI, tests and benchmarks call directly.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Protocol

from labwright.errors import BadInput, LxdError, LxdNotFound, OperationFailed
from labwright.lxd.client import LxdClient
from labwright.lxd.remotes import resolve_endpoint, split_target

WAITER_SOURCE = (Path(__file__).with_name("probe_waiter.py")).read_text()


class Guest(Protocol):
    """What the probe needs from a guest: run the waiter, read a file."""

    name: str

    def waiter(self, request: dict[str, Any], timeout: float) -> dict[str, Any]: ...

    def read_file(self, path: str) -> bytes | None: ...


class LxdGuest:
    """A running LXD/Incus instance reached through the daemon's REST API (exec with recorded output, files)."""

    def __init__(self, target: str, client: LxdClient | None = None):
        remote, name = split_target(target)
        self.name = target
        self.instance = name
        if client is None:
            endpoint, project = resolve_endpoint(remote)
            client = LxdClient(endpoint, project=project)
        self.client = client
        try:
            info = client.instance(name)
        except LxdNotFound:
            raise BadInput(f"--guest {target}: no such LXD instance; list them with `lxc list`") from None
        except (LxdError, OSError) as exc:
            raise OperationFailed(f"--guest {target}: cannot reach the LXD daemon ({exc})") from exc
        if info.get("status") != "Running":
            raise BadInput(f"--guest {target}: the instance is {str(info.get('status')).lower()}; start it first "
                           f"(`lxc start {name}`)")

    def waiter(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Run the waiter in the guest; when the OOM killer takes it, ask again for the same invocation.

        ``timeout`` is what the caller expects at most; the waiter enforces the startup timeout itself, and the exec
        is waited for as long as it runs (LXD's operation wait).
        """
        began = time.monotonic()
        result = self.client.exec(self.instance, ["python3", "-c", WAITER_SOURCE, json.dumps(request)])
        documents = _documents(result.stdout)
        final = documents[-1] if documents else None
        if final is not None and ("outcome" in final or (result.exit_code == 0 and "started" not in final)):
            return final
        first = next((doc for doc in documents if "invocation" in doc and "outcome" not in doc), None)
        if request.get("mode") == "probe" and first is not None and result.exit_code in (137, -1, 9):
            again = {**request, "mode": "watch", "invocation": first["invocation"],
                     "spent": time.monotonic() - began}
            retry = self.client.exec(self.instance, ["python3", "-c", WAITER_SOURCE, json.dumps(again)])
            answers = _documents(retry.stdout)
            if retry.exit_code == 0 and answers and "outcome" in answers[-1]:
                answers[-1]["waiter_killed"] = True
                return answers[-1]
            result = retry
        raise OperationFailed(f"--guest {self.name}: the probe helper failed (exit {result.exit_code}): "
                              f"{result.stderr.decode(errors='replace').strip().splitlines()[-1:] or 'no output'}; "
                              "the guest needs python3 and systemd")

    def read_file(self, path: str) -> bytes | None:
        import io

        out = io.BytesIO()
        try:
            self.client.pull_file(self.instance, path, out)
        except LxdNotFound:
            return None
        except LxdError as exc:
            if exc.status_code == 404:
                return None
            raise
        return out.getvalue()


def _documents(stdout: bytes) -> list[dict[str, Any]]:
    docs = []
    for line in stdout.decode(errors="replace").splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                docs.append(json.loads(line))
            except ValueError:
                continue
    return docs
