"""Make sure the lab's daemon, LXD or Incus (``lab_backend``), is installed and running on this machine.

With systemd as PID 1 the packaged units are started; without it (containers, CI sandboxes)
lxcfs and the daemon (``lxd``, or Incus's ``incusd``) are started by hand, detached, as measured on the development
machine (docs/fresh-check.md). Both daemons can run side by side on one host (one lxcfs serves both), each with its own
bridge, subnet and pool. nftables must be installed before the daemon starts, or creating a bridge fails
("iptables not found").
"""

from __future__ import annotations

import errno
import grp
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from labwright import aptlock
from labwright.errors import OperationFailed
from labwright.lxd.client import Endpoint, LxdClient, find_local_socket
from labwright.ui import Reporter

LOG_DIR = Path("/var/log/labwright")


@dataclass(frozen=True)
class Backend:
    """One daemon a lab can live on: how it is installed, started, preseeded and named to the user."""

    #: ``lxd`` or ``incus``: the value of ``lab_backend`` and the connector's prefix (``@lxd/``, ``@incus/``).
    name: str
    #: How messages name it: ``LXD``, ``Incus``.
    title: str
    #: The apt package of the daemon (Incus: ``incus-base``, the daemon for containers without QEMU; Debian 13 and
    #: Ubuntu 24.04 main/universe, Debian 12 bookworm-backports).
    package: str
    #: The command line client: ``lxc``, ``incus``.
    client_tool: str
    #: The daemon's executable: ``lxd`` on PATH; Debian's and Ubuntu's Incus keep ``incusd`` in /usr/libexec/incus
    #: (incus.service runs /usr/libexec/incus/startup, which execs it).
    daemon_paths: tuple[str, ...]
    #: ``pgrep -f`` pattern of the daemon itself: each running container's monitor and the ``forkstart`` helpers
    #: carry the daemon's name too, so a plain ``pgrep -x`` finds one while the daemon is dead.
    pgrep: str
    #: systemd units to start (lxcfs first).
    units: tuple[str, ...]
    #: The group that may use the daemon's socket (the packages create it); ``root`` where it is missing.
    group: str
    #: ``waitready`` and ``init --preseed``, after the executable (``lxd``) or client (``incus admin``).
    waitready: tuple[str, ...]
    preseed: tuple[str, ...]

    def daemon_binary(self) -> str | None:
        for candidate in self.daemon_paths:
            found = shutil.which(candidate) if "/" not in candidate else (candidate if os.access(candidate, os.X_OK)
                                                                          else None)
            if found:
                return found
        return None

    def installed(self) -> bool:
        """The daemon and its client are both here."""
        return self.daemon_binary() is not None and _on_path(self.client_tool)

    def socket(self) -> str:
        """The daemon's socket (``LXD_SOCKET``/``INCUS_SOCKET`` first, as its client looks), or raise with the fix."""
        return find_local_socket(self.name, fallback=False)

    def client(self, timeout: float = 120.0) -> LxdClient:
        """A client of this daemon (never the other one, as a bare ``LxdClient()`` may be when both run)."""
        return LxdClient(Endpoint(socket_path=self.socket(), daemon=self.title), timeout=timeout)

    def log(self) -> Path:
        return LOG_DIR / f"{self.name}.log"


LXD = Backend(
    name="lxd", title="LXD", package="lxd", client_tool="lxc", daemon_paths=("lxd",), pgrep="^lxd( |$)",
    units=("lxcfs", "lxd"), group="lxd", waitready=("lxd", "waitready", "--timeout=120"),
    preseed=("lxd", "init", "--preseed"),
)
INCUS = Backend(
    name="incus", title="Incus", package="incus-base", client_tool="incus",
    daemon_paths=("/usr/libexec/incus/incusd", "incusd"), pgrep="^(/usr/libexec/incus/)?incusd( --|$)",
    units=("lxcfs", "incus"), group="incus-admin", waitready=("incus", "admin", "waitready", "--timeout=120"),
    preseed=("incus", "admin", "init", "--preseed"),
)
BACKENDS = {b.name: b for b in (LXD, INCUS)}


def _on_path(binary: str) -> bool:
    return shutil.which(binary) is not None or Path("/usr/sbin", binary).exists()


def pid1_is_systemd() -> bool:
    try:
        return Path("/proc/1/comm").read_text().strip() == "systemd"
    except OSError:
        return False


def missing_packages(backend: Backend = LXD) -> list[str]:
    wanted = {"debootstrap": "debootstrap", "nftables": "nft"}
    missing = [pkg for pkg, binary in wanted.items() if not _on_path(binary)]
    return missing + ([] if backend.installed() else [backend.package])


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
    # nftables first: the daemon must find it when it creates the bridge.
    ordered = sorted(packages, key=lambda p: 0 if p == "nftables" else 1)
    with report.step(f"apt-get install {' '.join(ordered)}"):
        # labwright.aptlock: each apt-get waits for another apt (unattended-upgrades) instead of failing on its lock
        _run(aptlock.argv(["update", "-qq"]), "apt-get update", env)
        _run(aptlock.argv(["install", "-y", "-qq", "--no-install-recommends", *ordered]), "apt-get install", env)
    report.change(f"installed {' '.join(ordered)}")


def daemon_answers(backend: Backend = LXD) -> bool:
    try:
        client = backend.client(timeout=5)
        client.server()
        client.close()
        return True
    except OperationFailed:
        return False


def start_daemon(report: Reporter, backend: Backend = LXD) -> None:
    if pid1_is_systemd():
        with report.step(f"systemctl start {backend.units[-1]}"):
            for unit in backend.units:
                _run(["systemctl", "start", unit], f"systemctl start {unit}")
    else:
        if os.geteuid() != 0:
            raise OperationFailed(f"the {backend.title} daemon is not running; start it as root "
                                  "(`sudo labwright lab up`)")
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        daemon = backend.daemon_binary() or backend.daemon_paths[0]
        with report.step(f"start lxcfs and {Path(daemon).name} (no systemd as PID 1)"):
            if subprocess.run(["pgrep", "-x", "lxcfs"], capture_output=True).returncode != 0:
                _clear_stale_fuse_mount(Path("/var/lib/lxcfs"))
                Path("/var/lib/lxcfs").mkdir(parents=True, exist_ok=True)
                _detach(["lxcfs", "/var/lib/lxcfs"], LOG_DIR / "lxcfs.log")
            # By command line: each running container's `[lxc monitor]` process is named after the daemon as well,
            # so `pgrep -x lxd` finds one while the daemon itself is dead and it would never be started again.
            if subprocess.run(["pgrep", "-f", backend.pgrep], capture_output=True).returncode != 0:
                _detach([daemon, "--group", _group(backend), f"--logfile={backend.log()}"],
                        LOG_DIR / f"{backend.name}.out", env=_daemon_env(daemon))
            _run(list(backend.waitready), f"{' '.join(backend.waitready[:-1])}")
    report.change(f"started the {backend.title} daemon")


def _group(backend: Backend) -> str:
    try:
        grp.getgrnam(backend.group)
    except KeyError:
        return "root"
    return backend.group


def _daemon_env(daemon: str) -> dict[str, str] | None:
    """Incus's packaged start (/etc/default/incus) puts /usr/libexec/incus first on PATH: incusd runs its helpers
    from there."""
    here = str(Path(daemon).parent)
    if here in ("/usr/bin", "/bin", "/usr/sbin", "/sbin", "."):
        return None
    return {**os.environ, "PATH": f"{here}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"}


def _clear_stale_fuse_mount(path: Path) -> None:
    """A killed lxcfs leaves its FUSE mount behind ("Transport endpoint is not connected"): unmount it."""
    try:
        path.stat()
    except OSError as exc:
        if exc.errno != errno.ENOTCONN:
            raise
        _run(["umount", "-l", str(path)], f"umount the stale lxcfs mount {path}")


def _detach(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
    """Start a daemon detached from this process: its own session, stdin /dev/null, output to ``log``, and its
    working directory "/" (as a daemon's is): LXD's children inherit it, and an instance copy's rsync fails with
    "getcwd(): No such file or directory" once the directory `labwright lab up` ran in is removed."""
    with open(log, "ab") as out, open(os.devnull, "rb") as devnull:
        subprocess.Popen(cmd, stdin=devnull, stdout=out, stderr=out, start_new_session=True, close_fds=True, cwd="/",
                         env=env)


def ensure_daemon(report: Reporter, backend: Backend = LXD) -> LxdClient:
    """Install what is missing, start the daemon if it is not answering, and return a client of it."""
    socket_dir = "/var/lib/lxd" if backend is LXD else "/var/lib/incus"
    extra = ("/var/snap/lxd/common/lxd/unix.socket",) if backend is LXD else ("/run/incus/unix.socket",)
    for candidate in (f"{socket_dir}/unix.socket", *extra):
        if os.path.exists(candidate) and not os.access(candidate, os.R_OK | os.W_OK):
            raise OperationFailed(f"permission denied on {candidate}; run as root or join the {backend.group} group "
                                  f"(`sudo usermod -aG {backend.group} $USER`, then log in again)")
    missing = missing_packages(backend)
    if missing:
        install_packages(missing, report)
    if not daemon_answers(backend):
        start_daemon(report, backend)
        deadline = time.monotonic() + 60
        while not daemon_answers(backend):
            if time.monotonic() > deadline:
                raise OperationFailed(f"the {backend.title} daemon did not answer within 60s; see {backend.log()}")
            time.sleep(0.5)
    else:
        report.unchanged(f"{backend.title} daemon running ({backend.socket()})")
    return backend.client()
