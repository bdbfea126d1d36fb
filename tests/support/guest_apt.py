"""apt in a lab guest from test code, through the same lock wait as labwright's own (labwright.aptlock).

CI (stop 43) failed on a test's own ``apt-get remove`` in a fresh guest: ``E: Could not get lock
/var/lib/dpkg/lock-frontend. It is held by process 890 (unattended-upgr)``. A fresh Debian guest runs
unattended-upgrades and apt-daily's ``apt-get update`` at its first boot (apt-daily*.timer, ``Persistent=true``), so
every apt call a test makes, and every change it makes to apt's files, can meet another apt. labwright's deploys
already wait (aptlock); the tests' own calls now do too, and tests/unit/deploys/test_apt_lock_wait.py refuses an
``apt-get`` command in tests/ that does not go through here.
"""

from __future__ import annotations

from shlex import quote

from labwright import aptlock
from labwright.lxd.client import LxdClient

# apt's three locks, taken as apt takes them: fcntl F_SETLKW on the file (apt-pkg/contrib/fileutl.cc GetLock uses
# F_SETLK; the waiting form blocks until the holder's process lets go)
APT_LOCKS = ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/lib/apt/lists/lock",
             "/var/cache/apt/archives/lock")
IDLE_WAIT_S = 900


def command(args: str) -> str:
    """``apt-get ARGS`` (shell words) with the lock wait, as a subshell: it may stand anywhere in a script, and its
    output can be redirected as a whole (``command("update -q") + " >/dev/null"``)."""
    return f"( {aptlock.command(args)} )"


def mirror_reachable(client: LxdClient, guest: str) -> bool:
    """Whether ``apt-get update`` in ``guest`` succeeds: the package mirror answers (each connection bounded; a lock
    held by the guest's own unattended-upgrades is waited out, not read as an unreachable mirror)."""
    update = command("update -qq -o Acquire::http::Timeout=20 -o Acquire::Retries=0")
    return client.exec(guest, ["sh", "-c", update + " >/dev/null"]).exit_code == 0


def while_apt_idle(script: str, locks: tuple[str, ...] = APT_LOCKS) -> str:
    """``script`` (sh) run while this process holds apt's locks, after any other apt in the guest let them go: for
    a test that changes apt's own files (its lists, its archives), never for one that runs apt (apt would find the
    locks held by this wrapper)."""
    taker = ("import fcntl, os, subprocess, sys\n"
             "held = []\n"
             f"for path in {tuple(locks)!r}:\n"
             "    os.makedirs(os.path.dirname(path), exist_ok=True)\n"
             "    handle = open(path, 'a')\n"
             "    fcntl.lockf(handle, fcntl.LOCK_EX)\n"
             "    held.append(handle)\n"
             "sys.exit(subprocess.run(['sh', '-c', sys.argv[1]]).returncode)\n")
    return f"timeout {IDLE_WAIT_S} python3 -c {quote(taker)} {quote(script)}"


def dpkg(args: str) -> str:
    """``dpkg ARGS`` as apt runs it: this process holds dpkg's frontend lock (after any apt let it go) and tells dpkg
    so (``DPKG_FRONTEND_LOCKED=true``, as apt sets it for the dpkg it runs: dpkg then leaves the frontend lock to
    its caller and takes its own lock as usual; checked in a Debian 12 guest: without it, "dpkg frontend lock was
    locked by another process")."""
    return while_apt_idle(f"DPKG_FRONTEND_LOCKED=true dpkg {args}", locks=APT_LOCKS[:1])
