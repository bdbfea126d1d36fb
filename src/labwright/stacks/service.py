"""The stack switch's restart and health check: labwright's one restart-and-wait, :mod:`labwright.agent.service`.

Kept as a name for the stack side (``labwright.stacks.service.restart_owned`` and friends); nothing is defined here.
"""

from labwright.agent.service import (
    BACKOFF_S,
    FAILED_CHECK_S,
    MAX_HEALTH_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    START_LIMIT_RESULT,
    START_LIMIT_TEXT,
    UNIT,
    HealthCheck,
    Restarted,
    check_health,
    check_unit,
    probe,
    require_systemctl,
    restart,
    restart_owned,
    restart_unit,
    unit_failed,
    unit_property,
    wait_healthy,
)

__all__ = ["BACKOFF_S", "FAILED_CHECK_S", "MAX_HEALTH_TIMEOUT_S", "REQUEST_TIMEOUT_S", "START_LIMIT_RESULT",
           "START_LIMIT_TEXT", "UNIT", "HealthCheck", "Restarted", "check_health", "check_unit", "probe",
           "require_systemctl", "restart", "restart_owned", "restart_unit", "unit_failed", "unit_property",
           "wait_healthy"]
