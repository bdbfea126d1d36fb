"""THE restart-and-wait: restart a systemd unit past its start limit, then wait until it is healthy (stdlib only).

Every place that restarts a service and waits on it goes through here: the stack switch (``stacks/switch.py``,
on the guest from the stack bundle), a deploy's health check (the agent's ``health`` subcommand, see
``labwright.agent.health``), the context-ceiling probe's starts (``labwright.agent.probe``) and host upgrade's guest
restarts (the agent's ``restart`` subcommand). ``HealthCheck`` is the one description of "healthy": a URL that must
answer (with the models ``/v1/models`` must list, an API key, journal lines to wait for or to give up on), or a
shell command that must exit 0, within ``timeout_s``.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from labwright.errors import BadInput, OperationFailed

UNIT = re.compile(r"^[A-Za-z0-9:_.@\\-]+$")
REQUEST_TIMEOUT_S = 2.0
MAX_HEALTH_TIMEOUT_S = 86400.0


@dataclass(frozen=True)
class HealthCheck:
    """What "healthy" means for one service: an HTTP URL that must answer, or a shell command that must exit 0,
    within ``timeout_s``.

    A plain ``url`` (the stack switch's ``--health``) is healthy on any 2xx/3xx answer. With ``health_path`` (a
    deploy's check, ``labwright.operations.http.wait_healthy``), ``url`` is the service's base URL and
    ``url + health_path`` must answer 200; then ``/v1/models`` must list ``models``: any one of them
    (``all_models=False``), or every one; ``models_wait`` retries a missing model until the timeout (the engine may
    still be loading) instead of failing at once. key_file / key_name: an API key read on the host (``name: value``
    or ``NAME=value`` lines; with no key_name, the file's first line that is not a comment), sent as
    ``Authorization: Bearer``. service: the systemd unit (without ``.service``) whose journal explains a failure;
    restart: restart it first (``restart_unit``: a start limit hit by earlier restarts never refuses it) and read
    its journal from that moment. startup_line: do not poll before the journal (since the start of the check)
    shows it. fatal_lines: journal line -> message; the first seen ends the check with that message, stopping the
    unit if ``stop_on_fatal``. interval: seconds between polls; request_timeout: seconds for the ``/v1/models``
    request.
    """

    url: str | None = None
    command: str | None = None
    timeout_s: float = 60.0
    service: str = ""
    health_path: str = ""
    models: tuple[str, ...] = ()
    all_models: bool = False
    models_wait: bool = False
    key_file: str = ""
    key_name: str = ""
    restart: bool = False
    startup_line: str = ""
    fatal_lines: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    stop_on_fatal: bool = False
    interval: float = 0.05  # a switch's downtime is what it measures: poll often, a request is cheap
    journal_lines: int = 15
    request_timeout: float = 10

    @property
    def configured(self) -> bool:
        return bool(self.url or self.command)

    @property
    def watches_journal(self) -> bool:
        return bool(self.startup_line or self.fatal_lines)

    def describe(self) -> str:
        if self.url:
            return f"GET {self.url}{self.health_path}"
        if self.command:
            return f"`{self.command}` exits 0"
        return "none"

    def to_json(self) -> dict:
        """The check as the agent's ``health`` subcommand reads it (``from_json`` turns it back)."""
        return {"url": self.url, "command": self.command, "timeout_s": self.timeout_s, "service": self.service,
                "health_path": self.health_path, "models": list(self.models), "all_models": self.all_models,
                "models_wait": self.models_wait, "key_file": self.key_file, "key_name": self.key_name,
                "restart": self.restart, "startup_line": self.startup_line,
                "fatal_lines": [list(pair) for pair in self.fatal_lines], "stop_on_fatal": self.stop_on_fatal,
                "interval": self.interval, "journal_lines": self.journal_lines,
                "request_timeout": self.request_timeout}

    @classmethod
    def from_json(cls, data: dict) -> HealthCheck:
        fields = dict(data)
        fields["models"] = tuple(fields.get("models", ()))
        fields["fatal_lines"] = tuple((str(line), str(message)) for line, message in fields.get("fatal_lines", ()))
        return cls(**fields)


class Ended(Exception):
    """The check ended before its timeout and will not become healthy: a fatal journal line (``journal`` False:
    its message says it all) or a missing model without ``models_wait``."""

    def __init__(self, message: str, journal: bool = True):
        super().__init__(message)
        self.journal = journal


def check_unit(unit: str) -> str:
    name = unit if "." in unit else f"{unit}.service"
    if not UNIT.match(name):
        raise BadInput(f"--service {unit!r} is not a systemd unit name; pass one like tabbyapi or tabbyapi.service")
    return name


def check_health(health: HealthCheck) -> HealthCheck:
    if health.url and health.command:
        raise BadInput("--health and --health-cmd both given; pass one of them")
    if health.url and not re.match(r"^https?://[^/\s]+", health.url):
        raise BadInput(f"--health {health.url!r} is not an http(s) URL; pass one like http://127.0.0.1:5000/health")
    if health.url:
        try:
            port = urllib.parse.urlsplit(health.url).port  # ValueError for a port outside 0-65535
        except ValueError:
            port = 0
        if port == 0:
            raise BadInput(f"--health {health.url!r}: the port is not a number from 1 to 65535; pass one like "
                           "http://127.0.0.1:5000/health")
    if not math.isfinite(health.timeout_s) or not 0 < health.timeout_s <= MAX_HEALTH_TIMEOUT_S:
        raise BadInput(f"--health-timeout {health.timeout_s:g} must be a number of seconds above 0 and at most "
                       f"{MAX_HEALTH_TIMEOUT_S:g} (a day); pass one like 60")
    return health


def require_systemctl(unit: str) -> str:
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        raise BadInput(f"--service {unit}: no systemctl on this host; drop --service and restart it yourself")
    return systemctl


# systemd refuses a start once a unit was started StartLimitBurst times within StartLimitIntervalSec (5 in
# 10 s by default): a switch, its rollback and a test or a second switch right after add up to that under load.
# `systemctl reset-failed UNIT` clears that counter (systemd's unit_reset_failed() resets start_ratelimit).
START_LIMIT_TEXT = "start of the service was attempted too often"
START_LIMIT_RESULT = "start-limit-hit"
BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)  # after reset-failed, before each retry of a refused restart: ~15 s at most
FAILED_CHECK_S = 1.0  # while waiting on health, how often to ask systemd whether the unit failed outright


@dataclass(frozen=True)
class Restarted:
    """What ``restart_owned`` saw: whether the unit serves, the last health answer, seconds spent, attempts."""

    unit: str
    healthy: bool
    seen: str
    waited_s: float
    attempts: int


def _systemctl(systemctl: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([systemctl, *args], capture_output=True, text=True, timeout=300)


def unit_property(unit: str, name: str) -> str:
    """``systemctl show -p NAME --value UNIT`` ('' when systemd does not say)."""
    proc = _systemctl(require_systemctl(unit), "show", "-p", name, "--value", unit)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _refused_by_start_limit(systemctl: str, unit: str, stderr: str) -> bool:
    if START_LIMIT_TEXT in stderr:
        return True
    proc = _systemctl(systemctl, "show", "-p", "Result", "--value", unit)
    return proc.stdout.strip() == START_LIMIT_RESULT


def restart_unit(unit: str, reset_first: bool = True, backoff_s: tuple[float, ...] = BACKOFF_S) -> int:
    """``systemctl restart UNIT`` that systemd's start limit cannot refuse: ``reset-failed`` first (when
    ``reset_first``), and a restart refused for the start limit is retried after ``reset-failed`` with bounded
    back-off. Returns the attempts made; raises OperationFailed naming the unit, systemd's reason and the
    command to look at when the restart fails for another reason or every retry was refused."""
    name = check_unit(unit)
    systemctl = require_systemctl(name)
    attempts = 0
    for delay in (0.0, *backoff_s):
        if delay:
            time.sleep(delay)  # back-off between refused attempts, not a wait for a state
        if reset_first or attempts:
            _systemctl(systemctl, "reset-failed", name)  # an error here (unit not loaded) shows in the restart
        attempts += 1
        proc = _systemctl(systemctl, "restart", name)
        if proc.returncode == 0:
            return attempts
        reason = (proc.stderr.strip().splitlines() or ["no output"])[0]
        if not _refused_by_start_limit(systemctl, name, proc.stderr):
            raise OperationFailed(f"systemctl restart {name} failed: {reason} (see journalctl -u {name} -n 50)")
    raise OperationFailed(f"systemctl restart {name} refused by systemd's start limit {attempts} times, even after "
                          f"reset-failed: something else restarts it in a loop; see journalctl -u {name} -n 50, then "
                          f"run systemctl reset-failed {name} && systemctl restart {name}")


def restart(unit: str) -> None:
    restart_unit(unit)


def not_started(unit: str, journal_lines: int = 15) -> str:
    """Why ``unit`` is not running, for a (re)start that failed: its journal's last ``journal_lines`` lines, then
    the one line a deploy ends with, naming systemd's start limit when that refused it and the command that starts
    the unit by hand (the agent's ``restart`` prints this, ``labwright.operations.systemd`` relies on it)."""
    systemctl = shutil.which("systemctl") or "systemctl"
    try:
        result = _systemctl(systemctl, "show", "-p", "Result", "--value", unit).stdout.strip()
        state = _systemctl(systemctl, "is-active", unit).stdout.strip()
    except OSError:
        result = state = ""
    try:
        tail = subprocess.run(["journalctl", "-u", unit, "-n", str(journal_lines), "--no-pager", "-o", "cat"],
                              capture_output=True, text=True, timeout=60).stdout.rstrip("\n")
    except (OSError, subprocess.TimeoutExpired):
        tail = ""
    if result == START_LIMIT_RESULT:
        line = (f"labwright: {unit} was started too often (systemd's start limit: Result={START_LIMIT_RESULT}) and "
                f"is {state}: run systemctl reset-failed {unit} && systemctl start {unit}")
    else:
        line = (f"labwright: {unit} did not start (state {state}, Result={result}); its journal is above: fix it, "
                f"then run systemctl start {unit}")
    return f"{tail}\n{line}" if tail else line


def unit_failed(unit: str) -> str | None:
    """systemd's reason when the unit is ``failed`` (crashed and not restarting), else None."""
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        return None
    proc = _systemctl(systemctl, "show", "-p", "ActiveState", "-p", "Result", unit)
    fields = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    if fields.get("ActiveState") != "failed":
        return None
    return f"{unit} failed ({fields.get('Result') or 'no result'})"


def restart_owned(unit: str, health: HealthCheck | None = None, *, reset_first: bool = True,
                  backoff_s: tuple[float, ...] = BACKOFF_S) -> Restarted:
    """THE restart helper: restart ``unit`` safely against systemd's start limit (see ``restart_unit``), then
    wait until ``health`` answers (an observable condition with its own deadline, ``health.timeout_s``), giving
    up early when systemd marks the unit failed. Raises OperationFailed when systemd will not restart it; an
    unhealthy service comes back as ``healthy=False`` with what was seen (the caller decides: roll back, raise)."""
    name = check_unit(unit)
    started = time.monotonic()
    attempts = restart_unit(name, reset_first=reset_first, backoff_s=backoff_s)
    if health is None or not health.configured:
        return Restarted(name, True, "restarted (no health check)", time.monotonic() - started, attempts)
    healthy, seen, _ = wait_healthy(health, unit=name)
    return Restarted(name, healthy, seen, time.monotonic() - started, attempts)


def _key(health: HealthCheck) -> str:
    """The API key ``health`` names, read on the host ('' when none or unreadable)."""
    if not health.key_file:
        return ""
    try:
        with open(health.key_file) as handle:
            for line in handle:
                if not health.key_name:  # the key alone on its line (llama-server's --api-key-file)
                    if line.strip() and not line.startswith("#"):
                        return line.strip()
                    continue
                found = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*[:=](.*)", line)
                if found and found.group(1) == health.key_name:
                    return found.group(2).strip().strip("'\"")
    except OSError:
        pass
    return ""


def _get(health: HealthCheck, path: str, seconds: float) -> tuple[int, bytes]:
    secret = _key(health)
    headers = {"Authorization": "Bearer " + secret} if secret else {}
    request = urllib.request.Request(f"{health.url}{path}", headers=headers)
    with urllib.request.urlopen(request, timeout=seconds) as response:
        return response.status, response.read()


def _models_problem(health: HealthCheck, ids: list) -> str | None:
    if health.all_models:
        missing = sorted(set(health.models) - set(ids))
        return f"/v1/models lacks {', '.join(missing)} (lists {ids})" if missing else None
    return None if set(health.models) & set(ids) else f"/v1/models lists {ids}, not {health.models[0]}"


def _probe_service(health: HealthCheck) -> tuple[bool, str]:
    """One attempt of a deploy's check: ``url + health_path`` answers 200 and ``/v1/models`` lists the models."""
    try:
        status, body = _get(health, health.health_path, 5)
        if status != 200:
            return False, f"HTTP {status}"
        if not health.models:
            return True, f"{health.health_path} 200 {body.decode(errors='replace')[:200]}"
        _, listed = _get(health, "/v1/models", health.request_timeout)
        ids = [m.get("id") for m in json.loads(listed).get("data", [])]
        problem = _models_problem(health, ids)
        if problem is None:
            return True, f"{health.health_path} 200, /v1/models lists {', '.join(map(str, ids))}"
        if not health.models_wait:
            raise Ended(f"{health.service} {problem}")
        return False, problem
    except Ended:
        raise
    except Exception as error:  # refused, timed out, HTTP errors, a body that is not JSON: not healthy yet
        return False, str(error)


def probe(health: HealthCheck) -> tuple[bool, str]:
    """One attempt: (healthy, what was seen). Raises Ended when a deploy's check can never pass (a model missing
    without ``models_wait``)."""
    if health.url and health.health_path:
        return _probe_service(health)
    if health.url:
        try:
            with urllib.request.urlopen(health.url, timeout=REQUEST_TIMEOUT_S) as response:
                return 200 <= response.status < 400, f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            return False, f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            return False, str(reason)
    if health.command:
        try:
            proc = subprocess.run(["sh", "-c", health.command], capture_output=True, text=True,
                                  timeout=max(REQUEST_TIMEOUT_S, health.timeout_s))
        except subprocess.TimeoutExpired:
            return False, "command timed out"
        last = (proc.stdout + proc.stderr).strip().splitlines()
        return proc.returncode == 0, f"exit {proc.returncode}" + (f": {last[-1]}" if last else "")
    return True, "no health check"


def journal(health: HealthCheck, since: str, tail: bool = False) -> str:
    """The service's journal since ``since`` (epoch seconds), or its last ``journal_lines`` lines with ``tail``
    when the check did not restart it ('' when journalctl cannot run)."""
    cmd = ["journalctl", "-u", f"{health.service}.service", "-o", "cat", "--no-pager"]
    cmd += ["--since", "@" + since] if (health.restart or not tail) else ["-n", str(health.journal_lines)]
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout
    except OSError:
        return ""


def wait_healthy(health: HealthCheck, unit: str | None = None, since: str | None = None) -> tuple[bool, str, float]:
    """Poll until healthy or ``timeout_s``: (healthy, the last thing seen, seconds waited). With ``unit``, stop
    early when systemd says the unit failed (it will not come up by itself). A check that watches the journal
    reads it from ``since`` (epoch seconds; default now), polls only once ``startup_line`` is there and raises
    Ended at the first of its ``fatal_lines`` (stopping the unit when ``stop_on_fatal``)."""
    started = time.monotonic()
    checked = started
    since = since or str(int(time.time()))
    seen = "no answer yet"
    while True:
        log = journal(health, since) if health.watches_journal else ""
        for line, message in health.fatal_lines:
            if line in log:
                if health.stop_on_fatal:
                    subprocess.run(["systemctl", "stop", f"{health.service}.service"])
                raise Ended(message, journal=False)
        if not health.startup_line or health.startup_line in log:
            ok, seen = probe(health)
            if ok:
                return True, seen, time.monotonic() - started
        now = time.monotonic()
        waited = now - started
        if waited >= health.timeout_s:
            return False, seen, waited
        if unit is not None and now - checked >= FAILED_CHECK_S:
            checked = now
            failed = unit_failed(unit)
            if failed is not None:
                return False, f"{seen}; {failed}", waited
        time.sleep(health.interval)
