"""Make sure an LXD (or Incus) daemon is installed and running on this machine.

With systemd as PID 1 the packaged units are started; without it (containers, CI sandboxes)
lxcfs and lxd are started by hand, detached, as measured on the development machine (docs/fresh-check.md).
nftables must be installed before LXD starts, or creating a bridge fails ("iptables not found").
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from pathlib import Path

from labwright.errors import OperationFailed
from labwright.lxd.client import LxdClient, find_local_socket
from labwright.ui import Reporter

APT_PACKAGES = ("lxd", "debootstrap", "nftables")
LOG_DIR = Path("/var/log/labwright")


def pid1_is_systemd() -> bool:
    try:
        return Path("/proc/1/comm").read_text().strip() == "systemd"
    except OSError:
        return False


def missing_packages() -> list[str]:
    wanted = {"lxd": "lxd", "debootstrap": "debootstrap", "nftables": "nft"}
    return [pkg for pkg, binary in wanted.items() if shutil.which(binary) is None and
            not Path("/usr/sbin", binary).exists()]


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise OperationFailed(f"{what} failed: {last[0]}")
    return proc.stdout


def install_packages(packages: list[str], report: Reporter) -> None:
    if os.geteuid() != 0:
        raise OperationFailed(f"{', '.join(packages)} not installed; run `sudo labwright lab up` or "
                              f"`sudo apt-get install {' '.join(packages)}`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # nftables first: LXD must find it when it creates the bridge.
    ordered = sorted(packages, key=lambda p: 0 if p == "nftables" else 1)
    with report.step(f"apt-get install {' '.join(ordered)}"):
        _run(["apt-get", "update", "-qq"], "apt-get update", env)
        _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *ordered], "apt-get install", env)
    report.change(f"installed {' '.join(ordered)}")


def daemon_answers() -> bool:
    try:
        client = LxdClient(timeout=5)
        client.server()
        client.close()
        return True
    except OperationFailed:
        return False


def start_daemon(report: Reporter) -> None:
    if pid1_is_systemd():
        with report.step("systemctl start lxd"):
            _run(["systemctl", "start", "lxcfs"], "systemctl start lxcfs")
            _run(["systemctl", "start", "lxd"], "systemctl start lxd")
    else:
        if os.geteuid() != 0:
            raise OperationFailed("the LXD daemon is not running; start it as root (`sudo labwright lab up`)")
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        with report.step("start lxcfs and lxd (no systemd as PID 1)"):
            if subprocess.run(["pgrep", "-x", "lxcfs"], capture_output=True).returncode != 0:
                _clear_stale_fuse_mount(Path("/var/lib/lxcfs"))
                Path("/var/lib/lxcfs").mkdir(parents=True, exist_ok=True)
                _detach(["lxcfs", "/var/lib/lxcfs"], LOG_DIR / "lxcfs.log")
            # By command line: each running container's `[lxc monitor]` process is named lxd as well, so
            # `pgrep -x lxd` finds one while the daemon itself is dead and it would never be started again.
            if subprocess.run(["pgrep", "-f", "^lxd( |$)"], capture_output=True).returncode != 0:
                _detach(["lxd", "--group", "root", f"--logfile={LOG_DIR / 'lxd.log'}"], LOG_DIR / "lxd.out")
            _run(["lxd", "waitready", "--timeout=120"], "lxd waitready")
    report.change("started the LXD daemon")


def _clear_stale_fuse_mount(path: Path) -> None:
    """A killed lxcfs leaves its FUSE mount behind ("Transport endpoint is not connected"): unmount it."""
    try:
        path.stat()
    except OSError as exc:
        if exc.errno != errno.ENOTCONN:
            raise
        _run(["umount", "-l", str(path)], f"umount the stale lxcfs mount {path}")


def _detach(cmd: list[str], log: Path) -> None:
    """Start a daemon detached from this process: its own session, stdin /dev/null, output to ``log``, and its
    working directory "/" (as a daemon's is): LXD's children inherit it, and an instance copy's rsync fails with
    "getcwd(): No such file or directory" once the directory `labwright lab up` ran in is removed."""
    with open(log, "ab") as out, open(os.devnull, "rb") as devnull:
        subprocess.Popen(cmd, stdin=devnull, stdout=out, stderr=out, start_new_session=True, close_fds=True, cwd="/")


def ensure_daemon(report: Reporter) -> LxdClient:
    """Install what is missing, start the daemon if it is not answering, and return a client."""
    for candidate in ("/var/lib/lxd/unix.socket", "/var/snap/lxd/common/lxd/unix.socket"):
        if os.path.exists(candidate) and not os.access(candidate, os.R_OK | os.W_OK):
            raise OperationFailed(f"permission denied on {candidate}; run as root or join the lxd group "
                                  "(`sudo usermod -aG lxd $USER`, then log in again)")
    missing = missing_packages()
    if missing:
        install_packages(missing, report)
    if not daemon_answers():
        start_daemon(report)
        deadline = time.monotonic() + 60
        while not daemon_answers():
            if time.monotonic() > deadline:
                raise OperationFailed("the LXD daemon did not answer within 60s; see /var/log/labwright/lxd.log")
            time.sleep(0.5)
    else:
        report.unchanged(f"LXD daemon running ({find_local_socket()})")
    return LxdClient()
