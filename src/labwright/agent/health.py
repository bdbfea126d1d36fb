"""The agent's ``health`` subcommand: a deploy's health check, run on the host (``labwright.operations.http``).

``python3 AGENT health JSON`` with ``JSON`` a :class:`labwright.agent.service.HealthCheck` (``to_json``): restart
the unit first when asked (``restart_unit``, past systemd's start limit), wait until it is healthy, and print one
line ``SERVICE healthy: ...`` (exit 0), or the unit's journal tail then one ``labwright:`` line (exit 1).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from labwright.agent.service import Ended, HealthCheck, journal, restart_unit, wait_healthy
from labwright.errors import LabwrightError


def _fail(check: HealthCheck, since: str, message: str, show_journal: bool = True) -> int:
    if show_journal:
        lines = journal(check, since, tail=True).splitlines()[-check.journal_lines:]
        if lines:
            print("\n".join(lines), file=sys.stderr)
    print(f"labwright: {message}", file=sys.stderr)
    return 1


def run(check: HealthCheck) -> int:
    """Restart (when asked) and wait; exit status 0 healthy, 1 not (with one ``labwright:`` line last)."""
    unit = f"{check.service}.service"
    since = str(int(time.time()))
    if check.restart:
        try:
            # No back-off here: a refusal is said at once, with the command that starts the unit by hand.
            restart_unit(unit, reset_first=True, backoff_s=())
        except LabwrightError as exc:
            result = subprocess.run(["systemctl", "show", "-p", "Result", "--value", unit], capture_output=True,
                                    text=True).stdout.strip()
            print(str(exc), file=sys.stderr)
            print(f"labwright: {unit} did not restart (Result={result or '?'}): see journalctl -u {unit}; then "
                  f"systemctl reset-failed {unit} && systemctl start {unit}", file=sys.stderr)
            return 1
    try:
        healthy, seen, _ = wait_healthy(check, since=since)
    except Ended as ended:
        return _fail(check, since, str(ended), show_journal=ended.journal)
    if healthy:
        print(f"{check.service} healthy: {seen}")
        return 0
    return _fail(check, since, f"{check.service} not healthy after {check.timeout_s:g}s ({seen}); its journal is "
                               "above")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("labwright: usage: health CHECK_JSON", file=sys.stderr)
        return 2
    return run(HealthCheck.from_json(json.loads(argv[0])))
