"""Steps every service deploy takes the same way: refuse a port someone else holds, install only missing packages."""

from __future__ import annotations

from collections.abc import Iterable

from pyinfra import host
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import apt

from labwright.facts.llamacpp import PortListeners


def port_taken_by(port: int, service: str) -> str | None:
    """Who holds ``port`` on the host when it is not ``service`` itself (None: free, or already ours)."""
    listeners = host.get_fact(PortListeners, port=port, service=service)
    if listeners["pids"] and not listeners["ours"]:
        return ", ".join(listeners["names"]) or "another process"
    return None


def install_missing(packages: Iterable[str], what: str, name: str | None = None) -> None:
    """apt-get install (no recommends) only the packages the host lacks; nothing at all when none is missing, so a
    second run has no apt step. ``what`` says what they are in the refresh step's name."""
    installed = host.get_fact(DebPackages)
    missing = [package for package in packages if package not in installed]
    if missing:
        # cache_time: a second attempt right after a failed one need not refresh the lists again.
        apt.update(name=f"Refresh apt lists ({what} missing)", cache_time=3600)
        apt.packages(name=name or f"Install {', '.join(missing)}", packages=missing, no_recommends=True)
