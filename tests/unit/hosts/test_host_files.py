"""A Host's file reads (``read_text``, ``exists``, ``listdir``, ``stat``, ``realpath``) answer the same whichever way
they reach the files: this machine's directly (LocalHost), by commands through a wrapper (LocalHost with one, the
``CommandFiles`` every remote Host uses: cat, test, ls, stat, readlink), through ``pct exec`` on a node (PctHost with a
fake ``pct`` that runs the command here), and the tests' double over a tree (support.host_tree.TreeHost, the same
tree seen as its ``/``)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from labwright.hosts import Host
from labwright.hosts.local import LocalHost, local_path
from labwright.hosts.pct import PctHost
from support.host_tree import TreeHost

#: ``pct exec VMID -- ARGV``: runs ARGV here (the "container" is this machine), as tests/unit/hosts/test_pct_host.py
FAKE_PCT = """#!{python}
import os, sys
rest = sys.argv[sys.argv.index("--") + 1:]
os.execvp(rest[0], rest)
"""
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


def make_tree(root: Path) -> None:
    (root / "sys/devices/pci0000:00/0000:03:00.0").mkdir(parents=True)
    (root / "sys/devices/pci0000:00/0000:03:00.0/vendor").write_text("0x1002\n")
    (root / "sys/class/drm").mkdir(parents=True)
    (root / "sys/class/drm/card1").symlink_to("../../devices/pci0000:00/0000:03:00.0")
    (root / "etc/a dir").mkdir(parents=True)
    (root / "etc/a dir/.hidden").write_text("")
    (root / "etc/a dir/b c.yaml").write_text("kind: x\n")
    (root / "etc/a dir/b c.yaml").chmod(0o640)


def hosts(root: Path) -> dict[str, tuple[Host, str]]:
    """Each Host with the prefix that names ``root``'s files on it."""
    bindir = root.parent / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "pct").write_text(FAKE_PCT.format(python=sys.executable))
    (bindir / "pct").chmod(0o755)
    node = LocalHost(wrapper=["env", f"PATH={bindir}:{os.environ['PATH']}"], label="node pve1")
    return {"local": (LocalHost(), str(root)), "wrapped": (LocalHost(wrapper=["env"]), str(root)),
            "pct": (PctHost(node, 101), str(root)), "tree": (TreeHost(root), "")}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    make_tree(root)
    return root


@pytest.mark.parametrize("kind", ["local", "wrapped", "pct", "tree"])
def test_every_host_reads_the_same_files(tree: Path, kind: str) -> None:
    host, at = hosts(tree)[kind]
    assert host.read_text(f"{at}/etc/a dir/b c.yaml") == "kind: x\n"
    with pytest.raises(OSError):
        host.read_text(f"{at}/etc/missing")
    assert host.exists(f"{at}/etc/a dir") and host.exists(f"{at}/sys/class/drm/card1")
    assert not host.exists(f"{at}/etc/missing")
    assert host.listdir(f"{at}/etc/a dir") == [".hidden", "b c.yaml"]
    for missing in (f"{at}/etc/missing", f"{at}/etc/a dir/b c.yaml"):  # none, or a file
        with pytest.raises(OSError):
            host.listdir(missing)
    info = host.stat(f"{at}/etc/a dir/b c.yaml")
    assert info is not None and info.is_file and info.permissions == 0o640 and not info.is_dir
    link = host.stat(f"{at}/sys/class/drm/card1", follow_symlinks=False)
    assert link is not None and link.is_symlink
    followed = host.stat(f"{at}/sys/class/drm/card1")
    assert followed is not None and followed.is_dir
    assert host.stat(f"{at}/etc/missing") is None
    assert host.realpath(f"{at}/sys/class/drm/card1") == f"{at}/sys/devices/pci0000:00/0000:03:00.0"


@needs_root
@pytest.mark.parametrize("kind", ["local", "wrapped", "pct", "tree"])
def test_a_device_node_comes_with_its_numbers(tree: Path, kind: str) -> None:
    (tree / "dev").mkdir()
    os.mknod(tree / "dev/nvidia-uvm", 0o666 | stat.S_IFCHR, os.makedev(509, 1))
    (tree / "dev/nvidia-uvm").chmod(0o666)
    host, at = hosts(tree)[kind]
    info = host.stat(f"{at}/dev/nvidia-uvm", follow_symlinks=False)
    assert info is not None and info.is_char and (info.major, info.minor, info.permissions) == (509, 1, 0o666)


def test_local_path_is_where_this_machine_finds_the_file(tree: Path) -> None:
    """What the LXD daemon on this machine is given as a device's source: the path itself, below the tree for the
    double; another host's path is its own."""
    assert local_path(LocalHost(), "/dev/nvidia0") == "/dev/nvidia0"
    assert local_path(TreeHost(tree), "/dev/nvidia0") == f"{tree}/dev/nvidia0"
    assert local_path(hosts(tree)["pct"][0], "/dev/nvidia0") == "/dev/nvidia0"


def test_the_tree_double_runs_no_command(tree: Path) -> None:
    host = TreeHost(tree)
    assert host.run(["systemctl", "enable", "x"]).ok and host.ran == [("systemctl", "enable", "x")]
    host.put(b"unit\n", "/etc/a dir/x.service", mode=0o644)
    assert (tree / "etc/a dir/x.service").read_text() == "unit\n" and host.get("/etc/a dir/x.service") == b"unit\n"
