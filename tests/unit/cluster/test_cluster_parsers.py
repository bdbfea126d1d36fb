"""Parsers for corosync.conf, corosync-quorumtool / pvecm status, cmapctl, logs and guest configs, on text in
the formats the real tools print (the seed's pvecm/journal output; Debian corosync 3.1.7's)."""

import pytest

from labwright.cluster.conf import ConfError, parse_conf, render_conf
from labwright.cluster.ghosts import parse_guest_config
from labwright.cluster.parse import cmap_members, log_signs, parse_cmap, parse_quorum_status

PVE_CONF = """\
logging {
  debug: off
  to_syslog: yes
}

nodelist {
  node {
    name: pve1
    nodeid: 1
    quorum_votes: 3
    ring0_addr: 10.140.3.10
  }
  node {
    name: pve7
    nodeid: 3
    quorum_votes: 1
    ring0_addr: 10.140.3.70
  }
}

quorum {
  provider: corosync_votequorum
}

totem {
  cluster_name: pve
  config_version: 19
  interface {
    linknumber: 0
  }
  ip_version: ipv4-6
  link_mode: passive
  secauth: on
  version: 2
}
"""

# The seed's `pvecm status` after the rejoin (Proxmox prints nodeids in hex and addresses as names).
PVECM_STATUS = """\
Cluster information
-------------------
Name:             pve
Config Version:   20
Transport:        knet
Secure auth:      on

Quorum information
------------------
Date:             Thu May  7 17:45:01 2026
Quorum provider:  corosync_votequorum
Nodes:            5
Node ID:          0x00000003
Ring ID:          1.1a40
Quorate:          Yes

Votequorum information
----------------------
Expected votes:   7
Highest expected: 7
Total votes:      7
Quorum:           4
Flags:            Quorate

Membership information
----------------------
    Nodeid      Votes Name
0x00000001          3 10.140.3.10
0x00000002          1 10.140.3.80
0x00000003          1 10.140.3.70 (local)
0x00000004          1 10.140.3.82
0x00000006          1 10.140.3.20
"""

QUORUMTOOL_ALONE = """\
Quorum information
------------------
Date:             Sun Nov 22 07:18:17 2026
Quorum provider:  corosync_votequorum
Nodes:            1
Node ID:          3
Ring ID:          3.10
Quorate:          No

Votequorum information
----------------------
Expected votes:   3
Highest expected: 3
Total votes:      1
Quorum:           2 Activity blocked
Flags:

Membership information
----------------------
    Nodeid      Votes Name
         3          1 node3 (local)
"""


def test_conf_reads_proxmox_layout():
    conf = parse_conf(PVE_CONF, "/etc/pve/corosync.conf")
    assert conf.config_version == 19
    assert conf.cluster_name == "pve"
    assert [(n.name, n.nodeid, n.ring0_addr, n.votes) for n in conf.nodes] == [
        ("pve1", 1, "10.140.3.10", 3), ("pve7", 3, "10.140.3.70", 1)]
    assert conf.node_by_addr("10.140.3.70").name == "pve7"
    assert conf.quorum == {"provider": "corosync_votequorum"}


@pytest.mark.parametrize(("text", "needle"), [
    (PVE_CONF.replace("  node {\n    name: pve7", "  node { name: pve7"), "line 13: a brace must end its line"),
    (PVE_CONF.replace("    linknumber: 0\n  }\n", "    linknumber: 0\n"), "block 'totem' opened on line"),
    (PVE_CONF + "}\n", "closes no block"),
    (PVE_CONF.replace("config_version: 19", "config_version 19"), "expected `key: value`"),
    (PVE_CONF.replace("config_version: 19", "config_version: nineteen"), "totem.config_version is 'nineteen'"),
    ("nodelist {\n}\n", "no totem"),
])
def test_conf_that_does_not_parse_is_one_line(text, needle):
    with pytest.raises(ConfError) as exc:
        parse_conf(text, "/etc/corosync/corosync.conf")
    msg = str(exc.value)
    assert needle in msg and "\n" not in msg and msg.startswith("/etc/corosync/corosync.conf: ")
    assert exc.value.exit_code == 2


def test_render_conf_changes_only_config_version():
    out = render_conf(PVE_CONF, 21)
    assert parse_conf(out).config_version == 21
    assert out.replace("config_version: 21", "config_version: 19") == PVE_CONF


def test_pvecm_status_seed_format():
    st = parse_quorum_status(PVECM_STATUS)
    assert st.quorate and st.nodes == 5 and st.node_id == 3
    assert (st.expected_votes, st.total_votes, st.quorum) == (7, 7, 4)
    assert (st.cluster_name, st.config_version, st.transport, st.secure_auth) == ("pve", 20, "knet", "on")
    assert [(m.nodeid, m.votes, m.name) for m in st.members][:2] == [(1, 3, "10.140.3.10"), (2, 1, "10.140.3.80")]
    assert [m.name for m in st.members if m.local] == ["10.140.3.70"]
    assert [m.nodeid for m in st.members] == [1, 2, 3, 4, 6]


def test_quorumtool_alone_is_not_quorate():
    st = parse_quorum_status(QUORUMTOOL_ALONE)
    assert not st.quorate and st.nodes == 1 and st.quorum == 2
    assert [(m.nodeid, m.name, m.local) for m in st.members] == [(3, "node3", True)]
    assert parse_quorum_status("Cannot initialize QUORUM service\n") is None


def test_cmap_members():
    cmap = parse_cmap("""\
runtime.members.1.config_version (u64) = 4
runtime.members.1.ip (str) = r(0) ip(10.98.7.1)
runtime.members.1.join_count (u32) = 1
runtime.members.1.status (str) = joined
runtime.members.3.config_version (u64) = 3
runtime.members.3.ip (str) = r(0) ip(10.98.7.3)
runtime.members.3.join_count (u32) = 4
runtime.members.3.status (str) = left
totem.config_version (u64) = 4
""")
    assert cmap["totem.config_version"] == "4"
    m = cmap_members(cmap)
    assert (m[3].config_version, m[3].status, m[3].join_count, m[3].ip) == (3, "left", 4, "10.98.7.3")
    assert m[1].status == "joined"


def test_log_signs_seed_journal():
    log = """\
May 07 17:30:55 pve7 corosync[1146]:   [MAIN  ] Corosync Cluster Engine 3.1.7 starting up
May 07 17:39:36 pve7 corosync[1146]:   [KNET  ] rx: Packet rejected from 10.140.3.80:5405
May 07 17:39:37 pve7 corosync[1146]:   [KNET  ] rx: Packet rejected from 10.140.3.80:5405
May 07 17:39:43 pve7 corosync[1146]:   [QUORUM] Sync members[1]: 3
May 07 17:39:43 pve7 corosync[1146]:   [TOTEM ] A new membership (3.1a3c) was formed. Members
May 07 17:39:43 pve7 corosync[1146]:   [QUORUM] Members[1]: 3
"""
    s = log_signs(log)
    assert s.single_member and s.last_members == [3]
    assert s.packet_rejected_from == ["10.140.3.80"]
    assert s.config_version_exit is None and s.any()


def test_log_signs_debian_and_only_the_current_run():
    log = """\
Nov 22 07:18:17 [10] vm corosync notice  [MAIN  ] Corosync Cluster Engine 3.1.7 starting up
Nov 22 07:18:18 [10] vm corosync error   [CMAP  ] Received config version (6) is different than my config version (4)! \
Exiting
Nov 22 07:20:00 [11] vm corosync notice  [MAIN  ] Corosync Cluster Engine 3.1.7 starting up
Nov 22 07:20:01 [11] vm corosync error   [CRYPTO] nsscrypto: Digest does not match. Check crypto key and configuration.
Nov 22 07:20:01 [11] vm corosync error   [KNET  ] rx: Unable to decrypt packet from 10.98.7.1:5405
Nov 22 07:20:02 [11] vm corosync notice  [QUORUM] Members[1]: 3
"""
    s = log_signs(log)
    assert s.config_version_exit is None  # belonged to the previous run
    assert s.decrypt_failed_from == ["10.98.7.1"] and s.single_member
    first = log_signs(log.split("Nov 22 07:20:00")[0])
    assert first.config_version_exit == (6, 4)
    joined = log_signs(log + "Nov 22 07:20:05 [11] vm corosync notice  [QUORUM] Members[3]: 1 2 3\n")
    assert not joined.single_member and joined.last_members == [1, 2, 3]


def test_guest_config_disks():
    vm = parse_guest_config("qemu-server", "102", "/etc/pve/nodes/pve9/qemu-server/102.conf", """\
boot: order=scsi0;ide2
ide2: local:iso/debian-12.iso,media=cdrom,size=628M
name: gpu-box
scsi0: local-lvm:vm-102-disk-0,iothread=1,size=32G
scsi1: nas:102/vm-102-disk-1.qcow2,size=100G
efidisk0: local-lvm:vm-102-disk-2,efitype=4m,size=4M
net0: virtio=BC:24:11:00:00:01,bridge=vmbr0

[before-upgrade]
scsi2: local-lvm:vm-102-disk-9,size=1G
""")
    assert vm.name == "gpu-box"
    assert [(d.volume, d.local) for d in vm.disks] == [
        ("local-lvm:vm-102-disk-0", True), ("nas:102/vm-102-disk-1.qcow2", False), ("local-lvm:vm-102-disk-2", True)]
    ct = parse_guest_config("lxc", "103", "p", "hostname: web\nrootfs: local-lvm:vm-103-disk-0,size=8G\n"
                            "mp0: /srv/data,mp=/data\nmp1: local-zfs:subvol-103-disk-1,mp=/x\n")
    assert ct.name == "web"
    assert [d.volume for d in ct.disks] == ["local-lvm:vm-103-disk-0", "local-zfs:subvol-103-disk-1"]
