"""(Re)starts that systemd's start limit cannot refuse.

systemd refuses to start a unit that was started more than ``StartLimitBurst`` times within
``StartLimitIntervalSec`` ("start of the service was attempted too often", ``Result=start-limit-hit``), and a
failed unit stays refused until the interval passes or ``systemctl reset-failed`` clears it. A deploy, a stack
switch and its rollback restart a service several times in seconds, on top of systemd's own ``Restart=``
restarts of a service that crashed: without care the deploy that should leave the user serving leaves the service
down. So:

- units labwright writes set their own ``StartLimitIntervalSec``/``StartLimitBurst`` (``templates/``), and
  every (re)start labwright makes of a unit it owns goes through labwright's one restart, run on the host by its
  agent (``python3 AGENT restart UNIT``, :func:`labwright.agent.service.restart_unit`), which runs
  ``systemctl reset-failed UNIT`` first (``started_owned``, ``restarted_owned``;
  ``labwright.operations.http.wait_healthy(restart=True)`` through the agent's ``health``): the counter then
  counts systemd's own restarts of a crash loop, never the deploy's;
- a unit labwright does not own (xrdp, Ollama) keeps the limit its packager chose: ``restarted_foreign`` backs
  off until the limit lets it start (bounded), and fails with one line naming the unit and the command that
  starts it when it never does.

Each failure is one ``labwright:`` line with the unit's state and the journal tail above it.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.systemd import SystemdEnabled

from labwright.facts.systemd import SystemdServiceState, SystemdUnits, runs_since_started, systemd_refusal, unit_flag
from labwright.operations.agent import agent_command
from labwright.shell import quote
from labwright.stacks.service import UNIT

# The shell function restarted_foreign starts with: why a unit is not running, in one line (the agent's
# labwright.agent.service.not_started says the same for a unit labwright owns).
_WHY = (
    "why() { r=$(systemctl show -p Result --value \"$1\" 2>/dev/null); s=$(systemctl is-active \"$1\" 2>/dev/null); "
    "journalctl -u \"$1\" -n 15 --no-pager -o cat >&2 2>/dev/null; "
    "if [ \"$r\" = start-limit-hit ]; then echo \"labwright: $1 was started too often (systemd's start limit: "
    "Result=start-limit-hit) and is $s: run systemctl reset-failed $1 && systemctl start $1\" >&2; "
    "else echo \"labwright: $1 did not start (state $s, Result=$r); its journal is above: fix it, then run "
    "systemctl start $1\" >&2; fi; }; "
)


def _unit(service: str) -> str:
    unit = service if "." in service else f"{service}.service"
    # An empty or odd name would otherwise become ".service" or a quoted word systemctl only refuses on the host.
    if not isinstance(service, str) or not UNIT.match(unit) or unit.startswith("."):
        raise OperationError(f"service {service!r} is not a systemd unit name; pass one like tabbyapi or "
                             "tabbyapi.service")
    return unit


def foreign_restart_command(service: str, running_only: bool, wait: float) -> str:
    """The shell line that restarts a unit someone else packaged, backing off while its start limit refuses."""
    unit = quote(_unit(service))
    verb = "try-restart" if running_only else "restart"
    return (f"{_WHY}end=$(( $(date +%s) + {int(wait)} )); delay=1; "
            f"while ! systemctl {verb} {unit} 2>/dev/null; do "
            f"[ \"$(systemctl show -p Result --value {unit})\" = start-limit-hit ] && [ $(date +%s) -lt $end ] "
            f"|| {{ why {unit}; exit 1; }}; "
            # back-off, not a wait for a state: the limit's own clock decides when a start is allowed again
            f"sleep $delay; delay=$(( delay * 2 > 15 ? 15 : delay * 2 )); done")


@operation(is_idempotent=False)
def restarted_owned(service: str):
    """
    Restart a unit labwright owns with labwright's one restart, the agent's ``restart`` subcommand on the host
    (:func:`labwright.agent.service.restart_unit`): ``systemctl reset-failed`` then ``restart``, so a start limit
    hit by earlier restarts (a deploy's, a rollback's, systemd's own) never refuses it; on failure the unit's
    journal tail and one line naming it (:func:`labwright.agent.service.not_started`).

    + service: the unit (``tabbyapi`` or ``tabbyapi.service``)

    **Example:**

    .. code:: python

        restarted_owned(name="Restart llama-server", service="llama-server", _if=unit.did_change)
    """
    yield from agent_command("restart", _unit(service))


@operation()
def started_owned(service: str, enabled: bool = True):
    """
    A unit labwright owns enabled and running; a stopped or failed one (its start limit hit included) is started
    by the agent's ``restart`` (as ``restarted_owned``: ``systemctl reset-failed`` first). No change when it
    already runs and is enabled. A unit systemd restarted since it was last started (``NRestarts`` > 0: it
    crashed at least once, and a crash loop caught between a restart and its next crash says "active (running)")
    does not run for this operation: it is restarted too, so the deploy's health check runs and names the failure
    (:func:`labwright.facts.systemd.runs_since_started`).

    + service: the unit
    + enabled: also enable it at boot

    **Example:**

    .. code:: python

        started_owned(name="llama-server running", service="llama-server")
    """
    unit = _unit(service)
    # No running systemd: one line, before a systemctl fact fails the host ("could not load fact"). The answers
    # are then read in every shape pyinfra gives ({} without systemctl, a dict without the unit, None).
    refusal = systemd_refusal(host.get_fact(SystemdUnits), host.name, f"{unit} is a systemd unit")
    if refusal:
        raise OperationError(refusal)
    running = runs_since_started(host.get_fact(SystemdServiceState, unit=unit))
    enable = enabled and not unit_flag(host.get_fact(SystemdEnabled, services=unit), unit)
    if enable:
        yield f"systemctl enable {quote(unit)}"
    if running:
        if not enable:
            # Said for every no-change run, enabled or not (pyinfra shows it with the "No change" line).
            host.noop(f"{unit} is running" + (" and enabled" if enabled else ""))
        return
    # A stopped unit, or one systemd restarted since: systemctl's restart starts it, as start would (labwright's one
    # restart, past the start limit; it zeroes NRestarts, so the next run of a healthy unit changes nothing)
    yield from agent_command("restart", unit)


@operation(is_idempotent=False)
def restarted_foreign(service: str, running_only: bool = False, wait: float = 120):
    """
    Restart a unit labwright does not own, keeping its packager's start limit: while systemd refuses it
    (``start-limit-hit``) back off (1, 2, 4 ... 15 s) up to ``wait`` seconds; else one line naming the unit and
    the command that starts it.

    + service: the unit (``xrdp``)
    + running_only: ``try-restart`` (a stopped unit stays stopped)
    + wait: seconds to back off at most

    **Example:**

    .. code:: python

        restarted_foreign(name="Restart xrdp", service="xrdp", _if=ini.did_change)
    """
    yield foreign_restart_command(service, running_only, wait)
