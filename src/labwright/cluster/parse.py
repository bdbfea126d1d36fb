"""Parsers for what corosync and Proxmox print: ``corosync-quorumtool -s``, ``pvecm status``,
``corosync-cmapctl``, and the log lines the runbooks look for."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from labwright.errors import OperationFailed


class UnknownOutput(OperationFailed):
    """A tool printed something labwright does not understand: stop, change nothing, name what it was."""


@dataclass(frozen=True)
class Member:
    nodeid: int
    votes: int | None  # None: corosync's quorum provider is not votequorum (no Votes column)
    name: str  # the nodelist name, or with ``-i`` (``pvecm status``) the first ring address; "" when unresolved
    local: bool = False
    qdevice: str = ""  # the Qdevice column: "A,V,NMW" (alive, casts a vote, master wins), "NR" (not registered)
    addresses: tuple[str, ...] = ()  # with ``-a``: the further names/addresses printed after the first
    extra_info: str = ""  # " [...]": qdevice extra info (corosync 3.1.11+)


@dataclass(frozen=True)
class Qdevice:
    """The quorum device row (nodeid 0) of the membership table."""

    name: str
    votes: int  # what it counts for on this node (0 when it does not cast its vote here)
    configured_votes: int | None = None  # "(votes N)": its votes when it is not casting them on this node


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
    provider: str | None = None
    flags: list[str] = field(default_factory=list)
    qdevice: Qdevice | None = None


# The layouts below are corosync's tools/corosync-quorumtool.c (v3.1.10-24-g65235a81; Debian 12 runs 3.1.7, the
# same format strings): display_quorum_data() lines 660-725 and display_nodes_data() lines 533-658. Each column is
# print_string_padded() (lines 464-475: right-aligned in 10, then a space); hex node ids are "0x%08x ".
_KV = re.compile(r"^([A-Za-z][A-Za-z ]*?):\s+(.*)$")
_HEADERS = {
    ("Nodeid", "Votes", "Name"): False,
    ("Nodeid", "Votes", "Qdevice", "Name"): True,
    ("Nodeid", "Name"): False,  # quorum provider other than votequorum (v_handle unset)
}
_NODEID = r"(?:0x[0-9a-f]{8}|[0-9]{1,10})"
_QDEVICE_FLAGS = r"(?:N?A,N?V,N?MW|NR)"
# A member row: nodeid, votes, [qdevice flags], then the name part: "NAME[, ADDR...][ [EXTRA]][ (local)]".
_ROW = {
    False: re.compile(rf"^\s*(?P<id>{_NODEID}) +(?P<votes>[0-9]{{1,10}})(?: (?P<rest>.*))?$"),
    True: re.compile(rf"^\s*(?P<id>{_NODEID}) +(?P<votes>[0-9]{{1,10}}) +(?P<qd>{_QDEVICE_FLAGS})(?: (?P<rest>.*))?$"),
}
_ROW_NO_VOTES = re.compile(rf"^\s*(?P<id>{_NODEID})(?: (?P<rest>.*))?$")
# The quorum device row (nodeid VOTEQUORUM_QDEVICE_NODEID = 0): lines 635-656; its Qdevice column is 11 spaces.
_QDEVICE_ROW = re.compile(r"(?a)^\s*(?:0x0{8}|0) +(?P<votes>\d{1,10}) {12}(?P<name>\S+)"
                          r"(?: \(votes (?P<cfg>\d{1,10})\))?$")
_NO_ADDRESS = re.compile(r"(?a)^Unable to get node address for nodeid \d+: ")
_NAME_PART = re.compile(r"^(?P<names>[^\s\[\](),]*(?:, [^\s,]+)*)(?: \[(?P<extra>.*)\])?(?P<local> \(local\))?$")


def _opt_int(value: str | None) -> int | None:
    if value is None:
        return None
    m = re.match(r"(?a)\s*(0x[0-9a-fA-F]{1,16}(?![0-9a-fA-F])|\d{1,20}(?![0-9]))", value)
    return int(m.group(1), 0) if m else None


def _member_row(line: str, with_votes: bool, with_qdevice: bool, what: str) -> Member:
    m = _ROW[with_qdevice].match(line) if with_votes else _ROW_NO_VOTES.match(line)
    rest = _NAME_PART.match(m.group("rest") or "") if m else None
    if not m or not rest:
        raise UnknownOutput(f"{what}: membership row not understood: {line.strip()!r} (expected "
                            f"'NODEID{' VOTES' if with_votes else ''}{' QDEVICE' if with_qdevice else ''} NAME', as "
                            "corosync-quorumtool 3.x prints it); nothing was changed")
    names = rest.group("names").split(", ") if rest.group("names") else [""]
    return Member(int(m.group("id"), 0), int(m.group("votes")) if with_votes else None, names[0],
                  bool(rest.group("local")), m.groupdict().get("qd") or "", tuple(names[1:]),
                  rest.group("extra") or "")


def parse_membership(lines: list[str], what: str = "corosync-quorumtool") -> tuple[list[Member], Qdevice | None]:
    """The rows after a ``Membership information`` header (``-l``, ``-s``, ``pvecm status``/``nodes``)."""
    body = [line for line in lines if line.strip()]
    if body and set(body[0].strip()) == {"-"}:
        body = body[1:]
    if not body:
        raise UnknownOutput(f"{what}: a membership section with no column header; nothing was changed")
    header = tuple(body[0].split())
    if header not in _HEADERS:
        raise UnknownOutput(f"{what}: membership columns {' '.join(header)!r} not understood (known: "
                            f"{'; '.join(' '.join(h) for h in _HEADERS)}); nothing was changed")
    with_qdevice, with_votes = _HEADERS[header], "Votes" in header
    members: list[Member] = []
    qdevice: Qdevice | None = None
    for line in body[1:]:
        if _NO_ADDRESS.match(line):  # stderr, merged: node_name() line 367; that row's name is then ""
            continue
        if qdevice is not None:
            raise UnknownOutput(f"{what}: a row after the Qdevice row: {line.strip()!r}; nothing was changed")
        if with_qdevice and (q := _QDEVICE_ROW.match(line)):
            qdevice = Qdevice(q.group("name"), int(q.group("votes")), _opt_int(q.group("cfg")))
            continue
        members.append(_member_row(line, with_votes, with_qdevice, what))
    return members, qdevice


def parse_quorum_status(text: str, what: str = "corosync-quorumtool -s") -> QuorumStatus | None:
    """None when the text holds no quorum information (corosync not running: "Cannot initialize CMAP service",
    lines 971-1013). Raises UnknownOutput for a layout it does not know, rather than finding no members."""
    lines = text.splitlines()
    if not any(line.strip() == "Quorum information" for line in lines):
        return None
    kv: dict[str, str] = {}
    members: list[Member] = []
    qdevice: Qdevice | None = None
    seen_membership = False
    for i, line in enumerate(lines):
        if line.strip() == "Membership information":
            members, qdevice = parse_membership(lines[i + 1:], what)
            seen_membership = True
            break
        # stdout, display_nodes_data() line 544: that node's votes are then unknown
        if re.match(r"(?a)^Unable to get node \d+ info$", line.strip()):
            raise UnknownOutput(f"{what}: {line.strip()!r}: the member votes it printed are not reliable; "
                                "nothing was changed")
        if m := _KV.match(line.strip()):
            kv.setdefault(m.group(1).strip(), m.group(2).strip())
    if "Quorate" not in kv:
        raise UnknownOutput(f"{what}: a Quorum information section without a 'Quorate:' line; nothing was changed")
    provider = kv.get("Quorum provider")
    if not seen_membership:
        # display_quorum_data() returns before the membership when votequorum is not the provider (line 695).
        raise UnknownOutput(f"{what}: no Membership information (quorum provider {provider or 'unknown'!s}; "
                            "labwright needs corosync_votequorum, as Proxmox VE configures it); nothing was changed")
    nodes = _opt_int(kv.get("Nodes"))
    if nodes is not None and nodes != len(members):
        raise UnknownOutput(f"{what}: 'Nodes: {nodes}' but {len(members)} membership row(s) understood; "
                            "nothing was changed")
    return QuorumStatus(
        quorate=kv["Quorate"].lower().startswith("yes"),
        nodes=nodes,
        node_id=_opt_int(kv.get("Node ID")),
        expected_votes=_opt_int(kv.get("Expected votes")),
        total_votes=_opt_int(kv.get("Total votes")),
        quorum=_opt_int(kv.get("Quorum")),
        members=members,
        cluster_name=kv.get("Name"),
        config_version=_opt_int(kv.get("Config Version")),
        transport=kv.get("Transport"),
        secure_auth=kv.get("Secure auth"),
        provider=provider,
        flags=kv.get("Flags", "").split(),
        qdevice=qdevice,
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
    ids = sorted({int(k.split(".")[2]) for k in cmap if re.match(r"(?a)runtime\.members\.\d{1,10}\.", k)})
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
_MEMBERS = re.compile(r"(?a)\[QUORUM\] Members\[(\d{1,10})\]:((?:\s+\d{1,10}(?![0-9]))*)")
# kronosnet prints "from %s:%s" with getnameinfo(NI_NUMERICHOST) (libknet/threads_rx.c lines 942 and 1006,
# netutils.c knet_addrtostr() lines 106-135): an IPv6 address has no brackets, so the port is after the LAST colon.
_REJECTED = re.compile(r"(?a)Packet rejected from \[?([0-9a-fA-F.:]+?)\]?:(\d{1,10})(?![\d.:]*\d)")
_DECRYPT = re.compile(r"(?a)Unable to decrypt packet from \[?([0-9a-fA-F.:]+?)\]?:(\d{1,10})(?![\d.:]*\d)")
_VERSION_EXIT = re.compile(r"(?a)Received config version \((\d{1,20})\) is different than "
                           r"my config version \((\d{1,20})\)")


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


# -- pvecm (pve-cluster 9.1.6, commit 7091d92e; pve-common 9.2.1, commit f665029e) --------------------------------
# `pvecm add` runs the join in a forked CLI worker and returns undef whatever the worker did
# (src/PVE/CLI/pvecm.pm lines 520-527): it exits 0 when the join failed. The worker's output (its stderr merged)
# goes to stdout; its error goes to stderr without the "TASK ERROR: " prefix, warnings as "Task finished with N
# warning(s)!" (pve-common src/PVE/RESTEnvironment.pm lines 489-498). Only a finished join prints the last line
# "successfully added node 'NAME' to cluster." (pve-cluster src/PVE/Cluster/Setup.pm line 819).
_ADDED = re.compile(r"^successfully added node '([^']*)' to cluster\.$", re.M)
_TASK_WARNINGS = re.compile(r"(?a)^Task finished with (\d{1,10}) warning\(s\)!$", re.M)


@dataclass(frozen=True)
class PvecmAdd:
    joined: bool
    message: str  # why not (pvecm's own words), or the success line
    warnings: int = 0


def pvecm_add_outcome(rc: int, stdout: str, stderr: str) -> PvecmAdd:
    """What ``pvecm add`` did, from its output rather than its exit code (which is 0 for a failed join)."""
    warnings = int(m.group(1)) if (m := _TASK_WARNINGS.search(stderr)) else 0
    if rc == 0 and (m := _ADDED.search(stdout)):
        return PvecmAdd(True, m.group(0), warnings)
    said = [line.strip() for line in stderr.splitlines() if line.strip() and not _TASK_WARNINGS.match(line.strip())]
    if not said:
        said = [line.strip() for line in stdout.splitlines() if line.strip()]
    why = said[-1] if said else "no output"
    if rc == 0:
        why = f"{why} (exit 0, but no \"successfully added node\" line: the join did not finish)"
    else:
        why = f"{why} (exit {rc})"
    return PvecmAdd(False, why, warnings)


# `pvecm delnode ARG` (PVE::API2::ClusterConfig delnode, src/PVE/API2/ClusterConfig.pm lines 466-524) removes the
# nodelist entry whose NAME, ring0_addr or ring1_addr equals ARG; it dies (exit 255) with these messages.
DELNODE_UNKNOWN = re.compile(r"^Node/IP: (\S+) is not a known host of the cluster\.$", re.M)
DELNODE_SELF = "Cannot delete myself from cluster!"
DELNODE_NO_QUORUM = "cluster not ready - no quorum?"


def pvecm_delnode_outcome(rc: int, stdout: str, stderr: str, arg: str) -> str:
    """``removed`` (exit 0), ``unknown`` (pvecm: not a known host: ARG itself), or ``failed``."""
    if rc == 0:
        return "removed"
    m = DELNODE_UNKNOWN.search(stderr + "\n" + stdout)
    return "unknown" if m and m.group(1) == arg else "failed"
