"""One health check for every service a deploy starts: wait until its HTTP endpoint answers, or fail saying why.

The check runs ON THE HOST, by labwright's agent (``python3 AGENT health CHECK_JSON``, :mod:`labwright.agent.health`),
so it sees the service's loopback address and journal; the control machine only reads its exit status and output.
Every deploy that waits on an HTTP endpoint (llama.cpp, tabbyAPI, Kokoro, LiteLLM) uses ``wait_healthy``; what
differs between them is data (:class:`labwright.agent.service.HealthCheck`): the health path, which models
``/v1/models`` must list, where the API key is read from, a journal line that means "started" and lines that mean
"give up now" (tabbyAPI's out-of-VRAM line), each with its own message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from pyinfra.api import operation
from pyinfra.api.exceptions import OperationError

from labwright.agent.service import HealthCheck
from labwright.operations.agent import agent_command


def check_json(check: HealthCheck) -> str:
    """``check`` as the agent's ``health`` subcommand reads it."""
    return json.dumps(check.to_json(), separators=(",", ":"))


@operation(is_idempotent=False)
def wait_healthy(
    url: str,
    service: str,
    timeout: float,
    health_path: str = "/health",
    models: Iterable[str] = (),
    all_models: bool = False,
    models_wait: bool = False,
    key_file: str = "",
    key_name: str = "",
    restart: bool = False,
    startup_line: str = "",
    fatal_lines: Mapping[str, str] | None = None,
    stop_on_fatal: bool = False,
    interval: float = 0.5,
    journal_lines: int = 15,
    request_timeout: float = 10,
):
    """
    Wait on the host until ``url + health_path`` answers 200 (and ``/v1/models`` lists ``models``), else fail with
    one ``labwright:`` line after the unit's journal tail. See ``HealthCheck`` for every argument.

    + url: base URL as the host reaches the service, e.g. ``http://127.0.0.1:8080``
    + service: the systemd unit (without ``.service``) whose journal explains a failure
    + timeout: seconds to wait
    + models: ``/v1/models`` must list one of these (every one with ``all_models``)
    + restart: restart the unit first (the check then reads the journal from that moment)
    + fatal_lines: journal line -> message that ends the wait at once (``stop_on_fatal`` stops the unit too)

    Runs every time it is called (use ``_if`` to check only after a change).

    **Example:**

    .. code:: python

        wait_healthy(name="llama-server health", url="http://127.0.0.1:8080", service="llama-server",
                     timeout=120, models=["qwen"], _if=any_changed(unit, restarted))
    """
    # Refused here, in one line: on the host a bad URL or a zero timeout only shows as "not healthy after ...".
    if not re.match(r"^https?://[^/\s]+$", url.rstrip("/")):
        raise OperationError(f"wait_healthy: url {url!r} is not an http(s) base URL; pass one like "
                             "http://127.0.0.1:8080")
    if not health_path.startswith("/"):
        raise OperationError(f"wait_healthy: health_path {health_path!r} must start with /, e.g. /health")
    if not timeout > 0 or not service:
        raise OperationError(f"wait_healthy: service {service!r} and timeout {timeout!r}: both are needed, "
                             "the timeout in seconds > 0")
    yield from agent_command("health", check_json(HealthCheck(
        url=url, service=service, timeout_s=timeout, health_path=health_path, models=tuple(models),
        all_models=all_models, models_wait=models_wait, key_file=key_file, key_name=key_name, restart=restart,
        startup_line=startup_line, fatal_lines=tuple((fatal_lines or {}).items()), stop_on_fatal=stop_on_fatal,
        interval=interval, journal_lines=journal_lines, request_timeout=request_timeout)))
