"""Cluster rejoin: a corosync node with a stale config rejoins through a quorate lead.

See deploys/cluster_rejoin.py (the pyinfra CLI shim, with usage) and docs/cluster.md.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import python

from labwright.cluster.doctor import HEALTHY, doctor, load_cluster
from labwright.cluster.rejoin import check, plan_steps, rejoin
from labwright.deploy_data import refuse_misspelt_keys
from labwright.errors import LabwrightError
from labwright.schema.checks import host_problem
from labwright.ui import Reporter


@deploy("Cluster rejoin")
def deploy_cluster_rejoin() -> None:
    """Cluster rejoin: a corosync node with a stale config rejoins through a quorate lead."""
    refuse_misspelt_keys(host.data.dict(), ("cluster_inventory", "node", "lead"), "docs/cluster.md")
    inventory = host.data.get("cluster_inventory")
    node = host.data.get("node")
    lead = host.data.get("lead")
    for key, value, example in (("cluster_inventory", inventory, "inventories/cluster.py"), ("node", node, "pve7"),
                                ("lead", lead, "10.140.3.10")):
        if not value:
            raise DeployError(f"{key}: required, e.g. --data {key}={example}")
        if not isinstance(value, str):
            raise DeployError(f"{key}: {value!r} is a {type(value).__name__}, not one value; give e.g. "
                              f"--data {key}={example}")
    # checked before any node is dialled (sweep at 2b91fd1: lead=999.1.1.1 was reported as "not quorate")
    problem = host_problem(lead.strip())
    if problem is not None:
        raise DeployError(f"lead: {problem}; give the quorate node's address or name (nothing was changed)")

    try:
        runners = load_cluster(str(inventory))
        if str(node) not in [r.name for r in runners]:
            names = ", ".join(r.name for r in runners)
            raise DeployError(f"node: no node named {node!r} in {inventory} (nodes: {names})")
        diag = doctor(runners)
        check(diag, str(node), str(lead))
        report = diag.node(str(node))
    except LabwrightError as exc:
        raise DeployError(str(exc)) from None

    if report.verdict == HEALTHY:
        message = f"{node} is healthy (member, config_version {report.config_version}): nothing to rejoin"
        print(f"    [{host.name}] {message}")
        host.noop(message)
    elif report.verdict != "stale config":
        raise DeployError(f"refusing to rejoin {node}: the doctor says {report.verdict!r} "
                          f"({'; '.join(report.reasons)})")
    else:

        def _rejoin() -> None:
            try:
                result = rejoin(runners, str(node), str(lead), yes=True, report=Reporter())
            except LabwrightError as exc:
                raise DeployError(str(exc)) from None
            for step in result.steps:
                print(f"    {step}")

        python.call(
            name=f"Rejoin {node} via {lead}: " + "; ".join(plan_steps(str(node), str(lead))),
            function=_rejoin,
        )
