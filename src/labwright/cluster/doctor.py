"""The cluster doctor: per node facts (one shell round trip each, nodes in parallel) and a verdict.

Verdicts: ``healthy``, ``stale config`` (missed config versions or an authkey the quorate members do not
share), ``not in cluster``, ``quorum lost`` (the cluster itself is not quorate: never suggest a rejoin
then), ``unreachable``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labwright.cluster.conf import ConfError, CorosyncConf, parse_conf
from labwright.cluster.parse import (
    CmapMember,
    LogSigns,
    QuorumStatus,
    cmap_members,
    log_signs,
    parse_cmap,
    parse_quorum_status,
)
from labwright.cluster.runner import NodeRunner, runner_from_data
from labwright.errors import BadInput
from labwright.inventory import InventoryHost, LoadedInventory, load_inventory
from labwright.textio import ascii_digits

HEALTHY = "healthy"
STALE = "stale config"
NOT_IN_CLUSTER = "not in cluster"
QUORUM_LOST = "quorum lost"
UNREACHABLE = "unreachable"

CONF = "/etc/corosync/corosync.conf"
PVE_CONF = "/etc/pve/corosync.conf"

# One round trip per node. Sections start with "@@name"; "@@rc name N" records an exit code.
FACTS_SCRIPT = r"""
echo @@state
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then systemctl is-active corosync
else p=$(cat /run/corosync.pid 2>/dev/null)
  if [ -n "$p" ] && [ "$(cat /proc/$p/comm 2>/dev/null)" = corosync ] && ! grep -q ') Z ' /proc/$p/stat 2>/dev/null
  then echo active; else echo inactive; fi
fi
echo @@conf; cat /etc/corosync/corosync.conf 2>/dev/null; printf '\n@@rc conf %s\n' $?
echo @@pveconf; cat /etc/pve/corosync.conf 2>/dev/null; printf '\n@@rc pveconf %s\n' $?
echo @@authkey; sha256sum /etc/corosync/authkey 2>/dev/null | cut -c1-64
echo @@quorum; corosync-quorumtool -s 2>&1; q=$?; printf '\n@@rc quorum %s\n' $q
echo @@cmap
corosync-cmapctl 2>/dev/null | grep -E '^(runtime[.]members[.]|totem[.]config_version |nodelist[.])'
echo @@pvecm
# pvecm status prints the same quorum information (it runs corosync-quorumtool) and costs a Perl start-up on
# Proxmox: only asked when corosync-quorumtool itself is missing or broken.
if [ $q -ne 0 ] && [ $q -ne 2 ] && [ $q -ne 1 ] && command -v pvecm >/dev/null 2>&1; then
  (cd /tmp && pvecm status 2>&1); printf '\n@@rc pvecm %s\n' $?
fi
echo @@log
if [ -d /run/systemd/system ] && command -v journalctl >/dev/null 2>&1; then
  journalctl -u corosync -b -n 400 --no-pager 2>/dev/null
else tail -n 400 /var/log/corosync/corosync.log 2>/dev/null; fi
echo @@nodes; ls -1 /etc/pve/nodes 2>/dev/null
"""


def split_sections(text: str) -> tuple[dict[str, str], dict[str, int]]:
    sections: dict[str, list[str]] = {}
    rcs: dict[str, int] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("@@rc "):
            _, name, rc = line.split()
            rcs[name] = int(rc)
        elif line.startswith("@@") and " " not in line:
            current = line[2:]
            sections[current] = []
        elif current:
            sections[current].append(line)
    return {k: "\n".join(v).strip("\n") + "\n" for k, v in sections.items()}, rcs


@dataclass
class NodeFacts:
    name: str
    reachable: bool = True
    error: str = ""
    service: str = "unknown"  # active / inactive / failed ...
    conf_version: int | None = None
    conf_error: str = ""
    conf: CorosyncConf | None = None
    pve_conf: CorosyncConf | None = None
    authkey_sha256: str = ""
    quorum: QuorumStatus | None = None
    cmap: dict[str, str] = field(default_factory=dict)
    pvecm: QuorumStatus | None = None
    signs: LogSigns = field(default_factory=LogSigns)
    pve_nodes: list[str] = field(default_factory=list)

    @property
    def running_version(self) -> int | None:
        v = self.cmap.get("totem.config_version")
        return int(v) if v and ascii_digits(v) else None


def gather(runner: NodeRunner, timeout: float = 30) -> NodeFacts:
    facts = NodeFacts(runner.name)
    res = runner.run(FACTS_SCRIPT, timeout=timeout)
    if "@@state" not in res.stdout:
        facts.reachable = False
        facts.error = (res.stderr.strip().splitlines() or [f"exit {res.rc}"])[-1]
        return facts
    sec, rcs = split_sections(res.stdout)
    facts.service = sec.get("state", "").strip() or "unknown"
    if rcs.get("conf") == 0:
        try:
            facts.conf = parse_conf(sec["conf"], f"{runner.name}:{CONF}")
            facts.conf_version = facts.conf.config_version
        except ConfError as exc:
            facts.conf_error = str(exc)
    if rcs.get("pveconf") == 0:
        try:
            facts.pve_conf = parse_conf(sec["pveconf"], f"{runner.name}:{PVE_CONF}")
        except ConfError as exc:
            facts.conf_error = facts.conf_error or str(exc)
    facts.authkey_sha256 = sec.get("authkey", "").strip()
    facts.quorum = parse_quorum_status(sec.get("quorum", ""))
    facts.cmap = parse_cmap(sec.get("cmap", ""))
    if rcs.get("pvecm") == 0:
        facts.pvecm = parse_quorum_status(sec.get("pvecm", ""))
        facts.quorum = facts.quorum or facts.pvecm
    facts.signs = log_signs(sec.get("log", ""))
    facts.pve_nodes = [n for n in sec.get("nodes", "").split() if n]
    return facts


@dataclass
class NodeReport:
    name: str
    verdict: str
    service: str
    config_version: int | None
    running_version: int | None
    member: bool
    quorate: bool | None
    members_seen: int | None
    missed_versions: list[int] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    signs: list[str] = field(default_factory=list)
    cluster_view: dict[str, Any] | None = None  # what a quorate member's cmap says of this node
    suggestion: str = ""
    address: str = ""


@dataclass
class Diagnosis:
    quorate: bool
    cluster_name: str
    config_version: int | None  # the cluster's: the quorate members' (and /etc/pve/corosync.conf's)
    pve_conf_version: int | None
    members: list[str]
    expected_votes: int | None
    total_votes: int | None
    lead_addresses: list[str]
    nodes: list[NodeReport]
    facts: dict[str, NodeFacts] = field(default_factory=dict, repr=False)

    def node(self, name: str) -> NodeReport:
        for n in self.nodes:
            if n.name == name:
                return n
        known = ", ".join(n.name for n in self.nodes)
        raise BadInput(f"no node named {name!r} in the inventory (nodes: {known}); use one of those names")

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("facts", None)
        return d

    @property
    def healthy(self) -> bool:
        return all(n.verdict == HEALTHY for n in self.nodes)


def _is_member(f: NodeFacts) -> bool:
    """corosync runs and this node sees a quorate membership that includes itself."""
    q = f.quorum
    return bool(f.service == "active" and q and q.quorate)


def _majority(values: list[Any]) -> Any:
    values = [v for v in values if v not in (None, "")]
    return Counter(values).most_common(1)[0][0] if values else None


def diagnose(facts: list[NodeFacts]) -> Diagnosis:
    by_name = {f.name: f for f in facts}
    quorate_nodes = [f for f in facts if _is_member(f)]
    quorate = bool(quorate_nodes)
    pve_versions = [f.pve_conf.config_version for f in (quorate_nodes or facts) if f.pve_conf]
    pve_version = max(pve_versions) if pve_versions else None
    # The quorate majority's running config_version (a member may run a higher one: corosync lets it join),
    # or /etc/pve/corosync.conf's when that is newer (edited, not reloaded yet).
    running = _majority([f.running_version for f in quorate_nodes])
    if quorate:
        cluster_version = max([v for v in (running, pve_version) if v is not None], default=None)
    else:
        known = [v for f in facts for v in (f.conf_version, f.running_version) if v is not None]
        cluster_version = max([*known, *pve_versions], default=None)
    ref = quorate_nodes[0] if quorate_nodes else next((f for f in facts if f.quorum), None)
    conf_source = next((f.pve_conf for f in (quorate_nodes or facts) if f.pve_conf), None) or \
        next((f.conf for f in (quorate_nodes or facts) if f.conf), None)
    key = _majority([f.authkey_sha256 for f in quorate_nodes])
    member_ids = {m.nodeid for m in (ref.quorum.members if ref and ref.quorum and quorate else [])}
    members = []
    for nid in sorted(member_ids):
        n = conf_source.node_by_id(nid) if conf_source else None
        members.append(n.name if n else str(nid))
    view = cmap_members(ref.cmap) if ref and quorate else {}
    leads = [n.ring0_addr for n in (conf_source.nodes if conf_source else [])
             if n.name in {f.name for f in quorate_nodes} and n.ring0_addr]
    reports = [_node_report(f, quorate, cluster_version, key, conf_source, members, view, facts, leads)
               for f in facts]
    q = ref.quorum if ref else None
    return Diagnosis(
        quorate=quorate,
        cluster_name=conf_source.cluster_name if conf_source else "",
        config_version=cluster_version,
        pve_conf_version=pve_version,
        members=members,
        expected_votes=q.expected_votes if q else None,
        total_votes=q.total_votes if q else None,
        lead_addresses=leads,
        nodes=reports,
        facts=by_name,
    )


def _node_report(f: NodeFacts, quorate: bool, cluster_version: int | None, key: str | None,
                 conf: CorosyncConf | None, members: list[str], view: dict[int, CmapMember],
                 everyone: list[NodeFacts], leads: list[str]) -> NodeReport:
    entry = conf.node(f.name) if conf else None
    r = NodeReport(
        name=f.name, verdict=HEALTHY, service=f.service, config_version=f.conf_version,
        running_version=f.running_version, member=f.name in members,
        quorate=f.quorum.quorate if f.quorum else None, members_seen=f.quorum.nodes if f.quorum else None,
        address=entry.ring0_addr if entry else "",
    )
    if not f.reachable:
        r.verdict, r.reasons = UNREACHABLE, [f"cannot run commands on it: {f.error}"]
        return r
    r.signs = list(f.signs.lines)
    if entry:
        cv = view.get(entry.nodeid)
        if cv:
            r.cluster_view = {"config_version": cv.config_version, "status": cv.status, "join_count": cv.join_count}
        # Other nodes' logs about this node's address: "Unable to decrypt packet from" / "Packet rejected from".
        for other in everyone:
            if other.name != f.name and entry.ring0_addr and (
                    entry.ring0_addr in other.signs.decrypt_failed_from
                    or entry.ring0_addr in other.signs.packet_rejected_from):
                what = ("Unable to decrypt packet" if entry.ring0_addr in other.signs.decrypt_failed_from
                        else "Packet rejected")
                r.signs.append(f"{other.name} cannot accept its packets (log: {what} from {entry.ring0_addr})")
    if f.conf_error:
        r.reasons.append(f.conf_error)
    if cluster_version is not None and f.conf_version is not None and f.conf_version < cluster_version:
        r.missed_versions = list(range(f.conf_version + 1, cluster_version + 1))
        r.reasons.append(f"config_version {f.conf_version} < the cluster's {cluster_version} "
                         f"(missed {', '.join(map(str, r.missed_versions))})")
    if f.signs.config_version_exit and f.signs.config_version_exit[1] < f.signs.config_version_exit[0]:
        got, mine = f.signs.config_version_exit
        r.reasons.append(f"corosync exited: received config version {got}, its own is {mine}")
    if key and f.authkey_sha256 and f.authkey_sha256 != key:
        r.reasons.append("/etc/corosync/authkey differs from the quorate members' (old cluster key)")
    stale = bool(r.missed_versions or (key and f.authkey_sha256 and f.authkey_sha256 != key)
                 or (f.signs.config_version_exit and f.signs.config_version_exit[1] < f.signs.config_version_exit[0]))
    if not quorate:
        r.verdict = QUORUM_LOST
        q = f.quorum
        seen = f"sees {q.nodes} node(s), {q.total_votes}/{q.expected_votes} votes" if q else f"corosync {f.service}"
        r.reasons.insert(0, f"the cluster is not quorate ({seen}); restore quorum first (bring members back): "
                            "do NOT rejoin or change configs now")
        return r
    lead = next((a for a in leads if a != r.address), "LEAD_IP")
    if f.conf is None and not f.conf_error:
        r.verdict = NOT_IN_CLUSTER
        r.reasons.append(f"no {CONF}: this node was never joined (pvecm add {lead})")
    elif conf and not entry:
        r.verdict = NOT_IN_CLUSTER
        r.reasons.append(f"{f.name} is not in the cluster's nodelist")
    elif stale or f.conf_error:
        r.verdict = STALE
        if f.signs.single_member and f.service == "active":
            r.reasons.append("it formed a single-member membership of its own (log: Members[1])")
        if f.service == "active":
            r.reasons.append("its corosync keeps knocking on the cluster: stop it (the rejoin does)")
        r.suggestion = (f"labwright cluster rejoin {f.name} --lead {lead}" if not f.conf_error
                        else "fix the file, then run the doctor again")
    elif not r.member:
        r.verdict = NOT_IN_CLUSTER
        if f.service != "active":
            r.reasons.append(f"corosync is {f.service}; start it (systemctl start corosync)")
        else:
            r.reasons.append("corosync runs but is not in the quorate membership (check its network links)")
    elif cluster_version is not None and f.conf_version is not None and f.conf_version > cluster_version:
        r.reasons.append(f"config_version {f.conf_version} is ahead of the cluster's {cluster_version}")
    return r


def doctor(runners: list[NodeRunner], timeout: float = 30) -> Diagnosis:
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(runners)))) as pool:
        facts = list(pool.map(lambda r: gather(r, timeout), runners))
    return diagnose(facts)


def _declared_group(inventory: LoadedInventory, name: str) -> list[InventoryHost]:
    # Only a group the file defines: pyinfra also makes one from the file name (cluster.py -> `cluster`).
    return inventory.group(name) if inventory.declares(name) else []


def load_cluster(inventory: str | Path) -> list[NodeRunner]:
    """The nodes of the inventory's ``cluster`` group (else ``pve_nodes``), one runner each, with the data a pyinfra
    run of the inventory gives them (``labwright.inventory``: group data and ``group_data/`` files included)."""
    loaded = load_inventory(inventory)
    hosts = _declared_group(loaded, "cluster") or _declared_group(loaded, "pve_nodes")
    if not hosts:
        raise BadInput(f"inventory {inventory}: no `cluster` (or `pve_nodes`) group; add cluster = [\"pve1\", ...]")
    return [runner_from_data(str(host.data.get("corosync_name") or host.name), dict(host.data)) for host in hosts]


def host_data(inventory: str | Path, node: str) -> Mapping[str, Any]:
    loaded = load_inventory(inventory)
    for host in _declared_group(loaded, "cluster") + _declared_group(loaded, "pve_nodes"):
        if str(host.data.get("corosync_name") or host.name) == node:
            return host.data
    return {}


@dataclass
class Prevention:
    node: str
    last_known: int
    cluster_version: int | None
    quorate: bool
    missed_versions: list[int]
    safe: bool
    advice: str


def prevent(diag: Diagnosis, node: str, last_known: int) -> Prevention:
    """Before powering on a long-offline node: compare its last known config_version with the cluster's."""
    cv = diag.config_version
    if not diag.quorate:
        return Prevention(node, last_known, cv, False, [], False,
                          "the cluster is not quorate: restore quorum before bringing any node back")
    missed = list(range(last_known + 1, cv + 1)) if cv is not None and last_known < cv else []
    if missed:
        lead = diag.lead_addresses[0] if diag.lead_addresses else "LEAD_IP"
        return Prevention(node, last_known, cv, True, missed, False,
                          f"{node} would boot with a stale config (missed {', '.join(map(str, missed))}): "
                          "keep corosync from starting (systemctl disable corosync, or boot it off the cluster "
                          f"network), then labwright cluster rejoin {node} --lead {lead} --yes")
    return Prevention(node, last_known, cv, True, [], True,
                      f"{node}'s config_version {last_known} matches the cluster's {cv}: safe to power on")
