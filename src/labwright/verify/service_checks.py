"""Checks the testinfra suites of the pip-installed services (LiteLLM, Open WebUI) share: the unit is enabled and
running as its own user, and its key files are root-only. Each takes testinfra's ``host``."""

from __future__ import annotations

from typing import Any

from labwright.shell import quote
from labwright.textio import ascii_digits


def assert_unit_enabled_and_running(host: Any, service: str) -> None:
    unit = host.service(f"{service}.service")
    assert unit.is_enabled, f"{service}.service is not enabled: it would not come back after a reboot"
    assert unit.is_running, f"{service}.service is not running"


def assert_runs_as(host: Any, service: str, user: str) -> None:
    """The unit's main process runs as ``user``, never root."""
    pid = host.run(f"systemctl show -p MainPID --value {quote(service + '.service')}").stdout.strip()
    assert ascii_digits(pid) and pid != "0", f"{service}.service has no main process"
    owner = host.run(f"ps -o user= -p {pid}").stdout.strip()
    assert owner == user and owner != "root", f"{service}.service runs as {owner!r}, not {user!r}"


def assert_root_only(host: Any, path: str) -> None:
    """``path`` exists and is root:root 0600: owner, group and mode read by one ``stat``, so the assertion and its
    message say what one look at the file saw (testinfra's File reads each with a command of its own)."""
    seen = host.run(f"stat -c '%U %G %a' -- {quote(path)}")
    assert seen.rc == 0, f"{path} is missing ({seen.stderr.strip()})"
    user, group, mode = seen.stdout.split()
    assert (user, group, int(mode, 8)) == ("root", "root", 0o600), f"{path} is {user}:{group} {mode}, not root:root 600"
