"""`labwright cluster ghosts` against a real /etc/pve-shaped tree in a lab container (Debian bookworm, systemd)
that runs a real single-node corosync 3 (Debian's package), reached over real SSH: membership and the
nodelist come from corosync itself. Proxmox's pmxcfs and pvecm cannot run here: /etc/pve is a plain directory tree and
tests/support/doubles/pvecm stands in for pvecm (its delnode answers "not a known host" for a node outside the
nodelist, as real pvecm does); the tests that run it say so in their names.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright.cli import main
from labwright.lab import image as lab_image
from labwright.lab.lab import instance_address
from support import guest_apt
from support.corosync_netns import DOUBLES
from support.lxc_cli import guest_output

pytestmark = pytest.mark.lab

CONF = """\
totem {
  version: 2
  cluster_name: pvetest
  config_version: 7
  transport: knet
  crypto_cipher: aes256
  crypto_hash: sha256
}

nodelist {
  node {
    name: pve1
    nodeid: 1
    quorum_votes: 1
    ring0_addr: 127.0.0.1
  }
}

quorum {
  provider: corosync_votequorum
}
"""

VM_102 = """\
boot: order=scsi0
name: gpu-box
scsi0: local-lvm:vm-102-disk-0,iothread=1,size=32G
scsi1: nas:102/vm-102-disk-1.qcow2,size=100G
ide2: local:iso/debian-12.iso,media=cdrom
"""
CT_103 = "hostname: web\nrootfs: local-lvm:vm-103-disk-0,size=8G\n"

SETUP = f"""
set -e
export DEBIAN_FRONTEND=noninteractive
if ls /tmp/debs/*.deb >/dev/null 2>&1; then
  {guest_apt.command("install -y --no-install-recommends /tmp/debs/*.deb")} >/tmp/apt.log 2>&1
else
  {guest_apt.command("install -y --no-install-recommends corosync")} >/tmp/apt.log 2>&1 || \
    {{ {guest_apt.command("update")} >/tmp/apt.log 2>&1 && \
      {guest_apt.command("install -y --no-install-recommends corosync")} >>/tmp/apt.log 2>&1; }}
fi
corosync-keygen >/dev/null 2>&1
cat > /etc/corosync/corosync.conf <<'EOF'
{CONF}EOF
systemctl restart corosync
i=0; until corosync-quorumtool -s >/dev/null 2>&1; do i=$((i+1)); [ $i -lt 100 ] || exit 9; sleep 0.2; done
"""

TREE = f"""
set -e
rm -rf /etc/pve && mkdir -p /etc/pve
cp /etc/corosync/corosync.conf /etc/pve/corosync.conf
for n in pve1 pve8 pve9; do mkdir -p /etc/pve/nodes/$n/qemu-server /etc/pve/nodes/$n/lxc; done
cat > /etc/pve/nodes/pve9/qemu-server/102.conf <<'EOF'
{VM_102}EOF
cat > /etc/pve/nodes/pve9/lxc/103.conf <<'EOF'
{CT_103}EOF
echo 'name: lives-here' > /etc/pve/nodes/pve1/qemu-server/100.conf
"""


def deb_cache() -> Path:
    base = Path(os.environ.get("LABWRIGHT_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or
                                                         Path.home() / ".cache") / "labwright")
    key = hashlib.sha256(f"corosync {lab_image.load_recipe().alias}".encode()).hexdigest()[:12]
    path = base / "debs" / f"corosync-{key}"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def lxc(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(["lxc", *args], capture_output=True, text=True, timeout=600)
    if check and p.returncode:
        raise AssertionError(f"lxc {' '.join(args[:3])}: {p.returncode}: {p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p


@pytest.fixture(scope="module")
def node(lab, tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """A lab container that is a one-node corosync cluster 'pve1' with the pvecm stand-in installed."""
    name = lab.fresh("lwclu")
    try:
        lxc("file", "push", str(DOUBLES / "pvecm"), f"{name}/usr/local/sbin/pvecm", "--mode", "0755")
        # corosync's .debs are cached per template image (~/.cache/labwright/debs/...): later runs skip apt's
        # index download and fetch; the packages still install through apt in the container.
        debs = deb_cache()
        if any(debs.glob("*.deb")):
            lxc("exec", name, "--", "mkdir", "-p", "/tmp/debs")
            for deb in debs.glob("*.deb"):
                lxc("file", "push", str(deb), f"{name}/tmp/debs/{deb.name}")
        lxc("exec", name, "--", "sh", "-c", SETUP)
        if not any(debs.glob("*.deb")):
            listed = lxc("exec", name, "--", "sh", "-c", "ls /var/cache/apt/archives/*.deb 2>/dev/null || true")
            tmp = debs.with_name(debs.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            for path in listed.stdout.split():
                lxc("file", "pull", f"{name}{path}", str(tmp / Path(path).name))
            if any(tmp.glob("corosync_*.deb")):
                tmp.rename(debs) if not debs.exists() else shutil.rmtree(tmp)
        # Reached over real SSH (the production path): the lab key, the container's host key pinned.
        address = instance_address(lab.client, name)
        host_key = guest_output(name, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").split()
        d = tmp_path_factory.mktemp("ghosts")
        (d / "known_hosts").write_text(f"{address} {host_key[0]} {host_key[1]}\n")
        inv = d / "cluster_inventory.py"
        inv.write_text(f'cluster = [("pve1", {{"ssh_hostname": "{address}", "ssh_key": "{lab.private_key_path}", '
                       f'"ssh_known_hosts_file": "{d / "known_hosts"}"}})]\n')
        (d / "lxd_inventory.py").write_text(f'cluster = [("pve1", {{"cluster_lxd": "{name}"}})]\n')
        yield name, inv
    finally:
        lab.remove(name)


@pytest.fixture
def tree(node) -> tuple[str, Path]:
    lxc("exec", node[0], "--", "sh", "-c", TREE)
    return node


def cli(inv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = ["cluster", "ghosts", "-i", str(inv), *args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())


def node_dirs(name: str) -> list[str]:
    return guest_output(name, "ls", "/etc/pve/nodes").split()


def error_line(p: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in p.stderr.splitlines() if line.startswith("labwright: error:")]
    assert len(errors) == 1 and p.stderr.rstrip().endswith(errors[0]), p.stderr
    return errors[0]


def test_ghosts_listed_with_their_guest_configs_and_disks(tree):
    name, inv = tree
    p = cli(inv, "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["checked_on"] == "pve1" and rep["node_dirs"] == ["pve1", "pve8", "pve9"]
    assert rep["dry"] is True and "dry_run" not in rep
    ghosts = {g["name"]: g for g in rep["ghosts"]}
    assert sorted(ghosts) == ["pve8", "pve9"]  # pve1 is the member in the nodelist
    assert ghosts["pve8"]["guests"] == [] and ghosts["pve8"]["lost_disks"] == []
    guests = {(g["kind"], g["vmid"]): g for g in ghosts["pve9"]["guests"]}
    assert sorted(guests) == [("lxc", "103"), ("qemu-server", "102")]
    assert [d["volume"] for d in guests[("qemu-server", "102")]["disks"]] == [
        "local-lvm:vm-102-disk-0", "nas:102/vm-102-disk-1.qcow2"]
    assert sorted(ghosts["pve9"]["lost_disks"]) == ["local-lvm:vm-102-disk-0", "local-lvm:vm-103-disk-0"]
    text = cli(inv)
    assert "pve9" in text.stdout and "unrecoverable" in text.stdout and "gpu-box" in text.stdout
    # The same through `lxc exec` (a node that is an LXD container): one runner abstraction, same answer.
    p = cli(inv.parent / "lxd_inventory.py", "--json")
    assert p.returncode == 0 and json.loads(p.stdout) == rep


def test_unreachable_node_over_ssh_host_key_not_trusted(tree, tmp_path):
    """A host key that is not in known_hosts: the node is unreachable (one line), nothing runs on it."""
    name, inv = tree
    (tmp_path / "known_hosts").write_text("")
    bad = tmp_path / "inv.py"
    bad.write_text(inv.read_text().replace(str(inv.parent / "known_hosts"), str(tmp_path / "known_hosts")))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["cluster", "doctor", "-i", str(bad), "--json"])
    n = json.loads(out.getvalue())["nodes"][0]
    assert rc == 1 and n["verdict"] == "unreachable" and "host key of node pve1" in n["reasons"][0]
    assert f"is not in {tmp_path / 'known_hosts'}" in n["reasons"][0] and "\n" not in n["reasons"][0]
    p = cli(bad, "--remove", "pve9", "--yes")
    assert p.returncode == 1 and "no node answered" in error_line(p)
    assert node_dirs(name) == ["pve1", "pve8", "pve9"]


def test_remove_refuses_without_yes_and_for_members_and_unknown_names(tree):
    name, inv = tree
    p = cli(inv, "--remove", "pve9")
    assert p.returncode == 0 and "dry run" in p.stdout and "unrecoverable" in p.stdout
    assert node_dirs(name) == ["pve1", "pve8", "pve9"]
    p = cli(inv, "--remove", "pve1", "--yes")
    assert p.returncode == 1 and "not a ghost" in error_line(p)
    p = cli(inv, "--remove", "pve5", "--yes")
    assert p.returncode == 2 and "/etc/pve/nodes/pve5" in error_line(p)
    p = cli(inv, "--remove", "../etc", "--yes")
    assert p.returncode == 2 and "not a node name" in error_line(p)
    assert node_dirs(name) == ["pve1", "pve8", "pve9"]
    assert "lives-here" in guest_output(name, "cat", "/etc/pve/nodes/pve1/qemu-server/100.conf")


def test_remove_ghost_with_guests_falls_back_after_pvecm_standin_says_unknown(tree):
    name, inv = tree
    p = cli(inv, "--remove", "pve9", "--yes", "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["removed"] == "pve9" and "is not a known host of the cluster" in rep["message"]
    assert node_dirs(name) == ["pve1", "pve8"]
    # The nodelist was not touched (delnode refused); a second run finds only pve8.
    assert guest_output(name, "cat", "/etc/pve/corosync.conf") == CONF
    p = cli(inv, "--json")
    assert [g["name"] for g in json.loads(p.stdout)["ghosts"]] == ["pve8"]


def test_remove_ghost_without_guests_with_pvecm_standin(tree):
    name, inv = tree
    p = cli(inv, "--remove", "pve8", "--yes")
    assert p.returncode == 0, p.stderr
    assert node_dirs(name) == ["pve1", "pve9"]
    p = cli(inv, "--remove", "pve8", "--yes")  # already gone: nothing to remove, nothing changed
    assert p.returncode == 2 and "pve8" in error_line(p)
    assert node_dirs(name) == ["pve1", "pve9"]
