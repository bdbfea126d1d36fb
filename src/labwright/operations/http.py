"""One health check for every service a deploy starts: wait until its HTTP endpoint answers, or fail saying why.

The check runs ON THE HOST (``python3`` from its standard library, one script for every deploy) so it sees the
service's loopback address and journal; the control machine only reads its exit status and output. Every deploy
that waits on an HTTP endpoint (llama.cpp, tabbyAPI, Kokoro, LiteLLM) uses ``wait_healthy``; what differs between
them is data: the health path, which models ``/v1/models`` must list, where the API key is read from, a journal line
that means "started" and lines that mean "give up now" (tabbyAPI's out-of-VRAM line), each with its own message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from pyinfra.api import operation
from pyinfra.api.exceptions import OperationError

from labwright.shell import quote


@dataclass(frozen=True)
class HealthCheck:
    """What "healthy" means for one service, and what to say when it is not.

    url: the base URL on the host, e.g. ``http://127.0.0.1:8080``; health_path is fetched below it until 200.
    models: names ``/v1/models`` must list once healthy: any one of them (``all_models=False``), or every one.
    models_wait: a missing model is retried until the timeout (the engine may still be loading) instead of failing
    at once. key_file / key_name: an API key read on the host (``name: value`` or ``NAME=value`` lines; with no
    key_name, the file's first line that is not a comment), sent as ``Authorization: Bearer``. restart:
    ``systemctl reset-failed`` then restart the unit first (a start limit hit by earlier restarts never refuses it)
    and read its journal from that moment.
    startup_line: do not poll before the journal (since the start of the check) shows it. fatal_lines: journal line ->
    message; the first seen ends the check with that message, stopping the unit if ``stop_on_fatal``.
    """

    url: str
    service: str
    timeout: float
    health_path: str = "/health"
    models: tuple[str, ...] = ()
    all_models: bool = False
    models_wait: bool = False
    key_file: str = ""
    key_name: str = ""
    restart: bool = False
    startup_line: str = ""
    fatal_lines: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    stop_on_fatal: bool = False
    interval: float = 0.5
    journal_lines: int = 15
    request_timeout: float = 10


# The script the host runs, with the check as JSON in argv[1]. Python 3.7+ standard library only.
SCRIPT = r'''
import json, re, subprocess, sys, time, urllib.request

check = json.loads(sys.argv[1])
service, timeout = check["service"], check["timeout"]
unit = service + ".service"
since = str(int(time.time()))
if check["restart"]:
    # reset-failed first: earlier restarts (a deploy's, a rollback's, systemd's own) must not make systemd refuse
    # this one with its start limit ("start of the service was attempted too often").
    subprocess.run(["systemctl", "reset-failed", unit], capture_output=True)
    restarted = subprocess.run(["systemctl", "restart", unit], capture_output=True, text=True)
    if restarted.returncode != 0:
        result = subprocess.run(["systemctl", "show", "-p", "Result", "--value", unit], capture_output=True,
                                text=True).stdout.strip()
        print(restarted.stderr.strip(), file=sys.stderr)
        sys.exit("labwright: %s did not restart (Result=%s): see journalctl -u %s; then systemctl reset-failed %s "
                 "&& systemctl start %s" % (unit, result or "?", unit, unit, unit))
deadline = time.monotonic() + timeout
wanted = check["models"]
watching = bool(check["startup_line"] or check["fatal_lines"])


def journal(tail=False):
    cmd = ["journalctl", "-u", unit, "-o", "cat", "--no-pager"]
    cmd += ["--since", "@" + since] if (check["restart"] or not tail) else ["-n", str(check["journal_lines"])]
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout
    except OSError:
        return ""


def fail(message, show_journal=True):
    if show_journal:
        lines = journal(tail=True).splitlines()[-check["journal_lines"]:]
        if lines:
            print("\n".join(lines), file=sys.stderr)
    sys.exit("labwright: " + message)


def key():
    if not check["key_file"]:
        return ""
    try:
        with open(check["key_file"]) as handle:
            for line in handle:
                if not check["key_name"]:  # the key alone on its line (llama-server's --api-key-file)
                    if line.strip() and not line.startswith("#"):
                        return line.strip()
                    continue
                found = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*[:=](.*)", line)
                if found and found.group(1) == check["key_name"]:
                    return found.group(2).strip().strip("'\"")
    except OSError:
        pass
    return ""


def get(path, seconds):
    secret = key()
    headers = {"Authorization": "Bearer " + secret} if secret else {}
    request = urllib.request.Request(check["url"] + path, headers=headers)
    with urllib.request.urlopen(request, timeout=seconds) as response:
        return response.status, response.read()


def models_problem(ids):
    if check["all_models"]:
        missing = sorted(set(wanted) - set(ids))
        return "/v1/models lacks %s (lists %s)" % (", ".join(missing), ids) if missing else None
    return None if set(wanted) & set(ids) else "/v1/models lists %s, not %s" % (ids, wanted[0])


last = "no answer yet"
while True:
    log = journal() if watching else ""
    for line, message in check["fatal_lines"]:
        if line in log:
            if check["stop_on_fatal"]:
                subprocess.run(["systemctl", "stop", unit])
            fail(message, show_journal=False)
    if not check["startup_line"] or check["startup_line"] in log:
        try:
            status, body = get(check["health_path"], 5)
            if status == 200:
                if not wanted:
                    text = body.decode(errors="replace")[:200]
                    print("%s healthy: %s 200 %s" % (service, check["health_path"], text))
                    sys.exit(0)
                _, models = get("/v1/models", check["request_timeout"])
                ids = [m.get("id") for m in json.loads(models).get("data", [])]
                problem = models_problem(ids)
                if problem is None:
                    print("%s healthy: %s 200, /v1/models lists %s" % (service, check["health_path"],
                                                                     ", ".join(map(str, ids))))
                    sys.exit(0)
                if not check["models_wait"]:
                    fail("%s %s" % (service, problem))
                last = problem
            else:
                last = "HTTP %s" % status
        except Exception as error:
            last = str(error)
    if time.monotonic() > deadline:
        fail("%s not healthy after %gs (%s); its journal is above" % (service, timeout, last))
    time.sleep(check["interval"])
'''


def health_command(check: HealthCheck) -> str:
    """The one shell command that runs ``check`` on the host (exit 0 healthy; else one ``labwright:`` line)."""
    spec = asdict(check)
    spec["models"] = list(check.models)
    spec["fatal_lines"] = [list(pair) for pair in check.fatal_lines]
    return f"python3 -c {quote(SCRIPT)} {quote(json.dumps(spec, separators=(',', ':')))}"


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
    yield health_command(HealthCheck(
        url=url, service=service, timeout=timeout, health_path=health_path, models=tuple(models),
        all_models=all_models, models_wait=models_wait, key_file=key_file, key_name=key_name, restart=restart,
        startup_line=startup_line, fatal_lines=tuple((fatal_lines or {}).items()), stop_on_fatal=stop_on_fatal,
        interval=interval, journal_lines=journal_lines, request_timeout=request_timeout))
