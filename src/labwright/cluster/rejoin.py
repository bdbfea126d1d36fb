"""The stale-config rejoin runbook: refuse unless it applies, stop corosync, ``pvecm add --force`` from
/tmp, wait for quorum, verify membership and that config_version moved."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from labwright.cluster.doctor import HEALTHY, STALE, Diagnosis, doctor
from labwright.cluster.parse import pvecm_add_outcome
from labwright.cluster.runner import NodeRunner
from labwright.errors import BadInput, LabwrightError, OperationFailed, SafetyCheckFailed
from labwright.ui import Reporter

STOP_SCRIPT = r"""
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then systemctl stop corosync; exit $?; fi
p=$(cat /run/corosync.pid 2>/dev/null)
# A zombie (exited, not yet reaped by its parent) counts as stopped.
alive() { [ "$(cat /proc/$p/comm 2>/dev/null)" = corosync ] && ! grep -q ') Z ' /proc/$p/stat 2>/dev/null; }
if [ -z "$p" ] || ! alive; then echo already-stopped; exit 0; fi
kill "$p"
i=0; while alive && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done
if alive; then kill -9 "$p"; sleep 0.2; fi
echo stopped
"""


@dataclass
class RejoinResult:
    node: str
    lead: str
    dry_run: bool
    changed: bool
    steps: list[str] = field(default_factory=list)
    before_version: int | None = None
    after_version: int | None = None
    message: str = ""

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["dry"] = d.pop("dry_run")  # the CLI's one word for a plan-only run (docs/cli.md)
        return d


def plan_steps(node: str, lead: str) -> list[str]:
    return [
        f"stop corosync on {node} (ends its rejected-packet flood)",
        f"cd /tmp && pvecm add {lead} --use_ssh --force   (on {node}; pvecm refuses inside /etc/pve)",
        f"wait until {node} sees a quorate membership",
        f"verify {node} is a member and its config_version moved",
    ]


def check(diag: Diagnosis, node: str, lead: str) -> None:
    """Refuse unless the doctor says stale config and the cluster is quorate; the lead must be a quorate member."""
    rep = diag.node(node)  # BadInput for an unknown node
    if not diag.quorate:
        raise SafetyCheckFailed(f"refusing to rejoin {node}: the cluster is not quorate; restore quorum first "
                                "(labwright cluster doctor shows which members are down)")
    facts = diag.facts.get(node)
    if facts and facts.conf_error:
        raise BadInput(f"refusing to rejoin {node}: {facts.conf_error}")
    if rep.verdict != STALE:
        return
    if lead not in diag.lead_addresses or lead == rep.address:
        raise BadInput(f"--lead {lead}: not the address of a quorate member "
                       f"(use one of: {', '.join(a for a in diag.lead_addresses if a != rep.address) or 'none'})")


def wait_quorate(runner: NodeRunner, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if runner.run("corosync-quorumtool -s >/dev/null 2>&1", timeout=10).rc == 0:
            return True
        time.sleep(0.5)
    return False


def _state_after_failed_add(runners: list[NodeRunner], node: str) -> str:
    """The node's state now, as the doctor sees it (what pvecm add left behind)."""
    try:
        now = doctor(runners).node(node)
    except LabwrightError as exc:
        return f"its state could not be read ({exc})"
    return (f"now: corosync {now.service}, config_version {now.config_version}, "
            f"{'a member' if now.member else 'not a member'} (doctor: {now.verdict})")


def rejoin(runners: list[NodeRunner], node: str, lead: str, yes: bool, report: Reporter | None = None,
           quorum_timeout: float = 60, add_timeout: float = 300) -> RejoinResult:
    report = report or Reporter(quiet=True)
    if node not in [r.name for r in runners]:
        raise BadInput(f"no node named {node!r} in the inventory (nodes: {', '.join(r.name for r in runners)}); "
                       "use one of those names")
    with report.step("diagnosing the cluster"):
        diag = doctor(runners)
    rep = diag.node(node)
    check(diag, node, lead)
    result = RejoinResult(node, lead, dry_run=not yes, changed=False, before_version=rep.config_version)
    if rep.verdict == HEALTHY:
        result.message = (f"{node} is healthy (member, config_version {rep.config_version}): nothing to do; "
                          "nothing changed")
        return result
    if rep.verdict != STALE:
        why = "; ".join(rep.reasons) or rep.verdict
        raise SafetyCheckFailed(f"refusing to rejoin {node}: the doctor says {rep.verdict!r}, not stale config ({why})")
    result.steps = plan_steps(node, lead)
    if not yes:
        result.message = f"dry run: {node} is stale ({'; '.join(rep.reasons)}); add --yes to run these steps"
        return result
    runner = next(r for r in runners if r.name == node)
    done: list[str] = []
    with report.step(f"stopping corosync on {node}"):
        res = runner.run(STOP_SCRIPT, timeout=30)
        if res.rc:
            raise OperationFailed(f"{node}: stopping corosync failed (exit {res.rc}): "
                                  f"{(res.stderr or res.stdout).strip().splitlines()[-1:]}")
        done.append(f"stopped corosync on {node}" + (" (it had already exited)" if "already" in res.stdout else ""))
    with report.step(f"pvecm add {lead} --use_ssh --force on {node}"):
        res = runner.run(f"cd /tmp && pvecm add {lead} --use_ssh --force", timeout=add_timeout)
        # pvecm add exits 0 when the join failed (its worker's error is only printed): read what it said.
        added = pvecm_add_outcome(res.rc, res.stdout, res.stderr)
        if not added.joined:
            why = (f"it did not finish in {add_timeout:.0f}s (pvecm add waits for quorum without a limit)"
                   if res.rc == 124 else f"pvecm said: {added.message}")
            raise OperationFailed(f"{node}: pvecm add {lead} did not join it: {why}; "
                                  f"{_state_after_failed_add(runners, node)}; fix the cause and run the rejoin again")
        done.append(f"ran pvecm add {lead} --use_ssh --force from /tmp on {node}: {added.message}"
                    + (f" ({added.warnings} warning(s))" if added.warnings else ""))
    result.changed = True
    with report.step(f"waiting for quorum on {node}"):
        if not wait_quorate(runner, quorum_timeout):
            raise OperationFailed(f"{node}: no quorate membership {quorum_timeout:.0f}s after pvecm add; "
                                  "see labwright cluster doctor")
        done.append(f"{node} sees a quorate membership")
    with report.step("verifying"):
        after = doctor(runners)
    now = after.node(node)
    result.after_version = now.config_version
    result.steps = done
    if now.verdict != HEALTHY or not now.member:
        raise OperationFailed(f"{node}: after the rejoin the doctor says {now.verdict!r} "
                              f"({'; '.join(now.reasons)}); see labwright cluster doctor")
    result.steps.append(f"{node} is a member; config_version {rep.config_version} -> {now.config_version}")
    result.message = f"{node} rejoined the cluster (config_version {rep.config_version} -> {now.config_version})"
    return result
