"""Restart the service that runs from the managed venv, and decide whether it is healthy (stdlib only)."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from labwright.errors import BadInput, OperationFailed

UNIT = re.compile(r"^[A-Za-z0-9:_.@\\-]+$")
POLL_S = 0.05  # a switch's downtime is what we measure: poll often, a request is cheap
REQUEST_TIMEOUT_S = 2.0


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
    if health.timeout_s <= 0:
        raise BadInput(f"--health-timeout {health.timeout_s} must be positive (seconds)")
    return health


def require_systemctl(unit: str) -> str:
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        raise BadInput(f"--service {unit}: no systemctl on this host; drop --service and restart it yourself")
    return systemctl


def restart(unit: str) -> None:
    systemctl = require_systemctl(unit)
    proc = subprocess.run([systemctl, "restart", unit], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise OperationFailed(f"systemctl restart {unit} failed: {reason}")


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


def wait_healthy(health: HealthCheck) -> tuple[bool, str, float]:
    """Poll until healthy or ``timeout_s``: (healthy, the last thing seen, seconds waited)."""
    started = time.monotonic()
    while True:
        ok, seen = probe(health)
        waited = time.monotonic() - started
        if ok or waited >= health.timeout_s:
            return ok, seen, waited
        time.sleep(POLL_S)
