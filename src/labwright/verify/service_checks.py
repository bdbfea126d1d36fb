"""Checks the testinfra suites of the pip-installed services (LiteLLM, Open WebUI) share: the unit is enabled and
running as its own user, and its key files are root-only. Each takes testinfra's ``host``."""

from __future__ import annotations

from typing import Any


def assert_unit_enabled_and_running(host: Any, service: str) -> None:
    unit = host.service(f"{service}.service")
    assert unit.is_enabled, f"{service}.service is not enabled: it would not come back after a reboot"
    assert unit.is_running, f"{service}.service is not running"


def assert_runs_as(host: Any, service: str, user: str) -> None:
    """The unit's main process runs as ``user``, never root."""
    pid = host.run(f"systemctl show -p MainPID --value {service}.service").stdout.strip()
    assert pid.isdigit() and pid != "0", f"{service}.service has no main process"
    owner = host.run(f"ps -o user= -p {pid}").stdout.strip()
    assert owner == user and owner != "root", f"{service}.service runs as {owner!r}, not {user!r}"


def assert_root_only(host: Any, path: str) -> None:
    """``path`` exists and is root:root 0600."""
    file = host.file(path)
    assert file.exists, f"{path} is missing"
    assert (file.user, file.group, file.mode) == ("root", "root", 0o600), (path, file.user, file.group, oct(file.mode))
