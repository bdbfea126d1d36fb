"""Ghost nodes: directories in /etc/pve/nodes with no corosync membership and no nodelist entry.

Removal lists the guest configs left inside (and the disks they reference) first, refuses without
``yes``, tries ``pvecm delnode`` and falls back to removing the directory only when pvecm says the
node is unknown.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from labwright.cluster.doctor import Diagnosis, NodeFacts, doctor
from labwright.cluster.parse import cmap_members, pvecm_delnode_outcome
from labwright.cluster.runner import NodeRunner
from labwright.errors import BadInput, OperationFailed, SafetyCheckFailed
from labwright.shell import quote
from labwright.ui import Reporter

NODES = "/etc/pve/nodes"
# Storages that live on the node itself: their disks die with the node.
LOCAL_STORAGES = {"local", "local-lvm", "local-zfs", "local-btrfs"}
_DISK_KEY = re.compile(r"(?a)^(?:(?:ide|sata|scsi|virtio|efidisk|tpmstate|unused|mp)\d+|rootfs)$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$")
UNKNOWN_HOST = "is not a known host of the cluster"
_CMAP_IPS = re.compile(r"ip\(([^)]*)\)")


@dataclass
class Disk:
    key: str
    volume: str
    storage: str
    local: bool


@dataclass
class GuestConfig:
    kind: str  # qemu-server | lxc
    vmid: str
    path: str
    name: str
    disks: list[Disk] = field(default_factory=list)


@dataclass
class Ghost:
    name: str
    guests: list[GuestConfig] = field(default_factory=list)

    @property
    def lost_disks(self) -> list[str]:
        return [d.volume for g in self.guests for d in g.disks if d.local]


def parse_guest_config(kind: str, vmid: str, path: str, text: str) -> GuestConfig:
    """The current section of a qemu-server/lxc config (snapshots after ``[name]`` are not the live disks)."""
    g = GuestConfig(kind, vmid, path, "")
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            break
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key in ("name", "hostname"):
            g.name = value
        elif _DISK_KEY.match(key):
            volume = value.split(",", 1)[0]
            if volume in ("none", "") or "media=cdrom" in value or ":" not in volume:
                continue
            storage = volume.split(":", 1)[0]
            g.disks.append(Disk(key, volume, storage, storage in LOCAL_STORAGES))
    return g


def list_guests(runner: NodeRunner, name: str) -> list[GuestConfig]:
    d = quote(f"{NODES}/{name}")
    res = runner.run(f"for f in {d}/qemu-server/*.conf {d}/lxc/*.conf; do [ -f \"$f\" ] || continue; "
                     "echo \"@@file $f\"; cat \"$f\"; echo; done", timeout=30)
    if res.rc:
        raise OperationFailed(f"{runner.name}: cannot read {NODES}/{name}: {res.stderr.strip()}")
    guests: list[GuestConfig] = []
    path, buf = "", list[str]()
    for line in [*res.stdout.splitlines(), "@@file "]:
        if line.startswith("@@file "):
            if path:
                kind = "lxc" if "/lxc/" in path else "qemu-server"
                guests.append(parse_guest_config(kind, path.rsplit("/", 1)[1][:-5], path, "\n".join(buf)))
            path, buf = line[7:], []
        else:
            buf.append(line)
    return guests


def _reference(diag: Diagnosis) -> NodeFacts:
    ref = next((diag.facts[n] for n in diag.members if n in diag.facts), None)
    down = [f for f in diag.facts.values() if not f.reachable]
    if ref is None and down and len(down) == len(diag.facts):
        raise OperationFailed(f"no node answered ({down[0].name}: {down[0].error}); check the inventory's "
                              "connection data (ssh_hostname, ssh_key, known_hosts)")
    if not diag.quorate or ref is None:
        raise SafetyCheckFailed("the cluster is not quorate (/etc/pve is read-only then and membership is "
                                "unreliable); restore quorum first")
    return ref


def find_ghosts(diag: Diagnosis) -> tuple[NodeFacts, list[str]]:
    """(the member the check ran from, ghost names)."""
    ref = _reference(diag)
    conf = ref.pve_conf or ref.conf
    listed = {n.name for n in conf.nodes} if conf else set()
    joined_ids = {m.nodeid for m in cmap_members(ref.cmap).values() if m.status == "joined"}
    joined = {n.name for n in conf.nodes if n.nodeid in joined_ids} if conf else set()
    members = set(diag.members) | joined
    return ref, [d for d in ref.pve_nodes if d not in listed and d not in members]


def delnode_collisions(diag: Diagnosis, ref: NodeFacts, name: str) -> list[str]:
    """Why ``pvecm delnode NAME`` could hit a real node: pvecm looks NAME up in node names AND ring0_addr/ring1_addr
    (pve-cluster src/PVE/API2/ClusterConfig.pm lines 493-509) and refuses only its own node (line 482); every ring
    address of every nodelist entry, member or not, and every address corosync runs with counts here."""
    wanted = name.lower()
    hits: list[str] = []
    if ref.name.lower() == wanted:
        hits.append(f"{name} is {ref.name}, the node pvecm would run on")
    confs = [c for f in diag.facts.values() for c in (f.pve_conf, f.conf) if c is not None]
    for conf in confs:
        for node in conf.nodes:
            for link, addr in enumerate(node.addresses):
                hit = f"{name} is ring{link}_addr of nodelist node {node.name} (nodeid {node.nodeid})"
                if addr.lower() == wanted and hit not in hits:
                    hits.append(hit)
    for f in diag.facts.values():
        for key, value in f.cmap.items():
            if key.startswith("runtime.members.") and key.endswith(".ip"):
                for addr in _CMAP_IPS.findall(value):
                    hit = f"{name} is a running member's address ({key} on {f.name})"
                    if addr.lower() == wanted and hit not in hits:
                        hits.append(hit)
        for member in f.quorum.members if f.quorum else []:
            if wanted in (a.lower() for a in (member.name, *member.addresses)):
                hit = f"{name} names member nodeid {member.nodeid} in {f.name}'s corosync-quorumtool output"
                if hit not in hits:
                    hits.append(hit)
    return hits


@dataclass
class GhostReport:
    checked_on: str
    node_dirs: list[str]
    ghosts: list[Ghost]
    removed: str = ""
    dry_run: bool = True
    message: str = ""

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["dry"] = d.pop("dry_run")  # the CLI's one word for a plan-only run (docs/cli.md)
        for g, gj in zip(self.ghosts, d["ghosts"], strict=True):
            gj["lost_disks"] = g.lost_disks
        return d


def ghosts(runners: list[NodeRunner], remove: str | None = None, yes: bool = False,
           report: Reporter | None = None) -> GhostReport:
    report = report or Reporter(quiet=True)
    if remove is not None and not _NAME.match(remove):
        raise BadInput(f"--remove {remove!r}: not a node name (letters, digits, '-', '.'); give a directory name "
                       f"from {NODES}")
    with report.step("diagnosing the cluster"):
        diag = doctor(runners)
    ref, names = find_ghosts(diag)
    runner = next(r for r in runners if r.name == ref.name)
    found = [Ghost(n, list_guests(runner, n)) for n in names]
    out = GhostReport(ref.name, ref.pve_nodes, found, dry_run=not yes)
    if remove is None:
        out.message = f"{len(found)} ghost node(s)" if found else "no ghost nodes"
        return out
    if remove not in ref.pve_nodes:
        raise BadInput(f"--remove {remove}: there is no {NODES}/{remove} (node directories: "
                       f"{', '.join(ref.pve_nodes)}); nothing changed")
    ghost = next((g for g in found if g.name == remove), None)
    if ghost is None:
        raise SafetyCheckFailed(f"refusing to remove {remove}: it is in the corosync nodelist or membership, not a "
                                "ghost; shut it down for good and use pvecm delnode")
    collisions = delnode_collisions(diag, ref, remove)
    if collisions:
        raise SafetyCheckFailed(f"refusing to run pvecm delnode {remove}: pvecm delnode matches ring addresses as well "
                                f"as node names, and {'; '.join(collisions)}: it could remove that node from the "
                                f"cluster; nothing changed (check {NODES}/{remove} by hand)")
    if not yes:
        out.message = (f"dry run: would run `pvecm delnode {remove}` and, if pvecm says it is unknown, "
                       f"rm -rf {NODES}/{remove}; add --yes")
        return out
    with report.step(f"pvecm delnode {remove} on {ref.name}"):
        res = runner.run(f"cd /tmp && pvecm delnode {quote(remove)}", timeout=120)
    said = (res.stdout + res.stderr).strip()
    outcome = pvecm_delnode_outcome(res.rc, res.stdout, res.stderr, remove)
    if outcome == "removed":
        out.removed = remove
        out.message = f"pvecm delnode {remove}: {said.splitlines()[-1] if said else 'done'}"
    elif outcome == "unknown":
        with report.step(f"rm -rf {NODES}/{remove} (pvecm: not a known host)"):
            target = quote(f"{NODES}/{remove}")
            rm = runner.run(f"rm -rf {target} && ! [ -e {target} ]", timeout=60)
        if rm.rc:
            raise OperationFailed(f"{ref.name}: removing {NODES}/{remove} failed: {rm.stderr.strip()}")
        out.removed = remove
        out.message = f"pvecm: {remove} {UNKNOWN_HOST}; removed {NODES}/{remove}"
    else:
        last = said.splitlines()[-1] if said else f"exit {res.rc}"
        raise OperationFailed(f"{ref.name}: pvecm delnode {remove} failed: {last}; nothing removed")
    return out
