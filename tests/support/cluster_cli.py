"""Helpers shared by the netns cluster tests (test_cluster_corosync.py, test_cluster_qdevice.py): the CLI run in
this process, the doctor's JSON, waiting on observable conditions, a node made stale by missed config versions."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from labwright.cli import main
from labwright.testing.pyinfra_output import tool_env
from support.corosync_netns import NetnsCluster, start_cluster


def cli(cluster: NetnsCluster, *args: str, inventory: bool = True, subprocess_: bool = False
        ) -> subprocess.CompletedProcess[str]:
    """`labwright cluster ARGS`, in this process (the CLI's own main(): exit codes and one-line errors as the
    console script has them; importing the whole CLI costs seconds per subprocess) or as a subprocess."""
    argv = ["cluster", *args]
    if inventory:
        argv += ["--inventory", str(cluster.inventory)]  # type: ignore[attr-defined]
    if subprocess_:
        return subprocess.run(["labwright", *argv], capture_output=True, text=True, env=tool_env(), timeout=300)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())


def doctor_json(cluster: NetnsCluster) -> tuple[int, dict]:
    p = cli(cluster, "doctor", "--json")
    assert p.stdout, p.stderr
    return p.returncode, json.loads(p.stdout)


def node(diag: dict, name: str) -> dict:
    return next(n for n in diag["nodes"] if n["name"] == name)


def conf_path(cluster: NetnsCluster, name: str) -> Path:
    return cluster.node_dir(name) / "etc/corosync/corosync.conf"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def error_line(p: subprocess.CompletedProcess[str]) -> str:
    """The one error line (progress lines may come before it); it must be the last thing printed."""
    errors = [line for line in p.stderr.splitlines() if line.startswith("labwright: error:")]
    assert len(errors) == 1 and p.stderr.rstrip().endswith(errors[0]), p.stderr
    return errors[0]


def wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def cluster_version(cluster: NetnsCluster) -> int:
    text = (cluster.pve_dir / "corosync.conf").read_text()
    return int(text.split("config_version:")[1].split()[0])


def make_stale_by_version(cluster: NetnsCluster) -> tuple[int, int]:
    """node3 misses two config changes while it is off, then boots with its old corosync.conf."""
    old = cluster_version(cluster)
    cluster.stop("node3")
    cluster.set_version(["node1", "node2"], old + 2)
    cluster.start("node3")
    # Debian's corosync 3.1.7 joins, sees the newer version in cmap and exits ("... Exiting").
    wait_for(lambda: "Exiting" in (cluster.node_dir("node3") / "var/log/corosync/corosync.log").read_text()
             and cluster.pid("node3") is None, 30, "node3 to exit on the config version mismatch")
    return old, old + 2


def running_cluster(directory: Path, version: int, qdevice: bool = False) -> Iterator[NetnsCluster]:
    """The body of a module fixture: a started netns cluster (with a real QDevice when asked) and an inventory file
    for it in ``directory``; closed after the module."""
    cluster = start_cluster(version=version)
    try:
        if qdevice:
            cluster.add_qdevice()
        inventory = directory / "cluster_inventory.py"
        inventory.write_text(cluster.inventory_text())
        cluster.inventory = inventory  # type: ignore[attr-defined]
        yield cluster
    finally:
        cluster.close()
