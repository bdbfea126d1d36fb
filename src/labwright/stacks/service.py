"""Restart the service that runs from the managed venv, and decide whether it is healthy (stdlib only)."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from labwright.errors import BadInput, OperationFailed

UNIT = re.compile(r"^[A-Za-z0-9:_.@\\-]+$")
POLL_S = 0.05  # a switch's downtime is what we measure: poll often, a request is cheap
REQUEST_TIMEOUT_S = 2.0
MAX_HEALTH_TIMEOUT_S = 86400.0


@dataclass(frozen=True)
class HealthCheck:
    """An HTTP URL that must answer 2xx/3xx, or a shell command that must exit 0, within ``timeout_s``."""

    url: str | None = None
    command: str | None = None
    timeout_s: float = 60.0

    @property
    def configured(self) -> bool:
        return bool(self.url or self.command)

    def describe(self) -> str:
        if self.url:
            return f"GET {self.url}"
        if self.command:
            return f"`{self.command}` exits 0"
        return "none"


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


def probe(health: HealthCheck) -> tuple[bool, str]:
    """One attempt: (healthy, what was seen)."""
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


def wait_healthy(health: HealthCheck, unit: str | None = None) -> tuple[bool, str, float]:
    """Poll until healthy or ``timeout_s``: (healthy, the last thing seen, seconds waited). With ``unit``, stop
    early when systemd says the unit failed (it will not come up by itself)."""
    started = time.monotonic()
    checked = started
    while True:
        ok, seen = probe(health)
        now = time.monotonic()
        waited = now - started
        if ok or waited >= health.timeout_s:
            return ok, seen, waited
        if unit is not None and now - checked >= FAILED_CHECK_S:
            checked = now
            failed = unit_failed(unit)
            if failed is not None:
                return False, f"{seen}; {failed}", waited
        time.sleep(POLL_S)
