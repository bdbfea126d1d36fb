"""Whether systemd runs the host, and reading systemd facts in every shape pyinfra really hands them over.

A container whose PID 1 is not systemd (an application container, a chroot) or a host without ``systemctl`` at
all cannot run a labwright service. What pyinfra 3.10.0 answers there (``pyinfra/facts/systemd.py``,
``pyinfra/api/facts.py``):

- ``SystemdStatus``/``SystemdEnabled`` name ``systemctl`` as the command they need (facts/systemd.py 60-64): with
  no ``systemctl`` pyinfra returns the fact's default, ``{}`` (api/facts.py 219-240); with ``systemctl`` but no
  systemd, ``systemctl show`` fails ("System has not been booted with systemd as init system (PID 1). Can't
  operate."), pyinfra logs "could not load fact", fails the host and still returns ``{}`` (api/facts.py 347-395);
  with systemd, a unit systemd does not list is simply missing from the dict.
- ``server.Command`` has no default (``FactBase.default`` is None, api/facts.py 102-108): a command that prints
  nothing (``systemctl is-active X 2>/dev/null || true`` without systemd) is None, not ``""``.

So nothing here indexes a fact answer or calls a string method on it: ``unit_flag`` and ``systemd_init`` take
None, ``{}``, another type, or a dict without the unit. ``SystemdUnits`` asks the question directly: whether
systemd is the init (``sd_booted``: the directory ``/run/systemd/system/`` exists; systemd's man page
sd_booted(3), NOTES, systemd 252 as on Debian 12, and ``sd_booted()`` in src/libsystemd/sd-daemon/sd-daemon.c),
and ``systemctl is-active`` of each unit asked for, only then. ``SystemdServiceState`` reads one unit's states and
how often systemd restarted it (``runs_since_started``: a crash loop never passes as running).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyinfra.api import FactBase
from pyinfra.facts.systemd import SystemdStatus

from labwright.shell import quote
from labwright.textio import ascii_digits

#: ``init`` values: systemd is PID 1; systemctl is there but systemd is not running; no systemctl; not known.
RUNNING, OFFLINE, ABSENT, UNKNOWN = "running", "offline", "absent", "unknown"


class SystemdUnits(FactBase):
    """``{"init": "running" | "offline" | "absent", "units": {"UNIT": "active" | "inactive" | "failed" ...}}``:
    whether systemd runs the host, and ``systemctl is-active`` of each of ``units`` (asked only when it does)."""

    def command(self, units: str | list[str] | tuple[str, ...] = ()) -> str:
        names = " ".join(quote(unit) for unit in ([units] if isinstance(units, str) else units))
        probe = f'; for u in {names}; do echo "unit=$u=$(systemctl is-active "$u" 2>/dev/null)"; done' if names else ""
        return ("if ! command -v systemctl >/dev/null 2>&1; then echo init=absent; "
                "elif [ ! -d /run/systemd/system ]; then echo init=offline; "
                f"else echo init=running{probe}; fi")

    @staticmethod
    def default() -> dict[str, Any]:
        return {"init": UNKNOWN, "units": {}}

    def process(self, output: list[str]) -> dict[str, Any]:
        result = self.default()
        for line in output:
            key, _, value = line.strip().partition("=")
            if key == "init" and value in (RUNNING, OFFLINE, ABSENT):
                result["init"] = value
            elif key == "unit" and value:
                unit, _, state = value.partition("=")
                result["units"][unit] = state or UNKNOWN
        return result


class SystemdServiceState(FactBase):
    """``{"active_state", "sub_state", "n_restarts"}`` of one unit, from ``systemctl show -p
    NRestarts,ActiveState,SubState UNIT``: its states, and how often systemd's own ``Restart=`` restarted it since
    it was last started explicitly. A value systemd did not print is None: a unit that is not a service has no
    ``NRestarts``; no ``systemctl`` (or a failed one) prints nothing, and every value is None.

    systemctl prints the properties in its own order, one ``Name=value`` a line; an unknown or never-loaded unit
    is ``inactive``/``dead`` with ``NRestarts=0`` (systemd 252, Debian 12).
    """

    def command(self, unit: str) -> str:
        return f"systemctl show -p NRestarts,ActiveState,SubState {quote(unit)} 2>/dev/null || true"

    @staticmethod
    def default() -> dict[str, Any]:
        return {"active_state": None, "sub_state": None, "n_restarts": None}

    def process(self, output: list[str]) -> dict[str, Any]:
        result = self.default()
        for line in output:
            key, _, value = line.strip().partition("=")
            if key == "ActiveState" and value:
                result["active_state"] = value
            elif key == "SubState" and value:
                result["sub_state"] = value
            elif key == "NRestarts" and ascii_digits(value):
                result["n_restarts"] = int(value)
        return result


def runs_since_started(answer: Any) -> bool:
    """Whether a ``SystemdServiceState`` answer says the unit runs the process it was last started with: active,
    in a sub-state pyinfra's ``SystemdStatus`` counts as running (``running`` for a service; pyinfra 3.10.0
    facts/systemd.py 67, ``state_values``), and systemd has not restarted it since (``NRestarts`` 0).

    ``NRestarts`` counts the restart jobs systemd's ``Restart=`` enqueued (``service_enter_restart()``: "Count the
    jobs we enqueue for restarting"); it is zeroed by ``systemctl reset-failed`` (``service_reset_failed()``) and
    by a start that is not an automatic one (``service_start()``: "This is not an automatic restart? Flush the
    restart counter then", the flush armed by ``service_enter_dead()`` when no restart follows): systemd's
    src/core/service.c (systemd/systemd at 000d6582; the behaviour checked on a Debian 12 container, systemd
    252: 0 after ``systemctl restart``, 1, 2 ... after each automatic restart, 0 after ``reset-failed``).
    Every start labwright makes is ``reset-failed`` then ``restart``, so ``NRestarts`` > 0 on an active unit
    means it crashed at least once since labwright last started it: a crash loop caught between a restart and
    its next crash, not a running service. ``activating``/``auto-restart`` (between crashes) is not active.
    Without ``NRestarts`` (a unit that is not a service) the states alone decide. None, ``{}`` or an answer of
    another shape is False.
    """
    if not isinstance(answer, Mapping):
        return False
    if answer.get("active_state") != "active" or answer.get("sub_state") not in SystemdStatus.state_values:
        return False
    restarts = answer.get("n_restarts")
    return restarts is None or (type(restarts) is int and restarts == 0)


def systemd_init(answer: Any) -> str:
    """``running``/``offline``/``absent`` from a ``SystemdUnits`` answer; ``unknown`` for None or anything else."""
    init = answer.get("init") if isinstance(answer, Mapping) else None
    return init if init in (RUNNING, OFFLINE, ABSENT) else UNKNOWN


def unit_active(answer: Any, unit: str) -> bool:
    """Whether a ``SystemdUnits`` answer says ``unit`` is active (False for any answer that does not say so)."""
    units = answer.get("units") if isinstance(answer, Mapping) else None
    return systemd_init(answer) == RUNNING and isinstance(units, Mapping) and units.get(unit) == "active"


def unit_flag(answer: Any, unit: str) -> bool:
    """pyinfra's ``SystemdStatus``/``SystemdEnabled`` for ``unit``: True only when the answer is a dict that says
    True for it; ``{}`` (no systemctl, or the fact failed), None, another type or a missing unit are False."""
    return isinstance(answer, Mapping) and answer.get(unit) is True


def systemd_refusal(answer: Any, host_name: str, needs: str) -> str | None:
    """One line saying that ``host_name`` has no running systemd, and what needs it; None when it has one (or when
    the answer does not say, so that nothing is refused on a guess)."""
    init = systemd_init(answer)
    if init == OFFLINE:
        why = "systemd is not running there (PID 1 is not systemd: no /run/systemd/system)"
    elif init == ABSENT:
        why = "systemd is not running there (no systemctl)"
    else:
        return None
    return (f"{host_name}: {why}, and {needs}; deploy to a host or system container booted with systemd (an LXD, "
            "Incus or Proxmox container of a stock image is; an application container is not) (nothing was changed)")
