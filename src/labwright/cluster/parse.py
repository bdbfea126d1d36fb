"""Parsers for what corosync and Proxmox print: ``corosync-quorumtool -s``, ``pvecm status``,
``corosync-cmapctl``, and the log lines the runbooks look for."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Member:
    nodeid: int
    votes: int
    name: str
    local: bool = False


@dataclass
class QuorumStatus:
    """``corosync-quorumtool -s`` or ``pvecm status`` (same sections; pvecm adds Cluster information)."""

    quorate: bool
    nodes: int | None = None
    node_id: int | None = None
    expected_votes: int | None = None
    total_votes: int | None = None
    quorum: int | None = None
    members: list[Member] = field(default_factory=list)
    cluster_name: str | None = None
    config_version: int | None = None
    transport: str | None = None
    secure_auth: str | None = None


_KV = re.compile(r"^([A-Za-z][A-Za-z ]*?):\s+(.*)$")
_MEMBER = re.compile(r"^\s*(0x[0-9a-fA-F]+|\d+)\s+(\d+)\s+(\S+)(\s+\(local\))?\s*$")


def _opt_int(value: str | None) -> int | None:
    if value is None:
        return None
    m = re.match(r"\s*(0x[0-9a-fA-F]+|\d+)", value)
    return int(m.group(1), 0) if m else None


def parse_quorum_status(text: str) -> QuorumStatus | None:
    """None when the text holds no quorum information (corosync not running: "Cannot initialize ...")."""
    kv: dict[str, str] = {}
    members: list[Member] = []
    in_members = False
    for line in text.splitlines():
        if line.strip().startswith("Nodeid") and "Votes" in line:
            in_members = True
            continue
        if in_members:
            m = _MEMBER.match(line)
            if m:
                members.append(Member(int(m.group(1), 0), int(m.group(2)), m.group(3), bool(m.group(4))))
                continue
            if line.strip():
                in_members = False
        m2 = _KV.match(line.strip())
        if m2:
            kv.setdefault(m2.group(1).strip(), m2.group(2).strip())
    if "Quorate" not in kv:
        return None
    return QuorumStatus(
        quorate=kv["Quorate"].lower().startswith("yes"),
        nodes=_opt_int(kv.get("Nodes")),
        node_id=_opt_int(kv.get("Node ID")),
        expected_votes=_opt_int(kv.get("Expected votes")),
        total_votes=_opt_int(kv.get("Total votes")),
        quorum=_opt_int(kv.get("Quorum")),
        members=members,
        cluster_name=kv.get("Name"),
        config_version=_opt_int(kv.get("Config Version")),
        transport=kv.get("Transport"),
        secure_auth=kv.get("Secure auth"),
    )


_CMAP = re.compile(r"^(\S+) \((\w+)\) = ?(.*)$")


def parse_cmap(text: str) -> dict[str, str]:
    """``corosync-cmapctl`` lines ``key (type) = value`` into a dict of strings."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _CMAP.match(line.strip())
        if m:
            out[m.group(1)] = m.group(3).strip()
    return out


@dataclass(frozen=True)
class CmapMember:
    nodeid: int
    config_version: int | None
    status: str
    join_count: int | None
    ip: str


def cmap_members(cmap: dict[str, str]) -> dict[int, CmapMember]:
    """runtime.members.N.*: what this instance knows of each member (its config_version, joined/left)."""
    ids = sorted({int(k.split(".")[2]) for k in cmap if re.match(r"runtime\.members\.\d+\.", k)})
    out: dict[int, CmapMember] = {}
    for nid in ids:
        p = f"runtime.members.{nid}."
        ip_raw = cmap.get(p + "ip", "")
        ip = m.group(1) if (m := re.search(r"ip\(([^)]*)\)", ip_raw)) else ip_raw
        out[nid] = CmapMember(nid, _opt_int(cmap.get(p + "config_version")), cmap.get(p + "status", ""),
                              _opt_int(cmap.get(p + "join_count")), ip)
    return out


@dataclass
class LogSigns:
    """The runbooks' signs in one corosync run's log lines (since its last start)."""

    single_member: bool = False  # "Members[1]: N" (a one-node membership) seen last
    last_members: list[int] = field(default_factory=list)
    packet_rejected_from: list[str] = field(default_factory=list)  # knet "Packet rejected from ADDR:5405" (Proxmox)
    decrypt_failed_from: list[str] = field(default_factory=list)  # "Unable to decrypt packet from ADDR:5405"
    config_version_exit: tuple[int, int] | None = None  # (received, mine) from the CMAP "Exiting" line
    lines: list[str] = field(default_factory=list)  # the matching lines, for the report

    def any(self) -> bool:
        return bool(self.single_member or self.packet_rejected_from or self.decrypt_failed_from
                    or self.config_version_exit)


_START = re.compile(r"Corosync Cluster Engine .*starting up")
_MEMBERS = re.compile(r"\[QUORUM\] Members\[(\d+)\]:((?:\s+\d+)*)")
_REJECTED = re.compile(r"Packet rejected from ([0-9a-fA-F.:\[\]]+?):(\d+)")
_DECRYPT = re.compile(r"Unable to decrypt packet from ([0-9a-fA-F.:\[\]]+?):(\d+)")
_VERSION_EXIT = re.compile(r"Received config version \((\d+)\) is different than my config version \((\d+)\)")


def current_run(log: str) -> list[str]:
    """The lines since corosync last started (older runs' signs no longer apply)."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if _START.search(line)]
    return lines[starts[-1]:] if starts else lines


def log_signs(log: str) -> LogSigns:
    signs = LogSigns()
    members_line = ""
    for line in current_run(log):
        if m := _MEMBERS.search(line):
            signs.last_members = [int(x) for x in m.group(2).split()]
            signs.single_member = int(m.group(1)) == 1
            members_line = line.strip()
        elif m := _REJECTED.search(line):
            if m.group(1) not in signs.packet_rejected_from:
                signs.packet_rejected_from.append(m.group(1))
                signs.lines.append(line.strip())
        elif m := _DECRYPT.search(line):
            if m.group(1) not in signs.decrypt_failed_from:
                signs.decrypt_failed_from.append(m.group(1))
                signs.lines.append(line.strip())
        elif m := _VERSION_EXIT.search(line):
            signs.config_version_exit = (int(m.group(1)), int(m.group(2)))
            signs.lines.append(line.strip())
    if signs.single_member:  # the last membership it formed is itself alone
        signs.lines.insert(0, members_line)
    return signs
