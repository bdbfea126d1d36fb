"""Faults in the middle of a deploy, on the real lab, with the real llama-server deploy (tiny model) in one container.

Each test injects one fault while ``deploys/llamacpp.py`` runs (or, for the start limit, between two runs), then
checks what the user sees (one line naming what failed and the fix, no traceback), that nothing half-done is left
running or enabled as if good, and that a plain re-run completes and serves; it prints the time from the re-run's
start until the server answers again (the recovery time reported in docs/reliability.md).

Order matters (one container, module scope): the registry test makes the container's first deploy (its packages
are missing), the others start from a deployed server.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright import guestlock
from labwright.lab import daemon
from labwright.lab.daemon import ensure_daemon
from labwright.lab.lab import instance_address
from labwright.llamacpp.build import build_llama_server
from labwright.llamacpp.tiny_model import write_tiny_gguf
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import DeployRun, run_pyinfra, tool_env
from labwright.testing.waiting import wait_for
from labwright.ui import Reporter
from support import guest_apt

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
MODEL = "/srv/models/tiny.gguf"
PORT = 8001
UNIT = "llama-server.service"
APT_PROXY = "/etc/apt/apt.conf.d/99labwright-test-unreachable"
RECOVERY: dict[str, float] = {}


class Guest:
    def __init__(self, lab: Lab, name: str):
        self.lab, self.name = lab, name

    def sh(self, script: str, check: bool = True) -> str:
        result = self.lab.client.exec(self.name, ["sh", "-c", script])
        if check:
            assert result.exit_code == 0, f"{script!r} failed: {result.stderr.decode()}"
        return result.stdout.decode()

    def running(self) -> bool:
        inst = self.lab.client.instance_or_none(self.name)
        return inst is not None and inst["status"] == "Running"

    def address(self) -> str:
        return instance_address(self.lab.client, self.name) or ""

    def health(self) -> int:
        try:
            with urllib.request.urlopen(f"http://{self.address()}:{PORT}/health", timeout=3) as response:
                return int(response.status)
        except Exception:
            return 0

    def lock(self) -> str:
        return self.sh(f"cat {guestlock.LOCK_PATH} 2>/dev/null || true", check=False)

    def deploy_args(self, *data: str) -> list[str]:
        cmd = [str(Path(sys.executable).parent / "pyinfra"), "-y", f"@lxd/{self.name}", "deploys/llamacpp.py",
               "--data", f"llamacpp_model={MODEL}"]
        for item in data:
            cmd += ["--data", item]
        return cmd

    def deploy(self, *data: str) -> DeployRun:
        return run_pyinfra(f"@lxd/{self.name}", "deploys/llamacpp.py", f"llamacpp_model={MODEL}", *data, cwd=REPO,
                           timeout=900)

    def start_deploy(self, *data: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.deploy_args(*data), cwd=REPO, env=tool_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    def recover(self, fault: str, *data: str) -> DeployRun:
        """The plain re-run after a fault: it must complete and serve; records the time until serving."""
        started = time.monotonic()
        run = self.deploy(*data)
        assert run.rc == 0, run.output[-4000:]
        wait_for(f"llama-server on {self.name} to answer /health after the re-run", lambda: self.health() == 200,
                 timeout=120)
        RECOVERY[fault] = time.monotonic() - started
        print(f"\n{fault}: serving again {RECOVERY[fault]:.1f}s after the re-run started")
        return run


def one_line(output: str, needle: str) -> str:
    hits = [line for line in output.splitlines() if needle in line]
    assert hits, f"no line with {needle!r}:\n{output[-3000:]}"
    return hits[0]


@pytest.fixture(scope="module")
def guest(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guest]:
    build_llama_server()
    model = write_tiny_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf")
    name = lab.fresh("lwfault")
    try:
        g = Guest(lab, name)
        g.sh("mkdir -p /srv/models")
        with model.open("rb") as handle:
            lab.client.push_file(name, MODEL, handle, mode=0o644)
        yield g
    finally:
        if lab.client.instance_or_none(name) is not None:
            lab.remove(name)
        if RECOVERY:
            print("\nrecovery times (re-run start -> serving): "
                  + ", ".join(f"{k} {v:.1f}s" for k, v in RECOVERY.items()))


def test_registry_unreachable_mid_install_then_rerun_serves(guest: Guest) -> None:
    if "install ok installed" in guest.sh("dpkg-query -W -f '${Status}' libgomp1 2>/dev/null || true", check=False):
        pytest.skip("libgomp1 is already in the lab image: the deploy installs nothing")
    if not guest_apt.mirror_reachable(guest.lab.client, guest.name):
        pytest.skip("the container cannot reach a Debian mirror at all")
    # the package registry goes away (an HTTP proxy on a closed loopback port) after the lists were fetched
    guest.sh(f"echo 'Acquire::http::Proxy \"http://127.0.0.1:9\";' > {APT_PROXY}; rm -rf /var/lib/apt/lists/*")
    run = guest.deploy()
    assert run.rc != 0
    line = one_line(run.output, "labwright: cannot install")
    assert "libgomp1" in line and "package registry" in line and "re-run" in line, line
    assert "Traceback" not in run.output
    # nothing half-made is left running or enabled as if it were good
    assert guest.sh(f"test -e /etc/systemd/system/{UNIT} && echo unit || true").strip() == "", "unit written"
    assert guest.sh(f"systemctl is-enabled {UNIT} 2>/dev/null || true", check=False).strip() != "enabled"
    assert guest.sh(f"systemctl is-active {UNIT} || true", check=False).strip() != "active"
    assert guest.lock() == "", "the failed run kept the guest's run lock"
    guest.sh(f"rm -f {APT_PROXY}")
    guest.recover("registry unreachable mid-install")


HOLDER = """import fcntl
# as unattended-upgrades does at a fresh guest's first boot: dpkg's frontend lock held (apt takes it with fcntl
# F_SETLK: apt-pkg/contrib/fileutl.cc GetLock), released when the test writes to the FIFO this read blocks on
lock = open("/var/lib/dpkg/lock-frontend", "w")
fcntl.lockf(lock, fcntl.LOCK_EX)
open("/tmp/lw-lock-held", "w").close()
open("/tmp/lw-lock-release").read()
"""


def test_apt_lock_held_by_another_apt_is_waited_for_then_the_install_runs(guest: Guest) -> None:
    """CI saw a fresh guest's unattended-upgrades hold dpkg's lock and the deploy fail as if the mirror were down.
    The deploy's package step (deploys.common.install_missing) now waits for the holder to exit, then installs."""
    if guest.health() != 200:
        guest.recover("(setup)")
    guest.sh("rm -f /tmp/lw-lock-held /tmp/lw-lock-release; mkfifo /tmp/lw-lock-release; "
             # the deploy's one runtime package, so that it has something to install
             + guest_apt.command("remove -y -q libgomp1") + " >/dev/null")
    guest.sh("cat > /tmp/lw-holder.py <<'EOF'\n" + HOLDER + "EOF\n"
             "nohup python3 /tmp/lw-holder.py >/dev/null 2>&1 &")
    wait_for("the lock holder to take dpkg's lock", lambda: guest.sh("test -e /tmp/lw-lock-held && echo y || true",
                                                                    check=False).strip(), timeout=60)
    proc = guest.start_deploy()
    try:
        wait_for("the deploy's apt-get to wait on the holder (tail --pid)",
                 lambda: "tail --pid=" in guest.sh("ps -eo args", check=False) or proc.poll() is not None,
                 timeout=300)
        assert proc.poll() is None, (proc.communicate()[0] or "")[-3000:]   # waiting, not failed
    finally:
        # the holder reads the FIFO and exits (bounded: a holder already gone has no reader to open it)
        guest.sh("timeout 30 sh -c 'echo go > /tmp/lw-lock-release'", check=False)
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output[-4000:]
    assert "Could not get lock" not in output, output[-3000:]
    assert "install ok installed" in guest.sh("dpkg-query -W -f '${Status}' libgomp1")
    wait_for(f"llama-server on {guest.name} to answer", lambda: guest.health() == 200, timeout=120)


def test_unit_at_its_start_limit_is_restarted_by_the_next_deploy(guest: Guest) -> None:
    if guest.health() != 200:
        guest.recover("(setup)")
    # fast restarts until systemd refuses: "start of the service was attempted too often"
    limit = guest.sh(f"systemctl show -p StartLimitBurst --value {UNIT}").strip()
    assert limit == "30", limit  # the unit's own limit, from the template
    guest.sh(f"for i in $(seq 60); do systemctl restart {UNIT} 2>/dev/null || break; done; "
             f"test \"$(systemctl show -p Result --value {UNIT})\" = start-limit-hit")
    refused = guest.lab.client.exec(guest.name, ["systemctl", "start", UNIT])
    assert refused.exit_code != 0  # plain systemctl is refused now
    run = guest.recover("unit at its start limit")
    assert "reset-failed" not in run.output or "labwright" in run.output
    assert guest.sh(f"systemctl is-active {UNIT}").strip() == "active"


def test_guest_stopped_mid_deploy_then_rerun_serves(guest: Guest) -> None:
    if guest.health() != 200:
        guest.recover("(setup)")
    proc = guest.start_deploy("llamacpp_ctx_size=4096")   # a real change: new unit, restart, health
    wait_for("the deploy to take the guest's run lock", lambda: guest.lock() or proc.poll() is not None,
             timeout=120, every=0.02)
    guest.lab.client.set_state(guest.name, "stop", force=True)
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode != 0, output[-3000:]
    assert "Traceback" not in output, output[-4000:]
    line = one_line(output, "stopped during the run")
    assert f"@lxd/{guest.name} is Stopped now" in line and f"lxc start {guest.name}" in line, line
    guest.lab.client.set_state(guest.name, "start")
    wait_for(f"{guest.name} to get its address again", guest.address, timeout=120)
    assert guest.lock() == "", "a lock in /run survived the guest's restart"
    guest.recover("guest stopped mid-deploy", "llamacpp_ctx_size=4096")
    assert "--ctx-size 4096" in guest.sh(f"systemctl cat {UNIT}").replace("=", " ")


def daemon_pid() -> int:
    """The LXD daemon itself: argv ``lxd [--options]``; not ``lxd forkexec ...`` helpers, nor the ``[lxc monitor]``
    processes of containers (their comm is ``lxd`` too: `pgrep -x lxd` lists them, and killing one harms a
    container of someone else's)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and Path(argv[0].decode(errors="replace")).name == "lxd" and \
                (len(argv) < 2 or not argv[1] or argv[1].startswith(b"-")):
            return int(proc.name)
    return 0


def restart_daemon_if_down() -> None:
    """Start the daemon as labwright.lab.daemon does without systemd. Not through ensure_daemon() alone: its
    `pgrep -x lxd` also matches the containers' `[lxc monitor]` processes, so it would not start a killed daemon."""
    if not Path("/run/systemd/system").is_dir() and daemon_pid() == 0:
        daemon.LOG_DIR.mkdir(parents=True, exist_ok=True)
        daemon._detach(["lxd", "--group", "root", f"--logfile={daemon.LOG_DIR / 'lxd.log'}"],
                       daemon.LOG_DIR / "lxd.out")
        subprocess.run(["lxd", "waitready", "--timeout=120"], check=True)
    ensure_daemon(Reporter(quiet=True))


@pytest.mark.lab_exclusive  # restarts the daemon every other lab test talks to (tests/support/parallel.py)
def test_lxd_daemon_restarted_mid_deploy_then_rerun_serves(guest: Guest) -> None:
    if guest.health() != 200:
        guest.recover("(setup)")
    if Path("/run/systemd/system").is_dir() and subprocess.run(
            ["systemctl", "is-active", "-q", "lxd"], capture_output=True).returncode == 0:
        restart = ["systemctl", "restart", "lxd"]
    else:
        restart = []
    proc = guest.start_deploy("llamacpp_ctx_size=2048")
    try:
        wait_for("the deploy to take the guest's run lock", lambda: guest.lock() or proc.poll() is not None,
                 timeout=120, every=0.02)
        # restart the daemon for real (SIGTERM leaves the containers running, as `systemctl restart lxd` does)
        pid = daemon_pid()
        if restart:
            subprocess.run(restart, check=True)
        else:
            assert pid, "no lxd daemon process to restart"
            subprocess.run(["kill", "-TERM", str(pid)], check=True)
            wait_for(f"lxd pid {pid} to exit", lambda: not Path(f"/proc/{pid}").exists(), timeout=120)
    finally:
        restart_daemon_if_down()                    # always leave the daemon running for everyone else
    wait_for("the LXD daemon to answer again", lambda: guest.lab.client.instance_or_none(guest.name), timeout=120)
    output, _ = proc.communicate(timeout=600)
    assert "Traceback" not in output, output[-4000:]
    if proc.returncode != 0:   # the run lost a command to the restart: one line says so and what to do
        line = one_line(output, "re-run the deploy")
        assert "LXD daemon stopped answering" in line or "connection to the container was lost" in line, line
    print(f"\nthe deploy during the daemon restart: exit {proc.returncode}"
          + ("" if proc.returncode == 0 else f": {one_line(output, 're-run the deploy').strip()}"))
    assert guest.running(), "the daemon restart stopped the container"
    assert daemon_pid() not in (0, pid), "the daemon was not restarted"
    guest.recover("LXD daemon restarted mid-deploy", "llamacpp_ctx_size=2048")
